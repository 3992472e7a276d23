"""A step time of two lengths, for (source, target) pairs: numpy only.

An encoder–decoder's step grows with both padded lengths of its batch, as its cost does
(NOTE [ costs of pairs ] in :mod:`dynbatch.plan.pair_costs`): :class:`PairStepTimeModel`
prices a step of ``n`` pairs at its longest source ``Ls`` and longest target ``Lt``. The time
split (:mod:`dynbatch.plan.splits`) cuts the updates of pairs at it, and
:func:`check_step_time` is what the options check a time model with: a step time of one
length (:class:`~dynbatch.plan.steptime.StepTimeModel`) or of two.

NOTE [ a step time of two lengths ]
    A step of ``n`` pairs costs about ``c + n·(a_s·Ls + a_t·Lt + b_s·Ls² +
    b_t·Lt² + cross·Ls·Lt)`` seconds: a fixed part ``c`` (kernel launches,
    the optimizer), per padded token on each side (the encoder's and the
    decoder's embeddings and feed-forward layers; the decoder's is larger,
    it has the cross-attention's projections too), each side's
    self-attention, and the decoder's cross-attention over the source. The
    coefficients are apart per side, since an encoder and a decoder of one
    model cost differently per token. Every coefficient is >= 0, so the time
    never decreases in ``n``, ``Ls`` or ``Lt``: what lets the split charge a
    micro-step at the longest source and the longest target of the samples up
    to its end (an upper bound of its own).

    A step time of one length, ``(n, L)``, given for pairs is refused by name,
    not priced on a pair's tokens: ``L = Ls + Lt`` would charge the
    attention ``(Ls + Lt)²``, twice the cross term, and no side apart. Its
    flat case (``a = b = 0``) is accepted with ``group_by_length`` (each
    update whole), where no length is read.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

import numpy as np

from .._checks import (
    InputError,
    InputTypeError,
    check_nonnegative_number,
    check_positive_number,
)
from .costs import cost_spec, pair_form, resolve_cost
from .pair_costs import per_pair
from .steptime import StepTimeModel, check_model_error, check_time_model

__all__ = [
    "PAIR_FLAT_STEP",
    "KneeWithin",
    "PairStepTimeModel",
    "check_step_time",
    "refuse_time_model_for",
    "step_seconds",
]

#: The coefficients of :class:`PairStepTimeModel`, in the order its text gives them.
COEFFICIENTS = ("c", "a_s", "a_t", "b_s", "b_t", "cross")


@dataclass(frozen=True)
class PairStepTimeModel:
    """Seconds of one training step of (source, target) pairs:
    ``c + n*(a_s*Ls + a_t*Lt + b_s*Ls**2 + b_t*Lt**2 + cross*Ls*Lt)``.

    >>> model = PairStepTimeModel(c=0.01, a_s=1e-4, a_t=2e-4)
    >>> round(float(model(10, 30, 20)), 6)  # 0.01 + 10 * (30e-4 + 40e-4)
    0.08

    Args:
        c: seconds of a step whatever its size (kernel launches, the optimizer).
        a_s: seconds per padded source token (the encoder's per-token layers).
        a_t: seconds per padded target token (the decoder's).
        b_s: seconds per padded source token per source token (the encoder's attention).
        b_t: seconds per padded target token per target token (the decoder's attention).
        cross: seconds per padded target token per source token (the cross-attention).
        error: the model's typical relative error on measured steps (0: taken as exact): the
            planner does not trust a cut of an update predicted to save less than that.
    """  # NOTE [ a step time of two lengths ]

    c: float
    a_s: float = 0.0
    a_t: float = 0.0
    b_s: float = 0.0
    b_t: float = 0.0
    cross: float = 0.0
    error: float = 0.0
    #: it prices two lengths, (source, target), as a cost of pairs does
    takes_pairs: ClassVar[bool] = True

    def __post_init__(self) -> None:
        owner = "PairStepTimeModel coefficient"
        for name in COEFFICIENTS:
            value = check_nonnegative_number(name, getattr(self, name), owner=owner)
            object.__setattr__(self, name, value)
        object.__setattr__(self, "error", check_model_error("PairStepTimeModel", self.error))

    def __call__(self, n: Any, source: Any, target: Any) -> Any:
        return self.c + np.multiply(np.asarray(n, dtype=np.float64), per_pair(self, source, target))

    @property
    def flat(self) -> bool:
        """Whether a step costs ``c`` at any size (each update then runs whole)."""
        return all(getattr(self, name) == 0 for name in COEFFICIENTS[1:])

    def fingerprint(self) -> list[Any]:
        """Its coefficients and error, JSON-safe, for the resume fingerprint."""
        return ["pairs", *(getattr(self, f.name) for f in fields(self))]


#: A step of pairs that costs the same at any size: each update runs whole (a GPU below its
#: knee); the pairs' :data:`~dynbatch.plan.steptime.FLAT_STEP`.
PAIR_FLAT_STEP = PairStepTimeModel(c=1.0)


@dataclass(frozen=True)
class KneeWithin:
    """``max(growth(n, Ls, Lt) / knee, memory(n, Ls, Lt) / target)``: a batch of pairs below
    the knee of a step time of two lengths and within a memory target (at most 1 within both).
    :func:`~dynbatch.fill_device`'s cost of pairs, the two-length form of its
    ``WithinBudgets(((MixedCost(a, b), knee), (memory, target)))`` (NOTE [ filling the device ]
    in :mod:`dynbatch.plan.recipes`).

    >>> both = KneeWithin(PairStepTimeModel(c=0.0, a_s=0.1, a_t=0.2), 2.0, "linear", 100.0)
    >>> float(both(2, 3, 4))  # the step grows by 2*(0.3 + 0.8) = 2.2 s; 14 tokens of 100
    1.1

    Args:
        growth: the part of the step time that grows with the batch (``c`` 0).
        knee: the seconds ``growth`` may reach.
        memory: a cost of pairs, ``cost(n, Ls, Lt)``, or a named one (in its form of pairs).
        target: what ``memory`` may reach.
    """

    growth: PairStepTimeModel
    knee: float
    memory: Any
    target: float
    #: it prices two lengths, (source, target): :func:`~dynbatch.plan.costs.takes_pairs`
    takes_pairs: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if not isinstance(self.growth, PairStepTimeModel) or self.growth.c != 0:
            raise InputTypeError(
                "KneeWithin growth must be the growing part of a step time of pairs, a "
                f"PairStepTimeModel with c=0, got growth={self.growth!r}"
            )
        object.__setattr__(self, "memory", pair_form(resolve_cost(self.memory), "memory"))
        for name in ("knee", "target"):
            object.__setattr__(self, name, check_positive_number(name, getattr(self, name)))

    def __call__(self, n: Any, source: Any, target: Any) -> Any:
        grows = np.asarray(self.growth(n, source, target), dtype=np.float64) / self.knee
        within = np.asarray(self.memory(n, source, target), dtype=np.float64) / self.target
        return np.maximum(grows, within)

    def spec(self) -> str:
        """The growth, the memory's spec and both budgets (the resume fingerprint)."""
        memory = cost_spec(self.memory) or "<callable>"
        return f"{self.growth!r}<={self.knee!r};{memory}<={self.target!r}"


def check_step_time(
    value: Any, name: str = "time_model"
) -> StepTimeModel | PairStepTimeModel | None:
    """``value`` as a step time: a :class:`PairStepTimeModel` as it is, six numbers
    ``"c,a_s,a_t,b_s,b_t,cross"`` as one, else one of one length
    (:func:`~dynbatch.plan.steptime.check_time_model`: ``c``, ``a``, ``b`` or ``"c,a,b"``).

    >>> check_step_time("0.04,1e-6,2e-6,0,0,0")
    PairStepTimeModel(c=0.04, a_s=1e-06, a_t=2e-06, b_s=0.0, b_t=0.0, cross=0.0, error=0.0)
    >>> check_step_time("0.04,1e-6,0")
    StepTimeModel(c=0.04, a=1e-06, b=0.0, error=0.0)
    """
    if isinstance(value, PairStepTimeModel):
        return value
    if isinstance(value, str) and value.count(",") not in (2, len(COEFFICIENTS) - 1):
        raise InputError(
            f"{name} as text must be three numbers 'c,a,b' (a step time of one length, "
            "seconds = c + n*L*(a + b*L)) or six 'c,a_s,a_t,b_s,b_t,cross' (of (source, "
            f"target) pairs), got {name}={value!r}"
        )
    if isinstance(value, str) and value.count(",") == len(COEFFICIENTS) - 1:
        try:
            numbers_ = [float(p) for p in value.split(",")]
        except ValueError:
            raise InputError(
                f"{name} as text of pairs must be six numbers 'c,a_s,a_t,b_s,b_t,cross' "
                f"(seconds = c + n*(a_s*Ls + a_t*Lt + b_s*Ls^2 + b_t*Lt^2 + cross*Ls*Lt)), got "
                f"{name}={value!r}"
            ) from None
        try:
            return PairStepTimeModel(**dict(zip(COEFFICIENTS, numbers_, strict=True)))
        except InputError as exc:
            raise InputError(f"{name}={value!r}: {exc}") from None
    return check_time_model(value, name)


def refuse_time_model_for(
    time_model: Any, pairs: bool, where: str, *, flat_ok: bool = False, name: str = "time_model"
) -> None:
    """Refuse, by name, a step time whose lengths are not the lengths': one of one length for
    (source, target) pairs (but a flat one where ``flat_ok``: no length is read), or one of
    pairs for one length a sample (NOTE [ a step time of two lengths ])."""
    if time_model is None:
        return
    # text is read first: its kind is its count (a callable step time stays as it is)
    model = check_step_time(time_model, name) if isinstance(time_model, str) else time_model
    if not pairs and isinstance(model, PairStepTimeModel):
        raise InputError(
            f"{where}: {name}={time_model!r} is a step time of (source, target) pairs, "
            "(n, Ls, Lt), and the lengths are one per sample: pass a StepTimeModel(c, a, b) "
            "(or 'c,a,b'), or give the lengths as an [N, 2] array of pairs"
        )
    flat = getattr(model, "a", None) == 0 and getattr(model, "b", None) == 0
    if pairs and not isinstance(model, PairStepTimeModel) and not (flat_ok and flat):
        raise InputError(
            f"{where}: {name}={time_model!r} is a step time of one length, (n, L), and the "
            "lengths are (source, target) pairs: pass a step time of two lengths, "
            "dynbatch.plan.pair_steptime.PairStepTimeModel(c, a_s, a_t, b_s, b_t, cross) (or "
            "'c,a_s,a_t,b_s,b_t,cross'), or leave it out (the padding-free split)"
        )


def step_seconds(model: Any, n: Any, longest: Any) -> Any:
    """``model``'s seconds for steps of ``n`` samples at ``longest``: a length each, or for a
    step time of pairs a row of the longest source and the longest target (last axis)."""
    if isinstance(model, PairStepTimeModel):
        longest = np.asarray(longest)
        return model(n, longest[..., 0], longest[..., 1])
    return model(n, longest)
