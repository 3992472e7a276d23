"""Packing efficiency and planning time: dynbatch against the peers' packing algorithms.

python benchmarks/packing.py [--million]

Each peer is re-implemented here as a plain plan on the same lengths, from its
description (nothing copied); all take the epoch's shuffled order as their
arrival order, and a sample longer than ``pack_len`` is cut to it first:

* PaddleNLP zero padding (``ZeroPaddingMapDataset``): in arrival order, a new
  row when the next sample does not fit (next-fit); its ``greedy_zero_padding``
  (``greedy_intokens``): buffers of 500 samples in arrival order, each sample
  into the open row with the most room, a new row when it fits none;
* TRL ``pack_dataset(strategy="bfd")``: best-fit decreasing over the whole dataset;
* axolotl multipack: first-fit decreasing per group of 100,000 samples (its
  ``group_size``);
* torchtune ``PackedDataset``: in order, next-fit (without splitting samples);
* per-update first-fit decreasing: each fixed update of ``B`` random samples
  packed alone (what NOTE [ packing windows ] in ``dynbatch.packing`` avoids).

Efficiency is real tokens over ``rows * pack_len``; the update count is the
fixed batch's ``ceil(N / B)`` for every plan that keeps the fixed batch's updates
(dynbatch's and per-update packing); the others pack a dataset, not updates.
Times are of these Python re-implementations on this machine (axolotl's is
numba-compiled in the original): read them as orders of magnitude.
"""

from __future__ import annotations

import argparse
import csv
import heapq
import time
from collections.abc import Callable

import numpy as np
from _common import SHARED, chnsenticorp_lengths, print_table

from dynbatch import plan_packs
from dynbatch.packing import _best_fit_windows

B = 32

Packer = Callable[[np.ndarray, int], int]  # lengths in arrival order, pack_len -> rows


def next_fit(lens: np.ndarray, pack_len: int) -> int:
    rows, room = 0, -1
    for length in lens.tolist():
        if length > room:
            rows += 1
            room = pack_len
        room -= length
    return rows


def worst_fit_buffers(lens: np.ndarray, pack_len: int, buffer: int = 500) -> int:
    rows = 0
    for start in range(0, lens.size, buffer):
        heap: list[int] = []  # -room of each open row
        for length in lens[start : start + buffer].tolist():
            if heap and -heap[0] >= length:
                heapq.heapreplace(heap, heap[0] + length)
            else:
                heapq.heappush(heap, -(pack_len - length))
        rows += len(heap)
    return rows


def first_fit_decreasing(lens: np.ndarray, pack_len: int) -> int:
    """First fit over a max-segment-tree of rooms: the first row with room, in O(log rows)."""
    items = np.sort(lens)[::-1].tolist()
    size = 1
    while size < len(items):
        size *= 2
    tree = [0] * (2 * size)
    for i in range(size, 2 * size):
        tree[i] = pack_len
    for i in range(size - 1, 0, -1):
        tree[i] = pack_len
    used = 0
    for length in items:
        i = 1
        while i < size:
            i = 2 * i if tree[2 * i] >= length else 2 * i + 1
        used = max(used, i - size + 1)
        tree[i] -= length
        i //= 2
        while i:
            tree[i] = max(tree[2 * i], tree[2 * i + 1])
            i //= 2
    return used


def ffd_groups(lens: np.ndarray, pack_len: int, group: int = 100_000) -> int:
    starts = range(0, lens.size, group)
    return sum(first_fit_decreasing(lens[s : s + group], pack_len) for s in starts)


def best_fit_decreasing_all(lens: np.ndarray, pack_len: int) -> int:
    _, offsets = _best_fit_windows(lens, np.arange(lens.size), lens.size, pack_len)
    return int(offsets.size - 1)


def ffd_per_update(lens: np.ndarray, pack_len: int) -> int:
    return sum(first_fit_decreasing(lens[s : s + B], pack_len) for s in range(0, lens.size, B))


PEERS: dict[str, Packer] = {
    "PaddleNLP zero padding (arrival order)": next_fit,
    "PaddleNLP greedy_intokens (500-sample buffers)": worst_fit_buffers,
    "TRL best-fit decreasing (whole dataset)": best_fit_decreasing_all,
    "axolotl multipack FFD (groups of 100k)": ffd_groups,
    "torchtune in-order packing": next_fit,
    "per-update FFD (each fixed update alone)": ffd_per_update,
}


def sft_lengths(max_len: int) -> np.ndarray:
    """examples/sft_causal_lm.py's pairs: <s> 评论：review \\n情感：answer </s>, review cut."""
    with open(SHARED / "chnsenticorp_htl_all.csv", encoding="utf-8", newline="") as fh:
        reviews = [" ".join(r["review"].split()) for r in csv.DictReader(fh)]
    frame = 1 + len("评论：") + len("\n情感：") + 2 + 1
    return np.minimum(np.array([len(r) for r in reviews]) + frame, max_len)


def long_tail(n: int = 20_000, cap: int = 4096, seed: int = 0) -> np.ndarray:
    """Half lognormal (chat turns), half Pareto (documents), up to ``cap`` tokens."""
    rng = np.random.default_rng(seed)
    short = np.ceil(rng.lognormal(5.0, 1.0, n // 2))
    docs = np.ceil((rng.pareto(1.1, n - n // 2) + 1) * 120)
    return np.minimum(np.concatenate([short, docs]), cap).astype(np.int64)


def timed(fn: Callable[[], int]) -> tuple[float, int]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def corpus_rows(name: str, lens: np.ndarray, pack_len: int) -> list[list[str]]:
    tokens = int(lens.sum())
    fixed_updates = -(-lens.size // B)
    order = np.random.default_rng([0, 0]).permutation(lens.size)
    out = []
    for window in (None, 12 * B, 50 * B, lens.size):
        t, plan = timed(lambda w=window: plan_packs(lens, pack_len, batch_size=B, window=w))
        label = "dynbatch plan_packs, window " + (
            "100·B (default)"
            if window is None
            else "N (the epoch)"
            if window == lens.size
            else f"{window // B}·B"
        )
        out.append(
            [name, label, f"{plan.efficiency:.4f}", str(plan.num_updates), f"{t * 1000:.0f} ms"]
        )
    for peer, packer in PEERS.items():
        t, rows = timed(lambda p=packer: p(lens[order], pack_len))
        updates = str(fixed_updates) if peer.startswith("per-update") else "-"
        out.append([name, peer, f"{tokens / (rows * pack_len):.4f}", updates, f"{t * 1000:.0f} ms"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--million", action="store_true", help="also time 1M samples")
    args = parser.parse_args()
    chn = chnsenticorp_lengths()
    corpora = [
        (f"ChnSentiCorp ({chn.size}) @512", chn, 512),
        (f"SFT pairs ({chn.size}) @128", sft_lengths(128), 128),
        (f"SFT pairs ({chn.size}) @512", sft_lengths(512), 512),
        ("long tail (20k) @4096", long_tail(), 4096),
    ]
    rows: list[list[str]] = []
    for name, lens, pack_len in corpora:
        rows += corpus_rows(name, lens, pack_len)
    print(f"Packing efficiency (real tokens / rows x pack_len), B = {B}, seed 0")
    print_table(["corpus", "plan", "efficiency", "updates", "planning"], rows)
    if args.million:
        rng = np.random.default_rng(1)
        big = np.concatenate([rng.choice(chn, 1_000_000 - 20_000), long_tail(20_000, 512)])
        walls, cpus = [], []
        for _ in range(3):
            cpu = time.process_time()
            wall, plan = timed(lambda: plan_packs(big, 512, batch_size=B))
            walls.append(wall)
            cpus.append(time.process_time() - cpu)
        print(
            f"\nplan_packs on 1,000,000 samples (ChnSentiCorp lengths resampled) @512: "
            f"best of 3 {min(walls):.2f} s wall, {min(cpus):.2f} s CPU (the two differ on a "
            f"busy machine); efficiency {plan.efficiency:.4f}, {plan.num_updates} updates"
        )


if __name__ == "__main__":
    main()
