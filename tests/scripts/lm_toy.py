"""A tiny paddlenlp causal LM and prompt -> answer pairs with masked prompts, for token losses.

Imported by tests/test_token_loss.py and by the scripts it runs in their own processes
(lm_grad.py, lm_resume.py), so all of them train the same way. Each pair is random token
ids; its first ``prompt`` tokens are the prompt, labelled -100, and the prompt's share of
the sample differs from pair to pair, so micro-batches differ in loss tokens per token.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import paddle

import dynbatch

VOCAB = 1000
PAD = 0
IGNORE = -100


#: The tiny causal LMs' sizes (paddlenlp's here, PaddleFormers' in tests/paddleformers/pf_toy.py)
SIZES: dict[str, Any] = {
    "vocab_size": VOCAB,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "max_position_embeddings": 256,
}


def tiny_lm(seed: int = 0, dropout: float = 0.0) -> Any:
    """paddlenlp's Qwen2ForCausalLM, hidden 64, 2 layers, vocabulary 1,000: built, not loaded."""
    from paddlenlp.transformers import Qwen2Config, Qwen2ForCausalLM

    paddle.seed(seed)
    config = Qwen2Config(
        **SIZES,
        attention_dropout=dropout,
        use_flash_attention=False,
    )
    return Qwen2ForCausalLM(config)


class Pairs(paddle.io.Dataset):  # type: ignore[misc]
    """``{"input_ids", "labels"}``: lengths 4..48, the prompt 10-90% of each, labelled -100."""

    def __init__(self, n: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.lengths = np.clip(np.ceil(rng.lognormal(2.8, 0.5, n)), 4, 48).astype(np.int64)
        self.ids = [rng.integers(1, VOCAB, k).astype("int64") for k in self.lengths]
        self.labels = []
        for ids in self.ids:
            prompt = int(np.clip(round(rng.uniform(0.1, 0.9) * ids.size), 1, ids.size - 1))
            labels = ids.copy()
            labels[:prompt] = IGNORE
            self.labels.append(labels)
        self.loss_tokens = dynbatch.loss_token_counts(self.labels)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"input_ids": self.ids[i], "labels": self.labels[i]}

    def __len__(self) -> int:
        return len(self.ids)


def collate(samples: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Pad on the right: ``input_ids`` with 0, ``labels`` with -100 (no loss on padding)."""
    longest = max(len(s["input_ids"]) for s in samples)
    ids = np.full((len(samples), longest), PAD, dtype=np.int64)
    labels = np.full((len(samples), longest), IGNORE, dtype=np.int64)
    for row, s in enumerate(samples):
        ids[row, : len(s["input_ids"])] = s["input_ids"]
        labels[row, : len(s["labels"])] = s["labels"]
    return {"input_ids": ids, "labels": labels}


def pair_data(ds: Pairs) -> dict[str, Any]:
    """The Trainer's data keywords for ``ds``: the pairs, their collator and lengths."""
    return {"train_dataset": ds, "data_collator": collate, "lengths": ds.lengths}


def lm_trainer(out: Any, ds: Pairs, *, dropout: float = 0.0, **kw: Any) -> Any:
    """DynamicBatchTrainer on token losses: updates of 16 pairs' loss tokens, the exact mean.

    ``args`` (a dict) changes the TrainingArguments; other keywords go to the Trainer.
    """
    from trainer_toy import make_args

    from dynbatch.integrations.paddlenlp import DynamicBatchTrainer, token_cross_entropy

    args = make_args(out, **{"per_device_train_batch_size": 16, **kw.pop("args", {})})
    return DynamicBatchTrainer(
        model=kw.pop("model", None) or tiny_lm(dropout=dropout),
        args=args,
        **pair_data(ds),
        loss_tokens=kw.pop("loss_tokens", ds.loss_tokens),
        accumulate=kw.pop("accumulate", "tokens"),
        loss_fn=kw.pop("loss_fn", token_cross_entropy),
        **kw,
    )


def logits_of(model: Any, ids: Any) -> Any:
    out = model(input_ids=ids)
    return out[0] if isinstance(out, (tuple, list)) else out.logits


def grads_of(model: Any) -> dict[str, np.ndarray]:
    grads = {n: p.grad.numpy().copy() for n, p in model.named_parameters() if p.grad is not None}
    model.clear_gradients()
    return grads


def reference_grads(model: Any, ds: Pairs, indices: np.ndarray) -> dict[str, np.ndarray]:
    """Gradients of the mean over every loss token of ``indices``, in one forward/backward."""
    batch = collate([ds[int(i)] for i in indices])
    model.clear_gradients()
    logits = logits_of(model, paddle.to_tensor(batch["input_ids"]))
    total, count = dynbatch.token_loss(logits, paddle.to_tensor(batch["labels"]))
    (total / count.astype("float32")).backward()
    return grads_of(model)


def stock_grads(model: Any, ds: Pairs, micro_batches: list[np.ndarray]) -> dict[str, np.ndarray]:
    """What a fixed-batch loop does: each micro-batch's own per-token mean, averaged over them."""
    model.clear_gradients()
    for indices in micro_batches:
        batch = collate([ds[int(i)] for i in indices])
        logits = logits_of(model, paddle.to_tensor(batch["input_ids"]))
        total, count = dynbatch.token_loss(logits, paddle.to_tensor(batch["labels"]))
        (total / count.astype("float32") / len(micro_batches)).backward()
    return grads_of(model)


def worst(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    """The largest absolute difference between two sets of gradients."""
    return max(float(np.abs(a[n] - b[n]).max()) for n in b)


def scale(grads: dict[str, np.ndarray]) -> float:
    return max(float(np.abs(g).max()) for g in grads.values())
