"""The calibrated cost, its report and step-time model, and their JSON; numpy only.

A :class:`MemoryCost` predicts the peak memory (MiB) of one training step on a
batch of ``n`` samples padded to length ``L``: ``max(floor, c + a*n*L + b*n*L**2)``,
the :class:`~dynbatch.plan.costs.PolynomialCost` of :mod:`dynbatch.plan.costs` in MiB.

>>> cost = MemoryCost(c=50.0, a=0.02, b=4e-05, floor=60.0)
>>> float(cost(8, 512))  # 50 + 0.02*8*512 + 4e-05*8*512**2
215.80608
>>> float(cost(1, 16))  # the step's fixed peak: see NOTE [ the floor ]
60.0
>>> cost.spec()
'MemoryCost(c=50.0, a=0.02, b=4e-05, floor=60.0)'
"""

from __future__ import annotations

import json
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from .._checks import (
    InputError,
    InputTypeError,
    check_choice,
    check_int,
    check_nonnegative_number,
    check_positive_number,
)
from .._files import write_text_atomic
from ..plan.costs import PolynomialCost
from ..plan.steptime import StepTimeModel, check_time_model

__all__ = [
    "PROBE_ROLES",
    "CalibrationError",
    "CalibrationReport",
    "MemoryCost",
    "Probe",
    "StepTimeModel",
    "check_time_model",
]

_FORMAT = "dynbatch.MemoryCost"
_FORMAT_VERSION = 1
#: what a probe of calibrate is for (NOTE [ the probe grid ])
PROBE_ROLES = ("floor", "fit", "held-out")
_R = TypeVar("_R")


@dataclass(frozen=True)
class Probe:
    """One measured step of :func:`~dynbatch.calibrate`.

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
                object.__setattr__(self, name, check_nonnegative_number(name, value))

    @property
    def error(self) -> float | None:
        """Relative error of the prediction, ``(predicted - measured) / measured``."""
        if self.peak_mib is None:
            return None
        return (self.predicted_mib - self.peak_mib) / self.peak_mib


@dataclass(frozen=True)
class CalibrationReport:
    """What :func:`~dynbatch.calibrate` measured and how well the fit did.

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
        if not self.probes or not all(isinstance(p, Probe) for p in self.probes):
            raise InputTypeError(f"probes must be Probe records, got probes={self.probes!r}")
        for name in ("fit_error", "held_out_error", "time_held_out_error", "seconds"):
            object.__setattr__(
                self, name, check_nonnegative_number(name, getattr(self, name), finite=False)
            )
        object.__setattr__(self, "tolerance", check_positive_number("tolerance", self.tolerance))
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
            f"largest relative error of the memory model: fit {self.fit_error:.2%}, held-out "
            f"{self.held_out_error:.2%} (tolerance {self.tolerance:.0%}); of the step-time model "
            f"on the held-out probes: {self.time_held_out_error:.1%} (its predicted seconds "
            "against the measured; timings are noisy on a busy CPU, and the memory model does "
            "not depend on them)"
        )
        return "\n".join(lines)


@dataclass(frozen=True)
class MemoryCost(PolynomialCost):
    """Predicted peak memory of a training step, in MiB: ``max(floor, c + a*n*L + b*n*L**2)``.

    ``n`` samples padded to length ``L``. The peak of a step is the larger of two phases, not
    their sum: the activations, which grow with the batch, and what is allocated once they are
    freed (such as a dense embedding gradient), the ``floor``. Made by
    :func:`~dynbatch.calibrate`, which also attaches what it measured (``report``) and a
    step-time model (``time_model``); equality, hashing, ``repr`` and :meth:`spec` depend on the
    four coefficients only.

    Args:
        c: MiB that do not depend on the batch (weights, gradients, optimizer state).
        a: MiB per token (``n * L``).
        b: MiB per token pair per sample (``n * L**2``).
        floor: the step's peak that does not grow with the batch (MiB).
        report: what :func:`~dynbatch.calibrate` measured (None: not calibrated here).
        time_model: the step time :func:`~dynbatch.calibrate` fitted on the same steps
            (seconds), for ``time_model=`` of the samplers (None: not measured).

    >>> import numpy as np
    >>> MemoryCost(c=40.0, a=0.5, b=0.0)(np.array([1, 4]), np.array([8, 8])).tolist()
    [44.0, 56.0]
    """  # NOTE [ the floor ] in dynbatch.memory.fit

    c: float
    a: float
    b: float
    floor: float = 0.0
    report: CalibrationReport | None = field(default=None, compare=False, repr=False)
    time_model: StepTimeModel | None = field(default=None, compare=False, repr=False)

    def spec(self) -> str:
        """The coefficients as stable text (for resume fingerprints): what decides the values."""
        return f"MemoryCost(c={self.c!r}, a={self.a!r}, b={self.b!r}, floor={self.floor!r})"

    def save(self, path: str | Path) -> None:
        """Write the cost, its calibration report and time model as JSON (exact round trip).

        Args:
            path: the JSON file to write (replaced whole, never left half written).
        """
        data = {
            "format": _FORMAT,
            "version": _FORMAT_VERSION,
            "c": self.c,
            "a": self.a,
            "b": self.b,
            "floor": self.floor,
            "time_model": None if self.time_model is None else _init_fields(self.time_model),
            "report": None if self.report is None else asdict(self.report),
        }
        write_text_atomic(path, json.dumps(data, indent=1) + "\n")  # NOTE [ atomic writes ]

    @classmethod
    def load(cls, path: str | Path) -> MemoryCost:
        """Read a cost written by :meth:`save`; errors name the file and what is wrong.

        Args:
            path: the JSON file :meth:`save` wrote.
        """
        path = Path(path)
        data = _read_json(path)
        try:
            time_model, report = data.get("time_model"), data.get("report")
            return cls(
                c=data["c"],
                a=data["a"],
                b=data["b"],
                floor=data["floor"],
                time_model=None if time_model is None else _record(StepTimeModel, time_model),
                report=None if report is None else _report_from_json(report),
            )
        except InputError as exc:
            raise type(exc)(f"{path}: {exc}") from None


def _read_json(path: Path) -> dict[str, Any]:
    """The JSON object of a saved MemoryCost, its format and keys checked."""
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
    except (json.JSONDecodeError, RecursionError) as exc:
        raise InputError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        raise InputError(f'{path} is not a saved MemoryCost (no "format": "{_FORMAT}")')
    version = data.get("version")
    if type(version) is not int or version != _FORMAT_VERSION:  # True == 1.0 == 1 in Python
        raise InputError(
            f"{path} is a MemoryCost of version {data.get('version')!r}; this dynbatch reads "
            f"version {_FORMAT_VERSION}: calibrate again"
        )
    missing = [k for k in ("c", "a", "b", "floor") if k not in data]
    if missing:
        raise InputError(f"{path} lacks the key(s) {', '.join(missing)}")
    return data


def _init_fields(record: Any) -> dict[str, Any]:
    """The fields a dataclass record is made from, by name."""
    return {f.name: getattr(record, f.name) for f in fields(record) if f.init}


def _record(cls: type[_R], data: Any, where: str = "time_model.") -> _R:
    """``cls(**data)`` of a JSON object, errors prefixed by where it is (``report.probes[0].``)."""
    names = {f.name for f in fields(cls) if f.init}  # type: ignore[arg-type]
    optional = {f.name for f in fields(cls) if f.init and f.default is not MISSING}  # type: ignore[arg-type]
    if not isinstance(data, dict):
        raise InputError(f"{where[:-1]} must be a JSON object, got {data!r}")
    unknown, missing = sorted(set(data) - names), sorted(names - optional - set(data))
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
    if not isinstance(data, dict):
        raise InputError(f"report must be a JSON object or null, got {data!r}")
    probes = data.get("probes")
    if not isinstance(probes, list):
        raise InputError(f"report.probes must be a list of probes, got {probes!r}")
    records = tuple(_record(Probe, p, f"report.probes[{i}].") for i, p in enumerate(probes))
    return _record(CalibrationReport, {**data, "probes": records}, "report.")


class CalibrationError(ValueError):
    """The fitted model misses held-out probes by more than ``tolerance``, or the probes
    cannot pin it down. ``report`` and ``cost`` hold what was measured and fitted.

    Args:
        message: what went wrong, and what to try.
        report: what was measured (None: nothing yet).
        cost: the cost fitted (None: none could be).
    """

    def __init__(
        self,
        message: str,
        report: CalibrationReport | None = None,
        cost: MemoryCost | None = None,
    ) -> None:
        super().__init__(message)
        self.report = report
        self.cost = cost
