"""The exact-mean update: one engine for every loop (the accumulator and the Trainer).

NOTE [ one update engine ]
    An optimizer step over a window of micro-batches is the mean over every
    real sample (or token) of the window, on every rank: each micro-batch
    back-propagates the *sum* of its losses (a batch the distributed sampler
    repeated only to even out step counts weighs 0), ``no_sync`` skips the
    gradient all-reduce on all but the window's last micro-batch, and when the
    window closes one all-reduce of ``[count, loss sum, non-finite loss, non-
    finite gradients]`` gives every rank the same count and the same verdict.
    The gradients are then scaled by ``world_size / count``: ``DataParallel``
    averages over ranks, so the summed gradient becomes the global mean
    (NOTE [ normalising the loss ] in :mod:`dynbatch.paddle.training`). A window whose loss
    or gradients are NaN or inf on any rank, or that holds no samples, is not
    applied on any rank. The sums are float64: a window of more than 2**24
    tokens is still counted exactly.

    :class:`~dynbatch.GradientAccumulator` steps the optimizer through
    :meth:`ExactMeanUpdate.step`, which skips such a window and counts it.
    paddlenlp's Trainer steps the optimizer itself after ``training_step``,
    with no way to skip one step, so ``DynamicBatchTrainer`` raises on the same
    verdict (NOTE [ one update, one mean ] in :mod:`dynbatch.integrations.core.step`),
    unless fp16 loss scaling skips it. A window skipped for a NaN or inf is never
    silent: both loops warn through :meth:`ExactMeanUpdate.warn_skipped`, once per
    such window, with its step and the run's count of them so far.
    Where the windows end is the plan's business, in :mod:`dynbatch.plan.windows`.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._checks import InputError, InputTypeError
from .._optional import require

__all__ = ["ExactMeanUpdate", "Update"]


def _checked_count(paddle: Any, count: Any) -> Any:
    """``count`` (a number or a one-element tensor) as a float64 ``[1]`` tensor, once checked.

    Checked like a number, finite and >= 0 (NOTE [ counts on the device ] in
    :mod:`dynbatch.paddle.training`): a tensor is read on the host once.
    """
    if count is None:  # left out: say what it counts
        raise InputTypeError(
            "count must be given: the number of samples in this micro-batch that loss_sum sums "
            "over (or its loss tokens, with per-token losses), an int, float or paddle.Tensor, "
            "as in backward(losses.sum(), count=labels.shape[0]); got count=None"
        )
    if isinstance(count, paddle.Tensor):
        if count.dtype == paddle.bool:
            raise InputTypeError(
                "count must be the number of samples (or tokens) in the micro-batch, got a "
                "bool tensor"
            )
        if count.size != 1:
            raise InputError(f"count must be a single number, got a tensor of shape {count.shape}")
        value = float(count.astype("float64").numpy().reshape(-1)[0])
        if not (math.isfinite(value) and value >= 0):
            raise InputError(
                f"count must be a finite number >= 0, got count={value!r} (a paddle.Tensor)"
            )
        return count.astype("float64").reshape([1])
    if isinstance(count, (bool, np.bool_)) or not isinstance(count, numbers.Real):
        raise InputTypeError(
            f"count must be the number of samples (or tokens) in the micro-batch, an int, "
            f"float or paddle.Tensor, got count={count!r}"
        )
    value = float(count)
    if not (math.isfinite(value) and value >= 0):
        raise InputError(f"count must be a finite number >= 0, got count={count!r}")
    return paddle.to_tensor([value], dtype="float64")


def _checked_loss_sum(paddle: Any, loss_sum: Any) -> Any:
    """``loss_sum`` once checked: one float number, attached to the graph (or nothing trains)."""
    if not isinstance(loss_sum, paddle.Tensor):
        raise InputTypeError(
            "loss_sum must be a paddle.Tensor (the sum of the micro-batch's per-sample "
            f"losses, still attached to the graph), got {type(loss_sum).__name__}"
        )
    if loss_sum.size != 1:
        raise InputError(
            f"loss_sum must be one number (the micro-batch's losses summed), got a tensor of "
            f"shape {list(loss_sum.shape)}: sum the losses first"
        )
    if not paddle.is_floating_point(loss_sum) or loss_sum.stop_gradient:
        raise InputError(
            f"loss_sum must be a float tensor attached to the model's graph, got dtype "
            f"{loss_sum.dtype} with stop_gradient={loss_sum.stop_gradient}: nothing would be "
            "trained"
        )
    return loss_sum


@dataclass(frozen=True)
class Update:
    """The verdict on a closed window, the same on every rank.

    Attributes:
        count: samples (or tokens) of the window over all ranks, repeats excluded.
        loss_sum: the window's summed losses over all ranks.
        finite: no rank had a NaN or inf loss or gradient.
    """

    count: float
    loss_sum: float
    finite: bool

    @property
    def applies(self) -> bool:
        """Whether the optimizer should step: finite, and over at least one sample."""
        return self.finite and self.count > 0

    @property
    def mean_loss(self) -> float:
        """The window's mean loss (0 for a window without samples)."""
        return self.loss_sum / self.count if self.count > 0 else 0.0


class ExactMeanUpdate:
    """One optimizer window at a time: see NOTE [ one update engine ].

    Args:
        model: the model (``paddle.DataParallel`` or a plain layer).
        world_size: ranks that average gradients.
        scaler: a ``paddle.amp.GradScaler`` whose ``scale`` the losses go through.

    Use::

        for k, batch in enumerate(window):
            with engine.micro_batch(last=k == len(window) - 1):
                engine.backward(losses.sum(), count=n, padding=repeat)
        update = engine.close()          # all-reduce, verdict, gradients scaled
        engine.step(optimizer, update)   # or let a Trainer step
    """

    def __init__(self, model: Any, *, world_size: int, scaler: Any = None) -> None:
        self.paddle = require("paddle", "dynbatch.paddle.update")
        self.model, self.world_size, self.scaler = model, int(world_size), scaler
        self.open = 0  # micro-batches in the open window
        self._sums: Any = None  # [count, loss sum, non-finite losses] of the open window
        self._reset()

    def _reset(self) -> None:
        self._sums = self.paddle.zeros([3], dtype="float64")
        self.open = 0

    def discard(self) -> None:
        """Forget the open window's sums (the caller clears its gradients); no communication."""
        self._reset()

    @contextlib.contextmanager
    def micro_batch(self, *, last: bool) -> Iterator[None]:
        """Forward and backward of one micro-batch: ``no_sync`` unless it ends the window."""
        no_sync = getattr(self.model, "no_sync", None)
        if self.world_size > 1 and no_sync is not None and not last:
            with no_sync():
                yield
        else:
            yield

    def backward(self, loss_sum: Any, count: Any = None, *, padding: bool = False) -> None:
        """Back-propagate a micro-batch's summed losses over ``count`` (a float or a tensor).

        A ``padding`` micro-batch still runs backward (so every rank joins the
        gradient all-reduce) but weighs 0. ``loss_sum`` and ``count`` are checked
        before anything changes.
        """
        paddle = self.paddle
        loss_sum = _checked_loss_sum(paddle, loss_sum)
        count = _checked_count(paddle, count)
        if padding:
            loss_sum, count = loss_sum * 0.0, count * 0.0
        detached = loss_sum.detach().astype("float64").reshape([1])
        bad = paddle.logical_not(paddle.isfinite(detached)).astype("float64")
        self._sums = self._sums + paddle.concat([count, detached, bad])
        (self.scaler.scale(loss_sum) if self.scaler is not None else loss_sum).backward()
        self.open += 1

    def _grads_bad(self) -> Any:
        paddle = self.paddle
        finite = [
            paddle.isfinite(p.grad).all() for p in self.model.parameters() if p.grad is not None
        ]
        if not finite:
            return paddle.zeros([1], dtype="float64")
        return paddle.logical_not(paddle.stack(finite).all()).astype("float64").reshape([1])

    def close(self) -> Update:
        """End the window: one all-reduce, the verdict, and the gradients scaled if it applies."""
        paddle = self.paddle
        stats = paddle.concat([self._sums, self._grads_bad()])
        if self.world_size > 1:
            paddle.distributed.all_reduce(stats)
        count, loss_sum, bad, grads_bad = (float(x) for x in stats.numpy())
        update = Update(count=count, loss_sum=loss_sum, finite=bad == 0 and grads_bad == 0)
        if update.finite:
            factor = self.world_size / count if count > 0 else 0.0
            with paddle.no_grad():
                for p in self.model.parameters():
                    if p.grad is not None:
                        p.grad.scale_(factor)
        self._reset()
        return update

    def warn_skipped(self, update: Update, *, step: int, skipped: int) -> None:
        """Warn that optimizer step ``step`` is skipped for a NaN or inf (nothing if finite).

        ``skipped`` counts the run's skipped steps so far, this one included (a
        :class:`~dynbatch.GradientAccumulator`'s ``skipped_steps``). Every loop calls it
        once per closed window (NOTE [ one update engine ]).
        """
        if update.finite:
            return
        if self.scaler is not None:
            why = "an fp16 overflow: the loss scaler skips it and lowers its scale"
        else:
            why = "lower the learning rate, or look for a bad sample in the window"
        warnings.warn(
            f"optimizer step {step}: the loss or gradients are NaN or inf on some rank (loss "
            f"sum {update.loss_sum:g}), so its update is skipped on every rank; {skipped} "
            f"step(s) skipped so far ({why})",
            RuntimeWarning,
            stacklevel=3,
        )

    def step(self, optimizer: Any, update: Update, lr_scheduler: Any = None) -> None:
        """Apply ``update`` (or skip it) and clear the gradients; the scaler learns of overflows."""
        if update.applies:
            if self.scaler is not None:
                self.scaler.step(optimizer)
            else:
                optimizer.step()
        elif self.scaler is not None:
            self.scaler.unscale_(optimizer)  # lets the scaler see the overflow
        if self.scaler is not None:
            self.scaler.update()
        if update.applies and lr_scheduler is not None:
            lr_scheduler.step()
        optimizer.clear_grad()

    # -- checkpoints ---------------------------------------------------------------------------
    def window_state(self) -> dict[str, float]:
        """The open window's count, loss sum and non-finite flags (this rank)."""
        count, loss_sum, bad = (float(x) for x in self._sums.numpy())
        return {"count": count, "loss": loss_sum, "bad": bad}

    def restore_window(self, state: Mapping[str, Any], micro_batches: int) -> None:
        """Reopen a window saved by :meth:`window_state` (its gradients restored by the caller)."""
        values = [float(state["count"]), float(state.get("loss", 0.0)), float(state["bad"])]
        self._sums = self.paddle.to_tensor(values, dtype="float64")
        self.open = int(micro_batches)
