"""``dynbatch stats``: what batching will do to a corpus, before training.

    dynbatch stats reviews.csv --column review --add 2 --truncate 512 --max-cost 1310720

Bad input (a missing file, an unknown column, a non-positive budget, an empty
review, a sample the sampler would refuse) is one line on stderr and exit
code 2. Anything else is a bug and keeps its traceback.

One job a module: :mod:`~dynbatch.cli.args` (the flags and their checks),
:mod:`~dynbatch.cli.corpora` (reading lengths from a file),
:mod:`~dynbatch.cli.report` (the table, text or JSON), :mod:`~dynbatch.cli.plot`
(``--plot``); this module runs the command.

NOTE [ stats agrees with the sampler ]
    ``dynbatch stats`` takes the sampler's options with the sampler's defaults
    and plans with the same planner, so what it prints is what training will
    do: with ``--oversize error`` (the default) a sample over budget even alone
    is refused here as the sampler refuses it, naming its line in the input;
    with ``skip`` it is left out of every row (the fixed baseline too); with
    ``alone`` it gets a batch of its own. The ``packed`` row is planned with
    the options the packing sampler would hold (``--pad-to-multiple-of``,
    ``--update-unit`` included), and a flag the sampler refuses with
    ``pack_len`` is refused with ``--pack-len``, never left out of the row.

NOTE [ stats of pairs ]
    Two ``--column``s (``--field``s) are a sample's source and target, read
    from the same row; a ``.npy`` of ``[N, 2]`` is pairs too. Both sides are
    measured alike (characters, or ``--vocab``'s WordPiece tokens; ``--add``
    and ``--truncate`` apply to each side), and every row is planned as the
    samplers plan ``[N, 2]`` lengths and priced on both sides: ``pad eff`` is
    both sides' real tokens over both sides' padded tokens, ``src eff`` and
    ``tgt eff`` each side's alone, the costs the cost's two-length form
    (``--cost quadratic`` is ``n·(Ls² + Lt² + Ls·Lt)``).
    ``--time-model`` for pairs is a step time of two lengths, six numbers
    ``c,a_s,a_t,b_s,b_t,cross`` (a
    :class:`~dynbatch.plan.pair_steptime.PairStepTimeModel`), and
    ``--cost-file`` a saved :class:`~dynbatch.memory.cost.PairMemoryCost`;
    each plans and prices the rows as its one-length kind does for one
    length. What does not fit the corpus is refused by name, never priced on
    a pair's summed tokens: a step time or a memory model of one length for
    pairs (``--time-table`` always: a table is of one length), one of pairs
    for one length a sample, and ``--pack-len``. The lower bound on batches of
    pairs is the larger side's (NOTE [ the fewest batches of pairs ] in
    :mod:`dynbatch.plan.bounds`): never above a plan, below the fewest where
    the sides differ much.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence

import numpy as np

from .._checks import InputError
from ..memory.cost import PairMemoryCost
from ..plan.options import PlanOptions
from ..plan.pair_steptime import PairStepTimeModel, check_step_time
from ..plan.planning import find_oversize, padded_lengths
from ..plan.stats import PlanStats, compare_orders, packed_stats, split_options
from ..stream.state import stream_stats
from .args import UsageError, as_flags, batch_flag, check_flags, make_options, parser
from .corpora import Corpus, read_corpus, read_lengths
from .plot import plot
from .report import format_table, lower_bound, oversize_line, print_json, print_text

__all__ = ["Corpus", "UsageError", "format_table", "main", "read_corpus", "read_lengths"]


def _stats(args: argparse.Namespace) -> None:
    check_flags(args)
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
    if corpus.note is not None:  # NOTE [ a text of numbers is lengths ] in dynbatch.cli.corpora
        print(f"dynbatch stats: {corpus.path}: {corpus.note}", file=sys.stderr)
    lengths = corpus.lengths
    _refuse_other_kind(args, corpus)
    budget = _fixed_batch_budget(args, corpus) if args.budget_from_batch else None
    options: PlanOptions = args.options
    over = find_oversize(lengths, options=options)
    note = oversize_line(corpus, over, options) if over.size else None
    if note is not None and options.oversize == "error":
        raise UsageError(note)
    with warnings.catch_warnings():  # the skip warning is the note above
        warnings.filterwarnings("ignore", message="skipping .* over (max_cost|budget)")
        try:
            rows = compare_orders(
                lengths,
                options,
                fixed_batch_size=args.fixed_batch_size,
                step_time=args.step_time,
                group_by_length=args.group_by_length,
                fixed_step_size=args.fixed_step_size,
            )
            if args.buffer_size is not None:  # the corpus as DynamicBatchIterable reads it
                # the stream given the step time as time_model splits updates as the sampler does
                timed = split_options(options, args.step_time, args.group_by_length)
                rows[f"stream {args.buffer_size}"] = stream_stats(
                    lengths, timed or options, args.buffer_size, step_time=args.step_time
                )
            if args.pack_len is not None:
                rows["packed"] = _packed(args, corpus, options)
        except InputError as exc:
            raise UsageError(as_flags(str(exc))) from None
    bound = lower_bound(lengths, over, options)
    if args.json:
        print_json(lengths, options, args.cost, over, rows, bound)
    else:
        print_text(lengths, options, args.cost, over, rows, bound, note, budget=budget)
    if args.plot:
        plot(
            args.plot,
            lengths,
            options,
            args.fixed_batch_size,
            step_time=args.step_time,
            pack_len=args.pack_len,
        )
        if not args.json:
            print(f"wrote {args.plot}")


def _fixed_batch_budget(args: argparse.Namespace, corpus: Corpus) -> str:
    """Set ``args.max_cost`` and ``args.options`` from ``--batch-size`` alone: the budget
    ``like_fixed`` plans ``batch_size=B`` within; return how the header says it.

    NOTE [ the fixed batch's budget ]
        ``DynamicBatchSampler(batch_size=B)``, the library's headline, plans
        :func:`~dynbatch.like_fixed`: micro-batches within the fixed batch's worst batch,
        ``cost(B, L_max)``, ``L_max`` the longest (padded) length (of pairs, the longest
        source and the longest target). ``dynbatch stats --batch-size B`` without
        ``--max-cost`` plans within that same budget (under ``--cost``, a
        ``--cost-file``'s, or with neither ``like_fixed``'s own default, as the sampler's:
        padded tokens for one length, ``PairCost()`` for pairs), asked of ``like_fixed``
        itself, so that every row is priced as the sampler's training would be; the header
        says where the budget came from.
        ``--help``'s "picking --max-cost" gives the same number by hand. Neither flag is
        refused by name, naming both.
    """
    from ..plan.recipes import like_fixed  # numpy only

    batch = args.fixed_batch_size
    try:
        recipe = like_fixed(
            corpus.lengths, batch, cost=args.cost, pad_to_multiple_of=args.pad_to_multiple_of
        )
    except InputError as exc:
        flag = batch_flag(args)  # as the user wrote it
        message = as_flags(str(exc)).replace("batch_size must", f"{flag} must")
        raise UsageError(message.replace("batch_size=", f"{flag}=")) from None
    args.max_cost = recipe.max_cost
    if args.cost is None:  # like_fixed's default, as the command line spells it
        args.cost = "quadratic" if corpus.pairs else "linear"
    make_options(args)
    longest = padded_lengths(corpus.lengths, args.options.pad_to_multiple_of).max(axis=0)
    shown = ", ".join(str(int(x)) for x in np.atleast_1d(longest))
    return f"cost({batch}, {shown}), the fixed batch's worst"


def _refuse_other_kind(args: argparse.Namespace, corpus: Corpus) -> None:
    """Refuse by name what does not fit the corpus's kind: for (source, target) pairs packing
    and a step time or memory model of one length, for one length a sample one of pairs
    (NOTE [ stats of pairs ])."""
    step = None if args.time_model is None else check_step_time(args.time_model)
    pair_cost = isinstance(args.cost, PairMemoryCost)
    if not corpus.pairs:
        if isinstance(step, PairStepTimeModel):
            raise UsageError(
                f"--time-model {args.time_model}: a step time of (source, target) pairs, "
                f"(n, Ls, Lt), and {corpus.path} holds one length a sample: give 'c,a,b' "
                "(seconds = c + n*L*(a + b*L)), or the pairs' two --column or --field"
            )
        if pair_cost:
            raise UsageError(
                f"--cost-file {args.cost_file}: its cost={args.cost!r} takes two lengths, "
                f"(n, Ls, Lt), and {corpus.path} holds one length a sample: give a saved "
                "MemoryCost (calibrate with one max_len), or the pairs' two --column or --field"
            )
        return
    what = f"{corpus.path} holds (source, target) pairs"
    pair_form = (
        "give --time-model as a step time of two lengths, 'c,a_s,a_t,b_s,b_t,cross' (seconds = "
        "c + n*(a_s*Ls + a_t*Lt + b_s*Ls^2 + b_t*Lt^2 + cross*Ls*Lt)), or leave it out"
    )
    if args.pack_len is not None:
        raise UsageError(
            f"--pack-len={args.pack_len}: {what}, and packing is refused for pairs (a packed "
            "row would hold two lengths a sample): leave --pack-len out"
        )
    if args.time_model is not None and not isinstance(step, PairStepTimeModel):
        raise UsageError(
            f"--time-model {args.time_model}: {what}, and its step time (or memory model) is "
            f"of one length, (n, L), never priced on a pair's summed tokens: {pair_form}"
        )
    if args.time_table is not None:
        raise UsageError(
            f"--time-table {args.time_table}: {what}, and a step-time table is of one length, "
            f"(n, L) (there is no table of two lengths): {pair_form}"
        )
    if args.cost_file is not None and not pair_cost:
        raise UsageError(
            f"--cost-file {args.cost_file}: {what}, and it holds a {type(args.cost).__name__}, "
            "a memory model of one length, (n, L): give a saved PairMemoryCost (calibrate with "
            "max_len=(Ls, Lt)), or leave it out (--cost prices both sides)"
        )
    if args.step_time is not None and not isinstance(args.step_time, PairStepTimeModel):
        raise UsageError(  # a PairMemoryCost's attached step time of one length
            f"--cost-file {args.cost_file}: {what}, and its time_model={args.step_time!r} is "
            f"of one length, (n, L): {pair_form}"
        )


def _packed(args: argparse.Namespace, corpus: Corpus, options: PlanOptions) -> PlanStats:
    """The ``packed`` row; a sample longer than ``--pack-len`` follows ``--oversize``."""
    longer = np.flatnonzero(corpus.lengths > args.pack_len)
    if longer.size and options.oversize == "error":
        first = int(longer[0])
        raise UsageError(
            f"{longer.size} sample(s) are longer than --pack-len={args.pack_len}; the first is "
            f"{corpus.where(first)} (length {int(corpus.lengths[first])}): raise --pack-len, "
            "--truncate them, or pass --oversize skip or --oversize alone"
        )
    try:
        return packed_stats(
            corpus.lengths,
            args.pack_len,
            batch_size=args.fixed_batch_size,
            cost=options.cost,
            max_cost=options.max_cost,
            step_time=args.step_time,
            oversize=options.oversize,
            seed=options.seed,
            pad_to_multiple_of=options.pad_to_multiple_of,
            update_unit=options.update_unit,
            max_batch_size=options.max_batch_size,  # the sampler's cap on rows
        )
    except InputError as exc:  # the packing's own names, as the command line spells them
        raise UsageError(as_flags(str(exc)).replace("pack_len=", "--pack-len=")) from None


def _closed_pipe() -> int:
    """The reader of stdout left (``dynbatch stats ... | head``): exit quietly, as ``cat`` does.

    NOTE [ a closed pipe ]
        Python ignores SIGPIPE, so a write to a pipe whose reader has gone
        raises BrokenPipeError, and the interpreter's last flush of stdout
        raises it again at exit. Point stdout at devnull so that flush writes
        nowhere, and return 128 + SIGPIPE (141), the status the shell gives a
        writer killed by the signal (``set -o pipefail`` sees it; ``head``'s own
        status is what a plain pipeline returns).
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + 13  # SIGPIPE; signal.SIGPIPE does not exist on Windows


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dynbatch`` console script; returns the exit code.

    Bad input (an :class:`~dynbatch.InputError`, which a :class:`UsageError`
    is) is one line on stderr and exit code 2; any other exception is a bug
    and propagates with its traceback.
    """
    prog = "dynbatch"
    try:
        args = parser().parse_args(argv)
        prog = f"dynbatch {args.command}"
        _stats(args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush
    except BrokenPipeError:
        return _closed_pipe()
    except UsageError as exc:
        print(f"{exc.prog or prog}: error: {exc}", file=sys.stderr)
        return 2
    except InputError as exc:
        print(f"{prog}: error: {as_flags(str(exc))}", file=sys.stderr)
        return 2
    return 0
