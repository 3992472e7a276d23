"""Accumulation windows and step counts from a plan: pure numpy, no paddle.

NOTE [ accumulating to a budget ]
    The optimizer steps when the accumulated samples (or tokens) of all ranks
    reach ``target``. The windows are cut on the *plan* (every rank knows every
    rank's batches for the epoch), so all ranks step at the same micro-batch
    with no communication, ``DataParallel.no_sync()`` can skip the gradient
    all-reduce on the micro-batches that do not end a window, and the number of
    optimizer steps of every epoch is known before training starts.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from ._checks import check_choice, check_lengths, check_positive_number
from .sharding import ShardedPlan

__all__ = ["UNITS", "accumulation_windows", "micro_step_counts", "optimizer_steps"]

UNITS = ("samples", "tokens")


def accumulation_windows(step_counts: Any, target: float | None) -> NDArray[np.int64]:
    """End offsets of the optimizer-step windows over per-micro-step counts.

    A window closes as soon as its counts reach ``target``; the last one may be
    short. ``target=None`` steps after every micro-batch. No micro-steps, no
    windows.

    >>> accumulation_windows(np.array([5, 3, 4, 9, 1]), 8).tolist()
    [2, 4, 5]
    >>> accumulation_windows(np.array([]), 8).tolist()
    []
    """
    counts = np.asarray(step_counts, dtype=np.float64).reshape(-1)
    if target is None:
        return np.arange(1, counts.size + 1, dtype=np.int64)
    target = check_positive_number("target", target)
    ends: list[int] = []
    acc = 0.0
    for i, c in enumerate(counts.tolist()):
        acc += c
        if acc >= target:
            ends.append(i + 1)
            acc = 0.0
    if counts.size and (not ends or ends[-1] != counts.size):
        ends.append(counts.size)
    return np.asarray(ends, dtype=np.int64)


def micro_step_counts(sharded: ShardedPlan, lengths: Any, unit: str) -> NDArray[np.float64]:
    """Samples (or real tokens) of each micro-step of a sharded plan, summed over ranks.

    Batches flagged as padding (repeats that only even out step counts) count 0.
    """
    check_choice("unit", unit, UNITS)
    if sharded.num_steps == 0:
        return np.zeros(0, dtype=np.float64)
    if unit == "samples":
        per_batch = sharded.sizes.astype(np.float64)
    else:
        per_batch = sharded.real_tokens(check_lengths(lengths)).astype(np.float64)
    per_batch[sharded.is_padding] = 0.0
    return np.asarray(per_batch.reshape(-1, sharded.num_replicas).sum(axis=1), dtype=np.float64)


def optimizer_steps(
    sharded: ShardedPlan, lengths: Any, target: float | None, unit: str = "samples"
) -> int:
    """Optimizer steps one epoch of ``sharded`` takes when accumulating to ``target``."""
    if target is None:
        return sharded.num_steps
    return int(accumulation_windows(micro_step_counts(sharded, lengths, unit), target).size)
