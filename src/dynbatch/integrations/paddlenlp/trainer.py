"""``DynamicBatchTrainer``: the overrides that put paddlenlp's Trainer on the plan.

NOTE [ one update, one mean ]
    ``training_step`` runs the window's micro-batches through the update engine
    of :mod:`dynbatch.update` (NOTE [ one update engine ]): ``no_sync`` on all
    but the last when data parallel, the *sum* of per-sample (or per-token)
    losses from ``loss_fn`` back-propagated, repeats weighed 0, and one
    all-reduce of ``[count, loss sum, non-finite flags]`` before the gradients
    are scaled by ``world_size / count``. The count is each micro-batch's
    samples (or real tokens) read from the plan, so it equals the window's
    ``count``. ``DataParallel`` averages over ranks, so each optimizer step is
    the mean over every real sample (or token) of the step, whatever the
    micro-batch sizes. A ``loss_fn`` that returns ``(loss_sum, count)`` (a
    language model's loss tokens, :func:`~.losses.token_cross_entropy`) gives
    the count from the batch instead; it is checked against the plan when the
    plan knows it (``accumulate="tokens"`` with ``loss_tokens``). A mean is
    refused with the reason: it cannot be re-weighted. Every rank logs the
    same loss and reaches the same verdict: paddlenlp 3.0.0b4 steps the
    optimizer itself right after ``training_step`` and has no way to skip one
    step (its only check raises on a non-finite loss), so a non-finite window
    raises ``ValueError`` on every rank at once rather than hanging one of
    them; with fp16 loss scaling the scaler skips the overflowed step instead,
    as in paddlenlp. A window with nothing to average (every token masked, on
    every rank) has its gradients dropped (not zeroed), so the optimizer's
    step leaves every parameter and moment as it was. Clipping happens after
    the scaling, inside ``optimizer.step()``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import paddle
from numpy.typing import NDArray
from paddlenlp.trainer.trainer_utils import TrainOutput
from paddlenlp.utils.log import logger

from ..._checks import (
    InputError,
    InputTypeError,
    check_bool,
    check_choice,
    check_int,
    check_positive_number,
)
from ...contract import counted_tokens
from ...options import PlanOptions
from ...sampler import DistributedDynamicBatchSampler
from ...update import ExactMeanUpdate
from ...windows import UNITS
from ._compat import CompatTrainer, int_hparams_visualdl
from .arguments import checked_args, plan_options, run_args, split_keywords, train_sampler
from .checkpoints import checkpoint_folder, read_state, resolve_checkpoint, write_state
from .evaluation import EvalSamplers, check_eval_lengths, evaluate
from .logs import RunLog
from .losses import loss_and_count, loss_fn_for
from .run import RealEpochs, RunLoader, RunPlan, Window, split_batch

__all__ = ["DynamicBatchTrainer"]

#: Logged for a window whose count is 0 over all ranks (NOTE [ one update, one mean ]).
_EMPTY_WINDOW = (
    "step {step} (epoch {w.epoch}, micro-batches [{w.start}, {w.stop})) has no sample or token "
    "with a loss on any rank: its gradients are dropped, so the optimizer leaves the weights "
    "and its moments as they were (the LR schedule still counts the step)"
)


class DynamicBatchTrainer(CompatTrainer):
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
            Without ``options`` or ``max_cost``: the fixed batch's recipe at
            ``args``' batch size (:func:`dynbatch.like_fixed`; other option
            keywords then refine it). ``seed`` defaults to ``args.seed``.
        loss_tokens: per-sample counts of the tokens with a loss (a masked
            prompt has none; at most the sample's length), for token losses:
            updates in ``"tokens"`` count them, the cost plans on ``lengths``
            (NOTE [ counting loss tokens ] in :mod:`dynbatch.losses`).
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
            count from the batch (:func:`~.losses.token_cross_entropy` for language
            models: the mean over the loss tokens); never a mean. The model is
            called with every field of the batch but the label fields
            (``args.label_names``, default ``["labels"]``). A per-sample loss
            under ``accumulate="tokens"`` weighs each sample by its length (its
            ``loss_tokens`` when given). Default:
            :func:`~.losses.per_sample_cross_entropy` (sequence classification), or
            ``criterion`` if given: a loss layer with a ``reduction`` (such as
            ``paddle.nn.CrossEntropyLoss()``), called on ``(logits, labels)``
            with ``reduction="none"`` on a copy of it.
        labels_to_model: also pass the label fields to the model, for models
            that need them (seq2seq decoders build their inputs from
            ``labels``). The loss is still ``loss_fn``'s, from the logits: the
            model's own loss, a mean, is not used.
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
        loss_tokens: Any = None,
        labels_to_model: bool = False,
        **kwargs: Any,
    ) -> None:
        trainer_kwargs = split_keywords(kwargs)
        loss_for = loss_fn_for(loss_fn, trainer_kwargs.pop("criterion", None))
        self.accumulate = check_choice("accumulate", accumulate, UNITS)
        self.labels_to_model = check_bool("labels_to_model", labels_to_model)
        self.accumulate_target = (
            None
            if accumulate_target is None
            else check_positive_number("accumulate_target", accumulate_target)
        )
        args = checked_args(args)
        planned = plan_options(options, kwargs, args, train_dataset is not None)
        run = run_args(
            args,
            recipe=planned is None,
            update_size=None if planned is None else planned.update_size,
            accumulate_target=self.accumulate_target,
        )
        self.micro_batches_per_step = run.micro_batches_per_step
        self.max_steps, self.num_epochs = run.max_steps, run.num_epochs
        self.train_sampler: DistributedDynamicBatchSampler | None = None
        self.run: RunPlan | None = None
        if train_dataset is not None:
            self.train_sampler = train_sampler(
                train_dataset,
                args,
                options=planned,
                unit=self.accumulate,
                plan_keywords=kwargs,
                lengths=lengths,
                loss_tokens=loss_tokens,
                length_fn=length_fn,
                ref_index=ref_index,
                cache_path=cache_path,
            )
            self.options = self.train_sampler.options
            self.run = RunPlan(
                self.train_sampler,
                unit=self.accumulate,
                micro_batches_per_step=self.micro_batches_per_step,
                target=self.accumulate_target,
                num_epochs=self.num_epochs,
                max_steps=self.max_steps,
            )
        elif lengths is not None or loss_tokens is not None:
            raise InputError(
                "lengths or loss_tokens were given without a train_dataset to go with them"
            )
        elif planned is not None:  # evaluation only (plan_options refused no options)
            self.options = planned
        self._eval_samplers = EvalSamplers(
            eval_dataset, check_eval_lengths(eval_dataset, eval_lengths), length_fn, ref_index
        )
        super().__init__(
            model=model,
            args=run.internal,
            data_collator=data_collator,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            **trainer_kwargs,
        )
        int_hparams_visualdl(self.callback_handler.callbacks)
        self.add_callback(RealEpochs(self))
        self.loss_fn = loss_for(self.label_names[0])
        self.resumed_step: int | None = None
        self.run_log = RunLog()

    # -- the plan's windows ------------------------------------------------------------------
    def _run(self) -> RunPlan:
        if self.run is None:
            raise InputError("training needs a train_dataset (and its lengths)")
        return self.run

    def window_ends(self, epoch: int) -> NDArray[np.int64]:
        """Where ``epoch``'s optimizer steps end, in micro-batches of this rank's plan."""
        return self._run().window_ends(check_int("epoch", epoch))

    def steps_per_epoch(self, epoch: int) -> int:
        """Optimizer steps of real epoch ``epoch``."""
        return self._run().steps_per_epoch(check_int("epoch", epoch))

    def total_steps(self) -> int:
        """Optimizer steps of the whole run: ``args.max_steps``, or every epoch's windows summed."""
        return self._run().total_steps()

    @property
    def last_window(self) -> Window | None:
        """The window trained last (None before the first)."""
        return None if self.run is None else self.run.last_window

    @property
    def consumed_samples(self) -> int:
        """Real samples trained over all ranks, the whole run (a resume included)."""
        return self.run_log.consumed_samples

    # -- Trainer overrides: data ---------------------------------------------------------------
    def get_train_dataloader(self) -> RunLoader:
        """Every window of the run; ``len()`` is its exact number of optimizer steps."""
        run = self._run()
        total = run.total_steps()
        logger.info(run.describe(total, self.options))
        loader = paddle.io.DataLoader(
            self.train_dataset,
            batch_sampler=run.sampler,
            collate_fn=self.data_collator,
            num_workers=self.args.dataloader_num_workers,
        )
        return RunLoader(run, loader, total)

    def get_eval_dataloader(self, eval_dataset: Any = None) -> Any:
        """Dynamic batches if eval lengths are known (NOTE [ evaluation with unequal batches ])."""
        dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        sampler = None
        if dataset is not None:
            args = self.args
            world, rank = args.dataset_world_size, args.dataset_rank
            sampler = self._eval_samplers.get(dataset, self.options, world, rank)
        if sampler is None:
            return super().get_eval_dataloader(eval_dataset)
        return paddle.io.DataLoader(
            dataset,
            batch_sampler=sampler,
            collate_fn=self.data_collator,
            num_workers=self.args.dataloader_num_workers,
        )

    # -- Trainer overrides: the step -----------------------------------------------------------
    def training_step(self, model: Any, inputs: Any, step_control: int = 0) -> Any:
        """One optimizer window: the exact mean over its samples or tokens on every rank."""
        window = inputs.get("window") if isinstance(inputs, Mapping) else None
        if not isinstance(window, Window):
            raise InputTypeError(
                "DynamicBatchTrainer.training_step takes the windows of its own train loader, got "
                f"{type(inputs).__name__}"
            )
        model.train()
        run = self._run()
        lengths = counted_tokens(run.sampler)  # what "tokens" count: loss tokens if given
        checked = True  # the plan knows the count: samples, tokens, or loss tokens
        scaler = self.scaler if self.do_grad_scaling else None
        engine = ExactMeanUpdate(model, world_size=self.args.dataset_world_size, scaler=scaler)
        micro = inputs["micro_batches"]
        for k, (batch, indices, padding) in enumerate(
            zip(micro, window.indices, window.padding, strict=True)
        ):
            batch, model_inputs = split_batch(
                batch, self.label_names, self.prepare_inputs, self.labels_to_model
            )
            with engine.micro_batch(last=k == len(micro) - 1):
                with self.autocast_smart_context_manager():
                    # no name for the outputs: the logits are freed before backward when the
                    # loss keeps only what it needs (token_loss keeps the loss rows)
                    total, count, from_batch = loss_and_count(
                        self.loss_fn(model(**model_inputs), batch),
                        indices,
                        lengths,
                        self.accumulate,
                    )
                engine.backward(total.astype("float32"), count, padding=padding)
            checked = checked and (not from_batch or run.counts_loss_tokens)
        update = engine.close()
        if checked and abs(update.count - window.count) > 1e-5 * max(window.count, 1.0):
            raise RuntimeError(  # the ranks' counts and the plan disagree: a wrong update
                f"the window's count over all ranks is {update.count:g}, the plan's "
                f"{window.count:g}: are all ranks training the same plan, and do loss_tokens "
                "count the tokens loss_fn counts (dynbatch.loss_token_counts(labels) with the "
                "loss's shift and ignore_index)?"
            )
        if update.finite and update.count == 0:  # nothing to average: leave the weights be
            logger.warning(_EMPTY_WINDOW.format(step=self.state.global_step + 1, w=window))
            for p in model.parameters():
                p.clear_gradient(False)  # no gradient: the optimizer steps over every parameter
        if not update.finite and scaler is None:
            raise ValueError(
                f"the loss or gradients of step {self.state.global_step + 1} (epoch "
                f"{window.epoch}, micro-batches {window.start}..{window.stop - 1}) are NaN or "
                f"inf on some rank (loss sum {update.loss_sum}); paddlenlp's Trainer cannot "
                "skip a step: lower the learning rate, or use fp16 loss scaling, which skips it"
            )
        run.last_window = window
        rows, repeats = run.rows(window)
        self.run_log.record(
            run.table(window.epoch), rows, repeats, window.stop - window.start, update.mean_loss
        )
        return paddle.to_tensor(update.mean_loss, dtype="float32")

    # -- Trainer overrides: logging ------------------------------------------------------------
    def log(self, logs: dict[str, float], **kwargs: Any) -> None:
        """The Trainer's logs plus the plan's statistics; its fixed-batch speeds made real."""
        self.run_log.update(logs, int(self.state.global_step))
        super().log(logs, **kwargs)

    # -- Trainer overrides: checkpoints (NOTE [ resume from the plan ]) ------------------------
    def _window_settings(self) -> dict[str, Any]:
        return {
            "accumulate": self.accumulate,
            "accumulate_target": self.accumulate_target,
            "gradient_accumulation_steps": self.micro_batches_per_step,
        }

    def save_plan_state(self, global_step: int) -> None:
        """Write the sampler's position and the run's totals beside checkpoint ``global_step``."""
        if not self.args.should_save or self.run is None:
            return
        epoch, position = self.run.position
        sampler = self.run.sampler
        if sampler.epoch != epoch:  # the loader sets the next epoch only when it begins
            raise RuntimeError(f"sampler is at epoch {sampler.epoch}, training at epoch {epoch}")
        state = {
            "global_step": int(global_step),
            "sampler": sampler.state_dict(consumed_batches=position),
            "windows": self._window_settings(),
            "loss_total": self.run_log.loss_total,
            "consumed_samples": self.run_log.consumed_samples,
        }
        write_state(checkpoint_folder(self.args.output_dir, global_step), state)

    def load_plan_state(self, checkpoint: str) -> bool:
        """Check and load the checkpoint's state file; then the Trainer loads the rest."""
        if self.run is None:
            return False
        state = read_state(checkpoint, self._window_settings())
        self.run.sampler.load_state_dict(state["sampler"])  # checks lengths, options, plan
        self.run.position = (int(state["sampler"]["epoch"]), int(state["sampler"]["position"]))
        self.run_log.loss_total = float(state["loss_total"])
        self.run_log.consumed_samples = int(state["consumed_samples"])
        self.resumed_step = int(state["global_step"])
        return True

    def train(self, resume_from_checkpoint: Any = None, ignore_keys_for_eval: Any = None) -> Any:
        """Train for the real epochs of ``args``; resume exactly from a checkpoint (or True)."""
        run = self._run()
        checkpoint = resolve_checkpoint(resume_from_checkpoint, self.args.output_dir)
        run.position, run.last_window = (0, 0), None
        self.resumed_step = None
        self.run_log = RunLog()
        out = super().train(
            resume_from_checkpoint=checkpoint, ignore_keys_for_eval=ignore_keys_for_eval
        )
        steps = int(self.state.global_step)
        loss = self.run_log.loss_total / steps if steps else 0.0
        return TrainOutput(out.global_step, loss, out.metrics)

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
        kw: dict[str, Any] = {
            "prediction_loss_only": prediction_loss_only,
            "ignore_keys": ignore_keys,
            "metric_key_prefix": metric_key_prefix,
            "max_eval_iters": max_eval_iters,
        }
        if sampler is None or not self._eval_samplers.knows(sampler):
            return super().evaluation_loop(dataloader, description, **kw)
        return evaluate(self, dataloader, sampler, **kw)
