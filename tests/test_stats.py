"""plan_stats against a direct computation, and the lower bound."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from strategies import planner_args

from dynbatch import plan_batches, plan_stats
from dynbatch.stats import batch_table, lower_bound_batches


@given(planner_args())
def test_stats_match_a_direct_computation(args: dict) -> None:
    lens, pad = args["lengths"], args["pad_to_multiple_of"]
    plan = plan_batches(**args)
    s = plan_stats(lens, plan, cost=args["cost"], max_cost=args["max_cost"], pad_to_multiple_of=pad)
    padded = [len(b) * (-(-int(lens[b].max()) // pad) * pad) for b in plan]
    assert s.padding_efficiency == pytest.approx(lens.sum() / sum(padded))
    assert s.batches == len(plan) and s.samples == lens.size
    assert s.utilization is not None and 0 < s.utilization <= 1 + 1e-12
    assert s.cost_max <= args["max_cost"]
    if args["cost"] == "quadratic" and pad == 1:
        assert s.batches >= lower_bound_batches(lens, args["max_cost"]), "no plan beats the bound"


def test_batch_table_rejects_foreign_indices() -> None:
    with pytest.raises(ValueError, match="outside"):
        batch_table([1, 2], [[0, 5]])
    with pytest.raises(ValueError, match="non-empty"):
        batch_table([1, 2], [[]])


def test_constant_plan_has_zero_variation() -> None:
    s = plan_stats(np.full(64, 10), plan_batches(np.full(64, 10), 16 * 100), max_cost=1600)
    assert s.cost_cv == 0.0 and s.padding_efficiency == 1.0 and s.batch_size_max == 16
