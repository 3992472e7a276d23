"""Packing chosen per update by the step time (NOTE [ choosing packing per update ])."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import lengths as lengths_strategy

from conftest import shared_file
from dynbatch import (
    DistributedDynamicBatchSampler,
    DynamicBatchSampler,
    InputError,
    InputTypeError,
    PackCollator,
    PlanOptions,
    StepTimeModel,
    StepTimeTable,
)
from dynbatch.plan.packs import (
    CHOICES,
    PackLayout,
    choose_packing,
    packed_epoch_seconds,
    plan_timed_packs,
)
from dynbatch.plan.splits import shuffled

FLAT = StepTimeModel(c=1.0, a=0.0, b=0.0)
LINEAR = StepTimeModel(c=0.0, a=1e-3, b=0.0)
MIXED = StepTimeModel(c=0.05, a=1e-6, b=1e-9, error=0.1)


def h100() -> StepTimeTable:
    return StepTimeTable.load(shared_file("h100_bert_base_step_times.json"))


def check_choice(lens: np.ndarray, kw: dict[str, object], model: object) -> None:
    """Every promise of a choice, each a labelled assert."""
    c = choose_packing(lens, **kw, time_model=model)  # type: ignore[arg-type]
    kept = np.arange(lens.size)
    assert np.array_equal(np.sort(c.micro_batches.indices), kept), "exactly once"
    batch = int(kw["batch_size"])  # type: ignore[call-overload]
    fixed = shuffled(kept, int(kw["seed"]), int(kw["epoch"]))  # type: ignore[call-overload]
    fixed_updates = [fixed[i : i + batch] for i in range(0, fixed.size, batch)]
    assert c.num_updates == len(fixed_updates), "the fixed batch's count"
    assert c.update_offsets.size - 1 == c.num_updates
    drawn = fixed_updates
    layout = PackLayout(
        int(kw["pack_len"]),  # type: ignore[call-overload]
        max_cost=float(kw["max_rows"] or 10**9) * int(kw["pack_len"]),  # type: ignore[call-overload]
        cost="linear",
        time_model=model,
    )
    n, L = c.step_shapes
    for u in range(c.num_updates):  # each update runs the drawn update's samples, whatever way
        lo, hi = c.update_offsets[u], c.update_offsets[u + 1]
        assert np.array_equal(np.sort(c.updates[u]), np.sort(drawn[u])), f"update {u}: its samples"
        assert (c.choice[u] != 2) or hi - lo == 1, f"update {u}: whole is one step"
    for m, batch_ in enumerate(c.micro_batches):  # the collator's layout is the plan's
        rows, width = layout.rows(lens[batch_])
        assert (rows.size - 1, width) == (n[m], L[m]), f"micro-batch {m}: laid out as priced"
        assert c.packed[m] == (rows.size - 1 < batch_.size or width > lens[batch_].max()) or (
            rows.size - 1 == batch_.size
        ), f"micro-batch {m}: packed flag"
        if kw.get("max_rows") is not None:
            within = (
                rows.size - 1 <= int(kw["max_rows"])
                if c.packed[m]
                # type: ignore[call-overload]
                else (
                    n[m] * L[m] <= int(kw["max_rows"]) * int(kw["pack_len"]) or n[m] == 1  # type: ignore[call-overload]
                )
            )
            assert within, f"micro-batch {m}: within the budget"
    fixed_whole = sum(float(np.asarray(model(u.size, lens[u].max()))) for u in fixed_updates)  # type: ignore[operator]
    if kw.get("max_rows") is None:
        assert c.epoch_seconds <= fixed_whole * (1 + 1e-12), "never slower than the fixed batch"
    chosen = c.chosen_seconds
    fits = c.whole_fits
    assert fits.all() or kw.get("max_rows") is not None, "without a budget the whole always fits"
    assert (chosen[fits] <= c.seconds[fits, 2] * (1 + 1e-12)).all(), "never slower than whole"
    assert (c.choice[~fits] != 2).all(), "a whole over the budget is never run"
    if fits.all():
        assert c.epoch_seconds <= c.whole_seconds * (1 + 1e-12), "nor over the epoch"
    if not getattr(model, "error", 0):
        best = np.where(fits, c.seconds.min(axis=1), c.seconds[:, :2].min(axis=1))
        assert np.array_equal(chosen, best), "the fastest that fits"
    padded = np.array(
        [float(np.asarray(model(len(u), lens[u].max()))) for u in drawn]  # type: ignore[operator]
    )
    assert (c.seconds[fits, 2] <= padded[fits] * (1 + 1e-12)).all(), "whole: at most padded"
    priced = np.asarray(model(n, L), dtype=np.float64)  # type: ignore[operator]
    assert np.isclose(priced.sum(), c.epoch_seconds), "the steps as run add up to the choice"


@st.composite
def corpora(draw: st.DrawFn) -> tuple[np.ndarray, dict[str, object]]:
    lens = draw(lengths_strategy(max_size=300, max_len=600))
    longest = int(lens.max())
    return lens, {
        "pack_len": draw(st.integers(longest, 2 * longest)),
        "batch_size": draw(st.integers(1, 64)),
        "max_rows": draw(st.none() | st.integers(1, 6)),
        "seed": draw(st.integers(0, 2**31)),
        "epoch": draw(st.integers(0, 20)),
    }


@settings(max_examples=60, deadline=None)
@given(corpora(), st.sampled_from([FLAT, LINEAR, MIXED, StepTimeModel(c=1e-3, a=0, b=1e-7)]))
def test_choice_keeps_every_promise_on_models(
    corpus: tuple[np.ndarray, dict[str, object]], model: StepTimeModel
) -> None:
    check_choice(*corpus, model)


@settings(max_examples=25, deadline=None)
@given(corpora())
def test_choice_keeps_every_promise_on_the_h100_table(
    corpus: tuple[np.ndarray, dict[str, object]],
) -> None:
    check_choice(*corpus, h100())


def test_a_flat_step_runs_every_update_whole() -> None:
    """Flat: one step costs the same at any size, packing saves nothing; the whole is kept."""
    lens = np.random.default_rng(0).integers(10, 500, 400)
    c = choose_packing(lens, 512, batch_size=32, time_model=FLAT)
    assert c.counts == {"packed": 0, "split": 0, "whole": c.num_updates}
    assert c.epoch_seconds == c.whole_seconds == c.num_updates == 13


def test_packing_is_chosen_where_padding_costs() -> None:
    """Linear in padded tokens with a fixed part: a long sample pads its update's short ones,
    rows of the same samples hold far fewer tokens, and the fixed part rules out the split;
    an update of short samples only is one step at 20 tokens, less than two rows of 512. Each
    update runs as one step (whole), laid out as rows exactly where a long sample is in it."""
    lens = np.tile([500, *[20] * 31], 20)
    model = StepTimeModel(c=10.0, a=1e-3, b=0.0)
    c = choose_packing(lens, 512, batch_size=32, time_model=model)
    long_in = np.array([(lens[u] == 500).any() for u in c.updates])
    assert long_in.any() and not long_in.all(), "the test needs both kinds of update"
    assert (c.choice != 1).all(), "the fixed part rules out the split"
    first = c.update_offsets[:-1]
    assert (np.diff(c.update_offsets) == 1).all(), "one step an update"
    assert np.array_equal(c.packed[first], long_in), "rows exactly where a long sample pads"
    padded = sum(float(model(u.size, lens[u].max())) for u in c.updates)
    assert c.epoch_seconds < 0.8 * padded, "rows save where a long sample pads"


def test_a_budget_in_cost_caps_the_rows_of_a_packed_micro_batch() -> None:
    lens = np.random.default_rng(1).integers(10, 200, 300)
    c = choose_packing(lens, 256, batch_size=32, time_model=LINEAR, max_cost=3 * 256, cost="linear")
    n, width = c.step_shapes
    assert (n[c.packed] <= 3).all(), "packed: at most 3 rows"
    padded = ~c.packed
    assert padded.any(), "some micro-batches run padded"
    assert ((n * width)[padded] <= 3 * 256).all() or (n[padded] == 1).all(), "padded: the budget"
    assert (n[padded] == c.micro_batches.sizes[padded]).all(), "padded: a sample a row"


def test_same_seed_and_epoch_same_choice() -> None:
    lens = np.random.default_rng(2).integers(1, 300, 500)
    a = choose_packing(lens, 300, batch_size=16, time_model=MIXED, seed=3, epoch=1)
    b = choose_packing(lens, 300, batch_size=16, time_model=MIXED, seed=3, epoch=1)
    assert np.array_equal(a.micro_batches.indices, b.micro_batches.indices)
    assert np.array_equal(a.choice, b.choice)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"time_model": 3}, InputTypeError, r"time_model must be a step time.*time_model=3"),
        ({"time_model": "1,2"}, InputError, r"time_model as text must be three numbers"),
        (
            {"time_model": lambda n, L: -np.ones(np.shape(n))},
            InputError,
            r"time_model predicts -1.0 seconds .* must be finite and >= 0",
        ),
        (
            {"max_rows": 2, "max_cost": 100.0},
            InputError,
            r"give max_rows or max_cost, not both; got max_rows=2 and max_cost=100.0",
        ),
        (
            {"max_cost": 10.0, "cost": "linear"},
            InputError,
            r"one row of pack_len=16 tokens costs 16, over max_cost=10",
        ),
        ({"max_rows": 0}, InputError, r"max_rows must be an integer >= 1.*max_rows=0"),
        ({"pack_len": 0}, InputError, r"pack_len must be an integer >= 1.*pack_len=0"),
        ({"pack_len": 8}, InputError, r"longer than pack_len=8"),
    ],
    ids=["not-callable", "text", "negative", "both-budgets", "row-over-budget", "rows", "pack",
         "oversize"],
)  # fmt: skip
def test_bad_input_is_named(kwargs: dict[str, object], error: type, match: str) -> None:
    call: dict[str, object] = {"pack_len": 16, "batch_size": 2, "time_model": FLAT, **kwargs}
    with pytest.raises(InputError, match=match) as info:
        choose_packing([3, 9, 12, 5], **call)  # type: ignore[arg-type]
    assert type(info.value) is error


def test_the_choices_are_named() -> None:
    assert CHOICES == ("packed", "split", "whole")


def test_every_way_runs_the_fixed_batchs_updates_of_exactly_b() -> None:
    """A step whose time jumps past B samples: every update holds exactly B samples (the
    fixed batch's), so none pays the jump, and the epoch is priced at equal updates."""

    def knee(n: object, length: object) -> np.ndarray:
        n_, l_ = np.broadcast_arrays(np.asarray(n, np.float64), np.asarray(length, np.float64))
        return np.where(n_ > 8, 10.0, 1.0) + np.where(l_ >= 100, 4.0, 0.0)

    lens = np.random.default_rng(5).integers(20, 100, 400)
    c = choose_packing(lens, 100, batch_size=8, time_model=knee)
    assert (c.updates.sizes == 8).all(), "every update the fixed batch's B"
    assert c.epoch_seconds == c.num_updates == 50, "every update one step of 8, below the knee"
    assert (c.micro_batches.sizes == 8).all()


def test_coefficients_as_text_or_a_dict_are_a_model() -> None:
    lens = np.random.default_rng(3).integers(1, 60, 90)
    kw = {"batch_size": 8, "seed": 1}
    model = StepTimeModel(c=0.5, a=1e-3, b=0.0)
    want = choose_packing(lens, 64, time_model=model, **kw).epoch_seconds  # type: ignore[arg-type]
    for given_as in ("0.5,1e-3,0", {"c": 0.5, "a": 1e-3, "b": 0.0}):
        got = choose_packing(lens, 64, time_model=given_as, **kw)  # type: ignore[arg-type]
        assert got.epoch_seconds == pytest.approx(want), given_as


# -- defects found from outside, each reproduced in a few lines ---------------------------------
def test_on_ranks_the_h100_table_never_prices_the_epoch_above_the_fixed_batch() -> None:
    """One update of 5 samples on 2 ranks: the fixed batch runs 3 a rank (paddle pads the
    short rank), one step of t(3, 513); the plan's whole step holds a rank of 2, which the
    measured table prices slower (0.0407 s against 0.0383 s, 6%)."""
    table = h100()
    lens = np.array([513, 512, 512, 513, 513])
    opts = PlanOptions(max_cost=3 * 513, cost="linear", pack_len=513, update_size=6)
    chosen = plan_timed_packs(lens, opts, epoch=0, num_replicas=2, time_model=table)
    fixed = float(table(3, 513))
    assert sorted(np.concatenate(list(chosen.updates)).tolist()) == list(range(5)), "once"
    assert chosen.epoch_seconds <= fixed * (1 + 1e-9), "never slower than the fixed batch"


@pytest.mark.parametrize(
    "options",
    [
        {"batch_size": 513, "max_batch_size": 1, "pack_len": 10},
        {"update_size": 513, "max_cost": 10, "cost": "linear", "pack_len": 10},
        {"update_size": 513, "max_cost": 10, "cost": "linear"},  # the unpacked split alike
    ],
    ids=["packed-max_batch_size", "packed-max_cost", "split-max_cost"],
)
def test_an_update_of_513_samples_one_a_micro_batch_is_planned(options: dict[str, object]) -> None:
    """Without a time model the same options plan 513 micro-batches of one sample; with one,
    the sampler refuses with 'an update has no cut into micro-batches that fit the budget',
    naming no argument, value or valid range."""
    lens = [10] * 513
    without = DynamicBatchSampler(lengths=lens, **options)
    assert len(without) == 513
    timed = DynamicBatchSampler(lengths=lens, **options, time_model="1,0,0")
    assert all(len(b) == 1 for b in timed), "one sample a micro-batch, as the budget says"
    assert sorted(i for b in timed for i in b) == list(range(513))


def test_a_time_split_keeps_the_max_batch_size_given() -> None:
    """max_batch_size is 'the most samples a batch holds'; with a time model the unpacked
    sampler yields a batch of 5 under max_batch_size=1 (packing keeps the cap)."""
    sampler = DynamicBatchSampler(
        lengths=[10] * 5, batch_size=5, max_batch_size=1, time_model="1,0,0"
    )
    assert sampler.options.max_batch_size == 1
    assert max(len(b) for b in sampler) <= 1, "no batch over max_batch_size"


@pytest.mark.parametrize(
    "lengths",
    [[0], [-3, 2], [1.5, 2], [[1, 2], [3, 4]], 5, [True, True], ["a"], None, [float("nan")]],
    ids=["zero", "negative", "fraction", "2-d", "scalar", "bools", "text", "none", "nan"],
)
def test_bad_lengths_to_a_layout_are_named(lengths: object) -> None:
    layout = PackLayout(8, 100, cost="linear", time_model="1,0.1,0")
    with pytest.raises((InputError, InputTypeError), match=r"lengths"):
        layout.rows(lengths)


def test_a_layout_takes_the_budgets_plan_options_takes() -> None:
    for budget in (np.int64(64), np.float32(64.0)):
        assert PackLayout(8, budget).max_cost == 64.0
        assert PlanOptions(max_cost=budget).max_cost == 64.0
    with pytest.raises(InputError, match=r"max_cost.*inf"):
        PlanOptions(max_cost=float("inf"))
    with pytest.raises(InputError, match=r"max_cost.*inf"):
        PackLayout(8, float("inf"))


@pytest.mark.parametrize("extra", [{"pack_len": 8}, {"layout": None}])
def test_for_sampler_names_an_argument_it_sets_itself(extra: dict[str, object]) -> None:
    sampler = DynamicBatchSampler(
        lengths=[5, 6, 7] * 10, batch_size=4, pack_len=16, time_model="1,0.1,0"
    )
    with pytest.raises(InputError, match=rf"{next(iter(extra))}.*for_sampler"):
        PackCollator.for_sampler(sampler, **extra)


def test_choose_packing_refuses_a_time_model_with_updates_in_tokens() -> None:
    """docs/packing.md: 'Refused, by name: ... a time_model with updates in "tokens"'."""
    with pytest.raises(InputError, match=r"time_model.*update_unit='tokens'"):
        PlanOptions(max_cost=64, pack_len=8, update_size=2, update_unit="tokens",
                    time_model="1,0,0", order="shuffle")  # fmt: skip
    with pytest.raises(InputError, match=r"time_model.*update_unit='tokens'"):
        choose_packing([5, 6, 7, 3], 8, batch_size=2, time_model="1,0,0", update_unit="tokens")


def test_without_max_cost_the_budget_is_padded_tokens_and_another_cost_is_refused() -> None:
    """choose_packing dropped cost= unread without max_cost, budgeting padded tokens instead."""
    lens = np.array([5, 9, 3, 12, 7, 30, 2, 8] * 4)
    call: dict[str, object] = {"batch_size": 8, "time_model": LINEAR, "max_rows": 2}
    plain = choose_packing(lens, 32, **call)  # type: ignore[arg-type]
    linear = choose_packing(lens, 32, **call, cost="linear")  # type: ignore[arg-type]
    assert np.array_equal(plain.micro_batches.indices, linear.micro_batches.indices)
    assert plain.epoch_seconds == linear.epoch_seconds, "'linear' is the budget used: taken"
    with pytest.raises(InputError, match=r"cost=QuadraticCost\(\) prices .* max_cost=None"):
        choose_packing(lens, 32, **call, cost="quadratic")  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"cost must be 'quadratic', 'linear'.*cost='cubic'"):
        choose_packing(lens, 32, **call, cost="cubic")  # type: ignore[arg-type]


def test_stats_packed_row_describes_the_epoch_the_sampler_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/packing.md: 'dynbatch stats --pack-len N --time-model c,a,b prints its row (rows,
    packing efficiency, updates, predicted epoch time), the epoch the sampler plans with the
    same options'. On a flat step the sampler runs every update whole and padded (19 steps,
    about 0.16 of their tokens real); the row says 80 batches, 0.991 efficiency."""
    from dynbatch.cli import main
    from dynbatch.plan.packs import PackLayout

    rng = np.random.default_rng(0)
    lens = np.where(rng.random(600) < 0.1, rng.integers(300, 513, 600), rng.integers(8, 60, 600))
    path = tmp_path / "lengths.npy"
    np.save(path, lens)
    argv = [str(path), "--fixed-batch-size", "32", "--pack-len", "512", "--time-model", "1,0,0"]
    assert main(["stats", *argv, "--cost", "linear", "--max-cost", "16384", "--json"]) == 0
    row = {r["name"]: r for r in json.loads(capsys.readouterr().out)["rows"]}["packed"]
    sampler = DynamicBatchSampler(lengths=lens, batch_size=32, pack_len=512, time_model="1,0,0",
                                  max_cost=16384, cost="linear")  # fmt: skip
    layout = PackLayout.from_options(sampler.options)
    shapes = [layout.rows(lens[b]) for b in sampler]
    padded = sum((rows.size - 1) * width for rows, width in shapes)
    assert row["seconds"] == pytest.approx(19.0), "the epoch time is the sampler's"
    assert row["batches"] == len(sampler), "the sampler's micro-batches"
    assert row["padding_efficiency"] == pytest.approx(lens.sum() / padded), "as laid out"


def test_an_oversize_sample_keeps_the_fixed_batchs_step_where_it_runs_padded() -> None:
    """oversize='alone' makes a sample longer than pack_len a micro-batch of its own where its
    update runs packed; run whole it shares the fixed batch's step, so the epoch is never
    predicted slower than the fixed batch (it was 2x on a flat step, 5-11x on reviews)."""
    lens = np.array([12, 5, 5, 5] * 4)
    sampler = DynamicBatchSampler(
        lengths=lens, batch_size=4, pack_len=8, oversize="alone", time_model="1,0,0"
    )
    seconds = packed_epoch_seconds(sampler.epoch_plan(0), lens, sampler.options)
    assert seconds <= 4.0, "4 updates, each one step of the fixed batch's 4"
    c = choose_packing(lens, 8, batch_size=4, time_model="1,0,0", oversize="alone")
    assert c.epoch_seconds == c.whole_seconds == 4.0


def test_a_rank_idles_only_where_an_update_has_too_few_samples() -> None:
    """The split way dealt a micro-step of fewer samples than ranks: ranks idle (a repeated
    row) in an update of 13 samples on 3 ranks, where every micro-batch could hold one."""
    lens = [4, 7, 3, 5, 6, 6, 5, 5, 5, 1, 1, 3, 2]
    sampler = DistributedDynamicBatchSampler(
        lengths=lens, batch_size=5, pack_len=8, num_replicas=3, rank=1,
        time_model="0,1e-6,0", seed=94,
    )  # fmt: skip
    plan = sampler.epoch_plan(0)
    assert plan.window_ends.tolist() == [len(plan.plan) // 3]
    assert not plan.is_padding.any() or len(plan.plan) > len(lens), "no avoidable repeat"
