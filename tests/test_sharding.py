"""shard_plan: equal steps per rank, nothing lost or repeated, balanced costs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import planner_args

from dynbatch import plan_batches, shard_plan


@given(planner_args(), st.integers(1, 8), st.booleans())
def test_equal_counts_and_every_index_once(args: dict, replicas: int, keep_order: bool) -> None:
    plan = plan_batches(**args)
    sp = shard_plan(
        plan,
        args["lengths"],
        replicas,
        cost=args["cost"],
        pad_to_multiple_of=args["pad_to_multiple_of"],
        keep_order=keep_order,
    )
    shares = [sp.for_rank(r) for r in range(replicas)]
    assert len({len(s) for s in shares}) == 1, "equal batch counts per rank"
    real = [b for b, pad in zip(sp.batches, sp.is_padding, strict=True) if not pad]
    assert np.array_equal(np.sort(np.concatenate(real)), np.arange(args["lengths"].size)), (
        "every index exactly once, padding aside"
    )
    if sp.is_padding.any():
        assert all(b.size == 1 for b in real), "repeats only when no batch can be split"
    assert all(b.size > 0 for b in sp.batches), "no empty batch"


@given(planner_args(), st.integers(2, 8))
def test_drop_last_drops_only_the_remainder(args: dict, replicas: int) -> None:
    plan = plan_batches(**args)
    sp = shard_plan(plan, args["lengths"], replicas, drop_last=True)
    assert len(sp.batches) == len(plan) - len(plan) % replicas, "only the remainder is dropped"
    assert not sp.is_padding.any()


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7])
def test_fewer_samples_than_ranks_are_flagged_repeats(n: int) -> None:
    sp = shard_plan(plan_batches([4] * n, 16), [4] * n, 8)
    assert len(sp.batches) == 8, "one batch per rank"
    assert int(sp.is_padding.sum()) == 8 - n, "exactly the missing ones are flagged"


def test_same_seed_and_epoch_give_the_same_shards_and_balance_is_tight() -> None:
    lens = np.minimum(np.ceil(np.random.default_rng(0).lognormal(4.4, 0.8, 5000)), 512).astype(int)
    budget = 20 * 512**2 / 4
    plan = plan_batches(lens, budget)
    a = shard_plan(plan, lens, 4, seed=3, epoch=1)
    b = shard_plan(plan, lens, 4, seed=3, epoch=1)
    assert [x.tolist() for x in a.batches] == [x.tolist() for x in b.batches], "deterministic"
    costs = np.array([x.size * float(lens[x].max()) ** 2 for x in a.batches]).reshape(-1, 4)
    assert (costs.max(1) / costs.mean(1)).mean() <= 1.05, "steps balanced on average"
