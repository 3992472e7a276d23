"""PackCollator(sample_label=...): a classifier's or a regression's one label a sample, beside
the sample's start (NOTE [ a sample's own label ])."""

from __future__ import annotations

import numpy as np
import pytest

import dynbatch


def test_each_samples_label_sits_beside_its_start() -> None:
    collate = dynbatch.PackCollator(6, causal=False, sample_label="label")
    samples = [{"input_ids": [5, 6, 7], "label": 1}, {"input_ids": [8, 9], "label": 0}, ([4, 4], 2)]
    out = collate(samples)
    assert out["sample_starts"].tolist() == [[0, -1], [0, 2]]
    assert out["sample_labels"].tolist() == [[1, -100], [0, 2]]
    assert out["sample_labels"].dtype == np.int64 and "labels" not in out
    ids, starts = out["input_ids"], out["sample_starts"]
    firsts = [int(ids[r, starts[r, k]]) for r, k in zip(*np.nonzero(starts >= 0), strict=True)]
    assert firsts == [5, 8, 4], "each label's start is its sample's first token"


def test_real_values_are_float32_zero_past_a_rows_last_sample() -> None:
    out = dynbatch.PackCollator(4, sample_label="y")(
        [{"input_ids": [1, 2], "y": 0.5}, ([3], 2), {"input_ids": [4, 5, 6], "y": -1.5}]
    )
    assert out["sample_labels"].dtype == np.float32
    assert out["sample_labels"].tolist() == [[0.5, 2.0], [-1.5, 0.0]]


@pytest.mark.parametrize(
    ("collate", "samples", "match"),
    [
        (
            dynbatch.PackCollator(8),
            [([1, 2, 3], 1)],
            r"labels=1 is one label for the sample.*"
            r"sample_label='label'",
        ),
        (
            dynbatch.PackCollator(8, sample_label="label"),
            [{"input_ids": [1]}],
            r"samples\[0\] "
            r"has no 'label': sample_label='label'",
        ),
        (
            dynbatch.PackCollator(8, sample_label="label"),
            [{"input_ids": [1], "label": [1, 0]}],
            r"label=\[1, 0\] must be one finite number",
        ),
        (
            dynbatch.PackCollator(8, sample_label="label"),
            [{"input_ids": [1], "label": True}],
            r"label=True must be one finite number",
        ),
        (
            dynbatch.PackCollator(8, sample_label="label"),
            [{"input_ids": [1], "label": 1, "labels": [1]}],
            r"holds token labels 'labels'",
        ),
    ],
)
def test_a_label_the_rows_cannot_carry_is_refused_by_name(
    collate: dynbatch.PackCollator, samples: list[object], match: str
) -> None:
    with pytest.raises(dynbatch.InputError, match=match):
        collate(samples)


def test_sample_label_must_name_a_field() -> None:
    with pytest.raises(dynbatch.InputTypeError, match=r"sample_label must be None or the name"):
        dynbatch.PackCollator(8, sample_label=3)  # type: ignore[arg-type]


def test_a_label_held_in_a_one_number_array_is_that_number() -> None:
    """paddle's datasets give a label as ``np.array([7])`` (MNIST) or a 0-d array: one number a
    sample, as the error itself asks for; a bool array and two numbers are still refused."""
    collate = dynbatch.PackCollator(8, sample_label="label")
    out = collate(
        [{"input_ids": [1, 2], "label": np.array([7])}, ([3], np.array(2, dtype=np.int32))]
    )
    assert out["sample_labels"].tolist() == [[7, 2]] and out["sample_labels"].dtype == np.int64
    out = collate([([1], np.array([0.5], dtype=np.float32)), ([2], 1)])
    assert out["sample_labels"].tolist() == [[0.5, 1.0]]
    for bad in (np.array([True]), np.array([1, 2]), np.array([np.nan])):
        with pytest.raises(dynbatch.InputError, match=r"must be one finite number"):
            collate([([1], bad)])
