"""Collators: the results of paddlenlp.data side by side, plus our additions."""

from __future__ import annotations

import numpy as np
import pytest

from dynbatch import Dict, Pad, Stack, Tuple

pnlp = pytest.importorskip("paddlenlp.data", reason="paddlenlp not installed")

SEQS = [[1, 2, 3], [4], [5, 6]]
ARRS = [np.ones((k, 3), dtype="float32") * k for k in (2, 5, 1)]


def same(a: object, b: object) -> None:
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            same(x, y)
        return
    assert isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
    assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)


@pytest.mark.parametrize(
    ("kwargs", "data"),
    [
        ({}, SEQS),
        ({"pad_val": -1, "pad_right": False}, SEQS),
        ({"dtype": "float32"}, SEQS),
        ({"axis": 0}, ARRS),
        ({"axis": 1}, [np.zeros((2, k)) for k in (1, 4)]),
        ({"ret_length": True}, SEQS),
        ({}, [3, 4, 5]),  # scalars are stacked as int64
    ],
)
def test_pad_matches_paddlenlp(kwargs: dict, data: list) -> None:
    same(Pad(**kwargs)(data), pnlp.Pad(**kwargs)(data))


def test_stack_tuple_dict_match_paddlenlp() -> None:
    samples = [(np.array(s), i) for i, s in enumerate(SEQS)]
    same(
        Tuple(Pad(ret_length=True), Stack())(samples),
        pnlp.Tuple(pnlp.Pad(ret_length=True), pnlp.Stack())(samples),
    )
    same(
        Tuple([Pad(), Stack(dtype="int32")])(samples),
        pnlp.Tuple([pnlp.Pad(), pnlp.Stack(dtype="int32")])(samples),
    )
    dicts = [{"ids": s, "label": i} for i, s in enumerate(SEQS)]
    same(
        Dict({"ids": Pad(), "label": Stack()})(dicts),
        pnlp.Dict({"ids": pnlp.Pad(), "label": pnlp.Stack()})(dicts),
    )


def test_pad_pads_tuples_as_lists() -> None:
    """paddlenlp's Pad fails on tuples of ids (a bare numpy ValueError); a tuple is a sample."""
    same(Pad(ret_length=True)([tuple(s) for s in SEQS]), Pad(ret_length=True)(SEQS))


def test_ret_length_honours_its_dtype_and_mask_marks_data() -> None:
    ids, lens, mask = Pad(ret_length="int64", ret_mask=True, pad_right=False)(SEQS)
    assert lens.dtype == np.int64 and lens.tolist() == [3, 1, 2]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1], [0, 1, 1]]
    assert ids.tolist() == [[1, 2, 3], [0, 0, 4], [0, 5, 6]]


def test_pad_to_multiple_of() -> None:
    assert Pad(pad_to_multiple_of=8)(SEQS).shape == (3, 8)
    assert Pad(pad_to_multiple_of=3)(SEQS).shape == (3, 3)
    with pytest.raises(ValueError, match="pad_to_multiple_of must be an integer >= 1"):
        Pad(pad_to_multiple_of=0)


def test_bad_collator_input() -> None:
    with pytest.raises(TypeError, match=r"fn\[1\]=3 is not callable"):
        Tuple(Pad(), 3)
    with pytest.raises(ValueError, match="not both"):
        Tuple([Pad()], Stack())
    with pytest.raises(ValueError, match="2 functions but samples have 3 fields"):
        Tuple(Pad(), Stack())([(1, 2, 3)])
    with pytest.raises(ValueError, match="empty batch"):
        Pad()([])
    with pytest.raises(TypeError, match="Dict takes a dict"):
        Dict([Pad()])  # type: ignore[arg-type]
