"""Real processes for streams: 2 ranks x 2 DataLoader workers under paddle.distributed.launch
(gloo, CPU), and a SIGKILL mid-epoch then a resume, under workers."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import numpy as np
import pytest
from processes import alive, run
from test_distributed import SCRIPTS, launch, script_env

pytestmark = pytest.mark.slow


def shards(tmp_path: Path, n: int) -> None:
    sys.path.insert(0, str(SCRIPTS))
    from stream_common import write_shards

    write_shards(tmp_path, n)


@pytest.mark.parametrize("mode", ["iterable", "shards"])
def test_two_ranks_two_workers_each_sample_once_in_equal_steps(tmp_path: Path, mode: str) -> None:
    n = 301
    if mode == "shards":
        shards(tmp_path, n)
    launch("stream_ddp.py", tmp_path, str(tmp_path), str(n), mode)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for epoch in range(2):
        union = sorted(ranks[0]["epochs"][epoch] + ranks[1]["epochs"][epoch])
        assert union == list(range(n)), f"epoch {epoch}: every sample exactly once over the ranks"
        assert ranks[0]["batches"][epoch] == ranks[1]["batches"][epoch] > 0, "equal steps"
        for r in ranks:
            assert r["updates"][epoch] == r["predicted"][epoch] > 1, "the first pass counted"
    assert ranks[0]["epochs"][0] != ranks[0]["epochs"][1], "epochs differ"
    for name, values in ranks[0]["params"].items():
        assert np.allclose(values, ranks[1]["params"][name], atol=1e-6), f"{name} equal"


def resume(out: Path, *args: str) -> int:
    """stream_resume.py, every process it left ended afterwards (NOTE [ reaping a launch ])."""
    cmd = [sys.executable, str(SCRIPTS / "stream_resume.py"), str(out), *args]
    done = run(cmd, out / "run.log", env=script_env(), timeout=300)
    assert not alive(done), "no process of the run outlives it"
    return done.returncode


@pytest.mark.parametrize("mode", ["iterable", "shards"])
def test_sigkill_mid_epoch_then_resume_trains_the_uninterrupted_runs_batches(
    tmp_path: Path, mode: str
) -> None:
    killed, whole = tmp_path / "killed", tmp_path / "whole"
    for out in (killed, whole):
        out.mkdir()
        if mode == "shards":
            shards(out, 257)
    assert resume(whole, "2", mode) == 0, (whole / "run.log").read_text()[-3000:]
    code = resume(killed, "2", mode, "--kill-at", "8")
    assert code == -signal.SIGKILL, (killed / "run.log").read_text()[-3000:]
    assert (killed / "ckpt.pkl").exists() and not (killed / "trained.json").exists()
    assert resume(killed, "2", mode) == 0, (killed / "run.log").read_text()[-3000:]
    trained = json.loads((killed / "trained.json").read_text())
    assert sorted(trained) == list(range(257)), "none lost, none repeated over the epoch"
    assert trained == json.loads((whole / "trained.json").read_text()), (
        "the same batches in the same order as the uninterrupted run"
    )
    resumed = json.loads((killed / "params.json").read_text())
    for name, values in json.loads((whole / "params.json").read_text()).items():
        assert np.allclose(values, resumed[name], atol=1e-6), f"{name}: the same updates"
