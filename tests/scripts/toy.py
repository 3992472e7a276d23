"""A toy corpus and model shared by the real-process test scripts (imported by them)."""

from __future__ import annotations

import numpy as np
import paddle


class Toy(paddle.io.Dataset):  # type: ignore[misc]
    """Token ids of long-tailed lengths; the label field is the sample's own index."""

    def __init__(self, n: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.lengths = np.minimum(np.ceil(rng.lognormal(3.0, 0.9, n)), 160).astype(np.int64)
        self.ids = [rng.integers(1, 500, k).astype("int64") for k in self.lengths]

    def __getitem__(self, i: int):  # type: ignore[no-untyped-def]
        return self.ids[i], np.int64(i)

    def __len__(self) -> int:
        return len(self.ids)


class Bag(paddle.nn.Layer):  # type: ignore[misc]
    """Mean of embeddings, then a linear layer: small, deterministic, has real gradients."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = paddle.nn.Embedding(500, 16)
        self.out = paddle.nn.Linear(16, 2)

    def forward(self, ids):  # type: ignore[no-untyped-def]
        mask = (ids > 0).astype("float32").unsqueeze(-1)
        pooled = (self.emb(ids) * mask).sum(axis=1) / mask.sum(axis=1)
        return self.out(pooled)


def per_sample_loss(model, ids, index):  # type: ignore[no-untyped-def]
    """Cross entropy per sample, label = parity of the index."""
    logits = model(ids)
    return paddle.nn.functional.cross_entropy(logits, (index % 2).unsqueeze(-1), reduction="none")
