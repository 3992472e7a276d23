"""Invariants of plan_batches, as labelled asserts over random inputs (and a few exact cases)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import lengths, planner_args

import dynbatch
from dynbatch import plan_batches


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


@given(planner_args())
def test_batch_size_multiple_holds_but_for_the_last_batch_of_the_packing(args: dict) -> None:
    m = args["batch_size_multiple"]
    batches = plan_batches(**{**args, "order": "none"})
    # sizes that are not a multiple: the budget allowed fewer than m, or samples ran out
    lens, pad = args["lengths"], args["pad_to_multiple_of"]
    fn = dynbatch.resolve_cost(args["cost"])
    cap = args["max_batch_size"] or lens.size
    for b in batches[:-1]:
        if b.size % m:
            allowed = min(
                cap, int(np.floor(args["max_cost"] / float(fn(1, padded_max(lens, b, pad)))))
            )
            assert b.size < m or allowed < m or b.size == allowed, "multiple honoured"


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
    if lens.size < 20:
        return
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


def test_find_oversize_names_them() -> None:
    assert dynbatch.find_oversize([5, 50, 6], 400).tolist() == [1]


def test_callable_costs_and_non_monotone_ones() -> None:
    lens = np.random.default_rng(4).integers(1, 50, 200)
    plan = plan_batches(lens, 1000, cost=lambda n, L: n * max(L, 8), order="shuffle")
    assert all(b.size * max(int(lens[b].max()), 8) <= 1000 for b in plan)
    # a cost that is not monotone in n: 4 samples fit, the 1 left over does not
    with pytest.raises(ValueError, match="not nondecreasing"):
        plan_batches(
            [10] * 5,
            1000,
            cost=lambda n, L: 1e9 if n == 1 else n * L,
            order="none",
            max_batch_size=4,
        )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lengths": []}, "lengths is empty"),
        ({"lengths": [3, 0]}, r"lengths must be positive; lengths\[1\]=0"),
        ({"lengths": [3, -2]}, r"lengths\[1\]=-2"),
        ({"lengths": [3.0, float("nan")]}, r"whole numbers; lengths\[1\]=nan"),
        ({"lengths": [3, 2.5]}, r"whole numbers; lengths\[1\]=2.5"),
        ({"lengths": [[1, 2]]}, "1-D"),
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
    ],
)
def test_bad_input_names_the_argument(kwargs: dict, message: str) -> None:
    args = {"lengths": [3, 4, 5], "max_cost": 1000, **kwargs}
    with pytest.raises((ValueError, TypeError), match=message):
        plan_batches(**args)


def test_lengths_of_strings_are_a_type_error() -> None:
    with pytest.raises(TypeError, match="must hold integers"):
        plan_batches(["a", "b"], 100)
