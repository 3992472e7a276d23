"""Updates split at a device's step time: a planner above sharding; numpy only.

The step time is a :class:`~dynbatch.plan.steptime.StepTimeModel` (or a
measured :class:`~dynbatch.plan.steptime.StepTimeTable`), checked by
:func:`~dynbatch.plan.steptime.check_time_model`. :func:`plan_split_updates`
plans an epoch whose updates are the fixed batch's own and whose micro-batches
are cut at the least predicted time.

NOTE [ splitting updates at the step time ]
    An update of the fixed batch is ``U = B · ranks`` samples drawn at random;
    run as one step it costs ``t(B, L_max)``, its longest sample padding every
    other. Cut into micro-batches, it pays ``c`` once per micro-batch and the
    padded tokens of each. On a CPU ``c`` is small and padding dominates: cut
    finely. On a GPU below its knee ``c`` dominates: do not cut. In between,
    the best cut depends on the update's lengths. For a cost nondecreasing in
    ``n`` and ``L``, some best partition of an update into micro-batches is
    contiguous in length order (exchanging two samples across groups so that
    the shorter goes to the group with the shorter maximum never raises
    either maximum). So each update's samples are sorted by length and a
    dynamic program finds the cut of least predicted time,
    ``sum(c + n_k·L_k·(a + b·L_k))``, among cuts whose every micro-batch fits
    the memory budget; with several ranks a micro-step's ``m`` samples are
    dealt across them, each rank holding ``ceil(m / ranks)`` at most. A fitted
    model is wrong by some fraction (``error``: a fit of a GPU's table is off
    by ~13% near its knee, where a step's time turns from flat to linear), so
    a cut is taken only where it is predicted to save more than that fraction
    of the whole update's time; otherwise the update stays one micro-step.

    **Never predicted slower than the fixed batch.** The fixed batch's own
    cut of an update, steps of ``B`` samples a rank (``max_batch_size``; one
    micro-step of all ``U`` samples without it), sorted by length, is never
    slower than the fixed batch's steps of the same samples in random order
    (each step's longest sample is no longer), and it is a feasible cut
    whenever the fixed batch fits the budget, as the recipe's default budget
    ``cost(B, L_max)`` guarantees. It is always a candidate, and a cut is
    taken over it only where it is predicted faster, so each update, and so
    the epoch, is predicted no slower than the fixed batch drawing the same
    samples.

NOTE [ the multiple and the fixed batch's step ]
    ``batch_size_multiple`` asks for batch sizes the device runs well (a
    multiple of 8 for tensor cores). The fixed batch the user would have run
    ignores it: ``B = 36`` runs steps of 36. Rounding a micro-batch's cap
    down to the multiple (32) would take the fixed batch's own step out of
    the candidates, and where a step costs the same at any size every update
    would run as two steps: twice the fixed batch's time. So the multiple
    applies to the *cut parts*: every micro-step the program cuts, but an
    update's last, holds a multiple of ``multiple · ranks`` samples (each
    rank a multiple) within the budget alone; the fixed batch's own cut
    (steps of ``B`` a rank, the last one the rest) is a candidate as it is,
    a multiple or not, since a cut never runs slower than what it replaces.
    Updates are the fixed batch's: the same count an epoch, each a random
    draw of every length (NOTE [ mixed updates ]). With ``group_by_length``
    they are drawn as Hugging Face's sampler draws them instead (mega-batches
    of :data:`MEGA_BATCH` updates sorted by length, cut, in random order):
    near-equal lengths in each, so almost no padding, at the price of
    updates that are no longer random draws. Pairs are grouped on their
    tokens, source + target: near-equal sums, not sides, so there the
    shorter side pads heavily (NOTE [ lengths of pairs ] in
    :mod:`dynbatch.plan.lengths`).

NOTE [ splitting updates of pairs ]
    With a step time of two lengths (NOTE [ a step time of two lengths ] in
    :mod:`dynbatch.plan.pair_steptime`) the updates are the fixed batch's,
    drawn as for one length, and each is sorted by its pairs' tokens, source
    + target, and cut by the same program. Two lengths have no order in which
    some best cut is contiguous, so the program's cut is the best of those
    contiguous in that order, not of all cuts. A micro-step is charged, in
    memory and in time, at the longest source and the longest target of the
    update's pairs up to its end: at least its own (both grow with either
    side), so no micro-batch is over the budget, and the whole update as one
    step is charged at its own longest source and target, exactly the fixed
    batch's step of it priced at its longest pair of each side: a cut is
    taken only where it is predicted faster than that (with the model's
    ``error`` to spare), so an epoch of updates of one step a rank is never
    predicted slower than the fixed batch. Which pairs an update holds, and
    how many updates an epoch has, are the fixed batch's whatever the step
    time: the split is a speed option (tests/test_pair_steptime.py).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._checks import InputError, InputTypeError, check_int, check_replicas
from .lengths import check_plan_lengths, is_pairs, sample_tokens
from .options import PlanOptions
from .pair_steptime import (
    PairStepTimeModel,
    check_step_time,
    refuse_time_model_for,
    step_seconds,
)
from .pairs import check_pair_options
from .planning import Plan, batch_capacity, find_oversize, padded_lengths
from .sharding import ShardedPlan

__all__ = [
    "MEGA_BATCH",
    "epoch_seconds",
    "plan_split_updates",
    "shuffled",
    "split_update",
]

#: An update holding more samples than this is cut on blocks of sorted samples, not samples:
#: the program costs ``U**2 / 2`` per update, so blocks keep it at ``N * MAX_CUT_POINTS``.
MAX_CUT_POINTS = 512

#: The random stream of :func:`plan_split_updates`, apart from the planner's.
_SPLIT_STREAM = 2


#: Hugging Face's ``group_by_length``: mega-batches of this many updates, sorted by length.
MEGA_BATCH = 50


def split_update(
    lengths: NDArray[Any],
    capacity: NDArray[Any],
    time_model: Any,
    num_replicas: int = 1,
    multiple: int = 1,
    fixed: int | None = None,
) -> NDArray[np.bool_]:
    """Where to cut updates, rows of ascending padded ``lengths``, at the least predicted time.

    For a step time of (source, target) pairs (a
    :class:`~dynbatch.plan.pair_steptime.PairStepTimeModel`) each row holds ``[U, 2]``: per
    sample, the longest source and longest target of the update's samples up to it, each
    side ascending; a micro-step is charged at its last sample's.

    ``capacity[u, j]`` is the most samples one rank's batch of length
    ``lengths[u, j]`` may hold (0: over budget even alone; it goes alone).
    A micro-step of fewer samples than ranks leaves some ranks a repeat.
    ``time_model(n, L)`` gives a step's seconds (a
    :class:`~dynbatch.plan.steptime.StepTimeModel`, or a
    :class:`~dynbatch.plan.steptime.StepTimeTable` for the best cut on measured times). With
    ``multiple`` (``batch_size_multiple``) every micro-step but an update's
    last holds a multiple of ``multiple * num_replicas`` samples, so each
    rank's batch is a multiple of it, wherever the budget allows one; the
    fixed batch's own cut, steps of ``fixed`` samples a rank (default: the
    whole update as one step), is always a candidate, a multiple or not
    (NOTE [ the multiple and the fixed batch's step ]). Returns, per row, a
    boolean row of ``U`` flags: True where a micro-step ends
    (NOTE [ splitting updates at the step time ]).

    >>> from dynbatch.plan.steptime import StepTimeModel
    >>> lens = np.array([[10, 10, 100, 100]])
    >>> cap = np.full((1, 4), 4)
    >>> split_update(lens, cap, StepTimeModel(c=0.0, a=1.0, b=0.0)).astype(int).tolist()
    [[0, 1, 0, 1]]
    >>> split_update(lens, cap, StepTimeModel(c=1e6, a=1.0, b=0.0)).astype(int).tolist()
    [[0, 0, 0, 1]]
    """
    lengths, capacity, model, replicas, unit, step = _checked_update(
        lengths, capacity, time_model, num_replicas, multiple, fixed
    )
    rows, size = lengths.shape[:2]
    if size == 0:
        return np.zeros((rows, 0), dtype=bool)
    block = -(-size // MAX_CUT_POINTS)
    cuts, best = _cut(lengths, capacity, model, replicas, -(-block // unit) * unit)
    # the fixed batch's own cut: consecutive steps of ``step`` samples (a rank's ``fixed``)
    ends = np.append(np.arange(step, size, step), size)
    count = np.diff(np.r_[0, ends])
    per_rank = -(-count // replicas)
    longest = lengths[:, ends - 1].astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        steps = np.asarray(step_seconds(model, per_rank[None, :], longest), dtype=np.float64)
        own = np.broadcast_to(steps, (rows, ends.size)).sum(axis=1)
    own_fits = (per_rank[None, :] <= np.maximum(capacity[:, ends - 1], 1)).all(axis=1)
    trusted = best < own * (1.0 - float(getattr(model, "error", 0.0)))
    keep_own = own_fits & ~trusted  # a cut the model cannot tell from the fixed batch's: its own
    cuts[keep_own] = False
    cuts[np.ix_(np.flatnonzero(keep_own), ends - 1)] = True
    left = ~keep_own & ~np.isfinite(best)
    if left.any():  # a length the budget fits fewer than the multiple of: cut anywhere
        cuts[left], best[left] = _cut(lengths[left], capacity[left], model, replicas, block)
    left = ~keep_own & ~np.isfinite(best)
    if left.any():  # a budget below a block (2+ samples in an update over MAX_CUT_POINTS)
        cuts[left] = _capacity_cut(capacity[left], replicas)
    return cuts


def _capacity_cut(capacity: NDArray[Any], replicas: int) -> NDArray[np.bool_]:
    """Where to cut rows of ascending lengths into micro-steps as full as ``capacity`` allows,
    which always fits: each sample fits alone (one over budget alone goes alone)."""
    rows, size = capacity.shape
    cuts = np.zeros((rows, size), dtype=bool)
    room = np.maximum(capacity, 1) * replicas  # samples a micro-step ending at each may hold
    for r in range(rows):
        count = 0
        for j in range(size):
            if count and count + 1 > room[r, j]:  # the capacity falls along the row: cut before
                cuts[r, j - 1] = True
                count = 0
            count += 1
        cuts[r, size - 1] = True
    return cuts


def _checked_update(
    lengths: Any, capacity: Any, time_model: Any, num_replicas: Any, multiple: Any, fixed: Any
) -> tuple[NDArray[np.int64], NDArray[np.int64], Any, int, int, int]:
    """:func:`split_update`'s arguments, checked: each a named error, not a numpy one."""
    if time_model is None or not callable(time_model):
        raise InputTypeError(
            "time_model must be a step time (n, L) -> seconds: a StepTimeModel, a StepTimeTable "
            f"or a vectorised callable; got time_model={time_model!r}"
        )
    lens = np.asarray(lengths)
    pairs = isinstance(time_model, PairStepTimeModel)
    ndim, what = (3, "a 3-d array [updates, U, 2]") if pairs else (2, "a 2-d array")
    shaped = lens.ndim == ndim and (not pairs or lens.shape[2] == 2)
    if not shaped or lens.dtype.kind not in "iu" or (lens.size and lens.min() < 1):
        raise InputError(
            f"lengths must be {what} of integer lengths >= 1, one row of ascending padded "
            f"lengths per update (for a step time of pairs, each side's longest up to each "
            f"sample); got lengths with shape {lens.shape} and dtype {lens.dtype}"
        )
    if lens.shape[1] > 1 and (np.diff(lens, axis=1) < 0).any():
        raise InputError("lengths must be ascending along each row (an update's sorted samples)")
    cap = np.asarray(capacity)
    if cap.shape != lens.shape[:2] or cap.dtype.kind not in "iu":
        raise InputError(
            f"capacity must be an integer array of the shape of lengths {lens.shape[:2]} (the "
            f"most samples a rank's batch ending at each sample holds); got shape {cap.shape} "
            f"and dtype {cap.dtype}"
        )
    replicas = check_replicas(num_replicas)
    times = check_int("multiple", multiple, minimum=1)
    unit = times * replicas if times > 1 else 1
    size = lens.shape[1]
    if fixed is None:
        return lens, cap, time_model, replicas, unit, max(size, 1)
    step = check_int("fixed", fixed, minimum=1) * replicas
    return lens, cap, time_model, replicas, unit, step


def _cut(
    lengths: NDArray[Any], capacity: NDArray[Any], time_model: Any, replicas: int, block: int
) -> tuple[NDArray[np.bool_], NDArray[np.float64]]:
    """:func:`split_update`'s least cut with cut points every ``block`` samples, and its
    predicted seconds per row (inf: no cut fits)."""
    rows, size = lengths.shape[:2]
    points = np.append(np.arange(block, size, block), size)  # allowed cut positions (ends)
    starts = np.concatenate([[0], points])
    best = np.zeros((rows, starts.size), dtype=np.float64)
    came_from = np.zeros((rows, starts.size), dtype=np.int64)
    for j in range(1, starts.size):
        end = int(starts[j])
        count = end - starts[:j]  # samples of a micro-step from each earlier cut to this one
        per_rank = -(-count // replicas)
        longest = lengths[:, end - 1].astype(np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            step = step_seconds(time_model, per_rank[None, :], longest[:, None])
            step = np.asarray(step, dtype=np.float64)
        cap = capacity[:, end - 1][:, None]
        fits = per_rank[None, :] <= np.maximum(cap, 1)  # over budget alone: alone it goes
        with np.errstate(over="ignore", invalid="ignore"):
            total = np.where(fits, best[:, :j] + step, np.inf)
        came_from[:, j] = np.argmin(total, axis=1)
        best[:, j] = total[np.arange(rows), came_from[:, j]]
    done = np.isfinite(best[:, -1])
    cuts = np.zeros((rows, size), dtype=bool)
    at = np.where(done, starts.size - 1, 0)
    live = at > 0
    while live.any():
        cuts[np.flatnonzero(live), starts[at[live]] - 1] = True
        at = np.where(live, came_from[np.arange(rows), at], 0)
        live = at > 0
    return cuts, np.where(done, best[:, -1], np.inf)


def plan_split_updates(
    lengths: NDArray[np.int64], options: PlanOptions, epoch: int, num_replicas: int = 1
) -> ShardedPlan:
    """The fixed batch's updates of ``epoch``, each cut at the least predicted step time.

    Needs ``options.time_model`` and ``options.update_size`` in samples. The
    samples are shuffled from ``(seed, epoch)`` and cut into updates of
    ``update_size`` (the last one short, or dropped with ``drop_last``, as a
    fixed batch's); each update is cut by :func:`split_update` and its
    micro-steps dealt across the ranks; a rank with no sample in a micro-step
    (an update of fewer samples than ranks) repeats one, flagged as padding.

    Lengths of pairs are sorted and grouped by their tokens, source + target, and a cut's
    micro-step is charged, in memory and in time, at the longest source and longest target of
    the update's samples up to its end (NOTE [ splitting updates of pairs ]).
    """
    if not isinstance(options, PlanOptions):
        raise InputTypeError(f"options must be a dynbatch.PlanOptions, got options={options!r}")
    model = check_step_time(options.time_model)
    if model is None or options.update_size is None or options.update_unit != "samples":
        raise InputError(
            "splitting updates at the step time needs options with time_model and update_size "
            f"in samples, got time_model={options.time_model!r}, update_size="
            f"{options.update_size!r}, update_unit={options.update_unit!r}"
        )
    replicas = check_replicas(num_replicas)
    lengths = check_plan_lengths(lengths)
    if is_pairs(lengths):
        check_pair_options(options, "plan_split_updates")
    else:
        refuse_time_model_for(model, False, "plan_split_updates")
    epoch = check_int("epoch", epoch)
    pairs = padded_lengths(lengths, options.pad_to_multiple_of)
    plens = sample_tokens(pairs)  # what updates are sorted by (the lengths themselves: 1-D)
    two = isinstance(model, PairStepTimeModel)  # a step time of pairs: charged at both sides
    size = max(1, round(float(options.update_size)))
    longest = pairs.max(axis=0) if two else plens.max()
    with np.errstate(over="ignore"):  # the worst step: the cost grows with n and L
        worst = float(np.asarray(step_seconds(model, -(-size // replicas), longest)))
    if not math.isfinite(worst):
        raise InputError(
            f"time_model={options.time_model!r} predicts {worst} seconds for a step of "
            f"{-(-size // replicas)} samples of {_longest_text(longest)}: a step's seconds must "
            "be finite (are the coefficients in seconds?)"
        )
    if not math.isfinite(worst * size):  # the program sums an update's steps: at most U of them
        raise InputError(
            f"time_model={options.time_model!r} predicts inf seconds for an update of {size} "
            f"steps of up to {worst:g} seconds each: an update's seconds must be finite (are the "
            "coefficients in seconds?)"
        )
    # NOTE [ the multiple and the fixed batch's step ]: capacities of the budget alone, the
    # multiple applied by split_update's cut points, so that the fixed batch's step fits
    whole = options.replace(batch_size_multiple=1)
    fixed = options.max_batch_size
    keep = np.ones(len(lengths), dtype=bool)
    over = find_oversize(lengths, options=options)
    if over.size and options.oversize != "alone":
        if options.oversize == "error":
            raise InputError(
                f"sample {int(over[0])} has length {_length_of(lengths, int(over[0]))} and is over "
                f"max_cost={options.max_cost:g} alone; {len(over)} sample(s) are. Raise "
                "max_cost, truncate them, or pass oversize='skip' or 'alone'"
            )
        keep[over] = False
        if not keep.any():
            shortest = int(np.argmin(sample_tokens(lengths)))
            raise InputError(
                f"every sample is over max_cost={options.max_cost:g} alone (the shortest, sample "
                f"{shortest} of length {_length_of(lengths, shortest)}, too): nothing to train on. "
                "Raise max_cost, or truncate the samples"
            )
    order = shuffled(np.flatnonzero(keep), options.seed, epoch)
    if options.group_by_length:  # mega-batches sorted by length, longest first (as HF's)
        mega = MEGA_BATCH * size
        order = np.concatenate(
            [
                chunk[np.argsort(-plens[chunk], kind="stable")]
                for chunk in np.split(order, range(mega, order.size, mega))
            ]
        )
    if options.drop_last:
        order = order[: order.size - order.size % size] if order.size >= size else order[:0]
    batches: list[NDArray[np.int64]] = []
    padding: list[bool] = []
    ends: list[int] = []
    full = size * (order.size // size)
    updates = order[:full].reshape(-1, size)
    if options.group_by_length:  # the grouped updates in random order
        rng = np.random.default_rng([options.seed, epoch, _SPLIT_STREAM, 1])
        updates = updates[rng.permutation(updates.shape[0])]
    for members in (updates, order[full:].reshape(1, -1)):
        if members.size == 0:  # the full updates at once, then the short last one
            continue
        members = np.take_along_axis(members, np.argsort(plens[members], axis=1), axis=1)
        # each side's longest up to each sample, for a step time of pairs (its capacity's too)
        sorted_lengths = np.maximum.accumulate(pairs[members], axis=1) if two else plens[members]
        capacity = _capacities(pairs, members, whole)
        cuts = split_update(
            sorted_lengths, capacity, model, replicas, options.batch_size_multiple, fixed
        )
        for row, flags in zip(members, cuts, strict=True):
            stops = np.flatnonzero(flags) + 1
            for start, stop in zip(np.r_[0, stops[:-1]], stops, strict=True):
                group = row[start:stop]
                for r in range(replicas):
                    mine = group[r::replicas]
                    batches.append(mine if mine.size else group[:1])
                    padding.append(mine.size == 0)
            ends.append((ends[-1] if ends else 0) + stops.size)
    plan = Plan.from_batches(batches)
    return ShardedPlan(
        plan, np.arange(len(plan)), np.asarray(padding, dtype=bool), replicas, np.asarray(ends)
    )


def _longest_text(longest: Any) -> str:
    """``length L``, or for pairs ``longest source and target (Ls, Lt)``, as a message says it."""
    if np.ndim(longest):
        return f"longest source and target {tuple(int(v) for v in longest)}"
    return f"length {int(longest)}"


def _length_of(lengths: NDArray[Any], i: int) -> str:
    """Sample ``i``'s length, or its (source, target) lengths, as a message says it."""
    return str(tuple(int(v) for v in lengths[i])) if lengths.ndim == 2 else str(int(lengths[i]))


def _capacities(plens: NDArray[Any], members: NDArray[Any], options: PlanOptions) -> NDArray[Any]:
    """Per sample of each row of ``members`` (an update's samples, sorted), the most samples a
    micro-step ending at it may hold: at its length, or for pairs at the longest source and
    longest target of the row up to it (never less than a micro-step of them needs)."""
    if plens.ndim == 1:
        return batch_capacity(plens[members].reshape(-1), options).reshape(members.shape)
    reach = np.maximum.accumulate(plens[members], axis=1)  # rows x samples x 2
    return batch_capacity(reach.reshape(-1, 2), options).reshape(members.shape)


def shuffled(indices: NDArray[Any], seed: int, epoch: int) -> NDArray[Any]:
    """``indices`` in the order :func:`plan_split_updates` draws the updates of ``epoch`` from:
    a fixed batch cut from this order holds the same samples in each update.

    >>> shuffled(np.arange(5), seed=0, epoch=0).tolist() == shuffled(np.arange(5), 0, 0).tolist()
    True
    """
    rng = np.random.default_rng([seed, epoch, _SPLIT_STREAM])
    return rng.permutation(np.asarray(indices))


def epoch_seconds(
    sharded: ShardedPlan,
    lengths: NDArray[Any],
    step_time: Any,
    pad_to_multiple_of: int = 1,
    *,
    name: str = "step_time",
) -> float:
    """Predicted seconds of an epoch: every micro-step at its slowest rank's ``step_time(n, L)``.

    ``step_time`` is a :class:`~dynbatch.plan.steptime.StepTimeModel`, a
    :class:`~dynbatch.plan.steptime.StepTimeTable` or any vectorised ``(n, L) -> seconds``;
    an epoch whose seconds are not finite, or a step predicted below 0 seconds, is an
    :class:`~dynbatch.InputError` naming it as ``name``.
    """
    if not isinstance(sharded, ShardedPlan):
        raise InputTypeError(
            "sharded must be an epoch's plan (a ShardedPlan, e.g. plan_epoch(...)), got "
            f"sharded={sharded!r}"
        )
    if not callable(step_time):
        raise InputTypeError(
            f"{name} must be a step time (n, L) -> seconds (a StepTimeModel, a StepTimeTable or "
            f"a vectorised function), got {name}={step_time!r}"
        )
    pad = check_int("pad_to_multiple_of", pad_to_multiple_of, minimum=1)
    lens = check_plan_lengths(lengths)
    refuse_time_model_for(step_time, is_pairs(lens), "epoch_seconds", flat_ok=True, name=name)
    needed = int(sharded.plan.indices.max()) + 1 if sharded.plan.indices.size else 0
    if len(lens) < needed:
        raise InputError(
            f"lengths must hold one length per sample, {needed} or more (the plan holds sample "
            f"{needed - 1}), got {len(lens)}"
        )
    if sharded.num_steps == 0:
        return 0.0
    if is_pairs(lens) and not isinstance(step_time, PairStepTimeModel):
        lens = sample_tokens(lens)  # a flat step time of one length: no length is read
    longest = padded_lengths(sharded.longest(lens), pad)
    with np.errstate(over="ignore", invalid="ignore"):
        seconds = np.asarray(step_seconds(step_time, sharded.sizes, longest), dtype=np.float64)
        seconds = np.broadcast_to(seconds, sharded.sizes.shape)
    if (seconds < 0).any():
        i = int(np.argmax(seconds < 0))
        raise InputError(
            f"{name}={step_time!r} predicts {seconds[i]:g} seconds for a step of "
            f"{int(sharded.sizes[i])} samples of {_longest_text(longest[i])}: a step's seconds "
            "must be >= 0"
        )
    with np.errstate(over="ignore", invalid="ignore"):
        total = float(seconds.reshape(-1, sharded.num_replicas).max(axis=1).sum())
    if not math.isfinite(total):
        raise InputError(
            f"{name}={step_time!r} predicts {total} seconds for an epoch of {sharded.num_steps} "
            "steps: an epoch's seconds must be finite (are the coefficients in seconds?)"
        )
    return total
