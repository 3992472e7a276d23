"""The run's optimizer windows, read from the plan, and the real epochs shown to the Trainer.

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
    one optimizer step); the user's values are kept in ``num_epochs``,
    ``max_steps`` and ``micro_batches_per_step``. A window is
    ``gradient_accumulation_steps`` micro-batches of *our* plan, or as many as
    it takes to reach ``accumulate_target`` samples or tokens over all ranks
    (NOTE [ accumulating to a budget ] in :mod:`dynbatch.plan.windows`), or the
    plan's own updates, cut on the plan so every rank agrees without
    communication, and never across an epoch's end. ``state.epoch`` shows the
    real epoch, and the ``"epoch"`` logging, evaluation and save strategies
    act at every real epoch's end.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import paddle
from numpy.typing import NDArray

from ..._checks import InputError, InputTypeError, check_int
from ...paddle.safe_collate import SafeCollate, safe_collate
from ...paddle.sampler import DistributedDynamicBatchSampler
from ...plan.contract import counted_tokens
from ...plan.epochs import Recent
from ...plan.options import PlanOptions
from ...plan.packs import PackLayout
from ...plan.stats import batch_table
from ...plan.windows import EpochWindows, Span
from .checkpoints import STATE_FILE
from .host import HostBase, host_subclass

__all__ = [
    "PlanWindows",
    "RealEpochs",
    "RunLoader",
    "RunPlan",
    "Window",
    "check_fields",
    "real_epochs",
    "split_batch",
]


@dataclass(frozen=True)
class Window(Span):
    """One optimizer step as the plan has it; ``training_step`` receives it as ``inputs["window"]``.

    A :class:`~dynbatch.plan.windows.Span` (the real ``epoch``, the window's
    ``index`` of ``windows``, the real epoch's optimizer steps, those trained before
    a resumed rest of it included, its micro-batches ``[start, stop)`` of the epoch's
    plan per rank, and ``count``: what the update averages over as the plan
    counts it, the window's samples, or real tokens with ``accumulate="tokens"``,
    loss tokens with ``loss_tokens``, summed over all ranks; a ``loss_fn``
    returning ``(loss_sum, count)`` counts from the batch instead), with:

    Attributes:
        indices: this rank's sample indices, one array per micro-batch.
        padding: per micro-batch, whether it only repeats samples to even out
            the ranks' step counts (it weighs 0).
        samples: the window's real samples summed over all ranks.
    """

    indices: tuple[NDArray[np.int64], ...] = ()
    padding: tuple[bool, ...] = ()
    samples: int = 0


class RunPlan:
    """Where each optimizer step of the run ends, from the sampler's plan; and the windows.

    ``position`` is ``(epoch, micro-batches of it trained)``: where the next
    window starts (a resume sets it); ``last_window`` the window trained last.
    A resumed rest of an epoch (:meth:`resume_rest`) is that epoch's plan here,
    and ``rest_done`` its steps trained before it: the epoch's place and size
    count them (NOTE [ the real epoch of a resumed rest ]).

    NOTE [ the real epoch of a resumed rest ]
        A checkpoint resumed on another number of ranks continues with the rest
        of its epoch dealt anew, so that epoch's plan holds only its remaining
        steps. Its steps trained before count too: ``state.epoch`` at a global
        step, and the log's steps of the epoch, are the same on any ranks, as the
        plan's updates are. The checkpoint's state holds them
        (``epoch_step``: the epoch and its steps trained); a state saved before
        it held them counts ``global_step`` less the earlier epochs' steps.
    """

    def __init__(
        self,
        sampler: DistributedDynamicBatchSampler,
        *,
        unit: str,
        micro_batches_per_step: int,
        target: float | None,
        num_epochs: int | None,
        max_steps: int | None,
    ) -> None:
        self.sampler, self.unit = sampler, unit
        self.micro_batches_per_step, self.target = micro_batches_per_step, target
        self.num_epochs, self.max_steps = num_epochs, max_steps
        self._epochs: Recent[int, EpochWindows] = Recent(2)  # the epoch in training, one sized
        self._tables: Recent[int, dict[str, NDArray[Any]]] = Recent(2)
        self.position = (0, 0)
        self.last_window: Window | None = None
        #: ``(epoch, global_step)`` of a resume whose epoch is the saved rest, dealt anew
        self.rest_from: tuple[int, int] | None = None
        #: steps of ``rest_from``'s epoch trained before its rest began
        self.rest_done = 0

    def resume_rest(self, epoch: int, global_step: int, done: int | None = None) -> None:
        """Start at the sampler's loaded rest of ``epoch`` (its micro-batch 0), after
        ``global_step`` optimizer steps, ``done`` of them in ``epoch`` (default: the
        earlier epochs' steps taken off; NOTE [ the real epoch of a resumed rest ])."""
        self._epochs, self._tables = Recent(2), Recent(2)  # the rest replaces epoch's plan
        self.position = (epoch, 0)
        self.rest_from = (epoch, global_step)
        if done is None:
            done = global_step - sum(self.steps_per_epoch(e) for e in range(epoch))
        self.rest_done = min(max(done, 0), global_step)

    def done_before(self, epoch: int) -> int:
        """Steps of ``epoch`` trained before its plan here began (those of a resumed rest)."""
        return self.rest_done if self.rest_from is not None and self.rest_from[0] == epoch else 0

    def progress(self) -> tuple[int, int, int]:
        """``(epoch, steps of it trained, its steps)`` at ``position``, a resumed rest's
        earlier steps included (NOTE [ the real epoch of a resumed rest ])."""
        epoch, micro = self.position
        ends = self._epoch(epoch).ends
        before = self.done_before(epoch)
        done = before + int(np.searchsorted(ends, micro, side="right"))
        return epoch, done, before + int(ends.size)

    def _epoch(self, epoch: int) -> EpochWindows:
        return self._epochs.get(epoch, self._make_epoch)

    def _make_epoch(self, epoch: int) -> EpochWindows:
        return EpochWindows(
            self.sampler.epoch_plan(epoch),
            counted_tokens(self.sampler),
            epoch=epoch,
            target=self.target,
            unit=self.unit,
            every=self.micro_batches_per_step,
        )

    @property
    def counts_loss_tokens(self) -> bool:
        """Whether the plan's counts are the loss tokens a ``(loss_sum, count)`` loss counts."""
        return self.unit == "tokens" and self.sampler.loss_tokens is not None

    def window_ends(self, epoch: int) -> NDArray[np.int64]:
        return self._epoch(epoch).ends.copy()

    def steps_per_epoch(self, epoch: int) -> int:
        return int(self._epoch(epoch).ends.size)

    def total_steps(self) -> int:
        if self.max_steps is not None:
            return self.max_steps
        if self.num_epochs is None:  # unreachable: the arguments set one of the two
            raise RuntimeError("neither num_epochs nor max_steps is set")
        if self.rest_from is not None:  # the steps taken, then the rest of the run
            epoch, taken = self.rest_from
            return taken + sum(self.steps_per_epoch(e) for e in range(epoch, self.num_epochs))
        return sum(self.steps_per_epoch(e) for e in range(self.num_epochs))

    def loader(self, dataset: Any, collate_fn: Any, num_workers: int) -> RunLoader:
        """Every window of the run over ``dataset``; ``len()`` its exact optimizer steps. The
        collator's error comes back in its batch, to be raised by name
        (NOTE [ a collate error in paddle's DataLoader ] in :mod:`dynbatch.paddle.safe_collate`)."""
        if collate_fn is not None and not isinstance(collate_fn, SafeCollate):
            collate_fn = safe_collate(collate_fn)
        batches = paddle.io.DataLoader(
            dataset, batch_sampler=self.sampler, collate_fn=collate_fn, num_workers=num_workers
        )
        return RunLoader(self, batches, self.total_steps())

    def describe(self, total: int, options: PlanOptions, averaged: str) -> str:
        """The run in one line, for the log: steps per epoch, what a step is and what its
        loss is ``averaged`` over (:func:`~.losses.mean_over`)."""
        if self.target is not None:
            window = f"{self.target:g} {self.unit} over all ranks"
        elif options.update_size is not None:
            window = (
                f"about {options.update_size:g} {options.update_unit} over all ranks, lengths mixed"
            )
        else:
            window = f"{self.micro_batches_per_step} planned micro-batch(es)"
        if self.num_epochs is not None:
            per_epoch = [self._epoch_steps(e) for e in range(min(self.num_epochs, 6))]
            more = ", ..." if self.num_epochs > 6 else ""
            steps = f"{self.num_epochs} epoch(s) of {', '.join(per_epoch)}{more} steps"
        else:
            steps = f"max_steps={self.max_steps}"
        return (
            f"dynbatch: {total} optimizer steps ({steps}); a step is {window}, {averaged}. "
            "The Trainer's banner counts one epoch and fixed batches."
        )

    def _epoch_steps(self, epoch: int) -> str:
        """``epoch``'s steps for the log: ``"20 remaining of 25"`` for a resumed rest."""
        steps, before = self.steps_per_epoch(epoch), self.done_before(epoch)
        return f"{steps} remaining of {steps + before}" if before else str(steps)

    def resumed_at(self, global_step: int, host_name: str) -> str:
        """Where a resumed run goes on, for the log: the real epoch and its step (the Trainer's
        own line, of the framework ``host_name``, counts one epoch)."""
        epoch, done, steps = self.progress()
        where = f"real epoch {epoch} after its step {done} of {steps}"
        if done == steps and (self.num_epochs is None or epoch + 1 < self.num_epochs):
            where = f"the start of real epoch {epoch + 1}"
        return (
            f"dynbatch: resuming at {where} (global step {global_step} of "
            f'{self.total_steps()}); {host_name}\'s "epoch" above counts the one Trainer epoch '
            "that holds every real epoch"
        )

    def table(self, epoch: int) -> dict[str, NDArray[Any]]:
        """:func:`~dynbatch.plan.stats.batch_table` of every rank's batches of ``epoch``."""
        return self._tables.get(epoch, self._make_table)

    def _make_table(self, epoch: int) -> dict[str, NDArray[Any]]:
        opts = self.sampler.options
        return batch_table(
            self.sampler.lengths,
            self._epoch(epoch).plan.plan,
            cost=opts.cost,
            max_cost=opts.max_cost,
            pad_to_multiple_of=opts.pad_to_multiple_of,
            layout=None if opts.pack_len is None else PackLayout.from_options(opts),
        )

    def rows(self, window: Window) -> tuple[slice, NDArray[np.bool_]]:
        """The window's rows of :meth:`table` (every rank's batches), and which are repeats."""
        replicas = self.sampler.num_replicas
        rows = slice(window.start * replicas, window.stop * replicas)
        return rows, self.sampler.epoch_plan(window.epoch).is_padding[rows]

    def windows(self, loader: Any) -> Iterator[tuple[Window, list[Any]]]:
        """Every window from ``position`` on, with its micro-batches from ``loader``."""
        sampler, replicas = self.sampler, self.sampler.num_replicas
        epoch, position = self.position
        while self.num_epochs is None or epoch < self.num_epochs:
            windows = self._epoch(epoch)
            windows.check_start(position)
            sampler.seek(epoch, position)
            if position < windows.num_steps:
                plan, padding = sampler.batches(epoch), sampler.padding_mask(epoch)
                sizes = self.table(epoch)["batch_size"] * ~windows.plan.is_padding
                micro = iter(loader)
                before = self.done_before(epoch)  # NOTE [ the real epoch of a resumed rest ]
                for span in windows.spans(position):
                    start, stop = span.start, span.stop
                    window = Window(
                        **{
                            **vars(span),
                            "index": span.index + before,
                            "windows": span.windows + before,
                        },
                        indices=tuple(np.asarray(plan[k]) for k in range(start, stop)),
                        padding=tuple(bool(p) for p in padding[start:stop]),
                        samples=int(sizes[start * replicas : stop * replicas].sum()),
                    )
                    batches = [next(micro) for _ in range(stop - start)]
                    self.position = (epoch, stop)
                    yield window, batches
            epoch, position = epoch + 1, 0


class PlanWindows:
    """The Trainer's questions to its run's windows (a mixin): :class:`RunPlan`'s answers."""

    run: RunPlan | None
    train_sampler: DistributedDynamicBatchSampler | None
    options: PlanOptions
    accumulate: str
    accumulate_target: float | None
    micro_batches_per_step: int
    num_epochs: int | None
    max_steps: int | None

    def plan_windows(self, sampler: DistributedDynamicBatchSampler) -> None:
        """Train on ``sampler``: its options, and the run's windows of its plan."""
        self.train_sampler = sampler
        self.options = sampler.options
        self.run = RunPlan(
            sampler,
            unit=self.accumulate,
            micro_batches_per_step=self.micro_batches_per_step,
            target=self.accumulate_target,
            num_epochs=self.num_epochs,
            max_steps=self.max_steps,
        )

    def _run(self) -> RunPlan:
        if self.run is None:
            raise InputError("training needs a train_dataset (and its lengths)")
        return self.run

    def window_ends(self, epoch: int) -> NDArray[np.int64]:
        """Where ``epoch``'s optimizer steps end, in micro-batches of this rank's plan."""
        return self._run().window_ends(check_int("epoch", epoch))

    def steps_per_epoch(self, epoch: int) -> int:
        """Optimizer steps of real epoch ``epoch``.

        Args:
            epoch: the real epoch (a pass over the training set), from 0.
        """
        return self._run().steps_per_epoch(check_int("epoch", epoch))

    def total_steps(self) -> int:
        """Optimizer steps of the whole run: ``args.max_steps``, or every epoch's windows summed."""
        return self._run().total_steps()

    @property
    def last_window(self) -> Window | None:
        """The window trained last (None before the first)."""
        return None if self.run is None else self.run.last_window


class RunLoader:
    """Every window of the run (NOTE [ one Trainer epoch holds every real epoch ])."""

    def __init__(self, run: RunPlan, loader: Any, total: int) -> None:
        self.run, self.loader, self.total = run, loader, total
        self.batch_sampler = run.sampler  # what callbacks look for on a loader

    def __len__(self) -> int:
        return self.total

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for window, batches in self.run.windows(self.loader):
            yield {"micro_batches": batches, "window": window}


def check_fields(batch: Any, label_names: list[str]) -> Mapping[str, Any]:
    """``batch``, once it is a dict of fields, as ``data_collator`` must return."""
    if not isinstance(batch, Mapping):
        raise InputTypeError(
            "data_collator must return a dict of fields (the model's inputs and the label "
            f"fields {label_names}), got {type(batch).__name__}"
        )
    return batch


def split_batch(
    batch: Any, label_names: list[str], prepare: Any, labels_to_model: bool = False
) -> tuple[Mapping[str, Any], dict[str, Any]]:
    """The batch on the device (``prepare``), and the model's inputs: all but the label fields
    (all of them with ``labels_to_model``)."""
    batch = prepare(check_fields(batch, label_names))
    if labels_to_model:
        return batch, dict(batch)
    return batch, {k: v for k, v in batch.items() if k not in label_names}


def real_epochs(trainer: Any) -> Any:
    """The :class:`RealEpochs` callback of ``trainer``, on its host's ``TrainerCallback``."""
    return host_subclass(RealEpochs, trainer.host.trainer_callback)(trainer)


class RealEpochs(HostBase):  # type: ignore[misc]
    """Real epochs in the Trainer's state and the "epoch" strategies at each real epoch's end: a
    mixin, before the host's ``TrainerCallback`` (:func:`real_epochs`)."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer

    def _flag_epoch_strategies(self, args: Any, control: Any, value: bool) -> None:
        epoch = self.trainer.host.interval_strategy.EPOCH
        if args.logging_strategy == epoch:
            control.should_log = value
        if args.evaluation_strategy == epoch:
            control.should_evaluate = value
        if args.save_strategy == epoch:
            control.should_save = value

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        trainer = self.trainer
        expected = trainer.resumed_step
        if expected is not None and state.global_step != expected:
            name = trainer.host.trainer_state_file
            said = f"says global_step={state.global_step}"
            if state.global_step == 0:  # the Trainer starts afresh where the file is missing
                said = f"is missing or {said}"
            raise InputError(
                f"the checkpoint's {name} {said}, its {STATE_FILE} says {expected}: the "
                "checkpoint folder is inconsistent"
            )
        if trainer.num_epochs is not None:
            state.num_train_epochs = trainer.num_epochs
        state.consumed_samples = trainer.consumed_samples
        run = trainer.run
        if expected is not None and run is not None:  # after the Trainer's "from epoch 0"
            epoch, done, steps = run.progress()
            state.epoch = epoch + done / steps if steps else float(epoch)
            host = trainer.host
            host.logger.info(run.resumed_at(expected, host.name))
        return control

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        window = self.trainer.last_window
        if window is None:
            return control
        state.epoch = window.epoch + (window.index + 1) / window.windows
        state.consumed_samples = self.trainer.consumed_samples
        if window.ends_epoch:
            self._flag_epoch_strategies(args, control, True)
        return control

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        window = self.trainer.last_window
        if window is not None and window.ends_epoch:  # already done at that step
            self._flag_epoch_strategies(args, control, False)
        return control
