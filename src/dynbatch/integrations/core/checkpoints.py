"""The state file beside each checkpoint, and which checkpoint to resume from.

NOTE [ resume from the plan ]
    Every checkpoint gets ``dynbatch_trainer.json``: the sampler's
    ``state_dict(consumed_batches=k)`` at the end of the last trained window
    (which checks lengths, options and the plan on load), the window settings,
    and the running loss and sample totals. Resuming loads it, so iteration
    continues with exactly the remaining batches; nothing is replayed and
    nothing relies on consumed-samples arithmetic. paddlenlp 3.0.0b4 would
    also skip ``global_step`` windows on top of that, so ``ignore_data_skip``
    is forced on; it then never restores the RNG, so the integration does; and
    ``resume_from_checkpoint=True`` is resolved here (it crashes in that
    version) to the newest checkpoint that holds the dynbatch state. The
    whole file is checked before any of it loads, and ``train()`` reads it
    before paddlenlp does: a recipe that measures its step time then plans
    by the checkpoint's. ``ignore_load_lr_and_optim`` is refused on resume:
    paddlenlp then skips its own state too (``global_step``), so no exact
    resume exists.

    On another number of cards (pure data parallel: paddlenlp's model and
    optimizer are replicated, so they load on any world size), the sampler's
    own ``load_state_dict`` deals the rest of the saved epoch to the new ranks
    (NOTE [ resume on another number of ranks ] in :mod:`dynbatch.plan.reshard`);
    the recipe's ``per_device_train_batch_size x gradient_accumulation_steps x
    ranks`` must stay the same, or the error names the values that keep it.
    That rest replaces the epoch's plan, so the run starts it at micro-batch 0
    after the checkpoint's ``global_step``, and counts its steps as that
    ``global_step`` plus the rest's updates plus the later epochs' (planned on
    the new ranks): ``train()`` loads it before paddlenlp sizes the loader from
    ``len()``. A state that is itself such a rest resumes the same way on any
    ranks. ``accumulate_target`` windows are cut on each rank's micro-batches,
    which other ranks cut elsewhere: refused there by name.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from typing import Any, ClassVar

from ..._checks import InputError, InputTypeError
from ..._files import write_text_atomic
from .host import Host
from .logs import RunLog

__all__ = [
    "STATE_FILE",
    "PlanCheckpoints",
    "checkpoint_folder",
    "read_state",
    "resolve_checkpoint",
    "write_state",
]

#: The file each checkpoint gets with the sampler's position (NOTE [ resume from the plan ]).
STATE_FILE = "dynbatch_trainer.json"
_STATE_VERSION = 1
#: ``--resume_from_checkpoint True`` arrives as text in ``TrainingArguments``
_FLAG_WORDS: dict[str, bool | None] = {"true": True, "false": None, "none": None, "": None}


def checkpoint_folder(output_dir: str, global_step: int, prefix: str) -> str:
    """Where the Trainer saves the checkpoint of ``global_step``, its folders named
    ``<prefix>-<global_step>`` (the host's ``prefix_checkpoint_dir``)."""
    return os.path.join(output_dir, f"{prefix}-{global_step}")


def _checkpoint_dirs(root: str, prefix: str) -> list[tuple[int, str]]:
    if not os.path.isdir(root):
        return []
    found = []
    pattern = re.compile(rf"^{re.escape(prefix)}-(\d+)$")
    for name in os.listdir(root):
        match = pattern.match(name)
        path = os.path.join(root, name)
        if match and os.path.isfile(os.path.join(path, STATE_FILE)):
            found.append((int(match.group(1)), path))
    return sorted(found)


def resolve_checkpoint(value: Any, output_dir: str, prefix: str) -> str | None:
    """``resume_from_checkpoint`` as a folder with our state: a path, True (the newest
    ``<prefix>-<global_step>`` in ``output_dir``), or None."""
    if isinstance(value, str) and value.strip().lower() in _FLAG_WORDS:
        value = _FLAG_WORDS[value.strip().lower()]  # TrainingArguments keeps flags as text
    if value is None or value is False:
        return None
    if value is True:
        found = _checkpoint_dirs(output_dir, prefix)
        if not found:
            raise InputError(
                f"resume_from_checkpoint=True, but {output_dir} holds no checkpoint "
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


def write_state(folder: str, state: Mapping[str, Any]) -> None:
    """Write ``state`` (with this release's version) to ``folder``'s state file, atomically."""
    text = json.dumps({"version": _STATE_VERSION, **state}, indent=1)
    write_text_atomic(os.path.join(folder, STATE_FILE), text)  # NOTE [ atomic writes ]


def _refuse(path: str, key: str, value: Any, valid: str) -> InputError:
    return InputError(
        f"{path} holds {key}={value!r}, but a DynamicBatchTrainer state holds {valid} there: it "
        "was changed or is not one; resume from another checkpoint folder"
    )


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


#: the TrainingArguments whose product, times the ranks, is the recipe's global update
_GLOBAL_UPDATE = ("per_device_train_batch_size", "gradient_accumulation_steps")


def _check_global_update(
    checkpoint: str,
    kept: Mapping[str, Any],
    arguments: Mapping[str, Any],
    saved_replicas: int,
    replicas: int,
) -> None:
    """Refuse a resume on ``replicas`` ranks of a recipe saved on ``saved_replicas`` whose
    global update (``per_device_train_batch_size x gradient_accumulation_steps x ranks``)
    changed, naming the values that keep it (NOTE [ resume from the plan ])."""
    if not all(k in kept and k in arguments for k in _GLOBAL_UPDATE):
        return  # options given: the sampler's load_state_dict checks their update_size
    batch, steps = (kept[k] for k in _GLOBAL_UPDATE)
    if not all(_whole(v) and v > 0 for v in (batch, steps)):
        raise _refuse(checkpoint, "arguments", dict(kept), "whole numbers > 0")
    saved = batch * steps * saved_replicas
    here_batch, here_steps = (arguments[k] for k in _GLOBAL_UPDATE)
    if here_batch * here_steps * replicas == saved:
        return
    if saved % replicas:
        valid = (
            f"no whole per_device_train_batch_size x gradient_accumulation_steps makes {saved} "
            f"on {replicas} rank(s): resume on a number of ranks that divides {saved}, such as "
            f"the saved {saved_replicas}"
        )
    else:
        per_rank = saved // replicas
        keep = [f"per_device_train_batch_size={per_rank} with gradient_accumulation_steps=1"]
        if per_rank % here_steps == 0 and here_steps > 1:
            keep.insert(
                0,
                f"per_device_train_batch_size={per_rank // here_steps} with "
                f"gradient_accumulation_steps={here_steps}",
            )
        valid = (
            f"on {replicas} rank(s) use per_device_train_batch_size x "
            f"gradient_accumulation_steps = {per_rank}, e.g. " + ", or ".join(keep)
        )
    raise InputError(
        f"{checkpoint} was saved on {saved_replicas} rank(s) x per_device_train_batch_size="
        f"{batch} x gradient_accumulation_steps={steps} = {saved} samples per optimizer step; "
        f"this run makes {replicas} x {here_batch} x {here_steps} = "
        f"{replicas * here_batch * here_steps}: the rest of the epoch would train other updates. "
        f"Keep the global update: {valid}"
    )


def read_state(
    checkpoint: str,
    windows: Mapping[str, Any],
    arguments: Mapping[str, Any] | None = None,
    num_replicas: int | None = None,
) -> dict[str, Any]:
    """The checkpoint's state, checked whole before anything loads (NOTE [ resume from the plan ]):
    this release's, every value of its kind, saved with the same ``windows`` and the
    same training ``arguments`` (those of them the state holds). On another number of
    ranks (``num_replicas``) than it was saved on, the recipe's batch arguments may change
    where their global update stays the same."""
    path = os.path.join(checkpoint, STATE_FILE)
    try:
        with open(path, encoding="utf-8") as fh:
            state = json.load(fh)
    except (OSError, ValueError) as exc:
        raise InputError(
            f"{path} cannot be read as a DynamicBatchTrainer state ({exc}): it is torn or "
            "not one; resume from another checkpoint folder, or delete this one (True then "
            "takes the newest left)"
        ) from None
    keys = {"version", "windows", "sampler", "global_step", "loss_total", "consumed_samples"}
    if not isinstance(state, Mapping) or not keys <= set(state):
        raise InputError(
            f"{path} is not a DynamicBatchTrainer state: it needs the keys {sorted(keys)}"
        )
    if state.get("version") != _STATE_VERSION:
        raise InputError(f"{path} is not a DynamicBatchTrainer state of this release")
    for key in ("windows", "sampler"):
        if not isinstance(state[key], Mapping):
            raise _refuse(path, key, state[key], "a JSON object")
    for key in ("global_step", "consumed_samples", "skipped_steps", "loss_steps"):
        if key in state and not _whole(state[key]):  # the last two: a state may predate them
            raise _refuse(path, key, state[key], "a whole number >= 0")
    step = state.get("epoch_step", [0, 0])  # a state may predate it
    if not (isinstance(step, list) and len(step) == 2 and all(_whole(v) for v in step)):
        raise _refuse(path, "epoch_step", step, "[epoch, its steps trained], whole numbers >= 0")
    loss = state["loss_total"]
    if isinstance(loss, bool) or not isinstance(loss, (int, float)) or not math.isfinite(loss):
        raise _refuse(path, "loss_total", loss, "a finite number (the losses logged, summed)")
    replicas = state["sampler"].get("num_replicas")
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise _refuse(path, "sampler.num_replicas", replicas, "a whole number >= 1")
    saved = state["windows"]
    if saved != windows:
        differ = "; ".join(
            f"{k}: saved {saved.get(k)!r}, here {v!r}"
            for k, v in windows.items()
            if saved.get(k) != v
        )
        raise InputError(
            f"{checkpoint} was trained with other optimizer windows ({differ}); resume with "
            "the same gradient_accumulation_steps, accumulate and accumulate_target"
        )
    kept = state.get("arguments", {})  # states saved before it held them have none
    if not isinstance(kept, Mapping):
        raise _refuse(path, "arguments", kept, "a JSON object")
    arguments = dict(arguments or {})
    if num_replicas is not None and num_replicas != replicas:
        _check_global_update(checkpoint, kept, arguments, replicas, num_replicas)
        arguments = {k: v for k, v in arguments.items() if k not in _GLOBAL_UPDATE}
    changed = [(k, kept[k], v) for k, v in arguments.items() if k in kept and kept[k] != v]
    if changed:
        differ = "; ".join(f"{k}: saved {old!r}, now {new!r}" for k, old, new in changed)
        raise InputError(
            f"{checkpoint} was trained with other TrainingArguments ({differ}): the plan of the "
            "rest of the run follows them, so resume with the saved values"
        )
    return dict(state)


class PlanCheckpoints:
    """The Trainer's hooks that save and load the plan's state beside each checkpoint.

    NOTE [ resume from the plan ]; mixed into
    :class:`~dynbatch.integrations.core.trainer.DynamicBatchTrainerCore`.
    """

    host: ClassVar[Host]
    args: Any
    run: Any
    run_log: RunLog
    accumulate: str
    accumulate_target: float | None
    micro_batches_per_step: int
    resumed_step: int | None
    #: whether the plan is the fixed batch's recipe at the batch of ``args`` (no options given)
    follows_args: bool
    #: ``args.gradient_accumulation_steps`` as given (the recipe plans its updates by it)
    planned_accumulation_steps: int
    #: the checkpoint whose state :meth:`read_plan_state` checked, and that state
    resume_state: tuple[str, dict[str, Any]] | None

    def _window_settings(self) -> dict[str, Any]:
        return {
            "accumulate": self.accumulate,
            "accumulate_target": self.accumulate_target,
            "gradient_accumulation_steps": self.micro_batches_per_step,
        }

    def _argument_settings(self) -> dict[str, Any]:
        """The TrainingArguments the fixed batch's recipe plans by (none for given options)."""
        if not self.follows_args:
            return {}
        return {
            "per_device_train_batch_size": self.args.per_device_train_batch_size,
            "gradient_accumulation_steps": self.planned_accumulation_steps,
        }

    def read_plan_state(self, checkpoint: str) -> dict[str, Any]:
        """``checkpoint``'s state, checked against this run's windows and arguments."""
        if self.args.ignore_load_lr_and_optim:
            raise InputError(
                f"args.ignore_load_lr_and_optim=True makes {self.host.name} skip the checkpoint's "
                "Trainer state (its global_step) with the optimizer, so the plan cannot resume "
                f"where {checkpoint} stopped: resume without it, or start a new run "
                "(resume_from_checkpoint=None) from the checkpoint's weights"
            )
        replicas = None if self.run is None else self.run.sampler.num_replicas
        state = read_state(checkpoint, self._window_settings(), self._argument_settings(), replicas)
        self.resume_state = (checkpoint, state)
        return state

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
            "arguments": self._argument_settings(),
            "loss_total": self.run_log.loss_total,
            "loss_steps": self.run_log.loss_steps,
            "consumed_samples": self.run_log.consumed_samples,
            "skipped_steps": self.run_log.skipped_steps,
            # NOTE [ the real epoch of a resumed rest ] in .run
            "epoch_step": list(self.run.progress()[:2]),
        }
        folder = checkpoint_folder(
            self.args.output_dir, global_step, self.host.prefix_checkpoint_dir
        )
        write_state(folder, state)

    def resumes_rest(self, state: Mapping[str, Any]) -> bool:
        """Whether ``state`` resumes as the saved rest of its epoch, dealt to this run's ranks
        (saved on another number of them, or itself such a rest): NOTE [ resume from the plan ]."""
        sampler = state["sampler"]
        replicas = None if self.run is None else self.run.sampler.num_replicas
        return sampler["num_replicas"] != replicas or sampler.get("dealt") is True

    def load_rest(self, checkpoint: str, state: Mapping[str, Any]) -> None:
        """Load ``state``'s rest of its epoch into the sampler; the run starts it at 0, after the
        checkpoint's ``global_step`` (before the Trainer sizes its loader: ``train()``)."""
        if self.run is None:
            return
        saved = state["sampler"]["num_replicas"]
        if self.accumulate_target is not None and saved != self.run.sampler.num_replicas:
            raise InputError(
                f"{checkpoint} was saved on num_replicas={saved} ranks, this run has "
                f"num_replicas={self.run.sampler.num_replicas}, and accumulate_target="
                f"{self.accumulate_target:g} cuts windows on each rank's micro-batches, which "
                "other ranks would cut elsewhere: resume on the saved number of ranks, or train "
                "with the plan's own updates (no accumulate_target) to resume on others"
            )
        path = os.path.join(checkpoint, STATE_FILE)
        try:  # NOTE [ resume on another number of ranks ] in dynbatch.plan.reshard
            self.run.sampler.load_state_dict(state["sampler"])
        except (InputError, KeyError, TypeError, AttributeError) as exc:
            raise InputError(
                f"{path}'s sampler state (saved on num_replicas={saved} ranks) cannot be loaded "
                f"on num_replicas={self.run.sampler.num_replicas}: {exc}"
            ) from None
        epoch = int(state["sampler"]["epoch"])
        saved = state.get("epoch_step")  # NOTE [ the real epoch of a resumed rest ] in .run
        done = None if saved is None else int(saved[1]) if int(saved[0]) == epoch else 0
        self.run.resume_rest(epoch, int(state["global_step"]), done)

    def load_plan_state(self, checkpoint: str) -> bool:
        """Check and load the checkpoint's state file; then the Trainer loads the rest."""
        if self.run is None:
            return False
        kept = self.resume_state
        state = kept[1] if kept is not None and kept[0] == checkpoint else None
        if state is None:
            state = self.read_plan_state(checkpoint)
        path = os.path.join(checkpoint, STATE_FILE)
        if not self.resumes_rest(state):
            try:  # checks lengths, options, plan
                self.run.sampler.load_state_dict(state["sampler"])
            except (InputError, KeyError, TypeError, AttributeError) as exc:
                raise InputError(f"{path}'s sampler state cannot be loaded here: {exc}") from None
            self.run.position = (int(state["sampler"]["epoch"]), int(state["sampler"]["position"]))
        else:
            self.load_rest(checkpoint, state)
        self.run_log.loss_total = float(state["loss_total"])
        self.run_log.loss_steps = int(state.get("loss_steps", state["global_step"]))
        self.run_log.consumed_samples = int(state["consumed_samples"])
        self.run_log.skipped_steps = int(state.get("skipped_steps", 0))
        self.resumed_step = int(state["global_step"])
        return True
