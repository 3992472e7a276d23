"""dynbatch.memory on (source, target) pairs: calibrate, preflight and fill_device of a step of
two lengths, ``step(n, Ls, Lt)``; on stand-in steps of exact bytes and on a real encoder-decoder
(paddlenlp's BART, tiny, CPU), measured by the CPU allocator.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import paddle
import pytest

import dynbatch
from dynbatch import (
    CalibrationError,
    InputError,
    MemoryBudgetError,
    MemoryCost,
    PairMemoryCost,
    calibrate,
    fill_device,
    plan_batches,
    preflight,
)
from dynbatch.cli import main
from dynbatch.memory import load_cost, peak_memory_mib, probe, reset_peak_memory
from dynbatch.memory.pair_fit import PairProbeGrid, fit_pairs
from dynbatch.memory.probe import Run
from dynbatch.plan.costs import PairCost
from dynbatch.plan.epochs import plan_epoch
from dynbatch.plan.pair_steptime import COEFFICIENTS, PairStepTimeModel
from dynbatch.plan.stats import batch_table
from dynbatch.plan.steptime import FLAT_STEP, StepTimeModel

MIB = 2**20
#: bytes per pair of a stand-in step: 1 KiB a source token, 2 KiB a target token, 8 bytes a
#: (source, target) token pair
BYTES = {"a_s": 1024.0, "a_t": 2048.0, "b_s": 0.0, "b_t": 0.0, "cross": 8.0}


def pair_step(
    bytes_per: Callable[[int, int, int], float], oom_over: float = np.inf
) -> Callable[[int, int, int], None]:
    """A stand-in step of pairs: holds ``bytes_per(n, Ls, Lt)`` bytes at its peak; out of
    memory above ``oom_over`` bytes, raised as paddle raises it on a GPU."""

    def step(n: int, source: int, target: int) -> None:
        size = bytes_per(n, source, target)
        if size > oom_over:
            raise MemoryError("ResourceExhaustedError: Out of memory error on GPU 0")
        x = paddle.ones([max(1, int(size) // 4)], dtype="float32")
        del x

    return step


def exact_bytes(n: int, source: int, target: int) -> float:
    per_pair = BYTES["a_s"] * source + BYTES["a_t"] * target + BYTES["cross"] * source * target
    return float(n * per_pair)


# -- calibrate --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def exact() -> PairMemoryCost:
    return calibrate(pair_step(exact_bytes), max_len=(64, 32), max_tokens=2048)


def test_calibrate_of_pairs_recovers_each_side_and_the_cross_term(exact: PairMemoryCost) -> None:
    cost = exact
    assert isinstance(cost, PairMemoryCost), "max_len=(Ls, Lt): a cost of two lengths"
    for name, value in BYTES.items():
        assert getattr(cost, name) * MIB == pytest.approx(value, abs=1e-3), name
    report = cost.report
    assert report is not None and report.pairs
    assert (report.max_len, report.max_target_len) == (64, 32), "the longest of each side"
    assert report.held_out_error < 0.01 and report.fit_error < 0.01
    roles = [p.role for p in report.probes]
    assert roles.count("held-out") == 4 and roles.count("fit") == 18, "3 lengths a side"
    held = {(p.length, p.target_length) for p in report.probes if p.role == "held-out"}
    fitted = {(p.length, p.target_length) for p in report.probes if p.role == "fit"}
    assert not held & fitted, "held-out shapes are shapes the fit did not see"
    assert isinstance(cost.time_model, PairStepTimeModel), "a step time of two lengths"
    text = str(report)
    assert "max_len=(64, 32)" in text and re.search(r"role\s+n\s+Ls\s+Lt", text)


def test_calibrate_of_pairs_leaves_out_probes_that_run_out_of_memory() -> None:
    step = pair_step(exact_bytes, oom_over=1.5 * MIB)
    cost = calibrate(step, max_len=(64, 32), max_tokens=2048)
    lost = [p for p in cost.report.probes if p.peak_mib is None]  # type: ignore[union-attr]
    assert lost and "out of mem" in str(cost.report)
    assert cost.a_t * MIB == pytest.approx(BYTES["a_t"], rel=1e-3)


def test_memory_of_one_side_only_is_rejected_with_the_numbers() -> None:
    """A step whose memory does not follow the form (here: the cube of the source) is
    refused, with the report and the fitted cost attached."""
    with pytest.raises(CalibrationError, match=r"does not follow\s+max\(floor, c \+ n\*\(a_s"):
        calibrate(pair_step(lambda n, s, t: n * s**3 * 64.0), max_len=(64, 32), max_tokens=2048)


def test_a_step_of_pairs_whose_memory_does_not_grow_is_rejected() -> None:
    with pytest.raises(CalibrationError, match=r"above the step's fixed peak .* lengths a side"):
        calibrate(pair_step(lambda n, s, t: 4 * MIB), max_len=(64, 32), max_tokens=2048)


@pytest.mark.parametrize(
    ("step", "kwargs", "error", "match"),
    [
        (  # a step of one length, lengths of pairs
            lambda n, L: None,
            {"max_len": (64, 32)},
            TypeError,
            r"step must be a callable step\(n, Ls, Lt\) .* \(it takes step\(n, L\), a batch of "
            r"one length, but the lengths are \(source, target\) pairs, max_len=\(64, 32\)",
        ),
        (  # a step of pairs, one length
            lambda n, s, t: None,
            {"max_len": 64},
            TypeError,
            r"step must be a callable step\(n, L\) .* \(it takes step\(n, Ls, Lt\), .* "
            r"max_len=64: give max_len=\(Ls, Lt\) for pairs\)",
        ),
        (
            lambda n, s, t: None,
            {"max_len": (64, 32, 16)},
            TypeError,
            r"max_len must be a \(source, target\) pair of positive ints .* "
            r"max_len=\(64, 32, 16\)",
        ),
        (lambda n, s, t: None, {"max_len": (64, 0)}, ValueError, r"max_len\[1\] must be"),
        (lambda n, s, t: None, {"max_len": (64, "32")}, TypeError, r"max_len\[1\] must be"),
        (
            lambda n, s, t: None,
            {"max_len": (64, 32), "min_len": (4, 40)},
            ValueError,
            r"min_len must be at most max_len=\(64, 32\) on each side, got min_len=\(4, 40\)",
        ),
        (
            lambda n, s, t: None,
            {"max_len": (64, 32), "min_len": (4, 1, 1)},
            TypeError,
            "min_len must be a",
        ),
        (lambda n, s, t: None, {"max_len": (64, 32), "num_lengths": 1}, ValueError, "num_lengths"),
    ],
)
def test_calibrate_of_pairs_bad_inputs_name_the_argument(
    step: Any, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        calibrate(step, **kwargs)


def test_pair_memory_cost_json_round_trip_is_exact(exact: PairMemoryCost, tmp_path: Path) -> None:
    cost = exact
    cost.save(tmp_path / "pairs.json")
    again = PairMemoryCost.load(tmp_path / "pairs.json")
    assert again == cost and again.report == cost.report and again.spec() == cost.spec()
    assert json.loads((tmp_path / "pairs.json").read_text())["format"] == "dynbatch.PairMemoryCost"
    with pytest.raises(InputError, match=r"is not a saved MemoryCost"):
        MemoryCost.load(tmp_path / "pairs.json")


def test_a_saved_cost_of_pairs_is_loaded_as_such_and_the_stats_cli_takes_it(
    exact: PairMemoryCost, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exact.save(tmp_path / "pairs.json")
    MemoryCost(c=1.0, a=0.5, b=0.0).save(tmp_path / "one.json")
    assert load_cost(tmp_path / "pairs.json") == exact
    assert load_cost(tmp_path / "one.json") == MemoryCost(c=1.0, a=0.5, b=0.0)
    np.save(tmp_path / "lens.npy", np.array([3, 5, 9]))
    argv = ["stats", str(tmp_path / "lens.npy"), "--max-cost", "100"]
    assert main([*argv, "--cost-file", str(tmp_path / "pairs.json")]) == 2, "one length"
    assert re.search(r"cost=PairMemoryCost\(.*\) takes two lengths", capsys.readouterr().err)


#: a stand-in step's seconds on the fake clock: each side's tokens and attention, the cross term
SECONDS = PairStepTimeModel(c=0.02, a_s=1e-4, a_t=3e-4, b_s=0.0, b_t=2e-6, cross=1e-6)


@pytest.fixture
def fake_clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The probes' clock, advanced by the steps themselves: no test reads measured time."""
    now = [0.0]
    monkeypatch.setattr(probe, "time", type("Clock", (), {"perf_counter": lambda: now[0]}))
    return now


def timed_pair_step(clock: list[float]) -> Callable[[int, int, int], None]:
    """The stand-in step of exact bytes, taking :data:`SECONDS` on ``clock``."""
    memory = pair_step(exact_bytes)

    def step(n: int, source: int, target: int) -> None:
        memory(n, source, target)
        clock[0] += float(SECONDS(n, source, target))

    return step


def test_calibrate_of_pairs_fits_a_step_time_of_two_lengths(
    fake_clock: list[float], tmp_path: Path
) -> None:
    cost = calibrate(timed_pair_step(fake_clock), max_len=(64, 32), max_tokens=2048)
    model = cost.time_model
    assert isinstance(model, PairStepTimeModel), "a step time of (n, Ls, Lt)"
    for name in COEFFICIENTS:
        assert getattr(model, name) == pytest.approx(getattr(SECONDS, name), abs=1e-9), name
    assert model.error < 1e-6, "its error: the mean miss on the probes it was fitted on"
    assert cost.report is not None and cost.report.time_held_out_error < 1e-6, "held-out"
    assert "of the step-time model on the held-out probes: 0.0%" in str(cost.report)
    cost.save(tmp_path / "pairs.json")
    again = PairMemoryCost.load(tmp_path / "pairs.json")
    assert again.time_model == model, "saved and read back as a step time of pairs"


def test_the_time_seam_fits_a_step_time_of_pairs_when_given_one() -> None:
    """fit_pairs takes the step time's fit as an argument (NOTE [ the probe grid of pairs ]),
    by default the PairStepTimeModel's; a fit given is run on the fitted probes and checked on
    the held-out ones; None fits none."""
    grid = PairProbeGrid.of(max_len=(64, 32), max_tokens=2048)
    shapes = grid.shapes()
    runs = [Run(exact_bytes(*s[:3]) / MIB, 0.0, 1e-3 * s.n * (s.source + s.target)) for s in shapes]
    seen: list[int] = []

    def time_fit(n: Any, source: Any, target: Any, seconds: Any) -> Any:
        seen.append(len(n))
        return lambda n, s, t: 0.001 * np.asarray(n) * (np.asarray(s) + np.asarray(t))

    fitted = fit_pairs(grid, runs, time_fit=time_fit)
    assert seen == [sum(s.role == "fit" for s in shapes)], "fitted on the fitted probes"
    assert fitted.time_held_out_error == pytest.approx(0.0, abs=1e-12)
    assert fit_pairs(grid, runs, time_fit=None).time_model is None
    default = fit_pairs(grid, runs).time_model
    assert isinstance(default, PairStepTimeModel)
    assert default.a_s == pytest.approx(1e-3) and default.a_t == pytest.approx(1e-3)


# -- the cost of pairs in the planner ----------------------------------------------------------
COST = PairMemoryCost(c=1.0, a_s=0.001, a_t=0.002, b_s=1e-5, b_t=1e-5, cross=2e-5, floor=1.5)


def corpus(n: int = 3000, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack([rng.integers(4, 60, n), rng.integers(4, 90, n)], axis=1)


def test_pair_memory_cost_plans_batches_within_the_memory_budget() -> None:
    pairs = corpus()
    plan = plan_batches(pairs, 6.0, cost=COST, seed=0)
    table = batch_table(pairs, plan, cost=COST)
    assert table["cost"].max() <= 6.0, "every batch within the MiB budget"
    assert sorted(np.concatenate(plan).tolist()) == list(range(len(pairs))), "exactly once"
    derived = dynbatch.like_fixed(pairs, cost=COST, max_cost=6.0)
    longest = pairs.max(axis=0)
    batch = int(derived.update_size or 0)
    assert COST(batch, *longest) <= 6.0 < COST(batch + 1, *longest), (
        "without batch_size, the fixed batch is the most pairs of the longest sides in the MiB"
    )


def test_fill_device_of_pairs_fills_to_the_memory_target() -> None:
    pairs = corpus()
    opts = fill_device(pairs, None, max_cost=6.0, cost=COST)
    assert opts.cost == COST and opts.max_cost == 6.0, "no knee: the memory target decides"
    plan = plan_epoch(pairs, opts, 0).plan
    table = batch_table(pairs, list(plan), cost=COST)
    assert table["cost"].max() <= 6.0, "never above the memory target"
    full = table["cost"][table["batch_size"] > 1]
    assert np.median(full) > 0.9 * 6.0, "filled: a batch stops where the next pair would not fit"
    assert fill_device(pairs, FLAT_STEP, max_cost=6.0, cost=COST).cost == COST, "flat: no knee"
    grouped = fill_device(pairs, None, max_cost=6.0, cost=COST, batch_size=64)
    assert grouped.update_size == 64, "with batch_size, updates of at least that many"
    named = fill_device(pairs, None, max_cost=32 * 90**2 * 3, cost="quadratic")
    assert named.cost(2, 3, 4) == PairCost()(2, 3, 4), "a named cost in its form of two lengths"


def test_fill_device_of_pairs_stops_at_the_knee_of_a_step_time_of_two_lengths() -> None:
    """As for one length: the part of the step time that grows with the batch stops at
    c*f/(1-f), priced at each micro-batch's longest source and longest target, and never above
    the memory target."""
    pairs = corpus()
    time = PairStepTimeModel(c=0.04, a_s=1e-6, a_t=2e-6, b_s=1e-8, b_t=1e-8, cross=2e-8)
    knee = 0.04 * 0.8 / 0.2
    opts = fill_device(pairs, time, max_cost=1e6, cost=COST, fraction=0.8)
    table = batch_table(pairs, list(plan_epoch(pairs, opts, 0).plan), cost=COST)
    grows = time(table["batch_size"], table["source_max_len"], table["target_max_len"]) - time.c
    assert grows.max() <= knee * (1 + 1e-9), "never past the knee"
    assert np.median(grows) > 0.9 * knee, "filled to it: the memory target is far above"
    capped = fill_device(pairs, time, max_cost=6.0, cost=COST, fraction=0.8)
    table = batch_table(pairs, list(plan_epoch(pairs, capped, 0).plan), cost=COST)
    assert table["cost"].max() <= 6.0, "never above the memory target"
    assert np.median(table["cost"][table["batch_size"] > 1]) > 0.9 * 6.0, "which decides here"
    flat = fill_device(pairs, PairStepTimeModel(c=0.04), max_cost=6.0, cost=COST)
    assert flat.cost == COST and flat.max_cost == 6.0, "a flat step time: no knee"


def test_fill_device_takes_a_step_time_as_text_for_pairs_and_for_one_length() -> None:
    # an outside tester's finding: the text form the samplers take failed here on its
    # coefficients (c=None on '0.04,...'), for one length and for pairs
    pairs = corpus()
    text = "0.04,1e-6,2e-6,1e-8,1e-8,2e-8"
    model = PairStepTimeModel(c=0.04, a_s=1e-6, a_t=2e-6, b_s=1e-8, b_t=1e-8, cross=2e-8)
    given = fill_device(pairs, text, max_cost=1e6, cost=COST, fraction=0.8)
    same = fill_device(pairs, model, max_cost=1e6, cost=COST, fraction=0.8)
    assert given.fingerprint() == same.fingerprint()
    one = pairs.sum(axis=1)
    given = fill_device(one, "0.04,1e-6,0", max_cost=1e9, cost="linear")
    same = fill_device(one, StepTimeModel(0.04, 1e-6, 0.0), max_cost=1e9, cost="linear")
    assert given.fingerprint() == same.fingerprint()


def test_calibrate_then_fill_device_of_pairs(fake_clock: list[float]) -> None:
    """calibrate's step time of pairs is what fill_device takes, as for one length."""
    cost = calibrate(timed_pair_step(fake_clock), max_len=(64, 32), max_tokens=2048)
    pairs = np.minimum(corpus(), [64, 32])
    opts = fill_device(pairs, cost.time_model, max_cost=1e6, cost=cost, fraction=0.9)
    table = batch_table(pairs, list(plan_epoch(pairs, opts, 0).plan), cost=cost)
    sides = (table["source_max_len"], table["target_max_len"])
    grows = SECONDS(table["batch_size"], *sides) - SECONDS.c
    knee = 9 * SECONDS.c  # c * f / (1 - f)
    assert grows.max() <= knee * (1 + 1e-6), "never past the knee of the fitted step time"
    assert np.median(grows) > 0.9 * knee, "filled to it"


def test_fill_device_refuses_a_step_time_of_pairs_for_one_length() -> None:
    with pytest.raises(
        InputError,
        match=r"fill_device: time_model=PairStepTimeModel\(.*\) is "
        r"a step time of \(source, target\) pairs",
    ):
        fill_device([10, 20], SECONDS, max_cost=1e6, cost="linear")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {"cost": lambda n, L: n * L},
            r"cost=<function .*> takes one length, \(n, L\), but the lengths are \(source, "
            r"target\) pairs",
        ),
        ({"cost": MemoryCost(c=1.0, a=0.01, b=0.0)}, r"cost=MemoryCost\(.*\) takes one length"),
        (
            {"time_model": StepTimeModel(c=0.01, a=1e-5, b=0.0)},
            r"fill_device: time_model=StepTimeModel\(.*\) is a step time of one length",
        ),
        ({"max_cost": 1.2}, r"max_cost=1.2 does not fit one sample of the longest lengths"),
    ],
)
def test_fill_device_of_pairs_refuses_by_name(kwargs: dict[str, Any], match: str) -> None:
    args: dict[str, Any] = {"time_model": None, "max_cost": 6.0, "cost": COST, **kwargs}
    with pytest.raises(InputError, match=match):
        fill_device(corpus(), **args)


def test_fill_device_of_pairs_counts_target_tokens_in_updates_of_tokens() -> None:
    """Updates in "tokens" of pairs count each pair's target tokens, the tokens its loss is
    over, as like_fixed's do (not both sides)."""
    pairs = corpus()
    opts = fill_device(pairs, None, max_cost=6.0, cost=COST, batch_size=64, update_unit="tokens")
    assert opts.update_unit == "tokens"
    assert opts.update_size == pytest.approx(64 * pairs[:, 1].mean()), "the target's tokens"
    loss = np.maximum(pairs[:, 1] - 1, 0)  # e.g. labels shifted: one token fewer each
    counted = fill_device(
        pairs, None, max_cost=6.0, cost=COST, batch_size=64, update_unit="tokens", loss_tokens=loss
    )
    assert counted.update_size == pytest.approx(64 * loss.mean()), "loss_tokens as given"
    plan = plan_epoch(pairs, opts, 0).plan
    assert sorted(np.concatenate(list(plan)).tolist()) == list(range(len(pairs))), "each once"


# -- preflight ---------------------------------------------------------------------------------
def test_preflight_of_pairs_runs_the_heaviest_and_each_side_s_longest() -> None:
    lens = np.array([[10, 10], [10, 10], [10, 10], [200, 5], [5, 150], [40, 40]])
    plan = [np.array([0, 1, 2]), np.array([3]), np.array([4]), np.array([5])]
    per_byte = PairMemoryCost(
        c=0.0, a_s=1024 / MIB, a_t=2048 / MIB, b_s=0.0, b_t=0.0, cross=8 / MIB
    )
    calls: list[tuple[int, ...]] = []
    step = pair_step(exact_bytes)

    def recording(n: int, source: int, target: int) -> None:
        calls.append((n, source, target))
        step(n, source, target)

    report = preflight(recording, plan, lens, cost=per_byte, max_cost=64, k=1)
    assert report.ok
    shapes = [(c.position, c.n, c.length, c.target_length) for c in report.checks]
    assert shapes == [(2, 1, 5, 150), (0, 3, 10, 10), (1, 1, 200, 5)], (
        "the heaviest by the cost of pairs, the most pairs, the longest source (the longest "
        "target is the heaviest)"
    )
    assert calls[1:] == [(1, 5, 150), (3, 10, 10), (1, 200, 5)], "each run as step(n, Ls, Lt)"
    for check in report.checks:
        assert check.measured_mib == pytest.approx(check.predicted, rel=1e-3)
    assert re.search(r"batch\s+n\s+Ls\s+Lt", str(report))


def test_preflight_of_pairs_names_the_batch_over_budget() -> None:
    lens = np.array([[10, 10], [300, 300]])
    cost = PairMemoryCost(c=0.0, a_s=1024 / MIB, a_t=2048 / MIB, b_s=0.0, b_t=0.0, cross=8 / MIB)
    with pytest.raises(MemoryBudgetError, match=r"batch 1 of the plan \(n=1, Ls=300, Lt=300\)"):
        preflight(pair_step(exact_bytes), [[0], [1]], lens, cost=cost, max_cost=1.0)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"step": lambda n, L: None},
            TypeError,
            r"step must be a callable step\(n, Ls, Lt\) .* \(it takes step\(n, L\), a batch of "
            r"one length, but the lengths are \(source, target\) pairs, of shape \(2, 2\)\)",
        ),
        (
            {"cost": lambda n, L: n * L},
            ValueError,
            r"cost=<function .*> takes one length, \(n, L\), but the lengths are \(source, "
            r"target\) pairs",
        ),
        (
            {"step": lambda n, s, t: None, "lengths": [3, 4]},
            TypeError,
            r"step must be a callable step\(n, L\) .* \(it takes step\(n, Ls, Lt\), a batch of "
            r"\(source, target\) pairs, but the lengths are one per sample, lengths of shape "
            r"\(2,\): give an \[N, 2\] array for pairs\)",
        ),
        ({"cost": COST, "lengths": [3, 4], "step": lambda n, L: None}, ValueError, "takes two"),
    ],
)
def test_preflight_of_pairs_bad_inputs_name_the_argument(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    args: dict[str, Any] = {
        "step": lambda n, s, t: None,
        "batches": [[0, 1]],
        "lengths": [[3, 5], [4, 6]],
        "cost": "linear",
        "max_cost": 100.0,
    } | kwargs
    with pytest.raises(error, match=match):
        preflight(args.pop("step"), args.pop("batches"), args.pop("lengths"), **args)


# -- a real encoder-decoder --------------------------------------------------------------------
MAX_LEN = (48, 32)


def make_bart(seed: int = 0) -> tuple[Any, Callable[[int, int, int], None]]:
    """A tiny paddlenlp BART and one training step of it (AdamW) on random pairs."""
    transformers = pytest.importorskip("paddlenlp.transformers")
    paddle.seed(seed)
    config = transformers.BartConfig(
        vocab_size=100,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=128,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=2,
    )
    model = transformers.BartForConditionalGeneration(config)
    opt = paddle.optimizer.AdamW(1e-3, parameters=model.parameters())
    rng = np.random.default_rng(seed)

    def step(n: int, source: int, target: int) -> None:
        ids = paddle.to_tensor(rng.integers(3, 100, size=(n, source)), dtype="int64")
        labels = paddle.to_tensor(rng.integers(3, 100, size=(n, target)), dtype="int64")
        loss = model(input_ids=ids, decoder_input_ids=labels, labels=labels)[0]
        loss.backward()
        opt.step()
        opt.clear_grad()

    return model, step


@pytest.fixture(scope="module")
def bart() -> tuple[Callable[[int, int, int], None], PairMemoryCost]:
    model, step = make_bart()
    return step, calibrate(step, max_len=MAX_LEN, max_tokens=768, restore=[model])


def measured(step: Callable[[int, int, int], None], n: int, source: int, target: int) -> float:
    step(n, source, target)  # the first step of a new shape may build kernels: not measured
    reset_peak_memory()
    step(n, source, target)
    return peak_memory_mib()


def test_bart_calibrates_within_tolerance(bart: Any) -> None:
    _, cost = bart
    assert cost.report.held_out_error <= cost.report.tolerance == 0.10, str(cost.report)
    assert cost.a_t > 0 and cost.cross + cost.b_s + cost.b_t > 0, "both sides and attention"


@pytest.mark.parametrize(
    ("n", "source", "target"), [(20, 45, 6), (40, 5, 30), (9, 30, 30), (2, 44, 30), (60, 9, 9)]
)
def test_bart_cost_predicts_shapes_it_never_probed(
    bart: Any, n: int, source: int, target: int
) -> None:
    step, cost = bart
    assert (n, source, target) not in {(p.n, p.length, p.target_length) for p in cost.report.probes}
    peak = measured(step, n, source, target)
    predicted = float(cost(n, source, target))
    assert abs(predicted - peak) / peak <= 0.10, (n, source, target, peak, predicted)


def test_bart_preflight_runs_a_plan_of_pairs_within_its_budget(bart: Any) -> None:
    step, cost = bart
    pairs = corpus(400)
    pairs = np.minimum(pairs, MAX_LEN)
    budget = float(cost(24, *MAX_LEN))
    sampler = dynbatch.DynamicBatchSampler(lengths=pairs, max_cost=budget, cost=cost, seed=0)
    margin = budget * (1 + cost.report.tolerance)  # the error calibrate promises
    report = preflight(step, sampler, k=2, max_cost=margin)
    assert report.ok and all(c.target_length is not None for c in report.checks)
    for check in report.checks:
        assert check.predicted <= budget, "the plan's batches are within its budget"
        assert abs(check.measured_mib - check.predicted) <= 0.10 * check.predicted, str(report)
    with pytest.raises(MemoryBudgetError, match=r"\(n=\d+, Ls=\d+, Lt=\d+\) peaked at"):
        preflight(step, sampler, k=2, max_cost=budget / 2)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (
            lambda: PairMemoryCost(1, 1, 0, 0, 0, 0, time_model=StepTimeModel(c=0.01, a=1e-4, b=0)),
            r"PairMemoryCost: time_model=StepTimeModel\(.*\) is a step time of one length; "
            r"a cost of pairs takes a PairStepTimeModel",
        ),
        (
            lambda: MemoryCost(c=1, a=1, b=0, time_model=PairStepTimeModel(c=0.01, a_s=1e-4)),
            r"MemoryCost: time_model=PairStepTimeModel\(.*\) is a step time of pairs; "
            r"a cost of one length takes a StepTimeModel",
        ),
    ],
)
def test_a_cost_refuses_a_step_time_of_the_other_kind(make: Any, match: str) -> None:
    # an outside tester's finding: it was taken, and saved a file its own load refuses
    with pytest.raises(InputError, match=match):
        make()
