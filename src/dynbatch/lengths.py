"""Per-sample lengths: from an array, a ``length_fn``, or the size of a field; cached on disk.

Lengths are measured once per dataset (the original study tokenized every
sample twice: once to plan, once to train) and, with ``cache_path``, stored
next to a fingerprint of the dataset so a later run loads them instead.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ._checks import check_lengths

__all__ = ["compute_lengths", "dataset_fingerprint", "field_length"]


def field_length(sample: Any, ref_index: Any) -> int:
    """Size of ``sample[ref_index]``: ``len()`` of a sequence, or the first dim of an array."""
    try:
        field = sample[ref_index]
    except (KeyError, IndexError, TypeError) as exc:
        raise TypeError(
            f"ref_index={ref_index!r} does not select a field of the sample: {exc}"
        ) from None
    shape = getattr(field, "shape", None)
    if shape is not None and len(shape) > 0:
        return int(shape[0])
    if isinstance(field, (str, bytes, list, tuple)) or hasattr(field, "__len__"):
        return len(field)
    raise TypeError(
        f"the field at ref_index={ref_index!r} has no size: got {type(field).__name__} "
        f"{field!r}; pick a field that is a sequence or array, or pass length_fn"
    )


def _describe(fn: Callable[..., Any] | None, ref_index: Any) -> str:
    if fn is None:
        return f"ref_index={ref_index!r}"
    return f"length_fn={getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def dataset_fingerprint(dataset: Any, how: str) -> str:
    """A cheap fingerprint: type, size, how lengths are measured, and a few samples' text.

    It reads at most 5 samples, so it catches a different dataset or
    measurement, not an edit deep inside one; delete the cache after such edits.
    """
    n = len(dataset)
    probe = sorted({0, n // 4, n // 2, (3 * n) // 4, n - 1}) if n else []
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{type(dataset).__module__}.{type(dataset).__qualname__}|{n}|{how}".encode())
    for i in probe:
        h.update(repr(dataset[i]).encode("utf-8", "replace")[:4096])
    return h.hexdigest()


def compute_lengths(
    dataset: Any,
    *,
    length_fn: Callable[[Any], int] | None = None,
    ref_index: Any = None,
    cache_path: str | os.PathLike[str] | None = None,
) -> NDArray[Any]:
    """Measure every sample of ``dataset`` once, with ``length_fn(sample)`` or ``ref_index``.

    >>> compute_lengths([([1, 2, 3], 0), ([4], 1)], ref_index=0).tolist()
    [3, 1]
    """
    if (length_fn is None) == (ref_index is None):
        raise ValueError(
            "give exactly one of length_fn or ref_index to measure samples, got "
            f"length_fn={length_fn!r} and ref_index={ref_index!r}"
        )
    if length_fn is not None and not callable(length_fn):
        raise TypeError(f"length_fn must be callable(sample) -> int, got length_fn={length_fn!r}")
    how = _describe(length_fn, ref_index)
    path = Path(cache_path) if cache_path is not None else None
    key = dataset_fingerprint(dataset, how) if path is not None else ""
    if path is not None and path.exists():
        with np.load(path, allow_pickle=False) as cached:
            if str(cached["fingerprint"]) == key:
                return check_lengths(cached["lengths"])
    measure = length_fn if length_fn is not None else (lambda s: field_length(s, ref_index))
    lengths = check_lengths(
        np.fromiter(
            (measure(dataset[i]) for i in range(len(dataset))), dtype=np.float64, count=len(dataset)
        ),
        name=f"lengths measured by {how}",
    )
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez(tmp, lengths=lengths, fingerprint=np.array(key))
        os.replace(tmp, path)
    return lengths
