"""Padding and cost statistics of a plan: the one definition used by the CLI, the hook
and the benchmarks.

Padding efficiency is real tokens / padded tokens, where a batch of ``n``
samples pads every sample to ``L``, its longest length rounded up to
``pad_to_multiple_of``: ``sum(lengths) / sum(n * L)``.

>>> s = plan_stats([2, 4, 4, 8], [[0, 1], [2, 3]], cost="linear", max_cost=16)
>>> s.padding_efficiency, s.batch_size_max, s.cost_max, s.utilization
(0.75, 2, 16.0, 0.75)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ._checks import (
    InputTypeError,
    check_batches,
    check_int,
    check_lengths,
    check_positive_number,
)
from .cost import CostLike, resolve_cost
from .options import ORDERS, PlanOptions
from .planning import Plan, batch_capacity, find_oversize, padded_lengths, plan_batches

__all__ = [
    "PlanStats",
    "baseline_batches",
    "batch_table",
    "compare_orders",
    "fixed_batches",
    "lower_bound_batches",
    "plan_stats",
]


def batch_table(
    lengths: Any,
    batches: Sequence[Any],
    *,
    cost: CostLike = "quadratic",
    max_cost: float | None = None,
    pad_to_multiple_of: int = 1,
) -> dict[str, NDArray[Any]]:
    """Per-batch columns: ``batch_size``, ``max_len``, ``real_tokens``, ``padded_tokens``,
    ``padding_efficiency``, ``cost`` and, with ``max_cost``, ``cost_ratio``."""
    lens = check_lengths(lengths)
    fn = resolve_cost(cost)
    pad = check_int("pad_to_multiple_of", pad_to_multiple_of, minimum=1)
    if isinstance(batches, Plan) and len(batches) and batches.sizes.min() > 0:
        plan = batches
        check_batches([plan.indices], lens.size, "batches")
    else:
        plan = Plan.from_batches(check_batches(batches, lens.size, "batches"))
    sizes, flat = plan.sizes, plan.indices
    starts = plan.offsets[:-1]
    members = lens[flat]
    max_len = padded_lengths(np.maximum.reduceat(members, starts), pad)
    real = np.add.reduceat(members, starts)
    padded = sizes * max_len
    table = {
        "batch_size": sizes,
        "max_len": max_len,
        "real_tokens": real,
        "padded_tokens": padded,
        "padding_efficiency": real / padded,
        "cost": np.asarray(fn(sizes, max_len), dtype=np.float64),
    }
    if max_cost is not None:
        table["cost_ratio"] = table["cost"] / check_positive_number("max_cost", max_cost)
    return table


def lower_bound_batches(
    lengths: Any,
    max_cost: float,
    *,
    cost: CostLike = "quadratic",
    pad_to_multiple_of: int = 1,
    max_batch_size: int | None = None,
) -> int:
    """The fewest batches any plan within ``max_cost`` can have, for any nondecreasing cost.

    NOTE [ the fewest batches ]
        Sort the (padded) lengths longest first and fill batches in that order,
        each up to the capacity of its first, longest sample: ``cap(L)``, the
        most samples a batch of padded length ``L`` may hold (``cost(n, L) <=
        max_cost``, at most ``max_batch_size``). No plan has fewer batches, for
        any cost nondecreasing in ``n`` and in ``L`` (so ``cap`` is
        nonincreasing in ``L``), a per-batch constant (``MemoryCost``'s ``c``
        and floor) included. Proof: rank the samples longest first and let
        ``g_k`` be how many the first ``k`` greedy batches hold. Order any
        plan's batches by the rank ``r_j`` of their longest member. Claim:
        ``r_{k+1} <= g_k + 1``. For ``k = 0``, the longest sample leads its
        batch. If it holds up to ``k``, plan batch ``j <= k`` holds at most
        ``cap(L_{r_j}) <= cap(L of greedy batch j's first)``, as ``r_j`` is no
        earlier than that first sample and ``cap`` grows along the ranks; so
        the first ``k`` plan batches hold at most ``g_k`` samples, one of the
        ``g_k + 1`` longest is in a later batch, and that batch's longest
        ranks at most ``g_k + 1``. Hence while greedy has samples left after
        ``k`` batches, so does the plan: it has at least as many batches.
        The bound is met by the greedy packing itself, so it is the true
        minimum (``batch_size_multiple`` only lowers what plans can do, and
        is left out). A sample over budget even alone is counted as a batch
        of its own.

    The former bound, ``ceil(sum(cost(1, L_i)) / max_cost)``, held only for
    costs of the form ``n * f(L)``; a cost charged once per batch made it
    exceed every plan.

    >>> lower_bound_batches([4, 4, 8], 16, cost="linear")
    2
    >>> lower_bound_batches([4, 4, 8], 30, cost=lambda n, L: 10 + n * L)
    2
    """
    lens = check_lengths(lengths)
    options = PlanOptions(
        max_cost=max_cost,
        cost=cost,
        pad_to_multiple_of=pad_to_multiple_of,
        max_batch_size=max_batch_size,
    )
    plens = padded_lengths(lens, options.pad_to_multiple_of)
    values, counts = np.unique(plens, return_counts=True)  # ascending: capacities descending
    caps = batch_capacity(values, options, lens.size)
    batches = 0
    room = 0  # what the open batch, led by a longer sample, can still take
    for count, capacity in zip(counts[::-1].tolist(), caps[::-1].tolist(), strict=True):
        if capacity == 0:  # over budget alone: a batch each
            batches += count
            continue
        taken = min(room, count)
        room -= taken
        count -= taken
        if count:
            full, rest = divmod(count, capacity)
            batches += full + (rest > 0)
            room = capacity - rest if rest else 0
    return batches


@dataclass(frozen=True)
class PlanStats:
    """Summary of a plan; ``as_dict()`` gives the JSON row of ``dynbatch stats``."""

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

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


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
    """
    t = batch_table(
        lengths, batches, cost=cost, max_cost=max_cost, pad_to_multiple_of=pad_to_multiple_of
    )
    costs = t["cost"]
    mean = float(costs.mean())
    return PlanStats(
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
    here too, so the baseline and the planned rows batch the same samples.

    >>> [b.tolist() for b in baseline_batches([5, 50, 5], PlanOptions(max_cost=20,
    ...     cost="linear", oversize="skip"), 2)]
    [[0, 2]]
    """
    lens = check_lengths(lengths)
    keep = np.arange(lens.size)
    if options.oversize == "skip":
        keep = np.setdiff1d(keep, find_oversize(lens, options=options))
    return [keep[b] for b in fixed_batches(keep.size, batch_size, seed=options.seed)]


def compare_orders(
    lengths: Any,
    options: PlanOptions,
    *,
    fixed_batch_size: int | None = 20,
) -> dict[str, PlanStats]:
    """Stats of every order of :func:`~dynbatch.plan_batches` and of a fixed batch size.

    Every option but the order comes from ``options``. Samples over budget even
    alone follow ``options.oversize`` exactly as the sampler does: ``"error"``
    raises, ``"skip"`` leaves them out (of the fixed row too), ``"alone"``
    gives each a batch of its own.
    """
    lens = check_lengths(lengths)
    if not isinstance(options, PlanOptions):
        raise InputTypeError(
            f"compare_orders: options must be a dynbatch.PlanOptions, got options={options!r}; "
            "e.g. PlanOptions(max_cost=...)"
        )

    def summary(batches: Sequence[Any]) -> PlanStats:
        return plan_stats(
            lens,
            batches,
            cost=options.cost,
            max_cost=options.max_cost,
            pad_to_multiple_of=options.pad_to_multiple_of,
        )

    rows = {
        order: summary(plan_batches(lens, options=options.replace(order=order))) for order in ORDERS
    }
    if fixed_batch_size is not None:
        rows["fixed"] = summary(baseline_batches(lens, options, fixed_batch_size))
    return rows
