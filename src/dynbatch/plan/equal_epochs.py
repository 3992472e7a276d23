"""Equal epochs: every epoch planned in one batch count (NOTE [ equal epochs ]): numpy only.

:func:`equal_batch_count` fixes the count; :func:`draw_for_count` draws an epoch until it fits.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._checks import InputError
from .lengths import check_plan_lengths
from .options import PlanOptions
from .planning import find_oversize, plan_draw
from .plans import Plan

__all__ = [
    "EQUAL_EPOCH_PROBES",
    "MAX_DRAWS",
    "draw_for_count",
    "equal_batch_count",
    "no_batch_left",
]

#: Epochs planned to fix the batch count of ``equal_epochs`` (NOTE [ equal epochs ]).
EQUAL_EPOCH_PROBES = 8
#: Draws of one epoch tried for ``equal_epochs`` before it is refused (NOTE [ equal epochs ]).
MAX_DRAWS = 1000


def equal_batch_count(lengths: Any, options: PlanOptions, num_replicas: int = 1) -> int:
    """The batch count every epoch gets under ``equal_epochs`` (NOTE [ equal epochs ]).

    NOTE [ equal epochs ]
        Random orders give a slightly different number of batches each epoch,
        and code that sizes a learning-rate schedule from ``len(sampler)``
        (paddlenlp's Trainer does) needs one number. The count is fixed as the
        largest over the first few epochs' plans, rounded up to a multiple of
        ``num_replicas``. An epoch with fewer batches has its heaviest batches
        split (never breaking the budget, never dropping or repeating). An
        epoch drawn with more batches, or (``drop_last``) with fewer samples
        left than the count, so that splitting would run out of batches to
        split and have to repeat samples, is drawn anew from ``(seed, epoch,
        draw)`` until it fits, so every epoch's plan is still a pure function
        of ``(seed, epoch)``. An epoch no draw of :data:`MAX_DRAWS` fits is an
        :class:`~dynbatch.InputError` naming ``equal_epochs`` (and
        ``drop_last``), never a repeat: on one rank a sample is never used
        twice in an epoch. On several ranks the one exception is the one of
        NOTE [ equal steps without dropping or repeating ]: when there are
        fewer samples than the count (fewer than ranks, or single-sample
        batches that do not divide among them), or when no draw avoids it and
        the draw taken would be padded by :func:`shard_plan` alone (its
        batches split into single samples that do not divide among the
        ranks), flagged repeats make it up.
        ``drop_last`` leaving no batch at all is refused too: no count fits it.
    """
    lens = check_plan_lengths(lengths)
    probes = EQUAL_EPOCH_PROBES if options.random_order else 1
    most = 0
    for epoch in range(probes):
        plan = plan_draw(lens, options, epoch, shuffle_batches=False)
        if not len(plan):
            raise InputError(no_batch_left(len(lens), options, epoch))
        most = max(most, len(plan))
    return max(-(-most // num_replicas) * num_replicas, num_replicas)


def no_batch_left(samples: int, options: PlanOptions, epoch: int) -> str:
    """Why ``equal_epochs`` cannot plan an epoch that ``drop_last`` left empty."""
    return (
        f"drop_last=True leaves no batch in epoch {epoch}: all {samples} samples fit in one "
        f"batch under max_cost={options.max_cost:g}, and drop_last drops it as the batch that "
        "ended only because the samples ran out; equal_epochs=True needs at least one batch per "
        "epoch. Pass drop_last=False, or a smaller max_cost"
    )


def _plannable(lens: NDArray[np.int64], options: PlanOptions) -> int:
    """Samples a plan can hold at most: all but those ``oversize="skip"`` leaves out."""
    if options.oversize != "skip":
        return len(lens)
    return int(len(lens) - find_oversize(lens, options=options).size)


def draw_for_count(
    plan: Plan,
    lens: NDArray[np.int64],
    options: PlanOptions,
    epoch: int,
    num_batches: int,
    num_replicas: int,
) -> Plan:
    """The first draw of ``epoch`` that splits into ``num_batches`` (NOTE [ equal epochs ])."""
    plannable = _plannable(lens, options)
    ceiling = max(-(-plannable // num_replicas) * num_replicas, num_replicas)
    if num_batches > ceiling:
        raise InputError(
            f"num_batches={num_batches} is more batches than equal_epochs can make from "
            f"{plannable} samples on num_replicas={num_replicas} without repeating samples; "
            f"give at most {ceiling}"
        )
    # fewer samples than batches (several ranks only): repeats cannot be avoided
    need = num_batches if plannable >= num_batches else 0
    draws = MAX_DRAWS if options.random_order else 1  # the other orders draw the same plan
    most_kept, fewest = 0, None
    fallback: Plan | None = None  # a draw even shard_plan would pad: repeats as documented
    for draw in range(draws):
        if draw:
            plan = plan_draw(lens, options, epoch, draw, shuffle_batches=False)
        kept = int(plan.sizes.sum())
        if len(plan) <= num_batches and kept >= need:
            return plan
        natural = max(-(-len(plan) // num_replicas) * num_replicas, num_replicas)
        if fallback is None and len(plan) <= num_batches and kept < natural:
            fallback = plan
        most_kept = max(most_kept, kept)
        fewest = len(plan) if fewest is None else min(fewest, len(plan))
    if fallback is not None:
        return fallback
    if most_kept < need:
        why = (
            f"with drop_last=True no draw kept {need} samples (at most {most_kept}), so "
            f"{num_batches} batches would repeat a sample. Pass drop_last=False or "
            "equal_epochs=False"
        )
    else:
        why = (
            f"every draw made more batches (at least {fewest}) or kept too few samples. Pass a "
            "larger num_batches or equal_epochs=False"
        )
    raise InputError(
        f"equal_epochs=True could not plan epoch {epoch} in exactly {num_batches} batches "
        f"in {draws} draw(s): {why}"
    )
