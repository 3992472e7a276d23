"""Packed rows priced as their attention runs, and the collator's fields of each layout.

The default budget (``like_fixed``'s ``cost(B, L_max)``) holds every packed micro-batch
of a dense layout within both parts of the fixed batch's worst, its tokens ``B·L_max`` and
its attention ``B·L_max²`` (NOTE [ the default budget of packed rows ]); FlashMask and
varlen rows are priced by their tokens. The varlen and FlashMask fields encode the same
sample boundaries as the dense mask (their kernels need a GPU: the fields are checked here,
the dense mask runs through a real model in tests/test_pack_memory.py).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import dynbatch
from dynbatch import InputError, PackCollator, like_fixed
from dynbatch.plan.packs import Attention, DenseRows, PackLayout, plan_packed_epoch
from dynbatch.plan.packs.timed import plan_timed_packs
from dynbatch.plan.steptime import StepTimeModel

B = 8
CUT = 512


def lognormal(n: int = 600, seed: int = 0) -> np.ndarray:
    """Lengths as a held-out corpus has them: log-normal, cut at CUT."""
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(5.0, 0.8, n).astype(np.int64), 2, CUT)


def micro_shapes(lens: np.ndarray, options: Any, ranks: int = 1) -> tuple[np.ndarray, ...]:
    """Every micro-batch of epoch 0 as the collator lays it out: rows and width."""
    sharded = plan_packed_epoch(lens, options, 0, ranks)
    layout = PackLayout.from_options(options)
    plan = sharded.plan
    return layout.shapes(lens[plan.indices], plan.offsets)


@pytest.mark.parametrize("pack_len", [1024, 2048, 4096])
@pytest.mark.parametrize("ranks", [1, 2])
def test_dense_default_budget_holds_every_micro_batch_within_the_fixed_worst(
    pack_len: int, ranks: int
) -> None:
    lens = lognormal()
    longest = int(lens.max())
    options = like_fixed(lens, B, pack_len=pack_len, num_replicas=ranks)
    rows, width = micro_shapes(lens, options, ranks)
    assert (rows * width <= B * longest).all(), "tokens within the fixed batch's"
    assert (rows * width.astype(float) ** 2 <= B * longest**2).all(), "attention within it"
    assert options.pack_len <= pack_len and options.pack_len >= longest


def test_dense_rows_stop_short_of_a_pack_len_whose_row_outgrows_the_fixed_attention() -> None:
    lens = np.r_[np.full(64, CUT), np.full(64, 100)]
    options = like_fixed(lens, B, pack_len=4096)
    assert options.pack_len == 1448  # CUT * sqrt(B), rounded down
    assert options.max_rows == 1
    assert isinstance(options.cost, DenseRows)
    assert like_fixed(lens, B, pack_len=1024).max_rows == 2  # 2 x 1024^2 = 8 x 512^2
    multiple = like_fixed(lens, B, pack_len=4096, pad_to_multiple_of=64)
    assert multiple.pack_len == 1408 and multiple.max_rows == 1


@pytest.mark.parametrize("attention", ["flashmask", "varlen"])
def test_flash_layouts_keep_pack_len_priced_by_tokens(attention: str) -> None:
    lens = np.r_[np.full(64, CUT), np.full(64, 100)]
    options = like_fixed(lens, B, pack_len=1024, attention=attention)
    assert options.pack_len == 1024 and options.max_rows == 4
    rows, width = micro_shapes(lens, options)
    assert (rows * width <= B * CUT).all()


def test_pack_len_whose_one_row_outgrows_the_fixed_batch_is_refused_by_name() -> None:
    with pytest.raises(InputError, match=r"pack_len=8192.*pass pack_len=4096 or less"):
        like_fixed(lognormal() * 0 + CUT, B, pack_len=8192)


def test_attention_is_refused_by_name_when_unknown_or_without_pack_len() -> None:
    lens = lognormal()
    with pytest.raises(InputError, match="attention must be one of 'dense', 'flashmask'"):
        like_fixed(lens, B, pack_len=1024, attention="sdpa")
    with pytest.raises(InputError, match="attention='varlen' is how packed rows run"):
        like_fixed(lens, B, attention="varlen")
    with pytest.raises(dynbatch.InputTypeError, match="attention must be one of"):
        Attention(3)  # type: ignore[arg-type]


def test_a_flash_layout_prices_a_packed_row_by_its_samples_attention() -> None:
    step = StepTimeModel(c=0.0, a=1e-6, b=1e-7)
    lens = np.array([100, 100, 100, 100], dtype=np.int64)
    offsets = np.array([0, 4])
    seconds = {}
    for name in ("dense", "flashmask", "varlen"):
        layout = PackLayout(400, max_cost=1e9, cost="linear", time_model=step, attention=name)
        laid = layout.choose(lens, offsets)
        seconds[name] = float(laid.seconds[0])
    # dense: padded 4 x 100 beats one row of 400 (W^2); flash: one row, each sample's 100^2
    assert seconds["dense"] == pytest.approx(4 * 100 * (1e-6 + 1e-7 * 100))
    assert seconds["flashmask"] == pytest.approx(400e-6 + 4e4 * 1e-7)
    assert seconds["varlen"] == seconds["flashmask"]


def test_choose_packing_compares_layouts_over_the_same_updates() -> None:
    lens = lognormal(200)
    step = StepTimeModel(c=1e-3, a=1e-6, b=1e-8)
    kw = {"batch_size": B, "time_model": step, "max_cost": B * CUT, "cost": "linear"}
    chosen = {
        a: dynbatch.choose_packing(lens, 1024, attention=a, **kw) for a in ("dense", "varlen")
    }
    dense, flat = chosen["dense"], chosen["varlen"]
    assert [u.tolist() for u in dense.updates] == [u.tolist() for u in flat.updates]
    assert flat.epoch_seconds <= dense.epoch_seconds
    assert flat.counts["packed"] >= dense.counts["packed"]


def samples(lengths: list[int], seed: int = 0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    return [{"input_ids": rng.integers(1, 99, n)} for n in lengths]


@pytest.mark.parametrize("causal", [True, False])
def test_varlen_fields_encode_the_dense_masks_samples(causal: bool) -> None:
    batch = samples([5, 3, 7, 2, 6])
    dense = PackCollator(8, causal=causal, attention="dense")(batch)
    flat = PackCollator(8, causal=causal, attention="varlen")(batch)
    assert set(dense) >= {"attention_mask"} and "cu_seqlens" not in dense
    assert "attention_mask" not in flat and "attn_mask_startend_row_indices" not in flat
    cu = flat["cu_seqlens"]
    assert cu.dtype == np.int32 and cu.tolist() == [0, 5, 8, 15, 17, 23]
    assert flat["max_seqlen"].dtype == np.int32 and int(flat["max_seqlen"]) == 7
    assert flat["input_ids"].shape == (1, 23)  # no row padding
    # the same samples, token for token, in the same order
    real = dense["sample_ids"] >= 0
    assert dense["input_ids"][real].tolist() == flat["input_ids"][0].tolist()
    assert dense["position_ids"][real].tolist() == flat["position_ids"][0].tolist()
    assert dense["labels"][real].tolist() == flat["labels"][0].tolist()
    # the block mask cu_seqlens says, equal to the dense mask of each sample
    seg = np.repeat(np.arange(cu.size - 1), np.diff(cu))
    block = seg[:, None] == seg[None, :]
    if causal:
        block &= np.tri(seg.size, dtype=bool)
    at = np.flatnonzero(real.reshape(-1))
    rows, cols = np.divmod(at, dense["input_ids"].shape[1])
    same_row = rows[:, None] == rows[None, :]
    from_dense = dense["attention_mask"][rows[:, None], cols[:, None], cols[None, :]] & same_row
    np.testing.assert_array_equal(block, from_dense)


def test_flashmask_fields_alone_and_the_layouts_agreement_are_checked() -> None:
    out = PackCollator(8, attention="flashmask")(samples([5, 3]))
    assert "attn_mask_startend_row_indices" in out and "attention_mask" not in out
    with pytest.raises(InputError, match="not both"):
        PackCollator(8, attention="varlen", return_mask=False)
    layout = PackLayout(8, max_cost=64, cost="linear", attention="flashmask")
    with pytest.raises(InputError, match="differs from the layout's attention='flashmask'"):
        PackCollator(8, layout=layout, attention="varlen")


def test_for_sampler_builds_the_layout_asked_and_checks_its_budget() -> None:
    options = like_fixed(np.full(40, 6), 2, pack_len=8, attention="varlen")
    collate = PackCollator.for_sampler(options, attention="varlen")
    assert collate.layout is not None and collate.layout.attention == Attention("varlen")
    out = collate(samples([6, 2]))
    assert out["cu_seqlens"].tolist() == [0, 6, 8]
    with pytest.raises(InputError, match="over the sampler's budget"):
        collate(samples([8, 8, 8]))


def test_a_cost_that_prices_attention_already_is_not_widened() -> None:
    lens = np.r_[np.full(64, CUT), np.full(64, 100)]
    quadratic = like_fixed(lens, B, pack_len=1024, cost="quadratic")
    assert quadratic.pack_len == 1024 and quadratic.max_rows == 2  # 2 x 1024^2 = 8 x 512^2
    from dynbatch import MemoryCost

    calibrated = MemoryCost(c=50.0, a=0.02, b=4e-05, floor=60.0)
    options = like_fixed(lens, B, pack_len=1024, cost=calibrated)
    assert options.pack_len == 1024
    assert calibrated(options.max_rows, 1024) <= calibrated(B, CUT)


def padded_cost(n: Any, length: Any) -> Any:
    return 1.0 + np.asarray(n) * np.asarray(length)


def packed_cost(n: Any, length: Any) -> Any:
    """A packed row's price, 5% over a padded sample of its width: its positions and mask."""
    return 1.0 + 1.05 * np.asarray(n) * np.asarray(length)


def test_each_layout_is_priced_by_its_own_cost_under_the_fixed_batchs_worst() -> None:
    """Rows priced by a calibration of packed rows and the budget by the padded one's: the
    padded micro-batches were priced by the rows' cost too, so the fixed batch's own update,
    ``B`` of the longest, was over its own worst, and with a step time no update ran whole."""
    lens = np.random.default_rng(0).integers(100, 128, 400)  # one sample a row of 128
    step = StepTimeModel(c=0.01, a=1e-4, b=0.0)
    options = like_fixed(
        lens, 16, cost=padded_cost, rows_cost=packed_cost, pack_len=128, time_model=step
    )
    assert options.max_cost == pytest.approx(padded_cost(16, lens.max())), "the fixed worst"
    assert options.max_rows == 15, "rows priced by their own cost: 16 are over the budget"
    layout = PackLayout.from_options(options)
    fixed = np.sort(lens)[-16:]  # the fixed batch's worst update, padded, fits
    assert layout.fits(np.array([16]), np.array([int(fixed.max())]), packed=False)[0]
    assert not layout.fits(np.array([16]), np.array([128]))[0]
    assert plan_timed_packs(lens, options, 0).counts["whole"] > 0
    # the rows' cost for every layout, under the same budget: no update fits whole
    alone = like_fixed(
        lens, 16, cost=packed_cost, max_cost=options.max_cost, pack_len=128, time_model=step
    )
    assert plan_timed_packs(lens, alone, 0).counts["whole"] == 0


def test_rows_cost_needs_pack_len_and_a_row_it_prices_over_the_budget_is_refused() -> None:
    with pytest.raises(InputError, match=r"rows_cost=.*pack_len"):
        like_fixed([10, 20], 2, rows_cost=packed_cost)
    with pytest.raises(InputError, match=r"one row of pack_len=128 tokens costs 1e.*no row of one"):
        like_fixed([100] * 8, 2, cost=padded_cost, rows_cost=lambda n, L: 1e9 * n, pack_len=128)


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (5, "rows_cost=5 is no cost of rows: cost must be a string or a callable"),
        (lambda n, a, b: n * a * b, "prices (source, target) pairs; packed rows are one length"),
        (dynbatch.PairCost(), "rows_cost=PairCost(a=0.0, b=1.0, cross=1.0) prices (source"),
        (lambda n, L: 1e9 * np.asarray(n), "costs 1e+09 under rows_cost=<function"),
    ],
)
def test_a_bad_rows_cost_is_refused_by_its_name(rows: Any, message: str) -> None:
    """A cost of pairs raised a TypeError from deep in the check, and a bad one was reported
    as ``cost``, the other argument."""
    with pytest.raises(InputError, match=re.escape(message)):
        like_fixed([10, 20, 30, 40] * 20, 8, pack_len=64, cost=padded_cost, rows_cost=rows)


def test_a_sample_alone_in_a_row_over_the_budget_is_refused() -> None:
    """A sample longer than pack_len runs alone in a row: priced by its rows' cost it could
    need twice the budget it fits padded, and nothing refused it."""
    lengths = np.array([100] * 10 + [10] * 10)
    twice = lambda n, L: 2.0 * np.asarray(n, float) * np.asarray(L, float)  # noqa: E731
    with pytest.raises(InputError, match=r"the longest sample, 100 tokens, alone in a row costs"):
        like_fixed(lengths, 1, pack_len=50, oversize="alone", rows_cost=twice)


def test_of_fewer_samples_than_the_batch_a_row_is_held_to_the_batch_the_fixed_batch_runs() -> None:
    """One sample and B = 2: the fixed batch runs that one sample, so its worst is cost(1, 256),
    and a row of 257 tokens is over it, refused naming the batch it runs."""
    with pytest.raises(InputError, match=re.escape("cost(1, 256) = 256: pass pack_len=256")):
        like_fixed([256], 2, pack_len=257)


def test_the_samplers_shortcut_takes_rows_cost_as_like_fixed_does() -> None:
    lengths = np.random.default_rng(1).integers(100, 128, 64)
    sampler = dynbatch.DynamicBatchSampler(
        lengths=lengths, batch_size=16, cost=padded_cost, pack_len=128, rows_cost=packed_cost
    )
    same = like_fixed(lengths, 16, cost=padded_cost, pack_len=128, rows_cost=packed_cost)
    assert sampler.options.max_rows == same.max_rows == 15, "rows priced by their own cost"
    assert [b.tolist() for b in sampler.batches(0)] == [
        b.tolist() for b in dynbatch.DynamicBatchSampler(lengths=lengths, options=same).batches(0)
    ]
