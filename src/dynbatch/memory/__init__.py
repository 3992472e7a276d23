"""Memory that stays flat, measured: a cost in MiB calibrated on the model, and a preflight.

A :class:`MemoryCost` predicts the peak memory (MiB) of one training step on a
batch of ``n`` samples padded to length ``L``::

    peak(n, L) = max(floor, c + a*n*L + b*n*L**2)

It is a cost like any other (``cost=`` of :func:`~dynbatch.plan_batches`, the
samplers and ``dynbatch stats --cost-file``), so ``max_cost`` becomes a memory
budget in MiB. :func:`calibrate` fits it from real steps of *your* model,
measured by the allocator's own counters, and reports its error on shapes it
did not fit; :func:`preflight` runs the heaviest batches of a plan before
training and names any that do not fit.

One job per module, the pure part apart from the part that measures:

- :mod:`.counters`: the allocator's counters behind one interface (:class:`Counter`):
  paddle's CPU, CUDA, XPU and custom-device allocators.
- :mod:`.probe`: running steps around the counters: warm-up, snapshot and
  restore, out of memory (NOTE [ what calibrate measures ], NOTE [ restoring state ]).
- :mod:`.fit`: the probe grid and the fit (NOTE [ the floor ], NOTE [ the probe grid ]);
  numpy only. :mod:`.pair_fit`: the same for a step of (source, target) pairs, a
  :class:`PairMemoryCost` (NOTE [ the fit of pairs ]).
- :mod:`.cost`: :class:`MemoryCost`, its report and step-time model, JSON; numpy only.
- :mod:`.calibrate`, :mod:`.preflight`: the two entry points.

Only the counters import paddle, on first call: ``MemoryCost``, the fit and the
planner work without it, and so do ``calibrate``/``preflight`` given a ``counter``.
"""

from __future__ import annotations

from .calibrate import calibrate
from .cost import CalibrationError, CalibrationReport, MemoryCost, PairMemoryCost, load_cost
from .counters import (
    AllocatorStatsUnavailable,
    Counter,
    current_memory_mib,
    memory_source,
    memory_target,
    peak_memory_mib,
    reset_peak_memory,
)
from .preflight import MemoryBudgetError, PreflightReport, preflight

__all__ = [
    "AllocatorStatsUnavailable",
    "CalibrationError",
    "CalibrationReport",
    "Counter",
    "MemoryBudgetError",
    "MemoryCost",
    "PairMemoryCost",
    "PreflightReport",
    "calibrate",
    "current_memory_mib",
    "load_cost",
    "memory_source",
    "memory_target",
    "peak_memory_mib",
    "preflight",
    "reset_peak_memory",
]
