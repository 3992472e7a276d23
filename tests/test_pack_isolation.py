"""Packed equals unpacked, on real paddlenlp models (CPU, float32).

Each sample's logits in a packed row are its logits alone; changing one sample
changes no other; the gradient of a packed micro-batch's per-token mean is the
pooled per-token mean of the same samples unpacked; a BERT's [CLS] pooled in a
packed row is the sample's alone. Qwen2's rotary positions are relative, so
restarting them per sample matters little to it; BERT's are absolute: a packed
row whose positions ran on would fail its test (checked when it was written, as
were a causal mask that leaks across samples and labels that train a sample's
first token on the sample before).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import dynbatch

pytest.importorskip("paddlenlp")  # and paddle, which it needs
import paddle
from packed_models import MAX_POSITIONS, VOCAB, gradients, packed_pooled, tiny_bert, tiny_qwen2

PACK_LEN = MAX_POSITIONS
LENGTHS = [17, 9, 20, 5, 12, 30, 3, 14]


def samples(seed: int = 0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    out = []
    for n in LENGTHS:
        ids = rng.integers(1, VOCAB, n)
        labels = ids.copy()
        labels[: n // 3] = -100  # a prompt without a loss
        out.append({"input_ids": ids, "labels": labels, "token_type_ids": rng.integers(0, 2, n)})
    return out


@pytest.fixture(scope="module")
def qwen2() -> Any:
    return tiny_qwen2()


def logits(model: Any, batch: dict[str, Any]) -> Any:
    out = model(
        input_ids=paddle.to_tensor(batch["input_ids"]),
        position_ids=paddle.to_tensor(batch["position_ids"]),
        attention_mask=paddle.to_tensor(batch["attention_mask"]),
    )
    return out[0] if isinstance(out, (tuple, list)) else out.logits


def alone(model: Any, ids: Any) -> Any:
    out = model(input_ids=paddle.to_tensor(np.asarray(ids)[None]))
    return (out[0] if isinstance(out, (tuple, list)) else out.logits)[0]


def columns(batch: dict[str, Any]) -> list[tuple[int, Any]]:
    """``(row, columns)`` of each sample, in the order given."""
    where = []
    for r in range(batch["sample_ids"].shape[0]):
        for k in range(int(batch["sample_ids"][r].max()) + 1):
            where.append((r, np.flatnonzero(batch["sample_ids"][r] == k)))
    return where


def test_a_packed_samples_logits_are_its_logits_alone(qwen2: Any) -> None:
    data = samples()
    batch = dynbatch.PackCollator(PACK_LEN)(data)
    assert batch["input_ids"].shape[0] < len(data), "several samples share a row"
    packed = logits(qwen2, batch).numpy()
    for k, (r, cols) in enumerate(columns(batch)):
        ref = alone(qwen2, data[k]["input_ids"]).numpy()
        np.testing.assert_allclose(packed[r, cols], ref, atol=1e-4, rtol=0, err_msg=f"sample {k}")


def test_changing_one_sample_changes_no_other_samples_logits(qwen2: Any) -> None:
    data = samples()
    collate = dynbatch.PackCollator(PACK_LEN)
    batch = collate(data)
    before = logits(qwen2, batch).numpy()
    changed = [dict(s) for s in data]
    changed[1]["input_ids"] = (data[1]["input_ids"] + 7) % VOCAB
    after = logits(qwen2, collate(changed)).numpy()
    where = columns(batch)
    for k, (r, cols) in enumerate(where):
        if k == 1:
            assert not np.allclose(after[r, cols], before[r, cols]), "the changed sample changes"
        else:
            np.testing.assert_allclose(after[r, cols], before[r, cols], atol=1e-6, rtol=0)


def test_a_packed_updates_gradient_is_the_pooled_per_token_mean_unpacked(qwen2: Any) -> None:
    data = samples(1)
    batch = dynbatch.PackCollator(PACK_LEN)(data)
    qwen2.clear_gradients()
    loss_sum, count = dynbatch.token_loss(logits(qwen2, batch), paddle.to_tensor(batch["labels"]))
    (loss_sum / count.astype("float32")).backward()
    packed = gradients(qwen2)
    qwen2.clear_gradients()
    sums, counts = [], []
    for s in data:
        ls, c = dynbatch.token_loss(
            alone(qwen2, s["input_ids"])[None], paddle.to_tensor(s["labels"][None])
        )
        sums.append(ls)
        counts.append(int(c))
    assert int(count) == sum(counts), "the same loss tokens"
    (paddle.add_n(sums) / float(sum(counts))).backward()
    unpacked = gradients(qwen2)
    qwen2.clear_gradients()
    assert len(packed) == len(unpacked) > 0
    for a, b in zip(packed, unpacked, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)


def test_a_bert_samples_cls_in_a_packed_row_is_its_cls_alone() -> None:
    model = tiny_bert()
    data = samples(2)
    batch = dynbatch.PackCollator(PACK_LEN, causal=False)(data)
    pooled = packed_pooled(model, batch).numpy()
    for k, s in enumerate(data):
        ref = model(
            input_ids=paddle.to_tensor(s["input_ids"][None]),
            token_type_ids=paddle.to_tensor(s["token_type_ids"][None]),
        )[1].numpy()[0]
        np.testing.assert_allclose(pooled[k], ref, atol=1e-4, rtol=0, err_msg=f"sample {k}")
