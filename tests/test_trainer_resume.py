"""DynamicBatchTrainer resumes exactly: the same samples to the same weights, and a checkpoint's
state refused by name where it cannot resume.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("paddlenlp")
import paddle

import dynbatch
from dynbatch.integrations.core import probe
from dynbatch.integrations.paddlenlp import (
    STATE_FILE,
)

sys.path.insert(0, str(Path(__file__).parent / "scripts"))
from test_trainer import batches_of, make_trainer, recipe_trainer, run_script
from trainer_toy import (
    Reviews,
    make_args,
    make_recorder,
)

SCRIPTS = Path(__file__).parent / "scripts"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "cut_at"),
    [("cls", 4), ("lm", 3), ("packcls", 4), ("packlm", 3)],
    ids=["samples", "lm-loss-token-windows", "packed-classifier", "packed-lm"],
)
def test_resume_mid_epoch_trains_the_same_samples_to_the_same_weights(
    tmp_path: Path, kind: str, cut_at: int
) -> None:
    out = str(tmp_path)
    assert run_script("trainer_resume.py", kind, out, "full") == 0
    cut = run_script("trainer_resume.py", kind, out, "cut", str(cut_at))
    assert cut == 3, f"killed after checkpoint-{cut_at}"
    cut = json.loads((tmp_path / "cut.json").read_text())
    assert cut["last_epoch"] == 0 and not cut["ends_epoch"], "precondition: mid-epoch checkpoint"
    assert (tmp_path / "cut" / f"checkpoint-{cut_at}" / STATE_FILE).is_file()
    assert run_script("trainer_resume.py", kind, out, "resume") == 0  # resume_from_checkpoint=True

    full = json.loads((tmp_path / "full.json").read_text())
    resumed = json.loads((tmp_path / "resume.json").read_text())
    assert cut["batches"] + resumed["batches"] == full["batches"], (
        "the resumed run trains exactly the batches the uninterrupted run trained after the cut"
    )
    for run in (full, resumed):
        assert run["global_step"] == run["max_steps"] == run["planned"], (
            "the Trainer's steps are the plan's windows, exactly"
        )
    assert resumed["epoch"] == 2.0
    assert resumed["training_loss"] == pytest.approx(full["training_loss"], abs=1e-6), (
        "train_loss covers the steps before the checkpoint too"
    )
    weights, after = np.load(tmp_path / "full.npz"), np.load(tmp_path / "resume.npz")
    for name in weights.files:
        diff = float(np.abs(weights[name] - after[name]).max())
        assert diff <= 1e-6, f"{name}: final weights within 1e-6 of the uninterrupted run"


@pytest.mark.slow
def test_killed_twice_at_random_steps_the_defaults_resume_to_the_same_samples_and_weights(
    tmp_path: Path,
) -> None:
    """kill -9 at two random steps of one run, each resumed with the Trainer's defaults (the
    step time probed by the first process, read back by the others; 2 loader workers, 1
    rank): the samples trained and the final weights are the uninterrupted run's. A probing
    run's checkpoint once failed to resume ("Optimizer set error ... should in state dict")."""
    out, save = str(tmp_path), 3  # trainer_resume.SAVE_STEPS["recipe"]
    seed = int(np.random.default_rng().integers(2**31))
    rng = np.random.default_rng(seed)
    first = int(rng.integers(save + 1, 3 * save + 1))
    killed = -9  # SIGKILL
    assert run_script("trainer_resume.py", "recipe", out, "kill", str(first), ok=(killed,)) < 0
    runs = [json.loads((tmp_path / f"kill-{first}.json").read_text())]
    second = int(rng.integers(first + 1, runs[0]["planned"]))
    assert run_script("trainer_resume.py", "recipe", out, "kill", str(second), ok=(killed,)) < 0
    runs.append(json.loads((tmp_path / f"kill-{second}.json").read_text()))
    kept = tmp_path / "cut" / probe.TIME_MODEL_FILE
    assert kept.is_file(), "precondition: the first run probed the step time and kept it"
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / kept.name).write_bytes(kept.read_bytes())  # the same plan
    assert run_script("trainer_resume.py", "recipe", out, "full") == 0
    assert run_script("trainer_resume.py", "recipe", out, "resume") == 0
    full = json.loads((tmp_path / "full.json").read_text())
    resumed = json.loads((tmp_path / "resume.json").read_text())

    where = f"killed at steps {first} and {second} (seed {seed})"
    starts = [run["start"] for run in runs] + [save * ((second - 1) // save)]
    assert starts == [0, save * ((first - 1) // save), starts[-1]], (
        f"{where}: each run resumed from the newest checkpoint before the kill"
    )
    stops = zip(runs, starts[1:], strict=True)
    saved = [run["batches"][: stop - run["start"]] for run, stop in stops]  # by checkpoints
    trained = [i for batches in saved for window in batches for i in window]
    assert trained + resumed["batches"] == full["batches"], (
        f"{where}: the batches kept by the checkpoints, then the resumed run's, are the "
        "uninterrupted run's"
    )
    assert resumed["global_step"] == full["global_step"] == full["planned"]
    assert resumed["training_loss"] == pytest.approx(full["training_loss"], abs=1e-6), where
    weights, after = np.load(tmp_path / "full.npz"), np.load(tmp_path / "resume.npz")
    for name in weights.files:
        diff = float(np.abs(weights[name] - after[name]).max())
        assert diff <= 1e-6, f"{where}: {name} within 1e-6 of the uninterrupted run's"


def test_a_torn_checkpoint_state_is_named_never_half_read(tmp_path: Path) -> None:
    """NOTE [ atomic writes ]: a state file cut short (a copy or a disk that failed) is an
    InputError naming the file and what to do."""
    ds = Reviews(40)
    args = make_args(tmp_path, max_steps=1, save_strategy="steps", save_steps=1)
    make_trainer(tmp_path, ds, args=args).train()
    state = tmp_path / "checkpoint-1" / STATE_FILE
    whole = state.read_bytes()
    assert json.loads(whole)["global_step"] == 1, "precondition: a whole state"
    assert [p.name for p in state.parent.glob("*.partial")] == [], "no partial file left"
    for cut in (0, len(whole) // 2, len(whole) - 2):
        state.write_bytes(whole[:cut])
        with pytest.raises(dynbatch.InputError, match=f"{STATE_FILE} cannot be read.*another"):
            make_trainer(tmp_path, ds, args=args).train(resume_from_checkpoint=str(state.parent))


# -- what a checkpoint's state file may hold (tester report C) ---------------------------------
@pytest.fixture(scope="module")
def saved_state(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A run of 2 steps saved after each; the folder and checkpoint-1's state text."""
    out = tmp_path_factory.mktemp("saved")
    args = make_args(out, max_steps=2, save_strategy="steps", save_steps=1)
    make_trainer(out, Reviews(40), args=args).train()
    return out, (out / "checkpoint-1" / STATE_FILE).read_text()


def _changed(state: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    *folders, key = path
    for folder in folders:
        state = state[folder]
    if value is _DROP:
        del state[key]
    else:
        state[key] = value


_DROP = object()


@pytest.mark.parametrize(
    ("path", "value", "match"),
    [
        (("loss_total",), float("nan"), "loss_total=nan"),
        (("loss_total",), "abc", "loss_total='abc'"),
        (("loss_total",), [1], r"loss_total=\[1\]"),
        (("loss_total",), _DROP, "loss_total"),
        (("consumed_samples",), -7, "consumed_samples=-7"),
        (("consumed_samples",), 54.9, "consumed_samples=54.9"),
        (("consumed_samples",), "x", "consumed_samples='x'"),
        (("consumed_samples",), _DROP, "consumed_samples"),
        (("skipped_steps",), -1, "skipped_steps=-1"),
        (("global_step",), "x", "global_step='x'"),
        (("global_step",), float("nan"), "global_step=nan"),
        (("global_step",), True, "global_step=True"),
        (("global_step",), -3, "global_step=-3"),
        (("global_step",), _DROP, "global_step"),
        (("windows",), [1], r"windows=\[1\]"),
        (("windows",), "x", "windows='x'"),
        (("sampler",), "x", "sampler='x'"),
        (("sampler", "position"), 999, "position"),
        (("sampler", "position"), "x", "position"),
        (("sampler", "epoch"), -1, "epoch"),
        (("sampler", "epoch"), _DROP, "epoch"),
        (("sampler", "options"), "x", "options"),
        (("sampler", "num_replicas"), True, "num_replicas"),
    ],
)
def test_a_wrong_value_in_a_checkpoints_state_is_named_before_anything_loads(
    saved_state: tuple[Path, str], path: tuple[str, ...], value: Any, match: str
) -> None:
    """Tester report C 3, 4, 6: a NaN loss total was summed on, -7 samples counted, 54.9 cut to
    54, a missing key a bare KeyError after the sampler had loaded, and the sampler's own
    refusals did not name the file. Each is an InputError naming the state file."""
    out, good = saved_state
    state = json.loads(good)
    _changed(state, path, value)
    checkpoint = out / "checkpoint-1"
    (checkpoint / STATE_FILE).write_text(json.dumps(state))
    args = make_args(out, max_steps=2, save_strategy="steps", save_steps=1)
    trainer = make_trainer(out, Reviews(40), args=args)
    try:
        with pytest.raises(dynbatch.InputError) as info:
            trainer.train(resume_from_checkpoint=str(checkpoint))
    finally:
        (checkpoint / STATE_FILE).write_text(good)
    assert str(checkpoint / STATE_FILE) in str(info.value), "the file is named"
    assert re.search(match, str(info.value)), str(info.value)
    assert trainer.train_sampler is not None and trainer.train_sampler.epoch == 0, (
        "nothing was loaded"
    )


def test_a_resume_on_other_ranks_logs_the_true_epoch_and_steps(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """After a 2 -> 1 rank resume the log said "(2 epoch(s) of 5, 8 steps)", 5 the steps
    left of 8; ``state.epoch`` counted the rest's steps (0.2 one step in, where a run on any
    ranks is at 0.5), and paddlenlp's "Continuing training from epoch 0" was all it said.
    Here a checkpoint's state is the one 2 ranks save after step 3 (updates of 8 samples, 8 an
    epoch on any ranks), resumed on this one rank: the rest of its epoch dealt here."""
    import logging

    from paddle.utils import unique_name

    ds = Reviews(60)
    plan = {"update_size": 8, "max_cost": 3 * 24**2}
    args = make_args(tmp_path, save_strategy="steps", save_steps=3)
    with unique_name.guard():  # each run names its parameters as a process of its own does
        trainer = make_trainer(
            tmp_path, ds, args=args, plan=plan, callbacks=[make_recorder(stop_at=3)]
        )
        trainer.train()
    two = dynbatch.DistributedDynamicBatchSampler(
        lengths=ds.lengths, num_replicas=2, rank=0, options=trainer.options
    )
    ends = two.epoch_plan(0).window_ends
    assert len(ends) == 8 == trainer.steps_per_epoch(0), "precondition: 8 updates on any ranks"
    checkpoint = tmp_path / "checkpoint-3"
    state = json.loads((checkpoint / STATE_FILE).read_text())
    state["sampler"] = two.state_dict(consumed_batches=int(ends[2]))
    (checkpoint / STATE_FILE).write_text(json.dumps(state))

    rec = make_recorder()
    caplog.clear()
    with unique_name.guard(), caplog.at_level(logging.INFO):
        resumed = make_trainer(tmp_path, ds, args=make_args(tmp_path), plan=plan, callbacks=[rec])
        resumed.train(resume_from_checkpoint=str(checkpoint))
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("dynbatch: ")]
    steps = next(line for line in said if "optimizer steps (" in line)
    assert "16 optimizer steps (2 epoch(s) of 5 remaining of 8, 8 steps)" in steps, steps
    assert any(
        line.startswith("dynbatch: resuming at real epoch 0 after its step 3 of 8 (global step 3")
        for line in said
    ), said
    epochs = [log["progress_or_epoch"] for log in rec.logs if "loss" in log]  # state.epoch
    expected = [e + k / 8 for e in (0, 1) for k in range(1, 9)][3:]
    assert epochs == pytest.approx(expected, abs=1e-4), "the epoch of each global step, any ranks"


def test_ignoring_the_saved_optimizer_on_resume_is_refused_by_name(tmp_path: Path) -> None:
    """Tester report C 2: ignore_load_lr_and_optim=True skipped the plan's state too and, with
    ignore_data_skip forced on, replayed the run from its first batch on the saved weights.
    paddlenlp then also skips the Trainer's state (global_step), so no exact resume exists:
    it is refused, naming the flag, before anything trains."""
    ds = Reviews(40)
    args = make_args(tmp_path, max_steps=2, save_strategy="steps", save_steps=1)
    make_trainer(tmp_path, ds, args=args).train()
    recorder = make_recorder()
    args = make_args(tmp_path, max_steps=2, ignore_load_lr_and_optim=True)
    trainer = make_trainer(tmp_path, ds, args=args, callbacks=[recorder])
    with pytest.raises(dynbatch.InputError, match=r"ignore_load_lr_and_optim=True.*resume"):
        trainer.train(resume_from_checkpoint=str(tmp_path / "checkpoint-1"))
    assert recorder.windows == [], "nothing was trained"


def _keep_time_model(out: Path, model: dict[str, float]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / probe.TIME_MODEL_FILE).write_text(json.dumps(model))


def test_a_resume_plans_by_the_checkpoints_own_step_time(tmp_path: Path) -> None:
    """Tester report C 1: a checkpoint resumed in another output_dir, or once the kept step time
    was deleted (as its torn-file error advises), measured a new step time and was refused
    ("saved with other options ... time_model"). The checkpoint holds the step time it was
    planned by; a resume with the default time_model plans by that one."""
    ds = Reviews(40)
    saved_model = {"c": 0.01, "a": 1e-4, "b": 0.0, "error": 0.1}
    _keep_time_model(tmp_path / "a", saved_model)
    args = make_args(tmp_path / "a", max_steps=3, save_strategy="steps", save_steps=1)
    full = make_recorder()
    with paddle.utils.unique_name.guard():  # each run names its layers as a fresh process would
        recipe_trainer(tmp_path / "a", ds, args, callbacks=[full], time_model="measure").train()
    checkpoint = str(tmp_path / "a" / "checkpoint-1")
    _keep_time_model(tmp_path / "b", {"c": 0.5, "a": 0.0, "b": 0.0, "error": 0.0})
    resumed = make_recorder()
    with paddle.utils.unique_name.guard():
        trainer = recipe_trainer(
            tmp_path / "b", ds, make_args(tmp_path / "b", max_steps=3), callbacks=[resumed]
        )
        trainer.train(resume_from_checkpoint=checkpoint)
    assert trainer.options.time_model == dynbatch.StepTimeModel(**saved_model)
    assert batches_of(resumed.windows) == batches_of(full.windows[1:])


@pytest.mark.parametrize(
    ("field", "now"),
    [("per_device_train_batch_size", 8), ("gradient_accumulation_steps", 2)],
)
def test_a_changed_training_argument_on_resume_is_named(
    tmp_path: Path, field: str, now: int
) -> None:
    """Tester report C 7: the refusal named the plan's internal options (max_cost,
    update_size) and a remedy for sampler users, not the TrainingArguments field changed."""
    ds = Reviews(40)
    args = make_args(
        tmp_path, max_steps=1, save_strategy="steps", save_steps=1, per_device_train_batch_size=6
    )
    recipe_trainer(tmp_path, ds, args, time_model=None).train()
    changed = make_args(tmp_path, max_steps=1, **{"per_device_train_batch_size": 6, field: now})
    trainer = recipe_trainer(tmp_path, ds, changed, time_model=None)
    saved = getattr(args, field)
    with pytest.raises(dynbatch.InputError, match=rf"{field}: saved {saved}, now {now}"):
        trainer.train(resume_from_checkpoint=True)
