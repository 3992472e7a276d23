"""Resume an epoch on another number of ranks (NOTE [ resume on another number of ranks ])."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dynbatch import DistributedDynamicBatchSampler, InputError

LENGTHS = np.random.default_rng(5).integers(1, 120, 211)
GLOBAL = 24  # samples per update, whatever the number of ranks


def samplers(ranks: int, **options: object) -> list[DistributedDynamicBatchSampler]:
    return [
        DistributedDynamicBatchSampler(
            lengths=LENGTHS,
            num_replicas=ranks,
            rank=r,
            batch_size=options.pop("batch_size", GLOBAL // ranks) if r == 0 else GLOBAL // ranks,
            seed=3,
            **options,
        )
        for r in range(ranks)
    ]


def updates(sampler: DistributedDynamicBatchSampler) -> list[frozenset[int]]:
    """The samples of each update of the sampler's current epoch, over all ranks."""
    sp = sampler.epoch_plan()
    ends = sp.window_ends if sp.window_ends is not None else np.arange(1, sp.num_steps + 1)
    plan, starts = sp.plan, np.concatenate([[0], ends])
    n = sp.num_replicas
    return [
        frozenset(int(i) for b in range(s * n, e * n) for i in plan[b])
        for s, e in itertools.pairwise(starts)
    ]


@pytest.mark.parametrize(("saved", "loaded"), [(2, 1), (1, 2), (2, 3), (3, 4), (4, 2), (2, 2)])
@pytest.mark.parametrize("epoch", [0, 1])
def test_a_state_saved_on_n_ranks_resumes_on_m_with_the_same_updates(
    saved: int, loaded: int, epoch: int
) -> None:
    before = samplers(saved)
    for s in before:
        s.set_epoch(epoch)
    windows = before[0].epoch_plan().window_ends
    assert windows is not None and windows.size > 3, "a plan of several updates"
    position = int(windows[1])  # after two whole updates
    trained = [i for s in before for b in list(s)[:position] for i in b]
    state = before[0].state_dict(consumed_batches=position)

    after = samplers(loaded)
    for s in after:
        s.load_state_dict(state)
        s.set_epoch(epoch)
    rest = [list(s) for s in after]
    assert len({len(r) for r in rest}) == 1, "equal steps on the new ranks"
    resumed = [i for r in rest for b in r for i in b]
    assert sorted(trained + resumed) == list(range(LENGTHS.size)), "every sample once"
    dealt = updates(after[0])[2:] if saved == loaded else updates(after[0])  # same ranks: as saved
    assert dealt == updates(before[0])[2:], "the saved run's remaining updates"
    cost, cap = after[0].options.cost, after[0].options.max_batch_size
    for r in rest:
        for b in r:
            assert cap is None or len(b) <= cap, "within this sampler's cap"
            assert cost(len(b), int(LENGTHS[b].max())) <= after[0].options.max_cost, "budget"


def test_a_resumed_state_saved_again_resumes_the_same_rest() -> None:
    before = samplers(2)
    position = int(before[0].epoch_plan().window_ends[0])  # type: ignore[index]
    state = before[0].state_dict(consumed_batches=position)
    middle = samplers(1)[0]
    middle.load_state_dict(state)
    first = int(middle.epoch_plan().window_ends[0])  # type: ignore[index]
    again = middle.state_dict(consumed_batches=first)  # at an update's end: it moves on
    rest = list(middle)[first:]
    for ranks in (1, 2):
        later = samplers(ranks)
        for s in later:
            s.load_state_dict(again)
        resumed = sorted(i for s in later for b in s for i in b)
        assert resumed == sorted(i for b in rest for i in b), f"the same rest on {ranks} rank(s)"


def test_a_changed_global_batch_is_refused_with_the_batch_size_that_keeps_it() -> None:
    state = samplers(2)[0].state_dict(consumed_batches=1)
    one = DistributedDynamicBatchSampler(
        lengths=LENGTHS, num_replicas=1, rank=0, batch_size=GLOBAL // 2, seed=3
    )
    with pytest.raises(InputError, match=r"num_replicas=2 x 12 = 24 samples.*batch_size=24"):
        one.load_state_dict(state)


def test_a_plan_without_updates_resumes_on_its_own_ranks_only() -> None:
    two = DistributedDynamicBatchSampler(
        lengths=LENGTHS, num_replicas=2, rank=0, max_cost=2000, cost="linear"
    )
    one = DistributedDynamicBatchSampler(
        lengths=LENGTHS, num_replicas=1, rank=0, max_cost=2000, cost="linear"
    )
    refused = r"saved with num_replicas=2, this sampler has num_replicas=1; no update_size"
    with pytest.raises(InputError, match=refused):
        one.load_state_dict(two.state_dict(consumed_batches=1))


def test_a_torn_rest_is_refused_by_name() -> None:
    state = samplers(2)[0].state_dict(consumed_batches=1)
    state["rest"] = {**state["rest"], "indices": state["rest"]["indices"][:-1]}
    with pytest.raises(InputError, match=r"state\['rest'\]"):
        samplers(1)[0].load_state_dict(state)


def test_a_rest_cut_short_at_a_batch_is_refused_by_name() -> None:
    """A torn state that still adds up (its last batch gone) must not resume short."""
    state = samplers(2)[0].state_dict(consumed_batches=1)
    rest = state["rest"]
    last = rest["sizes"][-1]
    updates = rest["updates"][:-1] + ([rest["updates"][-1] - 1] if rest["updates"][-1] > 1 else [])
    state["rest"] = {
        **rest,
        "sizes": rest["sizes"][:-1],
        "indices": rest["indices"][:-last],
        "updates": updates,
    }
    with pytest.raises(InputError, match=r"state\['rest'\]"):
        samplers(1)[0].load_state_dict(state)


@pytest.mark.parametrize(
    ("changed", "named"),
    [
        ({"seed": 5}, r"seed: saved 3, here 5"),
        ({"order": "shuffle"}, r"order: saved 'bucket', here 'shuffle'"),
        ({"time_model": "1,0,0"}, r"time_model: saved None, here \[1.0, 0.0, 0.0, 0.0\]"),
        ({"pad_to_multiple_of": 8}, r"pad_to_multiple_of: saved 1, here 8"),
    ],
)
def test_a_state_on_other_ranks_is_refused_with_the_option_that_differs(
    changed: dict[str, object], named: str
) -> None:
    """Only what scales with the ranks may differ: the later epochs are this sampler's plan."""
    two = samplers(2)[0]
    state = two.state_dict(consumed_batches=int(two.epoch_plan().window_ends[0]))  # type: ignore[index]
    options = {"seed": 3, **changed}
    one = DistributedDynamicBatchSampler(
        lengths=LENGTHS, num_replicas=1, rank=0, batch_size=GLOBAL, **options
    )
    with pytest.raises(InputError, match=rf"saved with other options.*{named}"):
        one.load_state_dict(state)
    samplers(1)[0].load_state_dict(state)  # the same run on 1 rank: per-rank budgets differ


def test_a_rest_whose_position_was_edited_is_refused() -> None:
    state = samplers(2)[0].state_dict(consumed_batches=1)
    with pytest.raises(InputError, match=r"state\['rest'\]"):
        samplers(1)[0].load_state_dict({**state, "position": 999})


def test_a_state_saved_inside_an_update_stays_on_its_ranks() -> None:
    """The rest of a cut update would be an update of its own, and a GradientAccumulator's open
    window (its gradients on the saved ranks) could not average with it: refused by name."""
    before = samplers(2)
    ends = before[0].epoch_plan().window_ends
    assert ends is not None and ends[0] > 1
    inside = before[0].state_dict(consumed_batches=int(ends[0]) - 1)
    with pytest.raises(
        InputError,
        match=rf"saved inside an update \(after micro-batch "
        rf"{int(ends[0]) - 1}; updates end at {int(ends[0])}, .*save at an update's end",
    ):
        samplers(1)[0].load_state_dict(inside)
    samplers(2)[0].load_state_dict(inside)  # on its own ranks it resumes inside the update
