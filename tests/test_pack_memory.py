"""With the default budget, every packed micro-batch peaks within the fixed batch's worst.

paddle's own host allocator (``host_memory_stat_peak_value``) measures one forward and
backward of a tiny paddlenlp Qwen2 on the fixed batch's worst batch (``B`` samples of the
longest length, padded) and on the widest packed micro-batches that ``like_fixed(lengths, B,
pack_len=P)`` can deal: ``max_rows`` full rows of its ``pack_len``, run with the dense block
mask (NOTE [ the default budget of packed rows ]). Log-normal lengths cut at 512, ``B = 8``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from dynbatch import PackCollator, like_fixed

pytest.importorskip("paddlenlp")
import paddle
from packed_models import VOCAB, tiny_qwen2

from dynbatch.memory import peak_memory_mib, reset_peak_memory

B = 8
CUT = 512


def peak(model: Any, inputs: dict[str, Any]) -> float:
    """MiB of paddle's host allocator at its peak over one forward and backward."""
    tensors = {k: paddle.to_tensor(v) for k, v in inputs.items()}
    reset_peak_memory()
    out = model(**tensors, return_dict=True)
    out.logits.mean().backward()
    mib = peak_memory_mib()
    model.clear_gradients()
    return mib


@pytest.fixture(scope="module")
def model() -> Any:
    return tiny_qwen2(max_positions=8192)


def test_every_default_packed_micro_batch_peaks_within_the_fixed_batchs_worst(model: Any) -> None:
    rng = np.random.default_rng(0)
    lens = np.clip(rng.lognormal(5.5, 0.8, 400).astype(np.int64), 2, CUT)
    longest = int(lens.max())
    ids = rng.integers(1, VOCAB, (B, longest))
    fixed = peak(model, {"input_ids": ids, "attention_mask": np.ones((B, longest), np.int64)})
    for pack_len in (1024, 2048, 4096):
        options = like_fixed(lens, B, pack_len=pack_len)
        width, rows = options.pack_len, options.max_rows  # the widest micro-batch it deals
        row = [rng.integers(1, VOCAB, longest), rng.integers(1, VOCAB, width - longest)]
        batch = PackCollator(width, attention="dense")(row * rows)
        assert batch["input_ids"].shape == (rows, width)
        inputs = {k: batch[k] for k in ("input_ids", "position_ids", "attention_mask")}
        ratio = peak(model, inputs) / fixed
        assert ratio <= 1.0, f"pack_len={pack_len}: ({rows}, {width}) peaks at {ratio:.2f}x"
