"""Per-step load balance across ranks: a step waits for its slowest rank.

    python benchmarks/load_balance.py

For each world size: sum over steps of the most expensive rank's batch cost, over the
sum of the mean batch cost per step (1.00 = no rank ever waits). dynbatch's sharding
(steps grouped by cost) against round-robin sharding of the same plan (batch i to rank
i % R, the count evened out by repeating batches as samplers commonly do).
"""

from __future__ import annotations

import numpy as np
from _common import BUDGET, chnsenticorp_lengths, print_table

from dynbatch import plan_batches, shard_plan
from dynbatch.stats import batch_table


def imbalance(costs: np.ndarray, replicas: int) -> tuple[float, float]:
    """(sum of per-step max / sum of per-step mean, worst single step's max / mean)."""
    steps = costs.reshape(-1, replicas)
    ratio = steps.max(1) / steps.mean(1)
    return float(steps.max(1).sum() / steps.mean(1).sum()), float(ratio.max())


def main() -> None:
    lens = chnsenticorp_lengths()
    rows = []
    for order in ("bucket", "shuffle"):
        plan = plan_batches(lens, BUDGET, order=order)
        for replicas in (2, 4, 8):
            sharded = shard_plan(plan, lens, replicas)
            ours = batch_table(lens, sharded.batches)["cost"]
            padded = plan + plan[: -len(plan) % replicas]  # round robin needs equal counts too
            robin = batch_table(lens, padded)["cost"]
            o_sum, o_worst = imbalance(ours, replicas)
            r_sum, r_worst = imbalance(robin, replicas)
            rows.append(
                [
                    order,
                    replicas,
                    len(plan),
                    sharded.num_steps,
                    f"{o_sum:.3f}",
                    f"{o_worst:.2f}",
                    f"{r_sum:.3f}",
                    f"{r_worst:.2f}",
                    int(sharded.is_padding.sum()),
                ]
            )
    print(f"ChnSentiCorp, budget n*L^2 <= {BUDGET:g}; cost of a batch = n * L^2\n")
    print_table(
        [
            "order",
            "ranks",
            "batches",
            "steps",
            "dynbatch max/mean",
            "dynbatch worst step",
            "round-robin max/mean",
            "round-robin worst step",
            "dynbatch repeats",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
