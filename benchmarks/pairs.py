"""Padding on each side and planning time for (source, target) pairs, against the peers' rules.

    python benchmarks/pairs.py [--size 10000000] [--repeat 3]

Corpora: ChnSentiCorp reviews -> pinyin (the source a review's characters, cut at 510, the
target its pinyin letters, approximated from a fixed table of syllable lengths as
tests/strategies.py does; both plus 2 for the ends), and synthetic pairs whose log lengths
are normal with correlation 0.5 and 0.9 (8,000 pairs, a small corpus, and 200,000).

"repeated next epoch" is the fraction of the next epoch's batches (another seed) that are
batches of this one: a rule that sorts makes the same batches every epoch.

Every planner makes the same number of batches as dynbatch's ``like_fixed(pairs, 32)``
(its micro-batches, at most 8 pairs each): each peer's budget is found by bisection on its
batch count, so only how the pairs are grouped differs. The rows, each reimplemented here
from its rule (no peer's code is run):

* fixed 32: the shuffled corpus cut into batches of 32 (the reference a user starts from;
  its own count);
* one key: dynbatch's ``like_fixed`` on one length a pair, source + target;
* fairseq: ``batch_by_size`` on ``LanguagePairDataset``'s order (sorted by source, then
  target), a batch full when ``n * max(max(src), max(tgt))`` passes ``max_tokens``, cut to
  multiples of 8 (``--required-batch-size-multiple``'s default), batches shuffled;
* PaddleNLP: ``TransformerBatchSampler`` of its machine-translation example (pools of
  200,000 shuffled pairs sorted by ``max(src, tgt)``, ascending and descending in turn; token
  batches ``n * max_len <= batch_size`` kept to multiples of 8; batches shuffled);
* 2-D buckets: in the manner of lhotse's ``DynamicBucketingSampler`` with 2-D bins (NeMo's
  OOMptimizer sizes each): 30 source buckets of equal counts, each cut into 4 target buckets
  of equal counts; each bucket a fixed batch size, the most pairs that fit the budget at its
  longest source and target under the pair cost; pairs shuffled within a bucket.

Planning time: ``--size`` synthetic pairs (correlation 0.7); dynbatch's ``plan_batches``
(best of ``--repeat``) with ``like_fixed``'s options and with its budget alone (no cap on a
batch's pairs: batches of hundreds), its whole epoch
(``plan_epoch``: sharding and mixed updates too), and each peer's rule once at its budget
found on the 200,000 pairs of that shape. The peers' rules are pure-Python loops here
(fairseq's own is Cython), so their times say what this rule costs in Python, not the
libraries' own speed.
"""

from __future__ import annotations

import argparse
import csv
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from _common import SHARED, best_of, print_table

from dynbatch import like_fixed, plan_batches, plan_epoch, plan_stats
from dynbatch.plan.costs import PairCost
from dynbatch.plan.stats import PairPlanStats

BATCH = 32
MULTIPLE = 8  # fairseq's --required-batch-size-multiple, PaddleNLP's bsz_multi
SYLLABLES = np.array([0.02, 0.22, 0.35, 0.28, 0.11, 0.02]).cumsum()  # pinyin letters 1..6


def pinyin_letters(text: str) -> int:
    """Pinyin letters of ``text``, approximated (as tests/strategies.py does)."""
    letters = 0
    for char in text:
        code = ord(char)
        if 0x4E00 <= code <= 0x9FFF:
            u = ((code * 2654435761) & 0xFFFFFFFF) / 2**32
            letters += 1 + int(np.searchsorted(SYLLABLES, u, side="right"))
        else:
            letters += 1
    return letters


def chnsenticorp_pairs() -> np.ndarray | None:
    path = SHARED / "chnsenticorp_htl_all.csv"
    if not path.exists():
        print(f"(ChnSentiCorp left out: {path} not found)")
        return None
    with open(path, encoding="utf-8", newline="") as fh:
        reviews = [row["review"][:510] for row in csv.DictReader(fh)]
    return np.array([[len(r) + 2, pinyin_letters(r) + 2] for r in reviews], dtype=np.int64)


def lognormal_pairs(n: int, rho: float, seed: int = 0) -> np.ndarray:
    """As tests/strategies.py: log lengths normal, correlation ``rho``, medians ~20 and ~22."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((n, 2))
    z[:, 1] = rho * z[:, 0] + np.sqrt(1 - rho**2) * z[:, 1]
    return np.clip(np.ceil(np.exp(np.array([3.0, 3.1]) + 0.7 * z)), 1, 1024).astype(np.int64)


# -- the peers' rules -----------------------------------------------------------------------------
def greedy_tokens(order: np.ndarray, tokens: np.ndarray, max_tokens: float) -> list[list[int]]:
    """fairseq's ``batch_by_size`` and PaddleNLP's ``TokenBatchCreator``: a batch is full when
    one more sample would make ``n * longest`` pass ``max_tokens``; it keeps a multiple of 8 and
    hands the rest to the next batch."""
    batches: list[list[int]] = []
    batch: list[int] = []
    lens: list[int] = []
    longest = 0
    for idx, t in zip(order.tolist(), tokens[order].tolist(), strict=True):
        longest = max(longest, t)
        if batch and (len(batch) + 1) * longest > max_tokens:
            keep = max(MULTIPLE * (len(batch) // MULTIPLE), len(batch) % MULTIPLE)
            batches.append(batch[:keep])
            batch, lens = batch[keep:], lens[keep:]
            longest = max([*lens, t])
        batch.append(idx)
        lens.append(t)
    if batch:
        batches.append(batch)
    return batches


def fairseq(pairs: np.ndarray, max_tokens: float, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(pairs))
    order = order[np.argsort(pairs[order, 1], kind="stable")]  # by target, then by source
    order = order[np.argsort(pairs[order, 0], kind="stable")]
    batches = greedy_tokens(order, pairs.max(axis=1), max_tokens)
    return [batches[i] for i in rng.permutation(len(batches))]


def paddlenlp(
    pairs: np.ndarray, batch_size: float, seed: int = 0, pool: int = 200_000
) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(pairs))
    longest = pairs.max(axis=1)
    pools = []
    for k, start in enumerate(range(0, len(order), pool)):  # ascending, descending in turn
        part = order[start : start + pool]
        part = part[np.argsort(longest[part], kind="stable")]
        pools.append(part[::-1] if k % 2 else part)
    batches = greedy_tokens(np.concatenate(pools), longest, batch_size)
    return [batches[i] for i in rng.permutation(len(batches))]


def buckets_2d(
    pairs: np.ndarray, budget: float, seed: int = 0, sources: int = 30, targets: int = 4
) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    cost = PairCost()
    by_source = np.argsort(pairs[:, 0], kind="stable")
    batches = []
    for row in np.array_split(by_source, sources):
        for cell in np.array_split(row[np.argsort(pairs[row, 1], kind="stable")], targets):
            if not cell.size:
                continue
            corner = pairs[cell].max(axis=0)
            size = max(1, int(budget // float(cost(1, *corner))))  # a fixed size per bucket
            cell = rng.permutation(cell)
            batches += [cell[i : i + size] for i in range(0, cell.size, size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def matched(make: Callable[[float], list[Any]], count: int, low: float, high: float) -> Any:
    """``make(budget)`` at the budget whose batch count is nearest ``count`` (bisection), and
    that budget."""
    best, budget = make(high), high
    for _ in range(40):
        mid = (low * high) ** 0.5
        batches = make(mid)
        if abs(len(batches) - count) < abs(len(best) - count):
            best, budget = batches, mid
        if len(batches) > count:
            low = mid
        else:
            high = mid
        if abs(len(best) - count) <= max(1, count // 200):
            break
    return best, budget


# -- the comparison -------------------------------------------------------------------------------
def sides(pairs: np.ndarray, batches: Any) -> tuple[float, float, int]:
    """Each side's padding efficiency and the padded tokens of both."""
    stats = plan_stats(pairs, batches, cost="linear")
    assert isinstance(stats, PairPlanStats)
    return stats.source_padding_efficiency, stats.target_padding_efficiency, stats.padded_tokens


def repeated(first: Any, second: Any) -> float:
    """The fraction of ``second``'s batches that are batches of ``first`` too."""
    seen = {frozenset(np.asarray(b).tolist()) for b in first}
    return sum(frozenset(np.asarray(b).tolist()) in seen for b in second) / len(second)


def compare(name: str, pairs: np.ndarray) -> dict[str, float]:
    """Print each planner's padding on each side; returns the peers' budgets."""
    options = like_fixed(pairs, BATCH)
    count = len(plan_epoch(pairs, options, 0).plan)
    key = pairs.sum(axis=1)
    key_options = like_fixed(key, BATCH)
    top = float(pairs.max()) * len(pairs)

    def fixed(seed: int) -> list[np.ndarray]:
        perm = np.random.default_rng(seed).permutation(len(pairs))
        return [perm[i : i + BATCH] for i in range(0, len(pairs), BATCH)]

    planners: dict[str, Callable[[int], Any]] = {
        "fixed 32": fixed,
        "dynbatch like_fixed(pairs, 32)": lambda e: list(plan_epoch(pairs, options, e).plan),
        "one key: source + target": lambda e: list(plan_epoch(key, key_options, e).plan),
    }
    peers = {
        "fairseq batch_by_size": (lambda b, e=0: fairseq(pairs, b, e), top),
        "PaddleNLP TransformerBatchSampler": (lambda b, e=0: paddlenlp(pairs, b, e), top),
        "2-D buckets (lhotse-like)": (
            lambda b, e=0: buckets_2d(pairs, b, e),
            float(PairCost()(len(pairs), *pairs.max(axis=0))),
        ),
    }
    budgets: dict[str, float] = {}
    for peer, (make, high) in peers.items():
        _, budgets[peer] = matched(make, count, 1.0, high)
        planners[peer] = lambda e, make=make, b=budgets[peer]: make(b, e)
    reference = sides(pairs, planners["dynbatch like_fixed(pairs, 32)"](0))[2]
    table = []
    for label, plan in planners.items():
        batches = plan(0)
        source, target, padded = sides(pairs, batches)
        table.append(
            [
                label,
                f"{len(batches):,}",
                f"{source:.3f}",
                f"{target:.3f}",
                f"{padded / reference:.2f}x",
                f"{repeated(batches, plan(1)):.2f}",
            ]
        )
    rho = np.corrcoef(np.log(pairs[:, 0]), np.log(pairs[:, 1]))[0, 1]
    print(f"\n{name}: {len(pairs):,} pairs, log-length correlation {rho:.2f}\n")
    print_table(
        [
            "planner",
            "batches",
            "source padding eff.",
            "target padding eff.",
            "padded vs dynbatch",
            "repeated next epoch",
        ],
        table,
    )
    return budgets


def timing(size: int, repeat: int, budgets: dict[str, float]) -> None:
    pairs = lognormal_pairs(size, 0.7, seed=3)
    options = like_fixed(pairs, BATCH)
    rows = []
    plan_s, plan = best_of(lambda: plan_batches(pairs, options=options), repeat)
    rows.append(["dynbatch plan_batches (like_fixed's options)", plan_s, len(plan)])
    budget = options.max_cost  # the fixed batch's worst, with no cap on a batch's pairs
    plan_s2, plan2 = best_of(lambda: plan_batches(pairs, budget), repeat)
    rows.append(["dynbatch plan_batches (a budget alone)", plan_s2, len(plan2)])
    epoch_s, epoch = best_of(lambda: plan_epoch(pairs, options, 0), 1)
    rows.append(["dynbatch plan_epoch (sharding, mixed updates)", epoch_s, epoch.num_steps])
    key = pairs.sum(axis=1)
    key_options = like_fixed(key, BATCH)
    key_s, key_plan = best_of(lambda: plan_batches(key, options=key_options), repeat)
    rows.append(["dynbatch plan_batches, one key (1-D)", key_s, len(key_plan)])
    peers = {
        "fairseq batch_by_size": lambda: fairseq(pairs, budgets["fairseq batch_by_size"]),
        "PaddleNLP TransformerBatchSampler": lambda: paddlenlp(
            pairs, budgets["PaddleNLP TransformerBatchSampler"]
        ),
        "2-D buckets (lhotse-like)": lambda: buckets_2d(
            pairs, budgets["2-D buckets (lhotse-like)"]
        ),
    }
    for peer, run in peers.items():
        start = time.perf_counter()
        batches = run()
        rows.append([f"{peer} (Python)", time.perf_counter() - start, len(batches)])
    print(f"\nplanning time, {size:,} pairs (log-length correlation 0.7):\n")
    print_table(
        ["planner", "seconds", "batches", "vs dynbatch plan_batches"],
        [[r[0], f"{r[1]:.2f} s", f"{r[2]:,}", f"{r[1] / plan_s:.1f}x"] for r in rows],
    )


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--size", type=int, default=10_000_000, help="pairs to time (0: none)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    real = chnsenticorp_pairs()
    if real is not None:
        compare("ChnSentiCorp reviews -> pinyin (approximated)", real)
    for rho in (0.5, 0.9):
        compare(f"synthetic pairs, correlation {rho}", lognormal_pairs(8000, rho, seed=1))
    budgets = compare("synthetic pairs, correlation 0.7", lognormal_pairs(200_000, 0.7, seed=2))
    if args.size:  # a batch's budget does not depend on the corpus's size
        timing(args.size, args.repeat, budgets)


if __name__ == "__main__":
    main()
