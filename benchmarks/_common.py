"""Shared pieces of the benchmarks: the corpus, the baselines, the table printer.

Benchmarks print numbers measured side by side in one run; they assert nothing.
"""

from __future__ import annotations

import csv
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

SHARED = Path(
    os.environ.get("DYNBATCH_SHARED_DATA")
    or Path(__file__).resolve().parents[1].parent / "shared" / "data"
)
BUDGET = 20 * 512**2 / 4  # the reference budget: a fixed batch of 20 at 512, over 4


def chnsenticorp_lengths() -> np.ndarray:
    """Characters + 2 ([CLS], [SEP]), cut at 512; exits cleanly when the corpus is absent."""
    path = SHARED / "chnsenticorp_htl_all.csv"
    if not path.exists():
        print(f"skipped: {path} not found (the benchmarks read ../shared/data)")
        sys.exit(0)
    with open(path, encoding="utf-8", newline="") as fh:
        return np.minimum(np.array([len(r["review"]) for r in csv.DictReader(fh)]) + 2, 512)


def study_batches(lengths: np.ndarray, seed: int = 0, controller: float = 5000) -> list[np.ndarray]:
    """The study's code as published (its controller 5000) on shuffled data, as in its notebook."""
    from dynbatch.paddle.compat import as_published

    perm = np.random.default_rng(seed).permutation(lengths.size)
    return [perm[b] for b in as_published(lengths[perm], controller)]


def sampler_helper_batches(
    lengths: np.ndarray, max_cost: float, buffer_size: int = 2000, seed: int = 0
) -> list[list[int]] | None:
    """PaddleNLP's SamplerHelper: shuffle, sort within a buffer, batch by n * L**2."""
    try:
        from paddlenlp.data import SamplerHelper
    except ImportError:
        return None
    data = lengths.tolist()
    sampler = (
        SamplerHelper(data, iterable=range(len(data)))  # indices, not the lengths themselves
        .shuffle(seed=seed)
        .sort(key=lambda i, ds: ds[i], buffer_size=buffer_size)
        .batch(
            max_cost,
            batch_size_fn=lambda i, count, sofar, ds: max(sofar, ds[i]),
            key=lambda longest, count: count * longest**2,
        )
    )
    return list(sampler)


def best_of(fn: Callable[[], Any], repeat: int = 3) -> tuple[float, Any]:
    """Fastest wall time of ``repeat`` calls, and the last result."""
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def print_table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A GitHub-flavoured Markdown table, so the docs can take it as printed."""
    text = [[str(c) for c in r] for r in [head, *rows]]
    widths = [max(len(r[i]) for r in text) for i in range(len(head))]
    for k, r in enumerate(text):
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |")
        if k == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
