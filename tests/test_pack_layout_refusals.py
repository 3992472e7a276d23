"""What an outside pass over packed layouts found: a ``pack_len`` kept as given where its padded
row fits, the collator held to the layout the plan priced, a rank checked, and refusals that
name what the user wrote and what would run."""

from __future__ import annotations

import numpy as np
import pytest

import dynbatch
from dynbatch import InputError, InputTypeError, PackCollator, like_fixed, plan_epoch

LENS = np.random.default_rng(0).integers(5, 101, 1000)
LENS[0] = 100


@pytest.mark.parametrize("attention", ["dense", "flashmask", "varlen"])
def test_a_pack_len_whose_padded_row_fits_is_kept_as_given(attention: str) -> None:
    """Rows of 100 padded to 104 fit the fixed batch of 8 x 104: no sample of 97..100 becomes
    oversize, so none is refused, skipped or run alone."""
    options = like_fixed(LENS, 8, pack_len=100, pad_to_multiple_of=8, attention=attention)
    assert options.pack_len == 100
    trained = np.concatenate(list(plan_epoch(LENS, options, 0).for_rank(0)))
    assert np.array_equal(np.sort(trained), np.arange(LENS.size)), "every sample, once"


def test_a_pack_len_below_the_multiple_is_named_as_given() -> None:
    lens = np.array([10, 20, 30, 40] * 8)
    options = like_fixed(lens, 4, pack_len=30, pad_to_multiple_of=64)  # a row of 64 fits
    assert options.pack_len == 30
    with pytest.raises(InputError, match=r"longer than pack_len=30 "):
        plan_epoch(lens, options, 0)


def test_a_dense_row_cut_short_is_said_where_a_longer_pack_len_is_refused() -> None:
    """Dense rows stop at L_max * sqrt(B) (1,448 here) whatever the pack_len asked; a pack_len
    refused for its tokens names that width, not one that would be cut to it without a word."""
    lens = [512] * 64 + [100] * 64
    assert like_fixed(lens, 8, pack_len=4096).pack_len == 1448
    with pytest.raises(InputError, match=r"dense rows stop at 1448 tokens"):
        like_fixed(lens, 8, pack_len=8192)


@pytest.mark.parametrize("given", [{"attention": "dense"}, {"return_startend": True}])
def test_for_sampler_refuses_a_mask_other_than_the_layout_planned(given: dict) -> None:
    """A plan priced as varlen rows run densely would need 8x the fixed batch's attention."""
    options = like_fixed([512] * 64 + [100] * 64, 8, pack_len=4096, attention="varlen")
    with pytest.raises(InputError, match=r"attention='varlen'"):
        PackCollator.for_sampler(options, **given)
    built = PackCollator.for_sampler(options)([[1] * 512] * 8)
    assert set(built) >= {"cu_seqlens", "max_seqlen"} and "attention_mask" not in built


def test_a_flashmask_plan_takes_its_indices_by_the_old_flags() -> None:
    options = like_fixed([64] * 40, 4, pack_len=128, attention="flashmask")
    built = PackCollator.for_sampler(options, return_mask=False)([[1] * 64] * 2)
    assert "attn_mask_startend_row_indices" in built and "attention_mask" not in built


@pytest.mark.parametrize("rank", [2, 7, -1])
def test_a_rank_outside_the_plan_is_refused_by_name(rank: int) -> None:
    sp = plan_epoch(LENS, like_fixed(LENS, 4, pack_len=128, num_replicas=2), 0, 2)
    with pytest.raises(
        InputError, match=rf"rank must be in \[0, 2\), the plan's ranks, got rank={rank}"
    ):
        sp.for_rank(rank)
    with pytest.raises(
        InputError, match=rf"rank must be in \[0, 2\), the plan's ranks, got rank={rank}"
    ):
        sp.padding_for_rank(rank)


def test_a_rank_that_is_not_an_integer_is_refused_by_name() -> None:
    sp = plan_epoch(LENS, like_fixed(LENS, 4, num_replicas=2), 0, 2)
    with pytest.raises(InputTypeError, match=r"rank must be an integer"):
        sp.for_rank(1.0)  # type: ignore[arg-type]


def test_a_recipe_keyword_beside_options_says_it_goes_with_batch_size() -> None:
    options = dynbatch.PlanOptions(max_cost=1000, cost="linear")
    with pytest.raises(
        InputTypeError, match=r"got attention='varlen', which is like_fixed's keyword"
    ) as info:
        dynbatch.DynamicBatchSampler(lengths=LENS, options=options, attention="varlen")
    assert "batch_size=" in str(info.value)
