"""Bad input to compute_lengths is a named error; a broken lengths cache is measured again.

One part of the bad-input table (tests/bad_input.py says how it works).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from bad_input import (
    A_DIRECTORY,
    DATA,
    TYPE,
    VALUE,
    Case,
    Cases,
    raises_as_the_table_says,
    v,
)

from dynbatch import (
    InputError,
    compute_lengths,
)

CASES = Cases()
case = CASES.add

# -- compute_lengths ------------------------------------------------------------------------------

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
        r"ref_index=0 of sample 0 must be a whole number >= 1 \(a sample's length\), got 0",
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
            rf"length_fn=.*<lambda> of sample 0 must be a whole number >= 1 .*, got {result}$",
        )
    )
# not a length nor a pair: the pair of two is named as the other valid result
for label, make, shown in [
    ("three", lambda: (2, 1, 1), r"\(2, 1, 1\)"),
    ("one-tuple", lambda: (3,), r"\(3,\)"),
    ("empty-tuple", tuple, r"\(\)"),
    ("dict", lambda: {"src": 3}, r"\{'src': 3\}"),
    ("generator", lambda: (x for x in (1, 2)), r"<generator object .*>"),
]:
    COMPUTE_CASES.append(
        (
            f"length_fn-returns-{label}",
            functools.partial(compute_lengths, DATA, length_fn=lambda s, m=make: m()),
            TYPE,
            rf"length_fn=.*<lambda> of sample 0 must be a whole number, got {shown}: one length, "
            r"or two, a \(source, target\) pair",
        )
    )
for label, call, error, match in COMPUTE_CASES:
    case(f"compute_lengths-{label}", call, error, match)


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


@pytest.mark.parametrize("bad", CASES, ids=CASES.ids())
def test_bad_input_is_a_named_error(bad: Case) -> None:
    raises_as_the_table_says(bad)
