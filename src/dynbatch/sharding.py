"""Share a global plan among data-parallel ranks: pure numpy, no communication.

NOTE [ equal steps without dropping or repeating ]
    Every rank computes the same global plan from ``(seed, epoch)`` and takes
    its share, so no rank ever needs to talk to another about data. The share
    must be the same number of batches on every rank: a rank with one batch
    more waits in an all-reduce that never comes (with gloo: "Connection reset
    by peer"). Instead of dropping batches, repeating samples or adding dummy
    batches, the planner's batches are *split*: the batch with the most samples
    is cut into two halves of alternating lengths (both fit, as the cost grows
    with ``n``) until the count divides ``num_replicas``. Only when every batch
    is a single sample (fewer samples than ranks, or all oversize) can the count
    not be evened out; then the cheapest batches are repeated and flagged in
    ``is_padding`` so the loss can give them weight 0.

NOTE [ balanced steps ]
    A step lasts as long as its slowest rank. Batches are grouped into steps of
    ``num_replicas`` by sorting them by cost, so the batches of one step cost
    about the same; the steps are then shuffled (random orders) or kept in plan
    order (``keep_order``, for the sorted and dataset orders, whose neighbours
    already cost about the same).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ._checks import check_bool, check_int, check_lengths
from .cost import CostLike, resolve_cost
from .planning import padded_lengths

__all__ = ["ShardedPlan", "shard_plan"]


@dataclass(frozen=True)
class ShardedPlan:
    """Batches in step-major order: step ``s`` of rank ``r`` is ``batches[s * replicas + r]``."""

    batches: list[NDArray[Any]]
    is_padding: NDArray[Any]
    num_replicas: int

    @property
    def num_steps(self) -> int:
        return len(self.batches) // self.num_replicas

    def for_rank(self, rank: int) -> list[NDArray[Any]]:
        return self.batches[rank :: self.num_replicas]


def _split(batch: NDArray[Any], lengths: NDArray[Any]) -> tuple[NDArray[Any], NDArray[Any]]:
    """Two halves with alternating members by length: similar size, similar longest."""
    by_len = batch[np.argsort(lengths[batch], kind="stable")]
    return by_len[1::2], by_len[0::2]


def shard_plan(
    batches: Sequence[NDArray[Any]],
    lengths: Any,
    num_replicas: int,
    *,
    cost: CostLike = "quadratic",
    pad_to_multiple_of: int = 1,
    seed: int = 0,
    epoch: int = 0,
    keep_order: bool = False,
    drop_last: bool = False,
) -> ShardedPlan:
    """Arrange a plan into steps of ``num_replicas`` batches of similar cost.

    Args:
        batches: the global plan (from :func:`~dynbatch.plan_batches`).
        lengths: the lengths the plan was made from.
        num_replicas: number of data-parallel ranks.
        keep_order: group consecutive batches into steps and keep the plan's
            order, instead of grouping by cost and shuffling the steps.
        drop_last: drop the ``len(batches) % num_replicas`` batches with the
            fewest samples instead of splitting batches to even the count.

    See NOTE [ equal steps without dropping or repeating ] and NOTE [ balanced steps ].

    Three batches on two ranks: the largest is split, none is dropped.

    >>> plan = [np.array([0, 1, 2, 3]), np.array([4]), np.array([5])]
    >>> sp = shard_plan(plan, [1, 2, 3, 4, 5, 6], 2, keep_order=True)
    >>> [b.tolist() for b in sp.for_rank(0)], [b.tolist() for b in sp.for_rank(1)]
    ([[1, 3], [4]], [[0, 2], [5]])
    """
    lens = check_lengths(lengths)
    replicas = check_int("num_replicas", num_replicas, minimum=1)
    fn = resolve_cost(cost)
    pad = check_int("pad_to_multiple_of", pad_to_multiple_of, minimum=1)
    keep_order = check_bool("keep_order", keep_order)
    drop_last = check_bool("drop_last", drop_last)
    plan = [np.asarray(b, dtype=np.int64) for b in batches]
    padding = [False] * len(plan)
    extra = -len(plan) % replicas
    if extra and drop_last:
        drop = set(
            np.argsort([b.size for b in plan], kind="stable")[: len(plan) % replicas].tolist()
        )
        plan = [b for i, b in enumerate(plan) if i not in drop]
        padding = [False] * len(plan)
    elif extra:
        for _ in range(extra):
            i = max(range(len(plan)), key=lambda j: plan[j].size) if plan else -1
            if i < 0 or plan[i].size < 2:
                break
            first, second = _split(plan[i], lens)
            plan[i : i + 1] = [first, second]
            padding.insert(i, False)
        while len(plan) % replicas:  # only single-sample batches are left: repeat, flagged
            cheapest = min(range(len(padding)), key=lambda j: (padding[j], lens[plan[j]].max()))
            plan.append(plan[cheapest])
            padding.append(True)
    if not plan:
        return ShardedPlan([], np.zeros(0, dtype=bool), replicas)
    if keep_order:
        order = np.arange(len(plan))
    else:
        sizes = np.array([b.size for b in plan])
        longest = padded_lengths(np.array([lens[b].max() for b in plan]), pad)
        by_cost = np.argsort(np.asarray(fn(sizes, longest), dtype=np.float64), kind="stable")
        steps = by_cost.reshape(-1, replicas)
        rng = np.random.default_rng([seed, epoch, replicas])
        order = steps[rng.permutation(len(steps))].reshape(-1)
    return ShardedPlan([plan[i] for i in order], np.array(padding)[order], replicas)
