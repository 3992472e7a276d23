"""Plans of (source, target) pairs: the planner on ``[N, 2]`` lengths; numpy only.

:func:`~dynbatch.plan_batches` hands lengths of pairs (NOTE [ lengths of pairs ] in
:mod:`dynbatch.plan.lengths`) to :func:`plan_pairs`; everything after the plan (sharding,
mixed updates, resume) takes the plan as it takes one of single lengths.

NOTE [ planning pairs ]
    A batch of pairs is padded twice, to its longest source and to its
    longest target, so a batch is padding-free only if its samples are
    alike on both sides. Sorting or bucketing by one key (the source, or
    source + target) leaves the other side mixed: on real pairs the target
    pads several times what the source does. So the bucket order buckets
    each side as one length is bucketed (edges that grow by ``1 +
    bucket_width``, moved by a random phase each epoch, one phase per side):
    every sample falls in a cell of the grid of source buckets by target
    buckets, and two samples of one cell differ by less than
    ``bucket_width`` on each side. The cells are then walked along a
    Hilbert curve, which visits every cell of the grid once and steps only
    to a neighbouring one, so that a batch which runs out of one cell
    continues in a cell of near lengths on both sides; the samples are
    shuffled within each cell and packed in that order, and the batches
    shuffled, as for one length. A corpus too small to fill its cells
    (each cell holds a few samples) still gets batches that are compact on
    both sides, since the curve keeps neighbours in length together at
    every scale, but less so: ``like_fixed(pairs, 32)`` on pairs of
    independent log-normal sides (σ = 1.0) pads each side 0.79 to 0.86 at
    2,000 pairs, 0.92 at 20,000 and 0.96 at 100,000, where the benchmarks'
    7,766 to 200,000 pairs of correlated sides pad 0.94 to 0.98.

    A batch is charged ``cost(n, Ls, Lt)`` at the longest source of its
    source buckets and the longest target of its target buckets (a
    table of capacities over the occupied buckets of each side, one
    bisection for all of them), so packing is one step per cell, not one
    Python step per sample; a cost that grows with ``n``, ``Ls`` and ``Lt``
    makes that an upper bound of the batch's own cost. A corpus with more
    than :data:`MAX_CHARGE_BUCKETS` occupied buckets on a side is charged
    on coarser groups of adjacent buckets (only ever more than the batch
    costs). The other orders (``"shuffle"``, ``"none"``, and the sorted
    ones, which sort by a pair's tokens, source + target) pack the given
    order greedily, each batch charged exactly. ``drop_last`` drops the
    batch that ended because samples ran out, from a random cell, as for
    one length (NOTE [ what drop_last drops ] in :mod:`dynbatch.plan.planning`).
    With ``batch_size_multiple`` every batch that holds a multiple or more
    holds a multiple, but the last one packed; a batch whose budget fits
    fewer, or one closed where two cells meet, may hold fewer than one.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from .._checks import check_positive_number
from .budget import finish_plan, plan_rng, report_oversize
from .costs import PairCost, PairCostFn, capacity, charge, cost_spec, pair_form, resolve_cost
from .lengths import SIDES, reduce_batches, sample_tokens
from .option_checks import packing_pairs_refused
from .options import PlanOptions
from .pair_steptime import refuse_time_model_for
from .plans import Plan

__all__ = [
    "MAX_CHARGE_BUCKETS",
    "TokensWithin",
    "check_pair_options",
    "hilbert_index",
    "pair_oversize",
    "pair_table",
    "plan_pairs",
    "refuse_for_pairs",
]

#: A side with more occupied buckets is charged on this many groups of adjacent buckets, so
#: that the table of capacities (NOTE [ planning pairs ]) stays small.
MAX_CHARGE_BUCKETS = 1024
#: Batch sizes found for every start at once in the sequential orders; longer ones gallop.
_SMALL_BATCH = 32


def check_pair_options(options: PlanOptions, where: str) -> None:
    """Refuse, by name, the options that do not plan pairs yet (NOTE [ planning pairs ])."""
    refuse_for_pairs(
        where,
        pack_len=options.pack_len,
        time_model=options.time_model,
        group_by_length=options.group_by_length,
    )


def refuse_for_pairs(
    where: str,
    *,
    pack_len: Any,
    time_model: Any,
    group_by_length: bool,
) -> None:
    """:func:`check_pair_options` on the fields themselves, for a recipe not yet made into
    options. Updates in ``"tokens"`` are planned: they count a pair's target tokens
    (NOTE [ lengths of pairs ] in :mod:`dynbatch.plan.lengths`)."""
    if pack_len is not None:
        raise packing_pairs_refused(where, f", got pack_len={pack_len}")
    # NOTE [ a step time of two lengths ] in dynbatch.plan.pair_steptime
    refuse_time_model_for(time_model, True, where, flat_ok=group_by_length)


@dataclass(frozen=True)
class TokensWithin:
    """``max(cost(n, Ls, Lt) / budget, n*(Ls + Lt) / tokens)``: a batch of pairs within a
    budget and within ``tokens`` padded tokens of both sides (at most 1 when within both).

    :func:`~dynbatch.like_fixed`'s micro-batches of pairs in updates of ``"tokens"``: about an
    update's share of tokens each, as for one length, within the fixed batch's worst.

    >>> float(TokensWithin(PairCost(), 1000.0, 40.0)(2, 3, 7))  # 2*(9+49+21)/1000, 2*10/40
    0.5

    Args:
        cost: a cost of pairs, ``cost(n, Ls, Lt)``, or a named one (in its form of pairs).
        budget: what ``cost`` may reach.
        tokens: the padded tokens of both sides a batch may hold.
    """

    cost: Any
    budget: float
    tokens: float
    #: it prices two lengths, (source, target): :func:`~dynbatch.plan.costs.takes_pairs`
    takes_pairs: ClassVar[bool] = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "cost", pair_form(resolve_cost(self.cost)))
        for name in ("budget", "tokens"):
            value = check_positive_number(name, getattr(self, name))
            object.__setattr__(self, name, value)

    def __call__(self, n: Any, source: Any, target: Any) -> Any:
        within = np.asarray(self.cost(n, source, target), dtype=np.float64) / self.budget
        padded = np.multiply(n, np.add(source, target)) / self.tokens
        return np.maximum(within, padded)

    def spec(self) -> str:
        """The cost's spec and both budgets (the resume fingerprint)."""
        return f"{cost_spec(self.cost) or '<callable>'}<={self.budget!r};tokens<={self.tokens!r}"


def _padded(lens: NDArray[np.int64], multiple: int) -> NDArray[np.int64]:
    return lens if multiple == 1 else -(-lens // multiple) * multiple


def _alone(fn: PairCostFn, plens: NDArray[Any], max_cost: float) -> NDArray[np.bool_]:
    """Which samples fit ``max_cost`` alone: ``cost(1, Ls, Lt) <= max_cost``."""
    return np.asarray(fn(1, plens[:, 0], plens[:, 1]), dtype=np.float64) <= max_cost


def pair_oversize(lens: NDArray[np.int64], options: PlanOptions) -> NDArray[np.int64]:
    """Indices of the pairs over ``options.max_cost`` even alone."""
    plens = _padded(lens, options.pad_to_multiple_of)
    return np.flatnonzero(~_alone(pair_form(options.cost), plens, options.max_cost))


def plan_pairs(
    lens: NDArray[np.int64],
    opts: PlanOptions,
    epoch: int,
    draw: int = 0,
    *,
    shuffle_batches: bool = True,
) -> Plan:
    """The plan of ``epoch`` for checked ``[N, 2]`` lengths, as
    :func:`~dynbatch.plan.planning.plan_draw` makes one for single lengths
    (NOTE [ planning pairs ])."""
    check_pair_options(opts, "plan_batches")
    fn = pair_form(opts.cost)
    plens = _padded(lens, opts.pad_to_multiple_of)
    fits = _alone(fn, plens, opts.max_cost)
    if not fits.all():
        report_oversize(fn, lens, plens, ~fits, opts.max_cost, opts.oversize, stacklevel=5)
    keep = fits if opts.oversize == "skip" else np.ones(fits.size, dtype=bool)
    upper = len(lens) + 1 if opts.max_batch_size is None else opts.max_batch_size
    rng = plan_rng(opts, epoch, draw)
    if opts.order == "bucket":
        seq, bounds, partial = _pack_bucketed(plens, fits, keep, fn, opts, upper, rng)
    else:
        seq = _sequence(plens, opts.order, rng)
        seq = seq[keep[seq]]
        bounds, partial = _pack_sequence(plens[seq], fn, opts.max_cost, upper, opts)
    named = isinstance(fn, PairCost)
    return finish_plan(
        fn, plens, seq, bounds, partial, opts, rng, shuffle_batches=shuffle_batches, named=named
    )


def _sequence(plens: NDArray[Any], order: str, rng: np.random.Generator) -> NDArray[Any]:
    """The samples in the order packed: shuffled, as given, or by tokens (then source)."""
    if order == "shuffle":
        return rng.permutation(plens.shape[0])
    if order == "none":
        return np.arange(plens.shape[0])
    return np.asarray(np.lexsort((plens[:, 0], sample_tokens(plens))))  # the sorted orders


# -- the bucket order: a grid of cells, walked along a Hilbert curve ------------------------------
def _buckets(
    values: NDArray[Any], width: float, phase: float
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Each value's geometric bucket, numbered from 0 (bucket k: ``k <= log(L) / log(1 + w)
    + phase < k + 1``), found once per distinct value; and each bucket's longest value."""
    top = int(values.max())
    if top <= 4 * values.size + (1 << 20):
        uniq = np.flatnonzero(np.bincount(values, minlength=top + 1))
        key = np.floor(np.log(uniq) / np.log1p(width) + phase).astype(np.int64)
        key -= key[0]
        table = np.zeros(top + 1, dtype=np.int64)
        table[uniq] = key
        of_sample = np.asarray(table[values])
    else:
        uniq, inverse = np.unique(values, return_inverse=True)
        key = np.floor(np.log(uniq) / np.log1p(width) + phase).astype(np.int64)
        key -= key[0]
        of_sample = np.asarray(key[inverse.reshape(-1)])
    longest = np.zeros(int(key[-1]) + 1, dtype=np.int64)
    np.maximum.at(longest, key, uniq)
    return of_sample, longest


def hilbert_index(x: NDArray[Any], y: NDArray[Any]) -> NDArray[np.int64]:
    """Position of each cell ``(x, y)`` (whole numbers >= 0) along a Hilbert curve.

    Consecutive positions are neighbouring cells, so cells near on the curve are near in
    both coordinates.

    >>> hilbert_index(np.array([0, 0, 1, 1]), np.array([0, 1, 1, 0])).tolist()
    [0, 1, 2, 3]
    """
    x, y = np.asarray(x, dtype=np.int64), np.asarray(y, dtype=np.int64)
    side = 1 << max(1, int(max(x.max(initial=0), y.max(initial=0))).bit_length())
    d = np.zeros(x.shape, dtype=np.int64)
    s = side // 2
    while s > 0:
        rx, ry = (x & s) > 0, (y & s) > 0
        d += s * s * ((3 * rx.astype(np.int64)) ^ ry.astype(np.int64))
        flip = ~ry & rx  # rotate the quadrant so that the curve enters it at its start
        x, y = np.where(flip, side - 1 - x, x), np.where(flip, side - 1 - y, y)
        x, y = np.where(~ry, y, x), np.where(~ry, x, y)
        s //= 2
    return d


def _ranks(codes: NDArray[Any]) -> tuple[NDArray[Any], NDArray[np.int64]]:
    """The distinct values of a whole-number array, ascending, and each value's rank."""
    top = int(codes.max())
    if top <= 4 * codes.size + (1 << 20):  # count, no sort
        present = np.bincount(codes, minlength=top + 1) > 0
        return np.flatnonzero(present), np.asarray((np.cumsum(present) - 1)[codes])
    uniq, inverse = np.unique(codes, return_inverse=True)
    return uniq, inverse.reshape(-1)


def _pack_bucketed(
    plens: NDArray[Any],
    fits: NDArray[np.bool_],
    keep: NDArray[np.bool_],
    fn: PairCostFn,
    opts: PlanOptions,
    upper: int,
    rng: np.random.Generator,
) -> tuple[NDArray[Any], list[int], bool]:
    """The bucket order's samples and batch ends (NOTE [ planning pairs ])."""
    phase = rng.random(2)
    bs, top_s = _buckets(plens[:, 0], opts.bucket_width, float(phase[0]))
    bt, top_t = _buckets(plens[:, 1], opts.bucket_width, float(phase[1]))
    columns = int(bt.max()) + 1
    codes = bs * columns + bt
    alone, skipped = int(codes.max()) + 1, int(codes.max()) + 2  # runs after the cells
    codes[~fits] = alone
    codes[~keep] = skipped
    uniq, rank = _ranks(codes)
    ncells = int(np.count_nonzero(uniq < alone))
    cell_s, cell_t = uniq[:ncells] // columns, uniq[:ncells] % columns
    walk = np.argsort(hilbert_index(cell_s, cell_t), kind="stable")  # cells, along the curve
    position = np.empty(uniq.size, dtype=np.int64)
    position[walk] = np.arange(ncells)
    position[ncells:] = np.arange(ncells, uniq.size) + (uniq[ncells:] - alone)  # alone, skipped
    key = position[rank]
    nkeys = ncells + 2
    seq = np.argsort(key.astype(np.uint16) if nkeys <= 1 << 16 else key, kind="stable")
    counts = np.bincount(key, minlength=nkeys)
    ends = np.cumsum(counts)
    for a, b in itertools.pairwise([0, *ends[:ncells].tolist()]):
        if b - a > 1:
            rng.shuffle(seq[a:b])
    in_cells = int(ends[ncells - 1]) if ncells else 0
    # the table of capacities over the charge groups of each side's buckets
    group_s, longest_s = _charge_groups(cell_s[walk], top_s)
    group_t, longest_t = _charge_groups(cell_t[walk], top_t)
    grid = np.stack(np.meshgrid(longest_s, longest_t, indexing="ij"), axis=-1).reshape(-1, 2)
    table = capacity(fn, grid, opts.max_cost, upper, opts.batch_size_multiple)
    table = np.maximum(table, 1).reshape(longest_s.size, longest_t.size)  # each fits alone
    sizes, run_s, run_t = counts[:ncells].tolist(), group_s.tolist(), group_t.tolist()
    if opts.drop_last:
        last = _rotate(sizes, table[group_s, group_t], rng)
        if last is not None:  # start after it, wrap around, end with it
            split = int(ends[last])
            seq = np.concatenate([seq[split:in_cells], seq[:split], seq[in_cells:]])
            sizes, run_s, run_t = (v[last + 1 :] + v[: last + 1] for v in (sizes, run_s, run_t))
    bounds, partial = _pack_cells(sizes, run_s, run_t, table, opts.batch_size_multiple)
    by_alone = int(counts[ncells])
    if by_alone:  # over budget alone ("alone"): each a batch of its own, after the cells
        partial = False
        bounds.extend(range(in_cells + 1, in_cells + by_alone + 1))
    return seq[: in_cells + by_alone], bounds, partial


def _charge_groups(
    buckets: NDArray[Any], longest: NDArray[Any]
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Each cell's charge group on one side, and each group's longest (padded) length.

    ``buckets`` are the cells' buckets on that side, ``longest`` each bucket's longest length.
    A group is an occupied bucket, or several adjacent ones where the side has more than
    :data:`MAX_CHARGE_BUCKETS` (NOTE [ planning pairs ]).
    """
    occupied, group = np.unique(buckets, return_inverse=True)
    group = group.reshape(-1)
    within = np.arange(occupied.size)
    if occupied.size > MAX_CHARGE_BUCKETS:
        within = within * MAX_CHARGE_BUCKETS // occupied.size
        group = within[group]
    most = np.zeros(int(within.max(initial=0)) + 1, dtype=np.int64)
    np.maximum.at(most, within, longest[occupied])
    return group, np.maximum(most, 1)


def _rotate(sizes: list[int], caps: NDArray[Any], rng: np.random.Generator) -> int | None:
    """The cell to end with, drawn with probability ~ its batches; None with fewer than two
    cells (NOTE [ what drop_last drops ] in :mod:`dynbatch.plan.planning`)."""
    if len(sizes) < 2:
        return None
    batches = np.asarray(sizes, dtype=np.float64) / caps
    return int(rng.choice(len(sizes), p=batches / batches.sum()))


def _pack_cells(
    sizes: list[int], run_s: list[int], run_t: list[int], table: NDArray[Any], multiple: int
) -> tuple[list[int], bool]:
    """Batch ends for samples laid out in cells, each batch charged the capacity at its cells'
    joint corner: :func:`~dynbatch.plan.planning._pack_runs` for two sides.

    Returns the ends and whether the last batch ended only because the samples ran out.
    """
    caps = table.tolist()
    bounds: list[int] = []
    pos = start = 0  # start of the open batch; start of the current cell
    open_s = open_t = joint_s = joint_t = joint = 0  # the open batch's charge groups
    for size, s, t in zip(sizes, run_s, run_t, strict=True):
        end = start + size
        cap = caps[s][t]
        carried = start - pos
        if carried:
            joint_s, joint_t = max(open_s, s), max(open_t, t)
            joint = caps[joint_s][joint_t]
            if carried >= joint:  # no sample of this cell fits the open batch: close it
                kept = carried - carried % multiple if carried >= multiple else carried
                pos += kept
                bounds.append(pos)
                carried -= kept
                if carried >= joint:
                    pos += carried
                    bounds.append(pos)
                    carried = 0
        if carried:
            if pos + joint > end:  # still open after this cell
                open_s, open_t = joint_s, joint_t
                start = end
                continue
            pos += joint
            bounds.append(pos)
        full = (end - pos) // cap
        if full:
            bounds.extend(range(pos + cap, pos + cap * full + 1, cap))
            pos += cap * full
        open_s, open_t = s, t
        start = end
    partial = pos < start
    if partial:
        bounds.append(start)
    return bounds, partial


# -- the other orders: greedy, each batch charged exactly ---------------------------------------
def _pack_sequence(
    plens: NDArray[Any], fn: PairCostFn, max_cost: float, upper: int, opts: PlanOptions
) -> tuple[list[int], bool]:
    """Greedy batch ends for pairs in the given order, each the longest run from its start
    whose ``cost(n, Ls, Lt)`` fits (a sample over budget alone: a batch of its own); and
    whether the last batch ended only because the samples ran out."""
    total = plens.shape[0]
    if total == 0:
        return [], False
    multiple = opts.batch_size_multiple
    step = min(upper, total)
    starts = np.arange(0, total, step)
    if (step == total or step % multiple == 0) and _fit(fn, plens, starts, max_cost).all():
        bounds = [*starts[1:].tolist(), total]  # every run of ``upper`` fits: the greedy's
    else:
        bounds = _greedy_bounds(plens, fn, max_cost, upper, multiple)
    last = bounds[-2] if len(bounds) > 1 else 0
    size = total - last
    room = size < upper and bool(
        np.asarray(fn(size + 1, *plens[last:].max(axis=0)), dtype=np.float64) <= max_cost
    )
    return bounds, room


def _greedy_bounds(
    plens: NDArray[Any], fn: PairCostFn, max_cost: float, upper: int, multiple: int
) -> list[int]:
    """The greedy's batch ends, a batch rounded down to a multiple where it holds one."""
    total = plens.shape[0]
    sizes, more = _greedy_sizes(plens, fn, max_cost, min(upper, _SMALL_BATCH))
    size_of = sizes.tolist()
    longer = set(np.flatnonzero(more).tolist()) if upper > _SMALL_BATCH else set()
    bounds: list[int] = []
    start = 0
    while start < total:
        size = _gallop(plens, fn, max_cost, upper, start) if start in longer else size_of[start]
        if multiple > 1 and size >= multiple and start + size < total:
            size -= size % multiple
        bounds.append(start + size)
        start += size
    return bounds


def _fit(
    fn: PairCostFn, plens: NDArray[Any], starts: NDArray[Any], max_cost: float
) -> NDArray[Any]:
    """Whether each batch, from each of ``starts`` to the next, fits ``max_cost``."""
    sizes = np.diff(np.append(starts, plens.shape[0]))
    longest = reduce_batches(np.maximum, plens, None, starts)
    return np.asarray(fn(sizes, longest[:, 0], longest[:, 1]), dtype=np.float64) <= max_cost


def _greedy_sizes(
    plens: NDArray[Any], fn: PairCostFn, max_cost: float, limit: int
) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
    """The largest batch that fits from every start, up to ``limit``, all at once; the starts
    that hold ``limit`` and may hold more are flagged."""
    total = plens.shape[0]
    size = np.ones(total, dtype=np.int64)  # a batch always holds its first sample
    idx = np.arange(total)
    run_s, run_t = plens[:, 0].copy(), plens[:, 1].copy()
    for s in range(2, limit + 1):
        inside = idx + s - 1 < total
        idx, run_s, run_t = idx[inside], run_s[inside], run_t[inside]
        run_s = np.maximum(run_s, plens[idx + s - 1, 0])
        run_t = np.maximum(run_t, plens[idx + s - 1, 1])
        keep = np.asarray(fn(s, run_s, run_t), dtype=np.float64) <= max_cost
        idx, run_s, run_t = idx[keep], run_s[keep], run_t[keep]
        size[idx] = s
        if not idx.size:
            break
    more = np.zeros(total, dtype=bool)
    more[idx[idx + limit < total]] = True
    return size, more


def _gallop(plens: NDArray[Any], fn: PairCostFn, max_cost: float, upper: int, start: int) -> int:
    """The largest batch that fits from ``start``, in windows that double."""
    width = 2 * _SMALL_BATCH
    while True:
        window = plens[start : start + min(width, upper)]
        run = np.maximum.accumulate(window, axis=0)
        sizes = np.arange(1, window.shape[0] + 1)
        over = np.asarray(fn(sizes, run[:, 0], run[:, 1]), dtype=np.float64) > max_cost
        if over.any():
            return max(1, int(np.argmax(over)))
        if start + width >= plens.shape[0] or width >= upper:
            return int(window.shape[0])
        width *= 2


# -- statistics of a plan of pairs ----------------------------------------------------------
def pair_table(
    sizes: NDArray[Any], longest: NDArray[Any], real: NDArray[Any], fn: Any, max_cost: Any
) -> dict[str, NDArray[Any]]:
    """:func:`~dynbatch.plan.stats.batch_table`'s columns for batches of (source, target) pairs:
    both sides', then each side's (``source_padding_efficiency``, ...).

    ``sizes`` are the batches' samples, ``longest`` and ``real`` each batch's row of padded
    longest lengths and of real tokens, per side.
    """
    padded = sizes[:, None] * longest
    table = {
        "batch_size": sizes,
        "max_len": longest.sum(axis=1),
        "real_tokens": real.sum(axis=1),
        "padded_tokens": padded.sum(axis=1),
        "padding_efficiency": real.sum(axis=1) / padded.sum(axis=1),
        "cost": np.asarray(charge(fn, sizes, longest), dtype=np.float64),
    }
    for k, side in enumerate(SIDES):
        table[f"{side}_max_len"] = longest[:, k]
        table[f"{side}_real_tokens"] = real[:, k]
        table[f"{side}_padded_tokens"] = padded[:, k]
        table[f"{side}_padding_efficiency"] = real[:, k] / padded[:, k]
    if max_cost is not None:
        table["cost_ratio"] = table["cost"] / check_positive_number("max_cost", max_cost)
    return table
