"""Padding and cost statistics of a plan: the one definition used by the CLI, the hook
and the benchmarks.

Padding efficiency is real tokens / padded tokens, where a batch of ``n``
samples pads every sample to ``L``, its longest length rounded up to
``pad_to_multiple_of``: ``sum(lengths) / sum(n * L)``. A batch of (source, target)
pairs pads each side to its own longest, and its statistics are both sides' and each
side's (:class:`PairPlanStats`).

>>> s = plan_stats([2, 4, 4, 8], [[0, 1], [2, 3]], cost="linear", max_cost=16)
>>> s.padding_efficiency, s.batch_size_max, s.cost_max, s.utilization
(0.75, 2, 16.0, 0.75)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._checks import (
    InputTypeError,
    check_batches,
    check_bool,
    check_int,
    check_lengths,
    check_positive_number,
)
from .bounds import lower_bound_batches
from .costs import CostLike, charge, one_length, resolve_cost, rows_cost
from .epochs import plan_epoch
from .lengths import SIDES, check_plan_lengths, reduce_batches
from .options import ORDERS, PlanOptions
from .packs import PackLayout, plan_packed, plan_timed_packs
from .pair_steptime import refuse_time_model_for, step_seconds
from .pairs import pair_table
from .planning import find_oversize, padded_lengths
from .plans import Plan
from .recipes import like_fixed
from .splits import shuffled
from .windows import optimizer_steps

__all__ = [
    "PairPlanStats",
    "PlanStats",
    "StepStats",
    "baseline_batches",
    "batch_table",
    "compare_orders",
    "fixed_batches",
    "like_fixed_options",
    "lower_bound_batches",
    "packed_stats",
    "packed_table",
    "plan_stats",
    "predicted_seconds",
    "split_options",
]


def batch_table(
    lengths: Any,
    batches: Sequence[Any],
    *,
    cost: CostLike = "quadratic",
    max_cost: float | None = None,
    pad_to_multiple_of: int = 1,
    layout: PackLayout | None = None,
) -> dict[str, NDArray[Any]]:
    """Per-batch columns: ``batch_size``, ``max_len``, ``real_tokens``, ``padded_tokens``,
    ``padding_efficiency``, ``cost`` and, with ``max_cost``, ``cost_ratio``.

    With a ``layout`` (:class:`~dynbatch.plan.packs.PackLayout`) each batch is a
    packed micro-batch laid out as the plan priced it, as :class:`~dynbatch.PackCollator`
    builds it: ``max_len`` is its row width, ``padded_tokens`` rows x width and ``cost``
    ``cost(rows, width)``; ``batch_size`` stays its samples.

    For (source, target) pairs every column is of both sides (``max_len`` is the padded
    source plus the padded target, so ``padded_tokens`` is still ``batch_size * max_len``),
    and each side has its own: ``source_max_len``, ``source_real_tokens``,
    ``source_padded_tokens``, ``source_padding_efficiency``, and the same for ``target``.

    >>> layout = PackLayout(8, max_cost=64, cost="linear")  # no time model: packed rows
    >>> t = batch_table([3, 4, 2, 5], [[0, 1, 2], [3]], cost="linear", layout=layout)
    >>> t["padded_tokens"].tolist(), t["cost"].tolist()  # rows 3 and 4 + 2, 6 wide; 5 alone
    ([12, 5], [12.0, 5.0])
    """
    lens = check_plan_lengths(lengths)
    fn = resolve_cost(cost)
    if lens.ndim == 1:  # a cost of pairs is refused by name, as plan_batches refuses it
        fn = one_length(fn)
    pad = check_int("pad_to_multiple_of", pad_to_multiple_of, minimum=1)
    if isinstance(batches, Plan) and len(batches) and batches.sizes.min() > 0:
        plan = batches
        check_batches([plan.indices], len(lens), "batches")
    else:
        plan = Plan.from_batches(check_batches(batches, len(lens), "batches"))
    sizes, flat = plan.sizes, plan.indices
    starts = plan.offsets[:-1]
    if lens.ndim == 2:  # pairs: each side padded to its own longest
        longest = padded_lengths(reduce_batches(np.maximum, lens, flat, starts), pad)
        return pair_table(sizes, longest, reduce_batches(np.add, lens, flat, starts), fn, max_cost)
    members = lens[flat]
    max_len = padded_lengths(np.maximum.reduceat(members, starts), pad)
    real = np.add.reduceat(members, starts)
    padded = sizes * max_len
    rows = sizes
    price = np.asarray(fn(rows, max_len), dtype=np.float64)
    if layout is not None:  # each micro-batch priced as it runs: NOTE [ a cost per layout ]
        rows, max_len = layout.shapes(members, plan.offsets)
        padded = rows * max_len
        packed = (
            layout.choose(members, plan.offsets).packed
            if layout.time_model is not None
            else np.ones(rows.size, dtype=bool)
        )
        price = np.where(
            packed,
            np.asarray(rows_cost(fn)(rows, max_len), dtype=np.float64),
            np.asarray(fn(rows, max_len), dtype=np.float64),
        )
    table = {
        "batch_size": sizes,
        "max_len": max_len,
        "real_tokens": real,
        "padded_tokens": padded,
        "padding_efficiency": real / padded,
        "cost": price,
    }
    if max_cost is not None:
        table["cost_ratio"] = table["cost"] / check_positive_number("max_cost", max_cost)
    return table


@dataclass
class StepStats:
    """What the plan says about the steps trained since the last log: one path for every logger.

    :class:`~dynbatch.VisualDLHook` adds one batch per step; the Trainer
    integration adds each window's batches of every rank. Both log
    :meth:`logged`. ``add`` takes rows of a :func:`batch_table` (with
    ``max_cost``) and which of them only repeat samples to even out the
    ranks' step counts: repeats count as computed (padding, cost) but not as
    trained (samples, tokens).

    >>> table = batch_table([2, 4, 4, 8], [[0, 1], [2, 3]], cost="linear", max_cost=16)
    >>> s = StepStats()
    >>> s.add(table, [0, 1], repeats=[False, True])
    >>> numbers = s.logged(seconds=2.0)
    >>> [numbers[k] for k in ("batch_size", "samples_per_step", "padding_efficiency")]
    [2.0, 2.0, 0.75]
    >>> numbers["samples_per_sec"], numbers["tokens_per_sec"], numbers["cost_ratio_max"]
    (1.0, 3.0, 1.0)
    """

    steps: int = 0
    micro_batches: int = 0
    batches: int = 0  # repeats included
    real_batches: int = 0
    samples: int = 0  # real samples trained
    tokens: float = 0.0  # real tokens trained
    real_all: float = 0.0  # real tokens computed, repeats included
    padded_all: float = 0.0
    max_len: float = 0.0
    cost_ratio_sum: float = 0.0
    cost_ratio_max: float = 0.0

    def add(
        self,
        table: dict[str, NDArray[Any]],
        rows: Any,
        *,
        repeats: Any = None,
        micro_batches: int = 1,
    ) -> None:
        """Add one step: ``table``'s ``rows`` (a slice or indices), ``micro_batches`` of them."""
        picked = {key: np.asarray(column[rows]) for key, column in table.items()}
        n = int(picked["batch_size"].size)
        real = np.ones(n, dtype=bool) if repeats is None else ~np.asarray(repeats, dtype=bool)
        self.steps += 1
        self.micro_batches += micro_batches
        self.batches += n
        self.real_batches += int(real.sum())
        self.samples += int(picked["batch_size"][real].sum())
        self.tokens += float(picked["real_tokens"][real].sum())
        self.real_all += float(picked["real_tokens"].sum())
        self.padded_all += float(picked["padded_tokens"].sum())
        if n:
            self.max_len = max(self.max_len, float(picked["max_len"].max()))
            ratio = picked.get("cost_ratio", np.zeros(n))
            self.cost_ratio_sum += float(ratio.sum())
            self.cost_ratio_max = max(self.cost_ratio_max, float(ratio.max()))

    def logged(self, seconds: float) -> dict[str, float]:
        """The logged numbers, speeds over ``seconds`` of training."""
        seconds = max(float(seconds), 1e-9)
        steps = max(self.steps, 1)
        return {
            "batch_size": self.samples / max(self.real_batches, 1),
            "max_len": self.max_len,
            "real_tokens": self.tokens,
            "padded_tokens": self.padded_all,
            "padding_efficiency": self.real_all / self.padded_all if self.padded_all else 1.0,
            "cost_ratio": self.cost_ratio_sum / max(self.batches, 1),
            "cost_ratio_max": self.cost_ratio_max,
            "samples_per_step": self.samples / steps,
            "micro_batches_per_step": self.micro_batches / steps,
            "samples_per_sec": self.samples / seconds,
            "tokens_per_sec": self.tokens / seconds,
        }


@dataclass(frozen=True)
class PlanStats:
    """Summary of a plan; ``as_dict()`` gives the JSON row of ``dynbatch stats``.

    Args:
        batches: the plan's batches.
        samples: the samples they hold.
        real_tokens: the tokens of those samples, unpadded.
        padded_tokens: the tokens computed, each batch padded to its longest (rounded up to
            ``pad_to_multiple_of``).
        padding_efficiency: ``real_tokens / padded_tokens``: 1 is no padding.
        batch_size_min: the fewest samples of a batch.
        batch_size_median: the median samples of a batch.
        batch_size_max: the most samples of a batch.
        cost_max: the highest cost of a batch.
        cost_median: the median cost of a batch.
        cost_mean: the mean cost of a batch.
        cost_cv: the coefficient of variation (std / mean) of batch cost: how much memory
            swings from step to step.
        utilization: the mean of batch cost / ``max_cost`` (None without a budget).
        updates: the epoch's optimizer updates: the plan's own (``update_size``), else one per
            batch (None: not counted).
        seconds: the epoch's predicted seconds on a device's step time (None: none given).
    """

    batches: int
    samples: int
    real_tokens: int
    padded_tokens: int
    padding_efficiency: float
    batch_size_min: int
    batch_size_median: float
    batch_size_max: int
    cost_max: float
    cost_median: float
    cost_mean: float
    cost_cv: float
    utilization: float | None
    #: optimizer updates of the epoch: the plan's own (``update_size``), else one per batch
    updates: int | None = None
    #: the epoch's predicted seconds on a device's step time, when one is given
    seconds: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PairPlanStats(PlanStats):
    """:class:`PlanStats` of a plan of (source, target) pairs: its tokens are both sides', and
    each side's padding is its own.

    >>> s = plan_stats([[2, 5], [4, 5], [4, 1], [8, 3]], [[0, 1], [2, 3]], cost="linear")
    >>> s.source_padding_efficiency, s.target_padding_efficiency, s.padding_efficiency
    (0.75, 0.875, 0.8)

    Args:
        source_padding_efficiency: the sources' real tokens over their padded tokens.
        target_padding_efficiency: the targets' real tokens over their padded tokens.
    """

    source_padding_efficiency: float = 1.0
    target_padding_efficiency: float = 1.0


def plan_stats(
    lengths: Any,
    batches: Sequence[Any],
    *,
    cost: CostLike = "quadratic",
    max_cost: float | None = None,
    pad_to_multiple_of: int = 1,
) -> PlanStats:
    """Summarise a plan: padding efficiency, batch sizes, cost per batch and its spread.

    ``cost_cv`` is the coefficient of variation (std / mean) of batch cost: how
    much memory swings from step to step. ``utilization`` is the mean of batch
    cost / ``max_cost`` (None without a budget).

    Args:
        lengths: per-sample lengths.
        batches: the plan: each batch's sample indices into ``lengths``.
        cost: the cost of a batch (as :func:`~dynbatch.resolve_cost` takes it).
        max_cost: the budget, for ``utilization`` (None: none).
        pad_to_multiple_of: a batch's ``L`` is its longest length rounded up to this.
    """
    t = batch_table(
        lengths, batches, cost=cost, max_cost=max_cost, pad_to_multiple_of=pad_to_multiple_of
    )
    return _summary(t)


def _summary(t: dict[str, NDArray[Any]]) -> PlanStats:
    """The :class:`PlanStats` of a :func:`batch_table`."""
    costs = t["cost"]
    mean = float(costs.mean())
    stats = PlanStats(
        batches=int(t["batch_size"].size),
        samples=int(t["batch_size"].sum()),
        real_tokens=int(t["real_tokens"].sum()),
        padded_tokens=int(t["padded_tokens"].sum()),
        padding_efficiency=float(t["real_tokens"].sum() / t["padded_tokens"].sum()),
        batch_size_min=int(t["batch_size"].min()),
        batch_size_median=float(np.median(t["batch_size"])),
        batch_size_max=int(t["batch_size"].max()),
        cost_max=float(costs.max()),
        cost_median=float(np.median(costs)),
        cost_mean=mean,
        cost_cv=float(costs.std() / mean) if mean > 0 else 0.0,
        utilization=float(t["cost_ratio"].mean()) if "cost_ratio" in t else None,
    )
    if "source_real_tokens" not in t:
        return stats
    source, target = (
        float(t[f"{side}_real_tokens"].sum() / t[f"{side}_padded_tokens"].sum()) for side in SIDES
    )
    return PairPlanStats(
        **asdict(stats), source_padding_efficiency=source, target_padding_efficiency=target
    )


def fixed_batches(n: int, batch_size: int, *, seed: int = 0) -> list[NDArray[Any]]:
    """The usual baseline: a shuffled dataset cut into batches of ``batch_size``.

    >>> [b.size for b in fixed_batches(7, 3)]
    [3, 3, 1]
    """
    n = check_int("n", n, minimum=1)
    batch_size = check_int("fixed_batch_size", batch_size, minimum=1)
    perm = np.random.default_rng([seed, 0]).permutation(n)
    return [perm[i : i + batch_size] for i in range(0, n, batch_size)]


def baseline_batches(lengths: Any, options: PlanOptions, batch_size: int) -> list[NDArray[Any]]:
    """The fixed-size baseline over the samples the sampler would train on.

    With ``oversize="skip"`` the samples over budget even alone are left out
    here too, so the baseline and the planned rows batch the same samples. The
    samples are drawn in the order :func:`~dynbatch.plan.splits.shuffled` gives epoch 0,
    the order the recipe's updates split at a step time are drawn from, so the
    ``like fixed`` row compares with this one update by update.

    >>> [sorted(b.tolist()) for b in baseline_batches([5, 50, 5], PlanOptions(max_cost=20,
    ...     cost="linear", oversize="skip"), 2)]
    [[0, 2]]
    """
    lens = check_plan_lengths(lengths)
    batch_size = check_int("fixed_batch_size", batch_size, minimum=1)
    keep = np.arange(len(lens))
    if options.oversize == "skip":
        keep = np.setdiff1d(keep, find_oversize(lens, options=options))
    order = shuffled(keep, options.seed, 0)
    return [order[i : i + batch_size] for i in range(0, order.size, batch_size)]


def compare_orders(
    lengths: Any,
    options: PlanOptions,
    *,
    fixed_batch_size: int | None = 20,
    step_time: Any = None,
    group_by_length: bool = False,
    fixed_step_size: int | None = None,
) -> dict[str, PlanStats]:
    """Stats of every order of :func:`~dynbatch.plan_batches` and of a fixed batch size.

    Every option but the order comes from ``options``. Samples over budget even
    alone follow ``options.oversize`` exactly as the sampler does: ``"error"``
    raises, ``"skip"`` leaves them out (of the fixed row too), ``"alone"``
    gives each a batch of its own. Each row counts its optimizer updates of
    the epoch (the plan's own with ``update_size``, else one per batch); with
    ``fixed_batch_size`` a row ``like fixed`` shows :func:`~dynbatch.like_fixed`
    at that batch size under ``options.cost``, next to the ``fixed`` row.

    With ``step_time`` (a :class:`~dynbatch.StepTimeTable` or a
    :class:`~dynbatch.StepTimeModel`: a device's seconds per step by shape) each
    row also has its epoch's predicted ``seconds``, and the ``like fixed`` row
    follows the step time (``like_fixed(..., time_model=...)``, the model
    fitted to a table). ``options.time_model`` is such a step time (when
    ``step_time`` is None): each order's row is still that order's plan.

    With ``options.update_size`` and a step time, a row ``split`` shows what
    ``DynamicBatchSampler(update_size=..., time_model=...)`` plans: the updates
    split at the step time (grouped with ``group_by_length``), each order's row
    staying that order's plan.

    With ``group_by_length`` (or ``options.group_by_length``) and
    ``fixed_batch_size``, a row ``grouped`` shows ``like_fixed(...,
    group_by_length=True)``: the fixed batch's updates of near-equal lengths.

    ``fixed_step_size`` is the ``like fixed`` row's (``like_fixed(..., fixed_step_size=...)``:
    the fixed batch's step its time split is weighed against; it needs a step time).

    The ``like fixed`` and ``grouped`` rows are recipes told the fixed batch,
    and keep within ``options.max_cost`` as every other planned row does: their
    micro-batches fit ``min(max_cost, cost(fixed_batch_size, L_max))``, the
    lower of the budget and the fixed batch's worst batch.

    ``lengths`` may be ``[N, 2]`` (source, target) pairs: every row is then priced on both
    sides (:class:`PairPlanStats`, the cost's two-length form), and a step time is one of two
    lengths (:class:`~dynbatch.plan.pair_steptime.PairStepTimeModel`); one of one length (a
    table included) is refused by name, as one of pairs is for one length a sample.
    """
    lens = check_plan_lengths(lengths)
    if not isinstance(options, PlanOptions):
        raise InputTypeError(
            f"compare_orders: options must be a dynbatch.PlanOptions, got options={options!r}; "
            "e.g. PlanOptions(max_cost=...)"
        )
    grouped = check_bool("group_by_length", group_by_length) or options.group_by_length
    if options.time_model is not None:  # it prices the orders; it would replace each by its split
        step_time = options.time_model if step_time is None else step_time
        options = options.replace(time_model=None, group_by_length=False, fixed_step_size=None)
    # NOTE [ a step time of two lengths ] in dynbatch.plan.pair_steptime: pairs take one of
    # pairs, one length a sample one of one length (a table is of one length)
    refuse_time_model_for(step_time, lens.ndim == 2, "compare_orders", name="step_time")

    def summary(batches: Sequence[Any]) -> PlanStats:
        return plan_stats(
            lens,
            batches,
            cost=options.cost,
            max_cost=options.max_cost,
            pad_to_multiple_of=options.pad_to_multiple_of,
        )

    def seconds(batches: Sequence[Any]) -> float | None:
        return predicted_seconds(lens, batches, step_time, options.pad_to_multiple_of)

    def planned(opts: PlanOptions) -> PlanStats:
        sharded = plan_epoch(lens, opts, 0)
        stats = summary(sharded.plan)
        return replace(stats, updates=optimizer_steps(sharded, lens), seconds=seconds(sharded.plan))

    rows = {order: planned(options.replace(order=order)) for order in ORDERS}
    if fixed_batch_size is not None:
        batches = baseline_batches(lens, options, fixed_batch_size)
        fixed = summary(batches)
        rows["fixed"] = replace(fixed, updates=fixed.batches, seconds=seconds(batches))

        def recipe(**extra: Any) -> PlanOptions:
            return like_fixed_options(lens, options, fixed_batch_size, step_time, **extra)

        step = {} if fixed_step_size is None else {"fixed_step_size": fixed_step_size}
        rows["like fixed"] = planned(recipe(**step))
        if grouped:
            rows["grouped"] = planned(recipe(group_by_length=True))
    timed = split_options(options, step_time, grouped)
    if timed is not None:  # what DynamicBatchSampler(update_size=..., time_model=...) plans
        rows["split"] = planned(timed)
    return rows


def like_fixed_options(
    lengths: Any,
    options: PlanOptions,
    fixed_batch_size: int,
    step_time: Any = None,
    **extra: Any,
) -> PlanOptions:
    """The options of :func:`compare_orders`' ``like fixed`` row (``grouped`` with
    ``group_by_length=True`` in ``extra``): :func:`~dynbatch.like_fixed` at
    ``fixed_batch_size`` under ``options``' cost, within the lower of ``options.max_cost`` and
    the fixed batch's worst batch, following ``step_time`` (a table's fitted model) where its
    updates are in samples.

    >>> like_fixed_options([4, 8, 2], PlanOptions(max_cost=100, cost="linear"), 2).max_cost
    16.0
    """
    lens = check_plan_lengths(lengths)
    fit = getattr(step_time, "fit", None)
    longest = padded_lengths(lens, options.pad_to_multiple_of).max(axis=0)  # pairs: per side
    # the batches' own options, where given, as the sampler given them plans (the defaults
    # left to like_fixed, which sets its own cap on a micro-batch)
    given = {
        name: getattr(options, name)
        for name in ("max_batch_size", "batch_size_multiple", "bucket_width")
        if getattr(options, name) != _DEFAULTS[name]
    }
    # the fixed batch's worst batch (pairs: at the longest source and the longest target)
    worst = float(np.asarray(charge(options.cost, fixed_batch_size, longest[None]))[0])
    return like_fixed(
        lens,
        fixed_batch_size,
        max_cost=min(options.max_cost, worst),  # within the budget, as every row
        cost=options.cost,
        seed=options.seed,
        pad_to_multiple_of=options.pad_to_multiple_of,
        oversize=options.oversize,
        update_unit=options.update_unit,
        # like_fixed follows a step time in samples only (it refuses one in tokens)
        time_model=None
        if options.update_unit != "samples"
        else fit()
        if callable(fit)
        else step_time,
        **{**given, **extra},
    )


#: The options' own defaults (what a flag left out gives)
_DEFAULTS = {f.name: f.default for f in fields(PlanOptions)}


def split_options(
    options: PlanOptions, step_time: Any, group_by_length: bool
) -> PlanOptions | None:
    """The options a sampler or stream plans with when given ``options.update_size`` and the
    step time as ``time_model`` (the fitted model of a table): the updates split at the step
    time (NOTE [ splitting updates at the step time ]). None without an update size or a step
    time: nothing is split.

    >>> split_options(PlanOptions(max_cost=100), lambda n, L: 1.0, False) is None
    True
    """
    if options.update_size is None or step_time is None:
        return None
    fit = getattr(step_time, "fit", None)
    return options.replace(
        time_model=fit() if callable(fit) else step_time, group_by_length=group_by_length
    )


def predicted_seconds(
    lengths: Any, batches: Sequence[Any], step_time: Any, pad_to_multiple_of: int = 1
) -> float | None:
    """An epoch's predicted seconds: the sum of every batch's ``step_time(n, L)`` (None
    without a step time), ``L`` the batch's longest length padded to ``pad_to_multiple_of``;
    for (source, target) pairs ``step_time(n, Ls, Lt)`` (a
    :class:`~dynbatch.plan.pair_steptime.PairStepTimeModel`), each side's longest.

    >>> predicted_seconds([4, 8, 2], [[0, 1], [2]], lambda n, L: n * L)
    18.0
    """
    if step_time is None:
        return None
    table = batch_table(lengths, batches, pad_to_multiple_of=pad_to_multiple_of)
    longest = table["max_len"]
    if "source_max_len" in table:  # pairs: a row of each side's longest
        longest = np.stack([table["source_max_len"], table["target_max_len"]], axis=-1)
    return float(np.asarray(step_seconds(step_time, table["batch_size"], longest)).sum())


def packed_stats(
    lengths: Any,
    pack_len: int,
    *,
    batch_size: int,
    cost: CostLike = "quadratic",
    max_cost: float | None = None,
    step_time: Any = None,
    oversize: str = "error",
    seed: int = 0,
    epoch: int = 0,
    pad_to_multiple_of: int = 1,
    update_unit: str = "samples",
    max_batch_size: int | None = None,
) -> PlanStats:
    """``dynbatch stats``' ``packed`` row: the packed epoch the sampler runs, micro-batch by
    micro-batch, each laid out as it runs.

    The plan is the samplers' own: the options are those a
    ``DynamicBatchSampler(lengths, batch_size=..., pack_len=..., ...)`` with these arguments
    holds (:func:`~dynbatch.like_fixed`'s), planned by :func:`~dynbatch.plan.packs.plan_packed`, and
    with ``step_time`` by :func:`~dynbatch.plan.packs.plan_timed_packs` (the same planner, one
    rank): the fixed batch's updates, each packed, split or whole, the fastest. Updates in
    ``"tokens"`` are as many real tokens as ``batch_size`` samples hold on average; the sampler cuts
    no such update at a step time (it refuses a ``time_model`` there), so ``step_time`` only prices
    them. Each micro-batch is one batch, laid out as :class:`~dynbatch.plan.packs.PackLayout` lays
    it out for the collator (NOTE [ a micro-batch's layout ]): packed, ``R`` rows as wide as the
    fullest, or padded, a sample a row: ``padding_efficiency`` is real tokens over the tokens those
    steps compute, the cost ``cost(R or n, width)``, the batch sizes its samples. ``seconds`` is the
    epoch's predicted time with ``step_time``. Without ``max_cost``, micro-batches are not capped;
    ``max_batch_size`` caps their rows, as the sampler given it does.

    >>> s = packed_stats([5, 3, 4, 2, 6, 7], 8, batch_size=3, cost="linear", max_cost=16)
    >>> s.batches, s.updates, round(s.padding_efficiency, 3), s.cost_max  # 2 rows of 7 each
    (2, 2, 0.964, 14.0)
    >>> s = packed_stats([5, 3, 4, 2, 6, 7], 8, batch_size=3, cost="linear", max_cost=32,
    ...                  step_time=lambda n, L: 1.0 + 0 * n)  # a flat step: run whole, padded
    >>> s.batches, round(s.padding_efficiency, 3), s.seconds
    (2, 0.692, 2.0)
    """
    table, updates, seconds = packed_table(
        lengths,
        pack_len,
        batch_size=batch_size,
        cost=cost,
        max_cost=max_cost,
        step_time=step_time,
        oversize=oversize,
        seed=seed,
        epoch=epoch,
        pad_to_multiple_of=pad_to_multiple_of,
        update_unit=update_unit,
        max_batch_size=max_batch_size,
    )
    return replace(
        _summary(table),
        utilization=float(table["cost_ratio"].mean()),
        updates=updates,
        seconds=seconds,
    )


def packed_table(
    lengths: Any,
    pack_len: int,
    *,
    batch_size: int,
    cost: CostLike = "quadratic",
    max_cost: float | None = None,
    step_time: Any = None,
    oversize: str = "error",
    seed: int = 0,
    epoch: int = 0,
    pad_to_multiple_of: int = 1,
    update_unit: str = "samples",
    max_batch_size: int | None = None,
) -> tuple[dict[str, NDArray[Any]], int, float | None]:
    """The epoch :func:`packed_stats` summarises, micro-batch by micro-batch: its
    :func:`batch_table` (with ``cost_ratio``), laid out as it runs, its updates and its
    predicted seconds (None without ``step_time``). The arguments are :func:`packed_stats`'.

    >>> table, updates, seconds = packed_table([5, 3, 4, 2, 6, 7], 8, batch_size=3,
    ...                                        cost="linear", max_cost=16)
    >>> int(table["batch_size"].sum()), updates, seconds  # every sample, the fixed updates
    (6, 2, None)
    """
    lens = check_lengths(lengths)
    pack_len = check_int("pack_len", pack_len, minimum=1)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    if max_cost is None:  # no budget: padded tokens within every sample padded to the longest
        max_cost, cost = float(2 * max(pack_len, int(lens.max())) * lens.size), "linear"
    options = like_fixed(  # the options DynamicBatchSampler(batch_size=..., ...) plans with
        lens,
        batch_size,
        max_cost=max_cost,
        cost=cost,
        update_unit=update_unit,
        pack_len=pack_len,
        seed=seed,
        oversize=oversize,
        pad_to_multiple_of=pad_to_multiple_of,
        **({} if max_batch_size is None else {"max_batch_size": max_batch_size}),
    )
    cuts = step_time if options.update_unit == "samples" else None  # the sampler's time_model
    seconds = None
    if cuts is not None:
        chosen = plan_timed_packs(lens, options, epoch, time_model=cuts)
        micro, updates, seconds = chosen.micro_batches, chosen.num_updates, chosen.epoch_seconds
    else:
        sharded = plan_packed(lens, options, epoch)
        micro, updates = sharded.plan, optimizer_steps(sharded, lens)
    layout = PackLayout.from_options(options, cuts)
    table = batch_table(lens, micro, cost=options.cost, max_cost=options.max_cost, layout=layout)
    if step_time is not None and cuts is None:  # priced as it runs: every micro-batch packed
        rows = table["padded_tokens"] // table["max_len"]
        seconds = float(np.asarray(step_time(rows, table["max_len"]), dtype=np.float64).sum())
    return table, int(updates), seconds
