"""The exact-mean update engine: every window's step is the mean over its real samples."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import paddle
import pytest

import dynbatch
from dynbatch.paddle.update import ExactMeanUpdate

sys.path.insert(0, str(Path(__file__).parent / "scripts"))
from toy import Bag, Toy, per_sample_loss


def batch_of(ds: Toy, idx: np.ndarray) -> tuple[paddle.Tensor, paddle.Tensor]:
    ids, index = dynbatch.Tuple(dynbatch.Pad(), dynbatch.Stack())([ds[int(i)] for i in idx])
    return paddle.to_tensor(ids), paddle.to_tensor(index)


def grads(model: paddle.nn.Layer) -> dict[str, np.ndarray]:
    return {n: p.grad.numpy().copy() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("seed", range(6))
def test_random_windows_with_repeats_and_nan_losses(seed: int) -> None:
    """Random micro-batch sizes, random repeats (even a NaN one), a NaN real batch sometimes."""
    rng = np.random.default_rng(seed)
    ds = Toy(200, seed=seed)
    paddle.seed(seed)
    model = Bag()
    opt = paddle.optimizer.SGD(0.5, parameters=model.parameters())
    engine = ExactMeanUpdate(model, world_size=1)
    for _ in range(4):
        micro = [rng.choice(len(ds), int(rng.integers(1, 9)), replace=False) for _ in range(5)]
        repeats = rng.random(len(micro)) < 0.3
        nan_at = int(rng.integers(len(micro))) if rng.random() < 0.4 else -1
        start = {k: v.numpy().copy() for k, v in model.state_dict().items()}
        for k, idx in enumerate(micro):
            with engine.micro_batch(last=k == len(micro) - 1):
                ids, index = batch_of(ds, idx)
                loss = per_sample_loss(model, ids, index).sum()
                if k == nan_at:
                    loss = loss * float("nan")
                engine.backward(loss, idx.size, padding=bool(repeats[k]))
        update = engine.close()
        real = [idx for idx, r in zip(micro, repeats, strict=True) if not r]
        assert update.count == sum(idx.size for idx in real), "repeats add no samples"
        assert update.finite == (nan_at < 0), "a NaN loss anywhere, even in a repeat, is caught"
        if update.applies:
            ref = Bag()
            ref.set_state_dict({k: paddle.to_tensor(v) for k, v in start.items()})
            ids, index = batch_of(ds, np.concatenate(real))
            per_sample_loss(ref, ids, index).mean().backward()
            for name, g in grads(ref).items():
                np.testing.assert_allclose(grads(model)[name], g, atol=1e-5, err_msg=name)
        engine.step(opt, update)
        after = {k: v.numpy() for k, v in model.state_dict().items()}
        changed = any(not np.array_equal(after[k], start[k]) for k in start)
        assert changed == update.applies, "a skipped window leaves the weights as they were"
        assert not grads(model) or not any(g.any() for g in grads(model).values()), "cleared"


def test_a_window_of_repeats_only_is_skipped() -> None:
    ds = Toy(10, seed=0)
    model = Bag()
    opt = paddle.optimizer.SGD(1.0, parameters=model.parameters())
    engine = ExactMeanUpdate(model, world_size=1)
    ids, index = batch_of(ds, np.arange(3))
    with engine.micro_batch(last=True):
        engine.backward(per_sample_loss(model, ids, index).sum(), 3, padding=True)
    update = engine.close()
    assert update.finite and update.count == 0 and not update.applies
    assert update.mean_loss == 0.0
    before = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    engine.step(opt, update)
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k])
