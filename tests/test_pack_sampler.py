"""``pack_len=`` as a planning option: the samplers yield packed micro-batches.

Every promise of the samplers holds for packed micro-batches too (NOTE [ packed updates ] in
``dynbatch.plan.packs.epochs``): the fixed batch's updates, the collator's rows the plan's
(``packed_rows``, as wide as the fullest), exactly once, equal steps across ranks, exact step
counts, determinism, resume."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import paddle
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import lengths as lengths_strategy

import dynbatch
from dynbatch import DistributedDynamicBatchSampler, DynamicBatchSampler, PackCollator
from dynbatch.plan.epochs import plan_epoch
from dynbatch.plan.packs.layout import packed_rows
from dynbatch.plan.splits import shuffled


def rows_of(lens: np.ndarray, pack_len: int) -> np.ndarray:
    """A micro-batch's row offsets as the collator builds them."""
    return packed_rows(lens, pack_len)[0]


def lognormal(n: int, cap: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.minimum(np.ceil(rng.lognormal(4.0, 0.8, n)), cap).astype(np.int64)


def dataset(lens: np.ndarray) -> list[dict[str, list[int]]]:
    """Samples whose ids are their own index, so rows can be traced back."""
    return [{"input_ids": [i + 1] * int(k)} for i, k in enumerate(lens)]


def rank_samplers(lens: np.ndarray, replicas: int, **kw: Any) -> list[Any]:
    return [
        DistributedDynamicBatchSampler(
            dataset(lens), lengths=lens, num_replicas=replicas, rank=r, **kw
        )
        for r in range(replicas)
    ]


def real_samples(passes: list[list[list[int]]], pads: list[np.ndarray]) -> list[int]:
    """Every rank's samples but those of micro-batches flagged as padding."""
    out = []
    for batches, mask in zip(passes, pads, strict=True):
        for batch, is_pad in zip(batches, mask, strict=True):
            out += [] if is_pad else batch
    return out


def test_sampler_yields_lists_of_indices_the_collator_packs_as_planned() -> None:
    lens = lognormal(400, 256)
    ds = dataset(lens)
    sampler = DynamicBatchSampler(ds, lengths=lens, batch_size=16, pack_len=256, seed=3)
    collate = PackCollator(pack_len=256)
    rows_cap = sampler.options.max_rows
    seen: list[int] = []
    for batch in sampler:
        assert isinstance(batch, list) and all(isinstance(i, int) for i in batch), "lists of ints"
        out = collate([ds[i] for i in batch])
        planned, width = packed_rows(lens[batch], 256)
        tokens = np.add.reduceat(lens[batch], planned[:-1])
        assert width == tokens.max() <= 256, "as wide as the fullest row, at most pack_len"
        assert out["input_ids"].shape == (planned.size - 1, width), "the plan's rows, [R, P]"
        assert planned.size - 1 <= rows_cap, "rows within max_rows"
        for r in range(planned.size - 1):
            members = batch[planned[r] : planned[r + 1]]
            ids = out["input_ids"][r]
            assert sorted(set(ids[ids > 0].tolist())) == sorted(i + 1 for i in members), "row"
        seen += batch
    assert sorted(seen) == list(range(lens.size)), "every sample exactly once"
    fixed_updates = -(-lens.size // 16)
    assert sampler.steps_for_epochs([0]) == fixed_updates, "the fixed batch's update count"
    plan = sampler.epoch_plan(0)
    bounds = plan.plan.offsets[np.r_[0, plan.window_ends]]
    sizes = np.diff(bounds).tolist()
    assert sizes == [16] * (fixed_updates - 1) + [lens.size - 16 * (fixed_updates - 1)], (
        "every update the fixed batch's 16 samples, the last the rest"
    )


def test_packing_fills_rows_and_keeps_the_micro_batch_within_the_fixed_batch_worst() -> None:
    lens = lognormal(3000, 512, seed=1)
    opts = dynbatch.like_fixed(lens, batch_size=32, pack_len=512)
    sp = plan_epoch(lens, opts, 0)
    tokens, computed = 0, 0
    for batch in sp.plan:
        offs, width = packed_rows(lens[batch], 512)
        computed += (offs.size - 1) * width
        tokens += int(lens[batch].sum())
        assert float(opts.cost(offs.size - 1, width)) <= opts.max_cost, "the budget"
    assert tokens / computed >= 0.95, "rows are filled: tokens over rows x their width"
    assert opts.max_rows == 32 * int(lens.max()) // 512, "linear cost: B * L_max / pack_len rows"


@pytest.mark.parametrize("pack_len", [None, 256])
def test_fewer_samples_than_the_fixed_batch_are_budgeted_as_the_batch_it_runs(
    pack_len: int | None,
) -> None:
    """With N < B the fixed batch runs N samples, never B: a budget of B of the longest let
    packed rows (or padded micro-batches) need more memory than the fixed batch ever did."""
    lens = np.array([100, 60, 30, 20, 10])
    opts = dynbatch.like_fixed(lens, batch_size=16, pack_len=pack_len)
    assert opts.max_cost == pytest.approx(5 * 100), "cost(N, L_max), the linear cost"
    assert opts.update_size == 16, "an update is still the fixed batch's"
    assert dynbatch.like_fixed(np.r_[lens, lens, lens, lens], batch_size=16).max_cost == 1600


@settings(max_examples=40, deadline=None)
@given(
    lens=lengths_strategy(max_size=200, max_len=300),
    batch_size=st.integers(1, 12),
    slack=st.integers(0, 200),
    replicas=st.integers(1, 4),
    oversize=st.sampled_from(["error", "skip", "alone"]),
    unit=st.sampled_from(["samples", "tokens"]),
    max_batch_size=st.none() | st.integers(1, 4),
    seed=st.integers(0, 2**31),
    epoch=st.integers(0, 20),
)
def test_every_packed_plan_keeps_every_promise(
    lens: np.ndarray,
    batch_size: int,
    slack: int,
    replicas: int,
    oversize: str,
    unit: str,
    max_batch_size: int | None,
    seed: int,
    epoch: int,
) -> None:
    longest = int(lens.max())
    pack_len = longest + slack if oversize == "error" else max(1, int(np.median(lens)) + slack)
    if oversize == "skip" and not (lens <= pack_len).any():
        pack_len = longest
    fields: dict[str, Any] = {"pack_len": pack_len, "oversize": oversize, "seed": seed}
    if max_batch_size is not None:
        fields["max_batch_size"] = max_batch_size
    if pack_len > min(batch_size, lens.size) * longest:  # over the fixed batch's worst: refused
        with pytest.raises(dynbatch.InputError, match=rf"pack_len={pack_len} .*max_cost="):
            dynbatch.like_fixed(lens, batch_size=batch_size, num_replicas=replicas, **fields)
        fields["max_cost"] = pack_len  # allowed, as asked
    opts = dynbatch.like_fixed(
        lens, batch_size=batch_size, num_replicas=replicas, update_unit=unit, **fields
    )
    sp = plan_epoch(lens, opts, epoch, replicas)
    over = lens > pack_len
    kept = np.flatnonzero(~over) if oversize == "skip" else np.arange(lens.size)
    real = sp.plan.take(np.flatnonzero(~sp.is_padding))
    assert np.array_equal(np.sort(real.indices), kept), "exactly once (skipped: oversize)"
    assert sp.order.size % replicas == 0, "equal steps across ranks"
    ends = sp.window_ends
    assert ends is not None and ends[-1] == sp.num_steps and np.all(np.diff(ends) > 0)
    for batch in sp.plan:
        offs, width = rows_of(lens[batch], pack_len), packed_rows(lens[batch], pack_len)[1]
        assert offs.size - 1 <= opts.max_rows, "rows within max_rows"
        assert width <= max(pack_len, int(lens[batch].max())), "no row wider than pack_len"
        assert float(opts.cost(offs.size - 1, width)) <= opts.max_cost, "the budget, as built"
        for a, b in itertools.pairwise(offs.tolist()):
            row = lens[batch[a:b]]
            assert row.sum() <= pack_len or (row.size == 1 and row[0] > pack_len), "row budget"
        if over[batch].any():
            assert batch.size == 1, "an oversize sample alone"
    again = plan_epoch(lens, opts, epoch, replicas)
    assert again.digest() == sp.digest(), "deterministic by (seed, epoch)"
    size = int(opts.update_size)
    expected = -(-kept.size // (size if unit == "samples" else batch_size * replicas))
    if unit == "samples":
        assert ends.size == expected, "the fixed batch's update count"
    else:  # cut where the tokens pass each k / U: a long sample may pass two (mixed updates)
        assert ends.size <= expected, "never more updates than the fixed batch's"
    bounds = np.r_[0, ends] * replicas
    drawn = shuffled(kept, seed, epoch)
    for u in range(ends.size):
        micro = np.arange(bounds[u], bounds[u + 1])
        real_u = sp.plan.take(micro[~sp.is_padding[micro]]).indices
        assert real_u.size == np.unique(real_u).size, "an update's samples once"
        if sp.is_padding[micro].any():
            assert real_u.size < micro.size, "a row repeats only where samples are too few"
        if unit == "samples":
            fixed = drawn[u * size : (u + 1) * size]
            assert np.array_equal(np.sort(real_u), np.sort(fixed)), "the fixed batch's update"


@pytest.mark.parametrize("replicas", [1, 2, 3, 4])
def test_ranks_take_equal_steps_and_step_counts_are_exact(replicas: int) -> None:
    lens = lognormal(250, 200, seed=replicas)
    samplers = rank_samplers(lens, replicas, batch_size=8, pack_len=200, seed=5)
    for epoch in (0, 1):
        for s in samplers:
            s.set_epoch(epoch)
        passes = [list(s) for s in samplers]
        assert len({len(p) for p in passes}) == 1, "equal steps on every rank"
        assert all(len(p) == len(s) for p, s in zip(passes, samplers, strict=True)), "len()"
        pads = [s.padding_mask(epoch) for s in samplers]
        real = sorted(
            i
            for p, m in zip(passes, pads, strict=True)
            for b, f in zip(p, m, strict=True)
            if not f
            for i in b
        )
        assert real == list(range(lens.size)), "exactly once over the ranks"
    counted = samplers[0].steps_for_epochs(range(2))
    windows = [samplers[0].epoch_plan(e).window_ends for e in range(2)]
    assert counted == sum(w.size for w in windows), "steps_for_epochs: the planned updates"
    fixed = -(-lens.size // (8 * replicas))
    assert counted == 2 * fixed, "the fixed batch's update count"


def test_other_seed_or_epoch_packs_other_rows() -> None:
    lens = lognormal(300, 200)
    a = DynamicBatchSampler(lengths=lens, batch_size=8, pack_len=200, seed=1)
    b = DynamicBatchSampler(lengths=lens, batch_size=8, pack_len=200, seed=1)
    c = DynamicBatchSampler(lengths=lens, batch_size=8, pack_len=200, seed=2)
    assert list(a) == list(b), "same (seed, epoch): the same micro-batches"
    assert a.epoch_plan(0).digest() != c.epoch_plan(0).digest(), "another seed"
    assert a.epoch_plan(0).digest() != a.epoch_plan(1).digest(), "another epoch"


@pytest.mark.parametrize("replicas", [1, 3])
def test_resume_mid_epoch_yields_exactly_the_rest(replicas: int) -> None:
    lens = lognormal(300, 200, seed=7)
    first = rank_samplers(lens, replicas, batch_size=8, pack_len=200, seed=2)
    for s in first:
        s.set_epoch(1)
    full = [list(s) for s in first]
    cut = len(full[0]) // 2
    states = [s.state_dict(consumed_batches=cut) for s in first]
    resumed = rank_samplers(lens, replicas, batch_size=8, pack_len=200, seed=2)
    for s, state in zip(resumed, states, strict=True):
        s.load_state_dict(state)
    rest = [list(s) for s in resumed]
    assert rest == [p[cut:] for p in full], "exactly the rest, on every rank"


def test_resume_refuses_a_state_saved_with_another_pack_len() -> None:
    lens = lognormal(200, 200)
    saved = DynamicBatchSampler(lengths=lens, batch_size=8, pack_len=200)
    state = saved.state_dict(consumed_batches=1)
    other = DynamicBatchSampler(lengths=lens, batch_size=8, pack_len=256)
    with pytest.raises(dynbatch.InputError, match="pack_len: saved 200, here 256"):
        other.load_state_dict(state)
    unpacked = DynamicBatchSampler(lengths=lens, batch_size=8)
    with pytest.raises(dynbatch.InputError, match="pack_len"):
        unpacked.load_state_dict(state)


def test_resume_on_another_number_of_ranks_keeps_rows_and_equal_steps() -> None:
    lens = lognormal(300, 200, seed=4)
    two = rank_samplers(lens, 2, batch_size=8, pack_len=200, seed=3)
    passes = [list(s) for s in two]
    ends = two[0].epoch_plan(0).window_ends
    cut = int(ends[len(ends) // 2])  # at an update's end
    states = [s.state_dict(consumed_batches=cut) for s in two]
    opts = two[0].options  # the global update kept: 2 x 8 = 16 samples, update_size=16
    three = [
        DistributedDynamicBatchSampler(
            dataset(lens), lengths=lens, num_replicas=3, rank=r, options=opts
        )
        for r in range(3)
    ]
    for s in three:
        s.load_state_dict(states[0])
    rest = [list(s) for s in three]
    assert len({len(p) for p in rest}) == 1, "equal steps on the new ranks"
    pads = [s.padding_mask() for s in three]
    done = {i for p in passes for b in p[:cut] for i in b}
    left = sorted(
        i
        for p, m in zip(rest, pads, strict=True)
        for b, f in zip(p, m, strict=True)
        if not f
        for i in b
    )
    assert left == sorted(set(range(lens.size)) - done), "exactly the rest"
    for p in rest:
        for b in p:
            assert rows_of(lens[b], 200).size - 1 <= opts.max_rows, "rows within budget"


class Bag(paddle.nn.Layer):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.emb = paddle.nn.Embedding(512, 4)
        self.out = paddle.nn.Linear(4, 1)

    def forward(self, ids: paddle.Tensor) -> paddle.Tensor:
        return self.out(self.emb(ids))


def test_accumulator_steps_at_the_planned_update_ends() -> None:
    lens = lognormal(120, 100, seed=2)
    ds = [{"input_ids": list(range(1, int(k) + 1))} for k in lens]
    sampler = DynamicBatchSampler(ds, lengths=lens, batch_size=8, pack_len=128, seed=1)
    paddle.seed(0)
    model = Bag()
    acc = dynbatch.GradientAccumulator(
        model, paddle.optimizer.SGD(0.01, parameters=model.parameters()), sampler=sampler
    )
    collate = PackCollator(pack_len=128)
    ends = set(sampler.epoch_plan(0).window_ends.tolist())
    stepped = []
    for k, batch in enumerate(sampler):
        out = collate([ds[i] for i in batch])
        ids = paddle.to_tensor(out["input_ids"])
        with acc.accumulate():
            loss = (
                model(ids).squeeze(-1) * paddle.to_tensor((out["input_ids"] > 0).astype("float32"))
            ).sum()
            before = acc.optimizer_steps
            acc.backward(loss, count=len(batch))
        if acc.optimizer_steps > before:
            stepped.append(k + 1)
    assert set(stepped) == ends, "the optimizer steps exactly at the planned update ends"
    assert acc.optimizer_steps == sampler.steps_for_epochs([0])


@pytest.mark.parametrize("replicas", [1, 2])
def test_a_stream_packs_each_block_as_an_epoch(replicas: int) -> None:
    lens = lognormal(230, 128, seed=9)
    source = [{"input_ids": [i + 1] * int(k)} for i, k in enumerate(lens)]
    streams = [
        dynbatch.DynamicBatchIterable(
            source,
            length_fn=lambda s: len(s["input_ids"]),
            max_cost=4 * 128,
            cost="linear",
            pack_len=128,
            update_size=8,
            buffer_size=100,
            num_replicas=replicas,
            rank=r,
        )
        for r in range(replicas)
    ]
    collate = PackCollator(pack_len=128)
    passes = [list(s) for s in streams]
    assert len({len(p) for p in passes}) == 1, "equal steps on every rank"
    seen = []
    for p in passes:
        for batch in p:
            out = collate(list(batch))
            ids = [s["input_ids"][0] - 1 for s in batch]
            offs, width = packed_rows(lens[ids], 128)
            assert out["input_ids"].shape == (offs.size - 1, width), "the rows packed_rows builds"
            assert out["input_ids"].shape[0] <= 4, "rows within max_rows = 4"
            assert width == np.add.reduceat(lens[ids], offs[:-1]).max() <= 128, "the fullest row"
            if not batch.info.padding:
                seen += ids
    assert sorted(seen) == list(range(lens.size)), "every sample once over the ranks"


def test_a_stream_refuses_pack_len_without_update_size() -> None:
    with pytest.raises(dynbatch.InputError, match=r"pack_len=64 .* update_size"):
        dynbatch.DynamicBatchIterable(
            [[1, 2]], length_fn=len, max_cost=640, cost="linear", pack_len=64
        )


# -- packing at the step time (NOTE [ choosing packing per update ]) ------------------------------
#: A fixed part, a part linear in padded tokens and dense attention over a row's width: some
#: micro-batches run faster padded (short samples: a row of them attends over its whole width),
#: some as rows (a long sample padding short ones).
STEP = dynbatch.StepTimeModel(c=0.02, a=2e-6, b=2e-8)


def h100() -> dynbatch.StepTimeModel:
    from conftest import shared_file

    return dynbatch.StepTimeTable.load(shared_file("h100_bert_base_step_times.json")).fit()


class Samples(paddle.io.Dataset):  # type: ignore[misc]
    """Sample ``i``: ``len_i`` tokens of id ``i + 1`` (traced back through the rows)."""

    def __init__(self, lens: np.ndarray) -> None:
        self.lens = lens

    def __len__(self) -> int:
        return int(self.lens.size)

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        return {"input_ids": np.full(int(self.lens[i]), i + 1, dtype=np.int64)}


@pytest.mark.parametrize("workers", [0, 2])
def test_the_collator_builds_every_micro_batch_as_the_plan_priced_it(workers: int) -> None:
    """PackCollator.for_sampler lays each micro-batch out as the planner priced it
    (NOTE [ a micro-batch's layout ]), in DataLoader workers too: the plan's shapes, its samples."""
    from dynbatch.plan.packs import plan_timed_packs

    lens = bimodal(500, 11, (150, 257))
    ds = Samples(lens)
    sampler = DynamicBatchSampler(
        ds, lengths=lens, batch_size=16, pack_len=256, time_model=STEP, seed=1
    )
    chosen = plan_timed_packs(lens, sampler.options, 0)
    assert chosen.sharded is not None
    assert chosen.sharded.digest() == sampler.epoch_plan(0).digest(), "the sampler's plan"
    n, width = chosen.step_shapes
    assert chosen.packed.any() and not chosen.packed.all(), "the test needs both layouts"
    collate = PackCollator.for_sampler(sampler, causal=False)
    loader = paddle.io.DataLoader(
        ds, batch_sampler=sampler, collate_fn=collate, num_workers=workers
    )
    seen = []
    for k, (out, batch) in enumerate(zip(loader, chosen.micro_batches, strict=True)):
        ids = out["input_ids"].numpy()
        assert tuple(ids.shape) == (n[k], width[k]), f"micro-batch {k}: the shape priced"
        assert set(out) >= {"labels", "position_ids", "attention_mask", "sample_starts"}
        assert tuple(out["attention_mask"].shape) == (n[k], width[k], width[k])
        if not chosen.packed[k]:  # padded: a sample a row, in the order given
            assert ids[:, 0].tolist() == (batch + 1).tolist(), f"micro-batch {k}: a row each"
        got = sorted(set(ids[ids > 0].tolist()))
        assert got == sorted((batch + 1).tolist()), f"micro-batch {k}: its samples"
        seen += batch.tolist()
    assert sorted(seen) == list(range(lens.size)), "every sample once"


@pytest.mark.parametrize("model", ["polynomial", "h100"])
@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_packing_at_the_step_time_keeps_every_promise_on_ranks(replicas: int, model: str) -> None:
    """Equal steps, exactly once, exact step counts, deterministic, within the budget, and
    never predicted slower than the fixed batch (B a rank, one padded step an update)."""
    from dynbatch.plan.packs import PackLayout, packed_epoch_seconds

    step = STEP if model == "polynomial" else h100()
    lens = lognormal(400, 512, seed=replicas)
    samplers = rank_samplers(lens, replicas, batch_size=8, pack_len=512, time_model=step, seed=4)
    opts = samplers[0].options
    assert opts.time_model == step and opts.pack_len == 512
    layout = PackLayout.from_options(opts)
    for epoch in (0, 1):
        for s in samplers:
            s.set_epoch(epoch)
        passes = [list(s) for s in samplers]
        assert len({len(p) for p in passes}) == 1, "equal steps on every rank"
        pads = [s.padding_mask(epoch) for s in samplers]
        assert real_samples(passes, pads) == [] or sorted(real_samples(passes, pads)) == list(
            range(lens.size)
        ), "exactly once over the ranks"
        for p in passes:
            for b in p:
                rows, w = layout.rows(lens[b])
                padded = rows.size - 1 == len(b) and w == lens[b].max()
                cost = float(opts.cost(len(b), w)) if padded else float(opts.cost(rows.size - 1, w))
                assert cost <= opts.max_cost or len(b) == 1, "within the budget, as laid out"
        plan = samplers[0].epoch_plan(epoch)
        order = shuffled(np.arange(lens.size), opts.seed, epoch)
        update = 8 * replicas
        fixed = sum(
            float(
                step(-(-order[a : a + update].size // replicas), lens[order[a : a + update]].max())
            )
            for a in range(0, order.size, update)
        )
        assert packed_epoch_seconds(plan, lens, opts) <= fixed * (1 + 1e-9), "never slower"
        again = rank_samplers(lens, replicas, batch_size=8, pack_len=512, time_model=step, seed=4)
        assert again[0].epoch_plan(epoch).digest() == plan.digest(), "deterministic"
    counted = samplers[0].steps_for_epochs(range(2))
    assert counted == 2 * -(-lens.size // (8 * replicas)), "the fixed batch's update count"


@pytest.mark.parametrize("replicas", [1, 3])
def test_packing_at_the_step_time_resumes_mid_epoch_exactly(replicas: int) -> None:
    lens = lognormal(300, 200, seed=7)
    kw: dict[str, Any] = {"batch_size": 8, "pack_len": 200, "seed": 2, "time_model": STEP}
    first = rank_samplers(lens, replicas, **kw)
    for s in first:
        s.set_epoch(1)
    full = [list(s) for s in first]
    cut = len(full[0]) // 2
    states = [s.state_dict(consumed_batches=cut) for s in first]
    resumed = rank_samplers(lens, replicas, **kw)
    for s, state in zip(resumed, states, strict=True):
        s.load_state_dict(state)
    assert [list(s) for s in resumed] == [p[cut:] for p in full], "exactly the rest"


def test_packing_at_the_step_time_resumes_on_another_number_of_ranks() -> None:
    lens = lognormal(300, 200, seed=4)
    two = rank_samplers(lens, 2, batch_size=8, pack_len=200, seed=3, time_model=STEP)
    passes = [list(s) for s in two]
    ends = two[0].epoch_plan(0).window_ends
    cut = int(ends[len(ends) // 2])  # at an update's end
    state = two[0].state_dict(consumed_batches=cut)
    opts = two[0].options
    three = [
        DistributedDynamicBatchSampler(
            dataset(lens), lengths=lens, num_replicas=3, rank=r, options=opts
        )
        for r in range(3)
    ]
    for s in three:
        s.load_state_dict(state)
    rest = [list(s) for s in three]
    assert len({len(p) for p in rest}) == 1, "equal steps on the new ranks"
    done = {i for p in passes for b in p[:cut] for i in b}
    left = real_samples(rest, [s.padding_mask() for s in three])
    assert sorted(left) == sorted(set(range(lens.size)) - done), "exactly the rest"
    collate = PackCollator.for_sampler(three[0])
    for p in rest:
        for b in p:
            collate([dataset(lens)[i] for i in b])  # every dealt micro-batch fits a layout


def bimodal(n: int, seed: int, long: tuple[int, int]) -> np.ndarray:
    """One long sample in about 10: some updates all short, fastest padded."""
    rng = np.random.default_rng(seed)
    return np.where(rng.random(n) < 0.1, rng.integers(*long, n), rng.integers(5, 21, n))


def test_a_stream_packs_each_block_at_the_step_time() -> None:
    lens = bimodal(230, 9, (80, 129))
    source = [{"input_ids": [i + 1] * int(k)} for i, k in enumerate(lens)]
    kw: dict[str, Any] = {"max_cost": 4 * 128, "cost": "linear", "pack_len": 128}
    kw.update(update_size=8, buffer_size=100)
    plain, timed = (
        dynbatch.DynamicBatchIterable(source, length_fn=lambda s: len(s["input_ids"]), **kw, **t)
        for t in ({}, {"time_model": STEP})
    )
    collate = PackCollator.for_sampler(timed)
    assert collate.layout is not None and collate.layout.time_model == STEP, "laid out by it"
    untimed = PackCollator.for_sampler(plain).layout
    assert untimed is not None and untimed.time_model is None, "every micro-batch packed"
    seen, packed = [], set()
    for batch in timed:
        out = collate(list(batch))
        packed.add(out["input_ids"].shape[0] < len(batch))  # padded: a sample a row
        seen += [s["input_ids"][0] - 1 for s in batch]
    assert sorted(seen) == list(range(lens.size)), "every sample once"
    assert packed == {True, False}, "some blocks' micro-batches run padded, some packed"
    assert [list(map(id, b)) for b in plain] != [list(map(id, b)) for b in timed]


# -- what packing refuses or keeps of the fixed batch's budget ------------------------------------
@pytest.mark.parametrize("pack_len", [4096, 10**12])
def test_pack_len_never_raises_the_fixed_batchs_budget_silently(pack_len: int) -> None:
    """The memory budget: no micro-batch costs more than the fixed batch's worst batch, or the
    options are refused by name. The SFT example (--batch-size 1 --max-len 2048 --pack,
    4 pairs) ran its pack mode under max_cost 304.7 MiB against the dynamic mode's 6.07 MiB
    (peak 358.6 MiB against the fixed batch's 4.6 MiB)."""
    lens = np.array([5, 9, 3, 12] * 50)
    fixed_worst = 2 * 12  # linear cost: B * L_max
    try:
        sampler = dynbatch.DynamicBatchSampler(lengths=lens, batch_size=2, pack_len=pack_len)
    except dynbatch.InputError as exc:
        assert "pack_len" in str(exc)
        return
    opts = sampler.options
    assert float(opts.cost(np.asarray([opts.max_rows]), np.asarray([pack_len]))[0]) <= fixed_worst


def test_group_by_length_with_pack_len_is_refused_by_name() -> None:
    lens = np.array([5, 9, 3, 12] * 5)
    with pytest.raises(dynbatch.InputError, match="group_by_length"):
        dynbatch.like_fixed(lens, batch_size=4, pack_len=16, group_by_length=True)
    with pytest.raises(dynbatch.InputError, match="group_by_length"):
        dynbatch.DynamicBatchSampler(lengths=lens, batch_size=4, pack_len=16, group_by_length=True)


def test_micro_batches_with_pack_len_is_used_or_refused() -> None:
    from dynbatch.plan.epochs import plan_epoch

    lens = np.random.default_rng(0).integers(1, 200, 500)
    digests = set()
    for parts in (1, 8):
        try:
            opts = dynbatch.like_fixed(lens, batch_size=32, pack_len=256, micro_batches=parts)
        except dynbatch.InputError as exc:
            assert "micro_batches" in str(exc)
            return
        digests.add(plan_epoch(lens, opts, 0).digest())
    assert len(digests) == 2, "micro_batches changes the plan"
