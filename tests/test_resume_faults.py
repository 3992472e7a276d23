"""Faults survived, nothing lost: SIGKILL twice in one run, and resume on another number of
ranks, with real ``paddle.distributed.launch`` runs on CPU (gloo)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from processes import Finished, alive, run

SCRIPTS = Path(__file__).parent / "scripts"
pytestmark = pytest.mark.slow
SAMPLES = 157  # tests/scripts/resume_ranks.py trains Toy(157)


def script_env() -> dict[str, str]:
    import os

    path = os.pathsep.join(p for p in (str(SCRIPTS), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


def launch(out: Path, ranks: int, *args: str) -> tuple[Finished, str]:
    """Run resume_ranks.py on ``ranks`` ranks, then end every process it left
    (NOTE [ reaping a launch ]): the run and the end of its logs."""
    logs = out / f"log{len(list(out.glob('log*')))}"
    cmd = [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", str(ranks)]
    cmd += ["--log_dir", str(logs), str(SCRIPTS / "resume_ranks.py"), str(out), *args]
    launcher = out / f"launcher-{logs.name}.txt"
    done = run(cmd, launcher, cwd=out, env=script_env(), timeout=600)
    tail = "\n".join(p.read_text()[-2000:] for p in sorted(logs.glob("workerlog.*")))
    return done, f"{launcher.read_text()[-1500:]}\n{tail}"


def trained(out: Path, ranks: int) -> list[list[list[int]]]:
    """Each rank's batches of the epoch, in the order trained."""
    return [json.loads((out / f"trained{r}.json").read_text()) for r in range(ranks)]


def test_sigkill_twice_on_two_ranks_and_workers_resumes_to_the_uninterrupted_run(
    tmp_path: Path,
) -> None:
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    whole.mkdir()
    killed.mkdir()
    done, log = launch(whole, 2, "2")
    assert done.returncode == 0, log
    steps = len(trained(whole, 2)[0])
    first, second = sorted(np.random.default_rng(28).choice(np.arange(4, steps), 2, False))
    assert steps > 8, f"an epoch of several checkpoints, got {steps} batches"
    for kill in (first, second):
        done, log = launch(killed, 2, "2", "--kill-at", str(kill))
        assert done.returncode != 0 and not (killed / "params.json").exists(), (
            f"killed at {kill}\n{log}"
        )
        assert not alive(done), "no rank, DataLoader worker or orphan of the killed run is left"
    done, log = launch(killed, 2, "2")
    assert done.returncode == 0, log
    assert trained(killed, 2) == trained(whole, 2), "each rank trained the same batches in order"
    got = json.loads((killed / "params.json").read_text())
    for name, values in json.loads((whole / "params.json").read_text()).items():
        assert np.allclose(values, got[name], rtol=0, atol=1e-6), f"{name}: the same updates"


@pytest.mark.parametrize(("saved", "resumed"), [(2, 1), (1, 2)])
def test_a_run_stopped_on_n_ranks_resumes_on_m_with_every_sample_once(
    tmp_path: Path, saved: int, resumed: int
) -> None:
    # at an update's end (windows end at 4, 8, 12 on 1 rank; 3, 7, 11, 15 on 2) and a checkpoint
    # (every 3 batches): a state saved inside an update stays on its ranks
    stop = {1: "12", 2: "15"}[saved]
    done, log = launch(tmp_path, saved, "0", "--stop-at", stop)
    assert done.returncode == 0, log
    before = [i for rank in trained(tmp_path, saved) for batch in rank for i in batch]
    assert len(before) > 0
    done, log = launch(tmp_path, resumed, "0")
    assert done.returncode == 0, log
    rest = trained(tmp_path, resumed)
    assert len({len(rank) for rank in rest}) == 1, "equal steps on the new ranks"
    after = [i for rank in rest for batch in rank for i in batch]
    assert sorted(before + after) == list(range(SAMPLES)), "every sample once over both runs"
