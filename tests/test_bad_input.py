"""Every bad input to every public entry point is a named error: the table.

Each case is a call, the error it must raise (:class:`~dynbatch.InputError`,
or :class:`~dynbatch.InputTypeError` for a value of the wrong type) and a
regex the message must match, naming the argument and, where it helps, the
value. ``dynbatch stats`` cases must exit 2 with that one line on stderr.
Families are generated (every option x every bad value) so that a new option
or entry point gets its cases by adding one line.
"""

from __future__ import annotations

import functools
import json
import math
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dynbatch import (
    Dict,
    InputError,
    InputTypeError,
    MixedCost,
    Pad,
    PlanOptions,
    Stack,
    Tuple,
    compute_lengths,
    find_oversize,
    plan_batches,
    plan_epoch,
    plan_stats,
    resolve_cost,
    scale_lr,
    shard_plan,
)
from dynbatch.cli import main
from dynbatch.stats import batch_table, compare_orders
from dynbatch.windows import accumulation_windows

VALUE = InputError  # the value is wrong
TYPE = InputTypeError  # the value has the wrong type
#: (id label, bad value, expected error, regex of the message)
Rows = list[tuple[str, Any, type[InputError], str]]

LENS = np.array([5, 9, 3, 12, 7, 30, 2, 8])
BUDGET = 2000.0  # every sample fits alone: 30**2 = 900


@dataclass(frozen=True)
class Case:
    id: str
    call: Callable[[], object]
    error: type[InputError]
    match: str


CASES: list[Case] = []


def case(id: str, call: Callable[[], object], error: type[InputError], match: str) -> None:
    CASES.append(Case(id, call, error, match))


def v(value: Any) -> str:
    """The regex of ``name=value`` as a message echoes it."""
    return re.escape(repr(value))


# -- value families -------------------------------------------------------------------------------

#: (label, value, error) for an argument that must be an int >= 0 / >= 1
NON_NEGATIVE_INT = [
    ("-1", -1, VALUE),
    ("True", True, TYPE),
    ("1.5", 1.5, TYPE),
    ("str", "3", TYPE),
    ("None", None, TYPE),
    ("float64", np.float64(2.0), TYPE),
]
POSITIVE_INT = [("0", 0, VALUE), *NON_NEGATIVE_INT]
#: for an argument that must be a positive finite number
POSITIVE_NUMBER = [
    ("0", 0, VALUE),
    ("-1", -1, VALUE),
    ("nan", math.nan, VALUE),
    ("inf", math.inf, VALUE),
    ("True", True, TYPE),
    ("str", "3", TYPE),
    ("None", None, TYPE),
    ("list", [1], TYPE),
]
BOOL = [("1", 1, TYPE), ("0", 0, TYPE), ("str", "yes", TYPE), ("None", None, TYPE)]


def int_family(name: str, values: list[tuple[str, Any, type[InputError]]], minimum: int) -> Rows:
    message = rf"{name} must be an integer >= {minimum}.*got {name}="
    return [(label, value, error, message + v(value)) for label, value, error in values]


def number_family(name: str) -> Rows:
    message = rf"{name} must be a positive finite number, got {name}="
    return [(label, value, error, message + v(value)) for label, value, error in POSITIVE_NUMBER]


def bool_family(name: str) -> Rows:
    message = rf"{name} must be True or False, got {name}="
    return [(label, value, error, message + v(value)) for label, value, error in BOOL]


def choice_family(name: str, bad: list[Any]) -> Rows:
    message = rf"{name} must be one of .*got {name}="
    return [
        (repr(value), value, VALUE if isinstance(value, str) else TYPE, message + v(value))
        for value in bad
    ]


# -- PlanOptions: every field ---------------------------------------------------------------------

COST_VALUES: Rows = [
    ("cubic", "cubic", VALUE, r"cost must be 'quadratic', 'linear', 'mixed:A,B'.*cost='cubic'"),
    ("empty", "", VALUE, r"cost must be 'quadratic'.*got cost=''"),
    ("mixed-one", "mixed:1", VALUE, r"cost 'mixed:A,B' needs two numbers, got cost='mixed:1'"),
    ("mixed-words", "mixed:a,b", VALUE, r"needs two numbers, got cost='mixed:a,b'"),
    ("mixed-negative", "mixed:-1,2", VALUE, r"MixedCost a must be a finite number >= 0, got a=-1"),
    ("mixed-zero", "mixed:0,0", VALUE, r"MixedCost needs a > 0 or b > 0"),
    ("int", 3, TYPE, r"cost must be a string or a callable \(n, L\) -> float, got cost=3"),
    ("None", None, TYPE, r"cost must be a string or a callable.*got cost=None"),
    ("tuple", lambda n, L: (n, L), TYPE, r"cost must return a number.*returned \(1, 2\)"),
    ("str", lambda n, L: "7", TYPE, r"cost must return a number.*returned '7'"),
    ("bool", lambda n, L: True, TYPE, r"cost must return a number.*returned True"),
    ("negative", lambda n, L: -1.0, VALUE, r"cost must return a finite number >= 0.*-1\.0"),
    ("nan", lambda n, L: math.nan, VALUE, r"cost must return a finite number >= 0.*nan"),
    ("one-arg", lambda n: n, TYPE, r"cost\(1, 2\) raised TypeError.*must take \(n, L\)"),
    (
        "negative-beyond-one",
        lambda n, L: np.where(n > 1, -1.0, 1.0) * n * L,
        VALUE,
        r"cost must return a number >= 0 for every \(n, L\), but cost\(2, 1\)=-2\.0",
    ),
    (
        "nan-beyond-one",
        lambda n, L: np.where(n > 1, np.nan, 1.0) * n * L,
        VALUE,
        r"cost must return a number >= 0 for every \(n, L\), but cost\(2, 1\)=nan",
    ),
    (
        "decreasing-in-n",
        lambda n, L: L * np.where(n < 10, n, 1.0),
        VALUE,
        r"cost must be nondecreasing in n .*cost\(8, 1\)=8 > cost\(16, 1\)=1",
    ),
    (
        "decreasing-in-L",
        lambda n, L: n * 100.0 / L,
        VALUE,
        r"cost must be nondecreasing in L .*cost\(1, 1\)=100 > cost\(1, 2\)=50",
    ),
    (
        "scalar-decreasing-in-n",
        lambda n, L: float(n * L) if n < 5 else 1.0,
        VALUE,
        r"cost must be nondecreasing in n .*cost\(4, 1\)=4 > cost\(8, 1\)=1",
    ),
]

OPTION_VALUES: dict[str, Rows] = {
    "max_cost": number_family("max_cost"),
    "cost": COST_VALUES,
    "order": choice_family("order", ["random", "", "Bucket", None, 1]),
    "seed": int_family("seed", NON_NEGATIVE_INT, 0),
    "max_batch_size": [
        *int_family("max_batch_size", [x for x in POSITIVE_INT if x[0] != "None"], 1)
    ],
    "batch_size_multiple": int_family("batch_size_multiple", POSITIVE_INT, 1),
    "pad_to_multiple_of": int_family("pad_to_multiple_of", POSITIVE_INT, 1),
    "oversize": choice_family("oversize", ["drop", "", None, 0]),
    "drop_last": bool_family("drop_last"),
    "bucket_width": [
        *number_family("bucket_width"),
        ("too-small", 1e-4, VALUE, r"bucket_width must be in \[0.001, 10\].*bucket_width=0.0001"),
        ("too-large", 11, VALUE, r"bucket_width must be in \[0.001, 10\].*got bucket_width=11"),
    ],
    "equal_epochs": bool_family("equal_epochs"),
    "balance": [
        ("flops", "flops", VALUE, r"balance must be one of 'tokens', 'cost'; got balance='flops'"),
        ("int", 3, TYPE, r"balance must be 'tokens', 'cost' or a callable.*got balance=3"),
        ("None", None, TYPE, r"balance must be 'tokens', 'cost' or a callable.*balance=None"),
        ("str-result", lambda n, L: "x", TYPE, r"cost must return a number.*returned 'x'"),
        ("decreasing", lambda n, L: 100.0 / n, VALUE, r"nondecreasing in n .*cost\(1, 1\)=100"),
    ],
}


def options_with(**changes: Any) -> PlanOptions:
    values = {"max_cost": BUDGET, **changes}
    return PlanOptions(**values)


for field, values in OPTION_VALUES.items():
    for label, value, error, match in values:
        case(
            f"PlanOptions-{field}-{label}",
            functools.partial(options_with, **{field: value}),
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


# -- lengths: every function that takes them ------------------------------------------------------

masked = np.ma.masked_array([3, 4, 5], mask=[False, True, False])
BAD_LENGTHS: Rows = [
    ("empty", [], VALUE, r"lengths is empty: there is nothing to batch"),
    (
        "2-D",
        [[1, 2], [3, 4]],
        VALUE,
        r"lengths must be a 1-D array of positive integers, got an array of shape \(2, 2\)",
    ),
    ("scalar", 7, TYPE, r"lengths must be a 1-D array .* shape \(\): lengths=7"),
    ("None", None, TYPE, r"lengths must be a 1-D array .* shape \(\): lengths=None"),
    ("ragged", [[1], [1, 2]], TYPE, r"lengths must be a 1-D array of positive integers"),
    ("zero", [3, 0], VALUE, r"lengths must be positive; lengths\[1\]=0"),
    ("negative", [3, -2], VALUE, r"lengths must be positive; lengths\[1\]=-2"),
    ("fraction", [3, 1.5], VALUE, r"lengths must be whole numbers; lengths\[1\]=1.5"),
    ("nan", [3, math.nan], VALUE, r"lengths must be whole numbers; lengths\[1\]=nan"),
    ("inf", [math.inf], VALUE, r"lengths must be whole numbers; lengths\[0\]=inf"),
    ("str", ["7"], TYPE, r"lengths must hold integers, got dtype <U1 \(first value '7'\)"),
    ("bool", [True, True], TYPE, r"lengths must hold integers, got dtype bool"),
    ("complex", [1 + 2j], TYPE, r"lengths must hold integers, got dtype complex128"),
    ("object", [3, None], TYPE, r"lengths must hold integers, got dtype object"),
    ("2**53", [3, 2**53], VALUE, r"lengths must be below 2\*\*53; lengths\[1\]=9007199254740992"),
    ("uint64", np.array([2**63], dtype=np.uint64), VALUE, r"below 2\*\*53; lengths\[0\]="),
    ("1e19", [1e19], VALUE, r"lengths must be below 2\*\*53; lengths\[0\]=1e\+19"),
    ("masked", masked, VALUE, r"lengths is a masked array with masked entries \(lengths\[1\]"),
]
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

# -- compute_lengths ------------------------------------------------------------------------------

DATA = [([1, 2, 3], 0), ([4], 1)]
A_DIRECTORY = tempfile.gettempdir()  # exists: a cache path that is a directory is refused


COMPUTE_CASES: list[tuple[str, Callable[[], object], type[InputError], str]] = [
    (
        "both",
        lambda: compute_lengths(DATA, length_fn=len, ref_index=0),
        VALUE,
        r"give exactly one of length_fn or ref_index.*length_fn=<built-in function len>",
    ),
    (
        "neither",
        lambda: compute_lengths(DATA),
        VALUE,
        r"give exactly one of length_fn or ref_index",
    ),
    (
        "length_fn-not-callable",
        lambda: compute_lengths(DATA, length_fn=3),
        TYPE,
        r"length_fn must be callable\(sample\) -> int, got length_fn=3",
    ),
    (
        "ref_index-missing",
        lambda: compute_lengths(DATA, ref_index=5),
        TYPE,
        r"ref_index=5 does not select a field of the sample",
    ),
    (
        "ref_index-no-size",
        lambda: compute_lengths(DATA, ref_index=1),
        TYPE,
        r"the field at ref_index=1 has no size: got int 0",
    ),
    (
        "ref_index-dict-key",
        lambda: compute_lengths([{"ids": [1]}], ref_index="text"),
        TYPE,
        r"ref_index='text' does not select a field",
    ),
    (
        "empty-field",
        lambda: compute_lengths([([], 0)], ref_index=0),
        VALUE,
        r"lengths measured by ref_index=0 must be positive; .*\[0\]=0",
    ),
    (
        "empty-dataset",
        lambda: compute_lengths([], ref_index=0),
        VALUE,
        r"lengths measured by ref_index=0 is empty",
    ),
    (
        "cache_path-directory",
        lambda: compute_lengths(DATA, ref_index=0, cache_path=A_DIRECTORY),
        VALUE,
        rf"cache_path={re.escape(repr(A_DIRECTORY))} is a directory; give a file path",
    ),
    (
        "dataset-None",
        lambda: compute_lengths(None, ref_index=0),
        TYPE,
        r"dataset must be a sized, indexable dataset .*got dataset=None",
    ),
    (
        "dataset-int",
        lambda: compute_lengths(5, ref_index=0),
        TYPE,
        r"dataset must be a sized, indexable dataset .*got dataset=5",
    ),
    (
        "dataset-generator",
        lambda: compute_lengths((x for x in DATA), ref_index=0),
        TYPE,
        r"dataset must be a sized, indexable dataset .*generator",
    ),
]
for label, result, error in [
    ("str", "7", TYPE),
    ("True", True, TYPE),
    ("None", None, TYPE),
    ("list", [1], TYPE),
    ("fraction", 1.5, VALUE),
    ("nan", math.nan, VALUE),
]:
    COMPUTE_CASES.append(
        (
            f"length_fn-returns-{label}",
            functools.partial(compute_lengths, DATA, length_fn=lambda s, r=result: r),
            error,
            rf"length_fn=.*<lambda> of sample 0 must be a whole number, got {v(result)}",
        )
    )
for label, result in [("zero", 0), ("negative", -3)]:
    COMPUTE_CASES.append(
        (
            f"length_fn-returns-{label}",
            functools.partial(compute_lengths, DATA, length_fn=lambda s, r=result: r),
            VALUE,
            rf"lengths measured by length_fn=.* must be positive; .*\[0\]={result}",
        )
    )
for label, call, error, match in COMPUTE_CASES:
    case(f"compute_lengths-{label}", call, error, match)

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

# -- collators ------------------------------------------------------------------------------------

COLLATE_CASES: list[tuple[str, Callable[[], object], type[InputError], str]] = [
    *(
        (
            f"Pad-pad_to_multiple_of-{label}",
            functools.partial(Pad, pad_to_multiple_of=value),
            error,
            match,
        )
        for label, value, error, match in int_family(
            "pad_to_multiple_of", [x for x in POSITIVE_INT if x[0] != "None"], 1
        )
    ),
    ("Pad-axis-str", lambda: Pad(axis="0"), TYPE, r"axis must be an integer, got axis='0'"),
    ("Pad-axis-True", lambda: Pad(axis=True), TYPE, r"axis must be an integer, got axis=True"),
    (
        "Pad-axis-out-of-range",
        lambda: Pad(axis=2)([[1, 2], [3]]),
        VALUE,
        r"Pad: axis=2 is out of range for samples of 1 dimension\(s\)",
    ),
    (
        "Pad-pad_right",
        lambda: Pad(pad_right="no"),
        TYPE,
        r"pad_right must be True or False, got pad_right='no'",
    ),
    (
        "Pad-ret_mask",
        lambda: Pad(ret_mask=1),
        TYPE,
        r"ret_mask must be True or False, got ret_mask=1",
    ),
    (
        "Pad-ret_length-dtype",
        lambda: Pad(ret_length="int65"),
        TYPE,
        r"ret_length must be None, True or an integer dtype such as 'int64', "
        r"got ret_length='int65'",
    ),
    (
        "Pad-ret_length-float",
        lambda: Pad(ret_length="float32"),
        TYPE,
        r"ret_length must be None, True or an integer dtype.*got ret_length='float32'",
    ),
    (
        "Pad-dtype",
        lambda: Pad(dtype="nonsense"),
        TYPE,
        r"dtype must be None or a numpy dtype, got dtype='nonsense'",
    ),
    ("Pad-empty-batch", lambda: Pad()([]), VALUE, r"Pad got an empty batch: nothing to collate"),
    (
        "Pad-mixed-ndim",
        lambda: Pad()([[1, 2], [[3]]]),
        VALUE,
        r"Pad: sample 1 has shape \(1, 1\), sample 0 has shape \(2,\); .*differ only along axis=0",
    ),
    (
        "Pad-other-axis-differs",
        lambda: Pad()([[[1, 2]], [[3]]]),
        VALUE,
        r"Pad: sample 1 has shape \(1, 1\), sample 0 has shape \(1, 2\)",
    ),
    ("Stack-axis", lambda: Stack(axis=1.5), TYPE, r"axis must be an integer, got axis=1.5"),
    (
        "Stack-dtype",
        lambda: Stack(dtype="nonsense"),
        TYPE,
        r"dtype must be None or a numpy dtype, got dtype='nonsense'",
    ),
    ("Stack-empty-batch", lambda: Stack()([]), VALUE, r"Stack got an empty batch"),
    (
        "Stack-ragged",
        lambda: Stack()([[1, 2], [3]]),
        VALUE,
        r"Stack: sample 1 has shape \(1,\), sample 0 has shape \(2,\); stacked samples must match",
    ),
    (
        "Tuple-not-callable",
        lambda: Tuple(Pad(), 3),
        TYPE,
        r"Tuple takes batchify functions; fn\[1\]=3 is not callable",
    ),
    (
        "Tuple-list-and-args",
        lambda: Tuple([Pad()], Stack()),
        VALUE,
        r"Tuple takes Tuple\(A, B, C\) or Tuple\(\[A, B, C\]\), not both",
    ),
    ("Tuple-no-functions", lambda: Tuple([]), VALUE, r"Tuple needs at least one batchify function"),
    (
        "Tuple-field-count",
        lambda: Tuple(Pad(), Stack())([([1], 0, 5)]),
        VALUE,
        r"Tuple has 2 functions but samples have 3 fields",
    ),
    ("Tuple-empty-batch", lambda: Tuple(Pad(), Stack())([]), VALUE, r"Tuple got an empty batch"),
    (
        "Tuple-sample-not-sequence",
        lambda: Tuple(Pad(), Stack())([5]),
        TYPE,
        r"Tuple: sample 0 must be a tuple or list of 2 fields, got 5",
    ),
    (
        "Dict-not-mapping",
        lambda: Dict([Pad()]),
        TYPE,
        r"Dict takes a dict of field name -> batchify function",
    ),
    (
        "Dict-not-callable",
        lambda: Dict({"ids": 3}),
        TYPE,
        r"Dict takes batchify functions; fn\['ids'\]=3 is not callable",
    ),
    (
        "Dict-missing-key",
        lambda: Dict({"ids": Pad()})([{"text": [1]}]),
        VALUE,
        r"Dict: sample 0 has no field 'ids' \(its fields: \['text'\]\)",
    ),
    (
        "Dict-sample-not-mapping",
        lambda: Dict({"ids": Pad()})([[1, 2]]),
        TYPE,
        r"Dict: sample 0 must be a dict with field 'ids', got \[1, 2\]",
    ),
    ("Dict-empty-batch", lambda: Dict({"ids": Pad()})([]), VALUE, r"Dict got an empty batch"),
]
for label, call, error, match in COLLATE_CASES:
    case(label, call, error, match)

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
for label, value, error, match in int_family(
    "fixed_batch_size", [x for x in POSITIVE_INT if x[0] != "None"], 1
):
    case(
        f"compare_orders-fixed_batch_size-{label}",
        functools.partial(compare_orders, LENS, options_with(), fixed_batch_size=value),
        error,
        match,
    )

# -- training and windows -------------------------------------------------------------------------

SCALE_LR = {"base_lr": 1e-4, "batch": 64, "reference_batch": 16}
for arg in SCALE_LR:
    for label, value, error, match in number_family(arg):
        case(
            f"scale_lr-{arg}-{label}",
            functools.partial(scale_lr, **{**SCALE_LR, arg: value}),
            error,
            match,
        )
for label, value, error, match in choice_family("rule", ["cubic", "", None, 1]):
    case(
        f"scale_lr-rule-{label}", functools.partial(scale_lr, **SCALE_LR, rule=value), error, match
    )

for label, value, error, match in number_family("target"):
    if value is None:
        continue  # None: a step after every micro-batch
    case(
        f"accumulation_windows-target-{label}",
        functools.partial(accumulation_windows, [5, 3], value),
        error,
        match,
    )
for label, value, error, match in [
    ("negative", [5, -3], VALUE, r"step_counts must be finite numbers >= 0; step_counts\[1\]=-3"),
    ("nan", [5, math.nan], VALUE, r"step_counts must be finite numbers >= 0; step_counts\[1\]=nan"),
    ("str", ["5"], TYPE, r"step_counts must be numbers, got dtype <U1"),
    ("bool", [True], TYPE, r"step_counts must be numbers, got dtype bool"),
    ("2-D", [[5, 3]], VALUE, r"step_counts must be 1-D, got shape \(1, 2\)"),
]:
    case(
        f"accumulation_windows-step_counts-{label}",
        functools.partial(accumulation_windows, value, 8),
        error,
        match,
    )

# -- samplers -------------------------------------------------------------------------------------

paddle = pytest.importorskip("paddle")
from dynbatch import (  # noqa: E402  (after paddle: these need it)
    DatasetForDBL,
    DistributedDynamicBatchSampler,
    DynamicBatchSampler,
    GradientAccumulator,
    VisualDLHook,
    get_dynamic_batch_loader,
)


def sampler(**kwargs: Any) -> DynamicBatchSampler:
    return DynamicBatchSampler(**{"lengths": LENS, "max_cost": BUDGET, **kwargs})


for field, values in OPTION_VALUES.items():
    for label, value, error, match in values:
        if field == "max_cost" and value is None:
            continue  # None: not given (the no-max_cost case)
        kwargs = {"max_cost": BUDGET, field: value}
        case(
            f"DynamicBatchSampler-{field}-{label}",
            functools.partial(DynamicBatchSampler, lengths=LENS, **kwargs),
            error,
            match,
        )
for label, value, error, match in BAD_LENGTHS:
    if value is None:
        continue  # None: not given (the nothing case)
    case(
        f"DynamicBatchSampler-lengths-{label}",
        functools.partial(sampler, lengths=value),
        error,
        match,
    )


class Stream(paddle.io.IterableDataset):  # type: ignore[misc]
    def __iter__(self):  # type: ignore[no-untyped-def]
        yield from DATA


ITERABLE = r"an iterable dataset .* is not supported yet: the planner needs every length"
SAMPLER_CASES: list[tuple[str, Callable[[], object], type[InputError], str]] = [
    (
        "dataset-iterator",
        lambda: DynamicBatchSampler(iter([1, 2]), lengths=[3, 4], max_cost=100),
        TYPE,
        rf"dataset has no len\(\) \(got a list_iterator\): {ITERABLE}",
    ),
    (
        "dataset-IterableDataset",
        lambda: DynamicBatchSampler(Stream(), lengths=[3, 4], max_cost=100),
        TYPE,
        rf"dataset is a paddle.io.IterableDataset \(Stream\): {ITERABLE}",
    ),
    (
        "dataset-IterableDataset-length_fn",
        lambda: DynamicBatchSampler(Stream(), length_fn=len, max_cost=100),
        TYPE,
        rf"dataset is a paddle.io.IterableDataset \(Stream\): {ITERABLE}",
    ),
    (
        "no-max_cost",
        lambda: DynamicBatchSampler(lengths=LENS),
        VALUE,
        r"DynamicBatchSampler needs max_cost",
    ),
    (
        "unknown-option",
        lambda: sampler(colour=3),
        TYPE,
        r"DynamicBatchSampler got unknown option\(s\) colour",
    ),
    (
        "options-and-keywords",
        lambda: DynamicBatchSampler(lengths=LENS, options=options_with(), seed=3),
        VALUE,
        r"DynamicBatchSampler: give options=PlanOptions\(...\) or the options as keywords",
    ),
    (
        "options-not-PlanOptions",
        lambda: DynamicBatchSampler(lengths=LENS, options="fast"),
        TYPE,
        r"options must be a dynbatch.PlanOptions, got options='fast'",
    ),
    (
        "lengths-and-length_fn",
        lambda: sampler(dataset=DATA, length_fn=len),
        VALUE,
        r"give lengths or a way to measure them \(length_fn / ref_index\), not both",
    ),
    (
        "lengths-size-mismatch",
        lambda: sampler(dataset=DATA),
        VALUE,
        r"lengths has 8 entries but the dataset has 2 samples",
    ),
    (
        "nothing",
        lambda: DynamicBatchSampler(max_cost=BUDGET),
        VALUE,
        r"give lengths=..., or a dataset with length_fn=... or ref_index=...",
    ),
    (
        "dataset-alone",
        lambda: DynamicBatchSampler(DATA, max_cost=BUDGET),
        VALUE,
        r"a dataset alone does not say how long its samples are",
    ),
    (
        "length_fn-returns-str",
        lambda: DynamicBatchSampler(DATA, length_fn=lambda s: "7", max_cost=BUDGET),
        TYPE,
        r"length_fn=.* of sample 0 must be a whole number, got '7'",
    ),
    (
        "ref_index-no-size",
        lambda: DynamicBatchSampler(DATA, ref_index=1, max_cost=BUDGET),
        TYPE,
        r"the field at ref_index=1 has no size",
    ),
    (
        "cache_path-directory",
        lambda: DynamicBatchSampler(DATA, ref_index=0, max_cost=BUDGET, cache_path=A_DIRECTORY),
        VALUE,
        r"cache_path=.* is a directory; give a file path such as lengths.npz",
    ),
    (
        "oversize-error",
        lambda: sampler(max_cost=500),
        VALUE,
        r"sample 5 has length 30 .*1 sample\(s\) are over budget",
    ),
]
for label, call, error, match in SAMPLER_CASES:
    case(f"DynamicBatchSampler-{label}", call, error, match)
for label, value, error, match in int_family("epoch", NON_NEGATIVE_INT, 0):
    case(
        f"DynamicBatchSampler.set_epoch-{label}",
        functools.partial(lambda x: sampler().set_epoch(x), value),
        error,
        match,
    )
    if value is not None:  # None: the current epoch
        case(
            f"DynamicBatchSampler.epoch_plan-{label}",
            functools.partial(lambda x: sampler().epoch_plan(x), value),
            error,
            match,
        )
    case(
        f"DynamicBatchSampler.len_for_epochs-{label}",
        functools.partial(lambda x: sampler().len_for_epochs([0, x]), value),
        error,
        match,
    )
for label, value, error, match in int_family(
    "consumed_batches", [x for x in NON_NEGATIVE_INT if x[0] != "None"], 0
):
    case(
        f"DynamicBatchSampler.state_dict-{label}",
        functools.partial(lambda x: sampler().state_dict(consumed_batches=x), value),
        error,
        match,
    )
case(
    "DynamicBatchSampler.state_dict-past-the-end",
    lambda: sampler().state_dict(consumed_batches=10**6),
    VALUE,
    r"consumed_batches must be in \[0, \d+\] \(batches in epoch 0\), got consumed_batches=1000000",
)


def load(state: Any) -> None:
    sampler().load_state_dict(state)


def saved(**changes: Any) -> dict[str, Any]:
    state = sampler().state_dict()
    state.update(changes)
    return state


def without(key: str) -> dict[str, Any]:
    state = sampler().state_dict()
    del state[key]
    return state


LOAD_CASES: list[tuple[str, Callable[[], Any], type[InputError], str]] = [
    (
        "None",
        lambda: None,
        TYPE,
        r"state must be the dict that state_dict\(\) returned, got NoneType",
    ),
    ("int", lambda: 3, TYPE, r"state must be the dict that state_dict\(\) returned, got int"),
    ("list", lambda: [], TYPE, r"state must be the dict that state_dict\(\) returned, got list"),
    ("empty", lambda: {}, VALUE, r"not a dynbatch sampler state: missing keys \['version'"),
    *(
        (
            f"missing-{k}",
            functools.partial(without, k),
            VALUE,
            rf"not a dynbatch sampler state: missing keys \['{k}'\]",
        )
        for k in ("version", "epoch", "position", "num_replicas", "lengths", "options", "plan")
    ),
    ("version", lambda: saved(version=1), VALUE, r"sampler state version 1 is not 2"),
    *(
        (
            f"epoch-{label}",
            functools.partial(saved, epoch=value),
            error,
            rf"state\['epoch'\] must be an integer >= 0, got state\['epoch'\]={v(value)}",
        )
        for label, value, error in NON_NEGATIVE_INT
    ),
    *(
        (
            f"position-{label}",
            functools.partial(saved, position=value),
            error,
            rf"state\['position'\] must be an integer >= 0, got state\['position'\]={v(value)}",
        )
        for label, value, error in NON_NEGATIVE_INT
    ),
    (
        "position-past-the-end",
        lambda: saved(position=10**6),
        VALUE,
        r"state\['position'\]=1000000 is past the \d+ batches of epoch 0",
    ),
    (
        "num_replicas",
        lambda: saved(num_replicas=2),
        VALUE,
        r"saved with num_replicas=2, this sampler has num_replicas=1",
    ),
    *(
        (
            f"num_replicas-{label}",
            functools.partial(saved, num_replicas=value),
            TYPE,
            rf"state\['num_replicas'\] must be an integer >= 1, got state\['num_replicas'\]="
            rf"{v(value)} \({type(value).__name__}\)",
        )
        for label, value in [("str", "1"), ("float", 1.0), ("True", True), ("None", None)]
    ),
    *(
        (
            f"{key}-{label}",
            functools.partial(saved, **{key: value}),
            TYPE,
            rf"state\['{key}'\] must be a str \(a digest\), got state\['{key}'\]={v(value)} "
            rf"\({type(value).__name__}\)",
        )
        for key in ("lengths", "plan")
        for label, value in [("None", None), ("int", 3), ("bytes", b"00")]
    ),
    (
        "version-str",
        lambda: saved(version="2"),
        TYPE,
        r"state\['version'\] must be the integer 2, got state\['version'\]='2' \(str\)",
    ),
    (
        "lengths",
        lambda: saved(lengths="0" * 32),
        VALUE,
        r"this sampler state was saved for different lengths",
    ),
    (
        "options-differ",
        lambda: saved(options={**sampler().options.fingerprint(), "max_cost": 999.0}),
        VALUE,
        r"saved with other options, so the plan differs: max_cost: saved 999.0, here 2000.0",
    ),
    *(
        (
            f"options-seed-{label}",
            functools.partial(
                lambda x: saved(options={**sampler().options.fingerprint(), "seed": x}), value
            ),
            VALUE,
            rf"saved with other options, so the plan differs: seed: saved {v(value)} "
            rf"\({type(value).__name__}\), here 0 \(int\)",
        )
        for label, value in [("str", "0"), ("False", False)]
    ),
    (
        "options-partial",
        lambda: saved(options={"max_cost": 999.0}),
        VALUE,
        r"state\['options'\] must hold every option \(balance, .*\), got \{'max_cost': 999.0\}",
    ),
    (
        "options-not-dict",
        lambda: saved(options="fast"),
        TYPE,
        r"state\['options'\] must be a dict, got 'fast'",
    ),
    ("plan", lambda: saved(plan="0" * 32), VALUE, r"saved for another plan of epoch 0"),
]
for label, state, error, match in LOAD_CASES:
    case(
        f"DynamicBatchSampler.load_state_dict-{label}",
        functools.partial(lambda make: load(make()), state),
        error,
        match,
    )


def distributed(**kwargs: Any) -> DistributedDynamicBatchSampler:
    args = {"lengths": LENS, "max_cost": BUDGET, "num_replicas": 2, "rank": 0, **kwargs}
    return DistributedDynamicBatchSampler(**args)


for label, value, error, match in int_family(
    "num_replicas", [x for x in POSITIVE_INT if x[0] != "None"], 1
):
    case(
        f"DistributedDynamicBatchSampler-num_replicas-{label}",
        functools.partial(distributed, num_replicas=value),
        error,
        match,
    )
for label, value, error, match in int_family(
    "rank", [x for x in NON_NEGATIVE_INT if x[0] != "None"], 0
):
    case(
        f"DistributedDynamicBatchSampler-rank-{label}",
        functools.partial(distributed, rank=value),
        error,
        match,
    )
case(
    "DistributedDynamicBatchSampler-rank-too-large",
    lambda: distributed(rank=2),
    VALUE,
    r"rank must be in \[0, 1\], got rank=2",
)
for field in ("max_cost", "order", "oversize", "drop_last", "equal_epochs", "balance"):
    label, value, error, match = OPTION_VALUES[field][0]
    case(
        f"DistributedDynamicBatchSampler-{field}-{label}",
        functools.partial(distributed, **{field: value}),
        error,
        match,
    )
case(
    "DistributedDynamicBatchSampler.load_state_dict-num_replicas",
    lambda: distributed().load_state_dict(sampler().state_dict()),
    VALUE,
    r"saved with num_replicas=1, this sampler has num_replicas=2",
)

# -- GradientAccumulator --------------------------------------------------------------------------


def model() -> Any:
    paddle.seed(0)
    return paddle.nn.Linear(2, 1)


def accumulator(**kwargs: Any) -> GradientAccumulator:
    net = kwargs.pop("model", None) or model()
    opt = kwargs.pop("optimizer", None) or paddle.optimizer.SGD(parameters=net.parameters())
    return GradientAccumulator(net, opt, **kwargs)


def backward(loss_sum: Any = "tensor", count: Any = 2) -> bool:
    net = model()
    acc = GradientAccumulator(net, paddle.optimizer.SGD(parameters=net.parameters()))
    if isinstance(loss_sum, str) and loss_sum == "tensor":
        loss_sum = net(paddle.ones([2, 2])).sum()
    return acc.backward(loss_sum, count)


#: an open window as ``GradientAccumulator.state_dict()`` saves it, for ``model()``
WINDOW = {
    "micro_batches": 1,
    "count": 2.0,
    "bad": 0.0,
    "grads": {"weight": np.zeros((2, 1), "float32"), "bias": np.zeros(1, "float32")},
}


def window_state(window: Any) -> dict[str, Any]:
    return {"optimizer_steps": 0, "skipped_steps": 0, "window": window}


ACC_CASES: list[tuple[str, Callable[[], object], type[InputError], str]] = [
    (
        "model-None",
        lambda: GradientAccumulator(None, object()),
        TYPE,
        r"model must be a paddle.nn.Layer \(with parameters\), got model=None",
    ),
    (
        "model-int",
        lambda: GradientAccumulator(3, object()),
        TYPE,
        r"model must be a paddle.nn.Layer \(with parameters\), got model=3",
    ),
    (
        "optimizer-None",
        lambda: GradientAccumulator(model(), None),
        TYPE,
        r"optimizer must be a paddle optimizer \(with step, clear_grad\), got optimizer=None",
    ),
    (
        "optimizer-str",
        lambda: GradientAccumulator(model(), "sgd"),
        TYPE,
        r"optimizer must be a paddle optimizer .*got optimizer='sgd'",
    ),
    (
        "sampler-int",
        lambda: accumulator(sampler=3),
        TYPE,
        r"sampler must be a dynbatch sampler .*got builtins.int",
    ),
    (
        "sampler-list",
        lambda: accumulator(sampler=[[0, 1]]),
        TYPE,
        r"sampler must be a dynbatch sampler .*got builtins.list",
    ),
    (
        "sampler-paddle",
        lambda: accumulator(sampler=paddle.io.BatchSampler(DATA, batch_size=2)),
        TYPE,
        r"sampler must be a dynbatch sampler .*got paddle.io.*BatchSampler",
    ),
    (
        "target-without-sampler",
        lambda: accumulator(target=8),
        VALUE,
        r"target needs the sampler: windows are cut on its plan",
    ),
    (
        "scaler-int",
        lambda: accumulator(scaler=3),
        TYPE,
        r"scaler must be a GradScaler \(with scale, unscale_, step, update\), got scaler=3",
    ),
    (
        "lr_scheduler-int",
        lambda: accumulator(lr_scheduler=3),
        TYPE,
        r"lr_scheduler must be an LR scheduler \(with step\), got lr_scheduler=3",
    ),
    (
        "set_state_dict-None",
        lambda: accumulator().set_state_dict(None),
        VALUE,
        r"state must be the dict that GradientAccumulator.state_dict\(\) returned, got NoneType",
    ),
    (
        "set_state_dict-empty",
        lambda: accumulator().set_state_dict({}),
        VALUE,
        r"state must be the dict that GradientAccumulator.state_dict\(\) returned, got dict",
    ),
    (
        "steps_per_epoch-no-sampler",
        lambda: accumulator().steps_per_epoch(),
        VALUE,
        r"steps_per_epoch needs the sampler whose plan the loop follows",
    ),
    *(
        (
            f"target-{label}",
            functools.partial(accumulator, sampler=sampler(), target=value),
            error,
            match,
        )
        for label, value, error, match in number_family("target")
        if value is not None
    ),
    *(
        (f"unit-{label}", functools.partial(accumulator, unit=value), error, match)
        for label, value, error, match in choice_family("unit", ["rows", "", 1])
    ),
    (
        "backward-loss_sum-float",
        lambda: backward(loss_sum=1.5),
        TYPE,
        r"loss_sum must be a paddle.Tensor .*got float",
    ),
    (
        "backward-loss_sum-numpy",
        lambda: backward(loss_sum=np.float32(1.5)),
        TYPE,
        r"loss_sum must be a paddle.Tensor .*got float32",
    ),
    (
        "backward-loss_sum-None",
        lambda: backward(loss_sum=None),
        TYPE,
        r"loss_sum must be a paddle.Tensor .*got NoneType",
    ),
    *(
        (
            f"backward-count-{label}",
            functools.partial(backward, count=value),
            error,
            rf"count must be .*got count={v(value)}",
        )
        for label, value, error in [
            ("-1", -1, VALUE),
            ("nan", math.nan, VALUE),
            ("inf", math.inf, VALUE),
            ("True", True, TYPE),
            ("str", "3", TYPE),
            ("None", None, TYPE),
        ]
    ),
    (
        "backward-count-tensor",
        lambda: backward(count=paddle.to_tensor([1.0, 2.0])),
        VALUE,
        r"count must be a single number, got a tensor of shape .*\[2\]",
    ),
    *(
        (
            f"backward-count-tensor-{label}",
            functools.partial(lambda x: backward(count=paddle.to_tensor([x])), value),
            VALUE,
            rf"count must be a finite number >= 0, got count={v(value)} \(a paddle.Tensor\)",
        )
        for label, value in [("-5", -5.0), ("nan", math.nan), ("-inf", -math.inf)]
    ),
    *(
        (
            f"set_state_dict-{key}-{label}",
            functools.partial(
                lambda k, x: accumulator().set_state_dict({**window_state(None), k: x}), key, value
            ),
            error,
            rf"state\['{key}'\] must be an integer >= 0, got state\['{key}'\]={v(value)}",
        )
        for key in ("optimizer_steps", "skipped_steps")
        for label, value, error in NON_NEGATIVE_INT
    ),
    *(
        (
            f"set_state_dict-window-{label}",
            functools.partial(lambda w: accumulator().set_state_dict(window_state(w)), window),
            error,
            match,
        )
        for label, window, error, match in [
            ("str", "window", TYPE, r"state\['window'\] must be None or a dict .*got 'window'"),
            (
                "no-grads",
                {"micro_batches": 1, "count": 2.0, "bad": 0.0},
                VALUE,
                r"state\['window'\] lacks the key\(s\) grads",
            ),
            (
                "micro_batches-str",
                {**WINDOW, "micro_batches": "1"},
                TYPE,
                r"state\['window'\]\['micro_batches'\] must be an integer >= 1, got .*='1'",
            ),
            (
                "count-negative",
                {**WINDOW, "count": -2.0},
                VALUE,
                r"state\['window'\]\['count'\] must be a finite number >= 0, got .*=-2.0",
            ),
            (
                "bad-nan",
                {**WINDOW, "bad": math.nan},
                VALUE,
                r"state\['window'\]\['bad'\] must be a finite number >= 0, got .*=nan",
            ),
            (
                "grads-list",
                {**WINDOW, "grads": [1.0]},
                TYPE,
                r"state\['window'\]\['grads'\] must be a dict of parameter name to gradient",
            ),
            (
                "grads-unknown",
                {**WINDOW, "grads": {"colour": np.zeros(2)}},
                VALUE,
                r"the saved window has gradients for unknown parameters \['colour'\]",
            ),
            (
                "grads-shape",
                {**WINDOW, "grads": {"weight": np.zeros((3, 3), "float32")}},
                VALUE,
                r"state\['window'\]\['grads'\]\['weight'\] has shape \(3, 3\), but the "
                r"parameter has shape \(2, 1\)",
            ),
            (
                "grads-str",
                {**WINDOW, "grads": {"weight": "x"}},
                TYPE,
                r"state\['window'\]\['grads'\]\['weight'\] must be an array of numbers, "
                r"got 'x'",
            ),
        ]
    ),
]
for label, call, error, match in ACC_CASES:
    case(f"GradientAccumulator-{label}", call, error, match)

# -- VisualDLHook ---------------------------------------------------------------------------------

pytest.importorskip("visualdl")
NO_LOGS = str(Path(A_DIRECTORY) / "dynbatch-bad-input-logs")  # a case that fails would write here
HOOK_CASES: list[tuple[str, Callable[[], object], type[InputError], str]] = [
    ("logdir-int", lambda: VisualDLHook(5), TYPE, r"logdir must be a directory path, got logdir=5"),
    (
        "logdir-None",
        lambda: VisualDLHook(None),
        TYPE,
        r"logdir must be a directory path, got logdir=None",
    ),
    (
        "logdir-bytes",
        lambda: VisualDLHook(b"logs"),
        TYPE,
        r"logdir must be a directory path, got logdir=b'logs'",
    ),
    (
        "sampler-int",
        lambda: VisualDLHook(NO_LOGS, 3),
        TYPE,
        r"sampler must be a dynbatch sampler .*got builtins.int",
    ),
    (
        "sampler-list",
        lambda: VisualDLHook(NO_LOGS, [[0, 1]]),
        TYPE,
        r"sampler must be a dynbatch sampler .*got builtins.list",
    ),
    (
        "progress-str",
        lambda: VisualDLHook(NO_LOGS, progress="yes"),
        TYPE,
        r"progress must be True or False, got progress='yes'",
    ),
    (
        "progress-int",
        lambda: VisualDLHook(NO_LOGS, progress=1),
        TYPE,
        r"progress must be True or False, got progress=1",
    ),
]
for label, call, error, match in HOOK_CASES:
    case(f"VisualDLHook-{label}", call, error, match)

# -- the study's API ------------------------------------------------------------------------------

STUDY = [(list(range(n)), n % 2) for n in (3, 9, 4, 12, 5)]


def study(**kwargs: Any) -> DatasetForDBL:
    args = {"data": STUDY, "controller": 2000, **kwargs}
    return DatasetForDBL(**args)


STUDY_CASES: list[tuple[str, Callable[[], object], type[InputError], str]] = [
    *(
        (
            f"controller-{label}",
            functools.partial(study, controller=value),
            error,
            match.replace("max_cost", "controller"),
        )
        for label, value, error, match in number_family("controller")
    ),
    ("data-empty", lambda: study(data=[]), VALUE, r"data is empty: there is nothing to batch"),
    (
        "data-None",
        lambda: study(data=None),
        TYPE,
        r"data must be a sized, indexable dataset .*got data=None",
    ),
    (
        "data-int",
        lambda: study(data=5),
        TYPE,
        r"data must be a sized, indexable dataset .*got data=5",
    ),
    *(
        (
            f"uprank-{label}",
            functools.partial(study, uprank=value),
            TYPE,
            rf"uprank must be None, True or False, got uprank={v(value)}",
        )
        for label, value in [("1", 1), ("0", 0), ("str", "yes")]
    ),
    (
        "ref_index-missing",
        lambda: study(ref_index=5),
        TYPE,
        r"ref_index=5 does not select a field of the sample",
    ),
    (
        "ref_index-no-size",
        lambda: study(ref_index=1),
        TYPE,
        r"the field at ref_index=1 has no size",
    ),
    *(
        (f"shuffle-{label}", functools.partial(study, shuffle=value), error, match)
        for label, value, error, match in bool_family("shuffle")
    ),
    *(
        (f"seed-{label}", functools.partial(study, seed=value), error, match)
        for label, value, error, match in int_family("seed", NON_NEGATIVE_INT, 0)
    ),
    *(
        (
            f"set_epoch-{label}",
            functools.partial(lambda x: study().set_epoch(x), value),
            error,
            match,
        )
        for label, value, error, match in int_family("epoch", NON_NEGATIVE_INT, 0)
    ),
]
for label, call, error, match in STUDY_CASES:
    case(f"DatasetForDBL-{label}", call, error, match)


def loader(**kwargs: Any) -> Any:
    args = {"data": STUDY, "controller": 2000, "collate_fn": list, **kwargs}
    return get_dynamic_batch_loader(**args)


for label, call, error, match in [
    (
        "collate_fn-None",
        lambda: loader(collate_fn=None),
        TYPE,
        r"collate_fn must be callable\(samples\) -> batch, got collate_fn=None",
    ),
    (
        "collate_fn-int",
        lambda: loader(collate_fn=3),
        TYPE,
        r"collate_fn must be callable\(samples\) -> batch, got collate_fn=3",
    ),
    (
        "controller-0",
        lambda: loader(controller=0),
        VALUE,
        r"controller must be a positive finite number, got controller=0",
    ),
    ("uprank-1", lambda: loader(uprank=1), TYPE, r"uprank must be None, True or False"),
    ("data-empty", lambda: loader(data=[]), VALUE, r"data is empty"),
    *(
        (f"fresh_each_pass-{label}", functools.partial(loader, fresh_each_pass=value), error, match)
        for label, value, error, match in bool_family("fresh_each_pass")
    ),
]:
    case(f"get_dynamic_batch_loader-{label}", call, error, match)


# -- dynbatch stats -------------------------------------------------------------------------------
#: name -> file content: bytes, or a numpy array saved as .npy
CLI_FILES: dict[str, Any] = {
    "ok.npy": np.array([3, 4, 5]),
    "str.npy": np.array(["a", "b"]),
    "complex.npy": np.array([1 + 2j]),
    "datetime.npy": np.array(["2020-01-01"], dtype="datetime64[D]"),
    "bool.npy": np.array([True, False]),
    "empty.npy": np.array([], dtype=np.int64),
    "2d.npy": np.array([[3, 4]]),
    "scalar.npy": np.array(7),
    "negative.npy": np.array([3, -2, 5]),
    "zero.npy": np.array([3, 0, 5]),
    "nan.npy": np.array([3.0, np.nan]),
    "fraction.npy": np.array([3.0, 2.5]),
    "huge.npy": np.array([3, 2**60], dtype=np.uint64),
    "over.npy": np.array([10, 20, 300, 40, 500]),
    "zero-bytes.npy": b"",
    "text.npy": b"3\n4\n",
    "reviews.csv": b"label,review\n1,good\n0,bad\n",
    "empty-row.csv": b'label,review\n1,good\n0,""\n1,fine\n',
    "short-row.csv": b"label,review\n1,good\n0\n",
    "header-only.csv": b"label,review\n",
    "empty.csv": b"",
    "latin1.csv": b"review\ncaf\xe9\n",
    "reviews.tsv": b"label\ttext_a\n1\tgood\n",
    "number.jsonl": b"5\n",
    "list.jsonl": b"[1, 2]\n",
    "string.jsonl": b'"text"\n',
    "null.jsonl": b'{"text": null}\n',
    "int.jsonl": b'{"text": 5}\n',
    "bool.jsonl": b'{"text": true}\n',
    "object.jsonl": b'{"text": {"a": 1}}\n',
    "broken.jsonl": b'{"text": "a"}\n{oops\n',
    "missing.jsonl": b'{"body": "a"}\n',
    "empty-text.jsonl": b'{"text": ""}\n',
    "reviews.txt": b"good\nbad\n",
    "empty-line.txt": b"good\n\nbad\n",
    "empty.txt": b"",
    "latin1.txt": b"caf\xe9\n",
    "vocab.txt": b"[PAD]\n[UNK]\ngood\n",
    "empty-vocab.txt": b"\n",
    "latin1-vocab.txt": b"caf\xe9\n",
}


@pytest.fixture(scope="module")
def cli_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli")
    for name, content in CLI_FILES.items():
        if isinstance(content, bytes):
            (root / name).write_bytes(content)
        else:
            np.save(root / name, content)
    (root / "a-directory.csv").mkdir()
    return root


#: (id, argv after "stats" with {dir} for the files' directory, regex of the one stderr line)
CLI_CASES: list[tuple[str, list[str], str]] = []


def cli(id: str, argv: list[str], match: str) -> None:
    CLI_CASES.append((id, argv, match))


OK = ["{dir}/ok.npy"]
FLAG_VALUES: dict[str, list[tuple[str, str]]] = {
    "--max-cost": [
        ("0", r"--max-cost must be a positive finite number, got --max-cost=0"),
        ("-1", r"--max-cost must be a positive finite number, got --max-cost=-1"),
        ("nan", r"--max-cost must be a positive finite number, got --max-cost=nan"),
        ("inf", r"--max-cost must be a positive finite number, got --max-cost=inf"),
        ("abc", r"argument --max-cost: invalid float value: 'abc'"),
        ("", r"argument --max-cost: invalid float value: ''"),
    ],
    "--cost": [
        ("cubic", r"--cost must be 'quadratic', 'linear', 'mixed:A,B'.*got --cost='cubic'"),
        ("mixed:1", r"cost 'mixed:A,B' needs two numbers, got --cost='mixed:1'"),
        ("mixed:a,b", r"needs two numbers, got --cost='mixed:a,b'"),
        ("mixed:-1,2", r"--cost=mixed:-1,2: MixedCost a must be a finite number >= 0, got a=-1"),
        ("mixed:0,0", r"--cost=mixed:0,0: MixedCost needs a > 0 or b > 0"),
    ],
    "--seed": [
        ("-1", r"--seed must be an integer >= 0, got --seed=-1"),
        ("x", r"argument --seed: invalid int value: 'x'"),
        ("1.5", r"argument --seed: invalid int value: '1.5'"),
    ],
    "--oversize": [
        ("maybe", r"argument --oversize: invalid choice: 'maybe' \(choose from"),
    ],
    "--bucket-width": [
        ("0", r"--bucket-width must be a positive finite number, got --bucket-width=0"),
        ("-1", r"--bucket-width must be a positive finite number, got --bucket-width=-1"),
        ("1e-4", r"--bucket-width must be in \[0.001, 10\] .*got --bucket-width=0.0001"),
        ("11", r"--bucket-width must be in \[0.001, 10\] .*got --bucket-width=11"),
        ("nan", r"--bucket-width must be a positive finite number, got --bucket-width=nan"),
        ("x", r"argument --bucket-width: invalid float value: 'x'"),
    ],
    "--fixed-batch-size": [
        ("0", r"--fixed-batch-size must be an integer >= 1, got --fixed-batch-size=0"),
        ("-1", r"--fixed-batch-size must be an integer >= 1, got --fixed-batch-size=-1"),
        ("x", r"argument --fixed-batch-size: invalid int value: 'x'"),
    ],
    "--add": [
        ("-1", r"--add must be an integer >= 0, got --add=-1"),
        ("x", r"argument --add: invalid int value: 'x'"),
        (str(2**53), r"--add must be below 2\*\*53 \(a length\), got --add=9007199254740992"),
        (
            str(2**63 - 1),
            r"--add must be below 2\*\*53 \(a length\), got --add=9223372036854775807",
        ),
        (str(2**53 - 3), r"--add=9007199254740989 makes .*ok.npy\[2\] 9007199254740994 long"),
    ],
    "--truncate": [
        ("0", r"--truncate must be an integer in \[1, 2\*\*53\), got --truncate=0"),
        ("-1", r"--truncate must be an integer in \[1, 2\*\*53\), got --truncate=-1"),
        ("x", r"argument --truncate: invalid int value: 'x'"),
        (str(2**53), r"--truncate must be an integer in \[1, 2\*\*53\), got --truncate=9007"),
    ],
    "--plot": [
        ("{dir}/out.jpg", r"--plot must name a .png, .svg, .pdf file, got --plot=.*out.jpg"),
        ("{dir}/no/such/dir/out.png", r"--plot .*out.png: directory .*no/such/dir does not exist"),
    ],
}
for flag in ("--max-batch-size", "--batch-size-multiple", "--pad-to-multiple-of"):
    FLAG_VALUES[flag] = [
        ("0", rf"{flag} must be an integer >= 1.*got {flag}=0"),
        ("-1", rf"{flag} must be an integer >= 1.*got {flag}=-1"),
        ("x", rf"argument {flag}: invalid int value: 'x'"),
        ("2.5", rf"argument {flag}: invalid int value: '2.5'"),
    ]
for flag, values in FLAG_VALUES.items():
    for value, match in values:
        argv = [*OK, "--max-cost", "1000", flag, value]
        if flag == "--max-cost":
            argv = [*OK, flag, value]
        cli(f"stats {flag}={value.replace('{dir}/', '') or 'empty'}", argv, match)

for name, match in [
    ("str.npy", r"str.npy must hold integer lengths, got dtype <U1 \(first value 'a'\)"),
    ("complex.npy", r"complex.npy must hold integer lengths, got dtype complex128"),
    ("datetime.npy", r"datetime.npy must hold integer lengths, got dtype datetime64\[D\]"),
    ("bool.npy", r"bool.npy must hold integer lengths, got dtype bool"),
    ("empty.npy", r"empty.npy holds no lengths \(an empty array\)"),
    ("2d.npy", r"2d.npy must hold a 1-D array of lengths, got shape \(1, 2\)"),
    ("scalar.npy", r"scalar.npy must hold a 1-D array of lengths, got shape \(\)"),
    ("negative.npy", r"negative.npy\[1\]=-2: a length must be >= 1"),
    ("zero.npy", r"zero.npy\[1\]=0: a length must be >= 1 \(pass --skip-empty"),
    ("nan.npy", r"nan.npy\[1\]=nan: a length must be a whole number"),
    ("fraction.npy", r"fraction.npy\[1\]=2.5: a length must be a whole number"),
    ("huge.npy", r"huge.npy\[1\]=1152921504606846976: a length must be below 2\*\*53"),
    ("zero-bytes.npy", r"zero-bytes.npy is not a readable .npy array of lengths"),
    ("text.npy", r"text.npy is not a readable .npy array of lengths"),
    (
        "over.npy",
        r"3 sample\(s\) are over --max-cost=1000 even alone; the first is .*over.npy\[2\] "
        r"\(length 300.*The sampler refuses them \(--oversize error\)",
    ),
    ("missing.npy", r"input file not found: .*missing.npy"),
    ("a-directory.csv", r"input file not found: .*a-directory.csv"),
]:
    cli(f"stats-{name}", ["{dir}/" + name, "--max-cost", "1000"], match)
for extra, match in [
    (["--add", "1"], r"negative.npy\[1\]=-2: a length must be >= 1"),
    (["--truncate", "4"], r"negative.npy\[1\]=-2: a length must be >= 1"),
    (["--add", "1", "--truncate", "4"], r"negative.npy\[1\]=-2"),
]:
    cli(
        f"stats-negative.npy {' '.join(extra)}",
        ["{dir}/negative.npy", "--max-cost", "1000", *extra],
        match,
    )
cli(
    "stats-zero.npy --add 1",
    ["{dir}/zero.npy", "--max-cost", "1000", "--add", "1"],
    r"zero.npy\[1\]=0: a length must be >= 1",
)
cli(
    "stats-all-oversize-skip",
    ["{dir}/over.npy", "--max-cost", "1", "--oversize", "skip"],
    r"all 5 samples are over --max-cost=1 even alone.*--oversize='skip' would leave nothing",
)
for name, extra, match in [
    (
        "empty-row.csv",
        ["--column", "review"],
        r"line 3 of .*empty-row.csv is empty \(0 characters\); .*--add N .*--skip-empty",
    ),
    (
        "short-row.csv",
        ["--column", "review"],
        r"line 3 of .*short-row.csv has 1 field\(s\) and no 'review' \(column 2 of the header\)",
    ),
    ("header-only.csv", ["--column", "review"], r"header-only.csv holds no samples"),
    ("empty.csv", ["--column", "review"], r"empty.csv is empty: no header row with a 'review'"),
    ("latin1.csv", ["--column", "review"], r"latin1.csv is not UTF-8 text"),
    ("reviews.csv", ["--column", "text"], r"--column 'text' is not in .*reviews.csv; columns:"),
    ("reviews.csv", [], r"reviews.csv is a table: name the text column with --column"),
    (
        "reviews.csv",
        ["--column", "review", "--field", "text"],
        r"--field is for JSON lines; .*reviews.csv is a table: use --column",
    ),
    ("reviews.tsv", ["--column", "review"], r"--column 'review' is not in .*reviews.tsv"),
    (
        "number.jsonl",
        ["--field", "text"],
        r"line 1 of .*number.jsonl is a JSON int, not an object with a 'text' field: 5",
    ),
    ("list.jsonl", ["--field", "text"], r"line 1 of .*list.jsonl is a JSON list, not an object"),
    ("string.jsonl", ["--field", "text"], r"line 1 of .*string.jsonl is a JSON str, not an obj"),
    (
        "null.jsonl",
        ["--field", "text"],
        r"--field 'text' on line 1 of .*null.jsonl must be text \(a string\) or tokens \(a list\), "
        r"got null",
    ),
    (
        "int.jsonl",
        ["--field", "text"],
        r"--field 'text' on line 1 of .*int.jsonl must be text.*got 5",
    ),
    ("bool.jsonl", ["--field", "text"], r"--field 'text' on line 1 .*must be text.*got true"),
    ("object.jsonl", ["--field", "text"], r"--field 'text' on line 1 .*must be text.*got \{"),
    ("broken.jsonl", ["--field", "text"], r"line 2 of .*broken.jsonl is not JSON \(Expecting"),
    (
        "missing.jsonl",
        ["--field", "text"],
        r"--field 'text' is missing on line 1 of .*missing.jsonl",
    ),
    ("empty-text.jsonl", ["--field", "text"], r"line 1 of .*empty-text.jsonl is empty"),
    ("number.jsonl", [], r"number.jsonl is JSON lines: name the text field with --field"),
    (
        "number.jsonl",
        ["--field", "text", "--column", "text"],
        r"--column is for a CSV/TSV; .*number.jsonl is JSON lines: use --field",
    ),
    ("empty-line.txt", [], r"line 2 of .*empty-line.txt is empty \(0 characters\)"),
    ("empty.txt", [], r"empty.txt holds no samples: there is nothing to batch"),
    ("latin1.txt", [], r"latin1.txt is not UTF-8 text"),
    ("reviews.txt", ["--column", "review"], r"--column is for a CSV/TSV or JSON lines file"),
    ("reviews.txt", ["--field", "text"], r"--field is for a CSV/TSV or JSON lines file"),
    (
        "reviews.txt",
        ["--vocab", "{dir}/empty-vocab.txt"],
        r"vocab file .*empty-vocab.txt holds no tokens",
    ),
    (
        "reviews.txt",
        ["--vocab", "{dir}/no-such-vocab.txt"],
        r"--vocab file not found: .*no-such-vocab.txt",
    ),
    (
        "reviews.txt",
        ["--vocab", "{dir}/latin1-vocab.txt"],
        r"--vocab file .*latin1-vocab.txt is not UTF-8 text",
    ),
    (
        "empty-line.txt",
        ["--vocab", "{dir}/vocab.txt"],
        r"line 2 of .*empty-line.txt is empty \(0 WordPiece tokens\)",
    ),
    ("ok.npy", ["--vocab", "{dir}/vocab.txt"], r"--vocab measures text; .*ok.npy is a .npy"),
    ("ok.npy", ["--column", "review"], r"--column measures text; .*ok.npy is a .npy"),
    ("ok.npy", ["--field", "text"], r"--field measures text; .*ok.npy is a .npy"),
]:
    label = " ".join(x.replace("{dir}/", "") for x in extra)
    cli(f"stats-{name} {label}".strip(), ["{dir}/" + name, "--max-cost", "1000", *extra], match)
cli(
    "stats-skip-empty-leaves-nothing",
    ["{dir}/empty-text.jsonl", "--max-cost", "9", "--field", "text", "--skip-empty"],
    r"empty-text.jsonl holds no non-empty samples",
)
cli("stats-no-max-cost", OK, r"--max-cost is required: the budget every batch fits")
cli("stats-no-input", ["--max-cost", "5"], r"the following arguments are required: input")
cli(
    "stats-unknown-flag",
    [*OK, "--max-cost", "5", "--colour", "red"],
    r"unrecognized arguments: --colour red",
)
cli(
    "stats-excluded-flag-order",
    [*OK, "--max-cost", "5", "--order", "none"],
    r"unrecognized arguments: --order none",
)


def test_cli_table_is_large() -> None:
    assert len(CLI_CASES) >= 100, len(CLI_CASES)
    assert len({c[0] for c in CLI_CASES}) == len(CLI_CASES), "ids are unique"
    assert len(CASES) + len(CLI_CASES) >= 300


@pytest.mark.parametrize(
    ("argv", "match"), [c[1:] for c in CLI_CASES], ids=[c[0] for c in CLI_CASES]
)
def test_stats_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], cli_dir: Path, argv: list[str], match: str
) -> None:
    args = [a.replace("{dir}", str(cli_dir)) for a in argv]
    assert main(["stats", *args, "--no-progress"]) == 2
    out, err = capsys.readouterr()
    assert out == "", "nothing on stdout"
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(("dynbatch stats: error: ", "dynbatch: error: ")), lines[0]
    assert re.search(match, lines[0]), f"{lines[0]} !~ {match}"


def test_the_files_are_fine_but_for_the_bad_part(
    capsys: pytest.CaptureFixture[str], cli_dir: Path
) -> None:
    """The files above that are fine really are: the table's errors come from the bad part."""
    for argv in (
        [*OK],
        ["{dir}/reviews.csv", "--column", "review"],
        ["{dir}/reviews.txt"],
        ["{dir}/reviews.txt", "--vocab", "{dir}/vocab.txt"],
        ["{dir}/empty-row.csv", "--column", "review", "--skip-empty"],
        ["{dir}/over.npy", "--oversize", "alone"],
        ["{dir}/zero.npy", "--skip-empty"],
    ):
        args = [a.replace("{dir}", str(cli_dir)) for a in argv]
        assert main(["stats", *args, "--max-cost", "1000", "--json"]) == 0, argv
        json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    "content",
    [b"", b"not an npz at all", "keyless"],
    ids=["empty-file", "garbage", "npz-without-keys"],
)
def test_a_broken_lengths_cache_warns_and_is_measured_again(
    tmp_path: Path, content: bytes | str
) -> None:
    cache = tmp_path / "lengths.npz"
    if content == "keyless":
        np.savez(cache, other=np.arange(3))
    else:
        cache.write_bytes(content)  # type: ignore[arg-type]
    with pytest.warns(UserWarning, match=r"cache_path=.*lengths.npz' is not a readable lengths"):
        lengths = compute_lengths(DATA, ref_index=0, cache_path=cache)
    assert lengths.tolist() == [3, 1]
    assert compute_lengths(DATA, ref_index=0, cache_path=cache).tolist() == [3, 1], "replaced"


def test_table_is_large() -> None:
    assert len(CASES) >= 300, len(CASES)
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), "ids are unique"


@pytest.mark.parametrize("bad", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_a_named_error(bad: Case) -> None:
    with pytest.raises(InputError) as info:
        bad.call()
    assert type(info.value) is bad.error, f"{type(info.value).__name__}: {info.value}"
    assert re.search(bad.match, str(info.value)), f"{info.value!s} !~ {bad.match}"
