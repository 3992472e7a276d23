"""Options from the batch you would have used: pure numpy, no paddle.

Two recipes, each a :class:`~dynbatch.PlanOptions`:

* :func:`like_fixed` trains like a fixed batch, at equal epochs, without its
  padding: the same number of updates, each the exact mean over as many
  samples of every length, and never more memory than the fixed batch's worst.
  It is the default path (a sampler given ``batch_size=``, the Trainer).
* :func:`fill_device` makes micro-batches as large as the device runs
  efficiently (the knee of a fitted step-time model), within a memory target:
  the most tokens per second, at the price of fewer, larger updates.

NOTE [ the fixed batch's recipe ]
    A shuffled fixed batch of ``B`` samples makes ``N / B`` updates an
    epoch, each the mean over ``B`` samples of every length, and its worst
    batch is ``B`` samples of the longest length. The recipe keeps all
    three and drops the padding:

    * updates of ``B * accumulation_steps * num_replicas`` samples
      (``update_size``; in ``"tokens"``, that many samples' mean real
      length, for pairs their mean target length), so an epoch has as many
      updates as the fixed batch's;
    * each made of ``micro_batches`` micro-batches or more, each of
      near-equal lengths (the bucket order: no padding), drawn from
      different length strata (NOTE [ mixed updates ] in
      :mod:`dynbatch.plan.windows`), so an update sees short and long samples
      as a random batch does. Updates of one length train a worse model:
      it is what made the study's sorted order hurt;
    * a micro-batch holds at most ``update / (micro_batches *
      num_replicas)`` samples (in ``"tokens"``, about that share of the
      update's tokens) and never more than ``B``, and costs at most
      ``cost(B, L_max)``, the fixed batch's worst. As a cost grows with
      ``n`` and ``L``, no micro-batch needs more memory than the fixed
      batch's worst batch did.

    With ``max_cost`` (e.g. a memory target in MiB under a calibrated
    :class:`~dynbatch.MemoryCost`) the micro-batches fit it instead, and
    without ``batch_size``, ``B`` is the largest batch of the longest
    samples that fits it.

    With a ``time_model`` (the device's step time) the split follows it:
    the recipe also plans the fixed batch's own updates cut at the least
    predicted step time (NOTE [ splitting updates at the step time ] in
    :mod:`dynbatch.plan.splits`; never predicted slower than the fixed batch):
    the options returned (``fixed_step_size=batch_size``) plan both each
    epoch and keep the one predicted faster on that epoch's draw
    (NOTE [ the faster plan of each epoch ] in :mod:`dynbatch.plan.epoch_plan`). On
    a CPU, where padding costs, that is the padding-free split above; on
    a GPU below its knee, where a step costs the same at any size, it is
    one micro-batch per update, the fixed batch's own speed; above the
    knee, cuts where they pay. Updates in ``"tokens"``, or an order that
    is not random, have no such candidate: a ``time_model`` there is
    refused by name rather than dropped.

NOTE [ filling the device ]
    A step costs about ``c + n·L·(a + b·L)`` seconds (``time_model``, as
    :func:`~dynbatch.calibrate` fits it with the memory): a fixed part
    ``c`` (kernel launches, the optimizer) and a part that grows with the
    batch. Tokens per second reach ``fraction`` of their best at ``L``
    once the growing part is ``c · fraction / (1 - fraction)``: past that,
    a larger batch buys little speed and costs updates. Each micro-batch
    is the largest below that knee (at least one sample) that also fits
    ``max_cost`` under ``cost``; a step time that does not grow with the
    batch (``a = b = 0``) has no knee, and the memory target alone
    decides. With ``batch_size``, micro-batches are grouped into mixed
    updates of at least that many samples per rank (NOTE [ mixed updates ]);
    a micro-batch larger than that is an update alone.
    Larger micro-batches mean fewer updates an epoch: docs/gpu.md shows
    what that costs in accuracy.

    For (source, target) pairs the memory target is a cost of pairs (a
    :class:`~dynbatch.PairMemoryCost` that :func:`~dynbatch.calibrate` fits
    from ``step(n, Ls, Lt)``; a named cost in its two-length form), charged
    at each micro-batch's longest source and longest target, and the step
    time one of two lengths (the
    :class:`~dynbatch.plan.pair_steptime.PairStepTimeModel` that calibrate
    fits on the same probes): its part that grows with the batch, ``n·(a_s·Ls
    + a_t·Lt + b_s·Ls² + b_t·Lt² + cross·Ls·Lt)``, stops at the same knee,
    held with the memory target as one length's is
    (:class:`~dynbatch.plan.pair_steptime.KneeWithin`). Without one
    (``time_model=None``, or one that does not grow) the memory target alone
    decides; one of one length that grows is refused by name (its ``L`` is
    neither side), as one of pairs is for one length. Updates in ``"tokens"``
    count a pair's target tokens, as :func:`like_fixed`'s do.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._checks import (
    MAX_LENGTH,
    InputError,
    InputTypeError,
    check_bool,
    check_choice,
    check_int,
    check_positive_number,
    check_replicas,
)
from .costs import (
    Cost,
    LinearCost,
    MixedCost,
    PairCost,
    WithinBudgets,
    charge,
    cost_spec,
    pair_form,
    resolve_cost,
)
from .costs import rows_cost as rows_cost_of
from .lengths import (
    check_pair_loss_tokens,
    check_plan_lengths,
    is_pairs,
    sample_tokens,
    update_tokens,
)
from .options import UNITS, PlanOptions, refuse_unknown_options
from .packs.attention import DenseRows, resolve_attention, widest_row
from .pair_costs import takes_pairs
from .pair_steptime import (
    PAIR_FLAT_STEP,
    KneeWithin,
    PairStepTimeModel,
    check_step_time,
    refuse_time_model_for,
)
from .pairs import TokensWithin, refuse_for_pairs
from .planning import batch_capacity, padded_lengths
from .steptime import FLAT_STEP

__all__ = [
    "LIKE_FIXED_KEYWORDS",
    "MICRO_BATCHES",
    "fill_device",
    "like_fixed",
    "refuse_update_size",
]

#: :func:`like_fixed`'s keywords that are not option fields (a sampler told ``batch_size`` passes
#: them on)
LIKE_FIXED_KEYWORDS = frozenset({"accumulation_steps", "attention", "micro_batches", "rows_cost"})

#: The largest fixed batch :func:`like_fixed` takes: sample counts are int64.
MAX_BATCH_SIZE = 2**40

#: Micro-batches an update of :func:`like_fixed` is made of, at the least: one from each
#: of four length strata (quartiles) at the least (NOTE [ the fixed batch's recipe ]).
MICRO_BATCHES = 4


def like_fixed(
    lengths: Any,
    batch_size: int | None = None,
    *,
    max_cost: float | None = None,
    cost: Any = None,
    accumulation_steps: int = 1,
    num_replicas: int = 1,
    micro_batches: int | None = None,
    update_unit: str = "samples",
    loss_tokens: Any = None,
    time_model: Any = None,
    attention: Any = None,
    rows_cost: Any = None,
    **fields: Any,
) -> PlanOptions:
    """The options that train like a fixed batch of ``batch_size``, without its padding.

    A shuffled fixed batch of ``B`` samples makes ``N / B`` updates an epoch, each the mean
    over ``B`` samples of every length, and its worst batch is ``B`` samples of the longest
    length. These options keep all three and drop the padding: updates of ``B *
    accumulation_steps * num_replicas`` samples, so an epoch has as many updates as the fixed
    batch's; each made of ``micro_batches`` micro-batches or more of near-equal lengths (no
    padding) drawn from different length strata, so an update sees short and long samples as a
    random batch does (updates of one length train a worse model); and no micro-batch costs more
    than ``cost(B, L_max)``, the fixed batch's worst (``cost(N, L_max)`` of ``N < B``
    samples, the batch it runs), so none needs more memory than it did.

    Lengths may be (source, target) pairs, an ``[N, 2]`` array: micro-batches are then
    bucketed on the source and on the target, and none costs more than ``cost(B, Ls_max,
    Lt_max)``, ``B`` pairs of the longest source and the longest target, by the cost of pairs
    (default ``PairCost()``: the study's rule on each side plus the cross-attention term).
    Each side pads as little as the corpus fills the grid of (source, target) cells: 0.94 to
    0.98 on the benchmarks' 7,766 to 200,000 pairs, but 0.79 to 0.86 on 2,000 pairs of
    independent log-normal sides (σ = 1.0), 0.92 at 20,000.

    With a ``time_model`` (the device's step time) the split follows it: each epoch the options
    plan both the padding-free split and the fixed batch's own updates cut at the least
    predicted step time, and keep the faster. On a CPU, where padding costs, that is the
    padding-free split; on a GPU below its knee, where a step costs the same at any size, one
    micro-batch per update, the fixed batch's own speed. Updates in ``"tokens"``, or an order
    that is not random, have no such plan: a ``time_model`` there is refused by name.

    Args:
        lengths: the per-sample lengths the plan will be made from (or ``[N, 2]`` pairs).
        batch_size: the fixed batch you would have used (per rank).
        max_cost: a budget for the micro-batches under ``cost``; default
            ``cost(batch_size, L_max)``.
        cost: the cost model (default ``"linear"``, padded tokens; for pairs ``PairCost()``,
            the study's rule on each side plus the cross term).
        accumulation_steps: the fixed batch's gradient accumulation steps.
        num_replicas: data-parallel ranks (an update spans all of them).
        micro_batches: micro-batches per update, at the least (more: more mixed); default
            :data:`MICRO_BATCHES`. Refused with ``pack_len``: a packed update is as few
            micro-batches as its rows need within the budget.
        update_unit: ``"samples"`` (one loss per sample) or ``"tokens"``: updates of as many
            tokens as ``B`` samples hold on average; for (source, target) pairs, target tokens,
            the tokens a sequence-to-sequence loss is over (micro-batches are capped by the
            padded tokens of both sides).
        loss_tokens: per sample, the tokens that carry a loss (a masked prompt
            carries none): updates in ``"tokens"`` are as many loss tokens as
            ``B`` samples hold on average, so each update averages over about the
            tokens it learns from; micro-batches are still capped by their full
            tokens.
        group_by_length: updates of near-equal lengths, as Hugging Face's
            ``group_by_length`` draws them, split at the step time (each whole
            without a ``time_model``): the fixed batch's update count with
            almost no padding, at the price of updates that are not random
            draws ("On a GPU" in the docs, docs/gpu.md, has what that cost in accuracy).
            Pairs are grouped on source + target, so the shorter side pads heavily
            (the source 0.59 and the target 0.87 on sources in [5, 40) and targets in
            [20, 200); the source 0.2 to 0.5 where targets are many times longer): for
            pairs, leave it out where padding matters.
        pack_len: pack several samples into rows of this many tokens: the fixed batch's own
            updates (the same samples, as many an epoch), each micro-batch as many rows as fit
            the fixed batch's worst cost ``cost(R, pack_len) <= cost(B, L_max)`` (at most
            ``max_batch_size`` rows, when given; a ``pack_len`` whose one row costs more than
            that is refused by name, unless ``max_cost`` allows it), priced as ``attention``
            runs them: by default dense rows, whose attention grows with the square of their
            width, so rows stop short of ``pack_len`` where one would need more memory than
            the fixed batch's worst (:mod:`dynbatch.plan.packs.attention`: ``L_max·√B`` tokens
            for the linear cost),
            order ``"shuffle"``; with
            ``time_model``, each update runs packed, split or whole, whichever is predicted
            fastest, or the epoch the fixed batch's own updates where that is faster.
        time_model: the step's seconds, ``c + n·L·(a + b·L)``: an object with
            ``c``, ``a``, ``b`` (``MemoryCost.time_model``,
            :meth:`~dynbatch.plan.steptime.StepTimeTable.fit`) or ``"c,a,b"``; for
            (source, target) pairs a step time of two lengths,
            :class:`~dynbatch.plan.pair_steptime.PairStepTimeModel` (or
            ``"c,a_s,a_t,b_s,b_t,cross"``): one of one length is refused by name there.
        attention: with ``pack_len``, how the packed rows' attention runs: ``"dense"`` (the
            default: a block mask, eager attention; what a CPU runs), ``"flashmask"`` or
            ``"varlen"`` (a GPU's kernels, whose memory grows with the tokens): an
            :class:`~dynbatch.plan.packs.Attention` or its name.
        rows_cost: with ``pack_len``, what a packed row costs where that is not what ``cost``
            prices a padded batch of its shape at (a :class:`~dynbatch.MemoryCost` calibrated
            on packed rows, their positions and mask): rows are priced by it, padded
            micro-batches by ``cost``, under ``cost(B, L_max)``, the fixed batch's worst as it
            runs: each layout priced as it runs, so the fixed batch's own update still fits
            its own worst.
        **fields: other options (``seed=...``, ``drop_last=...``, ...).

    >>> opts = like_fixed([10, 20, 30, 40] * 100, batch_size=32)
    >>> opts.update_size, opts.max_batch_size, opts.max_cost, opts.order
    (32.0, 8, 1280.0, 'bucket')
    """  # NOTE [ the fixed batch's recipe ], NOTE [ planning pairs ], NOTE [ costs of pairs ]
    grouped = check_bool("group_by_length", fields.pop("group_by_length", False))
    refuse_update_size(fields, batch_size, "like_fixed")
    fields.pop("update_size", None)
    step_given = check_int(
        "fixed_step_size", fields.pop("fixed_step_size", None), minimum=1, allow_none=True
    )
    pack_len = check_int(
        "pack_len", fields.pop("pack_len", None), minimum=1, maximum=MAX_LENGTH, allow_none=True
    )
    lens, longest = _lengths(lengths, fields, "like_fixed")
    if is_pairs(lens):  # NOTE [ planning pairs ] in dynbatch.plan.pairs
        refuse_for_pairs(
            "like_fixed",
            pack_len=pack_len,
            time_model=time_model,
            group_by_length=grouped,
        )
    else:  # NOTE [ a step time of two lengths ] in dynbatch.plan.pair_steptime
        refuse_time_model_for(time_model, False, "like_fixed")
    counted = check_pair_loss_tokens(loss_tokens, lens)
    steps = check_int("accumulation_steps", accumulation_steps, minimum=1)
    replicas = check_replicas(num_replicas)
    parts = check_int("micro_batches", micro_batches, minimum=1, allow_none=True)
    if pack_len is not None:
        _check_packed(pack_len, grouped, parts)
    if pack_len is not None and step_given is not None:
        raise InputError(
            f"fixed_step_size={step_given} sets the fixed batch's step that an unpacked time "
            f"split is weighed against; pack_len={pack_len} packs the fixed batch's updates "
            "instead and has no such step: leave fixed_step_size out"
        )
    parts = MICRO_BATCHES if parts is None else parts
    fn = resolve_cost(("linear" if lens.ndim == 1 else PairCost()) if cost is None else cost)
    batch, budget = _reference(fn, longest, batch_size, max_cost, "like_fixed", len(lens))
    samples = batch * steps * replicas
    cap = _micro_cap(batch, -(-samples // (parts * replicas)), fields)
    trained = np.ones(len(lens), dtype=bool)
    if fields.get("oversize") == "skip":  # the update's tokens are those of samples trained
        padded = padded_lengths(lens, int(fields.get("pad_to_multiple_of", 1)))
        trained = np.asarray(charge(fn, 1, padded), dtype=np.float64) <= budget
        trained = trained if trained.any() else ~trained
    counts = update_tokens(lens) if counted is None else counted  # a pair's: its target's
    updates = _updates(counts[trained], samples, update_unit)
    for name, value in (("attention", attention), ("rows_cost", rows_cost)):
        if value is not None and pack_len is None:
            raise InputError(
                f"like_fixed: {name}={value!r} is how packed rows run: give pack_len= with it, "
                f"or leave {name} out"
            )
    if rows_cost is not None:  # NOTE [ a cost per layout ] in dynbatch.plan.packs.attention
        rows_cost = _rows_cost(rows_cost)
    if pack_len is not None:  # rows of pack_len within the fixed batch's worst cost
        multiple = int(fields.get("pad_to_multiple_of", 1))
        if max_cost is None:  # never over the fixed batch's worst: refused, by name
            # NOTE [ the default budget of packed rows ]: priced, and laid out, as they run
            fn = DenseRows(fn, longest, resolve_attention(attention), rows_cost)
            rows = fn.packed_rows
            worst = min(batch, len(lens))  # the fixed batch's worst batch
            check = (rows.cost, rows, pack_len, budget, worst, longest, multiple)
            _check_one_row(*check, named=rows_cost is not None)
            width = -(-pack_len // multiple) * multiple  # a row as the collator pads it
            widest = widest_row(rows, budget, width)
            if widest < width:  # the row stops short: at a multiple
                pack_len = widest // multiple * multiple
        elif rows_cost is not None or not resolve_attention(attention).dense:
            # max_cost given: its cost as they run, carrying the layout
            fn = DenseRows(fn, longest, resolve_attention(attention), rows_cost)
        if rows_cost is not None:  # a sample alone in its row, as an oversize one runs
            _check_alone(rows_cost_of(fn), budget, longest, multiple)
        values = {"order": "shuffle", **updates, **fields, "pack_len": pack_len}
        return PlanOptions(max_cost=budget, cost=fn, time_model=time_model, **values)
    if update_unit == "tokens":  # micro-batches of about equal (full) tokens, as updates are
        full = sample_tokens(lens)[trained]  # a pair's: both sides, as its padding is
        tokens = max(samples * float(full.mean()) / (parts * replicas), float(np.sum(longest)))
        if is_pairs(lens):  # the padded tokens of both sides, as a pair's padding is
            fn, budget = TokensWithin(fn, budget, tokens), 1.0
        else:
            fn, budget = WithinBudgets(((fn, budget), (LinearCost(), tokens))), 1.0
    values = {"order": "bucket", "max_batch_size": cap, **updates, **fields}
    options = PlanOptions(max_cost=budget, cost=fn, **values)
    model = check_step_time(time_model)
    if model is not None and (update_unit != "samples" or not options.random_order):
        # NOTE [ the fixed batch's recipe ]: dropped, the split ran 4-6x the fixed batch's steps
        raise InputError(
            f"like_fixed: time_model={model!r} cuts updates of samples drawn at random each "
            "epoch (update_unit='samples' and order 'bucket' or 'shuffle'), got "
            f"update_unit={update_unit!r}, order={options.order!r}: leave time_model out "
            "(the padding-free split), or draw samples at random"
        )
    # the fixed batch's step, ``B`` a rank, a multiple or not (rounded down, every update would
    # be cut): NOTE [ the multiple and the fixed batch's step ] in dynbatch.plan.splits
    whole = {"order": "shuffle", "max_batch_size": batch, **fields}
    if grouped:  # Hugging Face's grouping, split at the step time (a flat one: each whole)
        flat = PAIR_FLAT_STEP if is_pairs(lens) else FLAT_STEP
        return options.replace(**whole, time_model=model or flat, group_by_length=True)
    if model is None:
        if step_given is not None:
            raise InputError(
                f"fixed_step_size={step_given} sets the fixed batch's step that the time split "
                "is weighed against each epoch: it needs time_model= (the step time that splits "
                "the updates), got none"
            )
        return options
    # each epoch keeps the faster of the two (NOTE [ the faster plan of each epoch ]); the time
    # split's steps are the fixed batch's, within a max_batch_size given as the padding-free's are
    given = fields.get("max_batch_size")
    step = batch if given is None else min(batch, options.max_batch_size or batch)
    step = step if step_given is None else step_given
    return options.replace(time_model=model, fixed_step_size=step)


def _check_packed(pack_len: int, grouped: bool, parts: int | None) -> None:
    """Refuse, by name, what ``like_fixed(pack_len=...)`` would drop (NOTE [ packed updates ])."""
    if grouped:
        raise InputError(
            f"like_fixed: pack_len={pack_len} does not support group_by_length=True: packing "
            "draws each update's rows at random, never updates of one length; pass "
            "group_by_length=False or pack_len=None"
        )
    if parts is not None:
        raise InputError(
            f"like_fixed: pack_len={pack_len} makes each update as few micro-batches as its "
            "rows need within the budget (a multiple of the ranks), so micro_batches has no "
            f"meaning there, got micro_batches={parts!r}: leave it out (max_batch_size= caps "
            "a micro-batch's rows), or pass pack_len=None"
        )


def _rows_cost(rows_cost: Any) -> Cost:
    """``rows_cost`` checked as a cost of one length's rows, ``(n, L)``, named so."""
    try:
        fn = resolve_cost(rows_cost)
    except InputError as exc:
        raise InputError(f"like_fixed: rows_cost={rows_cost!r} is no cost of rows: {exc}") from None
    if takes_pairs(fn):
        raise InputError(
            f"like_fixed: rows_cost={rows_cost!r} prices (source, target) pairs; packed rows "
            "are one length's, priced (n, L)"
        )
    return fn


def _check_one_row(
    fn: Cost,
    rows: DenseRows,
    pack_len: int,
    budget: float,
    batch: int,
    longest: int,
    multiple: int,
    named: bool,
) -> None:
    """Refuse a ``pack_len`` whose one row (padded to ``multiple``) costs more than the fixed
    batch's worst batch; name the widest that fits, and where dense rows stop anyway;
    ``named``: ``fn`` is the ``rows_cost``."""
    width = -(-pack_len // multiple) * multiple
    one_row = float(np.asarray(fn(np.asarray([1]), np.asarray([width])))[0])
    if one_row <= budget:
        return
    widest = widest_row(fn, budget, width)
    low = widest // multiple * multiple  # a multiple: fits
    stop = widest_row(rows, budget, low) // multiple * multiple
    dense = (
        f" (dense rows stop at {stop} tokens, where their attention reaches the fixed batch's, "
        "whatever pack_len)"
        if stop < low
        else ""
    )
    if low >= 1:
        shorter = f"pass pack_len={low} or less{dense}"
    elif widest >= 1:
        shorter = f"no row of pad_to_multiple_of={multiple} tokens fits"
    else:
        shorter = "no row of one token fits"
    under = f"rows_cost={cost_spec(fn) or fn!r}" if named else cost_spec(fn) or "the cost"
    raise InputError(
        f"like_fixed: one row of pack_len={pack_len} tokens costs {one_row:g} under "
        f"{under}, over the fixed batch's worst batch cost({batch}, {longest}) = {budget:g}: "
        f"{shorter}, or an explicit max_cost= to allow more memory"
    )


def _check_alone(rows: Any, budget: float, longest: int, multiple: int) -> None:
    """Refuse a ``rows_cost`` under which the longest sample, alone in a row (as a sample
    longer than ``pack_len`` runs), costs more than the budget it runs under padded."""
    width = -(-longest // multiple) * multiple
    alone = float(np.asarray(rows(np.asarray([1]), np.asarray([width])))[0])
    if alone > budget:
        raise InputError(
            f"like_fixed: the longest sample, {longest} tokens, alone in a row costs {alone:g} "
            f"under rows_cost={cost_spec(rows.cost) or rows.cost!r}, over the budget "
            f"{budget:g} it fits padded: a packed row of it would need more memory than the "
            "fixed batch's worst; check rows_cost, or give an explicit max_cost="
        )


def fill_device(
    lengths: Any,
    time_model: Any,
    *,
    max_cost: float,
    cost: Any,
    fraction: float = 0.9,
    batch_size: int | None = None,
    num_replicas: int = 1,
    update_unit: str = "samples",
    loss_tokens: Any = None,
    **fields: Any,
) -> PlanOptions:
    """Micro-batches at the knee of the step time, within a memory target.

    Tokens per second reach ``fraction`` of their best once the part of the step time that
    grows with the batch is ``c · fraction / (1 - fraction)``: past that knee a larger batch buys
    little speed and costs updates. Each micro-batch is the largest below the knee (at least one
    sample) that also fits ``max_cost`` under ``cost``; a step time that does not grow with the
    batch has no knee, and the memory target alone decides. With ``batch_size``, micro-batches
    are grouped into updates of at least that many samples per rank, lengths mixed; a
    micro-batch larger than that is an update alone. Larger micro-batches mean fewer updates an
    epoch: docs/gpu.md shows what that costs in accuracy.

    Lengths may be (source, target) pairs, an ``[N, 2]`` array, with a memory cost of pairs
    and a step time of two lengths (e.g. the :class:`~dynbatch.PairMemoryCost` of
    :func:`~dynbatch.calibrate` with ``max_len=(Ls, Lt)`` and its ``time_model``): each
    micro-batch is then the largest below the knee and within ``max_cost``, both priced at its
    longest source and longest target. Without a step time (None) the memory target alone
    decides; one of one length that grows with the batch is refused by name there.

    Args:
        lengths: the per-sample lengths the plan will be made from (or ``[N, 2]`` pairs).
        time_model: seconds of a step, with coefficients ``c``, ``a``, ``b``
            (e.g. ``MemoryCost.time_model``); for pairs a
            :class:`~dynbatch.plan.pair_steptime.PairStepTimeModel` (e.g.
            ``PairMemoryCost.time_model``) or None (no knee).
        max_cost: the memory target under ``cost`` (e.g. MiB with a ``MemoryCost``).
        cost: the memory cost model (for pairs a cost of two lengths, ``cost(n, Ls, Lt)``,
            or a named one).
        fraction: of the best tokens per second, in (0, 1).
        batch_size: the fixed batch whose update size to keep (per rank), or None
            (every micro-batch is an update).
        num_replicas: data-parallel ranks.
        update_unit: ``"samples"`` or ``"tokens"``; for (source, target) pairs, target
            tokens, the tokens a sequence-to-sequence loss is over (as for :func:`like_fixed`).
        loss_tokens: per sample, the tokens that carry a loss: what updates in
            ``"tokens"`` count (as for :func:`like_fixed`).
        **fields: other options.

    >>> from types import SimpleNamespace
    >>> model = SimpleNamespace(c=0.04, a=1e-6, b=0.0)   # flat to ~16k tokens, as on a GPU
    >>> opts = fill_device([128] * 1000, model, max_cost=1e9, cost="linear", fraction=0.8)
    >>> opts.cost(1, 128) <= 1.0 < opts.cost(1251, 128), opts.update_size
    (True, None)
    """  # NOTE [ filling the device ]
    lens, longest = _lengths(lengths, fields, "fill_device")
    pairs = is_pairs(lens)
    if isinstance(time_model, str):  # as the samplers take it: "c,a,b", or six for pairs
        time_model = check_step_time(time_model)
    # NOTE [ a step time of two lengths ] in dynbatch.plan.pair_steptime; flat: no length read
    refuse_time_model_for(time_model, pairs, "fill_device", flat_ok=True)
    counted = check_pair_loss_tokens(loss_tokens, lens)
    c, growing = _step_growth(time_model, pairs)
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
        raise InputTypeError(f"fraction must be a number in (0, 1), got fraction={fraction!r}")
    if not 0 < fraction < 1:
        raise InputError(
            f"fraction must be a number in (0, 1) (of the best tokens per second), "
            f"got fraction={fraction!r}"
        )
    memory = pair_form(resolve_cost(cost)) if pairs else resolve_cost(cost)
    target = check_positive_number("max_cost", max_cost)
    if not float(np.asarray(charge(memory, 1, np.asarray([longest])))[0]) <= target:
        what = f"lengths {tuple(longest.tolist())}" if pairs else f"length {longest}"
        raise InputError(
            f"max_cost={max_cost!r} does not fit one sample of the longest {what} "
            f"under cost {cost_spec(memory) or memory!r}"
        )
    replicas = check_replicas(num_replicas)
    values: dict[str, Any] = {"order": "bucket", **fields}
    if batch_size is not None:
        batch = check_int("batch_size", batch_size, minimum=1)
        counts = update_tokens(lens) if counted is None else counted  # a pair's: its target's
        values = {**_updates(counts, batch * replicas, update_unit), **values}
    if growing is None:  # a step costs the same at any size: no knee below the memory target
        return PlanOptions(max_cost=target, cost=memory, **values)
    one = float(np.asarray(charge(growing, 1, np.asarray([longest])))[0])  # at least one sample
    knee = max(c * fraction / (1.0 - fraction), one)
    if isinstance(growing, PairStepTimeModel):
        return PlanOptions(max_cost=1.0, cost=KneeWithin(growing, knee, memory, target), **values)
    return PlanOptions(
        max_cost=1.0, cost=WithinBudgets(((growing, knee), (memory, target))), **values
    )


def _step_growth(
    time_model: Any, pairs: bool
) -> tuple[float, MixedCost | PairStepTimeModel | None]:
    """The fixed part ``c`` of the step time and the part that grows with the batch (None: no
    part grows, so no knee) (NOTE [ filling the device ]): for one length ``MixedCost(a, b)``,
    for pairs the :class:`~dynbatch.plan.pair_steptime.PairStepTimeModel` with ``c`` 0.

    For pairs ``time_model`` is a step time of two lengths, None (no knee) or a flat one of one
    length (no length read); one of one length that grows is refused by the caller.
    """
    if isinstance(time_model, PairStepTimeModel):
        growth = dataclasses.replace(time_model, c=0.0, error=0.0)
        return time_model.c, (None if time_model.flat else growth)
    if pairs and time_model is None:
        return 0.0, None
    c, a, b = (_coefficient(time_model, name) for name in ("c", "a", "b"))
    return c, (None if a == b == 0 else MixedCost(a, b))


def refuse_update_size(fields: Mapping[str, Any], batch_size: Any, where: str) -> None:
    """Refuse an ``update_size`` given beside ``batch_size``: it would override the fixed
    batch's update count without a word."""
    if fields.get("update_size") is not None:
        raise InputError(
            f"{where}(batch_size={batch_size!r}) makes the fixed batch's updates, batch_size x "
            "accumulation_steps x num_replicas samples, so it takes no "
            f"update_size={fields['update_size']!r}: give accumulation_steps= for larger "
            "updates, or options=PlanOptions(update_size=..., max_cost=...) without batch_size"
        )


def _micro_cap(batch: int, share: int, fields: dict[str, Any]) -> int:
    """Samples a micro-batch may hold: an update's share, at most ``batch``, and a multiple of
    ``batch_size_multiple`` where one is asked for."""
    cap = min(batch, share)
    multiple = check_int("batch_size_multiple", fields.get("batch_size_multiple", 1), minimum=1)
    if multiple > 1:
        cap = -(-cap // multiple) * multiple
        if cap > batch:
            cap = batch // multiple * multiple
        if cap == 0:
            raise InputError(
                f"batch_size_multiple={multiple} is larger than batch_size={batch}: no "
                "micro-batch of the fixed batch's size can be a multiple of it"
            )
    return cap


def _lengths(lengths: Any, fields: dict[str, Any], where: str) -> tuple[Any, Any]:
    """Checked lengths and the longest padded length (for pairs, the longest source and the
    longest target); refuses unknown option names."""
    refuse_unknown_options(fields, where)
    lens = check_plan_lengths(lengths)
    multiple = check_int(
        "pad_to_multiple_of", fields.get("pad_to_multiple_of", 1), minimum=1, maximum=MAX_LENGTH
    )
    longest = padded_lengths(lens, multiple).max(axis=0)
    return lens, (int(longest) if lens.ndim == 1 else longest)


def _reference(
    fn: Cost, longest: Any, batch_size: Any, max_cost: Any, where: str, samples: int
) -> tuple[int, float]:
    """The fixed batch's size and the micro-batches' budget (NOTE [ the fixed batch's recipe ]);
    ``longest`` is a length, or a pair's (source, target) row. The fixed batch's worst is
    ``min(B, N)`` of the longest: of fewer samples than ``B`` it runs them all, never more."""
    if batch_size is not None:
        batch = check_int("batch_size", batch_size, minimum=1)
        if batch > MAX_BATCH_SIZE:
            raise InputError(
                f"batch_size must be at most {MAX_BATCH_SIZE:,} (int64 sample counts), got "
                f"batch_size={batch_size!r}"
            )
        if max_cost is None:
            worst = max(1, min(batch, samples))
            return batch, float(np.asarray(charge(fn, worst, np.asarray([longest])))[0])
        return batch, check_positive_number("max_cost", max_cost)
    if max_cost is None:
        raise InputError(
            f"{where} needs batch_size (the fixed batch you would have used), or max_cost (a "
            "memory target under cost) to derive it from"
        )
    budget = check_positive_number("max_cost", max_cost)
    cap = PlanOptions(max_cost=budget, cost=fn, max_batch_size=MAX_BATCH_SIZE)
    batch = int(batch_capacity(np.asarray([longest]), cap)[0])  # the planner's own bisection
    if batch == 0:
        what = f"length {longest}" if np.ndim(longest) == 0 else f"lengths {tuple(longest)}"
        raise InputError(
            f"max_cost={max_cost!r} does not fit even one sample of the longest {what} "
            f"under cost {cost_spec(fn) or fn!r}: raise it"
        )
    return batch, budget


def _updates(lens: Any, samples: int, unit: str) -> dict[str, Any]:
    """``update_size`` and ``update_unit`` for updates of ``samples`` samples."""
    check_choice("update_unit", unit, UNITS)
    size = float(samples) if unit == "samples" else samples * float(lens.mean())
    if size <= 0:
        raise InputError(
            "update_unit='tokens' counts loss_tokens, and every sample to train has 0 of them: "
            "no token carries a loss (are all labels the ignore index?)"
        )
    return {"update_size": size, "update_unit": unit}


def _coefficient(model: Any, name: str) -> float:
    value = getattr(model, name, None)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputTypeError(
            f"time_model must have finite number coefficients c, a, b (seconds = c + n*L*(a + "
            f"b*L)), e.g. MemoryCost.time_model; got {name}={value!r} on {model!r}"
        )
    if value < 0:
        raise InputError(f"time_model coefficient {name} must be >= 0, got {name}={value!r}")
    return float(value)
