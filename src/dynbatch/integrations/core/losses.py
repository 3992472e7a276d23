"""Losses the Trainer can re-weight: per sample, per token, or a sum with its count.

The Trainer's own losses are means; a mean cannot be re-weighted into the mean
over an update's samples or tokens (it hides how many it averaged), so the
integration works on per-sample or per-token losses and sums them (NOTE [ one update engine ]
in :mod:`dynbatch.paddle.update`), or on a ``(loss_sum, count)`` pair
whose count comes from the batch, as :func:`token_cross_entropy` returns for a
language model with masked prompts (NOTE [ counting loss tokens ] in
:mod:`dynbatch.paddle.losses`).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import paddle
from numpy.typing import NDArray

from ..._checks import InputError, InputTypeError
from ...paddle.losses import IGNORE_INDEX, token_loss
from .seq2seq import is_encoder_decoder

__all__ = [
    "MEAN_REFUSED",
    "loss_and_count",
    "loss_fn_for",
    "mean_over",
    "per_sample_criterion",
    "per_sample_cross_entropy",
    "token_cross_entropy",
]

#: Why a mean loss is refused, for every message that refuses one.
MEAN_REFUSED = (
    "a mean over a micro-batch cannot be re-weighted into the update's mean over all its "
    "samples or tokens: it hides how many it averaged, and micro-batches of unequal lengths "
    "(and prompt shares) average over unequal counts"
)


def _logits(outputs: Any) -> Any:
    """The logits among a model's outputs; a model that returned only its (mean) loss is refused.

    A tensor, a ``logits`` field or attribute, or a tuple's first tensor that is not
    a 0-d loss (a model given its labels returns ``(loss, logits, ...)``).
    """
    logits: Any = None
    loss: Any = None
    if isinstance(outputs, paddle.Tensor):
        logits = outputs
    elif isinstance(outputs, (tuple, list)):
        logits = next((o for o in outputs if getattr(o, "ndim", 0) > 0), None)
        loss = next((o for o in outputs if isinstance(o, paddle.Tensor) and o.ndim == 0), None)
    else:
        logits = getattr(outputs, "logits", None)
        loss = getattr(outputs, "loss", None)
        if isinstance(outputs, Mapping):
            logits = outputs.get("logits") if logits is None else logits
            loss = outputs.get("loss") if loss is None else loss
    if isinstance(logits, paddle.Tensor) and logits.ndim == 0:
        logits, loss = None, logits
    if isinstance(logits, paddle.Tensor):
        return logits
    if isinstance(loss, paddle.Tensor):
        raise InputError(
            "the model returned only a loss, a single number: " + MEAN_REFUSED + ". Have it "
            "return its logits (a loss_fn reads the per-sample or per-token losses from them)"
        )
    raise InputTypeError(
        "found no logits in the model's outputs (a tensor, a 'logits' field or a tuple's "
        f"first tensor), got {type(outputs).__name__}; pass loss_fn=callable(outputs, batch) "
        "returning per-sample losses or (loss_sum, count)"
    )


def per_sample_cross_entropy(
    outputs: Any, batch: Mapping[str, Any], *, label_key: str = "labels"
) -> Any:
    """Cross entropy of each sample (``reduction="none"``): the default ``loss_fn``.

    ``outputs`` are the model's logits (a tensor, a ``logits`` field or a
    tuple's first item, shape ``[n, classes]``); the labels are
    ``batch[label_key]``, shape ``[n]`` or ``[n, 1]``. Returns shape ``[n]``.

    >>> logits = paddle.to_tensor([[2.0, 0.0], [0.0, 2.0]])
    >>> losses = per_sample_cross_entropy(logits, {"labels": paddle.to_tensor([0, 0])})
    >>> [round(float(x), 4) for x in losses]
    [0.1269, 2.1269]
    """
    if not isinstance(batch, Mapping) or label_key not in batch:
        fields = sorted(batch) if isinstance(batch, Mapping) else type(batch).__name__
        raise InputError(
            f"the default loss_fn (per-sample cross entropy) needs the field {label_key!r} in "
            f"every batch, got {fields}; name the label field in TrainingArguments(label_names="
            "[...]) or pass loss_fn=callable(outputs, batch) -> per-sample losses"
        )
    labels = batch[label_key]
    if not isinstance(labels, paddle.Tensor):
        labels = paddle.to_tensor(np.asarray(labels))
    losses = paddle.nn.functional.cross_entropy(
        _logits(outputs), labels.reshape([-1]).astype("int64"), reduction="none"
    )
    return losses.reshape([-1])


def per_sample_criterion(criterion: Any) -> Callable[..., Any]:
    """A ``loss_fn`` from a loss layer with a ``reduction``, on a per-sample copy of it.

    paddlenlp's Trainer calls ``criterion(logits, labels)`` and takes its mean;
    a mean cannot be re-weighted into the mean over an update's samples, so the
    copy is set to ``reduction="none"``.
    """
    if not callable(criterion) or not isinstance(getattr(criterion, "reduction", None), str):
        raise InputTypeError(
            "criterion must be a loss layer with a reduction attribute (such as "
            "paddle.nn.CrossEntropyLoss()) that can be set to 'none' for per-sample losses; "
            f"got criterion={criterion!r}. Or pass loss_fn=callable(outputs, batch) -> "
            "per-sample losses"
        )
    per_sample = copy.copy(criterion)
    per_sample.reduction = "none"

    def loss_fn(outputs: Any, batch: Mapping[str, Any], *, label_key: str = "labels") -> Any:
        if not isinstance(batch, Mapping) or label_key not in batch:
            raise InputError(
                f"criterion needs the label field {label_key!r} in every batch; name it in "
                "TrainingArguments(label_names=[...])"
            )
        losses = per_sample(_logits(outputs), batch[label_key])
        return losses.reshape([losses.shape[0], -1]).sum(axis=1)  # [n] or [n, 1] -> [n]

    return loss_fn


def token_cross_entropy(
    outputs: Any,
    batch: Mapping[str, Any],
    *,
    label_key: str = "labels",
    shift: bool = True,
    ignore_index: int = IGNORE_INDEX,
) -> tuple[Any, Any]:
    """A ``loss_fn`` for language models: ``(loss_sum, count)`` over the tokens with a loss.

    :func:`dynbatch.token_loss` on the model's logits (``[n, seq, vocab]``) and
    ``batch[label_key]`` (``[n, seq]``, prompts and padding ``ignore_index``),
    shifted for a causal LM (``shift=False`` for labels that line up with the
    logits: a seq2seq decoder's, and paddlenlp's causal-LM data, whose labels
    are already the ids moved left by one; see :func:`dynbatch.token_loss`).
    The count comes from the batch, so each update is the exact mean over its
    loss tokens (a micro-batch's mean would hide how many tokens it averaged).

    Args:
        outputs: the model's outputs: the logits, a ``logits`` field or attribute, or a
            tuple whose first tensor that is not a 0-d loss is the logits.
        batch: the micro-batch as collated, with the token labels.
        label_key: the field of ``batch`` holding the labels.
        shift: the labels line up with the input ids, so a causal LM's logits at ``t``
            predict the label at ``t + 1``; False for labels already moved left by one.
        ignore_index: the label of a token without a loss.

    >>> logits = paddle.zeros([1, 3, 4])
    >>> s, n = token_cross_entropy(logits, {"labels": paddle.to_tensor([[-100, 2, 3]])})
    >>> round(float(s), 4), int(n)
    (2.7726, 2)
    """  # NOTE [ counting loss tokens ] in dynbatch.paddle.losses
    if not isinstance(batch, Mapping) or label_key not in batch:
        fields = sorted(batch) if isinstance(batch, Mapping) else type(batch).__name__
        raise InputError(
            f"token_cross_entropy needs the token labels {label_key!r} in every batch, got "
            f"{fields}; the Trainer's default reads TrainingArguments(label_names=[...])'s "
            "first, and a loss_fn of yours names its field: "
            "functools.partial(token_cross_entropy, label_key=...)"
        )
    return token_loss(_logits(outputs), batch[label_key], ignore_index=ignore_index, shift=shift)


def loss_and_count(
    losses: Any, indices: NDArray[Any], lengths: NDArray[Any], unit: str
) -> tuple[Any, Any, bool]:
    """A micro-batch's summed losses, what they count, and whether the count is the batch's.

    ``losses`` is what ``loss_fn`` returned for the samples ``indices``: a
    ``(loss_sum, count)`` pair (the count from the batch, e.g. its loss
    tokens), or per-sample losses ``[n]`` (counted as ``n`` samples, or under
    ``unit="tokens"`` weighed and counted by ``lengths``), or per-token losses
    ``[n, ...]`` (padding 0, counted by ``lengths``; ``unit="tokens"`` only).
    A mean is refused (NOTE [ one update, one mean ] in :mod:`.step`).
    """
    if isinstance(losses, tuple):
        if len(losses) != 2:
            raise InputError(
                f"loss_fn returned a tuple of {len(losses)}; a pair (loss_sum, count) is what a "
                "loss_fn may return besides per-sample or per-token losses"
            )
        total, count = losses
        if not isinstance(total, paddle.Tensor) or total.size != 1:
            got = f"shape {list(total.shape)}" if isinstance(total, paddle.Tensor) else total
            raise InputError(
                f"loss_fn returned (loss_sum, count) whose loss_sum is not one number: {got}"
            )
        if isinstance(count, paddle.Tensor):
            one, got = count.size == 1, f"a tensor of shape {list(count.shape)}"
        else:
            one, got = isinstance(count, (int, float)) and not isinstance(count, bool), repr(count)
        if not one:
            raise InputError(
                f"loss_fn returned (loss_sum, count) whose count is {got}; the count must be "
                "one number: the tokens (or samples) loss_sum is summed over"
            )
        _check_trainable(total)
        return total.reshape([]), count, True
    n = int(indices.size)
    shape = list(getattr(losses, "shape", []))
    if isinstance(losses, paddle.Tensor) and not shape:
        raise InputError(
            f"loss_fn returned one number, a mean of the micro-batch's {n} samples: "
            + MEAN_REFUSED
            + ". Return one loss per sample (shape [n]), per token ([n, ...], padding 0), or "
            "(loss_sum, count) as token_cross_entropy (from the Trainer's package) does"
        )
    if not isinstance(losses, paddle.Tensor) or shape[0] != n:
        got = f"shape {shape}" if isinstance(losses, paddle.Tensor) else type(losses).__name__
        raise InputError(
            f"loss_fn must return the losses of each of the micro-batch's {n} samples, shape "
            f"[{n}] (or [{n}, ...] per token, with accumulate='tokens'), or (loss_sum, count); "
            f"got {got}"
        )
    _check_trainable(losses)
    count = float(n if unit == "samples" else lengths[indices].sum())
    per_sample = len(shape) == 1 or (len(shape) == 2 and shape[1] == 1)
    if per_sample:
        losses = losses.reshape([-1])
        if unit == "tokens":
            weights = lengths[indices].astype(np.float32)
            return (losses * paddle.to_tensor(weights, dtype=losses.dtype)).sum(), count, False
    elif unit == "samples":
        raise InputError(
            f"loss_fn returned per-token losses (shape {shape}); with accumulate='samples' it "
            f"must return one loss per sample, shape [{n}] (or use accumulate='tokens', or "
            "return (loss_sum, count))"
        )
    return losses.sum(), count, False


def _check_trainable(losses: Any) -> None:
    detached = losses.stop_gradient and paddle.is_grad_enabled()  # eval runs without grad
    if not paddle.is_floating_point(losses) or detached:
        raise InputError(
            f"loss_fn must return differentiable float losses (attached to the model's "
            f"graph), got dtype {losses.dtype} with stop_gradient={losses.stop_gradient}: "
            "nothing would be trained"
        )


def loss_fn_for(
    loss_fn: Any, criterion: Any, model: Any = None
) -> Callable[[str], Callable[..., Any]]:
    """The loss to train with, given the label field: ``loss_fn``, a per-sample
    ``criterion``, or by default :func:`token_cross_entropy` for a causal LM (a
    ``...ForCausalLM``: its logits are per token), the same without a shift for an
    encoder–decoder (a ``...ForConditionalGeneration``: its labels line up with its
    logits, NOTE [ the Trainer on pairs ] in :mod:`.seq2seq`) and
    :func:`per_sample_cross_entropy` for anything else."""
    if loss_fn is not None and not callable(loss_fn):
        raise InputTypeError(
            "loss_fn must be a callable (outputs, batch) -> per-sample losses, got "
            f"loss_fn={loss_fn!r}"
        )
    default: Callable[..., Any] = per_sample_cross_entropy
    if type(model).__name__.endswith("ForCausalLM"):
        default = token_cross_entropy
    elif is_encoder_decoder(model):
        default = functools.partial(token_cross_entropy, shift=False)
    if criterion is not None:
        if loss_fn is not None:
            raise InputError("give loss_fn or criterion, not both")
        default = per_sample_criterion(criterion)

    def for_label(label_key: str) -> Callable[..., Any]:
        return loss_fn if loss_fn is not None else functools.partial(default, label_key=label_key)

    return for_label


def mean_over(loss_fn: Any, given: bool, unit: str, loss_tokens: bool) -> str:
    """What a step's loss is the mean over, in words, for the Trainer's log.

    ``loss_fn`` is the loss trained with (``given``: the user's own), ``unit`` what
    updates count, ``loss_tokens`` whether per-sample loss tokens were given (then
    ``"tokens"`` count them). :func:`token_cross_entropy` (the default of a packed
    causal LM) is the per-token mean over the loss tokens whatever the updates are
    cut on; a loss of the user's may return ``(loss_sum, count)``, which is only seen
    when it runs, so its line says both.

    >>> mean_over(per_sample_cross_entropy, False, "samples", False)
    'its loss the mean over its samples'
    >>> mean_over(functools.partial(token_cross_entropy, shift=False), True, "samples", True)
    'its loss the per-token mean over its loss tokens (the count token_cross_entropy returns)'
    """
    base = loss_fn.func if isinstance(loss_fn, functools.partial) else loss_fn
    if base is token_cross_entropy:
        return (
            "its loss the per-token mean over its loss tokens (the count token_cross_entropy "
            "returns)"
        )
    tokens = "loss tokens" if loss_tokens else "tokens"
    what = "samples" if unit == "samples" else tokens
    if given:
        return (
            f"its loss the mean over its {what} (or over the count loss_fn returns, if it "
            "returns (loss_sum, count))"
        )
    if unit == "samples":
        return "its loss the mean over its samples"
    weight = "loss tokens" if loss_tokens else "length"
    return f"its loss the mean over its {what} (each sample's loss weighed by its {weight})"
