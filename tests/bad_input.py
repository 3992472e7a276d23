"""The table behind tests/test_bad_input_*.py: every bad input to every public entry point.

Each case is a call, the error it must raise (:class:`~dynbatch.InputError`, or
:class:`~dynbatch.InputTypeError` for a value of the wrong type) and a regex the message must
match, naming the argument and, where it helps, the value. Families are generated (every
option x every bad value) so that a new option or entry point gets its cases by adding one
line. Each test file holds the cases of one group of entry points (planning, collate,
samplers, training, the CLI) in a :class:`Cases` table, with the values shared here.
"""

from __future__ import annotations

import math
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from dynbatch import InputError, InputTypeError, PlanOptions

__all__ = [
    "A_DIRECTORY",
    "BAD_LENGTHS",
    "BOOL",
    "BUDGET",
    "COST_VALUES",
    "DATA",
    "LENS",
    "NON_NEGATIVE_INT",
    "OPTION_VALUES",
    "POSITIVE_INT",
    "POSITIVE_NUMBER",
    "TOO_LARGE",
    "TYPE",
    "VALUE",
    "Case",
    "Cases",
    "Rows",
    "bool_family",
    "choice_family",
    "int_family",
    "large_family",
    "number_family",
    "options_with",
    "raises_as_the_table_says",
    "sampler",
    "v",
]

VALUE = InputError  # the value is wrong
TYPE = InputTypeError  # the value has the wrong type
#: (id label, bad value, expected error, regex of the message)
Rows = list[tuple[str, Any, type[InputError], str]]

LENS = np.array([5, 9, 3, 12, 7, 30, 2, 8])
BUDGET = 2000.0  # every sample fits alone: 30**2 = 900

DATA = [([1, 2, 3], 0), ([4], 1)]
A_DIRECTORY = tempfile.gettempdir()  # exists: a cache path that is a directory is refused


@dataclass(frozen=True)
class Case:
    id: str
    call: Callable[[], object]
    error: type[InputError]
    match: str


class Cases(list[Case]):
    """One file's table: ``case = CASES.add``, then a test parametrized over ``CASES``."""

    def add(self, id: str, call: Callable[[], object], error: type[InputError], match: str) -> None:
        self.append(Case(id, call, error, match))

    def ids(self) -> list[str]:
        return [c.id for c in self]

    def check_size(self, least: int) -> None:
        """The generated families produced their cases (a loop over nothing adds none)."""
        assert len(self) >= least, len(self)
        assert len(set(self.ids())) == len(self), "ids are unique"


def raises_as_the_table_says(bad: Case) -> None:
    with pytest.raises(InputError) as info:
        bad.call()
    assert type(info.value) is bad.error, f"{type(info.value).__name__}: {info.value}"
    assert re.search(bad.match, str(info.value)), f"{info.value!s} !~ {bad.match}"


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
#: for a size in tokens or a count (pack_len, pad_to_multiple_of, max_rows, num_replicas): at
#: most 2**53, as lengths are below it; numpy would overflow on these, or take them
TOO_LARGE = [("2**53+1", 2**53 + 1, VALUE), ("2**63", 2**63, VALUE), ("10**30", 10**30, VALUE)]


def int_family(name: str, values: list[tuple[str, Any, type[InputError]]], minimum: int) -> Rows:
    message = rf"{name} must be an integer >= {minimum}.*got {name}="
    return [(label, value, error, message + v(value)) for label, value, error in values]


#: the largest a count takes where it is not 2**53 (NOTE [ the most ranks ] in dynbatch._checks)
LARGEST = {"num_replicas": r"2\*\*20"}


def large_family(name: str, minimum: int) -> Rows:
    top = LARGEST.get(name, r"2\*\*53")
    message = rf"{name} must be an integer >= {minimum} and <= {top}(?: or None)?, got {name}="
    return [(label, value, error, message + v(value)) for label, value, error in TOO_LARGE]


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


# -- every option, shared by PlanOptions and the samplers -----------------------------------------

COST_VALUES: Rows = [
    ("cubic", "cubic", VALUE, r"cost must be 'quadratic', 'linear', 'mixed:A,B'.*cost='cubic'"),
    ("empty", "", VALUE, r"cost must be 'quadratic'.*got cost=''"),
    ("mixed-one", "mixed:1", VALUE, r"cost 'mixed:A,B' needs two numbers, got cost='mixed:1'"),
    ("mixed-words", "mixed:a,b", VALUE, r"needs two numbers, got cost='mixed:a,b'"),
    ("mixed-negative", "mixed:-1,2", VALUE, r"MixedCost a must be a finite number >= 0, got a=-1"),
    ("mixed-zero", "mixed:0,0", VALUE, r"MixedCost needs a > 0 or b > 0"),
    (
        "int",
        3,
        TYPE,
        r"cost must be a string or a callable \(n, L\) -> float \(or \(n, Ls, Lt\) -> float "
        r"for \(source, target\) pairs\), got cost=3",
    ),
    ("None", None, TYPE, r"cost must be a string or a callable.*got cost=None"),
    ("tuple", lambda n, L: (n, L), TYPE, r"cost must return a number.*returned \(1, 2\)"),
    ("str", lambda n, L: "7", TYPE, r"cost must return a number.*returned '7'"),
    ("bool", lambda n, L: True, TYPE, r"cost must return a number.*returned True"),
    ("negative", lambda n, L: -1.0, VALUE, r"cost must return a finite number >= 0.*-1\.0"),
    ("nan", lambda n, L: math.nan, VALUE, r"cost must return a finite number >= 0.*nan"),
    (
        "one-arg",
        lambda n: n,
        TYPE,
        r"cost=<function .*> takes at most 1 positional argument\(s\): a cost is called by "
        r"position, cost\(n, L\)",
    ),
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
    "pad_to_multiple_of": [
        *int_family("pad_to_multiple_of", POSITIVE_INT, 1),
        *large_family("pad_to_multiple_of", 1),
    ],
    "oversize": choice_family("oversize", ["drop", "", None, 0]),
    "drop_last": bool_family("drop_last"),
    "bucket_width": [
        *number_family("bucket_width"),
        ("too-small", 1e-4, VALUE, r"bucket_width must be in \[0.001, 10\].*bucket_width=0.0001"),
        ("too-large", 11, VALUE, r"bucket_width must be in \[0.001, 10\].*got bucket_width=11"),
    ],
    "equal_epochs": bool_family("equal_epochs"),
    "pack_len": [
        *int_family("pack_len", [x for x in POSITIVE_INT if x[0] != "None"], 1),
        *large_family("pack_len", 1),
    ],
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


def sampler(**kwargs: Any) -> Any:
    """A DynamicBatchSampler of :data:`LENS` under :data:`BUDGET` (imports paddle)."""
    from dynbatch import DynamicBatchSampler

    return DynamicBatchSampler(**{"lengths": LENS, "max_cost": BUDGET, **kwargs})


# -- lengths: every function that takes them ------------------------------------------------------

masked = np.ma.masked_array([3, 4, 5], mask=[False, True, False])
BAD_LENGTHS: Rows = [
    ("empty", [], VALUE, r"lengths is empty: there is nothing to batch"),
    (  # [N, 2] is (source, target) pairs; any other 2-D shape is not lengths
        "2-D",
        [[1, 2, 3], [3, 4, 5]],
        VALUE,
        r"lengths must be a 1-D array of positive integers, got an array of shape \(2, 3\): "
        r"give one length per sample, or an \[N, 2\] array of \(source, target\) lengths",
    ),
    (  # a matrix's reshape stays 2-D: the shape was reported as (1, 6)
        "matrix-of-3-columns",
        np.matrix([[3, 4, 5], [5, 6, 7]]),
        VALUE,
        r"lengths must be a 1-D array of positive integers, got an array of shape \(2, 3\)",
    ),
    ("scalar", 7, TYPE, r"lengths must be a 1-D array .* shape \(\): lengths=7"),
    ("None", None, TYPE, r"lengths must be a 1-D array .* shape \(\): lengths=None"),
    (
        "ragged",
        [[1], [1, 2]],
        TYPE,
        r"lengths must be 1-D .*; lengths\[1\]=\[1, 2\] holds 2 values where lengths\[0\]=\[1\] "
        r"holds 1 value$",
    ),
    (  # numpy's "inhomogeneous shape" named no row
        "ragged-pairs",
        [[1, 2], [3, 4], [5]],
        TYPE,
        r"lengths must be 1-D \(one length per sample\) or \[N, 2\] \(a row of \(source, "
        r"target\) lengths per sample\); lengths\[2\]=\[5\] holds 1 value where lengths\[0\]="
        r"\[1, 2\] holds 2 values$",
    ),
    (
        "ragged-length-and-pair",
        (3, (1, 2)),
        TYPE,
        r"lengths must be 1-D .*; lengths\[1\]=\(1, 2\) holds 2 values where lengths\[0\]=3 is "
        r"one length$",
    ),
    ("zero", [3, 0], VALUE, r"lengths must be positive; lengths\[1\]=0"),
    ("negative", [3, -2], VALUE, r"lengths must be positive; lengths\[1\]=-2"),
    ("fraction", [3, 1.5], VALUE, r"lengths must be whole numbers; lengths\[1\]=1.5"),
    ("nan", [3, math.nan], VALUE, r"lengths must be whole numbers; lengths\[1\]=nan"),
    ("inf", [math.inf], VALUE, r"lengths must be whole numbers; lengths\[0\]=inf"),
    ("str", ["7"], TYPE, r"lengths must hold integers, got dtype <U1 \(first value '7'\)"),
    ("bool", np.array([True, True]), TYPE, r"lengths must hold integers, got dtype bool"),
    # numpy casts a bool among ints to 1: a length of 1, unless the items are read
    ("bool-item", [3, True], TYPE, r"lengths must hold integers, not booleans; lengths\[1\]=True"),
    (
        "numpy-bool-item",
        (np.True_, 3),
        TYPE,
        r"lengths must hold integers, not booleans; lengths\[0\]",
    ),
    ("complex", [1 + 2j], TYPE, r"lengths must hold integers, got dtype complex128"),
    ("object", [3, None], TYPE, r"lengths must hold integers, got dtype object"),
    ("2**53", [3, 2**53], VALUE, r"lengths must be below 2\*\*53; lengths\[1\]=9007199254740992"),
    ("uint64", np.array([2**63], dtype=np.uint64), VALUE, r"below 2\*\*53; lengths\[0\]="),
    ("1e19", [1e19], VALUE, r"lengths must be below 2\*\*53; lengths\[0\]=1e\+19"),
    ("masked", masked, VALUE, r"lengths is a masked array with masked entries \(lengths\[1\]"),
]
