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

    The rows, fullest first, are cut in order into near-equal counts: rows of
    alike fullness share a micro-batch, whose rows are padded to its fullest,
    and the steps are dealt heaviest first. A row is repeated (flagged in
    ``is_padding``, weight 0 in the loss, as sharding does: NOTE [ equal steps
    without dropping or repeating ] in :mod:`dynbatch.plan.sharding`) only
    where an update has fewer samples than micro-batches: fewer samples than
    ranks, or samples so long that the budget holds one a micro-batch.

    A micro-batch is a list of sample indices, row after row, each row's
    samples longest first; the collator rebuilds its rows by next-fit of that
    order (NOTE [ rows by next-fit ] in :mod:`dynbatch.plan.packs.layout`),
    which may join a row's head to the row before: never more rows, never a
    wider one than ``pack_len``, so the budget holds, and the planner prices
    the rows next-fit builds.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..plans import Indices, Plan
from ..sharding import ShardedPlan
from .rows import pack_updates

__all__ = ["deal_rows", "micro_batches_of", "pack_and_deal"]


def micro_batches_of(rows: Any, alone: Any, max_rows: int, ranks: int) -> Indices:
    """Micro-batches of an update of ``rows`` rows, ``alone`` of them oversize: a multiple of
    ``ranks``, each within ``max_rows`` rows, every oversize row alone (NOTE [ dealing an
    update's rows ]).

    >>> micro_batches_of(np.array([5, 1, 9]), np.array([0, 0, 1]), 2, 2).tolist()
    [4, 2, 6]
    """
    rows, alone = np.asarray(rows, np.int64), np.asarray(alone, np.int64)
    least = -(-(rows - alone) // max_rows) + alone
    out: Indices = np.maximum(ranks, -(-least // ranks) * ranks)
    return out


def pack_and_deal(
    lengths: Indices, updates: Plan, pack_len: int, max_rows: int, ranks: int
) -> ShardedPlan:
    """``updates`` (the samples of each) packed into rows and dealt to ``ranks`` ranks.

    >>> sp = pack_and_deal(np.array([5, 3, 4, 2, 6, 1, 7, 8]),
    ...                    Plan.from_batches([[0, 1, 2, 3], [4, 5, 6, 7]]), 8, 1, 2)
    >>> [b.tolist() for b in sp.plan], sp.window_ends.tolist(), sp.is_padding.any()
    ([[0, 3], [2, 1], [7], [6], [4], [5]], [1, 3], False)
    """
    over = np.repeat(np.arange(len(updates)), updates.sizes)[lengths[updates.indices] > pack_len]
    alone = np.bincount(over, minlength=len(updates))

    def least(fewest: Indices) -> Indices:
        return micro_batches_of(fewest, alone, max_rows, ranks)

    rows, update_rows = pack_updates(lengths, updates, pack_len, least)
    return deal_rows(rows, update_rows, lengths, pack_len, max_rows, ranks)


def deal_rows(
    rows: Plan,
    update_rows: Any,
    lengths: Indices,
    pack_len: int,
    max_rows: int,
    ranks: int,
) -> ShardedPlan:
    """Rows, update ``u`` being rows ``update_rows[u]:update_rows[u + 1]`` (oversize rows
    first, then the others fullest first), as micro-batches dealt to ``ranks`` ranks
    (NOTE [ dealing an update's rows ]); ``window_ends`` mark the updates.

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
    total = micro_batches_of(per_update, k, max_rows, ranks)
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
