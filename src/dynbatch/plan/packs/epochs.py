"""The packed epoch: the fixed batch's updates, each packed into rows: numpy only.

NOTE [ packed updates ]
    Packing is a speed option, so it changes how an update is computed, never which samples it holds
    nor how many updates an epoch has. The fixed batch's updates are what the user's
    learning rate, warm-up and epochs were tuned for: ``ceil(N / B)`` of them, each ``B`` samples
    drawn at random (the last holds the rest). So the packed epoch draws exactly those: the kept
    samples shuffled from ``(seed, epoch)`` (:func:`~dynbatch.plan.splits.shuffled`, the order the
    time split draws its updates from) and cut every ``B``; then each update's samples are packed
    into rows of at most ``pack_len`` tokens (NOTE [ an update's rows ] in
    :mod:`dynbatch.plan.packs.rows`) and dealt to the ranks (NOTE [ dealing an update's rows ] in
    :mod:`dynbatch.plan.packs.deal`). A packed update's gradient is then the fixed batch's update's,
    to float order (``tests/test_pack_equivalence.py`` on Qwen2 and BERT; each sample alone in its
    row: ``tests/test_pack_isolation.py``; on 2 real ranks: ``tests/test_distributed.py``),
    whatever ``pack_len``, the lengths, the ranks or the time model.

    Packing each update alone leaves its last row part-filled, where packing
    the whole epoch fills nearly every row. The old whole-epoch packer bought
    that at the price of the updates: an update was whole rows, so where a
    row held more than ``B`` samples (short samples in long rows: the
    fine-tuning regime) the epoch made fewer, larger updates than the fixed
    batch. The part-filled row costs less than it did, since a micro-batch's
    rows are as wide as its fullest (NOTE [ a micro-batch's layout ] in
    :mod:`dynbatch.plan.packs.layout`).

    ``update_unit="tokens"`` cuts the same shuffled order where the running
    count of loss tokens passes each ``k / U`` of the total, ``U`` the fixed
    batch's count (NOTE [ mixed updates ] in :mod:`dynbatch.plan.windows`).
    ``oversize="skip"`` leaves out, before the draw, the samples longer than
    ``pack_len``; ``"alone"`` runs each as a micro-batch of its own.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np
from numpy.typing import NDArray

from ..._checks import (
    MAX_LENGTH,
    InputError,
    check_choice,
    check_int,
    check_lengths,
    check_loss_tokens,
)
from ..options import PlanOptions
from ..plans import Indices, Plan
from ..sharding import ShardedPlan
from ..splits import shuffled
from .attention import padding_free
from .deal import pack_and_deal
from .layout import packed_shapes

__all__ = ["PackPlan", "fixed_updates", "plan_packed_epoch", "plan_packs", "token_cuts"]

_OVERSIZE = ("error", "skip", "alone")
_UNITS = ("samples", "tokens")


def fixed_updates(
    lengths: Indices,
    pack_len: int,
    size: float,
    *,
    seed: int,
    epoch: int,
    oversize: str = "error",
    counted: Indices | None = None,
) -> Plan:
    """The fixed batch's updates of ``epoch`` (NOTE [ packed updates ]):
    updates of ``size`` samples, or of ``size`` of ``counted`` (loss tokens) on average.

    >>> [u.tolist() for u in fixed_updates(np.array([3, 1, 4, 1, 5]), 8, 2, seed=0, epoch=0)]
    [[1, 2], [4, 3], [0]]
    """
    over = lengths > pack_len
    if over.any() and oversize == "error":
        i = np.flatnonzero(over)
        raise InputError(
            f"{i.size} sample(s) are longer than pack_len={pack_len} (lengths[{int(i[0])}]="
            f"{int(lengths[i[0]])}); raise pack_len, truncate them, or pass oversize='skip' or "
            "'alone'"
        )
    kept = ~over if oversize == "skip" else np.ones(lengths.size, dtype=bool)
    if not kept.any():
        raise InputError(
            f"every sample is longer than pack_len={pack_len}; oversize='skip' would leave "
            "nothing to train on"
        )
    order = shuffled(np.flatnonzero(kept), seed, epoch)
    if counted is None:
        step = max(1, round(float(size)))
        return Plan(order, np.r_[np.arange(0, order.size, step), order.size].astype(np.int64))
    weights = counted[order]
    total = float(weights.sum())
    if total <= 0 or float(size) <= 0:  # no loss token to count (plan_packs cuts samples then)
        return Plan(order, np.array([0, order.size], dtype=np.int64))
    updates = max(1, math.ceil(total / float(size) - 1e-9))
    return Plan(order, token_cuts(weights, updates))


def token_cuts(weights: Indices, updates: int) -> Indices:
    """Offsets cutting ``weights`` (in order) into ``updates`` runs of about equal sums, each
    of one sample at least (at most one a sample): the fixed batch's count, never fewer.

    >>> token_cuts(np.array([9, 0, 0, 0, 0, 0, 0, 1]), 8).tolist()
    [0, 1, 2, 3, 4, 5, 6, 7, 8]
    >>> token_cuts(np.array([3, 1, 2, 2, 4, 0]), 3).tolist()
    [0, 2, 4, 6]
    """
    n = weights.size
    u = max(1, min(int(updates), n))
    total = np.cumsum(weights)
    k = np.arange(1, u)
    ends = np.searchsorted(total, total[-1] * k / u, side="left") + 1  # where each share is met
    # strictly rising, room for the updates after: the k-th cut within [k, n - u + k]
    base = np.minimum(np.maximum.accumulate(np.maximum(ends - k, 0)), n - u)
    out: Indices = np.r_[0, base + k, n].astype(np.int64)
    return out


def plan_packed_epoch(
    lengths: NDArray[np.int64],
    options: PlanOptions,
    epoch: int,
    num_replicas: int = 1,
    loss_tokens: NDArray[Any] | None = None,
) -> ShardedPlan:
    """Every rank's packed micro-batches of ``epoch`` (NOTE [ packed updates ]), on checked inputs.

    >>> opts = PlanOptions(max_cost=16, cost="linear", pack_len=8, update_size=4)
    >>> sp = plan_packed_epoch(np.array([5, 3, 4, 2, 6, 1, 7, 8]), opts, 0, 2)
    >>> sp.num_steps, sp.window_ends.tolist(), sorted(sp.plan.indices.tolist())
    (2, [1, 2], [0, 1, 2, 3, 4, 5, 6, 7])
    """
    pack_len, size = options.pack_len, options.update_size
    if pack_len is None or size is None:
        raise InputError(
            "plan_packed_epoch plans options with pack_len and update_size, got "
            f"pack_len={pack_len!r}, update_size={size!r}"
        )
    tokens = options.update_unit == "tokens"
    updates = fixed_updates(
        lengths,
        pack_len,
        size,
        seed=options.seed,
        epoch=epoch,
        oversize=options.oversize,
        counted=(loss_tokens if loss_tokens is not None else lengths) if tokens else None,
    )
    by_work = padding_free(options.cost)  # NOTE [ dealing by work on a padding-free kernel ]
    return pack_and_deal(lengths, updates, pack_len, options.max_rows, num_replicas, by_work)


class PackPlan(Sequence[Indices]):
    """An epoch of packed updates on one rank: a sequence of micro-batches' sample indices.

    ``plan[m]`` is micro-batch ``m``'s samples in the order the collator must
    see them (row by row); :attr:`rows` are the rows as the collator builds
    them; :attr:`update_offsets` cut the micro-batches into updates; a
    micro-batch's rows are as wide as its fullest (:attr:`widths`).

    >>> plan = plan_packs([5, 3, 4, 2, 6], 8, batch_size=2, seed=0)
    >>> [u.tolist() for u in plan.updates], plan.num_updates
    ([[2, 1], [4, 3], [0]], 3)
    >>> [r.tolist() for r in plan.rows], plan.widths.tolist(), plan.efficiency
    ([[2, 1], [4, 3], [0]], [7, 8, 5], 1.0)

    Args:
        micro_batches: each micro-batch's sample indices, row after row.
        update_offsets: update ``u`` is micro-batches ``update_offsets[u]:update_offsets[u +
            1]``.
        lengths: the lengths planned on (all samples, skipped ones too).
        pack_len: the most tokens a row holds.
        skipped: the samples left out (``oversize="skip"``), ascending.
        multiple: a micro-batch's rows are as wide as its fullest, rounded up to this
            (``pad_to_multiple_of``).
    """

    __slots__ = (
        "lengths",
        "micro_batches",
        "micro_row_offsets",
        "pack_len",
        "row_offsets",
        "skipped",
        "update_offsets",
        "widths",
    )

    def __init__(
        self,
        micro_batches: Plan,
        update_offsets: Any,
        *,
        lengths: Any,
        pack_len: int,
        skipped: Any,
        multiple: int = 1,
    ) -> None:
        #: Each micro-batch's sample indices, row after row.
        self.micro_batches = micro_batches
        #: Update ``u`` is micro-batches ``update_offsets[u]:update_offsets[u + 1]``.
        self.update_offsets: Indices = np.asarray(update_offsets, dtype=np.int64)
        #: The lengths planned on (all samples, skipped ones too).
        self.lengths: Indices = np.asarray(lengths, dtype=np.int64)
        self.pack_len = pack_len
        #: Samples left out (``oversize="skip"``), ascending.
        self.skipped: Indices = np.asarray(skipped, dtype=np.int64)
        seq = self.lengths[micro_batches.indices]
        starts, counts, widths = packed_shapes(seq, micro_batches.offsets, pack_len, multiple)
        #: Row ``r`` is ``micro_batches.indices[row_offsets[r]:row_offsets[r + 1]]``.
        self.row_offsets: Indices = np.r_[starts, seq.size].astype(np.int64)
        #: Micro-batch ``m`` holds rows ``micro_row_offsets[m]:micro_row_offsets[m + 1]``.
        self.micro_row_offsets: Indices = np.r_[0, np.cumsum(counts)].astype(np.int64)
        #: Each micro-batch's row width: its fullest row, rounded up to the multiple.
        self.widths: Indices = widths

    @property
    def rows(self) -> Plan:
        """Every row's sample indices, micro-batch after micro-batch."""
        return Plan(self.micro_batches.indices, self.row_offsets)

    @property
    def rows_per_micro_batch(self) -> Indices:
        """Rows in each micro-batch: the collator's ``R``."""
        return np.diff(self.micro_row_offsets)

    @property
    def updates(self) -> Plan:
        """Every update's sample indices."""
        off = self.micro_batches.offsets[self.update_offsets]
        return Plan(self.micro_batches.indices, off)

    @property
    def num_updates(self) -> int:
        """Updates in the epoch."""
        return int(self.update_offsets.size - 1)

    @property
    def row_tokens(self) -> Indices:
        """Real tokens in each row."""
        lens = self.lengths[self.micro_batches.indices]
        return np.add.reduceat(lens, self.row_offsets[:-1]) if lens.size else lens

    @property
    def efficiency(self) -> float:
        """Real tokens over the tokens computed: each micro-batch's rows times its width."""
        computed = float((self.rows_per_micro_batch * self.widths).sum())
        return float(self.row_tokens.sum()) / computed if computed else 0.0

    def __len__(self) -> int:
        return len(self.micro_batches)

    @overload
    def __getitem__(self, i: int) -> Indices: ...
    @overload
    def __getitem__(self, i: slice) -> Plan: ...
    def __getitem__(self, i: int | slice) -> Indices | Plan:
        return self.micro_batches[i]

    def __iter__(self) -> Iterator[Indices]:
        return iter(self.micro_batches)

    def __repr__(self) -> str:
        return (
            f"PackPlan({len(self)} micro-batches, {self.row_offsets.size - 1} rows of at most "
            f"{self.pack_len}, {self.num_updates} updates, efficiency {self.efficiency:.3f})"
        )


def plan_packs(
    lengths: Any,
    pack_len: int,
    *,
    batch_size: int,
    loss_tokens: Any = None,
    update_unit: str = "samples",
    max_rows: int | None = None,
    oversize: str = "error",
    seed: int = 0,
    epoch: int = 0,
    pad_to_multiple_of: int = 1,
) -> PackPlan:
    """The fixed batch's updates of ``epoch``, each packed into rows of at most ``pack_len``.

    Every kept sample is in exactly one row, once; no row holds more than
    ``pack_len`` tokens (but an oversize sample with ``oversize="alone"``);
    the epoch has the fixed batch's ``ceil(N / batch_size)`` updates of
    ``batch_size`` samples each, the last the rest, drawn as the fixed batch
    draws them (packing changes how an update is computed, never which samples it
    holds nor how many updates an epoch has); the same ``(seed, epoch)`` gives the
    same plan.

    Args:
        lengths: tokens per sample.
        pack_len: the most tokens a row holds.
        batch_size: the fixed batch's samples per update.
        loss_tokens: per sample, its tokens with a loss; needed by
            ``update_unit="tokens"``.
        update_unit: ``"samples"``: updates of ``batch_size`` samples;
            ``"tokens"``: of the fixed batch's loss tokens, on average (where
            no kept sample has a loss token, of ``batch_size`` samples).
        max_rows: rows per micro-batch (from the memory budget); ``None``: an
            update is one micro-batch.
        oversize: a sample longer than ``pack_len``: ``"error"`` refuses it,
            ``"skip"`` leaves it out (:attr:`PackPlan.skipped`), ``"alone"``
            makes it a micro-batch of its own.
        seed: the shuffle's seed.
        epoch: the epoch, mixed into the seed.
        pad_to_multiple_of: a micro-batch's width, its fullest row, is rounded
            up to this.

    Returns:
        A :class:`PackPlan`.

    >>> plan = plan_packs([300, 200, 100, 400, 12], 512, batch_size=2)
    >>> sorted(int(i) for b in plan for i in b), bool(plan.row_tokens.max() <= 512)
    ([0, 1, 2, 3, 4], True)
    """  # NOTE [ packed updates ]
    lens = check_lengths(lengths)
    pack_len = check_int("pack_len", pack_len, minimum=1, maximum=MAX_LENGTH)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    update_unit = check_choice("update_unit", update_unit, _UNITS)
    oversize = check_choice("oversize", oversize, _OVERSIZE)
    max_rows = check_int("max_rows", max_rows, minimum=1, maximum=MAX_LENGTH, allow_none=True)
    seed = check_int("seed", seed)
    epoch = check_int("epoch", epoch)
    multiple = check_int("pad_to_multiple_of", pad_to_multiple_of, minimum=1, maximum=MAX_LENGTH)
    counts = check_loss_tokens(loss_tokens, lens)
    if update_unit == "tokens" and counts is None:
        raise InputError(
            "update_unit='tokens' cuts updates on loss tokens: pass loss_tokens= (per sample, "
            "its tokens with a loss), or update_unit='samples'"
        )
    skipped = np.flatnonzero(lens > pack_len) if oversize == "skip" else np.zeros(0, np.int64)
    kept = lens.size - skipped.size
    size: float = batch_size
    loss = 0.0 if counts is None else float(counts.sum() - counts[skipped].sum())
    by_tokens = update_unit == "tokens" and loss > 0  # none: the fixed batch's B samples
    if by_tokens:  # the fixed batch's loss tokens
        size = loss / max(1, -(-kept // batch_size))
    updates = fixed_updates(
        lens,
        pack_len,
        size,
        seed=seed,
        epoch=epoch,
        oversize=oversize,
        counted=counts if by_tokens else None,
    )
    sharded = pack_and_deal(lens, updates, pack_len, max_rows or lens.size, 1)
    return PackPlan(
        sharded.plan,
        np.r_[0, sharded.window_ends],
        lengths=lens,
        pack_len=pack_len,
        skipped=skipped,
        multiple=multiple,
    )
