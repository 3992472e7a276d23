"""The public contract between a sampler and what follows its plan (accumulator, hook, trainer).

NOTE [ the plan is the source of truth ]
    The DataLoader prefetches, so "the last batch the sampler yielded" runs a
    few batches ahead of the one being trained, and a resumed epoch starts in
    the middle. Whatever needs to know *which* batch a training step holds
    (the accumulator's windows, ``no_sync``, the padding mask, the hook's
    statistics) asks the sampler for the plan of the epoch and for where the
    current pass over it started, and counts its own steps from there. Those
    questions are this :class:`PlanSource` protocol; nothing reads a sampler's
    private attributes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from .options import PlanOptions
from .plans import Plan
from .sharding import ShardedPlan

__all__ = ["Pass", "PlanSource", "StreamSource", "counted_tokens"]


@dataclass(frozen=True)
class Pass:
    """One iteration over a sampler: the epoch it plans, the batch it started at, a serial.

    ``serial`` grows by one each time an iteration begins, so a consumer can
    tell a new pass over the same epoch (no ``set_epoch`` between two loops)
    from the pass it was following. Before any iteration it is 0.

    Args:
        epoch: the epoch the pass plans.
        start: the batches of that epoch it skipped (a resumed pass starts after them).
        serial: the count of passes begun before this one.
    """

    epoch: int
    start: int
    serial: int


@runtime_checkable
class PlanSource(Protocol):
    """What the accumulator, the hook and the trainer integration need from a sampler."""

    lengths: NDArray[np.int64]
    options: PlanOptions
    num_replicas: int
    rank: int
    epoch: int

    def epoch_plan(self, epoch: int | None = None) -> ShardedPlan:
        """Every rank's batches of ``epoch``, step-major.

        Args:
            epoch: the epoch; default: the current one.
        """
        ...

    def batches(self, epoch: int | None = None) -> Plan:
        """This rank's batches of ``epoch``, in the order they are yielded.

        Args:
            epoch: the epoch; default: the current one.
        """
        ...

    def padding_mask(self, epoch: int | None = None) -> NDArray[np.bool_]:
        """True for this rank's batches that only repeat samples to even out step counts.

        Args:
            epoch: the epoch; default: the current one.
        """
        ...

    def current_pass(self) -> Pass:
        """The iteration under way (or the one the next iteration will be, before any)."""
        ...

    def len_for_epochs(self, epochs: Iterable[int]) -> int:
        """Batches this rank yields over ``epochs``, summed.

        Args:
            epochs: the epochs, e.g. ``range(E)``.
        """
        ...

    def set_epoch(self, epoch: int) -> None:
        """Plan ``epoch`` next.

        Args:
            epoch: the epoch, from 0.
        """
        ...

    def __len__(self) -> int:
        """Batches the next iteration yields."""
        ...


@runtime_checkable
class StreamSource(Protocol):
    """What the accumulator needs from a stream (:class:`~dynbatch.DynamicBatchIterable`):
    the batch the loop holds and what its step holds over all ranks (NOTE [ updates of a stream ]
    in :mod:`dynbatch.stream.state`), and first passes for the step counts."""

    options: PlanOptions
    num_replicas: int
    rank: int

    def taken(self) -> Any:
        """The batch the loop took last (a ``stream_state.Taken``), or None before one."""
        ...

    def current_pass(self) -> Pass:
        """The pass under way."""
        ...

    def count(self, epoch: int | None = None, num_workers: int | None = None) -> Any:
        """A first pass over ``epoch``: a ``stream_state.StreamCount``."""
        ...


def counted_tokens(source: PlanSource) -> NDArray[np.int64]:
    """What updates in ``"tokens"`` count per sample: the source's ``loss_tokens`` if it has
    them (NOTE [ counting loss tokens ] in :mod:`dynbatch.paddle.losses`), else its lengths."""
    loss_tokens: NDArray[np.int64] | None = getattr(source, "loss_tokens", None)
    return source.lengths if loss_tokens is None else loss_tokens


def describe(obj: Any) -> str:
    """``type name`` of an object, for error messages."""
    return f"{type(obj).__module__}.{type(obj).__qualname__}"
