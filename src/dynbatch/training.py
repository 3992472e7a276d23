"""Training with dynamic batches: each update is the mean over its whole effective batch.

NOTE [ normalising the loss ]
    With dynamic batches a per-batch mean loss weights a batch of 3 long
    samples like a batch of 800 short ones: each of the 3 samples moves the
    weights ~270 times more, which is how dynamic batching produced the NaN
    losses of the original study. The right update is the mean over *every
    sample (or token) in the optimizer step*: over all accumulated
    micro-batches and all data-parallel ranks. :class:`GradientAccumulator`
    therefore takes the *sum* of the per-sample losses and their count,
    back-propagates the sum, and before stepping scales the gradients by
    ``world_size / global_count`` — ``DataParallel`` averages gradients over
    ranks, so this turns the summed gradient into the exact global mean. The
    global count is one all-reduce per optimizer step, together with a
    non-finite flag so that every rank skips the same steps.

NOTE [ accumulating to a budget ]
    The optimizer steps when the accumulated samples (or tokens) of all ranks
    reach ``target``. The windows are cut on the *plan* (the sampler knows
    every rank's batches for the epoch), so all ranks step at the same
    micro-batch with no communication, ``DataParallel.no_sync()`` can skip the
    gradient all-reduce on the micro-batches that do not end a window, and the
    number of optimizer steps per epoch is known before the epoch starts.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ._checks import check_choice, check_positive_number
from ._optional import require

__all__ = ["GradientAccumulator", "accumulation_windows", "scale_lr"]


def scale_lr(base_lr: float, batch: float, reference_batch: float, rule: str = "linear") -> float:
    """Scale a learning rate tuned at ``reference_batch`` to ``batch`` (samples or tokens).

    ``"linear"`` (Goyal et al.: lr grows with the batch, for SGD) or ``"sqrt"``
    (often better for Adam).

    >>> scale_lr(1e-4, 64, 16), scale_lr(1e-4, 64, 16, rule="sqrt")
    (0.0004, 0.0002)
    """
    base_lr = check_positive_number("base_lr", base_lr)
    ratio = check_positive_number("batch", batch) / check_positive_number(
        "reference_batch", reference_batch
    )
    rule = check_choice("rule", rule, ("linear", "sqrt"))
    return base_lr * (ratio if rule == "linear" else math.sqrt(ratio))


def accumulation_windows(step_counts: NDArray[Any], target: float | None) -> NDArray[np.int64]:
    """End offsets of the optimizer-step windows over per-micro-step counts.

    A window closes as soon as its counts reach ``target``; the last one may be
    short. ``target=None`` steps after every micro-batch.

    >>> accumulation_windows(np.array([5, 3, 4, 9, 1]), 8).tolist()
    [2, 4, 5]
    """
    counts = np.asarray(step_counts, dtype=np.float64)
    if target is None:
        return np.arange(1, counts.size + 1)
    target = check_positive_number("target", target)
    ends: list[int] = []
    acc = 0.0
    for i, c in enumerate(counts.tolist()):
        acc += c
        if acc >= target:
            ends.append(i + 1)
            acc = 0.0
    if not ends or ends[-1] != counts.size:
        ends.append(counts.size)
    return np.asarray(ends, dtype=np.int64)


class GradientAccumulator:
    """Accumulate micro-batches to a sample or token budget; each update is the exact mean.

    See NOTE [ normalising the loss ] and NOTE [ accumulating to a budget ].

    Args:
        model: the model (``paddle.DataParallel`` or a plain layer).
        optimizer: a paddle optimizer.
        sampler: a dynbatch sampler; its plan decides where windows end.
            Without one, the optimizer steps after every micro-batch.
        target: samples (or tokens) per optimizer step, summed over ranks;
            None steps after every micro-batch.
        unit: ``"samples"`` or ``"tokens"``: what ``target`` counts (tokens are
            real, unpadded lengths).
        scaler: a ``paddle.amp.GradScaler`` for mixed precision.
        lr_scheduler: stepped after every applied optimizer step.

    Use::

        for ids, labels in loader:
            with acc.accumulate():
                losses = F.cross_entropy(model(ids), labels, reduction="none")
                acc.backward(losses.sum(), count=labels.shape[0])

    ``backward`` steps the optimizer itself when the window is complete; a step
    whose loss is NaN or inf on any rank is skipped on all and counted in
    ``skipped_steps``. A batch the distributed sampler repeated only to even out
    step counts (``sampler.padding_mask()``) gets weight 0.
    """

    def __init__(
        self,
        model: Any,
        optimizer: Any,
        *,
        sampler: Any = None,
        target: float | None = None,
        unit: str = "samples",
        scaler: Any = None,
        lr_scheduler: Any = None,
    ) -> None:
        self.paddle = require("paddle", "GradientAccumulator")
        self.model, self.optimizer, self.sampler = model, optimizer, sampler
        self.unit = check_choice("unit", unit, ("samples", "tokens"))
        self.target = None if target is None else check_positive_number("target", target)
        if self.target is not None and sampler is None:
            raise ValueError(
                "target needs the sampler: windows are cut on its plan, the same on every rank"
            )
        self.scaler, self.lr_scheduler = scaler, lr_scheduler
        self.world_size = self.paddle.distributed.get_world_size()
        self.optimizer_steps = 0
        self.skipped_steps = 0
        self._epoch: int | None = None
        self._ends: set[int] = set()  # micro-step counts after which the optimizer steps
        self._padding: NDArray[np.bool_] = np.zeros(0, dtype=bool)
        self._micro = 0  # micro-batch index within the epoch
        self._count: Any = None  # samples or tokens of the open window (a device tensor)
        self._bad: Any = None  # non-finite losses in the open window
        self.last_count = 0.0
        self._reset_window()

    # -- the plan ----------------------------------------------------------------------------
    def step_counts(self, epoch: int | None = None) -> NDArray[np.float64]:
        """Samples (or tokens) of each micro-step of the epoch, summed over ranks."""
        sharded = self.sampler._sharded(self.sampler.epoch if epoch is None else epoch)
        lens = self.sampler.lengths
        per_batch = np.array(
            [
                0.0 if pad else float(b.size if self.unit == "samples" else lens[b].sum())
                for b, pad in zip(sharded.batches, sharded.is_padding, strict=True)
            ]
        )
        return np.asarray(per_batch.reshape(-1, sharded.num_replicas).sum(axis=1), dtype=np.float64)

    def steps_per_epoch(self, epoch: int | None = None) -> int:
        """Optimizer steps the epoch will take: known before it starts, for LR schedules."""
        if self.sampler is None:
            raise ValueError("steps_per_epoch needs the sampler whose plan the loop follows")
        return int(accumulation_windows(self.step_counts(epoch), self.target).size)

    def _sync_epoch(self) -> None:
        if self.sampler is None or self.sampler.epoch == self._epoch:
            return
        self._epoch = self.sampler.epoch
        self._ends = set(accumulation_windows(self.step_counts(), self.target).tolist())
        self._padding = self.sampler.padding_mask()
        self._micro = self.sampler._start  # a resumed epoch starts where the sampler does

    def _window_ends_here(self) -> bool:
        if self.sampler is None:
            return True
        return self._micro + 1 in self._ends

    # -- the loop ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def accumulate(self) -> Iterator[None]:
        """Wrap forward and backward of one micro-batch: ``no_sync`` unless it ends a window."""
        self._sync_epoch()
        no_sync = getattr(self.model, "no_sync", None)
        if self.world_size > 1 and no_sync is not None and not self._window_ends_here():
            with no_sync():
                yield
        else:
            yield

    def backward(self, loss_sum: Any, count: Any) -> bool:
        """Back-propagate the *sum* of a micro-batch's losses over ``count`` samples or tokens.

        Returns True when this call ended a window and the optimizer stepped.
        """
        self._sync_epoch()
        paddle = self.paddle
        if self._micro < self._padding.size and self._padding[self._micro]:
            loss_sum, count = loss_sum * 0.0, 0  # a repeat that only evens out step counts
        if isinstance(count, paddle.Tensor):
            count = count.astype("float32").reshape([1])
        else:
            count = paddle.to_tensor([float(count)], dtype="float32")
        self._count = self._count + count
        bad = paddle.logical_not(paddle.isfinite(loss_sum.detach().astype("float32"))).astype(
            "float32"
        )
        self._bad = self._bad + bad.reshape([1])
        (self.scaler.scale(loss_sum) if self.scaler is not None else loss_sum).backward()
        ends = self._window_ends_here()
        self._micro += 1
        if ends:
            self._step()
        return ends

    def _reset_window(self) -> None:
        paddle = self.paddle
        self._count = paddle.zeros([1], dtype="float32")
        self._bad = paddle.zeros([1], dtype="float32")

    def _step(self) -> None:
        paddle = self.paddle
        stats = paddle.concat([self._count, self._bad])
        if self.world_size > 1:
            paddle.distributed.all_reduce(stats)
        total, bad = (float(x) for x in stats.numpy())
        skip = bad > 0 or not total > 0
        if not skip:
            factor = self.world_size / total
            with paddle.no_grad():
                for p in self.model.parameters():
                    if p.grad is not None:
                        p.grad.scale_(factor)
            if self.scaler is not None:
                self.scaler.step(self.optimizer)
                self.scaler.update()
                skip = bool(getattr(self.scaler, "_cache_found_inf", False))
            else:
                self.optimizer.step()
        if skip:
            self.skipped_steps += 1
        else:
            self.optimizer_steps += 1
            if self.lr_scheduler is not None:
                self.lr_scheduler.step()
        self.optimizer.clear_grad()
        self.last_count = total
        self._reset_window()
