"""A step time of two lengths, and the time split of (source, target) pairs at it
(NOTE [ a step time of two lengths ], NOTE [ splitting updates of pairs ]).

The time split is a speed option: it chooses how each update is split into
micro-batches, never which samples an update holds nor how many updates an epoch has. So the
test is an equivalence: the updates split at any step time hold the samples of the fixed batch's
own updates, as the same updates run whole do. Every step time here is given: no test reads a
clock.
"""

from __future__ import annotations

import itertools
import math
import warnings
from typing import Any

import numpy as np
import paddle
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import lognormal_pairs, pair_lengths

import dynbatch
from dynbatch import PlanOptions, like_fixed, plan_epoch
from dynbatch.plan.costs import PairCost, charge
from dynbatch.plan.pair_steptime import PAIR_FLAT_STEP, PairStepTimeModel, check_step_time
from dynbatch.plan.planning import padded_lengths
from dynbatch.plan.sharding import ShardedPlan
from dynbatch.plan.splits import epoch_seconds, plan_split_updates, shuffled
from dynbatch.plan.stats import lower_bound_batches
from dynbatch.plan.steptime import StepTimeModel

#: step times of pairs that cut differently: flat (each update whole), per token (cut
#: finely), an encoder–decoder's on a GPU (a large c), attention-heavy, cross-attention only
PAIR_MODELS = st.sampled_from(
    [
        PAIR_FLAT_STEP,
        PairStepTimeModel(c=0.0, a_s=1e-5, a_t=2e-5),
        PairStepTimeModel(c=0.04, a_s=1e-6, a_t=2e-6, b_s=1e-9, b_t=1e-9, cross=1e-9, error=0.1),
        PairStepTimeModel(c=1e-3, b_s=1e-7, b_t=3e-7),
        PairStepTimeModel(c=1e-4, cross=1e-6),
    ]
)


def updates_of(sharded: ShardedPlan) -> list[list[int]]:
    """Each update's samples (repeats that only even out ranks left out), sorted."""
    assert sharded.window_ends is not None
    ends = np.r_[0, sharded.window_ends] * sharded.num_replicas
    out = []
    for a, e in itertools.pairwise(ends):
        held = [sharded.plan[k] for k in range(a, e) if not sharded.is_padding[k]]
        out.append(sorted(np.concatenate(held).tolist()))
    return out


def split_options(pairs: np.ndarray, batch: int, replicas: int, model: Any, **kw: Any) -> Any:
    """The time split's options for a fixed batch of ``batch`` a rank (the recipe's: its worst
    batch as the budget, steps of ``batch`` a rank, the shuffled order)."""
    worst = float(np.asarray(charge(PairCost(), batch, pairs.max(axis=0)[None]))[0])
    return PlanOptions(
        max_cost=worst,
        cost=PairCost(),
        order="shuffle",
        update_size=batch * replicas,
        max_batch_size=batch,
        time_model=model,
        **kw,
    )


@settings(max_examples=80, deadline=None)
@given(
    pairs=pair_lengths(max_size=200, max_len=300),
    model=PAIR_MODELS,
    batch=st.integers(1, 24),
    replicas=st.integers(1, 4),
    seed=st.integers(0, 2**31),
    epoch=st.integers(0, 9),
    drop_last=st.booleans(),
)
def test_the_time_split_of_pairs_changes_only_how_an_update_is_split(
    pairs: np.ndarray,
    model: PairStepTimeModel,
    batch: int,
    replicas: int,
    seed: int,
    epoch: int,
    drop_last: bool,
) -> None:
    options = split_options(pairs, batch, replicas, model, seed=seed, drop_last=drop_last)
    split = plan_split_updates(pairs, options, epoch, replicas)
    whole = plan_split_updates(pairs, options.replace(time_model=PAIR_FLAT_STEP), epoch, replicas)
    assert updates_of(split) == updates_of(whole), "the same samples in each update, in order"
    update = batch * replicas  # the fixed batch's own updates: its shuffle, cut every B x ranks
    order = shuffled(np.arange(len(pairs)), seed, epoch)
    if drop_last:
        order = order[: order.size - order.size % update]
    fixed = [sorted(order[i : i + update].tolist()) for i in range(0, order.size, update)]
    assert updates_of(split) == fixed, "the fixed batch's updates, as many an epoch"
    ranks = [len(split.for_rank(r)) for r in range(replicas)]
    assert len(set(ranks)) == 1, f"equal steps on every rank: {ranks}"
    longest = padded_lengths(pairs, 1)
    for b in split.plan:  # memory: each micro-batch within the fixed batch's worst
        cost = float(np.asarray(charge(PairCost(), b.size, longest[b].max(axis=0)[None]))[0])
        assert cost <= options.max_cost * (1 + 1e-12) or b.size == 1


@settings(max_examples=60, deadline=None)
@given(
    pairs=pair_lengths(max_size=200, max_len=300),
    model=PAIR_MODELS,
    batch=st.integers(1, 24),
    replicas=st.integers(1, 4),
    seed=st.integers(0, 2**31),
)
def test_an_epoch_of_pairs_is_never_predicted_slower_than_the_fixed_batch(
    pairs: np.ndarray, model: PairStepTimeModel, batch: int, replicas: int, seed: int
) -> None:
    """The recipe keeps the faster of the padding-free split and the time split each epoch;
    the fixed batch's updates, each one step of B a rank, priced at its longest source and
    target, is the yardstick (the time split holds it as a candidate)."""
    options = like_fixed(pairs, batch, num_replicas=replicas, time_model=model, seed=seed)
    assert options.time_model == model, "a step time of pairs given is followed, never dropped"
    sharded = plan_epoch(pairs, options, 0, replicas)
    assert sharded.window_ends is not None
    assert sharded.window_ends.size == math.ceil(len(pairs) / (batch * replicas))
    order = shuffled(np.arange(len(pairs)), seed, 0)
    update = batch * replicas
    fixed = sum(
        float(
            model(-(-order[i : i + update].size // replicas), *pairs[order[i : i + update]].max(0))
        )
        for i in range(0, order.size, update)
    )
    predicted = epoch_seconds(sharded, pairs, model)
    assert predicted <= fixed * (1 + 1e-9) + 1e-12, (
        f"predicted {predicted:.6g}s, fixed {fixed:.6g}s"
    )


def test_a_step_time_of_pairs_cuts_where_the_time_says() -> None:
    pairs = lognormal_pairs(4000, 0.6, seed=5)
    flat = like_fixed(pairs, 32, time_model=PAIR_FLAT_STEP)
    by_token = like_fixed(pairs, 32, time_model=PairStepTimeModel(c=0.0, a_s=1e-5, a_t=1e-5))
    whole, cut = plan_epoch(pairs, flat, 0), plan_epoch(pairs, by_token, 0)
    assert whole.window_ends is not None and cut.window_ends is not None
    assert whole.num_steps == whole.window_ends.size == math.ceil(4000 / 32), "each whole"
    assert cut.num_steps > 4 * cut.window_ends.size, "padding costs: cut finely"
    assert cut.window_ends.size == whole.window_ends.size, "as many updates either way"
    grouped = like_fixed(pairs, 32, group_by_length=True)
    assert grouped.time_model == PAIR_FLAT_STEP, "grouped pairs: each update whole"


def test_a_step_time_of_pairs_as_text_and_in_the_fingerprint() -> None:
    model = check_step_time("0.01,1e-5,2e-5,0,0,1e-8")
    assert model == PairStepTimeModel(c=0.01, a_s=1e-5, a_t=2e-5, cross=1e-8)
    options = PlanOptions(max_cost=10, update_size=4, time_model="0.01,1e-5,2e-5,0,0,1e-8")
    assert options.time_model == model
    assert options.fingerprint()["time_model"] == ["pairs", 0.01, 1e-5, 2e-5, 0.0, 0.0, 1e-8, 0.0]
    assert float(model(2, 10, 20)) == pytest.approx(0.01 + 2 * (1e-4 + 4e-4 + 2e-6))


def test_the_recipe_and_the_sampler_take_a_step_time_of_pairs_as_text() -> None:
    # an outside tester's finding: like_fixed refused the text form its docs give, naming
    # that very form, since it checked the kind before reading the text
    pairs = np.stack([np.arange(1, 301)] * 2, 1)
    text = "0.01,1e-5,2e-5,1e-7,1e-7,1e-7"
    model = PairStepTimeModel(0.01, 1e-5, 2e-5, 1e-7, 1e-7, 1e-7)
    assert like_fixed(pairs, 16, time_model=text) == like_fixed(pairs, 16, time_model=model)
    sampler = dynbatch.DynamicBatchSampler(lengths=pairs, batch_size=16, time_model=text)
    assert sampler.options.time_model == model


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("1,1,x,1,1,1", "six numbers"),
        ("1,-1,1,1,1,1", "a_s"),
        ("nan,1,1,1,1,1", "c"),
        ("1,1,1,1,1", "three numbers 'c,a,b'.*or six"),
    ],
)
def test_a_bad_step_time_of_pairs_as_text_is_named_for_what_is_wrong(text: str, match: str) -> None:
    pairs = np.stack([np.arange(1, 31)] * 2, 1)
    with pytest.raises(dynbatch.InputError, match=match) as info:
        like_fixed(pairs, 2, time_model=text)
    assert "is a step time of one length" not in str(info.value)
    assert repr(text) in str(info.value)


@pytest.mark.parametrize("device", ["cpu", "gpu:0"])
def test_the_samplers_default_for_pairs_on_an_accelerator_is_each_update_whole(
    monkeypatch: pytest.MonkeyPatch, device: str
) -> None:
    """NOTE [ no time model on an accelerator ]: pairs get the flat step of two lengths."""
    pairs = lognormal_pairs(600, 0.7, seed=6)
    monkeypatch.setattr(paddle.device, "get_device", lambda: device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sampler = dynbatch.DynamicBatchSampler(lengths=pairs, batch_size=32)
    said = [w for w in caught if "with no time_model" in str(w.message)]
    plan = sampler.epoch_plan(0)
    assert plan.window_ends is not None and len(plan.window_ends) == math.ceil(600 / 32)
    if device == "cpu":
        assert not said and sampler.options == like_fixed(pairs, 32), "the recipe, as before"
    else:
        assert said and sampler.options.time_model == PAIR_FLAT_STEP
        assert plan.num_steps == len(plan.window_ends), "one batch an update, as fixed"
    given = dynbatch.DynamicBatchSampler(
        lengths=pairs, batch_size=32, time_model=PairStepTimeModel(c=0.0, a_s=1e-5, a_t=1e-5)
    )
    assert given.epoch_plan(0).num_steps > len(plan.window_ends), "a time model given is followed"


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (
            lambda: like_fixed(lognormal_pairs(50, 0.5), 4, time_model="0.01,1e-5,0"),
            r"like_fixed: time_model='0\.01,1e-5,0' is a step time of one length, \(n, L\), "
            r"and the lengths are \(source, target\) pairs: pass a step time of two lengths, "
            r"dynbatch\.plan\.pair_steptime\.PairStepTimeModel",
        ),
        (
            lambda: like_fixed(np.arange(1, 50), 4, time_model=PairStepTimeModel(c=0.01)),
            r"like_fixed: time_model=PairStepTimeModel\(.*\) is a step time of \(source, target\) "
            r"pairs, \(n, Ls, Lt\), and the lengths are one per sample: pass a StepTimeModel",
        ),
        (
            lambda: plan_epoch(
                np.arange(1, 50),
                PlanOptions(max_cost=1e6, update_size=4, time_model=PAIR_FLAT_STEP),
                0,
            ),
            r"plan_epoch: time_model=PairStepTimeModel\(c=1\.0.*one per sample",
        ),
        (
            lambda: PairStepTimeModel(c=0.01, a_t=-1.0),
            r"PairStepTimeModel coefficient a_t must be a finite number >= 0, got a_t=-1\.0",
        ),
        (
            lambda: PairStepTimeModel(c=0.01, error=1.0),
            r"PairStepTimeModel error must be a number in \[0, 1\).*got error=1\.0",
        ),
        (
            lambda: check_step_time("0.01,x,0,0,0,0"),
            r"time_model as text of pairs must be six numbers 'c,a_s,a_t,b_s,b_t,cross'.*"
            r"got time_model='0\.01,x,0,0,0,0'",
        ),
    ],
    ids=["one-length-for-pairs", "pairs-for-one-length", "plan_epoch", "negative", "error", "text"],
)
def test_a_step_time_of_the_wrong_lengths_is_refused_by_name(call: Any, match: str) -> None:
    with pytest.raises(dynbatch.InputError, match=match):
        call()


def test_a_step_time_of_one_length_is_still_refused_for_pairs_by_the_split() -> None:
    """A flat one of one length is taken where no length is read (grouped, each update whole);
    one that reads a length is refused for pairs."""
    pairs = lognormal_pairs(100, 0.5)
    options = split_options(pairs, 4, 1, StepTimeModel(c=1e-3, a=1e-5, b=0.0))
    with pytest.raises(dynbatch.InputError, match=r"plan_split_updates: time_model=StepTimeModel"):
        plan_split_updates(pairs, options, 0)


@settings(max_examples=80, deadline=None)
@given(
    pairs=pair_lengths(max_size=150, max_len=200),
    budget=st.floats(1.0, 30.0),
    order=st.sampled_from(["bucket", "shuffle", "ascending", "none"]),
    cost=st.sampled_from(["quadratic", "linear", PairCost(a=1.0, b=0.5, cross=0.25)]),
)
def test_the_fewest_batches_of_pairs_is_never_above_a_plan(
    pairs: np.ndarray, budget: float, order: str, cost: Any
) -> None:
    """NOTE [ the fewest batches of pairs ]: a bound on either side, the larger."""
    single = float(np.max(charge(dynbatch.resolve_cost(cost), 1, pairs)))
    max_cost = single * budget
    bound = lower_bound_batches(pairs, max_cost, cost=cost)
    plan = dynbatch.plan_batches(pairs, max_cost, cost=cost, order=order)
    assert 1 <= bound <= len(plan)
    if (pairs[:, 0] == pairs[0, 0]).all():  # one side alike: not below the other side's own
        assert bound >= lower_bound_batches(
            pairs[:, 1],
            max_cost,
            cost=lambda n, L: charge(cost, n, np.c_[np.full_like(L, pairs[0, 0]), L]),
        )
