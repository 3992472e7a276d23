"""The original study's API: same call shape, the stated formula, and the difference pinned."""

from __future__ import annotations

import numpy as np
import pytest

from dynbatch import DatasetForDBL, Pad, Stack, Tuple, get_dynamic_batch_loader
from dynbatch.paddle.compat import as_published


def study_data(n: int = 400, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    return [
        (rng.integers(1, 100, int(k)).astype("int64"), np.int64(i))
        for i, k in enumerate(rng.integers(2, 256, n))
    ]


@pytest.mark.parametrize("uprank", [None, True, False])
@pytest.mark.parametrize("shuffle", [False, True])
def test_batches_follow_the_stated_formula(uprank: bool | None, shuffle: bool) -> None:
    data, controller = study_data(), 5000 * 20
    ds = DatasetForDBL(data, controller, uprank=uprank, shuffle=shuffle)
    seen = []
    for i in range(len(ds)):
        batch = ds[i]
        longest = max(s[0].size for s in batch)
        assert len(batch) * longest**2 <= controller or len(batch) == 1, "n * L**2 <= controller"
        seen.extend(int(s[1]) for s in batch)
    assert sorted(seen) == list(range(len(data))), "every sample once"
    if uprank is not None and not shuffle:
        longest = [max(s[0].size for s in ds[i]) for i in range(len(ds))]
        assert longest == sorted(longest, reverse=not uprank), "sorted as uprank says"


def test_the_published_code_applied_a_linear_budget_and_overflowed() -> None:
    data, controller = study_data(), 5000  # the study's own setting, lengths 2..255
    lens = [s[0].size for s in sorted(data, key=lambda s: s[0].size)]
    published = as_published(lens, controller)
    over = [b for b in published if len(b) * max(lens[i] for i in b) ** 2 > controller]
    assert over, "the study's code broke its own n * L**2 rule"
    assert all(len(b) <= controller // max(lens[i] for i in b) + 1 for b in published), "n*L, +1"
    assert any(len(b) > controller // max(lens[i] for i in b) for b in published), "one over"
    ours = DatasetForDBL(data, controller, uprank=True)
    assert len(ours) > len(published), "the stated rule makes more, smaller batches"


def test_oversize_samples_get_a_batch_of_their_own() -> None:
    data = [(np.ones(k, "int64"), 0) for k in (10, 300, 12)]
    ds = DatasetForDBL(data, 200**2, uprank=True)
    assert sorted(len(ds[i]) for i in range(len(ds))) == [1, 2]


def test_loader_runs_like_the_notebook() -> None:
    collate = lambda samples, fn=Tuple(Pad(pad_val=0, axis=0), Stack()): list(fn(samples))  # noqa: E731, B008
    loader = get_dynamic_batch_loader(study_data(60), 20 * 64**2, collate, uprank=True)
    sizes = [x.shape[0] for x, _ in loader]
    assert sum(sizes) == 60


def test_uprank_must_be_none_or_bool() -> None:
    with pytest.raises(ValueError, match="uprank must be None, True or False"):
        DatasetForDBL(study_data(5), 1e6, uprank="up")  # type: ignore[arg-type]


def test_shuffled_loader_gives_new_batches_each_pass_unless_asked_not_to() -> None:
    def collate(samples: list) -> list:
        return [np.array([int(s[1]) for s in samples])]

    def batches(loader) -> list:  # type: ignore[no-untyped-def]
        return [tuple(b[0].numpy().tolist()) for b in loader]

    for uprank in (None, True):
        loader = get_dynamic_batch_loader(
            study_data(200), 20 * 64**2, collate, uprank, shuffle=True
        )
        passes = [batches(loader) for _ in range(3)]
        assert passes[0] != passes[1] != passes[2], "fresh batches every pass"
        for p in passes:
            assert sorted(i for b in p for i in b) == list(range(200)), "every sample once"
        study = get_dynamic_batch_loader(
            study_data(200), 20 * 64**2, collate, uprank, shuffle=True, fresh_each_pass=False
        )
        assert batches(study) == batches(study), "the study's behaviour"


def test_set_epoch_replans() -> None:
    ds = DatasetForDBL(study_data(100), 20 * 64**2, shuffle=True)
    first = [list(ds.batches[i]) for i in range(len(ds))]
    ds.set_epoch(1)
    assert [list(ds.batches[i]) for i in range(len(ds))] != first
    ds.set_epoch(0)
    assert [list(ds.batches[i]) for i in range(len(ds))] == [list(b) for b in first]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            (lambda: study_data(5), 0),
            "controller must be a positive finite number, got controller=0",
        ),
        ((lambda: [], 1e6), "data is empty"),
    ],
)
def test_errors_name_the_studys_arguments(args: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DatasetForDBL(args[0](), args[1])
