"""Packed micro-batches in the Trainer: the models it drives, its collator, its forward.

NOTE [ the Trainer packs ]
    With ``pack_len`` the sampler yields packed micro-batches (NOTE [ packed epochs ] in
    :mod:`dynbatch.plan.pack_epochs`) and the Trainer trains each as the rows of
    :class:`~dynbatch.PackCollator`, every sample alone in its row (NOTE [ one sample,
    alone in its row ] in :mod:`dynbatch.paddle.pack_collate`), laid out as the plan priced
    it: packed rows, or with a step time (probed as unpacked, or given) padded, a sample a
    row, where that is faster (NOTE [ a micro-batch's layout ]); the fields are the same.
    Two kinds of model are driven, recognised by what they are when the Trainer is made;
    any other is refused by name then, not at the first step:

    * **A causal LM**: a ``...ForCausalLM`` whose ``forward`` takes ``position_ids`` and
      ``attention_mask``, and whose base model (under ``base_model_prefix``) prepares its
      mask the way paddlenlp's decoders do, using a 3-D mask as given (Qwen2, Llama,
      Mistral, Gemma and GPT in 3.0.0b4; :func:`~._compat.takes_3d_mask`). It is fed ``input_ids``,
      ``position_ids`` and the bool block mask ``[R, P, P]``; the labels are the packed
      ones (each sample's first label hidden, fill hidden), and the loss is the Trainer's
      token loss (:func:`~.losses.token_cross_entropy`, the default here, shifted as the
      collator's labels are). Its ``(loss_sum, count)`` counts the rows' loss tokens,
      which are the samples' own, so an update is the pooled per-token mean over every
      loss token of its rows, micro-batches and ranks, as unpacked. paddlenlp ignores
      every mask under ``USE_CASUAL_MASK=True``: that is refused too.
    * **A sequence classifier**: a ``...ForSequenceClassification`` with a ``classifier``
      layer and its base model under ``base_model_prefix``, the base holding a
      ``pooler`` and taking ``position_ids`` and ``attention_mask``. Its own forward would
      pool each row's first token, one sample a row, so the Trainer runs the base model
      on the rows with the additive block mask (:func:`~dynbatch.paddle.pack_collate.
      additive_mask`) and each sample's own positions, gathers each sample's first token
      (its ``[CLS]``, at ``sample_starts``), pools it with the model's own pooler, then
      the model's dropout and classifier: ``[S, num_labels]`` logits, one a sample, in
      the order the sampler gave them (the collator's rows are next-fit of that order).
      The labels are the samples' own, one each, so the Trainer's per-sample loss is
      divided by the update's samples over all ranks, as unpacked (NOTE [ one update,
      one mean ]). Under ``DataParallel`` this forward runs as the wrapped model's,
      through the wrapper's call, which readies the gradient all-reduce
      (:func:`~._compat.call_as_forward`).

    A sample is a dict: ``input_ids``, the label field (``args.label_names[0]``, or
    paddlenlp's ``label``; a causal LM's token labels may be left out, the ids are
    then the labels) and, for an encoder, ``token_type_ids``; a causal LM's may also be
    an ``(input_ids, labels)`` pair. A 0/1 ``attention_mask`` and ``position_ids``
    are taken as :class:`~dynbatch.PackCollator` takes them (its 0 tokens, padding,
    left out; positions counting from 0 over the real tokens), and any other field,
    which the rows would drop, is refused by name: one rule, NOTE [ a sample's own
    fields ] in :mod:`dynbatch.paddle.pack_collate`.
    Evaluation stays unpacked: the user's ``data_collator`` and the model's own forward.
    The training collator is built by one function, :func:`pack_collator`, from the
    sampler: its options decide the rows. Its error reaches the training loop by name as
    any collator's does in the Trainer's train loader (:func:`dynbatch.safe_collate`,
    NOTE [ a collate error in paddle's DataLoader ]).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import paddle
from numpy.typing import NDArray

from ..._checks import InputError, InputTypeError
from ...paddle.pack_collate import REBUILT_FIELDS, PackCollator, additive_mask, refuse_other_fields
from ._compat import call_as_forward, takes_3d_mask

__all__ = [
    "CAUSAL_LM",
    "CLASSIFIER",
    "Packed",
    "pack_collator",
    "packed_model",
    "packed_outputs",
]

CAUSAL_LM = "causal LM"
CLASSIFIER = "sequence classifier"


@dataclass(frozen=True)
class Packed:
    """How the Trainer packs for its model (NOTE [ the Trainer packs ]).

    Attributes:
        kind: :data:`CAUSAL_LM` or :data:`CLASSIFIER`.
        label_name: the batch's label field (``args.label_names[0]``).
        pad_val: the id on a row's fill (the model's ``pad_token_id``, else 0).
    """

    kind: str
    label_name: str
    pad_val: int


def _takes(fn: Any, *names: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return set(names) <= set(params)


def packed_model(model: Any, label_name: str, pack_len: int) -> Packed:
    """What packing ``model`` takes; a model the Trainer cannot pack for is refused by name."""
    name = type(model).__name__
    prefix = getattr(model, "base_model_prefix", None)
    base = getattr(model, prefix, None) if isinstance(prefix, str) else None
    config = getattr(model, "config", None)
    pad = getattr(config, "pad_token_id", None)
    pad_val = int(pad) if isinstance(pad, int) and not isinstance(pad, bool) and pad >= 0 else 0
    why = "it is neither"
    if name.endswith("ForCausalLM"):
        why = "its forward does not take position_ids and attention_mask"
        if _takes(model.forward, "position_ids", "attention_mask"):
            why = (
                f"its base model (model.{prefix}) does not take a 3-D attention_mask as given, "
                "as paddlenlp's decoders do"
            )
            if takes_3d_mask(base):
                if os.getenv("USE_CASUAL_MASK", "False") == "True":
                    raise InputError(
                        f"pack_len={pack_len}: USE_CASUAL_MASK=True is set, so paddlenlp's "
                        f"{name} ignores the attention_mask and would let each token of a "
                        "packed row attend to the samples before it; unset USE_CASUAL_MASK"
                    )
                return Packed(CAUSAL_LM, label_name, pad_val)
    elif name.endswith("ForSequenceClassification"):
        parts = {
            f"a base model under base_model_prefix (model.{prefix})": base is not None,
            f"a pooler (model.{prefix}.pooler)": isinstance(
                getattr(base, "pooler", None), paddle.nn.Layer
            ),
            "a classifier layer (model.classifier)": isinstance(
                getattr(model, "classifier", None), paddle.nn.Layer
            ),
            "a base model taking position_ids and attention_mask": base is not None
            and _takes(base.forward, "position_ids", "attention_mask"),
        }
        missing = [part for part, ok in parts.items() if not ok]
        if not missing:
            return Packed(CLASSIFIER, label_name, pad_val)
        why = f"it has no {', no '.join(missing)}"
    raise InputTypeError(
        f"pack_len={pack_len} trains packed rows, which the Trainer can feed to a causal LM "
        "(a ...ForCausalLM taking position_ids and a 3-D attention_mask, such as paddlenlp's "
        "Qwen2ForCausalLM or LlamaForCausalLM) or to a sequence classifier (a "
        "...ForSequenceClassification whose base model has a pooler, such as "
        f"BertForSequenceClassification); got model={name}: {why}. Pass pack_len=None, or "
        "pack in your own loop (DynamicBatchSampler(..., pack_len=...) and PackCollator)"
    )


def pack_collator(sampler: Any, packed: Packed) -> Callable[[Sequence[Any]], dict[str, Any]]:
    """The Trainer's collator of ``sampler``'s packed micro-batches (NOTE [ the Trainer packs ]).

    The one place where the Trainer's :class:`~dynbatch.PackCollator` is configured
    from the sampler's options (:meth:`~dynbatch.PackCollator.for_sampler`: rows of
    ``options.pack_len``, or with a ``time_model`` each micro-batch packed or padded as
    the plan priced it; both layouts give the same fields), causal for a causal LM,
    bidirectional for a classifier. It returns the model's inputs and the label field:
    ``input_ids``, ``position_ids`` and the bool ``attention_mask`` ``[R, P, P]`` with
    the token labels for a causal LM; for a classifier also ``token_type_ids``, the
    additive mask ``[R, 1, P, P]``, ``cls_index`` ``[S, 2]`` (each sample's first token,
    row and column) and the samples' labels ``[S]``.
    """
    causal = packed.kind == CAUSAL_LM
    packer = PackCollator.for_sampler(  # each micro-batch laid out as the plan priced it
        sampler, causal=causal, pad_val=packed.pad_val, return_startend=False
    )
    label = packed.label_name

    def collate(samples: Sequence[Any]) -> dict[str, Any]:
        fields = [_sample(s, k, label, causal) for k, s in enumerate(samples)]
        rows = packer([f for f, _ in fields])
        if causal:
            return {
                "input_ids": rows["input_ids"],
                "position_ids": rows["position_ids"],
                "attention_mask": rows["attention_mask"],
                label: rows["labels"],
            }
        starts = rows["sample_starts"]
        r, k = np.nonzero(starts >= 0)  # row by row: the samples in the order given
        return {
            "input_ids": rows["input_ids"],
            "token_type_ids": rows["token_type_ids"],
            "position_ids": rows["position_ids"],
            "attention_mask": additive_mask(rows["attention_mask"]),
            "cls_index": np.stack([r, starts[r, k]], axis=1),
            label: np.concatenate([y for _, y in fields]),
        }

    return collate


def _sample(
    sample: Any, k: int, label: str, causal: bool
) -> tuple[dict[str, Any], NDArray[np.int64]]:
    """One sample's fields for :class:`~dynbatch.PackCollator`, and a classifier's label."""
    if causal and isinstance(sample, (tuple, list)) and len(sample) in (1, 2):
        pair = {"input_ids": sample[0]}  # (input_ids, labels), as PackCollator takes it
        if len(sample) == 2 and sample[1] is not None:
            pair["labels"] = sample[1]
        return pair, np.zeros(0, np.int64)
    if not isinstance(sample, Mapping) or "input_ids" not in sample:
        got = sorted(sample) if isinstance(sample, Mapping) else type(sample).__name__
        kinds = "dicts with input_ids (and token labels), or (input_ids, labels) pairs"
        if not causal:
            kinds = f"dicts with input_ids and {label!r} (and token_type_ids)"
        raise InputTypeError(
            f"pack_len: the Trainer packs samples that are {kinds}, got sample {k}: {got!r:.120}"
        )
    key = label if label in sample or "label" not in sample else "label"
    kept = ["input_ids", key] if causal else ["input_ids", key, "token_type_ids"]
    who = f"the Trainer's packed {'causal LM' if causal else 'classifier'} (pack_len)"
    refuse_other_fields(sample, k, kept, who)  # NOTE [ a sample's own fields ]
    fields = {name: sample[name] for name in ("input_ids", *REBUILT_FIELDS) if name in sample}
    if causal:
        if sample.get(key) is not None:
            fields["labels"] = sample[key]
        return fields, np.zeros(0, np.int64)
    if sample.get("token_type_ids") is not None:
        fields["token_type_ids"] = sample["token_type_ids"]
    value = np.asarray(sample.get(key, []))
    if value.size != 1 or not np.issubdtype(value.dtype, np.integer):
        raise InputError(
            f"pack_len: a packed classifier takes one integer label a sample in {key!r}; "
            f"sample {k} has {key}={sample.get(key)!r:.80}"
        )
    return fields, value.reshape(1).astype(np.int64)


def packed_outputs(model: Any, inputs: Mapping[str, Any], packed: Packed) -> Any:
    """The model's outputs on packed ``inputs`` (:func:`pack_collator`'s, on the device)."""
    if packed.kind == CAUSAL_LM:
        return model(**inputs)
    return call_as_forward(model, _classify, inputs)


def _classify(
    layer: Any,
    *,
    input_ids: Any,
    position_ids: Any,
    attention_mask: Any,
    cls_index: Any,
    token_type_ids: Any = None,
) -> Any:
    """A sequence classifier's logits ``[S, num_labels]`` on packed rows (NOTE above)."""
    base = getattr(layer, layer.base_model_prefix)
    out = base(
        input_ids,
        token_type_ids=token_type_ids,
        position_ids=position_ids,
        attention_mask=attention_mask,
    )
    seq = out[0] if isinstance(out, (tuple, list)) else out.last_hidden_state
    pooled = base.pooler(paddle.gather_nd(seq, cls_index).unsqueeze(1))
    dropout = getattr(layer, "dropout", None)
    if isinstance(dropout, paddle.nn.Layer):
        pooled = dropout(pooled)
    return layer.classifier(pooled)
