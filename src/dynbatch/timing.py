"""A device's step time, and updates split at it: numpy only.

A step costs about ``c + n·L·(a + b·L)`` seconds (:class:`StepTimeModel`: a
fixed part ``c``, kernel launches and the optimizer, and a part that grows with
the padded tokens). :func:`check_time_model` takes any object with finite
coefficients ``c``, ``a``, ``b`` >= 0 (``MemoryCost.time_model``, a fit of a
:class:`StepTimeTable`, a ``"c,a,b"`` string). :func:`plan_split_updates`
plans an epoch whose updates are the fixed batch's own and whose micro-batches
are cut at the least predicted time.

NOTE [ splitting updates at the step time ]
    An update of the fixed batch is ``U = B · ranks`` samples drawn at random;
    run as one step it costs ``t(B, L_max)``, its longest sample padding every
    other. Cut into micro-batches, it pays ``c`` once per micro-batch and the
    padded tokens of each. On a CPU ``c`` is small and padding dominates: cut
    finely. On a GPU below its knee ``c`` dominates: do not cut. In between,
    the best cut depends on the update's lengths. For a cost nondecreasing in
    ``n`` and ``L``, some best partition of an update into micro-batches is
    contiguous in length order (exchanging two samples across groups so that
    the shorter goes to the group with the shorter maximum never raises
    either maximum). So each update's samples are sorted by length and a
    dynamic program finds the cut of least predicted time,
    ``sum(c + n_k·L_k·(a + b·L_k))``, among cuts whose every micro-batch fits
    the memory budget; with several ranks a micro-step's ``m`` samples are
    dealt across them, each rank holding ``ceil(m / ranks)`` at most. A fitted
    model is wrong by some fraction (``error``: a fit of a GPU's table is off
    by ~13% near its knee, where a step's time turns from flat to linear), so
    a cut is taken only where it is predicted to save more than that fraction
    of the whole update's time; otherwise the update stays one micro-step.

    **Never predicted slower than the fixed batch.** The cut "one micro-step
    of all ``U`` samples" is the fixed batch's own step for that update (its
    time is that of the rank holding the longest sample), and it is a
    feasible cut whenever the fixed batch fits the budget, as the recipe's
    default budget ``cost(B, L_max)`` guarantees. The program's cut is the
    least over a set that contains it, so each update, and so the epoch, is
    predicted no slower than the fixed batch drawing the same samples.
    Updates are the fixed batch's: the same count an epoch, each a random
    draw of every length (NOTE [ mixed updates ]).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ._checks import InputError, InputTypeError, check_int
from .cost import PolynomialCost, absent_coefficient
from .options import PlanOptions
from .planning import Plan, batch_capacity, find_oversize, padded_lengths
from .sharding import ShardedPlan

__all__ = [
    "StepTimeModel",
    "StepTimeTable",
    "check_time_model",
    "epoch_seconds",
    "plan_split_updates",
    "shuffled",
    "split_update",
]

#: An update holding more samples than this is cut on blocks of sorted samples, not samples:
#: the program costs ``U**2 / 2`` per update, so blocks keep it at ``N * MAX_CUT_POINTS``.
MAX_CUT_POINTS = 512

#: The random stream of :func:`plan_split_updates`, apart from the planner's.
_SPLIT_STREAM = 2


@dataclass(frozen=True)
class StepTimeModel(PolynomialCost):
    """Seconds of one training step: ``c + a*n*L + b*n*L**2``.

    ``error`` is the model's typical relative error on measured steps (0:
    taken as exact): a cut that saves less than that is not trusted (NOTE
    [ splitting updates at the step time ]).

    >>> float(StepTimeModel(c=0.01, a=1e-4, b=0.0)(10, 100))
    0.11
    """

    c: float
    a: float
    b: float
    error: float = field(default=0.0, compare=False)
    floor: float = absent_coefficient()
    grows = False  # a step too quick to time grows by nothing measurable


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
        if not (math.isfinite(float(v)) and float(v) >= 0):
            raise InputError(
                f"{name} coefficient {key} must be a finite number >= 0, got {key}={v!r}"
            )
        coefficients[key] = float(v)
    error = value.get("error", 0.0) if isinstance(value, dict) else getattr(value, "error", 0.0)
    if isinstance(error, bool) or not isinstance(error, (int, float)) or not 0 <= error < 1:
        raise InputError(
            f"{name} error must be a number in [0, 1) (the model's typical relative error), got "
            f"error={error!r}"
        )
    return StepTimeModel(**coefficients, error=float(error))


@dataclass(frozen=True)
class StepTimeTable:
    """Measured seconds of a training step by batch shape, ``n`` samples of ``L`` tokens.

    ``table(n, L)`` interpolates: at each measured ``L`` the time is piecewise
    linear in the tokens ``n·L`` (flat below the fewest measured, extended
    along the last segment above the most), and between two measured lengths
    it is interpolated in ``log L`` at equal tokens. :meth:`fit` is the
    :class:`StepTimeModel` a plan is split with.

    >>> t = StepTimeTable.from_rows([(1, 8, 1.0), (4, 8, 1.0), (8, 8, 2.0)])
    >>> [float(t(n, 8)) for n in (1, 6, 16)]
    [1.0, 1.5, 4.0]
    """

    n: NDArray[np.float64]
    lengths: NDArray[np.float64]
    seconds: NDArray[np.float64]

    @classmethod
    def from_rows(cls, rows: Sequence[Sequence[float]]) -> StepTimeTable:
        """From ``(n, L, seconds)`` rows."""
        data = np.asarray(rows, dtype=np.float64)
        if data.ndim != 2 or data.shape[1] != 3 or data.shape[0] == 0:
            raise InputError(
                f"a step-time table needs rows of (n, L, seconds), got shape {data.shape}"
            )
        if not (np.isfinite(data).all() and (data[:, :2] >= 1).all() and (data[:, 2] > 0).all()):
            raise InputError("a step-time table needs n >= 1, L >= 1 and seconds > 0 in every row")
        return cls(data[:, 0], data[:, 1], data[:, 2])

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> StepTimeTable:
        """From JSON: ``{"columns": [..., "n", "L", "step_s", ...], "rows": [[...], ...]}``."""
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
        """The :class:`StepTimeModel` nearest the table in relative error, with its mean error."""
        from .memory.fit import fit_polynomial  # the memory package plans: not at the top

        c, a, b = fit_polynomial(self.n, self.lengths, self.seconds)
        model = StepTimeModel(c=c, a=a, b=b)
        error = np.abs(np.asarray(model(self.n, self.lengths)) / self.seconds - 1.0).mean()
        return StepTimeModel(c=c, a=a, b=b, error=min(float(error), 0.99))

    def _curve(self, length: float, tokens: NDArray[np.float64]) -> NDArray[np.float64]:
        at = self.lengths == length
        order = np.argsort(self.n[at] * length)
        x, y = (self.n[at] * length)[order], self.seconds[at][order]
        out = np.interp(tokens, x, y)
        if x.size > 1 and x[-1] > x[-2]:  # beyond the most tokens: the last segment, extended
            slope = (y[-1] - y[-2]) / (x[-1] - x[-2])
            out = np.where(tokens > x[-1], y[-1] + slope * (tokens - x[-1]), out)
        return np.asarray(out, dtype=np.float64)

    def __call__(self, n: Any, length: Any) -> NDArray[np.float64]:
        n_, l_ = np.broadcast_arrays(np.asarray(n, np.float64), np.asarray(length, np.float64))
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


def split_update(
    lengths: NDArray[Any],
    capacity: NDArray[Any],
    time_model: Any,
    num_replicas: int = 1,
) -> NDArray[np.int64]:
    """Where to cut updates, rows of ascending padded ``lengths``, at the least predicted time.

    ``capacity[u, j]`` is the most samples one rank's batch of length
    ``lengths[u, j]`` may hold (0: over budget even alone; it goes alone).
    A micro-step of fewer samples than ranks leaves some ranks a repeat.
    ``time_model(n, L)`` gives a step's seconds (a :class:`StepTimeModel`,
    or a :class:`StepTimeTable` for the best cut on measured times). Returns,
    per row, a boolean row of ``U`` flags: True where a micro-step ends (NOTE
    [ splitting updates at the step time ]).

    >>> lens = np.array([[10, 10, 100, 100]])
    >>> cap = np.full((1, 4), 4)
    >>> split_update(lens, cap, StepTimeModel(c=0.0, a=1.0, b=0.0)).astype(int).tolist()
    [[0, 1, 0, 1]]
    >>> split_update(lens, cap, StepTimeModel(c=1e6, a=1.0, b=0.0)).astype(int).tolist()
    [[0, 0, 0, 1]]
    """
    rows, size = lengths.shape
    if size == 0:
        return np.zeros((rows, 0), dtype=bool)
    block = -(-size // MAX_CUT_POINTS)
    points = np.append(np.arange(block, size, block), size)  # allowed cut positions (ends)
    starts = np.concatenate([[0], points])
    replicas = int(num_replicas)
    best = np.zeros((rows, starts.size), dtype=np.float64)
    came_from = np.zeros((rows, starts.size), dtype=np.int64)
    for j in range(1, starts.size):
        end = int(starts[j])
        count = end - starts[:j]  # samples of a micro-step from each earlier cut to this one
        per_rank = -(-count // replicas)
        longest = lengths[:, end - 1].astype(np.float64)
        step = np.asarray(time_model(per_rank[None, :], longest[:, None]), dtype=np.float64)
        cap = capacity[:, end - 1][:, None]
        fits = per_rank[None, :] <= np.maximum(cap, 1)  # over budget alone: alone it goes
        total = np.where(fits, best[:, :j] + step, np.inf)
        came_from[:, j] = np.argmin(total, axis=1)
        best[:, j] = total[np.arange(rows), came_from[:, j]]
    if not np.isfinite(best[:, -1]).all():  # a single micro-step always fits: the budget's own
        raise InputError("an update has no cut into micro-batches that fit the budget")
    whole_rank = -(-size // replicas)
    whole = np.asarray(time_model(whole_rank, lengths[:, -1].astype(np.float64)), np.float64)
    trusted = best[:, -1] < whole * (1.0 - float(getattr(time_model, "error", 0.0)))
    keep_whole = (whole_rank <= np.maximum(capacity[:, -1], 1)) & ~trusted
    came_from[keep_whole, -1] = 0  # a cut the model cannot tell from the whole: the whole
    cuts = np.zeros((rows, size), dtype=bool)
    at = np.full(rows, starts.size - 1)
    live = at > 0
    while live.any():
        cuts[np.flatnonzero(live), starts[at[live]] - 1] = True
        at = np.where(live, came_from[np.arange(rows), at], 0)
        live = at > 0
    return cuts


def plan_split_updates(
    lengths: NDArray[np.int64], options: PlanOptions, epoch: int, num_replicas: int = 1
) -> ShardedPlan:
    """The fixed batch's updates of ``epoch``, each cut at the least predicted step time.

    Needs ``options.time_model`` and ``options.update_size`` in samples. The
    samples are shuffled from ``(seed, epoch)`` and cut into updates of
    ``update_size`` (the last one short, or dropped with ``drop_last``, as a
    fixed batch's); each update is cut by :func:`split_update` and its
    micro-steps dealt across the ranks; a rank with no sample in a micro-step
    (an update of fewer samples than ranks) repeats one, flagged as padding.
    """
    model = check_time_model(options.time_model)
    if model is None or options.update_size is None or options.update_unit != "samples":
        raise InputError(
            "splitting updates at the step time needs options with time_model and update_size "
            f"in samples, got time_model={options.time_model!r}, update_size="
            f"{options.update_size!r}, update_unit={options.update_unit!r}"
        )
    replicas = check_int("num_replicas", num_replicas, minimum=1)
    plens = padded_lengths(lengths, options.pad_to_multiple_of)
    keep = np.ones(lengths.size, dtype=bool)
    over = find_oversize(lengths, options=options)
    if over.size and options.oversize != "alone":
        if options.oversize == "error":
            raise InputError(
                f"sample {int(over[0])} has length {int(lengths[over[0]])} and is over "
                f"max_cost={options.max_cost:g} alone; {len(over)} sample(s) are. Raise "
                "max_cost, truncate them, or pass oversize='skip' or 'alone'"
            )
        keep[over] = False
        if not keep.any():
            raise InputError("every sample is over max_cost alone: nothing to train on")
    order = shuffled(np.flatnonzero(keep), options.seed, epoch)
    size = max(1, round(float(options.update_size)))
    if options.drop_last:
        order = order[: order.size - order.size % size] if order.size >= size else order[:0]
    batches: list[NDArray[np.int64]] = []
    padding: list[bool] = []
    ends: list[int] = []
    full = size * (order.size // size)
    for members in (order[:full].reshape(-1, size), order[full:].reshape(1, -1)):
        if members.size == 0:  # the full updates at once, then the short last one
            continue
        members = np.take_along_axis(members, np.argsort(plens[members], axis=1), axis=1)
        sorted_lengths = plens[members]
        capacity = batch_capacity(sorted_lengths.reshape(-1), options).reshape(members.shape)
        cuts = split_update(sorted_lengths, capacity, model, replicas)
        for row, flags in zip(members, cuts, strict=True):
            stops = np.flatnonzero(flags) + 1
            for start, stop in zip(np.r_[0, stops[:-1]], stops, strict=True):
                group = row[start:stop]
                for r in range(replicas):
                    mine = group[r::replicas]
                    batches.append(mine if mine.size else group[:1])
                    padding.append(mine.size == 0)
            ends.append((ends[-1] if ends else 0) + stops.size)
    plan = Plan.from_batches(batches)
    return ShardedPlan(
        plan, np.arange(len(plan)), np.asarray(padding, dtype=bool), replicas, np.asarray(ends)
    )


def shuffled(indices: NDArray[Any], seed: int, epoch: int) -> NDArray[Any]:
    """``indices`` in the order :func:`plan_split_updates` draws the updates of ``epoch`` from:
    a fixed batch cut from this order holds the same samples in each update.

    >>> shuffled(np.arange(5), seed=0, epoch=0).tolist() == shuffled(np.arange(5), 0, 0).tolist()
    True
    """
    rng = np.random.default_rng([seed, epoch, _SPLIT_STREAM])
    return rng.permutation(np.asarray(indices))


def epoch_seconds(
    sharded: ShardedPlan, lengths: NDArray[Any], step_time: Any, pad_to_multiple_of: int = 1
) -> float:
    """Predicted seconds of an epoch: every micro-step at its slowest rank's ``step_time(n, L)``.

    ``step_time`` is a :class:`StepTimeModel`, a :class:`StepTimeTable` or any
    vectorised ``(n, L) -> seconds``.
    """
    if sharded.num_steps == 0:
        return 0.0
    longest = padded_lengths(sharded.longest(lengths), pad_to_multiple_of)
    seconds = np.asarray(step_time(sharded.sizes, longest), dtype=np.float64)
    return float(seconds.reshape(-1, sharded.num_replicas).max(axis=1).sum())
