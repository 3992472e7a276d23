"""What a sampler told the fixed batch would silently override or ignore is refused by name:
an ``update_size`` beside ``batch_size``, a fractional sample count, a ``fixed_step_size`` with
packing; and a stream's sample longer than a packed row names ``pack_len``, which would fit
it."""

from __future__ import annotations

import numpy as np
import pytest

import dynbatch

LENS = np.random.default_rng(0).integers(5, 128, 300)


@pytest.mark.parametrize("packed", [{}, {"pack_len": 256}])
def test_update_size_beside_batch_size_is_refused_naming_both(packed: dict[str, int]) -> None:
    with pytest.raises(dynbatch.InputError) as info:
        dynbatch.DynamicBatchSampler(lengths=LENS, batch_size=16, update_size=64, **packed)
    message = str(info.value)
    assert message.startswith("DynamicBatchSampler(batch_size=16) makes the fixed batch's"), message
    assert "update_size=64" in message and "accumulation_steps=" in message
    sampler = dynbatch.DynamicBatchSampler(lengths=LENS, batch_size=16, accumulation_steps=4)
    assert sampler.options.update_size == 64, "what it says to write instead"


@pytest.mark.parametrize(("size", "valid"), [(0.5, "give 1,"), (2.5, "give 2 or 3,")])
def test_a_fractional_sample_count_is_refused_not_rounded(size: float, valid: str) -> None:
    with pytest.raises(dynbatch.InputError, match=rf"got update_size={size}; {valid}"):
        dynbatch.DynamicBatchSampler(lengths=LENS, max_cost=10**6, update_size=size)
    tokens = dynbatch.PlanOptions(max_cost=10**6, update_size=2.5, update_unit="tokens")
    assert tokens.update_size == 2.5, "tokens may be fractional"
    assert dynbatch.PlanOptions(max_cost=10**6, update_size=3.0).update_size == 3


def test_fixed_step_size_acts_with_a_time_model_and_is_refused_with_packing() -> None:
    timed = dynbatch.DynamicBatchSampler(
        lengths=LENS, batch_size=16, time_model="0.01,1e-4,1e-6", fixed_step_size=8
    )
    assert timed.options.fixed_step_size == 8
    with pytest.raises(dynbatch.InputError, match=r"fixed_step_size=8 .* pack_len=256"):
        dynbatch.DynamicBatchSampler(lengths=LENS, batch_size=16, pack_len=256, fixed_step_size=8)
    with pytest.raises(dynbatch.InputError, match=r"fixed_step_size=8 .* needs time_model="):
        dynbatch.like_fixed(LENS, 16, fixed_step_size=8)


def test_a_streams_sample_longer_than_a_row_names_pack_len() -> None:
    data = [{"input_ids": [1] * int(n)} for n in LENS]
    stream = dynbatch.DynamicBatchIterable(
        data,
        length_fn=lambda s: len(s["input_ids"]),
        options=dynbatch.like_fixed(LENS, 8, pack_len=100),
    )
    with pytest.raises(dynbatch.InputError, match=r"longer than a row of pack_len=100") as info:
        list(stream)
    assert "Raise pack_len," in str(info.value) and "max_cost" not in str(info.value)
