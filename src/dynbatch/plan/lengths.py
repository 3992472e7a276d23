"""Per-sample lengths: from an array, a ``length_fn``, or the size of a field; cached on disk.

Lengths are measured once per dataset (the original study tokenized every
sample twice: once to plan, once to train) and, with ``cache_path``, stored
next to a fingerprint of the dataset so a later run loads them instead.
"""

from __future__ import annotations

import functools
import hashlib
import numbers
import os
import warnings
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._checks import InputError, InputTypeError, check_dataset, check_lengths
from .._files import atomic_write

__all__ = ["compute_lengths", "dataset_fingerprint", "field_length", "measure_failed"]


def field_length(sample: Any, ref_index: Any) -> int:
    """Size of ``sample[ref_index]``: ``len()`` of a sequence, or the first dim of an array."""
    try:
        field = sample[ref_index]
    except (KeyError, IndexError, TypeError) as exc:
        raise InputTypeError(
            f"ref_index={ref_index!r} does not select a field of the sample: {exc}"
        ) from None
    shape = getattr(field, "shape", None)
    if shape is not None and len(shape) > 0:
        return int(shape[0])
    if isinstance(field, (str, bytes, list, tuple)) or hasattr(field, "__len__"):
        return len(field)
    raise InputTypeError(
        f"the field at ref_index={ref_index!r} has no size: got {type(field).__name__} "
        f"{field!r}; pick a field that is a sequence or array, or pass length_fn"
    )


def _fields(sample: Any) -> str:
    """``"; its fields: [...]"`` for a sample that is a dict, else nothing."""
    if not isinstance(sample, Mapping):
        return ""
    names = [str(k) for k in sample]
    more = ", ..." if len(names) > 20 else ""
    return f"; its fields: {str(names[:20])[:-1]}{more}]"


def measure_failed(how: str, exc: BaseException, sample: Any, where: str) -> InputError:
    """The error for ``how`` (a ``length_fn``) raising ``exc`` on ``sample`` at ``where``.

    It names the sample's place (a dataset's index, a stream's record) and the
    exception (a ``KeyError`` names the missing field), and lists a dict sample's
    fields. Every path that measures samples raises it, the map-style datasets'
    and the streams' alike.

    >>> error = measure_failed("length_fn", KeyError("text"), {"ids": [1]}, "sample 3")
    >>> print(str(error).split(": it must")[0])
    length_fn raised KeyError('text') on sample 3 (its fields: ['ids'])
    """
    fields = _fields(sample)
    found = f" ({fields[2:]})" if fields else ""
    return InputError(
        f"{how} raised {exc!r} on {where}{found}: it must return the sample's length (a whole "
        "number >= 1) for every sample"
    )


def _measure(measure: Callable[[Any], Any], sample: Any, index: int, how: str) -> Any:
    """``measure(sample)`` of the dataset's sample ``index``; an error in measuring names
    the sample (:func:`measure_failed`)."""
    try:
        return measure(sample)
    except InputError as exc:  # ref_index's own: it names the field, not the sample
        raise type(exc)(f"{exc} (sample {index}{_fields(sample)})") from None
    except Exception as exc:  # the user's length_fn
        raise measure_failed(how, exc, sample, f"sample {index}") from exc


def _describe(fn: Callable[..., Any] | None, ref_index: Any) -> str:
    if fn is None:
        return f"ref_index={ref_index!r}"
    return f"length_fn={getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


_PLAIN = (int, float, str, bytes, bool, type(None))


def _code_text(fn: Any) -> str:
    """What decides a function's results, as far as it can be read: bytecode, constants,
    defaults, and the plain values it captures or reads from globals (``cap`` in
    ``lambda s: min(len(s), cap)``). Two lambdas with one name still differ here."""
    if isinstance(fn, functools.partial):
        return f"partial({_code_text(fn.func)}|{fn.args!r}|{sorted(fn.keywords.items())!r})"
    code = getattr(fn, "__code__", None)
    if code is None:
        return repr(fn)
    cells = [c.cell_contents for c in (getattr(fn, "__closure__", None) or ())]
    scope = getattr(fn, "__globals__", {})
    read = {n: scope[n] for n in code.co_names if n in scope and isinstance(scope[n], _PLAIN)}
    values = [v if isinstance(v, _PLAIN) else type(v).__qualname__ for v in cells]
    return (
        f"{code.co_code.hex()}|{code.co_consts!r}|{code.co_names!r}|"
        f"{getattr(fn, '__defaults__', None)!r}|{values!r}|{sorted(read.items())!r}"
    )


def _measured(value: Any, where: str) -> int:
    """A length as an int, refusing what is not a whole number (strings, bools, None)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.number)):
        raise InputTypeError(f"{where} must be a whole number, got {value!r}")
    number = float(value)
    if not number.is_integer():
        raise InputError(f"{where} must be a whole number, got {value!r}")
    if number < 1:
        raise InputError(f"{where} must be a whole number >= 1 (a sample's length), got {value!r}")
    return int(number)


def dataset_fingerprint(
    dataset: Any,
    how: str,
    measure: Callable[[Any], int] | None = None,
    name: str = "length_fn",
) -> str:
    """A cheap fingerprint: type, size, how lengths are measured, and a few samples.

    It reads at most 5 samples (their text and, with ``measure``, their
    measured length), so it catches a different dataset or measurement, not an
    edit deep inside one; delete the cache after such edits. ``name`` is what
    an error in ``measure`` is named by.
    """
    n = len(dataset)
    probe = sorted({0, n // 4, n // 2, (3 * n) // 4, n - 1}) if n else []
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{type(dataset).__module__}.{type(dataset).__qualname__}|{n}|{how}".encode())
    for i in probe:
        sample = dataset[i]
        h.update(repr(sample).encode("utf-8", "replace")[:4096])
        if measure is not None:
            h.update(f"|{_measure(measure, sample, i, name)!r}".encode())
    return h.hexdigest()


def _read_cache(path: Path, key: str) -> NDArray[Any] | None:
    """The cached lengths for ``key``; None if absent, stale or unreadable (with a warning)."""
    if path.is_dir():
        raise InputError(
            f"cache_path={str(path)!r} is a directory; give a file path such as lengths.npz"
        )
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as cached:
            if str(cached["fingerprint"]) != key:
                return None
            return check_lengths(cached["lengths"], name=f"lengths cached in {path}")
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        warnings.warn(
            f"cache_path={str(path)!r} is not a readable lengths cache ({exc}); measuring again "
            "and replacing it",
            stacklevel=3,
        )
        return None


def compute_lengths(
    dataset: Any,
    *,
    length_fn: Callable[[Any], int] | None = None,
    ref_index: Any = None,
    cache_path: str | os.PathLike[str] | None = None,
) -> NDArray[Any]:
    """Measure every sample of ``dataset`` once, with ``length_fn(sample)`` or ``ref_index``.

    Args:
        dataset: the samples (map-style: ``len()`` and ``[i]``).
        length_fn: ``length_fn(sample) -> int``, called once per sample.
        ref_index: the field of each sample whose size is its length (an index into a tuple
            sample, a key of a dict one), instead of ``length_fn``.
        cache_path: store the lengths here (``.npz``) keyed by a fingerprint of the dataset; a
            later call on the same dataset loads them instead of measuring.

    >>> compute_lengths([([1, 2, 3], 0), ([4], 1)], ref_index=0).tolist()
    [3, 1]
    """
    check_dataset("dataset", dataset)
    if (length_fn is None) == (ref_index is None):
        raise InputError(
            "give exactly one of length_fn or ref_index to measure samples, got "
            f"length_fn={length_fn!r} and ref_index={ref_index!r}"
        )
    if length_fn is not None and not callable(length_fn):
        raise InputTypeError(
            f"length_fn must be callable(sample) -> int, got length_fn={length_fn!r}"
        )
    how = _describe(length_fn, ref_index)
    measure = length_fn if length_fn is not None else (lambda s: field_length(s, ref_index))
    if cache_path is not None and not isinstance(cache_path, (str, os.PathLike)):
        raise InputTypeError(f"cache_path must be a file path, got cache_path={cache_path!r}")
    path = Path(cache_path) if cache_path is not None else None
    key = ""
    if path is not None:
        key = dataset_fingerprint(dataset, f"{how}|{_code_text(length_fn)}", measure, how)
        cached = _read_cache(path, key)
        if cached is not None:
            return cached
    values = [
        _measured(_measure(measure, dataset[i], i, how), f"{how} of sample {i}")
        for i in range(len(dataset))
    ]
    lengths = check_lengths(np.asarray(values, dtype=np.int64), name=f"lengths measured by {how}")
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(path) as fh:  # NOTE [ atomic writes ]
            np.savez(fh, lengths=lengths, fingerprint=np.array(key))
    return lengths
