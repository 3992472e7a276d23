"""Plan batches from sample lengths: pure numpy, no paddle.

``plan_batches`` turns an array of lengths into a list of index arrays such
that every batch fits ``max_cost`` under a cost model. Epoch, seed and rank
are plain arguments; the samplers in :mod:`dynbatch.sampler` own them.

NOTE [ bucket order ]
    Sorting by length packs best (little padding, fewest batches) but gives the
    same batches in a length-correlated order every epoch, which the original
    study saw hurt accuracy. Shuffling gives fresh batches but pads heavily.
    ``order="bucket"`` keeps the padding of a sort and the randomness of a
    shuffle: samples are grouped into length buckets whose edges grow
    geometrically by ``1 + bucket_width`` (so two samples in one bucket differ
    in length by less than that fraction, on any corpus), the bucket edges are
    moved by a random phase each epoch, samples are shuffled within buckets,
    packed in bucket order, and the batches are finally shuffled. A batch is
    charged for the longest sample of its bucket, so its size is known without
    looking at its members and packing costs one vectorised step per bucket,
    not one Python step per sample.

NOTE [ packing by capacity ]
    For a monotone cost, a batch of ``n`` samples with longest padded length
    ``L`` fits iff ``n <= capacity(L)``, the largest ``n`` with
    ``cost(n, L) <= max_cost`` (capped by ``max_batch_size`` and rounded down to
    ``batch_size_multiple``). Capacities are found once per distinct length by
    vectorised bisection on the cost itself, so the budget check and the
    planner can never disagree. ``capacity(L) == 0`` marks a sample that does
    not fit even alone (``oversize``).
"""

from __future__ import annotations

import itertools
import warnings
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ._checks import check_bool, check_choice, check_int, check_lengths, check_positive_number
from .cost import Cost, CostLike, LinearCost, MixedCost, QuadraticCost, resolve_cost

__all__ = ["ORDERS", "OVERSIZE", "find_oversize", "padded_lengths", "plan_batches"]

ORDERS = ("bucket", "shuffle", "ascending", "descending", "none")
OVERSIZE = ("error", "skip", "alone")


def padded_lengths(lengths: NDArray[Any], pad_to_multiple_of: int = 1) -> NDArray[Any]:
    """Round lengths up to a multiple of ``pad_to_multiple_of``.

    >>> padded_lengths(np.array([1, 8, 9]), 8).tolist()
    [8, 8, 16]
    """
    if pad_to_multiple_of == 1:
        return lengths
    return -(-lengths // pad_to_multiple_of) * pad_to_multiple_of


def _capacity(
    cost: Cost, lengths: NDArray[Any], max_cost: float, upper: int, multiple: int
) -> NDArray[Any]:
    """Largest batch size that fits, per length (see NOTE [ packing by capacity ])."""
    lo = np.zeros(lengths.shape, dtype=np.int64)  # always fits
    hi = np.full(lengths.shape, upper, dtype=np.int64)
    while True:
        todo = lo < hi
        if not todo.any():
            break
        mid = (lo + hi + 1) // 2
        fits = np.asarray(cost(mid, lengths), dtype=np.float64) <= max_cost
        lo = np.where(todo & fits, mid, lo)
        hi = np.where(todo & ~fits, mid - 1, hi)
    if multiple > 1:
        lo = np.where(lo >= multiple, lo - lo % multiple, lo)
    return lo


class _Distinct:
    """The distinct values of a positive int array, and per-sample look-ups into them."""

    def __init__(self, values: NDArray[Any]) -> None:
        self.values = values
        top = int(values.max())
        self._by_value = top <= 4 * values.size + (1 << 20)  # count, no sort
        if self._by_value:
            present = np.bincount(values, minlength=top + 1) > 0
            self.uniq = np.flatnonzero(present)
            self._rank = np.cumsum(present) - 1  # rank of each value
        else:
            self.uniq, inverse = np.unique(values, return_inverse=True)
            self._rank = inverse.reshape(-1)  # rank of each sample

    def take(self, per_value: NDArray[Any], where: NDArray[Any] | None = None) -> NDArray[Any]:
        """``per_value[rank of values[where]]``: a per-distinct-value array mapped to samples."""
        if self._by_value:
            table = per_value[self._rank]
            return np.asarray(table[self.values if where is None else self.values[where]])
        return np.asarray(per_value[self._rank if where is None else self._rank[where]])


def _stable_argsort_small(keys: NDArray[Any], nkeys: int) -> NDArray[Any]:
    """Stable argsort of ints in ``[0, nkeys)``; radix sort when they fit 16 bits."""
    if nkeys <= np.iinfo(np.uint16).max:
        keys = keys.astype(np.uint16)
    return np.argsort(keys, kind="stable")


def _pack_runs(
    run_starts: NDArray[Any], run_caps: NDArray[Any], total: int, multiple: int
) -> tuple[list[int], bool]:
    """Batch boundaries for a sequence cut into runs of nonincreasing capacity.

    Every position in run ``k`` is charged that run's capacity; a batch that
    spans runs is charged the last one's. Returns the boundaries (end offsets)
    and whether the final batch ended only because the samples ran out.
    """
    bounds: list[int] = []
    pos = 0  # start of the open batch
    ends = np.append(run_starts[1:], total).tolist()
    for start, end, cap in zip(run_starts.tolist(), ends, run_caps.tolist(), strict=True):
        if cap == 0:  # oversize samples: each alone
            if pos < start:
                bounds.append(start)
            bounds.extend(range(start + 1, end + 1))
            pos = end
            continue
        carried = start - pos
        while carried >= cap:  # the open batch is full at this run's charge: close it
            size = carried - carried % multiple if carried >= multiple else carried
            pos += size
            bounds.append(pos)
            carried -= size
        if carried:
            if pos + cap > end:  # still open after this run
                continue
            pos += cap
            bounds.append(pos)
        full = (end - pos) // cap
        if full:
            bounds.extend(range(pos + cap, pos + cap * full + 1, cap))
            pos += cap * full
    partial = pos < total
    if partial:
        bounds.append(total)
    return bounds, partial


def _pack_sequence(caps: list[int], multiple: int) -> tuple[list[int], bool]:
    """Greedy batch boundaries for samples taken in the given order.

    ``caps[i]`` is the capacity of the i-th sample's length: a batch
    ``[a, b)`` fits iff ``b - a <= min(caps[a:b])``. A capacity of 0 is an
    oversize sample that becomes a batch of its own. A plain loop: each step is
    a few integer comparisons, which beats vectorised look-ahead windows for
    the small batches that random orders produce.
    """
    total = len(caps)
    bounds: list[int] = []
    start = room = i = 0
    while i < total:
        cap = caps[i]
        if i == start:  # first sample of a new batch
            i += 1
            if cap == 0:
                start = i
                bounds.append(i)
            else:
                room = cap
            continue
        room = min(room, cap)
        if i - start >= room:  # sample i does not fit: close [start, i)
            size = i - start
            if multiple > 1 and size >= multiple:
                size -= size % multiple
            start += size
            bounds.append(start)
            i = start
            continue
        i += 1
    partial = start < total and total - start < room
    if start < total:
        bounds.append(total)
    return bounds, partial


def find_oversize(
    lengths: Any, max_cost: float, *, cost: CostLike = "quadratic", pad_to_multiple_of: int = 1
) -> NDArray[Any]:
    """Indices of samples that exceed ``max_cost`` even alone.

    >>> find_oversize([10, 300, 20], 200**2).tolist()
    [1]
    """
    lens = check_lengths(lengths)
    fn = resolve_cost(cost)
    max_cost = check_positive_number("max_cost", max_cost)
    plens = padded_lengths(lens, check_int("pad_to_multiple_of", pad_to_multiple_of, minimum=1))
    dist = _Distinct(plens)
    return np.flatnonzero(dist.take(_capacity(fn, dist.uniq, max_cost, 1, 1)) == 0)


def plan_batches(
    lengths: Any,
    max_cost: float,
    *,
    cost: CostLike = "quadratic",
    order: str = "bucket",
    seed: int = 0,
    epoch: int = 0,
    max_batch_size: int | None = None,
    batch_size_multiple: int = 1,
    pad_to_multiple_of: int = 1,
    oversize: str = "error",
    drop_last: bool = False,
    bucket_width: float = 0.05,
) -> list[NDArray[Any]]:
    """Group sample indices into batches whose padded cost stays within ``max_cost``.

    Args:
        lengths: per-sample lengths (positive integers), e.g. token counts.
        max_cost: the budget every batch must fit: ``cost(n, L) <= max_cost``.
        cost: ``"quadratic"`` (n·L²), ``"linear"`` (n·L), ``"mixed:A,B"``,
            :class:`~dynbatch.MixedCost` or a callable ``(n, L) -> float``
            nondecreasing in both arguments.
        order: ``"bucket"`` (near-sorted batches, new each epoch, in random
            order; see NOTE [ bucket order ]), ``"shuffle"``, ``"ascending"``,
            ``"descending"`` (sorted by length; descending is the ascending plan
            reversed, longest batch first) or ``"none"`` (dataset order).
        seed, epoch: the random orders are a pure function of ``(seed, epoch)``.
        max_batch_size: at most this many samples per batch.
        batch_size_multiple: batch sizes are rounded down to a multiple of this
            where the budget allows at least one multiple; the batch that takes
            the last samples may be smaller.
        pad_to_multiple_of: ``L`` is the longest length rounded up to this.
        oversize: a sample over budget even alone: ``"error"`` raises,
            ``"skip"`` leaves it out (with a warning that counts them, see
            :func:`find_oversize`), ``"alone"`` puts it in a batch of its own.
        drop_last: drop the final batch when it ended only because the samples
            ran out (it could have held more).
        bucket_width: relative width of a length bucket for ``order="bucket"``:
            lengths in one bucket differ by less than this fraction.

    Returns:
        A list of ``int64`` index arrays. Each index appears exactly once, but
        for ``oversize="skip"`` and ``drop_last``.

    >>> [b.tolist() for b in plan_batches([4, 4, 8, 2, 2, 2], 32, cost="linear", order="none")]
    [[0, 1, 2, 3], [4, 5]]
    >>> [b.tolist() for b in plan_batches([4, 4, 8, 2, 2, 2], 32, cost="linear", order="ascending")]
    [[3, 4, 5, 0, 1], [2]]
    """
    lens = check_lengths(lengths)
    max_cost = check_positive_number("max_cost", max_cost)
    fn = resolve_cost(cost)
    check_choice("order", order, ORDERS)
    seed = check_int("seed", seed)
    epoch = check_int("epoch", epoch)
    max_batch_size = check_int("max_batch_size", max_batch_size, minimum=1, allow_none=True)
    multiple = check_int("batch_size_multiple", batch_size_multiple, minimum=1)
    pad = check_int("pad_to_multiple_of", pad_to_multiple_of, minimum=1)
    check_choice("oversize", oversize, OVERSIZE)
    drop_last = check_bool("drop_last", drop_last)
    bucket_width = check_positive_number("bucket_width", bucket_width)

    plens = padded_lengths(lens, pad)
    dist = _Distinct(plens)
    upper = lens.size if max_batch_size is None else min(max_batch_size, lens.size)
    caps_by_len = _capacity(fn, dist.uniq, max_cost, upper, multiple)
    if caps_by_len[-1] == 0:  # the longest is over budget alone
        _report_oversize(fn, lens, plens, dist.take(caps_by_len) == 0, max_cost, oversize)
    rng = np.random.default_rng([seed, epoch])
    if order in ("none", "shuffle"):
        seq = np.arange(lens.size) if order == "none" else _permutation(rng, lens.size)
        caps = dist.take(caps_by_len, seq)
        if oversize == "skip":
            seq, caps = seq[caps > 0], caps[caps > 0]
        bounds, partial = _pack_sequence(caps.tolist(), multiple)
    else:
        if order == "bucket":
            # bucket k holds L with k <= log(L) / log(1 + w) + phase < k + 1
            phase = rng.random()
            key_of_len = np.floor(np.log(dist.uniq) / np.log1p(bucket_width) + phase).astype(
                np.int64
            )
            key_of_len -= key_of_len[0]
            # oversize lengths (the longest, for a monotone cost) form a last run of their own
            key_of_len[caps_by_len == 0] = key_of_len[-1] + 1
        else:
            key_of_len = np.arange(dist.uniq.size)
        nkeys = int(key_of_len[-1]) + 1
        # a run is charged for its longest member: the smallest capacity in it
        run_caps = np.full(nkeys, upper, dtype=np.int64)
        np.minimum.at(run_caps, key_of_len, caps_by_len)
        keys = dist.take(key_of_len)
        if oversize == "skip":
            kept = np.flatnonzero(run_caps[keys] > 0)
            seq = kept if order != "bucket" else kept[_permutation(rng, kept.size)]
        else:
            seq = np.arange(lens.size) if order != "bucket" else _permutation(rng, lens.size)
        seq = seq[_stable_argsort_small(keys[seq], nkeys)]
        counts = np.bincount(keys[seq] if oversize == "skip" else keys, minlength=nkeys)
        nonempty = np.flatnonzero(counts)
        run_starts = (np.cumsum(counts) - counts)[nonempty]
        bounds, partial = _pack_runs(run_starts, run_caps[nonempty], seq.size, multiple)
    if drop_last and partial:
        bounds.pop()
        seq = seq[: bounds[-1] if bounds else 0]
    if not isinstance(fn, (QuadraticCost, LinearCost, MixedCost)):
        _check_budget(fn, plens[seq], bounds, max_cost, oversize == "alone")
    seq = seq.astype(np.int64, copy=False)
    batches = [seq[a:b] for a, b in itertools.pairwise([0, *bounds])]
    if order == "bucket":
        batches = [batches[i] for i in rng.permutation(len(batches))]
    elif order == "descending":
        batches.reverse()
    return batches


def _permutation(rng: np.random.Generator, n: int) -> NDArray[Any]:
    """A random permutation of ``range(n)``; int32 halves the memory traffic when it can."""
    perm = np.arange(n, dtype=np.int32 if n < 2**31 else np.int64)
    rng.shuffle(perm)
    return perm


def _report_oversize(
    fn: Cost,
    lens: NDArray[Any],
    plens: NDArray[Any],
    too_big: NDArray[Any],
    max_cost: float,
    oversize: str,
) -> None:
    where = np.flatnonzero(too_big)
    i = int(where[0])
    if oversize == "error":
        raise ValueError(
            f"sample {i} has length {lens[i]} (padded {plens[i]}) and costs "
            f"{float(fn(1, plens[i])):g} alone, over max_cost={max_cost:g}; "
            f"{where.size} sample(s) are over budget. Raise max_cost, truncate them, "
            f"or pass oversize='skip' or 'alone'"
        )
    if oversize == "skip":
        warnings.warn(
            f"skipping {where.size} sample(s) over max_cost={max_cost:g} even alone "
            f"(first: index {i}, length {lens[i]})",
            stacklevel=3,
        )


def _check_budget(
    fn: Cost, seq_lens: NDArray[Any], bounds: list[int], max_cost: float, alone_ok: bool
) -> None:
    """Every batch fits, else the user's cost is not monotone (NOTE [ packing by capacity ])."""
    if not bounds:
        return
    starts = np.array([0, *bounds[:-1]], dtype=np.int64)
    sizes = np.diff(np.append(starts, seq_lens.size))
    costs = np.asarray(fn(sizes, np.maximum.reduceat(seq_lens, starts)), dtype=np.float64)
    over = costs > max_cost
    if alone_ok:
        over &= sizes > 1
    if over.any():
        k = int(np.argmax(over))
        raise ValueError(
            f"cost {fn!r} is not nondecreasing in (n, L): a batch of {sizes[k]} samples "
            f"costs {costs[k]:g} > max_cost={max_cost:g} although every smaller step fit"
        )
