"""Real processes: a 2-rank paddle.distributed.launch run on CPU (gloo), and SIGKILL + resume."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from processes import alive, run

from dynbatch.plan.splits import shuffled

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
    out = tmp_path / "launch.log"
    done = run(cmd, out, cwd=tmp_path, env=script_env(), timeout=600)
    if done.returncode != 0:
        logs = "\n".join(
            p.read_text()[-3000:] for p in sorted((tmp_path / "log").glob("workerlog.*"))
        )
        pytest.fail(f"launch exited {done.returncode}\n{out.read_text()[-2000:]}\n{logs}")


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
    """Run resume_train.py; afterwards end every process it left (NOTE [ reaping a launch ]).

    A SIGKILLed paddle process leaves its DataLoader workers orphaned; a job scheduler
    would end them with the job, and so does this helper.
    """
    cmd = [sys.executable, str(SCRIPTS / "resume_train.py"), str(tmp_path), *args]
    done = run(cmd, tmp_path / "run.log", env=script_env(), timeout=300)
    assert not alive(done), "no process of the run outlives it"
    return done.returncode


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


@pytest.mark.parametrize(
    ("time_model", "max_cost"),
    [("step", 256), ("none", 128)],  # rows of 128: two a micro-batch, or one (updates of more
    ids=["at-the-step-time", "always-packed"],  # steps, each update's rows spread over them)
)
def test_two_ranks_train_the_fixed_batchs_updates_packed(
    tmp_path: Path, time_model: str, max_cost: int
) -> None:
    """pack_len on 2 gloo ranks, with a time_model or without: equal steps (no hang), every
    sample once, each update the fixed batch's, a repeat only where an update has fewer
    samples than micro-batches; at the step time micro-batches run packed and padded, built
    in DataLoader workers as the plan priced them."""
    n = 209  # 13 updates of 16 samples (8 a rank) and a last of 1: fewer than the ranks
    launch("ddp_pack_time.py", tmp_path, str(tmp_path), str(n), time_model, str(max_cost))
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0]["batches"] == ranks[1]["batches"] > 0, "equal micro-batches iterated"
    assert sorted(ranks[0]["seen"] + ranks[1]["seen"]) == list(range(n)), "every sample once"
    layouts = [lay for r in ranks for lay in r["layouts"]]  # each [packed, rows, width]
    built = [shape for r in ranks for shape in r["shapes"]]
    assert [[rows, width] for _, rows, width in layouts] == built, (
        "the workers built each micro-batch as its plan priced it"
    )
    samples = [sum(len(row) for row in mb) for r in ranks for mb in r["micro_batches"]]
    assert any(packed for packed, _, _ in layouts), "packed rows ran"
    padded = any(not packed and k > 1 for (packed, _, _), k in zip(layouts, samples, strict=True))
    assert padded == (time_model == "step"), "padded ran at the step time, and only there"
    for name, values in ranks[0]["params"].items():
        assert np.allclose(values, ranks[1]["params"][name], atol=1e-6), f"{name}: in sync"
    check_packed_updates(ranks, n)


def check_packed_updates(ranks: list[dict[str, Any]], n: int) -> None:
    """What both ranks were given is the fixed batch's updates (NOTE [ packed updates ] and
    NOTE [ dealing an update's rows ] in dynbatch.plan.packs)."""
    steps = len(ranks[0]["micro_batches"])
    assert all(len(r["micro_batches"]) == len(r["padding"]) == steps > 0 for r in ranks), (
        "equal steps on both ranks, each flagged a repeat or not"
    )
    assert ranks[0]["window_ends"] == ranks[1]["window_ends"], "the same updates on both ranks"
    ends = [0, *ranks[0]["window_ends"]]
    assert ends[-1] == steps, "the updates cover the epoch's steps"
    size = round(ranks[0]["update_size"])
    assert size == 16 and len(ends) - 1 == -(-n // size), "the fixed batch's ceil(N / B) updates"
    order = shuffled(np.arange(n), ranks[0]["seed"], 0)
    trained: list[int] = []
    for u in range(len(ends) - 1):
        given = [  # each micro-batch's samples, and whether it is a repeat
            ([i for row in r["micro_batches"][k] for i in row], r["padding"][k])
            for r in ranks
            for k in range(ends[u], ends[u + 1])
        ]
        assert all(len(mb) > 0 for mb, _ in given), f"update {u}: every micro-batch has samples"
        real = [i for mb, repeat in given if not repeat for i in mb]
        fixed = order[u * size : (u + 1) * size]
        assert sorted(real) == sorted(fixed.tolist()), f"update {u}: the fixed batch's samples"
        repeats = sum(repeat for _, repeat in given)
        assert repeats == 0 or fixed.size < len(given), (
            f"update {u}: a repeat only where the update has fewer samples ({fixed.size}) than "
            f"micro-batches ({len(given)})"
        )
        if repeats:  # a repeat holds a sample of its update, at weight 0
            assert all(set(mb) <= set(real) for mb, repeat in given if repeat)
        trained += real
    assert sorted(trained) == list(range(n)), "each sample once over the epoch"
    # what the case is for: updates of several steps, and a repeat where the last has 1 sample
    assert max(np.diff(ends)) > 1, "an update spans several steps"
    assert sum(sum(r["padding"]) for r in ranks) >= 1, "the last update's repeat"
