"""Per-step load balance across ranks, in compute: a step waits for its slowest rank.

    python benchmarks/load_balance.py

A data-parallel step lasts as long as its slowest rank's compute, which grows with the
padded tokens n*L (below L~450 a transformer's work is dominated by n*L terms), not with
the memory cost n*L^2 that the budget limits. For each world size: the sum over steps of
the slowest rank's padded tokens over the sum of the mean (1.000 = no rank ever waits),
summed over an epoch. dynbatch's default (steps grouped by padded tokens, heaviest
batches split while it helps) against grouping the same plan by its n*L^2 cost (what
dynbatch did before) and round-robin sharding (batch i to rank i % R, the count evened
out by repeating batches as samplers commonly do).
"""

from __future__ import annotations

import numpy as np
from _common import BUDGET, chnsenticorp_lengths, print_table

from dynbatch import PlanOptions, plan_batches, plan_epoch, shard_plan
from dynbatch.plan.sharding import step_imbalance


def padded_tokens(lens: np.ndarray, batches) -> np.ndarray:  # type: ignore[no-untyped-def]
    return np.array([b.size * int(lens[b].max()) for b in batches], dtype=np.float64)


def main() -> None:
    lens = chnsenticorp_lengths()
    rows = []
    for order in ("bucket", "shuffle"):
        options = PlanOptions(max_cost=BUDGET, order=order)
        plan = plan_batches(lens, options=options)
        for replicas in (2, 4, 8):
            ours = plan_epoch(lens, options, 0, replicas)
            by_cost = shard_plan(  # grouped by n*L^2, no splitting: dynbatch 0.1
                plan, lens, replicas, options=options.replace(balance="cost"), tolerance=np.inf
            )
            robin = [*plan, *plan[: -len(plan) % replicas]]
            work = padded_tokens(lens, ours.plan)
            steps = work.reshape(-1, replicas)
            rows.append(
                [
                    order,
                    replicas,
                    len(plan),
                    len(ours.plan),
                    f"{step_imbalance(work, replicas):.3f}",
                    f"{float((steps.max(1) / steps.mean(1)).max()):.2f}",
                    f"{step_imbalance(padded_tokens(lens, by_cost.plan), replicas):.3f}",
                    f"{step_imbalance(padded_tokens(lens, robin), replicas):.3f}",
                    int(ours.is_padding.sum()),
                ]
            )
    print(
        f"ChnSentiCorp ({lens.size} reviews), budget n*L^2 <= {BUDGET:g}, no cap; "
        "balance measured in padded tokens n*L\n"
    )
    print_table(
        [
            "order",
            "ranks",
            "planned batches",
            "batches after balancing",
            "dynbatch max/mean",
            "dynbatch worst step",
            "grouped by n*L^2",
            "round-robin",
            "repeats",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
