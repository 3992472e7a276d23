"""The original "dynamic BatchSize" study's API, so its notebook runs by changing an import.

``DatasetForDBL(data, controller, uprank, ref_index, shuffle)`` is a dataset
whose items are whole batches (lists of samples), and
``get_dynamic_batch_loader`` wraps it in ``paddle.io.DataLoader(batch_size=None)``.

NOTE [ the study's formula ]
    The study states the rule ``batch_size * max_len**2 <= controller``, but its
    loop recomputed the batch size as ``controller / max_len`` on every sample,
    overwriting the quadratic one, so it applied ``batch_size * max_len <=
    controller``; and it reset its counter to 0 instead of 1 when opening a new
    batch, so batches could hold one sample more than allowed. This module
    implements the *stated* rule through :func:`~dynbatch.plan_batches`, and
    like the study gives a sample over budget a batch of its own.
    :func:`as_published` reproduces what the study's code actually produced,
    for comparison (the benchmarks and tests use it).

Orders: ``uprank=None`` keeps the data order (``shuffle=True``: shuffled
samples), ``uprank=True``/``False`` sorts by length ascending/descending;
``shuffle=True`` also shuffles the order of the batches, as in the study.

The study planned its batches once, so with ``shuffle=True`` every epoch saw
the same batches. Here ``DatasetForDBL.set_epoch(e)`` plans epoch ``e``
afresh, and the loader from ``get_dynamic_batch_loader`` calls it at the start
of every pass; ``fresh_each_pass=False`` keeps the study's behaviour.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._checks import (
    InputError,
    InputTypeError,
    check_bool,
    check_dataset,
    check_int,
    check_positive_number,
)
from .._optional import require
from ..plan.lengths import field_length
from ..plan.planning import plan_batches
from ..plan.plans import Plan

paddle = require("paddle", "dynbatch.DatasetForDBL")
from paddle.io import DataLoader, Dataset  # noqa: E402

__all__ = ["DatasetForDBL", "as_published", "get_dynamic_batch_loader"]


def as_published(lengths: Sequence[int], controller: float) -> list[NDArray[Any]]:
    """The batches the study's code produced in the given order (linear rule, one over).

    Empty batches it could emit (a first sample over budget) are left out.

    With ``controller=20`` and lengths 10 the stated rule allows no batch at all
    (10**2 > 20); the code applied 2 per batch, and 3 from the second one on:

    >>> [b.tolist() for b in as_published([10] * 6, 20)]
    [[0, 1], [2, 3, 4], [5]]
    """
    bounds = [0]
    count = longest = 0
    for i, n in enumerate(lengths):
        longest = max(longest, int(n))
        count += 1
        if count > int(controller / longest):
            bounds.append(i)
            count, longest = 0, int(n)
    bounds.append(len(lengths))
    return [np.arange(a, b) for a, b in itertools.pairwise(bounds) if b > a]


class DatasetForDBL(Dataset):  # type: ignore[type-arg]
    """A dataset of dynamic batches of ``data``: item ``i`` is the list of samples of batch ``i``.

    Args:
        data: indexable samples; ``sample[ref_index]`` is the sequence that sets the length.
        controller: the budget, ``batch_size * max_len**2 <= controller``.
        uprank: None (keep order), True (ascending length), False (descending).
        ref_index: the field whose size is the length.
        shuffle: shuffle samples (``uprank=None``) and the order of batches.
        seed: seed of the shuffles (keyword only; the study used the global RNG).
    """

    def __init__(
        self,
        data: Any,
        controller: float,
        uprank: bool | None = None,
        ref_index: Any = 0,
        shuffle: bool = False,
        *,
        seed: int = 0,
    ) -> None:
        super().__init__()
        # not "uprank in (None, True, False)": 1 and 0 compare equal to True and False
        if uprank is not None and not isinstance(uprank, (bool, np.bool_)):
            raise InputTypeError(f"uprank must be None, True or False, got uprank={uprank!r}")
        check_positive_number("controller", controller)
        self.shuffle = check_bool("shuffle", shuffle)
        self.seed = check_int("seed", seed)
        if len(check_dataset("data", data)) == 0:
            raise InputError("data is empty: there is nothing to batch")
        self._data = data
        self.lengths = [field_length(data[i], ref_index) for i in range(len(data))]
        self.controller, self.uprank = controller, None if uprank is None else bool(uprank)
        self.epoch = 0
        self.batches = self._plan(0)

    def _plan(self, epoch: int) -> Plan:
        order = {
            None: "shuffle" if self.shuffle else "none",
            True: "ascending",
            False: "descending",
        }
        plan = plan_batches(
            self.lengths,
            self.controller,
            cost="quadratic",
            order=order[self.uprank],
            seed=self.seed,
            epoch=epoch,
            oversize="alone",
        )
        if self.shuffle and self.uprank is not None:
            rng = np.random.default_rng([self.seed, 1] if epoch == 0 else [self.seed, 1, epoch])
            plan = plan.take(rng.permutation(len(plan)))
        return plan

    def set_epoch(self, epoch: int) -> None:
        """Plan epoch ``epoch``: with ``shuffle=True``, new batches in a new order.

        Args:
            epoch: the epoch, from 0.
        """
        epoch = check_int("epoch", epoch)
        if epoch != self.epoch:
            self.epoch = epoch
            self.batches = self._plan(epoch)

    def __getitem__(self, idx: int) -> list[Any]:
        return [self._data[int(i)] for i in self.batches[idx]]

    def __len__(self) -> int:
        return len(self.batches)


class _FreshEachPass(DataLoader):
    """A DataLoader over :class:`DatasetForDBL` that plans the next epoch at every pass."""

    def __init__(self, dataset: DatasetForDBL, **kwargs: Any) -> None:
        super().__init__(dataset, **kwargs)
        self._passes = 0

    def __iter__(self) -> Any:
        dataset = self.dataset
        if isinstance(dataset, DatasetForDBL):
            dataset.set_epoch(self._passes)
        self._passes += 1
        return super().__iter__()


def get_dynamic_batch_loader(
    data: Any,
    controller: float,
    collate_fn: Callable[[list[Any]], Any],
    uprank: bool | None = None,
    ref_index: Any = 0,
    shuffle: bool = False,
    places: Any = None,
    *,
    fresh_each_pass: bool = True,
) -> Any:
    """``paddle.io.DataLoader`` over :class:`DatasetForDBL`, each item collated whole.

    With ``shuffle=True`` each pass over the loader gets new batches
    (``fresh_each_pass=False``: the same batches every pass, as in the study).

    Args:
        data: indexable samples; ``sample[ref_index]`` is the sequence that sets the length.
        controller: the budget, ``batch_size * max_len**2 <= controller``.
        collate_fn: turns a batch (a list of samples) into arrays.
        uprank: None (keep order), True (ascending length), False (descending).
        ref_index: the field whose size is the length.
        shuffle: shuffle samples (``uprank=None``) and the order of batches.
        places: paddle's ``places`` of the DataLoader.
        fresh_each_pass: plan the next epoch at every pass over the loader.
    """
    if not callable(collate_fn):
        raise InputTypeError(
            f"collate_fn must be callable(samples) -> batch, got collate_fn={collate_fn!r}"
        )
    dataset = DatasetForDBL(data, controller, uprank, ref_index, shuffle)
    loader = _FreshEachPass if check_bool("fresh_each_pass", fresh_each_pass) else DataLoader
    return loader(dataset, batch_size=None, collate_fn=collate_fn, places=places)  # type: ignore[arg-type]
