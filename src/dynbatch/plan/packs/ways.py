"""Every update run one way (packed rows, split at the step time, or whole), priced: numpy only.

The candidates NOTE [ choosing packing per update ] (:mod:`dynbatch.plan.packs.timed`) weighs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..options import PlanOptions
from ..planning import batch_capacity
from ..plans import Indices, Plan, concat, pick_spans
from ..splits import split_update
from .layout import Layouts, PackLayout
from .steps import distinct, predict

__all__ = ["CHOICES", "Way", "choose", "select", "split_ways", "way"]

#: How an update runs: ``choice[u]`` indexes this.
CHOICES = ("packed", "split", "whole")
PACKED, SPLIT, WHOLE = 0, 1, 2


@dataclass(frozen=True)
class Way:
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


def way(
    micro: Plan,
    padding: Any,
    update_micro: Any,
    layout: PackLayout,
    lens: Indices,
    ranks: int,
) -> Way:
    layouts = layout.choose(lens[micro.indices], micro.offsets, strict=False)
    bounds = np.asarray(update_micro, dtype=np.int64)
    return Way(micro, np.asarray(padding, dtype=bool), bounds, layouts, ranks)


def deal_cuts(members: Indices, cuts: NDArray[np.bool_], ranks: int) -> tuple[Plan, Indices]:
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


def split_ways(
    lens: Indices,
    updates: Plan,
    options: PlanOptions,
    layout: PackLayout,
    ranks: int,
    beat: NDArray[np.float64] | None = None,
) -> tuple[Way, Way, NDArray[np.bool_], NDArray[np.float64]]:
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
    each = distinct(lens)  # each length's capacity once, not once a sample
    capacity_of = np.zeros(int(each[-1]) + 1, dtype=np.int64)
    capacity_of[each] = batch_capacity(each, budget, int(sizes.max(initial=1)))
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
    whole_way = gather(groups, [g[4] for g in groups], n_updates, layout, lens, ranks)
    whole_s = whole_way.update_seconds
    keep = 1.0 - layout.error
    cuts_of = []
    unsearched = np.zeros(n_updates, dtype=bool)
    for which, members, sorted_lens, capacity, whole in groups:
        cuts = whole.copy()
        if members.shape[1] > 1:
            fewest = predict(layout.time_model, np.ones(2, np.int64), sorted_lens[:, [0, -1]])
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
    split_way = gather(groups, cuts_of, n_updates, layout, lens, ranks)
    split_s = np.where(unsearched | _idle_ranks(split_way, sizes), np.inf, split_way.update_seconds)
    return split_way, whole_way, whole_fits, split_s


def _idle_ranks(way: Way, sizes: Indices) -> NDArray[np.bool_]:
    """Per update: the way repeats a row (a rank idle) though the update has a sample for
    every micro-batch: a repeat only where an update has fewer samples than micro-batches."""
    bounds = way.update_micro
    micro = np.diff(bounds)
    repeats = np.zeros(micro.size, dtype=np.int64)
    has = micro > 0
    if has.any():
        repeats[has] = np.add.reduceat(way.padding.astype(np.int64), bounds[:-1][has])
    out: NDArray[np.bool_] = (repeats > 0) & (sizes >= micro)
    return out


def gather(
    groups: list[Any],
    cuts_of: list[NDArray[np.bool_]],
    n_updates: int,
    layout: PackLayout,
    lens: Indices,
    ranks: int,
) -> Way:
    """The updates of every group cut at ``cuts_of``, dealt, in update order, laid out."""
    parts = []
    for (which, members, *_), cuts in zip(groups, cuts_of, strict=True):
        micro, padding = deal_cuts(members, cuts, ranks)
        parts.append((micro, padding, np.repeat(which, cuts.sum(axis=1) * ranks)))
    micro = concat([p[0] for p in parts])
    padding = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, dtype=bool)
    owner = np.concatenate([p[2] for p in parts]) if parts else np.zeros(0, dtype=np.int64)
    order = np.argsort(owner, kind="stable")
    taken = micro.take(order)
    bounds = np.r_[0, np.cumsum(np.bincount(owner, minlength=n_updates))]
    return way(Plan(taken.indices, taken.offsets), padding[order], bounds, layout, lens, ranks)


def choose(
    packed: NDArray[np.float64],
    split: NDArray[np.float64],
    whole: NDArray[np.float64],
    fits: NDArray[np.bool_],
    error: float,
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Per update, the way kept (NOTE [ choosing packing per update ]) and every way's seconds."""
    seconds = np.stack([packed, split, whole], axis=1)
    choice = np.where(fits & (whole <= split), WHOLE, SPLIT).astype(np.int64)
    best = np.where(choice == WHOLE, whole, split)
    choice[packed < best * (1.0 - error)] = PACKED
    return choice, seconds


def select(ways: list[Way], choice: Indices) -> tuple[Plan, NDArray[np.bool_], Indices, Layouts]:
    """The micro-batches of way ``choice[u]`` for each update ``u``, update after update."""
    picked, ids, ends = pick_spans([w.micro for w in ways], [w.update_micro for w in ways], choice)
    padding = np.concatenate([w.padding for w in ways])[ids]
    layouts = Layouts(
        *(np.concatenate([getattr(w.layouts, f) for w in ways])[ids] for f in Layouts._fields)
    )
    return picked, padding, np.r_[0, ends], layouts
