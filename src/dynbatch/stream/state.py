"""A stream's passes as the main process sees them: what training took, resume, updates.

Numpy only. :class:`StreamProgress` records the :class:`~dynbatch.stream.planner.StepInfo`
of every batch the training loop took (NOTE [ resuming a stream ] in
:mod:`dynbatch.stream.planner`); :class:`StreamFollower` decides where a
:class:`~dynbatch.GradientAccumulator` following a stream ends its updates.

NOTE [ updates of a stream ]
    A stream's epoch has as many updates as its steps make, which is not
    known before the stream is read. The accumulator decides each step as it
    comes, from what the step's :class:`~dynbatch.stream.planner.StepInfo` says
    of *every* rank (its samples and tokens over all ranks), so all ranks
    end their updates at the same step with no communication: with
    ``target=``, an update ends where its samples (or tokens) reach the
    target; with ``update_size`` in the options, where the block's plan
    ends one; otherwise every step is an update; and the epoch's last step
    always ends one. For a learning-rate schedule, :func:`count_epoch` (a
    first pass: the stream read once, its blocks planned, nothing trained)
    gives the exact updates of an epoch; ``estimate`` scales the first
    block's by a declared sample count (docs/benchmarks.md: its error, measured).
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._checks import check_int
from ..errors import InputError, InputTypeError
from ..plan.contract import Pass
from ..plan.options import PlanOptions
from ..plan.stats import PlanStats, plan_stats, predicted_seconds
from ..plan.windows import accumulation_windows
from .planner import Resume, SlotCursor, StepInfo, StreamPlanner
from .sources import open_source

__all__ = [
    "StreamCount",
    "StreamFollower",
    "StreamProgress",
    "Taken",
    "count_epoch",
    "stream_stats",
]

_STATE_VERSION = 1
_STATE_KEYS = (
    "version",
    "kind",
    "epoch",
    "steps",
    "num_replicas",
    "slots",
    "rotation",
    "cursors",
    "buffer_size",
    "options",
)


@dataclass(frozen=True)
class Taken:
    """The batch the training loop holds: its info, its step in the epoch, whether it is last."""

    info: StepInfo
    step: int
    last: bool
    serial: int


@dataclass(frozen=True)
class StreamCount:
    """An epoch of a stream counted: per step, its samples, tokens and plan's update ends.

    ``updates(target, unit)`` are the optimizer updates a
    :class:`~dynbatch.GradientAccumulator` makes over it (NOTE [ updates of a stream ]).
    """

    samples: NDArray[np.int64]
    tokens: NDArray[np.int64]
    update_end: NDArray[np.bool_]

    @property
    def steps(self) -> int:
        return int(self.samples.size)

    def updates(
        self, target: float | None = None, unit: str = "samples", plan: bool = False
    ) -> int:
        """Updates of the epoch: by ``target``, by the plan's updates (``plan``), or per step."""
        if not self.steps:
            return 0
        if target is not None:
            counts = self.samples if unit == "samples" else self.tokens
            return int(accumulation_windows(counts, target).size)
        if plan:
            ends = self.update_end.copy()
            ends[-1] = True
            return int(ends.sum())
        return self.steps


def count_epoch(planner: StreamPlanner, epoch: int, workers: int = 0) -> StreamCount:
    """A first pass: the steps of ``epoch`` as a DataLoader with ``workers`` yields them."""
    samples: list[int] = []
    tokens: list[int] = []
    ends: list[bool] = []
    for batch in planner.sequence(epoch, 0, workers):
        info = batch.info
        samples.append(info.samples)
        tokens.append(info.tokens)
        ends.append(info.update_end)
    return StreamCount(
        np.asarray(samples, dtype=np.int64),
        np.asarray(tokens, dtype=np.int64),
        np.asarray(ends, dtype=bool),
    )


def stream_stats(
    lengths: NDArray[np.int64],
    options: PlanOptions,
    buffer_size: int,
    epoch: int = 0,
    step_time: Any = None,
) -> PlanStats:
    """What a stream of these lengths, in this order, makes of an epoch: ``dynbatch stats``'
    row for ``--buffer-size`` (one rank, no workers); with ``step_time`` (a device's seconds
    by ``(n, L)``), the epoch's predicted ``seconds`` too.

    >>> s = stream_stats(np.array([3, 1, 4, 1, 5, 9, 2, 6]), PlanOptions(max_cost=12,
    ...                  cost="linear"), buffer_size=4)
    >>> s.batches, s.samples, s.updates
    (7, 8, 7)
    """
    samples = list(range(len(lengths)))
    planner = StreamPlanner(open_source(samples), lengths.__getitem__, options, buffer_size)
    batches, ends = [], []
    for batch in planner.sequence(epoch):
        batches.append(np.asarray(batch, dtype=np.int64))
        ends.append(batch.info.update_end)
    stats = plan_stats(
        lengths,
        batches,
        cost=options.cost,
        max_cost=options.max_cost,
        pad_to_multiple_of=options.pad_to_multiple_of,
    )
    updates = int(np.sum(ends)) if options.update_size is not None else len(batches)
    seconds = predicted_seconds(lengths, batches, step_time, options.pad_to_multiple_of)
    return replace(stats, updates=updates, seconds=seconds)


class StreamProgress:
    """What the training loop took of a stream's passes: the cursors a resume starts from.

    The main process's half of NOTE [ resuming a stream ]: :meth:`begin` starts
    a pass and gives the :class:`~dynbatch.stream.planner.Resume` its workers start
    from, :meth:`took` records each batch the loop takes, and
    :meth:`state_dict` / :meth:`load_state_dict` save and restore the cursors.
    """

    def __init__(self, planner: StreamPlanner) -> None:
        self.planner = planner
        self.epoch = 0
        self.serial = 0
        self._pending: Resume | None = None  # loaded, for the next pass of its epoch
        self._resume = Resume(0)  # where the pass under way started
        self._slots = 1
        self._steps = 0
        self._cursors: list[SlotCursor] = [SlotCursor()]
        self._rotation = 0
        self._taken: Taken | None = None
        self._under_way = False  # a pass began since the last set_epoch / load_state_dict
        self._seen: dict[int, tuple[int, int]] = {}  # per slot: the last block, its checksum
        self._unknown: str | None = None  # why what training took is not known

    def unknown(self, why: str) -> None:
        """What training took of the pass under way cannot be known: :meth:`state_dict` refuses
        until the next pass begins or a state is loaded."""
        self._unknown = why

    def set_epoch(self, epoch: int) -> None:
        """The next pass reads ``epoch``; a state loaded for that epoch is kept."""
        epoch = check_int("epoch", epoch)
        if self._pending is not None and self._pending.epoch != epoch:
            self._pending = None
        self.epoch = epoch
        self._under_way = False  # the state is the coming pass's until it begins
        self._unknown = None

    def upcoming(self) -> Resume:
        """Where the next pass starts: a loaded state of this epoch, or its beginning."""
        if self._pending is not None and self._pending.epoch == self.epoch:
            return self._pending
        return Resume(self.epoch)

    def begin(self, workers: int) -> Resume:
        """Start a pass with ``workers`` DataLoader workers; returns where its workers start."""
        resume = self.upcoming()
        slots = self.planner.slots(workers)
        if resume.cursors and len(resume.cursors) != slots:
            raise InputError(
                f"this stream state was saved with {len(resume.cursors)} reading slot(s) (a "
                f"sharded source read by {len(resume.cursors)} DataLoader worker(s)); this loader "
                f"has num_workers={workers}, {slots} slot(s): resume with the same num_workers"
            )
        self._pending = None
        self.serial += 1
        self._resume = resume
        self._slots = slots
        self._steps = resume.steps
        self._cursors = [resume.cursor(s) for s in range(slots)]
        self._rotation = resume.rotation
        self._taken = None
        self._under_way = True
        self._seen = {}
        self._unknown = None
        return resume

    def took(self, info: StepInfo, last: bool) -> None:
        """The loop took the batch of ``info``; ``last``: no batch follows it this pass."""
        self._check_block(info)
        self._taken = Taken(info, self._steps, last, self.serial)
        self._steps += 1
        self._cursors[info.slot] = self._cursors[info.slot].after(info)
        live = [s for s in range(self._slots) if not self._cursors[s].done]
        if live:  # the slot the next worker in turn serves (NOTE [ resuming a stream ])
            later = [s for s in live if s > info.slot]
            self._rotation = later[0] if later else live[0]

    def _check_block(self, info: StepInfo) -> None:
        """Two batches of one block must come from the same read of the stream
        (NOTE [ streams across ranks and workers ])."""
        block, checksum = self._seen.get(info.slot, (-1, info.checksum))
        if block == info.block and checksum != info.checksum:
            raise InputError(
                f"the source ({self.planner.source.describe()}) yielded other samples to two "
                f"DataLoader workers in epoch {info.epoch} (block {info.block} of the stream "
                "differs between them): every read of an epoch must yield the same samples in "
                "the same order, else samples are repeated and lost; seed any shuffling with "
                "the epoch (source(epoch) using random.Random(epoch)), not anew on each read"
            )
        self._seen[info.slot] = (info.block, info.checksum)

    def taken(self) -> Taken | None:
        """The batch the loop took last in the pass under way (None before one)."""
        return self._taken

    def current_pass(self) -> Pass:
        """The pass under way; before any, the one the next will be."""
        if self.serial == 0:
            upcoming = self.upcoming()
            return Pass(upcoming.epoch, upcoming.steps, 0)
        return Pass(self._resume.epoch, self._resume.steps, self.serial)

    # -- resume ---------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Where the pass stands: per slot, the block and step to go on from."""
        if self._unknown is not None:
            raise InputError(
                f"state_dict() cannot say where epoch {self.epoch} stands: {self._unknown}, so "
                "which batch training holds is not known. Iterate stream.loader(collate_fn, "
                "num_workers=...) (or the stream itself, in the main process) to resume "
                "mid-epoch; after set_epoch() the state is the next epoch's start"
            )
        if not self._under_way:
            resume = self.upcoming()
            cursors = [resume.cursor(s) for s in range(max(1, len(resume.cursors)))]
            epoch, steps, rotation = resume.epoch, resume.steps, resume.rotation
        else:
            cursors, epoch, steps, rotation = self._cursors, self.epoch, self._steps, self._rotation
        planner = self.planner
        return {
            "version": _STATE_VERSION,
            "kind": "dynbatch.stream",
            "epoch": epoch,
            "steps": steps,
            "num_replicas": planner.num_replicas,
            "slots": len(cursors),
            "rotation": rotation,
            "cursors": [
                [c.block, c.start[0], c.start[1], c.block_step, c.slot_step, int(c.done)]
                for c in cursors
            ],
            "buffer_size": planner.buffer_size,
            "options": planner.options.fingerprint(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """The next pass of ``state["epoch"]`` goes on where the saved one stood.

        Everything is checked before anything is changed.
        """
        resume = _checked_state(state, self.planner)
        self._pending = resume
        self.epoch = resume.epoch
        self._under_way = False
        self._unknown = None


def _checked_state(state: Any, planner: StreamPlanner) -> Resume:
    if not isinstance(state, Mapping):
        raise InputTypeError(
            f"state must be the dict that state_dict() returned, got {type(state).__name__}"
        )
    missing = [k for k in _STATE_KEYS if k not in state]
    if missing:
        raise InputError(f"not a dynbatch stream state: missing keys {missing}")
    if state["kind"] != "dynbatch.stream" or state["version"] != _STATE_VERSION:
        raise InputError(
            f"not a dynbatch stream state of version {_STATE_VERSION}: kind={state['kind']!r}, "
            f"version={state['version']!r}"
        )
    epoch = check_int("state['epoch']", state["epoch"])
    steps = check_int("state['steps']", state["steps"])
    for key, here in (("num_replicas", planner.num_replicas), ("buffer_size", planner.buffer_size)):
        if state[key] != here:
            raise InputError(
                f"this stream state was saved with {key}={state[key]!r}, this stream has "
                f"{key}={here}: the blocks or their sharing would differ"
            )
    saved, now = state["options"], planner.options.fingerprint()
    if not isinstance(saved, Mapping):
        raise InputTypeError(f"state['options'] must be a dict, got {saved!r}")
    differ = [k for k in now if saved.get(k) != now[k] and "<a callable" not in str(now[k])]
    if differ or set(saved) != set(now):
        names = differ or sorted(set(saved) ^ set(now))
        detail = "; ".join(f"{k}: saved {saved.get(k)!r}, here {now.get(k)!r}" for k in names)
        raise InputError(
            f"this stream state was saved with other options, so the plan differs: {detail}"
        )
    slots = check_int("state['slots']", state["slots"], minimum=1)
    rotation = check_int("state['rotation']", state["rotation"])
    rows = state["cursors"]
    if not isinstance(rows, (list, tuple)) or len(rows) != slots or rotation >= slots:
        raise InputError(
            f"state['cursors'] must hold one cursor per slot ({slots}) and state['rotation'] a "
            f"slot, got {rows!r:.80} and rotation={rotation!r}"
        )
    cursors = []
    for k, row in enumerate(rows):
        if not (
            isinstance(row, (list, tuple))
            and len(row) == 6
            and all(isinstance(v, numbers.Integral) and int(v) >= 0 for v in row)
        ):
            raise InputError(
                f"state['cursors'][{k}] must be 6 integers >= 0 (block, shard, record, "
                f"block step, slot step, done), got {row!r}"
            )
        block, shard, record, block_step, slot_step, done = (int(v) for v in row)
        if block_step > slot_step:
            raise InputError(
                f"state['cursors'][{k}] goes on at block step {block_step}, over the slot's steps "
                f"{slot_step}: a block's steps are among its slot's. Got {row!r}"
            )
        cursors.append(SlotCursor(block, (shard, record), block_step, slot_step, bool(done)))
    taken = sum(c.slot_step for c in cursors)
    if steps != taken:  # each batch taken is one step of one slot
        raise InputError(
            f"state['steps']={steps} must be the steps its cursors took ({taken}, the sum of "
            "their slot steps): the state was altered or is not whole"
        )
    if steps == 0 and rotation == 0 and all(c == SlotCursor() for c in cursors):
        # the start of an epoch (saved before its pass or after set_epoch) holds no slot's
        # position: it loads under any num_workers
        return Resume(epoch)
    return Resume(epoch, steps, rotation, tuple(cursors))


class StreamFollower:
    """Where the accumulator following a stream ends its updates (NOTE [ updates of a stream ]).

    ``source`` is a :class:`~dynbatch.DynamicBatchIterable` (anything with
    ``taken()``, ``current_pass()`` and ``options``).
    """

    def __init__(self, source: Any, target: float | None, unit: str) -> None:
        self.source, self.target, self.unit = source, target, unit
        self.plan_updates = source.options.update_size is not None
        self.running = 0.0  # what the open update holds so far, over all ranks
        self._serial = -1
        self._done_step = -1  # the last step backward was called for

    def taken(self) -> Taken:
        taken: Taken | None = self.source.taken()
        if taken is None:
            raise InputError(
                "the accumulator follows a stream through the batches its loader hands out: "
                "iterate stream.loader(...) (not a DataLoader built by hand), then call "
                "accumulate() and backward() for each batch"
            )
        return taken

    def new_pass(self) -> bool:
        """Whether the loop began a new pass since the last call (then updates start anew)."""
        taken = self.taken()
        if taken.serial == self._serial:
            if taken.step == self._done_step:
                raise InputError(
                    f"backward was already called for step {taken.step} of epoch "
                    f"{taken.info.epoch}; take the next batch from the loader first"
                )
            return False
        self._serial, self._done_step = taken.serial, -1
        return True

    def count(self) -> float:
        info = self.taken().info
        return float(info.samples if self.unit == "samples" else info.tokens)

    def ends_here(self) -> bool:
        taken = self.taken()
        if taken.last:
            return True
        if self.target is not None:
            return self.running + self.count() >= self.target
        return taken.info.update_end if self.plan_updates else True

    def padding(self) -> bool:
        return self.taken().info.padding

    def advance(self, ended: bool) -> None:
        """After backward: the step is done; an ended update starts the count anew."""
        self._done_step = self.taken().step
        self.running = 0.0 if ended else self.running + self.count()
