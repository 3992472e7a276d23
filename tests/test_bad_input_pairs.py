"""Bad (source, target) pairs are a named error, at every entry point that plans them.

One part of the bad-input table (tests/bad_input.py says how it works).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from bad_input import (
    BUDGET,
    LENS,
    TYPE,
    VALUE,
    Case,
    Cases,
    options_with,
    raises_as_the_table_says,
)
from test_bad_input_plans import LENGTH_ENTRIES  # every entry point that takes lengths

from dynbatch import (
    PlanOptions,
    compute_lengths,
    fill_device,
    find_oversize,
    like_fixed,
    plan_batches,
    plan_epoch,
    plan_stats,
    resolve_cost,
    shard_plan,
)
from dynbatch.plan.costs import PairCost
from dynbatch.plan.stats import batch_table, compare_orders
from dynbatch.plan.steptime import FLAT_STEP, StepTimeModel

CASES = Cases()
case = CASES.add

# -- (source, target) pairs (NOTE [ lengths of pairs ]) -------------------------------------------
PAIRS = np.array([[5, 7], [9, 4], [3, 3], [12, 20], [7, 9], [30, 11], [2, 2], [8, 8]])
PAIR_ENTRIES: dict[str, Callable[[Any], object]] = {
    **LENGTH_ENTRIES,
    "like_fixed": lambda x: like_fixed(x, 4),
    "compute_lengths": lambda x: compute_lengths(list(x), length_fn=lambda s: tuple(s)),
}
for entry, call in PAIR_ENTRIES.items():
    for label, value, error, match in [
        (
            "source-zero",
            [[0, 3], [4, 5]],
            VALUE,
            r"positive; lengths.*\[0, 0\]=0 \(the source of"
            if entry != "compute_lengths"
            else r"of sample 0 \(its source\) must be a whole number >= 1 .*got 0$",
        ),
        (
            "target-negative",
            [[3, 4], [4, -5]],
            VALUE,
            r"\[1, 1\]=-5 \(the target of sample 1\)"
            if entry != "compute_lengths"
            else r"of sample 1 \(its target\) must be a whole number >= 1 .*got -5$",
        ),
        ("target-fraction", [[3, 1.5]], VALUE, r"whole number.*1.5"),
        (
            "three-columns",
            [[1, 2, 3], [4, 5, 6]],
            VALUE if entry != "compute_lengths" else TYPE,
            r"1-D array of positive integers, got an array of shape \(2, 3\): give one length "
            r"per sample, or an \[N, 2\] array of \(source, target\) lengths"
            if entry != "compute_lengths"
            else r"length_fn=.* of sample 0 must be a whole number, got \(1, 2, 3\)",
        ),
    ]:
        case(f"{entry}-pairs-{label}", functools.partial(call, value), error, match)
case(
    "plan_batches-pairs-bool-side",
    lambda: plan_batches([[3, True]], BUDGET),
    TYPE,
    r"not booleans; lengths\[0, 1\]=True \(the target of sample 0\)",
)
case(
    "compute_lengths-length_fn-one-and-two",
    lambda: compute_lengths(
        ["ab", "cde", "f"], length_fn=lambda s: (len(s), 1) if len(s) > 2 else 2
    ),
    VALUE,
    r"length_fn=.* returned one length for sample 0 \(2\) and two, a \(source, target\) "
    r"pair, for sample 1 \(\(3, 1\)\): it must return one length for every sample, or a pair",
)
case(  # compare_orders (dynbatch stats' rows) takes pairs; a step time of one length cannot
    "compare_orders-pairs-step_time-of-one-length",
    lambda: compare_orders(PAIRS, PlanOptions(max_cost=BUDGET), step_time=lambda n, L: 1.0),
    VALUE,
    r"compare_orders: step_time=<function .*> is a step time of one length, \(n, L\), and the "
    r"lengths are \(source, target\) pairs",
)
case(
    "compare_orders-pairs-three-columns",
    lambda: compare_orders(np.array([[3, 4, 5]]), PlanOptions(max_cost=BUDGET)),
    VALUE,
    r"got an array of shape \(1, 3\): give one length per sample, or an \[N, 2\] array",
)
case(
    "plan_batches-pairs-cost-of-one-length",
    lambda: plan_batches(PAIRS, BUDGET, cost=lambda n, L: n * L),
    VALUE,
    r"cost=<function .*> takes one length, \(n, L\), but the lengths are \(source, target\) "
    r"pairs: give cost as a cost of two lengths, \(n, Ls, Lt\)",
)
case(
    "like_fixed-pairs-cost-of-one-length",
    lambda: like_fixed(PAIRS, 4, cost=lambda n, L: n * L),
    VALUE,
    r"cost=<function .*> takes one length, \(n, L\), but the lengths are \(source, target\)",
)
case(
    "plan_batches-cost-of-pairs-on-one-length",
    lambda: plan_batches(LENS, BUDGET, cost=PairCost()),
    VALUE,
    r"cost=PairCost\(a=0.0, b=1.0, cross=1.0\) takes two lengths, \(n, Ls, Lt\), but the "
    r"lengths are one per sample: give lengths as an \[N, 2\] array",
)
# plan_stats called the cost of pairs with two arguments: a bare TypeError
for entry, stats in (("plan_stats", plan_stats), ("batch_table", batch_table)):
    for label, cost, shown in (
        ("PairCost", PairCost(), r"PairCost\(a=0.0, b=1.0, cross=1.0\)"),
        ("callable", lambda n, Ls, Lt: n * (Ls + Lt), r"<function .*>"),
    ):
        case(
            f"{entry}-cost-of-pairs-{label}-on-one-length",
            functools.partial(stats, [3, 5, 7], [[0, 1], [2]], cost=cost),
            VALUE,
            rf"cost={shown} takes two lengths, \(n, Ls, Lt\), but the lengths are one per "
            r"sample: give lengths as an \[N, 2\] array",
        )
# a cost that cannot take (n, L) nor (n, Ls, Lt) was named by the one-length form alone
for label, cost, error, match in (
    (
        "args-raising",
        lambda *a: a[3],
        TYPE,
        r"cost\(1, 2\) raised IndexError.* \(and cost\(1, 2, 3\) raised IndexError.*\); "
        r"cost=<function .*> must take \(n, L\), or \(n, Ls, Lt\) for \(source, target\) pairs",
    ),
    (
        "keyword-only",
        lambda n, Ls, *, Lt: n * (Ls + Lt),
        TYPE,
        r"cost=<function .*> requires the keyword-only argument\(s\) Lt: a cost is called by "
        r"position, cost\(n, L\) .*, or cost\(n, Ls, Lt\) for \(source, target\) pairs",
    ),
    (
        "four-arguments",
        lambda n, Ls, Lt, extra: n * (Ls + Lt),
        TYPE,
        r"cost=<function .*> requires 4 positional arguments: a cost is called by position, "
        r"cost\(n, L\) .*, or cost\(n, Ls, Lt\) for \(source, target\) pairs",
    ),
    (
        "ufunc-of-four",
        np.frompyfunc(lambda n, Ls, Lt, extra: n, 4, 1),
        TYPE,
        r"cost=<ufunc .*> requires 4 positional arguments: .*cost\(n, Ls, Lt\) for \(source",
    ),
    (
        "unknown-name",
        "bogus",
        VALUE,
        r"cost must be 'quadratic', 'linear', 'mixed:A,B', a cost object or a callable "
        r"\(n, L\) -> float, or for \(source, target\) pairs PairCost\(\.\.\.\) or a callable "
        r"\(n, Ls, Lt\) -> float; got cost='bogus'",
    ),
):
    case(
        f"plan_batches-pairs-cost-{label}",
        functools.partial(plan_batches, PAIRS, BUDGET, cost=cost),
        error,
        match,
    )
case(
    "plan_batches-pairs-oversize",
    lambda: plan_batches(PAIRS, 500),
    VALUE,
    r"sample 3 has \(source, target\) lengths \(12, 20\) .* costs 784 alone, over "
    r"max_cost=500; 2 sample\(s\) are over budget",
)
case(
    # names the pair of fewest tokens, as one length names the shortest
    "plan_batches-pairs-all-oversize-skip",
    lambda: plan_batches(PAIRS, 1, oversize="skip"),
    VALUE,
    r"all 8 samples are over max_cost=1 even alone \(the shortest, sample 6 of \(source, target\) "
    r"lengths \(2, 2\), costs 12\); oversize='skip' would leave nothing",
)
case(
    "plan_epoch-pairs-loss_tokens-over-target",
    lambda: plan_epoch(PAIRS, options_with(), 0, loss_tokens=[8, 0, 0, 0, 0, 0, 0, 0]),
    VALUE,
    r"loss_tokens\[0\]=8 is more than the sample's target length lengths\[0, 1\]=7",
)
# a row per pair was flattened: "loss_tokens has 16 entries but lengths has 8"
for label, call in (
    ("like_fixed", lambda: like_fixed(PAIRS, 4, loss_tokens=PAIRS // 2)),
    ("plan_epoch", lambda: plan_epoch(PAIRS, options_with(), 0, loss_tokens=PAIRS // 2)),
):
    case(
        f"{label}-pairs-loss_tokens-a-row-per-pair",
        call,
        VALUE,
        r"loss_tokens must be one value per sample, got an array of shape \(8, 2\): a \(source, "
        r"target\) pair's loss is over its target, so give each pair's target loss tokens",
    )
for label, fn, error, match in [
    ("negative-a", lambda: PairCost(a=-1), VALUE, r"PairCost a must be a finite number >= 0"),
    ("bool-cross", lambda: PairCost(cross=True), TYPE, r"PairCost cross must be a finite"),
    ("all-zero", lambda: PairCost(0, 0, 0), VALUE, r"PairCost needs a > 0, b > 0 or cross > 0"),
    (
        "callable-raises",
        lambda: resolve_cost(lambda n, Ls, Lt: 1 / 0),
        TYPE,
        r"cost\(1, 2, 3\) raised ZeroDivisionError.*must take \(n, Ls, Lt\)",
    ),
    (
        "callable-decreasing",
        lambda: resolve_cost(lambda n, Ls, Lt: n * Ls / Lt),
        VALUE,
        r"cost must be nondecreasing in Lt .*but cost\(1, 1, 1\)=1 > cost\(1, 1, 2\)=0.5",
    ),
    (
        "callable-not-a-number",
        lambda: resolve_cost(lambda n, Ls, Lt: "big"),
        TYPE,
        r"cost must return a number, but cost\(1, 2, 3\) returned 'big'",
    ),
]:
    case(f"PairCost-{label}", fn, error, match)
# what does not plan pairs yet is refused by name
for label, call, match in [
    (
        "like_fixed-pack_len",
        lambda: like_fixed(PAIRS, 4, pack_len=64),
        r"packing is refused for "
        r"\(source, target\) pairs, got pack_len=64",
    ),
    (
        "PlanOptions-pack_len",
        lambda: options_with(cost=PairCost(), pack_len=64, update_size=8),
        r"pack_len=64: packing is refused for \(source, target\) pairs",
    ),
    (
        "plan_epoch-pack_len",
        lambda: plan_epoch(PAIRS, options_with(pack_len=64, update_size=8, max_cost=1e6), 0),
        r"plan_epoch: packing is refused for \(source, target\) pairs, got pack_len=64",
    ),
    # refused for pairs first, not asking for update_size (which packing of pairs never uses)
    (
        "plan_batches-pack_len-without-update_size",
        lambda: plan_batches(PAIRS, BUDGET, pack_len=64),
        r"plan_batches: packing is refused for \(source, target\) pairs, got pack_len=64",
    ),
    (
        "find_oversize-pack_len-without-update_size",
        lambda: find_oversize(PAIRS, BUDGET, pack_len=64),
        r"find_oversize: packing is refused for \(source, target\) pairs, got pack_len=64",
    ),
    (
        "shard_plan-pack_len-without-update_size",
        lambda: shard_plan([[0]], PAIRS, 1, max_cost=BUDGET, pack_len=64),
        r"shard_plan: packing is refused for \(source, target\) pairs, got pack_len=64",
    ),
    (  # the options alone do not know the lengths: the refusal of pairs is said too
        "PlanOptions-pack_len-without-update_size",
        lambda: options_with(pack_len=64),
        r"give update_size .*got update_size=None \(packing takes one length per sample: "
        r"\(source, target\) pairs are refused with pack_len\)",
    ),
    (
        "like_fixed-time_model",
        lambda: like_fixed(PAIRS, 4, time_model=StepTimeModel(c=1e-3, a=1e-5, b=0.0)),
        r"like_fixed: time_model=StepTimeModel\(.*\) is a step time of one length, \(n, L\)",
    ),
    (
        "plan_batches-time_model",
        lambda: plan_batches(PAIRS, BUDGET, time_model=FLAT_STEP, update_size=4),
        r"time_model=StepTimeModel\(.*\) is a step time of one length",
    ),
    (
        "fill_device",
        lambda: fill_device(
            PAIRS, StepTimeModel(c=1e-3, a=1e-5, b=0.0), max_cost=BUDGET, cost="linear"
        ),
        r"fill_device: time_model=StepTimeModel\(.*\) is a step time of one length",
    ),
]:
    case(f"{label}-pairs", call, VALUE, match)


@pytest.mark.parametrize("bad", CASES, ids=CASES.ids())
def test_bad_input_is_a_named_error(bad: Case) -> None:
    raises_as_the_table_says(bad)
