"""Token-level losses for language models: the summed cross entropy and its count.

NOTE [ counting loss tokens ]
    Fine-tuning a language model trains on some tokens only: a prompt's
    labels are the ignore index (-100), so are padding's, and a causal LM
    predicts token ``t + 1`` from the tokens up to ``t`` (the shift), so a
    sample of ``L`` tokens has at most ``L - 1`` losses. The update must be the
    mean over the *loss tokens* of all its micro-batches and ranks (what HF's
    Trainer calls ``num_items_in_batch``). A micro-batch's mean loss cannot be
    re-weighted into it: the mean hides how many tokens it averaged, and
    micro-batches of unequal lengths and prompt shares average over unequal
    counts. So :func:`token_loss` returns the *sum* and the *count*, and the
    update engine (NOTE [ one update engine ] in :mod:`dynbatch.paddle.update`) adds
    both over the window and all ranks before it divides.

    The count comes from the batch, on the device. Where it must be known
    before training (updates cut on a token budget, ``steps_for_epochs`` for
    the LR schedule), give the samplers (and :func:`~dynbatch.like_fixed`, the
    Trainer) ``loss_tokens=``: per sample, how many of its tokens carry a loss.
    Updates in ``"tokens"`` then count those, while the cost (memory) still
    plans on the full ``lengths``: every token runs through the model, labelled
    or not. For a causal LM whose prompt of ``p`` tokens is masked, a sample of
    ``L`` tokens has ``L - p`` loss tokens: the shift drops the first token,
    whose label is part of the prompt. :func:`loss_token_counts` counts them
    from the labels.

    Memory: :func:`token_loss` takes the float32 log-softmax of the rows with
    a loss only, so a step's peak grows a little with its loss tokens. A
    :class:`~dynbatch.MemoryCost` calibrated on steps where every token has a
    loss is an upper bound for any masking; calibrated on masked steps, it
    holds for masks like those (the answer share of the calibration data).
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._checks import InputError, InputTypeError
from .._optional import require

__all__ = ["IGNORE_INDEX", "loss_token_counts", "token_loss"]

#: The label of a token without a loss (paddle's and paddlenlp's default ignore index).
IGNORE_INDEX = -100


def token_loss(
    logits: Any, labels: Any, *, ignore_index: int = IGNORE_INDEX, shift: bool = True
) -> tuple[Any, Any]:
    """The summed per-token cross entropy and the number of tokens it sums, as tensors.

    Tokens whose (shifted) label is ``ignore_index`` add nothing to either.
    Pass both to ``backward(loss_sum, count=count)``
    (:meth:`~dynbatch.GradientAccumulator.backward`) and the update is the exact mean
    over the loss tokens of all its micro-batches and ranks: a micro-batch's mean loss would
    hide how many tokens it averaged, and micro-batches average over unequal counts.

    Args:
        logits: ``[batch, seq, vocab]`` (any leading shape), float.
        labels: ``[batch, seq]``, integer token ids or ``ignore_index``.
        ignore_index: the label of a token without a loss.
        shift: a causal LM's logits at ``t`` predict the label at ``t + 1``
            (labels that equal the input ids, as HF's models take them);
            ``False`` when ``labels`` already line up with the logits: a seq2seq
            decoder's, and **paddlenlp's own causal-LM data**, whose labels are
            the ids moved left by one (its criterion does not shift). Shifting
            such labels again trains every token on the one after its target,
            with no error: check which convention your data follows.

    Returns:
        ``(loss_sum, count)``: a float32 scalar attached to the graph, and an
        int64 scalar.

    >>> import paddle
    >>> logits = paddle.zeros([1, 3, 4])  # uniform over 4 tokens: each loss is ln 4
    >>> loss_sum, count = token_loss(logits, paddle.to_tensor([[-100, 2, 3]]))
    >>> round(float(loss_sum), 4), int(count)
    (2.7726, 2)
    """
    paddle = require("paddle", "token_loss")
    if not isinstance(logits, paddle.Tensor) or not paddle.is_floating_point(logits):
        raise InputTypeError(
            f"logits must be a float paddle.Tensor [batch, seq, vocab], got {_describe(logits)}"
        )
    if not isinstance(labels, paddle.Tensor) or not _is_integer(paddle, labels):
        raise InputTypeError(
            f"labels must be an integer paddle.Tensor [batch, seq], got {_describe(labels)}"
        )
    ignore_index, shift = _checked_label_options(ignore_index, shift)
    if logits.ndim < 2 or list(logits.shape[:-1]) != list(labels.shape):
        raise InputError(
            f"logits must be labels' shape plus the vocabulary: labels have shape "
            f"{list(labels.shape)}, so logits need {[*labels.shape, 'vocab']}, got "
            f"{list(logits.shape)}"
        )
    vocab = int(logits.shape[-1])
    if shift:
        logits, labels = logits[..., :-1, :], labels[..., 1:]
    flat_labels = labels.reshape([-1]).astype("int64")
    has_loss = flat_labels != ignore_index
    count = has_loss.astype("int64").sum()
    rows = paddle.nonzero(has_loss).reshape([-1])  # one read on the host, as the check below
    if rows.shape[0] == 0:  # nothing to learn: 0, attached to the graph through one logit
        first = logits.reshape([-1])[:1].astype("float32")  # finite even if it is NaN or inf
        zero = paddle.where(paddle.isfinite(first), first, paddle.zeros_like(first))
        return zero.sum() * 0.0, count
    targets = paddle.gather(flat_labels, rows)
    outside = (targets < 0) | (targets >= vocab)
    if bool(outside.any()):  # a GPU would assert or read garbage
        at = int(rows[paddle.nonzero(outside)[0]])
        raise InputError(
            f"labels must be token ids in [0, {vocab}) or ignore_index={ignore_index}, got "
            f"label {int(flat_labels[at])} at flat position {at} (after the shift)"
        )
    # only the rows with a loss: a masked prompt costs no float32 copy, and a NaN in an
    # ignored row (padding) cannot reach the sum or the gradients
    picked = paddle.gather(logits.reshape([-1, vocab]), rows).astype("float32")
    chosen = paddle.take_along_axis(picked, targets.reshape([-1, 1]), axis=1).reshape([-1])
    return (paddle.logsumexp(picked, axis=-1) - chosen).sum(), count


def loss_token_counts(
    labels: Any, *, ignore_index: int = IGNORE_INDEX, shift: bool = True
) -> NDArray[np.int64]:
    """Each sample's loss tokens, from its labels: the ``loss_tokens=`` of the samplers.

    With ``shift``, a sample's first label is never predicted and not counted.

    Args:
        labels: one label sequence per sample (lists or arrays, any lengths).
        ignore_index: the label of a token without a loss (a masked prompt's, padding's).
        shift: the labels are the input ids, so a causal LM predicts label ``t + 1`` at ``t``
            (as :func:`token_loss`'s ``shift``); ``False`` for labels already moved left.

    >>> loss_token_counts([[-100, -100, 7, 8], [-100, 5]]).tolist()
    [2, 1]
    """
    ignore_index, shift = _checked_label_options(ignore_index, shift)
    if isinstance(labels, (str, bytes)) or not hasattr(labels, "__iter__"):
        raise InputTypeError(
            f"labels must be a sequence of label sequences (one per sample), got {labels!r:.80}"
        )
    counts = []
    for i, sample in enumerate(labels):
        arr = np.asarray(sample)
        if arr.ndim != 1 or arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
            raise InputTypeError(
                f"labels[{i}] must be a 1-D sequence of integer labels, got {sample!r:.80}"
            )
        counts.append(int(np.count_nonzero(arr[1 if shift else 0 :] != ignore_index)))
    return np.asarray(counts, dtype=np.int64)


def _checked_label_options(ignore_index: Any, shift: Any) -> tuple[int, bool]:
    if isinstance(ignore_index, (bool, np.bool_)) or not isinstance(ignore_index, numbers.Integral):
        raise InputTypeError(
            f"ignore_index must be an integer label (-100 by default), got "
            f"ignore_index={ignore_index!r}"
        )
    if not -(2**63) <= int(ignore_index) < 2**63:
        raise InputError(
            f"ignore_index must fit an int64 label (-100 by default), got "
            f"ignore_index={ignore_index!r}"
        )
    if not isinstance(shift, (bool, np.bool_)):
        raise InputTypeError(f"shift must be True or False, got shift={shift!r}")
    return int(ignore_index), bool(shift)


def _is_integer(paddle: Any, tensor: Any) -> bool:
    return tensor.dtype in (paddle.int64, paddle.int32, paddle.int16, paddle.int8, paddle.uint8)


def _describe(value: Any) -> str:
    dtype = getattr(value, "dtype", None)
    return f"{type(value).__name__}" + ("" if dtype is None else f" of dtype {dtype}")
