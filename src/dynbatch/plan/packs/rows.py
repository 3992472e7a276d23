"""Each update's samples into rows of at most ``pack_len`` tokens: numpy only.

NOTE [ an update's rows ]
    An update is the fixed batch's: its ``B`` samples are drawn as the fixed
    batch draws them (NOTE [ packed updates ] in
    :mod:`dynbatch.plan.packs.epochs`), and packing decides only how they run.
    So rows are packed per update, never across updates: an update's samples
    go into as few rows as best-fit decreasing finds (longest first, each into
    the open row whose room fits it most tightly; a sample that fits none
    opens a row). All updates are packed at once, a sample position at a time
    over a ``[updates, rows]`` array of loads, so an epoch of a million samples
    costs about ``B`` numpy passes, not a Python loop per update.

    Best-fit decreasing may use more rows than the fewest possible, by at
    most ``11/9`` of them plus one, and most updates it packs at the lower
    bound ``ceil(tokens / pack_len)``: on updates of a few rows that bound is
    almost always met. A sample longer than ``pack_len`` (``oversize="alone"``)
    fits no row and opens its own, which nothing else fits: it is a row alone.

    *Rows for every rank.* On ``R`` ranks an update runs as ``T`` micro-batches,
    a multiple of ``R`` (NOTE [ dealing an update's rows ] in
    :mod:`dynbatch.plan.packs.deal`), and every one of them should hold a row of
    its own. Where the fewest rows are fewer than the micro-batches (short
    samples, many ranks: 16 samples fit 2 rows of 1,024 but 8 ranks wait), the
    update's samples are spread over exactly that many rows instead: longest
    first, each into the row holding fewest tokens (LPT), which fills every
    row and balances them, so the ranks' steps last about alike. Where LPT
    would overfill a row (a spread it cannot balance within ``pack_len``), the
    best-fit rows are split instead, the row of most samples in two, until
    there are enough. Only an update of fewer samples than micro-batches
    cannot fill every one: those repeat a row, at weight 0.

    Each update's rows are emitted fullest first, and each row's samples
    longest first: the order the collator sees them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..plans import Indices, Plan

__all__ = [
    "longest_first",
    "next_fit_rows",
    "next_fit_starts",
    "pack_updates",
    "round_up",
    "row_starts",
]

_BIG = np.iinfo(np.int64).max


def round_up(values: Any, multiple: int) -> Indices:
    """``values`` rounded up to a multiple of ``multiple``.

    >>> round_up([1, 8, 9], 8).tolist()
    [8, 8, 16]
    """
    arr = np.asarray(values, dtype=np.int64)
    return -(-arr // multiple) * multiple


def next_fit_rows(lengths: Any, pack_len: int) -> Indices:
    """Row offsets of next-fit over ``lengths`` in order: what the collator builds.

    A new row starts when the next sample does not fit the current one; a
    sample longer than ``pack_len`` is a row of its own.

    >>> next_fit_rows([3, 4, 2, 5, 9, 1], 8).tolist()
    [0, 2, 4, 5, 6]
    """
    lens = np.asarray(lengths, dtype=np.int64).tolist()
    starts = [0]
    room = -1
    for k, length in enumerate(lens):
        if length > room or length > pack_len:
            if k:
                starts.append(k)
            room = pack_len - length
        else:
            room -= length
    if lens:
        starts.append(len(lens))
    return np.asarray(starts, dtype=np.int64)


def next_fit_starts(
    lengths: Indices, offsets: Indices, pack_len: int, capacity: Any = None
) -> NDArray[np.bool_]:
    """Where next-fit starts a row, over every micro-batch at once: micro-batch ``m`` is
    ``lengths[offsets[m]:offsets[m + 1]]``, packed as :func:`next_fit_rows` packs it, into
    rows of ``capacity[m]`` tokens (default ``pack_len``; a sample over ``pack_len`` alone).

    >>> next_fit_starts(np.array([3, 4, 2, 5, 9, 1]), np.array([0, 3, 6]), 8).astype(int).tolist()
    [1, 0, 1, 1, 1, 1]
    """
    starts = offsets[:-1]
    sizes = np.diff(offsets)
    out = np.zeros(lengths.size, dtype=bool)
    if sizes.size == 0:
        return out
    cap = np.broadcast_to(np.asarray(pack_len if capacity is None else capacity), sizes.shape)
    order = np.argsort(-sizes, kind="stable")
    starts, sizes, cap = starts[order], sizes[order], cap[order]
    room = np.full(sizes.size, -1, dtype=np.int64)
    active = np.searchsorted(-sizes, -np.arange(int(sizes.max())), "left")
    for j, k in enumerate(active.tolist()):
        at = starts[:k] + j
        v = lengths[at]
        new = (v > room[:k]) | (v > pack_len)
        out[at] = new
        room[:k] = np.where(new, cap[:k] - v, room[:k] - v)
    return out


def row_starts(lengths: Indices, offsets: Indices, pack_len: int) -> NDArray[np.bool_]:
    """Where each micro-batch's rows start (NOTE [ rows by next-fit ] in
    :mod:`dynbatch.plan.packs.layout`): the fewest rows of consecutive samples within
    ``pack_len`` (next-fit's), cut where the fullest of them is least.

    >>> row_starts(np.array([4, 1, 1, 4, 1, 1]), np.array([0, 6]), 8).astype(int).tolist()
    [1, 0, 0, 1, 0, 0]
    """
    m = offsets.size - 1
    if m == 0 or lengths.size == 0:
        return np.zeros(lengths.size, dtype=bool)
    micro_of = np.repeat(np.arange(m), np.diff(offsets))
    fewest = np.bincount(micro_of, next_fit_starts(lengths, offsets, pack_len), minlength=m)
    lo = np.ones(m, dtype=np.int64)
    hi = np.full(m, pack_len, dtype=np.int64)
    while (lo < hi).any():  # the least capacity whose next-fit needs no more rows
        mid = (lo + hi) // 2
        rows = np.bincount(micro_of, next_fit_starts(lengths, offsets, pack_len, mid), minlength=m)
        ok = rows <= fewest
        hi = np.where(ok, mid, hi)
        lo = np.where(ok, lo, mid + 1)
    return next_fit_starts(lengths, offsets, pack_len, hi)


def pack_updates(
    lengths: Indices, updates: Plan, pack_len: int, least: Any = 1
) -> tuple[Plan, Indices]:
    """Every update's samples in rows (NOTE [ an update's rows ]): as few as fit, or
    ``least[u]`` (at most its samples) where the fewest are fewer.

    ``least`` may be a number for every update, or a callable from the fewest rows of
    each update to the rows it needs. Returns the rows (sample indices, update after
    update, each update's rows fullest first, each row's samples longest first) and
    ``update_rows``: update ``u`` is rows ``update_rows[u]:update_rows[u + 1]``.

    >>> rows, bounds = pack_updates(np.array([5, 3, 4, 2, 6, 1]),
    ...                             Plan.from_batches([[0, 1, 2], [3, 4, 5]]), 8)
    >>> [r.tolist() for r in rows], bounds.tolist()
    ([[2, 1], [0], [4], [3, 5]], [0, 2, 4])
    >>> rows, bounds = pack_updates(np.array([1, 1, 1, 1]), Plan.from_batches([[0, 1, 2, 3]]),
    ...                             8, least=2)
    >>> [r.tolist() for r in rows]
    [[0, 2], [1, 3]]
    """
    sizes = updates.sizes
    n_updates = sizes.size
    if n_updates == 0 or int(sizes.max()) == 0:
        return Plan(np.zeros(0, np.int64), np.zeros(1, np.int64)), np.zeros(n_updates + 1, np.int64)
    idx, lens = longest_first(lengths, updates)
    row_of, loads = _best_fit(lens, pack_len)
    fewest = (loads > 0).sum(axis=1)
    need = np.asarray(least(fewest) if callable(least) else least, dtype=np.int64)
    target = np.minimum(np.maximum(fewest, need), sizes)
    if int(target.max()) > loads.shape[1]:
        loads = np.pad(loads, ((0, 0), (0, int(target.max()) - loads.shape[1])))
    # the rows balanced (longest first into the emptiest), where that stays within pack_len
    spread, spread_loads, ok = _spread(lens, target, pack_len)
    row_of[ok] = spread[ok]
    loads[ok] = 0
    loads[ok, : spread_loads.shape[1]] = spread_loads[ok]
    bad = np.flatnonzero(~ok & (target > fewest))
    for u in bad.tolist():  # LPT overfilled a row: split the best-fit rows instead
        _split_rows(row_of[u], int(target[u]))
    if bad.size:
        loads[bad] = _loads(lens[bad], row_of[bad], loads.shape[1])
    # each update's rows fullest first, each row's samples longest first (their places)
    rank = np.empty_like(loads)
    np.put_along_axis(rank, np.argsort(-loads, axis=1, kind="stable"), np.arange(loads.shape[1]), 1)
    u, k = np.nonzero(row_of >= 0)
    row_rank = rank[u, row_of[u, k]]
    order = np.lexsort((k, row_rank, u))
    u, k, row_rank = u[order], k[order], row_rank[order]
    new = np.r_[True, (u[1:] != u[:-1]) | (row_rank[1:] != row_rank[:-1])]
    row_starts = np.flatnonzero(new)
    rows = Plan(idx[u, k], np.r_[row_starts, u.size].astype(np.int64))
    per_update = np.bincount(u[row_starts], minlength=n_updates)
    return rows, np.r_[0, np.cumsum(per_update)].astype(np.int64)


def longest_first(lengths: Indices, updates: Plan) -> tuple[Indices, Indices]:
    """Each update's samples as a row of a matrix, longest first: their indices (-1 past an
    update's end) and lengths (0 there). ``updates`` holds at least one sample.

    >>> idx, lens = longest_first(np.array([5, 3, 4]), Plan.from_batches([[0, 1], [2]]))
    >>> idx.tolist(), lens.tolist()
    ([[0, 1], [2, -1]], [[5, 3], [4, 0]])
    """
    sizes = updates.sizes
    valid = np.arange(int(sizes.max()))[None, :] < sizes[:, None]
    idx = np.full(valid.shape, -1, dtype=np.int64)
    idx[valid] = updates.indices
    lens = np.where(valid, lengths[np.maximum(idx, 0)], 0)
    by_length = np.argsort(-lens, axis=1, kind="stable")  # longest first, the empty places last
    return np.take_along_axis(idx, by_length, axis=1), np.take_along_axis(lens, by_length, axis=1)


def _best_fit(lens: Indices, pack_len: int) -> tuple[Indices, Indices]:
    """Best-fit decreasing of every update (a row of ``lens``, longest first, 0 past its
    samples): each sample's row and each row's tokens."""
    n_updates, width = lens.shape
    # any-fit leaves at most one row half empty or less, so rows < 2 tokens / pack_len + 1
    top = int(min(width, 2 * int(lens.sum(axis=1).max()) // pack_len + 1))
    loads = np.zeros((n_updates, top), dtype=np.int64)
    opened = np.zeros(n_updates, dtype=np.int64)
    row_of = np.full((n_updates, width), -1, dtype=np.int64)
    cols = np.arange(top)
    every = np.arange(n_updates)
    for k in range(width):
        v = lens[:, k]
        act = v > 0
        if not act.any():
            break
        room = pack_len - loads - v[:, None]
        ok = (room >= 0) & (cols[None, :] < opened[:, None])
        best = np.where(ok, room, _BIG).argmin(axis=1)
        has = ok[every, best]
        row = np.where(has, best, opened)
        row_of[act, k] = row[act]
        loads[every[act], row[act]] += v[act]
        opened += act & ~has
    return row_of, loads


def _spread(lens: Indices, target: Indices, pack_len: int) -> tuple[Indices, Indices, Any]:
    """Every update's samples over exactly ``target`` rows, longest first into the row of
    fewest tokens; ``ok`` where no row of two samples or more holds over ``pack_len``."""
    n_updates, width = lens.shape
    top = int(target.max())
    loads = np.zeros((n_updates, top), dtype=np.int64)
    counts = np.zeros((n_updates, top), dtype=np.int64)
    closed = np.arange(top)[None, :] >= target[:, None]
    row_of = np.full((n_updates, width), -1, dtype=np.int64)
    every = np.arange(n_updates)
    for k in range(width):
        v = lens[:, k]
        act = v > 0
        if not act.any():
            break
        row = np.where(closed, _BIG, loads).argmin(axis=1)
        row_of[act, k] = row[act]
        loads[every[act], row[act]] += v[act]
        counts[every[act], row[act]] += 1
    ok = ((loads <= pack_len) | (counts <= 1)).all(axis=1)
    return row_of, loads, ok


def _split_rows(row_of: Indices, target: int) -> None:
    """Split rows in place, the row of most samples in two (every other sample), until
    there are ``target`` rows: each part fits where the row did."""
    rows = int(row_of.max()) + 1
    while rows < target:
        counts = np.bincount(row_of[row_of >= 0], minlength=rows)
        fullest = int(np.argmax(counts))
        members = np.flatnonzero(row_of == fullest)
        row_of[members[1::2]] = rows
        rows += 1


def _loads(lens: Indices, row_of: Indices, top: int) -> Indices:
    """Each row's tokens from each sample's row."""
    loads = np.zeros((lens.shape[0], top), dtype=np.int64)
    u, k = np.nonzero(row_of >= 0)
    np.add.at(loads, (u, row_of[u, k]), lens[u, k])
    return loads
