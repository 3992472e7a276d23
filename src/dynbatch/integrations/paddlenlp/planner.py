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
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray
from paddlenlp.utils.log import logger

from ..._checks import InputError
from ...paddle.sampler import DistributedDynamicBatchSampler
from ...plan.options import PlanOptions
from ...plan.steptime import check_time_model
from .arguments import train_sampler
from .checkpoints import STATE_FILE
from .packing import Packed, check_samples
from .probe import kept_time_model, measure_time_model, split_reason

__all__ = ["MEASURE", "TrainPlanner", "checked_time_model", "measures"]

#: ``time_model=`` default: measure the step time on the model (NOTE [ the Trainer measures ... ]).
MEASURE: Any = "measure"


def measures(time_model: Any) -> bool:
    """Whether ``time_model`` asks for the step time to be measured."""
    return isinstance(time_model, str) and time_model == MEASURE


def checked_time_model(time_model: Any, accumulate: str, planned: PlanOptions | None) -> Any:
    """``time_model=`` checked: ``"measure"``, None, or a step time the recipe follows."""
    if planned is not None and not (measures(time_model) or time_model is None):
        raise InputError(
            "time_model= is for the fixed batch's recipe; the options given plan on their "
            f"own (PlanOptions(time_model=...)), got time_model={time_model!r}"
        )
    if measures(time_model) or time_model is None:
        return time_model
    try:
        model = check_time_model(time_model)
    except InputError as exc:
        raise type(exc)(f"{exc}; or time_model='measure' (the default) or None") from None
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
        self.loss_tokens, self.planned, self.keywords = loss_tokens, planned, keywords
        self.time_model, self.packed = time_model, packed
        self.measures_step_time = (
            planned is None and trainer.accumulate == "samples" and measures(time_model)
        )

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
        if follows and time_model is not None:
            logger.info(split_reason(sampler, time_model))
        return sampler

    def for_checkpoint(
        self, checkpoint: str, state: Mapping[str, Any], options: PlanOptions
    ) -> DistributedDynamicBatchSampler | None:
        """The sampler at the step time ``checkpoint`` was planned by, where it is not that of
        ``options`` (NOTE [ the Trainer measures the step time ]); None to keep the current."""
        if not self.measures_step_time:
            return None
        saved_options = state["sampler"].get("options")
        saved = saved_options.get("time_model") if isinstance(saved_options, Mapping) else None
        if not (isinstance(saved, list) and len(saved) == 4):
            return None  # none, or not one: the sampler's load_state_dict names what differs
        where = f"{os.path.join(checkpoint, STATE_FILE)}'s time_model"
        model = check_time_model(dict(zip(("c", "a", "b", "error"), saved, strict=True)), where)
        if model == options.time_model:
            return None
        logger.info(
            f"dynbatch: resuming {checkpoint} by the step time it was planned by, {model} (not "
            f"{options.time_model}, measured or kept in output_dir)"
        )
        return self.sampler(model)
