"""Encoder–decoders on (source, target) pairs: what the Trainer takes, and what it refuses.

NOTE [ the Trainer on pairs ]
    A pair's lengths are its source's and its target's: ``lengths`` of shape ``[N, 2]``, or a
    ``length_fn`` returning ``(source, target)`` (for dict samples
    ``lambda s: (len(s["input_ids"]), len(s["labels"]))``), measured once as one length
    is. The plan then pads each side of a micro-batch to its own longest
    (NOTE [ planning pairs ] in :mod:`dynbatch.plan.pairs`), and the fixed batch's recipe
    makes ``ceil(N / B)`` updates of ``B`` pairs as it does of single samples; epochs,
    ranks and resume follow the plan as they do for one length.

    The loss is over the target. A ``...ForConditionalGeneration`` given no ``loss_fn`` trains
    on :func:`~.losses.token_cross_entropy` over its labels *without* a shift: an
    encoder–decoder's logits at ``t`` already predict ``labels[t]`` (the decoder reads the
    target shifted right), and the labels are ``-100`` on padding. It returns
    ``(loss_sum, count)`` with the count from the batch, so each update is the exact mean over
    the target tokens of all its micro-batches on all ranks (NOTE [ one update, one mean ] in
    :mod:`.step`), whatever the micro-batches' sizes.

    The decoder's inputs come from the batch: ``decoder_input_ids``, the target shifted right
    by the collator (:class:`dynbatch.Seq2SeqCollator`, or a ``Dict`` of ``Pad`` s on samples
    that hold it). No collator is chosen for the user: paddlenlp's default pads no side and
    shifts no target, and one of ours would guess the samples' fields and the model's start
    and padding ids, so an encoder–decoder given ``data_collator=None`` is refused by name
    when the Trainer is made. Without them paddlenlp's BART builds its decoder's inputs from the
    *source* (``shift_tokens_right(input_ids)``) and would silently learn to copy it, so a
    batch without them is refused by name at the first step.

    The step time of pairs is one of two lengths: ``time_model=`` takes a
    :class:`~dynbatch.plan.pair_steptime.PairStepTimeModel` (or its text,
    ``"c,a_s,a_t,b_s,b_t,cross"``), and the recipe cuts the fixed batch's updates of pairs
    at it as it cuts those of one length (NOTE [ a step time of two lengths ] in
    :mod:`dynbatch.plan.pair_steptime`). A step time of one length given for pairs, or one of
    pairs given for one length, is refused by name when the Trainer is made (a flat one, which
    reads no length, is the planner's to take with ``group_by_length``). A checkpoint keeps it
    in its options, eight values from ``"pairs"``, and a resume reads it back as one
    (:func:`~.planner.saved_step_time`).

    Refused by name, not yet there for pairs: packing (a packed row holds one sequence;
    :func:`~dynbatch.plan.option_checks.packing_pairs_refused`), and a *measured* step time
    (the probe times steps of one length, ``(n, L)``, and fits ``c + n·L·(a + b·L)``; a
    probe of two lengths would time a grid of ``(n, Ls, Lt)`` and fit six coefficients, not
    made yet). So ``time_model="auto"`` plans without a step time on every device for pairs,
    as it does on a CPU (NOTE [ no probe on a CPU ] in :mod:`.planner`), and ``"measure"`` is
    refused before any step runs. Updates cut on tokens (``accumulate="tokens"``) count the
    target tokens (the planner's ``update_unit="tokens"`` on pairs), each update their exact
    mean.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..._checks import InputError
from ...plan.lengths import is_pairs
from ...plan.option_checks import packing_pairs_refused
from ...plan.pair_steptime import refuse_time_model_for

__all__ = [
    "DECODER_INPUTS",
    "check_decoder_inputs",
    "is_encoder_decoder",
    "refuse_no_collator",
    "refuse_packing",
    "time_model_for",
]

#: The field that feeds an encoder–decoder's decoder (NOTE [ the Trainer on pairs ]).
DECODER_INPUTS = "decoder_input_ids"

_WHERE = "DynamicBatchTrainer"


def is_encoder_decoder(model: Any) -> bool:
    """Whether ``model`` is an encoder–decoder the Trainer knows: a ``...ForConditionalGeneration``.

    >>> class BartForConditionalGeneration: ...
    >>> is_encoder_decoder(BartForConditionalGeneration()), is_encoder_decoder(None)
    (True, False)
    """
    return type(model).__name__.endswith("ForConditionalGeneration")


def refuse_packing(pack_len: int | None, model: Any, lengths: Any = None) -> None:
    """Refuse ``pack_len`` for an encoder–decoder or for lengths of pairs, by name."""
    if pack_len is None:
        return
    if is_encoder_decoder(model):
        name = type(model).__name__
        raise packing_pairs_refused(_WHERE, f", got pack_len={pack_len} for model={name}")
    if lengths is not None and is_pairs(lengths):
        raise packing_pairs_refused(
            _WHERE, f", got pack_len={pack_len} with lengths of shape {list(lengths.shape)}"
        )


def time_model_for(time_model: Any, lengths: Any, *, auto: bool, measure: bool) -> Any:
    """``time_model`` for ``lengths``: as given where its lengths are theirs (of one length or
    of pairs), else refused by name; for pairs ``"auto"`` (``auto``) is None on every device
    and ``"measure"`` (``measure``) refused (NOTE [ the Trainer on pairs ])."""
    pairs = is_pairs(lengths)
    if not (auto or measure):  # an object: the planner takes a flat one of one length too
        refuse_time_model_for(time_model, pairs, _WHERE, flat_ok=True)
    if not pairs:
        return time_model
    if auto:
        return None
    if measure:
        raise InputError(
            f"{_WHERE}: time_model={time_model!r} measures a step time of one length, (n, L), "
            "and the lengths are (source, target) pairs: a step time of two lengths is not "
            "measured yet. Leave time_model out (for pairs it plans without a step time on "
            "every device), pass time_model=None, or a step time of two lengths, "
            "dynbatch.plan.pair_steptime.PairStepTimeModel(c, a_s, a_t, b_s, b_t, cross)"
        )
    return time_model


def refuse_no_collator(model: Any, data_collator: Any) -> None:
    """Refuse ``data_collator=None`` for an encoder–decoder, naming the collator to pass
    (NOTE [ the Trainer on pairs ])."""
    if data_collator is not None or not is_encoder_decoder(model):
        return
    config = getattr(model, "config", None)
    pad, start = (getattr(config, k, None) for k in ("pad_token_id", "decoder_start_token_id"))
    raise InputError(
        f"{_WHERE}: data_collator=None for model={type(model).__name__}: paddlenlp's default "
        "pads neither side and shifts no target; pass data_collator=dynbatch.Seq2SeqCollator("
        f"pad_id={pad}, decoder_start_id={start}) (this model's ids; samples of 'source' and "
        "'target' token ids), or a collator of your own"
    )


def check_pairs_given(
    model: Any, data_collator: Any, lengths: Any, eval_lengths: Any, accumulate: str
) -> None:
    """What an encoder–decoder's Trainer is given, checked when it is made: a collator; with
    ``accumulate="tokens"``, pairs (the loss is over the targets, and one length a sample
    would count the wrong side); ``eval_lengths`` of the training lengths' kind (they fail at
    ``evaluate()`` otherwise). NOTE [ the Trainer on pairs ]."""
    refuse_no_collator(model, data_collator)
    ndim = np.ndim(lengths) if isinstance(lengths, (np.ndarray, list, tuple)) else 0
    if accumulate == "tokens" and ndim == 1 and is_encoder_decoder(model):
        raise InputError(
            f"{_WHERE}: accumulate='tokens' for model={type(model).__name__} counts the target "
            "tokens its loss is over, and the lengths given are lengths of one per sample: "
            "give lengths as an [N, 2] array of (source, target), or a length_fn returning a "
            "pair"
        )
    kinds = {1: "one per sample", 2: "(source, target) pairs, [N, 2]"}
    evals = {} if eval_lengths is None or ndim not in kinds else eval_lengths
    for given in evals.values() if isinstance(evals, Mapping) else [evals]:
        if np.ndim(given) in kinds and np.ndim(given) != ndim:
            raise InputError(
                f"{_WHERE}: eval_lengths are {kinds[np.ndim(given)]} and the training lengths "
                f"{kinds[ndim]}: give eval_lengths of the same kind (an [N, 2] array for pairs)"
            )


def check_decoder_inputs(model: Any, inputs: Mapping[str, Any]) -> None:
    """Refuse a batch without the decoder's inputs for an encoder–decoder, by name."""
    if DECODER_INPUTS in inputs or not is_encoder_decoder(model):
        return
    raise InputError(
        f"{type(model).__name__} was given no {DECODER_INPUTS!r} (the batch's fields for the "
        f"model: {sorted(inputs)}): the collator must put the target shifted right there "
        "(paddlenlp's BART would build them from the source instead and learn to copy it; "
        "model.prepare_decoder_input_ids_from_labels(labels) shifts them)"
    )
