"""shard_plan and plan_epoch: equal steps per rank, nothing lost or repeated, balanced compute."""

from __future__ import annotations

import numpy as np
import pytest
from deadline import within
from hypothesis import given
from hypothesis import strategies as st
from strategies import planner_args

import dynbatch
from dynbatch import PlanOptions, plan_batches, plan_epoch, shard_plan
from dynbatch.plan.epochs import equal_batch_count
from dynbatch.plan.planning import batch_capacity
from dynbatch.plan.sharding import step_imbalance


def options_of(args: dict, **changes: object) -> PlanOptions:
    return PlanOptions(
        **{k: v for k, v in args.items() if k not in ("lengths", "epoch")}, **changes
    )


def off_multiple(plan: dynbatch.Plan, lens: np.ndarray, options: PlanOptions) -> int:
    m, pad = options.batch_size_multiple, options.pad_to_multiple_of
    longest = [-(-int(lens[b].max()) // pad) * pad for b in plan]
    caps = batch_capacity(longest, options, lens.size) if longest else []
    return sum(1 for b, cap in zip(plan, caps, strict=True) if b.size % m and cap >= m)


@given(planner_args(), st.integers(1, 8))
def test_equal_counts_every_index_once_and_multiples_kept(args: dict, replicas: int) -> None:
    options = options_of(args)
    lens = args["lengths"]
    plan = plan_batches(lens, options=options, epoch=args["epoch"])
    sp = shard_plan(plan, lens, replicas, epoch=args["epoch"], options=options)
    shares = [sp.for_rank(r) for r in range(replicas)]
    assert len({len(s) for s in shares}) == 1, "equal batch counts per rank"
    real = [b for b, pad in zip(sp.plan, sp.is_padding, strict=True) if not pad]
    assert np.array_equal(np.sort(np.concatenate(real)), np.arange(lens.size)), (
        "every index exactly once, padding aside"
    )
    if sp.is_padding.any():
        assert all(b.size == 1 for b in real), "repeats only when no batch can be split"
    assert all(b.size > 0 for b in sp.plan), "no empty batch"
    fn = options.cost
    for b in sp.plan:
        longest = -(-int(lens[b].max()) // options.pad_to_multiple_of) * options.pad_to_multiple_of
        assert float(fn(b.size, longest)) <= options.max_cost or b.size == 1, "within budget"
    m = options.batch_size_multiple
    needed = -len(plan) % replicas
    doubles = int((plan.sizes >= 2 * m).sum())
    extra = off_multiple(sp.plan, lens, options) - off_multiple(plan, lens, options)
    assert extra <= 2 * max(0, needed - doubles), (
        "splits keep multiples unless no batch holds two multiples"
    )


def test_splits_keep_the_multiple_when_a_batch_holds_two() -> None:
    options = PlanOptions(max_cost=160, cost="linear", batch_size_multiple=8, order="none")
    lens = np.full(32, 10)  # one batch of 16, one of 16
    sp = shard_plan(plan_batches(lens, options=options), lens, 4, options=options)
    assert sorted(sp.plan.sizes.tolist()) == [8, 8, 8, 8], "16s split into 8s, not 12 + 4"


def test_no_batch_with_two_multiples_is_split_unevenly_and_said_so() -> None:
    options = PlanOptions(max_cost=80, cost="linear", batch_size_multiple=8, order="none")
    lens = np.full(24, 10)  # [8, 8, 8]: no split keeps multiples, and 3 batches do not share
    sp = shard_plan(plan_batches(lens, options=options), lens, 2, options=options)
    assert sorted(sp.plan.sizes.tolist()) == [4, 4, 8, 8]
    assert not sp.is_padding.any(), "nothing repeated"


@given(planner_args(), st.integers(2, 8))
def test_drop_last_drops_one_partial_batch_and_splits_to_even_the_ranks(
    args: dict, replicas: int
) -> None:
    options = options_of(args, drop_last=True)
    lens = args["lengths"]
    kept = plan_epoch(lens, options, args["epoch"], replicas)
    everything = plan_epoch(lens, options.replace(drop_last=False), args["epoch"], replicas)
    real = kept.plan.indices[np.repeat(~kept.is_padding, kept.plan.sizes)]
    assert len(kept.plan) % replicas == 0
    singles = all(b.size == 1 for b, pad in zip(kept.plan, kept.is_padding, strict=True) if not pad)
    assert not kept.is_padding.any() or singles, "repeats only when no batch can be split"
    assert np.unique(real).size == real.size, "nothing repeated"
    dropped = lens.size - real.size
    full = plan_batches(lens, options=options.replace(drop_last=False), epoch=args["epoch"])
    largest = max((b.size for b in full), default=0)
    assert dropped <= largest, "at most one batch's worth dropped"
    assert everything.plan.indices.size >= real.size


def test_drop_last_at_four_ranks_leaves_out_different_batches_each_epoch() -> None:
    rng = np.random.default_rng(0)
    lens = np.minimum(np.ceil(rng.lognormal(4.4, 0.8, 3000)), 512).astype(int)
    options = PlanOptions(max_cost=20 * 512**2 / 4, drop_last=True)
    seen = np.zeros(lens.size)
    for epoch in range(30):
        sp = plan_epoch(lens, options, epoch, 4)
        seen[np.concatenate(list(sp.plan))] += 1
    longest = np.argsort(lens)[-10:]
    assert (seen[longest] > 0).all(), "the ten longest samples are trained on"
    assert seen.min() >= 15, "every sample in at least half the epochs"
    assert (30 * lens.size - seen.sum()) / 30 < 0.02 * lens.size, "under 2% dropped per epoch"


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7])
def test_fewer_samples_than_ranks_are_flagged_repeats(n: int) -> None:
    options = PlanOptions(max_cost=16)
    sp = shard_plan(plan_batches([4] * n, options=options), [4] * n, 8, options=options)
    assert len(sp.plan) == 8, "one batch per rank"
    assert int(sp.is_padding.sum()) == 8 - n, "exactly the missing ones are flagged"


def chnsenticorp_like(n: int = 8000, seed: int = 0) -> np.ndarray:
    lens = np.ceil(np.random.default_rng(seed).lognormal(4.4, 0.8, n))
    return np.minimum(lens, 512).astype(int)


def test_same_seed_and_epoch_give_the_same_shards() -> None:
    lens = chnsenticorp_like(5000)
    options = PlanOptions(max_cost=20 * 512**2 / 4, seed=3)
    a, b = plan_epoch(lens, options, 1, 4), plan_epoch(lens, options, 1, 4)
    assert a.plan == b.plan and np.array_equal(a.is_padding, b.is_padding), "deterministic"
    assert a.plan != plan_epoch(lens, options, 2, 4).plan, "another epoch, another plan"


@pytest.mark.parametrize("replicas", [2, 4, 8])
def test_steps_are_balanced_by_padded_tokens(replicas: int) -> None:
    lens = chnsenticorp_like()
    options = PlanOptions(max_cost=20 * 512**2 / 4)
    sp = plan_epoch(lens, options, 0, replicas)
    tokens = sp.plan.sizes * np.array([lens[b].max() for b in sp.plan])
    grouped_by_cost = shard_plan(
        plan_batches(lens, options=options), lens, replicas, options=options.replace(balance="cost")
    )
    cost_tokens = grouped_by_cost.plan.sizes * np.array(
        [lens[b].max() for b in grouped_by_cost.plan]
    )
    ours = step_imbalance(tokens, replicas)
    assert ours <= 1.05, f"slowest rank / mean in padded tokens: {ours:.3f}"
    assert ours < step_imbalance(cost_tokens, replicas), "better than grouping by n*L^2"


def test_balance_by_a_custom_compute_model() -> None:
    lens = chnsenticorp_like(3000)
    options = PlanOptions(max_cost=20 * 512**2 / 4, balance=lambda n, L: n * L + 0.01 * n * L * L)
    sp = plan_epoch(lens, options, 0, 4)
    work = np.array([b.size * (lens[b].max() + 0.01 * lens[b].max() ** 2) for b in sp.plan])
    assert step_imbalance(work, 4) <= 1.05


@pytest.mark.parametrize("order", ["bucket", "shuffle", "ascending"])
@pytest.mark.parametrize("replicas", [1, 3])
def test_equal_epochs_give_the_same_count_by_splitting(order: str, replicas: int) -> None:
    lens = chnsenticorp_like(2000, seed=1)
    options = PlanOptions(max_cost=4 * 256**2, order=order, equal_epochs=True)
    count = equal_batch_count(lens, options, replicas)
    counts = set()
    for epoch in range(20):
        sp = plan_epoch(lens, options, epoch, replicas, num_batches=count)
        counts.add(len(sp.plan))
        flat = np.concatenate(list(sp.plan))
        assert np.array_equal(np.sort(flat), np.arange(lens.size)), "nothing dropped or repeated"
        assert not sp.is_padding.any()
    assert counts == {count}, "every epoch has the same number of batches"
    unequal = {
        len(plan_batches(lens, options=options.replace(equal_epochs=False), epoch=e))
        for e in range(20)
    }
    if order != "ascending":
        assert len(unequal) > 1, "without the option the count varies (so the test means something)"


def test_plans_given_as_lists_are_checked() -> None:
    options = PlanOptions(max_cost=100)
    with pytest.raises(dynbatch.InputError, match="outside"):
        shard_plan([[0, -1]], [1, 2], 2, options=options)
    with pytest.raises(dynbatch.InputError, match="integer indices"):
        shard_plan([[0.0, 1.0]], [1, 2], 2, options=options)
    with pytest.raises(dynbatch.InputError, match="more than once"):
        shard_plan([[0, 1], [1]], [1, 2], 2, options=options)


def test_plan_epoch_checks_its_inputs() -> None:
    options = PlanOptions(max_cost=100)
    with pytest.raises(TypeError, match=r"options must be a dynbatch\.PlanOptions"):
        plan_epoch([1, 2], {"max_cost": 100}, 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="epoch must be an integer >= 0, got epoch=-2"):
        plan_epoch([1, 2], options, -2)
    with pytest.raises(ValueError, match=r"lengths must be positive; lengths\[1\]=0"):
        plan_epoch([1, 0], options, 0)
    with pytest.raises(TypeError, match=r"plan must be a sequence of batches"):
        shard_plan(None, [1, 2], 2, options=options)  # type: ignore[arg-type]


def test_a_multiple_larger_than_the_cap_is_refused() -> None:
    with pytest.raises(
        ValueError, match="batch_size_multiple=8 can never be met with max_batch_size=4"
    ):
        PlanOptions(max_cost=100, batch_size_multiple=8, max_batch_size=4)


def test_equal_epochs_with_no_batch_left_by_drop_last_is_a_named_error() -> None:
    options = PlanOptions(max_cost=100, cost="linear", drop_last=True, equal_epochs=True)
    lens = [2, 2, 5, 4]  # one batch holds them all, and drop_last drops it
    for call in (lambda: equal_batch_count(lens, options), lambda: plan_epoch(lens, options, 0)):
        with within(20), pytest.raises(dynbatch.InputError, match=r"drop_last=True leaves no"):
            call()


def test_no_batches_cannot_be_split_into_some() -> None:
    options = PlanOptions(max_cost=100, cost="linear")
    with within(20), pytest.raises(dynbatch.InputError, match=r"plan has no batch.*num_batches=2"):
        shard_plan([], [1, 2], 2, num_batches=2, options=options)


def real_indices(sp: dynbatch.ShardedPlan) -> np.ndarray:
    return sp.plan.indices[np.repeat(~sp.is_padding, sp.plan.sizes)]


@pytest.mark.parametrize(
    ("lens", "max_cost", "seed", "replicas"),
    [([2, 7, 7, 1], 13, 1, 1), ([2, 6, 9, 2, 8], 15, 11, 2)],
    ids=["one-rank", "two-ranks"],
)
def test_equal_epochs_with_drop_last_use_no_sample_twice(
    lens: list[int], max_cost: float, seed: int, replicas: int
) -> None:
    options = PlanOptions(
        max_cost=max_cost,
        cost="linear",
        order="shuffle",
        seed=seed,
        drop_last=True,
        equal_epochs=True,
    )
    count = equal_batch_count(lens, options, replicas)
    for epoch in range(30):
        sp = plan_epoch(lens, options, epoch, replicas, num_batches=count)
        assert len(sp.plan) == count, "the same count every epoch"
        assert not sp.is_padding.any(), "nothing repeated, not even as flagged padding"
        flat = sp.plan.indices
        assert np.unique(flat).size == flat.size, f"epoch {epoch}: a sample twice"


@given(planner_args(), st.integers(1, 4))
def test_equal_epochs_never_repeat_a_sample_but_where_documented(args: dict, replicas: int) -> None:
    """No repeats on one rank ever; on several only where shard_plan itself repeats."""
    options = options_of(args, drop_last=True, equal_epochs=True)
    lens = args["lengths"]
    try:
        with within(30):
            count = equal_batch_count(lens, options, replicas)
            sp = plan_epoch(lens, options, args["epoch"], replicas, num_batches=count)
    except dynbatch.InputError as exc:  # refused by name: never a hang, never a repeat
        assert "equal_epochs" in str(exc)
        return
    assert len(sp.plan) == count
    real = real_indices(sp)
    assert np.unique(real).size == real.size, "no sample twice among the real batches"
    if sp.is_padding.any():
        assert replicas > 1, "one rank never repeats"
        real_sizes = sp.plan.sizes[~sp.is_padding]
        assert (real_sizes == 1).all(), "repeats only when no batch is left to split"


def test_equal_epochs_repeat_only_where_sharding_alone_would() -> None:
    """Three single-sample batches left by drop_last on two ranks: no draw avoids a repeat,
    and the repeat is the documented one, as without equal_epochs (not an error)."""
    options = PlanOptions(max_cost=10, cost="linear", order="none", drop_last=True)
    lens = [10, 10, 10, 1]  # [0], [1], [2] and [3], which drop_last drops
    plain = plan_epoch(lens, options, 0, 2)
    equal = plan_epoch(lens, options.replace(equal_epochs=True), 0, 2)
    assert equal.plan == plain.plan and equal.is_padding.tolist() == plain.is_padding.tolist()
    assert int(equal.is_padding.sum()) == 1
