"""An update's rows dealt as micro-batches to the ranks: numpy only.

NOTE [ dealing an update's rows ]
    An update runs as ``T`` micro-batches, a multiple of the ranks ``R``, so
    every rank takes ``T / R`` steps in every update and all step the optimizer
    together. ``T`` is the fewest that keep each micro-batch within
    :attr:`~dynbatch.PlanOptions.max_rows` (the most rows of ``pack_len`` the
    memory budget holds; a row is never wider, NOTE [ a micro-batch's layout ]
    in :mod:`dynbatch.plan.packs.layout`), and each sample longer than
    ``pack_len`` (``oversize="alone"``) a micro-batch of its own, rounded up to
    the ranks. The update's rows were packed so that there are at least as
    many as the micro-batches take (NOTE [ an update's rows ] in
    :mod:`dynbatch.plan.packs.rows`), so every rank has rows of its own.

    The rows, fullest first, are cut in order into near-equal counts: rows of alike fullness share a
    micro-batch, whose rows are padded to its fullest, and the steps are dealt heaviest first. A row
    is repeated (flagged in ``is_padding``, weight 0 in the loss, as sharding does:
    NOTE [ equal steps without dropping or repeating ] in :mod:`dynbatch.plan.sharding`) only where
    an update has fewer samples than micro-batches: fewer samples than ranks, or samples so long
    that the budget holds one a micro-batch.

    A micro-batch is a list of sample indices, row after row, each row's
    samples longest first; the collator rebuilds its rows by next-fit of that
    order (NOTE [ rows by next-fit ] in :mod:`dynbatch.plan.packs.layout`),
    which may join a row's head to the row before: never more rows, never a
    wider one than ``pack_len``, so the budget holds, and the planner prices
    the rows next-fit builds.

NOTE [ dealing by work on a padding-free kernel ]
    A dense row costs its width squared whatever it holds, so rows of alike
    fullness dealt alike keep the ranks level. FlashMask and varlen run each
    sample's own attention: a row of one sample of 2,048 tokens costs 8 times a
    row of 8 samples of 256, though both hold 2,048 tokens, and an update has
    few rows a rank, so dealing rows by tokens leaves ranks waiting on
    whichever drew the long sample. On several ranks those layouts deal the
    update's samples instead, longest first, each to the rank whose share of
    the update is least, a share counting both what a padding-free step grows
    with: its tokens and its samples' squared lengths, each over the update's
    total (no model's constants needed: every step time ``a·ΣL + b·ΣL²`` is then
    within the larger of the two imbalances). Each rank packs its own samples
    into rows as an update's are packed (NOTE [ an update's rows ] in
    :mod:`dynbatch.plan.packs.rows`) and runs them in as many micro-batches as
    the rank that needs most, so all ranks step together; a rank whose samples
    are fewer than that repeats one at weight 0.

    That deal is not always the better one. A rank given the update's samples
    longer than ``pack_len`` (each a micro-batch alone), or more rows than
    ``max_rows`` holds, needs more micro-batches than the rows' deal gives any
    rank, and every rank then steps as often, the extra steps repeats; and on
    samples much shorter than a row the tokens weigh most, which the rows'
    deal balances. So each update is dealt both ways and keeps the faster:
    with a step time, the deal it prices faster (its steps, each its slowest
    rank's); without one, the deal with fewer steps, then the one whose steps'
    slowest ranks hold the least tokens and squared lengths over the mean
    rank's share, the larger of the two ratios: the bound on its time over the
    least it could take that holds whatever the model's constants (a repeat
    counted as what it computes). The
    samples an update holds, and how many updates an epoch has, are the same
    either way: only which rank computes which sample changes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..plans import Indices, Plan, pick_spans
from ..sharding import ShardedPlan
from .rows import longest_first, pack_updates

__all__ = [
    "both_deals",
    "deal_rows",
    "deal_samples",
    "micro_batches_of",
    "pack_and_deal",
    "pick_deals",
]


def micro_batches_of(rows: Any, alone: Any, max_rows: int, ranks: int) -> Indices:
    """Micro-batches of an update of ``rows`` rows, ``alone`` of them oversize: a multiple of
    ``ranks``, each within ``max_rows`` rows, every oversize row alone
    (NOTE [ dealing an update's rows ]).

    >>> micro_batches_of(np.array([5, 1, 9]), np.array([0, 0, 1]), 2, 2).tolist()
    [4, 2, 6]
    """
    rows, alone = np.asarray(rows, np.int64), np.asarray(alone, np.int64)
    least = -(-(rows - alone) // max_rows) + alone
    out: Indices = np.maximum(ranks, -(-least // ranks) * ranks)
    return out


def pack_and_deal(
    lengths: Indices,
    updates: Plan,
    pack_len: int,
    max_rows: int,
    ranks: int,
    by_work: bool = False,
) -> ShardedPlan:
    """``updates`` (the samples of each) packed into rows and dealt to ``ranks`` ranks; with
    ``by_work`` (a padding-free kernel's layout) each update dealt so, or as its samples dealt
    to the ranks by their work and each rank's packed, whichever is faster
    (NOTE [ dealing by work on a padding-free kernel ]).

    >>> lens = np.array([5, 3, 4, 2, 6, 1, 7, 8])
    >>> sp = pack_and_deal(lens, Plan.from_batches([[0, 1, 2, 3], [4, 5, 6, 7]]), 8, 1, 2)
    >>> [b.tolist() for b in sp.plan], sp.window_ends.tolist(), sp.is_padding.any()
    ([[0, 3], [2, 1], [7], [6], [4], [5]], [1, 3], False)
    >>> sp = pack_and_deal(lens, Plan.from_batches([[0, 1, 2, 3], [4, 5, 6, 7]]), 8, 1, 2, True)
    >>> [b.tolist() for b in sp.plan], sp.window_ends.tolist(), sp.is_padding.any()
    ([[0, 3], [2, 1], [7], [6], [4], [5]], [1, 3], False)
    """
    if by_work and ranks > 1:
        return _deal_by_work(lengths, updates, pack_len, max_rows, ranks)
    over = np.repeat(np.arange(len(updates)), updates.sizes)[lengths[updates.indices] > pack_len]
    alone = np.bincount(over, minlength=len(updates))

    def least(fewest: Indices) -> Indices:
        return micro_batches_of(fewest, alone, max_rows, ranks)

    rows, update_rows = pack_updates(lengths, updates, pack_len, least)
    return deal_rows(rows, update_rows, lengths, pack_len, max_rows, ranks)


def deal_samples(lengths: Indices, updates: Plan, ranks: int) -> Plan:
    """Each update's samples shared among ``ranks`` ranks by their work
    (NOTE [ dealing by work on a padding-free kernel ]): group ``u * ranks + r`` is rank
    ``r``'s share of update ``u``, its samples longest first.

    >>> shares = deal_samples(np.array([8, 1, 1, 1, 4, 4]), Plan.from_batches([range(6)]), 2)
    >>> [g.tolist() for g in shares]
    [[0], [4, 5, 1, 2, 3]]
    """
    sizes = updates.sizes
    n_updates = sizes.size
    if n_updates == 0 or int(sizes.max()) == 0:
        return Plan(np.zeros(0, np.int64), np.zeros(n_updates * ranks + 1, np.int64))
    idx, whole = longest_first(lengths, updates)
    lens = whole.astype(np.float64)
    width = lens.shape[1]
    tokens = np.maximum(lens.sum(axis=1, keepdims=True), 1.0)
    squares = np.maximum((lens**2).sum(axis=1, keepdims=True), 1.0)
    share = np.zeros((n_updates, ranks))  # each rank's tokens and squares, over the update's
    rank_of = np.full((n_updates, width), -1, dtype=np.int64)
    every = np.arange(n_updates)
    for k in range(width):
        act = lens[:, k] > 0
        if not act.any():
            break
        least = share.argmin(axis=1)  # the first such rank, on a tie
        rank_of[act, k] = least[act]
        share[every[act], least[act]] += (lens[act, k] / tokens[act, 0]) + (
            lens[act, k] ** 2 / squares[act, 0]
        )
    u, place = np.nonzero(rank_of >= 0)
    group = u * ranks + rank_of[u, place]
    order = np.lexsort((place, group))
    counts = np.bincount(group, minlength=n_updates * ranks)
    return Plan(idx[u, place][order], np.r_[0, np.cumsum(counts)].astype(np.int64))


def _deal_by_work(
    lengths: Indices, updates: Plan, pack_len: int, max_rows: int, ranks: int
) -> ShardedPlan:
    """:func:`pack_and_deal` on a padding-free kernel's layout, on several ranks: each update
    dealt as its samples by work or as its rows, whichever takes fewer steps, then leaves the
    ranks waiting less (NOTE [ dealing by work on a padding-free kernel ])."""
    deals = both_deals(lengths, updates, pack_len, max_rows, ranks)
    steps, waits = zip(*(_steps_and_waits(lengths, d) for d in deals), strict=True)
    return pick_deals(
        deals, (steps[1] < steps[0]) | ((steps[1] == steps[0]) & (waits[1] < waits[0]))
    )


def both_deals(
    lengths: Indices, updates: Plan, pack_len: int, max_rows: int, ranks: int
) -> list[ShardedPlan]:
    """Every update dealt as its rows, and as its samples by work
    (NOTE [ dealing by work on a padding-free kernel ])."""
    return [
        pack_and_deal(lengths, updates, pack_len, max_rows, ranks),
        _samples_by_work(lengths, updates, pack_len, max_rows, ranks),
    ]


def pick_deals(deals: list[ShardedPlan], choice: Any) -> ShardedPlan:
    """Update ``u`` as ``deals[choice[u]]`` deals it, update after update."""
    ranks = deals[0].num_replicas
    plans = [d.plan for d in deals]
    bounds = [np.r_[0, d.window_ends] * ranks for d in deals]
    picked, ids, ends = pick_spans(plans, bounds, np.asarray(choice, dtype=np.int64))
    padding = np.concatenate([d.is_padding for d in deals])[ids]
    return ShardedPlan(
        picked, np.arange(len(picked), dtype=np.int64), padding, ranks, ends // ranks
    )


def _steps_and_waits(lengths: Indices, dealt: ShardedPlan) -> tuple[Indices, Any]:
    """Each update's steps, and how long its ranks take over the least they could: the larger
    of its steps' slowest ranks' tokens and of their squared lengths, each summed over the
    update's steps and over its mean rank's, a repeat counted as what it computes
    (NOTE [ dealing by work on a padding-free kernel ])."""
    ranks = dealt.num_replicas
    ends = np.asarray(dealt.window_ends, dtype=np.int64)
    steps = np.diff(np.r_[0, ends])
    update = np.repeat(np.arange(steps.size), steps)  # of each step
    real = ~dealt.is_padding
    worst = np.zeros(steps.size)
    for work in (dealt.real_tokens(lengths), dealt.real_tokens(lengths.astype(np.int64) ** 2)):
        work = work.astype(np.float64)
        slowest = work.reshape(-1, ranks).max(axis=1, initial=0.0)  # each step's slowest rank
        took = np.bincount(update, slowest, minlength=steps.size)
        mean = np.bincount(update, (work * real).reshape(-1, ranks).sum(axis=1), steps.size)
        worst = np.maximum(worst, took / np.maximum(mean / ranks, 1e-300))
    return steps, worst


def _samples_by_work(
    lengths: Indices, updates: Plan, pack_len: int, max_rows: int, ranks: int
) -> ShardedPlan:
    """Each update's samples dealt to the ranks by their work, each rank's packed into rows
    (NOTE [ dealing by work on a padding-free kernel ])."""
    n_updates = len(updates)
    shares = deal_samples(lengths, updates, ranks)
    groups = np.arange(n_updates * ranks)
    over = np.repeat(groups, shares.sizes)[lengths[shares.indices] > pack_len]
    alone = np.bincount(over, minlength=groups.size)
    steps = np.zeros(n_updates, dtype=np.int64)  # micro-batches of each rank in each update

    def least(fewest: Indices) -> Indices:
        own = micro_batches_of(fewest, alone, max_rows, 1)
        steps[:] = own.reshape(n_updates, ranks).max(axis=1) if n_updates else steps
        return np.repeat(steps, ranks)

    rows, group_rows = pack_updates(lengths, shares, pack_len, least)
    each = deal_rows(rows, group_rows, lengths, pack_len, max_rows, 1, np.repeat(steps, ranks))
    # rank r's s-th micro-batch of update u: step s of the update, rank r
    per_group, per_update = np.repeat(steps, ranks), steps * ranks
    first = np.cumsum(per_group) - per_group  # each group's first micro-batch
    update = np.repeat(np.arange(n_updates), per_update)
    place = np.arange(update.size) - np.repeat(np.cumsum(per_update) - per_update, per_update)
    order = first[update * ranks + place % ranks] + place // ranks
    return ShardedPlan(
        each.plan.take(order),
        np.arange(order.size, dtype=np.int64),
        each.is_padding[order],
        ranks,
        np.cumsum(steps).astype(np.int64),
    )


def deal_rows(
    rows: Plan,
    update_rows: Any,
    lengths: Indices,
    pack_len: int,
    max_rows: int,
    ranks: int,
    total: Any = None,
) -> ShardedPlan:
    """Rows, update ``u`` being rows ``update_rows[u]:update_rows[u + 1]`` (oversize rows
    first, then the others fullest first), as micro-batches dealt to ``ranks`` ranks
    (NOTE [ dealing an update's rows ]); ``window_ends`` mark the updates. ``total``: each
    update's micro-batches, where more than the fewest are wanted (a multiple of ``ranks``).

    >>> rows = Plan.from_batches([[0, 1], [2], [3], [4, 5], [6]])
    >>> sp = deal_rows(rows, np.array([0, 3, 5]), np.ones(7, np.int64), 2, 2, 2)
    >>> [b.tolist() for b in sp.plan], sp.window_ends.tolist(), sp.is_padding.tolist()
    ([[0, 1, 2], [3], [4, 5], [6]], [1, 2], [False, False, False, False])
    """
    bounds = np.asarray(update_rows, dtype=np.int64)
    n_updates = bounds.size - 1
    n_rows = len(rows)
    sizes = rows.sizes
    tokens = np.zeros(n_rows, dtype=np.int64)
    if n_rows:
        tokens = np.add.reduceat(lengths[rows.indices], rows.offsets[:-1])
    per_update = np.diff(bounds)
    update_of = np.repeat(np.arange(n_updates), per_update)
    alone = (sizes == 1) & (tokens > pack_len)
    k = np.bincount(update_of[alone], minlength=n_updates)
    r = per_update - k
    fewest = micro_batches_of(per_update, k, max_rows, ranks)
    total = fewest if total is None else np.maximum(np.asarray(total, np.int64), fewest)
    chunks = total - k  # the micro-batches of normal rows (empty ones repeat a row)
    base = r // np.maximum(chunks, 1)
    extra = r - base * chunks
    pos = np.arange(n_rows) - bounds[update_of]  # place in the update
    p = (pos - k[update_of])[~alone]  # place among the normal rows
    u = update_of[~alone]
    big = extra[u] * (base[u] + 1)
    chunk = np.where(p < big, p // (base[u] + 1), extra[u] + (p - big) // np.maximum(base[u], 1))
    local = np.empty(n_rows, dtype=np.int64)
    local[alone] = pos[alone]
    local[~alone] = k[u] + chunk
    micro_start = np.r_[0, np.cumsum(total)[:-1]]
    micro_of = micro_start[update_of] + local
    # the micro-batches no row reached repeat the update's lightest row (its last)
    repeats = chunks - np.minimum(chunks, r)
    fill_update = np.repeat(np.arange(n_updates), repeats)
    fill_first = micro_start + k + np.minimum(chunks, r)
    fill_micro = fill_first[fill_update] + (
        np.arange(fill_update.size) - np.r_[0, np.cumsum(repeats)[:-1]][fill_update]
    )
    fill_rows = bounds[1:][fill_update] - 1
    owner = np.concatenate([micro_of, fill_micro])
    order = np.argsort(owner, kind="stable")
    row_order = np.concatenate([np.arange(n_rows), fill_rows])[order]
    is_fill = np.r_[np.zeros(n_rows, bool), np.ones(fill_rows.size, bool)][order]
    owner = owner[order]
    first = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]]) if owner.size else owner
    dealt = rows.take(row_order)
    plan = Plan(dealt.indices, dealt.offsets[np.r_[first, row_order.size]])
    return ShardedPlan(
        plan,
        np.arange(len(plan), dtype=np.int64),
        is_fill[first] if owner.size else np.zeros(0, dtype=bool),
        ranks,
        np.cumsum(total // ranks).astype(np.int64),
    )
