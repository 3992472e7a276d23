"""The tiny paddlenlp models the packed tests run (built from configs, CPU float32), and what
those tests share: each sample's [CLS] pooled from packed rows, the parameters' gradients.

Used by tests/test_pack_isolation.py (each sample alone) and tests/test_pack_equivalence.py
(a packed update is the fixed batch's).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import paddle

from dynbatch.paddle.pack_collate import additive_mask

__all__ = [
    "MAX_POSITIONS",
    "VOCAB",
    "default_dtype",
    "gradients",
    "packed_pooled",
    "tiny_bert",
    "tiny_qwen2",
]

VOCAB = 1000
#: BERT's position table; a packed row's positions restart at each sample, so a row may be
#: wider than this, a sample may not
MAX_POSITIONS = 48


@contextlib.contextmanager
def default_dtype(dtype: str) -> Iterator[None]:
    """paddle's default float dtype, ``dtype`` within the block and as it was after."""
    before = paddle.get_default_dtype()
    paddle.set_default_dtype(dtype)
    try:
        yield
    finally:
        paddle.set_default_dtype(before)


def tiny_qwen2(seed: int = 0, dtype: str = "float32", max_positions: int = MAX_POSITIONS) -> Any:
    """paddlenlp's Qwen2ForCausalLM, hidden 64, 2 layers, its weights ``dtype``, positions up to
    ``max_positions``, in eval mode (no dropout: the same sample gives the same logits)."""
    from paddlenlp import transformers  # imported where used: paddlenlp is optional

    paddle.seed(seed)
    config = transformers.Qwen2Config(
        vocab_size=VOCAB,
        max_position_embeddings=max_positions,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        intermediate_size=192,
        use_cache=False,
        tie_word_embeddings=False,
    )
    with default_dtype(dtype):
        model = transformers.Qwen2ForCausalLM(config)
    model.eval()
    return model


def tiny_bert(
    classifier: bool = False, seed: int = 0, num_labels: int = 3, dtype: str = "float32"
) -> Any:
    """paddlenlp's BertModel (or, with ``classifier``, BertForSequenceClassification of
    ``num_labels``), hidden 64, 2 layers, its weights ``dtype``, in eval mode.

    ``initializer_range=0.2`` makes its positions matter: at 0.02 a sample's [CLS] moves
    less than 1e-4 when its positions run on.
    """
    from paddlenlp import transformers

    paddle.seed(seed)
    config = transformers.BertConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=MAX_POSITIONS,
        initializer_range=0.2,
        num_labels=num_labels,
    )
    with default_dtype(dtype):
        model = (
            transformers.BertForSequenceClassification(config)
            if classifier
            else transformers.BertModel(config)
        )
    model.eval()
    return model


def packed_pooled(bert: Any, rows: dict[str, Any]) -> Any:
    """Each sample's [CLS], pooled by ``bert`` (a BertModel) from packed ``rows``
    (``PackCollator(causal=False)``'s): ``[S, hidden]``, the samples in the order given."""
    mask = paddle.to_tensor(additive_mask(rows["attention_mask"]))
    seq = bert(
        input_ids=paddle.to_tensor(rows["input_ids"]),
        token_type_ids=paddle.to_tensor(rows["token_type_ids"]),
        position_ids=paddle.to_tensor(rows["position_ids"]),
        attention_mask=mask.astype(bert.pooler.dense.weight.dtype),  # the model's floats
    )[0]
    starts = rows["sample_starts"]
    r, k = np.nonzero(starts >= 0)  # row by row: the order the samples were given
    cls = paddle.gather_nd(seq, paddle.to_tensor(np.stack([r, starts[r, k]], axis=1)))
    return bert.pooler(cls[:, None, :])


def gradients(model: Any) -> list[Any]:
    """Copies of the parameters' gradients (those that have one), in parameter order."""
    return [p.grad.numpy().copy() for p in model.parameters() if p.grad is not None]
