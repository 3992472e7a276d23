"""The paddlenlp adapter: paddlenlp's names as the core's :class:`~dynbatch.integrations.core.Host`,
and its ``Trainer`` with the core mixed in.

Everything else is :mod:`dynbatch.integrations.core`'s, shared with every adapter
(NOTE [ one core, one host per adapter ] in :mod:`dynbatch.integrations.core.host`). What is
paddlenlp's own is here: its causal LMs take a packed row's mask as a 3-D ``attention_mask``,
used as given by the decoders' ``_prepare_decoder_attention_mask`` (the model classes read are
the host's ``touched_models``), and ignore every mask under ``USE_CASUAL_MASK=True``.
"""

from __future__ import annotations

import os
from typing import Any

from paddlenlp.trainer import Trainer  # the host's, subclassed

from ..._checks import InputError
from ..core import CausalPacking, DynamicBatchTrainerCore, Host, framework_names

__all__ = ["PADDLENLP", "DynamicBatchTrainer", "takes_3d_mask"]


def takes_3d_mask(base_model: Any) -> bool:
    """Whether ``base_model`` prepares its mask with paddlenlp's decoders'
    ``_prepare_decoder_attention_mask``, which uses a bool ``[R, P, P]`` mask as given."""
    return callable(getattr(type(base_model), "_prepare_decoder_attention_mask", None))


def _mask_honoured(model: Any, pack_len: int) -> None:
    """Refuse packing where paddlenlp's causal LMs ignore the mask (``USE_CASUAL_MASK``)."""
    if os.getenv("USE_CASUAL_MASK", "False") == "True":
        raise InputError(
            f"pack_len={pack_len}: USE_CASUAL_MASK=True is set, so paddlenlp's "
            f"{type(model).__name__} ignores the attention_mask and would let each token of a "
            "packed row attend to the samples before it; unset USE_CASUAL_MASK"
        )


#: paddlenlp 3.0.0b4's Trainer as the core reaches it.
PADDLENLP = Host(
    name="paddlenlp",
    written_for="3.0.0b4",
    **framework_names("paddlenlp"),
    parallel_degrees={
        name: f"{name}=1"
        for name in (
            "tensor_parallel_degree",
            "pipeline_parallel_degree",
            "sharding_parallel_degree",
            "sep_parallel_degree",
            "context_parallel_degree",
        )
    },
    causal_packing=CausalPacking(
        mask_field="attention_mask",
        mask="a 3-D attention_mask",
        models="paddlenlp's decoders",
        examples="paddlenlp's Qwen2ForCausalLM or LlamaForCausalLM",
        accepts=takes_3d_mask,
        check=_mask_honoured,
    ),
    # model classes (by import path, loaded with the user's model), and the private names of
    # them read: a decoder whose mask preparation uses a 3-D attention_mask as given
    touched_models={
        "paddlenlp.transformers.qwen2.modeling.Qwen2Model": ("_prepare_decoder_attention_mask",),
        "paddlenlp.transformers.llama.modeling.LlamaModel": ("_prepare_decoder_attention_mask",),
    },
)


class DynamicBatchTrainer(DynamicBatchTrainerCore, Trainer):  # type: ignore[misc]
    __doc__ = DynamicBatchTrainerCore.__doc__  # every argument described once, on the core
    host = PADDLENLP
