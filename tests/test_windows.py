"""The window cursor: one walk over an epoch's optimizer windows for every loop."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import lengths as lengths_strategy

import dynbatch
from dynbatch.plan.epochs import plan_epoch
from dynbatch.plan.windows import EpochWindows, even_windows


@settings(max_examples=60, deadline=None)
@given(
    lens=lengths_strategy(max_size=200),
    target=st.one_of(st.none(), st.floats(1, 400)),
    every=st.integers(1, 5),
    update=st.one_of(st.none(), st.integers(2, 40)),
)
def test_spans_tile_the_epoch_and_agree_with_ends_at(lens, target, every, update) -> None:
    opts = dynbatch.PlanOptions(
        max_cost=float(lens.max()) * 8, cost="linear", update_size=update, seed=3
    )
    sharded = plan_epoch(lens, opts, epoch=1)
    w = EpochWindows(sharded, lens, epoch=1, target=target, every=every)
    spans = list(w.spans())
    assert len(spans) == len(w), "one span per window"
    assert [s.index for s in spans] == list(range(len(w))), "numbered in order"
    starts = [s.start for s in spans]
    assert starts == [0] + [s.stop for s in spans[:-1]], "spans are contiguous from 0"
    assert (spans[-1].stop if spans else 0) == w.num_steps, "the last span ends the epoch"
    assert sum(s.count for s in spans) == pytest.approx(float(w.counts.sum())), "counts add up"
    closing = {s.stop - 1 for s in spans}
    assert [w.ends_at(p) for p in range(w.num_steps)] == [
        p in closing for p in range(w.num_steps)
    ], "ends_at is true exactly where a span closes"
    for s in spans:  # a resume at any window boundary walks exactly the remaining spans
        assert list(w.spans(s.start)) == spans[s.index :], "resume at a boundary"
    assert all(s.ends_epoch == (s.index == len(w) - 1) for s in spans), "ends_epoch"


def test_a_start_inside_a_window_is_refused_with_where_windows_end() -> None:
    lens = np.arange(1, 41)
    opts = dynbatch.PlanOptions(max_cost=80, cost="linear", max_batch_size=2, seed=0)
    w = EpochWindows(plan_epoch(lens, opts, epoch=0), lens, epoch=0, every=3)
    w.check_start(0)
    w.check_start(3)
    with pytest.raises(dynbatch.InputError, match=r"micro-batch 4: no optimizer step ends there"):
        w.check_start(4)
    with pytest.raises(dynbatch.InputError, match="micro-batch 4"):
        next(w.spans(4))


def test_the_accumulator_and_the_trainer_walk_the_same_windows() -> None:
    """Both loops read one cursor: the accumulator's windows are the Trainer's RunPlan's."""
    pytest.importorskip("paddlenlp")
    import paddle

    from dynbatch.integrations.core.run import RunPlan

    lens = np.random.default_rng(0).integers(5, 200, 500)
    data = [np.zeros(n, dtype=np.int64) for n in lens]
    sampler = dynbatch.DistributedDynamicBatchSampler(
        data, lengths=lens, batch_size=16, num_replicas=1, rank=0
    )
    model = paddle.nn.Linear(2, 2)
    opt = paddle.optimizer.SGD(parameters=model.parameters())
    acc = dynbatch.GradientAccumulator(model, opt, sampler=sampler)
    run = RunPlan(
        sampler, unit="samples", micro_batches_per_step=1, target=None, num_epochs=2, max_steps=None
    )
    for epoch in range(2):
        assert acc.windows(epoch).ends.tolist() == run.window_ends(epoch).tolist(), epoch
        assert acc.steps_per_epoch(epoch) == run.steps_per_epoch(epoch)


@settings(max_examples=200, deadline=None)
@given(
    counts=st.lists(st.integers(0, 50), min_size=1, max_size=40),
    share=st.floats(0.0, 1.0),
)
def test_even_windows_makes_exactly_the_windows_asked_for(counts, share) -> None:
    windows = 1 + round(share * (len(counts) - 1))  # 1..steps
    ends = even_windows(np.array(counts), windows)
    assert ends.size == windows, "the windows asked for, however uneven the counts"
    assert ends[-1] == len(counts) and bool(np.all(np.diff(ends) > 0)), "each a step or more"


def test_sorted_updates_of_one_sample_are_one_a_step() -> None:
    """An outside tester's `dynbatch stats --update-size 1`: 3 steps made 2 updates, ascending."""
    lens = np.array([5, 9, 3, 7, 12, 4])
    opts = dynbatch.PlanOptions(max_cost=200, order="ascending", update_size=1)
    sharded = plan_epoch(lens, opts, epoch=0)
    assert sharded.window_ends is not None
    assert sharded.window_ends.tolist() == list(range(1, sharded.num_steps + 1))
