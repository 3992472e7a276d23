"""Bad input to the time split and the windows is a named error.

The time split of updates, the step-time models, fixed_step_size, epoch_seconds and the
optimizer windows.

One part of the bad-input table (tests/bad_input.py says how it works).
"""

from __future__ import annotations

import functools
import math
import re

import numpy as np
import pytest
from bad_input import (
    LENS,
    POSITIVE_INT,
    TYPE,
    VALUE,
    Case,
    Cases,
    int_family,
    options_with,
    raises_as_the_table_says,
)

from dynbatch import (
    like_fixed,
    plan_epoch,
)
from dynbatch.plan.splits import epoch_seconds, plan_split_updates, split_update
from dynbatch.plan.steptime import FLAT_STEP, StepTimeModel, StepTimeTable, check_time_model
from dynbatch.plan.windows import EpochWindows

FLAT_STEP_BIG = StepTimeModel(c=1e307, a=0.0, b=0.0)  # finite steps whose sum is not


CASES = Cases()
case = CASES.add

# -- the time split and the windows ---------------------------------------------------------------

ROWS = np.array([[2, 3, 5, 9]])  # one update's ascending lengths
ROOM = np.full((1, 4), 4)  # and how many samples a rank's batch of each holds
TIMED = options_with(cost="linear", update_size=4, time_model="0,1,0")
for label, call, error, match in [
    (
        "lengths-1-D",
        lambda: split_update(ROWS[0], ROOM[0], FLAT_STEP),
        VALUE,
        r"lengths must be a 2-d array of integer lengths >= 1.*got lengths with shape \(4,\)",
    ),
    (
        "lengths-float",
        lambda: split_update(ROWS * 1.5, ROOM, FLAT_STEP),
        VALUE,
        r"lengths must be a 2-d array of integer lengths.*dtype float64",
    ),
    (
        "lengths-descending",
        lambda: split_update(ROWS[:, ::-1], ROOM, FLAT_STEP),
        VALUE,
        r"lengths must be ascending along each row",
    ),
    (
        "capacity-shape",
        lambda: split_update(ROWS, ROOM[0], FLAT_STEP),
        VALUE,
        r"capacity must be an integer array of the shape of lengths \(1, 4\).*got shape \(4,\)",
    ),
    (
        "num_replicas-zero",
        lambda: split_update(ROWS, ROOM, FLAT_STEP, num_replicas=0),
        VALUE,
        r"num_replicas must be an integer >= 1, got num_replicas=0",
    ),
    (
        "multiple-zero",
        lambda: split_update(ROWS, ROOM, FLAT_STEP, multiple=0),
        VALUE,
        r"multiple must be an integer >= 1, got multiple=0",
    ),
    (
        "time_model-None",
        lambda: split_update(ROWS, ROOM, None),
        TYPE,
        r"time_model must be a step time \(n, L\) -> seconds.*got time_model=None",
    ),
]:
    case(f"split_update-{label}", call, error, match)
for label, call, error, match in [
    (
        "options-None",
        lambda: plan_split_updates(LENS, None, 0),
        TYPE,
        r"options must be a dynbatch.PlanOptions, got options=None",
    ),
    (
        "no-time_model",
        lambda: plan_split_updates(LENS, TIMED.replace(time_model=None), 0),
        VALUE,
        r"needs options with time_model and update_size in samples, got time_model=None",
    ),
    (
        "num_replicas-zero",
        lambda: plan_split_updates(LENS, TIMED, 0, num_replicas=0),
        VALUE,
        r"num_replicas must be an integer >= 1, got num_replicas=0",
    ),
    (
        "lengths-2-D",
        lambda: plan_split_updates(LENS.reshape(2, 4), TIMED, 0),
        VALUE,
        r"lengths must be a 1-D array of positive integers, got an array of shape \(2, 4\)",
    ),
    (
        "update-sum-overflows",  # each step finite, an update of them not
        lambda: plan_split_updates(LENS, TIMED.replace(time_model="1e308,0,0"), 0),
        VALUE,
        r"time_model=.*predicts inf seconds for an update of 4 steps",
    ),
]:
    case(f"plan_split_updates-{label}", call, error, match)
ONE_STEP_EACH = options_with(cost="linear", update_size=1, time_model="1e307,0,0")
case(
    "epoch_seconds-sum-overflows",
    lambda: epoch_seconds(
        plan_epoch(np.full(30, 5), ONE_STEP_EACH, 0), np.full(30, 5), FLAT_STEP_BIG
    ),
    VALUE,
    r"step_time=StepTimeModel\(c=1e\+307.* predicts inf seconds for an epoch of 30 steps",
)
case(
    "like_fixed-epoch-overflows",
    lambda: plan_epoch(np.full(30, 5), like_fixed(np.full(30, 5), 1, time_model="1e307,0,0"), 0),
    VALUE,
    r"time_model=StepTimeModel\(c=1e\+307.* predicts inf seconds for an epoch of 30 steps",
)
for key in ("c", "a", "b", "error"):  # an int too big for a float: OverflowError escaped
    huge = {"c": 0.0, "a": 0.0, "b": 0.0, key: 10**400}
    case(
        f"check_time_model-{key}-beyond-float",
        functools.partial(check_time_model, huge),
        VALUE,
        rf"time_model .*(a finite number|a number in).*{key}=1000000000",
    )
for label, rows in [
    ("one-row", [(8, 128, 0.05)]),
    ("three-shapes", [(1, 8, 0.1), (2, 8, 0.1), (4, 8, 0.2), (4, 8, 0.3)]),
]:
    case(
        f"StepTimeTable-fit-{label}",
        lambda rows=rows: StepTimeTable.from_rows(rows).fit(),
        VALUE,
        r"a step-time table needs at least 4 distinct shapes \(n, L\) to fit.*got \d",
    )
for label, value, error, match in [
    *int_family("fixed_step_size", [x for x in POSITIVE_INT if x[0] != "None"], 1),
    (
        "no-time_model",
        4,
        VALUE,
        r"fixed_step_size chooses.*needs a time_model.*got fixed_step_size=4 with time_model=None",
    ),
]:
    case(
        f"PlanOptions-fixed_step_size-{label}",
        functools.partial(
            options_with,
            **({} if label == "no-time_model" else {"time_model": "1,0,0", "update_size": 4}),
            fixed_step_size=value,
        ),
        error,
        match,
    )
case(
    "PlanOptions-fixed_step_size-below-multiple",
    lambda: options_with(
        update_size=16, time_model="1,0,0", batch_size_multiple=8, fixed_step_size=4
    ),
    VALUE,
    r"fixed_step_size must be at least batch_size_multiple=8 .*got fixed_step_size=4",
)
WINDOWED = plan_epoch(LENS, options_with(update_size=4), 0)
for label, call, error, match in [
    (
        "sharded-None",
        lambda: EpochWindows(None, LENS, epoch=0),
        TYPE,
        r"sharded must be an epoch's plan \(a ShardedPlan, e.g. plan_epoch\(...\)\), got "
        r"sharded=None",
    ),
    (
        "counted-short",
        lambda: EpochWindows(WINDOWED, LENS[:3], epoch=0),
        VALUE,
        r"counted must hold one count per sample, 8 or more \(the plan holds sample 7\), got "
        r"an array of shape \(3,\)",
    ),
    (
        "counted-None",
        lambda: EpochWindows(WINDOWED, None, epoch=0),
        VALUE,
        r"counted must hold one count per sample.*got an array of shape \(\)",
    ),
    (
        "counted-2-D",
        lambda: EpochWindows(WINDOWED, LENS.reshape(2, 4), epoch=0),
        VALUE,
        r"counted must hold one count per sample.*got an array of shape \(2, 4\)",
    ),
]:
    case(f"EpochWindows-{label}", call, error, match)

# the tester's report B, item 4: what escaped unnamed or was accepted
SPLIT_LENS = np.array([5, 7, 3, 9, 2, 8])
SPLIT = options_with(
    cost="linear", max_cost=100, update_size=4, max_batch_size=4, time_model=FLAT_STEP
)
SPLIT_PLAN = plan_epoch(SPLIT_LENS, options_with(cost="linear", max_cost=20), 0)
for label, call, error, match in [
    (
        "epoch-negative",
        lambda: plan_split_updates(SPLIT_LENS, SPLIT, -1),
        VALUE,
        r"epoch must be an integer >= 0, got epoch=-1",
    ),
    (
        "epoch-str",
        lambda: plan_split_updates(SPLIT_LENS, SPLIT, "a"),
        TYPE,
        r"epoch must be an integer >= 0, got epoch='a'",
    ),
    (
        "lengths-empty",
        lambda: plan_split_updates(np.array([], int), SPLIT, 0),
        VALUE,
        r"lengths is empty",
    ),
    (
        "lengths-nan",
        lambda: plan_split_updates(np.array([1.0, np.nan]), SPLIT, 0),
        VALUE,
        r"lengths must be whole numbers; lengths\[1\]=.*nan",
    ),
]:
    case(f"plan_split_updates-{label}", call, error, match)
for label, call, error, match in [
    (
        "step_time-None",
        lambda: epoch_seconds(SPLIT_PLAN, SPLIT_LENS, None),
        TYPE,
        r"step_time must be a step time \(n, L\) -> seconds.*got step_time=None",
    ),
    (
        "lengths-short",
        lambda: epoch_seconds(SPLIT_PLAN, SPLIT_LENS[:2], FLAT_STEP),
        VALUE,
        r"lengths must hold one length per sample, 6 or more \(the plan holds sample 5\), got 2",
    ),
    (
        "sharded-None",
        lambda: epoch_seconds(None, SPLIT_LENS, FLAT_STEP),
        TYPE,
        r"sharded must be an epoch's plan \(a ShardedPlan.*got sharded=None",
    ),
    (
        "step_time-negative",
        lambda: epoch_seconds(SPLIT_PLAN, SPLIT_LENS, lambda n, L: -1.0 * n),
        VALUE,
        r"step_time=.* predicts -3 seconds for a step of 3 samples of length 5.*>= 0",
    ),
    (
        "pad_to_multiple_of-zero",
        lambda: epoch_seconds(SPLIT_PLAN, SPLIT_LENS, FLAT_STEP, 0),
        VALUE,
        r"pad_to_multiple_of must be an integer >= 1, got pad_to_multiple_of=0",
    ),
    (
        "pad_to_multiple_of-negative",
        lambda: epoch_seconds(SPLIT_PLAN, SPLIT_LENS, FLAT_STEP, -2),
        VALUE,
        r"pad_to_multiple_of must be an integer >= 1, got pad_to_multiple_of=-2",
    ),
]:
    case(f"epoch_seconds-{label}", call, error, match)
for label, value, error in [
    ("negative", -1, VALUE),
    ("nan", math.nan, VALUE),
    ("one", 1.0, VALUE),
    ("str", "0.1", TYPE),
]:
    case(
        f"StepTimeModel-error-{label}",
        functools.partial(StepTimeModel, 0.1, 0.0, 0.0, error=value),
        error,
        rf"StepTimeModel error must be a number in \[0, 1\).*got error={re.escape(repr(value))}",
    )
case(
    "StepTimeTable-load-int",
    lambda: StepTimeTable.load(3),
    TYPE,
    r"path must be a file path \(str or os.PathLike\), got path=3",
)
for label, call, error, match in [
    (
        "every-zero",
        lambda: EpochWindows(WINDOWED, LENS, epoch=0, every=0),
        VALUE,
        r"every must be an integer >= 1, got every=0",
    ),
    (
        "every-negative",
        lambda: EpochWindows(WINDOWED, LENS, epoch=0, every=-2),
        VALUE,
        r"every must be an integer >= 1, got every=-2",
    ),
    (
        "every-float",
        lambda: EpochWindows(WINDOWED, LENS, epoch=0, every=2.5),
        TYPE,
        r"every must be an integer >= 1, got every=2.5",
    ),
    (
        "every-str",
        lambda: EpochWindows(WINDOWED, LENS, epoch=0, every="a"),
        TYPE,
        r"every must be an integer >= 1, got every='a'",
    ),
    (
        "epoch-str",
        lambda: EpochWindows(WINDOWED, LENS, epoch="a"),
        TYPE,
        r"epoch must be an integer >= 0, got epoch='a'",
    ),
    (
        "epoch-negative",
        lambda: EpochWindows(WINDOWED, LENS, epoch=-1),
        VALUE,
        r"epoch must be an integer >= 0, got epoch=-1",
    ),
    (
        "counted-str",
        lambda: EpochWindows(WINDOWED, ["a"] * 8, epoch=0),
        TYPE,
        r"counted must hold integers, got dtype <U1",
    ),
    (
        "ends_at-str",
        lambda: EpochWindows(WINDOWED, LENS, epoch=0).ends_at("a"),
        TYPE,
        r"position must be an integer >= 0, got position='a'",
    ),
    (
        "spans-str",
        lambda: list(EpochWindows(WINDOWED, LENS, epoch=0).spans("a")),
        TYPE,
        r"start must be an integer >= 0, got start='a'",
    ),
    (
        "spans-negative",
        lambda: list(EpochWindows(WINDOWED, LENS, epoch=0).spans(-1)),
        VALUE,
        r"start must be an integer >= 0, got start=-1",
    ),
]:
    case(f"EpochWindows-{label}", call, error, match)


@pytest.mark.parametrize("bad", CASES, ids=CASES.ids())
def test_bad_input_is_a_named_error(bad: Case) -> None:
    raises_as_the_table_says(bad)
