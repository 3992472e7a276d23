"""PackCollator: rows as the plan's, each sample alone in its row (numpy only)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import pack_args

import dynbatch
from dynbatch.paddle.pack_collate import PackCollator, additive_mask
from dynbatch.plan.packs import PackLayout, plan_packs


def samples_of(lens: Any, seed: int = 0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    out = []
    for n in np.asarray(lens).tolist():
        ids = rng.integers(1, 1000, n)
        labels = np.where(rng.random(n) < 0.3, -100, ids)
        out.append({"input_ids": ids, "labels": labels, "token_type_ids": rng.integers(0, 2, n)})
    return out


def dense_from_startend(startend: Any, causal: bool) -> Any:
    """FlashMask's columns as the dense mask they mean (paddle's flashmask_attention docs)."""
    rows = np.arange(startend.shape[2])[None, :, None]  # [1, q, 1]
    down = startend[:, 0, :, 0][:, None, :]  # [R, 1, k]: rows >= it are masked
    keep = rows < down
    if causal:
        keep &= rows >= np.arange(startend.shape[2])[None, None, :]
    else:
        keep &= rows >= startend[:, 0, :, 1][:, None, :]  # rows above the start masked
    return keep


@settings(max_examples=80, deadline=None)
@given(pack_args(), st.booleans())
def test_the_collators_rows_are_the_plans_rows(args: dict[str, Any], causal: bool) -> None:
    args["lengths"] = args["lengths"][:120]
    args["loss_tokens"] = None if args["loss_tokens"] is None else args["loss_tokens"][:120]
    plan = plan_packs(**args)
    samples = samples_of(args["lengths"])
    multiple = args["pad_to_multiple_of"]
    layout = PackLayout(args["pack_len"], max_cost=1e18, pad_to_multiple_of=multiple)
    collate = PackCollator(args["pack_len"], causal=causal, layout=layout)
    rows = plan.rows
    for m, batch in enumerate(plan):
        out = collate([samples[i] for i in batch.tolist()])
        first = int(plan.micro_row_offsets[m])
        assert out["input_ids"].shape[0] == plan.rows_per_micro_batch[m], "R as planned"
        assert out["input_ids"].shape[1] == plan.widths[m], "as wide as planned: the fullest row"
        for r in range(out["input_ids"].shape[0]):
            planned = rows[first + r]
            got = out["input_ids"][r][out["sample_ids"][r] >= 0]
            want = np.concatenate([samples[i]["input_ids"] for i in planned.tolist()])
            assert np.array_equal(got, want), "row r holds the planned samples, in order"
        labels = [samples[i]["labels"] for i in batch.tolist()]
        packed_loss = int((out["labels"][:, 1:] != -100).sum())
        assert packed_loss == dynbatch.loss_token_counts(labels).sum(), "the same loss tokens"
        mask = out["attention_mask"]
        assert mask.any(axis=-1).all(), "every token attends to something (no NaN softmax)"
        dense = dense_from_startend(out["attn_mask_startend_row_indices"], causal)
        assert np.array_equal(dense, mask), "FlashMask's columns mean the dense mask"


def test_each_sample_sees_only_itself_from_position_zero() -> None:
    samples = samples_of([4, 3, 5, 2], seed=1)
    out = PackCollator(8, causal=False)(samples)
    sid, pos = out["sample_ids"], out["position_ids"]
    # two rows of 4 + 3 and 5 + 2 tokens: as wide as the fullest, 7, not pack_len
    assert out["input_ids"].shape == (2, 7) and out["attention_mask"].shape == (2, 7, 7)
    for r in range(2):
        for k in range(sid[r].max() + 1):
            cols = np.flatnonzero(sid[r] == k)
            assert pos[r, cols].tolist() == list(range(cols.size)), "positions restart"
            block = out["attention_mask"][r][np.ix_(cols, cols)]
            assert block.all(), "an encoder's sample sees all of itself"
            assert out["attention_mask"][r][cols].sum() == cols.size * cols.size, "and no more"
    assert out["sample_starts"].tolist() == [[0, 4], [0, 5]], "where each [CLS] is"


def test_labels_hide_each_samples_first_token_and_the_fill() -> None:
    samples = [{"input_ids": [1, 2, 3], "labels": [1, 2, 3]}, ([4, 5], [-100, 5]), [6, 7, 8, 9]]
    out = PackCollator(6)(samples)  # rows of 3 + 2 and 4 tokens, 5 wide: one fill token
    assert out["labels"].tolist() == [[-100, 2, 3, -100, 5], [-100, 7, 8, 9, -100]]
    kept = PackCollator(6, shift=False)(samples)  # labels already moved left by one per sample
    assert kept["labels"].tolist() == [[1, 2, 3, -100, 5], [6, 7, 8, 9, -100]]
    assert PackCollator(6)([[7, 8]])["labels"].tolist() == [[-100, 8]], "alone: its own width"


def test_token_types_pass_through_and_fill_is_pad_val() -> None:
    samples = [
        {"input_ids": [1, 2], "token_type_ids": [0, 1]},
        {"input_ids": [3, 4, 5], "token_type_ids": [1, 1, 1]},
    ]
    out = PackCollator(4, pad_val=9)(samples)  # 2 + 3 > 4: two rows, 3 wide
    assert out["token_type_ids"].tolist() == [[0, 1, 0], [1, 1, 1]]
    assert out["input_ids"].tolist() == [[1, 2, 9], [3, 4, 5]]


def test_an_oversize_sample_is_a_wider_row_of_its_own() -> None:
    out = PackCollator(4)([[1, 2, 3, 4, 5, 6]])
    assert out["input_ids"].shape == (1, 6) and out["attention_mask"].shape == (1, 6, 6)


def test_the_additive_mask_is_berts() -> None:
    mask = PackCollator(4, causal=False)([[1, 2], [3]])["attention_mask"]
    add = additive_mask(mask)
    assert add.shape == (1, 1, 3, 3) and add.dtype == np.float32
    assert np.array_equal(add[:, 0] == 0, mask)


def test_bad_samples_are_named() -> None:
    collate = PackCollator(8)
    with pytest.raises(dynbatch.InputError, match="empty micro-batch"):
        collate([])
    with pytest.raises(dynbatch.InputError, match=r"samples\[1\] has no input_ids"):
        collate([[1], {"ids": [2]}])
    with pytest.raises(dynbatch.InputError, match=r"samples\[0\] labels must be integers"):
        collate([{"input_ids": [1, 2], "labels": [1]}])
    with pytest.raises(dynbatch.InputTypeError, match=r"samples\[0\] input_ids must hold integer"):
        collate([[[0.5, 1.5]]])
    with pytest.raises(dynbatch.InputTypeError, match="pack_len must be an integer >= 1"):
        PackCollator(0.5)  # type: ignore[arg-type]
    with pytest.raises(dynbatch.InputTypeError, match="list of one micro-batch"):
        collate({"input_ids": [1]})  # type: ignore[arg-type]


def test_a_padded_sample_packs_its_real_tokens_only() -> None:
    """A sample's own 0/1 ``attention_mask`` leaves its pad tokens out of the rows: they were
    packed as real tokens, attended to and trained on."""
    padded = [
        {"input_ids": [101, 7, 8, 102, 0, 0], "attention_mask": [1, 1, 1, 1, 0, 0]},
        {  # left padding, a bool mask, labels and token types dropped with the ids
            "input_ids": np.array([0, 0, 5, 6]),
            "labels": [-100, -100, 5, 6],
            "token_type_ids": [0, 0, 1, 1],
            "attention_mask": np.array([False, False, True, True]),
            "position_ids": [0, 1, 0, 1],  # counting from 0 over the real tokens: the rows'
        },
        {"input_ids": [9, 4, 3], "attention_mask": [1, 0, 1]},  # any 0/1 mask
    ]
    alone = [
        {"input_ids": [101, 7, 8, 102]},
        {"input_ids": [5, 6], "labels": [-100, 6], "token_type_ids": [1, 1]},
        {"input_ids": [9, 3]},
    ]
    for causal in (True, False):
        got = PackCollator(8, causal=causal)(padded)
        want = PackCollator(8, causal=causal)(alone)
        assert sorted(got) == sorted(want)
        for key, value in want.items():
            np.testing.assert_array_equal(got[key], value, err_msg=key)
    assert got["input_ids"].tolist() == [[101, 7, 8, 102, 5, 6, 9, 3]], "no pad token packed"


@pytest.mark.parametrize(
    ("sample", "error", "message"),
    [
        (
            {"input_ids": [1, 2], "text": "a review"},
            dynbatch.InputError,
            r"samples\[1\] has the field 'text', which the packed rows would drop: PackCollator "
            r"packs input_ids, labels, token_type_ids, attention_mask",
        ),
        (
            {"input_ids": [1, 2], "position_ids": [1, 2]},
            dynbatch.InputError,
            r"samples\[1\] position_ids=\[1, 2\] .*the rows restart each sample's positions at 0",
        ),
        (
            {"input_ids": [1, 2], "attention_mask": [0.0, -1e4]},
            dynbatch.InputError,
            r"samples\[1\] attention_mask must be 1-D 0/1 .* input_ids' length 2",
        ),
        (
            {"input_ids": [1, 2], "attention_mask": [[1, 1], [1, 1]]},
            dynbatch.InputError,
            r"samples\[1\] attention_mask must be 1-D 0/1",
        ),
        (
            {"input_ids": [1, 2, 3], "attention_mask": [1, 1]},
            dynbatch.InputError,
            r"samples\[1\] attention_mask must be 1-D 0/1 .* input_ids' length 3",
        ),
        (
            {"input_ids": [1, 2], "attention_mask": [0, 0]},
            dynbatch.InputError,
            r"samples\[1\] attention_mask is 0 everywhere: the sample has no real token",
        ),
    ],
    ids=["unknown-key", "position_ids", "additive-mask", "2-D-mask", "mask-length", "no-token"],
)
def test_a_field_the_rows_would_drop_is_refused_by_name(
    sample: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        PackCollator(8)([{"input_ids": [4]}, sample])


@pytest.mark.parametrize("field", ["input_ids", "labels", "token_type_ids"])
def test_token_ids_beyond_int64_are_refused_not_wrapped(field: str) -> None:
    """uint64 ids at or above 2**63 wrapped to negative numbers in the rows."""
    big = np.array([5, 2**63], dtype=np.uint64)
    sample: dict[str, Any] = {"input_ids": np.array([5, 6], dtype=np.uint64), field: big}
    with pytest.raises(dynbatch.InputError, match=rf"samples\[0\] {field} must fit int64"):
        PackCollator(8)([sample])
    small = {"input_ids": np.array([5, 6], dtype=np.uint64)}
    assert PackCollator(4)([small])["input_ids"].tolist() == [[5, 6]], "below 2**63: taken"


@pytest.mark.parametrize("big", [2**63, 2**64, -(2**63) - 1], ids=["2**63", "2**64", "-2**63-1"])
@pytest.mark.parametrize("field", ["input_ids", "labels", "token_type_ids"])
def test_python_ints_beyond_int64_are_named_as_such(field: str, big: int) -> None:
    """numpy read them as float64 or object: "must hold integer token ids, got dtype float64"."""
    sample: dict[str, Any] = {"input_ids": [5, 6], field: [5, big]}
    with pytest.raises(dynbatch.InputError, match=rf"samples\[1\] {field} must fit int64") as info:
        PackCollator(8)([[4], sample])
    assert type(info.value) is dynbatch.InputError and f"item 1 is {big}" in str(info.value)


@pytest.mark.parametrize("time_model", [None, "1,0.1,0"], ids=["packed", "timed"])
def test_samples_longer_than_their_planned_lengths_are_refused_over_the_budget(
    time_model: str | None,
) -> None:
    """The sampler plans on the lengths it is given: told 5 tokens a sample, it put 8 samples
    of 30 in one micro-batch (max_rows=2), which the collator built as 8 rows of 30 tokens
    (cost 240, over max_cost=80) without a word; with a time model it blamed the caller."""
    samples = [[7] * 30 for _ in range(8)]
    options = dynbatch.PlanOptions(
        max_cost=80, cost="linear", pack_len=40, update_size=8, time_model=time_model
    )
    assert options.max_rows == 2
    planned = dynbatch.plan_epoch([5] * 8, options, 0).plan
    assert [b.size for b in planned] == [8], "one row of 8 x 5 planned tokens"
    collate = PackCollator.for_sampler(options)
    with pytest.raises(dynbatch.InputError) as info:
        collate([samples[i] for i in planned[0].tolist()])
    message = str(info.value)
    assert "8 rows x 30 tokens, cost 240" in message, message
    assert "over the sampler's budget" in message and "max_cost=80" in message, message
    assert "lengths= understates" in message, message
    assert PackCollator(40)(samples)["input_ids"].shape == (8, 30), "no budget: built as given"
    fits = collate([[7] * 20, [7] * 20, [7] * 20])  # 2 rows, cost 80: within the budget
    assert fits["input_ids"].shape[0] <= 3


def test_a_plain_collator_rounds_its_width_up_as_the_sampler_plans() -> None:
    """PackCollator(pack_len) built width 14 where the plan priced 16 (pad_to_multiple_of=8)."""
    lens = [9, 5]
    samples = [[1] * 9, [2] * 5]
    plan = plan_packs(lens, 16, batch_size=2, pad_to_multiple_of=8)
    assert plan.widths.tolist() == [16], "the plan prices the fullest row rounded up"
    assert PackCollator(16)(samples)["input_ids"].shape == (1, 14), "unrounded without it"
    out = PackCollator(16, pad_to_multiple_of=8)(samples)
    assert out["input_ids"].shape == (1, 16), "rounded up as the plan priced"
    options = dynbatch.PlanOptions(
        max_cost=64, cost="linear", pack_len=16, update_size=2, pad_to_multiple_of=8
    )
    same = PackCollator.for_sampler(options)(samples)
    assert all(np.array_equal(out[k], same[k]) for k in out), "as for_sampler builds it"
