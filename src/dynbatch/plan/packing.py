"""Packing: several samples per row of ``pack_len`` tokens, no padding: numpy only.

:func:`plan_packs` turns an array of lengths into a :class:`PackPlan`: rows of
at most ``pack_len`` tokens (a sample is never split nor repeated), updates of
consecutive rows that hold the fixed batch's ``batch_size`` samples on average,
and micro-batches of at most ``max_rows`` rows. :class:`~dynbatch.PackCollator`
builds the rows of one micro-batch from its samples, row for row as planned
(NOTE [ rows by next-fit ]).

NOTE [ packing windows ]
    Rows are packed by best-fit decreasing over the epoch's shuffled order:
    the longest samples first, each into the row whose room fits it most
    tightly. Best-fit decreasing over the whole epoch is what TRL packs with
    and is the best of the peers' packers on most corpora: on ChnSentiCorp at
    512 (B = 32) 0.9978 of the rows' tokens are real, within four rows of the
    lower bound below. The rows change every epoch (equal lengths fall to
    other rows, and NOTE [ rows that mix ] moves samples), where a packer that
    packs the dataset once before training, as TRL's and axolotl's do,
    repeats the same rows every epoch. The rows of the epoch are then shuffled
    and cut into updates, so an update is a handful of rows drawn at random:
    its samples are a random draw of the corpus, as the fixed batch's are,
    never an update of one length (Hugging Face's ``group_by_length``).

    Why not pack each update alone: its last row is left part-filled, and an
    update of 32 samples of ChnSentiCorp at 512 fills only a few rows, so one
    part-filled row in each costs 7-15 % (per-update first-fit decreasing
    reaches 0.84-0.93 efficiency, ``benchmarks/packing.py``).

    Why not windows (``window=``, slices of the shuffled order packed one
    after another, the part-filled rows carried to the next): they were the
    default here (100 fixed batches), but they buy nothing the whole epoch
    does not. Their rows leave as long a tail of short-only rows (43.6 % of
    ChnSentiCorp's samples, against 43.8 % for the whole epoch), their updates
    are as random, and they lose rows where a window's fillers do not match
    its rooms: 0.9753 against 0.9764 on the SFT pairs at 128, up to 1 % on
    uniform lengths. A window remains an option (a stream's block is one):
    the part-filled rows of all windows are then packed again together, kept
    if that makes fewer rows (0.9962 to 0.9978 on ChnSentiCorp with windows
    of 12 updates).

    Where best-fit decreasing loses: few or alike lengths. With lengths of
    1,109 and 1,851 tokens (± 30) in rows of 4,096 it pairs the long ones, 2 ×
    1,851 leaves a room no sample fits, then packs three short ones a row
    (0.867), where one long and two short fill 4,069; with lengths 15, 16
    and 17 in rows of 128 it packs seven 17s (119) and eight 15s (120), where
    four of each make 128 (0.955). PaddleNLP's greedy packer, taking samples
    as they come, stumbles on some of those mixes (0.935, 0.958). So where
    the rows exceed Martello and Toth's lower bound (L2) by more than 1 %,
    two more packers are tried and the fewest rows kept: best fit that shuns a room no sample
    can fill (the tightest room it leaves usable, else a new row while the
    tokens still to come can fill it), and longest first into the row with
    the most room on a fixed number of rows (one fewer than the best so far,
    then a bisection towards the bound), which mixes the longer and shorter
    of alike samples: 0.96 and 0.999 on those two. On 1,800 generated corpora
    (short, uniform, bimodal, long-tailed, half the row plus one, few or
    alike lengths, 1 to 20,000 samples, rows of 8 to 4,096) no peer of
    ``benchmarks/packing.py`` packed fewer rows; ``tests/test_packing.py``
    holds it against best-fit decreasing and the greedy packer.

    Speed: the samples are sorted longest first and taken in runs of equal
    length; the open rows are kept by their room (a stack of rows for each
    room, the distinct rooms in a sorted list cut in chunks, ``_Rooms``), so
    best fit is two bisections and a short shift however many distinct
    rooms there are (rows of 10**9 tokens hold a million), and a run of
    ``m`` samples of length ``l`` fills ``room // l`` at once. The samples
    longer than half a row each open a row (none fits an open one), all at
    once. One million samples of ChnSentiCorp plan in 0.6 s, 0.73-0.91x the
    time of the windows before.

    The other two packers run only past the 1 % and go by lengths too: the
    look-ahead packer places a run's next samples where the first went
    while none wastes room (the sample after it would have gone there), the
    balanced one places a whole run at once (the ``m`` largest of the rooms
    ``r, r - l, r - 2l, ...`` of every group of rows of equal room, found by
    a bisection), for up to ``_FEW_LENGTHS`` lengths; the rows are those of
    one sample at a time (``tests/test_packing.py`` checks both). They are
    not tried for one length (best fit is optimal: as many a row as fit) nor
    past ``_MANY_LENGTHS`` distinct lengths, where they are slow and it is
    the bound that is loose: with a third of the samples in 0.3-0.5 of the
    row and the rest short they found no fewer rows than best fit, in 4x its
    time, and on 180 generated corpora in rows of 10**6 (``window`` or not)
    the plans are the same as with them. A million samples of 15, 16 and 17
    tokens in rows of 128 now plan in 1.3-1.4x the time of ChnSentiCorp's,
    not 6.8x; docs/packing.md has the table (``benchmarks/planning_speed.py
    --unusual-only``).

NOTE [ rows by next-fit ]
    A micro-batch's samples are emitted row by row, each row's samples in the
    order they were placed. :class:`~dynbatch.PackCollator` sees only samples:
    it packs them by next-fit in the order given (a new row when the next sample does not fit
    the current one). Next-fit over consecutive groups that each fit a row
    never makes more rows than groups (a row started inside a group holds the
    rest of that group), but it may move the head of a group into the room the
    group before left. So the plan's rows are *defined* as next-fit of its own
    emission order, computed here: planner and collator agree by construction,
    and the micro-batch still holds at most ``max_rows`` rows. Each update's
    oversize rows (``oversize="alone"``) are emitted after its normal rows,
    before next-fit defines them: a micro-batch cut out of the update's rows
    later (NOTE [ packed epochs ] in :mod:`dynbatch.plan.pack_epochs`) is then
    a run of consecutive rows, never two runs an oversize row kept apart, and
    next-fit of it rebuilds the same rows.

NOTE [ rows that mix ]
    Best-fit decreasing places the longest samples first and fills their
    rooms with the longest that fit, so the shortest samples of the epoch are
    left to the end and packed together: rows of nothing but short samples,
    on ChnSentiCorp 17 % of the rows holding 44 % of the samples (a sample is
    short below the median length). An update holding such a row is mostly
    short samples: NeMo warns against first-fit decreasing for this. Packed
    in arrival order (next-fit) 2 % of the samples sit in such rows.

    So each short-only row then takes a long sample (at the median or more)
    from a row that has two or more, ``x`` tokens, and gives that row its own
    longest samples, ``p`` tokens, where ``p <= x <= p + room``: the giving
    row loses ``x - p >= 0`` tokens and the taking row gains at most its room,
    so both stay within ``pack_len`` and the rows are as many as before;
    efficiency is unchanged. Rows ask in rounds, all at once in numpy: each
    asks for the shortest long sample left that it can take giving the
    fewest of its own; a length asked by more rows than it has samples to
    give serves the first, the others ask again. On ChnSentiCorp, the SFT
    pairs at 512 and the long tail no short-only row is left (0.000-0.002 of
    the samples, against 0.44-0.48 for best-fit and first-fit decreasing);
    where no row holds two long samples (the SFT pairs at 128: one or two
    samples a row) nothing moves, and the share is chance's (0.476, next-fit
    0.496). ``benchmarks/packing.py`` prints the share for every packer.

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
import heapq
from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np
from numpy.typing import NDArray

from .._checks import InputError, check_choice, check_int, check_lengths, check_loss_tokens
from .plans import Indices, Plan

__all__ = ["PackPlan", "next_fit_rows", "plan_packs"]

_OVERSIZE = ("error", "skip", "alone")
_UNITS = ("samples", "tokens")
_LOOSE = 1.01  # rows over the lower bound past which the other packers are tried
_BALANCED_TRIES = 6  # row counts tried by the balanced packer
_FEW_LENGTHS = 256  # up to this many lengths the balanced packer runs per length
_MANY_LENGTHS = 4096  # past this many lengths the other packers are not tried
_CHUNK = 512  # rooms per chunk of _Rooms (at most twice as many)


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
    the epoch has ``ceil(N / batch_size)`` updates (NOTE [ updates of packed rows ]);
    the same ``(seed, epoch)`` gives the same plan.

    Args:
        lengths: tokens per sample.
        pack_len: tokens per row.
        batch_size: the fixed batch's samples per update.
        loss_tokens: per sample, its tokens with a loss; needed by
            ``update_unit="tokens"``.
        update_unit: ``"samples"``: updates of ``batch_size`` samples on
            average; ``"tokens"``: of the fixed batch's loss tokens.
        window: samples packed together (NOTE [ packing windows ]); default
            the whole epoch.
        max_rows: rows per micro-batch (from the memory budget); ``None``: an
            update is one micro-batch.
        oversize: a sample longer than ``pack_len``: ``"error"`` refuses it,
            ``"skip"`` leaves it out (:attr:`PackPlan.skipped`), ``"alone"``
            makes it a row and a micro-batch of its own.
        seed: the shuffle's seed.
        epoch: the epoch, mixed into the seed.
        num_updates: updates in the epoch instead of ``ceil(N / batch_size)``
            (at most one per row); ``batch_size`` then plays no part.

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
    rng = np.random.default_rng([seed, epoch])
    perm = rng.permutation(lens.size)
    alone = perm[over[perm]] if oversize == "alone" else np.zeros(0, dtype=np.int64)
    fits = perm[~over[perm]]
    window = max(1, fits.size) if window is None else window
    items, offsets = _best_fit_windows(lens, fits, window, pack_len)
    if round(fits.size / window) > 1:
        items, offsets = _repair_windows(lens, items, offsets, pack_len)
    else:  # one window: the whole epoch
        items, offsets = _pack_harder(lens, fits, pack_len, items, offsets)
    items, offsets = _mix_rows(lens, items, offsets, pack_len)
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


class _Rooms:
    """The distinct rooms that have open rows, ascending: a sorted list cut in chunks.

    NOTE [ packing windows ], speed: best fit asks for the smallest room at
    least a sample's length, then takes that room away and puts back the
    room left. One sorted list does this with a bisection and a shift of the
    list's tail, cheap while the rooms are at most ``pack_len`` values of a
    short row, but a million distinct rooms (rows of 10**9 tokens) make every
    shift a million moves. Chunks of at most ``2 * _CHUNK`` rooms, found by
    a bisection over each chunk's largest, keep every shift short.
    """

    __slots__ = ("chunks", "maxes")

    def __init__(self, rooms: list[int] | None = None) -> None:
        """``rooms``: distinct, ascending."""
        rooms = rooms or []
        self.chunks = [rooms[i : i + _CHUNK] for i in range(0, len(rooms), _CHUNK)]
        self.maxes = [chunk[-1] for chunk in self.chunks]  # each chunk's largest room

    def __bool__(self) -> bool:
        return bool(self.maxes)

    def ceiling(self, value: int) -> int:
        """The smallest room >= ``value``, or -1."""
        c = bisect.bisect_left(self.maxes, value)
        if c == len(self.maxes):
            return -1
        chunk = self.chunks[c]
        return chunk[bisect.bisect_left(chunk, value)]

    def smallest(self) -> int:
        return self.chunks[0][0]

    def remove(self, room: int) -> None:
        c = bisect.bisect_left(self.maxes, room)
        chunk = self.chunks[c]
        del chunk[bisect.bisect_left(chunk, room)]
        if not chunk:
            del self.chunks[c], self.maxes[c]
        else:
            self.maxes[c] = chunk[-1]

    def add(self, room: int) -> None:
        maxes = self.maxes
        c = bisect.bisect_left(maxes, room)
        if c == len(maxes):
            if not maxes:
                self.chunks.append([room])
                maxes.append(room)
                return
            c -= 1
            self.chunks[c].append(room)
            maxes[c] = room
        else:
            bisect.insort(self.chunks[c], room)
        chunk = self.chunks[c]
        if len(chunk) > 2 * _CHUNK:
            self.chunks[c : c + 1] = [chunk[:_CHUNK], chunk[_CHUNK:]]
            maxes[c : c + 1] = [chunk[_CHUNK - 1], chunk[-1]]


def _best_fit_windows(
    lens: Indices, order: Indices, window: int, pack_len: int
) -> tuple[Indices, Indices]:
    """Rows of best-fit decreasing per window of ``order``: ``(indices, offsets)``.

    A row's samples are in the order placed: longest first within each window.
    The rooms are kept by size (NOTE [ packing windows ], speed).
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
    row_ids: list[int] = []
    row_counts: list[int] = []
    put_row, put_count = row_ids.append, row_counts.append
    n_rows = 0
    shortest = int(lens.min())  # a room below it can never be filled: never kept
    rows_with: dict[int, list[int]] = {}  # open rows by room
    rooms = _Rooms()  # the rooms that have open rows
    n_open = 0
    first = 0
    if n_windows == 1:  # longer than half a row: a row each (none fits an open row), at once
        n_rows = int((sl > pack_len // 2).sum())
        first = int((sl[starts] > pack_len // 2).sum())
        row_ids.extend(range(n_rows))
        row_counts.extend([1] * n_rows)
        left = pack_len - sl[:n_rows]  # ascending
        kept = np.flatnonzero(left >= shortest)
        for room, row in zip(left[kept].tolist(), kept.tolist(), strict=True):
            rows_with.setdefault(room, []).append(row)
        rooms = _Rooms(np.unique(left[kept]).tolist())
        n_open = kept.size
    ceiling, take, add = rooms.ceiling, rooms.remove, rooms.add
    for length, m, fresh in zip(
        sl[starts[first:]].tolist(), runs[first:].tolist(), new_window[first:].tolist(), strict=True
    ):
        if fresh:  # carry the largest rooms left: at most `window` of them
            while n_open > window:
                smallest = rooms.smallest()
                stack = rows_with[smallest]
                drop = min(len(stack), n_open - window)
                del stack[len(stack) - drop :]
                n_open -= drop
                if not stack:
                    take(smallest)
        while m:
            room = ceiling(length)
            if room < 0:
                row, room = n_rows, pack_len
                n_rows += 1
            else:
                stack = rows_with[room]
                row = stack.pop()
                n_open -= 1
                if not stack:
                    take(room)
            k = room // length
            if k > m:
                k = m
            m -= k
            room -= k * length
            put_row(row)
            put_count(k)
            if room >= shortest:
                stack = rows_with.setdefault(room, [])
                if not stack:
                    add(room)
                stack.append(row)
                n_open += 1
    row_of = np.repeat(np.asarray(row_ids, dtype=np.int64), row_counts)
    by_row = np.argsort(row_of, kind="stable")  # stable: in the order placed
    offsets = np.searchsorted(row_of[by_row], np.arange(n_rows + 1))
    return items[by_row], offsets.astype(np.int64)


def _lower_bound(lens: Indices, pack_len: int) -> int:
    """Martello and Toth's L2: no packing of ``lens`` into rows of ``pack_len`` has fewer rows.

    For each ``K <= pack_len / 2``: the samples longer than ``pack_len - K``
    each need a row; so do those longer than half, and the samples of ``K``
    to half that do not fit the room those rows leave need rows of their own.
    """
    if lens.size == 0:
        return 0
    values, count = np.unique(lens, return_counts=True)
    n_cum = np.concatenate([[0], np.cumsum(count)])
    t_cum = np.concatenate([[0], np.cumsum(count * values)])

    def at_least(v: Any) -> tuple[Any, Any]:  # samples of length >= v, and their tokens
        i = np.searchsorted(values, v)
        return n_cum[-1] - n_cum[i], t_cum[-1] - t_cum[i]

    half = pack_len // 2
    ks = np.concatenate([[0], values[values <= half]])
    j1, j1_t = at_least(pack_len - ks + 1)  # longer than pack_len - K: a row each
    over_half, over_half_t = at_least(half + 1)
    j2, j2_t = over_half - j1, over_half_t - j1_t  # longer than half: a row each too
    j3_t = at_least(np.maximum(ks, 1))[1] - over_half_t  # K to half: in J2's room or new rows
    spill = -(-(j3_t - (j2 * pack_len - j2_t)) // pack_len)
    bound = (j1 + j2 + np.maximum(spill, 0)).max()
    return int(max(-(-int(t_cum[-1]) // pack_len), int(bound)))


def _best_fit_lookahead(lens: Indices, order: Indices, pack_len: int) -> tuple[Indices, Indices]:
    """Best-fit decreasing that shuns rooms too small for any sample: NOTE [ packing windows ].

    A sample whose best fit would leave a room shorter than the shortest
    sample (room wasted for good) goes to the tightest room it leaves usable
    instead, or, if there is none and the samples still to come hold enough
    tokens to fill the rooms open and a new row, to a new row.

    Taken in runs of equal length: a sample placed in its best fit (or in a
    new row, where none fits) leaves the smallest room that fits the next one,
    so the next ones follow it there while each leaves a room usable or none;
    the same rows as one sample at a time.
    """
    lo = lens[order]
    sort = np.argsort(-lo, kind="stable")
    items = order[sort]
    sl = lo[sort]
    shortest = int(sl[-1])
    to_come = int(lo.sum())
    starts = np.flatnonzero(np.concatenate([[True], sl[1:] != sl[:-1]]))
    runs = np.diff(np.append(starts, sl.size))
    rows_with: dict[int, list[int]] = {}
    rooms = _Rooms()
    ceiling, take, add = rooms.ceiling, rooms.remove, rooms.add
    open_room = 0
    n_rows = 0
    row_ids: list[int] = []
    row_counts: list[int] = []
    put_row, put_count = row_ids.append, row_counts.append
    for length, m in zip(sl[starts].tolist(), runs.tolist(), strict=True):
        while m:
            to_come -= length
            room = ceiling(length)
            follow = 1  # the room left is the next sample's best fit
            if 0 < room - length < shortest:
                follow = 0
                usable = ceiling(length + shortest)
                if usable >= 0:
                    room, follow = usable, 2  # the next one's usable room, while usable
                elif to_come >= open_room - room + pack_len - length:
                    room = -1
            if room < 0:
                row, room = n_rows, pack_len
                n_rows += 1
            else:
                stack = rows_with[room]
                row = stack.pop()
                open_room -= room
                if not stack:
                    take(room)
            room -= length
            k = 1
            if follow and m > 1 and room >= length:  # more of the run, none wasting room
                exact = follow == 1 and room % length == 0
                more = room // length if exact else (room - shortest) // length
                more = min(more, m - 1)
                k += more
                room -= more * length
                to_come -= more * length
            m -= k
            put_row(row)
            put_count(k)
            if room >= shortest:
                stack = rows_with.setdefault(room, [])
                if not stack:
                    add(room)
                stack.append(row)
                open_room += room
    rows = np.repeat(np.asarray(row_ids, dtype=np.int64), row_counts)
    by_row = np.argsort(rows, kind="stable")
    offsets = np.searchsorted(rows[by_row], np.arange(n_rows + 1))
    return items[by_row], offsets.astype(np.int64)


def _pack_harder(
    lens: Indices, order: Indices, pack_len: int, items: Indices, offsets: Indices
) -> tuple[Indices, Indices]:
    """Rows past the lower bound by more than 1 %: try two other packers, keep the fewest rows.

    NOTE [ packing windows ]: best-fit decreasing loses where lengths are few
    or alike; these two do not lose there. One length: best fit is optimal
    (as many a row as fit). More than ``_MANY_LENGTHS`` lengths: not tried.
    """
    bound = _lower_bound(lens[order], pack_len)
    if offsets.size - 1 <= _LOOSE * bound:
        return items, offsets
    lo = lens[order]
    sort = np.argsort(-lo, kind="stable")
    values, counts = np.unique(lo[sort], return_counts=True)
    if not 1 < values.size <= _MANY_LENGTHS:
        return items, offsets
    values, counts, longest_first = values[::-1], counts[::-1], order[sort]

    def balanced(n_rows: int) -> tuple[Indices, Indices] | None:
        if values.size <= _FEW_LENGTHS:
            return _balanced_runs(longest_first, values, counts, pack_len, n_rows)
        return _balanced_rows(lens, order, pack_len, n_rows)

    other = _best_fit_lookahead(lens, order, pack_len)
    if other[1].size < offsets.size:
        items, offsets = other
    low, high = bound, offsets.size - 2  # try fewer rows, the first try at one row fewer
    for step in range(_BALANCED_TRIES):
        if low > high:
            break
        rows = high if step == 0 else (low + high) // 2
        packed = balanced(rows)
        if packed is None:
            if step == 0:
                break
            low = rows + 1
        else:
            items, offsets = packed
            high = rows - 1
    return items, offsets


def _balanced_rows(
    lens: Indices, order: Indices, pack_len: int, n_rows: int
) -> tuple[Indices, Indices] | None:
    """Longest first, each sample into the row with the most room, on ``n_rows`` rows; ``None``
    if a sample fits none. Rows of alike samples mix their longer and shorter ones.
    """
    lo = lens[order]
    sort = np.argsort(-lo, kind="stable")
    shift = 1 << 32  # the room and the row in one number: -(room) * shift + row
    heap = [-pack_len * shift + r for r in range(n_rows)]
    row_of: list[int] = []
    put = row_of.append
    replace = heapq.heapreplace
    for length in lo[sort].tolist():
        top = heap[0]
        room, row = -(top // shift), top % shift
        if room < length:
            return None
        put(row)
        replace(heap, -(room - length) * shift + row)
    rows = np.asarray(row_of, dtype=np.int64)
    by_row = np.argsort(rows, kind="stable")
    offsets = np.unique(np.searchsorted(rows[by_row], np.arange(n_rows + 1)))  # none empty
    return order[sort][by_row], offsets.astype(np.int64)


def _balanced_runs(
    items: Indices, values: Indices, counts: Indices, pack_len: int, n_rows: int
) -> tuple[Indices, Indices] | None:
    """:func:`_balanced_rows` on runs of equal lengths: the same rooms, in numpy per length.

    ``items`` are the samples longest first, ``values`` their distinct lengths
    (descending) and ``counts`` how many of each. NOTE [ packing windows ],
    speed: rows of equal room are one group; ``m`` samples of length ``l``
    placed one by one, each into the row with the most room, take the ``m``
    largest of the rooms ``r, r - l, r - 2l, ...`` of every row, so a length
    costs a bisection for the least room taken (``threshold``), not ``m`` heap
    operations. A group whose rows at the threshold take one more sample or
    not splits in two; each group keeps how many of each length its rows hold.
    """
    room = np.full(1, pack_len, dtype=np.int64)
    size = np.full(1, n_rows, dtype=np.int64)
    holds: list[list[tuple[int, int]]] = [[]]  # per group: (length's index, samples a row)
    for v, (length, m) in enumerate(zip(values.tolist(), counts.tolist(), strict=True)):
        if _taken(room, size, length, length) < m:
            return None  # the m-th sample would find no room
        lo, hi = length, int(room.max()) + 1  # taken at lo >= m > taken at hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if _taken(room, size, length, mid) >= m:
                lo = mid
            else:
                hi = mid
        q = np.where(room > lo, (room - lo - 1) // length + 1, 0)  # rooms above the threshold
        tie = (room >= lo) & ((room - lo) % length == 0)
        left = m - int((size * q).sum())
        extra = np.zeros_like(size)  # rows of each group taking one more, at the threshold
        at = np.flatnonzero(tie)
        if at.size:
            take = np.minimum(size[at], np.maximum(left - (np.cumsum(size[at]) - size[at]), 0))
            extra[at] = take
        split = np.flatnonzero((extra > 0) & (extra < size))
        for g in np.flatnonzero(q > 0).tolist():
            holds[g] = [*holds[g], (v, int(q[g]))]
        new_holds = []
        for g in split.tolist():
            new_holds.append([*holds[g][:-1], (v, int(q[g]) + 1)] if q[g] else [*holds[g], (v, 1)])
        for g in np.flatnonzero((extra > 0) & (extra == size)).tolist():
            holds[g] = [*holds[g][:-1], (v, int(q[g]) + 1)] if q[g] else [*holds[g], (v, 1)]
        full = extra == size
        room = room - (q + full) * length
        if split.size:
            room = np.concatenate([room, room[split] - length])
            size = np.concatenate([size, extra[split]])
            size[split] -= extra[split]
            holds += new_holds
    # rows numbered group by group (groups of empty rows left out); each length's samples, in
    # order, dealt to the groups holding it, q to each of their rows
    used = np.asarray([bool(h) for h in holds])
    size = np.where(used, size, 0)
    first_row = np.cumsum(size) - size
    trip = sorted((v, g, q) for g, h in enumerate(holds) for v, q in h)
    tv, tg, tq = (np.asarray(c, dtype=np.int64) for c in zip(*trip, strict=True))
    per = size[tg] * tq
    t = np.repeat(np.arange(tv.size), per)
    k = np.arange(t.size) - np.repeat(np.cumsum(per) - per, per)
    rows = first_row[tg][t] + k // tq[t]
    by_row = np.argsort(rows, kind="stable")
    offsets = np.searchsorted(rows[by_row], np.arange(int(size.sum()) + 1))
    return items[by_row], offsets.astype(np.int64)


def _taken(room: Indices, size: Indices, length: int, least: int) -> int:
    """Samples of ``length`` placed before the most room left falls below ``least``: the
    rooms ``>= least`` among ``r, r - length, r - 2 * length, ...`` of every row."""
    return int((size * np.maximum((room - least) // length + 1, 0)).sum())


def _repair_windows(
    lens: Indices, items: Indices, offsets: Indices, pack_len: int
) -> tuple[Indices, Indices]:
    """Every part-filled row's samples packed again together, across windows, if fewer rows.

    NOTE [ packing windows ]: what a window leaves part-filled another's samples may fill.
    """
    tokens = np.add.reduceat(lens[items], offsets[:-1]) if items.size else items
    loose = tokens < pack_len
    n_loose = int(loose.sum())
    if n_loose < 2:
        return items, offsets
    sizes = np.diff(offsets)
    keep = np.repeat(~loose, sizes)
    pool_items, pool_offsets = _best_fit_windows(
        lens, items[~keep], int(sizes[loose].sum()), pack_len
    )
    if pool_offsets.size - 1 >= n_loose:
        return items, offsets
    kept_offsets = np.concatenate([[0], np.cumsum(sizes[~loose])])
    return (
        np.concatenate([items[keep], pool_items]),
        np.concatenate([kept_offsets, kept_offsets[-1] + pool_offsets[1:]]).astype(np.int64),
    )


def _mix_rows(
    lens: Indices, items: Indices, offsets: Indices, pack_len: int
) -> tuple[Indices, Indices]:
    """Each short-only row trades its longest samples for a long one: NOTE [ rows that mix ].

    A sample is *long* at the median length or more. A row with no long sample
    takes one from a row with two or more, ``x`` of length, and gives that row
    its own longest samples, of ``p`` tokens in all, where ``p <= x <= p +
    room``: the giving row loses ``x - p >= 0`` tokens and the taking row gains
    at most its room, so both stay within ``pack_len`` and the rows are as
    many as before. Matched in rounds, all rows at once: each row still
    short-only asks for the shortest long sample left that it can take with
    the fewest of its own samples; a length asked for by more rows than it has
    samples serves the first rows, the rest ask again.
    """
    n_rows = offsets.size - 1
    if n_rows < 2:
        return items, offsets
    li = lens[items]
    median = max(1, int(np.median(li)))
    sizes = np.diff(offsets)
    row_of = np.repeat(np.arange(n_rows), sizes)
    long = li >= median
    n_long = np.add.reduceat(long.astype(np.int64), offsets[:-1])
    # the long samples a row may give: all but its longest
    pos = np.flatnonzero(long & (n_long[row_of] >= 2))
    pos = pos[np.lexsort((-li[pos], row_of[pos]))]
    first = np.concatenate([[True], row_of[pos[1:]] != row_of[pos[:-1]]]) if pos.size else pos
    givers = pos[~first.astype(bool)]
    takers = np.flatnonzero(n_long == 0)
    if givers.size == 0 or takers.size == 0:
        return items, offsets
    givers = givers[np.argsort(li[givers], kind="stable")]
    lengths, left = np.unique(li[givers], return_counts=True)  # givers not yet given, a length
    first_of = np.concatenate([[0], np.cumsum(left)[:-1]])
    given = np.zeros(lengths.size, dtype=np.int64)
    # every short-only row's samples longest first; p: the sum of the first k (k = 0, 1, ...)
    mine = np.flatnonzero(np.repeat(n_long == 0, sizes))
    mine = mine[np.lexsort((-li[mine], row_of[mine]))]
    counts = sizes[takers]
    cand_row = np.repeat(np.arange(takers.size), counts + 1)  # k = 0 .. size: size + 1 sums
    cand_start = np.concatenate([[0], np.cumsum(counts + 1)])
    k = np.arange(cand_row.size) - cand_start[cand_row]
    csum = np.concatenate([[0], np.cumsum(li[mine])])
    mine_start = np.concatenate([[0], np.cumsum(counts)])
    p = csum[mine_start[cand_row] + k] - csum[mine_start[cand_row]]
    room = pack_len - np.add.reduceat(li, offsets[:-1])[takers]
    lo = np.maximum(p, median)
    hi = np.minimum(p + room[cand_row], pack_len)
    live = lo <= hi
    cand_row, k, p, lo, hi = cand_row[live], k[live], p[live], lo[live], hi[live]
    open_row = np.ones(takers.size, dtype=bool)
    got_x = np.full(takers.size, -1, dtype=np.int64)
    got_k = np.zeros(takers.size, dtype=np.int64)
    got_pos = np.zeros(takers.size, dtype=np.int64)
    while True:
        # the shortest length >= v that still has a giver
        has = np.flatnonzero(left > 0)
        if has.size == 0:
            break
        at = np.minimum(np.searchsorted(lengths[has], lo), has.size - 1)
        x = has[at]  # the index of the shortest length >= lo left
        fits = (lengths[x] >= lo) & (lengths[x] <= hi) & open_row[cand_row]
        if not fits.any():
            break
        # each row's first fitting sum (fewest samples given)
        c = np.flatnonzero(fits)
        c = c[np.concatenate([[True], cand_row[c[1:]] != cand_row[c[:-1]]])]
        r, want = cand_row[c], x[c]
        # a length serves as many rows as it has givers left, in row order
        by = np.lexsort((r, want))
        r, want, c = r[by], want[by], c[by]
        new = np.concatenate([[True], want[1:] != want[:-1]])
        rank = np.arange(want.size) - np.maximum.accumulate(np.where(new, np.arange(want.size), 0))
        ok = rank < left[want]
        r, want, c, rank = r[ok], want[ok], c[ok], rank[ok]
        got_x[r], got_k[r] = want, k[c]
        got_pos[r] = givers[first_of[want] + given[want] + rank]
        served = np.bincount(want, minlength=lengths.size)
        given += served
        left -= served
        open_row[r] = False
    done = np.flatnonzero(got_x >= 0)
    if done.size == 0:
        return items, offsets
    moved = row_of.copy()
    moved[got_pos[done]] = takers[done]
    n_give = got_k[done]
    back = np.repeat(mine_start[done], n_give) + (
        np.arange(int(n_give.sum())) - np.repeat(np.cumsum(n_give) - n_give, n_give)
    )
    moved[mine[back]] = np.repeat(row_of[got_pos[done]], n_give)
    by_row = np.argsort(moved, kind="stable")
    return items[by_row], np.searchsorted(moved[by_row], np.arange(n_rows + 1)).astype(np.int64)


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
    n_rows = len(rows)
    sizes = np.diff(rows.offsets)
    alone = (sizes == 1) & (lens[rows.indices[rows.offsets[:-1]]] > pack_len)
    if alone.any():  # each update's oversize rows after its normal rows: NOTE [ packed epochs ]
        update_of = np.searchsorted(update_ends, np.arange(n_rows), side="right")
        by = np.lexsort((alone, update_of))
        rows, alone = rows.take(by), alone[by]
    indices, offsets = rows.indices, rows.offsets
    lens_of = lens[indices]
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
