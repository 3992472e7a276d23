"""Dynamic batches from a stream for paddle: the ``IterableDataset`` adapter and its loader.

The planning is :mod:`dynbatch.stream.planner` (numpy); this module adds paddle's
base class, the worker and rank from paddle, and :class:`StreamLoader`, the
``paddle.io.DataLoader`` whose batches the main process records for resume
and for the accumulator (NOTE [ resuming a stream ] in :mod:`dynbatch.stream.planner`).
"""

from __future__ import annotations

import inspect
import mmap
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from .._checks import (
    check_bool,
    check_choice,
    check_epochs,
    check_int,
    check_positive_number,
)
from .._optional import require
from ..errors import InputError, InputTypeError
from ..plan.contract import Pass
from ..plan.options import UNITS, resolve_options
from ..stream.planner import BUFFER_SIZE, StreamBatch, StreamPlanner, empty_epoch
from ..stream.sources import open_source
from ..stream.state import StreamCount, StreamProgress, Taken, count_epoch

paddle = require("paddle", "dynbatch.DynamicBatchIterable")
from paddle.io import DataLoader, IterableDataset  # noqa: E402

from .safe_collate import left_with_an_error, raise_failure, safe_collate  # noqa: E402
from .sampler import resolve_rank  # noqa: E402

__all__ = ["DynamicBatchIterable", "StreamLoader"]


class DynamicBatchIterable(IterableDataset):  # type: ignore[type-arg]
    """A ``paddle.io.IterableDataset`` of dynamic batches from a stream, in bounded memory.

    It yields lists of samples (:class:`~dynbatch.stream.planner.StreamBatch`),
    each fitting ``max_cost``, for ``paddle.io.DataLoader(it, batch_size=None,
    collate_fn=...)``; :meth:`loader` builds that DataLoader and records what
    training takes, for :meth:`state_dict` and for a
    :class:`~dynbatch.GradientAccumulator` given ``sampler=it``.

    The stream is read in blocks of ``buffer_size`` records, each planned as the in-memory planner
    plans an epoch (its lengths are not known before it is read, and holding them all is what a
    stream avoids); every rank reads the same stream and plans the same blocks, so every rank
    yields the same number of batches with no communication, each sample once per epoch over the
    ranks and DataLoader workers; a resume goes on from the block it stopped in, its records read
    again but not planned anew. Call :meth:`set_epoch` before each epoch.

    Args:
        source: a re-iterable of samples, a callable ``source(epoch)``
            returning one, or a list of shard paths read by ``reader``
            (:mod:`dynbatch.stream.sources`).
        length_fn: ``length_fn(sample) -> int``, the length the cost charges, or a
            ``(source, target)`` pair of an encoder–decoder's sample, each side bucketed as the
            samplers bucket ``[N, 2]`` lengths.
        max_cost: the budget every batch fits: ``cost(n, L) <= max_cost`` (for pairs
            ``cost(n, Ls, Lt)``).
        options: a :class:`~dynbatch.PlanOptions`, instead of ``max_cost`` and
            ``**shortcuts``.
        **shortcuts: the other :class:`~dynbatch.PlanOptions` fields as keywords (``cost=...,
            order=...``). ``drop_last`` and ``equal_epochs`` are refused (a stream's epoch is
            not known before it is read); ``time_model`` and ``group_by_length`` cut each
            block's updates at the step time, as the samplers cut an epoch's; ``pack_len`` packs
            each block as an epoch is packed, and with ``time_model`` too each update runs
            packed, split or whole: collate with ``PackCollator.for_sampler(stream)``.
        buffer_size: records planned at once; memory grows with it, not with
            the corpus.
        reader: ``reader(path)`` or ``reader(path, start=...)`` yielding a shard's
            samples, e.g. :func:`dynbatch.read_jsonl`.
        shuffle_shards: shuffle the shards' order with ``(seed, epoch)``.
        num_replicas, rank: default to paddle's parallel environment.
    """  # NOTE [ a stream in blocks ], [ streams across ranks and workers ], [ resuming a stream ]

    def __init__(
        self,
        source: Any,
        *,
        length_fn: Callable[[Any], Any] | None = None,
        max_cost: float | None = None,
        buffer_size: int = BUFFER_SIZE,
        reader: Callable[..., Iterable[Any]] | None = None,
        shuffle_shards: bool = True,
        num_replicas: int | None = None,
        rank: int | None = None,
        options: Any = None,
        **shortcuts: Any,
    ) -> None:
        super().__init__()
        self.num_replicas, self.rank = resolve_rank(num_replicas, rank)
        if length_fn is None:
            raise InputError(
                "a stream does not say how long its samples are: pass length_fn=callable(sample) "
                "-> int (e.g. lambda s: len(s['input_ids']))"
            )
        if max_cost is not None:
            shortcuts["max_cost"] = max_cost
        self.options = resolve_options(options, shortcuts, "DynamicBatchIterable")
        opened = open_source(
            source,
            reader,
            shuffle_shards=check_bool("shuffle_shards", shuffle_shards),
            seed=self.options.seed,
        )
        self.planner = StreamPlanner(
            opened, length_fn, self.options, buffer_size, self.num_replicas
        )
        self.buffer_size = self.planner.buffer_size
        self.progress = StreamProgress(self.planner)
        # set by loader(): the slots of a sharded source depend on it (None: not known yet)
        self.num_workers: int | None = None
        self._start = self.progress.upcoming()  # what the workers of the next pass start from
        self._managed = False  # the next __iter__ is StreamLoader's (NOTE [ who reads a stream ])
        self._hand_read = _HandRead()  # set by the workers of a hand-built DataLoader

    # -- epochs ---------------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        return self.progress.epoch

    def set_epoch(self, epoch: int) -> None:
        """Read ``epoch`` next; a state loaded for that epoch is kept.

        Args:
            epoch: the epoch, from 0.
        """
        self.progress.set_epoch(epoch)
        self._hand_read.forget()
        self._start = self.progress.upcoming()

    def __len__(self) -> NoReturn:
        raise InputTypeError(
            "a stream has no len() before it is read (its batches are planned as it is read): "
            "count an epoch with stream.count(epoch).steps, a first pass over the stream"
        )

    def __iter__(self) -> Iterator[StreamBatch]:
        """The batches of the pass (NOTE [ who reads a stream ])."""
        info = paddle.io.get_worker_info()
        managed, self._managed = self._managed, False
        start = self._start
        if info is not None:  # a DataLoader worker process
            if not managed:  # a hand-built DataLoader's worker: tell the main process
                self._hand_read.mark()
            batches = self.planner.worker_batches(
                start.epoch, self.rank, info.id, info.num_workers, start
            )
            return _handed_over(batches) if managed else batches
        if managed:  # StreamLoader's single-process loader: its thread reads, the loader records
            return _handed_over(self.planner.worker_batches(start.epoch, self.rank, 0, 0, start))
        return self._read_here()

    def _read_here(self) -> Iterator[StreamBatch]:
        """Iterated in this process: recorded batch by batch in the main thread; in another
        thread (a DataLoader built by hand reads ahead of the loop) not knowable."""
        if threading.current_thread() is not threading.main_thread():
            self.progress.unknown(
                "its batches were read by a paddle.io.DataLoader built by hand, whose thread "
                "reads ahead of the training loop"
            )
            start = self._start
            yield from self.planner.worker_batches(start.epoch, self.rank, 0, 0, start)
            return
        start = self._start = self.progress.begin(0)  # not begin_pass: no loader reads it
        self._hand_read.forget()
        batches = self.planner.worker_batches(start.epoch, self.rank, 0, 0, start)
        pending = next(batches, None)
        while pending is not None:
            following = next(batches, None)
            self.progress.took(pending.info, last=following is None)
            yield pending
            pending = following

    # -- the loader that records what training takes ------------------------------------------
    def loader(
        self,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        num_workers: int = 0,
        **kwargs: Any,
    ) -> StreamLoader:
        """A ``paddle.io.DataLoader`` over this stream whose batches the stream records.

        A sharded source read by several workers cannot make the plan's updates
        (``update_size``): each worker plans its own shards and the DataLoader
        interleaves their steps, so an update would span two plans. That is
        refused; ``GradientAccumulator(target=...)`` closes updates on the
        running count instead, whoever planned the steps.

        Args:
            collate_fn: turns a batch (a list of samples) into arrays; its error is raised in
                the loop, by name.
            num_workers: the DataLoader's worker processes (0: read in the main process).
            **kwargs: other ``paddle.io.DataLoader`` arguments.
        """
        workers = check_int("num_workers", num_workers)
        if workers > 1 and self.planner.source.sharded and self.options.update_size is not None:
            raise InputError(
                f"update_size={self.options.update_size:g} with a sharded source read by "
                f"num_workers={workers}: each worker plans its own shards and the DataLoader "
                "interleaves their steps, so updates would span two plans. Use num_workers <= 1, "
                "or leave update_size out and give GradientAccumulator(target=...) instead"
            )
        return StreamLoader(self, collate_fn, num_workers, **kwargs)

    def begin_pass(self, workers: int) -> None:
        """Start a pass read by ``workers`` DataLoader workers (what :class:`StreamLoader` does).

        Args:
            workers: the DataLoader's worker processes (0: its main process).
        """
        self.num_workers = workers
        self._start = self.progress.begin(workers)
        self._hand_read.forget()
        self._managed = True

    def taken(self) -> Taken | None:
        """The batch the loop took last from :meth:`loader` (None before one)."""
        return self.progress.taken()

    def current_pass(self) -> Pass:
        """The pass under way (its epoch and first step); before any, the next one."""
        return self.progress.current_pass()

    # -- counts, for learning-rate schedules (NOTE [ updates of a stream ]) --------------------
    def count(self, epoch: int | None = None, num_workers: int | None = None) -> StreamCount:
        """A first pass over ``epoch``: reads the stream, plans it, trains nothing; exact.

        Args:
            epoch: the epoch; default: the current one.
            num_workers: the DataLoader workers that will read it (a sharded source's batches
                depend on them); default: those :meth:`loader` was given.
        """
        epoch = self.epoch if epoch is None else check_int("epoch", epoch)
        workers = self.num_workers if num_workers is None else check_int("num_workers", num_workers)
        if workers is None:
            if self.planner.source.sharded:
                raise InputError(
                    "a sharded source's batches depend on the DataLoader's num_workers (each "
                    "worker reads its own shards), which this stream does not know yet: pass "
                    "count(num_workers=...) or make stream.loader(collate, num_workers=...) "
                    "before counting (steps_for_epochs counts through count())"
                )
            workers = 0  # a stream without shards plans alike under any number of workers
        return count_epoch(self.planner, epoch, workers)

    def steps_for_epochs(
        self, epochs: Iterable[int], target: float | None = None, unit: str = "samples"
    ) -> int:
        """Optimizer updates over ``epochs`` by first passes (one read of the stream each).

        Args:
            epochs: the epochs, e.g. ``range(E)``.
            target: updates end where their samples (or tokens) reach this, as
                ``GradientAccumulator(target=...)`` ends them; default: the plan's updates
                (``update_size``), or one per step.
            unit: what ``target`` counts: ``"samples"`` or ``"tokens"``.
        """
        unit = check_choice("unit", unit, UNITS)
        if target is not None:
            target = check_positive_number("target", target)
        plan = self.options.update_size is not None and target is None
        return sum(self.count(e).updates(target, unit, plan) for e in check_epochs(epochs))

    # -- resume (NOTE [ resuming a stream ]) -------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Where the epoch stands, after the batches the loop took from :meth:`loader` (or from
        the stream itself, iterated in the main thread); refused after a hand-built
        DataLoader's thread or workers read it, since they read ahead of the loop by an
        amount the stream cannot know."""  # NOTE [ who reads a stream ]
        if self._hand_read.marked():
            self.progress.unknown(
                "its batches were read by the worker processes of a paddle.io.DataLoader built "
                "by hand, which read ahead of the training loop"
            )
        return self.progress.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """The next pass goes on where the saved one stood (checked before anything changes).

        Args:
            state: what :meth:`state_dict` returned.
        """
        self.progress.load_state_dict(state)
        self._hand_read.forget()
        self._start = self.progress.upcoming()


_END = object()


class _HandRead:
    """A mark the workers of a hand-built DataLoader leave for the main process to see.

    One byte of anonymous shared memory (NOTE [ who reads a stream ]): a worker forked
    from the stream sets it when it starts reading, and the main process clears it
    where what training took is known again (``set_epoch``, ``load_state_dict``, a
    pass of its own). A worker that starts reading after that (persistent workers,
    which never see ``set_epoch``) sets it again: a refusal too many, never a state
    that restarts the epoch. A pickled copy (a worker started by spawn, not fork)
    gets a byte of its own, which the main process cannot see.
    """

    def __init__(self) -> None:
        self._shared = mmap.mmap(-1, 1)

    def mark(self) -> None:
        self._shared[0] = 1

    def marked(self) -> bool:
        return self._shared[0] == 1

    def forget(self) -> None:
        self._shared[0] = 0

    def __getstate__(self) -> dict[str, int]:
        return {}

    def __setstate__(self, state: dict[str, int]) -> None:
        self._shared = mmap.mmap(-1, 1)


@dataclass(frozen=True)
class Failure:
    """An error in reading or planning the stream, handed to the loader in place of a batch.

    NOTE [ who reads a stream ]
        paddle's single-process DataLoader reads the dataset in a thread that prints an error and
        leaves the loop waiting forever; its workers turn one into a bare ``SystemError``. So in a
        pass that :class:`StreamLoader` runs, the stream hands an error to the loader as a batch,
        and the loader raises it in the main process, named as the stream named it (the sample's
        record and shard); an error in the loader's ``collate_fn`` comes through the same way
        (NOTE [ a collate error in paddle's DataLoader ] in :mod:`dynbatch.paddle.safe_collate`).
        Iterated in the main thread (``for batch in stream``, ``list(stream)``), the stream raises
        it itself and records each batch as it hands it over, so
        :meth:`DynamicBatchIterable.state_dict` resumes after the last one. A
        ``paddle.io.DataLoader`` built by hand reads ahead of the loop (a thread or workers), so
        what training took is not known there: after its thread or its workers read the stream,
        ``state_dict()`` is refused (use ``stream.loader`` to resume). Its workers are other
        processes: each marks a :class:`_HandRead`, a byte of memory shared with the process that
        forked it, and the main process turns the mark into the refusal.
    """

    kind: str
    message: str

    def error(self) -> InputError:
        if self.kind == "InputTypeError":
            return InputTypeError(self.message)
        if self.kind == "InputError":
            return InputError(self.message)
        return InputError(f"the stream raised {self.kind} in the DataLoader: {self.message}")


def _handed_over(batches: Iterator[StreamBatch]) -> Iterator[StreamBatch]:
    """``batches``, an error in making them handed to the loader as a :class:`Failure`."""
    try:
        yield from batches
    except Exception as exc:  # NOTE [ who reads a stream ]
        if isinstance(exc, InputError):
            kind, message = type(exc).__name__, str(exc)
            if kind not in ("InputError", "InputTypeError"):
                kind = "InputError"
        else:
            kind, message = type(exc).__name__, "".join(traceback.format_exception(exc))
        yield StreamBatch([], Failure(kind, message))  # type: ignore[arg-type]


class _Tagged:
    """The collate function of a :class:`StreamLoader`: the batch collated, and its info; an error
    in ``collate_fn`` is returned in the batch (NOTE [ a collate error in paddle's DataLoader ] in
    :mod:`dynbatch.paddle.safe_collate`)."""

    def __init__(self, collate_fn: Callable[[list[Any]], Any] | None) -> None:
        self.collate_fn = None if collate_fn is None else safe_collate(collate_fn)

    def __call__(self, batch: StreamBatch) -> tuple[Any, Any, Any]:
        if isinstance(batch.info, Failure):  # the loader raises it in the main process
            return np.zeros(1, dtype=np.int8), batch.info, np.zeros(1, dtype=np.int8)
        samples = list(batch)
        collated = self.collate_fn(samples) if self.collate_fn else samples
        # paddle's DataLoader silently drops a batch that holds no array: one rides along
        return collated, batch.info, np.zeros(1, dtype=np.int8)


class StreamLoader:
    """``paddle.io.DataLoader(stream, batch_size=None, ...)`` that records each batch taken.

    Iterate it as the DataLoader; each batch is ``collate_fn(samples)``. The
    stream then knows which batch training holds: its ``state_dict`` resumes
    after it, and a :class:`~dynbatch.GradientAccumulator` following the
    stream ends updates where every rank does (NOTE [ updates of a stream ]).
    """

    def __init__(
        self,
        stream: DynamicBatchIterable,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        num_workers: int = 0,
        **kwargs: Any,
    ) -> None:
        self.num_workers = check_int("num_workers", num_workers)
        known = set(inspect.signature(DataLoader.__init__).parameters) - {"self", "dataset"}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            name = unknown[0]
            raise InputTypeError(
                f"loader() got an unknown keyword {name}={kwargs[name]!r:.80}: the keywords it "
                f"passes on are those paddle.io.DataLoader takes ({', '.join(sorted(known))})"
            )
        if kwargs.get("persistent_workers"):
            raise InputError(
                "persistent_workers=True keeps the workers of the first pass, which would not "
                "see set_epoch() or load_state_dict(); leave it False"
            )
        if "prefetch_factor" in kwargs:
            kwargs["prefetch_factor"] = check_int(
                "prefetch_factor", kwargs["prefetch_factor"], minimum=1
            )
        for name in ("batch_size", "batch_sampler", "shuffle", "drop_last"):
            if name in kwargs:
                raise InputError(
                    f"{name} is the stream's business (it yields whole batches): remove "
                    f"{name}={kwargs[name]!r}"
                )
        if collate_fn is not None and not callable(collate_fn):
            raise InputError(f"collate_fn must be callable(samples), got {collate_fn!r}")
        self.stream = stream
        stream.num_workers = self.num_workers  # a first pass counts the slots this loader reads
        make: Any = DataLoader  # paddle types batch_size as int; None is its iterable mode
        self.dataloader = make(
            stream,
            batch_size=None,
            collate_fn=_Tagged(collate_fn),
            num_workers=self.num_workers,
            **kwargs,
        )

    def __iter__(self) -> Iterator[Any]:
        stream = self.stream
        stream.begin_pass(self.num_workers)
        try:
            it = iter(self.dataloader)
        finally:
            stream._managed = False  # with workers, only their copies read it
        upcoming: Any = next(it, _END)
        if upcoming is _END and stream.current_pass().start == 0:
            raise InputError(
                empty_epoch(stream.planner.source.describe(), stream.epoch, stream.options)
            )
        while upcoming is not _END:
            batch, info, _ = upcoming
            try:
                if isinstance(info, Failure):
                    raise info.error()
                raise_failure(batch)  # the collate_fn's error, by name
            except BaseException:  # NOTE [ a loader after a collate error ] in .safe_collate
                left_with_an_error(it)
                raise
            upcoming = next(it, _END)
            stream.progress.took(info, last=upcoming is _END)
            yield batch
