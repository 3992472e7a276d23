"""dynbatch.paddle.losses: the per-token cross entropy and its count, on any logits and labels.

Paddle only, no model: ``token_loss(logits, labels)`` against a numpy reference, the
counts ``loss_token_counts`` gives, bad input by name, and logits at their extremes (NaN
or inf where no loss is taken, confident mistakes). Training on token losses is in
tests/test_token_loss.py.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import paddle
import pytest

import dynbatch
from dynbatch import InputError, InputTypeError

sys.path.insert(0, str(Path(__file__).parent / "scripts"))
from lm_toy import IGNORE, Pairs  # numpy samples; its model alone needs paddlenlp


# -- the loss ----------------------------------------------------------------------------------
def numpy_token_loss(logits: np.ndarray, labels: np.ndarray, shift: bool) -> tuple[float, int]:
    if shift:
        logits, labels = logits[:, :-1], labels[:, 1:]
    flat, lab = logits.reshape(-1, logits.shape[-1]).astype(np.float64), labels.reshape(-1)
    keep = lab != IGNORE
    top = flat.max(axis=1, keepdims=True)
    logp = flat - top - np.log(np.exp(flat - top).sum(axis=1, keepdims=True))
    return float(-logp[keep, lab[keep]].sum()), int(keep.sum())


@pytest.mark.parametrize("shift", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_token_loss_is_the_summed_cross_entropy_of_the_tokens_with_a_loss(
    shift: bool, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    n, t, v = rng.integers(1, 5), rng.integers(1, 9), rng.integers(2, 30)
    logits = rng.normal(0, 3, (n, t, v)).astype(np.float32)
    labels = rng.integers(0, v, (n, t))
    labels[rng.random((n, t)) < 0.4] = IGNORE
    total, count = dynbatch.token_loss(
        paddle.to_tensor(logits), paddle.to_tensor(labels), shift=shift
    )
    expected, tokens = numpy_token_loss(logits, labels, shift)
    assert int(count) == tokens
    assert float(total) == pytest.approx(expected, rel=1e-5, abs=1e-5)
    assert str(count.dtype).endswith("int64") and total.shape == []


def test_loss_token_counts_match_what_token_loss_counts() -> None:
    ds = Pairs(30, seed=3)
    for i in range(len(ds)):
        item = ds[i]
        logits = paddle.zeros([1, item["input_ids"].size, 7])
        labels = np.where(item["labels"] == IGNORE, IGNORE, item["labels"] % 7)
        _, count = dynbatch.token_loss(logits, paddle.to_tensor(labels[None]))
        assert int(count) == ds.loss_tokens[i] == int((item["labels"][1:] != IGNORE).sum())
    assert dynbatch.loss_token_counts([[5, 6, 7]], shift=False).tolist() == [3]


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: dynbatch.token_loss([[1.0]], paddle.to_tensor([[1]])), InputTypeError, "logits"),
        (
            lambda: dynbatch.token_loss(paddle.zeros([1, 3, 4]), paddle.zeros([1, 3])),
            InputTypeError,
            "labels must be an integer",
        ),
        (
            lambda: dynbatch.token_loss(paddle.zeros([1, 3, 4]), paddle.to_tensor([[1, 2]])),
            InputError,
            r"labels have shape \[1, 2\]",
        ),
        (
            lambda: dynbatch.token_loss(paddle.zeros([1, 3, 4]), paddle.to_tensor([[1, 2, 4]])),
            InputError,
            r"token ids in \[0, 4\) or ignore_index=-100, got label 4 at flat position 1",
        ),
        (
            lambda: dynbatch.token_loss(
                paddle.zeros([1, 3, 4]), paddle.to_tensor([[1, 2, 3]]), shift="yes"
            ),
            InputTypeError,
            "shift must be True or False",
        ),
        (lambda: dynbatch.loss_token_counts([[1.5, 2.0]]), InputTypeError, r"labels\[0\]"),
        (lambda: dynbatch.loss_token_counts(7), InputTypeError, "sequence of label sequences"),
    ],
)
def test_bad_token_loss_input_is_named(call: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        call()


# -- extreme logits and labels -----------------------------------------------------------------
def test_token_loss_ignored_positions_with_non_finite_logits_add_nothing() -> None:
    """Tokens without a loss add nothing, even a NaN/inf logit there (a padded or fully masked
    position): loss_sum was NaN when the mask multiplied instead of selecting."""
    logits = paddle.to_tensor([[[float("nan"), 0.0], [0.0, 0.0]]])  # position 0: no loss
    loss_sum, count = dynbatch.token_loss(logits, paddle.to_tensor([[-100, 1]]), shift=False)
    assert int(count) == 1
    assert np.isfinite(float(loss_sum)) and float(loss_sum) == pytest.approx(np.log(2), rel=1e-6)


def test_token_loss_is_not_capped_at_64_per_token() -> None:
    """A confidently wrong token's cross entropy is its logit gap; paddle's softmax clips the
    shifted logits at -64, so token_loss reported 64 for a loss of 100 (eval_loss, logged loss)."""
    logits = paddle.to_tensor([[[0.0, 100.0]]])
    loss_sum, _ = dynbatch.token_loss(logits, paddle.to_tensor([[0]]), shift=False)
    assert float(loss_sum) == pytest.approx(100.0, rel=1e-5)


def test_token_loss_ignore_index_out_of_int64_is_named() -> None:
    """ignore_index=2**70 passed check_int (no upper bound) and failed inside paddle with a
    SystemError ('<method '__ne__' of 'Tensor' objects> returned a result with an exception
    set')."""
    with pytest.raises(InputError, match="ignore_index"):
        dynbatch.token_loss(
            paddle.zeros([1, 3, 4]), paddle.to_tensor([[1, 2, 3]]), ignore_index=2**70
        )


def test_loss_token_counts_checks_shift() -> None:
    """token_loss refuses shift='no'; loss_token_counts took it as True and counted shifted."""
    with pytest.raises(InputTypeError, match="shift"):
        dynbatch.loss_token_counts([[1, 2, 3]], shift="no")


def test_token_loss_with_no_loss_token_stays_finite_whatever_the_logits() -> None:
    """A micro-batch whose tokens are all ignored returned ``sum(logits) * 0``: NaN when any
    logit was NaN or inf (an fp16 overflow in padding), so the engine skipped the whole window."""
    logits = paddle.to_tensor([[[float("nan"), 0.0], [float("inf"), 0.0]]], stop_gradient=False)
    loss_sum, count = dynbatch.token_loss(logits, paddle.to_tensor([[-100, -100]]))
    assert int(count) == 0 and float(loss_sum) == 0.0
    loss_sum.backward()
    assert np.isfinite(logits.grad.numpy()).all()
