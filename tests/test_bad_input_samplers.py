"""Bad input to the samplers and the study's loader API is a named error.

One part of the bad-input table (tests/bad_input.py says how it works): DynamicBatchSampler
(options, lengths, datasets, epochs, resume states), DistributedDynamicBatchSampler, and
DatasetForDBL / get_dynamic_batch_loader.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from bad_input import (
    A_DIRECTORY,
    BAD_LENGTHS,
    BUDGET,
    DATA,
    LENS,
    NON_NEGATIVE_INT,
    OPTION_VALUES,
    POSITIVE_INT,
    TYPE,
    VALUE,
    Case,
    Cases,
    bool_family,
    int_family,
    large_family,
    number_family,
    options_with,
    raises_as_the_table_says,
    sampler,
    v,
)

from dynbatch import InputError

paddle = pytest.importorskip("paddle")
from dynbatch import (  # noqa: E402  (after paddle: these need it)
    DatasetForDBL,
    DistributedDynamicBatchSampler,
    DynamicBatchSampler,
    get_dynamic_batch_loader,
)

CASES = Cases()
case = CASES.add

# -- DynamicBatchSampler: every option, lengths, datasets -----------------------------------------

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
        "length_fn-raises-KeyError",
        lambda: DynamicBatchSampler(
            [{"ids": [1, 2]}, {"words": [3]}], length_fn=lambda s: len(s["ids"]), max_cost=BUDGET
        ),
        VALUE,
        r"length_fn=.* raised KeyError\('ids'\) on sample 1 \(its fields: \['words'\]\): it "
        r"must return the sample's length",
    ),
    (
        "ref_index-missing-field",
        lambda: DynamicBatchSampler(
            [{"ids": [1, 2]}, {"words": [3]}], ref_index="ids", max_cost=BUDGET
        ),
        TYPE,
        r"ref_index='ids' does not select a field of the sample: 'ids' \(sample 1; its fields: "
        r"\['words'\]\)",
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
    (  # it asked for update_size, naming no pairs
        "pairs-pack_len",
        lambda: sampler(lengths=np.stack([LENS, LENS], axis=1), pack_len=64),
        VALUE,
        r"DynamicBatchSampler: packing is refused for \(source, target\) pairs, got pack_len=64",
    ),
    # (source, target) pairs, each bad part named (NOTE [ lengths of pairs ])
    (
        "pairs-cost-of-one-length",
        lambda: sampler(lengths=np.stack([LENS, LENS], axis=1), cost=lambda n, L: n * L),
        VALUE,
        r"cost=<function .*> takes one length, \(n, L\), but the lengths are \(source, target\) "
        r"pairs: give cost as a cost of two lengths, \(n, Ls, Lt\)",
    ),
    (
        "pairs-target-zero",
        lambda: sampler(lengths=np.array([[3, 4], [5, 0]])),
        VALUE,
        r"lengths must be positive; lengths\[1, 1\]=0 \(the target of sample 1\)",
    ),
    (
        "pairs-three-columns",
        lambda: sampler(lengths=np.array([[3, 4, 5], [5, 1, 1]])),
        VALUE,
        r"got an array of shape \(2, 3\): give one length per sample, or an \[N, 2\] array of "
        r"\(source, target\) lengths",
    ),
    (
        "length_fn-one-length-and-a-pair",
        lambda: DynamicBatchSampler(
            ["ab", "cde"], length_fn=lambda s: (len(s), 1) if len(s) > 2 else 2, max_cost=BUDGET
        ),
        VALUE,
        r"returned one length for sample 0 \(2\) and two, a \(source, target\) pair, for "
        r"sample 1 \(\(3, 1\)\)",
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
for label, value, error, match in large_family("num_replicas", 1):  # it ran out of memory
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


# a state saved on 2 ranks of a global update of 4, loaded on 1
# (NOTE [ resume on another number of ranks ]): what the rest's checks see
def on_one_rank(**changes: Any) -> None:
    two = DistributedDynamicBatchSampler(lengths=LENS, batch_size=2, num_replicas=2, rank=0)
    state = two.state_dict(consumed_batches=1)
    options = {**state["options"], **changes.pop("options", {})}
    one = DistributedDynamicBatchSampler(lengths=LENS, batch_size=4, num_replicas=1, rank=0)
    one.load_state_dict({**state, "options": options, **changes})


for label, changes, error, match in [
    (
        "update_size-str",
        {"options": {"update_size": "4"}},
        TYPE,
        r"state\['options'\]\['update_size'\] must be a number > 0 or None, got "
        r"state\['options'\]\['update_size'\]='4' \(str\)",
    ),
    (
        "update_size-nan",
        {"options": {"update_size": math.nan}},
        VALUE,
        r"state\['options'\]\['update_size'\] must be a number > 0 or None, got .*nan",
    ),
    (
        "update_unit-other",
        {"options": {"update_unit": "words"}},
        VALUE,
        r"state\['options'\]\['update_unit'\] must be 'samples' or 'tokens', got .*'words'",
    ),
    (
        "dealt-str",
        {"dealt": "yes"},
        TYPE,
        r"state\['dealt'\] must be True or False, got state\['dealt'\]='yes'",
    ),
    ("position", {"position": 999}, VALUE, r"state\['rest'\] is not the rest of an epoch"),
    ("epoch", {"epoch": 3}, VALUE, r"state\['rest'\] is not the rest of an epoch"),
]:
    case(
        f"DistributedDynamicBatchSampler.load_state_dict-other-ranks-{label}",
        functools.partial(on_one_rank, **changes),
        error,
        match,
    )

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


def test_table_is_large() -> None:
    CASES.check_size(240)


@pytest.mark.parametrize("bad", CASES, ids=CASES.ids())
def test_bad_input_is_a_named_error(bad: Case) -> None:
    raises_as_the_table_says(bad)
