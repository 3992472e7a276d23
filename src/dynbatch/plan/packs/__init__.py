"""Packing: several samples a row, each update the fixed batch's; numpy only.

One job a module, imports running one way down:

* :mod:`~dynbatch.plan.packs.rows`: each update's samples into rows (NOTE [ an update's rows ]);
* :mod:`~dynbatch.plan.packs.deal`: an update's rows dealt as micro-batches to the ranks;
* :mod:`~dynbatch.plan.packs.steps`: a device's step time, checked and cached;
* :mod:`~dynbatch.plan.packs.attention`: how a packed row's attention runs, and its price
  (NOTE [ attention layouts ]);
* :mod:`~dynbatch.plan.packs.layout`: how a micro-batch runs, packed or padded, and its shape;
* :mod:`~dynbatch.plan.packs.epochs`: the fixed batch's updates of an epoch, packed;
* :mod:`~dynbatch.plan.packs.ways`: each update run packed, split or whole, priced;
* :mod:`~dynbatch.plan.packs.timed`: the fastest way per update
  (NOTE [ choosing packing per update ]).
"""

from __future__ import annotations

from .attention import ATTENTIONS, Attention, DenseRows, resolve_attention
from .deal import deal_rows, pack_and_deal
from .epochs import PackPlan, fixed_updates, plan_packed_epoch, plan_packs
from .layout import Layouts, PackLayout, packed_shapes
from .rows import next_fit_rows, pack_updates
from .steps import step_time
from .timed import (
    PackChoice,
    choose_packing,
    packed_epoch_seconds,
    plan_packed,
    plan_timed_packs,
)
from .ways import CHOICES

__all__ = [
    "ATTENTIONS",
    "CHOICES",
    "Attention",
    "DenseRows",
    "Layouts",
    "PackChoice",
    "PackLayout",
    "PackPlan",
    "choose_packing",
    "deal_rows",
    "fixed_updates",
    "next_fit_rows",
    "pack_and_deal",
    "pack_updates",
    "packed_epoch_seconds",
    "packed_shapes",
    "plan_packed",
    "plan_packed_epoch",
    "plan_packs",
    "plan_timed_packs",
    "resolve_attention",
    "step_time",
]
