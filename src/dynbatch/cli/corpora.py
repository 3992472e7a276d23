"""Reading a corpus for ``dynbatch stats``: per-sample lengths, and where each sample is.

Inputs: a ``.npy`` of lengths, a text file (a sample a line; of lengths, one number a line:
NOTE [ a text of numbers is lengths ]), a CSV/TSV (``--column``) or JSON lines (``--field``:
text, or a list of tokens). Text is measured in characters, or in BERT WordPiece tokens with
``--vocab``. Two columns (fields), or a ``.npy`` of ``[N, 2]``, are
(source, target) pairs, each side measured alike (NOTE [ stats of pairs ] in
:mod:`dynbatch.cli`). Every bad input is a :class:`UsageError` naming the flag, or the file's
line (the ``.npy`` index) and the value.

NOTE [ a text of numbers is lengths ]
    A plain text file whose every non-empty line is a number (``12``, or ``np.savetxt``'s
    ``1.200000000000000000e+01``) is read as lengths, one a line, as the ``.npy`` of those
    lengths would be, and a line on stderr says so. It was read as text: each line's digits
    counted ("lengths 1..3 (median 2)"), a meaningless plan, exit 0. Taken rather than
    refused: such a file is never text worth planning (every sample a few digits long, a
    plan for no model), and it is what ``print(len(x))``, ``np.savetxt`` or a shell
    pipeline writes for lengths, so refusing it would only ask for a conversion to
    ``.npy``. One line of anything else (a word, ``nan``) makes the whole file text, so a
    corpus is never taken for lengths; only the first non-empty line may be other, a header
    above the numbers (``length``, as a one-column ``to_csv`` writes): it made the file
    text, its digits planned, exit 0, so it is left out and the line on stderr names it. A
    bad length is named by its line, as a ``.npy``'s by its index (``--skip-empty`` leaves
    zeros out; ``--add`` and ``--truncate`` apply), and ``--vocab``, which measures text,
    is refused. A table's ``--column`` (a JSON lines' ``--field``) whose every value is a
    number, or both of a pair's, is lengths alike (what ``df.to_csv`` of lengths writes):
    its digits were planned, exit 0; one value of anything else keeps them text, and with
    ``--vocab`` they are text to count.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from tqdm import tqdm

from .._checks import MAX_LENGTH, check_int
from ..plan.lengths import SIDES, check_plan_lengths
from .args import UsageError

__all__ = ["CSV_FIELD_LIMIT", "Corpus", "read_corpus", "read_lengths"]

#: csv's default field limit (131,072 characters) is shorter than a long document; this is
#: the largest value a C long holds on every platform (``sys.maxsize`` overflows on Windows).
CSV_FIELD_LIMIT = 2**31 - 1


@dataclass(frozen=True)
class Corpus:
    """Lengths read from an input file, and where each sample is in that file.

    Args:
        path: the input file.
        lengths: one positive length per sample, or an ``[N, 2]`` array of (source, target)
            lengths.
        rows: per sample, its 1-based line number in a text input, or its
            index in a ``.npy``: what a person looks for in the file.
        by_line: True for text inputs (``rows`` are line numbers).
        numbers: True for a text file of lengths, one number a line
            (NOTE [ a text of numbers is lengths ]).
        note: what stderr says of how the input was read (lengths, one number a line).

    >>> Corpus(Path("r.csv"), np.array([5, 9]), np.array([2, 4]), by_line=True).where(1)
    'line 4 of r.csv'
    >>> Corpus(Path("l.npy"), np.array([5, 9]), np.array([0, 1]), by_line=False).where(1)
    'l.npy[1]'
    """

    path: Path
    lengths: NDArray[np.int64]
    rows: NDArray[np.int64]
    by_line: bool
    numbers: bool = False
    note: str | None = None

    def where(self, i: int) -> str:
        """Where sample ``i`` is in the input, as a person would look for it."""
        row = int(self.rows[i])
        return f"line {row} of {self.path}" if self.by_line else f"{self.path}[{row}]"

    @property
    def pairs(self) -> bool:
        """Whether the samples are (source, target) pairs."""
        return self.lengths.ndim == 2


#: (line number, per column or field its text or list of tokens)
Record = tuple[int, list[str | list[Any]]]
#: the column (field) read, or the source's and the target's of a pair
Texts = str | tuple[str, str]


def _names(texts: Texts) -> tuple[str, ...]:
    return (texts,) if isinstance(texts, str) else texts


def _csv_records(path: Path, columns: Texts, delimiter: str) -> Iterator[Record]:
    names = _names(columns)
    old = csv.field_size_limit(CSV_FIELD_LIMIT)
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:
            reader = csv.reader(fh, delimiter=delimiter)
            header: list[str] | None = None
            where = 0
            at: list[int] = []
            try:
                for row in reader:
                    line, where = where + 1, reader.line_num
                    if not row:  # a blank line
                        continue
                    if header is None:
                        header = row
                        for column in names:
                            if column not in header:
                                raise UsageError(
                                    f"--column {column!r} is not in {path}; columns: {header}"
                                )
                        at = [header.index(column) for column in names]
                        continue
                    if max(at) >= len(row):
                        k = next(k for k, i in enumerate(at) if i >= len(row))
                        raise UsageError(
                            f"line {line} of {path} has {len(row)} field(s) and no "
                            f"{names[k]!r} (column {at[k] + 1} of the header)"
                        )
                    yield line, [row[i] for i in at]
            except csv.Error as exc:
                raise UsageError(
                    f"line {reader.line_num} of {path} is not valid CSV: {exc}"
                ) from None
    finally:
        csv.field_size_limit(old)
    if header is None:
        raise UsageError(f"{path} is empty: no header row with a {names[0]!r} column")


def _jsonl_records(path: Path, fields: Texts) -> Iterator[Record]:
    names = _names(fields)
    with open(path, encoding="utf-8-sig") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UsageError(
                    f"line {number} of {path} is not JSON ({exc.msg}, column {exc.colno}); "
                    "JSON lines hold one object a line"
                ) from None
            if not isinstance(record, dict):
                raise UsageError(
                    f"line {number} of {path} is a JSON {type(record).__name__}, not an object "
                    f"with a {names[0]!r} field: {line.strip()[:60]}"
                )
            values: list[str | list[Any]] = []
            for field in names:
                if field not in record:
                    raise UsageError(  # the fields it has, as a CSV's columns are listed
                        f"--field {field!r} is missing on line {number} of {path}; "
                        f"fields: {list(record)}"
                    )
                value = record[field]
                if not isinstance(value, (str, list)):
                    raise UsageError(
                        f"--field {field!r} on line {number} of {path} must be text (a string) "
                        f"or tokens (a list), got {json.dumps(value)[:60]}"
                    )
                values.append(value)
            yield number, values


def _text_records(path: Path) -> Iterator[Record]:
    with open(path, encoding="utf-8-sig") as fh:
        for number, line in enumerate(fh, 1):
            yield number, [line.rstrip("\n")]


def _records(path: Path, column: Texts | None, field: Texts | None) -> Iterator[Record]:
    suffix = path.suffix.lower()
    if suffix in (".csv", ".tsv"):
        if field is not None:
            raise UsageError(f"--field is for JSON lines; {path} is a table: use --column")
        if column is None:
            raise UsageError(f"{path} is a table: name the text column with --column")
        return _csv_records(path, column, "\t" if suffix == ".tsv" else ",")
    if suffix in (".jsonl", ".json"):
        if column is not None:
            raise UsageError(f"--column is for a CSV/TSV; {path} is JSON lines: use --field")
        if field is None:
            raise UsageError(f"{path} is JSON lines: name the text field with --field")
        return _jsonl_records(path, field)
    for flag, value in (("--column", column), ("--field", field)):
        if value is not None:
            raise UsageError(
                f"{flag} is for a CSV/TSV or JSON lines file; {path} is read as plain text, "
                "a sample a line"
            )
    return _text_records(path)


def _load_npy(path: Path, skip_empty: bool) -> tuple[NDArray[Any], NDArray[np.int64]]:
    """The lengths of a ``.npy`` and their indices, each bad entry named by its index."""
    try:
        raw = np.load(path, allow_pickle=False)
    except (ValueError, EOFError, OSError) as exc:  # object arrays, truncated, not a .npy
        raise UsageError(f"{path} is not a readable .npy array of lengths: {exc}") from None
    if not isinstance(raw, np.ndarray):
        raise UsageError(f"{path} is not a single .npy array (an .npz archive?)")
    if raw.ndim != 1 and (raw.ndim != 2 or raw.shape[1] != 2):
        raise UsageError(
            f"{path} must hold a 1-D array of lengths, or an [N, 2] array of (source, target) "
            f"lengths, got shape {raw.shape}"
        )
    if raw.size == 0:
        raise UsageError(f"{path} holds no lengths (an empty array): there is nothing to batch")
    if raw.dtype == np.bool_ or raw.dtype.kind not in "iuf":
        raise UsageError(
            f"{path} must hold integer lengths, got dtype {raw.dtype} (first value {raw[0]!r})"
        )
    index = np.arange(len(raw), dtype=np.int64)
    if skip_empty:
        keep = raw != 0 if raw.ndim == 1 else (raw != 0).all(axis=1)
        raw, index = raw[keep], index[keep]
        if raw.size == 0:
            raise UsageError(f"{path} holds only zeros: nothing is left after --skip-empty")
    if raw.ndim == 2:  # NOTE [ stats of pairs ]: an entry named by its row and side
        for bad, what in _npy_checks(raw):
            if bad.any():
                row, side = divmod(int(np.argmax(bad)), 2)
                raise UsageError(
                    f"{path}[{int(index[row])}, {side}]={raw[row, side]!r} (the {SIDES[side]} of "
                    f"sample {int(index[row])}): {what}"
                )
        return raw.astype(np.int64), index
    for bad, what in _npy_checks(raw):
        if bad.any():
            k = int(np.argmax(bad))
            raise UsageError(f"{path}[{int(index[k])}]={raw[k]!r}: {what}")
    return raw.astype(np.int64), index


def _npy_checks(raw: NDArray[Any]) -> list[tuple[NDArray[np.bool_], str]]:
    """Each check of a ``.npy``'s lengths: where it fails, and what a length must be."""
    return [
        (~np.isfinite(raw) | (raw != np.round(raw)), "a length must be a whole number"),
        (raw < 0, "a length must be >= 1"),
        (raw == 0, "a length must be >= 1 (pass --skip-empty to leave zero lengths out)"),
        (raw >= MAX_LENGTH, "a length must be below 2**53"),
    ]


def read_corpus(
    path: str | Path,
    *,
    column: Texts | None = None,
    field: Texts | None = None,
    vocab: str | Path | None = None,
    add: int = 0,
    truncate: int | None = None,
    skip_empty: bool = False,
    progress: bool = True,
) -> Corpus:
    """Read per-sample lengths, remembering where each sample is in the file.

    Args:
        path: a ``.npy`` of lengths, a text file (a sample a line), a CSV/TSV
            (``column``) or JSON lines (``field``: text, or a list of tokens).
        column: the text column of a CSV/TSV, or the source's and the target's columns of
            (source, target) pairs.
        field: the text field of a JSONL file, or the source's and the target's fields.
        vocab: count BERT WordPiece tokens with this vocabulary instead of
            characters (:func:`dynbatch.plan.text.wordpiece_counter`: paddlenlp's
            count, no paddle import).
        add: added to every length (``2`` for ``[CLS]`` and ``[SEP]``; both sides of a pair).
        truncate: lengths are cut at this (both sides of a pair).
        skip_empty: leave out samples of length 0 (empty rows) instead of
            refusing them.
        progress: show a progress bar (tqdm, on stderr) while reading text, when
            stderr is a terminal.

    Raises:
        UsageError: for any bad input; the message names the flag, or the
            file's line (or the ``.npy`` index) and the value.

    >>> import os, tempfile
    >>> text = os.path.join(tempfile.mkdtemp(), "r.txt")
    >>> _ = open(text, "w", encoding="utf-8").write("好的\\n\\n很好\\n")
    >>> read_corpus(text, progress=False)
    Traceback (most recent call last):
    ...
    dynbatch.cli.args.UsageError: line 2 of .../r.txt is empty (0 characters); ...
    >>> read_corpus(text, add=2, progress=False).lengths.tolist()
    [4, 2, 4]
    >>> read_corpus(text, skip_empty=True, progress=False).rows.tolist()
    [1, 3]
    """
    path = Path(path)
    add = check_int("add", add)
    truncate = check_int("truncate", truncate, minimum=1, allow_none=True)
    if add >= MAX_LENGTH:
        raise UsageError(f"--add must be below 2**53 (a length), got --add={add}")
    if not path.is_file():
        raise UsageError(f"input file not found: {path}")
    if path.suffix.lower() == ".npy":
        for flag, value in (("--column", column), ("--field", field), ("--vocab", vocab)):
            if value is not None:
                raise UsageError(f"{flag} measures text; {path} is a .npy of lengths already")
        lengths, rows = _load_npy(path, skip_empty)
        corpus = Corpus(path, lengths, rows, by_line=False)
    else:
        numbers = None
        if column is None and field is None and path.suffix.lower() not in _TABLES:
            numbers = _numbers_text(path, skip_empty)
        if numbers is None:
            corpus = _read_text(path, column, field, vocab, add, skip_empty, progress)
        elif vocab is not None:
            raise UsageError(
                f"--vocab measures text; {path} holds lengths, one number a line (as a .npy of "
                "lengths would): leave --vocab out, or give the text itself"
            )
        else:
            lengths, rows, header = numbers
            note = "every non-empty line is a number"
            if header is not None:
                line, text = header
                note = (
                    f"line {line} ({text[:40]!r}) is not a number, a header left out; every "
                    "other non-empty line is one"
                )
            note += ": read as lengths, one a line"
            corpus = Corpus(path, lengths, rows, by_line=True, numbers=True, note=note)
    return _adjusted(corpus, add, truncate)


#: the suffixes read as tables or JSON lines, never as a sample a line
_TABLES = (".csv", ".tsv", ".jsonl", ".json")
#: a number as a line of lengths may write it: ``12``, ``12.0``, ``1.2e+01``
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def _numbers_text(
    path: Path, skip_empty: bool
) -> tuple[NDArray[np.int64], NDArray[np.int64], tuple[int, str] | None] | None:
    """The lengths of a text file whose every non-empty line is a number (but for a header
    on its first), their lines and the header; None for any other file, read as text
    (NOTE [ a text of numbers is lengths ])."""
    found: list[tuple[int, str]] = []
    header: tuple[int, str] | None = None
    try:
        with open(path, encoding="utf-8-sig") as fh:
            for number, line in enumerate(fh, 1):
                token = line.strip()
                if not token:
                    continue
                if _NUMBER.fullmatch(token) is None:
                    if found or header is not None:
                        return None
                    header = (number, token)
                    continue
                found.append((number, token))
    except (UnicodeDecodeError, OSError):  # the text reader names it
        return None
    if not found:
        return None
    below = "" if header is None else f" below its header on line {header[0]}"
    why = f"as every non-empty line{below} is a number"
    lengths: list[int] = []
    rows: list[int] = []
    for number, token in found:
        value = _number_length(path, number, token, skip_empty, f"one number a line, {why}")
        if value is not None:
            lengths.append(value)
            rows.append(number)
    if not lengths:
        raise UsageError(f"{path} holds only zeros: nothing is left after --skip-empty")
    return np.asarray(lengths, dtype=np.int64), np.asarray(rows, dtype=np.int64), header


def _number_length(path: Path, line: int, token: str, skip_empty: bool, why: str) -> int | None:
    """``token``, a number on ``line``, as a length; None for a zero ``--skip-empty`` leaves
    out; a bad one refused, naming its line and ``why`` the file is read as lengths."""
    value: float = int(token) if token.lstrip("+-").isdigit() else float(token)
    what = None
    if isinstance(value, float) and not value.is_integer():  # 2.5, or 1e999 (inf)
        what = "a length must be a whole number"
    elif value < 0:
        what = "a length must be >= 1"
    elif value == 0 and skip_empty:
        return None
    elif value == 0:
        what = "a length must be >= 1 (pass --skip-empty to leave zero lengths out)"
    elif value >= MAX_LENGTH:
        what = "a length must be below 2**53"
    if what is not None:
        raise UsageError(
            f"line {line} of {path} is {token}: {what} ({path} is read as lengths, {why})"
        )
    return int(value)


def _numbers_of(
    path: Path, numbers: list[list[str]], rows: list[int], skip_empty: bool, named: str
) -> Corpus:
    """The lengths of a table's or JSON lines' column (field) whose every value is a number
    (NOTE [ a text of numbers is lengths ]); ``named`` says which."""
    why = f"as every value of {named} is a number"
    lengths: list[list[int]] = []
    kept: list[int] = []
    for line, tokens in zip(rows, numbers, strict=True):
        values = [_number_length(path, line, token, skip_empty, why) for token in tokens]
        if None not in values:
            lengths.append([int(v) for v in values if v is not None])
            kept.append(line)
    if not lengths:
        raise UsageError(f"{path} holds only zeros: nothing is left after --skip-empty")
    array = np.asarray(lengths, dtype=np.int64)
    return Corpus(
        path,
        array[:, 0] if array.shape[1] == 1 else array,
        np.asarray(kept, dtype=np.int64),
        by_line=True,
        numbers=True,
        note=f"{named}: every value is a number: read as lengths, one a row",
    )


def _read_text(
    path: Path,
    column: Texts | None,
    field: Texts | None,
    vocab: str | Path | None,
    add: int,
    skip_empty: bool,
    progress: bool,
) -> Corpus:
    measure: Callable[[str], int] = len
    unit = "characters"
    if vocab is not None:
        from ..plan.text import wordpiece_counter  # imports no paddle

        if not Path(vocab).is_file():
            raise UsageError(f"--vocab file not found: {vocab}")
        try:
            measure = wordpiece_counter(vocab)
        except UnicodeDecodeError as exc:
            raise UsageError(f"--vocab file {vocab} is not UTF-8 text: {exc.reason}") from None
        except OSError as exc:
            raise UsageError(
                f"--vocab file {vocab}: cannot read it: {exc.strerror or exc}"
            ) from None
        unit = "WordPiece tokens"
    # on a terminal only: a pipe or a log file gets no bar (tqdm's disable=None)
    bar = tqdm(
        desc=f"reading {path.name}",
        unit=" samples",
        file=sys.stderr,
        disable=None if progress else True,
        dynamic_ncols=True,
    )
    lengths: list[list[int]] = []
    rows: list[int] = []
    line = 0
    texts = column if column is not None else field
    # NOTE [ a text of numbers is lengths ]: a column (field) whose every value is a number
    numbers: list[list[str]] | None = [] if texts is not None and vocab is None else None
    try:
        for line, values in _records(path, column, field):
            ns = [measure(v) if isinstance(v, str) else len(v) for v in values]
            if 0 in ns and skip_empty:
                continue
            if 0 in ns and not add:
                what = "is empty"
                if len(ns) == 2:  # a pair: its empty side, by its column
                    k = ns.index(0)
                    flag = "--column" if column is not None else "--field"
                    name = _names(texts)[k] if texts is not None else ""
                    what = f"has an empty {SIDES[k]} ({flag} {name!r})"
                raise UsageError(
                    f"line {line} of {path} {what} (0 {unit}); every sample needs a length "
                    ">= 1: pass --add N (e.g. --add 2 for [CLS] and [SEP]) or --skip-empty "
                    "to leave empty rows out"
                )
            if numbers is not None:
                tokens = [v.strip() if isinstance(v, str) else "" for v in values]
                numbers = numbers if all(map(_NUMBER.fullmatch, tokens)) else None
                if numbers is not None:
                    numbers.append(tokens)
            lengths.append(ns)
            rows.append(line)
            bar.update()
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path} is not UTF-8 text ({exc.reason}): save it as UTF-8") from None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    finally:
        bar.close()
    if not lengths:
        what = "no non-empty samples" if skip_empty else "no samples"
        raise UsageError(f"{path} holds {what}: there is nothing to batch")
    if numbers and texts is not None:
        flag = "--column" if column is not None else "--field"
        named = f"{flag} " + ", ".join(map(repr, _names(texts)))
        return _numbers_of(path, numbers, rows, skip_empty, named)
    array = np.asarray(lengths, dtype=np.int64)
    return Corpus(
        path,
        array[:, 0] if array.shape[1] == 1 else array,
        np.asarray(rows, dtype=np.int64),
        by_line=True,
    )


def _adjusted(corpus: Corpus, add: int, truncate: int | None) -> Corpus:
    """``--add`` then ``--truncate``, in Python ints where they could overflow int64."""
    lengths = corpus.lengths
    tops = lengths if lengths.ndim == 1 else lengths.max(axis=1)  # a pair's: its longer side
    longest = int(np.argmax(tops))
    if int(tops[longest]) + add >= MAX_LENGTH:
        raise UsageError(
            f"--add={add} makes {corpus.where(longest)} {int(tops[longest]) + add} long, "
            "over the largest length 2**53 - 1"
        )
    lengths = lengths + add  # below 2**54: no int64 overflow
    if truncate is not None:
        lengths = np.minimum(lengths, truncate)
    lengths = check_plan_lengths(lengths, name=str(corpus.path))
    return dataclasses.replace(corpus, lengths=lengths)


def read_lengths(path: str | Path, **options: Any) -> NDArray[np.int64]:
    """The lengths of :func:`read_corpus` alone: the same arguments, the same errors.

    >>> import os, tempfile
    >>> text = os.path.join(tempfile.mkdtemp(), "r.txt")
    >>> _ = open(text, "w", encoding="utf-8").write("好的\\n很好的\\n")
    >>> read_lengths(text, add=2, progress=False).tolist()
    [4, 5]
    """
    return read_corpus(path, **options).lengths
