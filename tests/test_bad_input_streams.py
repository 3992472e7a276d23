"""Bad input to the stream's entry points: named, with the value and what is valid.

The cases are a :class:`~bad_input.Cases` table as in the other tests/test_bad_input_*.py.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from bad_input import TYPE, VALUE, Case, Cases, raises_as_the_table_says

pytest.importorskip("paddle")

from dynbatch import DynamicBatchIterable, read_jsonl

SHARD = Path(tempfile.mkdtemp()) / "a.jsonl"
SHARD.write_text('{"t": "ab"}\n{"t": "c"}\n', encoding="utf-8")
SAMPLES = [[1] * n for n in (3, 5, 2, 7)]


def stream(**kw: object) -> DynamicBatchIterable:
    args: dict[str, object] = {"length_fn": len, "max_cost": 100, "cost": "linear"}
    args.update(kw)
    return DynamicBatchIterable(SAMPLES, num_replicas=1, rank=0, **args)  # type: ignore[arg-type]


def read_an_open_file() -> object:
    fd = os.open(SHARD, os.O_RDONLY)
    try:
        return list(read_jsonl(fd))  # type: ignore[arg-type]
    finally:
        os.close(fd)  # raises if read_jsonl closed the caller's descriptor


def resumed_from(steps: int, cursor: list[int]) -> object:
    """A state taken after one batch, its steps and cursor replaced, loaded and read on."""
    it = stream(max_cost=8, buffer_size=2)
    next(iter(it))
    state = {**it.state_dict(), "steps": steps, "cursors": [cursor]}
    again = stream(max_cost=8, buffer_size=2)
    again.load_state_dict(state)
    return list(again)


CASES = Cases()
case = CASES.add
case("read_jsonl-int", read_an_open_file, TYPE, r"path must be a file path .*got path=\d+")
case("read_jsonl-None", lambda: list(read_jsonl(None)), TYPE, r"path must be .*got path=None")  # type: ignore[arg-type]
case(
    "read_jsonl-start-str",
    lambda: list(read_jsonl(SHARD, start="x")),
    TYPE,  # type: ignore[arg-type]
    r"start must be an integer >= 0.*got start='x'",
)
case(
    "read_jsonl-start-negative",
    lambda: list(read_jsonl(SHARD, start=-1)),
    VALUE,
    r"start must be an integer >= 0.*got start=-1",
)
case(
    "read_jsonl-start-bool",
    lambda: list(read_jsonl(SHARD, start=True)),
    TYPE,
    r"start must be an integer >= 0.*got start=True",
)
case(
    "loader-prefetch_factor-0",
    lambda: stream().loader(prefetch_factor=0, num_workers=2),
    VALUE,
    r"prefetch_factor must be an integer >= 1.*got prefetch_factor=0",
)
case(
    "loader-prefetch_factor-str",
    lambda: stream().loader(prefetch_factor="2", num_workers=2),
    TYPE,
    r"prefetch_factor must be an integer >= 1.*got prefetch_factor='2'",
)
case(
    "loader-unknown-keyword",
    lambda: stream().loader(None, bogus=1),
    TYPE,
    r"loader\(\) got an unknown keyword bogus=1: .*paddle.io.DataLoader takes .*prefetch_factor",
)
case(
    "read_jsonl-missing",
    lambda: list(read_jsonl(SHARD.parent / "missing.jsonl")),
    VALUE,
    r"path=.*missing.jsonl: no such file",
)
case(
    "read_jsonl-directory",
    lambda: list(read_jsonl(SHARD.parent)),
    VALUE,
    r"path=.* is a directory, not a JSON-lines file",
)
case(
    "loader-num_workers-negative",
    lambda: stream().loader(num_workers=-1),
    VALUE,
    r"num_workers must be an integer >= 0.*got num_workers=-1",
)
case(
    "len-of-a-stream",
    lambda: len(stream()),
    TYPE,
    r"a stream has no len\(\) before it is read.*stream.count\(epoch\).steps",
)
case(
    "length_fn-raises",
    lambda: list(stream(length_fn=lambda s: s["n"])),
    VALUE,
    r"length_fn raised TypeError.*on the sample at record 0 of the stream \(epoch 0\)",
)


# (source, target) pairs (NOTE [ a stream of pairs ]): what a stream of pairs refuses, named
def pairs(**kw: object) -> object:
    return list(stream(**{"length_fn": lambda s: (len(s), 2), **kw}))


case(
    "length_fn-one-length-then-a-pair",
    lambda: pairs(length_fn=lambda s: (len(s), 2) if len(s) > 3 else len(s)),
    VALUE,
    r"length_fn returned one length for the sample at record 0 of the stream \(epoch 0\) "
    r"\(3\) and two, a \(source, target\) pair, for the sample at record 1 .* \(\(5, 2\)\): "
    r"it must return one length for every sample of the stream, or a pair for every sample",
)
case(  # a block of pairs after a block of one length: named with the first block's sample
    "length_fn-one-length-then-a-block-of-pairs",
    lambda: pairs(length_fn=lambda s: (len(s), 2) if len(s) != 3 else 3, buffer_size=1),
    VALUE,
    r"one length for the sample at record 0 .* \(3\) and two, a \(source, target\) pair, for "
    r"the sample at record 1 .* \(\(5, 2\)\)",
)
case(
    "length_fn-pair-target-zero",
    lambda: pairs(length_fn=lambda s: (len(s), 0 if len(s) == 2 else 4)),
    VALUE,
    r"length_fn must return a whole number >= 1 .* or a \(source, target\) pair of them, got "
    r"\(2, 0\) \(its target\) for the sample at record 2 of the stream",
)
case(
    "length_fn-pair-source-negative",
    lambda: pairs(length_fn=lambda s: (-len(s), 4)),
    VALUE,
    r"got \(-3, 4\) \(its source\) for the sample at record 0",
)
case(
    "length_fn-pair-bool-side",
    lambda: pairs(length_fn=lambda s: (len(s), True)),
    TYPE,
    r"got \(3, True\) \(its target\) for the sample at record 0",
)
case(
    "length_fn-three-lengths",
    lambda: pairs(length_fn=lambda s: (len(s), 2, 1)),
    TYPE,
    r"length_fn must return a whole number >= 1 .* or a \(source, target\) pair of them, got "
    r"\(3, 2, 1\) for the sample at record 0",
)
case(
    "pairs-cost-of-one-length",
    lambda: pairs(cost=lambda n, L: n * L),
    VALUE,
    r"cost=<function .*> takes one length, \(n, L\), but the lengths are \(source, target\) "
    r"pairs: give cost as a cost of two lengths",
)
case(
    "pairs-pack_len",
    lambda: pairs(pack_len=16, update_size=4),
    VALUE,
    r"DynamicBatchIterable: packing is refused for \(source, target\) pairs, got pack_len=16",
)
case(
    "pairs-over-budget",
    lambda: pairs(length_fn=lambda s: (len(s), 95 if len(s) == 7 else 2)),
    VALUE,
    r"the sample at record 3 of the stream \(epoch 0\) has \(source, target\) lengths "
    r"\(7, 95\) \(padded \(7, 95\)\) and costs 102 alone, over max_cost=100",
)
case(
    "every-sample-over-budget",
    lambda: list(stream(max_cost=1, oversize="skip")),
    VALUE,
    r"all 4 samples of epoch 0 are over max_cost=1 alone.*oversize='skip'",
)
case(
    "time_model-without-update_size",
    lambda: stream(time_model="1,0,0"),
    VALUE,
    r"time_model cuts updates of update_size samples",
)
case(
    "group_by_length-alone",
    lambda: stream(group_by_length=True),
    VALUE,
    r"group_by_length draws the updates of a time_model's split.*time_model=None",
)

case(
    "state-steps-not-its-cursors",
    lambda: resumed_from(10**9, [0, 0, 0, 1, 1, 0]),
    VALUE,
    r"state\['steps'\]=1000000000 must be the steps its cursors took \(1, the sum",
)
case(
    "state-block_step-over-slot_step",
    lambda: resumed_from(1, [0, 0, 0, 3, 1, 0]),
    VALUE,
    r"state\['cursors'\]\[0\].*block step 3.*over the slot's steps 1",
)
case(
    "state-cursor-past-its-block",
    lambda: resumed_from(999, [0, 0, 0, 999, 999, 0]),
    VALUE,
    r"stream state.*step 999 of block 0.*holds 2 steps",
)
case(
    "state-cursor-past-the-stream",
    lambda: resumed_from(5, [5, 0, 999, 0, 5, 0]),
    VALUE,
    r"stream state.*block 5 at record 999.*no record there",
)


def test_the_table_is_full() -> None:
    CASES.check_size(20)


@pytest.mark.filterwarnings("ignore:skipping")
@pytest.mark.parametrize("bad", CASES, ids=CASES.ids())
def test_bad_stream_input_is_named(bad: Case) -> None:
    raises_as_the_table_says(bad)
