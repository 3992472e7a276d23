"""Run the heaviest batches of a plan before training, and name any that do not fit."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._checks import InputError, check_int, check_lengths, check_positive_number
from ..plan.contract import PlanSource
from ..plan.costs import CostLike, resolve_cost
from ..plan.stats import batch_table
from .cost import MemoryCost
from .counters import Counter, check_counter
from .probe import Restorable, Step, check_restore, check_step, measure

__all__ = ["MemoryBudgetError", "PreflightCheck", "PreflightReport", "preflight"]


@dataclass(frozen=True)
class PreflightCheck:
    """One batch of the plan run by :func:`preflight`; ``measured_mib`` None: out of memory."""

    position: int
    n: int
    length: int
    predicted: float
    measured_mib: float | None
    seconds: float
    fits: bool


@dataclass(frozen=True)
class PreflightReport:
    """The batches :func:`preflight` ran, heaviest predicted first, against ``max_cost`` MiB."""

    checks: tuple[PreflightCheck, ...]
    max_cost: float
    source: str

    @property
    def ok(self) -> bool:
        """Every batch run peaked within ``max_cost``."""
        return all(c.fits for c in self.checks)

    @property
    def worst(self) -> PreflightCheck:
        """The batch with the highest measured peak (out of memory counts as highest)."""
        return max(
            self.checks,
            key=lambda c: math.inf if c.measured_mib is None else c.measured_mib,
        )

    def __str__(self) -> str:
        lines = [
            f"preflight against max_cost={self.max_cost:g} MiB ({self.source})",
            f"{'batch':>6} {'n':>6} {'L':>5} {'predicted':>10} {'measured MiB':>13} {'fits':>5}",
        ]
        for c in self.checks:
            measured = "out of mem" if c.measured_mib is None else f"{c.measured_mib:.2f}"
            lines.append(
                f"{c.position:>6} {c.n:>6} {c.length:>5} {c.predicted:>10.2f} {measured:>13} "
                f"{'yes' if c.fits else 'NO':>5}"
            )
        return "\n".join(lines)


class MemoryBudgetError(ValueError):
    """A batch of the plan peaked over ``max_cost`` in :func:`preflight`; ``report`` has all.

    Args:
        message: the batch, its shape and peak, and what to do.
        report: every batch run, measured against predicted.
    """

    def __init__(self, message: str, report: PreflightReport) -> None:
        super().__init__(message)
        self.report = report

    @classmethod
    def of(cls, report: PreflightReport) -> MemoryBudgetError:
        """The error naming the worst batch of a report that is not ``ok``.

        Args:
            report: the report of a preflight with a batch over ``max_cost``.
        """
        worst = report.worst
        over = sum(not c.fits for c in report.checks)
        peak = (
            "ran out of memory"
            if worst.measured_mib is None
            else f"peaked at {worst.measured_mib:.2f} MiB"
        )
        return cls(
            f"batch {worst.position} of the plan (n={worst.n}, L={worst.length}) {peak}, "
            f"over max_cost={report.max_cost:g} MiB (predicted {worst.predicted:.2f}); {over} of "
            f"the {len(report.checks)} batches run are over. Lower max_cost, or recalibrate the "
            f"cost:\n{report}",
            report,
        )


def preflight(
    step: Step,
    batches: Any,
    lengths: Any = None,
    *,
    cost: CostLike | None = None,
    max_cost: float | None = None,
    k: int = 3,
    pad_to_multiple_of: int = 1,
    restore: Restorable | Sequence[Restorable] | None = None,
    counter: Counter | None = None,
) -> PreflightReport:
    """Run the heaviest batches of a plan before training; fail if any peaks over ``max_cost``.

    Runs a warm-up step, then the ``k`` batches with the highest predicted
    ``cost`` and also the batch with the most samples and the one with the
    longest padded length (where a cost model extrapolates, and so errs, most),
    each as ``step(n, L)``, measuring the allocator's peak as :func:`~dynbatch.calibrate`
    does.

    Args:
        step: the same ``step(n, L)`` as for :func:`~dynbatch.calibrate`.
        batches: the plan: a sequence of index arrays into ``lengths``; or a
            dynbatch sampler, whose current epoch's plan (every rank's batches),
            lengths, cost, ``max_cost`` and padding are used unless given.
        lengths: per-sample lengths.
        cost: ranks the batches; a :class:`MemoryCost` makes ``predicted`` MiB.
        max_cost: the memory every measured peak must stay within, in MiB.
        k: how many of the highest-predicted batches to run.
        pad_to_multiple_of: ``L`` is a batch's longest length rounded up to this.
        restore: a model and/or optimizer whose state is put back afterwards, as for
            :func:`~dynbatch.calibrate`.
        counter: the allocator's counters to read (a
            :class:`~dynbatch.memory.Counter`); default: paddle's current device's.

    Returns:
        Measured against predicted peak per batch run, heaviest predicted first.

    Raises:
        MemoryBudgetError: a batch peaked over ``max_cost`` or ran out of memory;
            the message names its position in the plan, ``n``, ``L`` and peak.

    >>> import paddle
    >>> def step(n, L):  # 512 bytes live per token
    ...     x = paddle.ones([n, L, 64])
    ...     y = x * 2
    >>> per_token = MemoryCost(c=0.0, a=512 / 2**20, b=0.0)
    >>> report = preflight(step, [[0, 1], [2]], [100, 300, 900], cost=per_token, max_cost=64)
    >>> report.ok, [(c.position, c.n, c.length) for c in report.checks]
    (True, [(1, 1, 900), (0, 2, 300)])
    """  # NOTE [ what calibrate measures ], NOTE [ restoring state ] in dynbatch.memory.probe
    step = check_step(step)
    batches, lengths, cost, max_cost, pad_to_multiple_of = _from_sampler(
        batches, lengths, cost, max_cost, pad_to_multiple_of
    )
    _refuse_pairs(lengths)
    lens = check_lengths(lengths)
    fn = resolve_cost(cost)  # None was refused above
    max_cost = check_positive_number("max_cost", max_cost)
    k = check_int("k", k, minimum=1)
    pad = check_int("pad_to_multiple_of", pad_to_multiple_of, minimum=1)
    objects = check_restore(restore)
    counter = check_counter(counter)
    table = batch_table(lens, batches, cost=fn, pad_to_multiple_of=pad)
    sizes, padded, predicted = table["batch_size"], table["max_len"], table["cost"]
    chosen = _heaviest(predicted, sizes, padded, k)
    shapes = [(int(sizes[i]), int(padded[i])) for i in chosen]
    runs = measure(step, shapes, counter=counter, restore=objects, warmup=(1, int(padded.min())))
    checks = tuple(
        PreflightCheck(
            position=i,
            n=n,
            length=length,
            predicted=float(predicted[i]),
            measured_mib=run.peak_mib,
            seconds=run.seconds,
            fits=run.peak_mib is not None and run.peak_mib <= max_cost,
        )
        for i, (n, length), run in zip(chosen, shapes, runs, strict=True)
    )
    report = PreflightReport(checks=checks, max_cost=max_cost, source=counter.name)
    if not report.ok:
        raise MemoryBudgetError.of(report)
    return report


def _refuse_pairs(lengths: Any) -> None:
    """Refuse (source, target) lengths by name (NOTE [ lengths of pairs ] in
    :mod:`dynbatch.plan.lengths`): the step runs one padded length."""
    try:
        shape = np.shape(lengths)
    except ValueError:  # ragged: the check of lengths names it
        return
    if len(shape) == 2 and shape[1] == 2:
        raise InputError(
            f"preflight: lengths are (source, target) pairs, got an array of shape {shape}: "
            "preflight runs step(n, L), a batch of one length; pairs are not supported there "
            "yet"
        )


def _from_sampler(
    batches: Any, lengths: Any, cost: Any, max_cost: Any, pad_to_multiple_of: Any
) -> tuple[Any, Any, Any, Any, Any]:
    """The plan, lengths, cost, budget and padding: given, or a sampler's where not given."""
    if isinstance(batches, PlanSource):  # a sampler: its epoch's plan, lengths and options
        options = batches.options
        if max_cost is None and not isinstance(options.cost, MemoryCost):
            raise InputError(
                f"preflight compares measured MiB with max_cost, but the sampler's cost "
                f"({options.cost!r}) is not a MemoryCost, so its max_cost={options.max_cost:g} "
                "is not MiB: pass max_cost=<MiB the device has>"
            )
        if pad_to_multiple_of not in (1, options.pad_to_multiple_of):
            raise InputError(
                f"pad_to_multiple_of={pad_to_multiple_of} differs from the sampler's "
                f"pad_to_multiple_of={options.pad_to_multiple_of}: leave it out with a sampler"
            )
        lengths = batches.lengths if lengths is None else lengths
        cost = options.cost if cost is None else cost
        max_cost = options.max_cost if max_cost is None else max_cost
        pad_to_multiple_of = options.pad_to_multiple_of
        batches = batches.epoch_plan().plan
    given = (("lengths", lengths), ("cost", cost), ("max_cost", max_cost))
    missing = [name for name, value in given if value is None]
    if missing:
        raise InputError(
            f"preflight needs {', '.join(missing)} with a plan of batches (or pass a dynbatch "
            "sampler, which has them)"
        )
    return batches, lengths, cost, max_cost, pad_to_multiple_of


def _heaviest(
    predicted: NDArray[Any], sizes: NDArray[Any], padded: NDArray[Any], k: int
) -> list[int]:
    """The ``k`` highest predicted batches (ties: the earlier), then the one with the most
    samples and the longest, if not among them.

    >>> _heaviest(np.array([5.0, 9.0, 9.0, 1.0]), np.array([1, 1, 1, 8]), np.array([4, 4, 4, 4]), 2)
    [1, 2, 3]
    """
    chosen = [int(i) for i in np.lexsort((np.arange(predicted.size), -predicted))[:k]]
    for key in (sizes, padded):
        extreme = int(np.lexsort((np.arange(predicted.size), -predicted, -key))[0])
        if extreme not in chosen:
            chosen.append(extreme)
    return chosen
