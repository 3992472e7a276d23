"""The plan of one epoch for every rank, and the faster of two plans: numpy only.

:func:`plan_epoch` plans, then shards, one epoch; with ``fixed_step_size`` it keeps the faster
of :func:`epoch_candidates`' two plans (NOTE [ the faster plan of each epoch ]).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._checks import InputError, InputTypeError, check_int
from .equal_epochs import draw_for_count, equal_batch_count, no_batch_left
from .lengths import check_pair_loss_tokens, check_plan_lengths, is_pairs
from .options import PlanOptions
from .packs import plan_packed
from .pair_steptime import refuse_time_model_for
from .pairs import check_pair_options
from .planning import plan_draw
from .sharding import TOLERANCE, ShardedPlan, shard_checked
from .splits import epoch_seconds, plan_split_updates
from .windows import mix_updates

__all__ = ["epoch_candidates", "faster_candidate", "plan_epoch"]


def plan_epoch(
    lengths: Any,
    options: PlanOptions,
    epoch: int,
    num_replicas: int = 1,
    *,
    num_batches: int | None = None,
    loss_tokens: Any = None,
) -> ShardedPlan:
    """Every rank's batches for ``epoch``: plan, then shard (``num_batches`` for equal epochs).

    With ``options.pack_len`` the batches are packed micro-batches: the fixed batch's updates,
    each packed into rows.

    Args:
        lengths: per-sample lengths (positive integers), e.g. token counts; or an ``[N, 2]``
            array of (source, target) lengths.
        options: the :class:`~dynbatch.PlanOptions` to plan with.
        epoch: the epoch, from 0: the random orders are a pure function of ``(seed, epoch)``.
        num_replicas: the ranks the plan is shared among (every rank plans the same).
        num_batches: with ``options.equal_epochs``, the batches every epoch has (default: as
            the sampler counts them).
        loss_tokens: per sample, the tokens that carry a loss (at most its length): what
            updates in ``"tokens"`` count, when only some tokens carry one (a masked
            prompt's do not); the cost still plans on the lengths.

    >>> sp = plan_epoch([3, 1, 4, 1, 5, 9, 2, 6], PlanOptions(max_cost=20, cost="linear"), 0, 2)
    >>> sp.num_steps, sorted(sp.plan.indices.tolist())
    (2, [0, 1, 2, 3, 4, 5, 6, 7])
    """  # NOTE [ packed updates ] in dynbatch.plan.packs.epochs
    lengths = check_plan_lengths(lengths)
    if not isinstance(options, PlanOptions):
        raise InputTypeError(f"options must be a dynbatch.PlanOptions, got options={options!r}")
    if is_pairs(lengths):  # NOTE [ planning pairs ] in dynbatch.plan.pairs
        check_pair_options(options, "plan_epoch")
    else:  # NOTE [ a step time of two lengths ] in dynbatch.plan.pair_steptime
        refuse_time_model_for(options.time_model, False, "plan_epoch")
    loss_tokens = check_pair_loss_tokens(loss_tokens, lengths)
    epoch = check_int("epoch", epoch)
    num_replicas = check_int("num_replicas", num_replicas, minimum=1)
    if num_batches is not None:
        num_batches = check_int("num_batches", num_batches, minimum=1)
    if options.pack_len is not None:  # NOTE [ packed updates ], [ choosing packing per update ]
        return plan_packed(lengths, options, epoch, num_replicas, loss_tokens)
    if options.fixed_step_size is not None:  # NOTE [ the faster plan of each epoch ]
        return _faster_plan(lengths, options, epoch, num_replicas, loss_tokens)
    if options.time_model is not None:  # NOTE [ splitting updates at the step time ]
        return plan_split_updates(lengths, options, epoch, num_replicas)
    plan = plan_draw(lengths, options, epoch, shuffle_batches=False)  # sharding orders them
    if options.equal_epochs:
        if not len(plan):
            raise InputError(no_batch_left(len(lengths), options, epoch))
        if num_batches is None:
            num_batches = equal_batch_count(lengths, options, num_replicas)
        plan = draw_for_count(plan, lengths, options, epoch, num_batches, num_replicas)
    sharded = shard_checked(
        plan,
        lengths,
        num_replicas,
        epoch,
        num_batches if options.equal_epochs else None,
        TOLERANCE,
        options,
        owned=True,  # planned here, seen by no one else
    )
    if options.update_size is None:
        return sharded
    return mix_updates(sharded, lengths, options, epoch, loss_tokens)


def _faster_plan(
    lengths: NDArray[np.int64],
    options: PlanOptions,
    epoch: int,
    num_replicas: int,
    loss_tokens: NDArray[Any] | None,
) -> ShardedPlan:
    """The faster of ``options``' two plans of ``epoch`` (NOTE [ the faster plan of each epoch ]).

    NOTE [ the faster plan of each epoch ]
        :func:`~dynbatch.like_fixed` given a time model has two plans: the
        padding-free split (mixed updates of near-equal micro-batches) and
        the fixed batch's own updates cut at the step time (never predicted
        slower than the fixed batch). Which is faster depends on the draw:
        chosen once, on epoch 0, a later epoch of a small corpus could be
        predicted slower than the fixed batch. So every epoch plans both and
        keeps the one whose predicted time is less (the padding-free one on
        a tie). The choice is a pure function of the options, the lengths
        and the epoch, as each plan is: every rank, and a resumed run, make
        the same one, and ``steps_for_epochs`` counts the plan kept (both
        have the fixed batch's update count). An epoch is so never predicted
        slower than the time split, and so than the fixed batch.
    """
    plans, seconds = epoch_candidates(lengths, options, epoch, num_replicas, loss_tokens)
    return plans[faster_candidate(seconds)]


def faster_candidate(seconds: dict[str, float]) -> str:
    """Which of :func:`epoch_candidates`' plans an epoch keeps: the faster, the padding-free
    one on a tie (NOTE [ the faster plan of each epoch ])."""
    return "time split" if seconds["time split"] < seconds["padding-free"] else "padding-free"


def epoch_candidates(
    lengths: NDArray[np.int64],
    options: PlanOptions,
    epoch: int,
    num_replicas: int,
    loss_tokens: NDArray[Any] | None = None,
) -> tuple[dict[str, ShardedPlan], dict[str, float]]:
    """The two plans of ``epoch`` that ``fixed_step_size`` chooses between, and their seconds.

    Keys ``"padding-free"`` and ``"time split"``; the faster is kept, the padding-free one
    on a tie (NOTE [ the faster plan of each epoch ]). The Trainer's log reads it too.
    """
    model, step = options.time_model, options.fixed_step_size
    if model is None or step is None:
        raise InputError(
            "epoch_candidates: options must hold a time_model and a fixed_step_size (as "
            f"like_fixed(..., time_model=...) makes), got time_model={model!r}, "
            f"fixed_step_size={step!r}"
        )
    plans = {
        "padding-free": plan_epoch(
            lengths,
            options.replace(time_model=None, fixed_step_size=None),
            epoch,
            num_replicas,
            loss_tokens=loss_tokens,
        ),
        "time split": plan_split_updates(
            lengths,
            options.replace(order="shuffle", max_batch_size=step, fixed_step_size=None),
            epoch,
            num_replicas,
        ),
    }
    pad = options.pad_to_multiple_of
    seconds = {
        name: epoch_seconds(plan, lengths, model, pad, name="time_model")
        for name, plan in plans.items()
    }
    return plans, seconds
