"""The Trainer's logs from the plan: the steps since the last log and the run's totals.

The per-step numbers come from :class:`dynbatch.plan.stats.StepStats`, the same path
:class:`~dynbatch.VisualDLHook` logs; the Trainer's own speeds assume fixed
batches, so they are replaced by the plan's.
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ...memory import AllocatorStatsUnavailable, peak_memory_mib, reset_peak_memory
from ...plan.stats import StepStats

__all__ = ["RunLog"]

#: The numbers of :meth:`StepStats.logged` the Trainer logs.
LOGGED = (
    "batch_size",
    "samples_per_step",
    "micro_batches_per_step",
    "padding_efficiency",
    "cost_ratio",
    "cost_ratio_max",
    "samples_per_sec",
    "tokens_per_sec",
)


def _peak_memory_mib() -> float | None:
    """Peak MiB paddle's allocator handed out since the last reset (None: no statistics)."""
    try:
        return peak_memory_mib()
    except AllocatorStatsUnavailable:
        return None


def reset_memory() -> None:
    with contextlib.suppress(AllocatorStatsUnavailable):
        reset_peak_memory()


class RunLog:
    """The run's totals (restored on resume) and the plan's numbers since the last log.

    Attributes:
        loss_total: sum over optimizer steps of each step's mean loss, where it is finite (a
            step fp16 loss scaling skips for a NaN loss stays out: a NaN total would read NaN
            in every later log and checkpoint).
        loss_steps: the steps summed in ``loss_total``; ``train_loss`` is their mean.
        consumed_samples: real samples trained over all ranks, whole run.
        skipped_steps: steps whose update was not applied, whole run: fp16 loss
            scaling skipped a NaN or inf, or nothing had a loss.
    """

    def __init__(self) -> None:
        self.loss_total = 0.0
        self.loss_steps = 0
        self.consumed_samples = 0
        self.skipped_steps = 0
        self._samples, self._tokens, self._steps = 0, 0.0, 0  # of this process
        self._since = StepStats()
        self._started = time.perf_counter()
        reset_memory()

    def record(
        self,
        table: dict[str, NDArray[Any]],
        rows: slice,
        repeats: NDArray[np.bool_],
        micro_batches: int,
        mean_loss: float,
    ) -> None:
        """One trained window: its rows of the epoch's batch table, and its mean loss."""
        before = (self._since.samples, self._since.tokens)
        self._since.add(table, rows, repeats=repeats, micro_batches=micro_batches)
        samples = self._since.samples - before[0]
        if math.isfinite(mean_loss):
            self.loss_total += mean_loss
            self.loss_steps += 1
        self.consumed_samples += samples
        self._samples += samples
        self._tokens += self._since.tokens - before[1]
        self._steps += 1

    @property
    def mean_loss(self) -> float:
        """The run's mean loss over its steps with a finite one (0.0 before any)."""
        return self.loss_total / self.loss_steps if self.loss_steps else 0.0

    def update(self, logs: dict[str, float], global_step: int) -> None:
        """Add the plan's numbers to the Trainer's ``logs``; its fixed-batch speeds made real."""
        if "loss" in logs and self._since.steps:
            seconds = float(logs.get("interval_runtime") or 0.0)
            if seconds <= 0:
                seconds = time.perf_counter() - self._started
            numbers = self._since.logged(seconds)
            stats = {key: numbers[key] for key in LOGGED}
            memory = _peak_memory_mib()
            if memory is not None:
                stats["memory_mib"] = memory
                reset_memory()
            logs.update({k: round(v, 4) for k, v in stats.items()})
            if "interval_samples_per_second" in logs:  # the Trainer assumes fixed batches
                logs["interval_samples_per_second"] = logs["samples_per_sec"]
            self._since = StepStats()
            self._started = time.perf_counter()
        if "train_loss" in logs and global_step > 0:
            logs["train_loss"] = self.mean_loss
            runtime = float(logs.get("train_runtime") or 0.0)
            if runtime > 0:
                logs["train_samples_per_second"] = round(self._samples / runtime, 4)
                logs["train_steps_per_second"] = round(self._steps / runtime, 4)
                logs["train_tokens_per_second"] = round(self._tokens / runtime, 4)
