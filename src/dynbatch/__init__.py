"""dynbatch: dynamic (token-budget) batching for PaddlePaddle.

The planner, cost models, collators and statistics are pure numpy and import
without paddle; the samplers and the VisualDL hook import paddle (or visualdl)
on first use, and so do the memory functions (calibrate, preflight) when they
measure; each says how to install what is missing.
"""

from __future__ import annotations

import importlib
from typing import Any

from .collate import Dict, Pad, Stack, Tuple
from .contract import Pass, PlanSource
from .cost import LinearCost, MixedCost, QuadraticCost, WithinBudgets, resolve_cost
from .epochs import plan_epoch
from .errors import InputError, InputTypeError
from .lengths import compute_lengths
from .losses import loss_token_counts, token_loss
from .memory import (
    CalibrationError,
    MemoryBudgetError,
    MemoryCost,
    calibrate,
    memory_target,
    preflight,
)
from .options import PlanOptions
from .pack_collate import PackCollator
from .pack_time import PackChoice, choose_packing
from .packing import PackPlan, plan_packs
from .plan import Plan
from .planning import find_oversize, plan_batches
from .recipes import fill_device, like_fixed
from .sharding import ShardedPlan, shard_plan
from .stats import PlanStats, plan_stats
from .stream_sources import read_jsonl
from .timing import StepTimeModel, StepTimeTable
from .training import GradientAccumulator, scale_lr

__version__ = "0.2.0"

# name -> module, imported on first access because they need paddle
_LAZY = {
    "DynamicBatchSampler": "sampler",
    "DistributedDynamicBatchSampler": "sampler",
    "DatasetForDBL": "compat",
    "DynamicBatchIterable": "stream_loader",
    "get_dynamic_batch_loader": "compat",
    "VisualDLHook": "logging",
}

__all__ = [
    "CalibrationError",
    "DatasetForDBL",
    "Dict",
    "DistributedDynamicBatchSampler",
    "DynamicBatchIterable",
    "DynamicBatchSampler",
    "GradientAccumulator",
    "InputError",
    "InputTypeError",
    "LinearCost",
    "MemoryBudgetError",
    "MemoryCost",
    "MixedCost",
    "PackChoice",
    "PackCollator",
    "PackPlan",
    "Pad",
    "Pass",
    "Plan",
    "PlanOptions",
    "PlanSource",
    "PlanStats",
    "QuadraticCost",
    "ShardedPlan",
    "Stack",
    "StepTimeModel",
    "StepTimeTable",
    "Tuple",
    "VisualDLHook",
    "WithinBudgets",
    "__version__",
    "calibrate",
    "choose_packing",
    "compute_lengths",
    "fill_device",
    "find_oversize",
    "get_dynamic_batch_loader",
    "like_fixed",
    "loss_token_counts",
    "memory_target",
    "plan_batches",
    "plan_epoch",
    "plan_packs",
    "plan_stats",
    "preflight",
    "read_jsonl",
    "resolve_cost",
    "scale_lr",
    "shard_plan",
    "token_loss",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dynbatch' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
