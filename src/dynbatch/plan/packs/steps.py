"""A device's step time, as the packing planner asks it: numpy only.

:func:`step_time` turns what the user gives (a :class:`~dynbatch.StepTimeModel`, a
:class:`~dynbatch.StepTimeTable`, ``"c,a,b"`` or a vectorised callable) into one callable
``(n, L) -> seconds``; :func:`predict` calls it and checks what it says; :class:`Grid`
caches it over the step shapes an epoch's cuts ask for.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..._checks import InputError, InputTypeError
from ..plans import Indices
from ..steptime import check_time_model

__all__ = ["Grid", "distinct", "predict", "step_time"]

#: The most samples a step is priced for ahead (:class:`Grid`); more: priced when asked.
GRID_TOP = 1024


class Grid:
    """``step`` evaluated once on every ``n`` in ``1..top`` and every length given, then
    looked up (a table's interpolation per call is what the cuts would otherwise pay for);
    elsewhere, ``step`` itself. The same values either way: it only caches them."""

    def __init__(self, step: Any, lengths: Indices, top: int) -> None:
        self.step = step
        self.error = float(getattr(step, "error", 0.0) or 0.0)
        self.lengths = distinct(lengths).astype(np.float64)
        self.top = top
        n = np.arange(1, top + 1, dtype=np.float64)
        self.table = predict(step, n[:, None], self.lengths[None, :])

    def __call__(self, n: Any, length: Any) -> NDArray[np.float64]:
        n0, l0 = np.asarray(n), np.asarray(length)  # looked up before broadcasting: the cuts
        col = np.minimum(np.searchsorted(self.lengths, l0), self.lengths.size - 1)  # pass rows
        l_hit = self.lengths[col] == l0  # and columns
        n_hit = (n0 >= 1) & (n0 <= self.top) & (n0 == np.floor(n0))
        row = np.where(n_hit, n0, 1).astype(np.int64) - 1
        out = self.table[row, col]
        hit = n_hit & l_hit
        if not hit.all():
            out = np.array(out, dtype=np.float64)  # a copy: the broadcast is read-only
            n_, l_, hit = np.broadcast_arrays(n0, l0, hit)
            out[~hit] = np.asarray(self.step(n_[~hit], l_[~hit]), dtype=np.float64)
        return np.asarray(out, dtype=np.float64)


def distinct(lengths: Indices) -> Indices:
    """The distinct lengths, ascending: counted where they are few (lengths are), else sorted."""
    top = int(lengths.max(initial=0))
    if top <= 4 * lengths.size + (1 << 20):
        return np.flatnonzero(np.bincount(lengths, minlength=top + 1))
    return np.unique(lengths)


def step_time(time_model: Any) -> Any:
    """A vectorised ``(n, L) -> seconds``: a callable as it is; ``"c,a,b"``, a dict or an object
    with coefficients ``c``, ``a``, ``b`` as a :class:`~dynbatch.StepTimeModel`."""
    if isinstance(time_model, (str, dict)) or (
        not callable(time_model) and hasattr(time_model, "c")
    ):  # coefficients c, a, b, as check_time_model takes them
        return check_time_model(time_model)
    if not callable(time_model):
        raise InputTypeError(
            "time_model must be a step time: a StepTimeModel, a StepTimeTable, a 'c,a,b' string "
            f"or a vectorised callable (n, L) -> seconds, got time_model={time_model!r}"
        )
    error = getattr(time_model, "error", 0.0) or 0.0
    if isinstance(error, bool) or not isinstance(error, (int, float)) or not 0 <= error < 1:
        raise InputError(f"time_model error must be a number in [0, 1), got error={error!r}")
    return time_model


def predict(step: Any, n: NDArray[Any], length: NDArray[Any]) -> NDArray[np.float64]:
    with np.errstate(over="ignore", invalid="ignore"):
        raw = step(n, length)
        try:
            out = np.asarray(raw, dtype=np.float64)
        except (TypeError, ValueError):
            raise InputTypeError(
                "time_model must return a step's seconds as numbers, got "
                f"time_model(n, L)={raw!r:.80} for n={n!r:.40}, L={length!r:.40}"
            ) from None
    out = np.broadcast_to(out, np.broadcast(n, length).shape)
    bad = ~(np.isfinite(out) & (out >= 0))
    if bad.any():
        k = int(np.flatnonzero(bad.reshape(-1))[0])
        raise InputError(
            f"time_model predicts {out.reshape(-1)[k]} seconds for a step of "
            f"{int(np.broadcast_to(n, out.shape).reshape(-1)[k])} samples of length "
            f"{int(np.broadcast_to(length, out.shape).reshape(-1)[k])}: a step's seconds must be "
            "finite and >= 0"
        )
    return out
