"""Planning time at scale, and what a distributed sampler's epoch adds on top of planning.

    python benchmarks/planning_speed.py [--sizes 10000000 20000000] [--helper-size 1000000]

Two length distributions: uniform on 2..512 with a budget of 16*256^2 (millions of small
batches), and lengths drawn from ChnSentiCorp with the reference budget 20*512^2/4.
``plan_batches`` is timed alone; "sampler epoch" is rank 0 of 8 of a
DistributedDynamicBatchSampler planning, sharding and yielding a whole epoch as lists of
indices, as a DataLoader consumes it. PaddleNLP's SamplerHelper is timed at one size.

Packing (``--pack-size`` ChnSentiCorp lengths, rows of 512, the fixed batch of 32): the
packed plan alone (``plan_packs``: the fixed batch's updates, each packed into rows,
NOTE [ an update's rows ]), and packing at the step time (``choose_packing(...,
time_model=...)``, the samplers' planner on one rank; NOTE [ choosing packing per update ]) on
the H100 step-time table and on its fit, each with its time above ``plan_packs``; then a
sampler's epoch (rank 0 of 8) with ``pack_len`` and the fit.

Packing unusual corpora (``--pack-size`` samples each, ``--unusual-only`` for this table
alone): ``plan_packs`` (B = 32) on shapes unlike a corpus's (three lengths only, lengths of
every size up to rows of 10**9 tokens, two alike lengths, samples of 3 tokens in rows of 8),
its CPU time against the ChnSentiCorp lengths' in the same run (the machine may be busy: the
ratio is the number to read).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from _common import (
    BUDGET,
    SHARED,
    best_of,
    chnsenticorp_lengths,
    print_table,
    sampler_helper_batches,
)

from dynbatch import (
    DistributedDynamicBatchSampler,
    PlanOptions,
    StepTimeTable,
    choose_packing,
    like_fixed,
    plan_batches,
    plan_packs,
)

RANKS = 8


def epoch_timer(lens: np.ndarray, options: PlanOptions):  # type: ignore[no-untyped-def]
    """A function that runs one new epoch of rank 0: planned, sharded, yielded as lists."""
    sampler = DistributedDynamicBatchSampler(
        lengths=lens, options=options, num_replicas=RANKS, rank=0
    )
    epochs = iter(range(1, 1_000))

    def epoch() -> int:
        sampler.set_epoch(next(epochs))  # never planned before: nothing cached
        return sum(1 for _ in sampler)

    return epoch


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000_000, 20_000_000])
    parser.add_argument("--helper-size", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--pack-size", type=int, default=1_000_000, help="0: no packing rows")
    parser.add_argument("--time-table", default=str(SHARED / "h100_bert_base_step_times.json"))
    parser.add_argument("--skip-plan-batches", action="store_true", help="the packing rows only")
    parser.add_argument("--unusual-only", action="store_true", help="the unusual corpora only")
    args = parser.parse_args()
    if args.unusual_only:
        unusual(chnsenticorp_lengths(), args)
        return
    if args.skip_plan_batches:
        args.sizes, args.helper_size = [], 0
    corpus = chnsenticorp_lengths()
    rng = np.random.default_rng(0)
    shapes = {
        "uniform 2..512": (lambda n: rng.integers(2, 513, n), 16 * 256**2),
        "ChnSentiCorp": (lambda n: rng.choice(corpus, n), BUDGET),
    }
    rows = []
    for shape, (draw, budget) in shapes.items():
        for n in args.sizes:
            lens = draw(n)
            for order in ("bucket", "shuffle"):
                options = PlanOptions(max_cost=budget, order=order)
                plan_s, plan = best_of(
                    lambda x=lens, o=options: plan_batches(x, options=o), args.repeat
                )
                sampler_s, yielded = best_of(epoch_timer(lens, options), args.repeat)
                rows.append(
                    [
                        shape,
                        f"{n:,}",
                        order,
                        f"{plan_s:.2f} s",
                        f"{len(plan):,}",
                        f"{sampler_s:.2f} s",
                        f"{yielded:,}",
                        f"{sampler_s / plan_s:.2f}",
                    ]
                )
    print(
        f"best of {args.repeat}; {os.cpu_count()} cores; sampler epoch = a new epoch of rank 0 "
        f"of {RANKS}: planning, sharding and yielding every batch as a list\n"
    )
    print_table(
        [
            "lengths",
            "samples",
            "order",
            "plan_batches",
            "batches",
            "sampler epoch",
            "rank 0 batches",
            "epoch / plan",
        ],
        rows,
    )
    if args.pack_size:
        packing(np.random.default_rng(0).choice(corpus, args.pack_size), args)
        unusual(corpus, args)
    if args.helper_size:
        lens = rng.choice(corpus, args.helper_size)
        ours, plan = best_of(lambda: plan_batches(lens, BUDGET), args.repeat)
        helper_s, helper = best_of(lambda: sampler_helper_batches(lens, BUDGET), 1)
        if helper is not None:
            print(
                f"\n{args.helper_size:,} ChnSentiCorp lengths: dynbatch bucket {ours:.3f} s "
                f"({len(plan):,} batches); SamplerHelper (sort buffer 2000) {helper_s:.2f} s "
                f"({len(helper):,} batches), {helper_s / ours:.0f}x slower"
            )


def packing(lens: np.ndarray, args: argparse.Namespace) -> None:
    """The packing rows: plan_packs alone, packing at the step time, a sampler's epoch."""
    table = StepTimeTable.load(args.time_table)
    model = table.fit()
    pack_s, plan = best_of(lambda: plan_packs(lens, 512, batch_size=32), args.repeat)
    rows = [["plan_packs", f"{pack_s:.2f} s", "", f"{plan.num_updates:,}", ""]]
    for name, step in (("H100 table", table), ("its fit", model)):
        chosen_s, chosen = best_of(
            lambda s=step: choose_packing(lens, 512, batch_size=32, time_model=s, max_rows=32),
            args.repeat,
        )
        counts = ", ".join(f"{k} {v:,}" for k, v in chosen.counts.items())
        rows.append(
            [
                f"choose_packing, {name}",
                f"{chosen_s:.2f} s",
                f"+{chosen_s - pack_s:.2f} s",
                f"{chosen.num_updates:,}",
                counts,
            ]
        )
    options = like_fixed(lens, 32, num_replicas=RANKS, pack_len=512, time_model=model)
    sampler_s, yielded = best_of(epoch_timer(lens, options), args.repeat)
    rows.append(
        [f"sampler epoch, rank 0 of {RANKS}", f"{sampler_s:.2f} s", "", "", f"{yielded:,} steps"]
    )
    print(f"\n{lens.size:,} ChnSentiCorp lengths packed into rows of 512, fixed batch 32:\n")
    print_table(["packing", "time", "over plan_packs", "updates", "updates run"], rows)


def unusual_corpora(corpus: np.ndarray, n: int) -> list[tuple[str, np.ndarray, int]]:
    """(name, lengths, pack_len): the realistic corpus first, then the unusual ones."""
    rng = np.random.default_rng(0)

    def thirds(pack_len: int) -> np.ndarray:  # 1/3 in [0.3P, 0.5P), 2/3 in [1, 0.03P)
        mid = rng.integers(int(0.3 * pack_len), int(0.5 * pack_len), n // 3)
        return np.concatenate([mid, rng.integers(1, int(0.03 * pack_len), n - n // 3)])

    return [
        ("ChnSentiCorp lengths @512", rng.choice(corpus, n), 512),
        ("lengths 15, 16, 17 @128", rng.choice([15, 16, 17], n), 128),
        ("1/3 in [0.3P, 0.5P), 2/3 in [1, 0.03P) @131,072", thirds(131_072), 131_072),
        ("1/3 in [0.3P, 0.5P), 2/3 in [1, 0.03P) @10**6", thirds(10**6), 10**6),
        ("uniform 1..10**9 @10**9", rng.integers(1, 10**9 + 1, n), 10**9),
        ("uniform 1..10**6 @10**6", rng.integers(1, 10**6 + 1, n), 10**6),
        (
            "two alike lengths (1109, 1851 +-30) @4096",
            rng.choice([1109, 1851], n) + rng.integers(-30, 31, n),
            4096,
        ),
        ("all lengths 3 @8", np.full(n, 3), 8),
    ]


def unusual(corpus: np.ndarray, args: argparse.Namespace) -> None:
    """plan_packs' CPU time on unusual corpora against the realistic one's, in one run."""
    n = args.pack_size or 1_000_000
    rows, base = [], 0.0
    for name, lens, pack_len in unusual_corpora(corpus, n):
        cpu, wall = time.process_time(), time.perf_counter()
        plan = plan_packs(lens, pack_len, batch_size=32)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        base = base or cpu
        rows.append(
            [
                name,
                f"{cpu:.2f} s",
                f"{wall:.2f} s",
                f"{cpu / base:.2f}x",
                f"{len(plan.rows):,}",
                f"{plan.efficiency:.4f}",
            ]
        )
    print(f"\nplan_packs on {n:,} samples of unusual corpora, B = 32, one run each:\n")
    print_table(["lengths", "CPU", "wall", "CPU / ChnSentiCorp's", "rows", "efficiency"], rows)


if __name__ == "__main__":
    main()
