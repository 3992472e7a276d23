"""Packing: several samples per row of ``pack_len`` tokens, no padding: numpy only.

:func:`plan_packs` turns an array of lengths into a :class:`PackPlan`: rows of
at most ``pack_len`` tokens (a sample is never split nor repeated), updates of
consecutive rows that hold the fixed batch's ``batch_size`` samples on average,
and micro-batches of at most ``max_rows`` rows. :class:`~dynbatch.PackCollator`
builds the rows of one micro-batch from its samples, row for row as planned
(NOTE [ rows by next-fit ]).

NOTE [ packing windows ]
    Rows are packed by best-fit decreasing over a *window* of the epoch's
    shuffled order: ``window`` samples (100 fixed batches by default), a random
    draw of the corpus. Best-fit decreasing places the longest samples first,
    each in a row of its own or beside another long one, then fills the room
    left with shorter ones, so most rows mix one or two long samples with short
    fillers; the last rows of a window hold only short samples. The rows of
    the whole epoch are then shuffled and cut into updates, so an update is a
    handful of rows from random windows: its samples are a random draw of the
    corpus, as the fixed batch's are, never an update of one length (Hugging
    Face's ``group_by_length``) nor a window's all-short tail in a row. The
    rows change every epoch (a packer that packs the dataset once before
    training, as TRL's and axolotl's do, repeats the same rows every epoch).

    Why not pack each update alone: its last row is left part-filled, and an
    update of 32 samples of ChnSentiCorp at 512 fills only a few rows, so one
    part-filled row in each costs 7-15 % (per-update first-fit decreasing
    reaches 0.84-0.93 efficiency, ``benchmarks/packing.py``). A window leaves
    part-filled rows only at its end, and those rows are carried into the next
    window (at most ``window`` of the roomiest, none whose room no sample can
    fill), whose longest samples fill them first. Then only the epoch's last
    rows are part-filled. On ChnSentiCorp at 512 (B = 32) windows of 12, 50
    and 100 updates reach 0.9962, 0.9973 and 0.9978, the last as much as
    best-fit decreasing over the whole epoch (0.992 and 0.996 for 12 and 50
    without the carry); the window is a count of samples, so it scales with
    ``batch_size``. Windows are equal slices of
    the shuffled order (the last is not a remnant); ``window >= N`` is
    best-fit decreasing over the epoch.

    Speed: a window's samples are sorted longest first and taken in runs of
    equal length; the rooms left are one sorted list of integers (room and row
    in one number), so best fit is one bisection and a run of ``m`` samples
    of length ``l`` fills ``room // l`` at once. One million samples plan in
    about a second on an idle core.

NOTE [ rows by next-fit ]
    A micro-batch's samples are emitted row by row, each row's samples in the
    order they were placed. :class:`~dynbatch.PackCollator` sees only samples:
    it packs them by next-fit in the order given (a new row when the next sample does not fit
    the current one). Next-fit over consecutive groups that each fit a row
    never makes more rows than groups (a row started inside a group holds the
    rest of that group), but it may move the head of a group into the room the
    group before left. So the plan's rows are *defined* as next-fit of its own
    emission order, computed here: planner and collator agree by construction,
    and the micro-batch still holds at most ``max_rows`` rows.

NOTE [ updates of packed rows ]
    An epoch of ``N`` kept samples makes ``ceil(N / batch_size)`` updates, the
    fixed batch's count (fewer only when there are fewer rows than that). The
    shuffled rows are cut where the running count of samples (or of loss
    tokens, ``update_unit="tokens"``) passes each ``k / U`` of the total, so
    an update holds ``batch_size`` samples (or the fixed batch's loss tokens)
    on average, give or take one row. An update's rows are grouped into
    micro-batches of at most ``max_rows`` rows (all of them when ``None``).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np
from numpy.typing import NDArray

from .._checks import InputError, check_choice, check_int, check_lengths, check_loss_tokens
from .plans import Indices, Plan

__all__ = ["DEFAULT_WINDOW_UPDATES", "PackPlan", "next_fit_rows", "plan_packs"]

#: The default window, in fixed batches: ``window = 100 * batch_size`` samples.
DEFAULT_WINDOW_UPDATES = 100

_OVERSIZE = ("error", "skip", "alone")
_UNITS = ("samples", "tokens")


class PackPlan(Sequence[Indices]):
    """Micro-batches of packed rows: a sequence of sample-index arrays.

    ``plan[m]`` is micro-batch ``m``'s samples in the order the collator must
    see them (row by row); :attr:`rows` are the rows as the collator builds
    them; :attr:`update_offsets` cut the micro-batches into updates.

    >>> plan = plan_packs([5, 3, 4, 2, 6], 8, batch_size=2, seed=0)
    >>> sorted(r.tolist() for r in plan.rows), plan.num_updates
    ([[0, 1], [2], [4, 3]], 3)
    >>> round(plan.efficiency, 3)
    0.833
    """

    __slots__ = (
        "lengths",
        "micro_batches",
        "micro_row_offsets",
        "pack_len",
        "row_offsets",
        "skipped",
        "update_offsets",
    )

    def __init__(
        self,
        micro_batches: Plan,
        row_offsets: NDArray[Any],
        micro_row_offsets: NDArray[Any],
        update_offsets: NDArray[Any],
        *,
        lengths: NDArray[Any],
        pack_len: int,
        skipped: NDArray[Any],
    ) -> None:
        #: Each micro-batch's sample indices, row after row.
        self.micro_batches = micro_batches
        #: Row ``r`` is ``micro_batches.indices[row_offsets[r]:row_offsets[r + 1]]``.
        self.row_offsets: Indices = np.asarray(row_offsets, dtype=np.int64)
        #: Micro-batch ``m`` holds rows ``micro_row_offsets[m]:micro_row_offsets[m + 1]``.
        self.micro_row_offsets: Indices = np.asarray(micro_row_offsets, dtype=np.int64)
        #: Update ``u`` is micro-batches ``update_offsets[u]:update_offsets[u + 1]``.
        self.update_offsets: Indices = np.asarray(update_offsets, dtype=np.int64)
        #: The lengths planned on (all samples, skipped ones too).
        self.lengths: Indices = np.asarray(lengths, dtype=np.int64)
        self.pack_len = pack_len
        #: Samples left out (``oversize="skip"``), ascending.
        self.skipped: Indices = np.asarray(skipped, dtype=np.int64)

    @property
    def rows(self) -> Plan:
        """Every row's sample indices, micro-batch after micro-batch."""
        return Plan(self.micro_batches.indices, self.row_offsets)

    @property
    def rows_per_micro_batch(self) -> Indices:
        """Rows in each micro-batch: the collator's ``R``."""
        return np.diff(self.micro_row_offsets)

    @property
    def updates(self) -> Plan:
        """Every update's sample indices."""
        off = self.micro_batches.offsets[self.update_offsets]
        return Plan(self.micro_batches.indices, off)

    @property
    def num_updates(self) -> int:
        """Updates in the epoch."""
        return int(self.update_offsets.size - 1)

    @property
    def row_tokens(self) -> Indices:
        """Real tokens in each row."""
        lens = self.lengths[self.micro_batches.indices]
        return np.add.reduceat(lens, self.row_offsets[:-1]) if lens.size else lens

    @property
    def efficiency(self) -> float:
        """Real tokens over all rows' tokens (``rows * pack_len``; an oversize row: its own)."""
        tokens = self.row_tokens
        if tokens.size == 0:
            return 0.0
        return float(tokens.sum() / np.maximum(tokens, self.pack_len).sum())

    def __len__(self) -> int:
        return len(self.micro_batches)

    @overload
    def __getitem__(self, i: int) -> Indices: ...
    @overload
    def __getitem__(self, i: slice) -> Plan: ...
    def __getitem__(self, i: int | slice) -> Indices | Plan:
        return self.micro_batches[i]

    def __iter__(self) -> Iterator[Indices]:
        return iter(self.micro_batches)

    def __repr__(self) -> str:
        return (
            f"PackPlan({len(self)} micro-batches, {self.row_offsets.size - 1} rows of "
            f"{self.pack_len}, {self.num_updates} updates, efficiency {self.efficiency:.3f})"
        )


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


def plan_packs(
    lengths: Any,
    pack_len: int,
    *,
    batch_size: int,
    loss_tokens: Any = None,
    update_unit: str = "samples",
    window: int | None = None,
    max_rows: int | None = None,
    oversize: str = "error",
    seed: int = 0,
    epoch: int = 0,
    num_updates: int | None = None,
) -> PackPlan:
    """Pack samples into rows of ``pack_len`` tokens, the rows into updates and micro-batches.

    Every kept sample is in exactly one row, once; no row holds more than
    ``pack_len`` tokens (but an oversize sample with ``oversize="alone"``);
    the epoch has ``ceil(N / batch_size)`` updates (NOTE [ updates of packed
    rows ]); the same ``(seed, epoch)`` gives the same plan.

    Args:
        lengths: tokens per sample.
        pack_len: tokens per row.
        batch_size: the fixed batch's samples per update.
        loss_tokens: per sample, its tokens with a loss; needed by
            ``update_unit="tokens"``.
        update_unit: ``"samples"``: updates of ``batch_size`` samples on
            average; ``"tokens"``: of the fixed batch's loss tokens.
        window: samples packed together (NOTE [ packing windows ]); default
            ``50 * batch_size``.
        max_rows: rows per micro-batch (from the memory budget); ``None``: an
            update is one micro-batch.
        oversize: a sample longer than ``pack_len``: ``"error"`` refuses it,
            ``"skip"`` leaves it out (:attr:`PackPlan.skipped`), ``"alone"``
            makes it a row and a micro-batch of its own.
        seed: the shuffle's seed.
        epoch: the epoch, mixed into the seed.
        num_updates: updates in the epoch instead of ``ceil(N / batch_size)``
            (at most one per row); ``batch_size`` then only sizes the window.

    Returns:
        A :class:`PackPlan`.

    >>> plan = plan_packs([300, 200, 100, 400, 12], 512, batch_size=2)
    >>> sorted(int(i) for b in plan for i in b), bool(plan.row_tokens.max() <= 512)
    ([0, 1, 2, 3, 4], True)
    """
    lens = check_lengths(lengths)
    pack_len = check_int("pack_len", pack_len, minimum=1)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    update_unit = check_choice("update_unit", update_unit, _UNITS)
    oversize = check_choice("oversize", oversize, _OVERSIZE)
    window = check_int("window", window, minimum=1, allow_none=True)
    max_rows = check_int("max_rows", max_rows, minimum=1, allow_none=True)
    seed = check_int("seed", seed)
    epoch = check_int("epoch", epoch)
    num_updates = check_int("num_updates", num_updates, minimum=1, allow_none=True)
    counts = check_loss_tokens(loss_tokens, lens)
    if update_unit == "tokens" and counts is None:
        raise InputError(
            "update_unit='tokens' cuts updates on loss tokens: pass loss_tokens= (per sample, "
            "its tokens with a loss), or update_unit='samples'"
        )
    over = lens > pack_len
    if over.any() and oversize == "error":
        i = np.flatnonzero(over)
        raise InputError(
            f"{i.size} sample(s) are longer than pack_len={pack_len} (lengths[{int(i[0])}]="
            f"{int(lens[i[0]])}); raise pack_len, truncate them, or pass oversize='skip' or "
            "'alone'"
        )
    skipped = np.flatnonzero(over) if oversize == "skip" else np.zeros(0, dtype=np.int64)
    if skipped.size == lens.size:
        raise InputError(
            f"every sample is longer than pack_len={pack_len}; oversize='skip' would leave "
            "nothing to train on"
        )
    window = DEFAULT_WINDOW_UPDATES * batch_size if window is None else window
    rng = np.random.default_rng([seed, epoch])
    perm = rng.permutation(lens.size)
    alone = perm[over[perm]] if oversize == "alone" else np.zeros(0, dtype=np.int64)
    items, offsets = _best_fit_windows(lens, perm[~over[perm]], window, pack_len)
    if alone.size:
        items = np.concatenate([items, alone])
        offsets = np.concatenate([offsets, offsets[-1] + np.arange(1, alone.size + 1)])
    rows = Plan(items, offsets)
    rows = rows.take(rng.permutation(len(rows)))
    by_tokens = update_unit == "tokens" and counts is not None
    weights = counts if by_tokens and counts is not None else np.ones(lens.size, dtype=np.int64)
    kept = lens.size - skipped.size
    target = -(-kept // batch_size) if num_updates is None else num_updates
    update_ends = _cut_updates(rows, weights, target)
    return _emit(rows, update_ends, lens, pack_len, max_rows, skipped)


def _best_fit_windows(
    lens: Indices, order: Indices, window: int, pack_len: int
) -> tuple[Indices, Indices]:
    """Rows of best-fit decreasing per window of ``order``: ``(indices, offsets)``.

    A row's samples are in the order placed: longest first within each window.
    """
    n = order.size
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64)
    n_windows = max(1, round(n / window))
    win = (np.arange(n) * n_windows) // n  # equal slices, no remnant window
    lo = lens[order]
    sort = np.lexsort((-lo, win))
    items, sl, w = order[sort], lo[sort], win[sort]
    brk = np.flatnonzero((sl[1:] != sl[:-1]) | (w[1:] != w[:-1])) + 1
    starts = np.concatenate([[0], brk])
    runs = np.diff(np.concatenate([starts, [n]]))
    new_window = np.concatenate([[True], w[starts[1:]] != w[starts[:-1]]])
    big = 1 << 40  # a room and its row in one integer: room * big + row
    mask = big - 1
    bl, ins = bisect.bisect_left, bisect.insort
    row_ids: list[int] = []
    row_counts: list[int] = []
    put_row, put_count = row_ids.append, row_counts.append
    n_rows = 0
    rooms: list[int] = []
    shortest = int(lens.min())  # a room below it can never be filled
    floor = shortest * big
    for length, m, fresh in zip(
        sl[starts].tolist(), runs.tolist(), new_window.tolist(), strict=True
    ):
        if fresh:  # carry the largest rooms left, none that no sample can fill
            del rooms[: max(bl(rooms, floor), len(rooms) - window)]
        while m:
            i = bl(rooms, length * big)
            if i == len(rooms):
                row, room = n_rows, pack_len
                n_rows += 1
            else:
                v = rooms.pop(i)
                row, room = v & mask, v >> 40
            k = room // length
            if k > m:
                k = m
            m -= k
            room -= k * length
            put_row(row)
            put_count(k)
            if room >= shortest:
                ins(rooms, room * big + row)
    row_of = np.repeat(np.asarray(row_ids, dtype=np.int64), row_counts)
    by_row = np.argsort(row_of, kind="stable")  # stable: in the order placed
    offsets = np.searchsorted(row_of[by_row], np.arange(n_rows + 1))
    return items[by_row], offsets.astype(np.int64)


def _cut_updates(rows: Plan, weights: Indices, target: int) -> Indices:
    """End row (exclusive) of each update: cut where the running weight passes ``k / U``.

    Ends are strictly increasing, so there are ``min(target, rows)`` updates.
    """
    n_rows = len(rows)
    if n_rows == 0:
        return np.zeros(0, dtype=np.int64)
    per_row = np.add.reduceat(weights[rows.indices], rows.offsets[:-1])
    cum = np.cumsum(per_row).astype(np.float64)
    total = float(cum[-1])
    u = max(1, min(target, n_rows))
    k = np.arange(1, u + 1)
    # no loss tokens at all: cut on rows
    ends = (k * n_rows) // u if total <= 0 else np.searchsorted(cum, k * total / u) + 1
    ends[-1] = n_rows
    ends = np.maximum.accumulate(np.maximum(ends - k, 0)) + k  # at least one row each
    ends = np.minimum.accumulate(np.minimum(ends, n_rows - u + k)[::-1])[::-1]
    return ends.astype(np.int64)


def _emit(
    rows: Plan,
    update_ends: Indices,
    lens: Indices,
    pack_len: int,
    max_rows: int | None,
    skipped: Indices,
) -> PackPlan:
    """Micro-batches of at most ``max_rows`` rows per update; rows redone by next-fit."""
    indices, offsets = rows.indices, rows.offsets
    n_rows = len(rows)
    sizes = np.diff(offsets)
    lens_of = lens[indices]
    alone = (sizes == 1) & (lens_of[offsets[:-1]] > pack_len) if n_rows else np.zeros(0, bool)
    # micro-batch breaks: each update's first row, around an oversize row, every max_rows
    brk = np.zeros(n_rows, dtype=bool)
    if n_rows:
        brk[np.concatenate([[0], update_ends[:-1]])] = True
        brk |= alone
        brk[1:] |= alone[:-1]
        if max_rows is not None:
            seg_start = np.maximum.accumulate(np.where(brk, np.arange(n_rows), 0))
            brk |= (np.arange(n_rows) - seg_start) % max_rows == 0
    micro_first_row = np.flatnonzero(brk)
    # next-fit may pull a row's head into the room of the row before (NOTE [ rows by next-fit ])
    row_tokens = np.add.reduceat(lens_of, offsets[:-1]) if n_rows else np.zeros(0, np.int64)
    starts = np.zeros(indices.size, dtype=bool)
    starts[offsets[:-1]] = True
    if n_rows > 1:
        heads = lens_of[offsets[1:-1]]
        merge = (pack_len - row_tokens[:-1] >= heads) & ~brk[1:]
        if merge.any():
            micro_of_row = np.cumsum(brk) - 1
            sample_bounds = offsets[np.concatenate([micro_first_row, [n_rows]])]
            for m in np.unique(micro_of_row[1:][merge]).tolist():
                a, b = int(sample_bounds[m]), int(sample_bounds[m + 1])
                starts[a:b] = False
                starts[a + next_fit_rows(lens_of[a:b], pack_len)[:-1]] = True
    row_starts = np.flatnonzero(starts)
    micro_sample_offsets = np.concatenate([offsets[micro_first_row], [indices.size]])
    micro_row_offsets = np.searchsorted(row_starts, micro_sample_offsets)
    update_micro = np.searchsorted(micro_first_row, np.concatenate([[0], update_ends]))
    return PackPlan(
        Plan(indices, micro_sample_offsets),
        np.concatenate([row_starts, [indices.size]]),
        micro_row_offsets,
        update_micro,
        lengths=lens,
        pack_len=pack_len,
        skipped=skipped,
    )
