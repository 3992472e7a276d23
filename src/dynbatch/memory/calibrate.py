"""Fit a :class:`~dynbatch.MemoryCost` to your model by measuring real training steps."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any, overload

from .._checks import check_positive_number
from ..plan.pair_costs import PAIR_TERMS
from .cost import CalibrationError, CalibrationReport, MemoryCost, PairMemoryCost
from .counters import Counter, check_counter
from .fit import Fit, ProbeGrid, fit
from .pair_fit import PairProbeGrid, fit_pairs, is_pair_length
from .probe import Restorable, Step, check_restore, check_step, measure

__all__ = ["calibrate"]


@overload
def calibrate(
    step: Step,
    *,
    max_len: int,
    max_batch_size: int | None = None,
    min_len: int | None = None,
    max_tokens: int | None = None,
    num_lengths: int | None = None,
    tolerance: float = 0.10,
    restore: Restorable | Sequence[Restorable] | None = None,
    counter: Counter | None = None,
) -> MemoryCost: ...


@overload
def calibrate(
    step: Step,
    *,
    max_len: tuple[int, int],
    max_batch_size: int | None = None,
    min_len: int | tuple[int, int] | None = None,
    max_tokens: int | None = None,
    num_lengths: int | None = None,
    tolerance: float = 0.10,
    restore: Restorable | Sequence[Restorable] | None = None,
    counter: Counter | None = None,
) -> PairMemoryCost: ...


def calibrate(
    step: Step,
    *,
    max_len: Any,
    max_batch_size: int | None = None,
    min_len: Any = None,
    max_tokens: int | None = None,
    num_lengths: int | None = None,
    tolerance: float = 0.10,
    restore: Restorable | Sequence[Restorable] | None = None,
    counter: Counter | None = None,
) -> MemoryCost | PairMemoryCost:
    """Fit a :class:`~dynbatch.MemoryCost` to your model by measuring real training steps.

    Runs a warm-up step (so the optimizer's state exists, as in training), then ``step`` on a
    small grid of shapes: lengths spread geometrically, two batch sizes at each, so that the
    coefficients are pinned apart. Around each it reads the allocator's peak, resident state
    included (what has to fit on the device; not process RSS, which never goes down); fits
    ``max(floor, c + a*n*L + b*n*L**2)`` with non-negative coefficients and checks it on
    held-out shapes. A probe that runs out of memory is recorded as not fitting and left out.

    For (source, target) pairs give ``max_len=(Ls, Lt)`` and a step of three arguments,
    ``step(n, Ls, Lt)``: it is probed on a grid of source by target lengths (every source with
    every target) and fitted to ``max(floor, c + n*(a_s*Ls + a_t*Lt + b_s*Ls**2 + b_t*Lt**2 +
    cross*Ls*Lt))``, one coefficient for each side's tokens and self-attention and one for the
    cross-attention, checked on held-out shapes as for one length: a
    :class:`~dynbatch.PairMemoryCost`, a cost of pairs for the planner. Its ``time_model`` is
    the step time of two lengths fitted on the same probes' seconds, a
    :class:`~dynbatch.plan.pair_steptime.PairStepTimeModel` of the same six terms. A step of
    the other arity is refused by name.

    Args:
        step: ``step(n, L)`` runs one full training step (forward, backward,
            optimizer update) on a random batch of ``n`` samples padded to ``L``;
            for pairs ``step(n, Ls, Lt)``, sources padded to ``Ls``, targets to ``Lt``.
        max_len: the longest padded length training will see; for pairs ``(Ls, Lt)``, the
            longest source and the longest target.
        max_batch_size: the most samples a batch will hold; probes stay within it.
        min_len: the shortest probed length (default ``max_len // 32``, at least 1); for
            pairs one int for both sides or a pair (default each side's ``// 32``).
        max_tokens: tokens (``n * L``; for pairs ``n * (Ls + Lt)``) of the largest probe;
            default 16 times the longest (``Ls + Lt`` for pairs) clamped to 4,096..32,768.
        num_lengths: how many lengths are fitted (held-out ones lie between them); default
            5, for pairs 3 a side (every source with every target: 18 fitted probes).
        tolerance: the largest relative error allowed on held-out probes whose
            peak is at least a fifth of the largest.
        restore: a model and/or optimizer whose state is put back afterwards (the probes
            train on random data); an optimizer with no state yet is refused by name, since
            the warm-up step creates state that cannot be removed again.
        counter: the allocator's counters to read (a
            :class:`~dynbatch.memory.Counter`); default: paddle's current device's.

    Returns:
        The cost, with ``report`` (every probe, the errors, device, paddle
        version) and ``time_model`` (seconds per step, fitted on the same probes); for pairs a
        :class:`~dynbatch.PairMemoryCost`, its ``time_model`` a ``PairStepTimeModel``.

    Raises:
        CalibrationError: held-out error over ``tolerance``, or too few probes to fit.

    >>> import paddle
    >>> def step(n, L):  # stands in for a training step: 512 bytes live per token
    ...     x = paddle.ones([n, L, 64])
    ...     y = x * 2
    >>> cost = calibrate(step, max_len=64, max_tokens=1024)
    >>> round(cost.a * 2**20), round(cost.b * 2**20), cost.report.held_out_error < 0.01
    (512, 0, True)
    """  # NOTE [ the probe grid ], NOTE [ what calibrate measures ], NOTE [ restoring state ]
    # NOTE [ the fit of pairs ], NOTE [ the probe grid of pairs ] in dynbatch.memory.pair_fit
    pairs = is_pair_length(max_len)
    how = "an int max_len for a step of one length" if pairs else "max_len=(Ls, Lt) for pairs"
    step = check_step(step, pairs=pairs, hint=f", max_len={max_len!r}: give {how}")
    given = {"max_len": max_len, "max_batch_size": max_batch_size, "min_len": min_len}
    grid: ProbeGrid | PairProbeGrid
    if pairs:
        grid = PairProbeGrid.of(**given, max_tokens=max_tokens, num_lengths=num_lengths)
        shapes: list[tuple[int, ...]] = [(s.n, s.source, s.target) for s in grid.shapes()]
        warmup: tuple[int, ...] = (1, *grid.min_len)
    else:
        lengths = 5 if num_lengths is None else num_lengths
        grid = ProbeGrid.of(**given, max_tokens=max_tokens, num_lengths=lengths)
        shapes, warmup = [(s.n, s.length) for s in grid.shapes()], (1, grid.min_len)
    tolerance = check_positive_number("tolerance", tolerance)
    objects = check_restore(restore)
    counter = check_counter(counter)
    start = time.perf_counter()
    runs = measure(step, shapes, counter=counter, restore=objects, warmup=warmup)
    seconds = time.perf_counter() - start
    fitted = fit_pairs(grid, runs) if isinstance(grid, PairProbeGrid) else fit(grid, runs)
    return _accepted(fitted, _report(fitted, grid, tolerance, seconds, counter.name))


def _report(
    fitted: Fit, grid: ProbeGrid | PairProbeGrid, tolerance: float, seconds: float, source: str
) -> CalibrationReport:
    device, version = _paddle_device()
    if isinstance(grid, PairProbeGrid):
        (max_len, max_target_len), (min_len, min_target_len) = grid.max_len, grid.min_len
        targets: dict[str, int | None] = {
            "max_target_len": max_target_len,
            "min_target_len": min_target_len,
        }
    else:
        max_len, min_len, targets = grid.max_len, grid.min_len, {}
    return CalibrationReport(
        probes=fitted.probes,
        fit_error=fitted.fit_error,
        held_out_error=fitted.held_out_error,
        time_held_out_error=fitted.time_held_out_error,
        tolerance=tolerance,
        seconds=seconds,
        source=source,
        device=device,
        paddle_version=version,
        max_len=max_len,
        max_batch_size=grid.max_batch_size,
        min_len=min_len,
        max_tokens=grid.max_tokens,
        **targets,
    )


def _accepted(fitted: Fit, report: CalibrationReport) -> MemoryCost | PairMemoryCost:
    """The fitted cost, or a CalibrationError saying why it cannot be trusted."""
    memory, tolerance = fitted.memory, report.tolerance
    terms = PAIR_TERMS if report.pairs else ("a", "b")
    if not any(getattr(memory, name) for name in terms):
        batch = "n pairs of sources Ls, targets Lt" if report.pairs else "n samples of length L"
        raise CalibrationError(
            f"the step's peak memory does not grow with the batch (fitted "
            f"{'=0, '.join(terms)}=0):\n{report}\nDoes {_FORM[report.pairs]} really build a "
            f"batch of {batch}?",
            report,
        )
    kind = PairMemoryCost if report.pairs else MemoryCost
    values = {name: getattr(memory, name) for name in kind.COEFFICIENTS}
    # fit's step time is of one length, fit_pairs' of pairs: each the kind's TIME_MODEL
    cost = kind(**values, report=report, time_model=fitted.time_model)  # type: ignore[arg-type]
    if max(report.fit_error, report.held_out_error) > tolerance:
        raise CalibrationError(
            f"the fitted memory model misses the probes it was fitted on by up to "
            f"{report.fit_error:.1%} and held-out shapes by up to {report.held_out_error:.1%} "
            f"(tolerance {tolerance:.0%}): this step's peak memory does not follow "
            f"{_MODEL[report.pairs]}\n{report}",
            report,
            cost,
        )
    if not fitted.held_out_checked:
        raise CalibrationError(
            "no held-out probe could be checked (out of memory, or under a fifth of the largest "
            f"peak), so the fit is unverified:\n{report}",
            report,
            cost,
        )
    return cost


#: the step and the memory model, of one length (False) and of pairs (True)
_FORM = {False: "step(n, L)", True: "step(n, Ls, Lt)"}
_MODEL = {
    False: "max(floor, c + a*n*L + b*n*L**2)",
    True: "max(floor, c + n*(a_s*Ls + a_t*Lt + b_s*Ls**2 + b_t*Lt**2 + cross*Ls*Lt))",
}


def _paddle_device() -> tuple[str, str]:
    """Paddle's current device and version, for the report; a step measured with a counter
    of its own may run without paddle."""
    paddle = sys.modules.get("paddle")
    if paddle is None:
        return "unknown", "not imported"
    return str(paddle.device.get_device()), str(paddle.__version__)
