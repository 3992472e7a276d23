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
case(  # it was refused as not a whole number, naming no pairs
    "length_fn-returns-a-pair",
    lambda: list(stream(length_fn=lambda s: (len(s), 2))),
    VALUE,
    r"length_fn returned a \(source, target\) pair, \(3, 2\), for the sample at record 0 of "
    r"the stream \(epoch 0\): a stream plans one length per sample; pairs are not supported "
    r"there yet",
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
