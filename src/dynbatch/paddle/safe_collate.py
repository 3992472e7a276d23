"""A collate function whose error reaches the training loop by name: numpy only.

NOTE [ a collate error in paddle's DataLoader ]
    paddle 3.3's ``paddle.io.DataLoader`` does not pass on an exception raised
    by its ``collate_fn``:

    * with ``num_workers=0`` it collates in a thread of its own: the exception
      ends that thread (its traceback is printed) and the loop waits for the
      next batch forever. A ``SIGALRM`` handler does not run either: the main
      thread waits in C++.
    * with workers, a worker's exception is raised again in the loader's
      reader thread, which kills the batch queue, and the loop gets a bare
      ``SystemError: (Fatal) Blocking queue is killed because the data reader
      raises an exception``. An exception whose class takes other arguments
      cannot even be raised again there (a ``TypeError`` in that thread).

    What does come through, in both modes, is a batch: the loader passes an
    object it does not convert as it is (pickled, from a worker), as long as
    the batch holds at least one array. A batch of none reads as the loader's
    end: the loop stops early without a word. So :class:`SafeCollate` catches
    the error where it is raised and returns it as the batch, ``{FAILED:
    CollateFailure, ...one array}``, and the main process raises it when it
    takes that batch (:meth:`SafeCollate.batches`, :func:`raise_failure`): the
    original exception, its own type and message, chained from a
    :class:`CollateError` that names the collate function and holds the
    traceback where it was raised. An exception that cannot be pickled back
    from a worker is raised as a :class:`CollateError` naming its type and
    message. dynbatch's own loaders do this themselves:
    :meth:`~dynbatch.DynamicBatchIterable.loader` and the train loader of
    ``DynamicBatchTrainer``.

NOTE [ a collator safe by construction ]
    A plain loop, ``for batch in DataLoader(ds, batch_sampler=..., collate_fn=collate)``,
    takes no ``.batches()``, so dynbatch's own collators (``Pad``, ``Stack``, ``Tuple``,
    ``Dict``, ``Seq2SeqCollator``, ``PackCollator``) carry their error to it themselves
    (:func:`reaches_the_loop`). Called by paddle's loader itself (its fetcher, in its
    collating thread or a worker: :func:`called_by_the_loader` reads the calling frames),
    one returns its error as the batch above; called by anything else (a collate function
    of the user's, another collator, :class:`SafeCollate`) it raises as any function does,
    so that caller sees the error as it was (wrap a collate function of your own in
    :func:`safe_collate`). The :class:`CollateFailure` in that batch raises its error
    when code outside the loader's own threads and workers asks what it is: paddle's
    loader restores every batch in the loop's thread and asks each field
    ``isinstance(field, str)``, which reads ``field.__class__``. So ``next(loader)``
    itself raises the error, in the loop, before any model code sees the batch, with and
    without workers. An ``AttributeError`` (which ``isinstance`` would swallow) is raised
    as the :class:`CollateError` that names it. An exception that is not an ``Exception``
    (a cancellation, a ``KeyboardInterrupt`` raised by the data) is carried too from the
    collating thread, which it would end while the loop waits forever; in a worker it is
    raised as before, for paddle's worker to handle (``_carried``).

NOTE [ a loader after a collate error ]
    Two things of paddle's loader are wrong after a batch raised in the loop, and the
    loop may go on (catch the error and take the next batch) or stop.

    * With workers, paddle counts a batch as delivered only after it is restored, and
      the error is raised while it is restored: the pass would wait for that batch at
      its end forever. So the failed batch is counted as delivered as it raises
      (``_on_output_batch``, :func:`_settle_the_loader`), and the pass ends.
    * paddle keeps the iterator of a loader without workers in a module global, and a
      pass left before its end keeps its reader running: a daemon thread, and the
      reader's own, alive at the interpreter's exit can abort it (``terminate called
      without an active exception``) after the loop has printed its error. The
      iterator is not stopped under the loop, which may still take its batches: it is
      kept (weakly) and stopped at exit, before paddle's own clean-up, as paddle stops
      a pass that ended (:func:`_stop_at_exit`).

    The iterator is found by reading the calling frames, as
    :func:`called_by_the_loader` does; :meth:`CheckedBatches.__iter__` and the stream's
    loader hand theirs over (:func:`left_with_an_error`).
"""

from __future__ import annotations

import atexit
import functools
import pickle
import sys
import traceback
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import FrameType
from typing import Any, NoReturn, TypeVar

import numpy as np

from ..errors import InputTypeError

__all__ = [
    "FAILED",
    "CheckedBatches",
    "CollateError",
    "CollateFailure",
    "SafeCollate",
    "called_by_the_loader",
    "left_with_an_error",
    "raise_failure",
    "reaches_the_loop",
    "safe_collate",
]

#: The field of a batch that holds a :class:`CollateFailure` instead of the batch (NOTE above).
FAILED = "dynbatch_collate_error"


class CollateError(RuntimeError):
    """Where a collate error was raised: the collate function, and the traceback there."""


class CollateFailure:
    """A collate function's error, carried to the main process in the batch.

    Asked what it is (``__class__``) outside paddle's loader, it raises its error there
    (NOTE [ a collator safe by construction ]).

    Attributes:
        error: the exception itself; None when it could not be pickled back from a worker.
        kind: its type's name.
        message: its message.
        where: the collate function that raised it, and on how many samples.
        trace: its traceback where it was raised.
    """

    def __init__(
        self, error: BaseException | None, kind: str, message: str, where: str, trace: str
    ) -> None:
        self.error, self.kind, self.message, self.where, self.trace = (
            error,
            kind,
            message,
            where,
            trace,
        )

    @classmethod
    def of(cls, error: BaseException, collate_fn: Any, samples: Any) -> CollateFailure:
        size = f"{len(samples)} samples" if hasattr(samples, "__len__") else "a batch"
        return cls(
            error,
            type(error).__name__,
            str(error),
            f"the collate_fn {_name(collate_fn)} (on {size})",
            "".join(traceback.format_exception(error)),
        )

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # NOTE [ a collator safe by construction ]
        if not called_by_the_loader():
            if isinstance(self.error, AttributeError):  # isinstance would swallow it
                raise CollateError(self._said()) from self.error
            self.reraise()
        return CollateFailure

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        error = self.error
        try:  # an exception class may not unpickle (its __init__ takes other arguments)
            pickle.loads(pickle.dumps(error))
        except Exception:
            error = None
        return (CollateFailure, (error, self.kind, self.message, self.where, self.trace))

    def __repr__(self) -> str:
        return f"CollateFailure({self.where} raised {self.kind}: {self.message!r:.160})"

    def _said(self) -> str:
        return f"{self.where} raised {self.kind}: {self.message}"

    def reraise(self) -> NoReturn:
        """Raise the error in this process (NOTE [ a collate error in paddle's DataLoader ]),
        the loader it came through settled (NOTE [ a loader after a collate error ])."""
        _settle_the_loader()
        if self.error is None:
            raise CollateError(
                f"{self._said()} (the error itself could not be "
                f"sent from the DataLoader worker). Its traceback there:\n{self.trace}"
            )
        raise self.error from CollateError(
            f"{self.where} raised the {self.kind} below. Its traceback there:\n{self.trace}"
        )


#: paddle's loader functions that call a collate_fn and pass its batch on (paddle 3.3)
_LOADER_FRAMES = {
    ("paddle.io.dataloader.dataloader_iter", "_thread_loop"),
    ("paddle.io.dataloader.worker", "_worker_loop"),
}


#: paddle's module whose iterators' ``__next__`` restores a batch in the loop's thread
_ITERATORS = "paddle.io.dataloader.dataloader_iter"

#: the iterators a collate error left, stopped at exit (NOTE [ a loader after a collate error ])
_LEFT: weakref.WeakSet[Any] = weakref.WeakSet()
_registered = False  # whether _stop_at_exit is registered (once a process)


def _callers() -> Iterator[FrameType]:
    """The frames that called the caller, innermost first."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        yield frame
        frame = frame.f_back


def _settle_the_loader() -> None:
    """The paddle iterator whose ``__next__`` is a caller, if one is: the failed batch
    counted as delivered (with workers), the iterator stopped at exit
    (NOTE [ a loader after a collate error ])."""
    for frame in _callers():
        if frame.f_globals.get("__name__") == _ITERATORS and frame.f_code.co_name == "__next__":
            batches = frame.f_locals.get("self")
            delivered = getattr(batches, "_on_output_batch", None)  # paddle 3.3, with workers
            if callable(delivered):
                delivered()
            left_with_an_error(batches)
            return


def left_with_an_error(batches: Any) -> None:
    """Stop paddle's loader iterator ``batches`` at exit, before paddle's own clean-up, as
    paddle stops a pass that ended (NOTE [ a loader after a collate error ])."""
    global _registered
    if callable(getattr(batches, "_try_shutdown_all", None)):  # paddle 3.3
        if not _registered:
            atexit.register(_stop_at_exit)  # after paddle's, so run before it
            _registered = True
        _LEFT.add(batches)


def _stop_at_exit() -> None:
    for batches in list(_LEFT):
        try:
            reader = getattr(batches, "_reader", None)
            if reader is not None and not getattr(batches, "_shutdown", True):
                reader.shutdown()
            batches._try_shutdown_all()
        except Exception:  # at exit: never in the way of the rest
            pass


def called_by_the_loader() -> bool:
    """Whether paddle's ``DataLoader`` (its collating thread or a worker) is the caller."""
    return _loader_frame() is not None


def _loader_frame() -> str | None:
    """The name of paddle's loader function that is the caller (``_LOADER_FRAMES``), if any."""
    for frame in _callers():
        if (frame.f_globals.get("__name__"), frame.f_code.co_name) in _LOADER_FRAMES:
            return frame.f_code.co_name
    return None


def _carried(error: BaseException) -> bool:
    """Whether ``error``, raised by a collate_fn that paddle's loader called, goes to the loop in
    the batch. An ``Exception`` always does. Any other (a cancellation, a ``KeyboardInterrupt``
    raised by the data) does from the collating thread, which it would end while the loop waits
    forever; a worker raises it as before, for paddle's worker to handle."""
    return isinstance(error, Exception) or _loader_frame() == "_thread_loop"


def failure_batch(error: BaseException, collate_fn: Any, samples: Any) -> dict[str, Any]:
    """The batch that carries ``error`` to the loop: one array, as a batch of none reads as the
    loader's end (NOTE [ a collate error in paddle's DataLoader ])."""
    return {
        FAILED: CollateFailure.of(error, collate_fn, samples),
        "dynbatch_array": np.zeros(1, np.int8),
    }


Call = TypeVar("Call", bound=Callable[..., Any])


def reaches_the_loop(call: Call) -> Call:
    """A collator's ``__call__`` whose error reaches a plain loop over paddle's ``DataLoader``
    (NOTE [ a collator safe by construction ]): called by the loader itself, it returns the
    error as the batch; called by anything else (a collate function of the user's, another
    collator, :class:`SafeCollate`) it raises, so that caller sees the error as it was."""

    @functools.wraps(call)
    def guarded(self: Any, samples: Any) -> Any:
        try:
            return call(self, samples)
        except BaseException as exc:  # not only Exception: _carried
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if caller != _FETCHER or not called_by_the_loader() or not _carried(exc):
                raise
            return failure_batch(exc, self, samples)

    return guarded  # type: ignore[return-value]


#: the module whose fetchers call a DataLoader's collate_fn (paddle 3.3)
_FETCHER = "paddle.io.dataloader.fetcher"


def _name(fn: Any) -> str:
    qualname = getattr(fn, "__qualname__", None)
    if isinstance(qualname, str) and not isinstance(fn, type):  # a function or method
        return f"{getattr(fn, '__module__', '?')}.{qualname}"
    return f"{fn!r:.160}"


class SafeCollate:
    """``collate_fn(samples)``, an error returned in the batch to be raised by the loop.

    Build it with :func:`safe_collate`; NOTE [ a collate error in paddle's DataLoader ].
    """

    def __init__(self, collate_fn: Callable[[Any], Any]) -> None:
        if not callable(collate_fn):
            raise InputTypeError(
                f"collate_fn must be callable(samples) -> batch, got collate_fn={collate_fn!r:.80}"
            )
        self.collate_fn = collate_fn

    def __call__(self, samples: Any) -> Any:
        try:
            return self.collate_fn(samples)
        except BaseException as exc:  # raised in the main process, by batches() or the loader
            if not _carried(exc):
                raise
            return failure_batch(exc, self.collate_fn, samples)

    def batches(self, loader: Iterable[Any]) -> CheckedBatches:
        """``loader``'s batches, each collate error raised as the loop takes its batch."""
        return CheckedBatches(loader)

    def __repr__(self) -> str:
        return f"safe_collate({self.collate_fn!r:.160})"


class CheckedBatches:
    """A loader's batches, each one that carries a collate error raised (re-iterable, sized)."""

    def __init__(self, loader: Iterable[Any]) -> None:
        self.loader = loader

    def __iter__(self) -> Iterator[Any]:
        batches = iter(self.loader)
        for batch in batches:
            try:
                checked = raise_failure(batch)
            except BaseException:  # NOTE [ a loader after a collate error ]
                left_with_an_error(batches)
                raise
            yield checked

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]


def raise_failure(batch: Any) -> Any:
    """``batch``, unless it carries a collate error: then that error is raised here."""
    if isinstance(batch, Mapping):
        failure = batch.get(FAILED)
        if isinstance(failure, CollateFailure):
            failure.reraise()
    return batch


def safe_collate(collate_fn: Callable[[Any], Any]) -> SafeCollate:
    """Wrap ``collate_fn`` so that its error reaches the training loop by name.

    paddle's ``DataLoader`` hangs when its ``collate_fn`` raises with ``num_workers=0``, and raises
    a bare ``SystemError`` with workers (paddle 3.3). Give the loader
    ``collate_fn=safe_collate(fn)`` and take its batches through ``.batches(loader)``: an error in
    ``fn`` is returned in the batch and raised as the loop takes that batch, its own type and
    message, chained from a :class:`~dynbatch.paddle.safe_collate.CollateError` naming ``fn``.

    Args:
        collate_fn: the collator to wrap (one already wrapped is returned as it is).

    >>> import dynbatch
    >>> collate = safe_collate(dynbatch.PackCollator(4))
    >>> [b["input_ids"].tolist() for b in collate.batches([collate([[1, 2]])])]
    [[[1, 2]]]
    >>> next(iter(collate.batches([collate([{"input_ids": [1], "text": "a"}])])))
    Traceback (most recent call last):
    ...
    dynbatch.errors.InputError: samples[0] has the field 'text', which the packed rows ...
    """  # NOTE [ a collate error in paddle's DataLoader ]
    return collate_fn if isinstance(collate_fn, SafeCollate) else SafeCollate(collate_fn)
