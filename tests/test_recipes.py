"""The recipes (like_fixed, fill_device) and the plan's mixed updates: pure numpy."""

from __future__ import annotations

import argparse
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import lengths as lengths_strategy

import dynbatch
from dynbatch.plan.epochs import plan_epoch
from dynbatch.plan.windows import MAX_STRATA, update_ends


def corpus(n: int = 5000, seed: int = 0) -> np.ndarray:
    """Long-tailed lengths, cut at 256, like reviews."""
    rng = np.random.default_rng(seed)
    return np.minimum(np.ceil(rng.lognormal(4.3, 0.7, n)), 256).astype(np.int64)


def updates(sharded: dynbatch.ShardedPlan) -> list[np.ndarray]:
    """Step positions of each update."""
    ends = sharded.window_ends
    assert ends is not None
    return [np.arange(a, b) for a, b in zip(np.r_[0, ends[:-1]], ends, strict=True)]


@pytest.mark.parametrize("replicas", [1, 2, 4])
@pytest.mark.parametrize("batch", [8, 32, 100])
def test_like_fixed_trains_like_the_fixed_batch(replicas: int, batch: int) -> None:
    lens = corpus()
    opts = dynbatch.like_fixed(lens, batch, num_replicas=replicas)
    sharded = plan_epoch(lens, opts, epoch=3, num_replicas=replicas)
    fixed_updates = -(-lens.size // (batch * replicas))
    ends = update_ends(sharded, lens)
    assert abs(ends.size - fixed_updates) <= 1, "as many updates an epoch as the fixed batch"
    sizes = sharded.sizes.reshape(-1, replicas).sum(axis=1)
    per_update = np.array([sizes[u].sum() for u in updates(sharded)])
    assert per_update.sum() == lens.size, "every sample in one update"
    assert per_update.min() >= 0.75 * batch * replicas, "no update much smaller than the fixed"
    assert per_update.max() <= 1.5 * batch * replicas, "no update much larger"
    assert sharded.sizes.max() <= batch, "a micro-batch never holds more than the fixed batch"
    worst = opts.cost(sharded.sizes, sharded.longest(lens))
    assert worst.max() <= opts.cost(batch, lens.max()), "memory within the fixed batch's worst"
    assert sorted(sharded.plan.indices.tolist()) == list(range(lens.size)), "exactly once"


def test_updates_mix_lengths_and_bucket_batches_do_not() -> None:
    """Each update spans the lengths as a random batch does; its micro-batches stay unpadded."""
    lens = corpus(20_000)
    opts = dynbatch.like_fixed(lens, 32)
    sharded = plan_epoch(lens, opts, epoch=0)
    longest = sharded.longest(lens)
    spans = np.array([longest[u].max() / longest[u].min() for u in updates(sharded)])
    quartiles = np.quantile(lens, [0.25, 0.75])
    assert np.median(spans) >= quartiles[1] / quartiles[0], "an update spans the quartiles"
    real = sharded.real_tokens(lens).sum()
    padded = (sharded.sizes * longest).sum()
    assert real / padded > 0.9, "micro-batches of near-equal lengths"
    # the same micro-batches in the bucket order, cut where the count reaches 32: less mixed
    plain = plan_epoch(lens, opts.replace(update_size=None), epoch=0)
    cut = update_ends(plain, lens, target=32)
    plain_longest = plain.longest(lens)
    plain_spans = [
        plain_longest[a:b].max() / plain_longest[a:b].min()
        for a, b in zip(np.r_[0, cut[:-1]], cut, strict=True)
    ]
    assert np.median(spans) > np.median(plain_spans)


def test_updates_are_a_pure_function_of_seed_and_epoch() -> None:
    lens = corpus(3000)
    opts = dynbatch.like_fixed(lens, 16, seed=5)
    a, b = plan_epoch(lens, opts, 2, 2), plan_epoch(lens, opts, 2, 2)
    assert a.digest() == b.digest()
    assert plan_epoch(lens, opts, 3, 2).digest() != a.digest(), "a new draw each epoch"
    assert plan_epoch(lens, opts.replace(seed=6), 2, 2).digest() != a.digest()


def test_many_steps_per_update_are_a_random_draw() -> None:
    lens = np.full(4000, 10)
    opts = dynbatch.PlanOptions(max_cost=10, cost="linear", update_size=1000)
    sharded = plan_epoch(lens, opts, 0)
    assert -(-sharded.num_steps // 4) > MAX_STRATA
    assert update_ends(sharded, lens).tolist() == [1000, 2000, 3000, 4000]


def test_sorted_orders_keep_their_order_and_cut_at_the_size() -> None:
    lens = np.arange(1, 41)
    opts = dynbatch.PlanOptions(
        max_cost=160, cost="linear", order="ascending", max_batch_size=4, update_size=8
    )
    sharded = plan_epoch(lens, opts, 0)
    assert sharded.plan.indices.tolist() == list(range(40)), "ascending, untouched"
    assert update_ends(sharded, lens).tolist() == [2, 4, 6, 8, 10]


@settings(max_examples=60, deadline=None)
@given(
    lens=lengths_strategy(max_size=400, max_len=300),
    batch=st.integers(1, 64),
    replicas=st.integers(1, 4),
    parts=st.integers(1, 8),
    unit=st.sampled_from(["samples", "tokens"]),
    epoch=st.integers(0, 5),
)
def test_mixed_updates_hold_every_batch_once(
    lens: np.ndarray, batch: int, replicas: int, parts: int, unit: str, epoch: int
) -> None:
    opts = dynbatch.like_fixed(
        lens, batch, num_replicas=replicas, micro_batches=parts, update_unit=unit
    )
    sharded = plan_epoch(lens, opts, epoch, replicas)
    ends = update_ends(sharded, lens)
    assert ends.size >= 1 and ends[-1] == sharded.num_steps, "updates cover the epoch"
    assert (np.diff(np.r_[0, ends]) >= 1).all(), "no empty update"
    real = sharded.plan.indices[np.repeat(~sharded.is_padding, sharded.plan.sizes)]
    assert sorted(set(real.tolist())) == list(range(lens.size)), "every sample"
    unmixed = plan_epoch(lens, opts.replace(update_size=None), epoch, replicas)
    assert sorted(map(bytes, (b.tobytes() for b in sharded.plan))) == sorted(
        map(bytes, (b.tobytes() for b in unmixed.plan))
    ), "the same micro-batches, only their steps reordered"


def test_like_fixed_from_a_memory_target_and_tokens() -> None:
    lens = np.array([10, 20, 30, 40] * 100)
    opts = dynbatch.like_fixed(lens, max_cost=32 * 40 + 5)
    assert opts.update_size == 32 and opts.max_batch_size == 8, "B: the most at L_max"
    tokens = dynbatch.like_fixed(lens, 32, update_unit="tokens", accumulation_steps=2)
    assert tokens.update_size == pytest.approx(64 * 25.0) and tokens.update_unit == "tokens"
    assert tokens.max_batch_size == 16, "updates of 64 samples, 4 micro-batches at the least"
    quad = dynbatch.like_fixed(lens, 32, cost="quadratic")
    assert quad.max_cost == 32 * 40**2, "the fixed batch's worst under the cost"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: dynbatch.like_fixed([], 8), "lengths is empty"),
        (lambda: dynbatch.like_fixed([5, 6]), "needs batch_size"),
        (lambda: dynbatch.like_fixed([5, 6], 0), "batch_size"),
        (lambda: dynbatch.like_fixed([5, 6], True), "batch_size"),
        (lambda: dynbatch.like_fixed([5, 6], 4, micro_batches=0), "micro_batches"),
        (lambda: dynbatch.like_fixed([5, 6], 4, update_unit="words"), "update_unit"),
        (lambda: dynbatch.like_fixed([5, 60], max_cost=10), "does not fit even one sample"),
        (lambda: dynbatch.like_fixed([5, 6], 4, colour="red"), "unknown option(s) colour"),
        (lambda: dynbatch.like_fixed([5, 6], 4, accumulation_steps=-1), "accumulation_steps"),
    ],
)
def test_like_fixed_refuses_nonsense_by_name(call: object, message: str) -> None:
    with pytest.raises(dynbatch.InputError, match=re.escape(message)):
        call()  # type: ignore[operator]


def test_options_given_as_a_dict_bind_max_cost_and_cost_to_their_arguments() -> None:
    """``**options`` with ``max_cost`` or ``cost`` reaches the arguments of those names, never
    the other options (Python binds a keyword to its parameter), so the recipes need no
    check of their own for them."""
    lens = np.array([10, 20, 30, 40] * 100)
    given = {"max_cost": 32 * 40**2, "cost": "quadratic", "seed": 3}
    opts = dynbatch.like_fixed(lens, 32, **given)  # type: ignore[arg-type]
    assert (opts.max_cost, opts.seed) == (32 * 40**2, 3)
    assert opts.cost(2, 10) == 2 * 10**2, "the quadratic cost"
    filled = dynbatch.fill_device(lens, Model(0.04, 0, 0), **given)  # type: ignore[arg-type]
    assert (filled.max_cost, filled.seed) == (32 * 40**2, 3)


class Model:
    def __init__(self, c: float, a: float, b: float) -> None:
        self.c, self.a, self.b = c, a, b


def test_fill_device_stops_at_the_knee_and_the_memory() -> None:
    lens = np.full(20_000, 100)
    knee = Model(c=0.04, a=1e-6, b=0.0)  # flat to ~40k tokens: 90% of the best at 360k
    opts = dynbatch.fill_device(lens, knee, max_cost=1e12, cost="linear", fraction=0.9)
    sizes = plan_epoch(lens, opts, 0).sizes
    assert sizes.max() == 3600 and opts.update_size is None, "the knee: c*f/(1-f) / (a*L)"
    capped = dynbatch.fill_device(lens, knee, max_cost=50_000, cost="linear", fraction=0.9)
    assert plan_epoch(lens, capped, 0).sizes.max() == 500, "never above the memory target"
    flat = dynbatch.fill_device(lens, Model(0.04, 0, 0), max_cost=50_000, cost="linear")
    assert plan_epoch(lens, flat, 0).sizes.max() == 500, "no knee: the memory target decides"
    grouped = dynbatch.fill_device(
        lens, Model(0.001, 1e-4, 0), max_cost=1e9, cost="linear", batch_size=64
    )
    assert grouped.update_size == 64, "with batch_size, updates of at least that many"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"fraction": 1.0}, "fraction must be a number in"),
        ({"fraction": 0}, "fraction must be a number in"),
        ({"time_model": object()}, "coefficients c, a, b"),
        ({"time_model": Model(0.1, -1, 0)}, "coefficient a must be >= 0"),
        ({"max_cost": 5}, "does not fit one sample"),
    ],
)
def test_fill_device_refuses_nonsense_by_name(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {
        "time_model": Model(0.01, 1e-4, 0),
        "max_cost": 1e6,
        "cost": "linear",
        **kwargs,
    }
    with pytest.raises(dynbatch.InputError, match=message):
        dynbatch.fill_device([10, 20], **args)  # type: ignore[arg-type]


def test_within_budgets_is_the_tightest_and_describes_itself() -> None:
    both = dynbatch.WithinBudgets((("linear", 100.0), ("quadratic", 1000.0)))
    assert both(10, 10) == pytest.approx(1.0) and both(1, 40) == pytest.approx(1.6)
    assert dynbatch.plan.costs.cost_spec(both) == (
        "WithinBudgets:LinearCost()<=100.0;QuadraticCost()<=1000.0"
    )
    with pytest.raises(dynbatch.InputError, match="budget must be a positive"):
        dynbatch.WithinBudgets((("linear", 0.0),))
    with pytest.raises(dynbatch.InputTypeError, match="non-empty tuple"):
        dynbatch.WithinBudgets(())  # type: ignore[arg-type]


def test_update_options_are_fields_with_flags() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    dynbatch.PlanOptions.add_arguments(parser)
    args = parser.parse_args(
        ["--max-cost", "100", "--update-size", "32", "--update-unit", "tokens", "--drop-last"]
    )
    opts = dynbatch.PlanOptions.from_args(args)
    assert (opts.update_size, opts.update_unit, opts.drop_last) == (32.0, "tokens", True)
    assert isinstance(args.max_batch_size, type(None)) and args.seed == 0
    with pytest.raises(SystemExit):
        parser.parse_args(["--max-cost", "1", "--update-unit", "words"])
    with pytest.raises(dynbatch.InputError, match="update_size"):
        dynbatch.PlanOptions(max_cost=1, update_size=0)
    assert dynbatch.PlanOptions(max_cost=1, update_size=3).fingerprint()["update_size"] == 3.0


# -- what an outside pass broke ------------------------------------------------------------------
@pytest.mark.parametrize("order", ["none", "ascending", "descending", "shuffle", "bucket"])
@pytest.mark.parametrize("unit", ["samples", "tokens"])
def test_every_order_makes_the_fixed_batchs_count_of_updates(order: str, unit: str) -> None:
    lens = np.random.default_rng(0).integers(5, 200, 1000)
    opts = dynbatch.like_fixed(lens, 10, order=order, update_unit=unit)
    ends = update_ends(plan_epoch(lens, opts, 0), lens)
    assert abs(ends.size - 100) <= 2, f"{order}/{unit}: {ends.size} updates, not ~100"


def test_token_updates_count_the_samples_trained() -> None:
    lens = np.array([5] * 100 + [500] * 100)
    opts = dynbatch.like_fixed(
        lens, 4, max_cost=400, oversize="skip", update_unit="tokens", micro_batches=1
    )
    with pytest.warns(UserWarning, match="skipping"):
        sharded = plan_epoch(lens, opts, 0)
    assert abs(update_ends(sharded, lens).size - 25) <= 1, "100 trained samples in fours"


def test_token_updates_are_even() -> None:
    lens = corpus(5000)
    opts = dynbatch.like_fixed(lens, 32, update_unit="tokens")
    sharded = plan_epoch(lens, opts, 0)
    tokens = sharded.real_tokens(lens)
    per_update = np.array([tokens[u].sum() for u in updates(sharded)])
    assert per_update.max() <= 1.6 * opts.update_size and per_update.min() >= 0.6 * opts.update_size


def test_a_multiple_larger_than_the_share_rounds_the_micro_batch_up() -> None:
    lens = np.random.default_rng(0).integers(5, 200, 1000)
    opts = dynbatch.like_fixed(lens, 32, batch_size_multiple=16)
    assert opts.max_batch_size == 16, "two micro-batches of 16, not a refusal"
    with pytest.raises(dynbatch.InputError, match="batch_size_multiple=64 is larger than"):
        dynbatch.like_fixed(lens, 32, batch_size_multiple=64)
    with pytest.raises(dynbatch.InputError, match="batch_size must be at most"):
        dynbatch.like_fixed(lens, 2**70)


@pytest.mark.parametrize(("n", "batch"), [(100, 16), (36, 16), (18, 16), (6400, 16), (257, 32)])
def test_the_recipe_makes_the_fixed_batch_s_updates_every_epoch(n: int, batch: int) -> None:
    """ceil(N / B) an epoch, as a fixed batch whose last, partial batch is an update of its own:
    rounding lost one update per epoch (18 instead of 21 over 3 epochs at N=100, B=16)."""
    lengths = np.random.default_rng(n).integers(1, 200, n)
    sampler = dynbatch.DynamicBatchSampler(lengths=lengths, batch_size=batch, seed=1)
    assert sampler.steps_for_epochs(range(3)) == 3 * -(-n // batch)


@pytest.mark.parametrize(
    ("n", "batch", "replicas", "steps"), [(200, 8, 4, 3), (192, 32, 1, 3), (150, 96, 1, 1)]
)
def test_with_drop_last_the_recipe_makes_the_fixed_batchs_floor_n_over_b_updates(
    n: int, batch: int, replicas: int, steps: int
) -> None:
    lens = np.random.default_rng(n).integers(5, 300, n)
    opts = dynbatch.like_fixed(
        lens, batch, num_replicas=replicas, accumulation_steps=steps, drop_last=True
    )
    fixed = n // (batch * replicas * steps)  # the fixed batch drops its short last update
    for epoch in range(3):
        assert len(plan_epoch(lens, opts, epoch, replicas).window_ends) == max(1, fixed), epoch
