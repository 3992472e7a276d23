"""The Trainer's training sampler: the options given or the fixed batch's recipe, planned at
the step time measured (or kept in ``output_dir``), given or none; a resume's at its own.

NOTE [ dynbatch's checks before the probe ]
    Measuring the step time runs real training steps for seconds
    (NOTE [ the Trainer measures the step time ] in :mod:`.probe`), so what dynbatch refuses
    must be refused before it, not after it or at the first step. With ``pack_len`` that is
    the samples' fields (those the probe reads: the longest batch, with their ``input_ids`` against
    ``lengths``, :func:`~.packing.check_samples`) and the plan's own checks (``pack_len``
    against the lengths and the fixed batch, the options): the sampler is planned once
    without a step time first, then again at the one measured. The model's kind is
    checked when the Trainer is made (:func:`~.packing.packed_model`), before either.

NOTE [ no probe on a CPU ]
    On a CPU a step costs what its tokens cost, so padding always costs: the plan
    without a step time (the padding-free split; with ``pack_len`` every update
    packed) is the CPU's own choice, as the samplers' default is
    (NOTE [ no time model on an accelerator ] in :mod:`dynbatch.paddle.sampler`). A
    step time measured there is noise-prone, and a plan that followed it changed
    from run to run (1 packed / 24 split updates in one run, 20 / 3 / 2 in the
    next). So the default ``time_model="auto"`` measures on an accelerator only;
    ``"measure"`` measures on any device. Where a measured (or kept) step time
    gives another plan than none would, the log says so at warning level, with
    the ``time_model=`` that keeps that plan in every run.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import paddle
from numpy.typing import NDArray

from ..._checks import InputError
from ...paddle.sampler import DistributedDynamicBatchSampler
from ...plan.options import PlanOptions
from ...plan.pair_steptime import PairStepTimeModel, check_step_time
from ...plan.steptime import StepTimeModel, check_time_model
from .arguments import train_sampler
from .checkpoints import STATE_FILE
from .packing import Packed, check_samples
from .probe import kept_time_model, measure_time_model, split_reason
from .seq2seq import refuse_packing, time_model_for

__all__ = [
    "AUTO",
    "MEASURE",
    "TrainPlanner",
    "checked_time_model",
    "current_device",
    "measures",
    "saved_step_time",
]

#: ``time_model=`` to measure the step time on the model (NOTE [ the Trainer measures ... ]).
MEASURE: Any = "measure"
#: ``time_model=`` default: :data:`MEASURE` on an accelerator, none on a CPU
#: (NOTE [ no probe on a CPU ]).
AUTO: Any = "auto"


def measures(time_model: Any) -> bool:
    """Whether ``time_model`` asks for the step time to be measured, on any device."""
    return isinstance(time_model, str) and time_model == MEASURE


def _auto(time_model: Any) -> bool:
    return isinstance(time_model, str) and time_model == AUTO


def current_device() -> str:
    """The device paddle runs on (``"cpu"``, ``"gpu:0"``, ...)."""
    return str(paddle.device.get_device())


def checked_time_model(time_model: Any, accumulate: str, planned: PlanOptions | None) -> Any:
    """``time_model=`` checked: ``"auto"``, ``"measure"``, None, or a step time the recipe
    follows: of one length (``c``, ``a``, ``b`` or ``"c,a,b"``) or of (source, target) pairs
    (a :class:`~dynbatch.plan.pair_steptime.PairStepTimeModel` or ``"c,a_s,a_t,b_s,b_t,cross"``;
    which one the lengths take is checked with them: NOTE [ the Trainer on pairs ])."""
    if _auto(time_model) or measures(time_model) or time_model is None:
        return time_model
    if planned is not None:
        raise InputError(
            "time_model= is for the fixed batch's recipe; the options given plan on their "
            f"own (PlanOptions(time_model=...)), got time_model={time_model!r}"
        )
    try:
        model = check_step_time(time_model)
    except InputError as exc:
        raise type(exc)(
            f"{exc}; or time_model='auto' (the default: measured on an accelerator), "
            "'measure' or None"
        ) from None
    if accumulate != "samples":
        raise InputError(
            f"time_model={time_model!r} cuts updates of samples at the step time, but with "
            f"accumulate={accumulate!r} the recipe keeps its padding-free split and would drop "
            "it: leave time_model out, or accumulate='samples'"
        )
    return model


class TrainPlanner:
    """Plans ``trainer``'s training sampler over ``dataset``.

    Args:
        trainer: the ``DynamicBatchTrainer`` (its model and collator are probed).
        args: the user's ``TrainingArguments`` (the Trainer runs on a copy:
            NOTE [ one Trainer epoch holds every real epoch ] in :mod:`.run`).
        dataset, lengths, loss_tokens: the training samples, checked lengths and counts.
        planned: the options given, or None for the fixed batch's recipe at ``args``.
        keywords: the plan options given as keywords (they refine the recipe).
        time_model: :func:`checked_time_model`'s.
        packed: how the Trainer packs, or None.

    Attributes:
        measures_step_time: whether the recipe follows a step time measured or kept in
            ``output_dir`` (NOTE [ the Trainer measures the step time ]); a resume plans by
            its checkpoint's own instead (:meth:`for_checkpoint`).
    """

    def __init__(
        self,
        trainer: Any,
        args: Any,
        dataset: Any,
        *,
        lengths: NDArray[np.int64],
        loss_tokens: Any,
        planned: PlanOptions | None,
        keywords: dict[str, Any],
        time_model: Any,
        packed: Packed | None,
    ) -> None:
        self.trainer, self.args, self.dataset, self.lengths = trainer, args, dataset, lengths
        self.given = time_model
        self.loss_tokens, self.planned, self.keywords = loss_tokens, planned, keywords
        refuse_packing(None if packed is None else packed.pack_len, None, lengths)
        time_model = time_model_for(  # NOTE [ the Trainer on pairs ] in .seq2seq
            time_model, lengths, auto=_auto(time_model), measure=measures(time_model)
        )
        if _auto(time_model):  # NOTE [ no probe on a CPU ]
            time_model = None if current_device().startswith("cpu") else MEASURE
        self.time_model, self.packed = time_model, packed
        recipe = planned is None and trainer.accumulate == "samples"
        self.measures_step_time = recipe and measures(time_model)
        #: a resume plans by its checkpoint's step time (also where "auto" measures none)
        self.follows_checkpoint = recipe and (measures(time_model) or _auto(self.given))

    def sampler(self, step_time: Any) -> DistributedDynamicBatchSampler:
        """The sampler planned at ``step_time`` (where the recipe follows a step time)."""
        follows = "time_model" in self.keywords  # the recipe of samples: it follows a step time
        keywords = {**self.keywords, "time_model": step_time} if follows else self.keywords
        return train_sampler(
            self.dataset,
            self.args,
            options=self.planned,
            unit=self.trainer.accumulate,
            plan_keywords=keywords,
            lengths=self.lengths,
            loss_tokens=self.loss_tokens,
        )

    def first(self) -> DistributedDynamicBatchSampler:
        """The sampler training starts on: dynbatch's checks, then the step time
        (NOTE [ dynbatch's checks before the probe ]), then the plan at it."""
        trainer, time_model, keywords = self.trainer, self.time_model, self.keywords
        batch = int(self.args.per_device_train_batch_size)
        if self.packed is not None:  # the samples the probe reads
            longest = np.argsort(-self.lengths, kind="stable")[: max(1, batch)]
            check_samples(self.dataset, self.lengths, longest, self.packed)
        follows = self.planned is None and trainer.accumulate == "samples"
        checked: DistributedDynamicBatchSampler | None = None
        if follows:  # the recipe of samples follows the step time
            sorted_order = keywords.get("order", "bucket") not in ("bucket", "shuffle")
            if measures(time_model) and sorted_order:
                time_model = None  # a sorted order keeps the recipe's split (like_fixed)
            if measures(time_model):
                if self.packed is not None:  # the plan's checks: pack_len against the lengths
                    checked = self.sampler(None)
                time_model = measure_time_model(trainer, self.dataset, self.lengths, batch)
            keywords["time_model"] = time_model
        if checked is not None and time_model is None:  # the probe found no step time
            return checked
        try:
            sampler = self.sampler(time_model)
        except InputError as exc:
            if not (self.measures_step_time and "time_model" in str(exc)):
                raise
            raise type(exc)(
                f"{kept_time_model(trainer.args.output_dir)} holds a step time this run cannot "
                f"plan by ({exc}): delete it to measure the step time again, or pass time_model="
            ) from None
        logger = trainer.host.logger
        if follows and time_model is not None:
            logger.info(split_reason(sampler, time_model))
        if self.measures_step_time and time_model is not None:  # NOTE [ no probe on a CPU ]
            without = checked if checked is not None else self.sampler(None)
            if without.epoch_plan(0).digest() != sampler.epoch_plan(0).digest():
                logger.warning(_changed_plan(time_model, sampler, without))
        return sampler

    def for_checkpoint(
        self, checkpoint: str, state: Mapping[str, Any], options: PlanOptions
    ) -> DistributedDynamicBatchSampler | None:
        """The sampler at the step time ``checkpoint`` was planned by, where it is not that of
        ``options`` (NOTE [ the Trainer measures the step time ]); None to keep the current."""
        if not self.follows_checkpoint:
            return None
        saved_options = state["sampler"].get("options")
        saved = saved_options.get("time_model") if isinstance(saved_options, Mapping) else None
        where = f"{os.path.join(checkpoint, STATE_FILE)}'s time_model"
        model = saved_step_time(saved, where)
        if model is None or model == options.time_model:
            return None
        self.trainer.host.logger.info(
            f"dynbatch: resuming {checkpoint} by the step time it was planned by, {model} (not "
            f"{options.time_model}: measured, kept in output_dir, or none on a CPU)"
        )
        return self.sampler(model)


def saved_step_time(saved: Any, where: str) -> StepTimeModel | PairStepTimeModel | None:
    """The step time a checkpoint's options hold, from its fingerprint: ``[c, a, b, error]``
    of one length, ``["pairs", c, a_s, a_t, b_s, b_t, cross, error]`` of pairs; None for none,
    or for anything else (the sampler's ``load_state_dict`` then names what differs).

    >>> saved_step_time(["pairs", 0.01, 1e-4, 2e-4, 0.0, 0.0, 0.0, 0.0], "state")
    PairStepTimeModel(c=0.01, a_s=0.0001, a_t=0.0002, b_s=0.0, b_t=0.0, cross=0.0, error=0.0)
    >>> saved_step_time([0.04, 1e-6, 0.0, 0.0], "state")
    StepTimeModel(c=0.04, a=1e-06, b=0.0, error=0.0)
    """
    if not isinstance(saved, list):
        return None
    if len(saved) == 4:
        return check_time_model(dict(zip(("c", "a", "b", "error"), saved, strict=True)), where)
    if len(saved) == 8 and saved[0] == "pairs":
        names = ("c", "a_s", "a_t", "b_s", "b_t", "cross", "error")
        try:
            return PairStepTimeModel(**dict(zip(names, saved[1:], strict=True)))
        except InputError as exc:
            raise type(exc)(f"{where}: {exc}") from None
    return None


def _changed_plan(
    model: Any, sampler: DistributedDynamicBatchSampler, without: DistributedDynamicBatchSampler
) -> str:
    """The warning that a measured step time changed the plan (NOTE [ no probe on a CPU ])."""

    def steps(s: DistributedDynamicBatchSampler) -> str:
        plan = s.epoch_plan(0)
        updates = plan.num_steps if plan.window_ends is None else len(plan.window_ends)
        return f"{plan.num_steps} micro-batch(es) a rank for {updates} update(s)"

    return (
        f"dynbatch: the step time measured, {model}, changes the plan: epoch 0 runs "
        f"{steps(sampler)} by it, {steps(without)} without one. A measured step time varies "
        "from run to run (most on a CPU), and the plan with it; a later run in this output_dir "
        f"reads this one back. To plan alike in every run pass time_model=dynbatch.{model!r}, "
        "or time_model=None for the plan without one"
    )
