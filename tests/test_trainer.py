"""DynamicBatchTrainer with paddlenlp's real Trainer on CPU: steps, normalisation, resume, eval."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("paddlenlp")
import paddle

import dynbatch
from dynbatch.integrations import paddlenlp as integration
from dynbatch.integrations.core import probe
from dynbatch.integrations.paddlenlp import (
    STATE_FILE,
    DynamicBatchTrainer,
    per_sample_cross_entropy,
)
from dynbatch.plan.epochs import epoch_candidates

sys.path.insert(0, str(Path(__file__).parent / "scripts"))
from trainer_toy import (
    PLAN,
    Reviews,
    accuracy,
    collate,
    direct_eval,
    make_args,
    make_recorder,
    mean_gap,
    reference_grads,
    tiny_bert,
)

SCRIPTS = Path(__file__).parent / "scripts"


def make_trainer(out: Path, ds: Reviews, *, args: Any = None, **kw: Any) -> DynamicBatchTrainer:
    options = {**PLAN, **kw.pop("plan", {})}
    return DynamicBatchTrainer(
        model=kw.pop("model", None) or tiny_bert(),
        args=args or make_args(out),
        train_dataset=ds,
        data_collator=collate,
        lengths=kw.pop("lengths", ds.lengths),
        **options,
        **kw,
    )


def batches_of(windows: list[Any]) -> list[list[int]]:
    return [idx.tolist() for w in windows for idx in w.indices]


def test_public_names() -> None:
    for name in integration.__all__:
        assert getattr(integration, name) is not None, name
    assert len(set(integration.__all__)) == len(integration.__all__), "no name twice"


def test_two_epochs_see_every_sample_once_in_exactly_the_planned_steps(tmp_path: Path) -> None:
    ds = Reviews(60)
    rec = make_recorder()
    trainer = make_trainer(
        tmp_path, ds, args=make_args(tmp_path, gradient_accumulation_steps=2), callbacks=[rec]
    )
    trainer.train()

    plain = dynbatch.DynamicBatchSampler(lengths=ds.lengths, **PLAN)  # counted independently
    per_epoch = [plain.len_for_epochs([e]) for e in range(2)]
    assert per_epoch[0] != per_epoch[1], "precondition: the epochs differ in batch count"
    expected = sum(math.ceil(b / 2) for b in per_epoch)
    assert rec.optimizer_steps == expected, "optimizer steps taken = windows of 2 over both epochs"
    assert trainer.state.max_steps == trainer.state.global_step == expected, "exact max_steps"
    assert trainer.lr_scheduler.get_lr() == 0.0, "the linear LR schedule ends at the last step"
    for epoch in range(2):
        windows = [w for w in rec.windows if w.epoch == epoch]
        seen = sorted(i for idx in batches_of(windows) for i in idx)
        assert seen == list(range(len(ds))), f"epoch {epoch}: every sample exactly once"
        assert batches_of(windows) == [b.tolist() for b in plain.batches(epoch)], (
            f"epoch {epoch}: the plan's batches, in order"
        )
        sizes = [w.stop - w.start for w in windows]
        assert sizes == [2] * (per_epoch[epoch] // 2) + [1] * (per_epoch[epoch] % 2), (
            "windows of 2 planned micro-batches, the last cut at the epoch's end"
        )
    assert rec.logs[-1]["progress_or_epoch"] == 2.0, "state.epoch counts real epochs"


@pytest.mark.parametrize(
    ("accumulate", "gas", "target"), [("samples", 2, None), ("tokens", 1, 150.0)]
)
def test_a_step_is_the_mean_over_all_its_samples_or_tokens(
    tmp_path: Path, accumulate: str, gas: int, target: float | None
) -> None:
    ds = Reviews(60)
    rec = make_recorder(grads=3)
    trainer = make_trainer(
        tmp_path,
        ds,
        args=make_args(tmp_path, gradient_accumulation_steps=gas, max_steps=3),
        accumulate=accumulate,
        accumulate_target=target,
        callbacks=[rec],
    )
    trainer.train()
    assert len(rec.grads) == 3
    assert all(w.stop - w.start > 1 for w in rec.windows), "precondition: accumulated steps"
    assert any(len({idx.size for idx in w.indices}) > 1 for w in rec.windows), (
        "precondition: micro-batches of unequal size in one step"
    )
    for step in range(3):
        window = rec.windows[step]
        indices = np.concatenate(window.indices)
        weights = ds.lengths[indices] if accumulate == "tokens" else np.ones(indices.size)
        assert window.count == weights.sum(), "the window's count is its samples or tokens"
        assert mean_gap(rec, step, ds, tiny_bert(), accumulate) < 1e-5, (
            f"step {step}: gradient = that of the mean over the step's {accumulate}"
        )


def run_script(script: str, *args: str, ok: tuple[int, ...] = (0, 3)) -> int:
    """Run a script; afterwards end every process it left, a killed run's DataLoader workers
    included (NOTE [ reaping a launch ])."""
    from processes import run
    from test_distributed import script_env

    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "run.log"
        done = run(
            [sys.executable, str(SCRIPTS / script), *args], log, env=script_env(), timeout=300
        )
        output = log.read_text()
    if done.returncode not in ok:
        pytest.fail(f"{script} {' '.join(args)} exited {done.returncode}\n{output[-3000:]}")
    return done.returncode


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


def test_logs_visualdl_and_evaluation_follow_the_plan(tmp_path: Path) -> None:
    visualdl = pytest.importorskip("visualdl")
    ds, dev = Reviews(60), Reviews(23, seed=5)
    rec = make_recorder()
    args = make_args(
        tmp_path,
        report_to=["visualdl"],  # the stock callback crashes on bool hparams; fixed inside
        logging_dir=str(tmp_path / "vdl"),
        evaluation_strategy="epoch",
    )
    trainer = make_trainer(
        tmp_path,
        ds,
        args=args,
        eval_dataset=dev,
        eval_lengths=dev.lengths,
        compute_metrics=accuracy,
        callbacks=[rec],
    )
    trainer.train()
    steps = trainer.state.global_step
    train_logs = [log for log in rec.logs if "loss" in log]
    assert len(train_logs) == steps
    for key in ("batch_size", "padding_efficiency", "cost_ratio", "tokens_per_sec", "memory_mib"):
        assert all(log[key] > 0 for log in train_logs), key
    assert sum(log["samples_per_step"] for log in train_logs) == 2 * len(ds), "real samples"
    assert all(0 < log["cost_ratio_max"] <= 1 for log in train_logs), "every batch in budget"

    evals = [log for log in rec.logs if "eval_accuracy" in log]
    assert [log["progress_or_epoch"] for log in evals] == [1.0, 2.0], "one eval per real epoch"
    acc, loss = direct_eval(trainer.model, dev)
    assert evals[-1]["eval_accuracy"] == acc, "dynamic eval batches, same accuracy"
    assert evals[-1]["eval_loss"] == pytest.approx(loss, abs=1e-5)

    (record,) = (tmp_path / "vdl").glob("vdlrecords.*")
    reader = visualdl.LogReader(file_path=str(record))
    for tag in ("train/loss", "train/padding_efficiency", "train/tokens_per_sec"):
        assert len(reader.get_data("scalar", tag)) == steps, tag


@pytest.mark.slow
def test_two_ranks_train_evaluate_and_agree(tmp_path: Path) -> None:
    from test_distributed import launch

    launch("trainer_ddp.py", tmp_path, str(tmp_path))
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    n = ranks[0]["samples"]
    for epoch in ("0", "1"):
        union = sorted(ranks[0]["epochs"][epoch] + ranks[1]["epochs"][epoch])
        assert union == list(range(n)), f"epoch {epoch}: every sample once over the ranks"
    for r in ranks:
        assert r["optimizer_steps"] == r["max_steps"] == r["expected_steps"], "exact steps"
        assert r["grad_diff"] < 1e-5, "the step's gradient is the mean over both ranks' samples"
        assert r["eval"]["eval_accuracy"] == r["reference_accuracy"]
        assert r["eval"]["eval_loss"] == pytest.approx(r["reference_loss"], abs=1e-5)
    assert ranks[0]["eval_batch_sizes"] != ranks[1]["eval_batch_sizes"], (
        "precondition: the ranks evaluate batches of different sizes"
    )
    assert np.allclose(ranks[0]["params"], ranks[1]["params"], rtol=0, atol=1e-7)
    assert ranks[0]["eval"] == ranks[1]["eval"], "every rank reports the same metrics"


def test_without_paddlenlp_the_error_names_the_extra() -> None:
    code = (
        "import sys\n"
        "sys.modules['paddlenlp'] = None  # as if not installed\n"
        "import dynbatch.integrations\n"
        "try:\n"
        "    import dynbatch.integrations.paddlenlp\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install paddlenlp==3.0.0b4" in out.stdout, out.stdout + out.stderr
    assert 'pip install ".[paddlenlp]"' in out.stdout, "the Trainer's own extra, from a clone"


BAD: list[tuple[dict[str, Any], str]] = [
    (
        {"accumulate": "bytes"},
        "accumulate must be one of 'samples', 'tokens'; got accumulate='bytes'",
    ),
    ({"length_fn": len}, "give lengths or a way to measure them"),
    ({"max_cots": 5}, "unknown argument(s) max_cots; the plan options are"),
    ({"plan": {"order": "sideways"}}, "order must be one of"),
    ({"options": dynbatch.PlanOptions(max_cost=99)}, "not both"),
    ({"accumulate_target": 0}, "accumulate_target must be a positive finite number"),
    ({"accumulate_target": 100, "gas": 2}, "accumulate_target (samples or tokens per step), not"),
    ({"epochs": 1.5}, "args.num_train_epochs must be a whole number of epochs >= 1"),
    ({"criterion": object()}, "Or pass loss_fn="),
    ({"loss_fn": "cross_entropy"}, "loss_fn must be a callable"),
    ({"lengths": np.ones(7, dtype=np.int64)}, "lengths has 7 entries but the dataset has 60"),
    ({"eval_lengths": [3, 4]}, "eval_lengths were given without an eval_dataset"),
    (
        {"eval_dataset": Reviews(10, seed=1), "eval_lengths": [3, 4, 5]},
        "eval_lengths has 3 entries but the eval dataset has 10 samples",
    ),
    (
        {"eval_dataset": Reviews(3, seed=1), "eval_lengths": [3, 0, 5]},
        "eval_lengths must be positive; eval_lengths[1]=0",
    ),
]


@pytest.mark.parametrize(("change", "message"), BAD, ids=[m[:24] for _, m in BAD])
def test_bad_arguments_are_named(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    change = dict(change)
    args = make_args(
        tmp_path,
        gradient_accumulation_steps=change.pop("gas", 1),
        num_train_epochs=change.pop("epochs", 2),
    )
    with pytest.raises(dynbatch.InputError) as info:
        make_trainer(tmp_path, Reviews(60), args=args, **change)
    assert message in str(info.value)


def test_bad_losses_and_checkpoints_are_named(tmp_path: Path) -> None:
    ds = Reviews(60)
    mean_loss = make_trainer(
        tmp_path,
        ds,
        args=make_args(tmp_path, max_steps=1),
        loss_fn=lambda outputs, batch: outputs.mean(),
    )
    with pytest.raises(dynbatch.InputError, match=r"returned one number, a mean .* re-weighted"):
        mean_loss.train()
    for broken, what in (
        (lambda o, b: per_sample_cross_entropy(o, b).detach(), "float32"),
        (lambda o, b: per_sample_cross_entropy(o, b).astype("int64"), "int64"),
    ):
        trainer = make_trainer(tmp_path, ds, args=make_args(tmp_path, max_steps=1), loss_fn=broken)
        with pytest.raises(dynbatch.InputError, match=rf"differentiable float losses.*{what}"):
            trainer.train()
    trainer = make_trainer(tmp_path / "empty", ds, args=make_args(tmp_path / "empty"))
    with pytest.raises(dynbatch.InputError, match="holds no checkpoint"):
        trainer.train(resume_from_checkpoint=True)
    (tmp_path / "stock").mkdir()
    with pytest.raises(dynbatch.InputError, match=f"has no {STATE_FILE}"):
        trainer.train(resume_from_checkpoint=str(tmp_path / "stock"))

    saved = tmp_path / "saved"
    args = make_args(saved, max_steps=1, save_strategy="steps", save_steps=1)
    make_trainer(saved, ds, args=args).train()
    checkpoint = str(saved / "checkpoint-1")
    other_budget = make_trainer(saved, ds, args=args, plan={"max_cost": 5 * 24**2})
    with pytest.raises(dynbatch.InputError, match=r"saved with other options.*max_cost"):
        other_budget.train(resume_from_checkpoint=checkpoint)
    args = make_args(saved, max_steps=1, gradient_accumulation_steps=2)
    with pytest.raises(dynbatch.InputError, match="other optimizer windows"):
        make_trainer(saved, ds, args=args).train(resume_from_checkpoint=checkpoint)
    args = make_args(saved, max_steps=1, save_strategy="steps", save_steps=1)
    state_file = saved / "checkpoint-1" / STATE_FILE
    state = json.loads(state_file.read_text())
    good = state_file.read_text()
    state["sampler"]["num_replicas"] = 2  # as if saved on two cards
    state_file.write_text(json.dumps(state))
    with pytest.raises(dynbatch.InputError, match=r"on num_replicas=2 ranks.*cannot be loaded"):
        make_trainer(saved, ds, args=args).train(resume_from_checkpoint=checkpoint)
    state_file.write_text(good)
    (saved / "checkpoint-1" / STATE_FILE).write_text("{not json")
    with pytest.raises(dynbatch.InputError, match=f"{STATE_FILE} cannot be read"):
        make_trainer(saved, ds, args=args).train(resume_from_checkpoint=checkpoint)


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


# -- the fixed batch's recipe, and what a paddlenlp user passes ---------------------------------
def recipe_trainer(out: Path, ds: Reviews, args: Any, **kw: Any) -> DynamicBatchTrainer:
    return DynamicBatchTrainer(
        model=tiny_bert(),
        args=args,
        train_dataset=ds,
        data_collator=kw.pop("data_collator", collate),
        lengths=ds.lengths,
        **kw,
    )


def test_with_no_plan_options_it_trains_like_the_args_batch(tmp_path: Path) -> None:
    """No max_cost: updates of the fixed batch of args, mixed, each the exact mean."""
    import paddle

    ds = Reviews(80)
    rec = make_recorder(grads=2)
    args = make_args(tmp_path, per_device_train_batch_size=6, gradient_accumulation_steps=2, seed=7)
    trainer = recipe_trainer(  # the CPU's split, whatever this CPU's step time
        tmp_path, ds, args, criterion=paddle.nn.CrossEntropyLoss(), callbacks=[rec], time_model=None
    )
    assert trainer.options == dynbatch.like_fixed(ds.lengths, 6, accumulation_steps=2, seed=7)
    sampler = trainer.train_sampler
    assert sampler is not None
    trainer.train()
    expected = sampler.steps_for_epochs(range(2))
    assert rec.optimizer_steps == trainer.state.global_step == expected
    assert abs(expected - 2 * len(ds) / 12) <= 2, "the fixed batch's updates an epoch"
    for epoch in range(2):
        windows = [w for w in rec.windows if w.epoch == epoch]
        assert [w.stop for w in windows] == sampler.epoch_plan(epoch).window_ends.tolist()
        assert sorted(i for idx in batches_of(windows) for i in idx) == list(range(len(ds)))
    assert any(w.stop - w.start > 1 for w in rec.windows), "precondition: several micro-batches"
    for step in range(2):
        window = rec.windows[step]
        indices = np.concatenate(window.indices)
        ref = tiny_bert()
        ref.set_state_dict(rec.weights[step])
        expected_grads = reference_grads(ref, ds, indices, np.ones(indices.size))
        worst = max(float(np.abs(rec.grads[step][n] - g).max()) for n, g in expected_grads.items())
        assert worst < 1e-5, f"step {step}: the mean over the update's samples (criterion)"


def test_the_plan_takes_args_seed_and_resume_takes_text(tmp_path: Path) -> None:
    ds = Reviews(40)
    trainer = make_trainer(tmp_path, ds, args=make_args(tmp_path, seed=11))
    assert trainer.options.seed == 11, "args.seed, when the plan options name none"
    assert make_trainer(tmp_path, ds, plan={"seed": 3}).options.seed == 3, "an explicit seed"
    for text in ("True", "true"):  # --resume_from_checkpoint True arrives as text
        with pytest.raises(dynbatch.InputError, match="holds no checkpoint"):
            trainer.train(resume_from_checkpoint=text)


def test_the_recipe_measures_the_step_time_follows_it_and_keeps_it(tmp_path: Path) -> None:
    """NOTE [ the Trainer measures the step time ]: probe, plan by it, read it back on resume."""
    ds = Reviews(80)
    args = make_args(tmp_path, per_device_train_batch_size=6, seed=7)
    model = tiny_bert()
    before = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    trainer = DynamicBatchTrainer(
        model=model,
        args=args,
        train_dataset=ds,
        data_collator=collate,
        lengths=ds.lengths,
        time_model="measure",  # the default measures on an accelerator only
    )
    after = model.state_dict()
    assert all(np.array_equal(before[k], after[k].numpy()) for k in before), "weights put back"
    saved = json.loads((Path(args.output_dir) / probe.TIME_MODEL_FILE).read_text())
    measured = dynbatch.StepTimeModel(**saved)
    assert measured.c + measured.a + measured.b > 0, "a step takes time"
    assert trainer.options == dynbatch.like_fixed(ds.lengths, 6, seed=7, time_model=measured)
    again = recipe_trainer(tmp_path, ds, args, time_model="measure")  # read back, not probed
    assert again.options == trainer.options, "a resume plans the same batches"
    given = recipe_trainer(tmp_path, ds, make_args(tmp_path / "b", seed=7), time_model="0,1,0")
    assert given.options == dynbatch.like_fixed(ds.lengths, 8, seed=7, time_model="0,1,0")
    assert not (tmp_path / "b" / probe.TIME_MODEL_FILE).exists(), "given: no probe"
    with pytest.raises(dynbatch.InputError, match="time_model= is for the fixed batch's recipe"):
        make_trainer(tmp_path, ds, time_model="0,1,0")


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"accumulate": "tokens", "time_model": "0,1,0"}, "accumulate='tokens'"),
        ({"accumulate": "tokens", "time_model": "fast"}, "time_model='fast'"),
        ({"time_model": "Measure"}, "'measure'"),
        ({"time_model": True}, "'measure'"),
    ],
)
def test_a_time_model_it_cannot_follow_or_read_is_refused_naming_what_is_valid(
    tmp_path: Path, kw: dict[str, Any], match: str
) -> None:
    """Under accumulate='tokens' the recipe keeps its split: a time model there was dropped
    without a word, even one that is no time model at all."""
    with pytest.raises(dynbatch.InputError, match=match):
        recipe_trainer(tmp_path, Reviews(20), make_args(tmp_path), **kw)


def test_plan_options_with_no_time_model_are_taken(tmp_path: Path) -> None:
    """time_model=None says "no step time": nothing to drop when the options plan on their own."""
    ds = Reviews(20)
    trainer = make_trainer(tmp_path, ds, time_model=None)
    assert trainer.options.time_model is None
    assert trainer.options == make_trainer(tmp_path, ds).options


def test_the_probe_leaves_the_random_stream_as_it_found_it(tmp_path: Path) -> None:
    """A run that probes and one that reads the step time back (same seed) train alike: the
    probe's dropout must not move paddle's random stream."""
    import paddle

    ds = Reviews(40)
    draws = []
    for out, time_model in ((tmp_path / "probed", "measure"), (tmp_path / "given", "0.01,0,0")):
        DynamicBatchTrainer(
            model=tiny_bert(dropout=0.1),
            args=make_args(out),
            train_dataset=ds,
            data_collator=collate,
            lengths=ds.lengths,
            time_model=time_model,
        )
        draws.append(paddle.rand([4]).numpy())
    assert (tmp_path / "probed" / probe.TIME_MODEL_FILE).exists(), "precondition"
    assert np.array_equal(draws[0], draws[1]), "the same draws after the probe as without it"


def test_the_probe_leaves_paddles_names_as_it_found_them(tmp_path: Path) -> None:
    """paddle names an optimizer's accumulators by a process-wide counter, and a checkpoint
    keeps those names: a probe whose own optimizer moved it saved ``..._moment1_1`` where a
    resumed run, which reads the step time back, looked for ``..._moment1_0`` (its resume
    failed with "Optimizer set error"). Each run here starts from fresh names, as a process
    does."""
    from paddle.utils import unique_name

    ds = Reviews(40)
    names = []
    for out, time_model in ((tmp_path / "probed", "measure"), (tmp_path / "given", "0.01,0,0")):
        with unique_name.guard():
            trainer = recipe_trainer(out, ds, make_args(out), time_model=time_model)
            first = trainer.model.parameters()[0].name
            names.append(unique_name.generate(f"{first}_moment1"))
    assert (tmp_path / "probed" / probe.TIME_MODEL_FILE).exists(), "precondition"
    assert names[0] == names[1], "the optimizer's accumulators get the names a resume expects"


def test_the_log_says_once_which_split_the_step_time_chose_and_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A user whose updates stay whole (or are cut) learns why from the log: the step time and
    the predicted epoch of each split, at info level, once."""
    import logging

    from dynbatch.plan.steptime import check_time_model

    ds = Reviews(80)
    for i, time_model in enumerate(("0.05,0,0", "0,1e-5,1e-6")):  # a fixed cost a step; none
        caplog.clear()
        with caplog.at_level(logging.INFO):
            args = make_args(tmp_path / str(i))
            trainer = recipe_trainer(tmp_path, ds, args, time_model=time_model)
        lines = [r.getMessage() for r in caplog.records if " s an epoch " in r.getMessage()]
        assert len(lines) == 1, lines
        assert lines[0].startswith(f"dynbatch: step time {check_time_model(time_model)}: ")
        plan = trainer.train_sampler.epoch_plan(0)
        updates = len(plan.window_ends)
        assert f"{plan.num_steps} micro-batch(es) a rank for {updates} update(s)" in lines[0]
        _, seconds = epoch_candidates(
            trainer.train_sampler.lengths, trainer.options, 0, 1, trainer.train_sampler.loss_tokens
        )
        names = {
            "time split": "whole updates cut at the step time",
            "padding-free": "the padding-free split",
        }
        kept = min(seconds, key=lambda k: (seconds[k], k != "padding-free"))  # a tie: free
        other = next(k for k in seconds if k != kept)
        assert f"planning {names[kept]} for epoch 0: predicted {seconds[kept]:.3g} s" in lines[0]
        assert f"against {seconds[other]:.3g} s for {names[other]}" in lines[0], lines[0]
        if i == 0:  # every cut costs a whole step: none pays
            assert plan.num_steps == updates and "each update whole" in lines[0], lines[0]


def test_a_torn_kept_step_time_is_named_never_half_read(tmp_path: Path) -> None:
    """NOTE [ atomic writes ]: the step time kept in output_dir, cut short or garbled, is an
    InputError naming the file and saying to delete it to measure again."""
    path = tmp_path / probe.TIME_MODEL_FILE
    whole = json.dumps({"c": 0.01, "a": 0.001, "b": 0.0, "error": 0.1})
    beyond_float = '{"c": 1' + "0" * 400 + ', "a": 0, "b": 0}'  # was a bare OverflowError
    inf_steps = '{"c": 1e308, "a": 1e308, "b": 1e308}'  # was named as an argument never passed
    for text in (
        whole[: len(whole) // 2],
        "",
        whole[:-1],
        '{"c": 0.01}',
        "[1, 2]",
        beyond_float,
        inf_steps,
    ):
        path.write_text(text)
        with pytest.raises(dynbatch.InputError, match=rf"{path.name}.*delete it"):
            recipe_trainer(tmp_path, Reviews(20), make_args(tmp_path), time_model="measure")
    path.unlink()
    path.mkdir()  # was a whole probe, then a bare IsADirectoryError on writing the result
    with pytest.raises(dynbatch.InputError, match=rf"{path.name}.* not a file"):
        recipe_trainer(tmp_path, Reviews(20), make_args(tmp_path), time_model="measure")
    path.rmdir()
    path.write_text(whole)
    trainer = recipe_trainer(tmp_path, Reviews(20), make_args(tmp_path), time_model="measure")
    assert trainer.options.time_model in (None, dynbatch.StepTimeModel(**json.loads(whole)))


def test_the_probe_takes_the_batches_training_takes(tmp_path: Path) -> None:
    """A collator's list field (the DataLoader passes it on as a list) trains, so it probes;
    one that returns no dict is refused as training refuses it, not with an AttributeError."""

    def labels_as_list(samples: list[dict[str, Any]]) -> dict[str, Any]:
        return {**collate(samples), "labels": collate(samples)["labels"].tolist()}

    ds = Reviews(30)
    trainer = recipe_trainer(
        tmp_path / "list",
        ds,
        make_args(tmp_path / "list"),
        data_collator=labels_as_list,
        time_model="measure",
    )
    assert (tmp_path / "list" / probe.TIME_MODEL_FILE).exists()
    assert trainer.train().global_step > 0

    def as_tuple(samples: list[dict[str, Any]]) -> tuple[Any, Any]:
        batch = collate(samples)
        return batch["input_ids"], batch["labels"]

    with pytest.raises(dynbatch.InputTypeError, match="data_collator must return a dict"):
        recipe_trainer(
            tmp_path / "tuple",
            ds,
            make_args(tmp_path / "tuple"),
            data_collator=as_tuple,
            time_model="measure",
        )


def test_a_probe_batch_keeps_real_values_at_any_shape() -> None:
    import paddle

    base = {
        "input_ids": paddle.to_tensor([[5, 6, 7], [8, 9, 0]]),
        "labels": paddle.to_tensor([1, 0]),
    }
    out = probe.probe_batch(base, 5, 2)
    assert out["input_ids"].shape == [5, 2] and out["labels"].shape == [5]
    assert out["input_ids"].numpy().tolist()[:3] == [[5, 6], [8, 9], [5, 6]]


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"criterion": object()}, "criterion must be a loss layer with a reduction"),
        ({"accumulate_target": 10.0}, "the plan makes its own updates"),
    ],
)
def test_the_recipe_refuses_what_it_cannot_honour(
    tmp_path: Path, kw: dict[str, Any], message: str
) -> None:
    with pytest.raises(dynbatch.InputError, match=message):
        recipe_trainer(tmp_path, Reviews(20), make_args(tmp_path), **kw)
    with pytest.raises(dynbatch.InputError, match="group them again"):
        make_trainer(
            tmp_path,
            Reviews(20),
            args=make_args(tmp_path, gradient_accumulation_steps=2),
            plan={"update_size": 8},
        )


# -- what the integration promises (what it borrows from paddlenlp: tests/test_hosts.py) ------
def test_preprocess_logits_for_metrics_is_called_on_each_eval_batch(tmp_path: Path) -> None:
    ds, dev = Reviews(30), Reviews(23, seed=5)
    calls: list[int] = []

    def argmax(logits: Any, labels: Any) -> Any:
        calls.append(int(logits.shape[0]))
        assert labels is not None and int(labels.shape[0]) == int(logits.shape[0])
        return logits.argmax(-1)

    trainer = make_trainer(
        tmp_path,
        ds,
        eval_dataset=dev,
        eval_lengths=dev.lengths,
        preprocess_logits_for_metrics=argmax,
        compute_metrics=lambda p: {"accuracy": float((p.predictions == p.label_ids).mean())},
    )
    metrics = trainer.evaluate()
    assert sum(calls) == len(dev) and len(calls) > 1, "once per dynamic batch, every sample"
    acc, _ = direct_eval(trainer.model, dev)
    assert metrics["eval_accuracy"] == acc, "compute_metrics saw the preprocessed predictions"


def test_a_non_finite_loss_stops_training_with_the_step_named(tmp_path: Path) -> None:
    """paddlenlp steps the optimizer itself: the engine's verdict raises before it does."""

    calls: list[int] = []

    def nan_on_the_third_step(outputs: Any, batch: Any) -> Any:
        calls.append(1)
        losses = per_sample_cross_entropy(outputs, batch)
        return losses * float("nan") if len(calls) == 3 else losses

    rec = make_recorder()
    trainer = make_trainer(
        tmp_path,
        Reviews(60),
        args=make_args(tmp_path, max_steps=4),
        loss_fn=nan_on_the_third_step,
        callbacks=[rec],
    )
    with pytest.raises(ValueError, match=r"step 3 .*NaN or inf"):
        trainer.train()
    assert rec.optimizer_steps == 2, "the third window raised before the optimizer stepped"


class _OverflowingScaler:
    """fp16 loss scaling as paddle's GradScaler does it, but on CPU: a scale that overflows
    float32 (paddle's own is a no-op on CPU)."""

    def scale(self, loss: Any) -> Any:
        return loss * paddle.to_tensor(1e39, dtype="float32")


def test_a_step_fp16_scaling_skips_is_warned_with_its_step_and_the_count(tmp_path: Path) -> None:
    """With a loss scaler the Trainer does not raise on an overflow: the scaler skips the step,
    and the engine says which step and how many so far, as the hand-written loop does."""
    trainer = make_trainer(tmp_path, Reviews(30), time_model=None)
    trainer.do_grad_scaling, trainer.scaler = True, _OverflowingScaler()
    windows = iter(trainer.get_train_dataloader())
    for step in (1, 2):
        trainer.state.global_step = step - 1
        with pytest.warns(RuntimeWarning) as caught:
            trainer.training_step(trainer.model, next(windows))
        said = [str(w.message) for w in caught if "NaN or inf" in str(w.message)]
        assert len(said) == 1, said
        assert said[0].startswith(f"optimizer step {step}: the loss or gradients are NaN or inf")
        assert f"{step} step(s) skipped so far (an fp16 overflow" in said[0], said[0]
        trainer.model.clear_gradients()


@pytest.mark.parametrize(
    "run", [{"num_train_epochs": 2}, {"max_steps": 5}], ids=["epochs", "steps"]
)
def test_a_plan_with_nothing_to_train_is_refused_at_construction(
    tmp_path: Path, run: dict[str, int]
) -> None:
    ds = Reviews(6)  # every sample fits one batch, which drop_last drops
    with pytest.raises(dynbatch.InputError, match=r"nothing to train: .*drop_last=True"):
        make_trainer(
            tmp_path,
            ds,
            args=make_args(tmp_path, **run),
            plan={"max_cost": 1e9, "drop_last": True},
        )


def test_the_integration_is_split_by_job_within_its_bounds() -> None:
    """No class of the paddlenlp integration (its adapter and the core it shares) over 300 lines
    and no module over 700 (a class a reader can hold, STYLE 22): DynamicBatchTrainer keeps its
    overrides; planning, packing, windows, checkpoints and evaluation live in modules of their
    own."""
    import ast

    adapter = Path(integration.__file__).parent
    sizes: dict[str, int] = {}
    for module in sorted([*adapter.glob("*.py"), *(adapter.parent / "core").glob("*.py")]):
        name = f"{module.parent.name}/{module.name}"
        text = module.read_text(encoding="utf-8")
        sizes[name] = len(text.splitlines())
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                sizes[f"{name}:{node.name}"] = node.end_lineno - node.lineno + 1
    assert sizes["core/trainer.py:DynamicBatchTrainerCore"] > 0, "precondition: it is measured"
    over = {k: n for k, n in sizes.items() if n > (300 if ":" in k else 700)}
    assert not over, f"over 300 lines a class or 700 a module: {over}"


TRAINER_COLLATE_FAILS = """
import sys
sys.path.insert(0, {scripts!r})
import paddle
from trainer_toy import PLAN, Reviews, make_args, tiny_bert
from dynbatch.integrations.paddlenlp import DynamicBatchTrainer


class Texts(Reviews):
    # a field the packed rows would drop, in the samples a DataLoader worker reads only: the
    # checks made when the Trainer is made read samples in this process, so the loader's
    # packed collator is the first to meet it
    def __getitem__(self, i):
        sample = super().__getitem__(i)
        if paddle.io.get_worker_info() is None:
            return sample
        return {{**sample, "text": "a review"}}


def broken(samples):
    raise LookupError("no vocabulary entry 'x'")


packed = {packed}
ds = Texts(40) if packed else Reviews(40)
plan = {{"pack_len": 40, "max_batch_size": 1, "time_model": None}} if packed else PLAN
trainer = DynamicBatchTrainer(
    model=tiny_bert(0),
    args=make_args({out!r}, dataloader_num_workers={workers}, max_steps=2),
    train_dataset=ds,
    data_collator=broken,
    lengths=ds.lengths,
    **plan,
)
try:
    trainer.train()
except Exception as exc:
    print("RAISED", type(exc).__name__, "|", str(exc).splitlines()[0])
    print("CAUSE", type(exc.__cause__).__name__, "|", str(exc.__cause__).splitlines()[0])
"""


@pytest.mark.slow
@pytest.mark.parametrize(("packed", "workers"), [(False, 0), (True, 2)], ids=["0", "packed-2"])
def test_a_collate_error_stops_the_trainer_by_name(
    tmp_path: Path, packed: bool, workers: int
) -> None:
    """The train loader the Trainer builds raises its collator's error, named, where paddle's
    own hangs (num_workers=0) or raises a bare SystemError (workers); one mechanism for the
    user's data_collator and the packed rows (dynbatch.safe_collate)."""
    from deadline import run_within

    scripts = str(Path(__file__).parent / "scripts")
    code = TRAINER_COLLATE_FAILS.format(
        scripts=scripts, packed=packed, out=str(tmp_path), workers=workers
    )
    done = run_within(300, code)
    out = done.stdout
    if packed:
        assert "RAISED InputError | samples[0] has the field 'text', which the packed" in out, (
            out + done.stderr[-3000:]
        )
        where = "dynbatch.integrations.core.packing.pack_collator.<locals>.rows_of"
    else:
        assert "RAISED LookupError | no vocabulary entry 'x'" in out, out + done.stderr[-3000:]
        where = "__main__.broken"
    assert f"CAUSE CollateError | the collate_fn {where} (on " in out, out
