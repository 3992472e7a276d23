"""The fit on synthetic measurements, and calibrate/preflight driven by a counter the test
controls: no paddle needed (the last test proves it in a process where paddle is blocked)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import dynbatch
from dynbatch import CalibrationError, MemoryBudgetError, calibrate, preflight
from dynbatch.memory import Counter
from dynbatch.memory.fit import ProbeGrid, fit
from dynbatch.memory.probe import Run
from dynbatch.plan.costs import fit_polynomial

MIB = 2**20


class Allocator:
    """A counter the test controls: a step "allocates" by calling :meth:`hold`."""

    name = "test allocator"

    def __init__(self, resident: int = 0) -> None:
        self.current = self.peak = resident

    def reset_peak(self) -> None:
        self.peak = self.current

    def peak_bytes(self) -> int:
        return self.peak

    def current_bytes(self) -> int:
        return self.current

    def hold(self, nbytes: float) -> None:
        self.peak = max(self.peak, self.current + int(nbytes))


def memory_step(
    allocator: Allocator, mib: Callable[[int, int], float], oom_over: float = np.inf
) -> Callable[[int, int], None]:
    """A step whose peak is ``mib(n, L)`` MiB above what is resident; out of memory above
    ``oom_over`` MiB."""

    def step(n: int, length: int) -> None:
        if mib(n, length) > oom_over:
            raise MemoryError("Out of memory error on the test device")
        allocator.hold(mib(n, length) * MIB)

    return step


def runs(grid: ProbeGrid, mib: Callable[[float, float], float], noise: float = 0.0) -> list[Run]:
    rng = np.random.default_rng(0)
    return [
        Run(mib(s.n, s.length) * (1 + noise * rng.standard_normal()), 0.0, 1e-3 * s.n * s.length)
        for s in grid.shapes()
    ]


GRID = ProbeGrid.of(max_len=512, min_len=16)


# -- fit ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("c", "a", "b"), [(40.0, 0.02, 3e-5), (0.0, 0.5, 0.0), (100.0, 0.0, 1e-4), (5.0, 1e-3, 1e-6)]
)
def test_fit_recovers_an_exact_polynomial(c: float, a: float, b: float) -> None:
    fitted = fit(GRID, runs(GRID, lambda n, L: c + n * L * (a + b * L)))
    m = fitted.memory
    assert (m.c, m.a, m.b) == pytest.approx((c, a, b), rel=1e-6, abs=1e-9)
    assert fitted.fit_error < 1e-9 and fitted.held_out_error < 1e-9 and fitted.held_out_checked
    assert [p.role for p in fitted.probes].count("held-out") == 4
    assert fitted.time_model.a == pytest.approx(1e-3) and fitted.time_held_out_error < 1e-9


@given(
    c=st.floats(0, 1e4),
    a=st.floats(1e-6, 1.0),
    b=st.floats(0, 1e-3),
    max_len=st.integers(64, 4096),
    num_lengths=st.integers(3, 7),
)
def test_fit_predicts_unseen_shapes_of_any_polynomial(
    c: float, a: float, b: float, max_len: int, num_lengths: int
) -> None:
    grid = ProbeGrid.of(max_len=max_len, num_lengths=num_lengths)
    fitted = fit(grid, runs(grid, lambda n, L: 1.0 + c + n * L * (a + b * L)))
    assert fitted.fit_error < 1e-6 and fitted.held_out_error < 1e-6


@pytest.mark.parametrize("noise", [0.001, 0.01, 0.03])
def test_fit_with_noisy_counters_errs_about_as_much_as_the_noise(noise: float) -> None:
    fitted = fit(GRID, runs(GRID, lambda n, L: 40 + n * L * (0.02 + 3e-5 * L), noise))
    assert fitted.held_out_error < 5 * noise and fitted.fit_error < 5 * noise
    assert fitted.memory.a == pytest.approx(0.02, rel=30 * noise)


def test_probes_at_the_floor_are_explained_by_it_and_left_out() -> None:
    # a step's fixed peak (the embedding gradient) above the small batches' activations
    fitted = fit(GRID, runs(GRID, lambda n, L: max(60.0, 40 + 0.01 * n * L)))
    assert fitted.memory.floor == 60.0
    assert (fitted.memory.c, fitted.memory.a) == pytest.approx((40.0, 0.01))
    at_floor = [p for p in fitted.probes if p.peak_mib == 60.0]
    assert len(at_floor) > 1 and all(p.predicted_mib == 60.0 for p in at_floor)
    assert fitted.fit_error < 1e-9


def test_fit_refuses_measurements_that_cannot_pin_the_model_down() -> None:
    with pytest.raises(CalibrationError, match=r"even the smallest probe \(1 sample of 16\)"):
        fit(GRID, [Run(None, 0.0, 0.1), *runs(GRID, lambda n, L: n * L)[1:]])
    with pytest.raises(CalibrationError, match=r"peaked above the step's fixed peak of 7\.0 MiB"):
        fit(GRID, runs(GRID, lambda n, L: 7.0))
    one = ProbeGrid.of(max_len=8, min_len=8)
    with pytest.raises(CalibrationError, match="cover one length only"):
        fit(one, runs(one, lambda n, L: n * L))
    with pytest.raises(dynbatch.InputError, match="one run per shape"):
        fit(GRID, runs(GRID, lambda n, L: n * L)[:-1])


def test_fit_polynomial_is_non_negative() -> None:
    n, length = np.array([1.0, 2.0, 4.0, 8.0]), np.array([8.0, 8.0, 8.0, 8.0])
    c, a, b = fit_polynomial(n, length, 100 - n * length)  # falls with the batch
    assert min(c, a, b) >= 0


# -- calibrate and preflight with a counter of the test's own --------------------------------------
def test_calibrate_fits_what_the_counter_it_is_given_reads() -> None:
    allocator = Allocator(resident=50 * MIB)
    step = memory_step(allocator, lambda n, L: max(9.0, n * L * (0.01 + 2e-5 * L)))
    cost = calibrate(step, max_len=256, counter=allocator)
    assert isinstance(allocator, Counter)
    assert (cost.c, cost.a, cost.b) == pytest.approx((50.0, 0.01, 2e-5))
    assert cost.floor == 59.0
    assert cost.report is not None and cost.report.source == "test allocator"
    assert all(p.resident_mib == 50.0 for p in cost.report.probes)


def test_calibrate_records_out_of_memory_from_any_counter() -> None:
    allocator = Allocator()
    mib = lambda n, L: 1 + n * L * (0.01 + 1e-4 * L)  # noqa: E731
    step = memory_step(allocator, mib, oom_over=100.0)
    cost = calibrate(step, max_len=256, max_tokens=4096, counter=allocator)
    lost = [(p.n, p.length) for p in cost.report.probes if p.peak_mib is None]
    assert lost == [(p.n, p.length) for p in cost.report.probes if mib(p.n, p.length) > 100]
    assert lost == [(16, 256)], "the largest probe ran out"
    assert (cost.a, cost.b) == pytest.approx((0.01, 1e-4))


def test_calibrate_restores_plain_state_dicts_without_paddle() -> None:
    class Model:
        def __init__(self) -> None:
            self.state = {"step": 0, "nested": {"lr": 0.5}}

        def state_dict(self) -> dict[str, Any]:
            return {k: dict(v) if isinstance(v, dict) else v for k, v in self.state.items()}

        def set_state_dict(self, state: dict[str, Any]) -> None:
            self.state = state

    model, allocator = Model(), Allocator()

    def step(n: int, length: int) -> None:
        model.state = {"step": model.state["step"] + 1, "nested": {"lr": 0.1}}
        allocator.hold(n * length * 1024)

    calibrate(step, max_len=64, counter=allocator, restore=model)
    assert model.state == {"step": 0, "nested": {"lr": 0.5}}


def test_preflight_measures_with_the_counter_it_is_given() -> None:
    allocator = Allocator()
    step = memory_step(allocator, lambda n, L: n * L / 1024)
    report = preflight(
        step, [[0, 1], [2]], [100, 300, 900], cost="linear", max_cost=1.0, counter=allocator
    )
    assert report.source == "test allocator"
    assert [(c.position, c.measured_mib) for c in report.checks] == [
        (1, 900 / 1024),
        (0, 600 / 1024),
    ]
    with pytest.raises(
        MemoryBudgetError, match=r"batch 1 of the plan \(n=1, L=900\) peaked at 0.88"
    ):
        preflight(
            step, [[0, 1], [2]], [100, 300, 900], cost="linear", max_cost=0.8, counter=allocator
        )


@pytest.mark.parametrize("call", ["calibrate", "preflight"])
def test_a_counter_without_the_interface_is_named(call: str) -> None:
    match = r"counter must have name, reset_peak\(\), peak_bytes\(\) and current_bytes\(\)"
    with pytest.raises(dynbatch.InputTypeError, match=match + r".*counter=3"):
        if call == "calibrate":
            calibrate(lambda n, L: None, max_len=8, counter=3)  # type: ignore[arg-type]
        else:
            preflight(lambda n, L: None, [[0]], [4], cost="linear", max_cost=1, counter=3)  # type: ignore[arg-type]


def test_fit_calibrate_and_preflight_run_without_paddle() -> None:
    code = textwrap.dedent(
        """
        import json, sys
        sys.modules["paddle"] = None  # as if not installed
        import dynbatch
        from dynbatch.memory.fit import ProbeGrid, fit
        from dynbatch.memory.probe import Run

        grid = ProbeGrid.of(max_len=128)
        fitted = fit(grid, [Run(5 + s.n * s.length / 64, 0.0, 0.01) for s in grid.shapes()])

        class Allocator:
            name = "test allocator"
            peak = 0
            def reset_peak(self): self.peak = 0
            def peak_bytes(self): return self.peak
            def current_bytes(self): return 0

        allocator = Allocator()
        def step(n, L):
            allocator.peak = max(allocator.peak, (5 + n * L / 64) * 2**20)

        cost = dynbatch.calibrate(step, max_len=128, counter=allocator)
        report = dynbatch.preflight(
            step, [[0, 1]], [9, 30], cost=cost, max_cost=100, counter=allocator
        )
        heavy = sorted(m for m in sys.modules if m.split(".")[0] == "paddle" and sys.modules[m])
        print(json.dumps([fitted.memory.a, cost.a, cost.report.device, report.ok, heavy]))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    fitted_a, calibrated_a, device, ok, imported = json.loads(out.stdout.splitlines()[-1])
    assert fitted_a == pytest.approx(1 / 64) and calibrated_a == pytest.approx(1 / 64)
    assert device == "unknown" and ok and imported == []


def test_steps_timed_at_zero_seconds_give_a_time_error_not_nan() -> None:
    zero = [Run(r.peak_mib, 0.0, 0.0) for r in runs(GRID, lambda n, L: 1 + n * L)]
    fitted = fit(GRID, zero)
    assert fitted.time_held_out_error == 0.0 and fitted.time_model(8, 8) == 0.0


@pytest.mark.parametrize("reading", [None, -1, "12", float("nan")])
def test_a_counter_reading_that_is_not_bytes_is_named(reading: Any) -> None:
    class Broken(Allocator):
        def peak_bytes(self) -> Any:
            return reading

    with pytest.raises(
        dynbatch.InputTypeError if reading is None or reading == "12" else dynbatch.InputError,
        match=r"counter\.peak_bytes\(\) must be a finite number >= 0, got counter\.peak_bytes\(\)=",
    ):
        calibrate(lambda n, L: None, max_len=64, counter=Broken())
