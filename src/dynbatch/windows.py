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

from ._checks import InputError, InputTypeError, check_choice, check_lengths, check_positive_number
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
    counts = _checked_counts(step_counts)
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


def _checked_counts(step_counts: Any) -> NDArray[np.float64]:
    """``step_counts`` as a 1-D float array of finite numbers >= 0."""
    try:
        raw = np.asarray(step_counts)
    except ValueError as exc:  # ragged
        raise InputTypeError(f"step_counts must be a 1-D array of numbers: {exc}") from None
    if raw.dtype == np.bool_ or raw.dtype.kind not in "iuf":
        raise InputTypeError(f"step_counts must be numbers, got dtype {raw.dtype}")
    if raw.ndim != 1:
        raise InputError(f"step_counts must be 1-D, got shape {raw.shape}")
    counts = raw.astype(np.float64)
    bad = ~np.isfinite(counts) | (counts < 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise InputError(f"step_counts must be finite numbers >= 0; step_counts[{i}]={raw[i]!r}")
    return counts


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
