"""What ``dynbatch stats`` prints: the table of orders, the oversize note, the lower bound,
as text or as one JSON object (the same facts in both)."""

from __future__ import annotations

import json
import textwrap
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..plan.costs import charge, cost_spec, pair_form, resolve_cost
from ..plan.lengths import SIDES
from ..plan.options import PlanOptions
from ..plan.pair_costs import PairCost
from ..plan.stats import PairPlanStats, PlanStats, lower_bound_batches
from .corpora import Corpus

__all__ = [
    "COLUMNS",
    "PAIR_COLUMNS",
    "columns",
    "cost_text",
    "format_table",
    "lower_bound",
    "oversize_line",
    "print_json",
    "print_text",
]

COLUMNS = [
    ("batches", "batches", "{:d}"),
    ("updates", "updates", "{:d}"),
    ("padding_efficiency", "pad eff", "{:.3f}"),
    ("batch_size_min", "bs min", "{:d}"),
    ("batch_size_median", "bs med", "{:g}"),
    ("batch_size_max", "bs max", "{:d}"),
    ("cost_max", "cost max", "{:.4g}"),
    ("cost_mean", "cost mean", "{:.4g}"),
    ("cost_cv", "cost cv", "{:.3f}"),
    ("utilization", "util", "{:.3f}"),
]
#: each side's padding of (source, target) pairs, after ``pad eff`` (NOTE [ stats of pairs ])
PAIR_COLUMNS = [
    ("source_padding_efficiency", "src eff", "{:.3f}"),
    ("target_padding_efficiency", "tgt eff", "{:.3f}"),
]


def columns(rows: dict[str, PlanStats]) -> list[tuple[str, str, str]]:
    """The table's columns: :data:`COLUMNS`, with each side's padding for pairs."""
    if not any(isinstance(row, PairPlanStats) for row in rows.values()):
        return COLUMNS
    at = [key for key, _, _ in COLUMNS].index("padding_efficiency") + 1
    return [*COLUMNS[:at], *PAIR_COLUMNS, *COLUMNS[at:]]


def format_table(rows: dict[str, PlanStats]) -> str:
    """The per-order statistics as an aligned text table, one row per plan; with a step time,
    each plan's predicted epoch seconds and its speed against the fixed batch's.

    NOTE [ vs fixed at equal updates ]
        ``vs fixed`` is the fixed row's epoch seconds over the row's. An epoch is the
        same samples in every row, but not the same training: the fixed batch's updates
        are what its learning rate, warm-up and epochs were tuned for. A row that makes
        them (``like fixed``, ``packed``, any row with the fixed row's update count) runs
        the same training faster or slower, so its ratio is a plain speed-up. A row that
        makes other updates (``bucket``: fewer, larger ones under a large budget) is
        another training; a ratio per update would only trade one misreading for another
        (its updates hold other samples), so its epoch ratio is kept and marked ``*``, and
        a legend under the table names its update count and says what the ratio compares.

    >>> from dataclasses import replace
    >>> row = PlanStats(4, 8, 40, 50, 0.8, 2, 2.0, 2, 8.0, 8.0, 8.0, 0.0, 0.5)
    >>> text = format_table({"fixed": replace(row, updates=4, seconds=4.0),
    ...                      "bucket": replace(row, updates=2, seconds=1.0)})
    >>> [line.split()[-1] for line in text.splitlines()[1:3]]
    ['1.00x', '4.00x*']
    >>> print(text.split("\\n", 3)[3])
    * updates an epoch other than fixed's 4 (bucket 2): the ratio compares epoch times only:
      the same samples in fewer, larger updates or more, smaller ones, another training, not
      the same training run faster (fixed's learning rate and schedule were tuned for its own
      updates). Unmarked rows make fixed's 4 updates: the same training, faster above 1.00x.
    """
    shown = columns(rows)
    head = ["order", *(title for _, title, _ in shown)]
    body = [
        [name, *(fmt.format(getattr(row, key)) for key, _, fmt in shown)]
        for name, row in rows.items()
    ]
    other: list[str] = []  # rows at other updates than the fixed batch's
    if any(row.seconds is not None for row in rows.values()):
        base = rows.get("fixed")
        fixed = base.seconds if base is not None else None
        head += ["epoch s", "vs fixed"]
        for line, (name, row) in zip(body, rows.items(), strict=True):
            s = row.seconds or 0.0
            ratio = f"{fixed / s:.2f}x" if fixed and s else "-"
            if ratio != "-" and base is not None and row.updates != base.updates:
                ratio += "*"
                other.append(f"{name} {row.updates}")
            line += [f"{s:.4g}", ratio]
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    lines = [
        "  ".join(
            c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in [head, *body]
    ]
    if other:
        count = rows["fixed"].updates
        legend = (
            f"* updates an epoch other than fixed's {count} ({', '.join(other)}): the ratio "
            "compares epoch times only: the same samples in fewer, larger updates or more, "
            "smaller ones, another training, not the same training run faster (fixed's learning "
            "rate and schedule were tuned for its own updates). Unmarked rows make fixed's "
            f"{count} updates: the same training, faster above 1.00x."
        )
        lines += textwrap.wrap(legend, width=90, subsequent_indent="  ", break_on_hyphens=False)
    return "\n".join(lines)


def cost_text(cost: Any, pairs: bool = False) -> str:
    """The cost as given (``quadratic``), or a loaded cost file's formula; for pairs, with the
    two-length form it prices a batch by.

    >>> cost_text("linear"), cost_text("mixed:1,2", pairs=True)
    ('linear', 'mixed:1,2 (for pairs: n·(Ls + Lt + 2·(Ls² + Lt²) + 2·Ls·Lt))')
    """
    text = cost if isinstance(cost, str) else cost_spec(cost) or repr(cost)
    form = pair_form(resolve_cost(cost)) if pairs else None
    if isinstance(form, PairCost):
        terms = [
            (form.a, "(Ls + Lt)"),
            (form.b, "(Ls² + Lt²)"),
            (form.cross, "Ls·Lt"),
        ]
        shown = " + ".join(t.strip("()") if w == 1 else f"{w:g}·{t}" for w, t in terms if w)
        text += f" (for pairs: n·({shown}))"
    return text


def oversize_line(corpus: Corpus, over: NDArray[Any], options: PlanOptions) -> str:
    """What the sampler does with the samples over budget alone (NOTE [ stats agrees ... ])."""
    first = int(over[0])
    pad = options.pad_to_multiple_of
    padded = -(-corpus.lengths[first : first + 1] // pad) * pad
    alone = float(np.asarray(charge(options.cost, 1, padded))[0])
    length: Any = int(corpus.lengths[first]) if not corpus.pairs else None
    what = f"length {length}"
    if corpus.pairs:  # NOTE [ stats of pairs ]
        what = f"(source, target) lengths {tuple(corpus.lengths[first].tolist())}"
    head = (
        f"{over.size} sample(s) are over --max-cost={options.max_cost:g} even alone; the first "
        f"is {corpus.where(first)} ({what}, costs {alone:g} alone)"
    )
    if options.oversize == "error":
        return (
            f"{head}. The sampler refuses them (--oversize error): raise --max-cost, "
            "--truncate them, or pass --oversize skip or --oversize alone"
        )
    if options.oversize == "skip":
        return f"{head}. --oversize skip: the sampler leaves them out, and so does every row"
    return f"{head}. --oversize alone: the sampler gives each a batch of its own, over budget"


def lower_bound(lengths: NDArray[np.int64], over: NDArray[Any], options: PlanOptions) -> int:
    """No plan has fewer batches (NOTE [ the fewest batches ] in :mod:`dynbatch.plan.stats`): the
    samples that fit, packed longest first, plus one batch per sample alone; of (source, target)
    pairs the larger side's (NOTE [ the fewest batches of pairs ] in :mod:`dynbatch.plan.bounds`).
    """
    fits = np.delete(lengths, over, axis=0)  # pairs: whole rows
    bound = (
        lower_bound_batches(
            fits,
            options.max_cost,
            cost=options.cost,
            pad_to_multiple_of=options.pad_to_multiple_of,
            max_batch_size=options.max_batch_size,
        )
        if fits.size
        else 0
    )
    return bound + (int(over.size) if options.oversize == "alone" else 0)


def print_json(
    lengths: NDArray[np.int64],
    options: PlanOptions,
    cost: Any,
    over: NDArray[Any],
    rows: dict[str, PlanStats],
    bound: int | None,
) -> None:
    """One JSON object on stdout: the corpus, the budget, and a row per plan; for (source,
    target) pairs (``"pairs": true``) each side's lengths and, per row, each side's padding."""
    pairs = lengths.ndim == 2
    corpus: dict[str, Any] = {"samples": len(lengths), "pairs": pairs}
    for name, side in (
        [("length", lengths)]
        if not pairs
        else [(f"{s}_length", lengths[:, k]) for k, s in enumerate(SIDES)]
    ):
        corpus.update(
            {
                f"{name}_min": int(side.min()),
                f"{name}_median": float(np.median(side)),
                f"{name}_max": int(side.max()),
            }
        )
    print(
        json.dumps(
            {
                **corpus,
                "max_cost": options.max_cost,
                "cost": cost_text(cost, pairs),
                "oversize": int(over.size),
                "oversize_policy": options.oversize,
                "lower_bound_batches": bound,
                "rows": [
                    {
                        "name": name,
                        **{k: getattr(r, k) for k, _, _ in columns(rows)},
                        "seconds": r.seconds,
                    }
                    for name, r in rows.items()
                ],
            }
        )
    )


def print_text(
    lengths: NDArray[np.int64],
    options: PlanOptions,
    cost: Any,
    over: NDArray[Any],
    rows: dict[str, PlanStats],
    bound: int | None,
    note: str | None,
    budget: str | None = None,
) -> None:
    """The corpus in a line, the oversize note, the table and the lower bound (of pairs the
    larger side's: NOTE [ stats of pairs ] in :mod:`dynbatch.cli`); ``budget`` says where
    ``max_cost`` came from, when not from ``--max-cost``."""
    given = f"max_cost={options.max_cost:g}" + ("" if budget is None else f" ({budget})")
    if lengths.ndim == 2:
        sides = ", ".join(
            f"{side}s {lengths[:, k].min()}..{lengths[:, k].max()} "
            f"(median {np.median(lengths[:, k]):g})"
            for k, side in enumerate(SIDES)
        )
        print(f"{len(lengths)} (source, target) pairs, {sides}")
        print(f"{given}, cost={cost_text(cost, pairs=True)}")
    else:
        print(
            f"{lengths.size} samples, lengths {lengths.min()}..{lengths.max()} "
            f"(median {np.median(lengths):g}); {given}, "
            f"cost={cost_text(cost)}"
        )
    if note is not None:
        print(note)
    print(format_table(rows))
    if bound is None:
        return
    alone = " + one per sample over budget" if over.size and options.oversize == "alone" else ""
    how = "longest first, each batch filled to the budget"
    if lengths.ndim == 2:  # NOTE [ the fewest batches of pairs ] in dynbatch.plan.bounds
        how = "the larger side's, each longest first, filled to the budget"
    if "packed" in rows:  # packed batches are not bound by it: their max_batch_size caps rows
        print(f"lower bound on padded batches (no padded plan has fewer: {how}{alone}): {bound}")
        return
    print(f"lower bound on batches (no plan has fewer: {how}{alone}): {bound}")
