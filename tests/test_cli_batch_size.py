"""`dynbatch stats --batch-size B` without `--max-cost` plans what `batch_size=B` plans in the
library: `like_fixed`, within its budget, the fixed batch's worst batch `cost(B, L_max)`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dynbatch import like_fixed, plan_epoch, plan_stats
from dynbatch.cli import main
from dynbatch.plan.costs import charge

LENS = np.random.default_rng(7).integers(2, 300, 900)


def stats(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["stats", *argv, "--json"]) == 0
    out: dict = json.loads(capsys.readouterr().out)
    return out


@pytest.mark.parametrize("cost", ["quadratic", "linear"])
@pytest.mark.parametrize("pairs", [False, True], ids=["one length", "pairs"])
def test_batch_size_alone_plans_like_fixed_within_the_fixed_batchs_worst(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, cost: str, pairs: bool
) -> None:
    lens = np.stack([LENS, LENS[::-1] // 2 + 1], axis=1) if pairs else LENS
    np.save(tmp_path / "lengths.npy", lens)
    out = stats(capsys, str(tmp_path / "lengths.npy"), "--batch-size", "32", "--cost", cost)
    longest = lens.max(axis=0)
    worst = float(np.asarray(charge(cost, 32, np.asarray([longest])))[0])
    assert out["max_cost"] == pytest.approx(worst), "the fixed batch's worst batch, cost(32, L)"
    rows = {r["name"]: r for r in out["rows"]}
    recipe = like_fixed(lens, 32, cost=cost)  # what DynamicBatchSampler(batch_size=32) plans
    assert recipe.max_cost == pytest.approx(worst), "like_fixed's own budget"
    sharded = plan_epoch(lens, recipe, 0)
    planned = plan_stats(lens, sharded.plan, cost=recipe.cost, max_cost=recipe.max_cost)
    assert rows["like fixed"]["batches"] == planned.batches
    assert rows["like fixed"]["updates"] == rows["fixed"]["updates"] == -(-len(lens) // 32)
    assert rows["like fixed"]["padding_efficiency"] == pytest.approx(planned.padding_efficiency)
    assert rows["fixed"]["cost_max"] <= worst * (1 + 1e-12), "the fixed batch fits its own worst"


@pytest.mark.parametrize("pairs", [False, True], ids=["one length", "pairs"])
def test_batch_size_without_cost_plans_with_the_samplers_own_default_cost(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, pairs: bool
) -> None:
    """``DynamicBatchSampler(batch_size=32)`` takes ``like_fixed``'s default cost (padded tokens
    for one length, ``PairCost()`` for pairs): the command, given no ``--cost``, plans the same."""
    lens = np.stack([LENS, LENS[::-1] // 2 + 1], axis=1) if pairs else LENS
    np.save(tmp_path / "lengths.npy", lens)
    out = stats(capsys, str(tmp_path / "lengths.npy"), "--batch-size", "32")
    recipe = like_fixed(lens, 32)  # what DynamicBatchSampler(lengths=lens, batch_size=32) plans
    assert out["max_cost"] == pytest.approx(recipe.max_cost)
    planned = plan_stats(
        lens, plan_epoch(lens, recipe, 0).plan, cost=recipe.cost, max_cost=recipe.max_cost
    )
    rows = {r["name"]: r for r in out["rows"]}
    assert rows["like fixed"]["batches"] == planned.batches
    assert rows["like fixed"]["padding_efficiency"] == pytest.approx(planned.padding_efficiency)


def test_the_derived_budget_is_said_in_the_text(capsys, tmp_path: Path) -> None:
    np.save(tmp_path / "lengths.npy", LENS)
    assert main(["stats", str(tmp_path / "lengths.npy"), "--batch-size", "32"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    longest = int(LENS.max())  # like_fixed's default for one length: padded tokens
    assert f"max_cost={32 * longest:g} (cost(32, {longest}), the fixed batch's worst)" in head
    assert "cost=linear" in head


def test_neither_max_cost_nor_batch_size_names_both(capsys, tmp_path: Path) -> None:
    np.save(tmp_path / "lengths.npy", LENS)
    assert main(["stats", str(tmp_path / "lengths.npy")]) == 2
    err = capsys.readouterr().err
    assert "--max-cost is required: the budget every batch fits" in err
    assert "or give --batch-size" in err, "the other way to give the budget"


def test_max_cost_given_keeps_the_fixed_batch_of_20(capsys, tmp_path: Path) -> None:
    np.save(tmp_path / "lengths.npy", LENS)
    out = stats(capsys, str(tmp_path / "lengths.npy"), "--max-cost", "5e6")
    rows = {r["name"]: r for r in out["rows"]}
    assert out["max_cost"] == 5e6 and rows["fixed"]["updates"] == -(-len(LENS) // 20)


@pytest.mark.parametrize(
    "flag, field, value",
    [
        ("--max-batch-size", "max_batch_size", 2),
        ("--batch-size-multiple", "batch_size_multiple", 8),
        ("--bucket-width", "bucket_width", 0.5),
    ],
)
def test_the_like_fixed_row_takes_the_flags_the_sampler_takes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str, field: str, value: float
) -> None:
    """``DynamicBatchSampler(batch_size=16, max_batch_size=2)`` plans micro-batches of at most
    2: the row that says it is the sampler's epoch plans the same (it took the flag for the
    other rows only)."""
    lens = np.minimum(np.random.default_rng(0).lognormal(3.5, 0.8, 3000).astype(int) + 2, 400)
    np.save(tmp_path / "lengths.npy", lens)
    out = stats(capsys, str(tmp_path / "lengths.npy"), "--batch-size", "16", flag, str(value))
    recipe = like_fixed(lens, 16, **{field: value})  # what the sampler given it plans
    planned = plan_stats(
        lens, plan_epoch(lens, recipe, 0).plan, cost=recipe.cost, max_cost=recipe.max_cost
    )
    row = {r["name"]: r for r in out["rows"]}["like fixed"]
    assert row["batches"] == planned.batches
    assert row["padding_efficiency"] == pytest.approx(planned.padding_efficiency)


@pytest.mark.parametrize("flag", ["--batch-size", "--fixed-batch-size"])
@pytest.mark.parametrize("value", ["0", "99999999999999999999"])
def test_a_bad_batch_size_is_named_as_it_was_written(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str, value: str
) -> None:
    np.save(tmp_path / "lengths.npy", LENS)
    assert main(["stats", str(tmp_path / "lengths.npy"), flag, value]) == 2
    err = capsys.readouterr().err
    assert f"{flag} must be" in err and f"got {flag}={value}" in err, err
    other = "--fixed-batch-size" if flag == "--batch-size" else "--batch-size"
    assert other not in err and "batch_size" not in err, err
