"""The one definition of the planning options: validated once, hashed for resume, turned into flags.

:class:`PlanOptions` is what decides a plan besides the lengths and the epoch.
The planner, both samplers, the resume fingerprint, ``dynbatch stats`` and the
examples all take it whole, so a new option is one field here (with its help
text), not an edit in six signatures. Every entry point also accepts the
options as keywords (``max_cost=..., order=...``), but never both at once.

>>> import numpy as np
>>> opts = PlanOptions(max_cost=1048576, seed=np.int64(3))
>>> opts.max_cost, opts.seed, opts.order
(1048576.0, 3, 'bucket')
>>> PlanOptions(max_cost=0)
Traceback (most recent call last):
...
dynbatch.errors.InputError: max_cost must be a positive finite number, got max_cost=0
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._checks import (
    InputError,
    InputTypeError,
    check_bool,
    check_choice,
    check_int,
    check_positive_number,
)
from .costs import Cost, cost_spec, resolve_cost
from .steptime import check_time_model

__all__ = [
    "BALANCE",
    "ORDERS",
    "OVERSIZE",
    "UNDESCRIBED",
    "UNITS",
    "PlanOptions",
    "resolve_options",
]

ORDERS = ("bucket", "shuffle", "ascending", "descending", "none")
OVERSIZE = ("error", "skip", "alone")
BALANCE = ("tokens", "cost")
#: what an update's size counts: samples, or real (unpadded) tokens
UNITS = ("samples", "tokens")
#: what :meth:`PlanOptions.fingerprint` says of a callable it cannot describe
UNDESCRIBED = "<a callable that cannot be described>"
#: bucket_width below this makes millions of buckets; above it, one bucket holds lengths
#: that differ 10-fold, which is a shuffle, not a bucket.
BUCKET_WIDTH_RANGE = (1e-3, 10.0)


def _help(text: str, **extra: Any) -> dict[str, Any]:
    return {"help": text, **extra}


#: a field's annotation -> the type its command-line flag parses (others are strings, such
#: as a cost spec "mixed:1,2"); bool fields are switches
_FLAG_TYPES: dict[str, Any] = {"bool": bool, "int": int, "float": float}


@dataclass(frozen=True)
class PlanOptions:
    """Everything that decides a plan besides the lengths and the epoch.

    Args:
        max_cost: the budget every batch fits: ``cost(n, L) <= max_cost``.
        cost: ``"quadratic"`` (n·L², the study's rule), ``"linear"`` (n·L, a
            token budget), ``"mixed:A,B"``, a cost object such as
            :class:`~dynbatch.MemoryCost` (predicted MiB), or a callable
            ``(n, L) -> float`` nondecreasing in both. Stored resolved.
        order: ``"bucket"``, ``"shuffle"``, ``"ascending"``, ``"descending"``
            or ``"none"`` (see :func:`~dynbatch.plan_batches`).
        seed: the random orders are a pure function of ``(seed, epoch)``.
        max_batch_size: at most this many samples per batch (None: no cap).
        batch_size_multiple: batch sizes are multiples of this wherever the
            budget allows one multiple; at most one batch per epoch (the
            remainder) is not.
        pad_to_multiple_of: ``L`` is the longest length rounded up to this.
        oversize: a sample over budget alone: ``"error"``, ``"skip"`` or ``"alone"``.
        drop_last: drop the one batch per epoch that ended only because samples
            ran out (which samples that is varies with the epoch); on several
            ranks the counts are still evened by splitting, never by dropping.
        bucket_width: lengths in one bucket differ by less than this fraction.
        equal_epochs: the same number of batches in every epoch (extra batches
            come from splitting, never from dropping or repeating). An epoch that
            cannot be split to the count (with ``drop_last``: too few samples
            left) is drawn anew; one that no draw fits, or ``drop_last`` leaving
            no batch, is an :class:`~dynbatch.InputError` (NOTE [ equal epochs ]
            in :mod:`dynbatch.plan.epochs`).
        balance: what a data-parallel step's time grows with, to give the
            ranks of a step equal work: ``"tokens"`` (padded tokens n·L),
            ``"cost"`` (the budget's cost) or a callable ``(n, L) -> float``
            such as a fitted step-time model.
        update_size: samples (or tokens, per ``update_unit``) of one optimizer
            update, summed over ranks. The plan then also groups its
            micro-batches into updates of about this size, lengths mixed
            within each (NOTE [ mixed updates ] in :mod:`dynbatch.plan.windows`),
            which the accumulator and the Trainer follow. None: every
            micro-batch is an update of its own.
        update_unit: what ``update_size`` counts: ``"samples"`` or
            ``"tokens"`` (real, unpadded lengths).
        time_model: a step's seconds, ``c + n·L·(a + b·L)`` (an object with
            ``c``, ``a``, ``b``, or ``"c,a,b"``). With it, updates are the
            fixed batch's own (random draws of ``update_size`` samples) and
            each is cut into micro-batches at the least predicted time within
            the budget (NOTE [ splitting updates at the step time ] in
            :mod:`dynbatch.plan.splits`); needs ``update_size`` in samples and a
            random ``order``.
        fixed_step_size: with ``time_model``, the fixed batch's step (samples
            a rank): each epoch then plans both the padding-free split (these
            options without the time model) and the fixed batch's updates cut
            at the step time (in ``"shuffle"`` order, micro-batches of at most
            this), and keeps the one predicted faster (NOTE [ the faster plan of each epoch ]
            in :mod:`dynbatch.plan.epochs`). None: the time split
            alone, its step ``max_batch_size``. :func:`~dynbatch.like_fixed`
            sets it.
        pack_len: pack several samples into each row of this many tokens, no
            padding (:func:`~dynbatch.plan.packing.plan_packs`): a micro-batch
            is then rows, as many as ``cost(rows, pack_len) <= max_cost``
            allows (and at most ``max_batch_size`` rows), and an update holds
            ``update_size`` samples (or loss tokens) on average (NOTE [ packed epochs ]
            in :mod:`dynbatch.plan.pack_epochs`). Needs
            ``update_size`` and a random ``order``; refuses ``equal_epochs``,
            ``drop_last``, ``group_by_length``, ``batch_size_multiple`` and
            ``pad_to_multiple_of`` other than 1. With ``time_model`` each
            update runs packed, split or whole, the fastest (NOTE [ choosing packing per update ]
            in :mod:`dynbatch.plan.pack_time`).

    :func:`~dynbatch.like_fixed` makes the options that train like a fixed
    batch, faster; :func:`~dynbatch.fill_device` those that fill a device.
    """

    max_cost: float = field(metadata=_help("the budget every batch fits: cost(n, L) <= max_cost"))
    cost: Any = field(
        default="quadratic",
        metadata=_help("quadratic (n*L^2) | linear (n*L) | mixed:A,B (n*(A*L + B*L^2))"),
    )
    order: str = field(default="bucket", metadata=_help("sample order", choices=ORDERS))
    seed: int = field(default=0, metadata=_help("seed of the random orders"))
    max_batch_size: int | None = field(
        default=None, metadata=_help("at most this many samples per batch")
    )
    batch_size_multiple: int = field(
        default=1, metadata=_help("batch sizes are multiples of this where the budget allows")
    )
    pad_to_multiple_of: int = field(
        default=1, metadata=_help("pad each batch's length up to a multiple of this")
    )
    oversize: str = field(
        default="error",
        metadata=_help("a sample over budget even alone", choices=OVERSIZE),
    )
    drop_last: bool = field(
        default=False, metadata=_help("drop the batch that ended because samples ran out")
    )
    bucket_width: float = field(
        default=0.05, metadata=_help("lengths in one bucket differ by less than this fraction")
    )
    equal_epochs: bool = field(
        default=False, metadata=_help("the same number of batches in every epoch")
    )
    balance: Any = field(
        default="tokens",
        metadata=_help("what a step's time grows with, to balance ranks: tokens | cost"),
    )
    update_size: float | None = field(
        default=None,
        metadata=_help("samples (or tokens) per optimizer update over all ranks, lengths mixed"),
    )
    update_unit: str = field(
        default="samples",
        metadata=_help("what --update-size counts", choices=UNITS),
    )
    group_by_length: bool = field(
        default=False,
        metadata=_help("with --time-model: updates of near-equal lengths (Hugging Face's)"),
    )
    time_model: Any = field(
        default=None,
        metadata=_help("a step's seconds c,a,b (c + n*L*(a + b*L)): cut updates at the step time"),
    )
    fixed_step_size: int | None = field(
        default=None,
        metadata=_help(
            "with --time-model: the fixed batch's step (samples a rank); each epoch keeps the "
            "faster of the padding-free split and the time split"
        ),
    )

    pack_len: int | None = field(
        default=None,
        metadata=_help(
            "pack several samples into rows of this many tokens, no padding; a micro-batch is the "
            "most rows with cost(rows, pack_len) <= max_cost"
        ),
    )

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "max_cost", check_positive_number("max_cost", self.max_cost))
        put(self, "cost", resolve_cost(self.cost))
        check_choice("order", self.order, ORDERS)
        put(self, "seed", check_int("seed", self.seed))
        put(
            self,
            "max_batch_size",
            check_int("max_batch_size", self.max_batch_size, minimum=1, allow_none=True),
        )
        put(
            self,
            "batch_size_multiple",
            check_int("batch_size_multiple", self.batch_size_multiple, minimum=1),
        )
        put(
            self,
            "pad_to_multiple_of",
            check_int("pad_to_multiple_of", self.pad_to_multiple_of, minimum=1),
        )
        check_choice("oversize", self.oversize, OVERSIZE)
        put(self, "drop_last", check_bool("drop_last", self.drop_last))
        width = check_positive_number("bucket_width", self.bucket_width)
        low, high = BUCKET_WIDTH_RANGE
        if not low <= width <= high:
            raise InputError(
                f"bucket_width must be in [{low:g}, {high:g}] (lengths in a bucket differ by "
                f"less than this fraction), got bucket_width={self.bucket_width!r}"
            )
        put(self, "bucket_width", width)
        if self.max_batch_size is not None and self.batch_size_multiple > self.max_batch_size:
            raise InputError(
                f"batch_size_multiple={self.batch_size_multiple} can never be met with "
                f"max_batch_size={self.max_batch_size}: make the cap a multiple of it"
            )
        put(self, "equal_epochs", check_bool("equal_epochs", self.equal_epochs))
        if isinstance(self.balance, str):
            check_choice("balance", self.balance, BALANCE)
        elif not callable(self.balance):
            raise InputTypeError(
                f"balance must be 'tokens', 'cost' or a callable (n, L) -> float, "
                f"got balance={self.balance!r}"
            )
        else:
            resolve_cost(self.balance)  # probes it now, not at the first distributed epoch
        if self.update_size is not None:
            put(self, "update_size", check_positive_number("update_size", self.update_size))
        check_choice("update_unit", self.update_unit, UNITS)
        put(self, "time_model", check_time_model(self.time_model))
        if self.time_model is not None and (
            self.update_size is None or self.update_unit != "samples" or self.equal_epochs
        ):
            raise InputError(
                "time_model cuts updates of update_size samples (the fixed batch's) at the step "
                f"time: it needs update_size with update_unit='samples' and no equal_epochs, got "
                f"update_size={self.update_size!r}, update_unit={self.update_unit!r}, "
                f"equal_epochs={self.equal_epochs!r}"
            )
        put(self, "group_by_length", check_bool("group_by_length", self.group_by_length))
        if self.group_by_length and self.time_model is None:
            raise InputError(
                "group_by_length draws the updates of a time_model's split (a flat step "
                "time, '1,0,0', keeps each update one batch); got group_by_length=True with "
                "time_model=None"
            )
        if self.fixed_step_size is not None:
            put(
                self,
                "fixed_step_size",
                check_int("fixed_step_size", self.fixed_step_size, minimum=1),
            )
            if self.time_model is None or self.group_by_length:
                raise InputError(
                    "fixed_step_size chooses, each epoch, between the padding-free split and a "
                    "time_model's split of the fixed batch's updates: it needs a time_model and no "
                    f"group_by_length, got fixed_step_size={self.fixed_step_size!r} with "
                    f"time_model={self.time_model!r}, group_by_length={self.group_by_length!r}"
                )
            if self.fixed_step_size < self.batch_size_multiple:
                raise InputError(
                    f"fixed_step_size must be at least batch_size_multiple="
                    f"{self.batch_size_multiple} (a fixed batch smaller than the multiple has no "
                    f"step of it), got fixed_step_size={self.fixed_step_size!r}"
                )
        if self.time_model is not None and not self.random_order:
            raise InputError(
                "time_model draws the fixed batch's updates at random each epoch, so it needs a "
                f"random order ('bucket' or 'shuffle'), got order={self.order!r}"
            )
        put(self, "pack_len", check_int("pack_len", self.pack_len, minimum=1, allow_none=True))
        if self.pack_len is not None:
            self._check_packing()

    def _check_packing(self) -> None:
        """Refuse, by name, what packing cannot honour (NOTE [ packed epochs ])."""
        where = f"pack_len={self.pack_len}"
        if self.update_size is None:
            raise InputError(
                f"{where} cuts the packed rows into updates of update_size samples (or loss "
                "tokens): give update_size (like_fixed(..., pack_len=...) sets it), got "
                "update_size=None"
            )
        if not self.random_order:
            raise InputError(
                f"{where} packs the epoch in a random order and draws updates at random, so it "
                f"needs a random order ('bucket' or 'shuffle'), got order={self.order!r}"
            )
        refused = {
            "equal_epochs": self.equal_epochs,
            "drop_last": self.drop_last,
            "group_by_length": self.group_by_length,
        }
        for name, value in refused.items():
            if value:
                raise InputError(
                    f"{where} does not support {name}=True: packing keeps every sample once and "
                    "makes the fixed batch's update count, with no batch to drop, none of one "
                    f"length; pass {name}=False or pack_len=None"
                )
        for name in ("batch_size_multiple", "pad_to_multiple_of"):
            if getattr(self, name) != 1:
                raise InputError(
                    f"{where} makes rows of exactly pack_len tokens, so {name} has no meaning "
                    f"there: pass {name}=1 (choose pack_len a multiple instead), got "
                    f"{name}={getattr(self, name)!r}"
                )
        if self.max_rows < 1:
            one_row = float(np.asarray(self.cost(np.asarray([1]), np.asarray([self.pack_len])))[0])
            raise InputError(
                f"{where}: one row costs {one_row:g} under "
                f"{cost_spec(self.cost) or 'the cost'}, over max_cost={self.max_cost:g}; raise "
                "max_cost or lower pack_len"
            )

    @property
    def max_rows(self) -> int:
        """With ``pack_len``, the most rows a micro-batch holds: the largest ``R`` with
        ``cost(R, pack_len) <= max_cost``, at most ``max_batch_size`` (0: not even one).

        >>> PlanOptions(max_cost=4096, cost="linear", pack_len=512, update_size=8).max_rows
        8
        """
        if self.pack_len is None:
            raise InputError("max_rows is the rows of a packed micro-batch: set pack_len")
        return _rows_within(self.cost, self.pack_len, self.max_cost, self.max_batch_size)

    @property
    def random_order(self) -> bool:
        """Whether the order changes with ``(seed, epoch)``."""
        return self.order in ("bucket", "shuffle")

    def balance_fn(self) -> Cost:
        """The compute model that steps are balanced by, as a vectorised ``(n, L)`` function."""
        if self.balance == "tokens":
            return resolve_cost("linear")
        if self.balance == "cost":
            return self.cost  # type: ignore[no-any-return]
        return resolve_cost(self.balance)

    def replace(self, **changes: Any) -> PlanOptions:
        """A copy with some fields changed (and validated again)."""
        return dataclasses.replace(self, **changes)

    def fingerprint(self) -> dict[str, Any]:
        """Every field as JSON-safe values; a callable that cannot be described gives
        :data:`UNDESCRIBED` (the plan itself decides then: NOTE [ resume fingerprint ]).

        >>> PlanOptions(max_cost=10, cost="linear").fingerprint()["cost"]
        'LinearCost()'
        """
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in ("cost", "balance") and not isinstance(value, str):
                value = cost_spec(value) or UNDESCRIBED
            elif f.name == "time_model" and value is not None:
                value = [value.c, value.a, value.b, value.error]
            out[f.name] = value
        return out

    # -- command-line flags ------------------------------------------------------------------
    @classmethod
    def add_arguments(
        cls,
        parser: argparse.ArgumentParser | Any,
        *,
        exclude: Collection[str] = (),
        defaults: Mapping[str, Any] | None = None,
    ) -> None:
        """Add a ``--flag`` per field (``max_cost`` -> ``--max-cost``) with the field's help.

        ``exclude`` leaves fields out; ``defaults`` overrides their defaults.
        Callables (a custom cost or balance) have no flag: pass them in code.
        """
        defaults = dict(defaults or {})
        for f in dataclasses.fields(cls):
            if f.name in exclude:
                continue
            flag = "--" + f.name.replace("_", "-")
            default = defaults.get(f.name, f.default)
            if default is dataclasses.MISSING:
                default = None
            kwargs: dict[str, Any] = {"default": default, "help": f.metadata.get("help", "")}
            if "choices" in f.metadata:
                kwargs["choices"] = f.metadata["choices"]
            kind = _FLAG_TYPES.get(str(f.type).replace(" | None", ""), str)
            if kind is bool:
                parser.add_argument(flag, action="store_true", **kwargs)
            else:
                parser.add_argument(flag, type=kind, **kwargs)

    @classmethod
    def from_args(cls, namespace: argparse.Namespace, **overrides: Any) -> PlanOptions:
        """Options from the flags :meth:`add_arguments` made, then ``overrides``."""
        values = {
            f.name: getattr(namespace, f.name)
            for f in dataclasses.fields(cls)
            if hasattr(namespace, f.name)
        }
        values.update(overrides)
        return cls(**values)


def _rows_within(cost: Cost, pack_len: int, max_cost: float, cap: int | None = None) -> int:
    """The largest ``R`` (at most ``cap``) with ``cost(R, pack_len) <= max_cost``; 0 if none.

    A cost grows with ``n``, so a doubling then a bisection finds it.
    """
    length = np.asarray([pack_len], dtype=np.int64)

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


FIELDS = frozenset(f.name for f in dataclasses.fields(PlanOptions))


def resolve_options(
    options: PlanOptions | None, shortcuts: Mapping[str, Any], where: str
) -> PlanOptions:
    """``options`` or the options given as keywords: exactly one of the two.

    >>> resolve_options(None, {"max_cost": 5, "order": "none"}, "f").order
    'none'
    >>> resolve_options(PlanOptions(max_cost=5), {"order": "none"}, "f")
    Traceback (most recent call last):
    ...
    dynbatch.errors.InputError: f: give options=PlanOptions(...) or the options as keywords ...
    """
    unknown = sorted(set(shortcuts) - FIELDS)
    if unknown:
        raise InputTypeError(
            f"{where} got unknown option(s) {', '.join(unknown)}; "
            f"the options are: {', '.join(sorted(FIELDS))}"
        )
    if options is not None:
        if not isinstance(options, PlanOptions):
            raise InputTypeError(
                f"{where}: options must be a dynbatch.PlanOptions, got options={options!r}"
            )
        if shortcuts:
            given = ", ".join(f"{k}=..." for k in shortcuts)
            raise InputError(
                f"{where}: give options=PlanOptions(...) or the options as keywords ({given}), "
                "not both"
            )
        return options
    if "max_cost" not in shortcuts or shortcuts["max_cost"] is None:
        raise InputError(
            f"{where} needs max_cost (the budget every batch fits), or options=PlanOptions(...)"
        )
    return PlanOptions(**shortcuts)
