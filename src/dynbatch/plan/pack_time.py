"""Packing chosen per update by a device's step time: numpy only.

:func:`choose_packing` plans an epoch of packed updates (:func:`~dynbatch.plan_packs`)
and, for each update, predicts three ways to run its samples: packed into rows,
split into length-sorted micro-batches (:func:`~dynbatch.plan.splits.split_update`),
or whole, one padded step as the fixed batch runs it. It keeps the fastest.

NOTE [ choosing packing per update ]
    *The same samples.* Packing plans rows over a window of the shuffled order
    (NOTE [ packing windows ]), so a packed update is not the fixed batch's
    update ``k``: it is another random draw of about ``batch_size`` samples
    (one row more or less). The packed plan's updates *are* the updates. For
    each of them the three candidates run exactly its samples: (i) packed:
    the plan's own rows of that update (next-fit of the plan's order, what
    :class:`~dynbatch.PackCollator` builds), in its micro-batches of at most
    ``max_rows`` rows; (ii) split: its samples sorted by length and cut at the
    least predicted time within the budget (:func:`~dynbatch.plan.splits.split_update`);
    (iii) whole: its samples as one padded step, what the fixed batch does
    with an update. So the epoch is never predicted slower than the fixed
    batch running the same updates: the whole is a candidate wherever it fits
    the budget, always without one (an update whose whole step does not fit
    is one the fixed batch could not run either; it is packed or split).
    Updates, their count (the fixed batch's ``ceil(N / batch_size)``) and
    exactly-once are the packed plan's, whichever way each update runs.

    *The fixed batch's own updates.* A packed update holds ``batch_size``
    samples only on average (a row more or less), and a step's time is not
    linear in its samples: near a GPU's knee an update of ``B + 3`` samples
    costs more than the fixed batch's ``B`` saves on one of ``B - 3``. On the
    H100 table at 128 tokens (B = 64) and 256 (B = 32) the packed plan's
    updates run whole are 1-3 % slower than the fixed batch's, where packing
    saves nothing. So the epoch is also planned as the fixed batch draws it
    (:func:`~dynbatch.plan.splits.shuffled`, updates of exactly ``batch_size``),
    each update split or whole as above, and the faster epoch is kept
    (``PackChoice.from_fixed``): the epoch is never predicted slower than
    the fixed batch's, update for update, and packing runs only where it pays.

    *The price of a packed micro-batch* of ``R`` rows is ``time_model(R,
    pack_len)``: the step of ``R`` padded sequences of ``pack_len`` tokens,
    dense attention over the whole row. A block-diagonal kernel (FlashMask,
    varlen attention) does less work, so this is an upper bound on a packed
    step, and packing is chosen only where even the bound is faster. A row
    longer than ``pack_len`` (``oversize="alone"``) is priced at its length.

    *The model's error.* A fitted model is wrong by some fraction
    (``time_model.error``): as :func:`~dynbatch.plan.splits.split_update` keeps an
    update whole unless a cut saves more than that fraction, packing is taken
    only where it is predicted faster than the better of split and whole by
    more than that fraction. A :class:`~dynbatch.StepTimeTable` is measured
    times: its error is 0.

    *The budget.* ``max_rows`` caps the rows of a packed micro-batch;
    ``max_cost`` with ``cost`` caps it at the most rows ``R`` with
    ``cost(R, pack_len) <= max_cost``, and caps each split micro-batch as the
    planner does. With ``max_rows`` alone a split micro-batch holds at most
    ``max_rows * pack_len`` padded tokens, a packed micro-batch's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._checks import InputError, InputTypeError, check_int, check_lengths
from .costs import CostLike, resolve_cost
from .options import PlanOptions
from .packing import PackPlan, plan_packs
from .planning import batch_capacity
from .plans import Indices, Plan
from .splits import shuffled, split_update
from .stats import PlanStats
from .steptime import check_time_model

__all__ = ["CHOICES", "PackChoice", "choose_packing", "packed_stats"]

#: How an update runs: ``choice[u]`` indexes this.
CHOICES = ("packed", "split", "whole")
_PACKED, _SPLIT, _WHOLE = 0, 1, 2


@dataclass(frozen=True)
class PackChoice:
    """An epoch of packed updates, each run the way the step time predicts fastest.

    ``micro_batches[m]`` is micro-batch ``m``'s samples (row after row where
    ``packed[m]``: give them to :class:`~dynbatch.PackCollator`; else a padded
    batch, shortest first); update ``u`` is micro-batches
    ``update_offsets[u]:update_offsets[u + 1]``; ``seconds[u, k]`` is update
    ``u``'s predicted time run as ``CHOICES[k]``, and ``choice[u]`` the one kept.

    >>> c = choose_packing([5, 3, 4, 2, 6, 7], 8, batch_size=3, time_model="10,1,0")
    >>> [CHOICES[k] for k in c.choice], c.epoch_seconds, c.whole_seconds
    (['packed', 'packed'], 52.0, 59.0)
    >>> c = choose_packing([5, 3, 4, 2, 6, 7], 8, batch_size=3, time_model="1,0,0")
    >>> c.counts, c.epoch_seconds
    ({'packed': 0, 'split': 0, 'whole': 2}, 2.0)
    """

    plan: PackPlan
    micro_batches: Plan
    packed: NDArray[np.bool_]
    update_offsets: Indices
    choice: NDArray[np.int64]
    seconds: NDArray[np.float64]
    #: Per update: its whole step fits the memory budget (always, without one).
    whole_fits: NDArray[np.bool_]
    #: Per micro-batch, the step's shape as priced: rows or samples ``n``, padded length ``L``.
    step_shapes: tuple[Indices, Indices]
    #: True where the fixed batch's own updates, each split or whole, are predicted faster
    #: than the packed plan's: the epoch runs those (NOTE [ choosing packing per update ]).
    from_fixed: bool

    @property
    def updates(self) -> Plan:
        """Every update's samples, as run."""
        return Plan(self.micro_batches.indices, self.micro_batches.offsets[self.update_offsets])

    @property
    def num_updates(self) -> int:
        """Updates in the epoch: the packed plan's."""
        return int(self.choice.size)

    @property
    def chosen_seconds(self) -> NDArray[np.float64]:
        """Each update's predicted seconds, run as chosen."""
        return np.asarray(self.seconds[np.arange(self.choice.size), self.choice], np.float64)

    @property
    def epoch_seconds(self) -> float:
        """The epoch's predicted seconds, each update run as chosen."""
        return float(self.chosen_seconds.sum())

    @property
    def whole_seconds(self) -> float:
        """The epoch's predicted seconds with every update one padded step (the fixed batch's)."""
        return float(self.seconds[:, _WHOLE].sum())

    @property
    def counts(self) -> dict[str, int]:
        """Updates run each way."""
        return {name: int((self.choice == k).sum()) for k, name in enumerate(CHOICES)}


def _step_time(time_model: Any) -> Any:
    """A vectorised ``(n, L) -> seconds``: a callable as it is; ``"c,a,b"``, a dict or an object
    with coefficients ``c``, ``a``, ``b`` as a :class:`~dynbatch.StepTimeModel`."""
    if isinstance(time_model, (str, dict)) or (
        not callable(time_model) and hasattr(time_model, "c")
    ):  # coefficients c, a, b, as check_time_model takes them
        return check_time_model(time_model)
    if not callable(time_model):
        raise InputTypeError(
            "time_model must be a step time: a StepTimeModel, a StepTimeTable, a 'c,a,b' string "
            f"or a vectorised callable (n, L) -> seconds, got time_model={time_model!r}"
        )
    return time_model


def _predict(step: Any, n: NDArray[Any], length: NDArray[Any]) -> NDArray[np.float64]:
    with np.errstate(over="ignore"):
        out = np.asarray(step(n, length), dtype=np.float64)
    out = np.broadcast_to(out, np.broadcast(n, length).shape)
    if not np.isfinite(out).all() or (out < 0).any():
        k = int(np.flatnonzero(~(np.isfinite(out) & (out >= 0)).reshape(-1))[0])
        raise InputError(
            f"time_model predicts {out.reshape(-1)[k]} seconds for a step of "
            f"{int(np.broadcast_to(n, out.shape).reshape(-1)[k])} samples of length "
            f"{int(np.broadcast_to(length, out.shape).reshape(-1)[k])}: a step's seconds must be "
            "finite and >= 0"
        )
    return out


def choose_packing(
    lengths: Any,
    pack_len: int,
    *,
    batch_size: int,
    time_model: Any,
    max_rows: int | None = None,
    max_cost: float | None = None,
    cost: CostLike = "quadratic",
    loss_tokens: Any = None,
    update_unit: str = "samples",
    window: int | None = None,
    oversize: str = "error",
    seed: int = 0,
    epoch: int = 0,
) -> PackChoice:
    """The packed plan of ``epoch``, each update run packed, split or whole: the fastest.

    NOTE [ choosing packing per update ] says what is compared and why the
    epoch is never predicted slower than its updates run whole.

    Args:
        lengths: tokens per sample.
        pack_len: tokens per packed row.
        batch_size: the fixed batch's samples per update.
        time_model: a device's step time: a :class:`~dynbatch.StepTimeModel`, a
            :class:`~dynbatch.StepTimeTable`, ``"c,a,b"``, or any vectorised
            ``(n, L) -> seconds``; its ``error`` (0 if absent) is the margin a
            faster prediction must clear.
        max_rows: rows per packed micro-batch.
        max_cost: the memory budget, under ``cost``: a packed micro-batch of
            ``R`` rows costs ``cost(R, pack_len)``; give it or ``max_rows``.
        cost: the cost of a batch, ``"quadratic"``, ``"linear"`` or a callable.
        loss_tokens, update_unit, window, oversize, seed, epoch: as
            :func:`~dynbatch.plan_packs`.

    Returns:
        A :class:`PackChoice`.
    """
    lens = check_lengths(lengths)
    pack_len = check_int("pack_len", pack_len, minimum=1)
    step = _step_time(time_model)
    error = float(getattr(step, "error", 0.0) or 0.0)
    if not 0.0 <= error < 1.0:
        raise InputError(f"time_model error must be a number in [0, 1), got error={error!r}")
    max_rows = check_int("max_rows", max_rows, minimum=1, allow_none=True)
    options: PlanOptions | None = None
    if max_cost is not None:
        if max_rows is not None:
            raise InputError(
                f"give max_rows or max_cost, not both; got max_rows={max_rows} and "
                f"max_cost={max_cost!r}"
            )
        options = PlanOptions(max_cost=max_cost, cost=cost)
        max_rows = int(batch_capacity([pack_len], options)[0])
        if max_rows < 1:
            raise InputError(
                f"one row of pack_len={pack_len} tokens costs {float(options.cost(1, pack_len)):g},"
                f" over max_cost={max_cost:g}: lower pack_len or raise max_cost"
            )
    plan = plan_packs(
        lens,
        pack_len,
        batch_size=batch_size,
        loss_tokens=loss_tokens,
        update_unit=update_unit,
        window=window,
        max_rows=max_rows,
        oversize=oversize,
        seed=seed,
        epoch=epoch,
    )
    n_updates = plan.num_updates
    seconds = np.zeros((n_updates, len(CHOICES)), dtype=np.float64)
    if n_updates == 0:
        return PackChoice(
            plan,
            plan.micro_batches,
            np.zeros(0, bool),
            np.zeros(1, np.int64),
            np.zeros(0, np.int64),
            seconds,
            np.zeros(0, bool),
            (np.zeros(0, np.int64), np.zeros(0, np.int64)),
            False,
        )
    # (i) packed: each micro-batch's rows, padded to pack_len (a longer row: its own length)
    row_tokens = plan.row_tokens
    micro_rows = plan.rows_per_micro_batch
    micro_len = np.maximum(np.maximum.reduceat(row_tokens, plan.micro_row_offsets[:-1]), pack_len)
    micro_s = _predict(step, micro_rows, micro_len)
    seconds[:, _PACKED] = np.add.reduceat(micro_s, plan.update_offsets[:-1])
    # (ii) split and (iii) whole: each update's samples sorted by length
    whole_fits = np.zeros(n_updates, dtype=bool)
    cuts_of = _split_or_whole(
        lens, plan.updates, step, options, max_rows, pack_len, seconds, whole_fits
    )
    choice = np.full(n_updates, _SPLIT, dtype=np.int64)
    choice[whole_fits & (seconds[:, _WHOLE] <= seconds[:, _SPLIT])] = _WHOLE
    best = np.where(whole_fits, np.minimum(seconds[:, _SPLIT], seconds[:, _WHOLE]), np.inf)
    best = np.minimum(best, seconds[:, _SPLIT])
    choice[seconds[:, _PACKED] < best * (1.0 - error)] = _PACKED
    packed = _assemble(
        plan, choice, seconds, whole_fits, cuts_of, (micro_rows, micro_len), from_fixed=False
    )
    # the fixed batch's own updates, each split or whole (NOTE [ choosing packing per update ])
    kept = np.setdiff1d(np.arange(lens.size), plan.skipped)
    order = shuffled(kept, seed, epoch)
    fixed = Plan(order, np.r_[np.arange(0, order.size, batch_size), order.size])
    f_seconds = np.zeros((len(fixed), len(CHOICES)), dtype=np.float64)
    f_seconds[:, _PACKED] = np.inf
    f_fits = np.zeros(len(fixed), dtype=bool)
    f_cuts = _split_or_whole(lens, fixed, step, options, max_rows, pack_len, f_seconds, f_fits)
    f_choice = np.full(len(fixed), _SPLIT, dtype=np.int64)
    f_choice[f_fits & (f_seconds[:, _WHOLE] <= f_seconds[:, _SPLIT])] = _WHOLE
    unpacked = _assemble(
        plan, f_choice, f_seconds, f_fits, f_cuts, (micro_rows, micro_len), from_fixed=True
    )
    return packed if packed.epoch_seconds < unpacked.epoch_seconds else unpacked


def _split_or_whole(
    lens: Indices,
    updates: Plan,
    step: Any,
    options: PlanOptions | None,
    max_rows: int | None,
    pack_len: int,
    seconds: NDArray[np.float64],
    whole_fits: NDArray[np.bool_],
) -> dict[int, tuple[NDArray[Any], NDArray[Any], NDArray[Any]]]:
    """Fill ``seconds[:, split]``, ``seconds[:, whole]`` and ``whole_fits`` of ``updates``;
    return, per update size, the updates, their samples shortest first and the cuts."""
    sizes = updates.sizes
    cuts_of: dict[int, tuple[NDArray[Any], NDArray[Any], NDArray[Any]]] = {}
    for size in np.unique(sizes).tolist():
        which = np.flatnonzero(sizes == size)
        members = updates.indices[updates.offsets[which][:, None] + np.arange(size)]
        members = np.take_along_axis(members, np.argsort(lens[members], axis=1), axis=1)
        sorted_lens = lens[members]
        if options is not None:
            capacity = batch_capacity(sorted_lens.reshape(-1), options, size).reshape(
                sorted_lens.shape
            )
        elif max_rows is not None:
            capacity = (max_rows * pack_len) // sorted_lens
        else:
            capacity = np.full(sorted_lens.shape, size, dtype=np.int64)
        cuts = split_update(sorted_lens, np.asarray(capacity, dtype=np.int64), step)
        r, j = np.nonzero(cuts)  # row-major: each update's micro-batch ends, in order
        first = np.r_[True, r[1:] != r[:-1]]
        n = np.where(first, j + 1, j - np.r_[0, j[:-1]])
        split_s = np.bincount(r, _predict(step, n, sorted_lens[r, j]), minlength=which.size)
        seconds[which, _SPLIT] = split_s
        seconds[which, _WHOLE] = _predict(step, np.full(which.size, size), sorted_lens[:, -1])
        whole_fits[which] = size <= np.maximum(capacity[:, -1], 1)
        cuts_of[size] = (which, members, cuts)
    return cuts_of


def _assemble(
    plan: PackPlan,
    choice: NDArray[np.int64],
    seconds: NDArray[np.float64],
    whole_fits: NDArray[np.bool_],
    cuts_of: dict[int, tuple[NDArray[Any], NDArray[Any], NDArray[Any]]],
    packed_shapes: tuple[Indices, Indices],
    *,
    from_fixed: bool,
) -> PackChoice:
    """The chosen micro-batches, update after update."""
    split_batches: dict[int, list[Indices]] = {}
    for which, members, cuts in cuts_of.values():
        for u, row, flags in zip(which.tolist(), members, cuts, strict=True):
            if choice[u] == _WHOLE:
                split_batches[u] = [row]
            elif choice[u] == _SPLIT:
                stops = np.flatnonzero(flags) + 1
                split_batches[u] = np.split(row, stops[:-1])
    batches: list[Indices] = []
    packed: list[bool] = []
    step_n: list[int] = []
    step_len: list[int] = []
    ends = [0]
    micro = plan.micro_batches
    rows, row_len = (x.tolist() for x in packed_shapes)
    lens = plan.lengths
    for u in range(choice.size):
        if choice[u] == _PACKED:
            lo, hi = int(plan.update_offsets[u]), int(plan.update_offsets[u + 1])
            batches += [micro[m] for m in range(lo, hi)]
            packed += [True] * (hi - lo)
            step_n += rows[lo:hi]
            step_len += row_len[lo:hi]
        else:
            batches += split_batches[u]
            packed += [False] * len(split_batches[u])
            step_n += [b.size for b in split_batches[u]]
            step_len += [int(lens[b[-1]]) for b in split_batches[u]]  # shortest first
        ends.append(len(batches))
    return PackChoice(
        plan,
        Plan.from_batches(batches),
        np.asarray(packed, dtype=bool),
        np.asarray(ends, dtype=np.int64),
        choice,
        seconds,
        whole_fits,
        (np.asarray(step_n, dtype=np.int64), np.asarray(step_len, dtype=np.int64)),
        from_fixed,
    )


def packed_stats(
    lengths: Any,
    pack_len: int,
    *,
    batch_size: int,
    cost: CostLike = "quadratic",
    max_cost: float | None = None,
    step_time: Any = None,
    oversize: str = "error",
    seed: int = 0,
    epoch: int = 0,
) -> PlanStats:
    """``dynbatch stats``' ``packed`` row: the packed plan's rows, each counted as a batch.

    A row is one padded sequence of ``pack_len`` tokens: ``batches`` are rows,
    the batch sizes are samples per row, a row costs ``cost(1, pack_len)`` (an
    oversize row its own length), and ``padding_efficiency`` is the plan's
    (real tokens / ``rows * pack_len``). Micro-batches hold the most rows
    ``max_cost`` allows. With ``step_time``, ``seconds`` is the epoch of
    :func:`choose_packing`: each update packed, split or whole, the fastest.

    >>> s = packed_stats([5, 3, 4, 2, 6, 7], 8, batch_size=3, cost="linear", max_cost=16)
    >>> s.batches, s.updates, s.padding_efficiency, s.cost_max
    (4, 2, 0.84375, 8.0)
    """
    fn = resolve_cost(cost)
    max_rows = None
    if step_time is not None:
        chosen = choose_packing(
            lengths,
            pack_len,
            batch_size=batch_size,
            time_model=step_time,
            max_cost=max_cost,
            cost=cost,
            oversize=oversize,
            seed=seed,
            epoch=epoch,
        )
        plan, seconds = chosen.plan, chosen.epoch_seconds
    else:
        if max_cost is not None:
            max_rows = max(1, int(batch_capacity([pack_len], PlanOptions(max_cost, cost=cost))[0]))
        plan = plan_packs(
            lengths,
            pack_len,
            batch_size=batch_size,
            max_rows=max_rows,
            oversize=oversize,
            seed=seed,
            epoch=epoch,
        )
        seconds = None
    tokens = plan.row_tokens
    padded = np.maximum(tokens, plan.pack_len)
    sizes = np.diff(plan.row_offsets)
    costs = np.asarray(fn(np.ones_like(padded), padded), dtype=np.float64).reshape(-1)
    mean = float(costs.mean()) if costs.size else 0.0
    return replace(
        PlanStats(
            batches=int(sizes.size),
            samples=int(sizes.sum()),
            real_tokens=int(tokens.sum()),
            padded_tokens=int(padded.sum()),
            padding_efficiency=plan.efficiency,
            batch_size_min=int(sizes.min()) if sizes.size else 0,
            batch_size_median=float(np.median(sizes)) if sizes.size else 0.0,
            batch_size_max=int(sizes.max()) if sizes.size else 0,
            cost_max=float(costs.max()) if costs.size else 0.0,
            cost_median=float(np.median(costs)) if costs.size else 0.0,
            cost_mean=mean,
            cost_cv=float(costs.std() / mean) if mean > 0 else 0.0,
            utilization=None if max_cost is None else mean / float(max_cost),
        ),
        updates=plan.num_updates,
        seconds=seconds,
    )
