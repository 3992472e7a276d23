"""Collators with the signatures and results of ``paddlenlp.data``: numpy only.

``Pad`` adds ``pad_to_multiple_of`` (pad the batch to a multiple, for tensor
cores; use the same value as the planner so costs match) and ``ret_mask`` (an
attention mask, 1 on real positions); and ``ret_length`` honours the dtype it
is given where paddlenlp always returns int32.

>>> Pad(pad_val=0)([[1, 2, 3], [4]]).tolist()
[[1, 2, 3], [4, 0, 0]]
>>> ids, lens = Pad(ret_length="int64", pad_to_multiple_of=4)([[1, 2, 3], [4]])
>>> ids.tolist(), lens.dtype.name
([[1, 2, 3, 0], [4, 0, 0, 0]], 'int64')
>>> Tuple(Pad(), Stack())([([1, 2], 0), ([3], 1)])
(array([[1, 2],
       [3, 0]]), array([0, 1]))

``Seq2SeqCollator`` batches (source, target) pairs for an encoder-decoder, each side padded to
its own longest.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._checks import InputError, InputTypeError, check_bool, check_int

# PackCollator's checks of token ids (one copy): a Python int beyond int64, a uint64 that wraps
from .pack_collate import _ints as token_ids
from .pack_collate import _refuse_beyond_int64 as refuse_beyond_int64
from .safe_collate import reaches_the_loop

__all__ = ["Dict", "Pad", "Seq2SeqCollator", "Stack", "Tuple"]

Batchify = Callable[[Sequence[Any]], Any]
_INT64_MAX = 2**63 - 1


def _non_empty(data: Sequence[Any], who: str) -> None:
    if len(data) == 0:
        raise InputError(f"{who} got an empty batch: nothing to collate")


def _check_axis(axis: Any) -> int:
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)):
        raise InputTypeError(f"axis must be an integer, got axis={axis!r}")
    return int(axis)


def _check_dtype(name: str, dtype: Any) -> Any:
    if dtype is None:
        return None
    try:
        np.dtype(dtype)
    except TypeError:
        raise InputTypeError(
            f"{name} must be None or a numpy dtype, got {name}={dtype!r}"
        ) from None
    return dtype


def _numbers(value: Any, who: str, i: int) -> NDArray[Any]:
    """Sample ``data[i]`` as an array of numbers (bool, int, float, complex), or a named error.

    NOTE [ collators take numbers ]
        numpy makes an array of anything: text becomes a unicode array, a dict
        or None an object array, and Pad then fails on ``int('abc')`` or, worse,
        returns an array paddle cannot hold. A collator batches token ids,
        labels and features: numbers, or (nested) sequences and arrays of them.
        Anything else is refused here, naming the sample and its value.
    """
    if isinstance(value, (str, bytes)):
        raise InputTypeError(
            f"{who}: data[{i}]={value!r} is text (a {type(value).__name__}); {who} takes numbers, "
            "or sequences or arrays of numbers: tokenize text to ids first"
        )
    try:
        arr = np.asarray(value)
    except ValueError:  # nested sequences of unequal lengths
        raise InputError(
            f"{who}: data[{i}]={value!r} is ragged: its inner sequences differ in length; a "
            "sample is one array, of numbers"
        ) from None
    if arr.dtype.kind not in "biufc":
        raise InputTypeError(
            f"{who}: data[{i}]={value!r} is not numbers (dtype {arr.dtype}); {who} takes "
            "numbers, or sequences or arrays of numbers: tokenize text to ids first"
        )
    return arr


def _same_shapes(arrs: Sequence[NDArray[Any]], who: str, axis: int | None) -> None:
    """Every sample's shape is the first one's (along ``axis`` they may differ)."""
    first = arrs[0].shape
    for i, arr in enumerate(arrs):
        shape = arr.shape
        same = len(shape) == len(first) and all(
            a == b
            for k, (a, b) in enumerate(zip(shape, first, strict=True))
            if axis is None or k != axis
        )
        if not same:
            rule = (
                "stacked samples must match"
                if axis is None
                else f"padded samples must differ only along axis={axis}"
            )
            raise InputError(
                f"{who}: sample {i} has shape {shape}, sample 0 has shape {first}; {rule}"
            )


class Stack:
    """Stack samples along a new ``axis`` (``np.stack``), optionally cast to ``dtype``.

    Args:
        axis: the new axis the samples are stacked along.
        dtype: dtype of the stacked array (default: the samples').
    """

    def __init__(self, axis: int = 0, dtype: Any = None) -> None:
        self._axis = _check_axis(axis)
        self._dtype = _check_dtype("dtype", dtype)

    @reaches_the_loop  # NOTE [ a collator safe by construction ]
    def __call__(self, data: Sequence[Any]) -> NDArray[Any]:
        _non_empty(data, "Stack")
        arrs = [_numbers(x, "Stack", i) for i, x in enumerate(data)]
        _same_shapes(arrs, "Stack", None)
        out = np.stack(arrs, axis=self._axis)
        return np.asarray(out.astype(self._dtype) if self._dtype else out)


class Pad:
    """Pad samples along ``axis`` to the longest one and stack them.

    Args:
        pad_val: the fill value.
        axis: the axis that varies in length.
        ret_length: also return the original lengths: True for int32 (as
            paddlenlp), or a dtype such as ``"int64"``.
        dtype: dtype of the padded array (default: the samples').
        pad_right: pad after the data (True) or before it.
        pad_to_multiple_of: round the padded length up to a multiple of this.
        ret_mask: also return an int64 mask ``[batch, length]``, 1 on data.
    """

    def __init__(
        self,
        pad_val: Any = 0,
        axis: int = 0,
        ret_length: Any = None,
        dtype: Any = None,
        pad_right: bool = True,
        pad_to_multiple_of: int | None = None,
        ret_mask: bool = False,
    ) -> None:
        if not isinstance(pad_val, (numbers.Number, np.number, np.bool_)):
            raise InputTypeError(
                f"pad_val must be a number (the fill value), got pad_val={pad_val!r:.80} "
                f"({type(pad_val).__name__})"
            )
        self._pad_val = pad_val
        self._axis = _check_axis(axis)
        if ret_length is not None and not isinstance(ret_length, (bool, np.bool_)):
            try:
                integer = np.issubdtype(np.dtype(ret_length), np.integer)
            except TypeError:
                integer = False
            if not integer:
                raise InputTypeError(
                    "ret_length must be None, True or an integer dtype such as 'int64', got "
                    f"ret_length={ret_length!r}"
                )
        self._ret_length = ret_length
        self._dtype = _check_dtype("dtype", dtype)
        self._pad_right = check_bool("pad_right", pad_right)
        self._multiple = check_int(
            "pad_to_multiple_of", pad_to_multiple_of, minimum=1, allow_none=True
        )
        self._ret_mask = check_bool("ret_mask", ret_mask)

    @reaches_the_loop  # NOTE [ a collator safe by construction ]
    def __call__(self, data: Sequence[Any]) -> Any:
        _non_empty(data, "Pad")
        arrs = [_numbers(x, "Pad", i) for i, x in enumerate(data)]
        if arrs[0].ndim == 0:  # scalars: paddlenlp stacks them
            _same_shapes(arrs, "Pad", None)
            return np.asarray(data, dtype=self._dtype if self._dtype is not None else np.int64)
        axis = self._axis
        ndim = arrs[0].ndim
        if not -ndim <= axis < ndim:
            raise InputError(f"Pad: axis={axis} is out of range for samples of {ndim} dimension(s)")
        axis %= ndim
        _same_shapes(arrs, "Pad", axis)
        lengths = [a.shape[axis] for a in arrs]
        longest = max(lengths)
        if self._multiple:
            longest = -(-longest // self._multiple) * self._multiple
        shape = list(arrs[0].shape)
        shape[axis] = longest
        out = np.full(
            [len(arrs), *shape],
            self._pad_val,
            dtype=arrs[0].dtype if self._dtype is None else self._dtype,
        )
        mask = np.zeros((len(arrs), longest), dtype=np.int64) if self._ret_mask else None
        for i, (arr, n) in enumerate(zip(arrs, lengths, strict=True)):
            span = slice(0, n) if self._pad_right else slice(longest - n, longest)
            index = [slice(None)] * arr.ndim
            index[axis] = span
            out[(i, *index)] = arr
            if mask is not None:
                mask[i, span] = 1
        extras: list[NDArray[Any]] = []
        if self._ret_length:
            dtype = "int32" if self._ret_length is True else self._ret_length
            extras.append(np.asarray(lengths, dtype=dtype))
        if mask is not None:
            extras.append(mask)
        return (out, *extras) if extras else out


def _check_fns(fns: Sequence[Any] | Mapping[Any, Any], who: str) -> None:
    pairs = fns.items() if isinstance(fns, Mapping) else enumerate(fns)
    for key, fn in pairs:
        if not callable(fn):
            raise InputTypeError(
                f"{who} takes batchify functions; fn[{key!r}]={fn!r} is not callable"
            )


def _extend(ret: list[Any], result: Any) -> None:
    if isinstance(result, (tuple, list)):
        ret.extend(result)
    else:
        ret.append(result)


class Tuple:
    """Apply the i-th function to the i-th field of every sample: ``Tuple(Pad(), Stack())``.

    A function that returns several arrays (``Pad(ret_length=True)``) adds them all.

    Args:
        fn: the first field's function, or a list or tuple of every field's.
        *args: the functions of the next fields, when ``fn`` is one function.
    """

    def __init__(self, fn: Batchify | Sequence[Batchify], *args: Batchify) -> None:
        if isinstance(fn, (list, tuple)):
            if args:
                raise InputError(
                    "Tuple takes Tuple(A, B, C) or Tuple([A, B, C]), not both; "
                    f"got fn={fn!r} and args={args!r}"
                )
            self._fn: tuple[Batchify, ...] = tuple(fn)
        else:
            self._fn = (fn, *args)  # type: ignore[arg-type]
        if not self._fn:
            raise InputError("Tuple needs at least one batchify function, got none")
        _check_fns(self._fn, "Tuple")

    @reaches_the_loop  # NOTE [ a collator safe by construction ]
    def __call__(self, data: Sequence[Sequence[Any]]) -> tuple[Any, ...]:
        _non_empty(data, "Tuple")
        for i, sample in enumerate(data):
            if not isinstance(sample, (tuple, list)):
                raise InputTypeError(
                    f"Tuple: sample {i} must be a tuple or list of {len(self._fn)} fields, "
                    f"got {sample!r}"
                )
            if len(sample) != len(self._fn):
                raise InputError(
                    f"Tuple has {len(self._fn)} functions but samples have {len(sample)} "
                    f"fields (sample {i})"
                )
        ret: list[Any] = []
        for i, fn in enumerate(self._fn):
            _extend(ret, fn([sample[i] for sample in data]))
        return tuple(ret)


class Dict:
    """Apply ``fn[key]`` to field ``key`` of every (dict) sample; results in key order.

    Args:
        fn: field name -> the function that batches that field.
    """

    def __init__(self, fn: Mapping[Any, Batchify]) -> None:
        if not isinstance(fn, Mapping):
            raise InputTypeError(
                f"Dict takes a dict of field name -> batchify function, got fn={fn!r}"
            )
        self._fn = dict(fn)
        _check_fns(self._fn, "Dict")

    @reaches_the_loop  # NOTE [ a collator safe by construction ]
    def __call__(self, data: Sequence[Mapping[Any, Any]]) -> tuple[Any, ...]:
        _non_empty(data, "Dict")
        for i, sample in enumerate(data):
            if not isinstance(sample, Mapping):
                key = next(iter(self._fn), None)
                raise InputTypeError(
                    f"Dict: sample {i} must be a dict with field {key!r}, got {sample!r}"
                )
            missing = [k for k in self._fn if k not in sample]
            if missing:
                raise InputError(
                    f"Dict: sample {i} has no field {missing[0]!r} (its fields: {list(sample)})"
                )
        ret: list[Any] = []
        for key, fn in self._fn.items():
            _extend(ret, fn([sample[key] for sample in data]))
        return tuple(ret)


# NOTE [ one collator for pairs ]
#     ``Dict({"src": Pad(pad_id, ret_mask=True), "tgt": Pad(-100)})`` pads both sides, but
#     the decoder's inputs come from the same target field as the labels, shifted, and a
#     ``Dict`` applies one function per field: the dataset would have to store each target
#     twice, shifted by hand, and the batch would be a tuple whose order is the reader's to
#     remember. One class with the four names a model takes is the smaller API: one
#     object to construct, no per-sample shifting, and a target that already holds
#     ``ignore_index`` (which would reach the decoder's embedding as an id) refused by name.
def _token_id(name: str, value: Any) -> int:
    """``value`` as a token id the collator writes itself: an int from 0 to 2**63 - 1."""
    token = int(check_int(name, value))
    if token > _INT64_MAX:
        raise InputError(
            f"{name} must be an integer from 0 to 2**63 - 1 (an int64 token id), got "
            f"{name}={value!r}"
        )
    return token


class Seq2SeqCollator:
    """Batch (source, target) pairs for an encoder-decoder: each side padded to its own longest.

    Every sample is a dict holding the source's token ids under ``source`` and the target's
    under ``target``. A batch is a dict of four int64 arrays, the names paddlenlp's and Hugging
    Face's encoder-decoders take:

    - ``input_ids`` ``[b, Ls]``: the sources, ``pad_id`` after each;
    - ``attention_mask`` ``[b, Ls]``: 1 on a source's tokens, 0 on its padding;
    - ``decoder_input_ids`` ``[b, Lt]``: each target shifted right, ``decoder_start_id``
      first and its last token dropped, ``pad_id`` after;
    - ``labels`` ``[b, Lt]``: the targets, ``ignore_index`` on padding, so
      ``token_loss(logits, labels, shift=False)`` sums over the targets' tokens only.

    Args:
        pad_id: the padding token of both sides' ids.
        decoder_start_id: the decoder's first input (BART's ``</s>``, T5's pad, a ``<s>``).
        ignore_index: the label of padding (``token_loss``'s ``ignore_index``).
        source: the samples' field of source ids.
        target: the samples' field of target ids (without the start token; end it with
            an end token if the model should learn to stop).

    Why one class rather than a ``Dict`` of ``Pad`` s: the decoder's inputs and the labels
    both come from the target, and a ``Dict`` applies one function per field, so the dataset
    would store every target twice, shifted by hand.

    >>> collate = Seq2SeqCollator(pad_id=0, decoder_start_id=2)
    >>> batch = collate([{"source": [5, 6, 7], "target": [8, 9, 3]},
    ...                  {"source": [4], "target": [7, 3]}])
    >>> {k: v.tolist() for k, v in batch.items()}  # doctest: +NORMALIZE_WHITESPACE
    {'input_ids': [[5, 6, 7], [4, 0, 0]], 'attention_mask': [[1, 1, 1], [1, 0, 0]],
     'decoder_input_ids': [[2, 8, 9], [2, 7, 0]], 'labels': [[8, 9, 3], [7, 3, -100]]}
    """

    def __init__(
        self,
        pad_id: int = 0,
        decoder_start_id: int = 0,
        ignore_index: int = -100,
        source: str = "source",
        target: str = "target",
    ) -> None:
        # the ids it writes itself are int64 as the samples' are: beyond, they wrapped
        self.pad_id = _token_id("pad_id", pad_id)
        self.decoder_start_id = _token_id("decoder_start_id", decoder_start_id)
        if isinstance(ignore_index, (bool, np.bool_)) or not isinstance(
            ignore_index, (int, np.integer)
        ):
            raise InputTypeError(
                f"ignore_index must be an integer (the label of padding, usually -100), got "
                f"ignore_index={ignore_index!r}"
            )
        if not -_INT64_MAX - 1 <= ignore_index <= _INT64_MAX:
            raise InputError(
                "ignore_index must be an integer from -2**63 to 2**63 - 1 (an int64 label, "
                f"usually -100), got ignore_index={ignore_index!r}"
            )
        self.ignore_index = int(ignore_index)
        for name, field in (("source", source), ("target", target)):
            if not isinstance(field, str) or not field:
                raise InputTypeError(
                    f"{name} must be a non-empty str (the samples' field of {name} ids), got "
                    f"{name}={field!r}"
                )
        if source == target:
            raise InputError(
                f"source and target must name two fields, got source={source!r} and "
                f"target={target!r}"
            )
        self.source, self.target = source, target

    def _side(self, data: Sequence[Any], field: str) -> list[NDArray[np.int64]]:
        who = f"Seq2SeqCollator ({field})"
        arrs = []
        for i, sample in enumerate(data):
            what = f"Seq2SeqCollator: sample {i}'s {field}"
            value = sample[field]
            if isinstance(value, (list, tuple)):  # an int beyond int64 reads as float or object
                refuse_beyond_int64(value, what)
            arr = _numbers(value, who, i)
            if arr.ndim != 1 or arr.size == 0 or arr.dtype.kind not in "iu":
                raise InputError(
                    f"{what}={arr.tolist()!r:.80} must be a non-empty 1-D sequence of integer "
                    "token ids"
                )
            arrs.append(token_ids(arr, what))  # PackCollator's check: uint64 would wrap
        return arrs

    @reaches_the_loop  # NOTE [ a collator safe by construction ]
    def __call__(self, data: Sequence[Mapping[str, Any]]) -> dict[str, NDArray[np.int64]]:
        _non_empty(data, "Seq2SeqCollator")
        for i, sample in enumerate(data):
            if not isinstance(sample, Mapping):
                raise InputTypeError(
                    f"Seq2SeqCollator: sample {i} must be a dict with fields {self.source!r} "
                    f"and {self.target!r}, got {sample!r:.80}"
                )
            missing = [k for k in (self.source, self.target) if k not in sample]
            if missing:
                raise InputError(
                    f"Seq2SeqCollator: sample {i} has no field {missing[0]!r} (its fields: "
                    f"{list(sample)})"
                )
        sources = self._side(data, self.source)
        targets = self._side(data, self.target)
        for side, arrs in ((self.source, sources), (self.target, targets)):
            for i, arr in enumerate(arrs):
                if arr.min() < 0 and (side == self.source or self.ignore_index not in arr):
                    raise InputError(
                        f"Seq2SeqCollator: sample {i}'s {side} holds id {arr.min()}: token ids "
                        "must be >= 0 (an embedding's rows)"
                    )
        for i, arr in enumerate(targets):
            if (arr == self.ignore_index).any():
                raise InputError(
                    f"Seq2SeqCollator: sample {i}'s {self.target} holds "
                    f"ignore_index={self.ignore_index}: give the target's token ids, the "
                    "collator writes ignore_index on padding itself"
                )
        input_ids, attention_mask = Pad(self.pad_id, dtype="int64", ret_mask=True)(sources)
        starts = [
            np.concatenate([[self.decoder_start_id], arr[:-1]]).astype(np.int64) for arr in targets
        ]
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "decoder_input_ids": Pad(self.pad_id, dtype="int64")(starts),
            "labels": Pad(self.ignore_index, dtype="int64")(targets),
        }
