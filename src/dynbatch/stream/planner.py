"""Dynamic batches from a stream, in bounded memory: numpy only, no paddle.

:class:`StreamPlanner` reads a source (:mod:`dynbatch.stream.sources`) in
blocks and plans each block as :func:`~dynbatch.plan_epoch` plans an epoch;
:class:`~dynbatch.stream.state.StreamProgress` is the main process's record of what training took,
for resume. The paddle adapter is :class:`~dynbatch.DynamicBatchIterable`.

NOTE [ a stream in blocks ]
    A stream cannot be planned whole: its lengths are not known before it is
    read, and holding them all is what a stream is for avoiding. So the
    stream is cut into blocks of ``buffer_size`` records, and each block is
    planned on its own, exactly as the in-memory planner plans an epoch:
    buckets of lengths that differ by less than ``bucket_width`` (edges
    moved by a random phase per block, so the batches are new every epoch),
    a batch leaving when it fills the budget (``cost``, ``max_cost``,
    ``max_batch_size``, ``batch_size_multiple``, ``pad_to_multiple_of``,
    ``oversize``, all of :class:`~dynbatch.PlanOptions`' checks), steps of
    similar compute across ranks, and the block's batches shuffled with
    ``(seed, epoch, slot, block)``. A block holds a bucket per length range,
    so the bucket edges need no estimate from the first samples: they are
    the in-memory planner's, on any corpus, and a block of 10,000 pads like
    an epoch of 10,000. What a block costs is one batch per bucket that the
    block's end cut short: few where a block holds many batches, many where
    a batch holds a sizable share of the block (short samples under a
    quadratic budget: 7.4x the in-memory batches at 10,000; README,
    measured). Memory is one block of samples and its plan,
    whatever the corpus's size. ``drop_last`` and ``equal_epochs`` need the
    epoch's count before it is read, and are refused. With ``time_model``
    a block is planned as the in-memory time split plans an epoch
    (NOTE [ a stream at the step time ] in :mod:`dynbatch.stream.blocks`).

NOTE [ a stream of pairs ]
    A ``length_fn`` that returns a (source, target) pair makes a stream of
    pairs, and each block is planned as the in-memory planner plans an
    epoch of ``[N, 2]`` lengths (NOTE [ planning pairs ] in
    :mod:`dynbatch.plan.pairs`): the grid of source buckets by target
    buckets walked along a Hilbert curve, every batch charged ``cost(n, Ls,
    Lt)``. That, not a simpler 2-D rule, because it is the planner the
    samplers use: a block of pairs then pads as an epoch of the same pairs,
    with the same options and refusals (packing, a step time of one length;
    updates in tokens count target tokens), and everything after the plan (the ranks' steps,
    the mixed updates, the step infos, resume) is the one-length stream's,
    on the block's plan. A batch that pads below ``1 - 4 * bucket_width`` on
    either side is cut (:func:`~dynbatch.stream.blocks.tighten_pairs`),
    looser than one length's ``1 - 2 * bucket_width``: a block fills a grid
    of cells, not a row of buckets, so far more of its batches close where
    cells meet; at ``1 - 2 * bucket_width`` the cuts made 1.7x the epoch's
    batches, at ``1 - 4 * bucket_width`` 1.13x (20,000 log-normal pairs,
    blocks of 10,000: each side pads 0.93, the epoch whole 0.94) and
    1.01x on ChnSentiCorp reviews and their pinyin (7,766 pairs, 0.98 a
    side, as in memory; 1.03x and 0.97 at blocks of 2,000). The block's
    steps are interleaved by a pair's tokens, source + target. Every sample
    of a stream is one kind: the first block measured fixes it, and a sample
    of the other kind, in that block or a later one, is refused with both
    samples named.

NOTE [ streams across ranks and workers ]
    Data-parallel training needs the same number of steps on every rank,
    else a rank waits in an all-reduce that never comes. Every rank
    therefore reads the same stream and plans the same blocks, and each
    block is shared out in steps of one batch per rank (split, never
    dropped, as :func:`~dynbatch.shard_plan` does; a flagged repeat only
    where a block holds fewer samples than ranks), so the counts are equal
    by construction, with no communication: "shard planned batches, not
    samples". A rank keeps only its own batches' samples. DataLoader
    workers share the reading: a sharded source's shards are split among
    the workers (worker ``w`` reads every ``W``-th shard of the epoch's
    order, its own *slot*), which every rank's worker ``w`` reads alike; a
    source without shards is one slot that every worker reads, each worker
    yielding every ``W``-th step. paddle's DataLoader takes one batch from
    each worker in turn, so a rank's batches come in a known order, the
    same on every rank. Splitting shards by rank as well would read each
    shard once, but a rank would then learn how many batches the others
    have only by asking them every step; reading every shard on every rank
    is the price of needing no communication (lhotse's samplers read the
    whole stream on every rank too). With shards the batches depend on the
    number of workers (their slots), so a resume needs the same number.
    All of this asks one thing of a source: every read of an epoch yields
    the same samples in the same order (a shuffle seeded with the epoch,
    not an unseeded one), else the readers plan different blocks and
    samples are repeated and lost. The main process checks the workers of
    a rank (each batch carries its block's checksum; two batches of one
    block that disagree are named); the ranks it cannot check without
    communication.

NOTE [ resuming a stream ]
    Each batch carries a :class:`StepInfo`: its slot, block, step in the
    block and where the block starts and ends in the slot's stream. The
    main process records the info of every batch training took
    (:class:`~dynbatch.stream.state.StreamProgress`), so a saved state says, per slot, the block
    and step to go on from. A resumed worker starts reading at that block's
    first record (a shard source skips whole shards unread, and seeks
    inside the shard with a ``reader(path, start=...)``; other sources read the
    records before it again without measuring them), plans the block again
    — the same plan, as a block's plan is a function of its records and
    ``(seed, epoch, slot, block)`` — and yields its batches after the
    recorded step. The rest of the epoch is then the uninterrupted run's:
    the same batches in the same order, on every rank. With shards, the
    resumed DataLoader's first worker takes the slot the uninterrupted run
    would have served next, so that the turns of the workers go on as they
    were. A loaded state is never half-read: its steps must be its cursors'
    steps, and a cursor that is no place of the stream (past its block's
    steps, or where the source has no record) is named when the worker
    reaches it, not passed over with the samples after it.
"""

from __future__ import annotations

import warnings
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._checks import check_int, check_replicas
from ..errors import InputError, InputTypeError
from ..plan.costs import pair_form
from ..plan.lengths import measure_failed
from ..plan.options import PlanOptions
from ..plan.planning import find_oversize, padded_lengths
from ..plan.sharding import ShardedPlan
from ..plan.windows import micro_step_counts
from .blocks import BUFFER_SIZE, block_key, check_stream_options, plan_block
from .measure import LengthKind
from .sources import Source

__all__ = [
    "BUFFER_SIZE",
    "Block",
    "SlotCursor",
    "StepInfo",
    "StreamBatch",
    "StreamPlanner",
    "empty_epoch",
]


@dataclass(frozen=True)
class StepInfo:
    """What a yielded batch is: where it comes from and what its step holds over all ranks.

    Attributes:
        epoch: the epoch.
        slot: the reading slot (NOTE [ streams across ranks and workers ]).
        slot_step: the step's index among the slot's steps of the epoch.
        block, block_step, block_steps: the block, the step's index in it, its steps.
        start, end: where the block starts and the next one starts, ``(shard, record)``.
        samples, tokens: real samples and real tokens of the step, summed over ranks.
        update_end: the block's plan ends an update after this step (``update_size``).
        padding: this rank's batch only repeats samples to even out the ranks' steps.
        slot_last: the slot's last step of the epoch.
        checksum: a checksum of the block's lengths, for the main process to see that every
            worker reading the slot read the same block (NOTE [ streams across ranks and workers ]).
    """

    epoch: int
    slot: int
    slot_step: int
    block: int
    block_step: int
    block_steps: int
    start: tuple[int, int]
    end: tuple[int, int]
    samples: int
    tokens: int
    update_end: bool
    padding: bool
    slot_last: bool
    checksum: int = 0


class StreamBatch(list):  # type: ignore[type-arg]
    """A batch of samples (a plain ``list`` to a collate function) with its :class:`StepInfo`."""

    __slots__ = ("info",)

    def __init__(self, samples: list[Any], info: StepInfo) -> None:
        super().__init__(samples)
        self.info = info

    def __reduce__(self) -> tuple[Any, ...]:
        return (StreamBatch, (list(self), self.info))


@dataclass(frozen=True)
class SlotCursor:
    """Where a slot goes on: the block (its first record) and the step in it to yield next."""

    block: int = 0
    start: tuple[int, int] = (0, 0)
    block_step: int = 0
    slot_step: int = 0
    done: bool = False

    def after(self, info: StepInfo) -> SlotCursor:
        """The cursor once the batch of ``info`` was taken."""
        if info.slot_last:
            return SlotCursor(info.block, info.start, info.block_step + 1, info.slot_step + 1, True)
        if info.block_step + 1 < info.block_steps:
            return SlotCursor(info.block, info.start, info.block_step + 1, info.slot_step + 1)
        return SlotCursor(info.block + 1, info.end, 0, info.slot_step + 1)


@dataclass(frozen=True)
class Resume:
    """Where a pass starts: per slot a cursor, and the slot the first worker serves."""

    epoch: int
    steps: int = 0
    rotation: int = 0
    cursors: tuple[SlotCursor, ...] = field(default_factory=tuple)

    def cursor(self, slot: int) -> SlotCursor:
        return self.cursors[slot] if slot < len(self.cursors) else SlotCursor()


@dataclass
class Block:
    """``buffer_size`` records of a slot: samples, lengths and where they were."""

    index: int
    start: tuple[int, int]
    end: tuple[int, int]
    final: bool
    samples: list[Any]
    lengths: NDArray[np.int64]


class StreamPlanner:
    """A source read in blocks, each planned like an epoch, shared out to ranks and workers.

    Args:
        source: a checked :class:`~dynbatch.stream.sources.Source`.
        length_fn: ``length_fn(sample) -> int``, the length the cost is charged on, or a
            ``(source, target)`` pair (NOTE [ a stream of pairs ]).
        options: the :class:`~dynbatch.PlanOptions` (``drop_last`` and
            ``equal_epochs`` refused).
        buffer_size: records per block (NOTE [ a stream in blocks ]).
        num_replicas: data-parallel ranks.

    >>> from dynbatch.stream.sources import open_source
    >>> planner = StreamPlanner(open_source([[1] * n for n in (3, 1, 4, 1, 5, 9, 2, 6)]), len,
    ...                         PlanOptions(max_cost=12, cost="linear"), buffer_size=4)
    >>> [[len(s) for s in batch] for batch in planner.sequence(0)]
    [[1, 1], [3], [4], [6], [9], [5], [2]]
    >>> [batch.info.block for batch in planner.sequence(0)]  # blocks of 4 samples
    [0, 0, 0, 1, 1, 1, 1]
    """

    def __init__(
        self,
        source: Source,
        length_fn: Callable[[Any], Any],
        options: PlanOptions,
        buffer_size: int = BUFFER_SIZE,
        num_replicas: int = 1,
    ) -> None:
        if not callable(length_fn):
            raise InputTypeError(
                f"length_fn must be callable(sample) -> int (the length the budget is charged "
                f"on), got length_fn={length_fn!r}"
            )
        self.source = source
        self.length_fn = length_fn
        self.options = check_stream_options(options)
        self.buffer_size = check_int("buffer_size", buffer_size, minimum=1)
        self.num_replicas = check_replicas(num_replicas)
        # the kind of the lengths, set by the first block measured (NOTE [ a stream of pairs ])
        self._kind = LengthKind(self.options)

    def slots(self, workers: int) -> int:
        """Reading slots for ``workers`` DataLoader workers (0: the main process)."""
        return max(1, workers) if self.source.sharded else 1

    # -- blocks -------------------------------------------------------------------------------
    def blocks(
        self, epoch: int, slot: int = 0, slots: int = 1, cursor: SlotCursor | None = None
    ) -> Iterator[Block]:
        """The blocks of a slot from ``cursor`` (its block and first record) on."""
        cursor = cursor or SlotCursor()
        records = self.source.records(epoch, slot, slots, cursor.start)
        index, start = cursor.block, cursor.start
        pending = next(records, None)
        while pending is not None:
            positions: list[tuple[int, int]] = []
            samples: list[Any] = []
            values: list[Any] = []
            measure = self.length_fn
            while pending is not None and len(samples) < self.buffer_size:
                position, sample = pending
                positions.append(position)
                samples.append(sample)
                try:
                    values.append(measure(sample))
                except Exception as exc:  # the user's function: named by the sample's place
                    where = f"the sample at {self._where(position, epoch, slot, slots)}"
                    raise measure_failed("length_fn", exc, sample, where) from exc
                pending = next(records, None)
            end = pending[0] if pending is not None else _after(positions[-1])
            places = self._places(positions, epoch, slot, slots)
            lengths = self._kind.checked(values, places)
            block = Block(index, start, end, pending is None, samples, lengths)
            yield self._without_oversize(block, positions, epoch, slot, slots)
            index, start = index + 1, end

    def _places(
        self, positions: list[tuple[int, int]], epoch: int, slot: int, slots: int
    ) -> Callable[[int], str]:
        """Where the ``i``-th of ``positions`` is in the stream, as :meth:`_where` says it."""
        return lambda i: self._where(positions[i], epoch, slot, slots)

    def _where(self, position: tuple[int, int], epoch: int, slot: int, slots: int) -> str:
        shard, record = position
        if self.source.sharded:
            return f"record {record} of shard {self.source.shards(epoch, slot, slots)[shard]}"
        return f"record {record} of the stream (epoch {epoch})"

    def _without_oversize(
        self,
        block: Block,
        positions: list[tuple[int, int]],
        epoch: int,
        slot: int,
        slots: int,
    ) -> Block:
        opts = self.options
        over = find_oversize(block.lengths, options=opts)
        if not over.size or opts.oversize == "alone":
            return block
        i = int(over[0])
        padded = padded_lengths(block.lengths[i : i + 1], opts.pad_to_multiple_of)
        if block.lengths.ndim == 2:  # NOTE [ a stream of pairs ]
            length: Any = tuple(block.lengths[i].tolist())
            shown: Any = tuple(padded[0].tolist())
            alone = float(pair_form(opts.cost)(1, *shown))
            what = "(source, target) lengths"
        else:
            length, shown = int(block.lengths[i]), int(padded[0])
            alone, what = float(opts.cost(1, shown)), "length"
        head = (
            f"the sample at {self._where(positions[i], epoch, slot, slots)} has {what} {length} "
            f"(padded {shown}) and costs {alone:g} alone, over max_cost={opts.max_cost:g}"
        )
        if opts.pack_len is not None:
            head = (
                f"the sample at {self._where(positions[i], epoch, slot, slots)} has length "
                f"{length}, longer than a row of pack_len={opts.pack_len}"
            )
        if opts.oversize == "error":
            budget = "max_cost" if opts.pack_len is None else "pack_len"  # what would fit it
            raise InputError(
                f"{head}. Raise {budget}, truncate it, or pass oversize='skip' or 'alone'"
            )
        warnings.warn(f"skipping {over.size} sample(s) over budget: {head}", stacklevel=2)
        keep = np.ones(len(block.lengths), dtype=bool)
        keep[over] = False
        kept = [s for s, k in zip(block.samples, keep.tolist(), strict=True) if k]
        return replace(block, samples=kept, lengths=block.lengths[keep])

    def plan(self, block: Block, epoch: int, slot: int = 0) -> ShardedPlan:
        """The plan of a block: an epoch's plan of its lengths (NOTE [ a stream in blocks ])."""
        key = block_key(epoch, slot, block.index)
        return plan_block(block.lengths, self.options, self.num_replicas, key)

    # -- a worker's batches -------------------------------------------------------------------
    def worker_batches(
        self,
        epoch: int,
        rank: int = 0,
        worker: int = 0,
        workers: int = 0,
        resume: Resume | None = None,
    ) -> Iterator[StreamBatch]:
        """What DataLoader worker ``worker`` of ``workers`` on ``rank`` yields in ``epoch``.

        NOTE [ streams across ranks and workers ]: the worker reads slot
        ``(worker + rotation) % slots`` and yields, of its steps, every one if
        it reads the slot alone, or every ``workers``-th from the resumed step.
        """
        slots = self.slots(workers)
        readers = max(1, workers) // slots
        resume = resume or Resume(epoch)
        slot = (worker + resume.rotation) % slots
        cursor = resume.cursor(slot)
        if cursor.done:
            return
        first_step, mine = cursor.slot_step, worker // slots
        step = first_step
        read = kept = 0  # records read (a stream without shards: the last block's end), blocks kept
        blocks = 0
        for block in self.blocks(epoch, slot, slots, cursor):
            read, blocks = block.end[1], blocks + 1
            first = block.index == cursor.block
            if not block.lengths.size:
                if first and cursor.block_step:
                    raise InputError(self._off_the_stream(cursor, slot, "holds no step"))
                continue
            kept += 1
            sharded = self.plan(block, epoch, slot)
            skip = cursor.block_step if first else 0
            if skip >= sharded.num_steps:  # a cursor never points past its block's steps
                raise InputError(
                    self._off_the_stream(cursor, slot, f"holds {sharded.num_steps} steps")
                )
            indices, offsets = sharded.for_rank(rank).lists()
            samples = micro_step_counts(sharded, block.lengths, "samples").astype(np.int64)
            tokens = micro_step_counts(sharded, block.lengths, "tokens").astype(np.int64)
            ends = set() if sharded.window_ends is None else set(sharded.window_ends.tolist())
            padding = sharded.padding_for_rank(rank).tolist()
            total = sharded.num_steps
            checksum = zlib.crc32(block.lengths.tobytes())
            for j in range(skip, total):
                if (step - first_step) % readers == mine:
                    info = StepInfo(
                        epoch=epoch,
                        slot=slot,
                        slot_step=step,
                        block=block.index,
                        block_step=j,
                        block_steps=total,
                        start=block.start,
                        end=block.end,
                        samples=int(samples[j]),
                        tokens=int(tokens[j]),
                        update_end=j + 1 in ends or j + 1 == total,
                        padding=bool(padding[j]),
                        slot_last=block.final and j + 1 == total,
                        checksum=checksum,
                    )
                    members = indices[offsets[j] : offsets[j + 1]]
                    yield StreamBatch([block.samples[i] for i in members], info)
                step += 1
        if not blocks and cursor != SlotCursor():  # a cursor that is not done points at a record
            raise InputError(self._off_the_stream(cursor, slot, "has no record there"))
        if cursor == SlotCursor() and not self.source.sharded and not kept:
            if read:  # every block emptied by oversize="skip"
                raise InputError(
                    f"all {read} samples of epoch {epoch} are over "
                    f"max_cost={self.options.max_cost:g} alone, and oversize='skip' skipped "
                    "every one: there is nothing to train on. Raise max_cost, truncate the "
                    "samples, or pass oversize='alone' (each its own batch)"
                )
            raise InputError(empty_epoch(self.source.describe(), epoch))

    def _off_the_stream(self, cursor: SlotCursor, slot: int, what: str) -> str:
        """Why a loaded state's cursor is no place in this stream (NOTE [ resuming a stream ])."""
        shard, record = cursor.start
        place = f"record {record}" + (f" of shard {shard}" if self.source.sharded else "")
        return (
            f"this stream state's cursor of slot {slot} goes on at step {cursor.block_step} of "
            f"block {cursor.block} at {place}, but the source ({self.source.describe()}) "
            f"{what}: the state is not this stream's or was altered, and resuming from it "
            "would lose samples. Load the state this stream saved, or start the epoch afresh"
        )

    def sequence(
        self, epoch: int, rank: int = 0, workers: int = 0, resume: Resume | None = None
    ) -> Iterator[StreamBatch]:
        """A rank's batches in the order a DataLoader with ``workers`` workers yields them.

        paddle's DataLoader asks its workers in turn and passes over the ones
        that are done, so this is the workers' batches taken round-robin.
        """
        its = [self.worker_batches(epoch, rank, w, workers, resume) for w in range(max(1, workers))]
        while its:
            alive = []
            for it in its:
                batch = next(it, None)
                if batch is not None:
                    yield batch
                    alive.append(it)
            its = alive


def empty_epoch(what: str, epoch: int, options: PlanOptions | None = None) -> str:
    """Why an epoch of a stream has nothing to train on (``options``: it may have skipped)."""
    if options is not None and options.oversize == "skip":
        return (
            f"the source ({what}) yielded no batch in epoch {epoch}: it is empty, or "
            f"oversize='skip' skipped every sample as over max_cost={options.max_cost:g} alone. "
            "Raise max_cost, truncate the samples, or pass oversize='alone'"
        )
    return f"the source ({what}) yielded no samples in epoch {epoch}: there is nothing to batch"


def _after(position: tuple[int, int]) -> tuple[int, int]:
    return (position[0], position[1] + 1)
