"""``dynbatch stats``: what batching will do to a corpus, before training.

    dynbatch stats reviews.csv --column review --add 2 --truncate 512 --max-cost 1310720

Bad input (a missing file, an unknown column, a non-positive budget) is one
line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from ._checks import InputError, check_lengths
from .memory import MemoryCost
from .options import FIELDS, PlanOptions
from .planning import plan_batches
from .progress import Progress
from .stats import PlanStats, batch_table, compare_orders, fixed_batches, lower_bound_batches

__all__ = ["format_table", "main", "read_lengths"]

COLUMNS = [
    ("batches", "batches", "{:d}"),
    ("padding_efficiency", "pad eff", "{:.3f}"),
    ("batch_size_min", "bs min", "{:d}"),
    ("batch_size_median", "bs med", "{:g}"),
    ("batch_size_max", "bs max", "{:d}"),
    ("cost_max", "cost max", "{:.4g}"),
    ("cost_mean", "cost mean", "{:.4g}"),
    ("cost_cv", "cost cv", "{:.3f}"),
    ("utilization", "util", "{:.3f}"),
]


class UsageError(Exception):
    """Bad input from the command line: printed as one line, exit code 2."""


def _texts(path: Path, column: str | None, field: str | None) -> Iterator[str]:
    suffix = path.suffix.lower()
    if suffix in (".csv", ".tsv"):
        if column is None:
            raise UsageError(f"{path} is a table: name the text column with --column")
        with open(path, encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh, delimiter="\t" if suffix == ".tsv" else ",")
            if reader.fieldnames is None or column not in reader.fieldnames:
                raise UsageError(
                    f"--column {column!r} is not in {path}; columns: {reader.fieldnames}"
                )
            for row in reader:
                yield row[column] or ""
    elif suffix in (".jsonl", ".json"):
        if field is None:
            raise UsageError(f"{path} is JSON lines: name the text field with --field")
        with open(path, encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                record = json.loads(line)
                if field not in record:
                    raise UsageError(f"--field {field!r} is missing on line {number} of {path}")
                value = record[field]
                yield value if isinstance(value, str) else " " * len(value)
    else:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                yield line.rstrip("\n")


def read_lengths(
    path: str | Path,
    *,
    column: str | None = None,
    field: str | None = None,
    vocab: str | Path | None = None,
    add: int = 0,
    truncate: int | None = None,
    progress: bool = True,
) -> NDArray[np.int64]:
    """Lengths from a ``.npy`` of lengths, a text file (a sample a line), a CSV/TSV column or
    a JSONL field; in characters, or in WordPiece tokens with ``vocab``; plus ``add``, cut at
    ``truncate``."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"input file not found: {path}")
    if path.suffix.lower() == ".npy":
        lengths = np.load(path, allow_pickle=False)
    else:
        measure: Callable[[str], int] = len
        if vocab is not None:
            from .text import wordpiece_counter

            if not Path(vocab).is_file():
                raise UsageError(f"--vocab file not found: {vocab}")
            measure = wordpiece_counter(vocab)
        bar = Progress(desc=f"reading {path.name}", unit="samples") if progress else None
        out: list[int] = []
        for text in _texts(path, column, field):
            out.append(measure(text))
            if bar is not None:
                bar.update()
        if bar is not None:
            bar.close()
        lengths = np.asarray(out, dtype=np.int64)
    lengths = lengths + add
    if truncate is not None:
        lengths = np.minimum(lengths, truncate)
    return check_lengths(np.maximum(lengths, 1) if add or truncate else lengths, name=str(path))


def format_table(rows: dict[str, PlanStats]) -> str:
    """The per-order statistics as an aligned text table, one row per plan."""
    head = ["order", *(title for _, title, _ in COLUMNS)]
    body = [
        [
            name,
            *(
                fmt.format(
                    getattr(row, key) if key != "batch_size_median" else row.batch_size_median
                )
                for key, _, fmt in COLUMNS
            ),
        ]
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
    common = {"cost": options.cost, "max_cost": options.max_cost}
    bucket = batch_table(lengths, plan_batches(lengths, options=options), **common)
    fixed = batch_table(
        lengths, fixed_batches(lengths.size, args.fixed_batch_size, seed=args.seed), **common
    )
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    axes[0].hist(lengths, bins=60, color="tab:blue")
    axes[0].set(title="sample lengths", xlabel="length", ylabel="samples")
    axes[1].hist(bucket["batch_size"], bins=40, color="tab:green")
    axes[1].set(title="dynamic batch sizes (bucket)", xlabel="samples per batch", ylabel="batches")
    axes[2].plot(fixed["cost"] / args.max_cost, lw=0.8, label=f"fixed {args.fixed_batch_size}")
    axes[2].plot(bucket["cost"] / args.max_cost, lw=0.8, label="bucket")
    axes[2].axhline(1.0, color="k", ls="--", lw=0.8)
    axes[2].set(title="cost per batch / max_cost", xlabel="batch", ylabel="cost ratio")
    axes[2].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dynbatch", description="Dynamic batching for PaddlePaddle."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    st = sub.add_parser(
        "stats", help="padding, batch counts and cost swings of each order on a corpus"
    )
    st.add_argument("input", help=".npy of lengths, text file (a sample a line), CSV/TSV, or JSONL")
    PlanOptions.add_arguments(
        st,
        exclude=("order", "drop_last", "equal_epochs", "balance"),
        defaults={"oversize": "alone", "cost": None},
    )
    st.add_argument(
        "--cost-file", help="a MemoryCost saved by dynbatch.calibrate (JSON): --max-cost in MiB"
    )
    st.add_argument("--fixed-batch-size", type=int, default=20, help="the baseline row")
    st.add_argument("--column", help="text column of a CSV/TSV")
    st.add_argument("--field", help="text field of a JSONL file")
    st.add_argument("--add", type=int, default=0, help="special tokens added to each sample")
    st.add_argument("--truncate", type=int, default=None, help="cap lengths at this")
    st.add_argument(
        "--vocab", help="count BERT WordPiece tokens with this vocab instead of characters"
    )
    st.add_argument("--json", action="store_true", help="print one JSON object")
    st.add_argument("--plot", help="write a PNG: lengths, batch sizes, cost per batch")
    st.add_argument("--no-progress", action="store_true")
    return parser


def _as_flags(message: str) -> str:
    """Name the options as the command line spells them: ``max_cost=0`` -> ``--max-cost=0``."""
    for name in sorted(FIELDS, key=len, reverse=True):
        message = re.sub(rf"(?<![\w-]){name}\b", "--" + name.replace("_", "-"), message)
    return message


def _stats(args: argparse.Namespace) -> None:
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
    try:
        args.options = PlanOptions.from_args(args)
    except InputError as exc:
        raise UsageError(_as_flags(str(exc))) from None
    for name in ("fixed_batch_size", "truncate"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if args.add < 0:
        raise UsageError(f"--add must be >= 0, got {args.add}")
    lengths = read_lengths(
        args.input,
        column=args.column,
        field=args.field,
        vocab=args.vocab,
        add=args.add,
        truncate=args.truncate,
        progress=not (args.json or args.no_progress),
    )
    rows = compare_orders(lengths, args.options, fixed_batch_size=args.fixed_batch_size)
    bound = lower_bound_batches(lengths, args.max_cost, cost=args.cost)
    if args.json:
        print(
            json.dumps(
                {
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
            f"(median {np.median(lengths):g}); max_cost={args.max_cost:g}, cost={args.cost}"
        )
        print(format_table(rows))
        print(f"lower bound on batches (sum of single-sample costs / max_cost): {bound}")
    if args.plot:
        _plot(args.plot, lengths, args)
        if not args.json:
            print(f"wrote {args.plot}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dynbatch`` console script; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        _stats(args)
    except (UsageError, ValueError, OSError, json.JSONDecodeError) as exc:
        print(f"dynbatch {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
