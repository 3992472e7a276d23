"""GradientAccumulator(lr_scheduler=...) warns, naming the numbers, when a real paddle
scheduler's horizon is not the planned updates
(NOTE [ a schedule's horizon and the planned updates ]): ``decay_steps=len(loader) * epochs``
counts micro-batches, not updates."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import numpy as np
import pytest

import dynbatch
from dynbatch.paddle.lr_horizon import LRHorizonWarning

paddle = pytest.importorskip("paddle")
lr = paddle.optimizer.lr

LENGTHS = np.random.default_rng(0).integers(5, 128, 200)


@pytest.fixture
def sampler() -> dynbatch.DynamicBatchSampler:
    return dynbatch.DynamicBatchSampler(lengths=LENGTHS, batch_size=16)


def accumulator(sampler: object, scheduler: object, **kw: object) -> list[str]:
    model = paddle.nn.Linear(2, 2)
    opt = paddle.optimizer.SGD(learning_rate=scheduler, parameters=model.parameters())
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        dynbatch.GradientAccumulator(model, opt, sampler=sampler, lr_scheduler=scheduler, **kw)
    return [str(w.message) for w in said if issubclass(w.category, LRHorizonWarning)]


@pytest.fixture
def counts(sampler: dynbatch.DynamicBatchSampler) -> Iterator[tuple[int, int]]:
    micro, updates = len(sampler), sampler.steps_for_epochs(range(3))
    assert micro * 3 != updates, "the plan's updates are several micro-batches"
    yield micro, updates


def test_a_decay_over_the_loaders_micro_batches_is_named_with_the_updates_to_give(
    sampler: dynbatch.DynamicBatchSampler, counts: tuple[int, int]
) -> None:
    micro, updates = counts
    (said,) = accumulator(sampler, lr.PolynomialDecay(0.1, decay_steps=micro * 3))
    assert f"PolynomialDecay(decay_steps={micro * 3}) counts 3 epoch(s) of micro-batches" in said
    assert f"({micro} an epoch, len(loader))" in said
    assert f"acc.steps_for_epochs(range(3)) = {updates}" in said, said
    (said,) = accumulator(sampler, lr.CosineAnnealingDecay(0.1, T_max=micro * 2))
    assert f"CosineAnnealingDecay(T_max={micro * 2}) counts 2 epoch(s)" in said, said


def test_a_horizon_in_updates_is_taken_without_a_word(
    sampler: dynbatch.DynamicBatchSampler, counts: tuple[int, int]
) -> None:
    _, updates = counts
    assert accumulator(sampler, lr.PolynomialDecay(0.1, decay_steps=updates)) == []
    assert accumulator(sampler, lr.CosineAnnealingDecay(0.1, T_max=updates), epochs=3) == []
    warm = lr.LinearWarmup(lr.PolynomialDecay(0.1, updates - 5), 5, 0.0, 0.1)
    assert accumulator(sampler, warm, epochs=3) == []
    assert accumulator(sampler, lr.PolynomialDecay(0.1, 7, cycle=True)) == [], "cycles: no end"


def test_a_warm_up_of_micro_batches_is_named(
    sampler: dynbatch.DynamicBatchSampler, counts: tuple[int, int]
) -> None:
    micro, _ = counts
    warm = lr.LinearWarmup(0.1, warmup_steps=micro, start_lr=0.0, end_lr=0.1)
    (said,) = accumulator(sampler, warm)
    assert f"LinearWarmup(warmup_steps={micro}) counts 1 epoch(s) of micro-batches" in said


def test_with_epochs_the_run_is_checked_exactly(
    sampler: dynbatch.DynamicBatchSampler, counts: tuple[int, int]
) -> None:
    _, updates = counts
    (said,) = accumulator(sampler, lr.OneCycleLR(0.1, total_steps=updates + 5), epochs=3)
    assert f"OneCycleLR(total_steps={updates + 5}) ends its schedule after {updates + 5}" in said
    assert f"the run's 3 epoch(s) make {updates} updates" in said and f"give {updates}" in said
    warm = lr.LinearWarmup(0.1, warmup_steps=updates + 1, start_lr=0.0, end_lr=0.1)
    (said,) = accumulator(sampler, warm, epochs=3)
    assert f"LinearWarmup(warmup_steps={updates + 1}) is beyond the run" in said, said
    (said,) = accumulator(sampler, lr.MultiStepDecay(0.1, [10, updates * 2]), epochs=3)
    assert f"MultiStepDecay(milestones=[..., {updates * 2}]) is beyond the run" in said


def test_epochs_without_a_scheduler_is_refused_by_name(
    sampler: dynbatch.DynamicBatchSampler,
) -> None:
    model = paddle.nn.Linear(2, 2)
    opt = paddle.optimizer.SGD(parameters=model.parameters())
    with pytest.raises(dynbatch.InputError, match=r"epochs=3 checks the lr_scheduler's horizon"):
        dynbatch.GradientAccumulator(model, opt, sampler=sampler, epochs=3)
    with pytest.raises(dynbatch.InputTypeError, match=r"epochs"):
        dynbatch.GradientAccumulator(model, opt, sampler=sampler, epochs=1.5)  # type: ignore[arg-type]
