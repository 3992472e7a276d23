"""dynbatch: dynamic (token-budget) batching for PaddlePaddle.

The planner, cost models, collators and statistics are pure numpy and import
without paddle; the samplers and the VisualDL hook import paddle (or visualdl)
on first use, and so do the memory functions (calibrate, preflight) when they
measure; each says how to install what is missing.
"""

from __future__ import annotations

import importlib
from typing import Any

from .errors import InputError, InputTypeError
from .memory import (
    CalibrationError,
    MemoryBudgetError,
    MemoryCost,
    PairMemoryCost,
    calibrate,
    memory_target,
    preflight,
)
from .paddle.collate import Dict, Pad, Seq2SeqCollator, Stack, Tuple
from .paddle.losses import loss_token_counts, token_loss
from .paddle.pack_collate import PackCollator
from .paddle.safe_collate import safe_collate
from .paddle.training import GradientAccumulator, scale_lr
from .plan.contract import Pass, PlanSource
from .plan.costs import (
    LinearCost,
    MixedCost,
    PairCost,
    QuadraticCost,
    WithinBudgets,
    resolve_cost,
)
from .plan.epochs import plan_epoch
from .plan.lengths import compute_lengths
from .plan.options import PlanOptions
from .plan.packs import PackChoice, PackPlan, choose_packing, plan_packs
from .plan.planning import find_oversize, plan_batches
from .plan.plans import Plan
from .plan.recipes import fill_device, like_fixed
from .plan.sharding import ShardedPlan, shard_plan
from .plan.stats import PlanStats, plan_stats
from .plan.steptime import StepTimeModel, StepTimeTable
from .stream.sources import read_jsonl

__version__ = "0.2.0"

# name -> module, imported on first access because they need paddle
_LAZY = {
    "DynamicBatchSampler": "paddle.sampler",
    "DistributedDynamicBatchSampler": "paddle.sampler",
    "DatasetForDBL": "paddle.compat",
    "DynamicBatchIterable": "paddle.stream_loader",
    "get_dynamic_batch_loader": "paddle.compat",
    "VisualDLHook": "paddle.logging",
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
    "PairCost",
    "PairMemoryCost",
    "Pass",
    "Plan",
    "PlanOptions",
    "PlanSource",
    "PlanStats",
    "QuadraticCost",
    "Seq2SeqCollator",
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
    "safe_collate",
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
