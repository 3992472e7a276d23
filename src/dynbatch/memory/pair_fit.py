"""Where to probe a step of (source, target) pairs, and the fit of its memory; numpy only.

The one-length fit (:mod:`.fit`) in two lengths: the same floor, the same relative
non-negative least squares, the same held-out check, on a grid of source by target lengths.

NOTE [ the fit of pairs ]
    An encoder–decoder's step holds, per pair, activations that grow with
    the source (embeddings, the encoder's projections and feed-forward:
    ``n·Ls``), with the target (the decoder's, and its output layer, whose
    logits are ``n·Lt·vocabulary``: ``n·Lt``), and scores that grow with
    pairs of tokens: the encoder's self-attention ``n·Ls²``, the decoder's
    ``n·Lt²`` and its cross-attention ``n·Ls·Lt``. So the peak is fitted as
    ``max(floor, c + n·(a_s·Ls + a_t·Lt + b_s·Ls² + b_t·Lt² + cross·Ls·Lt))``,
    a coefficient for each, all >= 0 (so the cost never decreases in ``n``,
    ``Ls`` or ``Lt``, which the planner's bisection needs), with the floor
    and ``c`` of the one-length fit (NOTE [ the floor ] in :mod:`.fit`).
    The sides get their own coefficients because they differ: on a tiny
    paddlenlp BART (d_model 32, one layer each side, vocabulary 100, AdamW,
    CPU allocator) 32 pairs of (64, 8) peak at 8.4 MiB and 32 of (8, 64) at
    10.2 MiB. Fitted on the same 18 probes (``max_len=(96, 64)``,
    ``max_tokens=2048``) and checked on the 4 held-out ones and 6 shapes
    beyond them (up to (120, 120) and 100 pairs), the five terms miss by at
    most 0.6 %, 0.3 % and 1.1 %; the form of
    :class:`~dynbatch.plan.costs.PairCost` (``a`` and ``b`` shared by both
    sides, and the cross term) by 12 %, 9 % and 10 %; one length,
    ``L = Ls + Lt``, by 14 %, 9 % and 11 %; the five without the cross term
    by 7 %, 3 % and 9 %. Each term is what the architecture allocates, and
    none can stand in for another.

NOTE [ the probe grid of pairs ]
    The one-length grid (NOTE [ the probe grid ] in :mod:`.fit`) on each
    side: ``num_lengths`` source lengths and as many target lengths, spread
    geometrically, every source with every target (a product grid, so
    ``Ls²``, ``Lt²`` and ``Ls·Lt`` vary independently), two batch sizes at
    each cell, one of ``max_tokens`` tokens of both sides (``n·(Ls + Lt)``)
    and one a quarter of that. The held-out probes sit at the geometric
    midpoints of both sides with half the tokens. The default is 3 lengths a
    side: 18 fitted probes for 6 coefficients, 4 held out, 23 steps in all
    with the floor (5 a side would be 67). The same probes' seconds fit the
    step time of two lengths, the planner's
    :class:`~dynbatch.plan.pair_steptime.PairStepTimeModel`, whose terms are
    the memory's (NOTE [ a step time of two lengths ]): so the grid that pins
    the six memory coefficients apart pins the six of time apart too, as the
    one-length grid does for ``c + a·n·L + b·n·L²``. It is fitted as the
    one-length step time is (:func:`~.fit.fit`): relative non-negative least
    squares on the fitted probes (no floor: a step's time has none), its
    ``error`` the mean miss on them, checked on the held-out ones.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from .._checks import InputError, InputTypeError, check_int
from ..plan.pair_costs import PAIR_TERMS, PairPolynomialCost
from ..plan.pair_steptime import COEFFICIENTS, PairStepTimeModel
from .cost import CalibrationError, Probe
from .fit import (
    Fit,
    default_max_tokens,
    fit_errors,
    fit_relative,
    fit_sizes,
    held_out_size,
    max_error,
    peak_floor,
    probe_lengths,
    run_arrays,
    time_error,
)
from .probe import Run

__all__ = [
    "PairProbeGrid",
    "PairShape",
    "TimeFit",
    "fit_pairs",
    "fit_step_time_of_pairs",
    "is_pair_length",
]

#: lengths per side a calibration of pairs probes by default (NOTE [ the probe grid of pairs ])
NUM_LENGTHS = 3

#: ``time_fit(n, Ls, Lt, seconds)``: a step-time model fitted on the probes, or None
TimeFit = Callable[[Any, Any, Any, Any], Any]


def fit_step_time_of_pairs(n: Any, source: Any, target: Any, seconds: Any) -> PairStepTimeModel:
    """The :class:`~dynbatch.plan.pair_steptime.PairStepTimeModel` nearest measured steps in
    relative error, ``error`` its mean relative error on them (NOTE [ the probe grid of pairs ]).

    >>> n, s = np.array([1, 8, 2, 8, 4, 1, 3]), np.array([4, 4, 32, 32, 8, 64, 16])
    >>> t = np.array([8, 2, 8, 32, 16, 4, 64])
    >>> true = PairStepTimeModel(c=0.01, a_s=1e-4, a_t=3e-4, cross=1e-6)
    >>> model = fit_step_time_of_pairs(n, s, t, true(n, s, t))
    >>> [round(getattr(model, k), 9) for k in ("c", "a_s", "a_t", "b_s", "b_t", "cross")]
    [0.01, 0.0001, 0.0003, 0.0, 0.0, 1e-06]

    Args:
        n: each step's pairs.
        source: each step's padded source length.
        target: each step's padded target length.
        seconds: each step's measured seconds.
    """
    n, source, target, seconds = (
        np.asarray(v, dtype=np.float64) for v in (n, source, target, seconds)
    )
    coefficients = dict(
        zip(COEFFICIENTS, fit_relative(_columns(n, source, target), seconds), strict=True)
    )
    exact = PairStepTimeModel(**coefficients)
    return PairStepTimeModel(**coefficients, error=time_error(exact(n, source, target), seconds))


class PairShape(NamedTuple):
    """One probe's batch: ``n`` pairs, sources padded to ``source``, targets to ``target``."""

    n: int
    source: int
    target: int
    role: str


def is_pair_length(value: Any) -> bool:
    """Whether ``max_len`` (or ``min_len``) is given as a (source, target) pair.

    >>> is_pair_length((64, 32)), is_pair_length(64), is_pair_length("ab")
    (True, False, False)
    """
    return not isinstance(value, (str, bytes)) and np.ndim(value) == 1


def _pair(name: str, value: Any) -> tuple[int, int]:
    """``value`` as (source, target), two positive ints; anything else refused by name."""
    if not is_pair_length(value) or len(value) != 2:
        raise InputTypeError(
            f"{name} must be a (source, target) pair of positive ints for a step of pairs, "
            f"step(n, Ls, Lt), got {name}={value!r}"
        )
    source, target = (check_int(f"{name}[{i}]", v, minimum=1) for i, v in enumerate(value))
    return source, target


@dataclass(frozen=True)
class PairProbeGrid:
    """Where :func:`~dynbatch.calibrate` probes a step of pairs (NOTE [ the probe grid of pairs ]).

    >>> grid = PairProbeGrid.of(max_len=(64, 32), min_len=(4, 2), max_tokens=1024)
    >>> [tuple(s) for s in grid.shapes()[:3]], len(grid.shapes())
    ([(1, 4, 2, 'floor'), (42, 4, 2, 'fit'), (170, 4, 2, 'fit')], 23)
    """

    max_len: tuple[int, int]
    min_len: tuple[int, int]
    max_batch_size: int | None
    max_tokens: int
    num_lengths: int

    @classmethod
    def of(
        cls,
        *,
        max_len: Any,
        max_batch_size: Any = None,
        min_len: Any = None,
        max_tokens: Any = None,
        num_lengths: Any = None,
    ) -> PairProbeGrid:
        """The grid of calibrate's arguments, checked, with their defaults filled in.

        ``max_len`` is ``(Ls, Lt)``; ``min_len`` a pair, one int for both sides, or None
        (each side's ``max // 32``, at least 1).
        """
        longest = _pair("max_len", max_len)
        if min_len is None:
            shortest = (max(1, longest[0] // 32), max(1, longest[1] // 32))
        elif is_pair_length(min_len):
            shortest = _pair("min_len", min_len)
        else:
            side = check_int("min_len", min_len, minimum=1)
            shortest = (side, side)
        if shortest[0] > longest[0] or shortest[1] > longest[1]:
            raise InputError(
                f"min_len must be at most max_len={longest} on each side, got min_len={min_len!r}"
            )
        max_batch_size = check_int("max_batch_size", max_batch_size, minimum=1, allow_none=True)
        max_tokens = check_int("max_tokens", max_tokens, minimum=1, allow_none=True)
        if max_tokens is None:
            max_tokens = default_max_tokens(sum(longest))
        k = check_int("num_lengths", NUM_LENGTHS if num_lengths is None else num_lengths, minimum=2)
        return cls(longest, shortest, max_batch_size, max_tokens, k)

    def lengths(self, side: int) -> tuple[list[int], list[int]]:
        """The fitted lengths of one side (0: source, 1: target) and the held-out ones."""
        return probe_lengths(self.min_len[side], self.max_len[side], self.num_lengths)

    def shapes(self) -> list[PairShape]:
        """The floor probe, two fitted batches per (source, target) cell, then the held-out."""
        (fit_s, mid_s), (fit_t, mid_t) = self.lengths(0), self.lengths(1)
        grid = [PairShape(1, *self.min_len, "floor")]
        for source, target in itertools.product(fit_s, fit_t):
            sizes = fit_sizes(source + target, self.max_tokens, self.max_batch_size)
            grid += [PairShape(n, source, target, "fit") for n in sizes]
        for source, target in itertools.product(mid_s, mid_t):
            n = held_out_size(source + target, self.max_tokens, self.max_batch_size)
            grid.append(PairShape(n, source, target, "held-out"))
        return grid


@dataclass(frozen=True)
class _PairPeak(PairPolynomialCost):
    """The fitted peak of pairs before it is checked: a PairMemoryCost that may not grow yet."""

    grows = False


def fit_pairs(
    grid: PairProbeGrid, runs: Sequence[Run], time_fit: TimeFit | None = fit_step_time_of_pairs
) -> Fit:
    """Fit ``max(floor, c + n*(a_s*Ls + a_t*Lt + b_s*Ls**2 + b_t*Lt**2 + cross*Ls*Lt))`` (MiB)
    to the runs of ``grid.shapes()``, one run per shape (NOTE [ the fit of pairs ]), and the
    step time of pairs to their seconds (NOTE [ the probe grid of pairs ]).

    Args:
        grid: where the runs were probed.
        runs: one run per shape of ``grid.shapes()``.
        time_fit: fits the step time on the fitted probes, ``time_fit(n, Ls, Lt, seconds)``
            (arrays); default :func:`fit_step_time_of_pairs`; None: no ``time_model``.

    Raises:
        CalibrationError: the floor probe ran out of memory, or too few probes peaked above
            the floor, at too few lengths of a side, to pin the coefficients down.
    """
    shapes = grid.shapes()
    if len(runs) != len(shapes):
        raise InputError(f"runs must hold one run per shape ({len(shapes)}), got {len(runs)}")
    n, source, target = (np.array([s[i] for s in shapes], dtype=np.float64) for i in range(3))
    role = np.array([s.role for s in shapes])
    ok, peak, secs = run_arrays(runs)
    floor, above = peak_floor(role, ok, peak, f"1 pair of {grid.min_len}")
    for side, lengths in (("source", source), ("target", target)):
        if np.unique(lengths[role == "fit"]).size < 2:
            raise CalibrationError(
                f"the probes cover one {side} length only (min_len={grid.min_len}, "
                f"max_len={grid.max_len}): the fit needs two a side; lower min_len"
            )
    sides = min(np.unique(source[above]).size, np.unique(target[above]).size)
    if above.sum() < len(PAIR_TERMS) + 1 or sides < 2:
        raise CalibrationError(
            f"only {int(above.sum())} probe(s) peaked above the step's fixed peak of "
            f"{floor:.1f} MiB, at {sides} length(s) of a side; the fit needs "
            f"{len(PAIR_TERMS) + 1} at 2 lengths a side. Raise max_tokens (now "
            f"{grid.max_tokens}) or max_batch_size (now {grid.max_batch_size}) so the batch's "
            "memory shows above it"
        )
    c, a_s, a_t, b_s, b_t, cross = fit_relative(_columns(n, source, target)[above], peak[above])
    memory = _PairPeak(c, a_s, a_t, b_s, b_t, cross, floor)
    timed = ok & (role == "fit")
    time_model: Any = None  # a step time of pairs: whatever time_fit makes of the seconds
    if time_fit is not None:
        time_model = time_fit(n[timed], source[timed], target[timed], secs[timed])
    pred = np.asarray(memory(n, source, target), dtype=np.float64)
    probes = tuple(
        Probe(s.n, s.source, s.role, r.peak_mib, r.resident_mib, r.seconds, float(p), s.target)
        for s, r, p in zip(shapes, runs, pred, strict=True)
    )
    held_time = 0.0
    if time_model is not None:
        predicted = np.asarray(time_model(n, source, target), dtype=np.float64)
        held_time = max_error(predicted, secs, ok & (role == "held-out"))
    return Fit(memory, time_model, probes, *fit_errors(pred, peak, ok, role), held_time)


def _columns(
    n: NDArray[np.float64], source: NDArray[np.float64], target: NDArray[np.float64]
) -> NDArray[np.float64]:
    """The terms of the model, in the order ``c`` then :data:`PAIR_TERMS`."""
    return np.stack(
        [
            np.ones_like(n),
            n * source,
            n * target,
            n * source**2,
            n * target**2,
            n * source * target,
        ],
        axis=1,
    )
