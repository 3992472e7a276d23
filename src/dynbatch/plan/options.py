"""The one definition of the planning options: validated once, hashed for resume, turned into flags.

:class:`PlanOptions` is what decides a plan besides the lengths and the epoch.
The planner, both samplers, the resume fingerprint, ``dynbatch stats`` and the
examples all take it whole, so a new option is one field here (with its help
text), not an edit in six signatures. Every entry point also accepts the
options as keywords (``max_cost=..., order=...``), but never both at once.
What each field may hold, and which fields cannot go together, is checked by
:mod:`dynbatch.plan.option_checks`; the class keeps the fields, their help text,
and what the options give (flags, the fingerprint, ``max_rows``).

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

from .._checks import InputError, InputTypeError
from .costs import Cost, fingerprint_spec, resolve_cost, rows_cost
from .option_checks import (
    BALANCE,
    ORDERS,
    OVERSIZE,
    RANDOM_ORDERS,
    UNITS,
    check_combinations,
    check_fields,
    packing_pairs_refused,
    padded_row,
    rows_within,
)
from .pair_steptime import PairStepTimeModel

__all__ = [
    "BALANCE",
    "ORDERS",
    "OVERSIZE",
    "UNDESCRIBED",
    "UNITS",
    "PlanOptions",
    "refuse_unknown_options",
    "resolve_options",
]

#: what :meth:`PlanOptions.fingerprint` says of a callable it cannot describe
UNDESCRIBED = "<a callable that cannot be described>"


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
        pad_to_multiple_of: ``L`` is the longest length rounded up to this;
            with ``pack_len``, a packed micro-batch's rows are padded to its
            fullest row rounded up to this.
        oversize: a sample over budget alone: ``"error"``, ``"skip"`` or ``"alone"``.
        drop_last: drop the one batch per epoch that ended only because samples
            ran out (which samples that is varies with the epoch); on several
            ranks the counts are still evened by splitting, never by dropping.
        bucket_width: lengths in one bucket differ by less than this fraction.
        equal_epochs: the same number of batches in every epoch (extra batches
            come from splitting, never from dropping or repeating). An epoch that
            cannot be split to the count (with ``drop_last``: too few samples
            left) is drawn anew; one that no draw fits, or ``drop_last`` leaving
            no batch, is an :class:`~dynbatch.InputError`. For code that sizes a
            schedule from ``len(sampler)`` (paddlenlp's Trainer does).
        balance: what a data-parallel step's time grows with, to give the
            ranks of a step equal work: ``"tokens"`` (padded tokens n·L),
            ``"cost"`` (the budget's cost) or a callable ``(n, L) -> float``
            such as a fitted step-time model.
        update_size: samples (or tokens, per ``update_unit``) of one optimizer
            update, summed over ranks. The plan then also groups its
            micro-batches into updates of about this size, lengths mixed
            within each (an update of one length is a biased draw, and trains a
            worse model), as many an epoch as the fixed batch of that size makes;
            the accumulator and the Trainer follow them. None: every
            micro-batch is an update of its own.
        update_unit: what ``update_size`` counts: ``"samples"`` or
            ``"tokens"`` (real, unpadded lengths).
        group_by_length: with ``time_model``, updates of near-equal lengths (Hugging Face's
            ``group_by_length``) instead of random draws: faster, but each update is then a
            biased draw of the corpus.
        time_model: a step's seconds, ``c + n·L·(a + b·L)`` (an object with
            ``c``, ``a``, ``b``, or ``"c,a,b"``); for (source, target) pairs a
            :class:`~dynbatch.plan.pair_steptime.PairStepTimeModel` (or
            ``"c,a_s,a_t,b_s,b_t,cross"``), seconds of ``n`` pairs at their longest
            source and longest target. With it, updates are the
            fixed batch's own (random draws of ``update_size`` samples) and
            each is cut into micro-batches at the least predicted time within
            the budget (finely on a CPU, where padding dominates; not at all on a
            GPU below its knee, where a step costs the same at any size); needs
            ``update_size`` in samples and a random ``order``.
        fixed_step_size: with ``time_model``, the fixed batch's step (samples
            a rank): each epoch then plans both the padding-free split (these options without the
            time model) and the fixed batch's updates cut at the step time (in ``"shuffle"`` order,
            micro-batches of at most this), and keeps the one predicted faster (which one is
            depends on the epoch's draw), so no epoch is predicted slower than the fixed batch.
            None: the time split alone, its step ``max_batch_size``. :func:`~dynbatch.like_fixed`
            sets it.
        pack_len: pack several samples into each row of at most this many
            tokens (:func:`~dynbatch.plan.packs.plan_packs`): a micro-batch is then rows, as wide as
            the fullest, as many as ``cost(rows, W) <= max_cost`` allows, ``W`` the widest a row can
            be (``pack_len`` rounded up to ``pad_to_multiple_of``: :attr:`max_rows`), at most
            ``max_batch_size`` rows, and an update holds the fixed batch's ``update_size`` samples
            (packing is a speed option: it changes how an update is computed, never which samples
            it holds nor how many updates an epoch has). Needs ``update_size`` and a random
            ``order``; refuses ``equal_epochs``, ``drop_last``, ``group_by_length`` and
            ``batch_size_multiple`` other than 1. With ``time_model`` each update runs packed, split
            or whole, whichever is predicted fastest on every rank.

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
            "pack several samples into rows of at most this many tokens; a micro-batch is the "
            "most rows with cost(rows, pack_len) <= max_cost (pack_len rounded up to "
            "pad_to_multiple_of)"
        ),
    )

    def __post_init__(self) -> None:
        values = check_fields({f.name: getattr(self, f.name) for f in dataclasses.fields(self)})
        check_combinations(values)
        for name, value in values.items():
            object.__setattr__(self, name, value)

    @property
    def max_rows(self) -> int:
        """With ``pack_len``, the most rows a micro-batch holds: the largest ``R`` with
        ``cost(R, W) <= max_cost``, at most ``max_batch_size`` (0: not even one), where
        ``W``, the widest a row can be, is ``pack_len`` rounded up to ``pad_to_multiple_of``.

        >>> PlanOptions(max_cost=4096, cost="linear", pack_len=512, update_size=8).max_rows
        8
        >>> PlanOptions(max_cost=4096, cost="linear", pack_len=500, update_size=8,
        ...             pad_to_multiple_of=128).max_rows  # rows up to 512 wide
        8
        >>> PlanOptions(max_cost=4000, cost="linear", pack_len=500, update_size=8,
        ...             pad_to_multiple_of=128).max_rows
        7
        """
        if self.pack_len is None:
            raise InputError("max_rows is the rows of a packed micro-batch: set pack_len")
        width = padded_row(self.pack_len, self.pad_to_multiple_of)
        return rows_within(rows_cost(self.cost), width, self.max_cost, self.max_batch_size)

    @property
    def random_order(self) -> bool:
        """Whether the order changes with ``(seed, epoch)``."""
        return self.order in RANDOM_ORDERS

    def balance_fn(self) -> Cost:
        """The compute model that steps are balanced by, as a vectorised ``(n, L)`` function."""
        if self.balance == "tokens":
            return resolve_cost("linear")
        if self.balance == "cost":
            return self.cost  # type: ignore[no-any-return]
        return resolve_cost(self.balance)

    def replace(self, **changes: Any) -> PlanOptions:
        """A copy with some fields changed (and validated again).

        Args:
            **changes: field names and their new values.
        """
        return dataclasses.replace(self, **changes)

    def fingerprint(self) -> dict[str, Any]:
        """Every field as JSON-safe values; a callable that cannot be described gives
        :data:`UNDESCRIBED` (a resumed sampler then compares the plans themselves). Costs that
        price every batch alike give one text: ``PairCost()`` is ``"quadratic"``, the cost
        of pairs it stands for, so a resume takes either spelling.

        >>> PlanOptions(max_cost=10, cost="linear").fingerprint()["cost"]
        'LinearCost()'
        """
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in ("cost", "balance") and not isinstance(value, str):
                value = fingerprint_spec(value) or UNDESCRIBED  # NOTE [ one text for one cost ]
            elif isinstance(value, PairStepTimeModel):
                value = value.fingerprint()
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

        Callables (a custom cost or balance) have no flag: pass them in code.

        Args:
            parser: an ``argparse.ArgumentParser`` (or anything with its ``add_argument``).
            exclude: the fields left out.
            defaults: field name -> the flag's default, instead of the field's.
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
        """Options from the flags :meth:`add_arguments` made, then ``overrides``.

        Args:
            namespace: what ``parser.parse_args()`` returned.
            **overrides: field names and values that replace the flags'.
        """
        values = {
            f.name: getattr(namespace, f.name)
            for f in dataclasses.fields(cls)
            if hasattr(namespace, f.name)
        }
        values.update(overrides)
        return cls(**values)


FIELDS = frozenset(f.name for f in dataclasses.fields(PlanOptions))


def resolve_options(
    options: PlanOptions | None, shortcuts: Mapping[str, Any], where: str, *, pairs: bool = False
) -> PlanOptions:
    """``options`` or the options given as keywords: exactly one of the two.

    With ``pairs`` (the lengths are (source, target) pairs) a ``pack_len`` among the keywords
    is refused for the pairs first, before the options ask for what packing needs.

    >>> resolve_options(None, {"max_cost": 5, "order": "none"}, "f").order
    'none'
    >>> resolve_options(PlanOptions(max_cost=5), {"order": "none"}, "f")
    Traceback (most recent call last):
    ...
    dynbatch.errors.InputError: f: give options=PlanOptions(...) or the options as keywords ...
    """
    refuse_unknown_options(shortcuts, where)
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
    if pairs and shortcuts.get("pack_len") is not None:  # NOTE [ planning pairs ]
        raise packing_pairs_refused(where, f", got pack_len={shortcuts['pack_len']!r}")
    return PlanOptions(**shortcuts)


#: paddle's ``BatchSampler`` keywords that a dynbatch sampler says otherwise: what to write instead
PADDLE_KEYWORDS = {
    "shuffle": (
        "the samples are drawn at random each epoch already, from (seed, epoch): order='bucket' "
        "(the default) or order='shuffle'; leave shuffle out (for shuffle=False, the dataset's "
        "own order, write order='none')"
    ),
}

#: :func:`~dynbatch.like_fixed`'s own keywords, which shape its options and are no option field
RECIPE_KEYWORDS = ("accumulation_steps", "attention", "micro_batches", "rows_cost")


def refuse_unknown_options(
    given: Mapping[str, Any], where: str, also: Collection[str] = ()
) -> None:
    """Refuse, naming ``where`` (the entry point the user called) and each keyword as written,
    a keyword that is no option (nor one of ``also``, the entry point's own); paddle's
    ``shuffle`` says what to write instead.

    >>> refuse_unknown_options({"shuffle": True}, "DynamicBatchSampler")
    Traceback (most recent call last):
    ...
    dynbatch.errors.InputTypeError: DynamicBatchSampler got shuffle=True, which is paddle's ...
    """
    unknown = sorted(set(given) - FIELDS - set(also))
    for name in unknown:
        if name in RECIPE_KEYWORDS:
            raise InputTypeError(
                f"{where} got {name}={given[name]!r}, which is like_fixed's keyword, not an "
                "option field: give it with batch_size= (the fixed batch it shapes), or build "
                f"the options with dynbatch.like_fixed(lengths, batch_size, {name}=...) and pass "
                "options= alone"
            )
        if name in PADDLE_KEYWORDS:
            raise InputTypeError(
                f"{where} got {name}={given[name]!r}, which is paddle's BatchSampler keyword, "
                f"not a dynbatch option: {PADDLE_KEYWORDS[name]}"
            )
    if unknown:
        raise InputTypeError(
            f"{where} got unknown option(s) {', '.join(unknown)}; "
            f"the options are: {', '.join(sorted(FIELDS))}"
        )
