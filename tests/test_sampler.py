"""The samplers with the real paddle.io.DataLoader, hapi's Model.fit, and resume."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import paddle
import pytest
from deadline import within

import dynbatch
from dynbatch import DistributedDynamicBatchSampler, DynamicBatchSampler, Pad, Stack, Tuple
from dynbatch.plan.costs import PairCost


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
    with pytest.raises(ValueError, match="saved with other options"):
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


def test_lazy_names_resolve_to_the_adapter_classes_on_first_use() -> None:
    code = (
        "import sys, dynbatch\n"
        "assert 'dynbatch.paddle.sampler' not in sys.modules, 'not imported by import dynbatch'\n"
        "cls = dynbatch.DynamicBatchSampler\n"
        "import dynbatch.paddle.sampler as m\n"
        "assert cls is m.DynamicBatchSampler and dynbatch.DistributedDynamicBatchSampler is "
        "m.DistributedDynamicBatchSampler\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        dynbatch.Nope  # noqa: B018


# -- resume: the fingerprint decides by the plan, and a failed load changes nothing ----------------
def test_a_state_from_another_cost_function_is_refused(ds: Reviews) -> None:
    base = {"lengths": ds.lengths, "max_cost": 8 * 100**2, "seed": 5}
    saved = DynamicBatchSampler(ds, cost=lambda n, L: n * L * L, **base)
    saved.set_epoch(2)
    state = saved.state_dict(consumed_batches=3)
    other = DynamicBatchSampler(ds, cost=lambda n, L: 2.0 * n * L * L, **base)
    with pytest.raises(ValueError, match="another plan of epoch 2"):
        other.load_state_dict(state)
    same = DynamicBatchSampler(ds, cost=lambda n, L: n * L * L, **base)
    same.load_state_dict(state)
    assert same.epoch == 2 and len(same) == len(saved.batches(2)) - 3


def test_equal_options_spelled_differently_load(ds: Reviews) -> None:
    state = DynamicBatchSampler(ds, lengths=ds.lengths, max_cost=1048576, seed=5).state_dict()
    DynamicBatchSampler(
        ds, lengths=ds.lengths, max_cost=1048576.0, seed=np.int64(5)
    ).load_state_dict(state)


def test_a_refused_state_changes_nothing(ds: Reviews) -> None:
    sampler = DynamicBatchSampler(ds, lengths=ds.lengths, max_cost=8 * 100**2)
    state = sampler.state_dict()
    for bad in (
        {**state, "epoch": 4, "position": 10**6},
        {**state, "epoch": 4, "position": -1},
        {**state, "epoch": 4, "num_replicas": 2},
    ):
        with pytest.raises(ValueError):
            sampler.load_state_dict(bad)
        assert sampler.epoch == 0 and len(sampler) == len(sampler.batches(0)), "untouched"


@pytest.mark.parametrize("state", [None, 3, [1, 2], "state"])
def test_a_state_that_is_not_a_dict_is_named(ds: Reviews, state: object) -> None:
    sampler = DynamicBatchSampler(ds, lengths=ds.lengths, max_cost=8 * 100**2)
    with pytest.raises(TypeError, match="state must be the dict that state_dict"):
        sampler.load_state_dict(state)  # type: ignore[arg-type]


def test_a_cap_added_or_removed_is_named(ds: Reviews) -> None:
    state = DynamicBatchSampler(ds, lengths=ds.lengths, max_cost=8 * 100**2).state_dict()
    capped = DynamicBatchSampler(ds, lengths=ds.lengths, max_cost=8 * 100**2, max_batch_size=4)
    with pytest.raises(ValueError, match="max_batch_size: saved None, here 4"):
        capped.load_state_dict(state)


def test_the_error_names_the_option_that_differs(ds: Reviews) -> None:
    state = DynamicBatchSampler(ds, lengths=ds.lengths, max_cost=8 * 100**2, seed=5).state_dict()
    other = DynamicBatchSampler(ds, lengths=ds.lengths, max_cost=8 * 100**2, seed=6)
    with pytest.raises(ValueError, match="seed: saved 5, here 6"):
        other.load_state_dict(state)


# -- step counts over a run ------------------------------------------------------------------------
@pytest.mark.parametrize("replicas", [1, 3])
def test_len_for_epochs_is_what_iteration_yields(ds: Reviews, replicas: int) -> None:
    samplers = [
        DistributedDynamicBatchSampler(
            ds,
            lengths=ds.lengths,
            max_cost=4 * 200**2,
            order="shuffle",
            num_replicas=replicas,
            rank=r,
        )
        for r in range(replicas)
    ]
    for s in samplers:
        announced = s.len_for_epochs(range(6))
        yielded, per_epoch = 0, []
        for epoch in range(6):
            s.set_epoch(epoch)
            n = sum(1 for _ in s)
            yielded += n
            per_epoch.append(n)
        assert yielded == announced
        assert len(set(per_epoch)) > 1, "the count varies by epoch without equal_epochs"


def test_equal_epochs_fix_len(ds: Reviews) -> None:
    sampler = DynamicBatchSampler(
        ds, lengths=ds.lengths, max_cost=4 * 200**2, order="shuffle", equal_epochs=True
    )
    lens = set()
    for epoch in range(8):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        lens.add(len(batches))
        assert sorted(i for b in batches for i in b) == list(range(len(ds))), "each sample once"
    assert lens == {len(sampler)}, "the same count every epoch"


# -- a new epoch each pass, and the fixed batch's recipe ----------------------------------------
def passes(sampler: DynamicBatchSampler, k: int) -> list[list[list[int]]]:
    return [[list(b) for b in sampler] for _ in range(k)]


def test_passes_without_set_epoch_plan_new_epochs(ds: Reviews) -> None:
    """Like paddle.io.BatchSampler(shuffle=True): a new order each pass, unasked."""
    sampler = DynamicBatchSampler(ds, lengths=ds.lengths, max_cost=8 * 100**2, seed=4)
    expected = [[b.tolist() for b in sampler.batches(e)] for e in range(3)]
    lens = [len(sampler)]
    got = []
    for _ in range(3):
        got.append([list(b) for b in sampler])
        lens.append(len(sampler))
    assert got == expected, "pass k plans epoch k"
    assert expected[0] != expected[1], "and the epochs differ"
    assert lens[:3] == [len(e) for e in expected], "len() is the next pass's"
    assert sampler.current_pass().epoch == 2
    sampler.set_epoch(0)
    assert passes(sampler, 2) == [expected[0], expected[0]], "set_epoch wins, from then on"


def test_a_checkpoint_after_an_unasked_pass_resumes_at_the_next_epoch(ds: Reviews) -> None:
    sampler = DynamicBatchSampler(ds, lengths=ds.lengths, max_cost=8 * 100**2, seed=4)
    for _ in sampler:
        pass
    state = sampler.state_dict()
    assert (state["epoch"], state["position"]) == (1, 0)
    fresh = DynamicBatchSampler(ds, lengths=ds.lengths, max_cost=8 * 100**2, seed=4)
    fresh.load_state_dict(state)
    assert passes(fresh, 2) == [
        [b.tolist() for b in sampler.batches(1)],
        [b.tolist() for b in sampler.batches(2)],
    ]
    mid = DynamicBatchSampler(ds, lengths=ds.lengths, max_cost=8 * 100**2, seed=4)
    mid.load_state_dict(sampler.state_dict(consumed_batches=3))  # the pass's epoch, 3 in
    assert [list(b) for b in mid] == [b.tolist() for b in sampler.batches(0)[3:]]


@pytest.mark.parametrize("replicas", [1, 3])
def test_batch_size_plans_like_the_fixed_batch(ds: Reviews, replicas: int) -> None:
    sampler = DistributedDynamicBatchSampler(
        ds, lengths=ds.lengths, batch_size=16, num_replicas=replicas, rank=0, seed=2
    )
    assert sampler.options == dynbatch.like_fixed(ds.lengths, 16, num_replicas=replicas, seed=2)
    assert sampler.options.update_size == 16 * replicas
    steps = sampler.steps_for_epochs(range(3))
    assert abs(steps - 3 * len(ds) / (16 * replicas)) <= 3, "the fixed batch's updates"
    assert sampler.len_for_epochs(range(3)) > steps, "several micro-batches an update"
    single = DynamicBatchSampler(ds, lengths=ds.lengths, batch_size=16, max_cost=8 * 100**2)
    assert single.options.max_cost == 8 * 100**2, "max_cost: the micro-batches' budget"
    with pytest.raises(dynbatch.InputError, match=r"batch_size .* or options"):
        DynamicBatchSampler(ds, lengths=ds.lengths, batch_size=16, options=sampler.options)
    with pytest.raises(dynbatch.InputError, match="batch_size"):
        DynamicBatchSampler(ds, lengths=ds.lengths, batch_size=0)
    with pytest.raises(dynbatch.InputTypeError, match="DistributedDynamicBatchSampler"):
        DynamicBatchSampler(ds, lengths=ds.lengths, batch_size=8, num_replicas=2)


def test_len_during_an_unasked_pass_is_that_pass(ds: Reviews) -> None:
    sampler = DynamicBatchSampler(ds, lengths=ds.lengths, max_cost=8 * 100**2, seed=4)
    for _ in range(2):
        it = iter(sampler)
        first = len(sampler)
        seen = [next(it)]
        assert len(sampler) == first, "the pass under way, not the next epoch"
        seen.extend(it)
        assert len(seen) == first


def test_drop_last_leaving_no_batch_under_equal_epochs_is_refused_at_construction() -> None:
    with within(20), pytest.raises(dynbatch.InputError, match=r"drop_last=True leaves no batch"):
        DynamicBatchSampler(
            lengths=[2, 2, 5, 4], max_cost=100, cost="linear", drop_last=True, equal_epochs=True
        )


@pytest.mark.parametrize(
    ("lens", "max_cost", "seed", "replicas"),
    [([2, 7, 7, 1], 13, 1, 1), ([2, 6, 9, 2, 8], 15, 11, 2)],
    ids=["one-rank", "two-ranks"],
)
def test_equal_epochs_with_drop_last_yield_each_sample_at_most_once(
    lens: list[int], max_cost: float, seed: int, replicas: int
) -> None:
    samplers = [
        DistributedDynamicBatchSampler(
            lengths=lens,
            max_cost=max_cost,
            cost="linear",
            order="shuffle",
            seed=seed,
            drop_last=True,
            equal_epochs=True,
            num_replicas=replicas,
            rank=r,
        )
        for r in range(replicas)
    ]
    for epoch in range(10):
        seen: list[int] = []
        for s in samplers:
            s.set_epoch(epoch)
            batches = list(s)
            assert len(batches) == len(s), "len() is what iteration yields"
            assert not s.padding_mask().any(), "no repeat, not even one weighed 0"
            seen += [i for b in batches for i in b]
        assert len(seen) == len(set(seen)), f"epoch {epoch}: a sample twice, {seen}"


@pytest.mark.parametrize("replicas", [1, 3])
@pytest.mark.parametrize("auto", [False, True], ids=["set_epoch", "unasked"])
def test_a_resumed_sampler_yields_what_an_uninterrupted_one_does(
    ds: Reviews, replicas: int, auto: bool
) -> None:
    from test_epochs import expected, run

    for rank in range(replicas):

        def make(rank: int = rank) -> DistributedDynamicBatchSampler:
            return DistributedDynamicBatchSampler(
                ds, lengths=ds.lengths, max_cost=8e4, seed=3, num_replicas=replicas, rank=rank
            )

        full, _ = run(make, iter, 3, auto)
        for cut in ((0, 2), (1, len(full[1][1]))):
            for consumed in (True, False):
                _, after = run(make, iter, 3, auto, cut, consumed)
                want = expected(full, cut, 3)
                if auto:  # one pass per epoch left: no empty pass first, the last is extra
                    assert after[: len(want)] == want, f"rank {rank}, cut at {cut}"
                else:
                    assert [p for p in after if p[1]] == want, f"rank {rank}, cut at {cut}"


def test_the_samplers_run_paddles_init(ds: Reviews) -> None:
    single = DynamicBatchSampler(lengths=ds.lengths, max_cost=8 * 100**2, max_batch_size=16)
    assert (single.max_batch_size, single.drop_last, single.shuffle) == (16, False, True)
    assert single.batch_size is None, "a budget, not a fixed batch (NOTE [ batch_size, read back ])"
    assert single.dataset is None and single.epoch == 0
    shared = DistributedDynamicBatchSampler(
        ds, lengths=ds.lengths, max_cost=8 * 100**2, order="ascending", num_replicas=3, rank=2
    )
    assert (shared.nranks, shared.local_rank, shared.shuffle) == (3, 2, False)
    assert shared.dataset is ds and shared.num_samples == -(-len(ds) // 3)
    shared.set_epoch(4)
    assert shared.epoch == 4 and shared.current_pass().epoch == 4


@pytest.mark.parametrize("distributed", [False, True])
def test_batch_size_reads_back_the_fixed_batch_and_max_batch_size_the_cap(
    ds: Reviews, distributed: bool
) -> None:
    def make(**kwargs: object) -> DynamicBatchSampler:
        if distributed:
            return DistributedDynamicBatchSampler(ds, num_replicas=2, rank=1, **kwargs)
        return DynamicBatchSampler(ds, **kwargs)

    told = make(lengths=ds.lengths, batch_size=np.int64(32))
    assert told.batch_size == 32 and type(told.batch_size) is int, "the fixed batch, per rank"
    assert told.max_batch_size == told.options.max_batch_size == 8, "micro-batches are capped"
    budget = make(lengths=ds.lengths, max_cost=8 * 100**2)
    assert budget.batch_size is None and budget.max_batch_size is None, "no fixed batch, no cap"
    capped = make(lengths=ds.lengths, max_cost=8 * 100**2, max_batch_size=16)
    assert capped.batch_size is None and capped.max_batch_size == 16
    from_options = make(lengths=ds.lengths, options=told.options)
    assert from_options.batch_size is None and from_options.max_batch_size == 8

    # paddle's DataLoader given batch_sampler= ignores batch_size: the plan's batches come out
    loader = paddle.io.DataLoader(ds, batch_sampler=told, collate_fn=collate())
    sizes = [int(labels.shape[0]) for _, labels in loader]
    assert sizes == [b.size for b in told.batches()] and max(sizes) <= 8 < told.batch_size


# -- (source, target) pairs (NOTE [ lengths of pairs ]) -------------------------------------------
class Translations(paddle.io.Dataset):  # type: ignore[misc]
    """Source and target token ids whose label is the sample's own index."""

    def __init__(self, n: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        z = rng.standard_normal((n, 2))
        z[:, 1] = 0.7 * z[:, 0] + np.sqrt(1 - 0.49) * z[:, 1]
        self.pairs = np.clip(np.ceil(np.exp(3.0 + 0.7 * z)), 1, 200).astype(np.int64)
        self.samples = [
            (np.ones(s, "int64"), np.ones(t, "int64"), np.int64(i))
            for i, (s, t) in enumerate(self.pairs)
        ]

    def __getitem__(self, i: int):  # type: ignore[no-untyped-def]
        return self.samples[i]

    def __len__(self) -> int:
        return len(self.samples)


@pytest.mark.parametrize("replicas", [1, 2])
def test_pairs_on_ranks_keep_equal_steps_each_pair_once_and_resume_exactly(
    replicas: int,
) -> None:
    data = Translations(301)
    ranks = [
        DistributedDynamicBatchSampler(
            data,
            length_fn=lambda s: (len(s[0]), len(s[1])),
            num_replicas=replicas,
            rank=r,
            batch_size=8,
            seed=3,
        )
        for r in range(replicas)
    ]
    assert np.array_equal(ranks[0].lengths, data.pairs), "length_fn's pairs"
    for epoch in range(2):
        for s in ranks:
            s.set_epoch(epoch)
        shares = [list(s) for s in ranks]
        assert len({len(share) for share in shares}) == 1, "equal steps on every rank"
        flat = sorted(i for share in shares for batch in share for i in batch)
        assert flat == list(range(len(data))), "every pair exactly once an epoch"
        worst = float(PairCost()(8, *data.pairs.max(axis=0)))
        for batch in (b for share in shares for b in share):
            longest = data.pairs[batch].max(axis=0)
            assert float(PairCost()(len(batch), *longest)) <= worst
    assert ranks[0].steps_for_epochs(range(2)) == 2 * -(-len(data) // (8 * replicas))
    for k in (0, 3, len(shares[0])):
        state = ranks[0].state_dict(consumed_batches=k)
        fresh = [
            DistributedDynamicBatchSampler(
                lengths=data.pairs, num_replicas=replicas, rank=r, batch_size=8, seed=3
            )
            for r in range(replicas)
        ]
        for s in fresh:
            s.load_state_dict(state)
            s.set_epoch(1)
        assert [list(s) for s in fresh] == [share[k:] for share in shares], "exactly the rest"


def test_a_state_of_pairs_does_not_load_into_a_sampler_of_one_length() -> None:
    data = Translations(60)
    state = DynamicBatchSampler(lengths=data.pairs, batch_size=4).state_dict()
    other = DynamicBatchSampler(lengths=data.pairs.reshape(-1), batch_size=4)
    with pytest.raises(ValueError, match="saved for different lengths"):
        other.load_state_dict(state)


def test_a_loader_of_pairs_pads_both_sides_to_the_batch() -> None:
    data = Translations(64)
    sampler = DynamicBatchSampler(data, lengths=data.pairs, batch_size=8)
    loader = paddle.io.DataLoader(
        data, batch_sampler=sampler, collate_fn=Tuple(Pad(), Pad(), Stack())
    )
    for source, target, index in loader:
        longest = data.pairs[index.numpy()].max(axis=0)
        assert source.shape[1] == longest[0] and target.shape[1] == longest[1]
