"""What the Trainer is told: the user's ``TrainingArguments`` checked, and the copy it runs on.

See NOTE [ one Trainer epoch holds every real epoch ] in :mod:`.run` for why the
copy has one epoch, no ``max_steps`` and no accumulation.
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass
from typing import Any

from ..._checks import InputError, InputTypeError, check_int
from ...paddle.sampler import DistributedDynamicBatchSampler
from ...plan.options import FIELDS, PlanOptions, resolve_options
from .host import Host

__all__ = ["RunArgs", "checked_args", "plan_options", "run_args", "split_keywords", "train_sampler"]

_OWN = ("model", "args", "train_dataset", "eval_dataset", "data_collator")


def _trainer_keywords(trainer: type) -> frozenset[str]:
    """The keywords of ``trainer``'s constructor that the user passes through ours."""
    return frozenset(inspect.signature(trainer).parameters) - {"self", *_OWN}


def split_keywords(kwargs: dict[str, Any], host: Host) -> dict[str, Any]:
    """Take ``host``'s Trainer's keywords out of ``kwargs`` (the plan options stay); refuse
    others."""
    keywords = _trainer_keywords(host.trainer)
    unknown = sorted(set(kwargs) - FIELDS - keywords)
    foreign = [name for name in unknown if name in host.foreign_arguments]
    if foreign:
        said = "; ".join(f"{name} is {host.foreign_arguments[name]}" for name in foreign)
        raise InputTypeError(
            f"DynamicBatchTrainer got {', '.join(foreign)}: {said}. {host.name}'s parallelism "
            f"and training settings are fields of its TrainingArguments (args=), under "
            f"{host.name}'s names"
        )
    if unknown:
        raise InputTypeError(
            f"DynamicBatchTrainer got unknown argument(s) {', '.join(unknown)}; the plan "
            f"options are: {', '.join(sorted(FIELDS))}; the Trainer's are: "
            f"{', '.join(sorted(keywords))}"
        )
    return {k: kwargs.pop(k) for k in list(kwargs) if k in keywords}


def checked_args(args: Any, host: Host) -> Any:
    """``args``, one of ``host``'s ``TrainingArguments`` (None: the Trainer's default, with the
    host's ``default_args``), without another framework's fields set on it."""
    if args is None:
        args = host.training_arguments(output_dir="tmp_trainer", **host.default_args)
    if not isinstance(args, host.training_arguments):
        kind = type(args)
        raise InputTypeError(
            f"args must be a {host.name}.trainer.TrainingArguments, got "
            f"{kind.__module__}.{kind.__qualname__}"
        )
    foreign = [name for name in host.foreign_arguments if name in vars(args)]
    if foreign:
        said = "; ".join(f"args.{name} is {host.foreign_arguments[name]}" for name in foreign)
        raise InputError(
            f"{said}. {host.name}'s Trainer never reads it: set {host.name}'s own field instead, "
            "or leave it out"
        )
    return args


def plan_options(
    options: PlanOptions | None, kwargs: dict[str, Any], args: Any, has_train: bool
) -> PlanOptions | None:
    """The plan options given (``options`` or keywords; ``seed`` from ``args``), or None.

    None is the fixed batch's recipe at the batch of ``args`` (no ``max_cost``):
    it is planned from the training lengths, so it needs a train dataset.
    """
    if options is None:
        kwargs.setdefault("seed", args.seed)
    if options is not None or kwargs.get("max_cost") is not None:
        return resolve_options(options, kwargs, "DynamicBatchTrainer")
    if not has_train:
        raise InputError(
            "without a train_dataset, give the plan options (max_cost=... or options=...): "
            "the fixed batch's recipe is planned from the training lengths"
        )
    return None


@dataclass(frozen=True)
class RunArgs:
    """The user's run settings, and the ``TrainingArguments`` copy the Trainer runs on."""

    internal: Any
    micro_batches_per_step: int
    max_steps: int | None
    num_epochs: int | None


def run_args(
    args: Any,
    host: Host,
    *,
    recipe: bool,
    update_size: float | None,
    accumulate_target: float | None,
) -> RunArgs:
    """Check ``args`` (``host``'s) against the plan's updates; the copy the Trainer runs on."""
    gas = check_int("args.gradient_accumulation_steps", args.gradient_accumulation_steps, minimum=1)
    planned = recipe or update_size is not None
    if planned and accumulate_target is not None:
        raise InputError(
            "the plan makes its own updates (the fixed batch's recipe, or update_size): "
            f"accumulate_target={accumulate_target:g} would cut them again; leave it out"
        )
    if planned and not recipe and gas > 1:
        raise InputError(
            f"the plan makes updates of update_size={update_size:g}; "
            f"args.gradient_accumulation_steps={gas} would group them again: set it to 1"
        )
    if gas > 1 and accumulate_target is not None:
        raise InputError(
            "give args.gradient_accumulation_steps > 1 (micro-batches per step) or "
            "accumulate_target (samples or tokens per step), not both; got "
            f"gradient_accumulation_steps={gas}, accumulate_target={accumulate_target:g}"
        )
    for name, off in host.parallel_degrees.items():  # each rank a whole model and optimizer
        degree = getattr(args, name)
        if isinstance(degree, int) and degree > 1:
            raise InputError(
                f"DynamicBatchTrainer supports data parallelism only, got args.{name}={degree}: "
                f"make the TrainingArguments with {off}"
            )
    if getattr(args, "count_trained_tokens", False):
        raise InputError(
            "args.count_trained_tokens=True reads fixed batches' input_ids; "
            "DynamicBatchTrainer logs tokens_per_sec from the plan instead: leave it False"
        )
    if getattr(args, "skip_data_intervals", None):
        raise InputError(
            "args.skip_data_intervals skips Trainer steps by number, which are windows of a "
            f"dynamic plan here; not supported, got {args.skip_data_intervals!r}"
        )
    max_steps: int | None = None
    num_epochs: int | None = None
    if args.max_steps is not None and args.max_steps > 0:
        max_steps = check_int("args.max_steps", args.max_steps, minimum=1)
    else:
        epochs = args.num_train_epochs
        if (
            isinstance(epochs, bool)
            or not isinstance(epochs, (int, float))
            or not float(epochs).is_integer()
            or epochs < 1
        ):
            raise InputError(
                "args.num_train_epochs must be a whole number of epochs >= 1 (each epoch is "
                "planned whole; use args.max_steps to stop part-way), got "
                f"num_train_epochs={epochs!r}"
            )
        num_epochs = int(epochs)
    internal = copy.copy(args)
    internal.gradient_accumulation_steps = 1
    internal.num_train_epochs = 1
    internal.max_steps = -1
    internal.ignore_data_skip = True  # NOTE [ resume from the plan ]
    return RunArgs(
        internal=internal,
        micro_batches_per_step=1 if planned else gas,  # the plan's updates otherwise
        max_steps=max_steps,
        num_epochs=num_epochs,
    )


def train_sampler(
    dataset: Any,
    args: Any,
    *,
    options: PlanOptions | None,
    unit: str,
    plan_keywords: dict[str, Any],
    **lengths: Any,
) -> DistributedDynamicBatchSampler:
    """The training sampler: ``options``, or the fixed batch's recipe at the batch of ``args``.

    ``lengths`` are the sampler's ``lengths``, ``length_fn``, ``ref_index`` and
    ``cache_path``; ``plan_keywords`` the other plan options, which refine the
    recipe (NOTE [ the fixed batch's recipe ]).
    """
    if options is None:
        keywords = {k: v for k, v in plan_keywords.items() if k != "max_cost"}
        plan: dict[str, Any] = {
            "batch_size": args.per_device_train_batch_size,
            "accumulation_steps": args.gradient_accumulation_steps,
            "update_unit": unit,
            **keywords,
        }
    else:
        plan = {"options": options}
    sampler = DistributedDynamicBatchSampler(
        dataset,
        num_replicas=args.dataset_world_size,
        rank=args.dataset_rank,
        **lengths,
        **plan,
    )
    if not sampler.epoch_plan(0).num_steps:
        raise InputError(
            "nothing to train: the plan of epoch 0 has no batch. The samples all fit in one "
            f"batch under max_cost={sampler.options.max_cost:g}, and drop_last=True drops it as "
            "the batch that ended only because the samples ran out (every epoch alike). Pass "
            "drop_last=False, or a smaller max_cost"
        )
    return sampler
