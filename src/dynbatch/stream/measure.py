"""The lengths a stream's ``length_fn`` measured for a block, checked: numpy only.

One length a sample, or a (source, target) pair a sample (NOTE [ a stream of pairs ] in
:mod:`dynbatch.stream.planner`): :class:`LengthKind` checks a block's values, names each bad
one by where it is in the stream, and holds the stream to the kind of its first block.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._checks import check_lengths, first_bool
from ..errors import InputError, InputTypeError
from ..plan.costs import pair_form
from ..plan.lengths import SIDES
from ..plan.options import PlanOptions
from ..plan.pairs import check_pair_options

__all__ = ["LengthKind"]


class LengthKind:
    """The kind of a stream's lengths (one a sample, or pairs), fixed by its first block.

    Args:
        options: the stream's options, checked for pairs when the first block is of pairs.

    >>> kind = LengthKind(PlanOptions(max_cost=100))
    >>> kind.checked([(3, 4), (5, 1)], lambda i: f"record {i}").tolist()
    [[3, 4], [5, 1]]
    >>> kind.checked([7], lambda i: f"record {i + 2}")
    Traceback (most recent call last):
    ...
    dynbatch.errors.InputError: length_fn returned one length for the sample at record 2 (7) ...
    """

    def __init__(self, options: PlanOptions) -> None:
        self.options = options
        self.pairs: bool | None = None  # None: no block measured yet
        self._first: tuple[Any, str] = (None, "")  # the first block's first value, and where

    def checked(self, values: list[Any], where: Callable[[int], str]) -> NDArray[np.int64]:
        """``values`` as int64 (one per sample, or ``[k, 2]`` for pairs); a bad one named by
        ``where(i)``, its place in the stream."""
        try:
            if first_bool(values) is not None or _bool_side(values):
                raise TypeError("a bool is not a length")
            arr = np.asarray(values)
            ok = arr.dtype.kind in "iu" or (
                arr.dtype.kind == "f" and bool(np.all(np.isfinite(arr) & (arr == np.round(arr))))
            )
        except (TypeError, ValueError):
            ok = False
        shaped = ok and (arr.ndim == 1 or (arr.ndim == 2 and arr.shape[1] == 2))
        if shaped and arr.size and (arr > 0).all() and (arr < 2**53).all():
            return self._one_kind(arr.astype(np.int64), values[0], where(0))
        if self.pairs is not None:
            first, (before, before_where) = self.pairs, self._first
        else:
            first, before, before_where = _is_pair(values[0]), values[0], where(0)
        for i, value in enumerate(values):
            pair = _is_pair(value)
            if pair != first and (pair or _is_number(value)):
                raise InputError(_mixed(value, where(i), before, before_where))
            sides = list(zip(SIDES, value, strict=True)) if pair else [("", value)]
            for side, length in sides:
                try:
                    check_lengths([length], "length")
                except InputError:
                    what = f" (its {side})" if side else ""
                    raise (InputTypeError if not _is_number(length) else InputError)(
                        f"length_fn must return a whole number >= 1 (below 2**53) for every "
                        f"sample, or a (source, target) pair of them, got {value!r}{what} for "
                        f"the sample at {where(i)}"
                    ) from None
        raise InputError(f"length_fn returned lengths that cannot be counted: {values[:5]!r}")

    def _one_kind(self, lengths: NDArray[np.int64], value: Any, where: str) -> NDArray[np.int64]:
        """``lengths``, of the kind of the stream's first block; the options a stream of pairs
        cannot plan refused when the first block is of pairs."""
        pairs = lengths.ndim == 2
        if self.pairs is None:
            if pairs:  # NOTE [ a stream of pairs ] in dynbatch.stream.planner
                check_pair_options(self.options, "DynamicBatchIterable")
                pair_form(self.options.cost)
            self.pairs, self._first = pairs, (value, where)
        elif pairs != self.pairs:
            raise InputError(_mixed(value, where, *self._first))
        return lengths


def _mixed(value: Any, where: str, before: Any, before_where: str) -> str:
    """Why a stream's one length for a sample and a pair for another are refused."""
    if _is_pair(value):  # name the one length first, then the pair
        value, where, before, before_where = before, before_where, value, where
    return (
        f"length_fn returned one length for the sample at {where} ({value!r}) and two, a "
        f"(source, target) pair, for the sample at {before_where} ({before!r}): it must return "
        "one length for every sample of the stream, or a pair for every sample"
    )


def _is_pair(value: Any) -> bool:
    return isinstance(value, (tuple, list, np.ndarray)) and np.shape(value) == (2,)


def _bool_side(values: list[Any]) -> bool:
    """Whether a pair among ``values`` has a ``bool`` side (``np.asarray`` reads it as 0 or 1)."""
    return any(
        isinstance(x, (bool, np.bool_)) for v in values if isinstance(v, (tuple, list)) for x in v
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_)
    )
