"""Packing efficiency, rows that mix lengths, and planning time: dynbatch against the peers.

python benchmarks/packing.py [--million]

Each peer is re-implemented here as a plain plan on the same lengths, from its
description (nothing copied, nothing shared with dynbatch); all take the
epoch's shuffled order as their arrival order, and a sample longer than
``pack_len`` is cut to it first:

* PaddleNLP zero padding (``ZeroPaddingMapDataset``): in arrival order, a new
  row when the next sample does not fit (next-fit); its ``greedy_zero_padding``
  (``greedy_intokens``): buffers of 500 samples in arrival order, each sample
  into the open row with the most room, a new row when it fits none;
* TRL ``pack_dataset(strategy="bfd")``: best-fit decreasing over the whole dataset;
* axolotl multipack: first-fit decreasing per group of 100,000 samples (its
  ``group_size``);
* torchtune ``PackedDataset``: in order, next-fit (without splitting samples);
* per-update first-fit decreasing: each fixed update of ``B`` random samples
  packed alone (what NOTE [ packing windows ] in ``dynbatch.plan.packs`` avoids).

Efficiency is real tokens over ``rows * pack_len``; the update count is the
fixed batch's ``ceil(N / B)`` for every plan that keeps the fixed batch's updates
(dynbatch's and per-update packing); the others pack a dataset, not updates.

*Short-only* (rows that mix lengths, NOTE [ rows that mix ]): the share of the
samples that sit in a row where no sample is as long as the corpus's median
length. Rows drawn at random (next-fit in arrival order) set the level chance
gives; best-fit and first-fit decreasing leave a tail of such rows, the
corpus's shortest samples packed together (40-48 % of the samples here).

*Update spread* (updates that are random draws): the standard deviation of the updates'
mean sample lengths over that of random draws of ``B`` (the fixed batch: about 1). Every
packer's rows, dynbatch's too, are shuffled and cut the same way into the fixed batch's
update count (at every ``k / U`` of the samples, whole rows), so the column compares what
the rows hold; per-update packing keeps the fixed batch's updates.

Times are of these Python re-implementations on this machine (axolotl's is
numba-compiled in the original): read them as orders of magnitude.
"""

from __future__ import annotations

import argparse
import bisect
import csv
import heapq
import time
from collections.abc import Callable

import numpy as np
from _common import SHARED, chnsenticorp_lengths, print_table

from dynbatch import plan_packs

B = 32

#: lengths in arrival order, pack_len -> each sample's row (0, 1, ...)
Packer = Callable[[np.ndarray, int], np.ndarray]


def next_fit_rows(lens: np.ndarray, pack_len: int) -> np.ndarray:
    rows, room = [], -1
    for length in lens.tolist():
        if length > room:
            room = pack_len
        room -= length
        rows.append(room == pack_len - length)
    return np.cumsum(rows) - 1


def worst_fit_buffers_rows(lens: np.ndarray, pack_len: int, buffer: int = 500) -> np.ndarray:
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


def first_fit_decreasing_rows(lens: np.ndarray, pack_len: int) -> np.ndarray:
    """First fit over a max-segment-tree of rooms: the first row with room, in O(log rows)."""
    by = np.argsort(-lens, kind="stable")
    size = 1
    while size < lens.size:
        size *= 2
    tree = [pack_len] * (2 * size)
    out = np.zeros(lens.size, dtype=np.int64)
    for k, length in zip(by.tolist(), lens[by].tolist(), strict=True):
        i = 1
        while i < size:
            i = 2 * i if tree[2 * i] >= length else 2 * i + 1
        out[k] = i - size
        tree[i] -= length
        i //= 2
        while i:
            tree[i] = max(tree[2 * i], tree[2 * i + 1])
            i //= 2
    _, dense = np.unique(out, return_inverse=True)
    return dense


def ffd_groups_rows(lens: np.ndarray, pack_len: int, group: int = 100_000) -> np.ndarray:
    return _in_groups(lens, pack_len, group, first_fit_decreasing_rows)


def best_fit_decreasing_all_rows(lens: np.ndarray, pack_len: int) -> np.ndarray:
    """Each sample, longest first, into the open row with the least room that holds it."""
    by = np.argsort(-lens, kind="stable")
    rooms: list[int] = []  # distinct rooms of open rows, ascending
    rows_with: dict[int, list[int]] = {}
    out = np.zeros(lens.size, dtype=np.int64)
    n_rows = 0
    for k, length in zip(by.tolist(), lens[by].tolist(), strict=True):
        i = bisect.bisect_left(rooms, length)
        if i == len(rooms):
            row, room = n_rows, pack_len
            n_rows += 1
        else:
            room = rooms[i]
            row = rows_with[room].pop()
            if not rows_with[room]:
                del rooms[i]
        out[k] = row
        room -= length
        if room:
            if not rows_with.setdefault(room, []):
                bisect.insort(rooms, room)
            rows_with[room].append(row)
    return out


def ffd_per_update_rows(lens: np.ndarray, pack_len: int) -> np.ndarray:
    return _in_groups(lens, pack_len, B, first_fit_decreasing_rows)


def _in_groups(lens: np.ndarray, pack_len: int, group: int, packer: Packer) -> np.ndarray:
    out, base = [], 0
    for s in range(0, lens.size, group):
        rows = packer(lens[s : s + group], pack_len)
        out.append(rows + base)
        base += int(rows.max()) + 1
    return np.concatenate(out)


PEERS: dict[str, Packer] = {
    "PaddleNLP zero padding (arrival order)": next_fit_rows,
    "PaddleNLP greedy_intokens (500-sample buffers)": worst_fit_buffers_rows,
    "TRL best-fit decreasing (whole dataset)": best_fit_decreasing_all_rows,
    "axolotl multipack FFD (groups of 100k)": ffd_groups_rows,
    "torchtune in-order packing": next_fit_rows,
    "per-update FFD (each fixed update alone)": ffd_per_update_rows,
}


def next_fit(lens: np.ndarray, pack_len: int) -> int:
    """Rows of next-fit in arrival order (for benchmarks/device_time.py)."""
    return int(next_fit_rows(lens, pack_len).max()) + 1


def worst_fit_buffers(lens: np.ndarray, pack_len: int) -> int:
    """Rows of PaddleNLP's greedy_intokens (for benchmarks/device_time.py)."""
    return int(worst_fit_buffers_rows(lens, pack_len).max()) + 1


def first_fit_decreasing(lens: np.ndarray, pack_len: int) -> int:
    """Rows of first-fit decreasing (for benchmarks/device_time.py)."""
    return int(first_fit_decreasing_rows(lens, pack_len).max()) + 1


def short_only(lens: np.ndarray, row_of: np.ndarray) -> float:
    """The share of samples in rows where no sample reaches the median length."""
    median = np.median(lens)
    longest = np.zeros(int(row_of.max()) + 1, dtype=np.int64)
    np.maximum.at(longest, row_of, lens)
    return float((longest[row_of] < median).mean())


def update_spread(lens: np.ndarray, updates: list[np.ndarray], batch: int) -> float:
    """The spread of the updates' mean lengths over a random draw's: 1 for the fixed batch."""
    means = np.array([lens[u].mean() for u in updates])
    return float(means.std() / (lens.std() / np.sqrt(batch))) if lens.std() else 1.0


def rows_into_updates(row_of: np.ndarray, batch: int, seed: int = 0) -> list[np.ndarray]:
    """A dataset packer's rows shuffled and cut into the fixed batch's update count, at every
    k / U of the samples, whole rows, as dynbatch cuts its rows."""
    n_rows = int(row_of.max()) + 1
    rank = np.random.default_rng(seed).permutation(n_rows)
    by = np.argsort(rank[row_of], kind="stable")  # samples row after shuffled row
    sizes = np.bincount(rank[row_of], minlength=n_rows)
    ends = np.cumsum(sizes)
    u = -(-row_of.size // batch)
    cuts = np.unique(
        ends[np.minimum(np.searchsorted(ends, np.arange(1, u + 1) * row_of.size / u), n_rows - 1)]
    )
    return np.split(by, cuts[:-1])


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


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def plan_rows(plan: object, n: int) -> np.ndarray:
    """Each sample's row in a dynbatch PackPlan."""
    rows = plan.rows  # type: ignore[attr-defined]
    row_of = np.zeros(n, dtype=np.int64)
    row_of[rows.indices] = np.repeat(np.arange(len(rows)), np.diff(rows.offsets))
    return row_of


def corpus_rows(name: str, lens: np.ndarray, pack_len: int, batch: int = B) -> list[list[str]]:
    cut = np.minimum(lens, pack_len)
    tokens = int(cut.sum())
    fixed_updates = -(-lens.size // batch)
    order = np.random.default_rng([0, 0]).permutation(lens.size)
    out = []
    for window in (None, 12 * batch, 100 * batch):
        if window is not None and window >= lens.size:
            continue
        t, plan = timed(
            lambda w=window: plan_packs(cut, pack_len, batch_size=batch, window=w)  # type: ignore[misc]
        )
        label = "dynbatch plan_packs" + (
            " (default: the epoch)" if window is None else f", window {window // batch}·B"
        )
        eff = plan.efficiency  # type: ignore[attr-defined]
        row_of = plan_rows(plan, lens.size)
        mix = short_only(cut, row_of)
        spread = update_spread(cut, rows_into_updates(row_of, batch), batch)
        n_up = str(plan.num_updates)  # type: ignore[attr-defined]
        out.append(
            [name, label, f"{eff:.4f}", f"{mix:.3f}", f"{spread:.2f}", n_up, f"{t * 1000:.0f} ms"]
        )
    for peer, packer in PEERS.items():
        t, row_of = timed(lambda p=packer: p(cut[order], pack_len))  # type: ignore[misc]
        rows = int(row_of.max()) + 1  # type: ignore[attr-defined]
        mix = short_only(cut[order], row_of)  # type: ignore[arg-type]
        alone = peer.startswith("per-update")  # its updates: the fixed batch's
        groups = (
            np.split(np.arange(lens.size), np.arange(batch, lens.size, batch))
            if alone
            else rows_into_updates(row_of, batch)  # type: ignore[arg-type]
        )
        spread = update_spread(cut[order], groups, batch)
        updates = str(fixed_updates) if alone else "-"
        out.append(
            [
                name,
                peer,
                f"{tokens / (rows * pack_len):.4f}",
                f"{mix:.3f}",
                f"{spread:.2f}",
                updates,
                f"{t * 1000:.0f} ms",
            ]
        )
    return out


def generated(seed: int = 0) -> list[tuple[str, np.ndarray, int, int]]:
    """Corpora of other shapes: (name, lengths, pack_len, B)."""
    rng = np.random.default_rng(seed)
    n, p = 20_000, 512
    alike = rng.choice([1109, 1851], n) + rng.integers(-30, 31, n)
    return [
        (
            "short-heavy (exponential, mean 24) @512",
            np.ceil(rng.exponential(24, n)).astype(int),
            p,
            B,
        ),
        ("uniform 1..512 @512", rng.integers(1, p + 1, n), p, B),
        (
            "bimodal (1..64 and 256..512) @512",
            np.where(rng.random(n) < 0.5, rng.integers(1, 65, n), rng.integers(256, p + 1, n)),
            p,
            B,
        ),
        ("long tail up to pack_len (lognormal) @512", np.ceil(rng.lognormal(4.5, 1.2, n)), p, B),
        (
            "40 % exactly pack_len/2+1 @512",
            np.where(rng.random(n) < 0.4, p // 2 + 1, rng.integers(1, p // 2, n)),
            p,
            B,
        ),
        ("alike lengths (1109±30, 1851±30) @4096", alike, 4096, B),
        ("three lengths (15, 16, 17) @128", rng.choice([15, 16, 17], n), 128, B),
        ("tiny (40 samples, under one window) @512", rng.integers(1, p + 1, 40), p, B),
        ("ChnSentiCorp-like, B = 1 @512", np.ceil(rng.lognormal(4.6, 0.8, n)), p, 1),
        ("ChnSentiCorp-like, B = 4096 @512", np.ceil(rng.lognormal(4.6, 0.8, n)), p, 4096),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--million", action="store_true", help="also time 1M samples")
    args = parser.parse_args()
    chn = chnsenticorp_lengths()
    corpora = [
        (f"ChnSentiCorp ({chn.size}) @512", chn, 512, B),
        (f"SFT pairs ({chn.size}) @128", sft_lengths(128), 128, B),
        (f"SFT pairs ({chn.size}) @512", sft_lengths(512), 512, B),
        ("long tail (20k) @4096", long_tail(), 4096, B),
    ]
    head = ["corpus", "plan", "efficiency", "short-only", "update spread", "updates", "planning"]
    rows: list[list[str]] = []
    for name, lens, pack_len, batch in corpora:
        rows += corpus_rows(name, lens, pack_len, batch)
    print(f"Packing efficiency (real tokens / rows x pack_len), B = {B}, seed 0")
    print_table(head, rows)
    rows = []
    for name, lens, pack_len, batch in generated():
        table = corpus_rows(name, lens.astype(np.int64), pack_len, batch)
        ours, peers = table[0], table[-len(PEERS) :]
        best = max(peers, key=lambda r: float(r[2]))
        bfd = next(r for r in peers if r[1].startswith("TRL"))
        rows.append(
            [
                name,
                ours[2],
                best[2],
                best[1],
                ours[3],
                bfd[3],
                "yes" if ours[2] >= best[2] else "NO",
            ]
        )
    print("\nGenerated corpora (seed 0): dynbatch (default) against the best peer on each")
    print_table(
        [
            "corpus",
            "dynbatch",
            "best peer",
            "which",
            "short-only dynbatch",
            "short-only BFD",
            ">= best",
        ],
        rows,
    )
    if args.million:
        rng = np.random.default_rng(1)
        big = np.concatenate([rng.choice(chn, 1_000_000 - 20_000), long_tail(20_000, 512)])
        walls, cpus, peer_walls = [], [], []
        for _ in range(3):
            cpu = time.process_time()
            wall, plan = timed(lambda: plan_packs(big, 512, batch_size=B))
            walls.append(wall)
            cpus.append(time.process_time() - cpu)
            peer_walls.append(timed(lambda: best_fit_decreasing_all_rows(big, 512))[0])
        print(
            f"\nplan_packs on 1,000,000 samples (ChnSentiCorp lengths resampled) @512: "
            f"best of 3 {min(walls):.2f} s wall, {min(cpus):.2f} s CPU (the two differ on a "
            f"busy machine), {min(walls) / min(peer_walls):.2f}x the TRL best-fit decreasing "
            f"above ({min(peer_walls):.2f} s, timed in turn); efficiency "
            f"{plan.efficiency:.4f}, {plan.num_updates} updates"  # type: ignore[attr-defined]
        )


if __name__ == "__main__":
    main()
