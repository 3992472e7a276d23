"""Bad input to choose_packing and plan_packs is a named error.

One part of the bad-input table (tests/bad_input.py says how it works).
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
from bad_input import (
    BUDGET,
    COST_VALUES,
    LENS,
    NON_NEGATIVE_INT,
    POSITIVE_INT,
    POSITIVE_NUMBER,
    TYPE,
    VALUE,
    Case,
    Cases,
    int_family,
    large_family,
    raises_as_the_table_says,
    v,
)

from dynbatch import (
    choose_packing,
    plan_packs,
)

CASES = Cases()
case = CASES.add

PACK_CALL: dict[str, Any] = {"pack_len": 64, "batch_size": 2, "time_model": "1,0,0"}
for name in ("pack_len", "batch_size", "max_rows"):
    values = [x for x in POSITIVE_INT if name != "max_rows" or x[0] != "None"]
    for label, value, error, match in int_family(name, values, 1):
        case(
            f"choose_packing-{name}-{label}",
            functools.partial(choose_packing, LENS, **{**PACK_CALL, name: value}),
            error,
            match,
        )
for label, value, error, match in [
    ("int", 3, TYPE, r"time_model must be a step time.*got time_model=3"),
    ("text", "fast", VALUE, r"time_model as text must be three numbers.*time_model='fast'"),
    ("dict-negative", {"c": -1, "a": 0, "b": 0}, VALUE, r"coefficient c must be .*>= 0"),
]:
    case(
        f"choose_packing-time_model-{label}",
        functools.partial(choose_packing, LENS, **{**PACK_CALL, "time_model": value}),
        error,
        match,
    )
for name in ("pack_len", "max_rows"):  # numpy overflowed on these, or took them
    for label, value, error, match in large_family(name, 1):
        case(
            f"choose_packing-{name}-{label}",
            functools.partial(choose_packing, LENS, **{**PACK_CALL, name: value}),
            error,
            match,
        )
# epoch was mixed into the seed as given: '8', [8] and b'8' were taken, -1 failed in numpy
EPOCHS = [*NON_NEGATIVE_INT, ("list", [8], TYPE), ("bytes", b"8", TYPE)]
for label, value, error, match in int_family("epoch", EPOCHS, 0):
    case(
        f"choose_packing-epoch-{label}",
        functools.partial(choose_packing, LENS, **PACK_CALL, epoch=value),
        error,
        match,
    )
# max_cost is PlanOptions' field: refused as PlanOptions refuses it, not by float() or a row
MAX_COSTS = [x for x in POSITIVE_NUMBER if x[0] != "None"] + [("object", object(), TYPE)]
for label, value, error in MAX_COSTS:
    case(
        f"choose_packing-max_cost-{label}",
        functools.partial(choose_packing, LENS, **PACK_CALL, max_cost=value),
        error,
        rf"max_cost must be a positive finite number, got max_cost={v(value)}",
    )
# cost is checked with max_cost or without (it was dropped unread without)
for label, value, error, match in COST_VALUES:
    if value is None:
        continue  # None: not given (quadratic with max_cost)
    case(
        f"choose_packing-cost-{label}",
        functools.partial(choose_packing, LENS, **PACK_CALL, max_cost=1e6, cost=value),
        error,
        match,
    )
    if label in ("cubic", "int"):
        case(
            f"choose_packing-cost-{label}-without-max_cost",
            functools.partial(choose_packing, LENS, **PACK_CALL, cost=value),
            error,
            match,
        )
for label, budget in [("max_rows", {"max_rows": 2}), ("no-budget", {})]:
    case(  # a cost given without max_cost was silently replaced by 'linear'
        f"choose_packing-cost-without-max_cost-{label}",
        functools.partial(choose_packing, LENS, **PACK_CALL, **budget, cost="quadratic"),
        VALUE,
        r"cost=QuadraticCost\(\) prices a micro-batch against max_cost, but max_cost=None: .*"
        r"give max_cost with cost, or leave cost out",
    )
case(
    "choose_packing-max_rows-and-max_cost",
    functools.partial(choose_packing, LENS, **PACK_CALL, max_rows=2, max_cost=BUDGET),
    VALUE,
    r"give max_rows or max_cost, not both; got max_rows=2 and max_cost=2000.0",
)
case(
    "choose_packing-time_model-tokens",
    functools.partial(choose_packing, LENS, **PACK_CALL, update_unit="tokens"),
    VALUE,
    r"time_model cuts updates .* needs update_unit='samples', got update_unit='tokens'",
)


@pytest.mark.parametrize("name", ["pack_len", "max_rows", "pad_to_multiple_of"])
def test_plan_packs_refuses_a_size_beyond_2_53_by_name(name: str) -> None:
    """numpy overflowed on these (OverflowError, TypeError) or took them (a width of 2**63)."""
    for label, value, error, match in large_family(name, 1):
        bad = Case(
            f"plan_packs-{name}-{label}",
            functools.partial(plan_packs, LENS, **{"pack_len": 64, "batch_size": 2, name: value}),
            error,
            match,
        )
        raises_as_the_table_says(bad)


@pytest.mark.parametrize("bad", CASES, ids=CASES.ids())
def test_bad_input_is_a_named_error(bad: Case) -> None:
    raises_as_the_table_says(bad)
