"""A plan: batches of sample indices held as two arrays, not a list of lists.

What :func:`dynbatch.plan_batches` returns and every later step (sharding,
updates, the samplers, the statistics) reads: numpy only.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np
from numpy.typing import NDArray

__all__ = ["Indices", "Plan", "concat", "pick_spans"]

Indices = NDArray[np.int64]


class Plan(Sequence[Indices]):
    """Batches held as one index array cut at ``offsets``: batch ``i`` is
    ``indices[offsets[i]:offsets[i + 1]]``, made only when asked for.

    A sequence of ``int64`` index arrays, so ``len(plan)``, ``plan[i]`` and
    ``for batch in plan`` work as on a list; millions of batches cost two
    arrays, not millions of objects. Reordering batches (:meth:`take`) only
    records the new order; the reordered index array is gathered the first
    time ``indices`` is read.

    >>> plan = Plan.from_batches([[3, 1], [0], [2, 4]])
    >>> len(plan), plan[2].tolist(), plan.sizes.tolist()
    (3, [2, 4], [2, 1, 2])
    >>> [b.tolist() for b in plan.take([2, 0])]
    [[2, 4], [3, 1]]

    Args:
        indices: every batch's sample indices, batch after batch.
        offsets: where each batch starts in ``indices``, and the end (``len(plan) + 1``
            entries, from 0).
        order: the batches' order, as positions in ``offsets`` (None: as they are); what
            :meth:`take` records.
    """

    __slots__ = ("_base_indices", "_base_offsets", "_indices", "_offsets", "_order")

    def __init__(
        self, indices: NDArray[Any], offsets: NDArray[Any], order: NDArray[Any] | None = None
    ) -> None:
        self._base_indices: Indices = np.asarray(indices, dtype=np.int64)
        self._base_offsets: Indices = np.asarray(offsets, dtype=np.int64)
        self._order: Indices | None = None if order is None else np.asarray(order, dtype=np.int64)
        self._indices: Indices | None = self._base_indices if order is None else None
        self._offsets: Indices | None = self._base_offsets if order is None else None

    @classmethod
    def from_batches(cls, batches: Sequence[Any]) -> Plan:
        """A plan from a list of index lists or arrays.

        Args:
            batches: each batch's sample indices.
        """
        arrays = [np.asarray(b, dtype=np.int64).reshape(-1) for b in batches]
        sizes = np.fromiter((a.size for a in arrays), dtype=np.int64, count=len(arrays))
        indices = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
        return cls(indices, np.concatenate([[0], np.cumsum(sizes)]))

    @property
    def sizes(self) -> Indices:
        """Samples per batch."""
        sizes = np.diff(self._base_offsets)
        return sizes if self._order is None else sizes[self._order]

    @property
    def offsets(self) -> Indices:
        """Where each batch starts in ``indices``, and the end: ``len(plan) + 1`` entries."""
        if self._offsets is None:
            self._offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        return self._offsets

    @property
    def indices(self) -> Indices:
        """Every batch's sample indices, batch after batch."""
        if self._indices is None:
            order = self._order if self._order is not None else np.arange(len(self))
            offsets = self.offsets
            shift = np.repeat(self._base_offsets[:-1][order] - offsets[:-1], np.diff(offsets))
            self._indices = self._base_indices[np.arange(int(offsets[-1])) + shift]
        return self._indices

    def __len__(self) -> int:
        return int(self._base_offsets.size - 1 if self._order is None else self._order.size)

    def _base_position(self, i: int) -> int:
        return i if self._order is None else int(self._order[i])

    @overload
    def __getitem__(self, i: int) -> Indices: ...
    @overload
    def __getitem__(self, i: slice) -> Plan: ...
    def __getitem__(self, i: int | slice) -> Indices | Plan:
        if isinstance(i, slice):
            return self.take(np.arange(len(self))[i])
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"batch {i} of a plan of {n} batches")
        j = self._base_position(i % n)
        return self._base_indices[self._base_offsets[j] : self._base_offsets[j + 1]]

    def __iter__(self) -> Iterator[Indices]:
        idx, off = self._base_indices, self._base_offsets.tolist()
        if self._order is None:
            for a, b in itertools.pairwise(off):
                yield idx[a:b]
        else:
            for j in self._order.tolist():
                yield idx[off[j] : off[j + 1]]

    def take(self, order: Any) -> Plan:
        """The batches at positions ``order``, in that order (recorded, gathered when needed).

        Args:
            order: positions of batches of this plan (a batch may be taken twice, or left out).
        """
        order = np.asarray(order, dtype=np.int64).reshape(-1)
        base = order if self._order is None else self._order[order]
        return Plan(self._base_indices, self._base_offsets, base)

    def lists(self) -> tuple[list[int], list[int]]:
        """``(indices, offsets)`` as Python lists, for yielding batches as lists quickly."""
        return self.indices.tolist(), self.offsets.tolist()

    def digest(self) -> str:
        """A hash of the batches and their order."""
        h = hashlib.blake2b(digest_size=16)
        h.update(self.offsets.tobytes())
        h.update(self.indices.tobytes())
        return h.hexdigest()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Plan):
            return NotImplemented
        return np.array_equal(self.offsets, other.offsets) and np.array_equal(
            self.indices, other.indices
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Plan({len(self)} batches, {int(self.sizes.sum())} samples)"


def concat(plans: list[Plan]) -> Plan:
    """The batches of ``plans``, plan after plan."""
    if not plans:
        return Plan(np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64))
    indices = np.concatenate([p.indices for p in plans])
    shifts = np.cumsum([0] + [int(p.offsets[-1]) for p in plans[:-1]])
    offsets = np.concatenate(
        [[0]] + [p.offsets[1:] + s for p, s in zip(plans, shifts, strict=True)]
    )
    return Plan(indices, offsets.astype(np.int64))


def pick_spans(
    plans: list[Plan], bounds: list[Indices], choice: Indices
) -> tuple[Plan, Indices, Indices]:
    """Span ``u`` of plan ``choice[u]``, span after span: span ``u`` of plan ``k`` is its
    batches ``bounds[k][u]:bounds[k][u + 1]``. Returns the batches, their positions in the
    plans one after another (to gather what goes with each batch), and where each span ends.

    >>> a, b = Plan.from_batches([[0], [1], [2]]), Plan.from_batches([[0, 1], [2]])
    >>> got, ids, ends = pick_spans([a, b], [np.array([0, 2, 3]), np.array([0, 1, 2])],
    ...                             np.array([1, 0]))
    >>> [g.tolist() for g in got], ids.tolist(), ends.tolist()
    ([[0, 1], [2]], [3, 2], [1, 2])
    """
    first = np.cumsum([0] + [len(p) for p in plans[:-1]])
    lo = np.stack([np.asarray(b[:-1]) + f for b, f in zip(bounds, first, strict=True)], axis=1)
    hi = np.stack([np.asarray(b[1:]) + f for b, f in zip(bounds, first, strict=True)], axis=1)
    spans = np.arange(choice.size)
    start, count = lo[spans, choice], hi[spans, choice] - lo[spans, choice]
    ends = np.cumsum(count).astype(np.int64)
    ids = np.arange(int(ends[-1]) if ends.size else 0) + np.repeat(start - (ends - count), count)
    picked = concat(plans).take(ids)
    return Plan(picked.indices, picked.offsets), ids.astype(np.int64), ends
