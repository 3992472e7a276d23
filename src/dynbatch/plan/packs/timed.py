"""Packing chosen per update by a device's step time: numpy only.

:func:`plan_timed_packs` plans the fixed batch's updates of an epoch for every
rank and, for each update, predicts three ways to run its samples: packed into
rows, split into length-sorted micro-steps (:func:`~dynbatch.plan.splits.split_update`),
or whole, one padded step a rank as the fixed batch runs it. It keeps the
fastest. The samplers and streams plan so when the options hold both
``pack_len`` and a ``time_model`` (:func:`plan_packed`); :func:`choose_packing`
is the same plan read on one rank, with its prices.

NOTE [ choosing packing per update ]
    *The same updates.* Every way runs the fixed batch's update ``u`` (NOTE [ packed updates ] in
    :mod:`dynbatch.plan.packs.epochs`), exactly its samples, on every rank in the same number of
    steps: (i) packed: its rows dealt as micro-batches (NOTE [ dealing an update's rows ] in
    :mod:`dynbatch.plan.packs.deal`); (ii) split: its samples sorted by length and cut into
    micro-steps at the least predicted time within the budget
    (:func:`~dynbatch.plan.splits.split_update`), each micro-step dealt to the ranks as
    :func:`~dynbatch.plan.splits.plan_split_updates` deals it (rank ``r`` takes every ``r``-th
    sample); (iii) whole: one micro-step, ``ceil(n / ranks)`` samples a rank, what the fixed batch
    does with an update. So plans are compared at equal updates: a faster epoch is faster steps,
    never fewer of them. A step lasts as long as its slowest rank; every micro-batch is priced as it
    runs (NOTE [ a micro-batch's layout ] in :mod:`dynbatch.plan.packs.layout`). The whole is kept
    where it fits and the split is not faster; packing where it is predicted faster than that by
    more than the model's error.

    *Never slower than the fixed batch.* The fixed batch, ``B`` samples a rank
    in one padded step an update, is the whole way wherever it fits the
    budget, and a micro-batch runs no slower than padded: so each update, and
    the epoch, is never predicted slower than the fixed batch's, and packing
    runs only where it pays. The plan is a pure function of ``(seed, epoch)``,
    the lengths and the options, so every rank and a resumed run make the
    same choice.

    *The model's error.* A fitted model is wrong by some fraction
    (``time_model.error``): as :func:`~dynbatch.plan.splits.split_update` keeps an
    update whole unless a cut saves more than that fraction, packing is taken
    only where it is predicted faster than the better of split and whole by
    more than that fraction. A :class:`~dynbatch.StepTimeTable` is measured
    times: its error is 0.

    *The budget.* A packed micro-batch holds at most
    :attr:`~dynbatch.PlanOptions.max_rows` rows; a split or whole one's
    padded batch fits ``cost(n, L) <= max_cost`` (and ``max_batch_size``), as
    the planner's batches do. A sample longer than ``pack_len``
    (``oversize="alone"``) fits no row: packed, it is a micro-batch of its own;
    run padded (split or whole) it is one sample among the others within the
    budget, as the fixed batch runs it, so it costs no step of its own there.
    A way that leaves a rank idle (a repeated row) where the update has a
    sample for every micro-batch is not taken.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..._checks import (
    MAX_LENGTH,
    InputError,
    check_int,
    check_lengths,
    check_loss_tokens,
    check_positive_number,
)
from ..costs import CostLike, LinearCost, resolve_cost
from ..options import PlanOptions
from ..plans import Indices, Plan
from ..sharding import ShardedPlan
from .deal import both_deals, pack_and_deal, pick_deals
from .epochs import fixed_updates, plan_packed_epoch
from .layout import PackLayout
from .steps import GRID_TOP, Grid, step_time
from .ways import CHOICES, WHOLE, choose, select, split_ways, way

__all__ = [
    "PackChoice",
    "choose_packing",
    "packed_epoch_seconds",
    "plan_packed",
    "plan_timed_packs",
]


@dataclass(frozen=True)
class PackChoice:
    """An epoch of packed updates, each run the way the step time predicts fastest.

    What :func:`~dynbatch.choose_packing` returns.

    >>> lens = [4, 4, 6, 7, 1, 2, 6, 7]
    >>> c = choose_packing(lens, 8, batch_size=4, time_model="2,1,0", max_rows=2)
    >>> [CHOICES[k] for k in c.choice], c.packed.tolist(), c.epoch_seconds
    (['split', 'packed'], [True, False, False, True], 47.0)
    >>> [b.tolist() for b in c.micro_batches], [s.tolist() for s in c.step_shapes]
    ([[5, 1], [6, 7], [3, 2], [0, 4]], [[1, 2, 2, 1], [6, 7, 7, 5]])
    >>> c = choose_packing(lens, 8, batch_size=4, time_model="1,0,0")
    >>> c.counts, c.epoch_seconds
    ({'packed': 0, 'split': 0, 'whole': 2}, 2.0)

    Args:
        micro_batches: micro-batch ``m``'s samples, step-major (rank ``m % ranks`` of step
            ``m // ranks``; on one rank, in order): row after row where ``packed[m]``
            (:class:`PackLayout` lays it out so; give them to :class:`~dynbatch.PackCollator`),
            else a padded batch, shortest first.
        packed: per micro-batch, True where it runs as packed rows.
        update_offsets: update ``u`` is micro-batches ``update_offsets[u]:update_offsets[u +
            1]``.
        choice: per update, the way it runs, as an index into ``CHOICES`` (``"packed"``,
            ``"split"``, ``"whole"``).
        seconds: ``seconds[u, k]`` is update ``u``'s predicted time run as ``CHOICES[k]``.
        whole_fits: per update, whether its whole step fits the memory budget.
        step_shapes: per micro-batch, the step's shape as priced: rows or samples ``n``, and
            width ``L``.
        sharded: the same epoch as the samplers deal it to the ranks (None: not dealt).
        micro_seconds: per micro-batch, its predicted seconds as laid out (None: not priced).
    """

    micro_batches: Plan
    packed: NDArray[np.bool_]
    update_offsets: Indices
    choice: NDArray[np.int64]
    seconds: NDArray[np.float64]
    #: Per update: its whole step fits the memory budget.
    whole_fits: NDArray[np.bool_]
    #: Per micro-batch, the step's shape as priced: rows or samples ``n``, width ``L``.
    step_shapes: tuple[Indices, Indices]
    #: The epoch as the samplers deal it to ``sharded.num_replicas`` ranks.
    sharded: ShardedPlan | None = None
    #: Per micro-batch, its predicted seconds as laid out.
    micro_seconds: NDArray[np.float64] | None = None

    @property
    def num_replicas(self) -> int:
        """Ranks the epoch is dealt to."""
        return 1 if self.sharded is None else self.sharded.num_replicas

    @property
    def updates(self) -> Plan:
        """Every update's samples, as run (repeats of padding micro-batches included)."""
        return Plan(self.micro_batches.indices, self.micro_batches.offsets[self.update_offsets])

    @property
    def num_updates(self) -> int:
        """Updates in the epoch."""
        return int(self.choice.size)

    @property
    def chosen_seconds(self) -> NDArray[np.float64]:
        """Each update's predicted seconds, run as chosen."""
        return np.asarray(self.seconds[np.arange(self.choice.size), self.choice], np.float64)

    @property
    def epoch_seconds(self) -> float:
        """The epoch's predicted seconds, each update run as chosen."""
        return float(self.chosen_seconds.sum())

    @property
    def whole_seconds(self) -> float:
        """The epoch's predicted seconds with every update one step a rank (inf if one fits
        the budget in neither layout)."""
        return float(self.seconds[:, WHOLE].sum())

    @property
    def counts(self) -> dict[str, int]:
        """Updates run each way."""
        return {name: int((self.choice == k).sum()) for k, name in enumerate(CHOICES)}


def plan_timed_packs(
    lengths: Any,
    options: PlanOptions,
    epoch: int,
    num_replicas: int = 1,
    loss_tokens: Any = None,
    *,
    time_model: Any = None,
    attention: Any = None,
) -> PackChoice:
    """The packed epoch of ``options`` (``pack_len``), each update packed, split or whole, for
    ``num_replicas`` ranks (NOTE [ choosing packing per update ]); ``.sharded`` is the plan.

    ``time_model`` (default ``options.time_model``) may be any step time, a
    :class:`~dynbatch.StepTimeTable` too; packed rows are priced as ``attention`` runs them
    (default ``"dense"``; :mod:`dynbatch.plan.packs.attention`).

    >>> opts = PlanOptions(max_cost=16, cost="linear", pack_len=8, update_size=4,
    ...                    time_model="1,0.1,0", order="shuffle")
    >>> c = plan_timed_packs([5, 3, 4, 2, 6, 1, 7, 8], opts, epoch=0, num_replicas=2)
    >>> c.sharded.num_steps, sorted(c.sharded.plan.indices.tolist())
    (2, [0, 1, 2, 3, 4, 5, 6, 7])
    """
    lens = check_lengths(lengths)
    if not isinstance(options, PlanOptions) or options.pack_len is None:
        raise InputError(f"plan_timed_packs plans options with pack_len, got options={options!r}")
    if options.update_size is None:
        raise InputError("plan_timed_packs needs options with update_size, got update_size=None")
    step = step_time(options.time_model if time_model is None else time_model)
    if step is None:
        raise InputError("plan_timed_packs prices steps: give time_model, got time_model=None")
    ranks = check_int("num_replicas", num_replicas, minimum=1)
    top = min(GRID_TOP, max(-(-math.ceil(options.update_size) // ranks) * 2, 64))
    grid = Grid(step, np.r_[lens, options.pack_len], top)
    layout = PackLayout.from_options(options, grid, attention)
    counts = check_loss_tokens(loss_tokens, lens)
    tokens = options.update_unit == "tokens"
    updates = fixed_updates(
        lens,
        options.pack_len,
        options.update_size,
        seed=options.seed,
        epoch=epoch,
        oversize=options.oversize,
        counted=(counts if counts is not None else lens) if tokens else None,
    )
    # (i) packed: the update's rows dealt; (ii) split and (iii) whole: its samples sorted.
    # On a padding-free kernel, each update dealt as its rows or as its samples by work,
    # whichever the step time prices faster (NOTE [ dealing by work on a padding-free kernel ])
    if ranks > 1 and not layout.attention.dense:
        deals = both_deals(lens, updates, options.pack_len, options.max_rows, ranks)
        by_rows, by_work = (_packed_way(d, layout, lens).update_seconds for d in deals)
        dealt = pick_deals(deals, by_work < by_rows)
    else:
        dealt = pack_and_deal(lens, updates, options.pack_len, options.max_rows, ranks)
    packed = _packed_way(dealt, layout, lens)
    packed_s = packed.update_seconds
    split, whole, fits, split_s = split_ways(lens, updates, options, layout, ranks, packed_s)
    choice, seconds = choose(packed_s, split_s, whole.update_seconds, fits, layout.error)
    micro, padding, offsets, layouts = select([packed, split, whole], choice)
    sharded = ShardedPlan(
        micro, np.arange(len(micro), dtype=np.int64), padding, ranks, offsets[1:] // ranks
    )
    return PackChoice(
        micro,
        layouts.packed,
        offsets,
        choice,
        seconds,
        fits,
        (layouts.n, layouts.width),
        sharded,
        layouts.seconds,
    )


def plan_packed(
    lengths: NDArray[np.int64],
    options: PlanOptions,
    epoch: int,
    num_replicas: int = 1,
    loss_tokens: NDArray[Any] | None = None,
) -> ShardedPlan:
    """The packed epoch the samplers and streams run: at the step time with a ``time_model``
    (:func:`plan_timed_packs`), else every update's rows (:func:`plan_packed_epoch`)."""
    if options.time_model is None:  # NOTE [ packed updates ]
        return plan_packed_epoch(lengths, options, epoch, num_replicas, loss_tokens)
    chosen = plan_timed_packs(lengths, options, epoch, num_replicas, loss_tokens)
    assert chosen.sharded is not None
    return chosen.sharded


def packed_epoch_seconds(
    sharded: ShardedPlan, lengths: Any, options: PlanOptions, time_model: Any = None
) -> float:
    """Predicted seconds of a packed epoch, each micro-batch laid out as it runs
    (NOTE [ a micro-batch's layout ]), each step its slowest rank's."""
    lens = check_lengths(lengths)
    layout = PackLayout.from_options(options, time_model)
    base = sharded.plan
    seconds = layout.choose(lens[base.indices], base.offsets).seconds
    if seconds.size == 0:
        return 0.0
    return float(seconds.reshape(-1, sharded.num_replicas).max(axis=1).sum())


def choose_packing(
    lengths: Any,
    pack_len: int,
    *,
    batch_size: int,
    time_model: Any,
    max_rows: int | None = None,
    max_cost: float | None = None,
    cost: CostLike | None = None,
    loss_tokens: Any = None,
    update_unit: str = "samples",
    oversize: str = "error",
    seed: int = 0,
    epoch: int = 0,
    attention: Any = None,
) -> PackChoice:
    """The packed plan of ``epoch``, each update run packed, split or whole: the fastest.

    The samplers' plan (:func:`plan_timed_packs`) on one rank, with updates of ``batch_size``
    samples (or its loss tokens). Every way runs the fixed batch's update, exactly its samples,
    in the same number of steps, so ways are compared at equal updates; and where the fixed
    batch's own updates are predicted faster for the epoch, they are kept: the epoch is never
    predicted slower than the fixed batch's.

    Args:
        lengths: tokens per sample.
        pack_len: tokens per packed row.
        batch_size: the fixed batch's samples per update.
        time_model: a device's step time: a :class:`~dynbatch.StepTimeModel`, a
            :class:`~dynbatch.StepTimeTable`, ``"c,a,b"``, or any vectorised
            ``(n, L) -> seconds``; its ``error`` (0 if absent) is the margin a
            faster prediction must clear.
        max_rows: rows per packed micro-batch (a padded one holds at most
            ``max_rows * pack_len`` padded tokens).
        max_cost: the memory budget, under ``cost``: a packed micro-batch of
            ``R`` rows costs ``cost(R, pack_len)``; give it or ``max_rows``
            (neither: no budget).
        cost: the cost of a batch that ``max_cost`` bounds, ``"quadratic"`` (the
            default), ``"linear"`` or a callable. Without ``max_cost`` the budget
            is padded tokens (``"linear"``): another cost is refused, as it would
            price nothing.
        loss_tokens, update_unit, oversize, seed, epoch: as
            :func:`~dynbatch.plan_packs`.
        attention: how packed rows run, priced so: ``"dense"`` (default, ``time_model(R, W)``),
            ``"flashmask"`` or ``"varlen"`` (their samples' attention, ``ΣL_i²``, plus tokens:
            :mod:`dynbatch.plan.packs.attention`). The updates are
            the same whatever the layout: only how each runs, and its price, differ.

    Returns:
        A :class:`PackChoice`.
    """  # NOTE [ choosing packing per update ]
    lens = check_lengths(lengths)
    pack_len = check_int("pack_len", pack_len, minimum=1, maximum=MAX_LENGTH)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    epoch = check_int("epoch", epoch)
    step = step_time(time_model)
    if update_unit == "tokens" and step is not None:  # as PlanOptions and the samplers refuse it
        raise InputError(
            "time_model cuts updates of batch_size samples (the fixed batch's) at the step "
            "time: it needs update_unit='samples', got update_unit='tokens'"
        )
    max_rows = check_int("max_rows", max_rows, minimum=1, maximum=MAX_LENGTH, allow_none=True)
    if max_cost is not None:
        check_positive_number("max_cost", max_cost)  # as PlanOptions says it
    if max_cost is not None and max_rows is not None:
        raise InputError(
            f"give max_rows or max_cost, not both; got max_rows={max_rows} and "
            f"max_cost={max_cost!r}"
        )
    fn = resolve_cost("quadratic" if cost is None else cost)
    if max_cost is None:  # rows of max_rows, or no budget: padded tokens within them
        if cost is not None and fn != LinearCost():
            budget = (
                f"the budget is max_rows={max_rows} rows of pack_len={pack_len} tokens, in "
                "padded tokens (cost='linear')"
                if max_rows
                else "there is no budget (max_rows=None too): cost would price nothing"
            )
            raise InputError(
                f"cost={fn!r} prices a micro-batch against max_cost, but max_cost=None: "
                f"{budget}; give max_cost with cost, or leave cost out"
            )
        widest = max(pack_len, int(lens.max()))
        max_cost = float(max_rows * pack_len if max_rows else 2 * widest * lens.size)
        fn = LinearCost()
    one_row = float(np.asarray(fn(np.asarray([1]), np.asarray([pack_len])))[0])
    if one_row > float(max_cost):
        raise InputError(
            f"one row of pack_len={pack_len} tokens costs {one_row:g}, over max_cost="
            f"{float(max_cost):g}: lower pack_len or raise max_cost"
        )
    options = PlanOptions(
        max_cost=max_cost,
        cost=fn,
        order="shuffle",
        seed=seed,
        oversize=oversize,
        update_size=batch_size,
        update_unit=update_unit,
        pack_len=pack_len,
    )
    return plan_timed_packs(
        lens,
        options,
        epoch,
        loss_tokens=loss_tokens,
        time_model=step,
        attention=attention,
    )


def _packed_way(dealt: ShardedPlan, layout: PackLayout, lens: Indices) -> Any:
    """The packed way of ``dealt``'s micro-batches, each priced as ``layout`` runs it."""
    ranks = dealt.num_replicas
    bounds = np.r_[0, np.asarray(dealt.window_ends)] * ranks
    return way(dealt.plan, dealt.is_padding, bounds, layout, lens, ranks)
