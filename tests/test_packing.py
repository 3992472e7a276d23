"""The packing plan: rows, updates and micro-batches, and the promises each keeps."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from strategies import pack_args

import dynbatch
from dynbatch.plan.packing import PackPlan, next_fit_rows, plan_packs


def lognormal(n: int, cap: int, seed: int = 0, mean: float = 4.6, sigma: float = 0.8) -> Any:
    rng = np.random.default_rng(seed)
    return np.minimum(np.ceil(rng.lognormal(mean, sigma, n)), cap).astype(np.int64)


def check_promises(plan: PackPlan, args: dict[str, Any]) -> None:
    lens = np.asarray(args["lengths"])
    pack_len, batch_size = args["pack_len"], args["batch_size"]
    over = lens > pack_len
    flat = plan.micro_batches.indices
    # exactly once: every sample kept once, the skipped ones never
    expected_skip = np.flatnonzero(over) if args["oversize"] == "skip" else np.zeros(0)
    assert plan.skipped.tolist() == expected_skip.tolist(), "skipped: the oversize ones"
    kept = np.setdiff1d(np.arange(lens.size), expected_skip)
    assert np.array_equal(np.sort(flat), kept), "exactly once"
    # no row over pack_len but an oversize sample alone
    rows = plan.rows
    for row in rows:
        assert lens[row].sum() <= pack_len or (row.size == 1 and over[row[0]]), "row budget"
    # the collator's rows are the plan's rows: next-fit of each micro-batch in order
    offs = plan.micro_row_offsets
    for m, batch in enumerate(plan):
        planned = plan.row_offsets[offs[m] : offs[m + 1] + 1] - plan.row_offsets[offs[m]]
        assert next_fit_rows(lens[batch], pack_len).tolist() == planned.tolist(), "next-fit"
        if over[batch].any():
            assert batch.size == 1, "an oversize sample is a micro-batch of its own"
    # micro-batches within max_rows
    if args["max_rows"] is not None:
        assert plan.rows_per_micro_batch.max() <= args["max_rows"], "max_rows"
    # updates: the fixed batch's count, fewer only when rows run out; none empty
    target = -(-kept.size // batch_size)
    assert min(target, len(rows)) <= plan.num_updates <= target, "update count"
    assert (np.diff(plan.update_offsets) >= 1).all(), "no empty update"
    assert plan.update_offsets[-1] == len(plan), "updates cover every micro-batch"
    assert sum(u.size for u in plan.updates) == kept.size


@settings(max_examples=150, deadline=None)
@given(pack_args())
def test_every_drawn_plan_keeps_every_promise(args: dict[str, Any]) -> None:
    plan = plan_packs(**args)
    check_promises(plan, args)
    assert plan_packs(**args).micro_batches == plan.micro_batches, "deterministic"
    again = plan_packs(**args)
    assert np.array_equal(again.row_offsets, plan.row_offsets)
    assert np.array_equal(again.update_offsets, plan.update_offsets)


def test_epochs_and_seeds_give_other_plans() -> None:
    lens = lognormal(2000, 512)
    base = plan_packs(lens, 512, batch_size=32, seed=1, epoch=0)
    assert plan_packs(lens, 512, batch_size=32, seed=1, epoch=1).micro_batches != base.micro_batches
    assert plan_packs(lens, 512, batch_size=32, seed=2, epoch=0).micro_batches != base.micro_batches


@pytest.mark.parametrize(
    ("mean", "sigma", "cap"), [(4.6, 0.8, 512), (3.5, 1.0, 512), (5.5, 1.2, 4096), (5.0, 0.3, 512)]
)
def test_rows_are_full_and_updates_as_the_fixed_batch(mean: float, sigma: float, cap: int) -> None:
    """Short, long-tailed and near-uniform corpora: 0.95+ of every row is tokens."""
    lens = lognormal(20_000, cap, seed=3, mean=mean, sigma=sigma)
    plan = plan_packs(lens, cap, batch_size=32, seed=0)
    assert plan.efficiency >= 0.95, plan
    assert plan.num_updates == -(-lens.size // 32)
    sizes = np.array([u.size for u in plan.updates])
    assert abs(sizes.mean() - 32) < 0.01 and sizes.min() >= 1


def test_updates_in_tokens_hold_the_fixed_batchs_loss_tokens() -> None:
    lens = lognormal(5000, 512, seed=4)
    loss = np.random.default_rng(4).integers(0, lens + 1)
    plan = plan_packs(lens, 512, batch_size=16, loss_tokens=loss, update_unit="tokens")
    per_update = np.array([loss[u].sum() for u in plan.updates])
    assert plan.num_updates == -(-lens.size // 16)
    target = loss.sum() / plan.num_updates
    longest_row = max(loss[r].sum() for r in plan.rows)
    assert np.abs(per_update - target).max() <= longest_row, "within one row of the target"


def test_per_update_packing_is_worse_than_a_window() -> None:
    """NOTE [ packing windows ]: an update packed alone leaves its last row part-filled."""
    lens = lognormal(20_000, 512, seed=5)
    window = plan_packs(lens, 512, batch_size=32).efficiency
    small = plan_packs(lens, 512, batch_size=32, window=32).efficiency  # rooms carried over
    rows = sum(
        len(plan_packs(lens[s : s + 32], 512, batch_size=32).rows) for s in range(0, 20_000, 32)
    )
    alone = lens.sum() / (rows * 512)
    assert window > 0.99 and small > 0.99 > 0.95 > alone, (window, small, alone)


def test_oversize_is_refused_by_default_and_named() -> None:
    with pytest.raises(dynbatch.InputError, match=r"pack_len=8 \(lengths\[1\]=9\).*'skip'"):
        plan_packs([3, 9, 2], 8, batch_size=2)
    with pytest.raises(dynbatch.InputError, match="nothing to train on"):
        plan_packs([9, 9], 8, batch_size=2, oversize="skip")


def test_bad_arguments_are_named() -> None:
    with pytest.raises(dynbatch.InputTypeError, match="pack_len must be an integer >= 1"):
        plan_packs([3], "8", batch_size=2)
    with pytest.raises(dynbatch.InputError, match="batch_size must be an integer >= 1"):
        plan_packs([3], 8, batch_size=0)
    with pytest.raises(dynbatch.InputError, match="update_unit must be one of"):
        plan_packs([3], 8, batch_size=2, update_unit="rows")
    with pytest.raises(dynbatch.InputError, match="pass loss_tokens="):
        plan_packs([3], 8, batch_size=2, update_unit="tokens")
    with pytest.raises(dynbatch.InputError, match="oversize must be one of"):
        plan_packs([3], 8, batch_size=2, oversize="split")


def test_next_fit_starts_a_row_when_the_next_sample_does_not_fit() -> None:
    assert next_fit_rows([3, 4, 2, 5, 9, 1], 8).tolist() == [0, 2, 4, 5, 6]
    assert next_fit_rows([], 8).tolist() == [0]
    assert next_fit_rows([8, 8], 8).tolist() == [0, 1, 2]
