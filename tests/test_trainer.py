"""DynamicBatchTrainer with paddlenlp's real Trainer on CPU: steps, normalisation, eval."""

from __future__ import annotations

import json
import math
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("paddlenlp")
import paddle

import dynbatch
from dynbatch.integrations import paddlenlp as integration
from dynbatch.integrations.paddlenlp import (
    DynamicBatchTrainer,
    per_sample_cross_entropy,
)

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


def recipe_trainer(out: Path, ds: Reviews, args: Any, **kw: Any) -> DynamicBatchTrainer:
    return DynamicBatchTrainer(
        model=tiny_bert(),
        args=args,
        train_dataset=ds,
        data_collator=kw.pop("data_collator", collate),
        lengths=ds.lengths,
        **kw,
    )


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


class _PassingScaler:
    """fp16 loss scaling at a scale of 1: only a NaN loss makes a step it skips."""

    def scale(self, loss: Any) -> Any:
        return loss


def test_a_step_skipped_for_a_nan_loss_stays_out_of_the_loss_logged(tmp_path: Path) -> None:
    """The logs engineer's finding: under fp16 a skipped step's NaN loss was summed into the
    run's loss total, so train_loss read NaN and every later checkpoint refused to resume."""
    calls: list[int] = []

    def nan_on_the_second_window(outputs: Any, batch: Any) -> Any:
        calls.append(trainer.state.global_step)
        losses = per_sample_cross_entropy(outputs, batch)
        return losses * float("nan") if trainer.state.global_step == 1 else losses

    trainer = make_trainer(tmp_path, Reviews(30), time_model=None, loss_fn=nan_on_the_second_window)
    trainer.do_grad_scaling, trainer.scaler = True, _PassingScaler()
    windows = iter(trainer.get_train_dataloader())
    losses = []
    for step in range(3):
        trainer.state.global_step = step
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the skipped step's own warning
            losses.append(float(trainer.training_step(trainer.model, next(windows))))
        trainer.model.clear_gradients()
    assert math.isnan(losses[1]) and trainer.run_log.skipped_steps == 1
    assert math.isfinite(trainer.run_log.loss_total), "the NaN stays out of the total"
    assert trainer.run_log.loss_total == pytest.approx(losses[0] + losses[2])
    logs = {"train_loss": 0.0}
    trainer.run_log.update(logs, global_step=3)
    assert logs["train_loss"] == pytest.approx((losses[0] + losses[2]) / 2), "over steps applied"


def test_the_integration_is_split_by_job_within_its_bounds() -> None:
    """No class of the paddlenlp integration (its adapter and the core it shares) over 300 lines
    and no module over 700 (a class a reader can hold): DynamicBatchTrainer keeps its
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
