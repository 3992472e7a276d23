"""Real processes: a 2-rank paddle.distributed.launch run on CPU (gloo), and SIGKILL + resume."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPTS = Path(__file__).parent / "scripts"
pytestmark = pytest.mark.slow


def script_env() -> dict[str, str]:
    """The test's environment with tests/scripts importable (for toy.py)."""
    path = os.pathsep.join(p for p in (str(SCRIPTS), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


def launch(script: str, tmp_path: Path, *args: str, nproc: int = 2) -> None:
    cmd = [
        sys.executable,
        "-m",
        "paddle.distributed.launch",
        "--nproc_per_node",
        str(nproc),
        "--log_dir",
        str(tmp_path / "log"),
        str(SCRIPTS / script),
        *args,
    ]
    done = subprocess.run(
        cmd, cwd=tmp_path, env=script_env(), capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        logs = "\n".join(
            p.read_text()[-3000:] for p in sorted((tmp_path / "log").glob("workerlog.*"))
        )
        pytest.fail(f"launch exited {done.returncode}\n{done.stdout[-2000:]}\n{logs}")


def test_two_ranks_train_two_epochs_on_an_uneven_dataset(tmp_path: Path) -> None:
    n = 301  # odd: neither the samples nor (usually) the batches divide by 2
    launch("ddp_train.py", tmp_path, str(tmp_path), str(n))
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for epoch in range(2):
        union = sorted(ranks[0]["epochs"][epoch] + ranks[1]["epochs"][epoch])
        assert union == list(range(n)), f"epoch {epoch}: every index exactly once over the ranks"
        assert ranks[0]["batches"][epoch] == ranks[1]["batches"][epoch] > 0, (
            "equal numbers of batches iterated"
        )
    assert ranks[0]["epochs"][0] != ranks[0]["epochs"][1], "epochs differ"
    for name, values in ranks[0]["params"].items():
        assert np.allclose(values, ranks[1]["params"][name], atol=1e-6), (
            f"{name} equal on both ranks"
        )


def run_script(tmp_path: Path, *args: str) -> int:
    """Run resume_train.py in its own process group; afterwards end the whole group.

    A SIGKILLed paddle process leaves its DataLoader workers orphaned; a job scheduler
    would end them with the job, and so does this helper.
    """
    log = open(tmp_path / "run.log", "a")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPTS / "resume_train.py"), str(tmp_path), *args],
        env=script_env(),
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    try:
        return proc.wait(timeout=300)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


@pytest.mark.parametrize("workers", [0, 2])
def test_sigkill_mid_epoch_then_resume_sees_every_index_once(tmp_path: Path, workers: int) -> None:
    killed = run_script(tmp_path, str(workers), "--kill-at", "8")
    log = (tmp_path / "run.log").read_text()[-3000:]
    assert killed == -signal.SIGKILL, f"the first run was SIGKILLed\n{log}"
    assert (tmp_path / "ckpt.pkl").exists() and not (tmp_path / "trained.json").exists()
    assert run_script(tmp_path, str(workers)) == 0, (tmp_path / "run.log").read_text()[-3000:]
    trained = json.loads((tmp_path / "trained.json").read_text())
    assert sorted(trained) == list(range(257)), "none lost, none repeated over the epoch"


@pytest.mark.parametrize(("n", "max_batch"), [(157, 10_000), (3, 1)], ids=["union", "repeat"])
def test_two_rank_accumulated_gradient_equals_the_global_mean(
    tmp_path: Path, n: int, max_batch: int
) -> None:
    launch("ddp_grad.py", tmp_path, str(tmp_path), str(n), str(max_batch))
    ranks = [json.loads((tmp_path / f"grad{r}.json").read_text()) for r in range(2)]
    for r in ranks:
        assert r["steps"] == 1 and r["real_samples"] == n
        assert r["max_abs_diff"] < 1e-5, "the update is the mean over every real sample"
    if n == 3:  # 3 single-sample batches on 2 ranks: one batch repeats a sample, flagged
        assert sorted(r["repeats"] for r in ranks) == [0, 1]
        assert all(r["micro_batches"] == 2 for r in ranks)
    else:
        assert all(r["micro_batches"] > 1 for r in ranks)
    for name, values in ranks[0]["params"].items():
        assert np.allclose(values, ranks[1]["params"][name], atol=1e-7), name


def test_two_ranks_train_packed_at_the_step_time(tmp_path: Path) -> None:
    """pack_len with a time_model on 2 gloo ranks: equal steps (no hang), every sample once,
    micro-batches run packed and padded, built in DataLoader workers as the plan priced them."""
    n = 203
    launch("ddp_pack_time.py", tmp_path, str(tmp_path), str(n))
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0]["batches"] == ranks[1]["batches"] > 0, "equal micro-batches iterated"
    assert sorted(ranks[0]["seen"] + ranks[1]["seen"]) == list(range(n)), "every sample once"
    for r in ranks:
        assert r["shapes"] == r["priced"], "every micro-batch built as the plan priced it"
    packed = ranks[0]["packed"] + ranks[1]["packed"]
    assert any(packed) and not all(packed), "packed rows and padded micro-batches both ran"
    for name, values in ranks[0]["params"].items():
        assert np.allclose(values, ranks[1]["params"][name], atol=1e-6), f"{name}: in sync"
