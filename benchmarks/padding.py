"""Padding, batch counts and cost swings on ChnSentiCorp at one budget, every way side by side.

python benchmarks/padding.py
"""

from __future__ import annotations

import numpy as np
from _common import BUDGET, chnsenticorp_lengths, print_table, sampler_helper_batches, study_batches

from dynbatch import plan_batches, plan_stats
from dynbatch.plan.planning import ORDERS
from dynbatch.plan.stats import fixed_batches, lower_bound_batches


def repeated(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    """Fraction of the batches of ``b`` that are also batches of ``a``."""
    first = {tuple(sorted(np.asarray(x).tolist())) for x in a}
    return sum(tuple(sorted(np.asarray(x).tolist())) in first for x in b) / len(b)


def length_order_corr(lengths: np.ndarray, plan: list[np.ndarray]) -> float:
    longest = [int(lengths[np.asarray(b)].max()) for b in plan]
    return float(np.corrcoef(np.arange(len(longest)), longest)[0, 1])


def main() -> None:
    lens = chnsenticorp_lengths()
    plans: dict[str, tuple[list, list | None]] = {
        "fixed 20, shuffled": (fixed_batches(lens.size, 20), fixed_batches(lens.size, 20, seed=1)),
        "study's code (controller 5000)": (study_batches(lens), study_batches(lens, seed=1)),
    }
    helper = sampler_helper_batches(lens, BUDGET)
    if helper is not None:
        plans["SamplerHelper, sort buffer 2000"] = (
            helper,
            sampler_helper_batches(lens, BUDGET, seed=1),
        )
    for order in ORDERS:
        plans[f"dynbatch {order}"] = (
            plan_batches(lens, BUDGET, order=order),
            plan_batches(lens, BUDGET, order=order, epoch=1),
        )
    rows = []
    for name, (plan, next_epoch) in plans.items():
        s = plan_stats(lens, plan, max_cost=BUDGET)
        rows.append(
            [
                name,
                s.batches,
                f"{s.padding_efficiency:.3f}",
                f"{s.batch_size_min}/{s.batch_size_median:g}/{s.batch_size_max}",
                f"{s.cost_max / BUDGET:.2f}",
                f"{s.cost_median / BUDGET:.2f}",
                f"{s.cost_cv:.3f}",
                f"{repeated(plan, next_epoch):.2f}" if next_epoch is not None else "-",
                f"{length_order_corr(lens, plan):+.2f}",
            ]
        )
    print(
        f"ChnSentiCorp: {lens.size} reviews, chars + 2 cut at 512; quadratic budget "
        f"n*L^2 <= {BUDGET:g} (20*512^2/4); "
        f"lower bound {lower_bound_batches(lens, BUDGET)} batches\n"
    )
    print_table(
        [
            "plan",
            "batches",
            "padding eff",
            "batch size min/med/max",
            "max cost / budget",
            "median cost / budget",
            "cost CV",
            "repeated next epoch",
            "order-length corr",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
