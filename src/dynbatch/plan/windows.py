"""Accumulation windows and step counts from a plan: pure numpy, no paddle.

NOTE [ accumulating to a budget ]
    The optimizer steps when the accumulated samples (or tokens) of all ranks
    reach ``target``. The windows are cut on the *plan* (every rank knows every
    rank's batches for the epoch), so all ranks step at the same micro-batch
    with no communication, ``DataParallel.no_sync()`` can skip the gradient
    all-reduce on the micro-batches that do not end a window, and the number of
    optimizer steps of every epoch is known before training starts.

NOTE [ mixed updates ]
    An update whose micro-batches all hold samples of one length is a biased
    draw from the corpus: where length goes with the label (long reviews are
    more often positive, say), each such update pulls the model one way, and
    the model trains worse at the same number of updates. It is why the
    study's sorted order hurt. So when the options ask for updates of
    ``update_size``, the plan groups its steps into updates drawn across the
    lengths: the number of updates is the epoch's samples (or tokens) over
    ``update_size``, rounded up, as a fixed batch's last, partial batch is an
    update of its own (so an epoch has the fixed batch's ``ceil(N / B)``, and
    a run of E epochs its ``E * ceil(N / B)``; with ``drop_last``, as the fixed
    batch drops that last update, ``floor(N / B)``); the steps, sorted by their longest sample, are
    cut into strata of that many consecutive steps, and each update takes one
    step of every stratum (the largest count to the update holding least so
    far, so that updates come out even). The updates, and the steps in each,
    are then shuffled with ``(seed, epoch)``. Every update spans the epoch's
    lengths as a random batch does, while every micro-batch stays
    padding-free. With more than :data:`MAX_STRATA` steps per update the
    steps are shuffled and cut into that many updates of about equal counts
    (:func:`even_windows`): a random draw of that many is mixed already. The
    sorted and dataset orders keep their order and are cut the same way.

NOTE [ one window cursor ]
    The hand-written loop's accumulator and the Trainer integration follow the
    same windows: where each ends, where a resumed epoch may start, what each
    counts. Both read them from one :class:`EpochWindows` made from the
    epoch's plan, so a change to how updates are cut changes both loops at
    once.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._checks import (
    InputError,
    InputTypeError,
    check_choice,
    check_int,
    check_lengths,
    check_positive_number,
)
from .lengths import sample_tokens, update_tokens
from .options import UNITS, PlanOptions
from .sharding import ShardedPlan

__all__ = [
    "UNITS",
    "EpochWindows",
    "Span",
    "accumulation_windows",
    "even_windows",
    "micro_step_counts",
    "mix_updates",
    "optimizer_steps",
    "update_ends",
]

#: Steps per update above which an update is a random draw of steps (NOTE [ mixed updates ]).
MAX_STRATA = 64


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


def even_windows(step_counts: Any, windows: int) -> NDArray[np.int64]:
    """End offsets of ``windows`` windows of about equal counts, in order.

    Each window ends at the step whose running total is nearest its share of
    the whole, moved the least so that every window holds a step: exactly
    ``windows`` of them (at most one a step), however uneven the counts, since
    the number of updates is the epoch's promise (NOTE [ mixed updates ]).

    >>> even_windows(np.array([3, 3, 3, 3, 3, 3]), 2).tolist()
    [3, 6]
    >>> even_windows(np.array([5, 1, 1, 5]), 3).tolist()
    [1, 3, 4]
    >>> even_windows(np.array([1, 1, 4]), 3).tolist()  # nearest shares: [2, 2]; moved apart
    [1, 2, 3]
    """
    counts = _checked_counts(step_counts)
    if counts.size == 0:
        return np.zeros(0, dtype=np.int64)
    k = min(max(1, int(windows)), counts.size)
    total = np.cumsum(counts)
    marks = total[-1] * np.arange(1, k) / k
    after = np.minimum(np.searchsorted(total, marks), counts.size - 1)
    before = np.maximum(after - 1, 0)
    nearer = (after > 0) & (marks - total[before] < total[after] - marks)
    ends = np.r_[np.where(nearer, before, after) + 1, counts.size].astype(np.int64)
    # each end at least one step past the one before, and leaving a step to each after it
    ends = np.maximum(ends, np.arange(1, k + 1))
    ends = np.maximum.accumulate(ends - np.arange(k)) + np.arange(k)
    ends = np.minimum(ends, counts.size - k + 1 + np.arange(k))
    out: NDArray[np.int64] = ends
    return out


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

    The tokens are those of ``lengths`` (per-sample loss tokens count only
    the tokens with a loss: pass those; the ``[N, 2]`` lengths of pairs count their targets',
    the tokens a sequence-to-sequence loss is over). Batches flagged as padding (repeats that
    only even out step counts) count 0.
    """
    check_choice("unit", unit, UNITS)
    if sharded.num_steps == 0:
        return np.zeros(0, dtype=np.float64)
    if unit == "samples":
        per_batch = sharded.sizes.astype(np.float64)
    else:
        tokens = check_lengths(update_tokens(np.asarray(lengths)), zero=True)
        per_batch = sharded.real_tokens(tokens).astype(np.float64)
    per_batch[sharded.is_padding] = 0.0
    return np.asarray(per_batch.reshape(-1, sharded.num_replicas).sum(axis=1), dtype=np.float64)


def update_ends(
    sharded: ShardedPlan, lengths: Any, target: float | None = None, unit: str = "samples"
) -> NDArray[np.int64]:
    """The steps after which each optimizer update of ``sharded`` ends.

    With ``target``, an update closes where its counts reach it, in the plan's
    order; without, the plan's own updates (NOTE [ mixed updates ]), or one per
    step when it has none.
    """
    if target is not None:
        return accumulation_windows(micro_step_counts(sharded, lengths, unit), target)
    if sharded.window_ends is not None:
        return sharded.window_ends.copy()
    return np.arange(1, sharded.num_steps + 1, dtype=np.int64)


@dataclass(frozen=True)
class Span:
    """One optimizer window of an epoch: micro-steps ``[start, stop)`` of its plan.

    ``index`` is the window's number in the epoch, ``windows`` how many the
    epoch has, ``count`` what the update averages over as the plan counts it
    (samples or tokens, summed over ranks).
    """

    epoch: int
    index: int
    windows: int
    start: int
    stop: int
    count: float

    @property
    def ends_epoch(self) -> bool:
        return self.index + 1 == self.windows


class EpochWindows:
    """The optimizer windows of one epoch of a plan (NOTE [ one window cursor ]).

    Args:
        sharded: the epoch's plan, every rank's batches.
        counted: per sample, what updates in ``"tokens"`` count (lengths or loss tokens; the
            ``[N, 2]`` lengths of pairs count their targets, the tokens their loss is over).
        epoch: the epoch's number.
        target: close a window when its count reaches this (NOTE [ accumulating to a budget ]);
            default: the plan's own updates, or one per step.
        unit: what counts are: ``"samples"`` or ``"tokens"``.
        every: instead, a window every ``every`` micro-steps (the Trainer's
            ``gradient_accumulation_steps``).

    >>> from dynbatch.plan.epochs import plan_epoch
    >>> opts = PlanOptions(max_cost=8, cost="linear", max_batch_size=2, update_size=4)
    >>> lengths = np.array([1, 1, 2, 2, 3, 3, 4, 4])
    >>> w = EpochWindows(plan_epoch(lengths, opts, epoch=0), lengths, epoch=0)
    >>> len(w), w.ends.tolist(), [w.ends_at(p) for p in range(4)]
    (2, [2, 4], [False, True, False, True])
    >>> [(s.start, s.stop, s.count) for s in w.spans(start=2)]
    [(2, 4, 4.0)]
    """

    def __init__(
        self,
        sharded: ShardedPlan,
        counted: NDArray[Any],
        *,
        epoch: int,
        target: float | None = None,
        unit: str = "samples",
        every: int = 1,
    ) -> None:
        if not isinstance(sharded, ShardedPlan):
            raise InputTypeError(
                "sharded must be an epoch's plan (a ShardedPlan, e.g. plan_epoch(...)), got "
                f"sharded={sharded!r}"
            )
        counted = update_tokens(counted)  # lengths of pairs: their targets
        counts = np.asarray(counted)
        needed = int(sharded.plan.indices.max()) + 1 if sharded.plan.indices.size else 0
        if counts.ndim != 1 or counts.size < needed:
            raise InputError(
                f"counted must hold one count per sample, {needed} or more (the plan holds sample "
                f"{needed - 1}), got an array of shape {counts.shape}"
            )
        counted = check_lengths(counted, "counted", zero=True)
        epoch = check_int("epoch", epoch)
        every = check_int("every", every, minimum=1)
        self.epoch, self.plan = epoch, sharded
        self.counts = micro_step_counts(sharded, counted, unit)
        if every > 1:
            self.ends = accumulation_windows(np.ones(sharded.num_steps), every)
        else:
            self.ends = update_ends(sharded, counted, target, unit)

    def __len__(self) -> int:
        return int(self.ends.size)

    @property
    def num_steps(self) -> int:
        """Micro-steps of the epoch (per rank)."""
        return int(self.counts.size)

    def ends_at(self, position: int) -> bool:
        """Whether the micro-step at ``position`` (0-based) ends a window."""
        position = check_int("position", position)
        i = int(np.searchsorted(self.ends, position + 1))
        return i < self.ends.size and int(self.ends[i]) == position + 1

    def check_start(self, position: int) -> None:
        """Refuse to start (resume) the epoch at ``position`` unless a window ends there."""
        if position != 0 and not self.ends_at(position - 1):
            raise InputError(
                f"cannot resume epoch {self.epoch} at micro-batch {position}: no optimizer step "
                f"ends there (steps end at {self.ends[:8].tolist()}...); was the checkpoint saved "
                "with other accumulation settings?"
            )

    def spans(self, start: int = 0) -> Iterator[Span]:
        """The windows from micro-step ``start`` on (a window boundary: :meth:`check_start`)."""
        start = check_int("start", start)
        self.check_start(start)
        begin = 0
        for index, stop in enumerate(self.ends.tolist()):
            if stop > start:
                count = float(self.counts[begin:stop].sum())
                yield Span(self.epoch, index, len(self), begin, stop, count)
            begin = stop


def optimizer_steps(
    sharded: ShardedPlan, lengths: Any, target: float | None = None, unit: str = "samples"
) -> int:
    """Optimizer steps one epoch of ``sharded`` takes (see :func:`update_ends`)."""
    return int(update_ends(sharded, lengths, target, unit).size)


def mix_updates(
    sharded: ShardedPlan,
    lengths: NDArray[Any],
    options: PlanOptions,
    epoch: int,
    loss_tokens: NDArray[Any] | None = None,
) -> ShardedPlan:
    """``sharded`` with its steps grouped into updates of ``options.update_size``, lengths mixed.

    See NOTE [ mixed updates ]. Updates in ``"tokens"`` count ``loss_tokens``
    when given (the tokens with a loss), else the lengths, for pairs their targets'. The
    strata of pairs are by their tokens, source + target (NOTE [ lengths of pairs ] in
    :mod:`dynbatch.plan.lengths`). Two
    updates of two steps each, every update one step of short samples and one of long:

    >>> from dynbatch.plan.epochs import plan_epoch
    >>> lengths = np.array([1, 1, 2, 2, 3, 3, 4, 4])
    >>> opts = PlanOptions(max_cost=8, cost="linear", max_batch_size=2, update_size=4)
    >>> sp = plan_epoch(lengths, opts, epoch=0)
    >>> sp.window_ends.tolist()
    [2, 4]
    >>> longest = sp.longest(lengths)
    >>> [min(longest[:2]) <= 2 < max(longest[:2]), min(longest[2:]) <= 2 < max(longest[2:])]
    [True, True]
    """
    target = float(options.update_size or 0.0)
    counted = update_tokens(lengths) if loss_tokens is None else loss_tokens
    lengths = sample_tokens(lengths)
    counts = micro_step_counts(sharded, counted, options.update_unit)
    steps = counts.size
    if steps == 0:
        return sharded.reorder_steps(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    # rounded up (NOTE [ mixed updates ]); the tolerance keeps N/B = 400.0000001 at 400. With
    # drop_last the fixed batch drops its short last update: floor(N / B) of the whole epoch
    if options.drop_last and options.update_unit == "samples":
        whole = math.floor(float(lengths.size) / target + 1e-9)
    else:
        whole = math.ceil(float(counts.sum()) / target - 1e-9)
    updates = int(min(steps, max(1, whole)))
    if not options.random_order:
        return sharded.reorder_steps(np.arange(steps), even_windows(counts, updates))
    rng = np.random.default_rng([options.seed, epoch, sharded.num_replicas, _MIX_STREAM])
    if -(-steps // updates) > MAX_STRATA:
        order = rng.permutation(steps)
        return sharded.reorder_steps(order, even_windows(counts[order], updates))
    longest = sharded.longest(lengths).reshape(-1, sharded.num_replicas).max(axis=1)
    by_length = np.lexsort((rng.random(steps), longest))
    update_of = np.empty(steps, dtype=np.int64)
    totals = np.zeros(updates, dtype=np.float64)
    for start in range(0, steps, updates):  # one stratum of lengths at a time
        stratum = by_length[start : start + updates]
        largest_first = stratum[np.lexsort((rng.random(stratum.size), -counts[stratum]))]
        emptiest = np.lexsort((rng.random(updates), totals))[: stratum.size]
        update_of[largest_first] = emptiest
        totals[emptiest] += counts[largest_first]
    position = rng.permutation(updates)  # where each update goes in the epoch
    order = np.lexsort((rng.random(steps), position[update_of]))
    sizes = np.bincount(update_of, minlength=updates)[np.argsort(position)]
    return sharded.reorder_steps(order, np.cumsum(sizes))


#: The random stream of :func:`mix_updates`, apart from the planner's and the sharding's.
_MIX_STREAM = 1
