"""Epochs: a run's plans, passes and resume, without paddle; and the Recent cache."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dynbatch import InputError, PlanOptions
from dynbatch.plan.epochs import Epochs, Recent

Pass = tuple[int, list[list[int]]]  # (epoch, batches)


def run(
    make: Callable[[], Any],
    passes: Callable[[Any], Iterator[list[int]]],
    epochs: int,
    auto: bool,
    cut: tuple[int, int] | None = None,
    consumed: bool = True,
) -> tuple[list[Pass], list[Pass]]:
    """Train ``epochs`` epochs, one pass each; ``cut=(e, k)``: stop after ``k`` batches of
    epoch ``e``, save, and go on with a fresh object that loads the state. Returns the passes
    before the cut (the cut one partial) and after it (``auto``: no ``set_epoch``)."""
    before: list[Pass] = []
    sampler = make()
    for epoch in range(epochs):
        if not auto:
            sampler.set_epoch(epoch)
        it, got = passes(sampler), []
        for batch in it:
            got.append(batch)
            if cut == (epoch, len(got)):
                break
        before.append((sampler.current_pass().epoch, got))
        if cut is not None and cut[0] == epoch and len(got) == cut[1]:
            state = sampler.state_dict(consumed_batches=cut[1] if consumed else None)
            break
    else:
        return before, []
    after: list[Pass] = []
    sampler = make()
    sampler.load_state_dict(state)
    for epoch in range(cut[0], epochs):
        if not auto:
            sampler.set_epoch(epoch)
        got = list(passes(sampler))
        after.append((sampler.current_pass().epoch, got))
    return before, after


def expected(full: list[Pass], cut: tuple[int, int], epochs: int) -> list[Pass]:
    """What a resumed run's passes must be: the rest of the cut epoch (if any), then the next."""
    epoch, k = cut
    rest = full[epoch][1][k:]
    nxt = full[epoch + 1 : epochs]
    if rest:
        return [(epoch, rest), *nxt]
    return nxt


CASES = [(seed, replicas) for seed in range(8) for replicas in (1, 2, 3, 4)]


@pytest.mark.parametrize(("seed", "replicas"), CASES)
@pytest.mark.parametrize("auto", [False, True], ids=["set_epoch", "unasked"])
@pytest.mark.parametrize("consumed", [True, False], ids=["consumed", "yielded"])
def test_a_resumed_run_trains_what_an_uninterrupted_one_does(
    seed: int, replicas: int, auto: bool, consumed: bool
) -> None:
    rnd = random.Random(seed)
    lengths = [rnd.randint(1, 30) for _ in range(rnd.randint(replicas, 60))]
    options = PlanOptions(
        max_cost=rnd.choice([30, 60, 200]),
        cost="linear",
        order=rnd.choice(["shuffle", "none"]),
        seed=seed,
        equal_epochs=rnd.random() < 0.3,
    )
    epochs = 4
    for rank in range(replicas):

        def make() -> Epochs:
            return Epochs(lengths, options, replicas)

        def passes(e: Epochs, rank: int = rank) -> Iterator[list[int]]:
            return e.iterate(rank)

        full, _ = run(make, passes, epochs, auto)
        assert [e for e, _ in full] == list(range(epochs)), "one epoch a pass"
        for cut_epoch in range(epochs - 1):
            total = len(full[cut_epoch][1])
            for k in sorted({1, rnd.randint(1, max(total, 1)), total}):
                if k > total or k == 0:
                    continue
                before, after = run(make, passes, epochs, auto, (cut_epoch, k), consumed)
                assert before[:-1] == full[:cut_epoch], "the same run up to the cut"
                assert before[-1] == (cut_epoch, full[cut_epoch][1][:k])
                want = expected(full, (cut_epoch, k), epochs)
                if auto:  # the loop above runs one pass per epoch left; no empty pass first
                    assert after[: len(want)] == want, f"rank {rank}, cut at {cut_epoch, k}"
                else:
                    assert [p for p in after if p[1]] == want, f"rank {rank}, cut {cut_epoch, k}"


def test_seek_is_set_epoch_and_a_position() -> None:
    epochs = Epochs([3, 1, 4, 1, 5, 9, 2, 6], PlanOptions(max_cost=12, cost="linear", seed=1))
    whole = [b.tolist() for b in epochs.plan(2).for_rank(0)]
    epochs.seek(2, 1)
    assert len(epochs) == len(whole) - 1
    epochs.set_epoch(2)  # the usual loop calls it again: the position is kept
    assert list(epochs.iterate()) == whole[1:]
    assert list(epochs.iterate()) == whole, "set by seek: no advance to epoch 3"
    with pytest.raises(InputError, match=rf"position must be in \[0, {len(whole)}\]"):
        epochs.seek(2, len(whole) + 1)


def test_recent_keeps_the_two_used_last() -> None:
    made: list[int] = []
    recent: Recent[int, int] = Recent(2)

    def make(key: int) -> int:
        made.append(key)
        return 10 * key

    for key in (0, 1, 0, 2, 0, 1):
        assert recent.get(key, make) == 10 * key
    assert made == [0, 1, 2, 1], "0 stayed, used since 1 was"
    assert recent.peek(2) is None and recent.peek(1) == 10
