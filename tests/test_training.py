"""Loss normalisation and accumulation: each update is the mean over its whole effective batch."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

import numpy as np
import paddle
import pytest

import dynbatch
from dynbatch import InputError, InputTypeError
from dynbatch.paddle.training import GradientAccumulator, scale_lr

sys.path.insert(0, str(Path(__file__).parent / "scripts"))
from toy import Bag, Toy, per_sample_loss


def params(model: paddle.nn.Layer) -> dict[str, np.ndarray]:
    return {k: v.numpy().copy() for k, v in model.state_dict().items()}


def batch_of(ds: Toy, idx: np.ndarray) -> tuple[paddle.Tensor, paddle.Tensor]:
    ids, index = dynbatch.Tuple(dynbatch.Pad(), dynbatch.Stack())([ds[int(i)] for i in idx])
    return paddle.to_tensor(ids), paddle.to_tensor(index)


@pytest.mark.parametrize("unit", ["samples", "tokens"])
def test_accumulated_update_equals_one_pass_over_the_union(unit: str) -> None:
    ds = Toy(120, seed=3)
    sampler = dynbatch.DynamicBatchSampler(ds, lengths=ds.lengths, max_cost=4 * 160**2, seed=2)
    plan = sampler.batches()
    paddle.seed(0)
    model = Bag()
    start = params(model)
    acc = GradientAccumulator(
        model,
        paddle.optimizer.SGD(1.0, parameters=model.parameters()),
        sampler=sampler,
        target=1e9,
        unit=unit,
    )  # one window: the epoch
    for idx in plan:
        ids, index = batch_of(ds, idx)
        with acc.accumulate():
            losses = per_sample_loss(model, ids, index)
            if unit == "tokens":  # weight each sample by its tokens: a per-token loss
                losses = losses.squeeze(-1) * (ids > 0).astype("float32").sum(axis=1)
            count = idx.size if unit == "samples" else int(ds.lengths[idx].sum())
            acc.backward(losses.sum(), count=count)
    assert acc.optimizer_steps == 1 and acc.skipped_steps == 0
    after = params(model)

    ref = Bag()
    ref.set_state_dict({k: paddle.to_tensor(v) for k, v in start.items()})
    every = np.concatenate(plan)
    ids, index = batch_of(ds, every)
    losses = per_sample_loss(ref, ids, index).squeeze(-1)
    if unit == "tokens":
        weights = (ids > 0).astype("float32").sum(axis=1)
        loss = (losses * weights).sum() / weights.sum()
    else:
        loss = losses.mean()
    loss.backward()
    for name, p in ref.named_parameters():
        expected = start[name] - p.grad.numpy()  # SGD with lr 1
        np.testing.assert_allclose(after[name], expected, atol=1e-5, err_msg=name)


def test_windows_reach_the_target_and_steps_are_known_before_the_epoch() -> None:
    ds = Toy(300, seed=1)
    sampler = dynbatch.DynamicBatchSampler(ds, lengths=ds.lengths, max_cost=4 * 160**2)
    model = Bag()
    acc = GradientAccumulator(
        model, paddle.optimizer.SGD(0.1, parameters=model.parameters()), sampler=sampler, target=64
    )
    announced = acc.steps_per_epoch()
    sizes = [float(b.size) for b in sampler.batches()]
    ends = expected_window_ends(sizes, 64)
    sums = np.add.reduceat(sizes, [0, *[e + 1 for e in ends[:-1]]])
    assert (sums[:-1] >= 64).all(), "every window but the last reaches the target"
    stepped = train_pass(model, acc, loader_of(ds, sampler), ds)
    assert stepped == ends and announced == len(ends), "as announced, as computed here"


def test_a_nan_loss_skips_the_step_and_is_counted() -> None:
    model = Bag()
    before = params(model)
    acc = GradientAccumulator(model, paddle.optimizer.SGD(0.1, parameters=model.parameters()))
    ids = paddle.to_tensor(np.ones((2, 3), dtype="int64"))
    loss = model(ids).sum() * float("nan")
    acc.backward(loss, count=2)
    assert acc.skipped_steps == 1 and acc.optimizer_steps == 0
    for k, v in params(model).items():
        np.testing.assert_array_equal(v, before[k], err_msg="weights untouched")
    assert all(p.grad is None or not p.grad.numpy().any() for p in model.parameters()), (
        "grads cleared"
    )


def test_each_step_skipped_for_a_nan_warns_with_its_step_and_the_count_so_far() -> None:
    """A NaN loss skipped its update silently: only ``skipped_steps`` went up."""
    model = Bag()
    acc = GradientAccumulator(model, paddle.optimizer.SGD(0.1, parameters=model.parameters()))
    ids = paddle.to_tensor(np.ones((2, 3), dtype="int64"))
    with pytest.warns(RuntimeWarning) as caught:
        for bad in (True, False, True, True):
            loss = model(ids).sum()
            acc.backward(loss * float("nan") if bad else loss, count=2)
    said = [str(w.message) for w in caught if "NaN or inf" in str(w.message)]
    assert len(said) == 3, "once per skipped step"
    for text, (step, count) in zip(said, [(1, 1), (3, 2), (4, 3)], strict=True):
        assert text.startswith(f"optimizer step {step}: the loss or gradients are NaN or inf")
        assert f"{count} step(s) skipped so far" in text, text
    assert acc.skipped_steps == 3 and acc.optimizer_steps == 1


def test_grad_scaler_path_matches_plain_fp32_on_cpu() -> None:
    ds = Toy(40, seed=5)
    idx = np.arange(12)
    results = []
    for use_scaler in (False, True):
        paddle.seed(0)
        model = Bag()
        scaler = paddle.amp.GradScaler(init_loss_scaling=1024) if use_scaler else None
        acc = GradientAccumulator(
            model, paddle.optimizer.SGD(1.0, parameters=model.parameters()), scaler=scaler
        )
        ids, index = batch_of(ds, idx)
        acc.backward(per_sample_loss(model, ids, index).sum(), count=idx.size)
        results.append(params(model))
    for k in results[0]:
        np.testing.assert_allclose(results[0][k], results[1][k], atol=1e-5)


def test_scale_lr_and_bad_arguments() -> None:
    assert scale_lr(2e-5, 32, 32) == 2e-5
    with pytest.raises(ValueError, match="rule must be one of"):
        scale_lr(1e-3, 2, 1, rule="cubic")
    model = Bag()
    opt = paddle.optimizer.SGD(0.1, parameters=model.parameters())
    with pytest.raises(ValueError, match="target needs the sampler"):
        GradientAccumulator(model, opt, target=100)
    with pytest.raises(ValueError, match="unit must be one of"):
        GradientAccumulator(model, opt, unit="bytes")


def test_a_repeated_padding_batch_weighs_nothing() -> None:
    ds = Toy(2, seed=0)  # fewer samples than ranks: two of the four ranks get flagged repeats
    samplers = [
        dynbatch.DistributedDynamicBatchSampler(
            ds, lengths=ds.lengths, max_cost=1e9, num_replicas=4, rank=r
        )
        for r in range(4)
    ]
    assert sum(s.padding_mask().tolist() == [True] for s in samplers) == 2
    sampler = next(s for s in samplers if s.padding_mask()[0])
    model = Bag()
    before = params(model)
    acc = GradientAccumulator(
        model, paddle.optimizer.SGD(1.0, parameters=model.parameters()), sampler=sampler
    )
    for idx in sampler:
        ids, index = batch_of(ds, np.array(idx))
        with acc.accumulate():
            acc.backward(per_sample_loss(model, ids, index).sum(), count=len(idx))
    assert acc.last_count == 0, "the repeat adds no samples to the step"
    for k, v in params(model).items():
        np.testing.assert_array_equal(v, before[k], err_msg="and no gradient")


# -- following the sampler's passes ------------------------------------------------------------
def sgd_acc(sampler, target=None, unit="samples", lr=0.1, **kw):  # type: ignore[no-untyped-def]
    paddle.seed(0)
    model = Bag()
    opt = paddle.optimizer.SGD(lr, parameters=model.parameters())
    return (
        model,
        opt,
        GradientAccumulator(model, opt, sampler=sampler, target=target, unit=unit, **kw),
    )


def loader_of(ds: Toy, sampler, workers: int = 0) -> paddle.io.DataLoader:  # type: ignore[no-untyped-def]
    return paddle.io.DataLoader(
        ds,
        batch_sampler=sampler,
        num_workers=workers,
        collate_fn=dynbatch.Tuple(dynbatch.Pad(), dynbatch.Stack()),
    )


def train_pass(model, acc, loader, ds: Toy, start: int = 0, stop: int | None = None) -> list[int]:  # type: ignore[no-untyped-def]
    """Train over the loader; return the positions (in the epoch) of micro-batches that stepped."""
    stepped = []
    for k, (ids, index) in enumerate(loader, start):
        with acc.accumulate():
            tokens = int(ds.lengths[index.numpy()].sum())
            count = tokens if acc.unit == "tokens" else ids.shape[0]
            if acc.backward(per_sample_loss(model, ids, index).sum(), count=count):
                stepped.append(k)
        if stop is not None and k + 1 == stop:
            break
    return stepped


def expected_window_ends(counts: list[float], target: float) -> list[int]:
    """Positions whose micro-batch closes a window, computed here, not by dynbatch."""
    ends, acc = [], 0.0
    for k, c in enumerate(counts):
        acc += c
        if acc >= target or k == len(counts) - 1:
            ends.append(k)
            acc = 0.0
    return ends


def test_resumed_epoch_steps_after_the_same_micro_batches() -> None:
    ds = Toy(400, seed=7)
    opts = {"lengths": ds.lengths, "max_cost": 512, "cost": "linear", "seed": 3}
    sampler = dynbatch.DynamicBatchSampler(ds, **opts)
    model, _, acc = sgd_acc(sampler, target=1500, unit="tokens")
    full = train_pass(model, acc, loader_of(ds, sampler), ds)
    counts = [float(ds.lengths[b].sum()) for b in sampler.batches()]
    assert full == expected_window_ends(counts, 1500), "uninterrupted windows as computed here"
    resume_at = 7
    assert len(counts) > resume_at + 10
    state = sampler.state_dict(consumed_batches=resume_at)
    fresh = dynbatch.DynamicBatchSampler(ds, **opts)
    fresh.load_state_dict(state)
    model, _, acc = sgd_acc(fresh, target=1500, unit="tokens")
    resumed = train_pass(model, acc, loader_of(ds, fresh), ds, start=resume_at)
    assert resumed == [k for k in full if k >= resume_at], "the same steps after the resume"
    assert resumed[-1] == len(counts) - 1, "the last window of the epoch steps"


def test_passes_without_set_epoch_keep_updating() -> None:
    ds = Toy(20, seed=1)
    sampler = dynbatch.DynamicBatchSampler(
        ds, lengths=ds.lengths, max_cost=1e9, order="ascending", max_batch_size=4
    )
    model, _, acc = sgd_acc(sampler)
    steps = []
    for _ in range(3):
        train_pass(model, acc, loader_of(ds, sampler), ds)
        steps.append(acc.optimizer_steps)
    assert steps == [5, 10, 15], "every pass steps once per batch"


def test_an_abandoned_window_is_not_carried_into_the_next_pass() -> None:
    ds = Toy(60, seed=2)
    sampler = dynbatch.DynamicBatchSampler(ds, lengths=ds.lengths, max_cost=1e9, max_batch_size=4)
    model, _, acc = sgd_acc(sampler, target=1e9)  # one window: the whole epoch
    train_pass(model, acc, loader_of(ds, sampler), ds, stop=3)
    with pytest.warns(UserWarning, match="3 micro-batch"):
        train_pass(model, acc, loader_of(ds, sampler), ds)
    assert acc.optimizer_steps == 1 and acc.last_count == 60, "the full pass alone stepped"


def test_following_more_batches_than_the_epoch_has_is_an_error() -> None:
    ds = Toy(8, seed=2)
    sampler = dynbatch.DynamicBatchSampler(ds, lengths=ds.lengths, max_cost=1e9, max_batch_size=4)
    model, _, acc = sgd_acc(sampler)
    plan = sampler.batches()  # iterated by hand: the sampler never sees a second pass
    for _ in range(2):
        for idx in plan[: 1 if _ else len(plan)]:
            ids, index = batch_of(ds, idx)
            with (
                pytest.raises(ValueError, match="followed all 2 micro-batches")
                if _
                else (contextlib.nullcontext()),
                acc.accumulate(),
            ):
                acc.backward(per_sample_loss(model, ids, index).sum(), count=idx.size)


def test_an_epoch_without_batches_takes_no_steps() -> None:
    ds = Toy(3, seed=0)
    sampler = dynbatch.DynamicBatchSampler(
        ds, lengths=ds.lengths, max_cost=1e9, max_batch_size=4, drop_last=True
    )
    assert len(sampler) == 0
    _, _, acc = sgd_acc(sampler, target=100)
    assert acc.steps_per_epoch() == 0


@pytest.mark.parametrize("target", [None, 40.0])
def test_step_counts_over_a_run_are_exact(target: float | None) -> None:
    ds = Toy(300, seed=4)
    sampler = dynbatch.DynamicBatchSampler(
        ds, lengths=ds.lengths, max_cost=3 * 160**2, seed=1, order="shuffle"
    )
    model, _, acc = sgd_acc(sampler, target=target)
    announced_steps = acc.steps_for_epochs(range(5))
    announced_batches = sampler.len_for_epochs(range(5))
    batches, expected, per_epoch = 0, 0, []
    for epoch in range(5):
        sampler.set_epoch(epoch)
        sizes = [float(b.size) for b in sampler.batches()]
        expected += len(expected_window_ends(sizes, target)) if target else len(sizes)
        batches += len(sizes)
        before = acc.optimizer_steps
        train_pass(model, acc, loader_of(ds, sampler), ds)
        per_epoch.append(acc.optimizer_steps - before)
    assert acc.optimizer_steps == expected == announced_steps, "announced = counted here = done"
    assert announced_batches == batches
    assert len(set(per_epoch)) > 1, "epochs differ in steps, so a per-epoch guess would be wrong"


# -- mixed precision ------------------------------------------------------------------------------
class OverflowingScaler:
    """A stand-in with paddle.amp.GradScaler's interface: scale, unscale_, step, update.

    Paddle's GradScaler is a no-op on CPU ("can only be enabled on CUDAPlace"), so the
    overflow path can only be exercised here with a scaler whose loss scale really
    overflows float32: its scale is 1e39 on the micro-batches listed in ``overflow_at``.
    """

    def __init__(self, overflow_at: set[int]) -> None:
        self.overflow_at, self.calls = overflow_at, 0
        self.unscaled = self.stepped = self.updates = 0

    def scale(self, loss):  # type: ignore[no-untyped-def]
        factor = 1e39 if self.calls in self.overflow_at else 1.0
        self.calls += 1
        return loss * paddle.to_tensor(factor, dtype="float32")

    def unscale_(self, optimizer) -> None:  # type: ignore[no-untyped-def]
        self.unscaled += 1

    def step(self, optimizer) -> None:  # type: ignore[no-untyped-def]
        self.stepped += 1
        optimizer.step()

    def update(self) -> None:
        self.updates += 1


def test_an_amp_overflow_skips_the_step_and_tells_the_scaler() -> None:
    ds = Toy(40, seed=5)
    model = Bag()
    scaler = OverflowingScaler(overflow_at={1})
    acc = GradientAccumulator(
        model, paddle.optimizer.SGD(1.0, parameters=model.parameters()), scaler=scaler
    )
    snapshots = []
    for k in range(3):
        ids, index = batch_of(ds, np.arange(4 * k, 4 * k + 4))
        if k == 1:
            with pytest.warns(RuntimeWarning, match=r"optimizer step 2: .*fp16 overflow"):
                acc.backward(per_sample_loss(model, ids, index).sum(), count=4)
        else:
            acc.backward(per_sample_loss(model, ids, index).sum(), count=4)
        snapshots.append(params(model))
    assert acc.skipped_steps == 1 and acc.optimizer_steps == 2, "the overflowing step skipped"
    for name in snapshots[0]:
        np.testing.assert_array_equal(snapshots[1][name], snapshots[0][name], err_msg=name)
    assert not np.array_equal(snapshots[2]["out.weight"], snapshots[1]["out.weight"]), "then on"
    assert scaler.stepped == 2 and scaler.unscaled == 1, "the scaler saw the overflow"
    assert scaler.updates == 3, "and updated its scale every step"


# -- bad input ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"model": None}, TypeError, "model must be a paddle.nn.Layer"),
        ({"optimizer": None}, TypeError, "optimizer must be a paddle optimizer"),
        ({"sampler": "plain"}, TypeError, "sampler must be a dynbatch sampler"),
        ({"scaler": object()}, TypeError, "scaler must be a GradScaler"),
    ],
)
def test_bad_accumulator_arguments(kwargs: dict, error: type, message: str) -> None:
    model = Bag()
    args = {"model": model, "optimizer": paddle.optimizer.SGD(0.1, parameters=model.parameters())}
    with pytest.raises(error, match=message):
        GradientAccumulator(**{**args, **kwargs})


def test_a_plain_paddle_sampler_is_refused() -> None:
    ds = Toy(10)
    model = Bag()
    with pytest.raises(TypeError, match="sampler must be a dynbatch sampler"):
        GradientAccumulator(
            model,
            paddle.optimizer.SGD(0.1, parameters=model.parameters()),
            sampler=paddle.io.BatchSampler(ds, batch_size=2),
        )


def test_a_window_that_counts_nothing_is_skipped_and_counted() -> None:
    """Total 0 over all ranks: nothing to average over, so no step (see the accumulator's NOTE)."""
    model = Bag()
    before = params(model)
    acc = GradientAccumulator(model, paddle.optimizer.SGD(0.1, parameters=model.parameters()))
    ids = paddle.to_tensor(np.ones((2, 3), dtype="int64"))
    acc.backward(model(ids).sum(), count=paddle.to_tensor([0]))
    assert acc.skipped_steps == 1 and acc.optimizer_steps == 0 and acc.last_count == 0
    for k, v in params(model).items():
        np.testing.assert_array_equal(v, before[k], err_msg="weights untouched")


@pytest.mark.parametrize(
    ("loss", "count", "message"),
    [
        (None, 3, "loss_sum must be a paddle.Tensor"),
        (1.5, 3, "loss_sum must be a paddle.Tensor"),
        ("ok", -5, "count must be a finite number >= 0, got count=-5"),
        ("ok", float("nan"), "count=nan"),
        ("ok", "3", "count must be the number of samples"),
        ("ok", True, "count=True"),
        ("ok", paddle.to_tensor([-5.0]), r"count=-5.0 \(a paddle.Tensor\)"),
        ("ok", paddle.to_tensor([float("inf")]), r"count=inf \(a paddle.Tensor\)"),
    ],
)
def test_bad_backward_arguments(loss: object, count: object, message: str) -> None:
    model = Bag()
    acc = GradientAccumulator(model, paddle.optimizer.SGD(0.1, parameters=model.parameters()))
    if loss == "ok":
        loss = model(paddle.to_tensor(np.ones((2, 3), dtype="int64"))).sum()
    with pytest.raises((TypeError, ValueError), match=message):
        acc.backward(loss, count=count)


# -- a checkpoint in the middle of a window resumes exactly ----------------------------------------
def build_run(ds: Toy) -> tuple:
    sampler = dynbatch.DynamicBatchSampler(ds, lengths=ds.lengths, max_cost=2 * 160**2, seed=4)
    paddle.seed(0)
    model = Bag()
    opt = paddle.optimizer.Adam(1e-2, parameters=model.parameters())
    acc = GradientAccumulator(model, opt, sampler=sampler, target=2000, unit="tokens")
    return sampler, model, opt, acc


def train_epochs(
    ds: Toy, run: tuple, epochs: range, workers: int, stop_at: int | None
) -> dict | None:
    """Train; with ``stop_at``, return a checkpoint after that many micro-batches."""
    sampler, model, opt, acc = run
    done = 0
    for epoch in epochs:
        sampler.set_epoch(epoch)  # keeps a loaded position for the saved epoch
        position = sampler.current_pass().start if sampler.current_pass().serial == 0 else 0
        for ids, index in loader_of(ds, sampler, workers):
            with acc.accumulate():
                tokens = int(ds.lengths[index.numpy()].sum())
                acc.backward(per_sample_loss(model, ids, index).sum(), count=tokens)
            position += 1
            done += 1
            if done == stop_at:
                return {
                    "model": {k: v.numpy() for k, v in model.state_dict().items()},
                    "opt": opt.state_dict(),
                    "sampler": sampler.state_dict(consumed_batches=position),
                    "acc": acc.state_dict(),
                    "epoch": epoch,
                }
    return None


def run_with_checkpoint(ds: Toy, stop_at: int | None, workers: int) -> tuple[dict, dict]:
    """Two epochs of Adam with token windows; with ``stop_at``, checkpoint there and resume
    in fresh objects (each "process" under its own unique-name scope, as a new process)."""
    with paddle.utils.unique_name.guard():
        run = build_run(ds)
        state = train_epochs(ds, run, range(2), workers, stop_at)
    if state is not None:
        with paddle.utils.unique_name.guard():
            run = build_run(ds)
            sampler, model, opt, acc = run
            model.set_state_dict({k: paddle.to_tensor(v) for k, v in state["model"].items()})
            opt.set_state_dict(state["opt"])
            sampler.load_state_dict(state["sampler"])
            acc.set_state_dict(state["acc"])
            train_epochs(ds, run, range(state["epoch"], 2), workers, None)
    _, model, _, acc = run
    return params(model), {"steps": acc.optimizer_steps, "skipped": acc.skipped_steps}


@pytest.mark.parametrize("where", ["mid-window", "window boundary"])
def test_a_checkpoint_resumes_to_the_same_parameters(where: str) -> None:
    ds = Toy(160, seed=9)
    sampler = dynbatch.DynamicBatchSampler(ds, lengths=ds.lengths, max_cost=2 * 160**2, seed=4)
    tokens = [float(ds.lengths[b].sum()) for b in sampler.batches(0)]
    ends = expected_window_ends(tokens, 2000)
    # micro-batches done at the checkpoint: just after a window stepped, or inside one
    boundary = next(d for d in range(3, len(tokens)) if d - 1 in ends)
    mid = next(d for d in range(3, len(tokens)) if d - 1 not in ends)
    stop_at = boundary if where == "window boundary" else mid
    uninterrupted, steps = run_with_checkpoint(ds, None, workers=2)
    resumed, resumed_steps = run_with_checkpoint(ds, stop_at, workers=2)
    for name, value in uninterrupted.items():
        np.testing.assert_allclose(resumed[name], value, atol=1e-6, err_msg=name)
    assert resumed_steps == steps


def test_step_counts_need_an_iterable_of_epochs() -> None:
    ds = Toy(20)
    sampler = dynbatch.DynamicBatchSampler(ds, lengths=ds.lengths, max_cost=1e9)
    _, _, acc = sgd_acc(sampler)
    with pytest.raises(TypeError, match=r"such as range\(5\), got epochs=5"):
        acc.steps_for_epochs(5)
    with pytest.raises(TypeError, match=r"such as range\(5\)"):
        sampler.len_for_epochs(5)


# -- the plan's own updates (the fixed batch's recipe) ------------------------------------------
def test_the_plans_updates_are_exact_means_with_no_target() -> None:
    ds = Toy(200, seed=5)
    sampler = dynbatch.DynamicBatchSampler(ds, lengths=ds.lengths, batch_size=24, seed=1)
    ends = sampler.epoch_plan().window_ends
    assert ends is not None and ends[0] >= 2, "an update of several micro-batches"
    model, _, acc = sgd_acc(sampler, lr=1.0)
    start = params(model)
    first = sampler.batches()[: int(ends[0])]
    stepped = train_pass(model, acc, loader_of(ds, sampler), ds, stop=int(ends[0]))
    assert stepped == [int(ends[0]) - 1] and acc.optimizer_steps == 1, "at the plan's end"
    union = np.concatenate(list(first))
    assert acc.last_count == union.size
    ref = Bag()
    ref.set_state_dict({k: paddle.to_tensor(v) for k, v in start.items()})
    ids, index = batch_of(ds, union)
    per_sample_loss(ref, ids, index).mean().backward()
    after = params(model)
    for name, p in ref.named_parameters():
        np.testing.assert_allclose(after[name], start[name] - p.grad.numpy(), atol=1e-5)


def test_a_schedule_is_sized_from_the_sampler_before_the_optimizer() -> None:
    ds = Toy(150, seed=6)
    sampler = dynbatch.DynamicBatchSampler(ds, lengths=ds.lengths, batch_size=16, seed=3)
    total = sampler.steps_for_epochs(range(3))  # no optimizer yet
    schedule = paddle.optimizer.lr.PolynomialDecay(0.1, decay_steps=total, end_lr=0.0)
    paddle.seed(0)
    model = Bag()
    opt = paddle.optimizer.SGD(schedule, parameters=model.parameters())
    acc = GradientAccumulator(model, opt, sampler=sampler, lr_scheduler=schedule)
    assert acc.steps_for_epochs(range(3)) == total
    loader = loader_of(ds, sampler)
    for _ in range(3):  # no set_epoch: each pass plans the next epoch
        train_pass(model, acc, loader, ds)
    assert acc.optimizer_steps == total and schedule.last_epoch == total
    assert sampler.current_pass().epoch == 2


def test_a_target_on_top_of_the_plans_updates_is_refused() -> None:
    ds = Toy(40, seed=6)
    sampler = dynbatch.DynamicBatchSampler(ds, lengths=ds.lengths, batch_size=8)
    with pytest.raises(dynbatch.InputError, match="already makes updates of update_size=8"):
        sgd_acc(sampler, target=16)


# -- GradientAccumulator.backward: what it refuses -----------------------------------------
def _accumulator() -> tuple[Any, Any]:
    model = paddle.nn.Linear(2, 1)
    opt = paddle.optimizer.SGD(0.1, parameters=model.parameters())
    return model, dynbatch.GradientAccumulator(model, opt)


def test_accumulator_refuses_a_bool_tensor_count() -> None:
    """count=True is refused, and so is count=paddle.to_tensor(True) (it was taken as 1 token)."""
    model, acc = _accumulator()
    with pytest.raises(InputTypeError, match="count"):
        acc.backward(model(paddle.ones([3, 2])).sum(), count=paddle.to_tensor(True))


def test_accumulator_refuses_a_loss_sum_that_is_not_one_number() -> None:
    """A per-token loss vector as loss_sum is named (it failed inside paddle's ReshapeOp)."""
    model, acc = _accumulator()
    with pytest.raises(InputError, match="loss_sum"):
        acc.backward(model(paddle.ones([2, 2])).reshape([-1]), count=2)


def test_accumulator_refuses_a_detached_loss_sum() -> None:
    """A loss_sum off the graph would train nothing, yet the step was taken and counted (the
    Trainer's loss_and_count refuses the same thing)."""
    model, acc = _accumulator()
    with pytest.raises(InputError, match="loss_sum"):
        acc.backward(model(paddle.ones([2, 2])).sum().detach(), count=2)
