"""The fewest batches any plan of some lengths can have, within a budget: numpy only.

:mod:`dynbatch.plan.stats` reports it beside a plan (``dynbatch stats``'s
``lower_bound_batches``), so that a plan's batch count can be read against the least any
plan can make.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from .costs import CostLike
from .lengths import check_plan_lengths
from .options import PlanOptions
from .planning import batch_capacity, padded_lengths

__all__ = ["lower_bound_batches"]


def lower_bound_batches(
    lengths: Any,
    max_cost: float,
    *,
    cost: CostLike = "quadratic",
    pad_to_multiple_of: int = 1,
    max_batch_size: int | None = None,
) -> int:
    """The fewest batches any plan within ``max_cost`` can have, for any nondecreasing cost.

    NOTE [ the fewest batches ]
        Sort the (padded) lengths longest first and fill batches in that order,
        each up to the capacity of its first, longest sample: ``cap(L)``, the
        most samples a batch of padded length ``L`` may hold (``cost(n, L) <=
        max_cost``, at most ``max_batch_size``). No plan has fewer batches, for
        any cost nondecreasing in ``n`` and in ``L`` (so ``cap`` is
        nonincreasing in ``L``), a per-batch constant (``MemoryCost``'s ``c``
        and floor) included. Proof: rank the samples longest first and let
        ``g_k`` be how many the first ``k`` greedy batches hold. Order any
        plan's batches by the rank ``r_j`` of their longest member. Claim:
        ``r_{k+1} <= g_k + 1``. For ``k = 0``, the longest sample leads its
        batch. If it holds up to ``k``, plan batch ``j <= k`` holds at most
        ``cap(L_{r_j}) <= cap(L of greedy batch j's first)``, as ``r_j`` is no
        earlier than that first sample and ``cap`` grows along the ranks; so
        the first ``k`` plan batches hold at most ``g_k`` samples, one of the
        ``g_k + 1`` longest is in a later batch, and that batch's longest
        ranks at most ``g_k + 1``. Hence while greedy has samples left after
        ``k`` batches, so does the plan: it has at least as many batches.
        The bound is met by the greedy packing itself, so it is the true
        minimum (``batch_size_multiple`` only lowers what plans can do, and
        is left out). A sample over budget even alone is counted as a batch
        of its own.

    The former bound, ``ceil(sum(cost(1, L_i)) / max_cost)``, held only for
    costs of the form ``n * f(L)``; a cost charged once per batch made it
    exceed every plan.

    NOTE [ the fewest batches of pairs ]
        Pairs have no order in which the greedy packing is the least, so their
        bound is one side's: a batch of pairs whose longest source is ``Ls``
        costs at least ``cost(n, Ls, t)``, ``t`` the shortest target of all
        (the cost never decreases in ``Lt``), so every plan of the pairs is a
        plan of the sources alone under ``cost(n, L, t)`` and has at least
        that side's fewest batches (the note above); the same for the targets
        under ``cost(n, s, L)``. The bound is the larger of the two: never
        above any plan, though below the fewest where the sides differ much.

    >>> lower_bound_batches([4, 4, 8], 16, cost="linear")
    2
    >>> lower_bound_batches([4, 4, 8], 30, cost=lambda n, L: 10 + n * L)
    2
    >>> lower_bound_batches([[4, 1], [4, 1], [8, 1]], 18, cost="linear")  # n*(Ls + Lt)
    2
    """
    lens = check_plan_lengths(lengths)
    options = PlanOptions(
        max_cost=max_cost,
        cost=cost,
        pad_to_multiple_of=pad_to_multiple_of,
        max_batch_size=max_batch_size,
    )
    plens = padded_lengths(lens, options.pad_to_multiple_of)
    if plens.ndim == 2:  # NOTE [ the fewest batches of pairs ]
        shortest = plens.min(axis=0)
        return max(
            _fewest(plens[:, side], options, lambda v, s=side: _other_side(v, s, shortest))
            for side in (0, 1)
        )
    return _fewest(plens, options, lambda values: values)


def _other_side(values: NDArray[Any], side: int, shortest: NDArray[Any]) -> NDArray[Any]:
    """Rows of (source, target) with ``values`` on ``side`` and the other side's shortest."""
    rows = np.empty((values.size, 2), dtype=np.int64)
    rows[:, side] = values
    rows[:, 1 - side] = shortest[1 - side]
    return rows


def _fewest(plens: NDArray[Any], options: PlanOptions, rows: Any) -> int:
    """The greedy packing's batches, longest first (NOTE [ the fewest batches ]); ``rows``
    turns the distinct lengths into what their capacities are priced at."""
    values, counts = np.unique(plens, return_counts=True)  # ascending: capacities descending
    caps = batch_capacity(rows(values), options, plens.size)
    batches = 0
    room = 0  # what the open batch, led by a longer sample, can still take
    for count, capacity in zip(counts[::-1].tolist(), caps[::-1].tolist(), strict=True):
        if capacity == 0:  # over budget alone: a batch each
            batches += count
            continue
        taken = min(room, count)
        room -= taken
        count -= taken
        if count:
            full, rest = divmod(count, capacity)
            batches += full + (rest > 0)
            room = capacity - rest if rest else 0
    return batches
