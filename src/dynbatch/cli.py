"""``dynbatch stats``: what batching will do to a corpus, before training.

    dynbatch stats reviews.csv --column review --add 2 --truncate 512 --max-cost 1310720

Bad input (a missing file, an unknown column, a non-positive budget, an empty
review, a sample the sampler would refuse) is one line on stderr and exit
code 2. Anything else is a bug and keeps its traceback.

NOTE [ stats agrees with the sampler ]
    ``dynbatch stats`` takes the sampler's options with the sampler's defaults
    and plans with the same planner, so what it prints is what training will
    do: with ``--oversize error`` (the default) a sample over budget even alone
    is refused here as the sampler refuses it, naming its line in the input;
    with ``skip`` it is left out of every row (the fixed baseline too); with
    ``alone`` it gets a batch of its own.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
from numpy.typing import NDArray

from ._checks import MAX_LENGTH, InputError, check_int, check_lengths
from .cost import cost_spec, resolve_cost
from .memory import MemoryCost
from .options import FIELDS, PlanOptions
from .planning import find_oversize, plan_batches
from .progress import Progress
from .stats import (
    PlanStats,
    baseline_batches,
    batch_table,
    compare_orders,
    lower_bound_batches,
)

__all__ = ["Corpus", "UsageError", "format_table", "main", "read_corpus", "read_lengths"]

COLUMNS = [
    ("batches", "batches", "{:d}"),
    ("updates", "updates", "{:d}"),
    ("padding_efficiency", "pad eff", "{:.3f}"),
    ("batch_size_min", "bs min", "{:d}"),
    ("batch_size_median", "bs med", "{:g}"),
    ("batch_size_max", "bs max", "{:d}"),
    ("cost_max", "cost max", "{:.4g}"),
    ("cost_mean", "cost mean", "{:.4g}"),
    ("cost_cv", "cost cv", "{:.3f}"),
    ("utilization", "util", "{:.3f}"),
]

#: csv's default field limit (131,072 characters) is shorter than a long document; this is
#: the largest value a C long holds on every platform (``sys.maxsize`` overflows on Windows).
CSV_FIELD_LIMIT = 2**31 - 1
PLOT_FORMATS = (".png", ".svg", ".pdf")


class UsageError(InputError):
    """Bad input from the command line: printed as one line, exit code 2."""

    #: the (sub)command whose arguments were bad, when argparse found them
    prog: str | None = None


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are a :class:`UsageError` (one line, exit 2)."""

    def error(self, message: str) -> NoReturn:
        exc = UsageError(f"{message} (see {self.prog} --help)")
        exc.prog = self.prog
        raise exc


@dataclass(frozen=True)
class Corpus:
    """Lengths read from an input file, and where each sample is in that file.

    Args:
        path: the input file.
        lengths: one positive length per sample.
        rows: per sample, its 1-based line number in a text input, or its
            index in a ``.npy``: what a person looks for in the file.
        by_line: True for text inputs (``rows`` are line numbers).

    >>> Corpus(Path("r.csv"), np.array([5, 9]), np.array([2, 4]), by_line=True).where(1)
    'line 4 of r.csv'
    >>> Corpus(Path("l.npy"), np.array([5, 9]), np.array([0, 1]), by_line=False).where(1)
    'l.npy[1]'
    """

    path: Path
    lengths: NDArray[np.int64]
    rows: NDArray[np.int64]
    by_line: bool

    def where(self, i: int) -> str:
        """Where sample ``i`` is in the input, as a person would look for it."""
        row = int(self.rows[i])
        return f"line {row} of {self.path}" if self.by_line else f"{self.path}[{row}]"


Record = tuple[int, str | list[Any]]  # (line number, text or a list of tokens)


def _csv_records(path: Path, column: str, delimiter: str) -> Iterator[Record]:
    old = csv.field_size_limit(CSV_FIELD_LIMIT)
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:
            reader = csv.reader(fh, delimiter=delimiter)
            header: list[str] | None = None
            where = at = 0
            try:
                for row in reader:
                    line, where = where + 1, reader.line_num
                    if not row:  # a blank line
                        continue
                    if header is None:
                        header = row
                        if column not in header:
                            raise UsageError(
                                f"--column {column!r} is not in {path}; columns: {header}"
                            )
                        at = header.index(column)
                        continue
                    if at >= len(row):
                        raise UsageError(
                            f"line {line} of {path} has {len(row)} field(s) and no "
                            f"{column!r} (column {at + 1} of the header)"
                        )
                    yield line, row[at]
            except csv.Error as exc:
                raise UsageError(
                    f"line {reader.line_num} of {path} is not valid CSV: {exc}"
                ) from None
    finally:
        csv.field_size_limit(old)
    if header is None:
        raise UsageError(f"{path} is empty: no header row with a {column!r} column")


def _jsonl_records(path: Path, field: str) -> Iterator[Record]:
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
                    f"with a {field!r} field: {line.strip()[:60]}"
                )
            if field not in record:
                raise UsageError(f"--field {field!r} is missing on line {number} of {path}")
            value = record[field]
            if not isinstance(value, (str, list)):
                raise UsageError(
                    f"--field {field!r} on line {number} of {path} must be text (a string) or "
                    f"tokens (a list), got {json.dumps(value)[:60]}"
                )
            yield number, value


def _text_records(path: Path) -> Iterator[Record]:
    with open(path, encoding="utf-8-sig") as fh:
        for number, line in enumerate(fh, 1):
            yield number, line.rstrip("\n")


def _records(path: Path, column: str | None, field: str | None) -> Iterator[Record]:
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
    if raw.ndim != 1:
        raise UsageError(f"{path} must hold a 1-D array of lengths, got shape {raw.shape}")
    if raw.size == 0:
        raise UsageError(f"{path} holds no lengths (an empty array): there is nothing to batch")
    if raw.dtype == np.bool_ or raw.dtype.kind not in "iuf":
        raise UsageError(
            f"{path} must hold integer lengths, got dtype {raw.dtype} (first value {raw[0]!r})"
        )
    index = np.arange(raw.size, dtype=np.int64)
    if skip_empty:
        keep = raw != 0
        raw, index = raw[keep], index[keep]
        if raw.size == 0:
            raise UsageError(f"{path} holds only zeros: nothing is left after --skip-empty")
    checks = [
        (~np.isfinite(raw) | (raw != np.round(raw)), "a length must be a whole number"),
        (raw < 0, "a length must be >= 1"),
        (raw == 0, "a length must be >= 1 (pass --skip-empty to leave zero lengths out)"),
        (raw >= MAX_LENGTH, "a length must be below 2**53"),
    ]
    for bad, what in checks:
        if bad.any():
            k = int(np.argmax(bad))
            raise UsageError(f"{path}[{int(index[k])}]={raw[k]!r}: {what}")
    return raw.astype(np.int64), index


def read_corpus(
    path: str | Path,
    *,
    column: str | None = None,
    field: str | None = None,
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
        column: the text column of a CSV/TSV.
        field: the text field of a JSONL file.
        vocab: count BERT WordPiece tokens with this vocabulary (built-in
            tokenizer, no paddle import) instead of characters.
        add: added to every length (``2`` for ``[CLS]`` and ``[SEP]``).
        truncate: lengths are cut at this.
        skip_empty: leave out samples of length 0 (empty rows) instead of
            refusing them.
        progress: show a progress bar while reading text.

    Raises:
        UsageError: for any bad input; the message names the flag, or the
            file's line (or the ``.npy`` index) and the value.

    >>> import os, tempfile
    >>> text = os.path.join(tempfile.mkdtemp(), "r.txt")
    >>> _ = open(text, "w", encoding="utf-8").write("好的\\n\\n很好\\n")
    >>> read_corpus(text, progress=False)
    Traceback (most recent call last):
    ...
    dynbatch.cli.UsageError: line 2 of .../r.txt is empty (0 characters); ...
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
        corpus = _read_text(path, column, field, vocab, add, skip_empty, progress)
    return _adjusted(corpus, add, truncate)


def _read_text(
    path: Path,
    column: str | None,
    field: str | None,
    vocab: str | Path | None,
    add: int,
    skip_empty: bool,
    progress: bool,
) -> Corpus:
    measure: Callable[[str], int] = len
    unit = "characters"
    if vocab is not None:
        from .text import wordpiece_counter  # the built-in counter: no paddle import

        if not Path(vocab).is_file():
            raise UsageError(f"--vocab file not found: {vocab}")
        try:
            measure = wordpiece_counter(vocab, prefer_paddlenlp=False)
        except UnicodeDecodeError as exc:
            raise UsageError(f"--vocab file {vocab} is not UTF-8 text: {exc.reason}") from None
        except OSError as exc:
            raise UsageError(
                f"--vocab file {vocab}: cannot read it: {exc.strerror or exc}"
            ) from None
        unit = "WordPiece tokens"
    bar = Progress(desc=f"reading {path.name}", unit="samples") if progress else None
    lengths: list[int] = []
    rows: list[int] = []
    line = 0
    try:
        for line, value in _records(path, column, field):
            n = measure(value) if isinstance(value, str) else len(value)
            if n == 0 and skip_empty:
                continue
            if n == 0 and not add:
                raise UsageError(
                    f"line {line} of {path} is empty (0 {unit}); every sample needs a length "
                    ">= 1: pass --add N (e.g. --add 2 for [CLS] and [SEP]) or --skip-empty "
                    "to leave empty rows out"
                )
            lengths.append(n)
            rows.append(line)
            if bar is not None:
                bar.update()
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path} is not UTF-8 text ({exc.reason}): save it as UTF-8") from None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    finally:
        if bar is not None:
            bar.close()
    if not lengths:
        what = "no non-empty samples" if skip_empty else "no samples"
        raise UsageError(f"{path} holds {what}: there is nothing to batch")
    return Corpus(
        path,
        np.asarray(lengths, dtype=np.int64),
        np.asarray(rows, dtype=np.int64),
        by_line=True,
    )


def _adjusted(corpus: Corpus, add: int, truncate: int | None) -> Corpus:
    """``--add`` then ``--truncate``, in Python ints where they could overflow int64."""
    lengths = corpus.lengths
    longest = int(np.argmax(lengths))
    if int(lengths[longest]) + add >= MAX_LENGTH:
        raise UsageError(
            f"--add={add} makes {corpus.where(longest)} {int(lengths[longest]) + add} long, "
            "over the largest length 2**53 - 1"
        )
    lengths = lengths + add  # below 2**54: no int64 overflow
    if truncate is not None:
        lengths = np.minimum(lengths, truncate)
    lengths = check_lengths(lengths, name=str(corpus.path))
    return Corpus(corpus.path, lengths, corpus.rows, corpus.by_line)


def read_lengths(path: str | Path, **options: Any) -> NDArray[np.int64]:
    """The lengths of :func:`read_corpus` alone: the same arguments, the same errors.

    >>> import os, tempfile
    >>> text = os.path.join(tempfile.mkdtemp(), "r.txt")
    >>> _ = open(text, "w", encoding="utf-8").write("好的\\n很好的\\n")
    >>> read_lengths(text, add=2, progress=False).tolist()
    [4, 5]
    """
    return read_corpus(path, **options).lengths


def format_table(rows: dict[str, PlanStats]) -> str:
    """The per-order statistics as an aligned text table, one row per plan."""
    head = ["order", *(title for _, title, _ in COLUMNS)]
    body = [
        [name, *(fmt.format(getattr(row, key)) for key, _, fmt in COLUMNS)]
        for name, row in rows.items()
    ]
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    lines = [
        "  ".join(
            c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in [head, *body]
    ]
    return "\n".join(lines)


def _plot(path: str, lengths: NDArray[np.int64], args: argparse.Namespace) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError('--plot needs matplotlib: pip install "dynbatch[examples]"') from None
    options: PlanOptions = args.options
    common = {
        "cost": options.cost,
        "max_cost": options.max_cost,
        "pad_to_multiple_of": options.pad_to_multiple_of,
    }
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="skipping .* over max_cost")
        bucket_plan = plan_batches(lengths, options=options)
    bucket = batch_table(lengths, bucket_plan, **common)
    fixed = batch_table(
        lengths, baseline_batches(lengths, options, args.fixed_batch_size), **common
    )
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    axes[0].hist(lengths, bins=60, color="tab:blue")
    axes[0].set(title="sample lengths", xlabel="length", ylabel="samples")
    sizes = bucket["batch_size"]
    bins = np.unique(np.geomspace(1, sizes.max() + 1, 40).astype(np.int64))
    axes[1].hist(sizes, bins=bins if bins.size > 1 else 1, color="tab:green")
    axes[1].set(title="dynamic batch sizes (bucket)", xlabel="samples per batch", ylabel="batches")
    axes[1].set_xscale("log")
    # NOTE [ the cost plot ]: batches sorted by cost and drawn as steps as wide as their share
    # of the samples, so a plan of 170 batches and one of 400 both span the axis and read as
    # "this share of the data is in batches at or below this fraction of the budget".
    ax = axes[2]
    for name, table, color in (
        (f"fixed {args.fixed_batch_size}", fixed, "tab:red"),
        ("bucket", bucket, "tab:green"),
    ):
        order = np.argsort(table["cost_ratio"], kind="stable")
        ratio, share = table["cost_ratio"][order], table["batch_size"][order]
        edges = np.concatenate([[0], np.cumsum(share)]) / share.sum()
        label = f"{name}: {ratio.size} batches, mean {ratio.mean():.2f}, max {ratio.max():.2f}"
        ax.stairs(ratio, edges, baseline=None, color=color, lw=1.5, label=label)
    ax.axhline(1.0, color="k", ls="--", lw=0.8, label="max_cost")
    ax.set(
        title="batch cost / max_cost, batches sorted by cost",
        xlabel="share of the epoch's samples (one step per batch)",
        ylabel="cost / max_cost",
        xlim=(0, 1),
        ylim=(0, None),
    )
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise UsageError(f"--plot {path}: cannot write it: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dynbatch", description="Dynamic batching for PaddlePaddle.")
    sub = parser.add_subparsers(dest="command", required=True)
    st = sub.add_parser(
        "stats", help="padding, batch counts and cost swings of each order on a corpus"
    )
    st.add_argument("input", help=".npy of lengths, text file (a sample a line), CSV/TSV, or JSONL")
    # the sampler's defaults, oversize="error" included (NOTE [ stats agrees with the sampler ])
    PlanOptions.add_arguments(
        st, exclude=("order", "drop_last", "equal_epochs", "balance"), defaults={"cost": None}
    )
    st.add_argument(
        "--cost-file", help="a MemoryCost saved by dynbatch.calibrate (JSON): --max-cost in MiB"
    )
    st.add_argument("--fixed-batch-size", type=int, default=20, help="the baseline row")
    st.add_argument("--column", help="text column of a CSV/TSV")
    st.add_argument("--field", help="text field of a JSONL file (text, or a list of tokens)")
    st.add_argument("--add", type=int, default=0, help="special tokens added to each sample")
    st.add_argument("--truncate", type=int, default=None, help="cap lengths at this")
    st.add_argument(
        "--skip-empty", action="store_true", help="leave out empty samples instead of refusing"
    )
    st.add_argument(
        "--vocab", help="count BERT WordPiece tokens with this vocab instead of characters"
    )
    st.add_argument("--json", action="store_true", help="print one JSON object")
    st.add_argument("--plot", help="write a PNG: lengths, batch sizes, cost per batch")
    st.add_argument("--no-progress", action="store_true")
    return parser


def _cost_text(cost: Any) -> str:
    """The cost as given (``quadratic``), or a loaded cost file's formula."""
    return cost if isinstance(cost, str) else cost_spec(cost) or repr(cost)


def _as_flags(message: str) -> str:
    """Name the options as the command line spells them: ``max_cost=0`` -> ``--max-cost=0``.

    Only where a name is the subject (``max_cost must``) or given a value (``max_cost=``),
    so plain words such as "cost" or "order" in a sentence stay words.

    >>> _as_flags("max_cost must be positive, got max_cost=0; the cost of a batch")
    '--max-cost must be positive, got --max-cost=0; the cost of a batch'
    """
    for name in sorted(FIELDS, key=len, reverse=True):
        flag = "--" + name.replace("_", "-")
        message = re.sub(rf"(?<![\w-]){name}(?=\s+must\b|\s+needs\b|=)", flag, message)
    return message


def _check_flags(args: argparse.Namespace) -> None:
    if args.max_cost is None:
        raise UsageError("--max-cost is required: the budget every batch fits")
    if args.cost_file is not None:
        if args.cost is not None:
            raise UsageError(
                f"give --cost or --cost-file, not both; got --cost {args.cost} and --cost-file "
                f"{args.cost_file}"
            )
        try:
            args.cost = MemoryCost.load(args.cost_file)
        except (OSError, ValueError) as exc:
            raise UsageError(f"--cost-file: {exc}") from None
    elif args.cost is None:
        args.cost = "quadratic"
    for flag, value, low in (
        ("--fixed-batch-size", args.fixed_batch_size, 1),
        ("--add", args.add, 0),
    ):
        if value < low:
            raise UsageError(f"{flag} must be an integer >= {low}, got {flag}={value}")
    if args.add >= MAX_LENGTH:
        raise UsageError(f"--add must be below 2**53 (a length), got --add={args.add}")
    if args.truncate is not None and not 1 <= args.truncate < MAX_LENGTH:
        raise UsageError(
            f"--truncate must be an integer in [1, 2**53), got --truncate={args.truncate}"
        )
    if args.plot is not None:
        plot = Path(args.plot)
        if plot.suffix.lower() not in PLOT_FORMATS:
            raise UsageError(
                f"--plot must name a {', '.join(PLOT_FORMATS)} file, got --plot={args.plot}"
            )
        if not plot.parent.is_dir():
            raise UsageError(f"--plot {args.plot}: directory {plot.parent} does not exist")
    try:
        resolve_cost(args.cost)
    except InputError as exc:
        message = _as_flags(str(exc))
        raise UsageError(
            message if "--cost" in message else f"--cost={args.cost}: {message}"
        ) from None
    try:
        args.options = PlanOptions.from_args(args)
    except InputError as exc:
        raise UsageError(_as_flags(str(exc))) from None


def _oversize_line(corpus: Corpus, over: NDArray[Any], options: PlanOptions) -> str:
    """What the sampler does with the samples over budget alone (NOTE [ stats agrees ... ])."""
    first = int(over[0])
    length = int(corpus.lengths[first])
    alone = float(
        options.cost(1, -(-length // options.pad_to_multiple_of) * options.pad_to_multiple_of)
    )
    head = (
        f"{over.size} sample(s) are over --max-cost={options.max_cost:g} even alone; the first "
        f"is {corpus.where(first)} (length {length}, costs {alone:g} alone)"
    )
    if options.oversize == "error":
        return (
            f"{head}. The sampler refuses them (--oversize error): raise --max-cost, "
            "--truncate them, or pass --oversize skip or --oversize alone"
        )
    if options.oversize == "skip":
        return f"{head}. --oversize skip: the sampler leaves them out, and so does every row"
    return f"{head}. --oversize alone: the sampler gives each a batch of its own, over budget"


def _lower_bound(lengths: NDArray[np.int64], over: NDArray[Any], options: PlanOptions) -> int:
    """No plan has fewer batches (NOTE [ the fewest batches ] in :mod:`dynbatch.stats`): the
    samples that fit, packed longest first, plus one batch per sample alone."""
    fits = np.delete(lengths, over)
    bound = (
        lower_bound_batches(
            fits,
            options.max_cost,
            cost=options.cost,
            pad_to_multiple_of=options.pad_to_multiple_of,
            max_batch_size=options.max_batch_size,
        )
        if fits.size
        else 0
    )
    return bound + (int(over.size) if options.oversize == "alone" else 0)


def _stats(args: argparse.Namespace) -> None:
    _check_flags(args)
    options: PlanOptions = args.options
    corpus = read_corpus(
        args.input,
        column=args.column,
        field=args.field,
        vocab=args.vocab,
        add=args.add,
        truncate=args.truncate,
        skip_empty=args.skip_empty,
        progress=not (args.json or args.no_progress),
    )
    lengths = corpus.lengths
    over = find_oversize(lengths, options=options)
    note = _oversize_line(corpus, over, options) if over.size else None
    if note is not None and options.oversize == "error":
        raise UsageError(note)
    with warnings.catch_warnings():  # the skip warning is the note above
        warnings.filterwarnings("ignore", message="skipping .* over max_cost")
        try:
            rows = compare_orders(lengths, options, fixed_batch_size=args.fixed_batch_size)
        except InputError as exc:
            raise UsageError(_as_flags(str(exc))) from None
    bound = _lower_bound(lengths, over, options)
    if args.json:
        print(
            json.dumps(
                {
                    "samples": int(lengths.size),
                    "length_min": int(lengths.min()),
                    "length_median": float(np.median(lengths)),
                    "length_max": int(lengths.max()),
                    "max_cost": options.max_cost,
                    "cost": _cost_text(args.cost),
                    "oversize": int(over.size),
                    "oversize_policy": options.oversize,
                    "lower_bound_batches": bound,
                    "rows": [
                        {"name": name, **{k: getattr(r, k) for k, _, _ in COLUMNS}}
                        for name, r in rows.items()
                    ],
                }
            )
        )
    else:
        print(
            f"{lengths.size} samples, lengths {lengths.min()}..{lengths.max()} "
            f"(median {np.median(lengths):g}); max_cost={options.max_cost:g}, "
            f"cost={_cost_text(args.cost)}"
        )
        if note is not None:
            print(note)
        print(format_table(rows))
        alone = " + one per sample over budget" if over.size and options.oversize == "alone" else ""
        print(
            "lower bound on batches (no plan has fewer: longest first, each batch filled to "
            f"the budget{alone}): {bound}"
        )
    if args.plot:
        _plot(args.plot, lengths, args)
        if not args.json:
            print(f"wrote {args.plot}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dynbatch`` console script; returns the exit code.

    Bad input (an :class:`~dynbatch.InputError`, which a :class:`UsageError`
    is) is one line on stderr and exit code 2; any other exception is a bug
    and propagates with its traceback.
    """
    prog = "dynbatch"
    try:
        args = _parser().parse_args(argv)
        prog = f"dynbatch {args.command}"
        _stats(args)
    except UsageError as exc:
        print(f"{exc.prog or prog}: error: {exc}", file=sys.stderr)
        return 2
    except InputError as exc:
        print(f"{prog}: error: {_as_flags(str(exc))}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
