"""A collator that packs one micro-batch's samples into rows: numpy only.

NOTE [ one sample, alone in its row ]
    A packed row holds several samples, and each must be trained as if alone:

    * **attention**: ``attention_mask[r, q, k]`` is True only when tokens ``q``
      and ``k`` belong to the same sample (and ``k <= q`` for a decoder).
      paddlenlp's causal LMs (``Qwen2ForCausalLM``, ``LlamaForCausalLM``) take
      the bool ``[R, P, P]`` mask as it is (a 3-D mask is used as given, with
      no causal mask added: so it is causal here); BERT takes an additive
      ``[R, 1, P, P]`` one, :func:`additive_mask`. A fill token attends to
      itself only: a row of the softmax with nothing to attend to would be NaN.
    * **positions**: ``position_ids`` restart at 0 at each sample, as the
      sample alone would see them (transformers #47496).
    * **labels**: the labels line up with ``input_ids`` (Hugging Face's
      convention, ``dynbatch.token_loss(shift=True)``): the logits at ``t``
      predict the label at ``t + 1``, so a sample's first label would be
      predicted from the previous sample's last token. It is ``ignore_index``
      at every sample's first position (alone, the shift drops it anyway), and
      on fill. With ``shift=False`` (paddlenlp's own causal-LM data, whose
      labels each sample already moved left by one) the labels are kept as
      given, fill aside (paddlenlp 3.0.0b4's ``Qwen2PretrainingCriterion``
      does not shift: its data is of that kind). The loss tokens of a packed
      row are then exactly those of its samples alone.
    * **FlashMask**: ``attn_mask_startend_row_indices`` is FlashMask's column
      form of the same mask (``paddle.nn.functional.flashmask_attention``),
      int32: causal ``[R, 1, P, 1]``, for key column ``k`` the row where its
      masking starts (the end of ``k``'s sample: rows below it are another
      sample's); bidirectional ``[R, 1, P, 2]``, the end and the start of
      ``k``'s sample (rows above the start are masked too). A fill column
      ``k`` holds ``k + 1`` (and ``k``): fill attends to itself. FlashMask runs
      on a GPU only (float16/bfloat16), so this form is built and checked
      against the dense mask on the CPU, not run there.

    The rows are :func:`~dynbatch.plan.packs.layout.packed_rows` of the samples in the order given:
    the fewest rows of consecutive samples within ``pack_len`` (as many as next-fit makes), cut
    where the fullest of them is least, so they are balanced; a sample longer than ``pack_len`` is a
    row of its own. The micro-batch is as wide as its fullest row, rounded up to the layout's
    ``pad_to_multiple_of``: ``pack_len`` only where a row is that full. That is how the planner
    prices a micro-batch (NOTE [ rows by next-fit ] and NOTE [ a micro-batch's layout ] in
    :mod:`dynbatch.plan.packs.layout`), so the collator builds the rows the plan priced, in the main
    process or a DataLoader's worker alike. With a time model (``PackCollator.for_sampler``, or
    ``layout=``) a micro-batch may run padded instead, a sample a row as wide as the longest, as the
    plan priced it: the same fields, one sample in each row.

NOTE [ a sample's own fields ]
    A dict sample holds ``input_ids`` and may hold ``labels`` and
    ``token_type_ids``, packed as they are, and ``attention_mask`` and
    ``position_ids``, which the rows build anew for each sample. A sample's own
    are honoured, never dropped: a 1-D ``attention_mask`` of 0/1 (or bools) as
    long as ``input_ids`` marks its real tokens, and the tokens where it is 0
    (padding, on either side, or anywhere) are left out of ``input_ids``,
    ``labels`` and ``token_type_ids`` before packing; ``position_ids`` are taken
    when they count 0, 1, ... over the real tokens, which is what the row
    rebuilds. Anything else, a field of another name, or a mask or positions that
    say something the rows cannot (an additive or 2-D mask, positions not from 0),
    would be dropped without a word, so it is refused by name. The planner plans on
    the lengths it is given: they should count a sample's real tokens (its mask's
    ones), else its rows are emptier than planned. paddlenlp's Trainer packs by
    the same rule (:func:`refuse_other_fields`, :func:`real_tokens`).
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._checks import MAX_LENGTH, InputError, InputTypeError, check_bool, check_int
from ..plan.options import PlanOptions
from ..plan.packs import PackLayout
from ..plan.packs.attention import resolve_attention
from ..plan.packs.layout import packed_rows
from .safe_collate import reaches_the_loop

__all__ = [
    "PACKED_FIELDS",
    "REBUILT_FIELDS",
    "PackCollator",
    "additive_mask",
    "real_tokens",
    "refuse_other_fields",
]

#: A dict sample's fields that are packed as they are (NOTE [ a sample's own fields ]).
PACKED_FIELDS = ("input_ids", "labels", "token_type_ids")
#: A dict sample's fields that the rows rebuild: honoured, never packed (the same NOTE).
REBUILT_FIELDS = ("attention_mask", "position_ids")


class PackCollator:
    """Pack one micro-batch's samples into rows of ``pack_len`` tokens.

    Called on a list of samples (dicts with ``input_ids`` and optional ``labels``,
    ``token_type_ids``, ``attention_mask``, ``position_ids``; tuples ``(input_ids, labels)``; or
    bare id sequences), it returns a dict of numpy arrays (``R`` rows of width ``P``, the fullest
    row: at most ``pack_len``, or a longer sample's length where it is a row alone). Each sample
    in a row trains as if alone: it attends only to itself, its positions restart at 0, and its
    first label (which the previous sample's last token would predict) is ``ignore_index``. A
    sample's 0/1 ``attention_mask`` leaves its 0 tokens (padding) out of the rows; its
    ``position_ids`` must count 0, 1, ... over the real tokens; any other field, which the rows
    would drop without a word, is refused by name. Lengths given to the planner should count the
    real tokens. The rows hold:

    * ``input_ids``, ``labels``, ``position_ids``, ``token_type_ids``: ``[R, P]``
      int64;
    * ``attention_mask``: ``[R, P, P]`` bool, True where a token may attend (its own sample,
      and for a decoder only the tokens before it);
    * ``attn_mask_startend_row_indices``: FlashMask's form, int32;
    * ``sample_starts``: ``[R, S]`` int64, each row's sample starts (a
      sample's first token: ``[CLS]`` for an encoder that pools it), -1 past
      the row's last sample; ``sample_ids`` ``[R, P]``: each token's sample
      within its row, -1 on fill.

    Prefer ``PackCollator.for_sampler(sampler)``: it builds what the sampler's plan priced, with
    the sampler's ``pack_len``, ``pad_to_multiple_of``, time model and budget (a micro-batch
    over the budget, from samples longer than the lengths planned, is refused by name). With
    ``layout`` (a :class:`~dynbatch.plan.packs.PackLayout`, which :meth:`for_sampler` builds
    from the sampler's options) each micro-batch is laid out as the plan priced it: packed rows,
    or padded, ``R`` = its samples and ``P`` = its longest, whichever the step time predicts
    faster within the budget, ``P`` rounded up to its ``pad_to_multiple_of`` either way. It is a
    pure function of the samples' lengths, so a DataLoader's worker processes build the same.
    Without a layout the rows are packed, ``P`` rounded up to ``pad_to_multiple_of`` (give the
    sampler's, or the widths are not the plan's), and no budget is checked.

    Samples of 3, 2 and 2 tokens need two rows of 6 (next-fit: 3 + 2, then
    2); cut as 3 and 2 + 2, the fullest holds 4, the least, so ``P`` = 4:

    >>> out = PackCollator(6)([{"input_ids": [5, 6, 7]}, {"input_ids": [8, 9]}, [4, 4]])
    >>> out["input_ids"].tolist(), out["position_ids"].tolist()
    ([[5, 6, 7, 0], [8, 9, 4, 4]], [[0, 1, 2, 0], [0, 1, 0, 1]])
    >>> out["labels"].tolist(), out["sample_starts"].tolist()
    ([[-100, 6, 7, -100], [-100, 9, -100, 4]], [[0, -1], [0, 2]])
    >>> out["attention_mask"][1].astype(int).tolist()
    [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 1, 1]]
    >>> padded = {"input_ids": [101, 7, 102, 0, 0], "attention_mask": [1, 1, 1, 0, 0]}
    >>> PackCollator(6)([padded, [4, 4]])["input_ids"].tolist()
    [[101, 7, 102, 4, 4]]

    Args:
        pack_len: the most tokens a row holds (a longer sample is a row of its own).
        causal: a decoder's mask (a token attends to its sample's tokens up to itself); False
            for an encoder's (its sample's every token).
        pad_val: the ``input_ids`` of fill tokens.
        ignore_index: the label of fill and of each sample's first token.
        shift: the labels line up with ``input_ids`` and the loss shifts them (Hugging Face's
            convention); False for labels each sample already moved left by one (paddlenlp's
            causal-LM data): kept as given.
        return_mask: add the dense ``attention_mask`` (``[R, P, P]``, memory of order ``P**2``).
        return_startend: add FlashMask's ``attn_mask_startend_row_indices``.
        sample_label: the field of a dict sample holding its one label, for a classifier or a
            regression (a tuple sample is then ``(input_ids, label)``): the rows add
            ``sample_labels`` ``[R, S]``, each label beside its sample's start in
            ``sample_starts`` (``ignore_index``, or 0 for real values, past a row's last
            sample), and hold no token ``labels``: a model pools each sample at its start.
        layout: the plan's layout of each micro-batch, packed or padded; None: always packed.
        pad_to_multiple_of: without a layout, the width (the fullest row) is rounded up to
            this; give the sampler's (a layout holds its own).
            :meth:`for_sampler` sets it from the sampler's options.
        attention: the mask fields of one attention layout
            (:mod:`dynbatch.plan.packs.attention`) in place of ``return_mask`` and
            ``return_startend``: ``"dense"`` the ``attention_mask``, ``"flashmask"`` the
            ``attn_mask_startend_row_indices``, ``"varlen"`` one flat row ``[1, T]`` of the
            micro-batch's ``T`` tokens (no row padding: ``pad_to_multiple_of`` does not apply) with
            ``cu_seqlens`` (int32 ``[S + 1]``: each sample's first token, then ``T``) and
            ``max_seqlen`` (int32, the longest sample), what paddle's ``flash_attn_unpadded``
            takes. None: the fields ``return_mask`` and ``return_startend`` ask for.

    One flat row for a varlen kernel:

    >>> flat = PackCollator(6, attention="varlen")([[5, 6, 7], [8, 9], [4, 4]])
    >>> flat["input_ids"].tolist(), flat["cu_seqlens"].tolist(), int(flat["max_seqlen"])
    ([[5, 6, 7, 8, 9, 4, 4]], [0, 3, 5, 7], 3)
    """  # NOTE [ one sample, alone in its row ], NOTE [ a sample's own fields ]

    def __init__(
        self,
        pack_len: int,
        *,
        causal: bool = True,
        pad_val: int = 0,
        ignore_index: int = -100,
        shift: bool = True,
        return_mask: bool = True,
        return_startend: bool = True,
        layout: PackLayout | None = None,
        pad_to_multiple_of: int = 1,
        sample_label: str | None = None,
        attention: Any = None,
    ) -> None:
        self.pack_len = check_int("pack_len", pack_len, minimum=1, maximum=MAX_LENGTH)
        multiple = check_int(
            "pad_to_multiple_of", pad_to_multiple_of, minimum=1, maximum=MAX_LENGTH
        )
        self.return_mask = check_bool("return_mask", return_mask)
        self.return_startend = check_bool("return_startend", return_startend)
        #: The attention layout whose fields are emitted (None: ``return_mask`` and
        #: ``return_startend`` say).
        self.attention = _check_layout(
            layout, self.pack_len, multiple, attention, self.return_mask, self.return_startend
        )
        self.layout = layout
        #: Widths are rounded up to this: the layout's, if given.
        self.pad_to_multiple_of = multiple if layout is None else layout.pad_to_multiple_of
        self.causal = check_bool("causal", causal)
        self.pad_val = _check_label("pad_val", pad_val)
        self.ignore_index = _check_label("ignore_index", ignore_index)
        self.shift = check_bool("shift", shift)
        if sample_label is not None and (not isinstance(sample_label, str) or not sample_label):
            raise InputTypeError(
                "sample_label must be None or the name of a dict sample's field holding its one "
                f"label (a class or a value), got sample_label={sample_label!r:.80}"
            )
        #: The field of each sample's own label (NOTE [ a sample's own label ]), or None.
        self.sample_label = sample_label

    @classmethod
    def for_sampler(cls, sampler: Any, **kwargs: Any) -> PackCollator:
        """The collator that builds ``sampler``'s micro-batches as its plan priced them.

        With the options' ``time_model`` each micro-batch is laid out packed or padded,
        whichever it predicts faster within the budget; without, every one is packed. Either way
        the width is rounded up to the options' ``pad_to_multiple_of``, as planned, and a
        micro-batch over the options' budget (samples longer than the lengths planned) is an
        :class:`~dynbatch.InputError`.

        Args:
            sampler: a packing sampler or stream (anything with ``.options`` holding
                ``pack_len``), or its :class:`~dynbatch.PlanOptions`.
            **kwargs: the collator's other arguments (``causal=...``); ``pack_len`` and
                ``layout`` are the sampler's.

        With a step time whose attention grows with the square of a row's
        width, three short samples run padded and a long one packs:

        >>> from dynbatch import PlanOptions
        >>> opts = PlanOptions(max_cost=64, cost="linear", pack_len=8, update_size=4,
        ...                    order="shuffle", time_model="1,0.1,0.1")
        >>> collate = PackCollator.for_sampler(opts, causal=False)
        >>> collate([[1, 2], [3, 4], [5]])["input_ids"].tolist()  # 3 x 2 beat a row of 5
        [[1, 2], [3, 4], [5, 0]]
        >>> collate([[1, 2, 3, 4, 5, 6], [7]])["input_ids"].tolist()  # a row of 7 beat 2 x 6
        [[1, 2, 3, 4, 5, 6, 7]]
        """
        options = sampler if isinstance(sampler, PlanOptions) else getattr(sampler, "options", None)
        if not isinstance(options, PlanOptions) or options.pack_len is None:
            raise InputError(
                "PackCollator.for_sampler needs a sampler (or PlanOptions) that packs: its "
                f"options must hold pack_len, got {sampler!r:.80}"
            )
        own = {"pack_len": options.pack_len, "pad_to_multiple_of": options.pad_to_multiple_of}
        for name in ("pack_len", "layout", "pad_to_multiple_of"):  # the sampler's: the plan's rows
            if name in kwargs:
                theirs = f"{name}={own[name]}" if name in own else f"pack_len={options.pack_len}"
                raise InputError(
                    f"{name}={kwargs[name]!r:.40} is the sampler's own: PackCollator.for_sampler "
                    f"sets it from the sampler's options ({theirs}); leave {name} out, or build "
                    "PackCollator(pack_len, layout=...) yourself"
                )
        layout = PackLayout.from_options(options)  # the attention planned: others are refused
        masks = ("attention", "return_mask", "return_startend")
        if not layout.attention.dense and not any(k in kwargs for k in masks):
            kwargs["attention"] = layout.attention  # the fields of the layout planned
        return cls(options.pack_len, layout=layout, **kwargs)

    def __repr__(self) -> str:
        timed = "" if self.layout is None else ", layout=PackLayout(...)"
        if self.attention is not None:
            timed += f", attention={self.attention.name!r}"
        multiple = self.pad_to_multiple_of
        rounded = "" if multiple == 1 or self.layout else f", pad_to_multiple_of={multiple}"
        return (
            f"PackCollator(pack_len={self.pack_len}, causal={self.causal}, "
            f"shift={self.shift}, ignore_index={self.ignore_index}{rounded}{timed})"
        )

    @reaches_the_loop  # NOTE [ a collator safe by construction ] in .safe_collate
    def __call__(self, samples: Sequence[Any]) -> dict[str, NDArray[Any]]:
        if isinstance(samples, (str, bytes, Mapping)) or not isinstance(samples, Sequence):
            raise InputTypeError(
                f"PackCollator takes the list of one micro-batch's samples, got {samples!r:.80}"
            )
        if len(samples) == 0:
            raise InputError("PackCollator got an empty micro-batch: nothing to pack")
        own = None
        if self.sample_label is not None:  # NOTE [ a sample's own label ]
            own, samples = _own_labels(samples, self.sample_label)
        ids, labels, types = zip(*(_fields(s, k) for k, s in enumerate(samples)), strict=True)
        lens = np.fromiter((a.size for a in ids), dtype=np.int64, count=len(ids))
        flat = self.attention is not None and self.attention.name == "varlen"
        if flat:  # NOTE [ attention layouts ]: one row of every token, no row padding
            if self.layout is not None:
                self.layout.rows(lens)  # the budget, checked as the rows would be
            offsets, width = np.array([0, lens.size], dtype=np.int64), int(lens.sum())
        elif self.layout is None:  # rows as wide as the fullest: NOTE [ a micro-batch's layout ]
            offsets, width = packed_rows(lens, self.pack_len, self.pad_to_multiple_of)
        else:  # NOTE [ a micro-batch's layout ]: packed rows, or a sample a row
            offsets, width = self.layout.rows(lens)
        n_rows = offsets.size - 1
        row_of = np.repeat(np.arange(n_rows), np.diff(offsets))
        # each sample's first column in its row
        ends = np.cumsum(lens)
        col = ends - lens - (ends - lens)[offsets[row_of]]
        out_ids = np.full((n_rows, width), self.pad_val, dtype=np.int64)
        out_labels = np.full((n_rows, width), self.ignore_index, dtype=np.int64)
        out_pos = np.zeros((n_rows, width), dtype=np.int64)
        out_types = np.zeros((n_rows, width), dtype=np.int64)
        sample_ids = np.full((n_rows, width), -1, dtype=np.int64)
        per_row = np.diff(offsets)
        starts = np.full((n_rows, int(per_row.max())), -1, dtype=np.int64)
        for k in range(lens.size):
            r, c, n = int(row_of[k]), int(col[k]), int(lens[k])
            out_ids[r, c : c + n] = ids[k]
            lab = ids[k] if labels[k] is None else labels[k]
            out_labels[r, c : c + n] = lab
            if self.shift:
                out_labels[r, c] = self.ignore_index
            out_pos[r, c : c + n] = np.arange(n)
            if types[k] is not None:
                out_types[r, c : c + n] = types[k]
            sample_ids[r, c : c + n] = k - offsets[r]
            starts[r, k - offsets[r]] = c
        out = {
            "input_ids": out_ids,
            "labels": out_labels,
            "position_ids": out_pos,
            "token_type_ids": out_types,
            "sample_starts": starts,
            "sample_ids": sample_ids,
        }
        seq = np.arange(width)
        # a fill token is a sample of its own, alone: it attends to itself
        owner = np.where(sample_ids >= 0, sample_ids, width + seq)
        masks = (self.return_mask, self.return_startend)
        if self.attention is not None:
            fields = self.attention.fields
            masks = ("attention_mask" in fields, "attn_mask_startend_row_indices" in fields)
        if flat:
            out["cu_seqlens"] = np.r_[0, np.cumsum(lens)].astype(np.int32)
            out["max_seqlen"] = np.asarray(lens.max(), dtype=np.int32)
        if masks[0]:
            mask = owner[:, :, None] == owner[:, None, :]
            if self.causal:
                mask &= seq[None, :, None] >= seq[None, None, :]
            out["attention_mask"] = mask
        if masks[1]:
            out["attn_mask_startend_row_indices"] = self._startend(owner, seq)
        if own is not None:  # one label a sample, beside its start: no token labels
            fill = self.ignore_index if own.dtype == np.int64 else 0
            out["sample_labels"] = np.full(starts.shape, fill, dtype=own.dtype)
            out["sample_labels"][row_of, np.arange(lens.size) - offsets[row_of]] = own
            del out["labels"]
        return out

    def _startend(self, owner: NDArray[Any], seq: NDArray[Any]) -> NDArray[Any]:
        """FlashMask's columns: each column's sample end (and start), fill alone."""
        new = np.ones_like(owner, dtype=bool)
        new[:, 1:] = owner[:, 1:] != owner[:, :-1]
        start = np.maximum.accumulate(np.where(new, seq[None, :], 0), axis=1)
        last = np.ones_like(new)
        last[:, :-1] = new[:, 1:]
        rev = np.where(last, seq[None, :] + 1, owner.shape[1])[:, ::-1]
        end = np.minimum.accumulate(rev, axis=1)[:, ::-1]
        cols = [end] if self.causal else [end, start]
        out: NDArray[Any] = np.stack(cols, axis=-1)[:, None].astype(np.int32)
        return out


def _check_layout(
    layout: Any,
    pack_len: int,
    multiple: int,
    attention: Any,
    return_mask: bool,
    return_startend: bool,
) -> Any:
    """``PackCollator``'s layout and attention, checked against each other: the attention."""
    if layout is not None and not isinstance(layout, PackLayout):
        raise InputTypeError(
            "layout must be a dynbatch.plan.packs.PackLayout (PackLayout.from_options("
            f"sampler.options)) or None, got layout={layout!r:.80}"
        )
    if layout is not None and layout.pack_len != pack_len:
        raise InputError(
            f"layout lays out rows of pack_len={layout.pack_len}, the collator's are "
            f"pack_len={pack_len}: build both from the sampler's options "
            "(PackCollator.for_sampler(sampler))"
        )
    if layout is not None and multiple not in (1, layout.pad_to_multiple_of):
        raise InputError(
            f"pad_to_multiple_of={multiple} differs from the layout's pad_to_multiple_of="
            f"{layout.pad_to_multiple_of}: with a layout its widths are the layout's; leave "
            "pad_to_multiple_of out (PackCollator.for_sampler(sampler) sets both)"
        )
    resolved = None if attention is None else resolve_attention(attention)
    if resolved is not None and not (return_mask and return_startend):
        raise InputError(
            f"give attention={resolved.name!r} (its own mask fields: "
            f"{', '.join(resolved.fields)}) or return_mask / return_startend, not both; "
            f"got return_mask={return_mask}, return_startend={return_startend}"
        )
    if resolved is not None and layout is not None and layout.attention != resolved:
        raise InputError(
            f"attention={resolved.name!r} differs from the layout's attention="
            f"{layout.attention.name!r}: the plan priced rows as the layout's run; build "
            "both with one (PackCollator.for_sampler(sampler, attention=...))"
        )
    if resolved is None and layout is not None and not layout.attention.dense:
        # the old flags give the dense mask and FlashMask's indices: only the indices alone
        # run as a block-skipping layout priced them (NOTE [ attention layouts ])
        indices = not return_mask and return_startend
        if layout.attention.name != "flashmask" or not indices:
            raise InputError(
                f"the layout's attention={layout.attention.name!r} priced rows as that kernel "
                f"runs them; return_mask={return_mask}, return_startend={return_startend} would "
                "give a dense mask (or no mask) to run them by: leave the mask arguments out "
                f"(PackCollator.for_sampler(sampler)) or pass attention={layout.attention.name!r}"
            )
    return resolved


def additive_mask(mask: Any, dtype: Any = np.float32, neg: float = -1e4) -> NDArray[Any]:
    """A bool ``[R, P, P]`` mask as BERT's additive ``[R, 1, P, P]``: 0 to attend, ``neg`` not.

    >>> additive_mask(np.array([[[True, False], [False, True]]])).tolist()
    [[[[0.0, -10000.0], [-10000.0, 0.0]]]]
    """
    arr = np.asarray(mask)
    if arr.dtype != np.bool_ or arr.ndim != 3 or arr.shape[1] != arr.shape[2]:
        raise InputTypeError(
            f"mask must be a bool array [rows, P, P] (PackCollator's attention_mask), got "
            f"dtype {arr.dtype} and shape {arr.shape}"
        )
    out: NDArray[Any] = np.where(arr, 0.0, neg).astype(dtype)[:, None]
    return out


# NOTE [ a sample's own label ]
#     A classifier's or a regression's sample has one label, not one a token. With
#     ``sample_label="label"`` each sample's own is read from that field (or a tuple's second
#     part), never packed, and given back in ``sample_labels`` ``[R, S]``: the label of the
#     sample that starts at ``sample_starts[r, s]``. The model pools each sample from its own
#     tokens (its first, ``[CLS]``, for BERT: ``hidden[r, sample_starts[r, s]]`` where
#     ``sample_starts >= 0``) and scores it against ``sample_labels[r, s]``. Integers (classes)
#     are int64, ``ignore_index`` past a row's last sample; real values float32, 0 there.
def _own_labels(samples: Sequence[Any], name: str) -> tuple[NDArray[Any], list[Any]]:
    """Each sample's own label under ``name`` (NOTE [ a sample's own label ]), and the samples
    without it."""
    labels: list[Any] = []
    rest: list[Any] = []
    for k, sample in enumerate(samples):
        if isinstance(sample, Mapping):
            if name not in sample:
                raise InputError(
                    f"samples[{k}] has no {name!r}: sample_label={name!r} reads each sample's "
                    f"own label there; got keys {sorted(sample, key=str)}"
                )
            if name != "labels" and "labels" in sample:
                raise InputError(
                    f"samples[{k}] holds token labels 'labels' and sample_label={name!r}: a "
                    "sample has one label or one a token, not both; leave one out"
                )
            value = sample[name]
            rest.append({key: v for key, v in sample.items() if key != name})
        elif isinstance(sample, (tuple, list)) and len(sample) == 2:
            value = sample[1]
            rest.append((sample[0],))
        else:
            raise InputError(
                f"samples[{k}] must be a dict with {name!r} or a tuple (input_ids, label) with "
                f"sample_label={name!r}, got {sample!r:.80}"
            )
        if isinstance(value, np.ndarray) and value.size == 1:  # np.array([7]): paddle's datasets
            value = value.reshape(())[()]  # its numpy scalar, of its dtype
        real = isinstance(value, (numbers.Real, np.integer, np.floating))
        if isinstance(value, (bool, np.bool_)) or not real or not np.isfinite(value):
            raise InputError(
                f"samples[{k}] {name}={value!r:.80} must be one finite number a sample: a class "
                "(an integer) or a value"
            )
        labels.append(value)
    whole = all(isinstance(v, (numbers.Integral, np.integer)) for v in labels)
    if whole:
        _refuse_beyond_int64(labels, f"the samples' {name}")
    return np.asarray(labels, dtype=np.int64 if whole else np.float32), rest


def _check_label(name: str, value: Any) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise InputTypeError(f"{name} must be an integer token id or label, got {name}={value!r}")
    if not _INT64.min <= int(value) <= _INT64.max:
        raise InputError(f"{name} must fit int64 (a token id or label), got {name}={value!r}")
    return int(value)


_INT64 = np.iinfo(np.int64)


def _ints(value: Any, what: str, size: int | None = None) -> NDArray[np.int64]:
    """``value`` as int64: a non-empty 1-D integer sequence (of ``size`` if given)."""
    arr = np.asarray(value)
    if arr.dtype.kind in "fO" and isinstance(value, (list, tuple)):  # an int beyond int64?
        _refuse_beyond_int64(value, what)
    if size is None and (arr.ndim != 1 or arr.size == 0):
        raise InputError(f"{what} must be a non-empty 1-D sequence of token ids, got {value!r:.80}")
    wrong_type = arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer)
    if size is None and wrong_type:
        raise InputTypeError(f"{what} must hold integer token ids, got dtype {arr.dtype}")
    if size is not None and (arr.shape != (size,) or wrong_type):
        raise InputError(f"{what} must be integers of input_ids' length {size}, got {value!r:.80}")
    if arr.dtype.kind == "u" and arr.size and arr.max() > _INT64.max:  # would wrap negative
        i = int(np.argmax(arr > _INT64.max))
        raise InputError(f"{what} must fit int64 ({_INT64_RANGE}); item {i} is {int(arr[i])}")
    return arr.astype(np.int64, copy=False)


_INT64_RANGE = "ids from -2**63 to 2**63 - 1"


def _refuse_beyond_int64(values: Sequence[Any], what: str) -> None:
    """Refuse a Python int of ``values`` that int64 cannot hold: numpy reads such a list as
    float64 (rounding the ids) or object, not as integers."""
    for i, x in enumerate(values):
        whole = isinstance(x, numbers.Integral) and not isinstance(x, (bool, np.bool_))
        if whole and not _INT64.min <= int(x) <= _INT64.max:
            raise InputError(f"{what} must fit int64 ({_INT64_RANGE}); item {i} is {int(x)}")


def refuse_other_fields(sample: Mapping[Any, Any], k: int, packed: Sequence[str], who: str) -> None:
    """Refuse by name a field of the dict ``samples[k]`` that the rows would drop.

    ``packed`` are the fields ``who`` packs; :data:`REBUILT_FIELDS` are honoured too
    (NOTE [ a sample's own fields ]: :func:`real_tokens` checks them).
    """
    for name in sample:
        if name not in packed and name not in REBUILT_FIELDS:
            taken = ", ".join([*packed, *REBUILT_FIELDS])
            raise InputError(
                f"samples[{k}] has the field {name!r}, which the packed rows would drop: {who} "
                f"packs {taken} (an attention_mask of 0/1 leaves the sample's 0 tokens out; "
                f"position_ids must count 0, 1, ... over its real tokens). Leave {name!r} out "
                "of the samples"
            )


def real_tokens(sample: Mapping[Any, Any], k: int, n: int) -> NDArray[np.bool_] | None:
    """Which of the ``n`` tokens of the dict ``samples[k]`` are real; None when all are.

    Its ``attention_mask`` (0/1 or bools, ``n`` long) says; its ``position_ids`` must count 0, 1,
    ... over the real tokens, as the rows rebuild them (NOTE [ a sample's own fields ]). Anything
    else is refused by name.

    >>> real_tokens({"attention_mask": [0, 1, 1], "position_ids": [0, 0, 1]}, 0, 3).tolist()
    [False, True, True]
    """
    keep = None
    mask = sample.get("attention_mask")
    if mask is not None:
        arr = np.asarray(mask)
        if not (arr.shape == (n,) and arr.dtype.kind in "biuf" and np.isin(arr, (0, 1)).all()):
            raise InputError(
                f"samples[{k}] attention_mask must be 1-D 0/1 (or True/False) of input_ids' "
                f"length {n}, 0 on the tokens to leave out (padding); got {mask!r:.80}"
            )
        keep = arr.astype(bool)
        if not keep.any():
            raise InputError(
                f"samples[{k}] attention_mask is 0 everywhere: the sample has no real token to pack"
            )
    positions = sample.get("position_ids")
    if positions is not None:
        arr = np.asarray(positions)
        real = n if keep is None else int(keep.sum())
        if not (
            arr.shape == (n,)
            and arr.dtype.kind in "iu"
            and np.array_equal(arr if keep is None else arr[keep], np.arange(real))
        ):
            raise InputError(
                f"samples[{k}] position_ids={positions!r:.80} do not count 0, 1, ... over the "
                "sample's real tokens: the rows restart each sample's positions at 0, so they "
                "would drop these; leave position_ids out of the samples"
            )
    return None if keep is None or keep.all() else keep


def _fields(
    sample: Any, k: int
) -> tuple[NDArray[np.int64], NDArray[np.int64] | None, NDArray[np.int64] | None]:
    """``(input_ids, labels or None, token_type_ids or None)`` of one sample, its real
    tokens only (NOTE [ a sample's own fields ])."""
    mapping = isinstance(sample, Mapping)
    if mapping:
        if "input_ids" not in sample:
            raise InputError(
                f"samples[{k}] has no input_ids: a dict sample needs input_ids (and may have "
                f"{', '.join([*PACKED_FIELDS[1:], *REBUILT_FIELDS])}), got keys "
                f"{sorted(sample, key=str)}"
            )
        refuse_other_fields(sample, k, PACKED_FIELDS, "PackCollator")
        parts = [sample["input_ids"], sample.get("labels"), sample.get("token_type_ids")]
    elif isinstance(sample, (tuple, list)) and sample and not isinstance(sample[0], numbers.Number):
        if len(sample) > 2:
            raise InputError(
                f"samples[{k}] must be (input_ids,) or (input_ids, labels), got {len(sample)} parts"
            )
        parts = [sample[0], sample[1] if len(sample) == 2 else None, None]
    else:
        parts = [sample, None, None]
    ids = _ints(parts[0], f"samples[{k}] input_ids")
    if parts[1] is not None and np.ndim(parts[1]) == 0:
        raise InputError(
            f"samples[{k}] labels={parts[1]!r:.40} is one label for the sample, where labels are "
            f"one a token (input_ids' length {ids.size}): for a classifier or a regression give "
            "PackCollator(..., sample_label='label') and the label in that field (a tuple "
            "(input_ids, label) is read the same way)"
        )
    labels, types = (
        None if value is None else _ints(value, f"samples[{k}] {name}", ids.size)
        for name, value in zip(PACKED_FIELDS[1:], parts[1:], strict=True)
    )
    keep = real_tokens(sample, k, ids.size) if mapping else None
    if keep is None:
        return ids, labels, types
    return (
        ids[keep],
        None if labels is None else labels[keep],
        None if types is None else types[keep],
    )
