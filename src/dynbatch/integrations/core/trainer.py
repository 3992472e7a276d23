"""``DynamicBatchTrainerCore``: a host's Trainer put on the plan, its arguments checked once.

The class is made here: its arguments, checked before the host's ``Trainer`` is made, and the
training sampler planned. Its overrides are mixins beside it: training (the loader, the step,
the logs, ``train()``) :mod:`.training`, evaluation :mod:`.evaluation`; the window's update is
:mod:`.step` (NOTE [ one update, one mean ]); the plan's windows :mod:`.run`; the training
sampler and its step time :mod:`.planner`; packing :mod:`.packing`; the arguments,
checkpoints, logs and losses their modules beside this one. Everything is written once for
every host: an adapter puts this class before its framework's ``Trainer`` and names its
:class:`~.host.Host` (NOTE [ one core, one host per adapter ] in :mod:`.host`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from ..._checks import InputError, check_bool, check_choice, check_positive_number
from ...paddle.sampler import DistributedDynamicBatchSampler, resolve_lengths
from ...plan.options import PlanOptions
from ...plan.windows import UNITS
from ._compat import CompatHooks, int_hparams_visualdl
from .arguments import checked_args, plan_options, run_args, split_keywords
from .checkpoints import PlanCheckpoints
from .evaluation import EvalSamplers, EvaluationOverrides, check_eval_lengths
from .host import Host
from .logs import RunLog
from .losses import loss_fn_for
from .packing import Packed, check_pack_len, packed_loss, packed_model, padded_collator
from .planner import AUTO, TrainPlanner, checked_time_model
from .run import PlanWindows, RunPlan, real_epochs
from .seq2seq import check_pairs_given
from .training import TrainingOverrides

__all__ = ["DynamicBatchTrainerCore"]


class DynamicBatchTrainerCore(
    TrainingOverrides, EvaluationOverrides, PlanWindows, PlanCheckpoints, CompatHooks
):
    """A framework's ``Trainer`` (paddlenlp's, PaddleFormers') on dynamic batches, all kept.

    The Trainer assumes fixed batches where it sizes the run, divides each micro-batch's loss
    by ``gradient_accumulation_steps``, resumes and calls ``set_epoch``; this class replaces
    each (:mod:`dynbatch.integrations.core` says how).

    Args:
        model, args, train_dataset, eval_dataset, data_collator: as for
            ``Trainer``. ``args.num_train_epochs`` is a whole number of real
            epochs (or set ``args.max_steps``); ``args.gradient_accumulation_steps``
            is the number of *planned* micro-batches per optimizer step. The
            collator must return a dict (model inputs and label fields).
        lengths: per-sample lengths of ``train_dataset`` (``[N, 2]`` (source, target) pairs for
            an encoder–decoder), or a way to measure them: ``length_fn`` or ``ref_index``.
        length_fn: ``length_fn(sample) -> int`` (or ``-> (source, target)``), called once per
            training sample (and per evaluation sample, without ``eval_lengths``).
        ref_index: the field of each sample whose size is its length (a dict sample's key,
            such as ``"input_ids"``), instead of ``length_fn``.
        eval_lengths: lengths of ``eval_dataset`` (a dict of arrays for a dict
            of eval datasets). Without them, ``length_fn`` / ``ref_index``
            measure the eval samples; with neither, evaluation uses the Trainer's
            fixed batches of ``per_device_eval_batch_size``.
        cache_path: store measured training lengths here (see the samplers).
        options: a :class:`~dynbatch.PlanOptions`; or its fields as keywords
            (``max_cost=..., cost=..., order=..., seed=..., max_batch_size=...``),
            not both. ``cost`` may be any cost object, e.g. a ``MemoryCost``.
            Without ``options`` or ``max_cost``: the fixed batch's recipe at
            ``args``' batch size (:func:`dynbatch.like_fixed`; other option
            keywords then refine it). ``seed`` defaults to ``args.seed``.
        loss_tokens: per-sample counts of the tokens with a loss (a masked
            prompt has none; at most the sample's length), for token losses:
            updates in ``"tokens"`` count them, so each update averages over the tokens it
            learns from; the cost plans on ``lengths``.
        accumulate: ``"samples"`` (each update is the mean over the step's
            samples; updates of the fixed batch's samples) or ``"tokens"``
            (over its real tokens, the ``lengths`` or ``loss_tokens``; updates
            of as many tokens as the fixed batch holds on average). With a
            ``loss_fn`` returning ``(loss_sum, count)`` the mean is over that
            count either way, and ``accumulate`` says what updates are cut on.
        accumulate_target: instead of ``gradient_accumulation_steps``, close
            a window when its samples (or tokens) over all ranks reach this.
        loss_fn: ``loss_fn(outputs, batch) -> losses``, one loss per sample
            (shape ``[n]``) or per token (``[n, ...]``, padding set to 0, only
            with ``accumulate="tokens"``), or ``(loss_sum, count)`` with the
            count from the batch
            (:func:`~dynbatch.integrations.core.losses.token_cross_entropy` for
            language models: the mean over the loss tokens); never a mean. The model is
            called with every field of the batch but the label fields
            (``args.label_names``, default ``["labels"]``). A per-sample loss
            under ``accumulate="tokens"`` weighs each sample by its length (its
            ``loss_tokens`` when given). Default:
            :func:`~dynbatch.integrations.core.losses.per_sample_cross_entropy`
            (sequence classification), its ``token_cross_entropy`` for a
            ``...ForCausalLM`` (without the shift for a ``...ForConditionalGeneration``: the
            target tokens' mean), or ``criterion`` if given: a loss layer with a
            ``reduction`` (such as ``paddle.nn.CrossEntropyLoss()``), called on
            ``(logits, labels)`` with ``reduction="none"`` on a copy of it.
        labels_to_model: also pass the label fields to the model, for models
            that need them (an encoder–decoder's decoder still reads the batch's
            ``decoder_input_ids``). The loss is still ``loss_fn``'s, from the logits: the
            model's own loss, a mean, is not used.
        time_model: the device's step time, at which the recipe cuts each update into
            micro-batches (finely on a CPU, where padding costs; not on a GPU below its knee,
            where a step costs the same at any size): by default (``"auto"``) measured on the
            model before training on an accelerator (a few real steps on the longest samples,
            the weights and random state put back), and none on a CPU, where padding always
            costs and a measured step time is noise; ``"measure"`` measures on any device; an
            object with ``c``, ``a``, ``b`` (or ``"c,a,b"``; for pairs a ``PairStepTimeModel``
            or ``"c,a_s,a_t,b_s,b_t,cross"``) is used as given; None plans without one (on an
            accelerator: each update whole). With ``accumulate="tokens"``
            the recipe keeps its padding-free split: a time model there is refused, not
            dropped.
        **kwargs: the other ``Trainer`` arguments (``compute_metrics``,
            ``callbacks``, ``optimizers``, ``tokenizer``,
            ``preprocess_logits_for_metrics``) and the plan options. With
            ``pack_len`` each training micro-batch is packed into rows for a
            causal LM (the loss defaults to ``token_cross_entropy``) or a
            sequence classifier, and ``data_collator`` serves evaluation only;
            without one the Trainer pads the samples itself for evaluation and
            the step-time probe. Any other kind of model, or a sample field the rows would
            drop, is refused by name when the Trainer is made. The samples the probe reads are
            checked before it runs, so a refusal never waits for seconds of measuring.

    Attributes:
        train_sampler: the :class:`~dynbatch.DistributedDynamicBatchSampler`
            over ``train_dataset`` (world size and rank from ``args``).
        options: the :class:`~dynbatch.PlanOptions` of training.
        train_collator: what collates a training micro-batch: ``data_collator``, or with
            ``pack_len`` the rows (:func:`~dynbatch.integrations.core.packing.pack_collator`).
        num_epochs: real epochs of the run (None when ``args.max_steps`` sets it).
        max_steps: ``args.max_steps`` when positive, else None.
        micro_batches_per_step: ``args.gradient_accumulation_steps``.
    """

    # NOTE [ the Trainer measures the step time ], [ the Trainer packs ] and
    # NOTE [ dynbatch's checks before the probe ]: the why of the arguments above

    #: the framework this class runs on: set by the adapter's class
    host: ClassVar[Host]
    control: Any  # the Trainer's TrainerControl
    data_collator: Any  # the user's; else the host's default, or with pack_len ours

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
        loss_tokens: Any = None,
        labels_to_model: bool = False,
        time_model: Any = AUTO,
        **kwargs: Any,
    ) -> None:
        host = self.host
        attention = kwargs.pop("attention", None)  # NOTE [ attention layouts ]: with pack_len
        trainer_kwargs = split_keywords(kwargs, host)
        criterion = trainer_kwargs.pop("criterion", None)
        loss_for = loss_fn_for(loss_fn, criterion, model)
        self.accumulate = check_choice("accumulate", accumulate, UNITS)
        self.labels_to_model = check_bool("labels_to_model", labels_to_model)
        self.accumulate_target = (
            None
            if accumulate_target is None
            else check_positive_number("accumulate_target", accumulate_target)
        )
        args = checked_args(args, host)
        planned = plan_options(options, kwargs, args, train_dataset is not None)
        pack_len = check_pack_len(
            planned.pack_len if planned is not None else kwargs.get("pack_len"), model
        )
        run = run_args(
            args,
            host,
            recipe=planned is None,
            update_size=None if planned is None else planned.update_size,
            accumulate_target=self.accumulate_target,
        )
        self.micro_batches_per_step = run.micro_batches_per_step
        self.max_steps, self.num_epochs = run.max_steps, run.num_epochs
        if train_dataset is None and (lengths is not None or loss_tokens is not None):
            raise InputError(
                "lengths or loss_tokens were given without a train_dataset to go with them"
            )
        if planned is not None:  # the options given, or evaluation only
            self.options = planned
        time_model = checked_time_model(time_model, self.accumulate, planned)
        self._eval_samplers = EvalSamplers(
            eval_dataset, check_eval_lengths(eval_dataset, eval_lengths), length_fn, ref_index
        )
        check_pairs_given(model, data_collator, lengths, eval_lengths, self.accumulate)
        super().__init__(
            model=model,
            args=host.fix_args(run.internal),
            data_collator=data_collator,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            **trainer_kwargs,
        )
        int_hparams_visualdl(self.callback_handler.callbacks, host)
        self.add_callback(real_epochs(self))
        self.loss_fn = loss_for(self.label_names[0])
        self.gave_loss_fn = loss_fn is not None  # the user's own: what it counts is its own
        #: how the training micro-batches are packed for the model, or None
        #: (NOTE [ the Trainer packs ]); evaluation stays unpacked
        self.packed: Packed | None = None
        if attention is not None and pack_len is None:
            raise InputError(f"attention={attention!r} is how packed rows run: give pack_len=")
        if pack_len is not None:
            self.packed = packed_model(
                model, self.label_names[0], pack_len, host.causal_packing, attention
            )
            if loss_fn is None and criterion is None:
                self.loss_fn = packed_loss(self.packed) or self.loss_fn
            if data_collator is None:  # the probe's and evaluation's batches: ours
                self.data_collator = padded_collator(self.packed)
        self.train_collator: Any = self.data_collator
        self.resumed_step: int | None = None
        self.resume_state: tuple[str, dict[str, Any]] | None = None
        self.follows_args = planned is None
        self.planned_accumulation_steps = int(args.gradient_accumulation_steps)
        self.run_log = RunLog()
        self.train_sampler: DistributedDynamicBatchSampler | None = None
        self.run: RunPlan | None = None
        self._planner: TrainPlanner | None = None
        if train_dataset is None:
            return
        self._planner = TrainPlanner(
            self,
            args,
            train_dataset,
            lengths=resolve_lengths(train_dataset, lengths, length_fn, ref_index, cache_path),
            loss_tokens=loss_tokens,
            planned=planned,
            keywords=kwargs
            if self.packed is None
            else {**kwargs, "attention": self.packed.attention},
            time_model=time_model,
            packed=self.packed,
        )
        self._use_sampler(self._planner.first())
