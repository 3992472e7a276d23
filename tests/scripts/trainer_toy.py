"""A tiny BERT and a toy classification set for the Trainer tests (imported by them)."""

from __future__ import annotations

from typing import Any

import numpy as np
import paddle

VOCAB = 60
PAD = 0


class Reviews(paddle.io.Dataset):  # type: ignore[misc]
    """``{"input_ids", "labels"}`` samples of 3..max_len tokens; the label is a token parity."""

    def __init__(self, n: int, seed: int = 0, max_len: int = 24) -> None:
        rng = np.random.default_rng(seed)
        self.lengths = rng.integers(3, max_len + 1, n).astype(np.int64)
        self.ids = [rng.integers(1, VOCAB, k).astype("int64") for k in self.lengths]
        self.labels = np.array([int(ids[0] % 2) for ids in self.ids], dtype=np.int64)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"input_ids": self.ids[i], "labels": self.labels[i]}

    def __len__(self) -> int:
        return len(self.ids)


def collate(samples: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Pad ``input_ids`` with 0 (BERT masks the pad id), stack the labels."""
    longest = max(len(s["input_ids"]) for s in samples)
    ids = np.full((len(samples), longest), PAD, dtype=np.int64)
    for row, s in enumerate(samples):
        ids[row, : len(s["input_ids"])] = s["input_ids"]
    return {"input_ids": ids, "labels": np.array([s["labels"] for s in samples], dtype=np.int64)}


def tiny_bert(seed: int = 0, dropout: float = 0.0) -> Any:
    from paddlenlp.transformers import BertConfig, BertForSequenceClassification

    paddle.seed(seed)
    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        num_labels=2,
        pad_token_id=PAD,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
    )
    return BertForSequenceClassification(config)


def reference_grads(model: Any, ds: Reviews, indices: np.ndarray, weights: np.ndarray) -> dict:
    """Gradients of ``sum(w_i * loss_i) / sum(w_i)`` over ``indices``, in one forward/backward."""
    batch = collate([ds[int(i)] for i in indices])
    model.clear_gradients()
    logits = model(input_ids=paddle.to_tensor(batch["input_ids"]))
    losses = paddle.nn.functional.cross_entropy(
        logits, paddle.to_tensor(batch["labels"]), reduction="none"
    ).reshape([-1])
    w = paddle.to_tensor(weights.astype("float32"))
    ((losses * w).sum() / w.sum()).backward()
    grads = {n: p.grad.numpy().copy() for n, p in model.named_parameters() if p.grad is not None}
    model.clear_gradients()
    return grads
