"""What the PaddleFormers tests train: the paddlenlp tests' toys on PaddleFormers' own classes.

The data, collators and references are those of ``tests/scripts`` (``trainer_toy``: the
reviews, their collator, the gradient of the mean over a step's samples; ``lm_toy``: the
prompt -> answer pairs with masked prompts, the gradient of the mean over their loss tokens),
which import no framework. What is PaddleFormers' own is here: its ``TrainingArguments`` and
``TrainerCallback`` in the same helpers, a classifier (PaddleFormers has no BERT), and a tiny
``LlamaForCausalLM`` for the causal LM.

NOTE [ the causal LM of the PaddleFormers tests ]
    The packed tests need a decoder that takes ``position_ids`` and FlashMask's
    ``attn_mask_startend_row_indices`` as PaddleFormers' models do. paddleformers 1.2.0's
    ``LlamaForCausalLM`` builds and trains on a CPU without ``paddlefleet`` (not on PyPI) once
    ``fuse_rms_norm=False``, so it is that decoder: :func:`tiny_llama` is the one place that
    builds it. ``Qwen2ForCausalLM`` needs ``paddlefleet`` to be built; where it installs, the
    same tests take it by changing :func:`tiny_llama` alone (``Qwen2Config`` with the same
    sizes, ``Qwen2ForCausalLM(config)``).

paddle names parameters and optimizer moments from process-wide counters, and PaddleFormers'
Trainer checks a loaded optimizer's names against them ("Optimizer set error, ... should in
state dict"), so each model is built, and each run trained, inside
``paddle.utils.unique_name.guard()`` (:func:`fresh_names`): the library's own runs never need
that (one Trainer a process), a test making several does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import lm_toy  # tests/scripts: conftest.py puts it on the path
import paddle
import trainer_toy
from paddleformers.trainer import TrainerCallback, TrainingArguments

#: What every TrainingArguments of these tests needs (NOTE [ PaddleFormers' defaults ] in
#: dynbatch/integrations/paddleformers/adapter.py): without fp16 or bf16, PaddleFormers refuses
#: its own default amp_master_grad=True; on several ranks its default sharding="stage1" shards
#: the optimizer (and asserts amp_master_grad), where dynbatch trains data parallel.
PF_ARGS: dict[str, Any] = {"amp_master_grad": False, "sharding": ""}


def make_args(out: Any, **changes: Any) -> Any:
    """The paddlenlp tests' arguments (trainer_toy.make_args), PaddleFormers' class."""
    return trainer_toy.make_args(out, arguments=TrainingArguments, **{**PF_ARGS, **changes})


def make_recorder(**kw: Any) -> Any:
    """trainer_toy.make_recorder on PaddleFormers' TrainerCallback."""
    return trainer_toy.make_recorder(callback=TrainerCallback, **kw)


@contextlib.contextmanager
def fresh_names() -> Iterator[None]:
    """paddle's name counters afresh within the block, as in a new process."""
    with paddle.utils.unique_name.guard():
        yield


class Classifier(paddle.nn.Layer):  # type: ignore[misc]
    """Mean of the token embeddings (padding left out), then a linear layer: the logits."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = paddle.nn.Embedding(trainer_toy.VOCAB, 16)
        self.out = paddle.nn.Linear(16, 2)

    def forward(self, input_ids: Any) -> Any:
        real = (input_ids != trainer_toy.PAD).astype("float32").unsqueeze(-1)
        return self.out((self.embed(input_ids) * real).sum(1) / real.sum(1))


def classifier(seed: int = 0) -> Classifier:
    paddle.seed(seed)
    return Classifier()


def tiny_llama(seed: int = 0, attention: str = "eager") -> Any:
    """PaddleFormers' LlamaForCausalLM of lm_toy's sizes (paddlenlp's tiny Qwen2's): built, not
    loaded (NOTE [ the causal LM of the PaddleFormers tests ])."""
    from paddleformers.transformers import LlamaConfig, LlamaForCausalLM

    paddle.seed(seed)
    config = LlamaConfig(
        **lm_toy.SIZES,
        fuse_rms_norm=False,  # the fused kernel needs paddlefleet
        _attn_implementation=attention,
    )
    return LlamaForCausalLM(config)
