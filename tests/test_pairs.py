"""Plans of (source, target) pairs (NOTE [ planning pairs ]), and that one length is as before.

Properties over drawn pairs (tests/strategies.py): every pair exactly once, every batch
within its budget at its longest source and longest target, the recipe's promises; then
the padding of each side on real and synthetic pairs against the fixed batch, and the 1-D
planner's plans pinned as they were before pairs.
"""

from __future__ import annotations

import csv
import hashlib
import itertools
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import lognormal_pairs, pair_lengths, pinyin_letters

from dynbatch import PlanOptions, like_fixed, plan_batches, plan_epoch, plan_stats
from dynbatch.plan.costs import PairCost, charge, resolve_cost
from dynbatch.plan.lengths import sample_tokens
from dynbatch.plan.pairs import hilbert_index
from dynbatch.plan.planning import ORDERS, padded_lengths
from dynbatch.plan.stats import PairPlanStats, PlanStats

PAIR_COSTS = st.sampled_from(
    [
        "quadratic",
        "linear",
        "mixed:1,0.05",
        PairCost(a=1.0, b=0.5, cross=0.25),
        lambda n, Ls, Lt: n * (Ls + 2 * Lt),  # a callable of pairs, vectorised
        lambda n, Ls, Lt: n * max(Ls, Lt) ** 2,  # one that takes scalars only
    ]
)


@st.composite
def pair_planner_args(draw: st.DrawFn) -> dict[str, Any]:
    """``plan_batches`` keywords for pairs whose budget fits every pair alone."""
    pairs = draw(pair_lengths())
    cost = draw(PAIR_COSTS)
    pad = draw(st.sampled_from([1, 1, 8]))
    single = float(np.max(charge(resolve_cost(cost), 1, padded_lengths(pairs, pad))))
    cap = draw(st.none() | st.integers(1, 64))
    multiple = draw(st.sampled_from([1, 1, 2, 8]))
    return {
        "lengths": pairs,
        "max_cost": single * draw(st.floats(1.0, 40.0)),
        "cost": cost,
        "order": draw(st.sampled_from(ORDERS)),
        "seed": draw(st.integers(0, 2**31)),
        "epoch": draw(st.integers(0, 50)),
        "max_batch_size": cap if cap is None else max(cap, multiple),
        "batch_size_multiple": multiple,
        "pad_to_multiple_of": pad,
        "bucket_width": draw(st.sampled_from([0.05, 0.05, 0.001, 0.5])),
    }


def batch_costs(pairs: np.ndarray, plan: Any, cost: Any, pad: int) -> np.ndarray:
    """Each batch's exact cost: its samples at its longest source and longest target."""
    plens = padded_lengths(pairs, pad)
    longest = np.array([plens[b].max(axis=0) for b in plan])
    return np.asarray(charge(resolve_cost(cost), plan.sizes, longest), dtype=np.float64)


@settings(max_examples=120)
@given(args=pair_planner_args())
def test_every_pair_once_and_every_batch_within_budget(args: dict[str, Any]) -> None:
    pairs = args["lengths"]
    plan = plan_batches(**args)
    assert sorted(plan.indices.tolist()) == list(range(len(pairs))), "every pair exactly once"
    costs = batch_costs(pairs, plan, args["cost"], args["pad_to_multiple_of"])
    assert (costs <= args["max_cost"] * (1 + 1e-12)).all(), "every batch within max_cost"
    if args["max_batch_size"] is not None:
        assert plan.sizes.max() <= args["max_batch_size"], "within max_batch_size"
    multiple = args["batch_size_multiple"]
    off = (plan.sizes >= multiple) & (plan.sizes % multiple != 0)
    assert off.sum() <= 1, "a batch holding a multiple or more is one, but the last packed"
    again = plan_batches(**args)
    assert again.indices.tolist() == plan.indices.tolist(), "(seed, epoch) decides the plan"


@settings(max_examples=60)
@given(args=pair_planner_args(), oversize=st.sampled_from(["skip", "alone"]))
def test_pairs_over_budget_alone_are_skipped_or_alone(args: dict[str, Any], oversize: str) -> None:
    pairs = args["lengths"]
    fn = resolve_cost(args["cost"])
    alone = np.asarray(charge(fn, 1, padded_lengths(pairs, args["pad_to_multiple_of"])))
    args["max_cost"] = float(np.median(alone))  # about half the pairs over budget alone
    over = set(np.flatnonzero(alone > args["max_cost"]).tolist())
    with pytest.warns(UserWarning) if over and oversize == "skip" else _nothing():
        plan = plan_batches(**args, oversize=oversize)
    planned = plan.indices.tolist()
    assert len(planned) == len(set(planned)), "no pair twice"
    if oversize == "skip":
        assert set(planned) == set(range(len(pairs))) - over, "the rest, each once"
    else:
        assert set(planned) == set(range(len(pairs))), "every pair once"
        alone_batches = [b.tolist() for b in plan if b.size == 1 and int(b[0]) in over]
        assert len(alone_batches) == len(over), "each pair over budget is a batch of its own"
    costs = batch_costs(pairs, plan, args["cost"], args["pad_to_multiple_of"])
    assert ((costs <= args["max_cost"] * (1 + 1e-12)) | (plan.sizes == 1)).all()


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


@settings(max_examples=60)
@given(pairs=pair_lengths(), seed=st.integers(0, 2**31), epoch=st.integers(0, 9))
def test_drop_last_drops_at_most_the_one_batch_that_ran_out(
    pairs: np.ndarray, seed: int, epoch: int
) -> None:
    whole = plan_batches(pairs, 1e12, max_batch_size=8, seed=seed, epoch=epoch)
    dropped = plan_batches(pairs, 1e12, max_batch_size=8, seed=seed, epoch=epoch, drop_last=True)
    kept = dropped.indices.tolist()
    assert len(kept) == len(set(kept)) and len(kept) >= len(pairs) - 7, "one short batch at most"
    assert len(dropped) >= len(whole) - 1


# -- the recipe on pairs --------------------------------------------------------------------------
def chnsenticorp_pairs(path: Path) -> np.ndarray:
    """ChnSentiCorp reviews and their pinyin, as lengths: the review's characters (cut at 510,
    plus 2 for the ends) and its pinyin's letters (:func:`strategies.pinyin_letters`, plus 2)."""
    with open(path, encoding="utf-8", newline="") as fh:
        reviews = [row["review"][:510] for row in csv.DictReader(fh)]
    return np.array([[len(r) + 2, pinyin_letters(r) + 2] for r in reviews], dtype=np.int64)


def side_padding(pairs: np.ndarray, batches: Any) -> tuple[float, float]:
    stats = plan_stats(pairs, batches, cost="linear")
    assert isinstance(stats, PairPlanStats)
    return stats.source_padding_efficiency, stats.target_padding_efficiency


def fixed_32(n: int) -> list[np.ndarray]:
    perm = np.random.default_rng(0).permutation(n)
    return [perm[i : i + 32] for i in range(0, n, 32)]


@pytest.fixture(scope="module")
def corpora(chnsenticorp_csv: Path) -> dict[str, np.ndarray]:
    return {
        "chnsenticorp -> pinyin": chnsenticorp_pairs(chnsenticorp_csv),
        **{f"lognormal rho={rho}": lognormal_pairs(8000, rho, seed=1) for rho in (0.5, 0.7, 0.9)},
    }


def test_like_fixed_pads_neither_side(corpora: dict[str, np.ndarray]) -> None:
    """The issue's goal: at least 0.93 on each side, on real pairs (7,766) and on 8,000 pairs
    whose sides are only loosely correlated, where the fixed batch of 32 pads to about 0.3 and
    planning on one key (source + target) leaves one side padded (0.67 to 0.83 here). A
    smaller or wider corpus fills fewer cells and pads more (the docs say how much)."""
    for name, pairs in corpora.items():
        options = like_fixed(pairs, 32)
        fixed = side_padding(pairs, fixed_32(len(pairs)))
        assert max(fixed) < 0.4, f"{name}: the fixed batch pads (0.27 in the issue)"
        for epoch in range(3):
            planned = side_padding(pairs, list(plan_epoch(pairs, options, epoch).plan))
            assert min(planned) >= 0.93, f"{name}, epoch {epoch}: {planned}"


def test_like_fixed_keeps_the_fixed_batchs_updates_and_worst_batch(
    corpora: dict[str, np.ndarray],
) -> None:
    pairs = corpora["lognormal rho=0.5"]
    options = like_fixed(pairs, 32)
    worst = float(PairCost()(32, *pairs.max(axis=0)))
    assert options.cost == PairCost() and options.max_cost == worst, "the fixed batch's worst"
    sharded = plan_epoch(pairs, options, 0)
    assert sharded.window_ends is not None
    assert sharded.window_ends.size == math.ceil(len(pairs) / 32), "the fixed batch's updates"
    costs = batch_costs(pairs, sharded.plan, options.cost, 1)
    assert (costs <= worst).all() and sharded.sizes.max() <= 32, "no batch past its worst"
    # each update mixes lengths as a random batch does: one micro-batch of each stratum
    tokens = np.log(sharded.longest(sample_tokens(pairs)))
    spread = [tokens[a:z].std() for a, z in itertools.pairwise([0, *sharded.window_ends])]
    assert np.mean(spread) > 0.6 * tokens.std(), "updates span the lengths, not one of them"


def test_group_by_length_groups_pairs_on_their_tokens() -> None:
    """Documented choice: a pair's one length is its tokens, source + target."""
    pairs = lognormal_pairs(3000, 0.7, seed=2)
    options = like_fixed(pairs, 16, group_by_length=True)
    sharded = plan_epoch(pairs, options, 0)
    assert sharded.window_ends is not None
    assert sharded.window_ends.size == math.ceil(len(pairs) / 16), "the fixed batch's updates"
    assert sharded.num_steps == sharded.window_ends.size, "each update whole"
    tokens = sample_tokens(pairs)
    grouped = np.mean([tokens[b].sum() / (b.size * tokens[b].max()) for b in sharded.plan])
    shuffled = np.mean([tokens[b].sum() / (b.size * tokens[b].max()) for b in fixed_32(3000)])
    assert grouped > 0.85 > shuffled, "near-equal tokens in each update"


def test_a_cost_of_pairs_taking_args_or_a_ufunc_plans_as_a_cost_of_three_arguments() -> None:
    """A signature that cannot be read as (n, Ls, Lt) (``*args``, a ufunc) was called as
    cost(n, L) and refused as a cost of one length: it is tried as a cost of pairs too."""
    pairs = lognormal_pairs(500, 0.7, seed=4)

    def tokens(n: Any, ls: Any, lt: Any) -> Any:
        return n * (ls + lt)

    expected = [b.tolist() for b in plan_batches(pairs, 4000, cost=tokens)]
    for cost in (lambda *a: a[0] * (a[1] + a[2]), np.frompyfunc(tokens, 3, 1)):
        assert [b.tolist() for b in plan_batches(pairs, 4000, cost=cost)] == expected


def test_a_matrix_of_two_columns_is_pairs() -> None:
    """``np.matrix`` was flattened to a matrix of one row and refused as shape (1, 4)."""
    pairs = lognormal_pairs(300, 0.7, seed=5)
    expected = [b.tolist() for b in plan_batches(pairs, 4000, cost="linear")]
    assert [b.tolist() for b in plan_batches(np.matrix(pairs), 4000, cost="linear")] == expected


def test_hilbert_walk_steps_to_neighbours() -> None:
    side = np.arange(16)
    x, y = np.repeat(side, 16), np.tile(side, 16)
    walk = np.argsort(hilbert_index(x, y))
    steps = np.abs(np.diff(x[walk])) + np.abs(np.diff(y[walk]))
    assert sorted(hilbert_index(x, y).tolist()) == list(range(256)) and (steps == 1).all()


# -- one length: as before ------------------------------------------------------------------------
def test_stats_of_one_length_are_as_before() -> None:
    stats = plan_stats([2, 4, 4, 8], [[0, 1], [2, 3]], cost="linear", max_cost=16)
    assert type(stats) is PlanStats
    assert list(stats.as_dict()) == [
        "batches",
        "samples",
        "real_tokens",
        "padded_tokens",
        "padding_efficiency",
        "batch_size_min",
        "batch_size_median",
        "batch_size_max",
        "cost_max",
        "cost_median",
        "cost_mean",
        "cost_cv",
        "utilization",
        "updates",
        "seconds",
    ]


def _one_length(kind: str) -> np.ndarray:
    rng = np.random.default_rng(3)
    if kind == "tail":
        return np.minimum(np.ceil(rng.lognormal(3.5, 1.0, 700)), 600).astype(np.int64)
    if kind == "uniform":
        return rng.integers(1, 300, 700)
    return rng.choice([7, 30, 120], 700)


def _digest(parts: list[bytes]) -> str:
    h = hashlib.blake2b(digest_size=8)
    for part in parts:
        h.update(part)
    return h.hexdigest()


#: The digests of dynbatch's 1-D plans before pairs (commit 8789c1d), over every order, cost,
#: multiple and drop_last, like_fixed on 1 to 3 ranks and equal epochs. A change to the 1-D
#: planner that is meant changes them: recompute them then, and say why in its commit.
ONE_LENGTH_DIGESTS = {
    "plan_batches": "314bc138d452d645",
    "like_fixed": "a4b60bbf2464a033",
    "equal_epochs": "87a182fbdc0bbf56",
}


def test_one_length_plans_are_as_before_pairs() -> None:
    plans: dict[str, list[bytes]] = {key: [] for key in ONE_LENGTH_DIGESTS}
    for kind, order, cost, multiple, drop_last in itertools.product(
        ("tail", "uniform", "few"),
        ORDERS,
        ("quadratic", "linear"),
        (1, 8),
        (False, True),
    ):
        budget = 20 * 600**2 if cost == "quadratic" else 20 * 600
        plan = plan_batches(
            _one_length(kind),
            budget,
            cost=cost,
            order=order,
            batch_size_multiple=multiple,
            drop_last=drop_last,
            seed=5,
            epoch=2,
            max_batch_size=64,
        )
        plans["plan_batches"] += [plan.indices.tobytes(), plan.offsets.tobytes()]
    for kind, replicas in itertools.product(("tail", "uniform", "few"), (1, 2, 3)):
        lens = _one_length(kind)
        options = like_fixed(lens, 16, num_replicas=replicas, seed=1)
        plans["like_fixed"].append(plan_epoch(lens, options, 1, replicas).digest().encode())
        equal = PlanOptions(max_cost=20 * 600**2, equal_epochs=True, seed=2)
        plans["equal_epochs"].append(plan_epoch(lens, equal, 3, replicas).digest().encode())
    assert {key: _digest(parts) for key, parts in plans.items()} == ONE_LENGTH_DIGESTS
