"""Hypothesis strategies for planner inputs: lengths, budgets, orders, costs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st

import dynbatch
from dynbatch.plan.options import OVERSIZE, UNITS
from dynbatch.plan.planning import ORDERS

orders = st.sampled_from(ORDERS)
named_costs = st.sampled_from(["quadratic", "linear", dynbatch.MixedCost(1.0, 0.05)])


@st.composite
def lengths(draw: st.DrawFn, max_size: int = 300, max_len: int = 600) -> np.ndarray:
    """Lengths with the shapes that matter: few distinct values, long tails, all equal."""
    n = draw(st.integers(1, max_size))
    kind = draw(st.sampled_from(["uniform", "tail", "constant", "few"]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    if kind == "uniform":
        out = rng.integers(1, max_len + 1, n)
    elif kind == "tail":
        out = np.minimum(np.ceil(rng.lognormal(3.5, 1.0, n)), max_len).astype(np.int64)
    elif kind == "constant":
        out = np.full(n, draw(st.integers(1, max_len)))
    else:
        out = rng.choice(draw(st.lists(st.integers(1, max_len), min_size=1, max_size=4)), n)
    return np.asarray(out, dtype=np.int64)


def lognormal_pairs(
    n: int, rho: float, seed: int = 0, *, max_len: int = 1024, sigma: float = 0.7
) -> np.ndarray:
    """``n`` (source, target) lengths whose logs are normal with correlation ``rho``: a
    translation corpus's shape (a long source has a long target, loosely), medians ~20 and ~22.
    """
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((n, 2))
    z[:, 1] = rho * z[:, 0] + np.sqrt(1 - rho**2) * z[:, 1]
    pairs = np.ceil(np.exp(np.array([3.0, 3.1]) + sigma * z))
    return np.clip(pairs, 1, max_len).astype(np.int64)


#: A pinyin syllable's letters, 1 to 6 (a, de, shi, zhong, zhuang ...), and how often each is
#: taken: a fixed table standing in for a pinyin dictionary, which the tests do not ship.
SYLLABLE_LETTERS = np.array([0.02, 0.22, 0.35, 0.28, 0.11, 0.02]).cumsum()


def pinyin_letters(text: str) -> int:
    """Letters of ``text`` in pinyin, approximated: each Chinese character a syllable of 1 to 6
    letters, drawn from :data:`SYLLABLE_LETTERS` by a hash of the character (so a character
    always has the same), any other character 1."""
    letters = 0
    for char in text:
        code = ord(char)
        if 0x4E00 <= code <= 0x9FFF:
            u = ((code * 2654435761) & 0xFFFFFFFF) / 2**32
            letters += 1 + int(np.searchsorted(SYLLABLE_LETTERS, u, side="right"))
        else:
            letters += 1
    return letters


@st.composite
def pair_lengths(draw: st.DrawFn, max_size: int = 300, max_len: int = 600) -> np.ndarray:
    """(source, target) lengths with the shapes that matter: correlated sides (0.5 to 0.9),
    few distinct pairs, one side constant, all equal."""
    n = draw(st.integers(1, max_size))
    kind = draw(st.sampled_from(["lognormal", "few", "one side", "constant"]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    if kind == "lognormal":
        return lognormal_pairs(n, draw(st.floats(0.5, 0.9)), seed, max_len=max_len)
    side = st.integers(1, max_len)
    if kind == "few":
        rows = np.array(draw(st.lists(st.tuples(side, side), min_size=1, max_size=4)))
        return np.asarray(rows[rng.integers(0, len(rows), n)], dtype=np.int64)
    if kind == "one side":  # the other side of every pair alike
        one = draw(lengths(max_size, max_len))
        pairs = np.column_stack([one, np.full(one.size, draw(side))])
        return np.asarray(pairs[:, :: draw(st.sampled_from([1, -1]))], dtype=np.int64)
    return np.tile(np.array([draw(side), draw(side)], dtype=np.int64), (n, 1))


@st.composite
def planner_args(draw: st.DrawFn) -> dict[str, object]:
    """Keyword arguments for ``plan_batches`` whose budget fits every sample alone."""
    lens = draw(lengths())
    cost = draw(named_costs)
    fn = dynbatch.resolve_cost(cost)
    pad = draw(st.sampled_from([1, 1, 8]))
    single = float(fn(1, -(-int(lens.max()) // pad) * pad))
    cap = draw(st.none() | st.integers(1, 64))
    multiple = draw(st.sampled_from([1, 1, 2, 8]))
    return {
        "lengths": lens,
        "max_cost": single * draw(st.floats(1.0, 40.0)),
        "cost": cost,
        "order": draw(orders),
        "seed": draw(st.integers(0, 2**31)),
        "epoch": draw(st.integers(0, 50)),
        "max_batch_size": cap if cap is None else max(cap, multiple),
        "batch_size_multiple": multiple,
        "pad_to_multiple_of": pad,
    }


@st.composite
def pack_args(draw: st.DrawFn) -> dict[str, object]:
    """Keyword arguments for ``dynbatch.plan.packs.plan_packs`` (oversize only where allowed)."""
    lens = draw(lengths(max_size=400, max_len=700))
    oversize = draw(st.sampled_from(["error", "skip", "alone"]))
    longest = int(lens.max())
    low = longest if oversize == "error" else max(1, min(longest, int(np.median(lens))))
    pack_len = draw(st.integers(low, max(low, 2 * longest)))
    if oversize == "skip" and (lens <= pack_len).sum() == 0:
        pack_len = longest
    unit = draw(st.sampled_from(["samples", "tokens"]))
    seed = draw(st.integers(0, 2**32 - 1))
    loss = np.random.default_rng(seed).integers(0, lens + 1) if unit == "tokens" else None
    return {
        "lengths": lens,
        "pack_len": pack_len,
        "batch_size": draw(st.integers(1, 64)),
        "loss_tokens": loss,
        "update_unit": unit,
        "max_rows": draw(st.none() | st.integers(1, 8)),
        "pad_to_multiple_of": draw(st.sampled_from([1, 1, 8])),
        "oversize": oversize,
        "seed": draw(st.integers(0, 2**31)),
        "epoch": draw(st.integers(0, 50)),
    }


# -- the option table (tests/test_options_table.py) ------------------------------------------------
@dataclass(frozen=True)
class OptionRow:
    """One public option: its name and the values a random combination draws for it."""

    name: str
    values: st.SearchStrategy[Any]


#: One row per public option; a new option joins the random combinations as one more row.
OPTION_ROWS = (
    OptionRow("order", orders),
    OptionRow("seed", st.integers(0, 2**31)),
    OptionRow("batch_size", st.none() | st.integers(1, 24)),  # like_fixed; None: a budget
    OptionRow("update_size", st.none() | st.integers(1, 64)),  # with a budget only
    OptionRow("update_unit", st.sampled_from(UNITS)),
    OptionRow("batch_size_multiple", st.sampled_from([1, 1, 2, 8])),
    OptionRow("pad_to_multiple_of", st.sampled_from([1, 1, 8])),
    OptionRow("oversize", st.sampled_from(OVERSIZE)),
    OptionRow("drop_last", st.sampled_from([False, False, True])),
    OptionRow("time_model", st.sampled_from([None, None, "flat", "linear", "h100"])),
    OptionRow("group_by_length", st.sampled_from([False, False, False, True])),
    OptionRow("loss_tokens", st.booleans()),
    OptionRow("ranks", st.integers(1, 4)),
    OptionRow("workers", st.sampled_from([0, 1, 2])),
    OptionRow("source", st.sampled_from(["memory", "stream"])),
    OptionRow("budget", st.floats(0.5, 30.0)),  # max_cost over the longest sample's cost
    OptionRow("buffer_size", st.integers(1, 80)),  # streams only
    # rows of this fraction of the longest sample (below 1: oversize samples); None: no packing
    OptionRow("pack_len", st.sampled_from([None] * 5 + [0.6, 1.0, 2.5])),
    # (source, target) lengths instead of one length a sample
    OptionRow("pairs", st.sampled_from([False, False, False, True])),
)


@st.composite
def option_combinations(draw: st.DrawFn, pairs: bool | None = None) -> dict[str, Any]:
    """A combination of every row's option and small lengths to plan with it (``pairs``: of
    (source, target) pairs, or not, instead of as drawn)."""
    combo = draw(st.fixed_dictionaries({row.name: row.values for row in OPTION_ROWS}))
    if pairs is not None:
        combo["pairs"] = pairs
    if draw(st.integers(0, 9), label="as drawn") < 9:  # options that go together, mostly
        combo = compatible(combo, draw(st.integers(1, 64), label="update_size"))
    if combo["pairs"]:  # in memory or a stream whose length_fn returns pairs
        return {"combo": combo, "lengths": draw(pair_lengths(max_size=120, max_len=200))}
    return {"combo": combo, "lengths": draw(lengths(max_size=120, max_len=200))}


def compatible(combo: dict[str, Any], update_size: int) -> dict[str, Any]:
    """``combo`` with the options that refuse each other made to fit (drawn as-is, they are
    refused by name: tests/test_options_table.py checks that once in ten draws): a time model
    or ``group_by_length`` with updates of samples drawn at random, ``group_by_length`` with a
    time model, a budget's time model with an ``update_size``, a multiple within the batch, a
    stream without ``drop_last`` or a sorted order, packing with what it takes (updates, a
    random order, no grouping, ``drop_last`` or ``batch_size_multiple``; ``pad_to_multiple_of``
    goes with it; a time model chooses per update; pairs without packing, their step time of
    two lengths)."""
    combo = dict(combo)
    if combo.get("pairs"):  # what pairs refuse by name (NOTE [ planning pairs ])
        combo.update(pack_len=None)
    if combo.get("pack_len") is not None:
        combo.update(group_by_length=False, drop_last=False, batch_size_multiple=1)
        if combo["order"] not in ("bucket", "shuffle"):
            combo["order"] = "shuffle"
        if combo["batch_size"] is None and combo["update_size"] is None:
            combo["update_size"] = update_size
    if combo["group_by_length"] and combo["time_model"] is None:
        combo["time_model"] = "flat"
    if combo["time_model"] is not None:
        combo["update_unit"] = "samples"
        if combo["order"] not in ("bucket", "shuffle"):
            combo["order"] = "shuffle"
        if combo["batch_size"] is None and combo["update_size"] is None:
            combo["update_size"] = update_size
    if combo["batch_size"] is not None and combo["batch_size_multiple"] > combo["batch_size"]:
        combo["batch_size_multiple"] = 1
    if combo["source"] == "stream":
        combo["drop_last"] = False
        if combo["order"] in ("ascending", "descending"):  # a stream sorts no block
            combo["order"] = "bucket"
    return combo
