"""A VisualDL logging hook that knows each step's batch from the plan.

NOTE [ which batch was step k ]
    The DataLoader prefetches, so "the last batch the sampler yielded" is a
    few batches ahead of the one being trained. Step ``k`` of a pass that
    began at batch ``s`` of epoch ``e`` *is* batch ``s + k`` of that epoch's
    plan (NOTE [ the plan is the source of truth ] in :mod:`dynbatch.plan.contract`),
    so the hook reads batch size, lengths and cost from the plan and needs
    nothing from the loop but the step and the loss.
"""

from __future__ import annotations

import contextlib
import os
import resource
import time
import warnings
from typing import Any

import numpy as np
from numpy.typing import NDArray
from tqdm.auto import tqdm

from .._checks import InputTypeError, check_bool
from .._optional import require
from ..memory import AllocatorStatsUnavailable, peak_memory_mib, reset_peak_memory
from ..plan.contract import PlanSource, describe
from ..plan.stats import StepStats, batch_table

paddle = require("paddle", "dynbatch.VisualDLHook")
from paddle.callbacks import Callback  # noqa: E402

__all__ = ["VisualDLHook", "memory_mib"]

BATCH_TAGS = (
    "batch_size",
    "max_len",
    "real_tokens",
    "padded_tokens",
    "padding_efficiency",
    "cost_ratio",
)


def memory_mib() -> float:
    """Peak MiB allocated by paddle's allocator (CUDA on GPU, host on CPU) since the last
    ``dynbatch.memory.reset_peak_memory()``; ``VisualDLHook`` resets it as each batch begins.

    Where paddle keeps no allocator statistics (an old build, a device other than CPU or CUDA)
    it returns the resident set size of this process instead, with a warning that says so.
    """
    try:
        return peak_memory_mib()
    except AllocatorStatsUnavailable as exc:
        warnings.warn(f"memory_mib reports process RSS, not allocator memory: {exc}", stacklevel=2)
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):  # not Linux: peak RSS, KiB on Linux / bytes on macOS
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return float(peak) / (2**20 if os.uname().sysname == "Darwin" else 2**10)


def _scalar(value: Any) -> float:
    """A Python float from a float, a numpy array or a paddle tensor of one element."""
    if isinstance(value, (list, tuple)):
        value = value[0]
    if hasattr(value, "numpy"):
        value = value.numpy()
    return float(np.asarray(value).reshape(-1)[0])


class VisualDLHook(Callback):
    """Log what dynamic batching does, step by step, to VisualDL (rank 0 only).

    Per step, under ``train/``: ``batch_size``, ``max_len``, ``real_tokens``,
    ``padded_tokens``, ``padding_efficiency``, ``cost_ratio`` (batch cost /
    ``max_cost``) — from the sampler's plan, by the step's position in the epoch (the
    DataLoader prefetches, so the batch last yielded is not the one being trained) — and
    ``loss``, ``lr``, ``samples_per_sec``, ``tokens_per_sec``, ``memory_mib``.

    As a ``paddle.callbacks.Callback`` under ``paddle.Model.fit`` it also calls
    the sampler's ``set_epoch`` at each epoch (hapi does not). In a hand-written
    loop call ``on_epoch_begin(epoch)`` (or ``sampler.set_epoch``),
    ``on_train_batch_begin(step)`` (so ``memory_mib`` is each batch's own allocator
    peak, not the peak so far), ``on_train_batch_end(step, {"loss": loss, "lr": lr})``
    and ``close()``.

    Args:
        logdir: VisualDL log directory.
        sampler: a dynbatch sampler, for the batch tags.
        optimizer: where to read ``lr`` when the logs do not carry it.
        progress: also draw a progress bar (tqdm; loss, padding efficiency), unless
            ``paddle.Model.fit(verbose=1 or 2)`` already draws its own: one bar, not two.
    """  # NOTE [ which batch was step k ]

    def __init__(
        self, logdir: str, sampler: Any = None, *, optimizer: Any = None, progress: bool = False
    ) -> None:
        super().__init__()
        if not isinstance(logdir, (str, os.PathLike)):
            raise InputTypeError(f"logdir must be a directory path, got logdir={logdir!r}")
        if sampler is not None and not isinstance(sampler, PlanSource):
            raise InputTypeError(
                "sampler must be a dynbatch sampler (DynamicBatchSampler or "
                f"DistributedDynamicBatchSampler), got {describe(sampler)}"
            )
        progress = check_bool("progress", progress)  # before the writer makes the directory
        logdir = os.fspath(logdir)
        visualdl = require("visualdl", "dynbatch.VisualDLHook")
        self.logdir, self.sampler, self.optimizer = logdir, sampler, optimizer
        self.is_writer = paddle.distributed.get_rank() == 0
        self.writer = visualdl.LogWriter(logdir=logdir) if self.is_writer else None
        self.global_step = 0
        self.progress = progress
        self._bar: Any = None
        self._table: tuple[int, dict[str, NDArray[Any]]] | None = None
        self._last = time.perf_counter()

    # -- plan look-ups ---------------------------------------------------------------------
    def _batch_numbers(self, step: int, seconds: float) -> dict[str, float] | None:
        """The plan's numbers of step ``step``'s batch (NOTE [ which batch was step k ])."""
        if self.sampler is None:
            return None
        current = self.sampler.current_pass()
        if self._table is None or self._table[0] != current.epoch:
            options = self.sampler.options
            table = batch_table(
                self.sampler.lengths,
                self.sampler.batches(current.epoch),
                cost=options.cost,
                max_cost=options.max_cost,
                pad_to_multiple_of=options.pad_to_multiple_of,
            )
            self._table = (current.epoch, table)
        table = self._table[1]
        position = current.start + step
        if not 0 <= position < table["batch_size"].size:
            return None
        stats = StepStats()
        stats.add(table, [position])
        numbers = stats.logged(seconds)
        return {tag: numbers[tag] for tag in (*BATCH_TAGS, "samples_per_sec", "tokens_per_sec")}

    # -- paddle.callbacks.Callback -------------------------------------------------------------
    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        if self.sampler is not None:
            self.sampler.set_epoch(epoch)
        self._last = time.perf_counter()
        # hapi's fit tells its callbacks `verbose`; it adds a ProgBarLogger whenever that is > 0
        hapi_bar = bool(self.params.get("verbose"))
        if self.progress and self.is_writer and not hapi_bar:
            total = len(self.sampler) if self.sampler is not None else None
            # tqdm, the bar paddlenlp's Trainer draws too
            self._bar = tqdm(total=total, desc=f"epoch {epoch}", unit="batch", dynamic_ncols=True)

    def on_train_batch_begin(self, step: int, logs: Any = None) -> None:
        """Reset the allocator's peak, so ``memory_mib`` is this batch's own peak.

        Args:
            step: the step of the epoch about to run, from 0.
            logs: paddle's logs of the step (unused).
        """
        with contextlib.suppress(AllocatorStatsUnavailable):
            reset_peak_memory()

    def on_train_batch_end(self, step: int, logs: Any = None) -> None:
        logs = logs or {}
        now = time.perf_counter()
        elapsed, self._last = max(now - self._last, 1e-9), now
        row = self._batch_numbers(step, elapsed)
        values: dict[str, float] = dict(row) if row else {}
        if "loss" in logs:
            values["loss"] = _scalar(logs["loss"])
        lr = logs.get("lr")
        if lr is None:
            opt = self.optimizer or getattr(getattr(self, "model", None), "_optimizer", None)
            lr = opt.get_lr() if opt is not None else None
        if lr is not None:
            values["lr"] = _scalar(lr)
        if row is None and logs.get("batch_size") is not None:
            values["samples_per_sec"] = float(logs["batch_size"]) / elapsed
        values["memory_mib"] = memory_mib()
        if self.writer is not None:
            for tag, value in values.items():
                self.writer.add_scalar(f"train/{tag}", float(value), self.global_step)
        if self._bar is not None:
            shown = {"loss": values.get("loss", float("nan"))}
            if row:
                shown["padding"] = values["padding_efficiency"]
            self._bar.set_postfix({k: f"{v:.3g}" for k, v in shown.items()}, refresh=False)
            self._bar.update(1)
        self.global_step += 1

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if self.writer is not None:
            self.writer.flush()

    def on_train_end(self, logs: Any = None) -> None:
        self.close()

    def close(self) -> None:
        """Flush and close the log file."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def __enter__(self) -> VisualDLHook:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
