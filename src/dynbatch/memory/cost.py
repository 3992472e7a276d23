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
from typing import Any, ClassVar, TypeVar

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
from ..plan.pair_costs import PAIR_TERMS, PairPolynomialCost
from ..plan.pair_steptime import PairStepTimeModel
from ..plan.steptime import StepTimeModel, check_time_model

__all__ = [
    "PROBE_ROLES",
    "CalibrationError",
    "CalibrationReport",
    "MemoryCost",
    "PairMemoryCost",
    "Probe",
    "StepTimeModel",
    "check_time_model",
    "load_cost",
]

_FORMAT_VERSION = 1
#: what a probe of calibrate is for (NOTE [ the probe grid ])
PROBE_ROLES = ("floor", "fit", "held-out")
_R = TypeVar("_R")
_C = TypeVar("_C", bound="_Saved")


@dataclass(frozen=True)
class Probe:
    """One measured step of :func:`~dynbatch.calibrate`.

    ``role`` is ``"floor"`` (the smallest shape, see NOTE [ the floor ]),
    ``"fit"`` or ``"held-out"``; ``peak_mib`` is None when the step ran out of
    memory (the shape does not fit); ``resident_mib`` is what was allocated
    before the step; ``predicted_mib`` is the fitted model's value. A probe of
    (source, target) pairs has ``length`` the source's and ``target_length`` the
    target's (None: one length).
    """

    n: int
    length: int
    role: str
    peak_mib: float | None
    resident_mib: float
    seconds: float
    predicted_mib: float
    target_length: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "n", check_int("n", self.n, minimum=1))
        object.__setattr__(self, "length", check_int("length", self.length, minimum=1))
        target = check_int("target_length", self.target_length, minimum=1, allow_none=True)
        object.__setattr__(self, "target_length", target)
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
    largest probed peak; ``time_held_out_error`` is the same for step time. A calibration
    of (source, target) pairs has ``max_len`` and ``min_len`` the source's and
    ``max_target_len`` and ``min_target_len`` the target's (None: one length), and
    ``max_tokens`` counts both sides, ``n * (Ls + Lt)``.
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
    max_target_len: int | None = None
    min_target_len: int | None = None

    @property
    def pairs(self) -> bool:
        """Whether the probes were of (source, target) pairs."""
        return self.max_target_len is not None

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
        optional = ("max_batch_size", "max_target_len", "min_target_len")
        for name in ("max_len", "min_len", "max_tokens", *optional):
            value = check_int(name, getattr(self, name), minimum=1, allow_none=name in optional)
            object.__setattr__(self, name, value)
        if (self.max_target_len is None) != (self.min_target_len is None):
            raise InputError(
                "max_target_len and min_target_len are both given (pairs) or both None, got "
                f"max_target_len={self.max_target_len}, min_target_len={self.min_target_len}"
            )
        sides = (("min_len", "max_len"), ("min_target_len", "max_target_len"))
        for low, high in sides[: 1 + self.pairs]:
            if getattr(self, low) > getattr(self, high):
                raise InputError(
                    f"{low} must be at most {high}={getattr(self, high)}, got "
                    f"{low}={getattr(self, low)}"
                )

    def __str__(self) -> str:
        longest = (self.max_len, self.max_target_len) if self.pairs else self.max_len
        lengths = f"{'Ls':>5} {'Lt':>5}" if self.pairs else f"{'L':>5}"
        lines = [
            f"calibrated on {self.device} ({self.source}, paddle {self.paddle_version}) in "
            f"{self.seconds:.1f} s; max_len={longest}, max_batch_size={self.max_batch_size}",
            f"{'role':<8} {'n':>6} {lengths} {'measured MiB':>13} {'predicted':>10} "
            f"{'error':>7} {'step s':>7}",
        ]
        for p in self.probes:
            measured = "out of mem" if p.peak_mib is None else f"{p.peak_mib:.2f}"
            error = "" if p.error is None else f"{p.error:+.2%}"
            shape = f"{p.length:>5} {p.target_length:>5}" if self.pairs else f"{p.length:>5}"
            lines.append(
                f"{p.role:<8} {p.n:>6} {shape} {measured:>13} {p.predicted_mib:>10.2f} "
                f"{error:>7} {p.seconds:>7.3f}"
            )
        timed = (
            f"of the step-time model on the held-out probes: {self.time_held_out_error:.1%} "
            "(its predicted seconds against the measured; timings are noisy on a busy CPU, and "
            "the memory model does not depend on them)"
        )
        lines.append(
            f"largest relative error of the memory model: fit {self.fit_error:.2%}, held-out "
            f"{self.held_out_error:.2%} (tolerance {self.tolerance:.0%}); {timed}"
        )
        return "\n".join(lines)


class _Saved:
    """Saving and loading a calibrated cost as JSON: its coefficients (``COEFFICIENTS``), its report
    and time model, under the format ``dynbatch.<class name>``."""

    #: the names of the cost's coefficients, in its order: what is saved
    COEFFICIENTS: ClassVar[tuple[str, ...]]
    #: the class of its step time, of one length or of pairs: what ``time_model`` is read as
    TIME_MODEL: ClassVar[type[StepTimeModel] | type[PairStepTimeModel]]
    report: CalibrationReport | None
    time_model: StepTimeModel | PairStepTimeModel | None

    def _check_time_model(self) -> None:
        """Refuse a step time of the other kind: it would be saved, and never read back."""
        model = self.time_model
        if model is None or isinstance(model, self.TIME_MODEL):
            return
        ours, theirs = (
            ("pairs", "one length")
            if self.TIME_MODEL is PairStepTimeModel
            else ("one length", "pairs")
        )
        raise InputError(
            f"{type(self).__name__}: time_model={model!r} is a step time of {theirs}; a cost "
            f"of {ours} takes a {self.TIME_MODEL.__name__} (or time_model=None)"
        )

    def save(self, path: str | Path) -> None:
        """Write the cost, its calibration report and time model as JSON (exact round trip).

        Args:
            path: the JSON file to write (replaced whole, never left half written).
        """
        data = {
            "format": f"dynbatch.{type(self).__name__}",
            "version": _FORMAT_VERSION,
            **{key: getattr(self, key) for key in self.COEFFICIENTS},
            "time_model": None if self.time_model is None else _init_fields(self.time_model),
            "report": None if self.report is None else _report_json(self.report),
        }
        write_text_atomic(path, json.dumps(data, indent=1) + "\n")  # NOTE [ atomic writes ]

    @classmethod
    def load(cls: type[_C], path: str | Path) -> _C:
        """Read a cost written by :meth:`save`; errors name the file and what is wrong.

        Args:
            path: the JSON file :meth:`save` wrote.
        """
        path = Path(path)
        data = _read_json(path, cls.__name__, cls.COEFFICIENTS)
        try:
            time_model, report = data.get("time_model"), data.get("report")
            return cls(  # type: ignore[call-arg]  # the dataclass under the mixin takes them
                **{key: data[key] for key in cls.COEFFICIENTS},
                time_model=None if time_model is None else _record(cls.TIME_MODEL, time_model),
                report=None if report is None else _report_from_json(report),
            )
        except InputError as exc:
            raise type(exc)(f"{path}: {exc}") from None


@dataclass(frozen=True)
class MemoryCost(PolynomialCost, _Saved):
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
    COEFFICIENTS: ClassVar[tuple[str, ...]] = ("c", "a", "b", "floor")
    TIME_MODEL: ClassVar[type[StepTimeModel]] = StepTimeModel

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_time_model()

    def spec(self) -> str:
        """The coefficients as stable text (for resume fingerprints): what decides the values."""
        return f"MemoryCost(c={self.c!r}, a={self.a!r}, b={self.b!r}, floor={self.floor!r})"


@dataclass(frozen=True)
class PairMemoryCost(PairPolynomialCost, _Saved):
    """Predicted peak memory (MiB) of a training step on (source, target) pairs.

    ``max(floor, c + n*(a_s*Ls + a_t*Lt + b_s*Ls**2 + b_t*Lt**2 + cross*Ls*Lt))`` for ``n``
    pairs, sources padded to ``Ls`` and targets to ``Lt``: each side's tokens and
    self-attention, and the cross-attention (:mod:`dynbatch.memory.pair_fit` says why these
    five terms). A cost of pairs, ``cost=`` of the planner, the samplers
    and :func:`~dynbatch.fill_device` on ``[N, 2]`` lengths, so ``max_cost`` is MiB. Made by
    :func:`~dynbatch.calibrate` given ``max_len=(Ls, Lt)``, which attaches what it measured
    (``report``) and the step time of two lengths fitted on the same steps (``time_model``).
    Equality, hashing, ``repr`` and :meth:`spec` depend on the seven coefficients only.

    Args:
        c: MiB that do not depend on the batch (weights, gradients, optimizer state).
        a_s: MiB per source token (``n * Ls``).
        a_t: MiB per target token (``n * Lt``).
        b_s: MiB per token pair within the source (``n * Ls**2``: self-attention).
        b_t: MiB per token pair within the target (``n * Lt**2``).
        cross: MiB per (source token, target token) pair (``n * Ls * Lt``: cross-attention).
        floor: the step's peak that does not grow with the batch (MiB).
        report: what :func:`~dynbatch.calibrate` measured (None: not calibrated here).
        time_model: the step time of two lengths :func:`~dynbatch.calibrate` fitted on the
            same steps (seconds), a
            :class:`~dynbatch.plan.pair_steptime.PairStepTimeModel` for ``time_model=`` of
            the samplers and :func:`~dynbatch.fill_device` on pairs (None: not measured).

    >>> cost = PairMemoryCost(c=40.0, a_s=0.5, a_t=1.0, b_s=0.0, b_t=0.0, cross=0.0)
    >>> float(cost(2, 8, 4))  # 40 + 2 * (0.5*8 + 1.0*4)
    56.0
    """  # NOTE [ the fit of pairs ] in dynbatch.memory.pair_fit

    report: CalibrationReport | None = field(default=None, compare=False, repr=False)
    time_model: PairStepTimeModel | None = field(default=None, compare=False, repr=False)
    COEFFICIENTS: ClassVar[tuple[str, ...]] = ("c", *PAIR_TERMS, "floor")
    TIME_MODEL: ClassVar[type[PairStepTimeModel]] = PairStepTimeModel

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_time_model()

    def spec(self) -> str:
        """The coefficients as stable text (for resume fingerprints): what decides the values."""
        values = ", ".join(f"{key}={getattr(self, key)!r}" for key in self.COEFFICIENTS)
        return f"PairMemoryCost({values})"


def load_cost(path: str | Path) -> MemoryCost | PairMemoryCost:
    """A cost :func:`~dynbatch.calibrate` saved, of one length or of pairs, whichever the file
    holds (``dynbatch stats --cost-file``).

    Args:
        path: the JSON file :meth:`MemoryCost.save` or :meth:`PairMemoryCost.save` wrote.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        data = None  # MemoryCost.load names what is wrong with the file
    pairs = isinstance(data, dict) and data.get("format") == "dynbatch.PairMemoryCost"
    return PairMemoryCost.load(path) if pairs else MemoryCost.load(path)


def _read_json(path: Path, name: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """The JSON object of a saved cost of class ``name``, its format and ``keys`` checked."""
    form = f"dynbatch.{name}"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(f"{name} file not found: {path}") from None
    except IsADirectoryError:
        raise InputError(
            f"{name} file {path} is a directory: give the JSON file {name}.save wrote"
        ) from None
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start}), so not a "
            f"{name} saved by {name}.save"
        ) from None
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise InputError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != form:
        raise InputError(f'{path} is not a saved {name} (no "format": "{form}")')
    version = data.get("version")
    if type(version) is not int or version != _FORMAT_VERSION:  # True == 1.0 == 1 in Python
        raise InputError(
            f"{path} is a {name} of version {data.get('version')!r}; this dynbatch reads "
            f"version {_FORMAT_VERSION}: calibrate again"
        )
    missing = [k for k in keys if k not in data]
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


def _report_json(report: CalibrationReport) -> dict[str, Any]:
    """The report as a JSON object; one of one length without the keys of pairs, as it was
    written before pairs (their absence reads as None)."""
    data = asdict(report)
    if not report.pairs:
        del data["max_target_len"], data["min_target_len"]
        for probe in data["probes"]:
            del probe["target_length"]
    return data


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
        cost: MemoryCost | PairMemoryCost | None = None,
    ) -> None:
        super().__init__(message)
        self.report = report
        self.cost = cost
