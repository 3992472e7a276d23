"""Bad input to the planner's entry points is a named error.

The lengths every entry point takes, plan_batches, shard_plan, plan_epoch and the costs.

One part of the bad-input table (tests/bad_input.py says how it works).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import pytest
from bad_input import (
    BAD_LENGTHS,
    BUDGET,
    COST_VALUES,
    LENS,
    NON_NEGATIVE_INT,
    POSITIVE_INT,
    TYPE,
    VALUE,
    Case,
    Cases,
    Rows,
    int_family,
    options_with,
    raises_as_the_table_says,
    v,
)

from dynbatch import (
    MixedCost,
    find_oversize,
    plan_batches,
    plan_epoch,
    plan_stats,
    resolve_cost,
    shard_plan,
)
from dynbatch.plan.stats import batch_table

CASES = Cases()
case = CASES.add

# -- lengths: every function that takes them ------------------------------------------------------

LENGTH_ENTRIES: dict[str, Callable[[Any], object]] = {
    "plan_batches": lambda x: plan_batches(x, BUDGET),
    "find_oversize": lambda x: find_oversize(x, BUDGET),
    "shard_plan": lambda x: shard_plan([[0]], x, 1, max_cost=BUDGET),
    "plan_epoch": lambda x: plan_epoch(x, options_with(), 0),
    "plan_stats": lambda x: plan_stats(x, [[0]]),
    "batch_table": lambda x: batch_table(x, [[0]]),
}
for entry, call in LENGTH_ENTRIES.items():
    for label, value, error, match in BAD_LENGTHS:
        case(f"{entry}-lengths-{label}", functools.partial(call, value), error, match)

# -- planning -------------------------------------------------------------------------------------

for label, value, error, match in int_family("epoch", NON_NEGATIVE_INT, 0):
    case(
        f"plan_batches-epoch-{label}",
        functools.partial(plan_batches, LENS, BUDGET, epoch=value),
        error,
        match,
    )
case(
    "plan_batches-oversize-error",
    lambda: plan_batches(LENS, 500),
    VALUE,
    r"sample 5 has length 30 .*over max_cost=500; 1 sample\(s\) are over budget",
)
case(
    "plan_batches-all-oversize-skip",
    lambda: plan_batches(LENS, 1, oversize="skip"),
    VALUE,
    r"all 8 samples are over max_cost=1 even alone.*oversize='skip' would leave nothing",
)
case(
    # a batch of 5 costs more than one of 7: between the points the cost is probed at, and
    # never tried by the bisection (0..7: 4, 6, 7), so the planner's own check finds it
    "plan_batches-cost-not-monotone",
    lambda: plan_batches(
        [3] * 12, 100, cost=lambda n, L: 1e9 if n == 5 else float(n), order="none", max_batch_size=7
    ),
    VALUE,
    r"cost .* is not nondecreasing in \(n, L\): a batch of 5 samples costs 1e\+09",
)

# -- sharding -------------------------------------------------------------------------------------

BAD_PLANS: Rows = [
    ("empty-batch", [[0], []], VALUE, r"plan\[1\] must be a non-empty 1-D list of indices"),
    ("2-D-batch", [[[0, 1]]], VALUE, r"plan\[0\] must be a non-empty 1-D list of indices"),
    ("float", [[0.5]], TYPE, r"plan\[0\] must hold integer indices, got dtype float64"),
    ("bool", [[True]], TYPE, r"plan\[0\] must hold integer indices, got dtype bool"),
    ("str", [["0"]], TYPE, r"plan\[0\] must hold integer indices, got dtype <U1"),
    ("negative", [[0, -1]], VALUE, r"plan\[0\] holds index -1, outside \[0, 8\) of lengths"),
    ("outside", [[1], [0, 8]], VALUE, r"plan\[1\] holds index 8, outside \[0, 8\) of lengths"),
    ("duplicate", [[0, 1], [1]], VALUE, r"plan holds index 1 more than once"),
    ("None", None, TYPE, r"plan must be a sequence of batches \(index lists\), got plan=None"),
    ("int", 3, TYPE, r"plan must be a sequence of batches \(index lists\), got plan=3"),
]
for label, value, error, match in BAD_PLANS:
    case(
        f"shard_plan-plan-{label}",
        functools.partial(shard_plan, value, LENS, 2, max_cost=BUDGET),
        error,
        match,
    )
SHARD_ARGS: dict[str, Rows] = {
    "num_replicas": int_family("num_replicas", POSITIVE_INT, 1),
    "epoch": int_family("epoch", NON_NEGATIVE_INT, 0),
    "num_batches": [
        *int_family("num_batches", [x for x in NON_NEGATIVE_INT if x[0] != "None"], 0),
        ("not-multiple", 3, VALUE, r"num_batches must be a multiple of num_replicas=2.*=3"),
        ("too-few", 0, VALUE, r"num_batches must be .*at least the plan's 2 batches.*=0"),
    ],
    "tolerance": [
        ("below-1", 0.5, VALUE, r"tolerance must be a number >= 1 .*got tolerance=0.5"),
        ("nan", math.nan, VALUE, r"tolerance must be a number >= 1 .*got tolerance=nan"),
        ("str", "1.05", TYPE, r"tolerance must be a number >= 1 .*got tolerance='1.05'"),
        ("True", True, TYPE, r"tolerance must be a number >= 1 .*got tolerance=True"),
        ("None", None, TYPE, r"tolerance must be a number >= 1 .*got tolerance=None"),
    ],
}
for arg, values in SHARD_ARGS.items():
    for label, value, error, match in values:
        kwargs = {"max_cost": BUDGET, arg: value}
        if arg == "num_replicas":
            call = functools.partial(shard_plan, [[0, 1], [2, 3]], LENS, value, max_cost=BUDGET)
        else:
            call = functools.partial(shard_plan, [[0, 1], [2, 3]], LENS, 2, **kwargs)
        case(f"shard_plan-{arg}-{label}", call, error, match)

PLAN_EPOCH_ARGS: dict[str, Rows] = {
    "options": [
        ("None", None, TYPE, r"options must be a dynbatch.PlanOptions, got options=None"),
        ("dict", {"max_cost": 5}, TYPE, r"options must be a dynbatch.PlanOptions, got options=\{"),
    ],
    "epoch": int_family("epoch", NON_NEGATIVE_INT, 0),
    "num_replicas": int_family("num_replicas", POSITIVE_INT, 1),
}
for arg, values in PLAN_EPOCH_ARGS.items():
    for label, value, error, match in values:
        args = {"lengths": LENS, "options": options_with(), "epoch": 0, "num_replicas": 1}
        args[arg] = value
        case(f"plan_epoch-{arg}-{label}", functools.partial(plan_epoch, **args), error, match)

# -- costs ----------------------------------------------------------------------------------------

for label, value, error, match in COST_VALUES:
    case(f"resolve_cost-{label}", functools.partial(resolve_cost, value), error, match)
for name in ("a", "b"):
    for label, value, error in [
        ("negative", -1.0, VALUE),
        ("nan", math.nan, VALUE),
        ("inf", math.inf, VALUE),
        ("str", "1", TYPE),
        ("True", True, TYPE),
        ("None", None, TYPE),
    ]:
        kwargs = {"a": 1.0, "b": 1.0, name: value}
        case(
            f"MixedCost-{name}-{label}",
            functools.partial(MixedCost, **kwargs),
            error,
            rf"MixedCost {name} must be a finite number >= 0, got {name}={v(value)}",
        )
case("MixedCost-both-zero", lambda: MixedCost(0, 0), VALUE, r"MixedCost needs a > 0 or b > 0")


@pytest.mark.parametrize("bad", CASES, ids=CASES.ids())
def test_bad_input_is_a_named_error(bad: Case) -> None:
    raises_as_the_table_says(bad)
