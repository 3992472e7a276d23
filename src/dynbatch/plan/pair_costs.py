"""Costs of (source, target) pairs, and what every callable cost is probed on: numpy only.

An encoder–decoder's batch has two padded lengths, and :class:`PairCost` prices both
(NOTE [ costs of pairs ]); a user's ``cost(n, Ls, Lt)`` is probed as a one-length callable
is (NOTE [ probing a callable cost ] in :mod:`dynbatch.plan.costs`). Named costs have a
two-length form too: :func:`~dynbatch.plan.costs.pair_form`, beside the one-length costs.
This module sits below :mod:`dynbatch.plan.costs`, which resolves a callable of three
arguments with :func:`resolve_pair_callable`.

>>> PairCost()(2, 3, 4)  # 2 * (3**2 + 4**2 + 3*4)
74.0

NOTE [ costs of pairs ]
    An encoder–decoder's batch has two padded lengths, its longest source
    ``Ls`` and its longest target ``Lt``, and its memory and time grow with
    both: each term is one part of the model, charged on the padded batch
    as the one-length costs are.

    * ``a`` per token on either side, ``n·(Ls + Lt)``: embeddings and the
      feed-forward layers, the padded tokens of both sides;
    * ``b`` per pair of tokens within one side: the encoder's
      self-attention ``n·Ls²`` and the decoder's ``n·Lt²``;
    * ``cross`` per target token and source token: the decoder's
      cross-attention, ``n·Ls·Lt``.

    The default, ``a=0, b=1, cross=1``, is the study's rule ``n·L²`` on each
    side plus the cross term, as :class:`QuadraticCost` is for one length.
    Every named cost has this form for pairs (:func:`~dynbatch.plan.costs.pair_form`):
    ``"quadratic"`` is the default, ``"linear"`` the padded tokens of both
    sides (``a=1``), ``"mixed:A,B"`` ``a=A, b=cross=B``. Every coefficient
    is >= 0, so the cost never decreases in ``n``, ``Ls`` or ``Lt``, which is
    what lets the planner charge a batch by its longest source and its
    longest target.
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from .._checks import InputError, InputTypeError, check_nonnegative_number

__all__ = [
    "PAIR_TERMS",
    "PROBE_L",
    "PROBE_N",
    "PairCallable",
    "PairCost",
    "PairCostFn",
    "PairPolynomialCost",
    "is_number",
    "per_pair",
    "probe_grid",
    "required_arguments",
    "resolve_pair_callable",
    "signature_problem",
    "takes_pairs",
]

#: A vectorised cost of pairs: arrays (or scalars) ``n``, ``Ls`` and ``Lt`` in, float64 out.
PairCostFn = Callable[[Any, Any, Any], Any]

#: Where a callable cost is probed (NOTE [ probing a callable cost ]): batch sizes and
#: lengths from 1 to far past any real batch, doubling.
PROBE_N = np.array([1, 2, 3, *(2**k for k in range(2, 17))], dtype=np.int64)
PROBE_L = np.array([1, 2, 3, *(2**k for k in range(2, 16))], dtype=np.int64)


def is_number(value: Any) -> bool:
    """Whether ``value`` is a real number (a size-1 array's item counts), never a bool."""
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(-1)[0]
    return isinstance(value, (numbers.Real, np.number)) and not isinstance(value, (bool, np.bool_))


@dataclass(frozen=True)
class PairCost:
    """``n * (a*(Ls + Lt) + b*(Ls**2 + Lt**2) + cross*Ls*Lt)``: a batch of (source, target) pairs.

    An encoder–decoder's batch has two padded lengths, its longest source ``Ls`` and its
    longest target ``Lt``: ``a`` weighs the tokens of both sides (embeddings, feed-forward),
    ``b`` each side's self-attention (``Ls²``, ``Lt²``) and ``cross`` the decoder's
    cross-attention (``Ls·Lt``). The default is the study's rule ``n·L²`` on each side plus the
    cross term; ``"linear"`` is ``a=1, b=cross=0`` and ``"mixed:A,B"`` is ``a=A, b=cross=B``.

    Args:
        a: weight of the per-token terms (both sides).
        b: weight of the self-attention terms (each side's length squared).
        cross: weight of the cross-attention term (source length x target length).

    >>> PairCost(a=1, b=0, cross=0)(np.array([2, 4]), np.array([3, 3]), np.array([5, 1])).tolist()
    [16.0, 16.0]
    """

    a: float = 0.0
    b: float = 1.0
    cross: float = 1.0
    #: it prices two lengths, (source, target): :func:`takes_pairs`
    takes_pairs: ClassVar[bool] = True

    def __post_init__(self) -> None:
        for name in ("a", "b", "cross"):
            value = check_nonnegative_number(name, getattr(self, name), owner="PairCost")
            object.__setattr__(self, name, value)
        if self.a == self.b == self.cross == 0:
            raise InputError(
                "PairCost needs a > 0, b > 0 or cross > 0 (a cost that grows with the batch), "
                "got a=0, b=0 and cross=0"
            )

    def __call__(self, n: Any, source: Any, target: Any) -> Any:
        ls = np.asarray(source, dtype=np.float64)
        lt = np.asarray(target, dtype=np.float64)
        per_sample = self.cross * ls * lt if self.cross else np.zeros(np.broadcast(ls, lt).shape)
        if self.b:
            per_sample = per_sample + self.b * (ls * ls + lt * lt)
        if self.a:
            per_sample = per_sample + self.a * (ls + lt)
        return np.multiply(n, per_sample)


@dataclass(frozen=True)
class PairPolynomialCost:
    """The fitted formula of two lengths: ``max(floor, c + n*(a_s*Ls + a_t*Lt + b_s*Ls**2 +
    b_t*Lt**2 + cross*Ls*Lt))``.

    The form of :class:`PairCost` (NOTE [ costs of pairs ]) with a coefficient per side and
    the constant and floor of :class:`~dynbatch.plan.costs.PolynomialCost`: an encoder and a
    decoder differ (the decoder's output layer grows with the target only), so each side has
    its own. :class:`~dynbatch.PairMemoryCost` (MiB) is this formula. Every coefficient is a
    finite number >= 0 and one of the growing ones is > 0, so the cost is nondecreasing in
    ``n``, ``Ls`` and ``Lt``, and grows with the batch.

    >>> float(PairPolynomialCost(c=1, a_s=0, a_t=1, b_s=0, b_t=0, cross=0.5)(2, 4, 3))
    19.0
    """

    c: float
    a_s: float
    a_t: float
    b_s: float
    b_t: float
    cross: float
    floor: float = 0.0
    #: it prices two lengths, (source, target): :func:`takes_pairs`
    takes_pairs: ClassVar[bool] = True
    #: a cost that must grow with the batch (one of :data:`PAIR_TERMS` > 0)
    grows: ClassVar[bool] = True

    def __post_init__(self) -> None:
        owner = type(self).__name__
        for name in ("c", *PAIR_TERMS, "floor"):
            value = check_nonnegative_number(name, getattr(self, name), owner=owner)
            object.__setattr__(self, name, value)
        if self.grows and not any(getattr(self, name) for name in PAIR_TERMS):
            raise InputError(
                f"{owner} needs one of {', '.join(PAIR_TERMS)} > 0 (a cost that grows with the "
                "batch), got all 0"
            )

    def __call__(self, n: Any, source: Any, target: Any) -> Any:
        value = self.c + np.multiply(n, per_pair(self, source, target))
        return np.maximum(self.floor, value) if self.floor else value


#: The coefficients of :class:`PairPolynomialCost` that grow with the batch, in its order.
PAIR_TERMS = ("a_s", "a_t", "b_s", "b_t", "cross")


def per_pair(model: Any, source: Any, target: Any) -> Any:
    """``a_s*Ls + a_t*Lt + b_s*Ls**2 + b_t*Lt**2 + cross*Ls*Lt`` with ``model``'s coefficients
    (:data:`PAIR_TERMS`): what one pair adds, times ``n``, to a cost of pairs or a step time of
    pairs (:class:`~dynbatch.plan.pair_steptime.PairStepTimeModel`): one formula for both.

    >>> float(per_pair(PairPolynomialCost(c=0, a_s=1, a_t=0, b_s=0, b_t=0, cross=0.5), 4, 2))
    8.0
    """
    ls = np.asarray(source, dtype=np.float64)
    lt = np.asarray(target, dtype=np.float64)
    return (
        model.a_s * ls
        + model.a_t * lt
        + model.b_s * ls * ls
        + model.b_t * lt * lt
        + model.cross * ls * lt
    )


def _arguments(fn: Any) -> tuple[int, float, list[str]] | None:
    """``(required, most, keyword_only)``: the positional arguments ``fn`` requires and takes
    at most (inf with ``*args``), and the keyword-only ones it requires; None where its
    signature cannot be read. A ufunc (``np.frompyfunc(f, 3, 1)``) takes exactly ``nin``."""
    if isinstance(fn, np.ufunc):
        return fn.nin, fn.nin, []
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    positional = [
        p
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    required = sum(1 for p in positional if p.default is inspect.Parameter.empty)
    varargs = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)
    keyword = [
        p.name
        for p in params
        if p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is inspect.Parameter.empty
    ]
    return required, math.inf if varargs else len(positional), keyword


def required_arguments(fn: Any) -> int | None:
    """How many positional arguments ``fn`` requires (a ufunc: its inputs); None where its
    signature cannot be read or it takes ``*args``.

    >>> required_arguments(lambda n, Ls, Lt: n), required_arguments(lambda *a: 0)
    (3, None)
    """
    found = _arguments(fn)
    if found is None or math.isinf(found[1]):
        return None
    return found[0]


def signature_problem(fn: Any) -> str | None:
    """Why ``fn`` cannot be called as ``cost(n, L)`` nor as ``cost(n, Ls, Lt)``, the two forms
    of a cost; None where it can be, or its signature cannot be read.

    >>> signature_problem(lambda n, L: 0), signature_problem(lambda n, Ls, Lt, x: 0)
    (None, 'requires 4 positional arguments')
    """
    found = _arguments(fn)
    if found is None:
        return None
    required, most, keyword = found
    if keyword:
        return f"requires the keyword-only argument(s) {', '.join(keyword)}"
    if any(required <= k <= most for k in (2, 3)):
        return None
    if required > 3:
        return f"requires {required} positional arguments"
    return f"takes at most {int(most)} positional argument(s)"


class PairCallable:
    """A user's ``cost(n, Ls, Lt)`` as :func:`resolve_pair_callable` returns it: lifted to
    arrays element by element when it only takes scalars (NOTE [ costs of pairs ])."""

    takes_pairs: ClassVar[bool] = True

    def __init__(self, fn: Callable[..., Any], vectorised: bool) -> None:
        self.fn = fn
        self.vectorised = vectorised
        self._ufunc = np.frompyfunc(fn, 3, 1)

    def __call__(self, n: Any, source: Any, target: Any) -> Any:
        if self.vectorised:
            return self.fn(n, source, target)
        out = self._ufunc(n, source, target)
        try:
            return np.asarray(out, dtype=np.float64)
        except (TypeError, ValueError):
            bad = next(v for v in np.asarray(out, dtype=object).reshape(-1) if not is_number(v))
            raise InputTypeError(
                f"cost must return a number for every (n, Ls, Lt), got {bad!r} from "
                f"cost={self.fn!r}"
            ) from None

    def __repr__(self) -> str:
        return repr(self.fn)


def resolve_pair_callable(cost: Callable[..., Any]) -> PairCallable:
    """``cost(n, Ls, Lt)``, probed as a callable of one length is: a finite number >= 0 at
    ``(1, 2, 3)``, never negative nor decreasing on a grid of ``n`` by ``Ls`` by ``Lt``
    (NOTE [ probing a callable cost ] in :mod:`dynbatch.plan.costs`).

    >>> resolve_pair_callable(lambda n, Ls, Lt: n * (Ls + Lt))(2, 3, 4)
    14
    >>> resolve_pair_callable(lambda n, Ls, Lt: n * Ls / Lt)
    Traceback (most recent call last):
    ...
    dynbatch.errors.InputError: cost must be nondecreasing in Lt (more or longer samples ...
    """
    try:
        single = cost(1, 2, 3)
    except Exception as exc:
        raise InputTypeError(
            f"cost(1, 2, 3) raised {exc!r}; cost={cost!r} must take (n, Ls, Lt)"
        ) from exc
    if not is_number(single):
        raise InputTypeError(f"cost must return a number, but cost(1, 2, 3) returned {single!r}")
    value = float(np.asarray(single).reshape(-1)[0])
    if not (math.isfinite(value) and value >= 0):
        raise InputError(f"cost must return a finite number >= 0, but cost(1, 2, 3)={value!r}")
    vectorised = False
    try:
        out = np.asarray(cost(np.array([1, 2]), np.array([3, 4]), np.array([5, 6])))
        vectorised = out.shape == (2,) and np.issubdtype(out.dtype, np.number)
    except Exception:
        pass
    resolved = PairCallable(cost, vectorised)
    _check_pair_grows(cost, resolved)
    return resolved


def _check_pair_grows(cost: Callable[..., Any], resolved: PairCallable) -> None:
    """Refuse a callable ``cost(n, Ls, Lt)`` that is negative, NaN or decreasing at the probed
    points of :data:`PROBE_N` by :data:`PROBE_L` by :data:`PROBE_L` (points where it raises
    are left out, as for one length)."""
    grid = np.meshgrid(PROBE_N, PROBE_L, PROBE_L, indexing="ij")
    values, ok = probe_grid(cost, resolved, grid, "(n, Ls, Lt)")
    for axis, name in ((0, "n"), (1, "Ls"), (2, "Lt")):
        step = [slice(None)] * 3
        step[axis] = slice(1, None)
        back = [slice(None)] * 3
        back[axis] = slice(None, -1)
        after, before = values[tuple(step)], values[tuple(back)]
        drop = ok[tuple(step)] & ok[tuple(back)] & (after < before * (1 - 1e-9))
        if drop.any():
            k = tuple(np.argwhere(drop)[0])
            low = tuple(int(g[tuple(back)][k]) for g in grid)
            high = tuple(int(g[tuple(step)][k]) for g in grid)
            raise InputError(
                f"cost must be nondecreasing in {name} (more or longer samples never cost less), "
                f"but cost{low}={before[k]:g} > cost{high}={after[k]:g} (cost={cost!r})"
            )


def probe_grid(
    cost: Callable[..., Any], resolved: Callable[..., Any], grid: list[Any], form: str
) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """``cost`` at every point of ``grid`` (``np.meshgrid(..., indexing="ij")``), and which
    points it did not raise at, for one length and for pairs alike
    (NOTE [ probing a callable cost ] in :mod:`dynbatch.plan.costs`).

    ``resolved`` is tried on the whole grid at once; where it raises or does not broadcast,
    ``cost`` is called point by point and the points where it raises are left out. A value
    that is not a number, or one below 0 or NaN, is refused, naming ``form`` (``"(n, L)"``
    or ``"(n, Ls, Lt)"``) and the point.

    >>> values, ok = probe_grid(max, max, np.meshgrid([1, 2], [3], indexing="ij"), "(n, L)")
    >>> values.tolist(), ok.tolist()
    ([[3.0], [3.0]], [[True], [True]])
    """
    ok = np.ones(grid[0].shape, dtype=bool)
    try:
        values = np.asarray(resolved(*grid), dtype=np.float64)
        if values.shape != grid[0].shape:
            raise ValueError("not elementwise")
    except Exception:  # some points raise, or the function does not broadcast: one by one
        values = np.zeros(grid[0].shape, dtype=np.float64)
        for idx in np.ndindex(values.shape):
            point = tuple(int(g[idx]) for g in grid)
            try:
                out = cost(*point)
            except Exception:
                ok[idx] = False
                continue
            if not is_number(out):
                raise InputTypeError(
                    f"cost must return a number for every {form}, got {out!r} from "
                    f"cost{point} (cost={cost!r})"
                ) from None
            values[idx] = float(np.asarray(out).reshape(-1)[0])
    bad = ok & ~(values >= 0)  # negative or NaN
    if bad.any():
        at = tuple(np.argwhere(bad)[0])
        raise InputError(
            f"cost must return a number >= 0 for every {form}, but "
            f"cost{tuple(int(g[at]) for g in grid)}={values[at]!r} (cost={cost!r})"
        )
    return values, ok


def takes_pairs(cost: Any) -> bool:
    """Whether a resolved cost prices (source, target) pairs, ``cost(n, Ls, Lt)``.

    >>> takes_pairs(PairCost()), takes_pairs(lambda n, L: n * L)
    (True, False)
    """
    return bool(getattr(cost, "takes_pairs", False))
