"""Memory that stays flat, measured: a cost in MiB calibrated on the model, and a preflight.

A :class:`MemoryCost` predicts the peak memory (MiB) of one training step on a
batch of ``n`` samples padded to length ``L``::

    peak(n, L) = max(floor, c + a*n*L + b*n*L**2)

It is a cost like any other (``cost=`` of :func:`~dynbatch.plan_batches`, the
samplers and ``dynbatch stats --cost-file``), so ``max_cost`` becomes a memory
budget in MiB. :func:`calibrate` fits it from real steps of *your* model,
measured by paddle's own allocator, and reports its error on shapes it did not
fit; :func:`preflight` runs the heaviest batches of a plan before training and
names any that do not fit.

>>> cost = MemoryCost(c=50.0, a=0.02, b=4e-05, floor=60.0)
>>> float(cost(8, 512))  # 50 + 0.02*8*512 + 4e-05*8*512**2
215.80608
>>> float(cost(1, 16))  # the step's fixed peak: see NOTE [ the floor ]
60.0
>>> cost.spec()
'MemoryCost(c=50.0, a=0.02, b=4e-05, floor=60.0)'

Only the functions that measure import paddle, on first call: ``MemoryCost``
and the planner work without it.

NOTE [ what calibrate measures ]
    Each probe resets the allocator's peak counter (which sets it to the memory
    allocated right now: weights, gradients, optimizer state), runs one full
    step (forward, backward, optimizer update) and reads the peak. That is the
    *absolute* peak allocated during the step, resident state included, because
    that is what has to fit on the device; ``c`` absorbs the resident state. A
    model of "peak minus baseline" would make every user add the baseline back
    and would hide the floor below. Process RSS is not used: it counts the
    Python heap, freed-but-cached pages and shared libraries, and never goes
    down. On GPU this is peak *allocated* memory; the caching allocator keeps a
    little more reserved (fragmentation), which is what the margin of
    :func:`memory_target` (``fraction=0.9``) is for. A warm-up step runs first
    so that the optimizer's state exists, as it will in training. The snapshot
    taken for ``restore=`` is kept in host numpy arrays, outside paddle's
    allocator, so it is not measured.

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

NOTE [ restoring state ]
    Probes train on random data. ``restore=[model, optimizer]`` snapshots their
    ``state_dict()`` (to host memory) before the warm-up step and puts it back
    with ``set_state_dict()`` afterwards, as tensors of their own dtype, also
    when a step fails. A fresh
    optimizer has no state yet, and ``set_state_dict`` cannot remove the state
    the warm-up step creates, so such an object is reported right after the
    warm-up (an error naming it) instead of being left half-restored: make the
    optimizer after calibrating, or calibrate with a throwaway optimizer of the
    same kind and pass ``restore=[model]``.
"""

from __future__ import annotations

import gc
import inspect
import itertools
import json
import math
import numbers
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol, TypeVar

import numpy as np
from numpy.typing import NDArray

from ._checks import (
    InputError,
    InputTypeError,
    check_choice,
    check_int,
    check_lengths,
    check_positive_number,
)
from ._optional import require
from .contract import PlanSource
from .cost import CostLike, resolve_cost
from .stats import batch_table

__all__ = [
    "AllocatorStatsUnavailable",
    "CalibrationError",
    "CalibrationReport",
    "MemoryBudgetError",
    "MemoryCost",
    "PreflightCheck",
    "PreflightReport",
    "Probe",
    "Restorable",
    "StepTimeModel",
    "calibrate",
    "current_memory_mib",
    "memory_source",
    "memory_target",
    "peak_memory_mib",
    "preflight",
    "reset_peak_memory",
]

#: ``step(n, L)``: one training step on a random batch of ``n`` samples padded to ``L``.
Step = Callable[[int, int], object]

CPU_ALLOCATOR = "cpu allocator"
CUDA_ALLOCATOR = "cuda allocator"
_MIB = float(2**20)
#: held-out probes under this fraction of the largest probed peak are not held to tolerance
_CHECKED_FRACTION = 0.2
#: probes within this fraction of the probed range above the floor are explained by it
#: (NOTE [ the floor ])
_FLOOR_BAND = 0.02
_FORMAT = "dynbatch.MemoryCost"
PROBE_ROLES = ("floor", "fit", "held-out")
_R = TypeVar("_R")
_FORMAT_VERSION = 1


class AllocatorStatsUnavailable(RuntimeError):
    """Paddle keeps no allocator statistics here (an old build, or a device other than
    CPU and CUDA GPU)."""


class Restorable(Protocol):
    """What ``restore=`` needs: a model or optimizer with ``state_dict``/``set_state_dict``."""

    def state_dict(self) -> Any: ...

    def set_state_dict(self, state_dict: Any) -> Any: ...


# -- the allocator's counters -------------------------------------------------------------------
def _paddle() -> ModuleType:
    return require("paddle", "dynbatch.memory")


def _source_for(device: str, cuda_build: bool) -> str:
    """Which allocator counts memory on ``device`` (paddle's ``get_device()`` string).

    >>> _source_for("cpu", cuda_build=True)
    'cpu allocator'
    >>> _source_for("gpu:0", cuda_build=True)
    'cuda allocator'
    """
    if device == "cpu":
        return CPU_ALLOCATOR
    if device.startswith("gpu") and cuda_build:
        return CUDA_ALLOCATOR
    raise AllocatorStatsUnavailable(
        f"dynbatch.memory reads the CPU or the CUDA allocator; paddle's current device is "
        f"{device!r}{'' if cuda_build else ' on a build without CUDA'}"
    )


def memory_source() -> str:
    """``"cuda allocator"`` when paddle's current device is a GPU of a CUDA build, else
    ``"cpu allocator"``; raises :class:`AllocatorStatsUnavailable` on other devices."""
    paddle = _paddle()
    return _source_for(str(paddle.device.get_device()), bool(paddle.device.is_compiled_with_cuda()))


def _host_stat(name: str) -> Callable[..., Any]:
    core = getattr(getattr(_paddle(), "base", None), "core", None)
    fn = getattr(core, name, None)
    if fn is None:
        raise AllocatorStatsUnavailable(
            f"this paddle build has no host allocator statistics (paddle.base.core.{name})"
        )
    return fn  # type: ignore[no-any-return]


def peak_memory_mib() -> float:
    """Peak memory allocated by paddle since the last :func:`reset_peak_memory` (MiB).

    >>> import paddle
    >>> reset_peak_memory()
    >>> before = current_memory_mib()
    >>> x = paddle.ones([2**18])  # 1 MiB of float32
    >>> del x
    >>> round(peak_memory_mib() - before, 3), round(current_memory_mib() - before, 3)
    (1.0, 0.0)
    """
    if memory_source() == CUDA_ALLOCATOR:
        return float(_paddle().device.cuda.max_memory_allocated()) / _MIB
    return float(_host_stat("host_memory_stat_peak_value")("Allocated", 0)) / _MIB


def current_memory_mib() -> float:
    """Memory allocated by paddle right now (MiB)."""
    if memory_source() == CUDA_ALLOCATOR:
        return float(_paddle().device.cuda.memory_allocated()) / _MIB
    return float(_host_stat("host_memory_stat_current_value")("Allocated", 0)) / _MIB


def reset_peak_memory() -> None:
    """Set the peak counter to what is allocated now, so the next peak is the next step's."""
    if memory_source() == CUDA_ALLOCATOR:
        _paddle().device.cuda.reset_max_memory_allocated()
    else:
        _host_stat("host_memory_stat_reset_peak_value")("Allocated", 0)


def memory_target(fraction: float = 0.9) -> float:
    """A memory budget for ``max_cost``: ``fraction`` of the current GPU's memory, in MiB.

    The rest is headroom for what the allocator reserves beyond what it
    allocates (see NOTE [ what calibrate measures ]). On CPU there is no device
    memory to take a fraction of, so this raises: give ``max_cost`` in MiB.
    """
    if (
        isinstance(fraction, bool)
        or not isinstance(fraction, numbers.Real)
        or not 0 < float(fraction) <= 1
    ):
        raise InputError(f"fraction must be a number in (0, 1], got fraction={fraction!r}")
    if memory_source() != CUDA_ALLOCATOR:
        raise RuntimeError(
            "memory_target() sizes the budget from GPU memory, and paddle's current device is "
            "the CPU: give max_cost in MiB yourself (the memory training may use)"
        )
    props = _paddle().device.cuda.get_device_properties()
    return float(fraction) * float(props.total_memory) / _MIB


# -- the cost ----------------------------------------------------------------------------------
def _amount(name: str, value: Any, *, finite: bool = True) -> float:
    """``value`` as a float >= 0 (and finite, unless ``finite=False``): MiB, seconds, errors."""
    wrong_type = isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real)
    if wrong_type or not (float(value) >= 0 and (math.isfinite(value) or not finite)):
        error = InputTypeError if wrong_type else InputError
        kind = "a finite number >= 0" if finite else "a number >= 0"
        raise error(f"{name} must be {kind}, got {name}={value!r}")
    return float(value)


def _coefficient(owner: str, name: str, value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not (math.isfinite(value) and float(value) >= 0)
    ):
        raise InputError(f"{owner} {name} must be a finite number >= 0, got {name}={value!r}")
    return float(value)


@dataclass(frozen=True)
class StepTimeModel:
    """Seconds of one training step: ``c + a*n*L + b*n*L**2``, fitted with the memory.

    >>> float(StepTimeModel(c=0.01, a=1e-4, b=0.0)(10, 100))
    0.11
    """

    c: float
    a: float
    b: float

    def __post_init__(self) -> None:
        for name in ("c", "a", "b"):
            object.__setattr__(self, name, _coefficient("StepTimeModel", name, getattr(self, name)))

    def __call__(self, n: Any, length: Any) -> Any:
        tokens = np.multiply(n, np.asarray(length, dtype=np.float64))
        return self.c + tokens * (self.a + self.b * np.asarray(length, dtype=np.float64))


@dataclass(frozen=True)
class Probe:
    """One measured step of :func:`calibrate`.

    ``role`` is ``"floor"`` (the smallest shape, see NOTE [ the floor ]),
    ``"fit"`` or ``"held-out"``; ``peak_mib`` is None when the step ran out of
    memory (the shape does not fit); ``resident_mib`` is what was allocated
    before the step; ``predicted_mib`` is the fitted model's value.
    """

    n: int
    length: int
    role: str
    peak_mib: float | None
    resident_mib: float
    seconds: float
    predicted_mib: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "n", check_int("n", self.n, minimum=1))
        object.__setattr__(self, "length", check_int("length", self.length, minimum=1))
        check_choice("role", self.role, PROBE_ROLES)
        for name in ("peak_mib", "resident_mib", "seconds", "predicted_mib"):
            value = getattr(self, name)
            if not (name == "peak_mib" and value is None):
                object.__setattr__(self, name, _amount(name, value))

    @property
    def error(self) -> float | None:
        """Relative error of the prediction, ``(predicted - measured) / measured``."""
        if self.peak_mib is None:
            return None
        return (self.predicted_mib - self.peak_mib) / self.peak_mib


@dataclass(frozen=True)
class CalibrationReport:
    """What :func:`calibrate` measured and how well the fit did.

    ``fit_error`` and ``held_out_error`` are the largest relative errors on the
    fitted and on the held-out probes whose peak is at least a fifth of the
    largest probed peak; ``time_held_out_error`` is the same for step time.
    """

    probes: tuple[Probe, ...]
    fit_error: float
    held_out_error: float
    time_held_out_error: float
    tolerance: float
    seconds: float
    source: str
    device: str
    paddle_version: str
    max_len: int
    max_batch_size: int | None
    min_len: int
    max_tokens: int

    def __post_init__(self) -> None:
        if not all(isinstance(p, Probe) for p in self.probes):
            raise InputTypeError(f"probes must be Probe records, got probes={self.probes!r}")
        for name in ("fit_error", "held_out_error", "time_held_out_error", "seconds"):
            object.__setattr__(self, name, _amount(name, getattr(self, name), finite=False))
        check_positive_number("tolerance", self.tolerance)
        for name in ("source", "device", "paddle_version"):
            if not isinstance(getattr(self, name), str):
                raise InputTypeError(f"{name} must be a string, got {name}={getattr(self, name)!r}")
        for name in ("max_len", "max_batch_size", "min_len", "max_tokens"):
            value = check_int(
                name, getattr(self, name), minimum=1, allow_none=name == "max_batch_size"
            )
            object.__setattr__(self, name, value)
        if self.min_len > self.max_len:
            raise InputError(
                f"min_len must be at most max_len={self.max_len}, got min_len={self.min_len}"
            )

    def __str__(self) -> str:
        lines = [
            f"calibrated on {self.device} ({self.source}, paddle {self.paddle_version}) in "
            f"{self.seconds:.1f} s; max_len={self.max_len}, max_batch_size={self.max_batch_size}",
            f"{'role':<8} {'n':>6} {'L':>5} {'measured MiB':>13} {'predicted':>10} "
            f"{'error':>7} {'step s':>7}",
        ]
        for p in self.probes:
            measured = "out of mem" if p.peak_mib is None else f"{p.peak_mib:.2f}"
            error = "" if p.error is None else f"{p.error:+.2%}"
            lines.append(
                f"{p.role:<8} {p.n:>6} {p.length:>5} {measured:>13} {p.predicted_mib:>10.2f} "
                f"{error:>7} {p.seconds:>7.3f}"
            )
        lines.append(
            f"largest relative error: fit {self.fit_error:.2%}, held-out {self.held_out_error:.2%} "
            f"(tolerance {self.tolerance:.0%}); step time held-out {self.time_held_out_error:.1%}"
        )
        return "\n".join(lines)


@dataclass(frozen=True)
class MemoryCost:
    """Predicted peak memory of a training step, in MiB: ``max(floor, c + a*n*L + b*n*L**2)``.

    ``n`` samples padded to length ``L``; see NOTE [ the floor ] for why the
    floor. Made by :func:`calibrate`, which also attaches what it measured
    (``report``) and a step-time model (``time_model``); equality, hashing,
    ``repr`` and :meth:`spec` depend on the four coefficients only.

    Args:
        c: MiB that do not depend on the batch (weights, gradients, optimizer state).
        a: MiB per token (``n * L``).
        b: MiB per token pair per sample (``n * L**2``).
        floor: the step's peak that does not grow with the batch (MiB).

    >>> MemoryCost(c=40.0, a=0.5, b=0.0)(np.array([1, 4]), np.array([8, 8])).tolist()
    [44.0, 56.0]
    """

    c: float
    a: float
    b: float
    floor: float = 0.0
    report: CalibrationReport | None = field(default=None, compare=False, repr=False)
    time_model: StepTimeModel | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("c", "a", "b", "floor"):
            object.__setattr__(self, name, _coefficient("MemoryCost", name, getattr(self, name)))
        if self.a == 0 and self.b == 0:
            raise InputError(
                "MemoryCost needs a > 0 or b > 0 (memory that grows with the batch), "
                "got a=0 and b=0"
            )

    def __call__(self, n: Any, length: Any) -> Any:
        length = np.asarray(length, dtype=np.float64)
        grows = self.c + np.multiply(n, length) * (self.a + self.b * length)
        return np.maximum(self.floor, grows)

    def spec(self) -> str:
        """The coefficients as stable text (for resume fingerprints): what decides the values."""
        return f"MemoryCost(c={self.c!r}, a={self.a!r}, b={self.b!r}, floor={self.floor!r})"

    # -- JSON --------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        """Write the cost, its calibration report and time model as JSON (exact round trip)."""
        data = {
            "format": _FORMAT,
            "version": _FORMAT_VERSION,
            "c": self.c,
            "a": self.a,
            "b": self.b,
            "floor": self.floor,
            "time_model": None if self.time_model is None else asdict(self.time_model),
            "report": None if self.report is None else asdict(self.report),
        }
        Path(path).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> MemoryCost:
        """Read a cost written by :meth:`save`; errors name the file and what is wrong."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise FileNotFoundError(f"MemoryCost file not found: {path}") from None
        except IsADirectoryError:
            raise InputError(
                f"MemoryCost file {path} is a directory: give the JSON file MemoryCost.save wrote"
            ) from None
        except UnicodeDecodeError as exc:
            raise InputError(
                f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start}), so not a "
                "MemoryCost saved by MemoryCost.save"
            ) from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path} is not valid JSON ({exc})") from None
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            raise InputError(f'{path} is not a saved MemoryCost (no "format": "{_FORMAT}")')
        if data.get("version") != _FORMAT_VERSION:
            raise InputError(
                f"{path} is a MemoryCost of version {data.get('version')!r}; this dynbatch reads "
                f"version {_FORMAT_VERSION}: calibrate again"
            )
        missing = [k for k in ("c", "a", "b", "floor") if k not in data]
        if missing:
            raise InputError(f"{path} lacks the key(s) {', '.join(missing)}")
        try:
            time_model = data.get("time_model")
            report = data.get("report")
            return cls(
                c=data["c"],
                a=data["a"],
                b=data["b"],
                floor=data["floor"],
                time_model=None if time_model is None else StepTimeModel(**time_model),
                report=None if report is None else _report_from_json(report),
            )
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            error = InputTypeError if isinstance(exc, InputTypeError) else InputError
            raise error(f"{path}: {exc}") from None


def _record(cls: type[_R], data: Any, where: str) -> _R:
    """``cls(**data)`` of a JSON object, errors prefixed by where it is (``report.probes[0].``)."""
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    if not isinstance(data, dict):
        raise InputError(f"{where[:-1]} must be a JSON object, got {data!r}")
    unknown, missing = sorted(set(data) - names), sorted(names - set(data))
    if unknown or missing:
        raise InputError(
            f"{where[:-1]} must have the keys {', '.join(sorted(names))}; "
            f"{'unknown: ' + ', '.join(unknown) if unknown else 'missing: ' + ', '.join(missing)}"
        )
    try:
        return cls(**data)
    except InputError as exc:
        raise type(exc)(f"{where}{exc}") from None


def _report_from_json(data: Any) -> CalibrationReport:
    probes = data.get("probes") if isinstance(data, dict) else None
    if not isinstance(probes, list):
        raise InputError(f"report.probes must be a list of probes, got {probes!r}")
    records = tuple(_record(Probe, p, f"report.probes[{i}].") for i, p in enumerate(probes))
    return _record(CalibrationReport, {**data, "probes": records}, "report.")


class CalibrationError(ValueError):
    """The fitted model misses held-out probes by more than ``tolerance``, or the probes
    cannot pin it down. ``report`` and ``cost`` hold what was measured and fitted."""

    def __init__(
        self,
        message: str,
        report: CalibrationReport | None = None,
        cost: MemoryCost | None = None,
    ) -> None:
        super().__init__(message)
        self.report = report
        self.cost = cost


# -- fitting -----------------------------------------------------------------------------------
def _nnls(x: NDArray[Any], y: NDArray[Any]) -> NDArray[Any]:
    """Non-negative least squares ``min |x @ w - y|, w >= 0``, exactly, for a few columns.

    The optimum is the unconstrained least-squares solution on its own support,
    so the best non-negative solution over all column subsets is it.

    >>> _nnls(np.array([[1.0, 1.0], [1.0, 2.0], [1.0, 3.0]]), np.array([3.0, 2.0, 1.0])).tolist()
    [2.0, 0.0]
    """
    k = x.shape[1]
    best = np.zeros(k)
    best_residual = float(np.sum(y**2))
    for size in range(1, k + 1):
        for cols in itertools.combinations(range(k), size):
            sub = x[:, list(cols)]
            sol = np.linalg.lstsq(sub, y, rcond=None)[0]
            if (sol < 0).any():
                continue
            residual = float(np.sum((sub @ sol - y) ** 2))
            if residual < best_residual - 1e-12 * max(best_residual, 1.0):
                best = np.zeros(k)
                best[list(cols)] = sol
                best_residual = residual
    return best


def _fit_relative(n: NDArray[Any], length: NDArray[Any], y: NDArray[Any]) -> NDArray[Any]:
    """Non-negative ``(c, a, b)`` of ``c + a*n*L + b*n*L**2`` minimising relative squared error."""
    tokens = n * length.astype(np.float64)
    weight = 1.0 / np.maximum(y, 1e-12)  # a step timed at 0 s must not divide by zero
    x = np.stack([np.ones_like(tokens), tokens, tokens * length], axis=1) * weight[:, None]
    scale = np.abs(x).max(axis=0)
    scale[scale == 0] = 1.0
    coef: NDArray[Any] = _nnls(x / scale, y * weight) / scale
    return coef


def _max_error(pred: NDArray[Any], measured: NDArray[Any], checked: NDArray[Any]) -> float:
    if not checked.any():
        return 0.0
    return float(np.max(np.abs(pred[checked] - measured[checked]) / measured[checked]))


# -- probing -----------------------------------------------------------------------------------
def _check_step(step: Any) -> None:
    wrong = not callable(step)
    if not wrong:
        try:
            inspect.signature(step).bind(1, 1)
        except TypeError:
            wrong = True
        except ValueError:  # builtins without a signature: trust them
            pass
    if wrong:
        raise InputTypeError(
            f"step must be a callable step(n, L) that runs one training step on n samples "
            f"padded to length L, got step={step!r}"
        )


def _check_restore(restore: Any) -> list[Restorable]:
    if restore is None:
        return []
    if not isinstance(restore, Sequence) or isinstance(restore, str):
        restore = [restore]
    for i, obj in enumerate(restore):
        if not (
            callable(getattr(obj, "state_dict", None))
            and callable(getattr(obj, "set_state_dict", None))
        ):
            raise InputTypeError(
                f"restore[{i}] must have state_dict() and set_state_dict() (a paddle Layer or "
                f"optimizer), got restore[{i}]={obj!r}"
            )
    return list(restore)


@dataclass(frozen=True, eq=False)
class _Host:
    """A tensor's values in host memory, outside paddle's allocator, and its paddle dtype
    (numpy holds bfloat16 as uint16)."""

    values: NDArray[Any]
    dtype: Any


def _to_host(value: Any) -> Any:
    """A copy of a state_dict value that lives outside paddle's allocator."""
    if isinstance(value, dict):
        return {k: _to_host(v) for k, v in value.items()}
    if hasattr(value, "numpy") and hasattr(value, "dtype"):
        # numpy() of a CPU tensor can share paddle's allocation: copy into numpy's own memory,
        # or the snapshot would be measured as part of every probe
        return _Host(np.array(value.numpy(), copy=True), value.dtype)
    return value


def _from_host(value: Any) -> Any:
    """Tensors again, of their own dtype, for ``set_state_dict`` (after probing, unmeasured)."""
    if isinstance(value, dict):
        return {k: _from_host(v) for k, v in value.items()}
    if isinstance(value, _Host):
        if value.values.dtype == np.uint16:  # bfloat16: numpy cannot say so, a tensor can
            return _paddle().to_tensor(value.values, dtype=value.dtype)
        # numpy, not tensors: an optimizer keeps the dict it is given (_accumulators_holder),
        # and tensors there would stay allocated beside the state they were copied into
        return value.values
    return value


def _snapshot(objects: list[Restorable]) -> list[dict[str, Any]]:
    return [_to_host(dict(obj.state_dict())) for obj in objects]


def _grown(objects: list[Restorable], snapshot: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """``(index, new keys)`` of objects whose state gained entries since the snapshot."""
    out = []
    for i, (obj, snap) in enumerate(zip(objects, snapshot, strict=True)):
        new = set(obj.state_dict()) - set(snap)
        if new:
            out.append((i, len(new)))
    return out


def _restore(objects: list[Restorable], snapshot: list[dict[str, Any]]) -> None:
    grown = {i for i, _ in _grown(objects, snapshot)}
    for i, (obj, snap) in enumerate(zip(objects, snapshot, strict=True)):
        if i not in grown:  # see NOTE [ restoring state ]
            obj.set_state_dict(_from_host(snap))


def _grown_error(objects: list[Restorable], grown: list[tuple[int, int]]) -> InputError:
    i, count = grown[0]
    return InputError(
        f"restore[{i}] ({type(objects[i]).__name__}) had no state for {count} entries before "
        f"the warm-up step (a fresh optimizer?), and set_state_dict cannot remove state, so it "
        f"cannot be restored; the other objects were. restore[{i}] must be a model or an "
        f"optimizer that has already stepped, got restore[{i}]={objects[i]!r}: make the "
        f"optimizer after this call, or use a throwaway optimizer of the same kind in step and "
        f"pass restore=[model]"
    )


def _is_oom(exc: BaseException) -> bool:
    text = f"{type(exc).__name__} {exc}".lower()
    return isinstance(exc, MemoryError) or "out of memory" in text or "resourceexhausted" in text


def _run(step: Step, n: int, length: int, source: str) -> tuple[float | None, float, float]:
    """``(peak MiB or None if out of memory, resident MiB, seconds)`` of one step."""
    gc.collect()
    reset_peak_memory()
    resident = current_memory_mib()
    start = time.perf_counter()
    try:
        step(n, length)
    except Exception as exc:
        if not _is_oom(exc):
            raise
        del exc
        gc.collect()
        if source == CUDA_ALLOCATOR:
            _paddle().device.cuda.empty_cache()
        return None, resident, time.perf_counter() - start
    seconds = time.perf_counter() - start
    return peak_memory_mib(), resident, seconds


def _probe_grid(
    max_len: int, min_len: int, max_batch_size: int | None, max_tokens: int, num_lengths: int
) -> list[tuple[int, int, str]]:
    """``(n, L, role)`` of every probe (NOTE [ the probe grid ]).

    >>> _probe_grid(512, 16, None, 8192, 3)[:4]
    [(1, 16, 'floor'), (128, 16, 'fit'), (512, 16, 'fit'), (22, 91, 'fit')]
    """
    cap = max_batch_size if max_batch_size is not None else max_tokens
    points = np.geomspace(min_len, max_len, num_lengths)
    fit_lengths = sorted(set(points.round().astype(np.int64).tolist()))
    middles = sorted(
        {round(math.sqrt(lo * hi)) for lo, hi in itertools.pairwise(fit_lengths)} - set(fit_lengths)
    )
    grid = [(1, min_len, "floor")]
    for length in fit_lengths:
        big = max(1, min(cap, max_tokens // length))
        small = max(1, big // 4)
        grid += [(n, length, "fit") for n in sorted({small, big})]
    for length in middles:
        grid.append((max(1, min(cap, max_tokens // (2 * length))), length, "held-out"))
    return grid


def calibrate(
    step: Step,
    *,
    max_len: int,
    max_batch_size: int | None = None,
    min_len: int | None = None,
    max_tokens: int | None = None,
    num_lengths: int = 5,
    tolerance: float = 0.10,
    restore: Restorable | Sequence[Restorable] | None = None,
) -> MemoryCost:
    """Fit a :class:`MemoryCost` to your model by measuring real training steps.

    Runs a warm-up step, then ``step`` on a small grid of shapes (NOTE [ the
    probe grid ]), reading paddle's allocator peak around each (NOTE [ what
    calibrate measures ]); fits ``max(floor, c + a*n*L + b*n*L**2)`` with
    non-negative coefficients and checks it on held-out shapes. On GPU a probe
    that runs out of memory is recorded as not fitting and left out.

    Args:
        step: ``step(n, L)`` runs one full training step (forward, backward,
            optimizer update) on a random batch of ``n`` samples padded to ``L``.
        max_len: the longest padded length training will see.
        max_batch_size: the most samples a batch will hold; probes stay within it.
        min_len: the shortest probed length (default ``max_len // 32``, at least 1).
        max_tokens: tokens (``n * L``) of the largest probe; default ``16 * max_len``
            clamped to 4,096..32,768.
        num_lengths: how many lengths are fitted (held-out ones lie between them).
        tolerance: the largest relative error allowed on held-out probes whose
            peak is at least a fifth of the largest.
        restore: a model and/or optimizer whose state is put back afterwards
            (NOTE [ restoring state ]).

    Returns:
        The cost, with ``report`` (every probe, the errors, device, paddle
        version) and ``time_model`` (seconds per step, fitted on the same probes).

    Raises:
        CalibrationError: held-out error over ``tolerance``, or too few probes to fit.

    >>> import paddle
    >>> def step(n, L):  # stands in for a training step: 512 bytes live per token
    ...     x = paddle.ones([n, L, 64])
    ...     y = x * 2
    >>> cost = calibrate(step, max_len=64, max_tokens=1024)
    >>> round(cost.a * 2**20), round(cost.b * 2**20), cost.report.held_out_error < 0.01
    (512, 0, True)
    """
    _check_step(step)
    max_len = check_int("max_len", max_len, minimum=1)
    max_batch_size = check_int("max_batch_size", max_batch_size, minimum=1, allow_none=True)
    min_len = check_int("min_len", min_len, minimum=1, allow_none=True)
    if min_len is None:
        min_len = max(1, max_len // 32)
    elif min_len > max_len:
        raise InputError(f"min_len must be at most max_len={max_len}, got min_len={min_len}")
    max_tokens = check_int("max_tokens", max_tokens, minimum=1, allow_none=True)
    if max_tokens is None:
        max_tokens = min(max(16 * max_len, 4096), 32768)
    num_lengths = check_int("num_lengths", num_lengths, minimum=2)
    tolerance = check_positive_number("tolerance", tolerance)
    objects = _check_restore(restore)
    paddle = _paddle()
    source = memory_source()

    grid = _probe_grid(max_len, min_len, max_batch_size, max_tokens, num_lengths)
    start = time.perf_counter()
    snapshot = _snapshot(objects)
    try:
        step(1, min_len)  # warm-up: the optimizer's state exists from here on
        grown = _grown(objects, snapshot)
        if grown:
            raise _grown_error(objects, grown)
        runs = [_run(step, n, length, source) for n, length, _ in grid]
    finally:
        _restore(objects, snapshot)
    seconds = time.perf_counter() - start

    n = np.array([g[0] for g in grid], dtype=np.float64)
    length = np.array([g[1] for g in grid], dtype=np.float64)
    role = np.array([g[2] for g in grid])
    ok = np.array([r[0] is not None for r in runs])
    peak = np.array([r[0] if r[0] is not None else np.nan for r in runs])
    secs = np.array([r[2] for r in runs])
    if not ok[role == "floor"].all():
        raise CalibrationError(f"even the smallest probe (1 sample of {min_len}) ran out of memory")
    floor = float(peak[role == "floor"][0])
    above = ok & (role == "fit") & (peak > floor + _FLOOR_BAND * (np.nanmax(peak) - floor))
    if np.unique(length[role == "fit"]).size < 2:
        raise CalibrationError(
            f"the probes cover one length only (min_len={min_len}, max_len={max_len}): the fit "
            "needs two; lower min_len"
        )
    if above.sum() < 3 or np.unique(length[above]).size < 2:
        raise CalibrationError(
            f"only {int(above.sum())} probe(s) peaked above the step's fixed peak of "
            f"{floor:.1f} MiB, at {np.unique(length[above]).size} length(s); the fit needs 3 at 2 "
            f"lengths. Raise max_tokens (now {max_tokens}) or max_batch_size (now "
            f"{max_batch_size}) so the batch's memory shows above it"
        )
    c, a, b = _fit_relative(n[above], length[above], peak[above])
    timed = ok & (role != "floor")
    tc, ta, tb = _fit_relative(
        n[timed & (role == "fit")], length[timed & (role == "fit")], secs[timed & (role == "fit")]
    )
    pred = np.maximum(floor, c + n * length * (a + b * length))
    checked = ok & (peak >= _CHECKED_FRACTION * np.nanmax(peak))
    time_model = StepTimeModel(c=tc, a=ta, b=tb)
    time_pred = np.asarray(time_model(n, length))
    probes = tuple(
        Probe(
            n=int(g[0]),
            length=int(g[1]),
            role=g[2],
            peak_mib=r[0],
            resident_mib=r[1],
            seconds=r[2],
            predicted_mib=float(p),
        )
        for g, r, p in zip(grid, runs, pred, strict=True)
    )
    held = role == "held-out"
    report = CalibrationReport(
        probes=probes,
        fit_error=_max_error(pred, peak, checked & (role == "fit")),
        held_out_error=_max_error(pred, peak, checked & held),
        time_held_out_error=_max_error(time_pred, secs, ok & held),
        tolerance=tolerance,
        seconds=seconds,
        source=source,
        device=str(paddle.device.get_device()),
        paddle_version=str(paddle.__version__),
        max_len=max_len,
        max_batch_size=max_batch_size,
        min_len=min_len,
        max_tokens=max_tokens,
    )
    if a == 0 and b == 0:
        raise CalibrationError(
            f"the step's peak memory does not grow with the batch (fitted a=0 and b=0):\n{report}"
            "\nDoes step(n, L) really build a batch of n samples of length L?",
            report,
        )
    cost = MemoryCost(c=c, a=a, b=b, floor=floor, report=report, time_model=time_model)
    if max(report.fit_error, report.held_out_error) > tolerance:
        raise CalibrationError(
            f"the fitted memory model misses the probes it was fitted on by up to "
            f"{report.fit_error:.1%} and held-out shapes by up to {report.held_out_error:.1%} "
            f"(tolerance {tolerance:.0%}): this step's peak memory does not follow "
            f"max(floor, c + a*n*L + b*n*L**2)\n{report}",
            report,
            cost,
        )
    if not (checked & held).any():
        raise CalibrationError(
            "no held-out probe could be checked (out of memory, or under a fifth of the largest "
            f"peak), so the fit is unverified:\n{report}",
            report,
            cost,
        )
    return cost


# -- preflight ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class PreflightCheck:
    """One batch of the plan run by :func:`preflight`; ``measured_mib`` None: out of memory."""

    position: int
    n: int
    length: int
    predicted: float
    measured_mib: float | None
    seconds: float
    fits: bool


@dataclass(frozen=True)
class PreflightReport:
    """The batches :func:`preflight` ran, heaviest predicted first, against ``max_cost`` MiB."""

    checks: tuple[PreflightCheck, ...]
    max_cost: float
    source: str

    @property
    def ok(self) -> bool:
        """Every batch run peaked within ``max_cost``."""
        return all(c.fits for c in self.checks)

    @property
    def worst(self) -> PreflightCheck:
        """The batch with the highest measured peak (out of memory counts as highest)."""
        return max(
            self.checks,
            key=lambda c: math.inf if c.measured_mib is None else c.measured_mib,
        )

    def __str__(self) -> str:
        lines = [
            f"preflight against max_cost={self.max_cost:g} MiB ({self.source})",
            f"{'batch':>6} {'n':>6} {'L':>5} {'predicted':>10} {'measured MiB':>13} {'fits':>5}",
        ]
        for c in self.checks:
            measured = "out of mem" if c.measured_mib is None else f"{c.measured_mib:.2f}"
            lines.append(
                f"{c.position:>6} {c.n:>6} {c.length:>5} {c.predicted:>10.2f} {measured:>13} "
                f"{'yes' if c.fits else 'NO':>5}"
            )
        return "\n".join(lines)


class MemoryBudgetError(ValueError):
    """A batch of the plan peaked over ``max_cost`` in :func:`preflight`; ``report`` has all."""

    def __init__(self, message: str, report: PreflightReport) -> None:
        super().__init__(message)
        self.report = report


def preflight(
    step: Step,
    batches: Any,
    lengths: Any = None,
    *,
    cost: CostLike | None = None,
    max_cost: float | None = None,
    k: int = 3,
    pad_to_multiple_of: int = 1,
    restore: Restorable | Sequence[Restorable] | None = None,
) -> PreflightReport:
    """Run the heaviest batches of a plan before training; fail if any peaks over ``max_cost``.

    Runs a warm-up step, then the ``k`` batches with the highest predicted
    ``cost`` and also the batch with the most samples and the one with the
    longest padded length (where a cost model extrapolates, and so errs, most),
    each as ``step(n, L)``, measuring the allocator's peak (NOTE [ what
    calibrate measures ]).

    Args:
        step: the same ``step(n, L)`` as for :func:`calibrate`.
        batches: the plan: a sequence of index arrays into ``lengths``; or a
            dynbatch sampler, whose current epoch's plan (every rank's batches),
            lengths, cost, ``max_cost`` and padding are used unless given.
        lengths: per-sample lengths.
        cost: ranks the batches; a :class:`MemoryCost` makes ``predicted`` MiB.
        max_cost: the memory every measured peak must stay within, in MiB.
        k: how many of the highest-predicted batches to run.
        pad_to_multiple_of: ``L`` is a batch's longest length rounded up to this.
        restore: a model and/or optimizer whose state is put back afterwards
            (NOTE [ restoring state ]).

    Returns:
        Measured against predicted peak per batch run, heaviest predicted first.

    Raises:
        MemoryBudgetError: a batch peaked over ``max_cost`` or ran out of memory;
            the message names its position in the plan, ``n``, ``L`` and peak.

    >>> import paddle
    >>> def step(n, L):  # 512 bytes live per token
    ...     x = paddle.ones([n, L, 64])
    ...     y = x * 2
    >>> per_token = MemoryCost(c=0.0, a=512 / 2**20, b=0.0)
    >>> report = preflight(step, [[0, 1], [2]], [100, 300, 900], cost=per_token, max_cost=64)
    >>> report.ok, [(c.position, c.n, c.length) for c in report.checks]
    (True, [(1, 1, 900), (0, 2, 300)])
    """
    _check_step(step)
    if isinstance(batches, PlanSource):  # a sampler: its epoch's plan, lengths and options
        options = batches.options
        if max_cost is None and not isinstance(options.cost, MemoryCost):
            raise InputError(
                f"preflight compares measured MiB with max_cost, but the sampler's cost "
                f"({options.cost!r}) is not a MemoryCost, so its max_cost={options.max_cost:g} "
                "is not MiB: pass max_cost=<MiB the device has>"
            )
        if pad_to_multiple_of not in (1, options.pad_to_multiple_of):
            raise InputError(
                f"pad_to_multiple_of={pad_to_multiple_of} differs from the sampler's "
                f"pad_to_multiple_of={options.pad_to_multiple_of}: leave it out with a sampler"
            )
        lengths = batches.lengths if lengths is None else lengths
        cost = options.cost if cost is None else cost
        max_cost = options.max_cost if max_cost is None else max_cost
        pad_to_multiple_of = options.pad_to_multiple_of
        batches = batches.epoch_plan().plan
    given = (("lengths", lengths), ("cost", cost), ("max_cost", max_cost))
    missing = [name for name, value in given if value is None]
    if missing:
        raise InputError(
            f"preflight needs {', '.join(missing)} with a plan of batches (or pass a dynbatch "
            "sampler, which has them)"
        )
    lens = check_lengths(lengths)
    fn = resolve_cost(cost)  # type: ignore[arg-type]  # None was refused above
    max_cost = check_positive_number("max_cost", max_cost)
    k = check_int("k", k, minimum=1)
    pad = check_int("pad_to_multiple_of", pad_to_multiple_of, minimum=1)
    objects = _check_restore(restore)
    table = batch_table(lens, batches, cost=fn, pad_to_multiple_of=pad)
    sizes, padded, predicted = table["batch_size"], table["max_len"], table["cost"]
    # the k highest predicted (ties: the earlier batch), then the most samples, the longest
    chosen = [int(i) for i in np.lexsort((np.arange(predicted.size), -predicted))[:k]]
    for key in (sizes, padded):
        extreme = int(np.lexsort((np.arange(predicted.size), -predicted, -key))[0])
        if extreme not in chosen:
            chosen.append(extreme)
    source = memory_source()
    snapshot = _snapshot(objects)
    try:
        step(1, int(padded.min()))  # warm-up: the optimizer's state exists from here on
        grown = _grown(objects, snapshot)
        if grown:
            raise _grown_error(objects, grown)
        runs = [_run(step, int(sizes[i]), int(padded[i]), source) for i in chosen]
    finally:
        _restore(objects, snapshot)
    checks = tuple(
        PreflightCheck(
            position=i,
            n=int(sizes[i]),
            length=int(padded[i]),
            predicted=float(predicted[i]),
            measured_mib=peak,
            seconds=secs,
            fits=peak is not None and peak <= max_cost,
        )
        for i, (peak, _, secs) in zip(chosen, runs, strict=True)
    )
    report = PreflightReport(checks=checks, max_cost=max_cost, source=source)
    if not report.ok:
        worst = report.worst
        over = [c for c in checks if not c.fits]
        peak_text = (
            "ran out of memory"
            if worst.measured_mib is None
            else f"peaked at {worst.measured_mib:.2f} MiB"
        )
        raise MemoryBudgetError(
            f"batch {worst.position} of the plan (n={worst.n}, L={worst.length}) {peak_text}, "
            f"over max_cost={max_cost:g} MiB (predicted {worst.predicted:.2f}); {len(over)} of "
            f"the {len(checks)} batches run are over. Lower max_cost, or recalibrate the "
            f"cost:\n{report}",
            report,
        )
    return report
