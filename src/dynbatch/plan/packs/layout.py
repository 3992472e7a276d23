"""How one micro-batch runs, packed rows or padded: the planner prices it, the collator
builds it; numpy only.

NOTE [ rows by next-fit ]
    :class:`~dynbatch.PackCollator` sees only a micro-batch's samples, in the
    order the sampler gives them, in whatever process a DataLoader runs it.
    So its rows are defined by that order: as many as next-fit makes (a new
    row when the next sample does not fit the current one,
    :func:`~dynbatch.plan.packs.rows.next_fit_rows`), the fewest rows of
    consecutive samples within ``pack_len``, cut where the fullest of them is
    least (:func:`~dynbatch.plan.packs.rows.row_starts`: the least room at
    which next-fit needs no more rows), so the micro-batch, as wide as its
    fullest row, is as narrow as its order allows (:func:`packed_rows`).
    The planner emits each update's rows fullest first and each row's samples
    longest first (NOTE [ an update's rows ]); next-fit of that order never
    makes more rows than were planned (a row started inside a planned row
    holds the rest of it), but may pull a row's head into the room the row
    before left, and the balanced cut moves samples between neighbouring
    rows. So the planner does not trust its own rows: it prices the rows the
    collator builds, computed here for every micro-batch at once.

NOTE [ a micro-batch's layout ]
    A packed micro-batch of ``R`` rows is as wide as its fullest row, ``W``
    (rounded up to ``pad_to_multiple_of``; a row of one sample longer than
    ``pack_len`` is that sample), not ``pack_len``: a row is as long as it is
    full. It is priced as its :attr:`PackLayout.attention` runs it
    (NOTE [ attention layouts ] in :mod:`dynbatch.plan.packs.attention`):
    ``time_model(R, W)`` for dense attention over the whole row, the samples'
    ``ΣL_i²`` plus tokens for FlashMask and varlen where the step time has
    coefficients; and it fits the memory
    budget with ``cost(R, W) <= max_cost``, which every micro-batch the planner
    deals holds since ``W`` is at most ``pack_len`` rounded up and ``R`` at most
    :attr:`~dynbatch.PlanOptions.max_rows`. *Padded*, one sample a row, width
    the longest sample ``L`` (rounded up), is the fixed batch's layout, priced
    ``time_model(n, L)``.

    With a ``time_model`` a micro-batch runs padded where it fits the budget
    (``cost(n, L) <= max_cost`` within ``max_batch_size``, or one sample),
    unless its packed rows fit and are predicted faster by more than the
    model's error; packed where padded does not fit. The choice is a pure
    function of the micro-batch's lengths, in order, and of these fields
    (:class:`PackLayout`), so the collator, in any process, builds what the
    plan priced. Without a time model every micro-batch runs packed. Both
    layouts give the same fields (``input_ids``, ``labels``, ``position_ids``,
    the masks, ``sample_starts``), so model code does not change.

NOTE [ samples longer than planned ]
    The planner sees only the lengths it is given, and every micro-batch it
    deals fits the budget on them. The collator sees the samples. Where a
    sample holds more tokens than its length said (``lengths=`` counts
    something else, or a stale cache), the rows it builds are wider, or more,
    than planned, and the step may need more memory than ``max_cost`` allows:
    an out-of-memory error many steps later, or a slower step, and nothing to
    say why. So :meth:`PackLayout.rows`, which the collator of
    :meth:`~dynbatch.PackCollator.for_sampler` lays out with, refuses a
    micro-batch over the budget, naming its shape, its cost and that cause. A
    plain ``PackCollator(pack_len)`` knows no budget and builds what it is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from ..._checks import (
    MAX_LENGTH,
    InputError,
    InputTypeError,
    check_int,
    check_lengths,
    check_positive_number,
)
from ..costs import resolve_cost, rows_cost
from ..options import PlanOptions
from ..plans import Indices
from .attention import resolve_attention
from .rows import round_up, row_starts
from .steps import predict, step_time

__all__ = ["Layouts", "PackLayout", "check_offsets", "packed_rows", "packed_shapes"]


class Layouts(NamedTuple):
    """Micro-batches as they run: packed rows or padded, and each step's shape and seconds."""

    #: True where a micro-batch runs as packed rows.
    packed: NDArray[np.bool_]
    #: Rows of the step: packed rows, or samples when padded.
    n: Indices
    #: The step's width: its fullest row packed, its longest sample padded (rounded up).
    width: Indices
    #: Predicted seconds of each micro-batch.
    seconds: NDArray[np.float64]


def packed_shapes(
    lengths: Indices, offsets: Indices, pack_len: int, multiple: int = 1
) -> tuple[Indices, Indices, Indices]:
    """Every micro-batch's next-fit rows (NOTE [ rows by next-fit ]): where each row starts
    (over ``lengths``), each micro-batch's rows, and its width (its fullest row, rounded up
    to ``multiple``).

    >>> starts, rows, width = packed_shapes(np.array([3, 4, 2, 5, 9, 1]), np.array([0, 3, 6]), 8)
    >>> starts.tolist(), rows.tolist(), width.tolist()
    ([0, 1, 3, 4, 5], [2, 3], [6, 9])
    """
    m = offsets.size - 1
    if lengths.size == 0:
        z = np.zeros(m, dtype=np.int64)
        return np.zeros(0, dtype=np.int64), z, z
    starts = np.flatnonzero(row_starts(lengths, offsets, pack_len))
    tokens = np.add.reduceat(lengths, starts)
    micro_of = np.searchsorted(offsets, starts, side="right") - 1
    rows = np.bincount(micro_of, minlength=m).astype(np.int64)
    first = np.r_[0, np.cumsum(rows)[:-1]]
    width = np.zeros(m, dtype=np.int64)
    has = rows > 0
    width[has] = np.maximum.reduceat(tokens, first[has])
    return starts.astype(np.int64), rows, round_up(width, multiple)


def packed_rows(lengths: Indices, pack_len: int, multiple: int = 1) -> tuple[Indices, int]:
    """One micro-batch's next-fit row offsets and width: its fullest row, rounded up.

    >>> packed_rows(np.array([3, 4, 2, 5]), 8)
    (array([0, 2, 4]), 7)
    """
    lens = np.asarray(lengths, dtype=np.int64)
    starts = np.flatnonzero(row_starts(lens, np.array([0, lens.size]), pack_len))
    fullest = int(np.add.reduceat(lens, starts).max())
    return np.r_[starts, lens.size].astype(np.int64), int(round_up(fullest, multiple))


@dataclass(frozen=True)
class PackLayout:
    """How a micro-batch runs: packed rows or padded (NOTE [ a micro-batch's layout ]).

    A pure function of the micro-batch's lengths, in order, and these fields:
    the planner prices with it, :class:`~dynbatch.PackCollator` builds with
    it, in the main process or a DataLoader worker alike. Without a
    ``time_model`` every micro-batch is packed.

    >>> from dynbatch.plan.steptime import StepTimeModel
    >>> layout = PackLayout(8, max_cost=32, cost="linear", time_model=StepTimeModel(1, 0.1, 0))
    >>> layout.rows([2, 2, 2])  # padded: 3 x 2 tokens beat packed rows
    (array([0, 1, 2, 3]), 2)
    >>> layout.rows([7, 1, 2])  # packed: 2 rows of 7 beat 3 x 7
    (array([0, 1, 3]), 7)
    """

    pack_len: int
    max_cost: float
    cost: Any = "quadratic"
    max_batch_size: int | None = None
    #: A step's seconds ``(n, L) -> s``: a StepTimeModel, a StepTimeTable or a callable.
    time_model: Any = None
    #: A micro-batch's width is rounded up to this.
    pad_to_multiple_of: int = 1
    #: How packed rows' attention runs (NOTE [ attention layouts ] in
    #: :mod:`dynbatch.plan.packs.attention`): an :class:`~dynbatch.plan.packs.Attention` or
    #: its name, ``"dense"`` (the default), ``"flashmask"`` or ``"varlen"``.
    attention: Any = "dense"

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "attention", resolve_attention(self.attention))
        put(self, "pack_len", check_int("pack_len", self.pack_len, minimum=1, maximum=MAX_LENGTH))
        put(self, "max_cost", check_positive_number("max_cost", self.max_cost))  # as PlanOptions
        put(self, "cost", resolve_cost(self.cost))
        put(
            self,
            "max_batch_size",
            check_int("max_batch_size", self.max_batch_size, minimum=1, allow_none=True),
        )
        put(
            self,
            "pad_to_multiple_of",
            check_int("pad_to_multiple_of", self.pad_to_multiple_of, minimum=1, maximum=MAX_LENGTH),
        )
        if self.time_model is not None:
            put(self, "time_model", step_time(self.time_model))

    @classmethod
    def from_options(
        cls, options: PlanOptions, time_model: Any = None, attention: Any = None
    ) -> PackLayout:
        """The layout of ``options``' micro-batches (``time_model`` in place of theirs), its
        packed rows' attention ``attention`` (default: the options' cost's, as
        :func:`~dynbatch.like_fixed` chose it, else ``"dense"``)."""
        if not isinstance(options, PlanOptions) or options.pack_len is None:
            raise InputError(
                "a packed micro-batch's layout needs PlanOptions with pack_len, got "
                f"options={options!r}"
            )
        model = options.time_model if time_model is None else time_model
        return cls(
            options.pack_len,
            options.max_cost,
            options.cost,
            options.max_batch_size,
            model,
            options.pad_to_multiple_of,
            resolve_attention(
                getattr(options.cost, "attention", None) if attention is None else attention
            ),
        )

    @property
    def error(self) -> float:
        """The time model's relative error: the margin packing must clear (0 for a table)."""
        return float(getattr(self.time_model, "error", 0.0) or 0.0)

    def rows(self, lengths: Any) -> tuple[Indices, int]:
        """One micro-batch's row offsets (over its samples, in order) and row width.

        Packed: next-fit rows of at most ``pack_len`` (NOTE [ rows by next-fit ]), as wide
        as the fullest; padded: a sample a row, as wide as the longest (both rounded up).
        A micro-batch over the budget either way is an :class:`~dynbatch.InputError`: the
        plan fits it, so its samples are longer than the lengths it was planned on
        (NOTE [ samples longer than planned ]).
        """
        if np.size(lengths) == 0 and not isinstance(lengths, (str, bytes)) and lengths is not None:
            raise InputError("a micro-batch's layout needs at least one sample, got none")
        lens = check_lengths(lengths)
        offsets = np.array([0, lens.size], dtype=np.int64)
        if self.time_model is not None and not self.choose(lens, offsets).packed[0]:
            return np.arange(lens.size + 1, dtype=np.int64), int(
                round_up(int(lens.max()), self.pad_to_multiple_of)
            )
        starts, width = packed_rows(lens, self.pack_len, self.pad_to_multiple_of)
        rows = np.array([starts.size - 1], dtype=np.int64)
        if not self.fits(rows, np.array([width], dtype=np.int64))[0]:
            raise self._over_budget(lens.size, None, (int(rows[0]), width))
        return starts, width

    def shapes(self, lengths: Any, offsets: Any) -> tuple[Indices, Indices]:
        """Every micro-batch's step as :meth:`rows` lays it out, at once: its rows (packed)
        or samples (padded) ``n`` and its width ``L``; micro-batch ``m`` is
        ``lengths[offsets[m]:offsets[m+1]]``.

        >>> PackLayout(8, max_cost=64, cost="linear").shapes([7, 1, 2, 3, 9], [0, 3, 5])
        (array([2, 2]), array([7, 9]))
        """
        lens = check_lengths(lengths)
        bounds = check_offsets(offsets, lens.size)
        if self.time_model is not None:
            laid = self.choose(lens, bounds)
            return laid.n, laid.width
        _, rows, width = packed_shapes(lens, bounds, self.pack_len, self.pad_to_multiple_of)
        return rows, width

    def fits(self, n: Indices, length: Indices, packed: bool = True) -> NDArray[np.bool_]:
        """Where a step of ``n`` rows of ``length`` tokens fits the budget (one row always);
        ``packed``: packed rows, else a padded batch (NOTE [ a cost per layout ])."""
        fn = rows_cost(self.cost) if packed else self.cost
        with np.errstate(over="ignore", invalid="ignore"):
            cost = np.asarray(fn(n, length), dtype=np.float64)
        ok = np.broadcast_to(cost <= self.max_cost, n.shape).copy()
        if self.max_batch_size is not None:
            ok &= n <= self.max_batch_size
        out: NDArray[np.bool_] = ok | (n == 1)
        return out

    def choose(self, lengths: Indices, offsets: Indices, *, strict: bool = True) -> Layouts:
        """Every micro-batch's layout: micro-batch ``m`` is ``lengths[offsets[m]:offsets[m+1]]``.
        One that fits neither layout is an :class:`~dynbatch.InputError`, or (``strict=False``,
        a candidate the planner weighs) padded at ``inf`` seconds."""
        if self.time_model is None:
            raise InputError("PackLayout.choose prices micro-batches: it needs a time_model")
        lengths = check_lengths(lengths)
        offsets = check_offsets(offsets, lengths.size)
        m = offsets.size - 1
        if m == 0:
            z = np.zeros(0, dtype=np.int64)
            return Layouts(np.zeros(0, dtype=bool), z, z, np.zeros(0, dtype=np.float64))
        sizes = np.diff(offsets)
        longest = round_up(np.maximum.reduceat(lengths, offsets[:-1]), self.pad_to_multiple_of)
        _, rows, width = packed_shapes(lengths, offsets, self.pack_len, self.pad_to_multiple_of)
        keep = 1.0 - self.error
        pad_ok = self.fits(sizes, longest, packed=False)
        pad_s = predict(self.time_model, sizes, longest)
        pack_ok = self.fits(rows, width)
        tokens = np.add.reduceat(lengths, offsets[:-1])
        squares = np.add.reduceat(lengths.astype(np.float64) ** 2, offsets[:-1])
        pack_s = self.attention.seconds(self.time_model, rows, width, tokens, squares)
        packed = pack_ok & (~pad_ok | (pack_s < pad_s * keep))
        if strict and not (pad_ok | pack_ok).all():
            k = int(np.flatnonzero(~(pad_ok | pack_ok))[0])
            raise self._over_budget(int(sizes[k]), int(longest[k]), (int(rows[k]), int(width[k])))
        seconds = np.where(packed, pack_s, pad_s)
        return Layouts(
            packed,
            np.where(packed, rows, sizes),
            np.where(packed, width, longest),
            np.where(pad_ok | pack_ok, seconds, np.inf),
        )

    def _over_budget(self, n: int, longest: int | None, packed: tuple[int, int]) -> InputError:
        """The error of a micro-batch of ``n`` samples (``longest``: padded too, with a time
        model) whose ``packed`` rows ``(R, W)`` are over the budget
        (NOTE [ samples longer than planned ])."""

        def shape(rows: int, width: int, what: str, fn: Any) -> str:
            cost = float(np.asarray(fn(np.asarray([rows]), np.asarray([width])))[0])
            return f"{rows}{what} x {width} tokens, cost {cost:g}"

        rows, width = packed
        packs = shape(rows, width, " rows", rows_cost(self.cost))
        if longest is None:
            laid = f"packs into {packs}, over the sampler's budget"
        else:
            laid = (
                f"is over the sampler's budget both padded ({shape(n, longest, '', self.cost)}) "
                f"and packed ({packs})"
            )
        cap = "" if self.max_batch_size is None else f", max_batch_size={self.max_batch_size}"
        return InputError(
            f"a micro-batch of {n} samples {laid}: max_cost={self.max_cost:g} under "
            f"cost={self.cost!r}{cap}. The plan fits its budget on the lengths it was given, so "
            "these samples hold more tokens than planned: most likely lengths= understates "
            "them. Give the sampler lengths that count each sample's tokens as the collator "
            "packs them (its input_ids, less its attention_mask's 0s; length_fn= or ref_index= "
            "measure them), and give the collator the sampler's own micro-batches"
        )


def check_offsets(offsets: Any, n: int) -> Indices:
    """``offsets`` as micro-batch bounds over ``n`` samples: 1-D integers from 0 up to ``n``,
    each micro-batch holding at least one sample."""
    arr = np.asarray(offsets) if isinstance(offsets, (list, tuple, np.ndarray)) else None
    valid = f"a 1-D integer array rising from 0 to len(lengths)={n}, such as [0, {n}]"
    if arr is None or arr.ndim != 1 or arr.dtype == np.bool_:
        raise InputTypeError(f"offsets must be {valid}; got offsets={offsets!r:.80}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise InputTypeError(f"offsets must be {valid}; got dtype {arr.dtype}: {offsets!r:.80}")
    if arr.size == 0 or arr[0] != 0 or arr[-1] != n or (arr.size > 1 and (np.diff(arr) <= 0).any()):
        raise InputError(
            f"offsets must be {valid} (every micro-batch non-empty); got offsets={offsets!r:.80}"
        )
    return arr.astype(np.int64, copy=False)
