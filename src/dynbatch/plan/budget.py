"""What a plan of one length and a plan of (source, target) pairs share: the random draw,
the budget checks and the last steps; numpy only.

NOTE [ one budget check for both forms ]
    A sample over ``max_cost`` even alone, and a planned batch over it (a
    user's cost that is not nondecreasing), are met the same way whether a
    sample has one length or a (source, target) pair: the planner of each
    form (:mod:`dynbatch.plan.planning`, :mod:`dynbatch.plan.pairs`) hands
    its lengths, ``[N]`` or ``[N, 2]``, to these functions, which tell the
    two apart by the lengths' shape alone (``cost(n, L)`` or
    ``cost(n, Ls, Lt)``, "length 7" or "(source, target) lengths (5, 9)").
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._checks import InputError
from .lengths import reduce_batches, sample_tokens
from .options import PlanOptions
from .plans import Plan

__all__ = ["check_budget", "finish_plan", "plan_rng", "report_oversize"]


def plan_rng(opts: PlanOptions, epoch: int, draw: int) -> np.random.Generator:
    """The random numbers of ``epoch``'s plan; ``draw > 0`` draws them anew."""
    return np.random.default_rng([opts.seed, epoch] if draw == 0 else [opts.seed, epoch, draw])


def _cost(fn: Any, n: Any, longest: NDArray[Any], pairs: bool) -> Any:
    """``fn(n, L)``, or for pairs ``fn(n, Ls, Lt)`` (``longest``'s last axis the two sides)."""
    return fn(n, *longest.T) if pairs else fn(n, longest)


def _show(sample: NDArray[Any]) -> str:
    """One sample's lengths as a message shows them: ``7``, or ``(5, 9)`` for a pair."""
    return f"{sample}" if sample.ndim == 0 else f"({sample[0]}, {sample[1]})"


def _describe(sample: NDArray[Any]) -> str:
    """``length 7``, or ``(source, target) lengths (5, 9)`` for a pair."""
    what = "length" if sample.ndim == 0 else "(source, target) lengths"
    return f"{what} {_show(sample)}"


def report_oversize(
    fn: Any,
    lens: NDArray[Any],
    plens: NDArray[Any],
    too_big: NDArray[Any],
    max_cost: float,
    oversize: str,
    stacklevel: int,
) -> None:
    """Raise or warn for the samples over budget alone, as ``oversize`` says.

    Args:
        fn: The resolved cost, ``cost(n, L)`` for lengths ``[N]``, ``cost(n, Ls, Lt)`` for
            pairs ``[N, 2]``.
        lens: The samples' lengths, ``[N]`` or ``[N, 2]``.
        plens: ``lens`` padded to ``pad_to_multiple_of``.
        too_big: Which samples are over ``max_cost`` alone (one at least).
        max_cost: The budget.
        oversize: ``"error"`` raises, ``"skip"`` warns (and raises if every sample is over),
            ``"alone"`` says nothing.
        stacklevel: The warning's, so that it points at the caller of the public function.
    """
    where = np.flatnonzero(too_big)
    i, pairs = int(where[0]), lens.ndim == 2
    if oversize == "error":
        alone = float(np.asarray(_cost(fn, 1, plens[i], pairs)))
        raise InputError(
            f"sample {i} has {_describe(lens[i])} (padded {_show(plens[i])}) and costs "
            f"{alone:g} alone, over max_cost={max_cost:g}; {where.size} sample(s) are over "
            "budget. Raise max_cost, truncate them, or pass oversize='skip' or 'alone'"
        )
    if oversize == "skip":
        if where.size == lens.shape[0]:
            j = int(np.argmin(sample_tokens(lens)))  # the cheapest, for a monotone cost
            cheapest = float(np.asarray(_cost(fn, 1, plens[j], pairs)))
            raise InputError(
                f"all {lens.shape[0]} samples are over max_cost={max_cost:g} even alone "
                f"(the shortest, sample {j} of {_describe(lens[j])}, costs {cheapest:g}); "
                "oversize='skip' would leave nothing to train on"
            )
        warnings.warn(
            f"skipping {where.size} sample(s) over max_cost={max_cost:g} even alone "
            f"(first: index {i}, {_describe(lens[i])})",
            stacklevel=stacklevel,
        )


def check_budget(
    fn: Any, seq_lens: NDArray[Any], bounds: list[int], max_cost: float, alone_ok: bool
) -> None:
    """Every batch fits, else the user's cost is not monotone (NOTE [ packing by capacity ]
    in :mod:`dynbatch.plan.planning`, NOTE [ planning pairs ] in :mod:`dynbatch.plan.pairs`).

    Args:
        fn: The resolved cost, ``cost(n, L)`` or for pairs ``cost(n, Ls, Lt)``.
        seq_lens: The planned samples' padded lengths in plan order, ``[N]`` or ``[N, 2]``.
        bounds: Where each batch ends in ``seq_lens``.
        max_cost: The budget.
        alone_ok: A batch of one sample may be over (``oversize="alone"``).
    """
    if not bounds:
        return
    starts = np.array([0, *bounds[:-1]], dtype=np.int64)
    sizes = np.diff(np.append(starts, seq_lens.shape[0]))
    longest = reduce_batches(np.maximum, seq_lens, None, starts)
    pairs = seq_lens.ndim == 2
    costs = np.asarray(_cost(fn, sizes, longest, pairs), dtype=np.float64)
    over = ~(costs <= max_cost)  # NaN is over
    if alone_ok:
        over &= sizes > 1
    if over.any():
        k = int(np.argmax(over))
        form, what = ("(n, Ls, Lt)", "pairs") if pairs else ("(n, L)", "samples")
        raise InputError(
            f"cost {fn!r} is not nondecreasing in {form}: a batch of {sizes[k]} {what} "
            f"costs {costs[k]:g} > max_cost={max_cost:g} although every smaller step fit"
        )


def finish_plan(
    fn: Any,
    plens: NDArray[Any],
    seq: NDArray[Any],
    bounds: list[int],
    partial: bool,
    opts: PlanOptions,
    rng: np.random.Generator,
    *,
    shuffle_batches: bool,
    named: bool,
) -> Plan:
    """The plan of the packed samples ``seq``, cut at ``bounds``: the batch that ended because
    samples ran out dropped if ``drop_last``, every batch checked against the budget unless the
    cost is a ``named`` one (monotone by construction), then the batches put in ``opts.order``.
    """
    if opts.drop_last and partial:
        bounds.pop()
        seq = seq[: bounds[-1] if bounds else 0]
    if not named:
        check_budget(fn, plens[seq], bounds, opts.max_cost, opts.oversize == "alone")
    plan = Plan(seq, np.asarray([0, *bounds], dtype=np.int64))
    if opts.order == "bucket" and shuffle_batches:
        plan = plan.take(rng.permutation(len(plan)))
    elif opts.order == "descending":
        plan = plan.take(np.arange(len(plan))[::-1])
    return plan
