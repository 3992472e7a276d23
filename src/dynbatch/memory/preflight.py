"""Run the heaviest batches of a plan before training, and name any that do not fit."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._checks import InputError, check_int, check_positive_number
from ..plan.contract import PlanSource
from ..plan.costs import CostLike, one_length, pair_form, resolve_cost
from ..plan.lengths import check_plan_lengths, is_pairs
from ..plan.stats import batch_table
from .cost import MemoryCost, PairMemoryCost
from .counters import Counter, check_counter
from .probe import Restorable, Step, check_restore, check_step, measure

__all__ = ["MemoryBudgetError", "PreflightCheck", "PreflightReport", "preflight"]


@dataclass(frozen=True)
class PreflightCheck:
    """One batch of the plan run by :func:`preflight`; ``measured_mib`` None: out of memory.

    For (source, target) pairs ``length`` is the batch's padded source and ``target_length``
    its padded target (None: one length).
    """

    position: int
    n: int
    length: int
    predicted: float
    measured_mib: float | None
    seconds: float
    fits: bool
    target_length: int | None = None

    @property
    def shape(self) -> str:
        """``n=.., L=..``, or for pairs ``n=.., Ls=.., Lt=..``."""
        if self.target_length is None:
            return f"n={self.n}, L={self.length}"
        return f"n={self.n}, Ls={self.length}, Lt={self.target_length}"


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
        pairs = any(c.target_length is not None for c in self.checks)
        lengths = f"{'Ls':>5} {'Lt':>5}" if pairs else f"{'L':>5}"
        lines = [
            f"preflight against max_cost={self.max_cost:g} MiB ({self.source})",
            f"{'batch':>6} {'n':>6} {lengths} {'predicted':>10} {'measured MiB':>13} {'fits':>5}",
        ]
        for c in self.checks:
            measured = "out of mem" if c.measured_mib is None else f"{c.measured_mib:.2f}"
            shape = f"{c.length:>5} {c.target_length:>5}" if pairs else f"{c.length:>5}"
            lines.append(
                f"{c.position:>6} {c.n:>6} {shape} {c.predicted:>10.2f} {measured:>13} "
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
            f"batch {worst.position} of the plan ({worst.shape}) {peak}, "
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

    For (source, target) pairs (``lengths`` an ``[N, 2]`` array) each batch runs as ``step(n,
    Ls, Lt)``, padded to its longest source and its longest target, and the batches run are
    the ``k`` heaviest by the cost of pairs (e.g. a :class:`~dynbatch.PairMemoryCost`), the
    one with the most pairs, the one with the longest source and the one with the longest
    target. A cost that cannot take two lengths, or a step of one length, is refused by name.

    Args:
        step: the same ``step(n, L)`` as for :func:`~dynbatch.calibrate` (for pairs
            ``step(n, Ls, Lt)``).
        batches: the plan: a sequence of index arrays into ``lengths``; or a
            dynbatch sampler, whose current epoch's plan (every rank's batches),
            lengths, cost, ``max_cost`` and padding are used unless given.
        lengths: per-sample lengths, or ``[N, 2]`` (source, target) lengths.
        cost: ranks the batches; a :class:`MemoryCost` makes ``predicted`` MiB.
        max_cost: the memory every measured peak must stay within, in MiB.
        k: how many of the highest-predicted batches to run.
        pad_to_multiple_of: ``L`` is a batch's longest length rounded up to this (for pairs
            each side's).
        restore: a model and/or optimizer whose state is put back afterwards, as for
            :func:`~dynbatch.calibrate`.
        counter: the allocator's counters to read (a
            :class:`~dynbatch.memory.Counter`); default: paddle's current device's.

    Returns:
        Measured against predicted peak per batch run, heaviest predicted first.

    Raises:
        MemoryBudgetError: a batch peaked over ``max_cost`` or ran out of memory;
            the message names its position in the plan, ``n``, ``L`` (``Ls``, ``Lt``) and peak.

    >>> import paddle
    >>> def step(n, L):  # 512 bytes live per token
    ...     x = paddle.ones([n, L, 64])
    ...     y = x * 2
    >>> per_token = MemoryCost(c=0.0, a=512 / 2**20, b=0.0)
    >>> report = preflight(step, [[0, 1], [2]], [100, 300, 900], cost=per_token, max_cost=64)
    >>> report.ok, [(c.position, c.n, c.length) for c in report.checks]
    (True, [(1, 1, 900), (0, 2, 300)])
    """  # NOTE [ what calibrate measures ], NOTE [ restoring state ] in dynbatch.memory.probe
    batches, lengths, cost, max_cost, pad_to_multiple_of = _from_sampler(
        batches, lengths, cost, max_cost, pad_to_multiple_of
    )
    lens = check_plan_lengths(lengths)
    pairs = is_pairs(lens)
    hint = f", lengths of shape {lens.shape}: give an [N, 2] array for pairs"
    step = check_step(step, pairs=pairs, hint=hint if not pairs else f", of shape {lens.shape}")
    fn = resolve_cost(cost)  # None was refused above
    fn = pair_form(fn) if pairs else one_length(fn)
    max_cost = check_positive_number("max_cost", max_cost)
    k = check_int("k", k, minimum=1)
    pad = check_int("pad_to_multiple_of", pad_to_multiple_of, minimum=1)
    objects = check_restore(restore)
    counter = check_counter(counter)
    table = batch_table(lens, batches, cost=fn, pad_to_multiple_of=pad)
    sizes, predicted = table["batch_size"], table["cost"]
    sides = [table["source_max_len"], table["target_max_len"]] if pairs else [table["max_len"]]
    chosen = _heaviest(predicted, [sizes, *sides], k)
    shapes = [(int(sizes[i]), *(int(side[i]) for side in sides)) for i in chosen]
    warmup = (1, *(int(side.min()) for side in sides))
    runs = measure(step, shapes, counter=counter, restore=objects, warmup=warmup)
    checks = tuple(
        PreflightCheck(
            position=i,
            n=shape[0],
            length=shape[1],
            predicted=float(predicted[i]),
            measured_mib=run.peak_mib,
            seconds=run.seconds,
            fits=run.peak_mib is not None and run.peak_mib <= max_cost,
            target_length=shape[2] if pairs else None,
        )
        for i, shape, run in zip(chosen, shapes, runs, strict=True)
    )
    report = PreflightReport(checks=checks, max_cost=max_cost, source=counter.name)
    if not report.ok:
        raise MemoryBudgetError.of(report)
    return report


def _from_sampler(
    batches: Any, lengths: Any, cost: Any, max_cost: Any, pad_to_multiple_of: Any
) -> tuple[Any, Any, Any, Any, Any]:
    """The plan, lengths, cost, budget and padding: given, or a sampler's where not given."""
    if isinstance(batches, PlanSource):  # a sampler: its epoch's plan, lengths and options
        options = batches.options
        if max_cost is None and not isinstance(options.cost, (MemoryCost, PairMemoryCost)):
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


def _heaviest(predicted: NDArray[Any], extremes: Sequence[NDArray[Any]], k: int) -> list[int]:
    """The ``k`` highest predicted batches (ties: the earlier), then the one highest on each of
    ``extremes`` (the most samples; the longest, or the longest source and the longest target),
    if not among them (ties: the highest predicted, then the earlier).

    >>> sizes, longest = np.array([1, 1, 1, 8]), np.array([4, 4, 4, 4])
    >>> _heaviest(np.array([5.0, 9.0, 9.0, 1.0]), [sizes, longest], 2)
    [1, 2, 3]
    """
    chosen = [int(i) for i in np.lexsort((np.arange(predicted.size), -predicted))[:k]]
    for key in extremes:
        extreme = int(np.lexsort((np.arange(predicted.size), -predicted, -key))[0])
        if extreme not in chosen:
            chosen.append(extreme)
    return chosen
