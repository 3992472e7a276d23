"""The checks of the planning options: each field alone, then the combinations refused by name.

:class:`~dynbatch.PlanOptions` keeps its fields and their help text; what each field may
hold, and which fields cannot go together, is here, as plain functions of the fields'
values (a mapping of field name to value), so this module needs nothing of the class.

>>> rows_within(resolve_cost("linear"), 512, max_cost=4096)
8
"""

from __future__ import annotations

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
)
from .costs import Cost, cost_spec, resolve_cost, rows_cost, takes_pairs
from .pair_steptime import check_step_time

__all__ = [
    "BALANCE",
    "BUCKET_WIDTH_RANGE",
    "ORDERS",
    "OVERSIZE",
    "RANDOM_ORDERS",
    "UNITS",
    "check_combinations",
    "check_fields",
    "packing_pairs_refused",
    "padded_row",
    "rows_within",
]

ORDERS = ("bucket", "shuffle", "ascending", "descending", "none")
#: the orders that change with ``(seed, epoch)``
RANDOM_ORDERS = ("bucket", "shuffle")
OVERSIZE = ("error", "skip", "alone")
BALANCE = ("tokens", "cost")
#: what an update's size counts: samples, or real (unpadded) tokens
UNITS = ("samples", "tokens")
#: bucket_width below this makes millions of buckets; above it, one bucket holds lengths
#: that differ 10-fold, which is a shuffle, not a bucket.
BUCKET_WIDTH_RANGE = (1e-3, 10.0)


def check_fields(values: Mapping[str, Any]) -> dict[str, Any]:
    """Every field checked alone, in the order of the fields; returns the values to store
    (numbers as Python numbers, the cost resolved, the time model a
    :class:`~dynbatch.plan.steptime.StepTimeModel`)."""
    v = dict(values)
    v["max_cost"] = check_positive_number("max_cost", v["max_cost"])
    v["cost"] = resolve_cost(v["cost"])
    check_choice("order", v["order"], ORDERS)
    v["seed"] = check_int("seed", v["seed"])
    v["max_batch_size"] = check_int(
        "max_batch_size", v["max_batch_size"], minimum=1, allow_none=True
    )
    v["batch_size_multiple"] = check_int("batch_size_multiple", v["batch_size_multiple"], minimum=1)
    v["pad_to_multiple_of"] = check_int(
        "pad_to_multiple_of", v["pad_to_multiple_of"], minimum=1, maximum=MAX_LENGTH
    )
    check_choice("oversize", v["oversize"], OVERSIZE)
    v["drop_last"] = check_bool("drop_last", v["drop_last"])
    width = check_positive_number("bucket_width", v["bucket_width"])
    low, high = BUCKET_WIDTH_RANGE
    if not low <= width <= high:
        raise InputError(
            f"bucket_width must be in [{low:g}, {high:g}] (lengths in a bucket differ by "
            f"less than this fraction), got bucket_width={v['bucket_width']!r}"
        )
    v["bucket_width"] = width
    v["equal_epochs"] = check_bool("equal_epochs", v["equal_epochs"])
    _check_balance(v["balance"])
    check_choice("update_unit", v["update_unit"], UNITS)
    if v["update_size"] is not None:
        v["update_size"] = check_positive_number("update_size", v["update_size"])
        if v["update_unit"] == "samples" and not float(v["update_size"]).is_integer():
            raise InputError(  # it was rounded, half to even: 0.5 -> 0 or 1, 2.5 -> 2
                "update_size counts samples (update_unit='samples'): it must be a whole "
                f"number, got update_size={v['update_size']!r}; give "
                f"{_whole_near(v['update_size'])}, or update_unit='tokens'"
            )
    v["group_by_length"] = check_bool("group_by_length", v["group_by_length"])
    v["time_model"] = check_step_time(v["time_model"])  # of one length, or of pairs
    v["fixed_step_size"] = check_int(
        "fixed_step_size", v["fixed_step_size"], minimum=1, allow_none=True
    )
    v["pack_len"] = check_int(
        "pack_len", v["pack_len"], minimum=1, maximum=MAX_LENGTH, allow_none=True
    )
    return v


def _whole_near(size: float) -> str:
    """The whole sample counts either side of ``size``: ``"2 or 3"``, ``"1"`` below 1."""
    low, high = math.floor(size), math.ceil(size)
    return f"{high}" if low < 1 else f"{low} or {high}"


def _check_balance(balance: Any) -> None:
    if isinstance(balance, str):
        check_choice("balance", balance, BALANCE)
    elif not callable(balance):
        raise InputTypeError(
            f"balance must be 'tokens', 'cost' or a callable (n, L) -> float, "
            f"got balance={balance!r}"
        )
    else:
        resolve_cost(balance)  # probes it now, not at the first distributed epoch


def check_combinations(values: Mapping[str, Any]) -> None:
    """Refuse, by name, the fields that cannot go together; ``values`` are checked alone
    (:func:`check_fields`)."""
    v = values
    if v["max_batch_size"] is not None and v["batch_size_multiple"] > v["max_batch_size"]:
        raise InputError(
            f"batch_size_multiple={v['batch_size_multiple']} can never be met with "
            f"max_batch_size={v['max_batch_size']}: make the cap a multiple of it"
        )
    model = v["time_model"]
    if model is not None and (
        v["update_size"] is None or v["update_unit"] != "samples" or v["equal_epochs"]
    ):
        raise InputError(
            "time_model cuts updates of update_size samples (the fixed batch's) at the step "
            f"time: it needs update_size with update_unit='samples' and no equal_epochs, got "
            f"update_size={v['update_size']!r}, update_unit={v['update_unit']!r}, "
            f"equal_epochs={v['equal_epochs']!r}"
        )
    if v["group_by_length"] and model is None:
        raise InputError(
            "group_by_length draws the updates of a time_model's split (a flat step "
            "time, '1,0,0', keeps each update one batch); got group_by_length=True with "
            "time_model=None"
        )
    step = v["fixed_step_size"]
    if step is not None:
        if model is None or v["group_by_length"]:
            raise InputError(
                "fixed_step_size chooses, each epoch, between the padding-free split and a "
                "time_model's split of the fixed batch's updates: it needs a time_model and no "
                f"group_by_length, got fixed_step_size={step!r} with "
                f"time_model={model!r}, group_by_length={v['group_by_length']!r}"
            )
        if step < v["batch_size_multiple"]:
            raise InputError(
                f"fixed_step_size must be at least batch_size_multiple="
                f"{v['batch_size_multiple']} (a fixed batch smaller than the multiple has no "
                f"step of it), got fixed_step_size={step!r}"
            )
    if model is not None and v["order"] not in RANDOM_ORDERS:
        raise InputError(
            "time_model draws the fixed batch's updates at random each epoch, so it needs a "
            f"random order ('bucket' or 'shuffle'), got order={v['order']!r}"
        )
    if v["pack_len"] is not None:
        _check_packing(v)


def _check_packing(v: Mapping[str, Any]) -> None:
    """Refuse, by name, what packing cannot honour (NOTE [ packed updates ])."""
    where = f"pack_len={v['pack_len']}"
    if takes_pairs(v["cost"]):  # NOTE [ planning pairs ] in dynbatch.plan.pairs
        raise packing_pairs_refused(where, f" (cost={v['cost']!r} takes two lengths)")
    if v["update_size"] is None:  # the options do not know the lengths: pairs are named too
        raise InputError(
            f"{where} cuts the packed rows into updates of update_size samples (or loss "
            "tokens): give update_size (like_fixed(..., pack_len=...) sets it), got "
            "update_size=None (packing takes one length per sample: (source, target) pairs "
            "are refused with pack_len)"
        )
    if v["order"] not in RANDOM_ORDERS:
        raise InputError(
            f"{where} packs the epoch in a random order and draws updates at random, so it "
            f"needs a random order ('bucket' or 'shuffle'), got order={v['order']!r}"
        )
    for name in ("equal_epochs", "drop_last", "group_by_length"):
        if v[name]:
            raise InputError(
                f"{where} does not support {name}=True: packing keeps every sample once and "
                "makes the fixed batch's update count, with no batch to drop, none of one "
                f"length; pass {name}=False or pack_len=None"
            )
    if v["batch_size_multiple"] != 1:
        raise InputError(
            f"{where} cuts micro-batches by rows, not samples, so batch_size_multiple has no "
            "meaning there: pass batch_size_multiple=1, got "
            f"batch_size_multiple={v['batch_size_multiple']!r}"
        )
    width = padded_row(v["pack_len"], v["pad_to_multiple_of"])
    rows = rows_cost(v["cost"])  # NOTE [ a cost per layout ] in dynbatch.plan.packs.attention
    if rows_within(rows, width, v["max_cost"], v["max_batch_size"]) < 1:
        one_row = float(np.asarray(rows(np.asarray([1]), np.asarray([width])))[0])
        padded = f", padded to {width} (pad_to_multiple_of={v['pad_to_multiple_of']})," * (
            width != v["pack_len"]
        )
        raise InputError(
            f"{where}: one row{padded} costs {one_row:g} under "
            f"{cost_spec(v['cost']) or 'the cost'}, over max_cost={v['max_cost']:g}; raise "
            "max_cost or lower pack_len"
        )


def packing_pairs_refused(where: str, detail: str) -> InputError:
    """The refusal of ``pack_len`` for (source, target) pairs (NOTE [ planning pairs ] in
    :mod:`dynbatch.plan.pairs`), by ``where``; ``detail`` follows the word pairs (``", got
    pack_len=64"``).

    >>> str(packing_pairs_refused("f", ", got pack_len=8")).split(":")[:2]
    ['f', ' packing is refused for (source, target) pairs, got pack_len=8']
    """
    return InputError(
        f"{where}: packing is refused for (source, target) pairs{detail}: a packed row "
        "holds one sequence, and an encoder–decoder's pairs would need two block masks and the "
        "cross-attention kept within each pair. Pass pack_len=None"
    )


def padded_row(pack_len: int, pad_to_multiple_of: int) -> int:
    """The widest a packed row can be: ``pack_len`` rounded up to ``pad_to_multiple_of`` (a
    packed micro-batch's rows are padded to its fullest row, rounded up so).

    >>> padded_row(500, 64), padded_row(512, 64), padded_row(500, 1)
    (512, 512, 500)
    """
    return -(-pack_len // pad_to_multiple_of) * pad_to_multiple_of


def rows_within(cost: Cost, width: int, max_cost: float, cap: int | None = None) -> int:
    """The largest ``R`` (at most ``cap``) with ``cost(R, width) <= max_cost``; 0 if none.

    A cost grows with ``n``, so a doubling then a bisection finds it.
    """
    length = np.asarray([width], dtype=np.int64)

    def fits(rows: int) -> bool:
        return bool(np.asarray(cost(np.asarray([rows]), length))[0] <= max_cost)

    if not fits(1):
        return 0
    limit = cap if cap is not None else 2**40
    low, high = 1, 2
    while high <= limit and fits(high):
        low, high = high, 2 * high
    high = min(high, limit + 1)  # fits(low); not fits(high) or high past the cap
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low
