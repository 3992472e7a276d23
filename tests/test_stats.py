"""plan_stats against a direct computation, and the lower bound."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import planner_args

from dynbatch import (
    MemoryCost,
    MixedCost,
    PlanOptions,
    StepTimeModel,
    plan_batches,
    plan_stats,
    resolve_cost,
)
from dynbatch.plan.options import ORDERS
from dynbatch.plan.stats import batch_table, compare_orders, lower_bound_batches


@given(planner_args())
def test_stats_match_a_direct_computation(args: dict) -> None:
    lens, pad = args["lengths"], args["pad_to_multiple_of"]
    plan = plan_batches(**args)
    s = plan_stats(lens, plan, cost=args["cost"], max_cost=args["max_cost"], pad_to_multiple_of=pad)
    padded = [len(b) * (-(-int(lens[b].max()) // pad) * pad) for b in plan]
    assert s.padding_efficiency == pytest.approx(lens.sum() / sum(padded))
    assert s.batches == len(plan) and s.samples == lens.size
    assert s.utilization is not None and 0 < s.utilization <= 1 + 1e-12
    assert s.cost_max <= args["max_cost"]
    bound = lower_bound_batches(
        lens,
        args["max_cost"],
        cost=args["cost"],
        pad_to_multiple_of=pad,
        max_batch_size=args["max_batch_size"],
    )
    assert s.batches >= bound, "no plan beats the bound"


def test_batch_table_rejects_foreign_indices() -> None:
    with pytest.raises(ValueError, match="outside"):
        batch_table([1, 2], [[0, 5]])
    with pytest.raises(ValueError, match="non-empty"):
        batch_table([1, 2], [[]])


def test_constant_plan_has_zero_variation() -> None:
    s = plan_stats(np.full(64, 10), plan_batches(np.full(64, 10), 16 * 100), max_cost=1600)
    assert s.cost_cv == 0.0 and s.padding_efficiency == 1.0 and s.batch_size_max == 16


@pytest.mark.parametrize(
    ("cost", "max_cost"),
    [(lambda n, L: 10 + n * L, 2000), (MemoryCost(c=20.0, a=0.002, b=1e-5), 30)],
    ids=["per-batch-constant", "memory-cost"],
)
def test_the_bound_holds_for_a_cost_charged_once_per_batch(cost: object, max_cost: float) -> None:
    lens = np.random.default_rng(0).integers(5, 120, 1000)
    bound = lower_bound_batches(lens, max_cost, cost=cost)
    fewest = min(len(plan_batches(lens, max_cost, cost=cost, order=o)) for o in ORDERS)
    assert 0 < bound <= fewest, f"bound {bound}, plans of {fewest} batches"


def fewest_batches(lens: np.ndarray, max_cost: float, cost: object, cap: int | None) -> int:
    """The fewest batches of any partition, by dynamic programming over subsets."""
    n = lens.size
    fits = np.zeros(1 << n, dtype=bool)
    for mask in range(1, 1 << n):
        members = [i for i in range(n) if mask >> i & 1]
        size = len(members)
        fits[mask] = (cap is None or size <= cap) and float(
            cost(size, int(lens[members].max()))  # type: ignore[operator]
        ) <= max_cost
    best = np.full(1 << n, n + 1, dtype=np.int64)
    best[0] = 0
    for mask in range(1, 1 << n):
        low = mask & -mask
        sub = mask
        while sub:
            if sub & low and fits[sub]:
                best[mask] = min(best[mask], best[mask ^ sub] + 1)
            sub = (sub - 1) & mask
    return int(best[-1])


COSTS = [
    "linear",
    "quadratic",
    MixedCost(1.0, 0.5),
    lambda n, L: 10 + n * L,
    lambda n, L: np.maximum(30.0, n * L),
    MemoryCost(c=5.0, a=1.0, b=0.1, floor=40.0),
]


@given(
    st.lists(st.integers(1, 30), min_size=1, max_size=8),
    st.sampled_from(range(len(COSTS))),
    st.floats(1.0, 6.0),
    st.none() | st.integers(1, 4),
)
def test_the_bound_is_the_fewest_batches_any_plan_can_have(
    lengths: list[int], which: int, slack: float, cap: int | None
) -> None:
    lens, cost = np.array(lengths), COSTS[which]
    fn = resolve_cost(cost)
    max_cost = float(fn(1, int(lens.max()))) * slack  # every sample fits alone
    bound = lower_bound_batches(lens, max_cost, cost=cost, max_batch_size=cap)
    assert bound == fewest_batches(lens, max_cost, fn, cap), "exact: longest first is optimal"
    for order in ORDERS:
        plan = plan_batches(lens, max_cost, cost=cost, order=order, max_batch_size=cap)
        assert len(plan) >= bound


@pytest.mark.parametrize("seed", [0, 1, 11])
def test_like_fixed_is_never_priced_slower_than_the_fixed_row_it_is_compared_with(
    seed: int,
) -> None:
    """The fixed row draws the shuffle like fixed's time-split updates draw, so the two compare
    update by update (NOTE [ splitting updates at the step time ]: never predicted slower)."""
    gpu_like = StepTimeModel(c=0.036, a=1.3e-6, b=3.4e-9)  # an H100's fit: flat to its knee
    lens = np.random.default_rng(seed).integers(5, 512, 1000)
    rows = compare_orders(lens, PlanOptions(max_cost=1e9), fixed_batch_size=32, step_time=gpu_like)
    fixed, like = rows["fixed"].seconds, rows["like fixed"].seconds
    assert fixed is not None and like is not None
    assert like <= fixed * (1 + 1e-12), "like fixed at most the fixed batch's time"
    assert rows["like fixed"].updates == rows["fixed"].updates == -(-1000 // 32)


def test_options_with_a_time_model_price_each_order_and_keep_it() -> None:
    """dynbatch stats --time-model c,a,b --update-size U: each order's row is that order's plan,
    priced by the time model, and like fixed follows it (as with --time-table)."""
    lens = np.random.default_rng(3).integers(5, 300, 600)
    gpu_like = StepTimeModel(c=0.04, a=1e-6, b=0.0)
    timed = PlanOptions(max_cost=1e6, cost="linear", update_size=32, time_model=gpu_like)
    rows = compare_orders(lens, timed, fixed_batch_size=32)
    plain = compare_orders(lens, timed.replace(time_model=None), fixed_batch_size=32)
    for order in ORDERS:
        assert rows[order].batches == plain[order].batches, f"{order}: the order's own plan"
    assert all(r.seconds is not None for r in rows.values()), "every row priced"
    assert (
        rows["like fixed"]
        == compare_orders(
            lens, timed.replace(time_model=None), fixed_batch_size=32, step_time=gpu_like
        )["like fixed"]
    ), "like fixed follows the time model"
