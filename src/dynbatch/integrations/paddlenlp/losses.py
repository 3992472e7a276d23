"""Per-sample losses: the default ``loss_fn``, a ``criterion`` made per-sample, and their sum.

The Trainer's own losses are means; a mean cannot be re-weighted into the mean
over an update's samples, so the integration works on per-sample (or
per-token) losses and sums them (NOTE [ one update engine ] in :mod:`dynbatch.update`).
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

__all__ = ["loss_fn_for", "loss_sum", "per_sample_criterion", "per_sample_cross_entropy"]


def _logits(outputs: Any) -> Any:
    if isinstance(outputs, paddle.Tensor):
        return outputs
    logits = getattr(outputs, "logits", None)
    if logits is None and isinstance(outputs, Mapping):
        logits = outputs.get("logits")
    if logits is None and isinstance(outputs, (tuple, list)) and outputs:
        logits = outputs[0]
    if not isinstance(logits, paddle.Tensor):
        raise InputTypeError(
            "per_sample_cross_entropy found no logits in the model's outputs (a tensor, a "
            f"'logits' field or a tuple's first item), got {type(outputs).__name__}; pass "
            "loss_fn=callable(outputs, batch) -> per-sample losses"
        )
    return logits


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


def loss_sum(losses: Any, indices: NDArray[Any], lengths: NDArray[Any], unit: str) -> Any:
    """A micro-batch's summed losses, per sample or token (NOTE [ one update, one mean ]).

    ``losses`` is what ``loss_fn`` returned for the samples ``indices``; under
    ``unit="tokens"`` a per-sample loss weighs each sample by its length.
    """
    n = int(indices.size)
    shape = list(getattr(losses, "shape", []))
    if not isinstance(losses, paddle.Tensor) or not shape or shape[0] != n:
        got = f"shape {shape}" if isinstance(losses, paddle.Tensor) else type(losses).__name__
        raise InputError(
            f"loss_fn must return the losses of each of the micro-batch's {n} samples, shape "
            f"[{n}] (or [{n}, ...] per token, with accumulate='tokens'), not a mean; got {got}"
        )
    detached = losses.stop_gradient and paddle.is_grad_enabled()  # eval runs without grad
    if not paddle.is_floating_point(losses) or detached:
        raise InputError(
            f"loss_fn must return differentiable float losses (attached to the model's "
            f"graph), got dtype {losses.dtype} with stop_gradient={losses.stop_gradient}: "
            "nothing would be trained"
        )
    per_sample = len(shape) == 1 or (len(shape) == 2 and shape[1] == 1)
    if per_sample:
        losses = losses.reshape([-1])
        if unit == "tokens":
            weights = lengths[indices].astype(np.float32)
            return (losses * paddle.to_tensor(weights, dtype=losses.dtype)).sum()
    elif unit == "samples":
        raise InputError(
            f"loss_fn returned per-token losses (shape {shape}); with accumulate='samples' it "
            f"must return one loss per sample, shape [{n}] (or use accumulate='tokens')"
        )
    return losses.sum()


def loss_fn_for(loss_fn: Any, criterion: Any) -> Callable[[str], Callable[..., Any]]:
    """The loss to train with, given the label field: ``loss_fn``, a per-sample
    ``criterion``, or :func:`per_sample_cross_entropy`."""
    if loss_fn is not None and not callable(loss_fn):
        raise InputTypeError(
            "loss_fn must be a callable (outputs, batch) -> per-sample losses, got "
            f"loss_fn={loss_fn!r}"
        )
    default: Callable[..., Any] = per_sample_cross_entropy
    if criterion is not None:
        if loss_fn is not None:
            raise InputError("give loss_fn or criterion, not both")
        default = per_sample_criterion(criterion)

    def for_label(label_key: str) -> Callable[..., Any]:
        return loss_fn if loss_fn is not None else functools.partial(default, label_key=label_key)

    return for_label
