"""Cost models: what one padded batch costs, compared against ``max_cost``.

A cost is any function ``cost(n, L)`` of the number of samples ``n`` and the
padded length ``L`` of the batch (its longest sample rounded up to
``pad_to_multiple_of``). It must be nondecreasing in both arguments — more
samples or longer ones never cost less — which is what lets the planner find
the largest batch that fits by bisection and charge a batch by its longest
sample. A callable is probed for this when it is resolved (NOTE [ probing a callable cost ])
and the planner checks every planned batch against the
budget, so a cost that breaks this rule is reported, never obeyed silently.
:func:`fit_polynomial` fits the form of :class:`PolynomialCost` to measured
steps (the memory package's fit, a step-time table's).

>>> QuadraticCost()(16, 256)
1048576.0
>>> MixedCost(a=1.0, b=0.5)(2, 4)
24.0
>>> resolve_cost("mixed:1,0.5")
MixedCost(a=1.0, b=0.5)

Samples of two lengths, (source, target) pairs of an encoder–decoder, are
priced by a cost of two lengths ``cost(n, Ls, Lt)`` (NOTE [ costs of pairs ]):
:class:`PairCost`, a callable of three arguments, or a named cost, whose two-length
form :func:`pair_form` gives.

>>> PairCost()(2, 3, 4)
74.0
"""

from __future__ import annotations

import functools
import itertools
import math
import numbers
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from .._checks import InputError, InputTypeError, check_nonnegative_number
from .pair_costs import (
    PROBE_L,
    PROBE_N,
    PairCallable,
    PairCost,
    PairCostFn,
    PairPolynomialCost,
    is_number,
    probe_grid,
    required_arguments,
    resolve_pair_callable,
    signature_problem,
    takes_pairs,
)

__all__ = [
    "AnyCost",
    "Cost",
    "CostLike",
    "LinearCost",
    "MixedCost",
    "PairCost",
    "PairCostFn",
    "PolynomialCost",
    "QuadraticCost",
    "WithinBudgets",
    "absent_coefficient",
    "capacity",
    "charge",
    "cost_spec",
    "fingerprint_spec",
    "fit_polynomial",
    "nnls",
    "one_length",
    "pair_form",
    "resolve_cost",
    "rows_cost",
    "takes_pairs",
]

#: A vectorised cost: arrays (or scalars) ``n`` and ``L`` in, float64 cost out.
Cost = Callable[[Any, Any], Any]
#: A resolved cost of either kind: ``(n, L)``, or ``(n, Ls, Lt)`` for pairs
#: (NOTE [ costs of pairs ] in :mod:`dynbatch.plan.pair_costs`).
AnyCost = Callable[..., Any]
CostLike = str | AnyCost


@dataclass(frozen=True)
class QuadraticCost:
    """``n * L**2``: attention memory, the original study's ``batch * len**2 <= controller``."""

    def __call__(self, n: Any, length: Any) -> Any:
        return np.multiply(n, np.square(np.asarray(length, dtype=np.float64)))


@dataclass(frozen=True)
class LinearCost:
    """``n * L``: padded tokens, a plain token budget."""

    def __call__(self, n: Any, length: Any) -> Any:
        return np.multiply(n, np.asarray(length, dtype=np.float64))


class PolynomialCost:
    """The one formula of dynbatch's fitted costs: ``max(floor, c + n*L*(a + b*L))``.

    A base for frozen dataclasses whose fields are some of the coefficients
    ``c`` (cost of an empty batch), ``a`` (per token, ``n*L``), ``b`` (per token
    pair per sample, ``n*L**2``) and ``floor`` (the least a batch costs); one a
    subclass does without is an :func:`absent_coefficient`, 0. :class:`MixedCost`
    is ``n*L*(a + b*L)``; :class:`~dynbatch.MemoryCost` (MiB) and the step-time
    model of :func:`~dynbatch.calibrate` (seconds) add ``c`` and ``floor``. Every
    coefficient is a finite number >= 0, so the cost is nondecreasing in ``n``
    and ``L``; a subclass with ``grows = True`` also needs ``a > 0`` or ``b > 0``.

    >>> MixedCost(a=1.0, b=0.5)(np.array([1, 2]), np.array([4, 4])).tolist()
    [12.0, 24.0]
    """

    c: float
    a: float
    b: float
    floor: float
    #: a cost that must grow with the batch (a > 0 or b > 0)
    grows: ClassVar[bool] = True

    def __post_init__(self) -> None:
        owner = type(self).__name__
        for f in fields(self):  # type: ignore[arg-type]  # subclasses are dataclasses
            if f.name in _COEFFICIENTS:
                value = check_nonnegative_number(f.name, getattr(self, f.name), owner=owner)
                object.__setattr__(self, f.name, value)
        if self.grows and self.a == 0 and self.b == 0:
            raise InputError(
                f"{owner} needs a > 0 or b > 0 (a cost that grows with the batch), got a=0 and b=0"
            )

    def __call__(self, n: Any, length: Any) -> Any:
        length = np.asarray(length, dtype=np.float64)
        value = self.c + np.multiply(n, length) * (self.a + self.b * length)
        return np.maximum(self.floor, value) if self.floor else value


_COEFFICIENTS = ("c", "a", "b", "floor")


def absent_coefficient() -> Any:
    """The dataclass field of a coefficient a :class:`PolynomialCost` does without: always 0,
    and not an argument, not in ``repr``, not compared."""
    return field(default=0.0, init=False, repr=False, compare=False)


@dataclass(frozen=True)
class MixedCost(PolynomialCost):
    """``n * (a*L + b*L**2)``: linear layers plus attention, the honest transformer model.

    Args:
        a: weight of the per-token term (embeddings, feed-forward layers).
        b: weight of the per-token-pair term (attention scores).
    """

    a: float = 1.0
    b: float = 1.0
    c: float = absent_coefficient()
    floor: float = absent_coefficient()


_NAMED: dict[str, Cost] = {"quadratic": QuadraticCost(), "linear": LinearCost()}


class _Elementwise:
    """Lifts a scalar-only ``cost(n, L)`` to arrays, for user functions that do not broadcast."""

    def __init__(self, fn: Cost) -> None:
        self.fn = fn
        self._ufunc = np.frompyfunc(fn, 2, 1)

    def __call__(self, n: Any, length: Any) -> Any:
        out = self._ufunc(n, length)
        try:
            return np.asarray(out, dtype=np.float64)
        except (TypeError, ValueError):
            bad = next(v for v in np.asarray(out, dtype=object).reshape(-1) if not is_number(v))
            raise InputTypeError(
                f"cost must return a number for every (n, L), got {bad!r} from cost={self.fn!r}"
            ) from None

    def __repr__(self) -> str:
        return repr(self.fn)


def resolve_cost(cost: CostLike) -> AnyCost:
    """Turn ``"quadratic"``, ``"linear"``, ``"mixed:A,B"`` or a callable into a vectorised cost.

    A callable is first tried on arrays; one that only takes scalars is applied
    element by element. It must return a finite number >= 0 at ``(1, 2)``, and a
    number >= 0 that never decreases in ``n`` or ``L`` on a grid of probes (the planner
    finds a batch's capacity by bisection, which needs that); the planner checks every batch
    it plans against the budget.

    A callable of three arguments, ``(n, Ls, Lt) -> float``, prices (source, target)
    pairs: it is probed the same way, on ``(1, 2, 3)`` and on a grid of ``n`` by ``Ls`` by
    ``Lt``. A ufunc takes as many as its inputs (``np.frompyfunc(f, 3, 1)`` prices pairs); one
    whose arguments cannot be counted (``lambda *a: ...``) is a cost of one length if it takes
    ``(1, 2)``, else of pairs if it takes ``(1, 2, 3)``. A signature that takes neither (four
    arguments, a keyword-only one) is refused by name.

    Args:
        cost: a name (``"quadratic"``: ``n * L**2``; ``"linear"``: ``n * L``;
            ``"mixed:A,B"``: ``n * (A*L + B*L**2)``), a cost object (returned as it is) or a
            callable ``(n, L) -> float`` (or ``(n, Ls, Lt) -> float`` for pairs).

    >>> resolve_cost("linear")(np.array([2, 3]), np.array([10, 10])).tolist()
    [20.0, 30.0]
    >>> resolve_cost(lambda n, L: n * max(L, 8))(np.array([2]), np.array([3])).tolist()
    [16.0]
    """  # NOTE [ probing a callable cost ]
    if isinstance(cost, str):
        if cost in _NAMED:
            return _NAMED[cost]
        if cost.startswith("mixed:"):
            try:
                a, b = (float(x) for x in cost[len("mixed:") :].split(","))
            except ValueError:
                raise InputError(f"cost 'mixed:A,B' needs two numbers, got cost={cost!r}") from None
            return MixedCost(a, b)
        raise InputError(
            f"cost must be 'quadratic', 'linear', 'mixed:A,B', a cost object or a callable "
            f"(n, L) -> float, or for (source, target) pairs PairCost(...) or a callable "
            f"(n, Ls, Lt) -> float; got cost={cost!r}"
        )
    if not callable(cost):
        raise InputTypeError(
            f"cost must be a string or a callable (n, L) -> float (or (n, Ls, Lt) -> float for "
            f"(source, target) pairs), got cost={cost!r}"
        )
    if isinstance(cost, (QuadraticCost, LinearCost, PolynomialCost, _Elementwise)):
        return cost
    if isinstance(cost, (PairCost, PairCallable, PairPolynomialCost)):
        return cost
    problem = signature_problem(cost)
    if problem is not None:
        raise InputTypeError(
            f"cost={cost!r} {problem}: a cost is called by position, cost(n, L) (a batch's "
            "samples and padded length), or cost(n, Ls, Lt) for (source, target) pairs (its "
            "longest source and longest target)"
        )
    if required_arguments(cost) == 3:  # cost(n, Ls, Lt): NOTE [ costs of pairs ]
        return resolve_pair_callable(cost)
    try:
        single = cost(1, 2)
    except Exception as exc:
        also = ""
        if required_arguments(cost) is None:  # *args, or unread: perhaps cost(n, Ls, Lt)
            try:
                cost(1, 2, 3)
            except Exception as pair_exc:
                also = f" (and cost(1, 2, 3) raised {pair_exc!r})"
            else:
                return resolve_pair_callable(cost)
        raise InputTypeError(
            f"cost(1, 2) raised {exc!r}{also}; cost={cost!r} must take (n, L), or (n, Ls, Lt) "
            "for (source, target) pairs"
        ) from exc
    if not is_number(single):
        raise InputTypeError(f"cost must return a number, but cost(1, 2) returned {single!r}")
    value = float(np.asarray(single).reshape(-1)[0])
    if not (math.isfinite(value) and value >= 0):
        raise InputError(f"cost must return a finite number >= 0, but cost(1, 2)={value!r}")
    probe_n, probe_len = np.array([1, 2]), np.array([3, 4])
    resolved: Cost = _Elementwise(cost)
    try:
        out = np.asarray(cost(probe_n, probe_len))
        if out.shape == (2,) and np.issubdtype(out.dtype, np.number):
            resolved = cost
    except Exception:
        pass
    _check_grows(cost, resolved)
    return resolved


def pair_form(cost: Any, name: str = "cost") -> PairCostFn:
    """The cost of (source, target) pairs a resolved cost stands for (NOTE [ costs of pairs ]).

    A cost of two lengths is its own; a named one has a two-length form; any other
    cost of one length, ``(n, L)``, is refused, naming ``name``.

    >>> pair_form(QuadraticCost()), pair_form(LinearCost())
    (PairCost(a=0.0, b=1.0, cross=1.0), PairCost(a=1.0, b=0.0, cross=0.0))
    """
    if takes_pairs(cost):
        return cost  # type: ignore[no-any-return]  # cost is Any
    if type(cost) is QuadraticCost:
        return PairCost()
    if type(cost) is LinearCost:
        return PairCost(a=1.0, b=0.0, cross=0.0)
    if type(cost) is MixedCost:
        return PairCost(a=cost.a, b=cost.b, cross=cost.b)
    raise InputError(
        f"{name}={cost!r} takes one length, (n, L), but the lengths are (source, target) "
        f"pairs: give {name} as a cost of two lengths, (n, Ls, Lt) -> float (such as "
        "PairCost()), or a named one ('quadratic', 'linear', 'mixed:A,B'), which prices "
        "both sides"
    )


def one_length(cost: Any, name: str = "cost") -> Cost:
    """``cost``, refused by name when it takes (source, target) pairs and the lengths are one
    per sample."""
    if takes_pairs(cost):
        raise InputError(
            f"{name}={cost!r} takes two lengths, (n, Ls, Lt), but the lengths are one per "
            "sample: give lengths as an [N, 2] array of (source, target) lengths, or a cost of "
            f"one length, (n, L) -> float"
        )
    return cost  # type: ignore[no-any-return]


def charge(cost: Any, n: Any, longest: Any, name: str = "cost") -> Any:
    """What batches of ``n`` samples cost: ``cost(n, L)``, or for pairs ``cost(n, Ls, Lt)``.

    ``longest`` holds each batch's longest (padded) length, or a row of its longest source
    and longest target for pairs; a cost of one length is then priced in its two-length
    form (:func:`pair_form`).

    >>> charge("quadratic", 2, np.array([4])).tolist(), charge("quadratic", 2, [[3, 4]]).tolist()
    ([32.0], [74.0])
    """
    if isinstance(cost, str):
        cost = resolve_cost(cost)
    longest = np.asarray(longest)
    if longest.ndim == 2:
        return pair_form(cost, name)(n, longest[:, 0], longest[:, 1])
    return one_length(cost, name)(n, longest)


def capacity(
    cost: Any, longest: Any, max_cost: float, upper: int, multiple: int = 1
) -> NDArray[np.int64]:
    """The most samples a batch of each ``longest`` (a length, or a pair's row) may hold.

    The largest ``n <= upper`` with ``charge(cost, n, longest) <= max_cost``, found by
    vectorised bisection on the cost itself (NOTE [ packing by capacity ] in
    :mod:`dynbatch.plan.planning`), rounded down to ``multiple`` where it holds one.

    >>> capacity(LinearCost(), np.array([8, 16]), 64, 100).tolist()
    [8, 4]
    >>> capacity(LinearCost(), np.array([[8, 8]]), 64, 100).tolist()
    [4]
    """
    longest = np.asarray(longest)
    lo = np.zeros(longest.shape[:1], dtype=np.int64)  # always fits
    hi = np.full(longest.shape[:1], upper, dtype=np.int64)
    while True:
        todo = lo < hi
        if not todo.any():
            break
        mid = (lo + hi + 1) // 2
        fits = np.asarray(charge(cost, mid, longest), dtype=np.float64) <= max_cost
        lo = np.where(todo & fits, mid, lo)
        hi = np.where(todo & ~fits, mid - 1, hi)
    if multiple > 1:
        lo = np.where(lo >= multiple, lo - lo % multiple, lo)
    return lo


def _check_grows(cost: Cost, resolved: Cost) -> None:
    """Refuse a callable cost that is negative, NaN or decreasing at the probed ``(n, L)``.

    NOTE [ probing a callable cost ]
        The planner finds the largest batch that fits by bisection and
        charges a batch by its longest sample, which is only right for a
        cost nondecreasing in ``n`` and in ``L``; it checks every batch it
        plans against the budget, but a negative cost is always "within"
        it (``np.where(n > 1, -1, 1) * n * L`` would put 1,000 samples in one
        batch). So a callable is probed once, when it is resolved, on a grid
        of ``n`` in :data:`PROBE_N` by ``L`` in :data:`PROBE_L`: every value
        must be a number >= 0 (inf is allowed: it fits no budget), and no
        step along ``n`` or along ``L`` may lower it. Points where the cost
        raises (say, a table that ends at the model's longest length) are
        left out of the probe rather than refused. A probe is not a proof:
        a cost that misbehaves between the points is still caught by the
        planner wherever a planned batch goes over budget.
    """
    grid = np.meshgrid(PROBE_N, PROBE_L, indexing="ij")
    values, ok = probe_grid(cost, resolved, grid, "(n, L)")
    for axis, name, why in ((0, "n", "more samples"), (1, "L", "longer samples")):
        _check_axis(cost, values, ok, axis, name, why)


def _check_axis(cost: Cost, values: Any, ok: Any, axis: int, name: str, why: str) -> None:
    """No step along ``axis`` of the probe grid lowers the cost (beyond rounding)."""
    grid = np.moveaxis(values, axis, 0)
    valid = np.moveaxis(ok, axis, 0)
    for col in range(grid.shape[1]):
        rows = np.flatnonzero(valid[:, col])
        seq = grid[rows, col]
        drop = seq[1:] < seq[:-1] * (1 - 1e-9)
        if drop.any():
            k = int(np.argmax(drop))
            a, b = int(rows[k]), int(rows[k + 1])
            points = [(a, col), (b, col)] if axis == 0 else [(col, a), (col, b)]
            first, second = ((int(PROBE_N[i]), int(PROBE_L[j])) for i, j in points)
            raise InputError(
                f"cost must be nondecreasing in {name} ({why} never cost less), but "
                f"cost{first}={seq[k]:g} > cost{second}={seq[k + 1]:g} (cost={cost!r})"
            )


@dataclass(frozen=True)
class WithinBudgets:
    """``max(cost_i(n, L) / budget_i)``: at most 1 when a batch fits every budget.

    Plan with ``max_cost=1``. It is how a batch is held to two limits at once,
    e.g. a memory target and the knee of the step time (:func:`~dynbatch.fill_device`).

    >>> both = WithinBudgets(((LinearCost(), 100.0), (QuadraticCost(), 1000.0)))
    >>> float(both(2, 20)), float(both(4, 10))
    (0.8, 0.4)

    Args:
        parts: ``(cost, budget)`` pairs, each cost as :func:`resolve_cost` takes it and each
            budget a positive number.
    """

    parts: tuple[tuple[Any, float], ...]

    def __post_init__(self) -> None:
        if not isinstance(self.parts, tuple) or not self.parts:
            raise InputTypeError(
                "WithinBudgets parts must be a non-empty tuple of (cost, budget), "
                f"got {self.parts!r}"
            )
        parts = []
        for i, part in enumerate(self.parts):
            if not (isinstance(part, tuple) and len(part) == 2):
                raise InputTypeError(
                    f"WithinBudgets parts[{i}] must be (cost, budget), got {part!r}"
                )
            fn, budget = part
            wrong_type = isinstance(budget, (bool, np.bool_)) or not isinstance(
                budget, numbers.Real
            )
            if wrong_type or not (math.isfinite(budget) and budget > 0):
                raise (InputTypeError if wrong_type else InputError)(
                    f"WithinBudgets parts[{i}] budget must be a positive finite number, "
                    f"got {budget!r}"
                )
            parts.append((resolve_cost(fn), float(budget)))
        object.__setattr__(self, "parts", tuple(parts))

    def __call__(self, n: Any, length: Any) -> Any:
        ratios = [np.asarray(fn(n, length), dtype=np.float64) / budget for fn, budget in self.parts]
        return functools.reduce(np.maximum, ratios)

    def spec(self) -> str:
        """Each part's spec and budget; a plain callable is ``<callable>`` (the plan decides)."""
        return ";".join(f"{cost_spec(fn) or '<callable>'}<={budget!r}" for fn, budget in self.parts)


def rows_cost(cost: Any) -> Any:
    """What ``cost`` prices a packed row at: a cost that prices packed rows apart from padded
    batches (a :class:`~dynbatch.plan.packs.DenseRows` with ``rows_cost``) gives its
    ``packed_rows``, any other is its own (NOTE [ a cost per layout ] in
    :mod:`dynbatch.plan.packs.attention`).

    >>> rows_cost("linear")
    'linear'
    """
    return getattr(cost, "packed_rows", cost)


def cost_spec(cost: Any) -> str | None:
    """A stable text of what decides a cost's values, the same in every process, or None.

    Built-in costs and any object with a ``spec()`` method (e.g.
    :class:`~dynbatch.MemoryCost`) are described exactly; a plain function
    cannot be (two lambdas with different bodies share a name), so it gives
    None and resume compares the plan itself instead (NOTE [ resume fingerprint ]
    in :mod:`dynbatch.paddle.sampler`).

    >>> cost_spec("quadratic"), cost_spec(lambda n, L: n * L)
    ('QuadraticCost()', None)
    """
    if isinstance(cost, str):
        cost = resolve_cost(cost)
    if isinstance(cost, (_Elementwise, PairCallable)):
        return cost_spec(cost.fn)
    if isinstance(cost, (QuadraticCost, LinearCost, MixedCost, PairCost)):
        return repr(cost)
    spec = getattr(cost, "spec", None)
    if callable(spec):
        return f"{type(cost).__qualname__}:{spec()}"
    return None


#: a :class:`PairCost`'s text, or a :class:`MixedCost`'s, in a spec (not a longer name's)
_PAIR_TEXT = re.compile(r"(?<!\w)PairCost\(a=([^,()]+), b=([^,()]+), cross=([^,()]+)\)")
_NAMED_TEXT = {
    "MixedCost(a=0.0, b=1.0)": "QuadraticCost()",
    "MixedCost(a=1.0, b=0.0)": "LinearCost()",
}


def fingerprint_spec(cost: Any) -> str | None:
    """:func:`cost_spec`, one text for the costs that price every batch alike: what a resume
    compares (NOTE [ one text for one cost ]).

    >>> fingerprint_spec(PairCost()), fingerprint_spec(PairCost(a=1, b=0, cross=0))
    ('QuadraticCost()', 'LinearCost()')
    >>> fingerprint_spec(PairCost(a=2, b=3, cross=3)), fingerprint_spec(PairCost(cross=2))
    ('MixedCost(a=2.0, b=3.0)', 'PairCost(a=0.0, b=1.0, cross=2.0)')

    NOTE [ one text for one cost ]
        docs/loop.md says a named cost prices (source, target) pairs in its two-length form
        (:func:`pair_form`): ``"quadratic"`` is ``PairCost()`` on pairs, ``"linear"``
        ``PairCost(1, 0, 0)``, ``"mixed:A,B"`` ``PairCost(A, B, B)``; and ``MixedCost(0, 1)``
        and ``MixedCost(1, 0)`` are the quadratic and the linear cost of one length. A resume
        refused the one spelling for the other ("the plan differs") although both plan the same
        batches. So the fingerprint writes each such cost as the named one it equals, before it
        is compared: a ``PairCost`` whose ``cross`` is its ``b`` as the ``MixedCost`` it is the
        pair form of, and that one as ``"quadratic"`` or ``"linear"`` where it is one. One
        text serves both kinds of lengths: the planner takes a ``PairCost`` for pairs only,
        where it equals the one-length cost whose text it gets. Texts inside a composed cost's
        spec (``WithinBudgets``' parts) are written alike. The texts of a ``QuadraticCost``
        and a ``LinearCost`` are the ones saved before, so their states still load. The
        fingerprint is not the only check: the resumed epoch's plan digest must match too.
    """
    spec = cost_spec(cost)
    if spec is None:
        return None

    def pair(found: re.Match[str]) -> str:
        a, b, cross = found.groups()
        return f"MixedCost(a={a}, b={b})" if b == cross else found[0]

    spec = _PAIR_TEXT.sub(pair, spec)
    for text, named in _NAMED_TEXT.items():
        spec = re.sub(rf"(?<!\w){re.escape(text)}", named, spec)
    return spec


def nnls(x: NDArray[Any], y: NDArray[Any]) -> NDArray[Any]:
    """Non-negative least squares ``min |x @ w - y|, w >= 0``, exactly, for a few columns.

    The optimum is the unconstrained least-squares solution on its own support,
    so the best non-negative solution over all column subsets is it.

    >>> nnls(np.array([[1.0, 1.0], [1.0, 2.0], [1.0, 3.0]]), np.array([3.0, 2.0, 1.0])).tolist()
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


def fit_polynomial(
    n: NDArray[Any], length: NDArray[Any], y: NDArray[Any]
) -> tuple[float, float, float]:
    """Non-negative ``(c, a, b)`` of ``c + a*n*L + b*n*L**2`` minimising relative squared error.

    >>> n, L = np.array([1.0, 4.0, 2.0]), np.array([8.0, 8.0, 32.0])
    >>> [round(v, 9) for v in fit_polynomial(n, L, 3.0 + 0.5 * n * L + 0.01 * n * L**2)]
    [3.0, 0.5, 0.01]
    """
    tokens = n * length.astype(np.float64)
    weight = 1.0 / np.maximum(y, 1e-12)  # a step timed at 0 s must not divide by zero
    x = np.stack([np.ones_like(tokens), tokens, tokens * length], axis=1) * weight[:, None]
    scale = np.abs(x).max(axis=0)
    scale[scale == 0] = 1.0
    c, a, b = (float(v) for v in nnls(x / scale, y * weight) / scale)
    return c, a, b
