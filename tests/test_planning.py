"""Invariants of plan_batches, as labelled asserts over random inputs (and a few exact cases)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from strategies import lengths, planner_args

import dynbatch
from dynbatch import PlanOptions, plan_batches
from dynbatch.plan.planning import batch_capacity


def padded_max(lens: np.ndarray, batch: np.ndarray, multiple: int) -> int:
    longest = int(lens[batch].max())
    return -(-longest // multiple) * multiple


def assert_valid_plan(batches: list[np.ndarray], args: dict) -> None:
    lens, pad = args["lengths"], args.get("pad_to_multiple_of", 1)
    fn = dynbatch.resolve_cost(args.get("cost", "quadratic"))
    flat = np.concatenate(batches)
    assert np.array_equal(np.sort(flat), np.arange(lens.size)), "every index exactly once"
    for b in batches:
        assert b.size > 0, "no empty batch"
        assert float(fn(b.size, padded_max(lens, b, pad))) <= args["max_cost"], "within budget"
        if args.get("max_batch_size"):
            assert b.size <= args["max_batch_size"], "cap honoured"


@given(planner_args())
def test_every_index_once_and_every_batch_within_budget(args: dict) -> None:
    assert_valid_plan(plan_batches(**args), args)


@given(planner_args())
def test_same_seed_and_epoch_give_the_same_plan(args: dict) -> None:
    first, second = plan_batches(**args), plan_batches(**args)
    assert [b.tolist() for b in first] == [b.tolist() for b in second], "deterministic"


def off_multiple(batches: dynbatch.Plan, args: dict) -> list[int]:
    """Batches that are not a multiple although their budget allows one."""
    options = PlanOptions(**{k: v for k, v in args.items() if k not in ("lengths", "epoch")})
    lens, m = args["lengths"], args.get("batch_size_multiple", 1)
    longest = [padded_max(lens, b, options.pad_to_multiple_of) for b in batches]
    caps = batch_capacity(longest, options, lens.size) if longest else []
    return [
        k for k, (b, cap) in enumerate(zip(batches, caps, strict=True)) if b.size % m and cap >= m
    ]


@given(planner_args(), st.sampled_from(dynbatch.plan.planning.ORDERS), st.booleans())
def test_batch_size_multiple_holds_but_for_one_remainder(
    args: dict, order: str, drop: bool
) -> None:
    args = {**args, "order": order, "drop_last": drop}
    batches = plan_batches(**args)
    assert len(off_multiple(batches, args)) <= 1, "one remainder at most falls short of a multiple"


def test_a_short_pair_before_long_samples_is_not_left_off_multiple() -> None:
    lens = [10, 10, 40, 40] + [10] * 8
    args = {"lengths": np.array(lens), "max_cost": 80, "cost": "linear", "batch_size_multiple": 4}
    plan = plan_batches(**args, order="none")
    assert sorted(plan.sizes.tolist()) == [2, 2, 8], "two 40s (budget < 4), then 8 + the pair"
    assert off_multiple(plan, args) == [len(plan) - 1], "only the last batch, the remainder"
    assert sorted(np.concatenate(plan).tolist()) == list(range(12)), "every index once"


@given(planner_args())
def test_drop_last_only_drops_the_final_unfilled_batch(args: dict) -> None:
    full = plan_batches(**{**args, "order": "ascending"})
    dropped = plan_batches(**{**args, "order": "ascending", "drop_last": True})
    assert len(full) - len(dropped) in (0, 1), "at most one batch dropped"
    assert [b.tolist() for b in dropped] == [b.tolist() for b in full[: len(dropped)]], (
        "rest unchanged"
    )


@given(lengths(), st.sampled_from(["shuffle", "bucket"]))
def test_random_orders_change_with_the_epoch(lens: np.ndarray, order: str) -> None:
    assume(lens.size >= 20)
    budget = float(lens.max()) ** 2 * 4
    a = plan_batches(lens, budget, order=order, epoch=0)
    b = plan_batches(lens, budget, order=order, epoch=1)
    assert [x.tolist() for x in a] != [x.tolist() for x in b], "a new epoch gives a new plan"


def test_sorted_orders_are_sorted_and_descending_reverses_ascending() -> None:
    lens = np.random.default_rng(1).integers(1, 500, 1000)
    asc = plan_batches(lens, 20 * 500**2 / 4, order="ascending")
    desc = plan_batches(lens, 20 * 500**2 / 4, order="descending")
    longest = [int(lens[b].max()) for b in asc]
    assert longest == sorted(longest), "ascending batches grow in length"
    assert [b.tolist() for b in desc] == [b.tolist() for b in reversed(asc)], "descending mirrors"


def test_none_order_keeps_dataset_order() -> None:
    lens = np.random.default_rng(2).integers(1, 100, 500)
    flat = np.concatenate(plan_batches(lens, 4000, cost="linear", order="none"))
    assert flat.tolist() == list(range(500)), "dataset order"


def test_bucket_pads_like_a_sort_and_shuffles_like_a_shuffle() -> None:
    # a long-tailed corpus, as text corpora are
    lens = np.minimum(np.ceil(np.random.default_rng(3).lognormal(4.4, 0.8, 20_000)), 512).astype(
        int
    )
    budget = 20 * 512**2 / 4
    stats = {
        o: dynbatch.plan_stats(lens, plan_batches(lens, budget, order=o), max_cost=budget)
        for o in ("bucket", "ascending")
    }
    assert stats["bucket"].padding_efficiency >= 0.95 * stats["ascending"].padding_efficiency
    assert stats["bucket"].batches <= 1.10 * stats["ascending"].batches
    e0 = {tuple(sorted(b.tolist())) for b in plan_batches(lens, budget, epoch=0)}
    e1 = [tuple(sorted(b.tolist())) for b in plan_batches(lens, budget, epoch=1)]
    assert sum(b in e0 for b in e1) < 0.2 * len(e1), "batches are new each epoch"
    longest = [int(lens[b].max()) for b in plan_batches(lens, budget, epoch=0)]
    assert abs(np.corrcoef(np.arange(len(longest)), longest)[0, 1]) < 0.2, "order not by length"


def test_quadratic_budget_without_cap_makes_huge_batches_of_tiny_samples() -> None:
    lens = np.array([1] * 5000 + [100] * 10)
    assert max(b.size for b in plan_batches(lens, 100**2, order="ascending")) == 5000
    capped = plan_batches(lens, 100**2, order="ascending", max_batch_size=64)
    assert max(b.size for b in capped) == 64


@pytest.mark.parametrize("order", ["bucket", "shuffle", "ascending", "descending", "none"])
def test_oversize_samples(order: str) -> None:
    lens = np.array([5, 50, 6, 7, 60, 8])
    with pytest.raises(ValueError, match=r"sample 1 has length 50 .* max_cost=400"):
        plan_batches(lens, 400, order=order)
    with pytest.warns(UserWarning, match="skipping 2 sample"):
        skipped = plan_batches(lens, 400, order=order, oversize="skip")
    assert sorted(np.concatenate(skipped).tolist()) == [0, 2, 3, 5], "oversize left out"
    alone = plan_batches(lens, 400, order=order, oversize="alone")
    assert sorted(np.concatenate(alone).tolist()) == list(range(6)), "every index once"
    assert [1] in [b.tolist() for b in alone] and [4] in [b.tolist() for b in alone], "alone"


@pytest.mark.parametrize("order", ["bucket", "shuffle", "ascending", "descending", "none"])
def test_all_samples_oversize_and_skipped_is_a_named_error(order: str) -> None:
    with pytest.raises(dynbatch.InputError, match="all 2 samples are over max_cost=10"):
        plan_batches([5, 6], 10, order=order, oversize="skip")


@pytest.mark.parametrize("order", ["bucket", "shuffle"])
def test_drop_last_drops_different_samples_each_epoch(order: str) -> None:
    lens = np.array([10] * 99 + [50])
    seen = np.zeros(lens.size)
    epochs = 100
    for epoch in range(epochs):
        plan = plan_batches(
            lens, 10_000, cost="linear", order=order, max_batch_size=8, drop_last=True, epoch=epoch
        )
        flat = np.concatenate(list(plan))
        assert np.unique(flat).size == flat.size, "nothing repeated"
        assert lens.size - flat.size < 8, "less than one batch dropped"
        seen[flat] += 1
    assert seen[99] > 0.5 * epochs, "the longest sample is trained on in most epochs"
    assert seen.min() > 0.5 * epochs, "so is every other"


def test_plan_is_a_sequence_of_index_arrays() -> None:
    plan = plan_batches([4, 4, 8, 2, 2, 2], 32, cost="linear", order="none")
    assert isinstance(plan, dynbatch.Plan) and len(plan) == 2
    assert plan[-1].tolist() == [4, 5] and plan[0].dtype == np.int64
    assert [b.tolist() for b in plan[::-1]] == [[4, 5], [0, 1, 2, 3]], "slices are plans"
    assert plan == dynbatch.Plan.from_batches([[0, 1, 2, 3], [4, 5]])
    with pytest.raises(IndexError):
        plan[2]


def test_options_object_or_keywords_not_both() -> None:
    opts = PlanOptions(max_cost=32, cost="linear", order="none")
    lens = [4, 4, 8, 2, 2, 2]
    assert plan_batches(lens, options=opts) == plan_batches(lens, 32, cost="linear", order="none")
    with pytest.raises(dynbatch.InputError, match="not both"):
        plan_batches(lens, options=opts, seed=3)
    with pytest.raises(dynbatch.InputError, match="not both"):
        plan_batches(lens, 32, options=opts)
    with pytest.raises(TypeError, match=r"unknown option.*ordr"):
        plan_batches(lens, 32, ordr="none")


def test_find_oversize_names_them() -> None:
    assert dynbatch.find_oversize([5, 50, 6], 400).tolist() == [1]


def test_callable_costs_and_non_monotone_ones() -> None:
    lens = np.random.default_rng(4).integers(1, 50, 200)
    plan = plan_batches(lens, 1000, cost=lambda n, L: n * max(L, 8), order="shuffle")
    assert all(b.size * max(int(lens[b].max()), 8) <= 1000 for b in plan)
    # not monotone in n, and refused when the cost is resolved: a batch of 1 costs more than 2
    with pytest.raises(ValueError, match=r"must be nondecreasing in n .*cost\(1, 1\)=1e\+09"):
        plan_batches([10] * 5, 1000, cost=lambda n, L: 1e9 if n == 1 else n * L)
    # not monotone only at n=5, which the probe skips: 12 samples fit, the 5 left over do not
    with pytest.raises(ValueError, match="not nondecreasing"):
        plan_batches(
            [10] * 17,
            1000,
            cost=lambda n, L: 1e9 if n == 5 else n * L,
            order="none",
            max_batch_size=12,
        )


def test_a_cost_that_does_not_grow_is_refused_with_where() -> None:
    with pytest.raises(dynbatch.InputError, match=r"cost\(2, 1\)=-2\.0"):
        plan_batches([50] * 1000, 100, cost=lambda n, L: np.where(n > 1, -1.0, 1.0) * n * L)
    with pytest.raises(dynbatch.InputError, match=r"nondecreasing in L .*cost\(1, 1\)=10 > "):
        dynbatch.PlanOptions(max_cost=100, cost=lambda n, L: n * (10.0 if L < 2 else 1.0))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lengths": []}, "lengths is empty"),
        ({"lengths": [3, 0]}, r"lengths must be positive; lengths\[1\]=0"),
        ({"lengths": [3, -2]}, r"lengths\[1\]=-2"),
        ({"lengths": [3.0, float("nan")]}, r"whole numbers; lengths\[1\]=nan"),
        ({"lengths": [3, 2.5]}, r"whole numbers; lengths\[1\]=2.5"),
        ({"lengths": [[1, 2, 3]]}, "1-D"),  # [N, 2] is (source, target) pairs
        ({"max_cost": 0}, "max_cost must be a positive finite number, got max_cost=0"),
        ({"max_cost": -5}, "max_cost=-5"),
        ({"max_cost": True}, "max_cost=True"),
        ({"max_cost": float("nan")}, "max_cost=nan"),
        ({"order": "sorted"}, "order must be one of .* got order='sorted'"),
        ({"cost": "cubic"}, "cost must be .* got cost='cubic'"),
        ({"cost": 3}, "cost must be a string or a callable"),
        ({"max_batch_size": 0}, "max_batch_size must be an integer >= 1 or None"),
        ({"batch_size_multiple": True}, "batch_size_multiple=True"),
        ({"seed": -1}, "seed must be an integer >= 0"),
        ({"oversize": "drop"}, "oversize must be one of"),
        ({"drop_last": 1}, "drop_last must be True or False"),
        ({"bucket_width": 1e-12}, r"bucket_width must be in \[0.001, 10\]"),
        ({"bucket_width": 1e-300}, "bucket_width=1e-300"),
        ({"lengths": np.array([2**63], dtype=np.uint64)}, r"below 2\*\*53; lengths\[0\]="),
        ({"lengths": [1e19]}, r"below 2\*\*53"),
        ({"lengths": np.ma.masked_array([3, 4], mask=[0, 1])}, r"lengths\[1\] is masked"),
        ({"cost": lambda n, L: (n, L)}, r"cost must return a number"),
    ],
)
def test_bad_input_names_the_argument(kwargs: dict, message: str) -> None:
    args = {"lengths": [3, 4, 5], "max_cost": 1000, **kwargs}
    with pytest.raises((ValueError, TypeError), match=message):
        plan_batches(**args)


def test_lengths_of_strings_are_a_type_error() -> None:
    with pytest.raises(TypeError, match="must hold integers"):
        plan_batches(["a", "b"], 100)


def greedy_reference(caps: list[int], multiple: int) -> tuple[list[int], bool]:
    """The packing rule sample by sample: close a batch when the next sample does not fit."""
    bounds, start, room, i = [], 0, 0, 0
    while i < len(caps):
        if i == start:
            i += 1
            if caps[i - 1] == 0:
                start = i
                bounds.append(i)
            else:
                room = caps[i - 1]
            continue
        room = min(room, caps[i])
        if i - start >= room:
            size = i - start
            if multiple > 1 and size >= multiple:
                size -= size % multiple
            start += size
            bounds.append(start)
            i = start
            continue
        i += 1
    partial = start < len(caps) and len(caps) - start < room
    if start < len(caps):
        bounds.append(len(caps))
    return bounds, partial


@given(
    st.lists(st.integers(0, 80), min_size=1, max_size=400),
    st.sampled_from([1, 2, 4]),
    st.sampled_from([1, 3, 50]),
)
def test_vectorised_sequence_packing_equals_the_rule(
    caps: list[int], multiple: int, scale: int
) -> None:
    caps = [c * scale for c in caps]  # scale 50: batches longer than the vectorised window
    got = dynbatch.plan.planning._pack_sequence(np.array(caps), multiple)
    assert got == greedy_reference(caps, multiple)
