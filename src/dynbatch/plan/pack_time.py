"""Packing chosen per update by a device's step time: numpy only.

:func:`plan_timed_packs` plans an epoch of packed updates for every rank and,
for each update, predicts three ways to run its samples: packed into rows,
split into length-sorted micro-steps (:func:`~dynbatch.plan.splits.split_update`),
or whole, one padded step a rank as the fixed batch runs it. It keeps the
fastest. The samplers and streams plan so when the options hold both
``pack_len`` and a ``time_model`` (:func:`~dynbatch.plan.pack_epochs.plan_packed_epoch`);
:func:`choose_packing` is the same plan read on one rank, with its prices.
:class:`PackLayout` is how one micro-batch is laid out, for the planner that
prices it and for :class:`~dynbatch.PackCollator` that builds it.

NOTE [ choosing packing per update ]
    *The same samples.* Packing plans rows over the epoch's shuffled order
    (NOTE [ packing windows ]), so a packed update is not the fixed batch's
    update ``k``: it is another random draw of about ``update_size`` samples
    (one row more or less). The packed plan's updates *are* the updates. For
    each of them three candidates run exactly its samples, on every rank in
    the same number of steps: (i) packed: its rows dealt as micro-batches of
    at most ``max_rows`` rows, a multiple of the ranks (NOTE [ packed epochs ]);
    (ii) split: its samples sorted by length and cut into micro-steps at the
    least predicted time within the budget (:func:`~dynbatch.plan.splits.split_update`),
    each micro-step dealt to the ranks as :func:`~dynbatch.plan.splits.plan_split_updates`
    deals it (rank ``r`` takes every ``r``-th sample); (iii) whole: one
    micro-step, ``ceil(n / ranks)`` samples a rank, what the fixed batch does
    with an update. A step lasts as long as its slowest rank; every
    micro-batch is priced as it runs (NOTE [ a micro-batch's layout ]). The
    whole is kept where it fits and the split is not faster; packing where it
    is predicted faster than that by more than the model's error. Updates,
    their count (``ceil(N / update_size)``) and exactly-once are the packed
    plan's, whichever way each update runs.

    *The fixed batch's own updates.* A packed update holds ``update_size``
    samples only on average (a row more or less), and a step's time is not
    linear in its samples: near a GPU's knee an update of ``B + 3`` samples
    costs more than the fixed batch's ``B`` saves on one of ``B - 3``. On the
    H100 table at 128 tokens (B = 64) and 256 (B = 32) the packed plan's
    updates run whole are 1-3 % slower than the fixed batch's, where packing
    saves nothing. So the epoch is also planned as the fixed batch draws it
    (:func:`~dynbatch.plan.splits.shuffled`, updates of exactly ``update_size``
    samples), each update split or whole as above, and the faster epoch is
    kept (``PackChoice.from_fixed``; the fixed batch's on a tie). The fixed
    batch, ``B`` samples a rank in one padded step an update, is one of that
    epoch's candidates wherever it fits the budget, and a micro-batch runs
    no slower than padded: so the epoch is never predicted slower than the
    fixed batch's, and packing runs only where it pays. Both epochs are a
    pure function of ``(seed, epoch)``, the lengths and the options, so every
    rank and a resumed run make the same choice.

    *The model's error.* A fitted model is wrong by some fraction
    (``time_model.error``): as :func:`~dynbatch.plan.splits.split_update` keeps an
    update whole unless a cut saves more than that fraction, packing is taken
    only where it is predicted faster than the better of split and whole by
    more than that fraction. A :class:`~dynbatch.StepTimeTable` is measured
    times: its error is 0.

    *The budget.* A packed micro-batch holds at most
    :attr:`~dynbatch.PlanOptions.max_rows` rows; a split or whole one's
    padded batch fits ``cost(n, L) <= max_cost`` (and ``max_batch_size``), as
    the planner's batches do; a sample over that alone runs alone.

NOTE [ a micro-batch's layout ]
    A DataLoader has one ``collate_fn``, and its worker processes see the
    samples of a micro-batch, not the plan. So how a micro-batch runs is a
    pure function of its samples' lengths, in the order given, and of the
    options (:class:`PackLayout`), which the planner calls to price and
    :class:`~dynbatch.PackCollator` calls to build: the collator builds what
    the plan priced, in any process. Two layouts: *packed*, next-fit rows of
    ``pack_len`` tokens (NOTE [ rows by next-fit ]), ``R`` rows of width
    ``P = max(pack_len, longest)``, priced ``time_model(R, P)`` (dense
    attention over the whole row: an upper bound on a block-diagonal
    kernel); *padded*, one sample a row, width its longest sample ``L``,
    priced ``time_model(n, L)``. The padded layout, the fixed batch's, is
    taken where it fits the budget (``cost(n, L) <= max_cost`` within
    ``max_batch_size``, or one sample) unless the packed one fits (``R`` rows
    within :attr:`~dynbatch.PlanOptions.max_rows`, or one row) and is
    predicted faster by more than the model's error; the packed one where
    the padded does not fit. Every planned micro-batch fits one of the two
    (a packed candidate's rows are within ``max_rows``, and next-fit of its
    order makes no more; a split one's padded batch fits), so each runs its
    own faster feasible layout and is priced at most at its padded time: a
    split or whole candidate is never priced above the fixed batch's way.
    Both layouts give the same fields (``input_ids``, ``labels``,
    ``position_ids``, the masks, ``sample_starts``), so model code does not
    change. A row's samples are next-fit of the given order; the planner
    takes a micro-batch's rows from its plan where the plan's rows are that
    next-fit (no row's head fits the room the row before it left), else
    computes it, and skips it where even ``ceil(tokens / P)`` rows would not
    be faster than padded.

    Speed: the prices are numpy over every micro-batch of the epoch at once,
    and the cuts are :func:`~dynbatch.plan.splits.split_update`'s, vectorised
    over the updates of each size; what is left in Python is next-fit of the
    micro-batches that packing could speed up and whose rows the plan does
    not give.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from .._checks import (
    InputError,
    InputTypeError,
    check_int,
    check_lengths,
    check_loss_tokens,
    check_positive_number,
)
from .costs import CostLike, resolve_cost
from .options import PlanOptions
from .pack_epochs import deal_rows_counted, plan_packed_epoch
from .packing import PackPlan, next_fit_rows, plan_packs
from .planning import batch_capacity
from .plans import Indices, Plan
from .sharding import ShardedPlan
from .splits import shuffled, split_update
from .steptime import check_time_model

__all__ = [
    "CHOICES",
    "Layouts",
    "PackChoice",
    "PackLayout",
    "choose_packing",
    "packed_epoch_seconds",
    "plan_packed",
    "plan_timed_packs",
]

#: The most samples a step is priced for ahead (:class:`_Grid`); more: priced when asked.
_GRID_TOP = 1024

#: How an update runs: ``choice[u]`` indexes this.
CHOICES = ("packed", "split", "whole")
_PACKED, _SPLIT, _WHOLE = 0, 1, 2


class Layouts(NamedTuple):
    """Micro-batches as they run: packed rows or padded, and each step's shape and seconds."""

    #: True where a micro-batch runs as packed rows.
    packed: NDArray[np.bool_]
    #: Rows of the step: packed rows, or samples when padded.
    n: Indices
    #: The step's width: ``max(pack_len, longest)`` packed, the longest sample padded.
    width: Indices
    #: Predicted seconds of each micro-batch.
    seconds: NDArray[np.float64]


@dataclass(frozen=True)
class PackLayout:
    """How a micro-batch runs: packed rows or padded (NOTE [ a micro-batch's layout ]).

    A pure function of the micro-batch's lengths, in order, and these fields:
    the planner prices with it, :class:`~dynbatch.PackCollator` builds with
    it, in the main process or a DataLoader worker alike. Without a
    ``time_model`` every micro-batch is packed.

    >>> from dynbatch.plan.steptime import StepTimeModel
    >>> layout = PackLayout(8, max_cost=32, cost="linear", time_model=StepTimeModel(1, 0.1, 0))
    >>> layout.rows([2, 2, 2])  # padded: 3 x 2 tokens beat a row of 8
    (array([0, 1, 2, 3]), 2)
    >>> layout.rows([7, 1, 2])  # packed: 2 rows of 8 beat 3 x 7
    (array([0, 2, 3]), 8)
    """

    pack_len: int
    max_cost: float
    cost: Any = "quadratic"
    max_batch_size: int | None = None
    #: A step's seconds ``(n, L) -> s``: a StepTimeModel, a StepTimeTable or a callable.
    time_model: Any = None

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "pack_len", check_int("pack_len", self.pack_len, minimum=1))
        put(self, "max_cost", check_positive_number("max_cost", self.max_cost))  # as PlanOptions
        put(self, "cost", resolve_cost(self.cost))
        put(
            self,
            "max_batch_size",
            check_int("max_batch_size", self.max_batch_size, minimum=1, allow_none=True),
        )
        if self.time_model is not None:
            put(self, "time_model", step_time(self.time_model))

    @classmethod
    def from_options(cls, options: PlanOptions, time_model: Any = None) -> PackLayout:
        """The layout of ``options``' micro-batches (``time_model`` in place of theirs)."""
        if not isinstance(options, PlanOptions) or options.pack_len is None:
            raise InputError(
                "a packed micro-batch's layout needs PlanOptions with pack_len, got "
                f"options={options!r}"
            )
        model = options.time_model if time_model is None else time_model
        return cls(options.pack_len, options.max_cost, options.cost, options.max_batch_size, model)

    @property
    def error(self) -> float:
        """The time model's relative error: the margin packing must clear (0 for a table)."""
        return float(getattr(self.time_model, "error", 0.0) or 0.0)

    def rows(self, lengths: Any) -> tuple[Indices, int]:
        """One micro-batch's row offsets (over its samples, in order) and row width.

        Packed: next-fit rows of ``pack_len`` (a longer sample widens them);
        padded: a sample a row, width its longest.
        """
        if np.size(lengths) == 0 and not isinstance(lengths, (str, bytes)) and lengths is not None:
            raise InputError("a micro-batch's layout needs at least one sample, got none")
        lens = check_lengths(lengths)
        width = max(self.pack_len, int(lens.max()))
        if self.time_model is None:
            return next_fit_rows(lens, self.pack_len), width
        chosen = self.choose(lens, np.array([0, lens.size], dtype=np.int64))
        if chosen.packed[0]:
            return next_fit_rows(lens, self.pack_len), width
        return np.arange(lens.size + 1, dtype=np.int64), int(lens.max())

    def shapes(self, lengths: Any, offsets: Any) -> tuple[Indices, Indices]:
        """Every micro-batch's step as :meth:`rows` lays it out, at once: its rows (packed)
        or samples (padded) ``n`` and its width ``L``; micro-batch ``m`` is
        ``lengths[offsets[m]:offsets[m+1]]``.

        >>> PackLayout(8, max_cost=64, cost="linear").shapes([7, 1, 2, 3, 9], [0, 3, 5])
        (array([2, 2]), array([8, 9]))
        """
        lens = check_lengths(lengths)
        bounds = _check_offsets(offsets, lens.size)
        if self.time_model is not None:
            laid = self.choose(lens, bounds)
            return laid.n, laid.width
        m = bounds.size - 1
        rows = _next_fit_counts(lens, bounds, np.arange(m, dtype=np.int64), self.pack_len)
        return rows, np.maximum(np.maximum.reduceat(lens, bounds[:-1]), self.pack_len)

    def _fits(self, n: Indices, length: Indices) -> NDArray[np.bool_]:
        with np.errstate(over="ignore", invalid="ignore"):
            cost = np.asarray(self.cost(n, length), dtype=np.float64)
        ok = np.broadcast_to(cost <= self.max_cost, n.shape).copy()
        if self.max_batch_size is not None:
            ok &= n <= self.max_batch_size
        out: NDArray[np.bool_] = ok | (n == 1)
        return out

    def choose(
        self,
        lengths: Indices,
        offsets: Indices,
        rows: Indices | None = None,
        *,
        strict: bool = True,
    ) -> Layouts:
        """Every micro-batch's layout: micro-batch ``m`` is ``lengths[offsets[m]:offsets[m+1]]``;
        ``rows[m] > 0``, where given, is its next-fit row count already known. One that fits
        neither layout is an :class:`~dynbatch.InputError`, or (``strict=False``, a candidate
        the planner weighs) padded at ``inf`` seconds."""
        if self.time_model is None:
            raise InputError("PackLayout.choose prices micro-batches: it needs a time_model")
        lengths = check_lengths(lengths)
        offsets = _check_offsets(offsets, lengths.size)
        m = offsets.size - 1
        if m == 0:
            z = np.zeros(0, dtype=np.int64)
            return Layouts(np.zeros(0, dtype=bool), z, z, np.zeros(0, dtype=np.float64))
        starts = offsets[:-1]
        sizes = np.diff(offsets)
        longest = np.maximum.reduceat(lengths, starts)
        tokens = np.add.reduceat(lengths, starts)
        width = np.maximum(longest, self.pack_len)
        keep = 1.0 - self.error
        pad_ok = self._fits(sizes, longest)
        pad_s = _predict(self.time_model, sizes, longest)
        fewest = -(-tokens // width)  # no layout of rows holds fewer
        maybe = ~pad_ok | (_predict(self.time_model, fewest, width) < pad_s * keep)
        counts = np.zeros(m, dtype=np.int64) if rows is None else np.asarray(rows, np.int64).copy()
        need = np.flatnonzero(maybe & (counts <= 0))
        if need.size:
            counts[need] = _next_fit_counts(lengths, offsets, need, self.pack_len)
        counts = np.where(maybe, counts, fewest)
        pack_ok = maybe & self._fits(counts, width)
        pack_s = _predict(self.time_model, counts, width)
        packed = pack_ok & (~pad_ok | (pack_s < pad_s * keep))
        if strict and not (pad_ok | pack_ok).all():
            k = int(np.flatnonzero(~(pad_ok | pack_ok))[0])
            raise InputError(
                f"a micro-batch of {int(sizes[k])} samples (longest {int(longest[k])}) fits "
                f"max_cost={self.max_cost:g} neither padded nor as {int(counts[k])} rows of "
                f"pack_len={self.pack_len}: give the collator the sampler's micro-batches, or "
                "raise max_cost"
            )
        seconds = np.where(packed, pack_s, pad_s)
        return Layouts(
            packed,
            np.where(packed, counts, sizes),
            np.where(packed, width, longest),
            np.where(pad_ok | pack_ok, seconds, np.inf),
        )


def _check_offsets(offsets: Any, n: int) -> Indices:
    """``offsets`` as micro-batch bounds over ``n`` samples: 1-D integers from 0 up to ``n``,
    each micro-batch holding at least one sample."""
    arr = np.asarray(offsets) if isinstance(offsets, (list, tuple, np.ndarray)) else None
    valid = f"a 1-D integer array rising from 0 to len(lengths)={n}, such as [0, {n}]"
    if arr is None or arr.ndim != 1 or arr.dtype == np.bool_:
        raise InputTypeError(f"offsets must be {valid}; got offsets={offsets!r:.80}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise InputTypeError(f"offsets must be {valid}; got dtype {arr.dtype}: {offsets!r:.80}")
    if arr.size == 0 or arr[0] != 0 or arr[-1] != n or (arr.size > 1 and (np.diff(arr) <= 0).any()):
        raise InputError(
            f"offsets must be {valid} (every micro-batch non-empty); got offsets={offsets!r:.80}"
        )
    return arr.astype(np.int64, copy=False)


def _next_fit_counts(lengths: Indices, offsets: Indices, which: Indices, pack_len: int) -> Indices:
    """Next-fit rows of micro-batches ``which`` (NOTE [ rows by next-fit ]): all at once, a
    sample position at a time, the longest micro-batches first."""
    starts = offsets[which]
    sizes = offsets[which + 1] - starts
    order = np.argsort(-sizes, kind="stable")
    starts, sizes = starts[order], sizes[order]
    count = np.zeros(sizes.size, dtype=np.int64)
    room = np.full(sizes.size, -1, dtype=np.int64)
    active = np.searchsorted(-sizes, -np.arange(int(sizes.max()) if sizes.size else 0), "left")
    for j, k in enumerate(active.tolist()):
        v = lengths[starts[:k] + j]
        new = (v > room[:k]) | (v > pack_len)
        count[:k] += new
        room[:k] = np.where(new, pack_len - v, room[:k] - v)
    out = np.empty_like(count)
    out[order] = count
    return out


class _Grid:
    """``step`` evaluated once on every ``n`` in ``1..top`` and every length given, then
    looked up (a table's interpolation per call is what the cuts would otherwise pay for);
    elsewhere, ``step`` itself. The same values either way: it only caches them."""

    def __init__(self, step: Any, lengths: Indices, top: int) -> None:
        self.step = step
        self.error = float(getattr(step, "error", 0.0) or 0.0)
        self.lengths = _distinct(lengths).astype(np.float64)
        self.top = top
        n = np.arange(1, top + 1, dtype=np.float64)
        self.table = _predict(step, n[:, None], self.lengths[None, :])

    def __call__(self, n: Any, length: Any) -> NDArray[np.float64]:
        n0, l0 = np.asarray(n), np.asarray(length)  # looked up before broadcasting: the cuts
        col = np.minimum(np.searchsorted(self.lengths, l0), self.lengths.size - 1)  # pass rows
        l_hit = self.lengths[col] == l0  # and columns
        n_hit = (n0 >= 1) & (n0 <= self.top) & (n0 == np.floor(n0))
        row = np.where(n_hit, n0, 1).astype(np.int64) - 1
        out = self.table[row, col]
        hit = n_hit & l_hit
        if not hit.all():
            out = np.array(out, dtype=np.float64)  # a copy: the broadcast is read-only
            n_, l_, hit = np.broadcast_arrays(n0, l0, hit)
            out[~hit] = np.asarray(self.step(n_[~hit], l_[~hit]), dtype=np.float64)
        return np.asarray(out, dtype=np.float64)


def _distinct(lengths: Indices) -> Indices:
    """The distinct lengths, ascending: counted where they are few (lengths are), else sorted."""
    top = int(lengths.max(initial=0))
    if top <= 4 * lengths.size + (1 << 20):
        return np.flatnonzero(np.bincount(lengths, minlength=top + 1))
    return np.unique(lengths)


def step_time(time_model: Any) -> Any:
    """A vectorised ``(n, L) -> seconds``: a callable as it is; ``"c,a,b"``, a dict or an object
    with coefficients ``c``, ``a``, ``b`` as a :class:`~dynbatch.StepTimeModel`."""
    if isinstance(time_model, (str, dict)) or (
        not callable(time_model) and hasattr(time_model, "c")
    ):  # coefficients c, a, b, as check_time_model takes them
        return check_time_model(time_model)
    if not callable(time_model):
        raise InputTypeError(
            "time_model must be a step time: a StepTimeModel, a StepTimeTable, a 'c,a,b' string "
            f"or a vectorised callable (n, L) -> seconds, got time_model={time_model!r}"
        )
    error = getattr(time_model, "error", 0.0) or 0.0
    if isinstance(error, bool) or not isinstance(error, (int, float)) or not 0 <= error < 1:
        raise InputError(f"time_model error must be a number in [0, 1), got error={error!r}")
    return time_model


def _predict(step: Any, n: NDArray[Any], length: NDArray[Any]) -> NDArray[np.float64]:
    with np.errstate(over="ignore", invalid="ignore"):
        raw = step(n, length)
        try:
            out = np.asarray(raw, dtype=np.float64)
        except (TypeError, ValueError):
            raise InputTypeError(
                "time_model must return a step's seconds as numbers, got "
                f"time_model(n, L)={raw!r:.80} for n={n!r:.40}, L={length!r:.40}"
            ) from None
    out = np.broadcast_to(out, np.broadcast(n, length).shape)
    bad = ~(np.isfinite(out) & (out >= 0))
    if bad.any():
        k = int(np.flatnonzero(bad.reshape(-1))[0])
        raise InputError(
            f"time_model predicts {out.reshape(-1)[k]} seconds for a step of "
            f"{int(np.broadcast_to(n, out.shape).reshape(-1)[k])} samples of length "
            f"{int(np.broadcast_to(length, out.shape).reshape(-1)[k])}: a step's seconds must be "
            "finite and >= 0"
        )
    return out


# -- candidates: each update's micro-batches, one way ---------------------------------------------
@dataclass(frozen=True)
class _Way:
    """Every update's micro-batches run one way, step-major (micro-batch ``k``: rank
    ``k % ranks`` of step ``k // ranks``); update ``u`` is micro-batches
    ``update_micro[u]:update_micro[u + 1]``."""

    micro: Plan
    padding: NDArray[np.bool_]
    update_micro: Indices
    layouts: Layouts
    ranks: int

    @property
    def update_seconds(self) -> NDArray[np.float64]:
        """Each update's seconds: its steps, each its slowest rank's."""
        steps = self.layouts.seconds.reshape(-1, self.ranks).max(axis=1)
        bounds = self.update_micro // self.ranks
        out = np.zeros(bounds.size - 1, dtype=np.float64)
        has = bounds[1:] > bounds[:-1]
        if has.any():
            out[has] = np.add.reduceat(steps, bounds[:-1][has])
        return out


def _way(
    micro: Plan,
    padding: Any,
    update_micro: Any,
    layout: PackLayout,
    lens: Indices,
    ranks: int,
    rows: Indices | None = None,
) -> _Way:
    layouts = layout.choose(lens[micro.indices], micro.offsets, rows, strict=False)
    bounds = np.asarray(update_micro, dtype=np.int64)
    return _Way(micro, np.asarray(padding, dtype=bool), bounds, layouts, ranks)


def _concat(plans: list[Plan]) -> Plan:
    if not plans:
        return Plan(np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64))
    indices = np.concatenate([p.indices for p in plans])
    shifts = np.cumsum([0] + [int(p.offsets[-1]) for p in plans[:-1]])
    offsets = np.concatenate(
        [[0]] + [p.offsets[1:] + s for p, s in zip(plans, shifts, strict=True)]
    )
    return Plan(indices, offsets.astype(np.int64))


def _deal_cuts(members: Indices, cuts: NDArray[np.bool_], ranks: int) -> tuple[Plan, Indices]:
    """Micro-steps of sorted ``members`` ending where ``cuts``, each dealt to the ranks as
    :func:`~dynbatch.plan.splits.plan_split_updates` deals it: rank ``r`` takes every
    ``r``-th sample; a rank with none repeats the step's first, flagged. Step-major."""
    flat = members.reshape(-1)
    ends = cuts.reshape(-1)
    seg = np.cumsum(np.r_[0, ends[:-1]]).astype(np.int64)
    seg_start = np.flatnonzero(np.r_[True, ends[:-1]])
    if ranks == 1:
        return Plan(flat, np.r_[0, np.flatnonzero(ends) + 1]), np.zeros(seg_start.size, bool)
    pos = np.arange(flat.size) - seg_start[seg]
    key = seg * ranks + pos % ranks
    count = np.bincount(key, minlength=seg_start.size * ranks)
    empty = np.flatnonzero(count == 0)
    values = np.concatenate([flat, flat[seg_start[empty // ranks]]])
    keys = np.concatenate([key, empty])
    order = np.argsort(keys, kind="stable")
    sizes = np.where(count == 0, 1, count)
    return Plan(values[order], np.r_[0, np.cumsum(sizes)]), count == 0


def _split_ways(
    lens: Indices,
    updates: Plan,
    options: PlanOptions,
    layout: PackLayout,
    ranks: int,
    beat: NDArray[np.float64] | None = None,
) -> tuple[_Way, _Way, NDArray[np.bool_], NDArray[np.float64]]:
    """Each update whole and split at the step time, where the whole fits the budget, and
    each update's split seconds (inf where the cut is not searched: packing is kept).

    The cut is searched only where it could be kept: a cut of two micro-steps or more takes
    at least ``t(1, shortest) + t(1, longest)`` (the step time grows with ``n`` and ``L``),
    so where that is no faster than the whole by the model's error the search would keep
    the whole, and where ``beat`` (the packed way's seconds) is faster than both by it,
    packing is kept whatever the cut: there the split is not searched (its micro-batches
    are the whole's, its seconds inf).
    """
    sizes = updates.sizes
    n_updates = sizes.size
    budget = options.replace(batch_size_multiple=1)
    distinct = _distinct(lens)  # each length's capacity once, not once a sample
    capacity_of = np.zeros(int(distinct[-1]) + 1, dtype=np.int64)
    capacity_of[distinct] = batch_capacity(distinct, budget, int(sizes.max(initial=1)))
    groups = []
    whole_fits = np.zeros(n_updates, dtype=bool)
    for size in np.unique(sizes).tolist():
        which = np.flatnonzero(sizes == size)
        members = updates.indices[updates.offsets[which][:, None] + np.arange(size)]
        members = np.take_along_axis(members, np.argsort(lens[members], axis=1), axis=1)
        sorted_lens = lens[members]
        capacity = capacity_of[sorted_lens]
        whole_fits[which] = -(-size // ranks) <= np.maximum(capacity[:, -1], 1)
        whole = np.zeros(members.shape, dtype=bool)
        whole[:, -1] = True
        groups.append((which, members, sorted_lens, capacity, whole))
    whole_way = _gather(groups, [g[4] for g in groups], n_updates, layout, lens, ranks)
    whole_s = whole_way.update_seconds
    keep = 1.0 - layout.error
    cuts_of = []
    unsearched = np.zeros(n_updates, dtype=bool)
    for which, members, sorted_lens, capacity, whole in groups:
        cuts = whole.copy()
        if members.shape[1] > 1:
            fewest = _predict(layout.time_model, np.ones(2, np.int64), sorted_lens[:, [0, -1]])
            least = fewest.sum(axis=1)  # two micro-steps at the least
            target = np.where(whole_fits[which], whole_s[which], np.inf)
            search = ~(least >= target * keep)
            if beat is not None:
                packs = beat[which] < np.minimum(least, target) * keep
                unsearched[which[packs & search]] = True
                search &= ~packs
            if search.any():
                cuts[search] = split_update(
                    sorted_lens[search], capacity[search], layout.time_model, ranks
                )
        cuts_of.append(cuts)
    split_way = _gather(groups, cuts_of, n_updates, layout, lens, ranks)
    split_s = np.where(unsearched, np.inf, split_way.update_seconds)
    return split_way, whole_way, whole_fits, split_s


def _gather(
    groups: list[Any],
    cuts_of: list[NDArray[np.bool_]],
    n_updates: int,
    layout: PackLayout,
    lens: Indices,
    ranks: int,
) -> _Way:
    """The updates of every group cut at ``cuts_of``, dealt, in update order, laid out."""
    parts = []
    for (which, members, *_), cuts in zip(groups, cuts_of, strict=True):
        micro, padding = _deal_cuts(members, cuts, ranks)
        parts.append((micro, padding, np.repeat(which, cuts.sum(axis=1) * ranks)))
    micro = _concat([p[0] for p in parts])
    padding = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, dtype=bool)
    owner = np.concatenate([p[2] for p in parts]) if parts else np.zeros(0, dtype=np.int64)
    order = np.argsort(owner, kind="stable")
    taken = micro.take(order)
    bounds = np.r_[0, np.cumsum(np.bincount(owner, minlength=n_updates))]
    return _way(Plan(taken.indices, taken.offsets), padding[order], bounds, layout, lens, ranks)


def _choose(
    packed: NDArray[np.float64],
    split: NDArray[np.float64],
    whole: NDArray[np.float64],
    fits: NDArray[np.bool_],
    error: float,
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Per update, the way kept (NOTE [ choosing packing per update ]) and every way's seconds."""
    seconds = np.stack([packed, split, whole], axis=1)
    choice = np.where(fits & (whole <= split), _WHOLE, _SPLIT).astype(np.int64)
    best = np.where(choice == _WHOLE, whole, split)
    choice[packed < best * (1.0 - error)] = _PACKED
    return choice, seconds


def _select(ways: list[_Way], choice: Indices) -> tuple[Plan, NDArray[np.bool_], Indices, Layouts]:
    """The micro-batches of way ``choice[u]`` for each update ``u``, update after update."""
    big = _concat([w.micro for w in ways])
    base = np.cumsum([0] + [len(w.micro) for w in ways[:-1]])
    lo = np.stack([w.update_micro[:-1] + b for w, b in zip(ways, base, strict=True)], axis=1)
    hi = np.stack([w.update_micro[1:] + b for w, b in zip(ways, base, strict=True)], axis=1)
    rows = np.arange(choice.size)
    start, count = lo[rows, choice], hi[rows, choice] - lo[rows, choice]
    ends = np.cumsum(count)
    ids = np.arange(int(ends[-1]) if ends.size else 0) + np.repeat(start - (ends - count), count)
    picked = big.take(ids)
    padding = np.concatenate([w.padding for w in ways])[ids]
    layouts = Layouts(
        *(np.concatenate([getattr(w.layouts, f) for w in ways])[ids] for f in Layouts._fields)
    )
    return Plan(picked.indices, picked.offsets), padding, np.r_[0, ends], layouts


# -- the plan -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PackChoice:
    """An epoch of packed updates, each run the way the step time predicts fastest.

    ``micro_batches[m]`` is micro-batch ``m``'s samples, step-major (rank
    ``m % ranks`` of step ``m // ranks``; on one rank, in order): row after
    row where ``packed[m]`` (:class:`PackLayout` lays it out so; give them to
    :class:`~dynbatch.PackCollator`), else a padded batch, shortest first;
    update ``u`` is micro-batches ``update_offsets[u]:update_offsets[u + 1]``;
    ``seconds[u, k]`` is update ``u``'s predicted time run as ``CHOICES[k]``,
    and ``choice[u]`` the one kept. ``sharded`` is the same plan as the
    samplers consume it.

    >>> lens = [7, 1, 6, 1, 7, 1, 6, 2]
    >>> c = choose_packing(lens, 8, batch_size=4, time_model="0.5,1,0", max_rows=2)
    >>> [CHOICES[k] for k in c.choice], c.packed.tolist(), c.epoch_seconds
    (['split', 'packed'], [False, False, False, True], 33.0)
    >>> [b.tolist() for b in c.micro_batches], [s.tolist() for s in c.step_shapes]
    ([[3, 1], [2], [0], [4, 5, 6, 7]], [[2, 1, 1, 2], [1, 6, 7, 8]])
    >>> c = choose_packing(lens, 8, batch_size=4, time_model="1,0,0")
    >>> c.counts, c.epoch_seconds
    ({'packed': 0, 'split': 0, 'whole': 2}, 2.0)
    """

    plan: PackPlan
    micro_batches: Plan
    packed: NDArray[np.bool_]
    update_offsets: Indices
    choice: NDArray[np.int64]
    seconds: NDArray[np.float64]
    #: Per update: its whole step fits the memory budget.
    whole_fits: NDArray[np.bool_]
    #: Per micro-batch, the step's shape as priced: rows or samples ``n``, width ``L``.
    step_shapes: tuple[Indices, Indices]
    #: True where the fixed batch's own updates, each split or whole, are predicted faster
    #: than the packed plan's: the epoch runs those (NOTE [ choosing packing per update ]).
    from_fixed: bool
    #: The epoch as the samplers deal it to ``sharded.num_replicas`` ranks.
    sharded: ShardedPlan | None = None
    #: Per micro-batch, its predicted seconds as laid out.
    micro_seconds: NDArray[np.float64] | None = None

    @property
    def num_replicas(self) -> int:
        """Ranks the epoch is dealt to."""
        return 1 if self.sharded is None else self.sharded.num_replicas

    @property
    def updates(self) -> Plan:
        """Every update's samples, as run (repeats of padding micro-batches included)."""
        return Plan(self.micro_batches.indices, self.micro_batches.offsets[self.update_offsets])

    @property
    def num_updates(self) -> int:
        """Updates in the epoch."""
        return int(self.choice.size)

    @property
    def chosen_seconds(self) -> NDArray[np.float64]:
        """Each update's predicted seconds, run as chosen."""
        return np.asarray(self.seconds[np.arange(self.choice.size), self.choice], np.float64)

    @property
    def epoch_seconds(self) -> float:
        """The epoch's predicted seconds, each update run as chosen."""
        return float(self.chosen_seconds.sum())

    @property
    def whole_seconds(self) -> float:
        """The epoch's predicted seconds with every update one step a rank (inf if one fits
        the budget in neither layout)."""
        return float(self.seconds[:, _WHOLE].sum())

    @property
    def counts(self) -> dict[str, int]:
        """Updates run each way."""
        return {name: int((self.choice == k).sum()) for k, name in enumerate(CHOICES)}


def plan_timed_packs(
    lengths: Any,
    options: PlanOptions,
    epoch: int,
    num_replicas: int = 1,
    loss_tokens: Any = None,
    *,
    time_model: Any = None,
    window: int | None = None,
    fixed_size: int | None = None,
) -> PackChoice:
    """The packed epoch of ``options`` (``pack_len``), each update packed, split or whole, for
    ``num_replicas`` ranks (NOTE [ choosing packing per update ]); ``.sharded`` is the plan.

    ``time_model`` (default ``options.time_model``) may be any step time, a
    :class:`~dynbatch.StepTimeTable` too; ``window`` is :func:`~dynbatch.plan_packs`';
    ``fixed_size`` the fixed batch's samples an update, all ranks (default ``update_size``).

    >>> opts = PlanOptions(max_cost=16, cost="linear", pack_len=8, update_size=4,
    ...                    time_model="1,0.1,0", order="shuffle")
    >>> c = plan_timed_packs([5, 3, 4, 2, 6, 1, 7, 8], opts, epoch=0, num_replicas=2)
    >>> c.sharded.num_steps, sorted(c.sharded.plan.indices.tolist())
    (2, [0, 1, 2, 3, 4, 5, 6, 7])
    """
    lens = check_lengths(lengths)
    if not isinstance(options, PlanOptions) or options.pack_len is None:
        raise InputError(f"plan_timed_packs plans options with pack_len, got options={options!r}")
    if options.update_size is None:
        raise InputError("plan_timed_packs needs options with update_size, got update_size=None")
    step = step_time(options.time_model if time_model is None else time_model)
    if step is None:
        raise InputError("plan_timed_packs prices steps: give time_model, got time_model=None")
    ranks = check_int("num_replicas", num_replicas, minimum=1)
    top = min(_GRID_TOP, max(-(-math.ceil(options.update_size) // ranks) * 2, 64))
    layout = PackLayout.from_options(options, _Grid(step, np.r_[lens, options.pack_len], top))
    counts = check_loss_tokens(loss_tokens, lens)
    pack_len, size = options.pack_len, options.update_size
    tokens = options.update_unit == "tokens"
    counted = (counts if counts is not None else lens) if tokens else None
    kept = lens <= pack_len if options.oversize == "skip" else np.ones(lens.size, dtype=bool)
    total = float(kept.sum()) if counted is None else float(counted[kept].sum())
    n_updates = max(1, math.ceil(total / float(size) - 1e-9))  # NOTE [ mixed updates ]'s count
    packs = plan_packs(
        lens,
        pack_len,
        batch_size=max(1, round(int(kept.sum()) / n_updates)),
        loss_tokens=counted,
        update_unit=options.update_unit,
        window=window,
        oversize=options.oversize,
        seed=options.seed,
        epoch=epoch,
        num_updates=n_updates,
    )
    # (i) packed: the rows dealt; (ii) split and (iii) whole: the samples sorted
    rows = Plan(packs.micro_batches.indices, packs.row_offsets)
    update_rows = packs.micro_row_offsets[packs.update_offsets]
    dealt, known = deal_rows_counted(rows, update_rows, lens, pack_len, options.max_rows, ranks)
    bounds = np.r_[0, np.asarray(dealt.window_ends)] * ranks
    packed = _way(dealt.base, dealt.is_padding, bounds, layout, lens, ranks, known)
    packed_s = packed.update_seconds
    split, whole, fits, split_s = _split_ways(lens, packs.updates, options, layout, ranks, packed_s)
    choice, seconds = _choose(packed_s, split_s, whole.update_seconds, fits, layout.error)
    # the fixed batch's own updates, each split or whole (NOTE [ choosing packing per update ])
    if fixed_size is not None:
        fixed = check_int("fixed_size", fixed_size, minimum=1)
    else:
        fixed = max(1, round(int(kept.sum()) / n_updates if tokens else size))
    order = shuffled(np.flatnonzero(kept), options.seed, epoch)
    f_updates = Plan(order, np.r_[np.arange(0, order.size, fixed), order.size])
    f_split, f_whole, f_fits, f_split_s = _split_ways(lens, f_updates, options, layout, ranks)
    never = np.full(len(f_updates), np.inf)  # the fixed batch's updates are never packed
    f_choice, f_seconds = _choose(never, f_split_s, f_whole.update_seconds, f_fits, layout.error)
    mixed = seconds[np.arange(choice.size), choice].sum()
    plain = f_seconds[np.arange(f_choice.size), f_choice].sum()
    from_fixed = not mixed < plain
    ways = [f_split, f_split, f_whole] if from_fixed else [packed, split, whole]
    kept_choice = f_choice if from_fixed else choice
    micro, padding, offsets, layouts = _select(ways, kept_choice)
    sharded = ShardedPlan(
        micro, np.arange(len(micro), dtype=np.int64), padding, ranks, offsets[1:] // ranks
    )
    return PackChoice(
        packs,
        micro,
        layouts.packed,
        offsets,
        kept_choice,
        f_seconds if from_fixed else seconds,
        f_fits if from_fixed else fits,
        (layouts.n, layouts.width),
        from_fixed,
        sharded,
        layouts.seconds,
    )


def plan_packed(
    lengths: NDArray[np.int64],
    options: PlanOptions,
    epoch: int,
    num_replicas: int = 1,
    loss_tokens: NDArray[Any] | None = None,
) -> ShardedPlan:
    """The packed epoch the samplers and streams run: at the step time with a ``time_model``
    (:func:`plan_timed_packs`), else every update's rows (:func:`plan_packed_epoch`)."""
    if options.time_model is None:  # NOTE [ packed epochs ]
        return plan_packed_epoch(lengths, options, epoch, num_replicas, loss_tokens)
    chosen = plan_timed_packs(lengths, options, epoch, num_replicas, loss_tokens)
    assert chosen.sharded is not None
    return chosen.sharded


def packed_epoch_seconds(
    sharded: ShardedPlan, lengths: Any, options: PlanOptions, time_model: Any = None
) -> float:
    """Predicted seconds of a packed epoch, each micro-batch laid out as it runs
    (NOTE [ a micro-batch's layout ]), each step its slowest rank's."""
    lens = check_lengths(lengths)
    layout = PackLayout.from_options(options, time_model)
    base = sharded.plan
    seconds = layout.choose(lens[base.indices], base.offsets).seconds
    if seconds.size == 0:
        return 0.0
    return float(seconds.reshape(-1, sharded.num_replicas).max(axis=1).sum())


def choose_packing(
    lengths: Any,
    pack_len: int,
    *,
    batch_size: int,
    time_model: Any,
    max_rows: int | None = None,
    max_cost: float | None = None,
    cost: CostLike = "quadratic",
    loss_tokens: Any = None,
    update_unit: str = "samples",
    window: int | None = None,
    oversize: str = "error",
    seed: int = 0,
    epoch: int = 0,
) -> PackChoice:
    """The packed plan of ``epoch``, each update run packed, split or whole: the fastest.

    The samplers' plan (:func:`plan_timed_packs`) on one rank, with updates of
    ``batch_size`` samples (or its loss tokens). NOTE [ choosing packing per update ]
    says what is compared and why the epoch is never predicted slower
    than the fixed batch's.

    Args:
        lengths: tokens per sample.
        pack_len: tokens per packed row.
        batch_size: the fixed batch's samples per update.
        time_model: a device's step time: a :class:`~dynbatch.StepTimeModel`, a
            :class:`~dynbatch.StepTimeTable`, ``"c,a,b"``, or any vectorised
            ``(n, L) -> seconds``; its ``error`` (0 if absent) is the margin a
            faster prediction must clear.
        max_rows: rows per packed micro-batch (a padded one holds at most
            ``max_rows * pack_len`` padded tokens).
        max_cost: the memory budget, under ``cost``: a packed micro-batch of
            ``R`` rows costs ``cost(R, pack_len)``; give it or ``max_rows``
            (neither: no budget).
        cost: the cost of a batch, ``"quadratic"``, ``"linear"`` or a callable.
        loss_tokens, update_unit, window, oversize, seed, epoch: as
            :func:`~dynbatch.plan_packs`.

    Returns:
        A :class:`PackChoice`.
    """
    lens = check_lengths(lengths)
    pack_len = check_int("pack_len", pack_len, minimum=1)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    step = step_time(time_model)
    if update_unit == "tokens" and step is not None:  # as PlanOptions and the samplers refuse it
        raise InputError(
            "time_model cuts updates of batch_size samples (the fixed batch's) at the step "
            "time: it needs update_unit='samples', got update_unit='tokens'"
        )
    max_rows = check_int("max_rows", max_rows, minimum=1, allow_none=True)
    if max_cost is not None and max_rows is not None:
        raise InputError(
            f"give max_rows or max_cost, not both; got max_rows={max_rows} and "
            f"max_cost={max_cost!r}"
        )
    if max_cost is None:  # rows of max_rows, or no budget: padded tokens within them
        widest = max(pack_len, int(lens.max()))
        max_cost = float(max_rows * pack_len if max_rows else 2 * widest * lens.size)
        cost = "linear"
    fn = resolve_cost(cost)
    one_row = float(np.asarray(fn(np.asarray([1]), np.asarray([pack_len])))[0])
    if one_row > float(max_cost):
        raise InputError(
            f"one row of pack_len={pack_len} tokens costs {one_row:g}, over max_cost="
            f"{float(max_cost):g}: lower pack_len or raise max_cost"
        )
    options = PlanOptions(
        max_cost=max_cost,
        cost=fn,
        order="shuffle",
        seed=seed,
        oversize=oversize,
        update_size=batch_size,
        update_unit=update_unit,
        pack_len=pack_len,
    )
    return plan_timed_packs(
        lens,
        options,
        epoch,
        loss_tokens=loss_tokens,
        time_model=step,
        window=window,
        fixed_size=batch_size,
    )
