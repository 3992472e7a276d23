"""Plan batches from sample lengths: pure numpy, no paddle.

``plan_batches`` turns an array of lengths into a :class:`~dynbatch.plan.plans.Plan`
(one index array cut by batch offsets, :mod:`dynbatch.plan.plans`) such that every
batch fits ``max_cost`` under a cost model. Epoch, seed and rank are plain
arguments; the samplers in :mod:`dynbatch.paddle.sampler` own them.

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
    looking at its members and packing costs one step per bucket, not one
    Python step per sample.

NOTE [ packing by capacity ]
    For a monotone cost, a batch of ``n`` samples with longest padded length
    ``L`` fits iff ``n <= capacity(L)``, the largest ``n`` with
    ``cost(n, L) <= max_cost`` (capped by ``max_batch_size`` and rounded down to
    ``batch_size_multiple``). Capacities are found once per distinct length by
    vectorised bisection on the cost itself, so the budget check and the
    planner can never disagree. ``capacity(L) == 0`` marks a sample that does
    not fit even alone (``oversize``).

NOTE [ what drop_last drops ]
    Packing leaves one batch that ended only because the samples ran out.
    In a sorted or bucketed packing that is the tail of the *last* run packed,
    which would be the longest samples every epoch: ``drop_last`` would never
    train on the longest reviews. So with ``drop_last`` the bucket order starts
    packing at a random bucket and wraps around, ending in bucket ``k`` with
    probability proportional to its number of batches, ``n_k / capacity_k``.
    The partial batch then holds about ``capacity_k / 2`` samples, drawn at
    random from the bucket's ``n_k``, so every sample is dropped with the same
    probability (about half a batch over all batches of the epoch), and the
    samples dropped per epoch average half a mean batch, as with a fixed batch
    size. The batch that spans the wrap is charged for its longest member,
    like every batch.

NOTE [ batch_size_multiple ]
    A greedy packing closes a batch early when the next sample does not fit,
    which can leave a batch that is not a multiple although the budget allows
    one (two short samples before a long one). Such batches keep their largest
    multiple and give the rest back; the given-back samples are packed last,
    sorted, so that only the very last batch of the epoch may fall short of a
    multiple. Batches whose budget allows fewer than one multiple (long
    samples) keep the size the budget allows.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._checks import check_int
from .budget import finish_plan, plan_rng, report_oversize
from .costs import Cost, LinearCost, MixedCost, QuadraticCost, capacity, one_length
from .lengths import check_plan_lengths, is_pairs
from .options import ORDERS, OVERSIZE, PlanOptions, resolve_options
from .pairs import check_pair_options, pair_oversize, plan_pairs
from .plans import Plan

__all__ = [
    "ORDERS",
    "OVERSIZE",
    "Plan",  # its home is dynbatch.plan.plans; imported from here before, and still
    "batch_capacity",
    "find_oversize",
    "padded_lengths",
    "plan_batches",
]


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
) -> NDArray[np.int64]:
    """Largest batch size that fits, per length (see NOTE [ packing by capacity ])."""
    return capacity(cost, lengths, max_cost, upper, multiple)


def batch_capacity(
    padded_length: Any, options: PlanOptions, num_samples: int | None = None
) -> NDArray[np.int64]:
    """The most samples a batch of (padded) length ``padded_length`` may hold under ``options``.

    ``padded_length`` may be rows of (source, target) lengths, an ``[k, 2]`` array: each a
    batch's longest source and longest target.

    >>> batch_capacity([8, 16], PlanOptions(max_cost=64, cost="linear")).tolist()
    [8, 4]
    >>> batch_capacity([[8, 8]], PlanOptions(max_cost=64, cost="linear")).tolist()
    [4]
    """
    lens = np.asarray(padded_length, dtype=np.int64)
    lens = lens if lens.ndim == 2 else np.atleast_1d(lens)
    upper = options.max_batch_size or (num_samples + 1 if num_samples else 2**62)
    return _capacity(options.cost, lens, options.max_cost, upper, options.batch_size_multiple)


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

    def rank_of(self, values: NDArray[Any]) -> NDArray[Any]:
        """Rank of values that are known to be among the distinct ones."""
        return np.searchsorted(self.uniq, values)


def _stable_argsort_small(keys: NDArray[Any], nkeys: int) -> NDArray[Any]:
    """Stable argsort of ints in ``[0, nkeys)``; radix sort when they fit 16 bits."""
    if nkeys <= np.iinfo(np.uint16).max:
        keys = keys.astype(np.uint16)
    return np.argsort(keys, kind="stable")


def _pack_runs(
    run_sizes: Sequence[int], run_caps: Sequence[int], multiple: int
) -> tuple[list[int], bool]:
    """Batch boundaries for samples laid out in runs, each charged its run's capacity.

    A batch that spans runs is charged the smallest capacity among them (its
    longest member's). Returns the boundaries (end offsets) and whether the
    final batch ended only because the samples ran out.
    """
    bounds: list[int] = []
    pos = start = 0  # start of the open batch; start of the current run
    charge = 0  # capacity of the open batch
    for size, cap in zip(run_sizes, run_caps, strict=True):
        end = start + size
        if cap == 0:  # oversize samples: each alone
            if pos < start:
                bounds.append(start)
            bounds.extend(range(start + 1, end + 1))
            pos = start = end
            continue
        carried = start - pos
        if carried >= cap:  # no sample of this run fits the open batch: close it
            size_ = carried - carried % multiple if carried >= multiple else carried
            pos += size_
            bounds.append(pos)
            carried -= size_
            if carried >= cap:  # (cap < multiple) the rest cannot join either
                pos += carried
                bounds.append(pos)
                carried = 0
        if carried:
            charge = min(charge, cap)
            if pos + charge > end:  # still open after this run
                start = end
                continue
            pos += charge
            bounds.append(pos)
        full = (end - pos) // cap
        if full:
            bounds.extend(range(pos + cap, pos + cap * full + 1, cap))
            pos += cap * full
        charge = cap
        start = end
    partial = pos < start
    if partial:
        bounds.append(start)
    return bounds, partial


#: batch sizes up to this are found for every start at once; longer ones are galloped to
_SMALL_BATCH = 32


def _greedy_sizes(caps: NDArray[Any]) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
    """The largest batch that fits from every start, for the small ones, all at once.

    A batch of ``s`` samples from ``a`` fits iff ``min(caps[a:a+s]) >= s``; that
    shrinks as ``s`` grows, so each start's running minimum is extended one
    sample at a time over the starts still growing (zeros past the end stop
    them). Starts that may hold more than ``_SMALL_BATCH`` are flagged for
    :func:`_gallop`.
    """
    n = caps.size
    fits32 = n + _SMALL_BATCH < 2**31 and caps.max(initial=0) < 2**31
    small: type[np.signedinteger[Any]] = np.int32 if fits32 else np.int64
    ext = np.concatenate([caps, np.zeros(_SMALL_BATCH + 1, dtype=caps.dtype)]).astype(small)
    size = np.ones(n, dtype=np.int64)  # a batch always holds its first sample
    idx: NDArray[Any] = np.flatnonzero(caps >= 2).astype(small)
    run = ext[idx]
    for s in range(2, _SMALL_BATCH + 1):
        if not idx.size:
            break
        run = np.minimum(run, ext[idx + (s - 1)])
        keep = run >= s
        size[idx[~keep]] = s - 1
        idx, run = idx[keep], run[keep]
    size[idx] = _SMALL_BATCH
    more = np.zeros(n, dtype=bool)
    more[idx] = True
    return size, more


def _gallop(caps: NDArray[Any], start: int) -> int:
    """The largest batch that fits from ``start``, in windows that double."""
    width = 2 * _SMALL_BATCH
    while True:
        window = caps[start : start + width]
        run = np.minimum.accumulate(window)
        short = run < np.arange(1, window.size + 1)
        if short.any():
            return int(np.argmax(short))
        if start + width >= caps.size:
            return int(window.size)
        width *= 2


def _pack_sequence(caps: NDArray[Any], multiple: int) -> tuple[list[int], bool]:
    """Greedy batch boundaries for samples taken in the given order.

    ``caps[i]`` is the capacity of the i-th sample's length: a batch
    ``[a, b)`` fits iff ``b - a <= min(caps[a:b])``. A capacity of 0 is an
    oversize sample that becomes a batch of its own. The largest batch from
    every start is found vectorised (:func:`_greedy_sizes`), so the loop that
    follows the batches makes one step per batch, not per sample.
    """
    total = int(caps.size)
    if total == 0:
        return [], False
    caps = np.asarray(caps, dtype=np.int64)
    sizes, more = _greedy_sizes(caps)
    size_of = sizes.tolist()
    longer = set(np.flatnonzero(more).tolist())
    bounds: list[int] = []
    start = 0
    while start < total:
        size = _gallop(caps, start) if start in longer else size_of[start]
        if multiple > 1 and size >= multiple and start + size < total:
            size -= size % multiple
        bounds.append(start + size)
        start += size
    last = bounds[-2] if len(bounds) > 1 else 0
    partial = total - last < int(caps[last:].min())
    return bounds, partial


def _honour_multiple(
    seq: NDArray[Any],
    bounds: list[int],
    plens: NDArray[Any],
    dist: _Distinct,
    caps_by_len: NDArray[Any],
    multiple: int,
    partial: bool,
) -> tuple[NDArray[Any], list[int], bool]:
    """Give back what keeps a batch from a multiple, pack it last (NOTE [ batch_size_multiple ])."""
    if multiple == 1 or not bounds:
        return seq, bounds, partial
    ends = np.asarray(bounds, dtype=np.int64)
    starts = np.concatenate([[0], ends[:-1]])
    sizes = ends - starts
    longest = np.maximum.reduceat(plens[seq], starts)
    caps = caps_by_len[dist.rank_of(longest)]
    bad = (sizes % multiple != 0) & (caps >= multiple)
    if not bad[:-1].any():
        return seq, bounds, partial  # at most the last batch falls short
    keep = np.where(bad, sizes - sizes % multiple, sizes)
    offset = np.arange(seq.size) - np.repeat(starts, sizes)
    kept = offset < np.repeat(keep, sizes)
    given_back = seq[~kept]
    given_back = given_back[np.argsort(plens[given_back], kind="stable")]
    values, counts = np.unique(plens[given_back], return_counts=True)
    more, partial = _pack_runs(
        counts.tolist(), caps_by_len[dist.rank_of(values)].tolist(), multiple
    )
    head = np.cumsum(keep[keep > 0])
    n_kept = int(head[-1]) if head.size else 0
    new_bounds = head.tolist() + [n_kept + b for b in more]
    return np.concatenate([seq[kept], given_back]), new_bounds, partial


def find_oversize(
    lengths: Any,
    max_cost: float | None = None,
    *,
    options: PlanOptions | None = None,
    **shortcuts: Any,
) -> NDArray[Any]:
    """Indices of samples that exceed ``max_cost`` even alone (with ``pack_len``: a row).

    Args:
        lengths: per-sample lengths (positive integers), e.g. token counts.
        max_cost: the budget every batch must fit: ``cost(n, L) <= max_cost``.
        options: a :class:`~dynbatch.PlanOptions`, instead of ``max_cost`` and ``**shortcuts``.
        **shortcuts: :class:`~dynbatch.PlanOptions` fields as keywords (``cost=...``,
            ``pad_to_multiple_of=...``, ``pack_len=...``).

    >>> find_oversize([10, 300, 20], 200**2).tolist()
    [1]
    >>> find_oversize([[10, 10], [100, 300], [20, 5]], 200**2).tolist()  # n (Ls² + Lt² + Ls Lt)
    [1]
    """
    lens = check_plan_lengths(lengths)
    if max_cost is not None:
        shortcuts["max_cost"] = max_cost
    opts = resolve_options(options, shortcuts, "find_oversize", pairs=is_pairs(lens))
    if lens.ndim == 2:  # NOTE [ planning pairs ] in dynbatch.plan.pairs
        check_pair_options(opts, "find_oversize")
        return pair_oversize(lens, opts)
    one_length(opts.cost)
    if opts.pack_len is not None:  # a packed sample is over when longer than its row
        return np.flatnonzero(lens > opts.pack_len)
    plens = padded_lengths(lens, opts.pad_to_multiple_of)
    dist = _Distinct(plens)
    caps = _capacity(opts.cost, dist.uniq, opts.max_cost, 1, 1)
    return np.flatnonzero(dist.take(caps) == 0)


def plan_batches(
    lengths: Any,
    max_cost: float | None = None,
    *,
    epoch: int = 0,
    options: PlanOptions | None = None,
    **shortcuts: Any,
) -> Plan:
    """Group sample indices into batches whose padded cost stays within ``max_cost``.

    Args:
        lengths: per-sample lengths (positive integers), e.g. token counts; or an ``[N, 2]``
            array of (source, target) lengths, each batch then charged ``cost(n, Ls, Lt)`` at
            its longest source and longest target, and bucketed on both sides.
        max_cost: the budget every batch must fit: ``cost(n, L) <= max_cost``.
        epoch: the random orders are a pure function of ``(seed, epoch)``.
        options: a :class:`~dynbatch.PlanOptions`; or give its fields as
            keywords (``**shortcuts``), not both.
        **shortcuts: :class:`~dynbatch.PlanOptions` fields as keywords (``max_cost``, ``cost``,
            ``order``, ``seed``, ``max_batch_size``, ``batch_size_multiple``,
            ``pad_to_multiple_of``, ``oversize``, ``drop_last``, ``bucket_width``).

    Orders: ``"bucket"`` (near-sorted batches, new each epoch, in random order: the padding
    of a sort and the randomness of a shuffle; samples in one bucket differ in length by less
    than ``bucket_width``), ``"shuffle"``, ``"ascending"``,
    ``"descending"`` (sorted by length; descending is the ascending plan
    reversed, longest batch first) or ``"none"`` (dataset order).

    Returns:
        A :class:`Plan`. Each index appears exactly once, but for
        ``oversize="skip"`` and ``drop_last`` (the batch that ended because samples ran out,
        drawn from a random bucket, so that the longest samples are not the ones always
        dropped).

    >>> [b.tolist() for b in plan_batches([4, 4, 8, 2, 2, 2], 32, cost="linear", order="none")]
    [[0, 1, 2, 3], [4, 5]]
    >>> [b.tolist() for b in plan_batches([4, 4, 8, 2, 2, 2], 32, cost="linear", order="ascending")]
    [[3, 4, 5, 0, 1], [2]]
    >>> pairs = [[4, 9], [4, 8], [8, 2], [7, 2]]  # (source, target), cost n * (Ls + Lt)
    >>> [b.tolist() for b in plan_batches(pairs, 26, cost="linear", order="none")]
    [[0, 1], [2, 3]]
    """  # NOTE [ bucket order ], NOTE [ what drop_last drops ], NOTE [ planning pairs ]
    lens = check_plan_lengths(lengths)
    if max_cost is not None:
        shortcuts["max_cost"] = max_cost
    opts = resolve_options(options, shortcuts, "plan_batches", pairs=is_pairs(lens))
    return plan_draw(lens, opts, check_int("epoch", epoch))


def plan_draw(
    lens: NDArray[np.int64],
    opts: PlanOptions,
    epoch: int,
    draw: int = 0,
    *,
    shuffle_batches: bool = True,
) -> Plan:
    """The plan of ``epoch`` from checked inputs; ``draw > 0`` draws the random orders anew.

    ``shuffle_batches=False`` leaves the bucket order's batches in packing order,
    for callers that reorder them anyway (sharding sorts them by compute). Lengths of pairs
    are planned by :func:`~dynbatch.plan.pairs.plan_pairs`.
    """
    if lens.ndim == 2:  # NOTE [ planning pairs ] in dynbatch.plan.pairs
        return plan_pairs(lens, opts, epoch, draw, shuffle_batches=shuffle_batches)
    fn, multiple = one_length(opts.cost), opts.batch_size_multiple
    plens = padded_lengths(lens, opts.pad_to_multiple_of)
    dist = _Distinct(plens)
    # a batch of every sample "could have held more" unless the cap says otherwise
    upper = lens.size + 1 if opts.max_batch_size is None else opts.max_batch_size
    caps_by_len = _capacity(fn, dist.uniq, opts.max_cost, upper, multiple)
    if caps_by_len[-1] == 0:  # the longest is over budget alone
        too_big = dist.take(caps_by_len) == 0
        report_oversize(fn, lens, plens, too_big, opts.max_cost, opts.oversize, stacklevel=4)
    rng = plan_rng(opts, epoch, draw)
    skip = opts.oversize == "skip"
    if opts.order in ("none", "shuffle"):
        seq = np.arange(lens.size) if opts.order == "none" else _permutation(rng, lens.size)
        caps = dist.take(caps_by_len, seq)
        if skip:
            seq, caps = seq[caps > 0], caps[caps > 0]
        bounds, partial = _pack_sequence(caps, multiple)
    else:
        seq, run_sizes, run_caps = _runs(lens, dist, caps_by_len, opts, rng)
        if opts.order == "bucket" and opts.drop_last:
            seq, run_sizes, run_caps = _rotate(seq, run_sizes, run_caps, rng)
        bounds, partial = _pack_runs(run_sizes, run_caps, multiple)
    seq, bounds, partial = _honour_multiple(
        seq, bounds, plens, dist, caps_by_len, multiple, partial
    )
    named = isinstance(fn, (QuadraticCost, LinearCost, MixedCost))
    return finish_plan(
        fn, plens, seq, bounds, partial, opts, rng, shuffle_batches=shuffle_batches, named=named
    )


def _runs(
    lens: NDArray[Any],
    dist: _Distinct,
    caps_by_len: NDArray[Any],
    opts: PlanOptions,
    rng: np.random.Generator,
) -> tuple[NDArray[Any], list[int], list[int]]:
    """Samples laid out in runs of nonincreasing capacity: sorted lengths or length buckets."""
    upper = int(caps_by_len.max()) if caps_by_len.size else 0
    if opts.order == "bucket":
        # bucket k holds L with k <= log(L) / log(1 + w) + phase < k + 1
        phase = rng.random()
        key_of_len = np.floor(np.log(dist.uniq) / np.log1p(opts.bucket_width) + phase).astype(
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
    if opts.oversize == "skip":
        keys = np.where(run_caps[keys] > 0, keys, nkeys)  # skipped: sorted past the last run
    seq = _stable_argsort_small(keys, nkeys + 1)
    counts = np.bincount(keys, minlength=nkeys + 1)[:nkeys]
    if opts.order == "bucket":  # a random order within each bucket
        ends = np.cumsum(counts).tolist()
        for a, b in itertools.pairwise([0, *ends]):
            if b - a > 1:
                rng.shuffle(seq[a:b])
    seq = seq[: int(counts.sum())]
    nonempty = np.flatnonzero(counts)
    return seq, counts[nonempty].tolist(), run_caps[nonempty].tolist()


def _rotate(
    seq: NDArray[Any], run_sizes: list[int], run_caps: list[int], rng: np.random.Generator
) -> tuple[NDArray[Any], list[int], list[int]]:
    """Start at a random run and wrap, ending in run k with probability ~ its batches.

    See NOTE [ what drop_last drops ]. Oversize runs (capacity 0) stay last.
    """
    normal = sum(1 for c in run_caps if c > 0)
    if normal < 2:
        return seq, run_sizes, run_caps
    sizes = np.asarray(run_sizes[:normal], dtype=np.float64)
    batches = sizes / np.asarray(run_caps[:normal], dtype=np.float64)
    last = int(rng.choice(normal, p=batches / batches.sum()))
    split = int(sizes[: last + 1].sum())
    tail = int(sizes.sum())
    order = [*range(last + 1, normal), *range(last + 1), *range(normal, len(run_sizes))]
    rotated = np.concatenate([seq[split:tail], seq[:split], seq[tail:]])
    return rotated, [run_sizes[k] for k in order], [run_caps[k] for k in order]


def _permutation(rng: np.random.Generator, n: int) -> NDArray[Any]:
    """A random permutation of ``range(n)``; int32 halves the memory traffic when it can."""
    perm = np.arange(n, dtype=np.int32 if n < 2**31 else np.int64)
    rng.shuffle(perm)
    return perm
