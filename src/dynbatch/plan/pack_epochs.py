"""The packed plan of an epoch, as the samplers consume it: numpy only.

:func:`plan_packed_epoch` is :func:`~dynbatch.plan.epochs.plan_epoch` for
options with ``pack_len``: the rows of :func:`~dynbatch.plan.packing.plan_packs`
grouped into micro-batches and dealt to the ranks as a
:class:`~dynbatch.plan.sharding.ShardedPlan`, so the samplers, the
accumulator, resume and ``steps_for_epochs`` work on it unchanged.

NOTE [ packed epochs ]
    The epoch is packed as :func:`~dynbatch.plan.packing.plan_packs` packs it
    (NOTE [ packing windows ]): rows of at most ``pack_len`` tokens, shuffled
    and cut into updates of ``update_size`` samples (or loss tokens) on
    average, summed over the ranks. The update count is the epoch's samples
    (or loss tokens) over ``update_size``, rounded up: the fixed batch's, as
    with the unpacked updates (NOTE [ mixed updates ] in
    :mod:`dynbatch.plan.windows`).

    An update's rows are then dealt as micro-batches: ``T`` of them, a
    multiple of ``num_replicas``, so that every rank takes the same number
    of steps in every update (``T / num_replicas``) and all ranks step the
    optimizer together. ``T`` is the fewest that keep each micro-batch within
    :attr:`~dynbatch.PlanOptions.max_rows` (the most rows ``R`` with
    ``cost(R, pack_len) <= max_cost``, at most ``max_batch_size``), rounded up
    to the ranks; the update's rows are cut, in order, into micro-batches of
    near-equal row counts, so the ranks of a step carry about equal work. A
    row is never split. An oversize row (``oversize="alone"``) is a
    micro-batch of its own, in its place: the rows are never reordered, so
    the normal rows on either side of it are never dealt into one
    micro-batch (next-fit would pull the head of the one after into the room
    of the one before, and the collator's rows would not be the planned
    ones). :func:`~dynbatch.plan.packing.plan_packs` puts each update's
    oversize rows after its normal rows before next-fit defines the rows, so
    an update's normal rows are one run, cut into no more micro-batches than
    without an oversize row. Only an update with fewer rows than ranks cannot
    be dealt so; its missing micro-batches repeat its lightest row, flagged
    in ``is_padding`` (weight 0 in the loss), as sharding does
    (NOTE [ equal steps without dropping or repeating ] in :mod:`dynbatch.plan.sharding`).

    A micro-batch is a list of sample indices, row after row; the collator
    (:class:`~dynbatch.PackCollator`) rebuilds its rows by next-fit of that
    order (NOTE [ rows by next-fit ] in :mod:`dynbatch.plan.packing`). A
    micro-batch is a run of consecutive planned rows starting at a row
    boundary, and the planned rows are next-fit of that order, so next-fit
    rebuilds exactly them: the collator's rows are the planned rows, and the
    budget holds.

    With a ``time_model`` the micro-batches so dealt are one way to run each
    update; the step time chooses, per update, between them, the split and
    the whole, and may run the fixed batch's own updates instead
    (NOTE [ choosing packing per update ] in :mod:`dynbatch.plan.pack_time`).

    ``drop_last``, ``equal_epochs``, ``group_by_length``,
    ``batch_size_multiple`` and ``pad_to_multiple_of`` are refused with
    ``pack_len`` (:class:`~dynbatch.PlanOptions`), and a ``time_model`` with
    updates in tokens; ``order`` must be random (the packing draws its own
    order from ``(seed, epoch)``), and ``bucket_width`` and ``balance`` play
    no part. :func:`~dynbatch.like_fixed` also refuses ``group_by_length``
    (it never reaches the options there), ``micro_batches`` (an update is as
    few micro-batches as its rows need: refused rather than honoured, since
    more micro-batches than the budget needs buy packed rows nothing) and a
    ``pack_len`` whose one row costs more than the fixed batch's worst
    batch, unless ``max_cost`` is given.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._checks import InputError
from .options import PlanOptions
from .packing import plan_packs
from .plans import Plan
from .sharding import ShardedPlan

__all__ = ["deal_rows", "plan_packed_epoch"]


def plan_packed_epoch(
    lengths: NDArray[np.int64],
    options: PlanOptions,
    epoch: int,
    num_replicas: int = 1,
    loss_tokens: NDArray[Any] | None = None,
) -> ShardedPlan:
    """Every rank's packed micro-batches of ``epoch`` (NOTE [ packed epochs ]), on checked inputs.

    >>> opts = PlanOptions(max_cost=16, cost="linear", pack_len=8, update_size=4)
    >>> sp = plan_packed_epoch(np.array([5, 3, 4, 2, 6, 1, 7, 8]), opts, 0, 2)
    >>> sp.num_steps, sp.window_ends.tolist(), sorted(sp.plan.indices.tolist())
    (2, [1, 2], [0, 1, 2, 3, 4, 5, 6, 7])
    """
    pack_len, size = options.pack_len, options.update_size
    if pack_len is None or size is None:
        raise InputError(
            "plan_packed_epoch plans options with pack_len and update_size, got "
            f"pack_len={pack_len!r}, update_size={size!r}"
        )
    tokens = options.update_unit == "tokens"
    counted = (loss_tokens if loss_tokens is not None else lengths) if tokens else None
    kept = np.ones(lengths.size, dtype=bool)
    if options.oversize == "skip":
        kept = lengths <= pack_len
    total = float(kept.sum()) if counted is None else float(counted[kept].sum())
    updates = max(1, math.ceil(total / float(size) - 1e-9))  # NOTE [ mixed updates ]'s count
    packs = plan_packs(
        lengths,
        pack_len,
        batch_size=max(1, round(int(kept.sum()) / updates)),
        loss_tokens=counted,
        update_unit=options.update_unit,
        oversize=options.oversize,
        seed=options.seed,
        epoch=epoch,
        num_updates=updates,
    )
    row_offsets = packs.row_offsets
    update_rows = packs.micro_row_offsets[packs.update_offsets]
    return deal_rows(
        Plan(packs.micro_batches.indices, row_offsets),
        update_rows,
        lengths,
        pack_len,
        options.max_rows,
        num_replicas,
    )


def deal_rows(
    rows: Plan,
    update_rows: NDArray[Any],
    lengths: NDArray[np.int64],
    pack_len: int,
    max_rows: int,
    num_replicas: int,
) -> ShardedPlan:
    """Rows, cut into updates at ``update_rows``, as micro-batches dealt to the ranks.

    Each update becomes a multiple of ``num_replicas`` micro-batches of at most
    ``max_rows`` rows (NOTE [ packed epochs ]); ``window_ends`` mark the updates.

    >>> rows = Plan.from_batches([[0, 1], [2], [3], [4, 5], [6]])
    >>> sp = deal_rows(rows, np.array([0, 3, 5]), np.ones(7, np.int64), 2, 2, 2)
    >>> [b.tolist() for b in sp.plan], sp.window_ends.tolist(), sp.is_padding.tolist()
    ([[0, 1, 2], [3], [4, 5], [6]], [1, 2], [False, False, False, False])
    """
    return deal_rows_counted(rows, update_rows, lengths, pack_len, max_rows, num_replicas)[0]


def deal_rows_counted(
    rows: Plan,
    update_rows: NDArray[Any],
    lengths: NDArray[np.int64],
    pack_len: int,
    max_rows: int,
    num_replicas: int,
) -> tuple[ShardedPlan, NDArray[np.int64]]:
    """:func:`deal_rows`, and each micro-batch's rows as the collator builds them (next-fit
    of its order) where the dealt rows are those, else 0: rows that are not next-fit of
    their own order may be merged by next-fit."""
    n_rows = len(rows)
    offsets = rows.offsets
    sizes = np.diff(offsets)
    tokens = (
        np.add.reduceat(lengths[rows.indices], offsets[:-1]) if n_rows else np.zeros(0, np.int64)
    )
    alone = (sizes == 1) & (tokens > pack_len)
    # every update at once, its rows kept in order: each run of normal rows between oversize
    # rows (a segment) cut into near-equal micro-batches, each oversize row alone, then
    # repeats of the update's lightest row (padding). NOTE [ packed epochs ]
    bounds = np.asarray(update_rows, dtype=np.int64)
    n_updates = bounds.size - 1
    update_of = np.repeat(np.arange(n_updates), np.diff(bounds))
    first = np.zeros(n_rows, dtype=bool)
    first[bounds[:-1][bounds[:-1] < n_rows]] = True
    after_alone = np.r_[False, alone[:-1]] if n_rows else alone
    seg_first = ~alone & (first | after_alone)
    seg_of = np.cumsum(seg_first) - 1
    seg_start = np.flatnonzero(seg_first)
    seg_len = np.bincount(seg_of[~alone], minlength=seg_start.size)
    seg_update = update_of[seg_start]
    k = np.bincount(update_of[alone], minlength=n_updates)
    least_seg = -(-seg_len // max_rows)
    least = np.bincount(seg_update, least_seg, minlength=n_updates).astype(np.int64) + k
    total = np.maximum(num_replicas, -(-least // num_replicas) * num_replicas)
    # the micro-batches past the least split the segments further, in order, up to a row each
    spare = total - least
    room = seg_len - least_seg
    before = np.cumsum(room) - room  # rooms of the segments before, in all updates
    before -= before[np.searchsorted(seg_update, seg_update)]  # ... in the same update
    added = np.clip(spare[seg_update] - before, 0, room)
    chunks = least_seg + added
    repeats = spare - np.bincount(seg_update, added, minlength=n_updates).astype(np.int64)
    # a normal row starts a micro-batch where its segment's near-equal cut falls
    base = seg_len // np.maximum(chunks, 1)
    extra = seg_len - base * chunks
    normal = np.flatnonzero(~alone)
    seg = seg_of[normal]
    pos = normal - seg_start[seg]
    big = (extra * (base + 1))[seg]  # rows in the segment's first ``extra`` micro-batches
    cut = np.zeros(n_rows, dtype=bool)
    cut[normal] = np.where(pos < big, pos % (base[seg] + 1) == 0, (pos - big) % base[seg] == 0)
    starts = alone | cut
    by_token = np.lexsort((tokens, update_of))  # each update's lightest row first
    lightest = by_token[np.r_[0, np.cumsum(np.diff(bounds))[:-1]]] if n_updates else bounds[:0]
    fill = np.repeat(lightest, repeats)
    owner = np.concatenate([update_of, np.repeat(np.arange(n_updates), repeats)])
    order = np.argsort(owner, kind="stable")
    row_order = np.concatenate([np.arange(n_rows), fill])[order]
    row_starts = np.concatenate([starts, np.ones(fill.size, dtype=bool)])[order]
    is_fill = np.concatenate([np.zeros(n_rows, dtype=bool), np.ones(fill.size, dtype=bool)])[order]
    micro = np.r_[np.flatnonzero(row_starts), row_order.size]
    padding = is_fill[micro[:-1]]
    steps = total // num_replicas
    dealt = rows.take(row_order)
    base_plan = Plan(dealt.indices, dealt.offsets[micro])
    per_micro = np.diff(micro)
    if row_order.size > 1:  # a row's head that fits the room before it: next-fit merges
        room_left = pack_len - tokens[row_order]
        heads = lengths[dealt.indices[dealt.offsets[1:-1]]]
        merges = heads <= room_left[:-1]
        merges[micro[1:-1] - 1] = False  # a micro-batch's first row starts anew
        if merges.any():
            micro_of_row = np.repeat(np.arange(per_micro.size), per_micro)
            per_micro[np.unique(micro_of_row[1:][merges])] = 0
    sharded = ShardedPlan(
        base_plan,
        np.arange(len(base_plan), dtype=np.int64),
        np.asarray(padding, dtype=bool),
        num_replicas,
        np.cumsum(np.asarray(steps, dtype=np.int64)),
    )
    return sharded, per_micro.astype(np.int64)
