"""Defects an outside tester found in token losses: each test failed on the code before."""

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


# -- dynbatch.token_loss / loss_token_counts ---------------------------------------------------
def test_token_loss_ignored_positions_with_non_finite_logits_add_nothing() -> None:
    """Tokens without a loss 'add nothing' (docstring), yet a NaN/inf logit there (a padded or
    fully masked position) turns loss_sum into NaN: the mask multiplies instead of selecting."""
    logits = paddle.to_tensor([[[float("nan"), 0.0], [0.0, 0.0]]])  # position 0: no loss
    loss_sum, count = dynbatch.token_loss(logits, paddle.to_tensor([[-100, 1]]), shift=False)
    assert int(count) == 1
    assert np.isfinite(float(loss_sum)) and float(loss_sum) == pytest.approx(np.log(2), rel=1e-6)


def test_token_loss_is_not_capped_at_64_per_token() -> None:
    """A confidently wrong token's cross entropy is its logit gap; paddle's softmax clips the
    shifted logits at -64, so token_loss reports 64 for a loss of 100 (eval_loss, logged loss)."""
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
    """token_loss refuses shift='no'; loss_token_counts takes it as True and counts shifted."""
    with pytest.raises(InputTypeError, match="shift"):
        dynbatch.loss_token_counts([[1, 2, 3]], shift="no")


# -- GradientAccumulator.backward -------------------------------------------------------------
def _accumulator() -> tuple[Any, Any]:
    model = paddle.nn.Linear(2, 1)
    opt = paddle.optimizer.SGD(0.1, parameters=model.parameters())
    return model, dynbatch.GradientAccumulator(model, opt)


def test_accumulator_refuses_a_bool_tensor_count() -> None:
    """count=True is refused, but count=paddle.to_tensor(True) is taken as 1 token."""
    model, acc = _accumulator()
    with pytest.raises(InputTypeError, match="count"):
        acc.backward(model(paddle.ones([3, 2])).sum(), count=paddle.to_tensor(True))


def test_accumulator_refuses_a_loss_sum_that_is_not_one_number() -> None:
    """A per-token loss vector as loss_sum fails inside paddle's ReshapeOp, not with a message
    naming loss_sum."""
    model, acc = _accumulator()
    with pytest.raises(InputError, match="loss_sum"):
        acc.backward(model(paddle.ones([2, 2])).reshape([-1]), count=2)


def test_accumulator_refuses_a_detached_loss_sum() -> None:
    """A loss_sum off the graph trains nothing, yet the step is taken and counted (the Trainer's
    loss_and_count refuses the same thing)."""
    model, acc = _accumulator()
    with pytest.raises(InputError, match="loss_sum"):
        acc.backward(model(paddle.ones([2, 2])).sum().detach(), count=2)


# -- paddlenlp integration --------------------------------------------------------------------
def test_token_cross_entropy_refuses_a_model_returning_only_its_loss_in_a_tuple() -> None:
    """A model that returns (loss,) or ModelOutput(loss=...) without logits is told
    'per_sample_cross_entropy found no logits ... pass loss_fn=... -> per-sample losses', not
    that a loss alone is a mean that cannot be re-weighted."""
    pytest.importorskip("paddlenlp")
    from dynbatch.integrations.paddlenlp import token_cross_entropy

    labels = {"labels": paddle.to_tensor([[-100, 1, 2]])}
    with pytest.raises(InputError, match="only a loss") as info:
        token_cross_entropy((paddle.to_tensor(1.5),), labels)
    assert "per_sample_cross_entropy" not in str(info.value)


def _per_token_loss(outputs: Any, batch: Any) -> Any:
    """Per-token losses [n, seq - 1], 0 where the label is ignored (prompt and padding)."""
    logits = outputs[0] if isinstance(outputs, (tuple, list)) else outputs.logits
    labels = batch["labels"][:, 1:]
    mask = labels != -100
    safe = paddle.where(mask, labels, paddle.zeros_like(labels))
    losses = paddle.nn.functional.cross_entropy(
        logits[:, :-1], safe.unsqueeze(-1), reduction="none"
    ).squeeze(-1)
    return losses * mask.astype("float32")


def test_trainer_per_token_losses_with_loss_tokens_are_the_mean_over_loss_tokens(
    tmp_path: Path,
) -> None:
    """accumulate='tokens' is documented as the mean 'over its real tokens, the lengths or
    loss_tokens'; with correct loss_tokens and a per-token loss_fn, training_step counts the
    full lengths (loss_and_count gets run.sampler.lengths) and raises RuntimeError 'the window's
    count over all ranks is 154, the plan's 77'."""
    pytest.importorskip("paddlenlp")
    from lm_toy import Pairs, collate, reference_grads, scale, tiny_lm, worst
    from trainer_toy import make_args, make_recorder

    from dynbatch.integrations.paddlenlp import DynamicBatchTrainer

    ds = Pairs(32, seed=8)
    rec = make_recorder(grads=1)
    trainer = DynamicBatchTrainer(
        model=tiny_lm(),
        args=make_args(tmp_path, per_device_train_batch_size=8, max_steps=1),
        train_dataset=ds,
        data_collator=collate,
        lengths=ds.lengths,
        loss_tokens=ds.loss_tokens,
        accumulate="tokens",
        loss_fn=_per_token_loss,
        callbacks=[rec],
    )
    trainer.train()
    indices = np.concatenate(rec.windows[0].indices)
    ref = tiny_lm()
    ref.set_state_dict(rec.weights[0])
    expected = reference_grads(ref, ds, indices)
    assert worst(rec.grads[0], expected) < 1e-5 * max(1.0, scale(expected))


def test_trainer_does_not_apply_a_window_without_loss_tokens(tmp_path: Path) -> None:
    """NOTE [ one update engine ]: a window that holds nothing to average over is not applied
    on any rank, and the Trainer 'raises on the same verdict'. training_step only raises on a
    non-finite window: a window of count 0 goes to AdamW, whose momentum moves the weights
    (and the LR schedule steps), while GradientAccumulator skips the same window."""
    pytest.importorskip("paddlenlp")
    from lm_toy import Pairs, collate, tiny_lm
    from trainer_toy import make_args, make_recorder

    from dynbatch.integrations.paddlenlp import DynamicBatchTrainer, token_cross_entropy

    ds = Pairs(16, seed=3)
    for i in range(4, 8):  # the second window: no token carries a loss
        ds.labels[i] = np.full_like(ds.labels[i], -100)
    ds.loss_tokens = dynbatch.loss_token_counts(ds.labels)
    rec = make_recorder(grads=3)
    trainer = DynamicBatchTrainer(
        model=tiny_lm(),
        args=make_args(tmp_path, max_steps=2, per_device_train_batch_size=4),
        train_dataset=ds,
        data_collator=collate,
        lengths=ds.lengths,
        loss_tokens=ds.loss_tokens,
        accumulate="tokens",
        loss_fn=token_cross_entropy,
        max_cost=1000,
        cost="linear",
        order="none",
        max_batch_size=4,
        callbacks=[rec],
    )
    try:
        trainer.train()
    except (InputError, ValueError, RuntimeError):
        return  # refused, as the note says
    window = rec.windows[1]
    assert ds.loss_tokens[np.concatenate(window.indices)].sum() == 0, "precondition"
    after = {n: p.numpy() for n, p in trainer.model.state_dict().items()}
    moved = max(float(np.abs(after[n] - rec.weights[1][n]).max()) for n in after)
    assert moved == 0.0, f"a window without loss tokens moved the weights by {moved}"


def test_token_loss_with_no_loss_token_stays_finite_whatever_the_logits() -> None:
    """A micro-batch whose tokens are all ignored returned ``sum(logits) * 0``: NaN when any
    logit was NaN or inf (an fp16 overflow in padding), so the engine skipped the whole window."""
    logits = paddle.to_tensor([[[float("nan"), 0.0], [float("inf"), 0.0]]], stop_gradient=False)
    loss_sum, count = dynbatch.token_loss(logits, paddle.to_tensor([[-100, -100]]))
    assert int(count) == 0 and float(loss_sum) == 0.0
    loss_sum.backward()
    assert np.isfinite(logits.grad.numpy()).all()
