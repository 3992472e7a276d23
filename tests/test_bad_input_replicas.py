"""``num_replicas`` past the most ranks a plan is made for is refused by name, wherever it
enters (NOTE [ the most ranks ] in dynbatch._checks): a value just below 2**53 was taken and
allocated per rank until a MemoryError."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from dynbatch import InputError, PlanOptions, fill_device, like_fixed, plan_epoch, shard_plan
from dynbatch._checks import MAX_REPLICAS
from dynbatch.plan.planning import plan_batches

LENS = np.arange(1, 50)
OPTIONS = PlanOptions(max_cost=10**5, cost="linear")
STEP = "0.04,1e-6,0"  # a step time, c,a,b


def _sampler(replicas: int, **budget: Any) -> Any:
    paddle_samplers = pytest.importorskip("dynbatch.paddle.sampler")
    return paddle_samplers.DistributedDynamicBatchSampler(
        lengths=LENS, num_replicas=replicas, rank=0, **(budget or {"max_cost": 10**5})
    )


def _stream(replicas: int) -> Any:
    loader = pytest.importorskip("dynbatch.paddle.stream_loader")
    samples = [[1] * n for n in LENS]
    return loader.DynamicBatchIterable(
        samples, length_fn=len, max_cost=10**5, num_replicas=replicas, rank=0
    )


def _stream_planner(replicas: int) -> Any:
    from dynbatch.stream.planner import StreamPlanner
    from dynbatch.stream.sources import open_source

    source = open_source([[1] * n for n in LENS], None, shuffle_shards=False, seed=0)
    return StreamPlanner(source, len, OPTIONS, 16, replicas)


def _resumed(replicas: int) -> Any:
    """A sampler state whose saved ``num_replicas`` is ``replicas``, loaded on one rank."""
    sampler = _sampler(1, batch_size=4)  # updates: a state of other ranks resumes here
    state = {**sampler.state_dict(), "num_replicas": replicas}
    sampler.load_state_dict(state)


ENTRIES: dict[str, Callable[[int], Any]] = {
    "shard_plan": lambda r: shard_plan(plan_batches(LENS, options=OPTIONS), LENS, r, **_fields()),
    "plan_epoch": lambda r: plan_epoch(LENS, OPTIONS, 0, num_replicas=r),
    "like_fixed": lambda r: like_fixed(LENS, 4, num_replicas=r),
    "fill_device": lambda r: fill_device(LENS, STEP, max_cost=10**5, cost="linear", num_replicas=r),
    "DistributedDynamicBatchSampler": _sampler,
    "DynamicBatchIterable": _stream,
    "StreamPlanner": _stream_planner,
    "load_state_dict": _resumed,
}


def _fields() -> dict[str, Any]:
    return {"max_cost": OPTIONS.max_cost, "cost": "linear"}


@pytest.mark.parametrize("replicas", [2**53 - 1, MAX_REPLICAS + 1], ids=["2**53-1", "2**20+1"])
@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_too_many_ranks_are_refused_by_name(entry: str, replicas: int) -> None:
    name = r"state\['num_replicas'\]" if entry == "load_state_dict" else "num_replicas"
    with pytest.raises(InputError, match=rf"{name} must be an integer >= 1 and <= 2\*\*20, got "):
        ENTRIES[entry](replicas)


def test_the_most_ranks_plan() -> None:
    """At the bound a plan is made: every rank a batch, as on any number of ranks."""
    sharded = shard_plan(plan_batches(LENS, options=OPTIONS), LENS, MAX_REPLICAS, **_fields())
    assert sharded.num_replicas == MAX_REPLICAS and len(sharded.for_rank(MAX_REPLICAS - 1)) == 1
