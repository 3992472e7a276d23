"""Seq2SeqCollator: both sides padded to their own longest, the decoder's inputs shifted right,
labels ``ignore_index`` on padding; the same arrays as a ``Dict`` of ``Pad`` s given the
shifted targets by hand (NOTE [ one collator for pairs ] in collate.py)."""

from __future__ import annotations

import numpy as np
import pytest

import dynbatch
from dynbatch import Dict, Pad, Seq2SeqCollator

PAIRS = [
    {"src": np.array([5, 6, 7, 8]), "tgt": [9, 3]},
    {"src": [4], "tgt": [10, 11, 12, 3]},
    {"src": [6, 5], "tgt": [3]},
]


def test_each_side_is_padded_to_its_own_longest() -> None:
    batch = Seq2SeqCollator(pad_id=1, decoder_start_id=2, source="src", target="tgt")(PAIRS)
    assert list(batch) == ["input_ids", "attention_mask", "decoder_input_ids", "labels"]
    assert all(v.dtype == np.int64 for v in batch.values()), "int64 throughout"
    assert batch["input_ids"].shape == (3, 4), "the longest source"
    assert batch["labels"].shape == batch["decoder_input_ids"].shape == (3, 4), "longest target"
    assert batch["input_ids"].tolist() == [[5, 6, 7, 8], [4, 1, 1, 1], [6, 5, 1, 1]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0]]
    assert batch["decoder_input_ids"].tolist() == [[2, 9, 1, 1], [2, 10, 11, 12], [2, 1, 1, 1]]
    assert batch["labels"].tolist() == [[9, 3, -100, -100], [10, 11, 12, 3], [3, -100, -100, -100]]


def test_labels_are_the_decoder_inputs_moved_left() -> None:
    """Position t's label is the decoder's input at t + 1: the logits line up with the labels
    (``token_loss(..., shift=False)``), and every target token has exactly one label."""
    batch = Seq2SeqCollator(
        pad_id=0, decoder_start_id=2, ignore_index=-1, source="src", target="tgt"
    )(PAIRS)
    labels, inputs = batch["labels"], batch["decoder_input_ids"]
    real = labels != -1
    assert real.sum() == sum(len(p["tgt"]) for p in PAIRS), "one label per target token"
    after = real[:, 1:]  # a label follows: the decoder saw this one as its input
    assert np.array_equal(inputs[:, 1:][after], labels[:, :-1][after])
    assert (inputs[:, 0] == 2).all(), "decoder_start_id first"


def test_same_as_a_dict_of_pads_given_the_shifted_targets() -> None:
    shifted = [{**p, "dec": [2, *list(p["tgt"])[:-1]]} for p in PAIRS]
    ids, mask, dec, labels = Dict({"src": Pad(0, ret_mask=True), "dec": Pad(0), "tgt": Pad(-100)})(
        shifted
    )
    batch = Seq2SeqCollator(pad_id=0, decoder_start_id=2, source="src", target="tgt")(PAIRS)
    for got, want in zip(batch.values(), (ids, mask, dec, labels), strict=True):
        assert np.array_equal(got, want)


def test_one_pair() -> None:
    batch = Seq2SeqCollator()([{"source": [7], "target": [8]}])
    assert {k: v.tolist() for k, v in batch.items()} == {
        "input_ids": [[7]],
        "attention_mask": [[1]],
        "decoder_input_ids": [[0]],
        "labels": [[8]],
    }


@pytest.mark.parametrize("ignore_index", [-100, -1])
def test_token_loss_counts_the_target_tokens(ignore_index: int) -> None:
    paddle = pytest.importorskip("paddle")
    import dynbatch

    batch = Seq2SeqCollator(ignore_index=ignore_index, source="src", target="tgt")(PAIRS)
    logits = paddle.zeros([*batch["labels"].shape, 16])
    _, count = dynbatch.token_loss(
        logits, paddle.to_tensor(batch["labels"]), ignore_index=ignore_index, shift=False
    )
    assert int(count) == 7, "2 + 4 + 1 target tokens"


@pytest.mark.parametrize("side", ["src", "tgt"])
@pytest.mark.parametrize(
    "big",
    [
        np.array([5, 2**63 + 1], dtype=np.uint64),
        np.array([5, 2**64 - 1], dtype=np.uint64),
        [5, 2**63 + 1],
        [5, 2**64],
        [5, -(2**63) - 1],
    ],
    ids=["uint64-2**63+1", "uint64-2**64-1", "int-2**63+1", "int-2**64", "int--2**63-1"],
)
def test_ids_beyond_int64_are_refused_not_wrapped(side: str, big: object) -> None:
    """uint64 ids at or above 2**63 wrapped: 2**63 + 1 became a negative input id and
    2**64 - 1 a label of -1, where -5 is refused by name; PackCollator's check refuses them."""
    pair = {"src": [4, 5], "tgt": [6, 3], side: big}
    collate = Seq2SeqCollator(ignore_index=-1, source="src", target="tgt")
    with pytest.raises(dynbatch.InputError, match=rf"sample 1's {side} must fit int64"):
        collate([PAIRS[0], pair])
    small = {"src": np.array([4, 5], dtype=np.uint64), "tgt": np.array([6, 3], dtype=np.uint64)}
    assert collate([small])["input_ids"].tolist() == [[4, 5]], "below 2**63: taken"


@pytest.mark.parametrize(
    "given",
    [
        {"pad_id": 2**63},
        {"pad_id": np.uint64(2**63 + 1)},
        {"decoder_start_id": 2**64 - 1},
        {"ignore_index": -(2**63) - 1},
        {"ignore_index": 2**63},
    ],
    ids=["pad-2**63", "pad-uint64", "start-2**64-1", "ignore--2**63-1", "ignore-2**63"],
)
def test_a_pad_start_or_ignore_id_beyond_int64_is_refused_by_name(given: dict) -> None:
    """The ids the collator writes itself wrapped as the samples' ids did: pad_id=2**63
    padded with -2**63, decoder_start_id=2**64 - 1 started every target at -2**63, and an
    ignore_index below -2**63 raised numpy's OverflowError, naming nothing."""
    ((name, value),) = given.items()
    with pytest.raises(dynbatch.InputError, match=rf"{name} must be .*, got {name}={value}"):
        Seq2SeqCollator(**given, source="src", target="tgt")
    edge = {name: -(2**63) if name == "ignore_index" else 2**63 - 1}
    batch = Seq2SeqCollator(**edge, source="src", target="tgt")(PAIRS)
    assert batch["input_ids"].dtype == np.int64, "int64's own bounds are taken"
