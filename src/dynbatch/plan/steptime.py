"""A device's step time: a cost of the device, beside the other costs; numpy only.

A step costs about ``c + n·L·(a + b·L)`` seconds (:class:`StepTimeModel`: a
fixed part ``c``, kernel launches and the optimizer, and a part that grows with
the padded tokens). :func:`check_time_model` takes any object with finite
coefficients ``c``, ``a``, ``b`` >= 0 (``MemoryCost.time_model``, a fit of a
:class:`StepTimeTable`, a ``"c,a,b"`` string). The options check a time model
with it, the time split (:mod:`dynbatch.plan.splits`) cuts updates at it, and
the memory package's fit (:mod:`dynbatch.memory.fit`) measures one: so it sits
below all three (NOTE [ the layers ] in ``tests/test_layers.py``).

NOTE [ a step is priced at its quickest padding ]
    A step of ``n`` samples of ``L`` tokens can always run padded to a
    larger shape ``(n', L')``, ``n' >= n`` and ``L' >= L``: rows of
    padding, tokens of padding. A measured table is not monotone (on
    the H100's, ``t(2, 513) > t(3, 513)`` and ``t(1, 32) > t(1, 512)``:
    noise, kernels switching with the shape), and priced as measured a
    planner's smaller step (a rank's 2 rows of a whole update dealt
    round-robin) would cost more than the fixed batch's larger one (its
    3 a rank): a plan priced above the fixed batch it contains. So each
    measured time is taken as the least of any measured shape at least
    as large in both ``n`` and ``L`` (a cumulative minimum from the top),
    the curves are interpolated through those, and a shape between
    measured lengths is priced no higher than at any measured length beyond.
    Then the price is nondecreasing in ``n`` and across the measured
    lengths, the same for the fixed batch's step as for the plan's: no
    plan holding the fixed batch's steps is priced slower than it.
    (Between two measured lengths the price follows the interpolation
    at equal tokens, nondecreasing wherever the longer length costs no
    less at equal tokens.) :meth:`StepTimeTable.fit` fits the measurements as they
    are: its ``error`` is the model's error on what was measured.

NOTE [ a fit's error ]
    ``error`` decides which cuts are trusted (a cut must be predicted
    to save more than it). Three coefficients fit three shapes or fewer
    exactly, whatever the device does between them: such a fit would
    claim error 0, a certainty it does not have, and every cut it
    predicts would be taken. So a fit needs a fourth distinct shape,
    the least that leaves a residual to measure; fewer is an
    :class:`~dynbatch.InputError` (give the model's own coefficients,
    with an ``error``, to use so few measurements).
"""

from __future__ import annotations

import json
import math
import numbers
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._checks import InputError, InputTypeError
from .costs import PolynomialCost, absent_coefficient, fit_polynomial

__all__ = [
    "FLAT_STEP",
    "StepTimeModel",
    "StepTimeTable",
    "check_model_error",
    "check_time_model",
]


def _as_float(v: Any) -> float:
    """``float(v)``, or inf for an int beyond any float (``float(10**400)`` raises)."""
    try:
        return float(v)
    except OverflowError:
        return math.inf


def check_model_error(owner: str, error: Any) -> float:
    """A step-time model's ``error`` as a float in [0, 1), refused as ``owner``'s: the one check
    of :class:`StepTimeModel`, :func:`check_time_model` and the step time of pairs.

    >>> check_model_error("StepTimeModel", 0.25), check_model_error("StepTimeModel", np.int64(0))
    (0.25, 0.0)
    """
    number = isinstance(error, numbers.Real) and not isinstance(error, (bool, np.bool_))
    if not number or not 0 <= _as_float(error) < 1:
        raise (InputError if number else InputTypeError)(
            f"{owner} error must be a number in [0, 1) (the model's typical relative error), got "
            f"error={error!r}"
        )
    return float(error)


@dataclass(frozen=True)
class StepTimeModel(PolynomialCost):
    """Seconds of one training step: ``c + a*n*L + b*n*L**2``.

    >>> float(StepTimeModel(c=0.01, a=1e-4, b=0.0)(10, 100))
    0.11

    Args:
        c: seconds of a step whatever its size (kernel launches, the optimizer).
        a: seconds per padded token.
        b: seconds per padded token per token of its length (attention).
        error: the model's typical relative error on measured steps (0: taken as exact): the
            planner does not trust a cut of an update predicted to save less than that.
    """

    c: float
    a: float
    b: float
    error: float = 0.0
    floor: float = absent_coefficient()
    grows = False  # a step too quick to time grows by nothing measurable

    def __post_init__(self) -> None:
        super().__post_init__()
        # the split and the epoch's seconds use it
        object.__setattr__(self, "error", check_model_error("StepTimeModel", self.error))

    @classmethod
    def parse(cls, text: str, name: str = "time_model") -> StepTimeModel:
        """A step time from a command line's ``"c,a,b"`` (seconds = c + n*L*(a + b*L)).

        >>> StepTimeModel.parse("0.04,1e-6,0")
        StepTimeModel(c=0.04, a=1e-06, b=0.0, error=0.0)

        Args:
            text: three numbers, ``c,a,b``.
            name: the argument's name, for the error (a flag such as ``"--time-model"``).
        """
        if not isinstance(text, str):
            raise InputTypeError(f"{name} must be text 'c,a,b', got {name}={text!r}")
        model = check_time_model(text, name)
        assert model is not None  # text is never None
        return model


#: A step that costs the same at any size: each update runs whole (a GPU below its knee).
FLAT_STEP = StepTimeModel(c=1.0, a=0.0, b=0.0)


def check_time_model(value: Any, name: str = "time_model") -> StepTimeModel | None:
    """``value`` as a :class:`StepTimeModel`: an object with ``c``, ``a``, ``b``, or ``"c,a,b"``.

    >>> check_time_model("0.04,1e-6,0")
    StepTimeModel(c=0.04, a=1e-06, b=0.0, error=0.0)
    >>> check_time_model(None) is None
    True
    """
    if value is None:
        return None
    if isinstance(value, str):
        parts = value.split(",")
        try:
            numbers = [float(p) for p in parts]
        except ValueError:
            numbers = []
        if len(numbers) != 3:
            raise InputError(
                f"{name} as text must be three numbers 'c,a,b' (seconds = c + n*L*(a + b*L)), "
                f"got {name}={value!r}"
            )
        value = dict(zip("cab", numbers, strict=True))
    coefficients = {}
    for key in "cab":
        v = value.get(key) if isinstance(value, dict) else getattr(value, key, None)
        if isinstance(v, bool) or not isinstance(v, (int, float, np.number)):
            raise InputTypeError(
                f"{name} must have number coefficients c, a, b (seconds = c + n*L*(a + b*L)), "
                f"e.g. MemoryCost.time_model or StepTimeTable.fit(); got {key}={v!r} on {value!r}"
            )
        if not (math.isfinite(_as_float(v)) and float(v) >= 0):
            raise InputError(
                f"{name} coefficient {key} must be a finite number >= 0, got {key}={v!r}"
            )
        coefficients[key] = float(v)
    error = value.get("error", 0.0) if isinstance(value, dict) else getattr(value, "error", 0.0)
    return StepTimeModel(**coefficients, error=check_model_error(name, error))


@dataclass(frozen=True)
class StepTimeTable:
    """Measured seconds of a training step by batch shape, ``n`` samples of ``L`` tokens.

    ``table(n, L)`` interpolates: at each measured ``L`` the time is piecewise
    linear in the tokens ``n·L`` (flat below the fewest measured, extended
    along the last segment above the most, or flat where that segment falls:
    more tokens never take less time), and between two measured lengths
    it is interpolated in ``log L`` at equal tokens. It prices a shape at
    the least time of any shape at least as large (a step can always run padded to a larger
    one, and measured times are noisy: so no plan holding the fixed batch's steps is priced
    slower than them). :meth:`fit` is the :class:`StepTimeModel` a plan is split with.

    >>> t = StepTimeTable.from_rows([(1, 8, 1.0), (4, 8, 1.0), (8, 8, 2.0)])
    >>> [float(t(n, 8)) for n in (1, 6, 16)]
    [1.0, 1.5, 4.0]

    Args:
        n: each measured step's samples.
        lengths: each measured step's length ``L`` (tokens, padded).
        seconds: each measured step's seconds.
    """  # NOTE [ a step is priced at its quickest padding ]

    n: NDArray[np.float64]
    lengths: NDArray[np.float64]
    seconds: NDArray[np.float64]
    #: ``seconds``, each the least of any measured shape at least as large
    #: (NOTE [ a step is priced at its quickest padding ])
    envelope: NDArray[np.float64] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        n, lengths = np.asarray(self.n), np.asarray(self.lengths)
        larger = (n[None, :] >= n[:, None]) & (lengths[None, :] >= lengths[:, None])
        seconds = np.asarray(self.seconds, dtype=np.float64)
        least = np.where(larger, seconds[None, :], np.inf).min(axis=1)
        object.__setattr__(self, "envelope", least)

    @classmethod
    def from_rows(cls, rows: Sequence[Sequence[float]]) -> StepTimeTable:
        """From measured rows.

        Args:
            rows: ``(n, L, seconds)`` of each measured step.
        """
        try:
            data = np.asarray(rows, dtype=np.float64)
        except (TypeError, ValueError):  # a cell that is not a number: name its row
            data = np.full((len(rows), 3), np.nan)
            for k, row in enumerate(rows):
                try:
                    values = np.asarray(row, dtype=np.float64)
                except (TypeError, ValueError):
                    break
                if values.shape != (3,):
                    break
                data[k] = values
        if data.ndim != 2 or data.shape[1] != 3 or data.shape[0] == 0:
            raise InputError(
                f"a step-time table needs rows of (n, L, seconds), got shape {data.shape}"
            )
        good = np.isfinite(data).all(axis=1) & (data[:, :2] >= 1).all(axis=1) & (data[:, 2] > 0)
        if not good.all():
            k = int(np.flatnonzero(~good)[0])
            raise InputError(
                "a step-time table needs rows of three numbers (n, L, seconds) with n >= 1, "
                f"L >= 1 and seconds > 0; row {k} is {rows[k]!r}"
            )
        return cls(data[:, 0], data[:, 1], data[:, 2])

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> StepTimeTable:
        """From JSON: ``{"columns": [..., "n", "L", "step_s", ...], "rows": [[...], ...]}``.

        Args:
            path: the JSON file (``benchmarks/device_time.py`` writes one).
        """
        if not isinstance(path, (str, os.PathLike)):  # an int would open a file descriptor
            raise InputTypeError(
                f"path must be a file path (str or os.PathLike), got path={path!r}"
            )
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            columns = list(data["columns"])
            pick = [columns.index(c) for c in ("n", "L", "step_s")]
            rows = [[row[i] for i in pick] for row in data["rows"]]
        except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
            raise InputError(
                f"{os.fspath(path)!r} is not a step-time table (JSON with 'columns' naming n, L "
                f"and step_s, and 'rows'): {exc}"
            ) from None
        return cls.from_rows(rows)

    def fit(self) -> StepTimeModel:
        """The :class:`StepTimeModel` nearest the table in relative error, with its mean error.

        It needs 4 distinct shapes or more: three coefficients fit three shapes exactly, and
        would claim an error of 0 that the measurements cannot show.
        """  # NOTE [ a fit's error ]
        shapes = np.unique(np.stack([self.n, self.lengths]), axis=1).shape[1]
        if shapes <= 3:  # NOTE [ a fit's error ]
            raise InputError(
                "a step-time table needs at least 4 distinct shapes (n, L) to fit c, a, b and "
                f"measure the fit's error; got {shapes} in {self.n.size} row(s)"
            )
        c, a, b = fit_polynomial(self.n, self.lengths, self.seconds)
        model = StepTimeModel(c=c, a=a, b=b)
        error = np.abs(np.asarray(model(self.n, self.lengths)) / self.seconds - 1.0).mean()
        return StepTimeModel(c=c, a=a, b=b, error=min(float(error), 0.99))

    def _curve(self, length: float, tokens: NDArray[np.float64]) -> NDArray[np.float64]:
        at = self.lengths == length
        order = np.argsort(self.n[at] * length)
        x, y = (self.n[at] * length)[order], self.envelope[at][order]
        out = np.interp(tokens, x, y)
        if x.size > 1 and x[-1] > x[-2]:  # beyond the most tokens: the last segment, extended
            slope = max((y[-1] - y[-2]) / (x[-1] - x[-2]), 0.0)  # never downwards: noise
            out = np.where(tokens > x[-1], y[-1] + slope * (tokens - x[-1]), out)
        return np.asarray(out, dtype=np.float64)

    def __call__(self, n: Any, length: Any) -> NDArray[np.float64]:
        n_, l_ = np.broadcast_arrays(np.asarray(n, np.float64), np.asarray(length, np.float64))
        out = self._interpolated(n_, l_)
        for longer in np.unique(self.lengths).tolist():  # padded to a measured length beyond
            beyond = l_ < longer
            if beyond.any():
                padded = self._interpolated(n_[beyond], np.full(int(beyond.sum()), longer))
                out[beyond] = np.minimum(out[beyond], padded)
        return out

    def _interpolated(
        self, n_: NDArray[np.float64], l_: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        """The curves through the envelope, interpolated at ``(n_, l_)`` (the class's text)."""
        tokens = n_ * l_
        measured = np.unique(self.lengths)
        where = np.clip(np.searchsorted(measured, l_), 1, max(measured.size - 1, 1))
        out = np.zeros(tokens.shape, dtype=np.float64)
        for k in np.unique(where).tolist():
            sel = where == k
            lo, hi = measured[k - 1], measured[min(k, measured.size - 1)]
            y_lo, y_hi = self._curve(lo, tokens[sel]), self._curve(hi, tokens[sel])
            w = 0.0 if hi == lo else np.clip(np.log(l_[sel] / lo) / np.log(hi / lo), 0.0, 1.0)
            out[sel] = y_lo + w * (y_hi - y_lo)
        return out
