"""The samplers with the real paddle.io.DataLoader, hapi's Model.fit, and resume."""

from __future__ import annotations

import numpy as np
import paddle
import pytest

import dynbatch
from dynbatch import DistributedDynamicBatchSampler, DynamicBatchSampler, Pad, Stack, Tuple


class Reviews(paddle.io.Dataset):  # type: ignore[misc]
    """Token ids whose label is the sample's own index, so batches can be traced back."""

    def __init__(self, n: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.lengths = np.minimum(np.ceil(rng.lognormal(3.0, 0.9, n)), 200).astype(np.int64)
        self.samples = [
            (rng.integers(1, 1000, k).astype("int64"), np.int64(i))
            for i, k in enumerate(self.lengths)
        ]

    def __getitem__(self, i: int):  # type: ignore[no-untyped-def]
        return self.samples[i]

    def __len__(self) -> int:
        return len(self.samples)


@pytest.fixture(scope="module")
def ds() -> Reviews:
    return Reviews(301)


def collate() -> Tuple:
    return Tuple(Pad(pad_val=0), Stack())


@pytest.mark.parametrize("workers", [0, 2])
def test_dataloader_yields_the_planned_batches_padded(ds: Reviews, workers: int) -> None:
    sampler = DynamicBatchSampler(ds, ref_index=0, max_cost=8 * 100**2, seed=1)
    loader = paddle.io.DataLoader(
        ds, batch_sampler=sampler, num_workers=workers, collate_fn=collate()
    )
    planned = sampler.batches()
    assert len(loader) == len(sampler) == len(planned), "len() exact before iterating"
    seen = []
    for (ids, labels), batch in zip(loader, planned, strict=True):
        assert labels.numpy().tolist() == batch.tolist(), "the planned samples, in order"
        assert ids.shape == [batch.size, int(ds.lengths[batch].max())], "padded to the longest"
        seen.extend(labels.numpy().tolist())
    assert sorted(seen) == list(range(len(ds))), "every sample once"


def test_persistent_workers_follow_set_epoch(ds: Reviews) -> None:
    sampler = DynamicBatchSampler(ds, lengths=ds.lengths, max_cost=8 * 100**2)
    loader = paddle.io.DataLoader(
        ds, batch_sampler=sampler, num_workers=2, persistent_workers=True, collate_fn=collate()
    )
    epochs = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        got = [labels.numpy().tolist() for _, labels in loader]
        assert got == [b.tolist() for b in sampler.batches(epoch)], f"epoch {epoch} as planned"
        epochs.append(got)
    assert epochs[0] != epochs[1], "a new epoch, new batches"


def test_model_fit_consumes_every_batch(ds: Reviews) -> None:
    paddle.seed(0)
    sampler = DynamicBatchSampler(ds, lengths=ds.lengths, max_cost=8 * 100**2)
    loader = paddle.io.DataLoader(ds, batch_sampler=sampler, collate_fn=collate())

    class Bag(paddle.nn.Layer):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.emb = paddle.nn.Embedding(1000, 8)
            self.out = paddle.nn.Linear(8, 2)

        def forward(self, ids):  # type: ignore[no-untyped-def]
            return self.out(self.emb(ids).mean(axis=1))

    net = Bag()
    model = paddle.Model(net)
    model.prepare(
        paddle.optimizer.SGD(0.1, parameters=net.parameters()),
        lambda logits, label: paddle.nn.functional.cross_entropy(logits, label % 2),
    )
    steps = []

    class Count(paddle.callbacks.Callback):  # type: ignore[misc]
        def on_train_batch_end(self, step, logs=None):  # type: ignore[no-untyped-def]
            steps.append(step)

    model.fit(loader, epochs=1, verbose=0, callbacks=[Count()])
    assert len(steps) == len(sampler)


def test_resume_mid_epoch_yields_exactly_the_rest(ds: Reviews) -> None:
    sampler = DynamicBatchSampler(ds, lengths=ds.lengths, max_cost=8 * 100**2, seed=5)
    sampler.set_epoch(3)
    it = iter(sampler)
    done = [next(it) for _ in range(4)]
    next(it)  # prefetched by a loader but never trained on
    state = sampler.state_dict(consumed_batches=4)
    fresh = DynamicBatchSampler(ds, lengths=ds.lengths, max_cost=8 * 100**2, seed=5)
    fresh.load_state_dict(state)
    fresh.set_epoch(3)  # the usual loop calls it again: the position is kept
    assert len(fresh) == len(sampler.batches(3)) - 4, "len() counts what is left"
    rest = list(fresh)
    assert len(rest) == len(sampler.batches(3)) - 4
    assert done + rest == [b.tolist() for b in sampler.batches(3)], "none lost, none repeated"
    fresh.set_epoch(4)
    assert len(fresh) == len(fresh.batches(4)), "the next epoch starts from the beginning"


def test_resume_state_from_other_options_is_refused(ds: Reviews) -> None:
    state = DynamicBatchSampler(ds, lengths=ds.lengths, max_cost=8 * 100**2, seed=5).state_dict()
    other = DynamicBatchSampler(ds, lengths=ds.lengths, max_cost=8 * 100**2, seed=6)
    with pytest.raises(ValueError, match="different lengths or options"):
        other.load_state_dict(state)
    with pytest.raises(ValueError, match="missing keys"):
        other.load_state_dict({"epoch": 0})
    with pytest.raises(ValueError, match=r"consumed_batches must be in \[0, "):
        other.state_dict(consumed_batches=10**6)


def test_distributed_shares_cover_the_data_with_equal_counts(ds: Reviews) -> None:
    shares = [
        DistributedDynamicBatchSampler(
            ds, lengths=ds.lengths, max_cost=8 * 100**2, num_replicas=3, rank=r
        )
        for r in range(3)
    ]
    for s in shares:
        s.set_epoch(2)
    assert len({len(s) for s in shares}) == 1, "equal batch counts"
    flat = np.concatenate([np.concatenate(s.batches()) for s in shares])
    assert np.array_equal(np.sort(flat), np.arange(len(ds))), "every index exactly once"
    assert isinstance(shares[0], paddle.io.DistributedBatchSampler)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"lengths": np.ones(5, int)}, ValueError, "lengths has 5 entries but the dataset has 301"),
        ({}, ValueError, "does not say how long"),
        ({"lengths": np.ones(301, int), "length_fn": len}, ValueError, "not both"),
        ({"ref_index": 1}, TypeError, r"ref_index=1 has no size"),
        ({"ref_index": 0, "max_cost": True}, ValueError, "max_cost=True"),
        ({"ref_index": 0, "order": "random"}, ValueError, "order='random'"),
    ],
)
def test_bad_input(ds: Reviews, kwargs: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        DynamicBatchSampler(ds, **{"max_cost": 8 * 100**2, **kwargs})


def test_distributed_rank_out_of_range(ds: Reviews) -> None:
    with pytest.raises(ValueError, match=r"rank must be in \[0, 1\], got rank=2"):
        DistributedDynamicBatchSampler(ds, lengths=ds.lengths, max_cost=1e6, num_replicas=2, rank=2)


def test_lazy_names_resolve() -> None:
    assert dynbatch.DynamicBatchSampler is DynamicBatchSampler
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        dynbatch.Nope  # noqa: B018
