"""Share a global plan among data-parallel ranks: pure numpy, no communication.

NOTE [ equal steps without dropping or repeating ]
    Every rank computes the same global plan from ``(seed, epoch)`` and takes
    its share, so no rank ever needs to talk to another about data. The share
    must be the same number of batches on every rank: a rank with one batch
    more waits in an all-reduce that never comes (with gloo: "Connection reset
    by peer"). Instead of dropping batches, repeating samples or adding dummy
    batches, the planner's batches are *split*: the heaviest batch is cut into
    two parts of alternating lengths (both fit, as the cost grows with ``n``;
    both stay multiples of ``batch_size_multiple`` whenever the batch holds
    two multiples) until the count divides ``num_replicas``. Only when every
    batch is a single sample (fewer samples than ranks, or all oversize) can
    the count not be evened out; then the cheapest batches are repeated and
    flagged in ``is_padding`` so the loss can give them weight 0.
    ``drop_last`` is the planner's: the one batch per epoch that ended because
    samples ran out is dropped (NOTE [ what drop_last drops ] in
    :mod:`dynbatch.plan.planning`); the ranks' counts are still evened by splitting.
    Dropping whole batches to even the count would either drop the smallest
    batches, which hold the longest samples, every epoch (biased), or random
    batches, which can hold hundreds of short samples (wasteful).

NOTE [ balanced steps ]
    A step lasts as long as its slowest rank's *compute*, which is not the
    memory cost: n=5 at L=512 and n=1,108 at L=34 cost the same n·L² but carry
    2,560 against 37,672 tokens. Batches are therefore grouped into steps by a
    compute model (``options.balance``: padded tokens n·L by default, the cost,
    or any ``(n, L)`` function such as a fitted step-time model): sorted by
    compute and cut into steps of ``num_replicas``, which minimises the summed
    per-step maximum for the batches given. While the slowest rank still
    waits more than ``tolerance`` (summed over the epoch), the ``num_replicas``
    heaviest batches are split, which never breaks the budget. The steps are
    then shuffled (random orders) or, for the sorted and dataset orders, the
    plan's order is kept and consecutive batches form a step.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from numbers import Real
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._checks import InputError, InputTypeError, check_batches, check_int, check_replicas
from .costs import charge
from .lengths import check_plan_lengths, is_pairs, reduce_batches, sample_tokens
from .options import PlanOptions, resolve_options
from .planning import padded_lengths
from .plans import Plan

__all__ = ["ShardedPlan", "shard_plan", "step_imbalance"]

#: Stop splitting for balance when the slowest rank over the mean, summed over the epoch,
#: is at most this, or when splits have added this fraction of batches.
TOLERANCE = 1.05
MAX_EXTRA_FRACTION = 0.25


class ShardedPlan:
    """Batches in step-major order: step ``s`` of rank ``r`` is ``plan[s * num_replicas + r]``.

    Held as the batches in any order (``base``) and the step-major ``order``
    of their positions, so a rank's share is gathered in one step and the full
    reordered plan is only built if asked for.

    Args:
        base: the batches, in any order.
        order: the step-major order of ``base``'s batches: ``num_replicas`` a step.
        is_padding: per entry of ``order``, True where a batch only repeats samples to even
            out the ranks' step counts (when there are fewer samples than ranks).
        num_replicas: the number of data-parallel ranks.
        window_ends: when the options ask for updates (``update_size``), the steps after
            which each optimizer update ends (updates with lengths mixed); None: every step is
            an update.
    """  # NOTE [ mixed updates ] in dynbatch.plan.windows

    __slots__ = ("_plan", "base", "is_padding", "num_replicas", "order", "window_ends")

    def __init__(
        self,
        base: Plan,
        order: NDArray[Any],
        is_padding: NDArray[Any],
        num_replicas: int,
        window_ends: NDArray[Any] | None = None,
    ) -> None:
        self.base = base
        self.order: NDArray[np.int64] = np.asarray(order, dtype=np.int64)
        self.is_padding: NDArray[np.bool_] = np.asarray(is_padding, dtype=bool)
        self.num_replicas = num_replicas
        self.window_ends: NDArray[np.int64] | None = (
            None if window_ends is None else np.asarray(window_ends, dtype=np.int64)
        )
        self._plan: Plan | None = None

    @property
    def num_steps(self) -> int:
        return int(self.order.size) // self.num_replicas

    @property
    def plan(self) -> Plan:
        """Every rank's batches, step-major."""
        if self._plan is None:
            self._plan = self.base.take(self.order)
        return self._plan

    @property
    def sizes(self) -> NDArray[np.int64]:
        """Samples per batch, step-major."""
        return self.base.sizes[self.order]

    def real_tokens(self, lengths: NDArray[Any]) -> NDArray[np.int64]:
        """Sum of the (unpadded) lengths per batch, step-major (for pairs, a row of the
        source's and the target's per batch).

        Args:
            lengths: the lengths the plan was made from.
        """
        base = self.base
        if len(base) == 0:
            return np.zeros(0, dtype=np.int64)
        return reduce_batches(np.add, lengths, base.indices, base.offsets[:-1])[self.order]

    def for_rank(self, rank: int) -> Plan:
        """This rank's batches, in order.

        Args:
            rank: the rank, in ``[0, num_replicas)``.
        """
        return self.base.take(self.order[self._rank(rank) :: self.num_replicas])

    def padding_for_rank(self, rank: int) -> NDArray[np.bool_]:
        """Which of this rank's batches repeat a sample only to even out the steps.

        Args:
            rank: the rank, in ``[0, num_replicas)``.
        """
        return self.is_padding[self._rank(rank) :: self.num_replicas]

    def _rank(self, rank: Any) -> int:
        """``rank``, checked: an integer in ``[0, num_replicas)``."""
        checked = int(check_int("rank", rank, minimum=-(2**62)))
        if not 0 <= checked < self.num_replicas:
            raise InputError(
                f"rank must be in [0, {self.num_replicas}), the plan's ranks, got rank={checked}"
            )
        return checked

    def longest(self, lengths: NDArray[Any]) -> NDArray[np.int64]:
        """The longest (unpadded) length per batch, step-major (for pairs, a row of the longest
        source and the longest target per batch).

        Args:
            lengths: the lengths the plan was made from.
        """
        base = self.base
        if len(base) == 0:
            return np.zeros(0, dtype=np.int64)
        return reduce_batches(np.maximum, lengths, base.indices, base.offsets[:-1])[self.order]

    def reorder_steps(self, steps: NDArray[Any], window_ends: NDArray[Any]) -> ShardedPlan:
        """The same batches, the steps in another order.

        Args:
            steps: the step positions, in their new order.
            window_ends: the steps (of the new order) after which each update ends.
        """
        rows = self.order.reshape(-1, self.num_replicas)[steps].reshape(-1)
        padding = self.is_padding.reshape(-1, self.num_replicas)[steps].reshape(-1)
        return ShardedPlan(self.base, rows, padding, self.num_replicas, window_ends)

    def digest(self) -> str:
        """A hash of every rank's batches and their order."""
        h = hashlib.blake2b(digest_size=16)
        for part in (self.base.offsets, self.base.indices, self.order, self.is_padding):
            h.update(part.tobytes())
        if self.window_ends is not None:
            h.update(b"windows" + self.window_ends.tobytes())
        h.update(str(self.num_replicas).encode())
        return h.hexdigest()

    def __repr__(self) -> str:
        return f"ShardedPlan({self.num_steps} steps x {self.num_replicas} ranks)"


class _Batches:
    """A plan being split: members, offsets and per-batch size, longest length and flags.

    For pairs the longest length of a batch is a row, its longest source and longest target,
    and a batch is split in the order of its samples' tokens (NOTE [ lengths of pairs ] in
    :mod:`dynbatch.plan.lengths`).
    """

    def __init__(self, plan: Plan, plens: NDArray[Any], owned: bool = False) -> None:
        self.indices = plan.indices  # copied before the first split changes it, unless owned
        self.offsets = plan.offsets
        self._owned = owned
        self.plens = plens
        self.key = sample_tokens(plens)  # what a batch is split in the order of
        sizes = plan.sizes
        self.longest = (
            reduce_batches(np.maximum, plens, self.indices, self.offsets[:-1])
            if sizes.size
            else np.zeros((0, *plens.shape[1:]), dtype=np.int64)
        )
        self.padding = np.zeros(sizes.size, dtype=bool)

    @property
    def sizes(self) -> NDArray[np.int64]:
        return np.diff(self.offsets)

    def __len__(self) -> int:
        return int(self.offsets.size - 1)

    def splittable(self, multiple: int) -> tuple[NDArray[Any], NDArray[Any]]:
        """Batches that can be split, and those whose parts can both stay multiples."""
        sizes = self.sizes
        return sizes >= 2, sizes >= 2 * multiple

    def split(self, which: NDArray[Any], multiple: int) -> None:
        """Cut each batch in ``which`` into two parts of alternating lengths."""
        which = np.unique(which)
        if not self._owned:
            self.indices, self._owned = self.indices.copy(), True
        cuts = np.empty(which.size, dtype=np.int64)
        first_long = np.empty((which.size, *self.plens.shape[1:]), dtype=np.int64)
        second_long = np.empty((which.size, *self.plens.shape[1:]), dtype=np.int64)
        for k, i in enumerate(which.tolist()):
            a, b = int(self.offsets[i]), int(self.offsets[i + 1])
            size = b - a
            part = multiple * (size // (2 * multiple)) if size >= 2 * multiple else size // 2
            members = self.indices[a:b]
            by_len = members[np.argsort(self.key[members], kind="stable")]
            # evenly spaced picks over the sorted members: both parts span the same lengths
            pick = np.zeros(size, dtype=bool)
            pick[(np.arange(part) * size) // part] = True
            first, second = by_len[pick], by_len[~pick]
            self.indices[a:b] = np.concatenate([first, second])
            cuts[k] = a + part
            first_long[k] = self.plens[first].max(axis=0)
            second_long[k] = self.plens[second].max(axis=0)
        self.offsets = np.insert(self.offsets, which + 1, cuts)
        self.longest[which] = first_long
        self.longest = np.insert(self.longest, which + 1, second_long, axis=0)
        self.padding = np.insert(self.padding, which + 1, False)

    def repeat(self, which: NDArray[Any]) -> None:
        """Append copies of the batches ``which``, flagged as padding."""
        extra = Plan(self.indices, self.offsets).take(which)
        self.indices = np.concatenate([self.indices, extra.indices])
        self.offsets = np.concatenate([self.offsets, self.offsets[-1] + extra.offsets[1:]])
        self.longest = np.concatenate([self.longest, self.longest[which]])
        self.padding = np.concatenate([self.padding, np.ones(which.size, dtype=bool)])

    def plan(self) -> Plan:
        return Plan(self.indices, self.offsets)


def _heaviest(work: NDArray[Any], allowed: NDArray[Any], k: int) -> NDArray[Any]:
    """Indices of the ``k`` heaviest batches among ``allowed``."""
    candidates: NDArray[Any] = np.flatnonzero(allowed)
    if candidates.size <= k:
        return candidates
    return np.asarray(candidates[np.argpartition(work[candidates], -k)[-k:]])


def _split_heaviest(batches: _Batches, work: NDArray[Any], count: int, multiple: int) -> int:
    """Split up to ``count`` of the heaviest batches, preferring ones that stay multiples."""
    can, keeps_multiple = batches.splittable(multiple)
    chosen = _heaviest(work, keeps_multiple, count)
    if chosen.size < count:
        chosen = np.union1d(chosen, _heaviest(work, can & ~keeps_multiple, count - chosen.size))
    if chosen.size:
        batches.split(chosen, multiple)
    return int(chosen.size)


def step_imbalance(work: NDArray[Any], num_replicas: int) -> float:
    """Sum over steps of the slowest rank's work over the sum of the mean (1.0: nobody waits).

    ``work`` is per batch in step-major order.

    >>> step_imbalance(np.array([1.0, 3.0, 2.0, 2.0]), 2)
    1.25
    """
    steps = np.asarray(work, dtype=np.float64).reshape(-1, num_replicas)
    mean = steps.mean(axis=1).sum()
    return float(steps.max(axis=1).sum() / mean) if mean > 0 else 1.0


def shard_plan(
    plan: Sequence[Any],
    lengths: Any,
    num_replicas: int,
    *,
    epoch: int = 0,
    num_batches: int | None = None,
    tolerance: float = TOLERANCE,
    options: PlanOptions | None = None,
    **shortcuts: Any,
) -> ShardedPlan:
    """Arrange a plan into steps of ``num_replicas`` batches of similar compute.

    Args:
        plan: the global plan (from :func:`~dynbatch.plan_batches`).
        lengths: the lengths the plan was made from.
        num_replicas: number of data-parallel ranks.
        epoch: with ``options.seed``, seeds the shuffle of the steps.
        num_batches: split batches until there are this many (``equal_epochs``);
            default: the plan's count rounded up to a multiple of ``num_replicas``.
        tolerance: split the heaviest batches while the summed slowest-rank
            work over the mean exceeds this (random orders only).
        options: the :class:`~dynbatch.PlanOptions` the plan was made with (or
            its fields as keywords): ``balance``, ``pad_to_multiple_of``,
            ``batch_size_multiple``, ``seed`` and whether the
            order is random are used here.
        **shortcuts: :class:`~dynbatch.PlanOptions` fields as keywords, instead of
            ``options``.

    Every rank gets the same number of batches (a rank with one more would wait forever in
    its all-reduce): the heaviest batches are split, none dropped or repeated. Batches are
    grouped into steps by compute (``options.balance``), not the memory cost, so that no rank
    waits long for the slowest.

    Three batches on two ranks: the heaviest is split, none is dropped.

    >>> plan = [np.array([0, 1, 2, 3]), np.array([4]), np.array([5])]
    >>> sp = shard_plan(plan, [1, 2, 3, 4, 5, 6], 2, max_cost=100, order="none")
    >>> [b.tolist() for b in sp.for_rank(0)], [b.tolist() for b in sp.for_rank(1)]
    ([[0, 2], [4]], [[1, 3], [5]])
    """  # NOTE [ equal steps without dropping or repeating ], NOTE [ balanced steps ]
    lens = check_plan_lengths(lengths)
    replicas = check_replicas(num_replicas)
    epoch = check_int("epoch", epoch)
    _check_tolerance(tolerance)
    opts = resolve_options(options, shortcuts, "shard_plan", pairs=is_pairs(lens))
    if not isinstance(plan, Plan):
        plan = _checked_plan(plan, len(lens))
    if num_batches is not None:
        num_batches = check_int("num_batches", num_batches)
        if num_batches % replicas or num_batches < len(plan):
            raise InputError(
                f"num_batches must be a multiple of num_replicas={replicas} and at least the "
                f"plan's {len(plan)} batches, got num_batches={num_batches}"
            )
    return shard_checked(plan, lens, replicas, epoch, num_batches, tolerance, opts)


def shard_checked(
    plan: Plan,
    lens: NDArray[np.int64],
    replicas: int,
    epoch: int,
    num_batches: int | None,
    tolerance: float,
    opts: PlanOptions,
    owned: bool = False,
) -> ShardedPlan:
    """:func:`shard_plan` on checked inputs; ``owned``: the plan's arrays may be changed."""
    fn = opts.balance_fn()
    multiple = opts.batch_size_multiple
    plens = padded_lengths(lens, opts.pad_to_multiple_of)
    if plens.max(initial=0) < 2**31:  # a smaller gather: the per-batch longest reads them all
        plens = plens.astype(np.int32)
    batches = _Batches(plan, plens, owned)

    def work() -> NDArray[np.float64]:
        return np.asarray(charge(fn, batches.sizes, batches.longest, "balance"), dtype=np.float64)

    target = -(-len(batches) // replicas) * replicas if num_batches is None else num_batches
    if target and not len(batches):  # nothing to split or repeat: the loop below would not end
        raise InputError(
            f"the plan has no batch, so it cannot be made into num_batches={target} batches"
        )
    while len(batches) < target:
        if not _split_heaviest(batches, work(), target - len(batches), multiple):
            cheapest = np.argsort(work(), kind="stable")[: target - len(batches)]
            while cheapest.size < target - len(batches):  # fewer batches than ranks
                cheapest = np.concatenate([cheapest, cheapest])
            batches.repeat(cheapest[: target - len(batches)])
    if not opts.random_order or len(batches) == 0:
        return ShardedPlan(batches.plan(), np.arange(len(batches)), batches.padding, replicas)
    costs = work()
    by_work = np.argsort(costs, kind="stable")
    if num_batches is None:
        by_work = _split_for_balance(
            batches, fn, costs, by_work, work, replicas, tolerance, multiple
        )
    steps = by_work.reshape(-1, replicas)
    rng = np.random.default_rng([opts.seed, epoch, replicas])
    order = steps[rng.permutation(len(steps))].reshape(-1)
    return ShardedPlan(batches.plan(), order, batches.padding[order], replicas)


def _split_for_balance(
    batches: _Batches,
    fn: Any,
    costs: NDArray[np.float64],
    by_work: NDArray[np.int64],
    work: Any,
    replicas: int,
    tolerance: float,
    multiple: int,
) -> NDArray[np.int64]:
    """Split the ``replicas`` heaviest batches while it helps (NOTE [ balanced steps ]).

    Each round first estimates the split (both parts at the batch's longest length, which
    can only overestimate them) and splits only if that lowers the imbalance. Returns the
    batches' order by work (``by_work`` when nothing was split).
    """
    if replicas == 1:
        return by_work
    budget = int(MAX_EXTRA_FRACTION * len(batches))
    added = 0
    current = step_imbalance(costs[by_work], replicas)
    while current > tolerance and added + replicas <= budget:
        sizes = batches.sizes
        keeps_multiple = sizes >= 2 * multiple  # balance never breaks a multiple
        chosen = _heaviest(costs, keeps_multiple, replicas)
        if chosen.size < replicas:
            break
        first = multiple * (sizes[chosen] // (2 * multiple)) if multiple > 1 else sizes[chosen] // 2
        longest = batches.longest[chosen]
        estimate = np.concatenate(
            [
                np.delete(costs, chosen),
                np.asarray(charge(fn, first, longest, "balance"), dtype=np.float64),
                np.asarray(charge(fn, sizes[chosen] - first, longest, "balance"), dtype=np.float64),
            ]
        )
        if step_imbalance(np.sort(estimate), replicas) >= current:
            break
        batches.split(chosen, multiple)
        costs = work()
        by_work = np.argsort(costs, kind="stable")
        current, added = step_imbalance(costs[by_work], replicas), added + replicas
    return by_work


def _checked_plan(batches: Sequence[Any], n: int) -> Plan:
    """A plan from index lists, refusing what no planner makes: bad, repeated or empty batches."""
    return Plan.from_batches(check_batches(batches, n, "plan", unique=True, allow_empty=True))


def _check_tolerance(tolerance: Any) -> None:
    wrong_type = isinstance(tolerance, (bool, np.bool_)) or not isinstance(tolerance, Real)
    if wrong_type or not tolerance >= 1:  # inf: never split for balance
        raise (InputTypeError if wrong_type else InputError)(
            "tolerance must be a number >= 1 (the summed slowest-rank work over the mean; inf "
            f"never splits), got tolerance={tolerance!r}"
        )
