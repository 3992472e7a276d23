"""``dynbatch stats --pack-len`` plans the packed row as the sampler given the same flags
plans it: ``--max-batch-size`` caps its rows, and a flag the sampler refuses beside packing
(``--update-size``, ``--fixed-step-size``) is refused by name rather than left out of the row;
``--fixed-step-size`` with a step time acts on the ``like fixed`` row."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import dynbatch
from dynbatch.cli import main

LENGTHS = np.random.default_rng(0).integers(5, 128, 1500)
BASE = ["--fixed-batch-size", "16", "--max-cost", "100000", "--cost", "linear"]


@pytest.fixture
def npy(tmp_path: Path) -> str:
    path = tmp_path / "lengths.npy"
    np.save(path, LENGTHS)
    return str(path)


def rows(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, dict[str, object]]:
    assert main(["stats", *argv, "--json"]) == 0
    return {row["name"]: row for row in json.loads(capsys.readouterr().out)["rows"]}


@pytest.mark.parametrize("cap", [1, 2])
def test_the_packed_row_caps_its_rows_at_max_batch_size_as_the_sampler_does(
    capsys: pytest.CaptureFixture[str], npy: str, cap: int
) -> None:
    sampler = dynbatch.DynamicBatchSampler(
        lengths=LENGTHS,
        batch_size=16,
        pack_len=256,
        max_cost=100000,
        cost="linear",
        max_batch_size=cap,
    )
    packed = rows(capsys, npy, *BASE, "--pack-len", "256", "--max-batch-size", str(cap))["packed"]
    assert (packed["batches"], packed["updates"]) == (len(sampler), sampler.steps_for_epochs([0]))
    assert packed["batches"] > packed["updates"], "the cap splits the updates' rows"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--update-size", "8"], "--pack-len=256 does not support --update-size=8"),
        (["--fixed-step-size", "8"], "--pack-len=256 does not support --fixed-step-size=8"),
    ],
)
def test_a_flag_the_packed_sampler_refuses_is_refused_by_name(
    capsys: pytest.CaptureFixture[str], npy: str, flags: list[str], message: str
) -> None:
    assert main(["stats", npy, *BASE, "--pack-len", "256", *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err


def test_fixed_step_size_with_a_time_model_acts_on_the_like_fixed_row(
    capsys: pytest.CaptureFixture[str], npy: str
) -> None:
    timed = [*BASE, "--time-model", "0.01,1e-4,1e-6"]
    own = rows(capsys, npy, *timed)["like fixed"]
    stepped = rows(capsys, npy, *timed, "--fixed-step-size", "2")["like fixed"]
    sampler = dynbatch.DynamicBatchSampler(
        lengths=LENGTHS,
        batch_size=16,
        max_cost=100000,
        cost="linear",
        time_model="0.01,1e-4,1e-6",
        fixed_step_size=2,
    )
    assert sampler.options.fixed_step_size == 2
    assert stepped["updates"] == own["updates"] == sampler.steps_for_epochs([0])


def test_fixed_step_size_without_a_step_time_names_the_time_model(
    capsys: pytest.CaptureFixture[str], npy: str
) -> None:
    assert main(["stats", npy, *BASE, "--fixed-step-size", "8"]) == 2
    err = capsys.readouterr().err
    assert "--fixed-step-size=8 sets the fixed batch's step" in err, err
    assert "needs --time-model" in err and "--time-model=None" not in err, err


def test_the_lower_bound_beside_a_packed_row_is_said_of_padded_plans(
    capsys: pytest.CaptureFixture[str], npy: str
) -> None:
    """--max-batch-size caps a padded batch's samples but a packed batch's rows, so the packed
    row can have fewer batches than the bound: the line must not say no plan has fewer."""
    flags = [npy, *BASE, "--pack-len", "256", "--max-batch-size", "1"]
    assert main(["stats", *flags, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    packed = next(row for row in report["rows"] if row["name"] == "packed")
    assert packed["batches"] < report["lower_bound_batches"], "the packed row beats the bound"
    assert main(["stats", *flags]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    assert line.startswith("lower bound on padded batches (no padded plan has fewer: "), line
