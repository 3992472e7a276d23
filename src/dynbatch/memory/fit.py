"""Where to probe, and the fit of the memory and step-time models to measured steps; numpy only.

NOTE [ the floor ]
    The form ``c + a*n*L + b*n*L**2`` is what a transformer allocates: weights
    and optimizer state (``c``), activations per token (``a``: embeddings,
    projections, feed-forward) and per token pair (``b``: attention scores,
    softmax, dropout masks). Measured on a BERT of hidden size 128, 2 heads,
    2 layers, intermediate 512, vocabulary 21128 with AdamW (CPU allocator):
    at L=512, n=1, 2, 4, 8 give 67.6, 86.4, 124.0, 199.1 MiB, a line through
    48.8 MiB at n=0, the resident state (48.6 MiB), so there is no ``d*L**2``
    term; at L=16, n=256 and n=1024 cost 20.18 and 20.13 KiB a token, so there
    is no ``e*n`` term either. But a step of 1 sample of 32 tokens peaks at
    59.0 MiB, 10.3 MiB over the resident state, and 8 samples of 32 at 59.2:
    that is the dense gradient of the 21128 x 128 word embedding (10.3 MiB),
    allocated at the end of backward, after the activations are freed. The peak
    of a step is the larger of two phases, not their sum, so it is modelled as
    ``max(floor, ...)``. ``floor`` is measured directly, as the peak of the
    smallest probe; probes at the floor are explained by it and left out of the
    fit of ``c, a, b``, which would otherwise be pulled up by a term that does
    not grow with the batch (on a large model with a small batch the floor can
    be most of the peak). The result stays nondecreasing in ``n`` and ``L``.

NOTE [ the probe grid ]
    The fit needs ``n*L`` and ``n*L**2`` to vary independently of each other
    and of the constant: lengths are spread geometrically from ``min_len`` to
    ``max_len`` (``num_lengths`` of them), and at each length two batch sizes
    are probed, one of ``max_tokens`` tokens and one a quarter of that, so ``c``
    is pinned by the change with ``n`` at fixed ``L`` and ``b`` by the change
    with ``L`` at fixed tokens. Probes are sized in tokens because memory and
    time are roughly proportional to tokens: by default ``max_tokens`` is
    ``16 * max_len`` clamped to 4,096..32,768 (8,192 tokens, 16 samples of 512,
    for BERT at 512), large enough that activations dominate and small enough
    to take seconds, and ``max_batch_size`` caps ``n`` (planned batches never
    exceed it, so neither do the probes). Memory is linear in ``n`` at fixed
    ``L``, so batches larger than the probes are a safe extrapolation. The
    held-out probes sit at the geometric midpoints of the fitted lengths with
    half the tokens: shapes the fit did not see, inside the range it covers.
    Fitting is non-negative least squares on relative errors, so that small and
    large probes count alike; with three columns it is solved exactly by trying
    every subset of columns.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from .._checks import InputError, check_int
from ..plan.costs import PolynomialCost, fit_polynomial, nnls
from ..plan.pair_costs import PairPolynomialCost
from ..plan.pair_steptime import PairStepTimeModel
from ..plan.steptime import StepTimeModel
from .cost import CalibrationError, Probe
from .probe import Run

__all__ = [
    "CHECKED_FRACTION",
    "FLOOR_BAND",
    "Fit",
    "ProbeGrid",
    "Shape",
    "default_max_tokens",
    "fit",
    "fit_errors",
    "fit_relative",
    "fit_sizes",
    "held_out_size",
    "max_error",
    "peak_floor",
    "probe_lengths",
    "run_arrays",
    "time_error",
]

#: held-out probes under this fraction of the largest probed peak are not held to tolerance
CHECKED_FRACTION = 0.2
#: probes within this fraction of the probed range above the floor are explained by it
#: (NOTE [ the floor ])
FLOOR_BAND = 0.02


class Shape(NamedTuple):
    """One probe's batch: ``n`` samples padded to ``length``, and what it is for."""

    n: int
    length: int
    role: str


@dataclass(frozen=True)
class ProbeGrid:
    """Where :func:`~dynbatch.calibrate` probes (NOTE [ the probe grid ]).

    >>> [tuple(s) for s in ProbeGrid.of(max_len=512, min_len=16, num_lengths=3).shapes()[:4]]
    [(1, 16, 'floor'), (128, 16, 'fit'), (512, 16, 'fit'), (22, 91, 'fit')]
    """

    max_len: int
    min_len: int
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
        num_lengths: Any = 5,
    ) -> ProbeGrid:
        """The grid of calibrate's arguments, checked, with their defaults filled in."""
        max_len = check_int("max_len", max_len, minimum=1)
        max_batch_size = check_int("max_batch_size", max_batch_size, minimum=1, allow_none=True)
        min_len = check_int("min_len", min_len, minimum=1, allow_none=True)
        if min_len is None:
            min_len = max(1, max_len // 32)
        elif min_len > max_len:
            raise InputError(f"min_len must be at most max_len={max_len}, got min_len={min_len}")
        max_tokens = check_int("max_tokens", max_tokens, minimum=1, allow_none=True)
        if max_tokens is None:
            max_tokens = default_max_tokens(max_len)
        num_lengths = check_int("num_lengths", num_lengths, minimum=2)
        return cls(max_len, min_len, max_batch_size, max_tokens, num_lengths)

    def shapes(self) -> list[Shape]:
        """The floor probe, two fitted batches per length, then the held-out ones."""
        fit_lengths, middles = probe_lengths(self.min_len, self.max_len, self.num_lengths)
        grid = [Shape(1, self.min_len, "floor")]
        for length in fit_lengths:
            sizes = fit_sizes(length, self.max_tokens, self.max_batch_size)
            grid += [Shape(n, length, "fit") for n in sizes]
        for length in middles:
            n = held_out_size(length, self.max_tokens, self.max_batch_size)
            grid.append(Shape(n, length, "held-out"))
        return grid


# The grid's arithmetic, one copy for one length and for pairs (memory/pair_fit.py), whose
# sample's tokens are a pair's source plus target (NOTE [ the probe grid ]).


def default_max_tokens(tokens: int) -> int:
    """calibrate's ``max_tokens`` when none is given: 16 of the longest sample's ``tokens``,
    within 4,096..32,768.

    >>> default_max_tokens(512), default_max_tokens(16), default_max_tokens(8192)
    (8192, 4096, 32768)
    """
    return min(max(16 * tokens, 4096), 32768)


def probe_lengths(shortest: int, longest: int, num_lengths: int) -> tuple[list[int], list[int]]:
    """The fitted lengths, ``num_lengths`` spread geometrically over ``shortest..longest``
    (rounded, each once), and the held-out ones, their geometric midpoints not among them.

    >>> probe_lengths(16, 512, 3)
    ([16, 91, 512], [38, 216])
    """
    points = np.geomspace(shortest, longest, num_lengths)
    fitted = sorted(set(points.round().astype(np.int64).tolist()))
    middles = {round(math.sqrt(lo * hi)) for lo, hi in itertools.pairwise(fitted)}
    return fitted, sorted(middles - set(fitted))


def fit_sizes(tokens: int, max_tokens: int, max_batch_size: int | None) -> list[int]:
    """The two fitted batch sizes of samples of ``tokens`` each: as many as ``max_tokens``
    holds and a quarter of that, within ``max_batch_size``, at least 1 (one if they meet).

    >>> fit_sizes(16, 8192, None), fit_sizes(16, 8192, 100), fit_sizes(512, 512, None)
    ([128, 512], [25, 100], [1])
    """
    cap = max_batch_size if max_batch_size is not None else max_tokens
    big = max(1, min(cap, max_tokens // tokens))
    return sorted({max(1, big // 4), big})


def held_out_size(tokens: int, max_tokens: int, max_batch_size: int | None) -> int:
    """The held-out batch size of samples of ``tokens`` each: half the tokens of the fitted
    one, within ``max_batch_size``, at least 1.

    >>> held_out_size(38, 8192, None), held_out_size(38, 8192, 50)
    (107, 50)
    """
    cap = max_batch_size if max_batch_size is not None else max_tokens
    return max(1, min(cap, max_tokens // (2 * tokens)))


@dataclass(frozen=True)
class _Peak(PolynomialCost):
    """The fitted peak before it is checked: a MemoryCost that may not grow yet."""

    c: float
    a: float
    b: float
    floor: float
    grows = False


@dataclass(frozen=True)
class Fit:
    """The models :func:`fit` found and how well they predict the probes.

    ``memory`` holds ``c, a, b, floor`` of the peak in MiB; ``fit_error`` and
    ``held_out_error`` are the largest relative errors on fitted and held-out
    probes whose peak is at least a fifth of the largest (``held_out_checked``:
    there was one); ``time_held_out_error`` is the same for ``time_model`` (for pairs a
    :class:`~dynbatch.plan.pair_steptime.PairStepTimeModel`; None: none was fitted).
    """

    memory: PolynomialCost | PairPolynomialCost
    time_model: StepTimeModel | PairStepTimeModel | None
    probes: tuple[Probe, ...]
    fit_error: float
    held_out_error: float
    held_out_checked: bool
    time_held_out_error: float


def fit(grid: ProbeGrid, runs: Sequence[Run]) -> Fit:
    """Fit ``max(floor, c + a*n*L + b*n*L**2)`` (MiB) and the step time to the runs of
    ``grid.shapes()``, one run per shape (NOTE [ the floor ], NOTE [ the probe grid ]).

    Raises:
        CalibrationError: the floor probe ran out of memory, or too few probes
            peaked above the floor, at too few lengths, to pin ``c, a, b`` down.
    """
    shapes = grid.shapes()
    if len(runs) != len(shapes):
        raise InputError(f"runs must hold one run per shape ({len(shapes)}), got {len(runs)}")
    n = np.array([s.n for s in shapes], dtype=np.float64)
    length = np.array([s.length for s in shapes], dtype=np.float64)
    role = np.array([s.role for s in shapes])
    ok, peak, secs = run_arrays(runs)
    floor, above = peak_floor(role, ok, peak, f"1 sample of {grid.min_len}")
    if np.unique(length[role == "fit"]).size < 2:
        raise CalibrationError(
            f"the probes cover one length only (min_len={grid.min_len}, max_len={grid.max_len}): "
            "the fit needs two; lower min_len"
        )
    if above.sum() < 3 or np.unique(length[above]).size < 2:
        raise CalibrationError(
            f"only {int(above.sum())} probe(s) peaked above the step's fixed peak of "
            f"{floor:.1f} MiB, at {np.unique(length[above]).size} length(s); the fit needs 3 at 2 "
            f"lengths. {_RAISE.format(grid=grid)}"
        )
    memory = _Peak(*fit_polynomial(n[above], length[above], peak[above]), floor=floor)
    timed = ok & (role == "fit")
    coefficients = fit_polynomial(n[timed], length[timed], secs[timed])
    exact = StepTimeModel(*coefficients)(n[timed], length[timed])
    time_model = StepTimeModel(*coefficients, error=time_error(exact, secs[timed]))
    pred = np.asarray(memory(n, length), dtype=np.float64)
    probes = tuple(
        Probe(s.n, s.length, s.role, r.peak_mib, r.resident_mib, r.seconds, float(p))
        for s, r, p in zip(shapes, runs, pred, strict=True)
    )
    return Fit(
        memory,
        time_model,
        probes,
        *fit_errors(pred, peak, ok, role),
        time_held_out_error=max_error(
            np.asarray(time_model(n, length)), secs, ok & (role == "held-out")
        ),
    )


#: what to do when too few probes peak above the floor (``grid``: the probe grid)
_RAISE = (
    "Raise max_tokens (now {grid.max_tokens}) or max_batch_size (now {grid.max_batch_size}) so "
    "the batch's memory shows above it"
)


def run_arrays(
    runs: Sequence[Run],
) -> tuple[NDArray[np.bool_], NDArray[np.float64], NDArray[np.float64]]:
    """Which runs fitted in memory, their peaks (NaN: out of memory) and their seconds."""
    ok = np.array([r.peak_mib is not None for r in runs])
    peak = np.array([np.nan if r.peak_mib is None else r.peak_mib for r in runs])
    return ok, peak, np.array([r.seconds for r in runs], dtype=np.float64)


def peak_floor(
    role: NDArray[Any], ok: NDArray[np.bool_], peak: NDArray[np.float64], smallest: str
) -> tuple[float, NDArray[np.bool_]]:
    """The floor (the peak of the ``"floor"`` probe, ``smallest`` its batch in words) and the
    fitted probes that peaked above it (NOTE [ the floor ])."""
    if not ok[role == "floor"].all():
        raise CalibrationError(f"even the smallest probe ({smallest}) ran out of memory")
    floor = float(peak[role == "floor"][0])
    above = ok & (role == "fit") & (peak > floor + FLOOR_BAND * (np.nanmax(peak) - floor))
    return floor, above


def fit_relative(columns: NDArray[np.float64], y: NDArray[np.float64]) -> NDArray[np.float64]:
    """Non-negative weights of ``columns`` (one per column) minimising the relative squared
    error to ``y``, as :func:`~dynbatch.plan.costs.fit_polynomial` does for its three.

    >>> x = np.array([[1.0, 2.0], [1.0, 4.0], [1.0, 8.0]])
    >>> [round(float(v), 9) for v in fit_relative(x, 3.0 + 0.5 * x[:, 1])]
    [3.0, 0.5]
    """
    weight = 1.0 / np.maximum(y, 1e-12)
    x = columns * weight[:, None]
    scale = np.abs(x).max(axis=0)
    scale[scale == 0] = 1.0
    return np.asarray(nnls(x / scale, y * weight) / scale, dtype=np.float64)


def fit_errors(
    pred: NDArray[np.float64], peak: NDArray[np.float64], ok: NDArray[np.bool_], role: NDArray[Any]
) -> tuple[float, float, bool]:
    """``fit_error``, ``held_out_error`` and ``held_out_checked`` of :class:`Fit`: the largest
    relative errors on the probes that peaked at least :data:`CHECKED_FRACTION` of the largest."""
    checked = ok & (peak >= CHECKED_FRACTION * np.nanmax(peak))
    held = checked & (role == "held-out")
    return (
        max_error(pred, peak, checked & (role == "fit")),
        max_error(pred, peak, held),
        bool(held.any()),
    )


def time_error(predicted: Any, seconds: NDArray[np.float64]) -> float:
    """A fitted step time's ``error``: its mean relative error on the steps it was fitted on
    (a step predicted at 0 s and timed at 0 s is exact), at most 0.99 (an ``error`` is < 1).

    >>> round(time_error(np.array([1.1, 0.9, 0.0]), np.array([1.0, 1.0, 0.0])), 6)
    0.066667
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        miss = np.abs(np.asarray(predicted, dtype=np.float64) / seconds - 1)
    return min(float(np.mean(np.nan_to_num(miss, nan=0.0))), 0.99)


def max_error(pred: NDArray[Any], measured: NDArray[Any], checked: NDArray[Any]) -> float:
    """The largest ``|pred - measured| / measured`` where ``checked``; a measured 0 is off by
    0 if predicted so, else infinitely (a step timed at 0 s)."""
    if not checked.any():
        return 0.0
    miss, base = np.abs(pred[checked] - measured[checked]), measured[checked]
    return float(
        np.max(np.divide(miss, base, out=np.where(miss == 0, 0.0, np.inf), where=base > 0))
    )
