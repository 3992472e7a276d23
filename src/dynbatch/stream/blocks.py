"""The plan of one block of a stream: an epoch's plan, sparse batches cut, steps mixed.

Numpy only; :class:`~dynbatch.stream.planner.StreamPlanner` plans each block with
:func:`plan_block` (NOTE [ a stream in blocks ] in :mod:`dynbatch.stream.planner`).

NOTE [ mixed steps in a stream ]
    An update whose micro-batches hold one length is a biased draw (NOTE [ mixed updates ]
    in :mod:`dynbatch.plan.windows`). With ``update_size`` each
    block groups its steps into updates across its lengths, as an epoch
    does. Without, the block's steps are interleaved by length: sorted by
    their longest sample and cut into :data:`STRATA` strata, they are taken
    one from each stratum in turn (the strata in a random order each round,
    a random step within each). So the block's steps come in rounds of
    :data:`STRATA` (steps ``4k`` to ``4k + 3`` of the block), each spanning the
    block's lengths, and a ``target=`` update of a few micro-batches mixes
    short and long samples. A window of 4 steps across two rounds is not
    promised to (the strata's order is drawn anew each round), nor is the
    block's last round, where the strata may hold one step fewer.

NOTE [ a stream at the step time ]
    With ``time_model`` (and ``group_by_length``), a block is planned as
    :func:`~dynbatch.plan.splits.plan_split_updates` plans an epoch: the block's
    samples are drawn into the fixed batch's updates of ``update_size``
    samples (or grouped by length, as Hugging Face's sampler groups them),
    and each update is cut into micro-batches at the least predicted time
    (NOTE [ splitting updates at the step time ] in :mod:`dynbatch.plan.splits`).
    So each update is predicted no slower than the fixed batch's step of the
    same samples, as in memory. The draws are the block's, not the epoch's:
    a block of ``buffer_size`` records ends with a short update unless
    ``buffer_size`` is a multiple of ``update_size``. With ``pack_len`` as
    well, a block is packed as an epoch is and each of its updates runs
    packed, split or whole (NOTE [ choosing packing per update ] in
    :mod:`dynbatch.plan.packs`), the block's own fixed-batch updates where
    those are faster.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from ..errors import InputError, InputTypeError
from ..plan.lengths import reduce_batches, sample_tokens
from ..plan.options import PlanOptions
from ..plan.packs import plan_packed
from ..plan.planning import Plan, padded_lengths, plan_draw
from ..plan.sharding import TOLERANCE, ShardedPlan, shard_checked
from ..plan.splits import plan_split_updates
from ..plan.windows import mix_updates

__all__ = [
    "BUFFER_SIZE",
    "STRATA",
    "block_key",
    "check_stream_options",
    "interleave_steps",
    "plan_block",
    "tighten",
    "tighten_pairs",
]

#: The default block: 10,000 records, planned at once (NOTE [ a stream in blocks ]).
BUFFER_SIZE = 10_000
#: Length strata a block's steps are interleaved from (NOTE [ mixed steps in a stream ]).
STRATA = 4
#: The options a stream cannot honour: they need the epoch's batch count before it is read.
UNSUPPORTED = {"drop_last": False, "equal_epochs": False}
#: Orders of a block; the sorted ones would sort each block, not the stream.
STREAM_ORDERS = ("bucket", "shuffle", "none")
#: The random stream of :func:`interleave_steps`, apart from the planner's.
_MIX_STREAM = 2


def block_key(epoch: int, slot: int, block: int) -> int:
    """The ``epoch`` argument a block is planned with: its own random streams."""
    state = np.random.SeedSequence([epoch, slot, block]).generate_state(1, np.uint64)
    return int(state[0] >> np.uint64(1))


def interleave_steps(
    sharded: ShardedPlan, lengths: NDArray[np.int64], rng: np.random.Generator
) -> ShardedPlan:
    """The steps taken one from each length stratum in turn (NOTE [ mixed steps in a stream ]).

    >>> from dynbatch.plan.epochs import plan_epoch
    >>> lens = np.repeat([4, 8, 16, 32], 8)
    >>> sp = plan_epoch(lens, PlanOptions(max_cost=64, cost="linear", max_batch_size=2), 0)
    >>> mixed = interleave_steps(sp, lens, np.random.default_rng(0))
    >>> longest = mixed.longest(lens)
    >>> all(sorted(longest[k:k + 4].tolist()) == [4, 8, 16, 32] for k in range(0, 16, 4))
    True
    """
    steps = sharded.num_steps
    strata = min(STRATA, steps)
    if strata < 2:
        return sharded
    tokens = sample_tokens(lengths)  # a pair's: its source's and target's
    longest = sharded.longest(tokens).reshape(-1, sharded.num_replicas).max(axis=1)
    by_length = np.lexsort((rng.random(steps), longest))
    groups = [rng.permutation(g) for g in np.array_split(by_length, strata)]
    order: list[int] = []
    for r in range(len(groups[0])):
        for g in rng.permutation(strata).tolist():
            if r < len(groups[g]):
                order.append(int(groups[g][r]))
    replicas = sharded.num_replicas
    rows = sharded.order.reshape(-1, replicas)[order].reshape(-1)
    padding = sharded.is_padding.reshape(-1, replicas)[order].reshape(-1)
    return ShardedPlan(sharded.base, rows, padding, replicas)


def tighten(plan: Plan, plens: NDArray[np.int64], least: float, multiple: int = 1) -> Plan:
    """Cut each batch padded below ``least`` where its padding drops most, until none is.

    NOTE [ a sparse block ]
        A block too sparse to fill a batch from one bucket (short samples under
        a quadratic budget, whose batches hold thousands; a long tail) packs a
        batch across many buckets, padding its short members far up. Such a
        batch is cut in two, its members sorted, at the cut that saves the most
        padded tokens (parts stay multiples of ``multiple`` where the batch
        holds two), and again while a part pads below ``least`` (the stream
        uses ``1 - 2 * bucket_width``). Both parts fit the budget (fewer
        samples, none longer); a block of 10,000 then pads within 4.5% of an
        epoch planned whole, for more batches: 2–17% on the corpora measured
        first, 0.98–1.45x on held-out ones, and 7.4x for short samples under
        a quadratic budget, whose batches hold thousands (docs/benchmarks.md: measured).

    >>> plens = np.array([2, 2, 2, 2, 16, 16])
    >>> [b.tolist() for b in tighten(Plan.from_batches([[0, 1, 2, 3, 4, 5]]), plens, 0.9)]
    [[0, 1, 2, 3], [4, 5]]
    """
    if not len(plan):
        return plan
    starts = plan.offsets[:-1]
    real = np.add.reduceat(plens[plan.indices], starts)
    padded = plan.sizes * np.maximum.reduceat(plens[plan.indices], starts)
    low = np.flatnonzero(real < least * padded)

    def split(part: NDArray[np.int64], cuts: NDArray[np.int64]) -> tuple[NDArray[np.int64], int]:
        lens = plens[part]
        if (lens[1:] < lens[:-1]).any():  # a batch as planned, sorted once: its parts stay so
            order = np.argsort(lens, kind="stable")
            part, lens = part[order], lens[order]
        n = part.size
        if not cuts.size or int(lens.sum()) >= least * n * int(lens[-1]):
            return part, 0
        cost = cuts * lens[cuts - 1] + (n - cuts) * lens[-1]
        return part, int(cuts[int(np.argmin(cost))])

    return _cut_batches(plan, low, multiple, split)


def tighten_pairs(plan: Plan, plens: NDArray[np.int64], least: float, multiple: int = 1) -> Plan:
    """:func:`tighten` for ``[N, 2]`` lengths: a batch padded below ``least`` on either side is
    cut in two, its members sorted by the source or by the target (then the other side),
    whichever cut leaves the fewest padded tokens of both sides, and again while a part pads
    below ``least`` on a side.

    Both parts fit the budget as the batch did: fewer samples, neither side longer.

    >>> plens = np.array([[2, 9], [2, 9], [2, 9], [2, 9], [16, 2], [16, 2]])
    >>> [b.tolist() for b in tighten_pairs(Plan.from_batches([[0, 1, 2, 3, 4, 5]]), plens, 0.9)]
    [[0, 1, 2, 3], [4, 5]]
    """
    if not len(plan):
        return plan
    starts = plan.offsets[:-1]
    real = reduce_batches(np.add, plens, plan.indices, starts)
    padded = plan.sizes[:, None] * reduce_batches(np.maximum, plens, plan.indices, starts)
    low = np.flatnonzero((real < least * padded).any(axis=1))

    def split(part: NDArray[np.int64], cuts: NDArray[np.int64]) -> tuple[NDArray[np.int64], int]:
        lens = plens[part]
        n = part.size
        worst = lens.sum(axis=0) / (n * lens.max(axis=0))
        if not cuts.size or worst.min() >= least:
            return part, 0
        candidates = []
        for side in (0, 1):  # members sorted by either side: the cut of fewest tokens
            order = np.lexsort((lens[:, 1 - side], lens[:, side]))
            by = lens[order]
            head = np.maximum.accumulate(by, axis=0).sum(axis=1)  # longest of the first k+1
            tail = np.maximum.accumulate(by[::-1], axis=0)[::-1].sum(axis=1)
            cost = cuts * head[cuts - 1] + (n - cuts) * tail[cuts]
            k = int(np.argmin(cost))
            candidates.append((int(cost[k]), side, int(cuts[k]), part[order]))
        _, _, cut, ordered = min(candidates, key=lambda c: c[:2])
        return ordered, cut

    return _cut_batches(plan, low, multiple, split)


def _cut_batches(
    plan: Plan,
    low: NDArray[np.intp],
    multiple: int,
    split: Callable[[NDArray[np.int64], NDArray[np.int64]], tuple[NDArray[np.int64], int]],
) -> Plan:
    """``plan`` with each batch numbered in ``low`` cut in two, and its parts again, while
    ``split(part, cuts)`` gives a cut: the loop of :func:`tighten` and :func:`tighten_pairs`,
    which differ only in ``split``.

    ``cuts`` are where ``part`` may be cut (multiples of ``multiple`` where it holds two, none
    where it cannot); ``split`` returns the part, reordered as the cut needs, and the cut, or 0
    to keep the part whole.
    """
    if not low.size:
        return plan
    out: list[NDArray[np.int64]] = []
    cut_these = set(low.tolist())
    for k, batch in enumerate(plan):
        if k not in cut_these:
            out.append(batch)
            continue
        todo = [batch]
        while todo:
            n = todo[-1].size
            cuts = np.arange(1, n)
            if multiple > 1:
                cuts = cuts[cuts % multiple == 0] if n >= 2 * multiple else cuts[:0]
            part, cut = split(todo.pop(), cuts)
            if cut:
                todo += [part[cut:], part[:cut]]
            else:
                out.append(part)
    return Plan.from_batches(out)


def check_stream_options(options: PlanOptions) -> PlanOptions:
    """Refuse the options a stream cannot honour (NOTE [ a stream in blocks ])."""
    if not isinstance(options, PlanOptions):
        raise InputTypeError(f"options must be a dynbatch.PlanOptions, got options={options!r}")
    for name, ok in UNSUPPORTED.items():
        if getattr(options, name) != ok:
            raise InputError(
                f"{name}={getattr(options, name)!r} needs the epoch's batch count before the "
                f"epoch is read, which a stream cannot give; pass {name}={ok!r}"
            )
    if options.order not in STREAM_ORDERS:
        raise InputError(
            f"order={options.order!r} would sort each block, not the stream; a stream takes "
            f"order {', '.join(repr(o) for o in STREAM_ORDERS)}"
        )
    return options


def plan_block(
    lengths: NDArray[np.int64], options: PlanOptions, num_replicas: int, key: int
) -> ShardedPlan:
    """A block planned as :func:`~dynbatch.plan_epoch` plans an epoch (``key`` in place of
    the epoch), its widely padded batches cut (NOTE [ a sparse block ]) and, without
    ``update_size``, its steps mixed by length (NOTE [ mixed steps in a stream ]).

    >>> sp = plan_block(np.array([3, 1, 4, 1, 5, 9, 2, 6]), PlanOptions(max_cost=12,
    ...                 cost="linear"), num_replicas=2, key=0)
    >>> sp.num_steps, sorted(sp.plan.indices.tolist())
    (3, [0, 1, 2, 3, 4, 5, 6, 7])
    """
    if options.pack_len is not None:  # a block packed as an epoch (NOTE [ packed updates ])
        return plan_packed(lengths, options, key, num_replicas)
    if options.time_model is not None:  # NOTE [ a stream at the step time ]
        return plan_split_updates(lengths, options, key, num_replicas)
    plan = plan_draw(lengths, options, key, shuffle_batches=False)  # sharding orders them
    plens = padded_lengths(lengths, options.pad_to_multiple_of)
    if lengths.ndim == 2:  # NOTE [ a stream of pairs ] in dynbatch.stream.planner
        least = 1.0 - 4.0 * options.bucket_width
        plan = tighten_pairs(plan, plens, least, options.batch_size_multiple)
    else:
        least = 1.0 - 2.0 * options.bucket_width
        plan = tighten(plan, plens, least, options.batch_size_multiple)
    sharded = shard_checked(plan, lengths, num_replicas, key, None, TOLERANCE, options, True)
    if options.update_size is not None:
        return mix_updates(sharded, lengths, options, key)
    if options.random_order:
        rng = np.random.default_rng([options.seed, key, _MIX_STREAM])
        sharded = interleave_steps(sharded, lengths, rng)
    return sharded
