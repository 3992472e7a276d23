"""paddle's ``BatchSampler(shuffle=...)`` given to a dynbatch entry point is named as the user
wrote it, by the entry point the user called, with what to write instead."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import dynbatch

LENS = np.arange(1, 100)
DATA = [{"input_ids": [1] * int(n)} for n in LENS]


def length(sample: dict[str, Any]) -> int:
    return len(sample["input_ids"])


ENTRIES: dict[str, Callable[..., Any]] = {
    "DynamicBatchSampler": lambda **kw: dynbatch.DynamicBatchSampler(lengths=LENS, **kw),
    "DistributedDynamicBatchSampler": lambda **kw: dynbatch.DistributedDynamicBatchSampler(
        lengths=LENS, num_replicas=2, rank=0, **kw
    ),
    "DynamicBatchIterable": lambda **kw: dynbatch.DynamicBatchIterable(
        DATA, length_fn=length, **kw
    ),
    "like_fixed": lambda **kw: dynbatch.like_fixed(LENS, kw.pop("batch_size", 8), **kw),
}
BUDGETS = ({"batch_size": 8}, {"batch_size": 8, "pack_len": 128}, {"max_cost": 500})


@pytest.mark.parametrize("budget", BUDGETS, ids=lambda b: ",".join(b))
@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("shuffle", [True, False])
def test_shuffle_is_named_as_written_with_the_order_to_write(
    entry: str, budget: dict[str, int], shuffle: bool
) -> None:
    if entry == "DynamicBatchIterable" and "batch_size" in budget:
        budget = {"max_cost": 500, **{k: v for k, v in budget.items() if k != "batch_size"}}
    if entry == "like_fixed" and "max_cost" in budget:
        budget = {"batch_size": 8}
    with pytest.raises(dynbatch.InputTypeError) as info:
        ENTRIES[entry](**budget, shuffle=shuffle)
    message = str(info.value)
    assert message.startswith(f"{entry} got shuffle={shuffle}, which is paddle's"), message
    assert "order='bucket' (the default)" in message and "order='none'" in message, message
    if entry != "like_fixed":
        assert "like_fixed" not in message, "a function the user never called"


def test_what_it_says_to_write_is_taken() -> None:
    for order in ("bucket", "shuffle", "none"):
        sampler = dynbatch.DynamicBatchSampler(lengths=LENS, batch_size=8, order=order)
        assert sampler.options.order == order
