"""Planning time for 1M and 10M lengths drawn from ChnSentiCorp, against PaddleNLP's SamplerHelper.

python benchmarks/planning_speed.py [--sizes 1000000 10000000] [--helper-size 1000000]
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from _common import BUDGET, best_of, chnsenticorp_lengths, print_table, sampler_helper_batches

from dynbatch import plan_batches


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--helper-size", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    corpus = chnsenticorp_lengths()
    rng = np.random.default_rng(0)
    rows = []
    for n in args.sizes:
        lens = rng.choice(corpus, n)
        row = [f"{n:,}"]
        for order in ("bucket", "ascending", "shuffle"):
            seconds, plan = best_of(
                lambda o=order, x=lens: plan_batches(x, BUDGET, order=o), args.repeat
            )
            row.append(f"{seconds:.3f} s ({len(plan):,} batches)")
        if n == args.helper_size:
            helper_s, helper = best_of(lambda x=lens: sampler_helper_batches(x, BUDGET), 1)
            if helper is not None:
                bucket_s = float(row[1].split()[0])
                row.append(
                    f"{helper_s:.2f} s ({len(helper):,} batches), {helper_s / bucket_s:.0f}x slower"
                )
        rows.append(row + [""] * (5 - len(row)))
    print(
        f"planning time, best of {args.repeat}; {os.cpu_count()} cores; "
        f"budget n*L^2 <= {BUDGET:g}\n"
    )
    print_table(
        [
            "lengths",
            "dynbatch bucket",
            "dynbatch ascending",
            "dynbatch shuffle",
            "SamplerHelper (sort buffer 2000)",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
