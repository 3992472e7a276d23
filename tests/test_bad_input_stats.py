"""Bad input to the statistics is a named error: plan_stats, batch_table, compare_orders.

One part of the bad-input table (tests/bad_input.py says how it works).
"""

from __future__ import annotations

import functools

import pytest
from bad_input import (
    BUDGET,
    COST_VALUES,
    LENS,
    POSITIVE_INT,
    TYPE,
    VALUE,
    Case,
    Cases,
    int_family,
    number_family,
    options_with,
    raises_as_the_table_says,
)

from dynbatch import (
    plan_stats,
)
from dynbatch.plan.stats import batch_table, compare_orders

CASES = Cases()
case = CASES.add

# -- statistics -----------------------------------------------------------------------------------

for entry, fn in (("plan_stats", plan_stats), ("batch_table", batch_table)):
    for label, value, error, match in [
        ("no-batches", [], VALUE, r"batches must be a non-empty list of non-empty index lists"),
        ("empty-batch", [[0], []], VALUE, r"batches\[1\] must be a non-empty 1-D list of indices"),
        ("outside", [[0, 8]], VALUE, r"batches\[0\] holds index 8, outside \[0, 8\)"),
        ("negative", [[1], [-1]], VALUE, r"batches\[1\] holds index -1, outside \[0, 8\)"),
        ("float", [[0.5]], TYPE, r"batches\[0\] must hold integer indices, got dtype float64"),
        ("bool", [[True]], TYPE, r"batches\[0\] must hold integer indices, got dtype bool"),
        ("2-D", [[[0, 1]]], VALUE, r"batches\[0\] must be a non-empty 1-D list of indices"),
        (
            "None",
            None,
            TYPE,
            r"batches must be a sequence of batches \(index lists\), got batches=None",
        ),
    ]:
        case(f"{entry}-batches-{label}", functools.partial(fn, LENS, value), error, match)
    for label, value, error, match in number_family("max_cost"):
        if value is None:
            continue  # None: no budget, no utilisation
        case(
            f"{entry}-max_cost-{label}",
            functools.partial(fn, LENS, [[0]], max_cost=value),
            error,
            match,
        )
    for label, value, error, match in int_family(
        "pad_to_multiple_of", [x for x in POSITIVE_INT if x[0] != "None"], 1
    ):
        case(
            f"{entry}-pad_to_multiple_of-{label}",
            functools.partial(fn, LENS, [[0]], pad_to_multiple_of=value),
            error,
            match,
        )
    for label, value, error, match in COST_VALUES[:4]:
        case(f"{entry}-cost-{label}", functools.partial(fn, LENS, [[0]], cost=value), error, match)

case(
    "compare_orders-options-a-budget",
    lambda: compare_orders(LENS, BUDGET),
    TYPE,
    r"compare_orders: options must be a dynbatch.PlanOptions, got options=2000.0",
)
case(
    "compare_orders-group_by_length-str",
    lambda: compare_orders(LENS, options_with(), group_by_length="yes"),
    TYPE,
    r"group_by_length must be True or False, got group_by_length='yes'",
)
for label, value, error, match in int_family(
    "fixed_batch_size", [x for x in POSITIVE_INT if x[0] != "None"], 1
):
    case(
        f"compare_orders-fixed_batch_size-{label}",
        functools.partial(compare_orders, LENS, options_with(), fixed_batch_size=value),
        error,
        match,
    )


@pytest.mark.parametrize("bad", CASES, ids=CASES.ids())
def test_bad_input_is_a_named_error(bad: Case) -> None:
    raises_as_the_table_says(bad)
