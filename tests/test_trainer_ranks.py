"""DynamicBatchTrainer resumes a checkpoint on another number of cards
(NOTE [ resume from the plan ]), with real ``paddle.distributed.launch`` runs on CPU (gloo)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from processes import run

SCRIPTS = Path(__file__).parent / "scripts"
pytestmark = pytest.mark.slow
STOP = 3  # tests/scripts/trainer_ranks.py STOP


def launch(out: Path, ranks: int, *args: str) -> None:
    """Run trainer_ranks.py on ``ranks`` ranks; fail with the end of its logs if it fails."""
    import os

    path = os.pathsep.join(p for p in (str(SCRIPTS), os.environ.get("PYTHONPATH", "")) if p)
    logs = out / f"log{len(list(out.glob('log*')))}"
    cmd = [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", str(ranks)]
    cmd += ["--log_dir", str(logs), str(SCRIPTS / "trainer_ranks.py"), str(out), *args]
    launcher = out / f"launcher-{logs.name}.txt"  # every process it left is ended after it
    done = run(cmd, launcher, cwd=out, env={**os.environ, "PYTHONPATH": path}, timeout=600)
    tail = "\n".join(p.read_text()[-3000:] for p in sorted(logs.glob("workerlog.*")))
    assert done.returncode == 0, f"{launcher.read_text()[-1500:]}\n{tail}"


def per_step(out: Path, name: str, ranks: int) -> tuple[dict[int, list[int]], dict[str, Any]]:
    """Each global step's samples over every rank, and rank 0's record."""
    records = [json.loads((out / f"{name}-rank{r}.json").read_text()) for r in range(ranks)]
    steps: dict[int, list[int]] = {}
    for rec in records:
        assert rec["steps"] == records[0]["steps"], "every rank takes the same steps"
        assert rec["epochs"] == records[0]["epochs"]
        for step, samples in zip(rec["steps"], rec["samples"], strict=True):
            steps.setdefault(step, []).extend(samples)
    return {k: sorted(v) for k, v in steps.items()}, records[0]


def epoch_of(record: dict[str, Any]) -> dict[int, int]:
    return dict(zip(record["steps"], record["epochs"], strict=True))


def progress_of(record: dict[str, Any]) -> dict[int, float]:
    """The ``state.epoch`` each global step logged."""
    return {int(step): value for step, value in record["progress"]}


@pytest.mark.parametrize(("saved", "resumed"), [(2, 1), (1, 2)])
def test_a_checkpoint_saved_on_n_ranks_resumes_on_m_in_the_same_updates(
    tmp_path: Path, saved: int, resumed: int
) -> None:
    launch(tmp_path, saved, "run", "full")
    whole, full = per_step(tmp_path, "run-full", saved)
    launch(tmp_path, saved, "run", "stop")
    cut, _ = per_step(tmp_path, "run-stop", saved)
    assert sorted(cut) == list(range(1, STOP + 1))
    assert cut == {k: v for k, v in whole.items() if k <= STOP}, "precondition: the same run"
    launch(tmp_path, resumed, "run", "resume")
    rest, record = per_step(tmp_path, "run-resume", resumed)
    assert record["global_step"] == full["global_step"], "the run's optimizer steps unchanged"
    assert record["planned"] == full["planned"]
    epochs, saved_epochs = epoch_of(record), epoch_of(full)
    assert min(epochs) == STOP + 1 and epochs[STOP + 1] == saved_epochs[STOP] == 0
    # the rest of the saved epoch: every remaining sample once, in the same updates
    assert {k: v for k, v in rest.items() if epochs[k] == 0} == {
        k: v for k, v in whole.items() if k > STOP and saved_epochs[k] == 0
    }
    # a later epoch is planned on the new ranks, as a fresh run there plans it: every sample once
    later = sorted(i for k, v in rest.items() if epochs[k] == 1 for i in v)
    assert later == list(range(60))
    assert [k for k in rest if epochs[k] == 1] == [k for k in whole if saved_epochs[k] == 1]
    resumed_progress, saved_progress = progress_of(record), progress_of(full)
    assert resumed_progress == {k: saved_progress[k] for k in resumed_progress}, (
        "state.epoch at each global step is the saved run's, on any ranks"
    )
    # a checkpoint of the dealt rest resumes again on these ranks, to the same steps
    launch(tmp_path, resumed, "run", "restop")
    launch(tmp_path, resumed, "run", "again")
    again, record = per_step(tmp_path, "run-again", resumed)
    assert record["global_step"] == full["global_step"]
    again_progress = progress_of(record)
    assert again_progress == {k: saved_progress[k] for k in again_progress}, "resumed twice"
    assert again == {k: v for k, v in rest.items() if k > 2 * STOP}


def test_a_changed_global_update_names_the_training_arguments_that_keep_it(
    tmp_path: Path,
) -> None:
    launch(tmp_path, 2, "run", "stop")
    launch(tmp_path, 1, "run", "resume", "4")  # 2 ranks x 4 saved, 1 x 4 here
    error = (tmp_path / "run-resume-error.txt").read_text()
    assert "per_device_train_batch_size=8" in error, error
    assert "gradient_accumulation_steps=1" in error, error
    assert not list(tmp_path.glob("run-resume-rank*.json"))
