"""Packing efficiency at rows of 512 to 8,192 tokens, on short and long corpora: what each of
the fixed batch's updates computes, packed by dynbatch, by the per-update packers, or padded.

    python benchmarks/packing.py [--pack-lens 512,1024,2048,4096,8192] [--batch-sizes 8,32]

For each corpus, row length ``P`` and fixed batch ``B``, the lengths are cut at ``P`` (the
fixed batch's ``max_len`` is ``P``) and every column but the last runs the fixed batch's
updates: ``ceil(N / B)`` of them, ``B`` samples each (the last the rest), drawn as the fixed
batch draws them (``dynbatch.plan.packs.fixed_updates``, seed 0, epoch 0), each update one
micro-batch. Efficiency is real tokens over the tokens computed (rows x width):

* ``fixed``: each update one padded batch, ``B`` samples as wide as its longest;
* ``dynbatch``: ``plan_packs(lengths, P, batch_size=B).efficiency``: each update's samples in
  as few rows as best-fit decreasing finds, balanced over them, the rows as wide as the fullest
  (NOTE [ an update's rows ], NOTE [ a micro-batch's layout ]);
* ``FFD, rows of P``: each update's samples packed alone by first-fit decreasing, every row
  padded to ``P``, as TRL's and axolotl's packers pack a batch and pad it to the sequence length;
* ``FFD, rows as full``: the same rows, as wide as the update's fullest row;
* ``epoch BFD (ref.)``: for reference, the whole epoch packed at once by best-fit decreasing
  (TRL's ``pack_dataset(strategy="bfd")``), rows of ``P``. It changes the updates: a batch is
  ``B`` rows, so where a row holds more than one sample an epoch has ``ceil(rows / B)``
  updates, fewer and larger than the fixed batch's (the ``epoch BFD updates`` column), and
  each update's samples are no longer a random draw.

Corpora: ChnSentiCorp reviews (characters + 2, ../shared/data), short SFT-like pairs
(lognormal, median about 200 tokens) and a long-tailed corpus (lognormal, median about 1,100
tokens, up to 16,384), 20,000 samples each, seed 0. The peers are re-implemented here from
their descriptions (nothing copied). It asserts nothing.
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import time

import numpy as np
from _common import chnsenticorp_lengths, print_table

from dynbatch import plan_packs
from dynbatch.plan.packs import fixed_updates


def next_fit_rows(lens: np.ndarray, pack_len: int) -> np.ndarray:
    """Each sample's row, next-fit in arrival order (PaddleNLP zero padding, torchtune)."""
    rows, room = [], -1
    for length in lens.tolist():
        if length > room:
            room = pack_len
        room -= length
        rows.append(room == pack_len - length)
    return np.cumsum(rows) - 1


def worst_fit_buffers_rows(lens: np.ndarray, pack_len: int, buffer: int = 500) -> np.ndarray:
    """Each sample's row, PaddleNLP's ``greedy_intokens``: buffers of 500 samples in arrival
    order, each sample into the open row with the most room, a new row when it fits none."""
    out, n_rows = [], 0
    for start in range(0, lens.size, buffer):
        heap: list[tuple[int, int]] = []  # (-room, row) of each open row
        for length in lens[start : start + buffer].tolist():
            if heap and -heap[0][0] >= length:
                room, row = heap[0]
                heapq.heapreplace(heap, (room + length, row))
            else:
                row = n_rows
                n_rows += 1
                heapq.heappush(heap, (-(pack_len - length), row))
            out.append(row)
    return np.asarray(out, dtype=np.int64)


def first_fit_decreasing_loads(lens: np.ndarray, pack_len: int) -> list[int]:
    """Each row's tokens, first-fit decreasing: longest first, each into the first open row
    with room, a new row when it fits none (one update's samples: a few rows)."""
    loads: list[int] = []
    for length in sorted(lens.tolist(), reverse=True):
        for k, load in enumerate(loads):
            if load + length <= pack_len:
                loads[k] = load + length
                break
        else:
            loads.append(length)
    return loads


def best_fit_decreasing_rows(lens: np.ndarray, pack_len: int) -> int:
    """Rows of best-fit decreasing over all of ``lens``: each sample, longest first, into the
    open row with the least room that holds it (TRL's ``strategy="bfd"``)."""
    rooms: list[int] = []  # distinct rooms of open rows, ascending
    open_with: dict[int, int] = {}  # room -> open rows with it
    n_rows = 0
    for length in sorted(lens.tolist(), reverse=True):
        i = bisect.bisect_left(rooms, length)
        if i == len(rooms):
            room = pack_len
            n_rows += 1
        else:
            room = rooms[i]
            open_with[room] -= 1
            if not open_with[room]:
                del rooms[i], open_with[room]
        room -= length
        if room:
            if room not in open_with:
                bisect.insort(rooms, room)
                open_with[room] = 0
            open_with[room] += 1
    return n_rows


def next_fit(lens: np.ndarray, pack_len: int) -> int:
    """Rows of next-fit in arrival order (for benchmarks/device_time.py)."""
    return int(next_fit_rows(lens, pack_len).max()) + 1


def worst_fit_buffers(lens: np.ndarray, pack_len: int) -> int:
    """Rows of PaddleNLP's greedy_intokens (for benchmarks/device_time.py)."""
    return int(worst_fit_buffers_rows(lens, pack_len).max()) + 1


def first_fit_decreasing(lens: np.ndarray, pack_len: int) -> int:
    """Rows of first-fit decreasing (for benchmarks/device_time.py)."""
    return len(first_fit_decreasing_loads(lens, pack_len))


def sft_like(n: int = 20_000, seed: int = 0) -> np.ndarray:
    """Short instruction pairs: lognormal, median about 200 tokens, at least 16."""
    rng = np.random.default_rng(seed)
    return np.maximum(np.ceil(rng.lognormal(5.3, 0.7, n)), 16).astype(np.int64)


def long_tailed(n: int = 20_000, seed: int = 0, cap: int = 16_384) -> np.ndarray:
    """Long documents: lognormal, median about 1,100 tokens, a tail up to ``cap``."""
    rng = np.random.default_rng([seed, 1])
    return np.minimum(np.ceil(rng.lognormal(7.0, 1.1, n)), cap).astype(np.int64)


def cell(lens: np.ndarray, pack_len: int, batch: int) -> list[str]:
    """One (P, B) row: every packing's efficiency on ``lens`` cut at ``P``."""
    cut = np.minimum(lens, pack_len)
    tokens = float(cut.sum())
    updates = fixed_updates(cut, pack_len, batch, seed=0, epoch=0)
    padded = sum(u.size * int(cut[u].max()) for u in updates)
    plan = plan_packs(cut, pack_len, batch_size=batch)
    ffd_rows, ffd_full = 0, 0
    for u in updates:
        loads = first_fit_decreasing_loads(cut[u], pack_len)
        ffd_rows += len(loads)
        ffd_full += len(loads) * max(loads)
    epoch_rows = best_fit_decreasing_rows(cut, pack_len)
    per_update = len(plan.rows) / plan.num_updates
    return [
        f"{pack_len:,}",
        str(batch),
        f"{tokens / padded:.3f}",
        f"{plan.efficiency:.3f}",
        f"{tokens / (ffd_rows * pack_len):.3f}",
        f"{tokens / ffd_full:.3f}",
        f"{per_update:.1f}",
        f"{tokens / (epoch_rows * pack_len):.3f}",
        f"{len(updates):,} / {plan.num_updates:,}",
        f"{-(-epoch_rows // batch):,}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--pack-lens", default="512,1024,2048,4096,8192")
    parser.add_argument("--batch-sizes", default="8,32")
    args = parser.parse_args()
    pack_lens = [int(v) for v in args.pack_lens.split(",")]
    batches = [int(v) for v in args.batch_sizes.split(",")]
    chn = chnsenticorp_lengths()
    corpora = [
        (f"ChnSentiCorp reviews ({chn.size:,}, chars + 2, cut at 512): short", chn),
        ("SFT-like pairs (20,000, lognormal): short", sft_like()),
        ("long-tailed documents (20,000, lognormal): long", long_tailed()),
    ]
    head = [
        "P",
        "B",
        "fixed",
        "dynbatch",
        "FFD, rows of P",
        "FFD, rows as full",
        "dynbatch rows / update",
        "epoch BFD (ref.)",
        "updates: fixed / dynbatch",
        "epoch BFD updates",
    ]
    print(
        "Efficiency: real tokens / tokens computed (rows x width), lengths cut at P. Every "
        "column but epoch BFD runs the fixed batch's updates (ceil(N / B) of B samples, seed 0), "
        "each one micro-batch; epoch BFD packs the whole epoch and changes the updates (a batch "
        "of B rows: fewer, larger updates, not random draws), shown for reference only."
    )
    start = time.perf_counter()
    for name, lens in corpora:
        p50, p90, p99 = np.percentile(lens, [50, 90, 99])
        print(f"\n{name}: median {p50:.0f}, p90 {p90:.0f}, p99 {p99:.0f}, longest {lens.max()}")
        print_table(head, [cell(lens, p, b) for p in pack_lens for b in batches])
    print(f"\n({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
