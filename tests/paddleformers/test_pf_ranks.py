"""DynamicBatchTrainer on PaddleFormers' Trainer across processes (CPU, gloo): two ranks train
the exact mean over both and evaluate on dynamic batches; killed with SIGKILL, they resume
from ``resume_from_checkpoint=True`` to the unbroken run's batches and weights; the same
checkpoint resumes on one rank in the same updates (tests/paddleformers/pf_ranks.py)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("paddleformers.trainer", reason="paddleformers is not installed")
from pf_ranks import KILL, SAVE
from processes import Finished, alive, run

HERE = Path(__file__).parent
pytestmark = pytest.mark.slow


def start(out: Path, ranks: int, mode: str) -> Finished:
    """pf_ranks.py on ``ranks`` ranks (a launch) or one process; every process it left is ended
    after it (NOTE [ reaping a launch ])."""
    path = os.pathsep.join(
        [str(HERE), str(HERE.parent / "scripts"), os.environ.get("PYTHONPATH", "")]
    )
    script = [str(HERE / "pf_ranks.py"), str(out), mode]
    launch = ["-m", "paddle.distributed.launch", "--nproc_per_node", str(ranks)]
    logs = ["--log_dir", str(out / f"log-{mode}")]
    cmd = [sys.executable, *(launch + logs if ranks > 1 else []), *script]
    return run(
        cmd, out / f"{mode}.txt", cwd=out, env={**os.environ, "PYTHONPATH": path}, timeout=600
    )


def why(out: Path, mode: str) -> str:
    """The end of ``mode``'s output and of its ranks' logs, for a failure's message."""
    parts = [(out / f"{mode}.txt").read_text()[-2000:]]
    parts += [p.read_text()[-3000:] for p in sorted(out.glob(f"log-{mode}/workerlog.*"))]
    return "\n".join(parts)


def records(out: Path, name: str, ranks: int) -> list[dict[str, Any]]:
    return [json.loads((out / f"{name}-rank{r}.json").read_text()) for r in range(ranks)]


def by_step(record: list[dict[str, Any]]) -> dict[int, tuple[int, list[int]]]:
    """Each global step's real epoch and samples over the ranks."""
    steps: dict[int, tuple[int, list[int]]] = {}
    for rank in record:
        for step, epoch, samples in rank["steps"]:
            steps[step] = (epoch, sorted([*steps.get(step, (epoch, []))[1], *samples]))
    return steps


def test_killed_on_two_ranks_it_resumes_exactly_and_on_one_rank_in_the_same_updates(
    tmp_path: Path,
) -> None:
    done = start(tmp_path, 2, "first")
    assert done.returncode != 0, "the killed run died"
    assert not alive(done), "no rank or orphan of the killed run is left"
    whole = records(tmp_path, "whole", 2)
    assert not list(tmp_path.glob("killed-rank*.json")), why(tmp_path, "first")
    assert sorted(p.name for p in (tmp_path / "killed").glob("checkpoint-*")) == [
        f"checkpoint-{SAVE}"
    ], f"killed at step {KILL}: its newest checkpoint is step {SAVE}'s"
    for rank in whole:
        assert rank["global_step"] == rank["planned"] == whole[0]["global_step"], "exact steps"
        assert rank["grad_diff"] < 1e-5, "the step's gradient is the mean over both ranks' samples"
        assert rank["eval"] == whole[0]["eval"], "every rank reports the same metrics"
        assert rank["eval"][0] == rank["reference"][0], "dynamic eval batches: the set's accuracy"
        assert rank["eval"][1] == pytest.approx(rank["reference"][1], abs=1e-5)
    steps = by_step(whole)
    for epoch in (0, 1):
        seen = sorted(i for e, samples in steps.values() if e == epoch for i in samples)
        assert seen == list(range(60)), f"epoch {epoch}: every sample once over the ranks"

    done = start(tmp_path, 2, "resume")
    assert done.returncode == 0, why(tmp_path, "resume")
    resumed = records(tmp_path, "killed", 2)
    assert [r["global_step"] for r in resumed] == [whole[0]["global_step"]] * 2
    for mine, unbroken in zip(resumed, whole, strict=True):
        assert mine["steps"] == [s for s in unbroken["steps"] if s[0] > SAVE], (
            "each rank trains the unbroken run's batches after the checkpoint, in order"
        )
    weights, unbroken_weights = np.load(tmp_path / "killed.npz"), np.load(tmp_path / "whole.npz")
    for name in unbroken_weights.files:
        diff = float(np.abs(weights[name] - unbroken_weights[name]).max())
        assert diff <= 1e-6, f"{name}: the unbroken run's weights"

    done = start(tmp_path, 1, "rest")
    assert done.returncode == 0, why(tmp_path, "rest")
    (rest,) = records(tmp_path, "rest", 1)
    assert rest["global_step"] == whole[0]["global_step"], "the run's optimizer steps unchanged"
    after = by_step([rest])
    assert min(after) == SAVE + 1
    assert {k: v for k, v in after.items() if v[0] == 0} == {
        k: v for k, v in steps.items() if k > SAVE and v[0] == 0
    }, "the rest of epoch 0 on one rank: the same updates"
    later = sorted(i for e, samples in after.values() if e == 1 for i in samples)
    assert later == list(range(60)), "epoch 1 planned on one rank: every sample once"
