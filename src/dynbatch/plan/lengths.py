"""Per-sample lengths: from an array, a ``length_fn``, or the size of a field; cached on disk.

Lengths are measured once per dataset (the original study tokenized every
sample twice: once to plan, once to train) and, with ``cache_path``, stored
next to a fingerprint of the dataset so a later run loads them instead.

NOTE [ what decides the lengths ]
    A sample's length is ``length_fn(sample)`` (or its field's size), so the
    lengths are decided by the measure and by every sample. The cache was keyed
    on five samples: a pair's target changed between them was served its stale
    lengths without a word. No check of a subset can be sound (an edit of one
    sample in ``N`` is missed by ``k`` random probes with chance ``1 - k/N``),
    so the key now holds a digest of every sample's pickle (``protocol=4``,
    blake2b), and a load that finds a cache reads every sample once to recompute
    it: what it saves is the measuring. Pickles hold a sample's whole content
    (an array's every element, where ``repr`` elides the middle of a long one),
    so a changed sample changes the key unless blake2b's 128 bits collide or
    the sample's own ``__reduce__`` leaves content out. What it costs,
    measured on the 7,766 ChnSentiCorp reviews as dicts of text and label: 1.8
    µs a sample to pickle and hash, where counting their WordPiece tokens took
    40 µs (side by side, under load); a dataset whose ``__getitem__`` does the
    costly work (a lazy tokenizing map) pays it on every load, cached or not,
    and is better given ``lengths=`` saved by the user. A sample that cannot
    be pickled (a lambda in it) has no key: its lengths are measured, not
    cached, with a warning. Two pickles of one content may differ (a set of
    strings is ordered by the process's hash seed): the cache is then missed
    and measured again, never served stale. The measure is keyed by its code
    and the plain values it captures (:func:`_code_text`) and by the measured
    lengths of five samples: a tokenizer changed behind an unchanged function
    shows only where those five change, so delete the cache after changing one.
    A cache is written by the pass that measures (no second read); a stale one
    costs a pass to fingerprint and a pass to measure.

NOTE [ lengths of pairs ]
    A sample has one length (its tokens), or two: the (source, target)
    lengths of an encoder–decoder's pair, an ``[N, 2]`` array. Every entry
    point takes either shape and checks it here, with
    :func:`check_plan_lengths`; a 1-D array keeps its meaning exactly. A batch
    of pairs is padded on each side to its longest source and its longest
    target, and is charged ``cost(n, Ls, Lt)`` (NOTE [ costs of pairs ] in
    :mod:`dynbatch.plan.pair_costs`). Where the planner needs one number per
    sample (the sorted orders, ``group_by_length``, the length strata of mixed
    updates) a pair's is its tokens, source plus target (:func:`sample_tokens`):
    both sides are computed, so both count. Its loss tokens are its target's
    (:func:`loss_token_bound`): an encoder–decoder's loss is over the target,
    so an update in ``"tokens"`` counts target tokens (:func:`update_tokens`),
    the tokens a sequence-to-sequence loss averages over, or the ``loss_tokens``
    given (each at most its target). ``group_by_length`` is the
    one place this costs padding: updates of near-equal sums hold sides of
    many lengths, so the shorter side pads heavily (the source 0.59, the target
    0.87, on 20,000 pairs of sources in [5, 40) and targets in [20, 200);
    the source 0.2 to 0.5 where targets are many times longer), where the
    bucket order, which buckets each side, pads 0.99 and 0.98 on the first.
"""

from __future__ import annotations

import functools
import hashlib
import numbers
import os
import pickle
import re
import warnings
import zipfile
from collections.abc import Callable, Mapping, Sized
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._checks import (
    MAX_LENGTH,
    InputError,
    InputTypeError,
    check_dataset,
    check_lengths,
    check_loss_tokens,
)
from .._files import atomic_write

__all__ = [
    "SIDES",
    "check_pair_loss_tokens",
    "check_plan_lengths",
    "compute_lengths",
    "dataset_fingerprint",
    "field_length",
    "is_pairs",
    "loss_token_bound",
    "measure_failed",
    "reduce_batches",
    "sample_tokens",
    "update_tokens",
]

#: the sides of a pair, by column
SIDES = ("source", "target")


def check_plan_lengths(lengths: Any, name: str = "lengths") -> NDArray[np.int64]:
    """``lengths`` checked: one positive whole number per sample (1-D), or an ``[N, 2]`` array
    of (source, target) lengths (NOTE [ lengths of pairs ]).

    A 1-D array is checked exactly as before; a pair's error names its sample and side.

    >>> check_plan_lengths([[3, 5], [1, 2]]).tolist()
    [[3, 5], [1, 2]]
    >>> check_plan_lengths([[3, 5], [1, 0]])
    Traceback (most recent call last):
    ...
    dynbatch.errors.InputError: lengths must be positive; lengths[1, 1]=0 (the target of sample 1)
    """
    if isinstance(lengths, np.matrix):  # its reshape stays 2-D, (1, N): an array's does not
        lengths = np.asarray(lengths)
    try:
        ndim = np.ndim(lengths)
    except ValueError:  # ragged rows, which numpy names by no row
        _refuse_ragged(lengths, name)
        ndim = -1
    if ndim != 2:
        return check_lengths(lengths, name)
    shape = np.shape(lengths)
    if shape[1] != 2:
        raise InputError(
            f"{name} must be a 1-D array of positive integers, got an array of shape {shape}: "
            "give one length per sample, or an [N, 2] array of (source, target) lengths, one "
            f"row per sample (a 2-D array has 2 columns, not {shape[1]})"
        )
    # row by row, so that a bool inside a list of rows is caught as in a list of lengths
    rows = isinstance(lengths, (list, tuple))
    flat = [x for row in lengths for x in row] if rows else np.reshape(lengths, -1)
    try:
        values = check_lengths(flat, name)
    except InputError as exc:  # name the sample and the side, not the flat index
        found = re.search(re.escape(name) + r"\[(\d+)\]", str(exc))
        if found is None:
            raise
        sample, side = divmod(int(found[1]), 2)
        entry = f"{name}[{sample}, {side}]"
        message = str(exc).replace(found[0], entry, 1)
        raise type(exc)(f"{message} (the {SIDES[side]} of sample {sample})") from None
    return np.ascontiguousarray(values.reshape(-1, 2))


def _refuse_ragged(lengths: Any, name: str) -> None:
    """Name the first row of ``lengths`` (a sequence numpy found ragged) whose shape is not the
    first row's; return if there is none to name (the 1-D check then refuses it)."""

    def held(row: Any) -> str:
        try:
            shape = np.shape(row)
        except ValueError:
            return "is ragged itself"
        if shape == ():
            return "is one length"
        return f"holds {shape[0]} value{'s' * (shape[0] != 1)}"

    def shown(row: Any) -> str:
        text = repr(row)
        return text if len(text) <= 40 else text[:37] + "..."

    if not isinstance(lengths, (list, tuple)) or not lengths:
        return
    first = held(lengths[0])
    for i, row in enumerate(lengths):
        if held(row) != first or first == "is ragged itself":
            raise InputTypeError(
                f"{name} must be 1-D (one length per sample) or [N, 2] (a row of (source, "
                f"target) lengths per sample); {name}[{i}]={shown(row)} {held(row)} where "
                f"{name}[0]={shown(lengths[0])} {first}"
            )


def is_pairs(lengths: NDArray[Any]) -> bool:
    """Whether checked lengths are (source, target) pairs."""
    return bool(lengths.ndim == 2)


def sample_tokens(lengths: NDArray[np.int64]) -> NDArray[np.int64]:
    """Each sample's tokens: its length, or a pair's source plus target: the one number per
    sample where the planner needs one (NOTE [ lengths of pairs ]).

    Anything but an ``[N, 2]`` array is returned as it is, for the caller's own check.

    >>> sample_tokens(np.array([[3, 5], [1, 2]])).tolist(), sample_tokens(np.array([4])).tolist()
    ([8, 3], [4])
    """
    if isinstance(lengths, np.ndarray) and lengths.ndim == 2 and lengths.shape[1] == 2:
        return np.asarray(lengths[:, 0] + lengths[:, 1])  # sum(axis=1) is ~10x slower
    return lengths


def update_tokens(lengths: NDArray[np.int64]) -> NDArray[np.int64]:
    """What an update in ``"tokens"`` counts per sample: its length, or a pair's target length,
    the tokens its loss is over (NOTE [ lengths of pairs ]).

    Anything but an ``[N, 2]`` array is returned as it is, for the caller's own check.

    >>> update_tokens(np.array([[3, 5], [1, 2]])).tolist(), update_tokens(np.array([4])).tolist()
    ([5, 2], [4])
    """
    if isinstance(lengths, np.ndarray) and lengths.ndim == 2 and lengths.shape[1] == 2:
        return np.ascontiguousarray(lengths[:, 1])
    return lengths


def reduce_batches(
    ufunc: np.ufunc, lengths: NDArray[Any], indices: NDArray[Any] | None, starts: NDArray[Any]
) -> NDArray[Any]:
    """``ufunc.reduceat`` over each batch's lengths (``indices``, or the lengths in their order
    if None, cut at ``starts``): a value per batch, or for pairs a row of each side's.

    A side at a time: numpy's ``reduceat`` along the rows of an ``[N, 2]`` array, or on a
    strided column, is many times slower than on a contiguous column.

    >>> reduce_batches(np.maximum, np.array([[3, 9], [5, 1], [2, 2]]), np.array([0, 1, 2]),
    ...                np.array([0, 2])).tolist()
    [[5, 9], [2, 2]]
    """
    if lengths.ndim == 2:  # a side at a time, gathered into a contiguous column
        columns = [lengths[:, k] for k in range(lengths.shape[1])]
        taken = [np.ascontiguousarray(c) if indices is None else c[indices] for c in columns]
        return np.stack([ufunc.reduceat(c, starts) for c in taken], axis=1)
    return np.asarray(ufunc.reduceat(lengths if indices is None else lengths[indices], starts))


def loss_token_bound(lengths: NDArray[np.int64]) -> NDArray[np.int64]:
    """The most loss tokens each sample may have: its length, or a pair's target length."""
    return lengths[:, 1] if lengths.ndim == 2 else lengths


def check_pair_loss_tokens(loss_tokens: Any, lengths: NDArray[np.int64]) -> Any:
    """``loss_tokens`` checked against each sample's length, or a pair's target length.

    >>> check_pair_loss_tokens([3, 2], np.array([[9, 2], [9, 2]]))
    Traceback (most recent call last):
    ...
    dynbatch.errors.InputError: loss_tokens[0]=3 is more than the sample's target length ...
    """
    if lengths.ndim == 1 or loss_tokens is None:
        return check_loss_tokens(loss_tokens, lengths)
    try:
        shape = np.shape(loss_tokens)
    except ValueError:  # ragged: the check below names it
        shape = ()
    if len(shape) > 1:  # a row per pair would be flattened into twice the entries
        raise InputError(
            f"loss_tokens must be one value per sample, got an array of shape {shape}: a "
            "(source, target) pair's loss is over its target, so give each pair's target loss "
            f"tokens, an array of shape ({len(lengths)},)"
        )
    counts = np.asarray(check_loss_tokens(loss_tokens, np.full(len(lengths), MAX_LENGTH)))
    over = counts > loss_token_bound(lengths)
    if over.any():
        i = int(np.argmax(over))
        raise InputError(
            f"loss_tokens[{i}]={counts[i]} is more than the sample's target length "
            f"lengths[{i}, 1]={lengths[i, 1]}: a pair's loss is over its target, so it has at "
            "most as many loss tokens as target tokens"
        )
    return counts


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


def _measured_sample(value: Any, where: str) -> int | tuple[int, int]:
    """A sample's length, or its (source, target) lengths when ``value`` is a pair."""
    if isinstance(value, (tuple, list, np.ndarray)) and np.shape(value) == (2,):
        source, target = value
        return _measured(source, f"{where} (its source)"), _measured(
            target, f"{where} (its target)"
        )
    scalar = isinstance(value, np.ndarray) and value.ndim == 0
    plain = scalar or isinstance(value, (numbers.Real, np.number, str, bytes)) or value is None
    if not plain:  # a container or an iterator: neither a length nor a pair
        size = f" (it holds {len(value)})" if isinstance(value, Sized) else ""
        raise InputTypeError(
            f"{where} must be a whole number, got {value!r}: one length, or two, a (source, "
            f"target) pair{size}"
        )
    return _measured(value, where)


def _one_shape(values: list[Any], how: str) -> None:
    """Refuse a ``length_fn`` that returns a length for some samples and a pair for others."""
    pairs = [isinstance(v, tuple) for v in values]
    if any(pairs) and not all(pairs):
        one, two = pairs.index(False), pairs.index(True)
        raise InputError(
            f"{how} returned one length for sample {one} ({values[one]!r}) and two, a (source, "
            f"target) pair, for sample {two} ({values[two]!r}): it must return one length for "
            "every sample, or a pair for every sample"
        )


def dataset_fingerprint(
    dataset: Any,
    how: str,
    measure: Callable[[Any], int] | None = None,
    name: str = "length_fn",
) -> str | None:
    """The cache's key: type, size, how lengths are measured, every sample's content and, with
    ``measure``, the measured lengths of 5 samples (NOTE [ what decides the lengths ]).

    Reads every sample once and measures 5; None when a sample cannot be pickled (no key
    covers it), with a warning. ``name`` is what an error in ``measure`` is named by.
    """
    content = _content_digest(dataset)
    if content is None:
        return None
    probes = {}
    if measure is not None:
        for i in _probes(len(dataset)):
            probes[i] = _measured_sample(_measure(measure, dataset[i], i, name), f"{name} of {i}")
    return _key(dataset, how, content, probes)


def _probes(n: int) -> list[int]:
    """The samples whose measured lengths the key holds: a changed ``length_fn`` shows there."""
    return sorted({0, n // 4, n // 2, (3 * n) // 4, n - 1}) if n else []


def _content_digest(dataset: Any) -> Any:
    """A digest of every sample's pickle; None (with a warning) at the first sample that
    cannot be pickled."""
    h = hashlib.blake2b(digest_size=16)
    for i in range(len(dataset)):
        data = _pickled(dataset[i], i)
        if data is None:
            return None
        h.update(data)
    return h


def _pickled(sample: Any, i: int) -> bytes | None:
    """``sample`` pickled, what the cache's key holds of it; None, with a warning, where it
    cannot be (NOTE [ what decides the lengths ])."""
    try:
        return pickle.dumps(sample, protocol=4)
    except Exception as exc:  # a lambda, a lock, an open file: whatever pickle refuses
        warnings.warn(
            f"cache_path: sample {i} cannot be pickled ({type(exc).__name__}: {exc}), so no "
            "fingerprint covers every sample: the lengths are measured, not cached",
            stacklevel=4,
        )
        return None


def _key(dataset: Any, how: str, content: Any, probes: Mapping[int, Any]) -> str:
    h = hashlib.blake2b(digest_size=16)
    kind = f"{type(dataset).__module__}.{type(dataset).__qualname__}"
    h.update(f"{kind}|{len(dataset)}|{how}|".encode())
    h.update(content.digest())
    h.update(repr(sorted(probes.items())).encode())
    return h.hexdigest()


def _read_cache(path: Path, key: str) -> NDArray[Any] | None:
    """The cached lengths for ``key``; None if absent, stale or unreadable (with a warning)."""
    try:
        with np.load(path, allow_pickle=False) as cached:
            if str(cached["fingerprint"]) != key:
                return None
            return check_plan_lengths(cached["lengths"], name=f"lengths cached in {path}")
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
    length_fn: Callable[[Any], Any] | None = None,
    ref_index: Any = None,
    cache_path: str | os.PathLike[str] | None = None,
) -> NDArray[Any]:
    """Measure every sample of ``dataset`` once, with ``length_fn(sample)`` or ``ref_index``.

    Args:
        dataset: the samples (map-style: ``len()`` and ``[i]``).
        length_fn: ``length_fn(sample) -> int``, called once per sample; or ``-> (int, int)``,
            a (source, target) pair for every sample, which gives an ``[N, 2]`` array.
        ref_index: the field of each sample whose size is its length (an index into a tuple
            sample, a key of a dict one), instead of ``length_fn``.
        cache_path: store the lengths here (``.npz``) keyed by a fingerprint of every sample
            and of the measure; a later call on the same dataset reads its samples once and
            loads the lengths instead of measuring; a changed sample is measured again.

    >>> compute_lengths([([1, 2, 3], 0), ([4], 1)], ref_index=0).tolist()
    [3, 1]
    >>> compute_lengths([("abc", "xy"), ("d", "efgh")], length_fn=lambda s: (len(s[0]), len(s[1])))
    array([[3, 2],
           [1, 4]])
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
    described = f"{how}|{_code_text(length_fn)}"
    key: str | None = None
    content = None  # NOTE [ what decides the lengths ]
    if path is not None and path.is_dir():
        raise InputError(
            f"cache_path={str(path)!r} is a directory; give a file path such as lengths.npz"
        )
    if path is not None and path.exists():  # a pass that reads every sample, measures 5
        key = dataset_fingerprint(dataset, described, measure, how)
        cached = None if key is None else _read_cache(path, key)
        if cached is not None:
            return cached
    elif path is not None:  # nothing cached: the one pass measures and fingerprints
        content = hashlib.blake2b(digest_size=16)
    values = []
    for i in range(len(dataset)):
        sample = dataset[i]
        if content is not None:
            data = _pickled(sample, i)
            if data is None:  # warned: measured, not cached
                content = None
            else:
                content.update(data)
        values.append(_measured_sample(_measure(measure, sample, i, how), f"{how} of sample {i}"))
    _one_shape(values, how)
    lengths = check_plan_lengths(
        np.asarray(values, dtype=np.int64), name=f"lengths measured by {how}"
    )
    if content is not None:
        key = _key(dataset, described, content, {i: values[i] for i in _probes(len(dataset))})
    if path is not None and key is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(path) as fh:  # NOTE [ atomic writes ]
            np.savez(fh, lengths=lengths, fingerprint=np.array(key))
    return lengths
