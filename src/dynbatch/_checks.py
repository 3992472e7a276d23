"""Argument checks shared by every public entry point.

Each check names the argument, echoes the value and says what would be valid
(``max_cost must be a positive finite number, got max_cost=0``). Plain ``if``
statements, never ``assert``: input checks must survive ``python -O``.

They raise the public error types of :mod:`dynbatch.errors`, re-exported here
for the modules that import them with the checks.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Collection, Iterable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .errors import InputError, InputTypeError

__all__ = [
    "MAX_LENGTH",
    "InputError",
    "InputTypeError",
    "check_batches",
    "check_bool",
    "check_choice",
    "check_dataset",
    "check_epochs",
    "check_int",
    "check_lengths",
    "check_loss_tokens",
    "check_nonnegative_number",
    "check_positive_number",
    "check_replicas",
    "first_bool",
]

#: Lengths at or above this are refused: the planner multiplies lengths by batch sizes in
#: float64 and int64, so anything near 2**63 would wrap or lose whole units. A size in tokens
#: or a count that meets them (``pack_len``, ``pad_to_multiple_of``, ``max_rows``) is at most
#: this, for the same reason: ``check_int(..., maximum=MAX_LENGTH)`` (ranks: MAX_REPLICAS).
MAX_LENGTH = 2**53

#: The most data-parallel ranks (``num_replicas``) a plan is made for: NOTE [ the most ranks ].
MAX_REPLICAS = 2**20


def check_int(
    name: str,
    value: Any,
    *,
    minimum: int = 0,
    maximum: int | None = None,
    allow_none: bool = False,
) -> Any:
    """Return ``value`` as an ``int`` >= ``minimum`` (and <= ``maximum``, if given); ``bool``
    is not an int here.

    A value of the wrong type is an :class:`InputTypeError`, one out of range an
    :class:`InputError`; both messages are the same.

    >>> check_int("seed", np.int64(3))
    3
    >>> check_int("seed", "3")
    Traceback (most recent call last):
    ...
    dynbatch.errors.InputTypeError: seed must be an integer >= 0, got seed='3'
    >>> check_int("pack_len", 2**63, minimum=1, maximum=MAX_LENGTH)
    Traceback (most recent call last):
    ...
    dynbatch.errors.InputError: pack_len must be an integer >= 1 and <= 2**53, got \
pack_len=9223372036854775808
    """
    if value is None and allow_none:
        return None
    wrong_type = isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral)
    if wrong_type or value < minimum or (maximum is not None and value > maximum):
        top = "" if maximum is None else f" and <= {_power_text(maximum)}"
        hint = " or None" if allow_none else ""
        error = InputTypeError if wrong_type else InputError
        raise error(f"{name} must be an integer >= {minimum}{top}{hint}, got {name}={value!r}")
    return int(value)


def check_replicas(value: Any, name: str = "num_replicas") -> int:
    """``value`` as data-parallel ranks: an ``int`` in ``[1, MAX_REPLICAS]``.

    >>> check_replicas(8)
    8
    >>> check_replicas(2**53 - 1)
    Traceback (most recent call last):
    ...
    dynbatch.errors.InputError: num_replicas must be an integer >= 1 and <= 2**20, got \
num_replicas=9007199254740991 (data-parallel ranks: a plan keeps a few entries a rank, and no \
job runs more than 2**20 = 1,048,576 of them)

    NOTE [ the most ranks ]
        Every rank gets the same number of batches, so a plan keeps a few int64 entries a
        rank (a step's batches, their work, where each rank's share starts): 56 bytes a rank
        at the peak, whatever the corpus (``shard_plan`` and ``plan_epoch`` of 5,000 lengths,
        measured with tracemalloc: 56 MiB at 2**20 ranks, 3.6 MiB at 2**16). A
        ``num_replicas`` just below 2**53 would need 500 PB; it was taken and allocated until
        a ``MemoryError``. ``2**20`` ranks (1,048,576) is more data-parallel ranks than any
        training job runs (the largest run about 10**5 accelerators, most of them for tensor
        and pipeline parallelism), and its entries fit any host; beyond it is a mistake,
        refused by name. Every entry point that takes ``num_replicas`` checks it here: the
        samplers and the stream (``resolve_rank``), ``shard_plan``, ``plan_epoch`` and the
        epochs' planner, the recipes, the time split, a stream's planner and a saved state's
        ``num_replicas``.
    """
    replicas = int(check_int(name, value, minimum=1))
    if replicas > MAX_REPLICAS:
        raise InputError(
            f"{name} must be an integer >= 1 and <= {_power_text(MAX_REPLICAS)}, got "
            f"{name}={value!r} (data-parallel ranks: a plan keeps a few entries a rank, and no "
            f"job runs more than 2**20 = {MAX_REPLICAS:,} of them)"
        )
    return replicas


def _power_text(value: int) -> str:
    """``value`` as a message writes it: ``2**53`` for a large power of two."""
    if value >= 2**16 and value & (value - 1) == 0:
        return f"2**{value.bit_length() - 1}"
    return str(value)


def check_epochs(epochs: Any) -> list[int]:
    """The epoch numbers of an iterable such as ``range(5)``, each an int >= 0.

    >>> check_epochs(range(3))
    [0, 1, 2]
    """
    if isinstance(epochs, (str, bytes)) or not isinstance(epochs, Iterable):
        hint = f" such as range({epochs})" if isinstance(epochs, int) else " such as range(5)"
        raise InputTypeError(
            f"epochs must be an iterable of epoch numbers{hint}, got epochs={epochs!r}"
        )
    return [check_int("epoch", e) for e in epochs]


def check_positive_number(name: str, value: Any) -> float:
    """Return ``value`` as a positive finite ``float``; rejects bools, NaN and inf.

    >>> check_positive_number("max_cost", 0)
    Traceback (most recent call last):
    ...
    dynbatch.errors.InputError: max_cost must be a positive finite number, got max_cost=0
    """
    wrong_type = isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real)
    if wrong_type or not math.isfinite(float(value)) or value <= 0:
        error = InputTypeError if wrong_type else InputError
        raise error(f"{name} must be a positive finite number, got {name}={value!r}")
    return float(value)


def check_nonnegative_number(
    name: str, value: Any, *, finite: bool = True, owner: str = ""
) -> float:
    """Return ``value`` as a ``float`` >= 0, finite unless ``finite=False``; rejects bools, NaN.

    >>> check_nonnegative_number("a", -1, owner="MixedCost")
    Traceback (most recent call last):
    ...
    dynbatch.errors.InputError: MixedCost a must be a finite number >= 0, got a=-1
    """
    wrong_type = isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real)
    if wrong_type or not (float(value) >= 0 and (finite is False or math.isfinite(value))):
        error = InputTypeError if wrong_type else InputError
        kind = "a finite number >= 0" if finite else "a number >= 0"
        raise error(f"{owner + ' ' if owner else ''}{name} must be {kind}, got {name}={value!r}")
    return float(value)


def check_bool(name: str, value: Any) -> bool:
    """Return ``value`` if it is ``True`` or ``False`` (``1`` and ``"yes"`` are not)."""
    if not isinstance(value, (bool, np.bool_)):
        raise InputTypeError(f"{name} must be True or False, got {name}={value!r}")
    return bool(value)


def check_choice(name: str, value: Any, choices: Collection[str]) -> str:
    """Return ``value`` if it is one of the strings ``choices``."""
    if not isinstance(value, str) or value not in choices:
        valid = ", ".join(repr(c) for c in choices)
        error = InputError if isinstance(value, str) else InputTypeError
        raise error(f"{name} must be one of {valid}; got {name}={value!r}")
    return value


def check_lengths(lengths: Any, name: str = "lengths", *, zero: bool = False) -> NDArray[np.int64]:
    """Return ``lengths`` as a 1-D ``int64`` array of positive whole numbers below 2**53.

    ``zero=True`` accepts 0 too (counts, such as a sample's loss tokens).

    >>> check_lengths([3, 1, 2]).tolist()
    [3, 1, 2]
    >>> check_lengths([3, 0])
    Traceback (most recent call last):
    ...
    dynbatch.errors.InputError: lengths must be positive; lengths[1]=0
    """
    if isinstance(lengths, np.ma.MaskedArray):
        mask = np.asarray(lengths.mask, dtype=bool)
        if mask.any():
            i = int(np.argmax(mask.reshape(-1)))
            raise InputError(
                f"{name} is a masked array with masked entries ({name}[{i}] is masked); "
                f"{name} cannot be missing: fill or drop them first"
            )
        lengths = np.asarray(lengths.data)
    what = "integers >= 0" if zero else "positive integers"
    flag = first_bool(lengths)
    if flag is not None:  # numpy would take it as 1 (or 0)
        raise InputTypeError(
            f"{name} must hold integers, not booleans; {name}[{flag}]={lengths[flag]!r}"
        )
    try:
        arr = np.asarray(lengths)
    except Exception as exc:  # ragged nested lists and the like
        raise InputTypeError(f"{name} must be a 1-D array of {what}: {exc}") from None
    if arr.ndim != 1:
        raise (InputTypeError if arr.ndim == 0 else InputError)(
            f"{name} must be a 1-D array of {what}, got an array of shape {arr.shape}: "
            f"{name}={lengths!r:.80}"
        )
    if arr.size == 0:
        raise InputError(f"{name} is empty: there is nothing to batch")
    if arr.dtype == np.bool_ or not (
        np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    ):
        raise InputTypeError(
            f"{name} must hold integers, got dtype {arr.dtype} (first value {arr[0]!r})"
        )
    if np.issubdtype(arr.dtype, np.floating):
        bad = ~np.isfinite(arr) | (arr != np.round(arr))
        if bad.any():
            i = int(np.argmax(bad))
            raise InputError(f"{name} must be whole numbers; {name}[{i}]={arr[i]!r}")
    low = arr < 0 if zero else arr <= 0
    if low.any():
        i = int(np.argmax(low))
        raise InputError(f"{name} must be {'>= 0' if zero else 'positive'}; {name}[{i}]={arr[i]!r}")
    if (arr >= MAX_LENGTH).any():  # before the cast: uint64 and 1e19 would wrap negative
        i = int(np.argmax(arr >= MAX_LENGTH))
        raise InputError(f"{name} must be below 2**53; {name}[{i}]={arr[i]!r}")
    return arr.astype(np.int64, copy=False)


def first_bool(values: Any) -> int | None:
    """The index of the first ``bool`` item of a list or tuple, else None.

    ``np.asarray([3, True])`` is ``[3, 1]``: a bool among numbers is silently a number, so
    an input read as numbers is read item by item first (an array of dtype bool is refused
    by its dtype).

    >>> first_bool([3, True]), first_bool([3, 1]), first_bool(np.array([True]))
    (1, None, None)
    """
    if not isinstance(values, (list, tuple)):
        return None
    if {bool, np.bool_}.isdisjoint(map(type, values)):
        return None
    return next(i for i, x in enumerate(values) if isinstance(x, (bool, np.bool_)))


def check_loss_tokens(loss_tokens: Any, lengths: NDArray[np.int64]) -> NDArray[np.int64] | None:
    """Per-sample loss-token counts: whole numbers in ``[0, lengths[i]]``, one per sample.

    >>> check_loss_tokens([2, 0], np.array([3, 4])).tolist()
    [2, 0]
    >>> check_loss_tokens([4, 0], np.array([3, 4]))
    Traceback (most recent call last):
    ...
    dynbatch.errors.InputError: loss_tokens[0]=4 is more than the sample's length lengths[0]=3: \
a sample has at most as many loss tokens as tokens
    """
    if loss_tokens is None:
        return None
    size = np.size(loss_tokens) if isinstance(loss_tokens, (list, tuple, np.ndarray)) else None
    if size is not None and size != lengths.size:
        raise InputError(
            f"loss_tokens has {size} entries but lengths has {lengths.size}; they must "
            "match one to one (the loss tokens of each sample)"
        )
    counts = check_lengths(loss_tokens, "loss_tokens", zero=True)
    if counts.size != lengths.size:
        raise InputError(
            f"loss_tokens has {counts.size} entries but lengths has {lengths.size}; they must "
            "match one to one (the loss tokens of each sample)"
        )
    over = counts > lengths
    if over.any():
        i = int(np.argmax(over))
        raise InputError(
            f"loss_tokens[{i}]={counts[i]} is more than the sample's length lengths[{i}]="
            f"{lengths[i]}: a sample has at most as many loss tokens as tokens"
        )
    return counts


def check_dataset(name: str, value: Any) -> Any:
    """Return ``value`` if it has ``len()`` and ``[i]``, as a map-style dataset does.

    >>> check_dataset("dataset", (x for x in [1]))
    Traceback (most recent call last):
    ...
    dynbatch.errors.InputTypeError: dataset must be a sized, indexable dataset ...
    """
    if not (hasattr(value, "__len__") and hasattr(value, "__getitem__")):
        raise InputTypeError(
            f"{name} must be a sized, indexable dataset (len() and [i], such as a list or a "
            f"paddle.io.Dataset), got {name}={value!r}"
        )
    return value


def check_batches(
    batches: Any, n: int, name: str = "batches", *, unique: bool = False, allow_empty: bool = False
) -> list[NDArray[np.int64]]:
    """Index arrays of ``batches``, each non-empty, 1-D, integer and inside ``[0, n)``.

    ``unique`` refuses an index that appears twice (a plan uses each sample once);
    ``allow_empty`` accepts no batches at all.

    >>> [b.tolist() for b in check_batches([[0, 2], [1]], 3)]
    [[0, 2], [1]]
    >>> check_batches([[0, 3]], 3)
    Traceback (most recent call last):
    ...
    dynbatch.errors.InputError: batches[0] holds index 3, outside [0, 3) of lengths
    """
    if isinstance(batches, (str, bytes)) or not hasattr(batches, "__iter__"):
        raise InputTypeError(
            f"{name} must be a sequence of batches (index lists), got {name}={batches!r}"
        )
    arrays = []
    for k, b in enumerate(batches):
        arr = np.asarray(b)
        if arr.ndim != 1 or arr.size == 0:
            raise InputError(f"{name}[{k}] must be a non-empty 1-D list of indices, got {b!r}")
        if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
            raise InputTypeError(f"{name}[{k}] must hold integer indices, got dtype {arr.dtype}")
        outside = (arr < 0) | (arr >= n)
        if outside.any():
            bad = int(arr[np.argmax(outside)])
            raise InputError(f"{name}[{k}] holds index {bad}, outside [0, {n}) of lengths")
        arrays.append(arr.astype(np.int64))
    if not arrays and not allow_empty:
        raise InputError(f"{name} must be a non-empty list of non-empty index lists, got []")
    if unique and arrays:
        flat = np.concatenate(arrays)
        values, counts = np.unique(flat, return_counts=True)
        if (counts > 1).any():
            raise InputError(
                f"{name} holds index {int(values[counts > 1][0])} more than once; a plan "
                "uses each sample at most once"
            )
    return arrays
