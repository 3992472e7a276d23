"""Packing at the step time, attacked from outside (tester T2, issue 30): each test is a defect
reproduced in a few lines, a strict xfail until it is fixed (NOTE [ choosing packing per update ],
NOTE [ a micro-batch's layout ])."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import shared_file
from dynbatch import (
    DynamicBatchSampler,
    InputError,
    InputTypeError,
    PackCollator,
    PlanOptions,
    StepTimeTable,
    choose_packing,
)
from dynbatch.plan.pack_time import PackLayout, plan_timed_packs


def h100() -> StepTimeTable:
    return StepTimeTable.load(shared_file("h100_bert_base_step_times.json"))


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


def test_stats_packed_row_describes_the_epoch_the_sampler_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/packing.md: 'dynbatch stats --pack-len N --time-model c,a,b prints its row (rows,
    packing efficiency, updates, predicted epoch time), the epoch the sampler plans with the
    same options'. On a flat step the sampler runs every update whole and padded (19 steps,
    about 0.16 of their tokens real); the row says 80 batches, 0.991 efficiency."""
    from dynbatch.cli import main
    from dynbatch.plan.pack_time import PackLayout

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
