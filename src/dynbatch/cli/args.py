"""The command line of ``dynbatch``: its flags, and their checks before any file is read.

Every error here is a :class:`UsageError`: one line on stderr and exit code 2, naming the
flag as the command line spells it (``--max-cost``), the value, and what is valid.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any, NoReturn

from .._checks import MAX_LENGTH, InputError
from ..memory import load_cost
from ..plan.costs import resolve_cost
from ..plan.options import FIELDS, PlanOptions
from ..plan.pair_steptime import check_step_time
from ..plan.steptime import StepTimeTable
from .help import EPILOG

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "EXCLUDED",
    "PLOT_FORMATS",
    "UsageError",
    "as_flags",
    "check_flags",
    "make_options",
    "parser",
]

PLOT_FORMATS = (".png", ".svg", ".pdf")

#: ``--batch-size`` when ``--max-cost`` is given without it: the fixed row's batch
DEFAULT_BATCH_SIZE = 20

#: the options ``stats`` has no flag for: each row is one order's plan, one rank, one epoch
#: (``pack_len``: packed rows are not one order's batches: its own flag, --pack-len, adds a row)
EXCLUDED = ("order", "drop_last", "equal_epochs", "balance", "pack_len")


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


class _Spelled(argparse.Action):
    """Store the value, and the flag as the user wrote it (``args.<dest>_flag``): a message
    names the flag the user typed, of two that mean one."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        setattr(namespace, self.dest, values)
        setattr(namespace, f"{self.dest}_flag", option)


def batch_flag(args: argparse.Namespace) -> str:
    """``--batch-size`` or ``--fixed-batch-size``, as the command line wrote it."""
    return getattr(args, "fixed_batch_size_flag", None) or "--fixed-batch-size"


def parser() -> argparse.ArgumentParser:
    """The ``dynbatch`` command and its ``stats`` subcommand, with the sampler's defaults."""
    # NOTE [ no abbreviated flags ]
    #     argparse reads a prefix as the one flag it starts (allow_abbrev): ``--batch-size 32``
    #     was read as ``--batch-size-multiple 32``, silently. Every parser of the repository
    #     turns that off, so a flag is spelled in full or refused.
    top = _Parser(
        prog="dynbatch", description="Dynamic batching for PaddlePaddle.", allow_abbrev=False
    )
    sub = top.add_subparsers(dest="command", required=True)
    st = sub.add_parser(
        "stats",
        help="padding, batch counts and cost swings of each order on a corpus",
        description="What batching will do to a corpus, before training: one row per plan.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    st.add_argument(
        "input",
        help=".npy of lengths (or [N, 2] (source, target) lengths), text file (a sample a line; "
        "one whose every line is a number is lengths, one a line), CSV/TSV, or JSONL",
    )
    # the sampler's defaults, oversize="error" included (NOTE [ stats agrees with the sampler ])
    PlanOptions.add_arguments(st, exclude=EXCLUDED, defaults={"cost": None})
    st.add_argument(
        "--cost-file",
        help="a cost saved by dynbatch.calibrate (JSON): --max-cost in MiB (a MemoryCost, or "
        "for (source, target) pairs a PairMemoryCost)",
    )
    st.add_argument(
        "--time-table",
        help="a device's measured step times (JSON: columns n, L, step_s): each plan's epoch "
        "time, and like fixed follows it (a --cost-file's time model does too); of one length, "
        "refused for pairs (give --time-model c,a_s,a_t,b_s,b_t,cross)",
    )
    st.add_argument(
        "--fixed-batch-size",
        "--batch-size",
        type=int,
        default=None,
        action=_Spelled,
        help="the batch you use today (default 20 with --max-cost): the fixed row, and like "
        "fixed's (and grouped's) B; without --max-cost the budget is its worst batch, "
        "cost(B, L_max), as DynamicBatchSampler(batch_size=B) plans",
    )
    st.add_argument(
        "--buffer-size",
        type=int,
        default=None,
        help="add a row: the corpus read as a stream (DynamicBatchIterable), in file order, "
        "planned this many samples at a time",
    )
    st.add_argument(
        "--pack-len",
        type=int,
        default=None,
        help="add a row: the sampler's packed epoch, rows of this many tokens, each update of "
        "--fixed-batch-size samples run packed, split or whole as the step time predicts "
        "fastest; its micro-batches counted as laid out",
    )
    # appended: two are a pair's source and target, a third is refused by name (check_flags)
    st.add_argument(
        "--column",
        action="append",
        help="text column of a CSV/TSV; given twice, the source's and the target's of "
        "(source, target) pairs",
    )
    st.add_argument(
        "--field",
        action="append",
        help="text field of a JSONL file (text, or a list of tokens); given twice, the source's "
        "and the target's of (source, target) pairs",
    )
    st.add_argument("--add", type=int, default=0, help="special tokens added to each sample")
    st.add_argument("--truncate", type=int, default=None, help="cap lengths at this")
    st.add_argument(
        "--skip-empty", action="store_true", help="leave out empty samples instead of refusing"
    )
    st.add_argument(
        "--vocab", help="count BERT WordPiece tokens with this vocab instead of characters"
    )
    st.add_argument("--json", action="store_true", help="print one JSON object")
    st.add_argument(
        "--plot",
        help="write a figure (.png, .svg, .pdf): the lengths, and the micro-batch sizes and "
        "costs of like fixed (and packed, with --pack-len) against the fixed batch",
    )
    st.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar while reading text (there is one only when stderr is a terminal)",
    )
    return top


def as_flags(message: str) -> str:
    """Name the options as the command line spells them: ``max_cost=0`` -> ``--max-cost=0``.

    Only where a name is the subject (``max_cost must``) or given a value (``max_cost=``),
    so plain words such as "cost" or "order" in a sentence stay words.

    >>> as_flags("max_cost must be positive, got max_cost=0; the cost of a batch")
    '--max-cost must be positive, got --max-cost=0; the cost of a batch'
    """
    for name in sorted(FIELDS - set(EXCLUDED), key=len, reverse=True):  # no flag: stays a name
        flag = "--" + name.replace("_", "-")
        message = re.sub(rf"(?<![\w-]){name}(?=\s+must\b|\s+needs\b|=)", flag, message)
    return message


def check_flags(args: argparse.Namespace) -> None:
    """Check the flags that need no file; set ``args.cost`` (a loaded ``--cost-file`` or the
    default) and ``args.options`` (the :class:`~dynbatch.PlanOptions` they make)."""
    for flag in ("column", "field"):
        setattr(args, flag, _texts(args, flag))
    if args.max_cost is None and args.fixed_batch_size is None:
        raise UsageError(
            "--max-cost is required: the budget every batch fits; or give --batch-size B (the "
            "fixed batch you use today): the budget is then its worst batch, cost(B, L_max), "
            "as DynamicBatchSampler(batch_size=B) plans"
        )
    # NOTE [ the fixed batch's budget ] in dynbatch.cli: without --max-cost, set once read
    args.budget_from_batch = args.max_cost is None
    if args.fixed_batch_size is None:
        args.fixed_batch_size = DEFAULT_BATCH_SIZE
    if args.cost_file is not None:
        if args.cost is not None:
            raise UsageError(
                f"give --cost or --cost-file, not both; got --cost {args.cost} and --cost-file "
                f"{args.cost_file}"
            )
        try:
            args.cost = load_cost(args.cost_file)  # a MemoryCost, or a PairMemoryCost
        except (OSError, ValueError) as exc:
            raise UsageError(f"--cost-file: {exc}") from None
    elif args.cost is None:  # --batch-size alone: like_fixed's own default, once the kind is read
        args.cost = None if args.budget_from_batch else "quadratic"
    args.step_time = getattr(args.cost, "time_model", None)
    if args.time_model is not None:  # a step time, as a table is: it prices, it splits no row
        if args.time_table is not None:
            raise UsageError(
                f"give --time-model or --time-table, not both; got --time-model {args.time_model} "
                f"and --time-table {args.time_table}"
            )
        try:
            # 'c,a,b' (one length) or 'c,a_s,a_t,b_s,b_t,cross' (pairs): which the corpus
            # takes is checked once it is read (NOTE [ stats of pairs ] in dynbatch.cli)
            args.step_time = check_step_time(args.time_model, "time_model")
        except InputError as exc:
            raise UsageError(as_flags(str(exc))) from None
    if args.time_table is not None:
        try:
            args.step_time = StepTimeTable.load(args.time_table)
        except InputError as exc:
            raise UsageError(f"--time-table: {exc}") from None
    for flag, value, low in (
        (batch_flag(args), args.fixed_batch_size, 1),
        ("--add", args.add, 0),
        ("--buffer-size", 1 if args.buffer_size is None else args.buffer_size, 1),
        ("--pack-len", 1 if args.pack_len is None else args.pack_len, 1),
    ):
        if value < low:
            raise UsageError(f"{flag} must be an integer >= {low}, got {flag}={value}")
    if args.add >= MAX_LENGTH:
        raise UsageError(f"--add must be below 2**53 (a length), got --add={args.add}")
    if args.truncate is not None and not 1 <= args.truncate < MAX_LENGTH:
        raise UsageError(
            f"--truncate must be an integer in [1, 2**53), got --truncate={args.truncate}"
        )
    if args.pack_len is not None and args.pack_len >= MAX_LENGTH:
        raise UsageError(
            f"--pack-len must be an integer in [1, 2**53), got --pack-len={args.pack_len}"
        )
    if args.pack_len is not None:
        _check_packed(args)
    if args.plot is not None:
        plot = Path(args.plot)
        if plot.suffix.lower() not in PLOT_FORMATS:
            raise UsageError(
                f"--plot must name a {', '.join(PLOT_FORMATS)} file, got --plot={args.plot}"
            )
        if not plot.parent.is_dir():
            raise UsageError(f"--plot {args.plot}: directory {plot.parent} does not exist")
    try:
        if args.cost is not None:
            resolve_cost(args.cost)
    except InputError as exc:
        message = as_flags(str(exc))
        raise UsageError(
            message if "--cost" in message else f"--cost={args.cost}: {message}"
        ) from None
    if not args.budget_from_batch:
        make_options(args)


def make_options(args: argparse.Namespace) -> None:
    """Set ``args.options``, the :class:`~dynbatch.PlanOptions` the flags make, once
    ``args.max_cost`` is known (given, or the fixed batch's worst batch)."""
    # NOTE [ the fixed batch's budget ] in dynbatch.cli
    try:
        # the step time, the grouping and packing are rows' (like fixed, grouped, packed), not
        # every order's
        args.options = PlanOptions.from_args(  # --fixed-step-size: the like fixed row's
            args, time_model=None, group_by_length=False, pack_len=None, fixed_step_size=None
        )
    except InputError as exc:
        raise UsageError(as_flags(str(exc))) from None


def _texts(args: argparse.Namespace, name: str) -> str | tuple[str, str] | None:
    """The ``--column`` or ``--field`` given: one (a length per sample), two (a (source,
    target) pair per sample: NOTE [ stats of pairs ] in :mod:`dynbatch.cli`), or None; a
    third is refused by name (argparse would keep the last, silently)."""
    given: list[str] | None = getattr(args, name)
    if not given:
        return None
    if len(given) == 1:
        return given[0]
    if len(given) > 2:
        raise UsageError(
            f"--{name} given {len(given)} times ({', '.join(given)}): give one (a length per "
            f"sample) or two, the source's and the target's (a (source, target) pair per sample)"
        )
    return given[0], given[1]


def _check_packed(args: argparse.Namespace) -> None:
    """Refuse with ``--pack-len`` what the sampler refuses with ``pack_len``
    (NOTE [ stats agrees with the sampler ]), rather than leave it out of the packed row
    silently."""
    for given, name, why in (
        (
            f"--batch-size-multiple={args.batch_size_multiple}" * (args.batch_size_multiple != 1),
            "batch_size_multiple",
            "packed micro-batches are cut by rows, not by samples",
        ),
        (
            "--group-by-length" * args.group_by_length,
            "group_by_length",
            "packed updates are the fixed batch's random draws, not of near-equal lengths",
        ),
        (
            f"--update-size={args.update_size}" * (args.update_size is not None),
            "update_size beside batch_size",
            "the packed updates are --fixed-batch-size samples, the fixed batch's",
        ),
        (
            f"--fixed-step-size={args.fixed_step_size}" * (args.fixed_step_size is not None),
            "fixed_step_size",
            "packed updates have no fixed batch's step to weigh a time split against",
        ),
    ):
        if given:
            raise UsageError(
                f"--pack-len={args.pack_len} does not support {given} (the sampler refuses "
                f"{name} with pack_len: {why}); leave out one of the two"
            )
