"""Packed micro-batches in the Trainer: the models it drives, its collator, its forward.

NOTE [ the Trainer packs ]
    With ``pack_len`` the sampler yields packed micro-batches (NOTE [ packed updates ] in
    :mod:`dynbatch.plan.packs.epochs`) and the Trainer trains each as the rows of
    :class:`~dynbatch.PackCollator`, every sample alone in its row
    (NOTE [ one sample, alone in its row ] in :mod:`dynbatch.paddle.pack_collate`), laid out as the
    plan priced it: packed rows, or with a step time (probed as unpacked, or given) padded, a sample
    a row, where that is faster (NOTE [ a micro-batch's layout ]); the fields are the same. Two
    kinds of model are driven, recognised by what they are when the Trainer is made; any other is
    refused by name then, not at the first step:

    * **A causal LM**: a ``...ForCausalLM`` whose ``forward`` takes ``position_ids`` and
      the host's mask field, and whose base model (under ``base_model_prefix``) uses the mask
      as given (the host's ``causal_packing``, a :class:`~.host.CausalPacking`: for paddlenlp
      the bool block mask ``[R, P, P]`` in ``attention_mask``, prepared the way its decoders
      do, as given: Qwen2, Llama, Mistral, Gemma and GPT in 3.0.0b4; FlashMask's
      ``attn_mask_startend_row_indices`` is the other form). It is fed ``input_ids``,
      ``position_ids`` and that mask; the labels are the packed
      ones (each sample's first label hidden, fill hidden), and the loss is the Trainer's
      token loss (:func:`~.losses.token_cross_entropy`, the default here, shifted as the
      collator's labels are). Its ``(loss_sum, count)`` counts the rows' loss tokens,
      which are the samples' own, so an update is the pooled per-token mean over every
      loss token of its rows, micro-batches and ranks, as unpacked. A host that would ignore
      the mask says so (paddlenlp ignores every mask under ``USE_CASUAL_MASK=True``): that is
      refused too.
    * **A sequence classifier**: a ``...ForSequenceClassification`` with a ``classifier``
      layer and its base model under ``base_model_prefix``, the base holding a ``pooler`` and taking
      ``position_ids`` and ``attention_mask``. Its own forward would pool each row's first token,
      one sample a row, so the Trainer runs the base model on the rows with the additive block mask
      (:func:`~dynbatch.paddle.pack_collate.additive_mask`) and each sample's own positions,
      gathers each sample's first token (its ``[CLS]``, at ``sample_starts``), pools it with the
      model's own pooler, then the model's dropout and classifier: ``[S, num_labels]`` logits, one a
      sample, in the order the sampler gave them (the collator's rows are next-fit of that order).
      The labels are the samples' own, one each, so the Trainer's per-sample loss is divided by the
      update's samples over all ranks, as unpacked (NOTE [ one update, one mean ]). Under
      ``DataParallel`` this forward runs as the wrapped model's, through the wrapper's call, which
      readies the gradient all-reduce (:func:`~._compat.call_as_forward`).

    A sample is a dict: ``input_ids``, the label field (``args.label_names[0]``, or the Trainer's
    ``label``; a causal LM's token labels may be left out, the ids are then the labels) and, for an
    encoder, ``token_type_ids``; a causal LM's may also be an ``(input_ids, labels)`` pair. A 0/1
    ``attention_mask`` and ``position_ids`` are taken as :class:`~dynbatch.PackCollator` takes them
    (its 0 tokens, padding, left out; positions counting from 0 over the real tokens), and any other
    field, which the rows would drop, is refused by name: one rule, NOTE [ a sample's own fields ]
    in :mod:`dynbatch.paddle.pack_collate`. Evaluation stays unpacked: the user's ``data_collator``
    and the model's own forward. The training collator is built by one function,
    :func:`pack_collator`, from the sampler: its options decide the rows. Without a
    ``data_collator`` the Trainer builds the unpacked batches too (:func:`padded_collator`: the
    samples' same fields, padded, a sample a row), for the step-time probe and evaluation; the
    Trainer's default collator cannot stack samples of unequal lengths. Both return their error in
    the batch (:func:`dynbatch.safe_collate`) and the Trainer raises it by name where the batch is
    used (NOTE [ a collate error in paddle's DataLoader ] in :mod:`dynbatch.paddle.safe_collate`).
    What the Trainer can check when it is made, it checks then, before the step-time probe
    (NOTE [ dynbatch's checks before the probe ] in :mod:`.planner`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import paddle
from numpy.typing import NDArray

from ..._checks import InputError, InputTypeError, check_int
from ...paddle.losses import IGNORE_INDEX
from ...paddle.pack_collate import (
    REBUILT_FIELDS,
    PackCollator,
    additive_mask,
    real_tokens,
    refuse_other_fields,
)
from ...paddle.safe_collate import safe_collate
from ...plan.packs.attention import resolve_attention
from ._compat import call_as_forward
from .host import CausalPacking
from .losses import token_cross_entropy
from .seq2seq import refuse_packing

__all__ = [
    "CAUSAL_LM",
    "CLASSIFIER",
    "Packed",
    "check_pack_len",
    "check_samples",
    "pack_collator",
    "packed_loss",
    "packed_model",
    "packed_outputs",
    "padded_collator",
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
        pack_len: the rows' length (the plan's ``pack_len``).
        mask_field: a causal LM's field of the rows' mask (the host's
            ``CausalPacking.mask_field``).
        attention: ``"dense"`` or ``"flashmask"``: how the rows' attention runs
            (:func:`model_attention`), what the plan prices them by.
    """

    kind: str
    label_name: str
    pad_val: int
    pack_len: int
    mask_field: str = "attention_mask"
    #: How the rows' attention runs, as the plan prices it (:func:`model_attention`).
    attention: str = "dense"


def _takes(fn: Any, *names: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return set(names) <= set(params)


def check_pack_len(pack_len: Any, model: Any) -> int | None:
    """``pack_len`` checked, and a model to pack for when it is given."""
    checked: int | None = check_int("pack_len", pack_len, minimum=1, allow_none=True)
    refuse_packing(checked, model)  # NOTE [ the Trainer on pairs ]
    if checked is not None and model is None:  # NOTE [ the Trainer packs ]
        raise InputError(
            f"pack_len={checked} packs for the model given (a causal LM or a sequence "
            "classifier, recognised when the Trainer is made), got model=None: pass model="
        )
    return checked


def model_attention(model: Any, given: Any, mask_field: str, said: str | None) -> str:
    """How ``model`` runs packed rows' attention (NOTE [ attention layouts ] in
    :mod:`dynbatch.plan.packs.attention`): ``given`` where the user passed one, else ``said``,
    what the host reads from its config (PaddleFormers' ``"flashmask"``); every other
    (PaddleFormers' ``"eager"``, which builds the dense mask from FlashMask's indices, and
    paddlenlp's decoders, whose 3-D mask is dense with ``use_flash_attention`` too) is
    ``"dense"``, the safe default. A layout the model cannot take is refused by name."""
    if given is None:
        return said or "dense"
    name = resolve_attention(given).name
    takes = {"dense": True, "flashmask": mask_field == "attn_mask_startend_row_indices"}
    if not takes.get(name, False):
        raise InputError(
            f"attention={name!r}: {type(model).__name__} takes packed rows' mask as "
            f"{mask_field}, not {'cu_seqlens' if name == 'varlen' else 'FlashMask indices'}; "
            "pass attention='dense' (or leave it out: read from the model's config), or pack "
            "in your own loop (PackCollator(attention=...))"
        )
    return name


def packed_model(
    model: Any, label_name: str, pack_len: int, causal: CausalPacking, attention: Any = None
) -> Packed:
    """What packing ``model`` takes; a model the Trainer cannot pack for is refused by name.

    ``causal`` is how the host's causal LMs take packed rows (its ``causal_packing``)."""
    name = type(model).__name__
    prefix = getattr(model, "base_model_prefix", None)
    base = getattr(model, prefix, None) if isinstance(prefix, str) else None
    config = getattr(model, "config", None)
    pad = getattr(config, "pad_token_id", None)
    pad_val = int(pad) if isinstance(pad, int) and not isinstance(pad, bool) and pad >= 0 else 0
    why = "it is neither"
    if name.endswith("ForCausalLM"):
        why = f"its forward does not take position_ids and {causal.mask_field}"
        if _takes(model.forward, "position_ids", causal.mask_field):
            why = (
                f"its base model (model.{prefix}) does not take {causal.mask} as given, "
                f"as {causal.models} do"
            )
            if causal.accepts(base):
                causal.check(model, pack_len)
                laid = model_attention(model, attention, causal.mask_field, causal.attention(model))
                return Packed(CAUSAL_LM, label_name, pad_val, pack_len, causal.mask_field, laid)
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
            laid = model_attention(model, attention, "attention_mask", causal.attention(model))
            return Packed(CLASSIFIER, label_name, pad_val, pack_len, attention=laid)
        why = f"it has no {', no '.join(missing)}"
    raise InputTypeError(
        f"pack_len={pack_len} trains packed rows, which the Trainer can feed to a causal LM "
        f"(a ...ForCausalLM taking position_ids and {causal.mask}, such as {causal.examples}) "
        "or to a sequence classifier (a "
        "...ForSequenceClassification whose base model has a pooler, such as "
        f"BertForSequenceClassification); got model={name}: {why}. Pass pack_len=None, or "
        "pack in your own loop (DynamicBatchSampler(..., pack_len=...) and PackCollator)"
    )


def packed_loss(packed: Packed) -> Callable[[Any, Mapping[str, Any]], Any] | None:
    """The loss a packed model trains by default: a causal LM's token loss (shifted, as
    :func:`pack_collator`'s labels are); None for a classifier (the Trainer's own)."""
    if packed.kind != CAUSAL_LM:
        return None
    return functools.partial(token_cross_entropy, label_key=packed.label_name)


def pack_collator(sampler: Any, packed: Packed) -> Callable[[Sequence[Any]], dict[str, Any]]:
    """The Trainer's collator of ``sampler``'s packed micro-batches (NOTE [ the Trainer packs ]).

    The one place where the Trainer's :class:`~dynbatch.PackCollator` is configured
    from the sampler's options (:meth:`~dynbatch.PackCollator.for_sampler`: rows of
    ``options.pack_len``, or with a ``time_model`` each micro-batch packed or padded as
    the plan priced it; both layouts give the same fields), causal for a causal LM,
    bidirectional for a classifier. It returns the model's inputs and the label field:
    ``input_ids``, ``position_ids`` and the mask in ``packed.mask_field`` (the bool
    ``attention_mask`` ``[R, P, P]``, or FlashMask's ``attn_mask_startend_row_indices``) with
    the token labels for a causal LM; for a classifier also ``token_type_ids``, the
    additive mask ``[R, 1, P, P]``, ``cls_index`` ``[S, 2]`` (each sample's first token,
    row and column) and the samples' labels ``[S]``.
    """
    causal = packed.kind == CAUSAL_LM
    mask = packed.mask_field if causal else "attention_mask"  # a classifier's: made additive
    packer = PackCollator.for_sampler(  # each micro-batch laid out as the plan priced it
        sampler,
        causal=causal,
        pad_val=packed.pad_val,
        return_mask=mask == "attention_mask",
        return_startend=mask == "attn_mask_startend_row_indices",
    )
    label = packed.label_name

    def rows_of(samples: Sequence[Any]) -> dict[str, Any]:
        fields = [_sample(s, k, label, causal) for k, s in enumerate(samples)]
        rows = packer([f for f, _ in fields])
        if causal:
            return {
                "input_ids": rows["input_ids"],
                "position_ids": rows["position_ids"],
                mask: rows[mask],
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

    return safe_collate(rows_of)


def padded_collator(packed: Packed) -> Callable[[Sequence[Any]], dict[str, Any]]:
    """The unpacked batches of a Trainer packing without a ``data_collator``: the step-time
    probe's and evaluation's (NOTE [ the Trainer packs ]).

    The fields :func:`pack_collator` takes from each sample, a sample a row, padded on the
    right to the longest: ``input_ids`` (with the model's pad id), ``attention_mask`` (1 on
    the sample's tokens) and, for a classifier, ``token_type_ids`` where the samples have
    them and the label field, one label a sample; for a causal LM the token labels in the
    label field (the ids where a sample has none), ``-100`` on the fill.
    """
    causal = packed.kind == CAUSAL_LM
    label = packed.label_name

    def padded(rows: Sequence[NDArray[np.int64]], fill: int) -> NDArray[np.int64]:
        out = np.full((len(rows), max([1, *(r.size for r in rows)])), fill, np.int64)
        for k, row in enumerate(rows):
            out[k, : row.size] = row
        return out

    def batch_of(samples: Sequence[Any]) -> dict[str, Any]:
        fields = [_sample(s, k, label, causal) for k, s in enumerate(samples)]
        ids = [_ints(f["input_ids"], "input_ids", k) for k, (f, _) in enumerate(fields)]
        out = {
            "input_ids": padded(ids, packed.pad_val),
            "attention_mask": padded([np.ones_like(i) for i in ids], 0),
        }
        if causal:
            labels = [
                _ints(f.get("labels", i), label, k, i.size)
                for k, ((f, _), i) in enumerate(zip(fields, ids, strict=True))
            ]
            out[label] = padded(labels, IGNORE_INDEX)
            return out
        if any("token_type_ids" in f for f, _ in fields):
            types = [
                _ints(f.get("token_type_ids", np.zeros_like(i)), "token_type_ids", k, i.size)
                for k, ((f, _), i) in enumerate(zip(fields, ids, strict=True))
            ]
            out["token_type_ids"] = padded(types, 0)
        out[label] = np.concatenate([y for _, y in fields])
        return out

    return safe_collate(batch_of)


def _ints(value: Any, name: str, k: int, size: int | None = None) -> NDArray[np.int64]:
    """A sample's field as int64 ids, one a token (``size`` of them, where given)."""
    arr = np.asarray(value)
    if arr.ndim != 1 or not (arr.size == 0 or np.issubdtype(arr.dtype, np.integer)):
        raise InputError(
            f"pack_len: sample {k}'s {name} must be a sequence of integer ids, got {value!r:.80}"
        )
    if size is not None and arr.size != size:
        raise InputError(
            f"pack_len: sample {k}'s {name} has {arr.size} values for its {size} input_ids: "
            "one a token"
        )
    return arr.astype(np.int64)


def check_samples(dataset: Any, lengths: NDArray[np.int64], indices: Any, packed: Packed) -> None:
    """The samples at ``indices`` as the packed rows take them, before any probe
    (NOTE [ dynbatch's checks before the probe ] in :mod:`.planner`): their fields and labels,
    and their ``input_ids`` against ``lengths``, from which the rows are planned."""
    causal = packed.kind == CAUSAL_LM
    fields = []
    for i in (int(i) for i in indices):
        sample, _ = _sample(dataset[i], i, packed.label_name, causal)
        n = np.asarray(sample["input_ids"]).size
        real = real_tokens(sample, i, n)  # a sample's padding is not packed
        n = n if real is None else int(real.sum())
        if n > lengths[i]:
            raise InputError(
                f"pack_len={packed.pack_len}: lengths[{i}]={int(lengths[i])} understates "
                f"sample {i}, which has {n} real input_ids: the packed rows are planned from the "
                "lengths, so each must count its sample's real tokens (lengths=, or length_fn= "
                "/ ref_index= measuring input_ids)"
            )
        fields.append(sample)
    # every field as the rows take it (ids, labels a token each); no mask: P x P a row
    PackCollator(packed.pack_len, causal=causal, return_mask=False, return_startend=False)(fields)


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
