"""paddlenlp's ``Trainer`` on dynamic batches: exact steps, exact loss normalisation, exact resume.

::

    from dynbatch.integrations.paddlenlp import DynamicBatchTrainer

    trainer = DynamicBatchTrainer(
        model=model, args=TrainingArguments(...), train_dataset=train_ds,
        eval_dataset=dev_ds, data_collator=collate, lengths=train_lengths,
        max_cost=16 * 256**2, cost="quadratic", order="bucket",
        accumulate="samples",
    )
    trainer.train()                                  # or train(resume_from_checkpoint=...)

``paddlenlp.trainer.Trainer`` assumes fixed batches in four places, and each
one breaks with dynamic batches: it sizes the run once from
``len(train_dataloader)``, it divides every micro-batch's loss by
``gradient_accumulation_steps``, it resumes by consumed-samples arithmetic or
by replaying batches, and it only calls ``set_epoch`` on a
``paddle.io.DistributedBatchSampler``. The notes below say what replaces each.

NOTE [ one Trainer epoch holds every real epoch ]
    Epochs of dynamic batches differ in batch count, and the Trainer reads
    ``len(train_dataloader)`` once, before training, for ``max_steps``, the LR
    schedule and the progress bar. So the Trainer is shown a single "epoch":
    ``get_train_dataloader`` returns an iterable over every optimizer *window*
    of the whole run (all ``num_train_epochs`` real epochs, planned by the
    sampler; it calls ``set_epoch`` itself), whose ``len()`` is the exact number
    of optimizer steps: ``sum(len(window_ends(e)) for e in range(E))``. The
    Trainer runs on a copy of ``args`` with ``num_train_epochs=1``,
    ``max_steps=-1`` and ``gradient_accumulation_steps=1`` (one loader item is
    one optimizer step); the user's values are kept in :attr:`num_epochs`,
    :attr:`max_steps` and :attr:`micro_batches_per_step`. A window is
    ``gradient_accumulation_steps`` micro-batches of *our* plan, or as many as
    it takes to reach ``accumulate_target`` samples or tokens over all ranks
    (NOTE [ accumulating to a budget ] in :mod:`dynbatch.windows`), cut on the
    plan so every rank agrees without communication, and never across an
    epoch's end. ``state.epoch`` shows the real epoch, and the ``"epoch"``
    logging, evaluation and save strategies act at every real epoch's end.

NOTE [ one update, one mean ]
    ``training_step`` runs the window's micro-batches (``no_sync`` on all but
    the last when data parallel), back-propagates the *sum* of per-sample (or
    per-token) losses from ``loss_fn``, and scales the gradients by
    ``world_size / count``, where ``count`` is the window's samples (or real
    tokens) summed over all ranks, read from the plan. ``DataParallel``
    averages over ranks, so each optimizer step is the mean over every real
    sample (or token) of the step, whatever the micro-batch sizes (NOTE
    [ normalising the loss ] in :mod:`dynbatch.training`). Batches the
    distributed sampler repeated only to even out step counts weigh 0. One
    all-reduce of the loss sum per step gives every rank the same logged loss
    (and the same NaN verdict: the Trainer raises on a non-finite loss on every
    rank at once rather than hanging one of them). Clipping happens after the
    scaling, inside ``optimizer.step()``.

NOTE [ resume from the plan ]
    Every checkpoint gets ``dynbatch_trainer.json``: the sampler's
    ``state_dict(consumed_batches=k)`` at the end of the last trained window
    (which checks lengths, options and the plan on load), the window settings,
    and the running loss and sample totals. Resuming loads it, so iteration
    continues with exactly the remaining batches; nothing is replayed and
    nothing relies on consumed-samples arithmetic. paddlenlp 3.0.0b4 would
    also skip ``global_step`` windows on top of that, so ``ignore_data_skip``
    is forced on; it then never restores the RNG, so this class does; and
    ``resume_from_checkpoint=True`` is resolved here (it crashes in that
    version) to the newest checkpoint that holds the dynbatch state.

NOTE [ evaluation with unequal batches ]
    Evaluation batches are dynamic too (longest first, every sample once,
    none over budget left out), so ranks hold batches of different sizes and
    paddlenlp's per-batch ``all_gather`` of equal shapes would hang or crash.
    Each rank evaluates its own batches; the loss is one all-reduce of
    ``[sum, count]`` and the predictions, labels and sample indices are
    gathered once as objects, ordered by sample index and passed whole to
    ``compute_metrics`` on every rank.

NOTE [ VisualDL and protobuf bools ]
    paddlenlp's ``VisualDLCallback`` writes the arguments with ``add_hparams``;
    visualdl 2.5 stores a bool in an int field, which protobuf >= 5 refuses
    ("Expected an int, got a boolean"), so ``train()`` crashes at once. The
    integration turns each stock ``VisualDLCallback`` into a subclass that
    casts bools to ints for ``add_hparams`` and changes nothing else.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import json
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._checks import (
    InputError,
    InputTypeError,
    check_choice,
    check_int,
    check_lengths,
    check_positive_number,
)
from .._optional import require
from ..memory import AllocatorStatsUnavailable, peak_memory_mib, reset_peak_memory
from ..options import FIELDS, PlanOptions, resolve_options
from ..stats import batch_table
from ..windows import UNITS, accumulation_windows, micro_step_counts

paddle = require("paddle", "dynbatch.integrations.paddlenlp")
require("paddlenlp.trainer", "dynbatch.integrations.paddlenlp")
from paddlenlp.trainer import Trainer, TrainerCallback, TrainingArguments  # noqa: E402
from paddlenlp.trainer.integrations import VisualDLCallback  # noqa: E402
from paddlenlp.trainer.trainer_utils import (  # noqa: E402
    PREFIX_CHECKPOINT_DIR,
    EvalLoopOutput,
    EvalPrediction,
    IntervalStrategy,
    TrainOutput,
)
from paddlenlp.trainer.utils.helper import nested_concat  # noqa: E402
from paddlenlp.utils.log import logger  # noqa: E402

from ..sampler import DistributedDynamicBatchSampler  # noqa: E402

__all__ = ["STATE_FILE", "DynamicBatchTrainer", "Window", "per_sample_cross_entropy"]

#: The file each checkpoint gets with the sampler's position (NOTE [ resume from the plan ]).
STATE_FILE = "dynbatch_trainer.json"
_STATE_VERSION = 1
_CHECKPOINT = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")
#: Parallelism beyond data parallel shards the model, not the data: not supported here.
_UNSUPPORTED_DEGREES = (
    "tensor_parallel_degree",
    "pipeline_parallel_degree",
    "sharding_parallel_degree",
    "sep_parallel_degree",
    "context_parallel_degree",
)
_OWN = ("model", "args", "train_dataset", "eval_dataset", "data_collator")
_TRAINER_KEYWORDS = frozenset(inspect.signature(Trainer.__init__).parameters) - {"self", *_OWN}


# -- losses ------------------------------------------------------------------------------------
def _logits(outputs: Any) -> Any:
    if isinstance(outputs, paddle.Tensor):
        return outputs
    logits = getattr(outputs, "logits", None)
    if logits is None and isinstance(outputs, Mapping):
        logits = outputs.get("logits")
    if logits is None and isinstance(outputs, (tuple, list)) and outputs:
        logits = outputs[0]
    if not isinstance(logits, paddle.Tensor):
        raise InputTypeError(
            "per_sample_cross_entropy found no logits in the model's outputs (a tensor, a "
            f"'logits' field or a tuple's first item), got {type(outputs).__name__}; pass "
            "loss_fn=callable(outputs, batch) -> per-sample losses"
        )
    return logits


def per_sample_cross_entropy(
    outputs: Any, batch: Mapping[str, Any], *, label_key: str = "labels"
) -> Any:
    """Cross entropy of each sample (``reduction="none"``): the default ``loss_fn``.

    ``outputs`` are the model's logits (a tensor, a ``logits`` field or a
    tuple's first item, shape ``[n, classes]``); the labels are
    ``batch[label_key]``, shape ``[n]`` or ``[n, 1]``. Returns shape ``[n]``.

    >>> logits = paddle.to_tensor([[2.0, 0.0], [0.0, 2.0]])
    >>> losses = per_sample_cross_entropy(logits, {"labels": paddle.to_tensor([0, 0])})
    >>> [round(float(x), 4) for x in losses]
    [0.1269, 2.1269]
    """
    if not isinstance(batch, Mapping) or label_key not in batch:
        fields = sorted(batch) if isinstance(batch, Mapping) else type(batch).__name__
        raise InputError(
            f"the default loss_fn (per-sample cross entropy) needs the field {label_key!r} in "
            f"every batch, got {fields}; name the label field in TrainingArguments(label_names="
            "[...]) or pass loss_fn=callable(outputs, batch) -> per-sample losses"
        )
    labels = batch[label_key]
    if not isinstance(labels, paddle.Tensor):
        labels = paddle.to_tensor(np.asarray(labels))
    losses = paddle.nn.functional.cross_entropy(
        _logits(outputs), labels.reshape([-1]).astype("int64"), reduction="none"
    )
    return losses.reshape([-1])


def _checked_eval_lengths(dataset: Any, lengths: Any, name: str | None) -> NDArray[np.int64]:
    """Eval lengths checked when the trainer is made, not after an epoch of training."""
    label = "eval_lengths" if name is None else f"eval_lengths[{name!r}]"
    lens = check_lengths(lengths, name=label)
    if hasattr(dataset, "__len__") and len(dataset) != lens.size:
        raise InputError(
            f"{label} has {lens.size} entries but the eval dataset has {len(dataset)} samples; "
            "they must match one to one"
        )
    return lens


# -- allocator memory ------------------------------------------------------------------------
def _peak_memory_mib() -> float | None:
    """Peak MiB paddle's allocator handed out since the last reset (None: no statistics)."""
    try:
        return peak_memory_mib()
    except AllocatorStatsUnavailable:
        return None


def _reset_peak_memory() -> None:
    with contextlib.suppress(AllocatorStatsUnavailable):
        reset_peak_memory()


# -- windows ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Window:
    """One optimizer step as the plan has it; ``training_step`` receives it as ``inputs["window"]``.

    Attributes:
        epoch: the real epoch.
        index: the window's number in its epoch; ``windows``: how many the epoch has.
        start, stop: the micro-batches ``[start, stop)`` of the epoch's plan (per rank).
        indices: this rank's sample indices, one array per micro-batch.
        padding: per micro-batch, whether it only repeats samples to even out
            the ranks' step counts (it weighs 0).
        count: what the update averages over: the window's samples (or real
            tokens, with ``accumulate="tokens"``) summed over all ranks.
        samples: the window's real samples summed over all ranks.
    """

    epoch: int
    index: int
    windows: int
    start: int
    stop: int
    indices: tuple[NDArray[np.int64], ...]
    padding: tuple[bool, ...]
    count: float
    samples: int

    @property
    def ends_epoch(self) -> bool:
        return self.index + 1 == self.windows


@dataclass
class _EpochInfo:
    ends: NDArray[np.int64]
    counts: NDArray[np.float64]  # per micro-step, summed over ranks
    table: dict[str, NDArray[Any]] | None = None  # batch_table of every rank's batches


@dataclass
class _Since:
    """Plan statistics of the windows trained since the last log (all ranks)."""

    windows: int = 0
    micro_batches: int = 0
    batches: int = 0  # every rank's batches, repeats included
    real_batches: int = 0
    samples: int = 0
    tokens: float = 0.0  # real tokens trained (repeats excluded)
    real_all: float = 0.0  # real tokens computed (repeats included)
    padded_all: float = 0.0
    cost_ratio_sum: float = 0.0
    cost_ratio_max: float = 0.0
    started: float = field(default_factory=time.perf_counter)


class _RunLoader:
    """Every window of the run (NOTE [ one Trainer epoch holds every real epoch ])."""

    def __init__(self, trainer: DynamicBatchTrainer, total: int) -> None:
        self.trainer, self.total = trainer, total
        self.batch_sampler = trainer.train_sampler  # what callbacks look for on a loader

    def __len__(self) -> int:
        return self.total

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self.trainer._iter_windows()


# -- callbacks -------------------------------------------------------------------------------
class _VisualDLCallback(VisualDLCallback):  # type: ignore[misc]
    """VisualDLCallback with bool hparams cast to int (NOTE [ VisualDL and protobuf bools ])."""

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if state.is_world_process_zero and self.vdl_writer is None:
            self._init_summary_writer(args)
        writer = self.vdl_writer
        if writer is not None and not getattr(writer, "_dynbatch_int_hparams", False):
            add_hparams = writer.add_hparams

            def int_hparams(hparams_dict: Mapping[str, Any], *a: Any, **k: Any) -> Any:
                clean = {
                    key: int(v) if isinstance(v, bool) else v for key, v in hparams_dict.items()
                }
                return add_hparams(clean, *a, **k)

            writer.add_hparams = int_hparams
            writer._dynbatch_int_hparams = True
        return super().on_train_begin(args, state, control, **kwargs)


class _RealEpochs(TrainerCallback):  # type: ignore[misc]
    """Real epochs in the Trainer's state and the "epoch" strategies at each real epoch's end."""

    def __init__(self, trainer: DynamicBatchTrainer) -> None:
        self.trainer = trainer

    @staticmethod
    def _flag_epoch_strategies(args: Any, control: Any, value: bool) -> None:
        if args.logging_strategy == IntervalStrategy.EPOCH:
            control.should_log = value
        if args.evaluation_strategy == IntervalStrategy.EPOCH:
            control.should_evaluate = value
        if args.save_strategy == IntervalStrategy.EPOCH:
            control.should_save = value

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        trainer = self.trainer
        expected = trainer._resumed_step
        if expected is not None and state.global_step != expected:
            raise InputError(
                f"the checkpoint's trainer_state.json says global_step={state.global_step}, its "
                f"{STATE_FILE} says {expected}: the checkpoint folder is inconsistent"
            )
        if trainer.num_epochs is not None:
            state.num_train_epochs = trainer.num_epochs
        state.consumed_samples = trainer.consumed_samples
        return control

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        window = self.trainer._last_window
        if window is None:
            return control
        state.epoch = window.epoch + (window.index + 1) / window.windows
        state.consumed_samples = self.trainer.consumed_samples
        if window.ends_epoch:
            self._flag_epoch_strategies(args, control, True)
        return control

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        window = self.trainer._last_window
        if window is not None and window.ends_epoch:  # already done at that step
            self._flag_epoch_strategies(args, control, False)
        return control


# -- the trainer -----------------------------------------------------------------------------
class DynamicBatchTrainer(Trainer):  # type: ignore[misc]
    """``paddlenlp.trainer.Trainer`` on dynamic batches, with every Trainer feature kept.

    See the module's notes for how each fixed-batch assumption is replaced.

    Args:
        model, args, train_dataset, eval_dataset, data_collator: as for
            ``Trainer``. ``args.num_train_epochs`` is a whole number of real
            epochs (or set ``args.max_steps``); ``args.gradient_accumulation_steps``
            is the number of *planned* micro-batches per optimizer step. The
            collator must return a dict (model inputs and label fields).
        lengths: per-sample lengths of ``train_dataset``; or measure them with
            ``length_fn(sample) -> int`` or the size of field ``ref_index``.
        eval_lengths: lengths of ``eval_dataset`` (a dict of arrays for a dict
            of eval datasets). Without them, ``length_fn`` / ``ref_index``
            measure the eval samples; with neither, evaluation uses paddlenlp's
            fixed batches of ``per_device_eval_batch_size``.
        cache_path: store measured training lengths here (see the samplers).
        options: a :class:`~dynbatch.PlanOptions`; or its fields as keywords
            (``max_cost=..., cost=..., order=..., seed=..., max_batch_size=...``),
            not both. ``cost`` may be any cost object, e.g. a ``MemoryCost``.
        accumulate: ``"samples"`` (each update is the mean over the step's
            samples) or ``"tokens"`` (over its real tokens, the ``lengths``).
        accumulate_target: instead of ``gradient_accumulation_steps``, close
            a window when its samples (or tokens) over all ranks reach this.
        loss_fn: ``loss_fn(outputs, batch) -> losses``, one loss per sample
            (shape ``[n]``) or per token (``[n, ...]``, padding set to 0, only
            with ``accumulate="tokens"``). The model is called with every field
            of the batch but the label fields (``args.label_names``, default
            ``["labels"]``). A per-sample loss under ``accumulate="tokens"``
            weighs each sample by its length. Default:
            :func:`per_sample_cross_entropy` (sequence classification).
        **kwargs: the other ``Trainer`` arguments (``compute_metrics``,
            ``callbacks``, ``optimizers``, ``tokenizer``,
            ``preprocess_logits_for_metrics``) and the plan options.

    Attributes:
        train_sampler: the :class:`~dynbatch.DistributedDynamicBatchSampler`
            over ``train_dataset`` (world size and rank from ``args``).
        options: the :class:`~dynbatch.PlanOptions` of training.
        num_epochs: real epochs of the run (None when ``args.max_steps`` sets it).
        max_steps: ``args.max_steps`` when positive, else None.
        micro_batches_per_step: ``args.gradient_accumulation_steps``.
    """

    control: Any  # the Trainer's TrainerControl

    def __init__(
        self,
        model: Any = None,
        args: Any = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        data_collator: Any = None,
        *,
        lengths: Any = None,
        length_fn: Callable[[Any], int] | None = None,
        ref_index: Any = None,
        eval_lengths: Any = None,
        cache_path: str | os.PathLike[str] | None = None,
        options: PlanOptions | None = None,
        accumulate: str = "samples",
        accumulate_target: float | None = None,
        loss_fn: Callable[[Any, Mapping[str, Any]], Any] | None = None,
        **kwargs: Any,
    ) -> None:
        unknown = sorted(set(kwargs) - FIELDS - _TRAINER_KEYWORDS)
        if unknown:
            raise InputTypeError(
                f"DynamicBatchTrainer got unknown argument(s) {', '.join(unknown)}; the plan "
                f"options are: {', '.join(sorted(FIELDS))}; the Trainer's are: "
                f"{', '.join(sorted(_TRAINER_KEYWORDS))}"
            )
        trainer_kwargs = {k: kwargs.pop(k) for k in list(kwargs) if k in _TRAINER_KEYWORDS}
        if trainer_kwargs.get("criterion") is not None:
            raise InputError(
                "DynamicBatchTrainer normalises per-sample losses itself: pass "
                "loss_fn=callable(outputs, batch) -> per-sample losses instead of criterion="
                f"{trainer_kwargs['criterion']!r}"
            )
        self.options = resolve_options(options, kwargs, "DynamicBatchTrainer")
        self.accumulate = check_choice("accumulate", accumulate, UNITS)
        self.accumulate_target = (
            None
            if accumulate_target is None
            else check_positive_number("accumulate_target", accumulate_target)
        )
        if loss_fn is not None and not callable(loss_fn):
            raise InputTypeError(
                "loss_fn must be a callable (outputs, batch) -> per-sample losses, got "
                f"loss_fn={loss_fn!r}"
            )
        if args is None:
            args = TrainingArguments(output_dir="tmp_trainer")
        if not isinstance(args, TrainingArguments):
            raise InputTypeError(
                f"args must be a paddlenlp.trainer.TrainingArguments, got {type(args).__name__}"
            )
        internal = self._check_args(args)
        self.train_sampler: DistributedDynamicBatchSampler | None = None
        if train_dataset is not None:
            self.train_sampler = DistributedDynamicBatchSampler(
                train_dataset,
                lengths=lengths,
                length_fn=length_fn,
                ref_index=ref_index,
                cache_path=cache_path,
                num_replicas=internal.dataset_world_size,
                rank=internal.dataset_rank,
                options=self.options,
            )
            if not self.train_sampler.epoch_plan(0).num_steps:
                raise InputError(
                    "nothing to train: the plan of epoch 0 has no batch. The samples all fit "
                    f"in one batch under max_cost={self.options.max_cost:g}, and drop_last=True "
                    "drops it as the "
                    "batch that ended only because the samples ran out (every epoch alike). "
                    "Pass drop_last=False, or a smaller max_cost"
                )
        elif lengths is not None:
            raise InputError("lengths were given without a train_dataset to go with them")
        self._length_fn, self._ref_index = length_fn, ref_index
        self._eval_lengths = self._check_eval_lengths(eval_dataset, eval_lengths)
        self._eval_samplers: list[tuple[Any, DistributedDynamicBatchSampler | None]] = []
        super().__init__(
            model=model,
            args=internal,
            data_collator=data_collator,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            **trainer_kwargs,
        )
        for callback in self.callback_handler.callbacks:
            if type(callback) is VisualDLCallback:
                callback.__class__ = _VisualDLCallback
        self.add_callback(_RealEpochs(self))
        self.loss_fn = loss_fn or functools.partial(
            per_sample_cross_entropy, label_key=self.label_names[0]
        )
        self._epochs: dict[int, _EpochInfo] = {}
        self._position = (0, 0)  # (epoch, micro-batches of it trained)
        self._last_window: Window | None = None
        self._resumed_step: int | None = None
        self._loss_total = 0.0  # sum over optimizer steps of each step's mean loss
        self.consumed_samples = 0  # real samples trained over all ranks, whole run
        self._run_samples = 0
        self._run_tokens = 0.0
        self._run_steps = 0
        self._since = _Since()

    # -- arguments ---------------------------------------------------------------------------
    def _check_args(self, args: Any) -> Any:
        """Check ``args``; return the copy the Trainer runs on (NOTE [ one Trainer epoch ... ])."""
        gas = check_int(
            "args.gradient_accumulation_steps", args.gradient_accumulation_steps, minimum=1
        )
        if gas > 1 and self.accumulate_target is not None:
            raise InputError(
                "give args.gradient_accumulation_steps > 1 (micro-batches per step) or "
                "accumulate_target (samples or tokens per step), not both; got "
                f"gradient_accumulation_steps={gas}, accumulate_target={self.accumulate_target:g}"
            )
        for name in _UNSUPPORTED_DEGREES:
            degree = getattr(args, name, 1)
            if isinstance(degree, int) and degree > 1:
                raise InputError(
                    f"DynamicBatchTrainer supports data parallelism only, got args.{name}={degree}"
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
        self.micro_batches_per_step = gas
        self.max_steps: int | None = None
        self.num_epochs: int | None = None
        if args.max_steps is not None and args.max_steps > 0:
            self.max_steps = check_int("args.max_steps", args.max_steps, minimum=1)
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
            self.num_epochs = int(epochs)
        internal = copy.copy(args)
        internal.gradient_accumulation_steps = 1
        internal.num_train_epochs = 1
        internal.max_steps = -1
        internal.ignore_data_skip = True  # NOTE [ resume from the plan ]
        return internal

    @staticmethod
    def _check_eval_lengths(eval_dataset: Any, eval_lengths: Any) -> Any:
        if eval_lengths is None:
            return None
        if eval_dataset is None:
            raise InputError("eval_lengths were given without an eval_dataset to go with them")
        if isinstance(eval_dataset, Mapping):
            if not isinstance(eval_lengths, Mapping) or set(eval_lengths) != set(eval_dataset):
                raise InputError(
                    "eval_dataset is a dict, so eval_lengths must be a dict with the same keys "
                    f"({sorted(eval_dataset)}), got {eval_lengths!r:.80}"
                )
            return {
                name: _checked_eval_lengths(eval_dataset[name], eval_lengths[name], name)
                for name in eval_dataset
            }
        return _checked_eval_lengths(eval_dataset, eval_lengths, None)

    # -- the plan's windows ------------------------------------------------------------------
    def _sampler(self) -> DistributedDynamicBatchSampler:
        if self.train_sampler is None:
            raise InputError("training needs a train_dataset (and its lengths)")
        return self.train_sampler

    def _epoch_info(self, epoch: int) -> _EpochInfo:
        info = self._epochs.get(epoch)
        if info is None:
            sampler = self._sampler()
            sharded = sampler.epoch_plan(epoch)
            counts = micro_step_counts(sharded, sampler.lengths, self.accumulate)
            if self.accumulate_target is not None:
                ends = accumulation_windows(counts, self.accumulate_target)
            elif self.micro_batches_per_step > 1:
                ones = np.ones(sharded.num_steps, dtype=np.float64)
                ends = accumulation_windows(ones, self.micro_batches_per_step)
            else:
                ends = np.arange(1, sharded.num_steps + 1, dtype=np.int64)
            info = _EpochInfo(ends=ends, counts=counts)
            if len(self._epochs) >= 2:  # the epoch in training and one being sized
                self._epochs.pop(next(iter(self._epochs)))
            self._epochs[epoch] = info
        return info

    def window_ends(self, epoch: int) -> NDArray[np.int64]:
        """Where ``epoch``'s optimizer steps end, in micro-batches of this rank's plan."""
        return self._epoch_info(check_int("epoch", epoch)).ends.copy()

    def steps_per_epoch(self, epoch: int) -> int:
        """Optimizer steps of real epoch ``epoch``."""
        return int(self._epoch_info(check_int("epoch", epoch)).ends.size)

    def total_steps(self) -> int:
        """Optimizer steps of the whole run: ``args.max_steps``, or every epoch's windows summed."""
        if self.max_steps is not None:
            return self.max_steps
        if self.num_epochs is None:  # unreachable: _check_args sets one of the two
            raise RuntimeError("neither num_epochs nor max_steps is set")
        return sum(self.steps_per_epoch(e) for e in range(self.num_epochs))

    def _iter_windows(self) -> Iterator[dict[str, Any]]:
        sampler = self._sampler()
        loader = paddle.io.DataLoader(
            self.train_dataset,
            batch_sampler=sampler,
            collate_fn=self.data_collator,
            num_workers=self.args.dataloader_num_workers,
        )
        epoch, position = self._position
        while self.num_epochs is None or epoch < self.num_epochs:
            info = self._epoch_info(epoch)
            ends = info.ends.tolist()
            if position != 0 and position not in ends:
                raise InputError(
                    f"cannot resume epoch {epoch} at micro-batch {position}: no optimizer step "
                    f"ends there (steps end at {ends[:8]}...); was the checkpoint saved with other "
                    "accumulation settings?"
                )
            sampler.set_epoch(epoch)
            sampler.load_state_dict(sampler.state_dict(consumed_batches=position))
            if position < int(info.counts.size):
                plan, padding = sampler.batches(epoch), sampler.padding_mask(epoch)
                table = self._table(epoch, info)
                real = ~self._sampler().epoch_plan(epoch).is_padding
                micro = iter(loader)
                start = position
                for index, stop in enumerate(ends):
                    if stop <= position:
                        continue
                    rows = slice(start * sampler.num_replicas, stop * sampler.num_replicas)
                    window = Window(
                        epoch=epoch,
                        index=index,
                        windows=len(ends),
                        start=start,
                        stop=stop,
                        indices=tuple(np.asarray(plan[k]) for k in range(start, stop)),
                        padding=tuple(bool(p) for p in padding[start:stop]),
                        count=float(info.counts[start:stop].sum()),
                        samples=int(table["batch_size"][rows][real[rows]].sum()),
                    )
                    batches = [next(micro) for _ in range(stop - start)]
                    self._position = (epoch, stop)
                    yield {"micro_batches": batches, "window": window}
                    start = stop
            epoch, position = epoch + 1, 0

    def _table(self, epoch: int, info: _EpochInfo) -> dict[str, NDArray[Any]]:
        if info.table is None:
            sampler = self._sampler()
            opts = sampler.options
            info.table = batch_table(
                sampler.lengths,
                sampler.epoch_plan(epoch).plan,
                cost=opts.cost,
                max_cost=opts.max_cost,
                pad_to_multiple_of=opts.pad_to_multiple_of,
            )
        return info.table

    # -- Trainer overrides: data ---------------------------------------------------------------
    def get_train_dataloader(self) -> _RunLoader:
        """Every window of the run; ``len()`` is its exact number of optimizer steps."""
        total = self.total_steps()
        if self.accumulate_target is not None:
            window = f"{self.accumulate_target:g} {self.accumulate} over all ranks"
        else:
            window = f"{self.micro_batches_per_step} planned micro-batch(es)"
        if self.num_epochs is not None:
            per_epoch = [self.steps_per_epoch(e) for e in range(min(self.num_epochs, 6))]
            more = ", ..." if self.num_epochs > 6 else ""
            run = f"{self.num_epochs} epoch(s) of {str(per_epoch)[1:-1]}{more} steps"
        else:
            run = f"max_steps={self.max_steps}"
        logger.info(
            f"dynbatch: {total} optimizer steps ({run}); a step is {window}, the mean over its "
            f"{self.accumulate}. The Trainer's banner counts one epoch and fixed batches."
        )
        return _RunLoader(self, total)

    def _eval_sampler(self, dataset: Any) -> DistributedDynamicBatchSampler | None:
        for known, sampler in self._eval_samplers:
            if known is dataset:
                return sampler
        lengths = None
        if isinstance(self._eval_lengths, Mapping):
            for name, candidate in (self.eval_dataset or {}).items():
                if candidate is dataset:
                    lengths = self._eval_lengths[name]
        elif dataset is self.eval_dataset:
            lengths = self._eval_lengths
        sampler = None
        if lengths is not None or self._length_fn is not None or self._ref_index is not None:
            sampler = DistributedDynamicBatchSampler(
                dataset,
                lengths=lengths,
                length_fn=None if lengths is not None else self._length_fn,
                ref_index=None if lengths is not None else self._ref_index,
                num_replicas=self.args.dataset_world_size,
                rank=self.args.dataset_rank,
                # every sample evaluated once, longest first (an OOM shows at the first batch)
                options=self.options.replace(
                    order="descending", drop_last=False, equal_epochs=False, oversize="alone"
                ),
            )
        self._eval_samplers.append((dataset, sampler))
        return sampler

    def get_eval_dataloader(self, eval_dataset: Any = None) -> Any:
        """Dynamic batches if eval lengths are known (NOTE [ evaluation with unequal batches ])."""
        dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        sampler = None if dataset is None else self._eval_sampler(dataset)
        if sampler is None:
            return super().get_eval_dataloader(eval_dataset)
        return paddle.io.DataLoader(
            dataset,
            batch_sampler=sampler,
            collate_fn=self.data_collator,
            num_workers=self.args.dataloader_num_workers,
        )

    # -- Trainer overrides: the step ---------------------------------------------------------------
    def _split(self, batch: Any) -> tuple[Mapping[str, Any], dict[str, Any]]:
        """The batch on the device, and the model's inputs: every field but the label fields."""
        if not isinstance(batch, Mapping):
            raise InputTypeError(
                "data_collator must return a dict of fields (the model's inputs and the label "
                f"fields {self.label_names}), got {type(batch).__name__}"
            )
        batch = self._prepare_inputs(batch)
        return batch, {k: v for k, v in batch.items() if k not in self.label_names}

    def _loss_sum(
        self, outputs: Any, batch: Mapping[str, Any], indices: NDArray[Any], lengths: NDArray[Any]
    ) -> Any:
        """The micro-batch's summed losses, per sample or token (NOTE [ one update, one mean ])."""
        losses = self.loss_fn(outputs, batch)
        n = int(indices.size)
        shape = list(getattr(losses, "shape", []))
        if not isinstance(losses, paddle.Tensor) or not shape or shape[0] != n:
            got = f"shape {shape}" if isinstance(losses, paddle.Tensor) else type(losses).__name__
            raise InputError(
                f"loss_fn must return the losses of each of the micro-batch's {n} samples, shape "
                f"[{n}] (or [{n}, ...] per token, with accumulate='tokens'), not a mean; got {got}"
            )
        detached = losses.stop_gradient and paddle.is_grad_enabled()  # eval runs without grad
        if not losses.dtype.name.lower().startswith(("float", "bfloat")) or detached:
            raise InputError(
                f"loss_fn must return differentiable float losses (attached to the model's "
                f"graph), got dtype {losses.dtype} with stop_gradient={losses.stop_gradient}: "
                "nothing would be trained"
            )
        per_sample = len(shape) == 1 or (len(shape) == 2 and shape[1] == 1)
        if per_sample:
            losses = losses.reshape([-1])
            if self.accumulate == "tokens":
                weights = lengths[indices].astype(np.float32)
                return (losses * paddle.to_tensor(weights, dtype=losses.dtype)).sum()
        elif self.accumulate == "samples":
            raise InputError(
                f"loss_fn returned per-token losses (shape {shape}); with accumulate='samples' it "
                f"must return one loss per sample, shape [{n}] (or use accumulate='tokens')"
            )
        return losses.sum()

    def training_step(self, model: Any, inputs: Any, step_control: int = 0) -> Any:
        """One optimizer window: the exact mean over its samples or tokens on every rank."""
        window = inputs.get("window") if isinstance(inputs, Mapping) else None
        if not isinstance(window, Window):
            raise InputTypeError(
                "DynamicBatchTrainer.training_step takes the windows of its own train loader, got "
                f"{type(inputs).__name__}"
            )
        model.train()
        world = self.args.dataset_world_size
        no_sync = getattr(model, "no_sync", None)
        micro = inputs["micro_batches"]
        total = paddle.zeros([1], dtype="float32")
        for k, (batch, indices, padding) in enumerate(
            zip(micro, window.indices, window.padding, strict=True)
        ):
            batch, model_inputs = self._split(batch)
            last = k == len(micro) - 1
            sync = contextlib.nullcontext() if last or world <= 1 or no_sync is None else no_sync()
            with sync:
                with self.autocast_smart_context_manager():
                    outputs = model(**model_inputs)
                    loss_sum = self._loss_sum(
                        outputs, batch, indices, self._sampler().lengths
                    ).astype("float32")
                if padding:
                    loss_sum = loss_sum * 0.0
                (self.scaler.scale(loss_sum) if self.do_grad_scaling else loss_sum).backward()
            total = total + loss_sum.detach().reshape([1])
        if world > 1:
            paddle.distributed.all_reduce(total)
        factor = world / window.count if window.count > 0 else 0.0
        with paddle.no_grad():
            for p in model.parameters():
                if p.grad is not None:
                    p.grad.scale_(factor)
        mean = total / window.count if window.count > 0 else total * 0.0
        self._record(window, float(mean.item()))
        return mean.reshape([])

    def _record(self, window: Window, mean_loss: float) -> None:
        sampler = self._sampler()
        info = self._epoch_info(window.epoch)
        table = self._table(window.epoch, info)
        replicas = sampler.num_replicas
        rows = slice(window.start * replicas, window.stop * replicas)
        real = ~sampler.epoch_plan(window.epoch).is_padding[rows]
        tokens = float(table["real_tokens"][rows][real].sum())
        s = self._since
        s.windows += 1
        s.micro_batches += window.stop - window.start
        s.batches += int(real.size)
        s.real_batches += int(real.sum())
        s.samples += window.samples
        s.tokens += tokens
        s.real_all += float(table["real_tokens"][rows].sum())
        s.padded_all += float(table["padded_tokens"][rows].sum())
        s.cost_ratio_sum += float(table["cost_ratio"][rows].sum())
        s.cost_ratio_max = max(s.cost_ratio_max, float(table["cost_ratio"][rows].max()))
        self._loss_total += mean_loss
        self.consumed_samples += window.samples
        self._run_samples += window.samples
        self._run_tokens += tokens
        self._run_steps += 1
        self._last_window = window

    # -- Trainer overrides: logging ------------------------------------------------------------
    def log(self, logs: dict[str, float], **kwargs: Any) -> None:
        """The Trainer's logs plus the plan's statistics; its fixed-batch speeds made real."""
        s = self._since
        if "loss" in logs and s.windows:
            seconds = float(logs.get("interval_runtime") or 0.0)
            if seconds <= 0:
                seconds = max(time.perf_counter() - s.started, 1e-9)
            stats = {
                "batch_size": s.samples / max(s.real_batches, 1),
                "samples_per_step": s.samples / s.windows,
                "micro_batches_per_step": s.micro_batches / s.windows,
                "padding_efficiency": s.real_all / s.padded_all if s.padded_all else 1.0,
                "cost_ratio": s.cost_ratio_sum / max(s.batches, 1),
                "cost_ratio_max": s.cost_ratio_max,
                "samples_per_sec": s.samples / seconds,
                "tokens_per_sec": s.tokens / seconds,
            }
            memory = _peak_memory_mib()
            if memory is not None:
                stats["memory_mb"] = memory
                _reset_peak_memory()
            logs.update({k: round(v, 4) for k, v in stats.items()})
            if "interval_samples_per_second" in logs:  # the Trainer assumes fixed batches
                logs["interval_samples_per_second"] = logs["samples_per_sec"]
            self._since = _Since()
        if "train_loss" in logs and self.state.global_step > 0:
            logs["train_loss"] = self._loss_total / self.state.global_step
            runtime = float(logs.get("train_runtime") or 0.0)
            if runtime > 0:
                logs["train_samples_per_second"] = round(self._run_samples / runtime, 4)
                logs["train_steps_per_second"] = round(self._run_steps / runtime, 4)
                logs["train_tokens_per_second"] = round(self._run_tokens / runtime, 4)
        super().log(logs, **kwargs)

    # -- Trainer overrides: checkpoints --------------------------------------------------------
    def _checkpoint_dirs(self) -> list[tuple[int, str]]:
        root = self.args.output_dir
        if not os.path.isdir(root):
            return []
        found = []
        for name in os.listdir(root):
            match = _CHECKPOINT.match(name)
            path = os.path.join(root, name)
            if match and os.path.isfile(os.path.join(path, STATE_FILE)):
                found.append((int(match.group(1)), path))
        return sorted(found)

    def _resolve_checkpoint(self, value: Any) -> str | None:
        if value is None or value is False:
            return None
        if value is True:
            found = self._checkpoint_dirs()
            if not found:
                raise InputError(
                    f"resume_from_checkpoint=True, but {self.args.output_dir} holds no checkpoint "
                    f"with {STATE_FILE} (one saved by DynamicBatchTrainer)"
                )
            return found[-1][1]
        if not isinstance(value, (str, os.PathLike)):
            raise InputTypeError(
                "resume_from_checkpoint must be a checkpoint folder, True (the newest in "
                f"output_dir) or None, got resume_from_checkpoint={value!r}"
            )
        path = os.fspath(value)
        if not os.path.isdir(path):
            raise InputError(f"resume_from_checkpoint={path!r} is not a directory")
        if not os.path.isfile(os.path.join(path, STATE_FILE)):
            raise InputError(
                f"resume_from_checkpoint={path!r} has no {STATE_FILE}: it was not saved by "
                "DynamicBatchTrainer, and an exact resume needs the sampler's position"
            )
        return path

    def _window_settings(self) -> dict[str, Any]:
        return {
            "accumulate": self.accumulate,
            "accumulate_target": self.accumulate_target,
            "gradient_accumulation_steps": self.micro_batches_per_step,
        }

    def _save_checkpoint(self, model: Any, metrics: Any = None) -> None:
        super()._save_checkpoint(model, metrics=metrics)
        if not self.args.should_save or self.train_sampler is None:
            return
        epoch, position = self._position
        sampler = self.train_sampler
        if sampler.epoch != epoch:  # the loader sets the next epoch only when it begins
            raise RuntimeError(f"sampler is at epoch {sampler.epoch}, training at epoch {epoch}")
        state = {
            "version": _STATE_VERSION,
            "global_step": int(self.state.global_step),
            "sampler": sampler.state_dict(consumed_batches=position),
            "windows": self._window_settings(),
            "loss_total": self._loss_total,
            "consumed_samples": self.consumed_samples,
        }
        folder = os.path.join(
            self.args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        )
        path = os.path.join(folder, STATE_FILE)
        with open(path + ".tmp", "w", encoding="utf-8") as fh:
            json.dump(state, fh, indent=1)
        os.replace(path + ".tmp", path)

    def _load_optimizer_and_scheduler(self, checkpoint: Any) -> None:
        if checkpoint is None or self.train_sampler is None or self.args.ignore_load_lr_and_optim:
            super()._load_optimizer_and_scheduler(checkpoint)
            return
        # everything of ours is checked before anything is loaded
        path = os.path.join(checkpoint, STATE_FILE)
        try:
            with open(path, encoding="utf-8") as fh:
                state = json.load(fh)
        except (OSError, ValueError) as exc:
            raise InputError(
                f"{path} cannot be read as a DynamicBatchTrainer state: {exc}"
            ) from None
        keys = {"version", "windows", "sampler"}
        if not isinstance(state, Mapping) or not keys <= set(state):
            raise InputError(
                f"{path} is not a DynamicBatchTrainer state: it needs the keys {sorted(keys)}"
            )
        if state.get("version") != _STATE_VERSION:
            raise InputError(f"{path} is not a DynamicBatchTrainer state of this release")
        saved, here = state["windows"], self._window_settings()
        if saved != here:
            differ = "; ".join(
                f"{k}: saved {saved.get(k)!r}, here {v!r}"
                for k, v in here.items()
                if saved.get(k) != v
            )
            raise InputError(
                f"{checkpoint} was trained with other optimizer windows ({differ}); resume with "
                "the same gradient_accumulation_steps, accumulate and accumulate_target"
            )
        self.train_sampler.load_state_dict(state["sampler"])  # checks lengths, options, plan
        super()._load_optimizer_and_scheduler(checkpoint)
        self._position = (int(state["sampler"]["epoch"]), int(state["sampler"]["position"]))
        self._loss_total = float(state["loss_total"])
        self.consumed_samples = int(state["consumed_samples"])
        self._resumed_step = int(state["global_step"])
        self._load_rng_state(checkpoint)

    def train(self, resume_from_checkpoint: Any = None, ignore_keys_for_eval: Any = None) -> Any:
        """Train for the real epochs of ``args``; resume exactly from a checkpoint (or True)."""
        self._sampler()
        checkpoint = self._resolve_checkpoint(resume_from_checkpoint)
        self._position = (0, 0)
        self._last_window = None
        self._resumed_step = None
        self._loss_total = 0.0
        self.consumed_samples = 0
        self._run_samples, self._run_tokens, self._run_steps = 0, 0.0, 0
        self._since = _Since()
        _reset_peak_memory()
        out = super().train(
            resume_from_checkpoint=checkpoint, ignore_keys_for_eval=ignore_keys_for_eval
        )
        steps = int(self.state.global_step)
        return TrainOutput(out.global_step, self._loss_total / steps if steps else 0.0, out.metrics)

    # -- Trainer overrides: evaluation ---------------------------------------------------------
    def evaluation_loop(
        self,
        dataloader: Any,
        description: str,
        prediction_loss_only: bool | None = None,
        ignore_keys: list[str] | None = None,
        metric_key_prefix: str = "eval",
        max_eval_iters: int | None = -1,
    ) -> Any:
        """Per-rank evaluation of dynamic batches, gathered once (NOTE [ evaluation ... ])."""
        sampler = getattr(dataloader, "batch_sampler", None)
        if sampler is None or not any(sampler is s for _, s in self._eval_samplers):
            return super().evaluation_loop(
                dataloader,
                description,
                prediction_loss_only=prediction_loss_only,
                ignore_keys=ignore_keys,
                metric_key_prefix=metric_key_prefix,
                max_eval_iters=max_eval_iters,
            )
        args = self.args
        if prediction_loss_only is None:
            prediction_loss_only = args.prediction_loss_only
        if ignore_keys is None:
            ignore_keys = list(
                getattr(getattr(self.model, "config", None), "keys_to_ignore_at_inference", [])
                or []
            )
        model = self.model
        model.eval()
        self.callback_handler.eval_dataloader = dataloader
        plan, padding = sampler.batches(), sampler.padding_mask()
        loss_sum = count = 0.0
        seen: list[NDArray[Any]] = []
        preds: Any = None
        labels: Any = None
        for k, batch in enumerate(dataloader):
            if max_eval_iters is not None and 0 < max_eval_iters <= k:
                break
            if padding[k]:  # a repeat that only evens out the ranks' batch counts
                continue
            indices = np.asarray(plan[k])
            batch, model_inputs = self._split(batch)
            has_labels = all(batch.get(name) is not None for name in self.label_names)
            with paddle.no_grad(), self.autocast_smart_context_manager():
                outputs = model(**model_inputs)
                if has_labels:
                    loss_sum += float(
                        self._loss_sum(outputs, batch, indices, sampler.lengths).item()
                    )
                    count += float(
                        indices.size
                        if self.accumulate == "samples"
                        else sampler.lengths[indices].sum()
                    )
            seen.append(indices)
            if not prediction_loss_only:
                logits = _prediction(outputs, ignore_keys)
                preds = (
                    logits if preds is None else nested_concat(preds, logits, padding_index=-100)
                )
                if has_labels:
                    lab = _numpy([batch[name] for name in self.label_names])
                    lab = lab[0] if len(lab) == 1 else tuple(lab)
                    labels = (
                        lab if labels is None else nested_concat(labels, lab, padding_index=-100)
                    )
            self.control = self.callback_handler.on_prediction_step(args, self.state, self.control)
        order = np.concatenate(seen) if seen else np.zeros(0, dtype=np.int64)
        totals = paddle.to_tensor([loss_sum, count], dtype="float64")
        if args.dataset_world_size > 1:
            paddle.distributed.all_reduce(totals)
            if not prediction_loss_only:
                gathered: list[Any] = []
                paddle.distributed.all_gather_object(gathered, (order, preds, labels))
                order, preds, labels = _merge(gathered)
        if not prediction_loss_only and order.size:
            unique, first = np.unique(order, return_index=True)
            preds, labels = _take(preds, first), _take(labels, first)
            order = unique
        model.train()
        metrics: dict[str, Any] = {}
        if self.compute_metrics is not None and preds is not None and labels is not None:
            label_ids = labels[0] if isinstance(labels, (list, tuple)) else labels
            metrics = dict(
                self.compute_metrics(EvalPrediction(predictions=preds, label_ids=label_ids))
            )
        loss_total, count_total = (float(x) for x in totals.numpy())
        if count_total > 0:
            metrics["loss"] = loss_total / count_total
        metrics = {
            (k if k.startswith(f"{metric_key_prefix}_") else f"{metric_key_prefix}_{k}"): v
            for k, v in metrics.items()
        }
        num_samples = int(order.size) if not prediction_loss_only else len(sampler.lengths)
        return EvalLoopOutput(
            predictions=preds, label_ids=labels, metrics=metrics, num_samples=num_samples
        )


# -- evaluation helpers ------------------------------------------------------------------------
def _numpy(values: Any) -> Any:
    if isinstance(values, (list, tuple)):
        return type(values)(_numpy(v) for v in values)
    if isinstance(values, paddle.Tensor):
        return values.detach().numpy()
    return np.asarray(values)


def _prediction(outputs: Any, ignore_keys: list[str]) -> Any:
    """The model's outputs as numpy predictions, as paddlenlp's prediction_step picks them."""
    if isinstance(outputs, Mapping):
        logits: Any = tuple(v for k, v in outputs.items() if k not in [*ignore_keys, "loss"])
    elif isinstance(outputs, (tuple, list)):
        logits = tuple(outputs)
    else:
        logits = outputs
    if isinstance(logits, tuple) and len(logits) == 1:
        logits = logits[0]
    return _numpy(logits)


def _merge(gathered: list[Any]) -> tuple[NDArray[Any], Any, Any]:
    order = np.concatenate([g[0] for g in gathered])
    merged: list[Any] = [None, None]
    for _, preds, labels in gathered:
        for slot, part in enumerate((preds, labels)):
            if part is not None:
                merged[slot] = (
                    part
                    if merged[slot] is None
                    else nested_concat(merged[slot], part, padding_index=-100)
                )
    return order, merged[0], merged[1]


def _take(values: Any, rows: NDArray[Any]) -> Any:
    if values is None:
        return None
    if isinstance(values, (list, tuple)):
        return type(values)(_take(v, rows) for v in values)
    return np.asarray(values)[rows]
