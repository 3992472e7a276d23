"""Updates counted in target tokens for (source, target) pairs (NOTE [ lengths of pairs ]).

An encoder–decoder's loss is over its target, so ``update_unit="tokens"`` on pairs counts each
pair's target tokens (or the ``loss_tokens`` given): the recipe's update size, the plan's
updates, the accumulator's windows and the step counts. Properties over drawn pairs
(tests/strategies.py): every pair exactly once, each update's target tokens as counted from
the plan itself, equal steps on every rank, and the one-length planner's counts where every
source is alike.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import lognormal_pairs, pair_lengths

from dynbatch import DistributedDynamicBatchSampler, like_fixed, plan_batches, plan_epoch
from dynbatch.plan.sharding import ShardedPlan
from dynbatch.plan.windows import EpochWindows, micro_step_counts, update_ends


def loss_tokens_for(pairs: np.ndarray, seed: int) -> np.ndarray:
    """Per pair, some of its target's tokens carry a loss (the first pair's all of them)."""
    loss = np.random.default_rng(seed).integers(0, pairs[:, 1] + 1)
    loss[0] = pairs[0, 1]
    return np.asarray(loss, dtype=np.int64)


def update_counts(sharded: ShardedPlan, counted: np.ndarray) -> list[int]:
    """Each update's counted tokens, summed from the plan's own batches (repeats count 0)."""
    ends = update_ends(sharded, counted)
    steps = sharded.plan
    per_step = [
        sum(
            int(counted[steps[s * sharded.num_replicas + r]].sum())
            for r in range(sharded.num_replicas)
            if not sharded.is_padding[s * sharded.num_replicas + r]
        )
        for s in range(sharded.num_steps)
    ]
    return [sum(per_step[a:b]) for a, b in zip(np.r_[0, ends[:-1]], ends, strict=True)]


@settings(max_examples=60, deadline=None)
@given(
    pairs=pair_lengths(max_size=200, max_len=200),
    batch=st.integers(1, 16),
    replicas=st.integers(1, 4),
    seed=st.integers(0, 2**31),
    epoch=st.integers(0, 9),
    with_loss=st.booleans(),
)
def test_updates_in_target_tokens_hold_every_pair_once_and_the_targets_planned(
    pairs: np.ndarray, batch: int, replicas: int, seed: int, epoch: int, with_loss: bool
) -> None:
    loss = loss_tokens_for(pairs, seed) if with_loss else None
    counted = pairs[:, 1] if loss is None else loss
    options = like_fixed(
        pairs, batch, update_unit="tokens", num_replicas=replicas, seed=seed, loss_tokens=loss
    )
    assert options.update_unit == "tokens"
    assert options.update_size == pytest.approx(batch * replicas * counted.mean()), (
        "B samples' mean target (or loss) tokens"
    )
    sharded = plan_epoch(pairs, options, epoch, replicas, loss_tokens=loss)
    real = sharded.plan.indices[np.repeat(~sharded.is_padding, sharded.plan.sizes)]
    assert sorted(real.tolist()) == list(range(len(pairs))), "every pair exactly once"
    ranks = [len(sharded.for_rank(r)) for r in range(replicas)]
    assert len(set(ranks)) == 1, f"equal steps on every rank: {ranks}"
    per_update = update_counts(sharded, counted)
    assert sum(per_update) == int(counted.sum()), "the updates count every target token once"
    whole = math.ceil(float(counted.sum()) / options.update_size - 1e-9)
    assert len(per_update) == min(sharded.num_steps, max(1, whole)), "the fixed batch's count"
    windows = EpochWindows(sharded, pairs if loss is None else loss, epoch=epoch, unit="tokens")
    assert [s.count for s in windows.spans()] == per_update, "the accumulator counts targets"


@settings(max_examples=40, deadline=None)
@given(
    targets=st.lists(st.integers(1, 120), min_size=1, max_size=150),
    source=st.integers(1, 60),
    batch=st.integers(1, 12),
    replicas=st.integers(1, 3),
    seed=st.integers(0, 2**31),
)
def test_pairs_of_one_source_length_count_updates_as_their_targets_do(
    targets: list[int], source: int, batch: int, replicas: int, seed: int
) -> None:
    """Where every source is alike, a pair is its target: the same update size, the same
    updates an epoch and each step counting the same tokens as the one-length plan's."""
    one = np.asarray(targets, dtype=np.int64)
    pairs = np.column_stack([np.full(one.size, source), one])
    kwargs: dict[str, Any] = {"update_unit": "tokens", "num_replicas": replicas, "seed": seed}
    as_pairs, as_one = like_fixed(pairs, batch, **kwargs), like_fixed(one, batch, **kwargs)
    assert as_pairs.update_size == pytest.approx(as_one.update_size)
    planned = plan_epoch(pairs, as_pairs, 0, replicas)
    counts = micro_step_counts(planned, pairs, "tokens")
    assert counts.tolist() == micro_step_counts(planned, one, "tokens").tolist()
    alone = plan_epoch(one, as_one, 0, replicas)
    whole = max(1, math.ceil(float(one.sum()) / as_one.update_size - 1e-9))
    assert update_ends(planned, pairs).size == min(planned.num_steps, whole)
    assert update_ends(alone, one).size == min(alone.num_steps, whole)


def test_plan_batches_takes_updates_in_tokens_of_pairs_and_the_recipe_counts_targets() -> None:
    pairs = lognormal_pairs(2000, 0.7, seed=3)
    size = 32 * float(pairs[:, 1].mean())
    plan = plan_batches(pairs, 4e6, update_size=size, update_unit="tokens", seed=1)
    sharded = plan_epoch(
        pairs, like_fixed(pairs, 32, update_unit="tokens", seed=1), 0
    )  # the recipe's
    assert len(update_ends(sharded, pairs)) == math.ceil(pairs[:, 1].sum() / size - 1e-9)
    assert sorted(plan.indices.tolist()) == list(range(len(pairs)))


@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_samplers_in_target_tokens_give_every_rank_the_same_steps(replicas: int) -> None:
    pairs = lognormal_pairs(1500, 0.6, seed=4)
    samplers = [
        DistributedDynamicBatchSampler(
            lengths=pairs, batch_size=8, update_unit="tokens", num_replicas=replicas, rank=r
        )
        for r in range(replicas)
    ]
    batches = [list(s) for s in samplers]
    assert len({len(b) for b in batches}) == 1, "equal steps on every rank"
    padding = [s.padding_mask(0) for s in samplers]
    real = [
        i
        for b, pad in zip(batches, padding, strict=True)
        for k, x in enumerate(b)
        if not pad[k]
        for i in x
    ]
    assert sorted(real) == list(range(len(pairs))), "every pair exactly once"
    steps = samplers[0].steps_for_epochs(range(2))
    assert steps == sum(len(update_ends(samplers[0].epoch_plan(e), pairs)) for e in range(2))
    assert all(s.steps_for_epochs(range(2)) == steps for s in samplers), "every rank counts so"
    per_epoch = math.ceil(pairs[:, 1].sum() / samplers[0].options.update_size - 1e-9)
    assert steps == 2 * per_epoch, "the fixed batch's updates, counted in target tokens"


def test_the_accumulator_cuts_a_token_target_on_target_tokens() -> None:
    """``GradientAccumulator(target=..., unit="tokens")`` on a sampler of pairs closes a window
    where its target tokens (not both sides') reach the target."""
    import paddle

    from dynbatch import DynamicBatchSampler, GradientAccumulator
    from dynbatch.plan.windows import accumulation_windows

    pairs = lognormal_pairs(800, 0.6, seed=7)
    pairs[:, 0] *= 3  # sources three times the targets: counting both sides would differ
    sampler = DynamicBatchSampler(lengths=pairs, max_cost=2000, cost="linear", seed=3)
    net = paddle.nn.Linear(2, 2)
    optimizer = paddle.optimizer.SGD(parameters=net.parameters())
    target = 400
    accumulator = GradientAccumulator(net, optimizer, sampler=sampler, target=target, unit="tokens")
    plan = sampler.epoch_plan(0)
    targets = accumulation_windows(micro_step_counts(plan, pairs[:, 1], "tokens"), target)
    both = accumulation_windows(micro_step_counts(plan, pairs.sum(axis=1), "tokens"), target)
    assert targets.size != both.size, "precondition: the two counts cut differently"
    assert (
        accumulator.steps_for_epochs(range(2))
        == targets.size
        + accumulation_windows(
            micro_step_counts(sampler.epoch_plan(1), pairs[:, 1], "tokens"), target
        ).size
    )
