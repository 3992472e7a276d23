"""Bad input to PlanOptions and its shortcuts is a named error.

Every field of PlanOptions, what packing cannot honour, like_fixed's packing and sizes, and
the keyword shortcuts of every entry point that takes options.

One part of the bad-input table (tests/bad_input.py says how it works).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable

import numpy as np
import pytest
from bad_input import (
    BUDGET,
    LENS,
    OPTION_VALUES,
    TYPE,
    VALUE,
    Case,
    Cases,
    large_family,
    options_with,
    raises_as_the_table_says,
)

from dynbatch import (
    find_oversize,
    like_fixed,
    plan_batches,
    shard_plan,
)
from dynbatch.plan.steptime import FLAT_STEP

CASES = Cases()
case = CASES.add

# -- PlanOptions: every field ---------------------------------------------------------------------

for field, values in OPTION_VALUES.items():
    for label, value, error, match in values:
        case(
            f"PlanOptions-{field}-{label}",
            functools.partial(options_with, **{field: value}),
            error,
            match,
        )

# what packing cannot honour is refused by name (NOTE [ packed updates ])
PACKED = {"pack_len": 64, "update_size": 8}
for label, changes, match in [
    ("no-update-size", {"update_size": None}, r"pack_len=64 cuts .* give update_size"),
    ("sorted", {"order": "ascending"}, r"pack_len=64 .* random order .*order='ascending'"),
    ("equal-epochs", {"equal_epochs": True}, r"pack_len=64 does not support equal_epochs=True"),
    ("drop-last", {"drop_last": True}, r"pack_len=64 does not support drop_last=True"),
    ("multiple", {"batch_size_multiple": 8}, r"pack_len=64 .* pass batch_size_multiple=1"),
    (  # packing at the step time compares the fixed batch's updates: samples, not tokens
        "time-model-tokens",
        {"time_model": FLAT_STEP, "update_unit": "tokens"},
        r"time_model cuts updates .*update_unit='tokens'",
    ),
    ("row-over-budget", {"max_cost": 10}, r"pack_len=64: one row costs 4096 .*max_cost=10"),
    (  # a row is as wide as pack_len rounded up to pad_to_multiple_of: 64 -> 72
        "padded-row-over-budget",
        {"max_cost": 4100, "pad_to_multiple_of": 24},
        r"pack_len=64: one row, padded to 72 \(pad_to_multiple_of=24\), costs 5184 .*"
        r"max_cost=4100",
    ),
]:
    case(
        f"PlanOptions-pack_len-{label}",
        functools.partial(options_with, **{**PACKED, **changes}),
        VALUE,
        match,
    )
case(
    "PlanOptions-pack_len-group_by_length",
    functools.partial(
        options_with,
        **PACKED,
        time_model=FLAT_STEP,
        group_by_length=True,
    ),
    VALUE,
    r"pack_len=64 does not support group_by_length=True",
)
# like_fixed(pack_len=) drops nothing and never raises the fixed batch's budget silently
FIXED_LENS = np.array([5, 9, 3, 12] * 5)  # the fixed batch's worst of 2: cost(2, 12) = 24
for label, changes, match in [
    ("group_by_length", {"group_by_length": True}, r"pack_len=16 does not support group_by_l"),
    ("micro_batches", {"micro_batches": 8}, r"pack_len=16 .*got micro_batches=8: leave it out"),
    ("row-over-fixed-worst", {"pack_len": 4096}, r"pack_len=4096 .* pass pack_len=24 or less"),
]:
    case(
        f"like_fixed-pack_len-{label}",
        functools.partial(like_fixed, FIXED_LENS, 2, **{"pack_len": 16, **changes}),
        VALUE,
        match,
    )

# a width or a count beyond 2**53: the planner's int64 overflowed, or a width of 2**63 was taken
for name, pack_len in [("pad_to_multiple_of", None), ("pad_to_multiple_of", 16), ("pack_len", 16)]:
    for label, value, error, match in large_family(name, 1):
        packed = "" if pack_len is None else "-packed"
        given = {"pack_len": pack_len, name: value} if pack_len else {name: value}
        case(
            f"like_fixed-{name}{packed}-{label}",
            functools.partial(like_fixed, FIXED_LENS, 2, **given),
            error,
            match,
        )
for label, value, error, match in large_family("num_replicas", 1):
    case(
        f"like_fixed-num_replicas-{label}",
        functools.partial(like_fixed, FIXED_LENS, 2, num_replicas=value),
        error,
        match,
    )

# the keyword shortcuts of every entry point that takes options
SHORTCUT_ENTRIES: dict[str, Callable[..., object]] = {
    "plan_batches": lambda **kw: plan_batches(LENS, **kw),
    "find_oversize": lambda **kw: find_oversize(LENS, **kw),
    "shard_plan": lambda **kw: shard_plan([[0, 1], [2, 3, 4, 5, 6, 7]], LENS, 2, **kw),
}
for entry, call in SHORTCUT_ENTRIES.items():
    for field in ("max_cost", "cost", "order", "seed", "max_batch_size", "oversize"):
        label, value, error, match = OPTION_VALUES[field][0]
        kwargs = {"max_cost": BUDGET, field: value}
        case(f"{entry}-{field}-{label}", functools.partial(call, **kwargs), error, match)
    case(
        f"{entry}-unknown-option",
        functools.partial(call, max_cost=1, colour=3),
        TYPE,
        rf"{entry} got unknown option\(s\) colour; the options are: ",
    )
    case(
        f"{entry}-options-and-keywords",
        functools.partial(call, options=options_with(), order="none"),
        VALUE,
        rf"{entry}: give options=PlanOptions\(...\) or the options as keywords \(order=...\)",
    )
    case(
        f"{entry}-options-not-PlanOptions",
        functools.partial(call, options={"max_cost": 5}),
        TYPE,
        rf"{entry}: options must be a dynbatch.PlanOptions, got options=\{{'max_cost'",
    )
    if entry != "shard_plan":
        case(f"{entry}-no-max_cost", call, VALUE, rf"{entry} needs max_cost")


#: the files of the planner's bad-input table, one group of entry points each
PLANNER_TABLES = (
    "test_bad_input_options",
    "test_bad_input_plans",
    "test_bad_input_compute_lengths",
    "test_bad_input_stats",
    "test_bad_input_time_split",
    "test_bad_input_packing",
    "test_bad_input_pairs",
)


def test_table_is_large() -> None:
    """Over every file of the planner's table: the families produced their cases, ids unique."""
    tables = Cases(c for name in PLANNER_TABLES for c in importlib.import_module(name).CASES)
    tables.check_size(380)


@pytest.mark.parametrize("bad", CASES, ids=CASES.ids())
def test_bad_input_is_a_named_error(bad: Case) -> None:
    raises_as_the_table_says(bad)
