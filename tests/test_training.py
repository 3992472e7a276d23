"""Loss normalisation and accumulation: each update is the mean over its whole effective batch."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import paddle
import pytest

import dynbatch
from dynbatch.training import GradientAccumulator, accumulation_windows, scale_lr

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
    expected = acc.steps_per_epoch()
    counts = acc.step_counts()
    ends = accumulation_windows(counts, 64)
    sums = np.add.reduceat(counts, np.r_[0, ends[:-1]])
    assert (sums[:-1] >= 64).all(), "every window but the last reaches the target"
    for idx in sampler:
        ids, index = batch_of(ds, np.array(idx))
        with acc.accumulate():
            acc.backward(per_sample_loss(model, ids, index).sum(), count=len(idx))
    assert acc.optimizer_steps == expected, "as many steps as announced"


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
    with pytest.raises(ValueError, match="target needs the sampler"):
        GradientAccumulator(Bag(), None, target=100)
    with pytest.raises(ValueError, match="unit must be one of"):
        GradientAccumulator(Bag(), None, unit="bytes")


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
