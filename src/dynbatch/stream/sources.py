"""Where a stream's samples come from, and where each one is: numpy only, no paddle.

A source is one of three things (:func:`open_source`):

* a **re-iterable**: ``iter(source)`` starts from the beginning every time (a
  list, a ``paddle.io.IterableDataset``, a class whose ``__iter__`` opens a
  file). A generator or an iterator is refused: it can be read once, and every
  epoch, every rank and every DataLoader worker reads the stream anew;
* a **callable** ``source(epoch)`` returning an iterable of that epoch's
  samples (a generator function over files, say);
* a **list of shard paths** with a ``reader(path)`` (or ``reader(path, start=...)``
  that starts at record ``start``), such as :func:`read_jsonl`. Shards are
  shuffled with ``(seed, epoch)`` and split among the DataLoader workers
  (NOTE [ streams across ranks and workers ] in :mod:`dynbatch.stream.planner`).

Every record has a position ``(shard, record)``: the shard's index in the
reading slot's list of shards (always 0 for the other sources) and the
record's index in it. A resume starts at a position: a shard source skips the
shards before it unread and, with a ``reader(path, start=...)``, the records too;
the other sources read the records before it again, without measuring them
(NOTE [ resuming a stream ] in :mod:`dynbatch.stream.planner`).
"""

from __future__ import annotations

import inspect
import itertools
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._checks import check_int
from ..errors import InputError, InputTypeError

__all__ = ["Record", "Source", "open_source", "read_jsonl"]

#: a record's position and the record: ((shard, record index), sample)
Record = tuple[tuple[int, int], Any]
#: the random stream of the shard order, apart from the planner's
_SHARD_STREAM = 7


def read_jsonl(path: str | os.PathLike[str], start: int = 0) -> Iterator[Any]:
    """The JSON objects of a JSON-lines file, one a line, from record ``start`` on.

    Blank lines are not records. The records before ``start`` are skipped
    without being parsed, which is how a resumed stream seeks into a shard.

    Args:
        path: the JSON-lines file.
        start: the records to skip (counted without blank lines).

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "a.jsonl"
    >>> _ = p.write_text('{"t": "ab"}\\n\\n{"t": "c"}\\n{"t": "def"}\\n', encoding="utf-8")
    >>> [r["t"] for r in read_jsonl(p)], [r["t"] for r in read_jsonl(p, start=1)]
    (['ab', 'c', 'def'], ['c', 'def'])
    """
    if not _is_path(path):  # an int would open, and then close, the caller's descriptor
        raise InputTypeError(
            f"path must be a file path (str or os.PathLike) of a JSON-lines file, got "
            f"path={path!r:.80} ({type(path).__name__})"
        )
    start = check_int("start", start)
    return _read_jsonl(path, start)


def _read_jsonl(path: str | os.PathLike[str], start: int) -> Iterator[Any]:
    index = 0
    try:
        fh = open(path, encoding="utf-8-sig")  # noqa: SIM115 (closed by the with below)
    except FileNotFoundError:
        raise InputError(
            f"read_jsonl: path={os.fspath(path)!s}: no such file (a JSON-lines file to read)"
        ) from None
    except IsADirectoryError:
        raise InputError(
            f"read_jsonl: path={os.fspath(path)!s} is a directory, not a JSON-lines file: give "
            "its files (each a shard of the stream)"
        ) from None
    except OSError as exc:
        raise InputError(
            f"read_jsonl: path={os.fspath(path)!s} cannot be read ({exc.strerror}): give a "
            "readable JSON-lines file"
        ) from None
    with fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            index += 1
            if index <= start:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(
                    f"line {number} of {path} is not JSON ({exc.msg}, column {exc.colno}); "
                    "JSON lines hold one value a line"
                ) from None


def _takes_start(reader: Callable[..., Any]) -> bool:
    """Whether the reader takes ``start=`` (the record to begin at): it seeks by itself.

    >>> _takes_start(read_jsonl), _takes_start(lambda path, encoding="utf-8": [])
    (True, False)
    """
    try:
        return "start" in inspect.signature(reader).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        return False


def _takes_one_argument(function: Callable[..., Any]) -> bool:
    """Whether ``function(epoch)`` binds (True where the signature cannot be read).

    >>> _takes_one_argument(lambda epoch: []), _takes_one_argument(lambda: [])
    (True, False)
    """
    try:
        inspect.signature(function).bind(0)
    except TypeError:
        return False
    except ValueError:  # a builtin without a signature
        return True
    return True


@dataclass(frozen=True)
class Source:
    """A checked source: :meth:`records` of one reading slot of an epoch, from a position.

    ``sharded`` sources split their shards among ``slots`` reading slots; the
    others have one slot, the whole stream.
    """

    kind: str  # "iterable" | "callable" | "shards"
    obj: Any
    reader: Callable[..., Iterable[Any]] | None = None
    shuffle_shards: bool = True
    seed: int = 0

    @property
    def sharded(self) -> bool:
        return self.kind == "shards"

    def describe(self) -> str:
        if self.kind == "shards":
            return f"{len(self.obj)} shard(s)"
        return f"{type(self.obj).__name__} ({self.kind})"

    def shards(self, epoch: int, slot: int, slots: int) -> list[Any]:
        """The shards slot ``slot`` of ``slots`` reads in ``epoch``, in order."""
        paths: Sequence[Any] = self.obj
        order = np.arange(len(paths))
        if self.shuffle_shards:
            order = np.random.default_rng([self.seed, epoch, _SHARD_STREAM]).permutation(len(paths))
        return [paths[int(i)] for i in order[slot::slots]]

    def records(
        self, epoch: int, slot: int = 0, slots: int = 1, start: tuple[int, int] = (0, 0)
    ) -> Iterator[Record]:
        """The records of slot ``slot`` in ``epoch``, from position ``start`` on."""
        shard0, offset = start
        if self.kind != "shards":
            if slot:
                return
            stream = self._iterable(epoch)
            skipped = itertools.islice(stream, offset, None)  # read again, not measured
            yield from _named(
                skipped,
                0,
                offset,
                f"the source raised {{}} at record {{}} of the stream (epoch {epoch})",
            )
            return
        reader = self.reader
        if reader is None:  # open_source gives every shard source its reader
            raise InputError("a shard source needs reader=callable(path)")
        seeks = _takes_start(reader)
        for k, path in enumerate(self.shards(epoch, slot, slots)):
            if k < shard0:
                continue  # never opened: a shard source seeks by shard
            first = offset if k == shard0 else 0
            what = f"reader raised {{}} reading shard {path} at record {{}} (epoch {epoch})"
            try:
                if seeks:
                    rows: Iterable[Any] = reader(path, start=first)
                else:
                    rows = itertools.islice(
                        _iterable_of(reader(path), f"reader({path!r})"), first, None
                    )
            except InputError:
                raise
            except Exception as exc:  # the user's reader: named by its shard
                raise InputError(what.format(repr(exc), first)) from exc
            yield from _named(rows, k, first, what)

    def _iterable(self, epoch: int) -> Iterator[Any]:
        if self.kind == "callable":
            made = self.obj(epoch)
            return _iterable_of(made, f"source({epoch})")
        return iter(self.obj)


def _named(rows: Iterable[Any], shard: int, first: int, what: str) -> Iterator[Record]:
    """``rows`` as records from ``(shard, first)`` on; an error in reading them is an
    :class:`~dynbatch.InputError` that says where (``what.format(error, record)``)."""
    it = iter(rows)
    index = first
    while True:
        try:
            sample = next(it)
        except StopIteration:
            return
        except InputError:
            raise
        except Exception as exc:  # the user's source or reader
            raise InputError(what.format(repr(exc), index)) from exc
        yield (shard, index), sample
        index += 1


def _iterable_of(value: Any, what: str) -> Iterator[Any]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise InputTypeError(f"{what} must return an iterable of samples, got {value!r:.80}")
    return iter(value)


def _sized(value: Any) -> int | None:
    """``len(value)``, or None where it has none (a paddle IterableDataset's len() raises)."""
    if not isinstance(value, Sized):
        return None
    try:
        return len(value)
    except (TypeError, RuntimeError, NotImplementedError):
        return None


def _is_path(value: Any) -> bool:
    return isinstance(value, (str, os.PathLike))


def open_source(
    source: Any,
    reader: Callable[..., Iterable[Any]] | None = None,
    *,
    shuffle_shards: bool = True,
    seed: int = 0,
) -> Source:
    """Check ``source`` (and ``reader``) once and say what kind of stream it is.

    >>> open_source([3, 1, 2]).kind, open_source(lambda epoch: range(epoch)).kind
    ('iterable', 'callable')
    >>> open_source(x for x in [1])
    Traceback (most recent call last):
    ...
    dynbatch.errors.InputTypeError: source is a generator, which can be read only once; ...
    """
    if reader is not None:
        if not callable(reader):
            raise InputTypeError(
                f"reader must be callable(path) -> iterable of samples, got reader={reader!r}"
            )
        if _is_path(source) or not isinstance(source, (list, tuple)):
            raise InputTypeError(
                "with a reader, source must be a list of shard paths (e.g. sorted(glob(...))), "
                f"got source={source!r:.80}"
            )
        if not source:
            raise InputError("source is an empty list of shards: there is nothing to read")
        bad = [p for p in source if not _is_path(p)]
        if bad:
            raise InputTypeError(
                f"with a reader, every shard must be a path (str or os.PathLike), got {bad[0]!r}"
            )
        missing = [p for p in source if not Path(p).exists()]
        if missing:
            raise InputError(f"shard not found: {missing[0]} ({len(missing)} of {len(source)})")
        return Source("shards", list(source), reader, shuffle_shards, seed)
    if isinstance(source, (str, bytes)) or _is_path(source):
        raise InputTypeError(
            f"source is a path ({source!r}); to read files, pass source=[paths] with "
            "reader=dynbatch.read_jsonl (or your own reader(path))"
        )
    if isinstance(source, Iterable):
        if iter(source) is source:  # generators, file objects, iter(...): one pass only
            raise InputTypeError(
                f"source is a {type(source).__name__}, which can be read only once; every epoch, "
                "rank and DataLoader worker reads the stream anew: pass a re-iterable (a list, a "
                "paddle.io.IterableDataset) or a callable source(epoch) that returns a new "
                "iterable, e.g. lambda epoch: my_generator()"
            )
        if _sized(source) == 0:
            raise InputError("source is empty: there is nothing to batch")
        return Source("iterable", source, None, shuffle_shards, seed)
    if callable(source):
        if not _takes_one_argument(source):
            raise InputTypeError(
                f"source must be called as source(epoch) (a callable source returns the epoch's "
                f"samples), but source={source!r:.80} cannot take an epoch; wrap it, e.g. "
                "lambda epoch: my_generator()"
            )
        return Source("callable", source, None, shuffle_shards, seed)
    raise InputTypeError(
        "source must be a re-iterable of samples, a callable source(epoch) returning one, or a "
        f"list of shard paths with reader=...; got source={source!r:.80} "
        f"({type(source).__name__}, not iterable)"
    )
