"""How a packed row's attention runs, and what it costs as it runs: numpy only.

NOTE [ attention layouts ]
    A packed micro-batch of ``R`` rows, as wide as its fullest row ``W``, holds
    samples of ``L_i`` tokens. What its attention costs depends on the kernel
    that runs it, so the layout is one object, chosen once
    (:class:`Attention`): the collator emits its fields, the planner prices
    it.

    * ``"dense"``: a bool ``[R, W, W]`` block mask, eager attention over the
      whole row (what paddlenlp's decoders and BERT run with a mask, on any
      device; PaddleFormers' ``"eager"`` builds the same mask from FlashMask's
      indices). The mask, its additive copy and the scores grow with
      ``R·W²``, whatever the samples: it runs as a padded batch ``(R, W)``
      and is priced as one, ``cost(R, W)`` and ``time_model(R, W)``. It is
      the default: it is what runs where nothing says otherwise.
    * ``"flashmask"``: rows ``[R, W]`` and FlashMask's
      ``attn_mask_startend_row_indices`` (``[R, 1, W, 1]`` int32, the mask's
      column form), which skips the masked blocks: its work is the samples'
      own, ``c + a·R·W + b·ΣL_i²`` (tokens, padding in its rows included,
      plus each sample's attention). A GPU's kernel (fp16/bf16).
    * ``"varlen"``: one flat row of the ``ΣL_i`` tokens, no row padding at
      all, with ``cu_seqlens`` (int32 ``[S + 1]``, each sample's start and the
      end) and ``max_seqlen``, what paddle's ``flash_attn_unpadded`` takes:
      ``c + a·ΣL_i + b·ΣL_i²``. A GPU's kernel.

    A step time with coefficients ``c``, ``a``, ``b`` (a
    :class:`~dynbatch.StepTimeModel`, ``MemoryCost.time_model``) is priced so
    for each layout; any other (a :class:`~dynbatch.StepTimeTable`, a
    callable) is read at ``(R, W)``, the dense price, an upper bound on the
    block-skipping kernels'.

NOTE [ the default budget of packed rows ]
    :func:`~dynbatch.like_fixed`'s default budget is the fixed batch's worst,
    ``cost(B, L_max)``, under the linear cost (tokens). A dense row of ``W``
    tokens holds attention of ``W²``: the linear cost priced a row of 4,096
    tokens at 4,096, and it peaked at 7.66× the fixed batch of 8 × 512 on a tiny
    Qwen2 (the allocator's peak). The fixed batch's memory is ``c + a·B·L_max
    + b·B·L_max²`` for some ``a, b >= 0`` that the planner does not know, so a
    micro-batch ``(R, W)`` is within it for every ``a, b`` exactly when it is
    within both parts: ``R·W <= B·L_max`` and ``R·W² <= B·L_max²``. For the
    linear cost that is ``cost(R, W) · max(1, W / L_max) <= cost(B, L_max)``
    (:class:`DenseRows`), the cost a dense layout plans packed rows with by
    default; a padded micro-batch, never wider than ``L_max``, is priced as
    before. A row of ``pack_len`` that this prices over the budget stops short:
    the rows are cut at the widest that fits, ``L_max·√B`` for the linear cost
    (:func:`widest_row`). FlashMask and varlen need no such guard: their
    memory grows with the tokens (``<= B·L_max`` by the linear cost) and
    ``ΣL_i² <= L_max·ΣL_i <= B·L_max²``, since no sample is longer than
    ``L_max``. A cost with a term in ``L²`` (``"quadratic"``, a
    :class:`~dynbatch.MemoryCost` calibrated on dense steps) prices a dense row's
    attention already, so :class:`DenseRows` widens only a cost without one.

NOTE [ a cost per layout ]
    A packed micro-batch and a padded one of the same shape ``(n, L)`` need
    not cost the same: the model takes a packed row's positions and its mask
    (``[R, W, W]`` for dense rows) where a padded batch has neither. A cost
    calibrated on padded steps then prices packed rows short of what they
    need, and one calibrated on packed rows prices a padded micro-batch over
    it: the fixed batch's own update, ``B`` samples of the longest, no longer
    fits the fixed batch's worst, and with a step time no update would run
    whole. So a :class:`DenseRows` may carry both: ``cost`` for what runs
    padded and ``rows_cost`` for what runs packed, each layout priced as it
    runs (:func:`~dynbatch.plan.costs.rows_cost` gives a packed row's price), under the one budget,
    the fixed batch's worst as it runs, padded (``like_fixed(...,
    rows_cost=...)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..._checks import InputError, InputTypeError, check_int
from ..costs import QuadraticCost, cost_spec, resolve_cost
from ..plans import Indices
from .steps import predict

__all__ = [
    "ATTENTIONS",
    "Attention",
    "DenseRows",
    "padding_free",
    "resolve_attention",
    "widest_row",
]

#: The layouts a packed micro-batch runs in (NOTE [ attention layouts ]).
ATTENTIONS = ("dense", "flashmask", "varlen")


@dataclass(frozen=True)
class Attention:
    """How a packed micro-batch's attention runs (NOTE [ attention layouts ]).

    >>> Attention("varlen").fields
    ('cu_seqlens', 'max_seqlen')
    >>> from dynbatch.plan.steptime import StepTimeModel
    >>> step = StepTimeModel(c=1.0, a=0.5, b=0.25)
    >>> rows, width = np.array([1]), np.array([8])
    >>> tokens, squares = np.array([6]), np.array([4 + 16])  # samples of 2 and 4 tokens
    >>> [float(Attention(a).seconds(step, rows, width, tokens, squares)[0]) for a in ATTENTIONS]
    [21.0, 10.0, 9.0]
    """

    #: ``"dense"``, ``"flashmask"`` or ``"varlen"``.
    name: str = "dense"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise InputTypeError(
                f"attention must be one of {', '.join(map(repr, ATTENTIONS))}, got "
                f"attention={self.name!r}"
            )
        if self.name not in ATTENTIONS:
            raise InputError(
                f"attention must be one of {', '.join(map(repr, ATTENTIONS))} (a dense block "
                "mask, FlashMask's indices, or one flat row with cu_seqlens), got "
                f"attention={self.name!r}"
            )

    def __repr__(self) -> str:
        return f"Attention({self.name!r})"

    @property
    def dense(self) -> bool:
        """Whether a row's attention is its whole width squared."""
        return self.name == "dense"

    @property
    def fields(self) -> tuple[str, ...]:
        """The mask fields :class:`~dynbatch.PackCollator` emits for this layout."""
        return {
            "dense": ("attention_mask",),
            "flashmask": ("attn_mask_startend_row_indices",),
            "varlen": ("cu_seqlens", "max_seqlen"),
        }[self.name]

    def seconds(
        self, step: Any, rows: Indices, width: Indices, tokens: Indices, squares: Any
    ) -> NDArray[np.float64]:
        """Predicted seconds of packed micro-batches of ``rows`` rows as wide as ``width``,
        holding ``tokens`` real tokens whose samples' squares sum to ``squares``."""
        coefficients = _coefficients(getattr(step, "step", step))
        if self.dense or coefficients is None:
            return predict(step, rows, width)
        c, a, b = coefficients
        base = rows * width if self.name == "flashmask" else tokens
        out: NDArray[np.float64] = (
            c + a * np.asarray(base, np.float64) + b * np.asarray(squares, np.float64)
        )
        return out


def resolve_attention(attention: Any) -> Attention:
    """``attention`` as an :class:`Attention`: one, or its name; None is ``"dense"``.

    >>> resolve_attention("flashmask"), resolve_attention(None)
    (Attention('flashmask'), Attention('dense'))
    """
    if attention is None:
        return Attention()
    if isinstance(attention, Attention):
        return attention
    return Attention(attention)


@dataclass(frozen=True)
class DenseRows:
    """The cost of packed rows as ``attention`` runs them: for ``"dense"``, ``cost(n, L) ·
    max(1, L / longest)``, a row wider than the longest sample priced as its attention grows,
    ``L²``; for ``"flashmask"`` and ``"varlen"``, ``cost(n, L)``, their memory growing with
    the tokens (NOTE [ the default budget of packed rows ]). It carries the layout, so the
    options that plan with it lay out and price their rows as it runs. ``rows_cost``: what a
    packed row costs where that is not what a padded batch of its shape costs (a
    :class:`~dynbatch.MemoryCost` calibrated on packed rows, whose positions and mask a padded
    batch has not); ``cost`` then prices only the padded micro-batches
    (NOTE [ a cost per layout ]).

    >>> rows = DenseRows("linear", 512)
    >>> float(rows(8, 512)), float(rows(2, 1024)), float(rows(1, 4096))
    (4096.0, 4096.0, 32768.0)
    >>> flash, quadratic = DenseRows("linear", 512, "varlen"), DenseRows("quadratic", 512)
    >>> float(flash(1, 4096)), float(quadratic(1, 4096))
    (4096.0, 16777216.0)
    """

    cost: Any
    #: The longest sample: a row no wider is priced by ``cost`` alone.
    longest: int
    #: How the rows' attention runs.
    attention: Any = "dense"
    #: What a packed row costs, where not what a padded batch of its shape does (None: ``cost``).
    rows_cost: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "cost", resolve_cost(self.cost))
        object.__setattr__(self, "longest", check_int("longest", self.longest, minimum=1))
        object.__setattr__(self, "attention", resolve_attention(self.attention))
        if self.rows_cost is not None:
            object.__setattr__(self, "rows_cost", resolve_cost(self.rows_cost))

    @property
    def packed_rows(self) -> DenseRows:
        """The cost of the packed rows: this one, ``rows_cost`` in place of ``cost`` where given.

        >>> both = DenseRows("linear", 512, rows_cost=lambda n, L: 2 * n * L)
        >>> float(both(8, 512)), float(both.packed_rows(8, 512))
        (4096.0, 8192.0)
        """
        if self.rows_cost is None:
            return self
        return DenseRows(self.rows_cost, self.longest, self.attention)

    @property
    def widens(self) -> bool:
        """Whether a dense row wider than ``longest`` costs more than ``cost`` says: where
        ``cost`` has no term in ``L²`` (the linear cost, a callable it cannot read); one that
        has (``"quadratic"``, a ``MemoryCost`` calibrated on dense steps) prices it already."""
        if not self.attention.dense or isinstance(self.cost, QuadraticCost):
            return False
        b = getattr(self.cost, "b", None)
        return not (isinstance(b, (int, float)) and not isinstance(b, bool) and b > 0)

    def __call__(self, n: Any, length: Any) -> Any:
        out = np.asarray(self.cost(n, length), dtype=np.float64)
        if not self.widens:
            return out
        return out * np.maximum(1.0, np.asarray(length, dtype=np.float64) / self.longest)

    def spec(self) -> str:
        """What decides its values (the resume fingerprint)."""
        rows = (
            "" if self.rows_cost is None else f",rows={cost_spec(self.rows_cost) or '<callable>'}"
        )
        return (
            f"{cost_spec(self.cost)},longest={self.longest},attention={self.attention.name}{rows}"
        )


def padding_free(cost: Any) -> bool:
    """Whether packed rows priced by ``cost`` run on a padding-free kernel (FlashMask,
    varlen): its work is its samples' own, so ranks are dealt samples by their work
    (NOTE [ dealing by work on a padding-free kernel ] in :mod:`dynbatch.plan.packs.deal`); a cost
    that carries no layout is the dense default's.

    >>> padding_free(DenseRows("linear", 512, "varlen")), padding_free("linear")
    (True, False)
    """
    attention = getattr(cost, "attention", None)
    return isinstance(attention, Attention) and not attention.dense


def widest_row(cost: Any, budget: float, pack_len: int) -> int:
    """The widest row, at most ``pack_len``, whose one row costs at most ``budget``
    (0: not even one token): ``cost`` grows with ``L``.

    >>> widest_row(DenseRows("linear", 512), 8 * 512, 4096)
    1448
    """

    def fits(width: int) -> bool:
        return float(np.asarray(cost(np.asarray([1]), np.asarray([width])))[0]) <= budget

    if fits(pack_len):
        return pack_len
    low, high = 0, pack_len
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low


def _coefficients(step: Any) -> tuple[float, float, float] | None:
    """A step time's ``c``, ``a``, ``b`` where it has them as numbers, else None."""
    values = [getattr(step, name, None) for name in ("c", "a", "b")]
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return float(values[0]), float(values[1]), float(values[2])  # type: ignore[arg-type]
    return None
