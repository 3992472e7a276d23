"""The Trainer's overrides of training: the run's loader, the step, its logs and ``train()``.

A mixin of :class:`~.trainer.DynamicBatchTrainerCore`, put before the host's ``Trainer``: each
override hands its job to the module that does it (the windows :mod:`.run`, the update
:mod:`.step`, packing :mod:`.packing`, the logs :mod:`.logs`, the checkpoints
:mod:`.checkpoints`), and the class that makes the Trainer, :mod:`.trainer`, checks its
arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from ...paddle.safe_collate import raise_failure
from ...paddle.sampler import DistributedDynamicBatchSampler
from ...plan.options import PlanOptions
from .checkpoints import resolve_checkpoint
from .host import Host, HostBase
from .logs import RunLog
from .losses import mean_over
from .packing import Packed, pack_collator, packed_outputs
from .planner import TrainPlanner
from .run import RunLoader, RunPlan
from .step import train_window

__all__ = ["TrainingOverrides"]


class TrainingOverrides(HostBase):  # type: ignore[misc]
    """The ``Trainer``'s training methods on the plan: a mixin of the core, before the host's
    ``Trainer`` (NOTE [ one core, one host per adapter ] in :mod:`.host`)."""

    host: ClassVar[Host]
    options: PlanOptions
    accumulate: str
    loss_fn: Any
    gave_loss_fn: bool
    packed: Packed | None
    train_collator: Any
    run_log: RunLog
    resumed_step: int | None
    resume_state: tuple[str, dict[str, Any]] | None
    _planner: TrainPlanner | None
    _run: Callable[[], RunPlan]  # PlanWindows'

    def _use_sampler(self, sampler: DistributedDynamicBatchSampler) -> None:
        self.plan_windows(sampler)
        if self.packed is not None:
            self.train_collator = pack_collator(sampler, self.packed)

    @property
    def consumed_samples(self) -> int:
        """Real samples trained over all ranks, the whole run (a resume included)."""
        return self.run_log.consumed_samples

    def get_train_dataloader(self) -> RunLoader:
        """Every window of the run; ``len()`` its exact optimizer steps."""
        run = self._run()
        averaged = mean_over(
            self.loss_fn, self.gave_loss_fn, self.accumulate, run.sampler.loss_tokens is not None
        )
        self.host.logger.info(run.describe(run.total_steps(), self.options, averaged))
        return run.loader(self.train_dataset, self.train_collator, self.args.dataloader_num_workers)

    # -- Trainer overrides: the step -----------------------------------------------------------
    def model_outputs(self, model: Any, inputs: Mapping[str, Any]) -> Any:
        """A micro-batch's outputs: packed rows as NOTE [ the Trainer packs ] says, else forward."""
        if self.packed is None:
            return model(**inputs)
        return packed_outputs(model, inputs, self.packed)

    def training_step(self, model: Any, inputs: Any, step_control: int = 0) -> Any:
        """One optimizer window: the exact mean over its samples or tokens on every rank."""
        return train_window(self, self._run(), model, inputs)

    def check_batch(self, batch: Any) -> None:
        """Raise the error its collator returned in a batch, by name."""
        raise_failure(batch)  # NOTE [ a collate error in paddle's DataLoader ]

    # -- Trainer overrides: logging ------------------------------------------------------------
    def log(self, logs: dict[str, float], **kwargs: Any) -> None:
        """The Trainer's logs plus the plan's statistics; its fixed-batch speeds made real."""
        self.run_log.update(logs, int(self.state.global_step))
        super().log(logs, **kwargs)

    # -- Trainer overrides: training -------------------------------------------------------------
    def train(self, resume_from_checkpoint: Any = None, ignore_keys_for_eval: Any = None) -> Any:
        """Train for the real epochs of ``args``; resume exactly from a checkpoint (or True)."""
        self._run()
        checkpoint = resolve_checkpoint(
            resume_from_checkpoint, self.args.output_dir, self.host.prefix_checkpoint_dir
        )
        self.resume_state = None
        if checkpoint is not None:  # everything of ours is checked before anything loads
            state = self.read_plan_state(checkpoint)
            planner = self._planner  # a run has one (above)
            resumed = (
                None if planner is None else planner.for_checkpoint(checkpoint, state, self.options)
            )
            if resumed is not None:  # NOTE [ the Trainer measures the step time ]
                self._use_sampler(resumed)
        run = self._run()
        run.position, run.last_window, run.rest_from = (0, 0), None, None
        if checkpoint is not None and self.resumes_rest(state):  # before the loader is sized
            self.load_rest(checkpoint, state)
        self.resumed_step = None
        self.run_log = RunLog()
        out = super().train(
            resume_from_checkpoint=checkpoint, ignore_keys_for_eval=ignore_keys_for_eval
        )
        return self.host.train_output(out.global_step, self.run_log.mean_loss, out.metrics)
