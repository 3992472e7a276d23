"""Counting BERT WordPiece tokens three ways, side by side: speed and agreement.

    python benchmarks/wordpiece.py [--passes 10]

Each counter counts ``--passes`` passes over the 7,766 ChnSentiCorp reviews with the
bert-base-chinese vocabulary (``../shared/data``), the counters taking turns pass by pass; its
rate (the median pass) is scaled to 1M reviews. Agreement
is per review, on one pass, against paddlenlp's ``BertTokenizer`` (the tokenizer the examples
train with). A counter whose package is missing is a row that says how to install it. The
figures are quoted in ``dynbatch.plan.text`` (NOTE [ one WordPiece counter ]). Without the shared
data it skips, unless ``CI=true``: then it fails.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from _common import SHARED, print_table

from dynbatch.plan.text import wordpiece_counter

MILLION = 1_000_000
#: ``texts -> counts``: one call per pass, so a batch API is measured as it is meant to be used
Counter = Callable[[list[str]], list[int]]


def shared(name: str) -> Path:
    path = SHARED / name
    if not path.is_file():
        in_ci = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
        what = "error" if in_ci else "skipped"
        print(f"{what}: {path} not found (the benchmarks read ../shared/data)")
        sys.exit(1 if in_ci else 0)
    return path


def counters(vocab: Path) -> dict[str, Counter | str]:
    """Each counter by name, or why it cannot run here."""
    found: dict[str, Counter | str] = {}
    count = wordpiece_counter(vocab)
    found["dynbatch.plan.text.wordpiece_counter"] = lambda texts: [count(t) for t in texts]
    try:
        from paddlenlp.transformers import BertTokenizer
    except ImportError:
        found["paddlenlp BertTokenizer"] = 'not installed: pip install "dynbatch[examples]"'
    else:
        bert = BertTokenizer(vocab_file=str(vocab))
        found["paddlenlp BertTokenizer"] = lambda texts: [len(bert.tokenize(t)) for t in texts]
    try:
        from tokenizers import BertWordPieceTokenizer
    except ImportError:
        found["tokenizers BertWordPieceTokenizer"] = "not installed: pip install tokenizers"
    else:
        fast = BertWordPieceTokenizer(str(vocab), lowercase=True)
        found["tokenizers BertWordPieceTokenizer"] = lambda texts: [
            len(e.ids) for e in fast.encode_batch(texts, add_special_tokens=False)
        ]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    parser.add_argument("--passes", type=int, default=10, help="passes over the reviews each")
    args = parser.parse_args()
    with open(shared("chnsenticorp_htl_all.csv"), encoding="utf-8", newline="") as fh:
        texts = [row["review"] for row in csv.DictReader(fh)]
    vocab = shared("bert-base-chinese-vocab.txt")
    found = counters(vocab)
    ready = {name: count for name, count in found.items() if not isinstance(count, str)}
    # NOTE [ interleaved passes ]: the machine is shared, so the counters take turns, pass by
    # pass, and each one's rate is its median pass: every counter sees the same load.
    counts: dict[str, list[int]] = {}
    seconds: dict[str, list[float]] = {name: [] for name in ready}
    for _ in range(args.passes):
        for name, count in ready.items():
            start = time.perf_counter()
            counts[name] = count(texts)
            seconds[name].append(time.perf_counter() - start)
    rows: list[list[object]] = []
    for name, count in found.items():
        if isinstance(count, str):
            rows.append([name, count, "", "", ""])
            continue
        rate = len(texts) / statistics.median(seconds[name])
        total = sum(seconds[name])
        rows.append([name, args.passes * len(texts), f"{total:.1f}", f"{rate:,.0f}"])
        rows[-1].append(f"{MILLION / rate:,.0f}")
    reference = counts.get("paddlenlp BertTokenizer")
    for row in rows:
        if row[0] not in counts or reference is None:
            row.append("" if row[2] == "" else "(no paddlenlp)")
            continue
        if row[0] == "paddlenlp BertTokenizer":
            row.append("(the reference)")
            continue
        differ = [
            i for i, (a, b) in enumerate(zip(reference, counts[row[0]], strict=True)) if a != b
        ]
        most = max((abs(reference[i] - counts[row[0]][i]) for i in differ), default=0)
        row.append(f"{len(differ)} of {len(texts)} (by <= {most})")
    print(f"{len(texts)} reviews x {args.passes} passes, taking turns; 1M scaled from the rate\n")
    head = [
        "counter",
        "reviews",
        "s",
        "reviews/s (median pass)",
        "1M reviews s",
        "differs from paddlenlp",
    ]
    print_table(head, rows)
    if reference is not None:
        print("\nwhere they differ (review: paddlenlp, then each other counter):")
        others = [name for name in counts if name != "paddlenlp BertTokenizer"]
        shown = 0
        for i, text in enumerate(texts):
            got = [counts[name][i] for name in others]
            if shown < 8 and any(g != reference[i] for g in got):
                shown += 1
                print(f"  {i}: {reference[i]} vs {got}  {text[:40]!r}")


if __name__ == "__main__":
    main()
