"""The packing plan: the fixed batch's updates, each packed into rows, and the promises kept."""

from __future__ import annotations

import bisect
import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import lengths, pack_args

import dynbatch
from dynbatch.plan.packs import (
    PackPlan,
    fixed_updates,
    next_fit_rows,
    pack_and_deal,
    pack_updates,
    plan_packs,
)
from dynbatch.plan.packs.layout import packed_rows
from dynbatch.plan.plans import Plan


def lognormal(n: int, cap: int, seed: int = 0, mean: float = 4.6, sigma: float = 0.8) -> Any:
    rng = np.random.default_rng(seed)
    return np.minimum(np.ceil(rng.lognormal(mean, sigma, n)), cap).astype(np.int64)


def best_fit_rows(lens: Any, pack_len: int) -> int:
    """Best-fit decreasing of one update, written here apart from dynbatch's."""
    rows = 0
    rooms: list[int] = []
    for length in sorted((int(v) for v in lens), reverse=True):
        if length > pack_len:
            rows += 1  # alone
            continue
        i = bisect.bisect_left(rooms, length)
        if i == len(rooms):
            rows += 1
            room = pack_len
        else:
            room = rooms.pop(i)
        if room - length:
            bisect.insort(rooms, room - length)
    return rows


def check_promises(plan: PackPlan, args: dict[str, Any]) -> None:
    lens = np.asarray(args["lengths"])
    pack_len, batch_size = args["pack_len"], args["batch_size"]
    multiple = args.get("pad_to_multiple_of", 1)
    over = lens > pack_len
    flat = plan.micro_batches.indices
    # exactly once: every sample kept once, the skipped ones never
    expected_skip = np.flatnonzero(over) if args["oversize"] == "skip" else np.zeros(0)
    assert plan.skipped.tolist() == expected_skip.tolist(), "skipped: the oversize ones"
    kept = np.setdiff1d(np.arange(lens.size), expected_skip)
    assert np.array_equal(np.sort(flat), kept), "exactly once"
    # the updates are the fixed batch's: the same draw, B samples each, the last the rest
    counted = args["loss_tokens"] if args["update_unit"] == "tokens" else None
    if counted is None:
        drawn = fixed_updates(
            lens,
            pack_len,
            batch_size,
            seed=args["seed"],
            epoch=args["epoch"],
            oversize=args["oversize"],
        )
        assert plan.num_updates == -(-kept.size // batch_size), "the fixed batch's count"
        sizes = np.array([u.size for u in plan.updates])
        assert (sizes[:-1] == batch_size).all() and 1 <= sizes[-1] <= batch_size, "B each"
        for mine, theirs in zip(plan.updates, drawn, strict=True):
            assert sorted(mine.tolist()) == sorted(theirs.tolist()), "the fixed batch's draw"
    else:
        assert plan.num_updates == -(-kept.size // batch_size), "the fixed batch's count"
    # no row over pack_len but an oversize sample alone, itself a micro-batch
    for row in plan.rows:
        assert lens[row].sum() <= pack_len or (row.size == 1 and over[row[0]]), "row budget"
    offs = plan.micro_row_offsets
    for m, batch in enumerate(plan):
        planned = plan.row_offsets[offs[m] : offs[m + 1] + 1] - plan.row_offsets[offs[m]]
        built = packed_rows(lens[batch], pack_len, multiple)
        assert built[0].tolist() == planned.tolist(), "the collator's rows"
        if over[batch].any():
            assert batch.size == 1, "an oversize sample is a micro-batch of its own"
        tokens = [int(lens[r].sum()) for r in plan.rows[offs[m] : offs[m + 1]]]
        assert plan.widths[m] == -(-max(tokens) // multiple) * multiple, "as wide as the fullest"
    if args["max_rows"] is not None:
        assert plan.rows_per_micro_batch.max() <= args["max_rows"], "max_rows"
    # as few rows as fit: no more than best-fit decreasing of the update, none fewer than
    # the tokens need
    for u in range(plan.num_updates):
        members = plan.updates[u]
        rows = int(offs[plan.update_offsets[u + 1]] - offs[plan.update_offsets[u]])
        normal = lens[members][~over[members]]
        bound = -(-int(normal.sum()) // pack_len) + int(over[members].sum())
        assert bound <= rows <= best_fit_rows(lens[members], pack_len), "fewest rows"


@settings(max_examples=150, deadline=None)
@given(pack_args())
def test_every_drawn_plan_keeps_every_promise(args: dict[str, Any]) -> None:
    plan = plan_packs(**args)
    check_promises(plan, args)
    again = plan_packs(**args)
    assert again.micro_batches == plan.micro_batches, "deterministic"
    assert np.array_equal(again.row_offsets, plan.row_offsets)


def test_rows_holding_more_than_a_batch_keep_the_fixed_batchs_updates() -> None:
    """Short samples in long rows: an update is B samples, never whole rows."""
    plan = plan_packs([16] + [1] * 63, 16, batch_size=4)
    assert plan.num_updates == 16
    assert [u.size for u in plan.updates] == [4] * 16
    sampler = dynbatch.DynamicBatchSampler(lengths=[16] + [1] * 63, batch_size=4, pack_len=16)
    assert sampler.steps_for_epochs(range(1)) == 16
    lens = lognormal(3000, 256, seed=7, mean=3.0)  # short samples, rows of 2,048
    assert plan_packs(lens, 2048, batch_size=8).num_updates == 375


def test_the_updates_are_the_time_splits_updates() -> None:
    """Packing and the time split run the same updates: the fixed batch's."""
    lens = lognormal(500, 512, seed=2)
    opts = dynbatch.PlanOptions(
        max_cost=8 * 512**2, update_size=16, time_model="0.01,1e-6,0", order="shuffle", seed=3
    )
    split = dynbatch.plan.splits.plan_split_updates(lens, opts, epoch=4)
    ends = np.r_[0, split.window_ends]
    split_updates = [
        sorted(np.concatenate(list(split.plan[a:b])).tolist()) for a, b in itertools.pairwise(ends)
    ]
    packed = plan_packs(lens, 512, batch_size=16, seed=3, epoch=4)
    assert [sorted(u.tolist()) for u in packed.updates] == split_updates


def test_epochs_and_seeds_give_other_plans() -> None:
    lens = lognormal(2000, 512)
    base = plan_packs(lens, 512, batch_size=32, seed=1, epoch=0)
    assert plan_packs(lens, 512, batch_size=32, seed=1, epoch=1).micro_batches != base.micro_batches
    assert plan_packs(lens, 512, batch_size=32, seed=2, epoch=0).micro_batches != base.micro_batches


@pytest.mark.parametrize(
    ("mean", "sigma", "cap", "batch"),
    [(4.6, 0.8, 512, 32), (3.5, 1.0, 512, 16), (5.5, 1.2, 4096, 16), (5.0, 0.3, 512, 64)],
)
def test_rows_as_wide_as_full_waste_little(mean: float, sigma: float, cap: int, batch: int) -> None:
    """Each update packed alone leaves a part-filled row; its micro-batch is as wide as its
    fullest row, so short, long-tailed and near-uniform corpora waste at most a tenth."""
    lens = lognormal(20_000, cap, seed=3, mean=mean, sigma=sigma)
    plan = plan_packs(lens, cap, batch_size=batch, seed=0, max_rows=4)
    assert plan.efficiency >= 0.9, plan
    padded = lens.sum() / sum(lens[u].max() * u.size for u in plan.updates)
    assert plan.efficiency > padded, "packed beats the fixed batch's padding"


def test_updates_in_tokens_hold_the_fixed_batchs_loss_tokens() -> None:
    lens = lognormal(5000, 512, seed=4)
    loss = np.random.default_rng(4).integers(0, lens + 1)
    plan = plan_packs(lens, 512, batch_size=16, loss_tokens=loss, update_unit="tokens")
    per_update = np.array([loss[u].sum() for u in plan.updates])
    assert plan.num_updates == -(-lens.size // 16)
    target = loss.sum() / plan.num_updates
    assert np.abs(per_update - target).max() <= lens.max(), "within one sample of the target"


def test_updates_in_tokens_with_no_loss_token_are_the_fixed_batchs_samples() -> None:
    """No token carries a loss (every label the ignore index): nothing to even the updates
    out on, so they are the fixed batch's B samples, as drawn, not a division by zero."""
    lens = lognormal(50, 64, seed=5)
    plan = plan_packs(lens, 64, batch_size=8, loss_tokens=np.zeros(50), update_unit="tokens")
    drawn = fixed_updates(lens, 64, 8, seed=0, epoch=0)
    assert [sorted(u.tolist()) for u in plan.updates] == [sorted(u.tolist()) for u in drawn]
    one = plan_packs([38], 38, batch_size=1, loss_tokens=[0], update_unit="tokens")
    assert one.num_updates == 1


# -- ranks: every rank has rows; a repeat only where an update has too few samples -----------
@settings(max_examples=100, deadline=None)
@given(
    lengths(max_size=300, max_len=300),
    st.integers(1, 40),
    st.integers(1, 8),
    st.integers(1, 6),
    st.integers(0, 2**31),
)
def test_every_rank_has_rows_of_its_own(
    lens: Any, batch: int, ranks: int, max_rows: int, seed: int
) -> None:
    pack_len = int(lens.max())
    updates = fixed_updates(lens, pack_len, batch * ranks, seed=seed, epoch=0)
    sp = pack_and_deal(lens, updates, pack_len, max_rows, ranks)
    ends = np.r_[0, sp.window_ends] * ranks
    assert sp.plan.sizes.min() >= 1
    assert np.array_equal(
        np.sort(sp.plan.indices[np.repeat(~sp.is_padding, sp.plan.sizes)]), np.sort(updates.indices)
    ), "exactly once, repeats aside"
    for u, (a, b) in enumerate(itertools.pairwise(ends)):
        assert (b - a) % ranks == 0, "equal steps"
        held = updates[u].size
        repeats = int(sp.is_padding[a:b].sum())
        if repeats:
            assert held < b - a, "a repeat only where the update has fewer samples than slots"
        for m in range(a, b):
            rows = packed_rows(lens[sp.plan[m]], pack_len)[0].size - 1
            assert rows <= max_rows, "within the budget's rows"


@pytest.mark.parametrize("ranks", [2, 8])
def test_repeats_are_rare_on_eight_ranks(ranks: int) -> None:
    """At most 1% of micro-batches repeat a row on realistic corpora (short reviews at 512,
    long sentences at 1,024, two samples a rank)."""
    for lens, pack_len, per_rank in [
        (lognormal(20_000, 512, seed=8, mean=4.6, sigma=0.8), 512, 16),
        (lognormal(20_000, 1024, seed=9, mean=5.3, sigma=0.7), 1024, 2),
        (lognormal(20_000, 2048, seed=10, mean=4.0, sigma=1.0), 2048, 8),
    ]:
        opts = dynbatch.like_fixed(lens, per_rank, num_replicas=ranks, pack_len=pack_len)
        sp = dynbatch.plan_epoch(lens, opts, epoch=0, num_replicas=ranks)
        assert sp.is_padding.mean() <= 0.01, (pack_len, per_rank, sp.is_padding.mean())


def test_repeats_on_the_shared_reviews(chnsenticorp_csv: Any) -> None:
    with open(chnsenticorp_csv, encoding="utf-8") as f:
        reviews = [line.split(",", 1)[1] for line in f.read().splitlines()[1:]]
    lens = np.minimum(np.array([len(r) + 2 for r in reviews]), 512)
    opts = dynbatch.like_fixed(lens, 2, num_replicas=8, pack_len=512)
    sp = dynbatch.plan_epoch(lens, opts, epoch=0, num_replicas=8)
    assert sp.is_padding.mean() <= 0.01


def test_an_update_spread_over_more_rows_than_fit_stays_within_pack_len() -> None:
    """Longest-first into the emptiest row can overfill a row; the best-fit rows are then
    split instead."""
    lens = np.array([6, 5, 5, 4, 4, 3, 3])  # 30 tokens: 3 rows of 10 at best
    rows, bounds = pack_updates(lens, Plan.from_batches([np.arange(7)]), 10, least=4)
    assert bounds.tolist() == [0, 4]
    assert all(lens[r].sum() <= 10 for r in rows)
    assert sorted(np.concatenate(list(rows)).tolist()) == list(range(7))


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
    with pytest.raises(dynbatch.InputError, match="pad_to_multiple_of must be an integer >= 1"):
        plan_packs([3], 8, batch_size=2, pad_to_multiple_of=0)


def test_next_fit_starts_a_row_when_the_next_sample_does_not_fit() -> None:
    assert next_fit_rows([3, 4, 2, 5, 9, 1], 8).tolist() == [0, 2, 4, 5, 6]
    assert next_fit_rows([], 8).tolist() == [0]
    assert next_fit_rows([8, 8], 8).tolist() == [0, 1, 2]


def test_a_million_samples_plan_in_numpy_passes() -> None:
    """Planning is a pass per sample position, not a loop per update: a million samples
    plan (the time is benchmarks/planning_speed.py's to measure)."""
    lens = lognormal(1_000_000, 512, seed=11)
    plan = plan_packs(lens, 512, batch_size=32)
    assert plan.num_updates == 31_250


@pytest.mark.parametrize("batch", [1, 4])
def test_updates_in_tokens_are_the_fixed_batchs_count(batch: int) -> None:
    """Cuts at the running loss tokens fell together where one sample holds many of them: an
    epoch in tokens made 2 updates of 8 samples at B = 1, 5,747 of 8,000 on fine-tuning
    lengths. Each update holds one sample at least, and the count is the fixed batch's."""
    sampler = dynbatch.DynamicBatchSampler(
        lengths=[10] * 8, loss_tokens=[9, 0, 0, 0, 0, 0, 0, 1], batch_size=1, pack_len=16,
        update_unit="tokens", max_cost=64.0, cost="linear",
    )  # fmt: skip
    assert sampler.steps_for_epochs([0]) == 8
    lens = lognormal(8000, 2048, seed=12, mean=5.0, sigma=0.9)
    loss = np.random.default_rng(12).integers(0, lens // 3 + 1)
    plan = plan_packs(lens, 2048, batch_size=batch, loss_tokens=loss, update_unit="tokens")
    assert plan.num_updates == -(-8000 // batch)
    assert min(u.size for u in plan.updates) >= 1
