"""Training with dynamic batches: each update is the mean over its whole effective batch.

NOTE [ normalising the loss ]
    With dynamic batches a per-batch mean loss weights a batch of 3 long
    samples like a batch of 800 short ones: each of the 3 samples moves the
    weights ~270 times more, which is how dynamic batching produced the NaN
    losses of the original study. The right update is the mean over *every
    sample (or token) in the optimizer step*: over all accumulated
    micro-batches and all data-parallel ranks. :class:`GradientAccumulator`
    therefore takes the *sum* of the per-sample losses and their count,
    back-propagates the sum, and before stepping scales the gradients by
    ``world_size / global_count`` — ``DataParallel`` averages gradients over
    ranks, so this turns the summed gradient into the exact global mean. The
    global count is one all-reduce per optimizer step, together with
    non-finite flags (loss and gradients) so that every rank skips the same
    steps.

The windows themselves (NOTE [ accumulating to a budget ]) are pure numpy, in
:mod:`dynbatch.plan.windows`; the update (NOTE [ one update engine ]) is
:mod:`dynbatch.paddle.update`, shared with the Trainer integration. This module
follows the sampler's plan and passes.

NOTE [ counts on the device ]
    ``count`` may be a ``paddle.Tensor`` (e.g. the real tokens of a
    micro-batch, summed on the device). It is checked like a number,
    finite and >= 0, which reads it on the host: one device sync per
    micro-batch. A negative count would silently make the window's total
    wrong (or zero, and the step skipped), so the check is worth the sync;
    pass a Python number where one is at hand to avoid it. A window whose
    count totals 0 over all ranks has no real sample to average over
    (only repeats flagged as padding, or micro-batches of count 0, as when
    every token is masked): its step is skipped and counted in
    ``skipped_steps``, like a non-finite one, on every rank alike.

GradientAccumulator, why the sum and the count: a per-batch mean loss would weight a batch of
3 long samples like one of 800 short ones (how dynamic batches went NaN in the original
study); windows are cut on the sampler's plan, so every rank steps at the same micro-batch
with no communication. A ``count`` given as a ``paddle.Tensor`` is read on the host to be
checked (one device sync per micro-batch): pass a Python number where one is at hand. A
window whose count totals 0 over all ranks has nothing to average over: its step is skipped
and counted in ``skipped_steps``.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import warnings
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from .._checks import (
    InputError,
    InputTypeError,
    check_choice,
    check_epochs,
    check_int,
    check_positive_number,
)
from .._optional import require
from ..plan.contract import Pass, PlanSource, StreamSource, counted_tokens, describe
from ..plan.windows import UNITS, EpochWindows
from ..stream.state import StreamFollower
from .lr_horizon import check_horizon
from .update import ExactMeanUpdate

__all__ = ["GradientAccumulator", "scale_lr"]


#: How :func:`scale_lr` may scale a learning rate with the batch.
LR_RULES = ("none", "sqrt", "linear")


def scale_lr(base_lr: float, batch: float, reference_batch: float, rule: str = "linear") -> float:
    """Scale a learning rate tuned at ``reference_batch`` to ``batch`` (samples or tokens).

    ``"linear"`` (Goyal et al.: lr grows with the batch, for SGD), ``"sqrt"``
    (often better for Adam) or ``"none"`` (the rate as tuned). Pair a scaled
    rate with a warm-up; the docs' "On a GPU" page (docs/gpu.md) has what each
    rule cost in accuracy for updates larger than the fixed batch's.

    >>> scale_lr(1e-4, 64, 16), scale_lr(1e-4, 64, 16, rule="sqrt"), scale_lr(1e-4, 64, 16, "none")
    (0.0004, 0.0002, 0.0001)

    Args:
        base_lr: the learning rate tuned at ``reference_batch``.
        batch: the batch (or update) to train with, in the unit of ``reference_batch``.
        reference_batch: the batch the rate was tuned at.
        rule: ``"linear"``, ``"sqrt"`` or ``"none"``.
    """
    base_lr = check_positive_number("base_lr", base_lr)
    ratio = check_positive_number("batch", batch) / check_positive_number(
        "reference_batch", reference_batch
    )
    rule = check_choice("rule", rule, LR_RULES)
    return base_lr * {"linear": ratio, "sqrt": math.sqrt(ratio), "none": 1.0}[rule]


def _require_methods(name: str, value: Any, methods: tuple[str, ...], what: str) -> None:
    missing = [m for m in methods if not callable(getattr(value, m, None))]
    if value is None or missing:
        raise InputTypeError(
            f"{name} must be {what} (with {', '.join(methods)}), got {name}={value!r}"
        )


def _check_parts(model: Any, optimizer: Any, sampler: Any, scaler: Any, lr_scheduler: Any) -> None:
    """Refuse by name what cannot be a :class:`GradientAccumulator`'s model, optimizer,
    sampler, scaler or LR scheduler."""
    _require_methods("model", model, ("parameters",), "a paddle.nn.Layer")
    _require_methods("optimizer", optimizer, ("step", "clear_grad"), "a paddle optimizer")
    if sampler is not None and not isinstance(sampler, (PlanSource, StreamSource)):
        raise InputTypeError(
            "sampler must be a dynbatch sampler (DynamicBatchSampler or "
            "DistributedDynamicBatchSampler), whose plan says where windows end, or a "
            f"DynamicBatchIterable; got {describe(sampler)}"
        )
    if scaler is not None:
        _require_methods("scaler", scaler, ("scale", "unscale_", "step", "update"), "a GradScaler")
    if lr_scheduler is not None:
        _require_methods("lr_scheduler", lr_scheduler, ("step",), "an LR scheduler")


class GradientAccumulator:
    """Accumulate micro-batches to a sample or token budget; each update is the exact mean.

    :meth:`backward` takes a micro-batch's summed losses and their count (the module says why).

    Args:
        model: the model (``paddle.DataParallel`` or a plain layer).
        optimizer: a paddle optimizer.
        sampler: a dynbatch sampler; its plan decides where windows end. Or a
            :class:`~dynbatch.DynamicBatchIterable` iterated through its ``loader()``: each
            step's counts over all ranks decide, so every rank ends an update at the same step.
            Without one, the optimizer steps after every micro-batch.
        target: samples (or tokens) per optimizer step, summed over ranks, cut on the plan in
            its order. Default: the plan's own updates when its options ask for them
            (``update_size``, as :func:`~dynbatch.like_fixed` and a sampler given
            ``batch_size=`` do: lengths mixed in each); otherwise **each micro-batch is an
            update of its own**.
        unit: ``"samples"`` or ``"tokens"``: what ``target`` counts (real, unpadded lengths;
            of pairs, target tokens). Default: the plan's ``update_unit``.
        scaler: a ``paddle.amp.GradScaler`` (or anything with its ``scale``, ``unscale_``,
            ``step`` and ``update``) for mixed precision.
        lr_scheduler: stepped after every applied optimizer step; warned of where its horizon
            is not the planned updates (:mod:`dynbatch.paddle.lr_horizon`).
        epochs: the run's epochs, to check the scheduler's horizon against them exactly.

    Use: ``with acc.accumulate(): acc.backward(losses.sum(), count=labels.shape[0])`` for each
    micro-batch of the loader (``examples/quickstart.py``).

    ``backward`` steps the optimizer itself when the window is complete; a step whose loss or
    gradients are NaN or inf on any rank is skipped on all and counted in ``skipped_steps``
    (with a scaler: an fp16 overflow, after which the scaler lowers its scale). A batch the
    distributed sampler repeated only to even out step counts (``sampler.padding_mask()``) gets
    weight 0. The accumulator follows the sampler's passes (by the plan, since the DataLoader
    prefetches): a new iteration of the sampler starts its windows anew, and a resumed epoch
    starts where the sampler does. ``state_dict()`` holds the open window's gradients, so a
    checkpoint taken in the middle of a window resumes exactly.
    """  # NOTE [ normalising the loss ], [ accumulating to a budget ], [ counts on the device ]

    def __init__(
        self,
        model: Any,
        optimizer: Any,
        *,
        sampler: Any = None,
        target: float | None = None,
        unit: str | None = None,
        scaler: Any = None,
        lr_scheduler: Any = None,
        epochs: int | None = None,
    ) -> None:
        self.paddle = require("paddle", "GradientAccumulator")
        _check_parts(model, optimizer, sampler, scaler, lr_scheduler)
        self.model, self.optimizer = model, optimizer
        self.sampler: Any = sampler  # a PlanSource or a StreamSource
        planned = None if sampler is None else sampler.options
        if unit is None:
            unit = "samples" if planned is None else planned.update_unit
        self.unit = check_choice("unit", unit, UNITS)
        self.target = None if target is None else check_positive_number("target", target)
        if self.target is not None and sampler is None:
            raise InputError(
                "target needs the sampler: windows are cut on its plan, the same on every rank"
            )
        if self.target is not None and planned is not None and planned.update_size is not None:
            raise InputError(
                f"the sampler's plan already makes updates of update_size={planned.update_size:g} "
                f"{planned.update_unit}; give target={target!r} or the plan's updates, not both"
            )
        self.scaler, self.lr_scheduler = scaler, lr_scheduler
        self.world_size = self.paddle.distributed.get_world_size()
        self.engine = ExactMeanUpdate(model, world_size=self.world_size, scaler=scaler)
        self.optimizer_steps = 0
        self.skipped_steps = 0
        self.last_count = 0.0
        self._pass: Pass | None = None
        self._windows: EpochWindows | None = None  # the followed epoch's windows
        self._padding = np.zeros(0, dtype=bool)
        self._total = 0  # micro-batches in the followed epoch
        self._position = 0  # the next micro-batch's position in the epoch's plan
        self._carry = False  # a restored open window continues in the next pass
        self._stream = (
            StreamFollower(sampler, self.target, self.unit)
            if isinstance(sampler, StreamSource)
            else None
        )
        check_horizon(self, epochs, self._stream)  # NOTE [ a schedule's horizon and ... ]

    # -- the plan ----------------------------------------------------------------------------
    def _need_sampler(self, what: str) -> PlanSource:
        if self.sampler is None:
            raise InputError(f"{what} needs the sampler whose plan the loop follows")
        sampler: PlanSource = self.sampler
        return sampler

    def windows(self, epoch: int | None = None, what: str = "windows") -> EpochWindows:
        """The optimizer windows of ``epoch``.

        Args:
            epoch: the epoch; default: the sampler's current one.
            what: the caller's name, for the error without a sampler.
        """
        sampler = self._need_sampler(what)
        if self._stream is not None:
            raise InputError(
                "a stream has no epoch plan: its windows end as it is read (its steps are not "
                "known before); steps_per_epoch() counts them by a first pass"
            )
        plan = sampler.epoch_plan(epoch)
        epoch = sampler.epoch if epoch is None else epoch
        counted = counted_tokens(sampler)
        return EpochWindows(plan, counted, epoch=epoch, target=self.target, unit=self.unit)

    def step_counts(self, epoch: int | None = None) -> np.ndarray[Any, np.dtype[np.float64]]:
        """Samples (or tokens) of each micro-step of the epoch, summed over ranks.

        Args:
            epoch: the epoch; default: the sampler's current one.
        """
        if self._stream is not None:  # a first pass over the stream
            counted = self._stream.source.count(epoch)
            per_step = counted.samples if self.unit == "samples" else counted.tokens
            return np.asarray(per_step, dtype=np.float64)
        return self.windows(epoch, "step_counts").counts

    def steps_per_epoch(self, epoch: int | None = None) -> int:
        """Optimizer steps ``epoch`` will take.

        For a stream, a first pass reads it: its steps are not known before.

        Args:
            epoch: the epoch; default: the sampler's current one.
        """
        if self._stream is not None:
            counted = self._stream.source.count(epoch)
            plan = self._stream.plan_updates and self.target is None
            return int(counted.updates(self.target, self.unit, plan))
        return len(self.windows(epoch, "steps_per_epoch"))

    def steps_for_epochs(self, epochs: Iterable[int]) -> int:
        """Optimizer steps over ``epochs``: exact, for LR schedules.

        Args:
            epochs: the epochs, e.g. ``range(E)``.
        """
        self._need_sampler("steps_for_epochs")
        return sum(self.steps_per_epoch(e) for e in check_epochs(epochs))

    def _sync(self) -> None:
        """Follow the sampler's current pass (NOTE [ the plan is the source of truth ])."""
        if self.sampler is None:
            return
        if self._stream is not None:
            if self._stream.new_pass():
                self._begin_pass()
            return
        current = self.sampler.current_pass()
        if current == self._pass:
            if self._position >= self._total:
                raise InputError(
                    f"the accumulator has followed all {self._total} micro-batches of epoch "
                    f"{current.epoch}; iterate the sampler (or its DataLoader) again for the "
                    "next pass"
                )
            return
        self._begin_pass()
        self._pass = current
        self._windows = self.windows(current.epoch)
        self._padding = self.sampler.padding_mask(current.epoch)
        self._total = self._windows.num_steps
        self._position = current.start

    def _begin_pass(self) -> None:
        """A new pass: an unfinished window is discarded, unless restored to go on in it."""
        if self.engine.open and not self._carry:
            warnings.warn(
                f"a new pass over the sampler began with {self.engine.open} micro-batch(es) of "
                "an unfinished window; their gradients are discarded",
                stacklevel=4,
            )
            self.optimizer.clear_grad()
            self.engine.discard()
        if self._stream is not None and not self._carry:
            self._stream.running = 0.0
        self._carry = False

    def _window_ends_here(self) -> bool:
        if self._stream is not None:
            return self._stream.ends_here()
        return self._windows is None or self._windows.ends_at(self._position)

    # -- the loop ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def accumulate(self) -> Iterator[None]:
        """Wrap forward and backward of one micro-batch: ``no_sync`` unless it ends a window."""
        self._sync()
        with self.engine.micro_batch(last=self._window_ends_here()):
            yield

    def backward(self, loss_sum: Any, count: Any = None) -> bool:
        """Back-propagate the *sum* of a micro-batch's losses over ``count`` samples or tokens.

        Args:
            loss_sum: the micro-batch's losses summed (a scalar tensor), never their mean.
            count: the samples (or loss tokens) ``loss_sum`` sums over: the update divides by
                their total over the window and the ranks (required; left out, the error says
                so).

        Returns:
            True when this call ended a window and the optimizer stepped (or skipped).
        """
        self._sync()
        if self._stream is not None:
            padding = self._stream.padding()
        else:
            padding = bool(self._position < self._padding.size and self._padding[self._position])
        self.engine.backward(loss_sum, count, padding=padding)  # a repeat weighs 0
        ends = self._window_ends_here()
        self._position += 1
        if self._stream is not None:
            self._stream.advance(ends)
        if ends:
            update = self.engine.close()
            self.engine.step(self.optimizer, update, self.lr_scheduler)
            if update.applies:
                self.optimizer_steps += 1
            else:
                self.skipped_steps += 1
            step = self.optimizer_steps + self.skipped_steps
            self.engine.warn_skipped(update, step=step, skipped=self.skipped_steps)
            self.last_count = update.count
        return ends

    # -- checkpoints ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Step counters and the open window: its count and this rank's gradients so far."""
        window = None
        if self.engine.open:
            window = {
                "micro_batches": self.engine.open,
                **self.engine.window_state(),
                **({"stream_count": self._stream.running} if self._stream is not None else {}),
                "grads": {
                    name: p.grad.numpy()
                    for name, p in self.model.named_parameters()
                    if p.grad is not None
                },
            }
        return {
            "optimizer_steps": self.optimizer_steps,
            "skipped_steps": self.skipped_steps,
            "window": window,
        }

    def set_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore counters and an open window's gradients (load the model's weights first).

        Args:
            state: what :meth:`state_dict` returned.
        """
        if not isinstance(state, Mapping) or not {
            "optimizer_steps",
            "skipped_steps",
            "window",
        } <= set(state):
            raise InputError(
                "state must be the dict that GradientAccumulator.state_dict() returned, got "
                f"{type(state).__name__}"
            )
        paddle = self.paddle
        params = dict(self.model.named_parameters())
        window = _checked_window(state["window"], params)
        steps = check_int("state['optimizer_steps']", state["optimizer_steps"])
        skipped = check_int("state['skipped_steps']", state["skipped_steps"])
        self.optimizer_steps, self.skipped_steps = steps, skipped
        self.optimizer.clear_grad()
        self.engine.discard()
        if window is None:
            return
        # d/dp sum(p * g) = g: the saved gradients come back through paddle's own backward
        terms = [
            (params[name] * paddle.to_tensor(grad, dtype=params[name].dtype)).sum()
            for name, grad in window["grads"].items()
        ]
        no_sync = getattr(self.model, "no_sync", None)
        if terms:
            with no_sync() if no_sync is not None else contextlib.nullcontext():
                paddle.add_n(terms).backward()
        self.engine.restore_window(window, int(window["micro_batches"]))
        if self._stream is not None:
            self._stream.running = float(window.get("stream_count", 0.0))
        self._carry = True


_WINDOW_KEYS = ("micro_batches", "count", "bad", "grads")


def _checked_window(window: Any, params: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A saved open window, checked before anything is changed: keys, numbers, gradient shapes."""
    name = "state['window']"
    if window is None:
        return None
    if not isinstance(window, Mapping):
        raise InputTypeError(
            f"{name} must be None or a dict as GradientAccumulator.state_dict() saves it, got "
            f"{window!r}"
        )
    missing = [k for k in _WINDOW_KEYS if k not in window]
    if missing:
        raise InputError(f"{name} lacks the key(s) {', '.join(missing)}")
    check_int(f"{name}['micro_batches']", window["micro_batches"], minimum=1)
    for key in ("count", "bad"):
        value = window[key]
        wrong_type = isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real)
        if wrong_type or not (math.isfinite(value) and value >= 0):
            raise (InputTypeError if wrong_type else InputError)(
                f"{name}['{key}'] must be a finite number >= 0, got {name}['{key}']={value!r}"
            )
    grads = window["grads"]
    if not isinstance(grads, Mapping):
        raise InputTypeError(
            f"{name}['grads'] must be a dict of parameter name to gradient, got {grads!r}"
        )
    unknown = sorted(set(grads) - set(params))
    if unknown:
        raise InputError(f"the saved window has gradients for unknown parameters {unknown}")
    for key, grad in grads.items():
        arr = np.asarray(grad)
        if arr.dtype == np.bool_ or arr.dtype.kind not in "iuf":
            raise InputTypeError(
                f"{name}['grads'][{key!r}] must be an array of numbers, got {grad!r}"
            )
        shape = tuple(params[key].shape)
        if arr.shape != shape:
            raise InputError(
                f"{name}['grads'][{key!r}] has shape {arr.shape}, but the parameter has shape "
                f"{shape}: the window was saved for another model"
            )
    return window
