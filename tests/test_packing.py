"""The packing plan: rows, updates and micro-batches, and the promises each keeps."""

from __future__ import annotations

import bisect
import heapq
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import lengths, pack_args

import dynbatch
from dynbatch.plan.packing import (
    _CHUNK,
    _MANY_LENGTHS,
    PackPlan,
    _balanced_rows,
    _balanced_runs,
    _best_fit_lookahead,
    _lower_bound,
    _mix_rows,
    _pack_harder,
    _Rooms,
    next_fit_rows,
    plan_packs,
)


def lognormal(n: int, cap: int, seed: int = 0, mean: float = 4.6, sigma: float = 0.8) -> Any:
    rng = np.random.default_rng(seed)
    return np.minimum(np.ceil(rng.lognormal(mean, sigma, n)), cap).astype(np.int64)


def check_promises(plan: PackPlan, args: dict[str, Any]) -> None:
    lens = np.asarray(args["lengths"])
    pack_len, batch_size = args["pack_len"], args["batch_size"]
    over = lens > pack_len
    flat = plan.micro_batches.indices
    # exactly once: every sample kept once, the skipped ones never
    expected_skip = np.flatnonzero(over) if args["oversize"] == "skip" else np.zeros(0)
    assert plan.skipped.tolist() == expected_skip.tolist(), "skipped: the oversize ones"
    kept = np.setdiff1d(np.arange(lens.size), expected_skip)
    assert np.array_equal(np.sort(flat), kept), "exactly once"
    # no row over pack_len but an oversize sample alone
    rows = plan.rows
    for row in rows:
        assert lens[row].sum() <= pack_len or (row.size == 1 and over[row[0]]), "row budget"
    # the collator's rows are the plan's rows: next-fit of each micro-batch in order
    offs = plan.micro_row_offsets
    for m, batch in enumerate(plan):
        planned = plan.row_offsets[offs[m] : offs[m + 1] + 1] - plan.row_offsets[offs[m]]
        assert next_fit_rows(lens[batch], pack_len).tolist() == planned.tolist(), "next-fit"
        if over[batch].any():
            assert batch.size == 1, "an oversize sample is a micro-batch of its own"
    # micro-batches within max_rows
    if args["max_rows"] is not None:
        assert plan.rows_per_micro_batch.max() <= args["max_rows"], "max_rows"
    # updates: the fixed batch's count, fewer only when rows run out; none empty
    target = -(-kept.size // batch_size)
    assert min(target, len(rows)) <= plan.num_updates <= target, "update count"
    assert (np.diff(plan.update_offsets) >= 1).all(), "no empty update"
    assert plan.update_offsets[-1] == len(plan), "updates cover every micro-batch"
    assert sum(u.size for u in plan.updates) == kept.size


@settings(max_examples=150, deadline=None)
@given(pack_args())
def test_every_drawn_plan_keeps_every_promise(args: dict[str, Any]) -> None:
    plan = plan_packs(**args)
    check_promises(plan, args)
    assert plan_packs(**args).micro_batches == plan.micro_batches, "deterministic"
    again = plan_packs(**args)
    assert np.array_equal(again.row_offsets, plan.row_offsets)
    assert np.array_equal(again.update_offsets, plan.update_offsets)


def test_epochs_and_seeds_give_other_plans() -> None:
    lens = lognormal(2000, 512)
    base = plan_packs(lens, 512, batch_size=32, seed=1, epoch=0)
    assert plan_packs(lens, 512, batch_size=32, seed=1, epoch=1).micro_batches != base.micro_batches
    assert plan_packs(lens, 512, batch_size=32, seed=2, epoch=0).micro_batches != base.micro_batches


@pytest.mark.parametrize(
    ("mean", "sigma", "cap"), [(4.6, 0.8, 512), (3.5, 1.0, 512), (5.5, 1.2, 4096), (5.0, 0.3, 512)]
)
def test_rows_are_full_and_updates_as_the_fixed_batch(mean: float, sigma: float, cap: int) -> None:
    """Short, long-tailed and near-uniform corpora: 0.95+ of every row is tokens."""
    lens = lognormal(20_000, cap, seed=3, mean=mean, sigma=sigma)
    plan = plan_packs(lens, cap, batch_size=32, seed=0)
    assert plan.efficiency >= 0.95, plan
    assert plan.num_updates == -(-lens.size // 32)
    sizes = np.array([u.size for u in plan.updates])
    assert abs(sizes.mean() - 32) < 0.01 and sizes.min() >= 1


def test_updates_in_tokens_hold_the_fixed_batchs_loss_tokens() -> None:
    lens = lognormal(5000, 512, seed=4)
    loss = np.random.default_rng(4).integers(0, lens + 1)
    plan = plan_packs(lens, 512, batch_size=16, loss_tokens=loss, update_unit="tokens")
    per_update = np.array([loss[u].sum() for u in plan.updates])
    assert plan.num_updates == -(-lens.size // 16)
    target = loss.sum() / plan.num_updates
    longest_row = max(loss[r].sum() for r in plan.rows)
    assert np.abs(per_update - target).max() <= longest_row, "within one row of the target"


def test_per_update_packing_is_worse_than_a_window() -> None:
    """NOTE [ packing windows ]: an update packed alone leaves its last row part-filled."""
    lens = lognormal(20_000, 512, seed=5)
    window = plan_packs(lens, 512, batch_size=32).efficiency
    small = plan_packs(lens, 512, batch_size=32, window=32).efficiency  # rooms carried over
    rows = sum(
        len(plan_packs(lens[s : s + 32], 512, batch_size=32).rows) for s in range(0, 20_000, 32)
    )
    alone = lens.sum() / (rows * 512)
    assert window > 0.99 and small > 0.99 > 0.95 > alone, (window, small, alone)


def test_oversize_is_refused_by_default_and_named() -> None:
    with pytest.raises(dynbatch.InputError, match=r"pack_len=8 \(lengths\[1\]=9\).*'skip'"):
        plan_packs([3, 9, 2], 8, batch_size=2)
    with pytest.raises(dynbatch.InputError, match="nothing to train on"):
        plan_packs([9, 9], 8, batch_size=2, oversize="skip")


def test_bad_arguments_are_named() -> None:
    with pytest.raises(dynbatch.InputTypeError, match="pack_len must be an integer >= 1"):
        plan_packs([3], "8", batch_size=2)
    with pytest.raises(dynbatch.InputError, match="batch_size must be an integer >= 1"):
        plan_packs([3], 8, batch_size=0)
    with pytest.raises(dynbatch.InputError, match="update_unit must be one of"):
        plan_packs([3], 8, batch_size=2, update_unit="rows")
    with pytest.raises(dynbatch.InputError, match="pass loss_tokens="):
        plan_packs([3], 8, batch_size=2, update_unit="tokens")
    with pytest.raises(dynbatch.InputError, match="oversize must be one of"):
        plan_packs([3], 8, batch_size=2, oversize="split")


def test_next_fit_starts_a_row_when_the_next_sample_does_not_fit() -> None:
    assert next_fit_rows([3, 4, 2, 5, 9, 1], 8).tolist() == [0, 2, 4, 5, 6]
    assert next_fit_rows([], 8).tolist() == [0]
    assert next_fit_rows([8, 8], 8).tolist() == [0, 1, 2]


# -- efficiency against the peers, rows that mix (NOTE [ packing windows ], [ rows that mix ]) ---
def _count_rows(lens: Any, pack_len: int) -> int:
    """Best-fit decreasing over the whole epoch (TRL's), written here apart from dynbatch's."""
    rows = 0
    rooms: list[int] = []
    for length in sorted((int(v) for v in lens), reverse=True):
        i = bisect.bisect_left(rooms, length)
        if i == len(rooms):
            rows += 1
            room = pack_len
        else:
            room = rooms.pop(i)
        if room - length:
            bisect.insort(rooms, room - length)
    return rows


def worst_fit_rows(lens: Any, pack_len: int, buffer: int = 500) -> int:
    """PaddleNLP's greedy_intokens: per buffer in arrival order, the row with the most room."""
    rows = 0
    for start in range(0, len(lens), buffer):
        heap: list[int] = []
        for length in (int(v) for v in lens[start : start + buffer]):
            if heap and -heap[0] >= length:
                heapq.heapreplace(heap, heap[0] + length)
            else:
                heapq.heappush(heap, length - pack_len)
        rows += len(heap)
    return rows


def short_only(plan: PackPlan, lens: Any) -> float:
    """The share of samples in rows where no sample reaches the median length."""
    rows = plan.rows
    longest = np.maximum.reduceat(lens[rows.indices], rows.offsets[:-1])
    return float(np.diff(rows.offsets)[longest < np.median(lens)].sum() / lens.size)


def corpus(shape: str, n: int, pack_len: int, seed: int) -> Any:
    rng = np.random.default_rng(seed)
    out = {
        "short-heavy": lambda: np.ceil(rng.exponential(pack_len / 20, n)),
        "uniform": lambda: rng.integers(1, pack_len + 1, n),
        "bimodal": lambda: np.where(
            rng.random(n) < 0.5,
            rng.integers(1, pack_len // 8 + 1, n),
            rng.integers(pack_len // 2, pack_len + 1, n),
        ),
        "long-tail": lambda: np.ceil(rng.lognormal(np.log(pack_len / 10), 1.2, n)),
        "half+1": lambda: np.where(
            rng.random(n) < 0.4, pack_len // 2 + 1, rng.integers(1, pack_len // 2, n)
        ),
        "alike": lambda: rng.choice(rng.integers(1, pack_len + 1, 2), n) + rng.integers(-30, 31, n),
        "three": lambda: rng.choice(rng.integers(1, pack_len // 4 + 1, 3), n),
    }[shape]()
    return np.clip(out, 1, pack_len).astype(np.int64)


SHAPES = ["short-heavy", "uniform", "bimodal", "long-tail", "half+1", "alike", "three"]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(
    ("n", "pack_len", "batch_size"),
    [(3000, 512, 32), (3000, 4096, 1), (40, 512, 32), (2000, 128, 10_000)],
)
def test_no_peer_packs_fewer_rows(shape: str, n: int, pack_len: int, batch_size: int) -> None:
    """As many rows as whole-epoch best-fit decreasing at most, nor more than greedy_intokens."""
    lens = corpus(shape, n, pack_len, seed=n + pack_len)
    plan = plan_packs(lens, pack_len, batch_size=batch_size, seed=1)
    order = np.random.default_rng(2).permutation(n)
    bfd, greedy = _count_rows(lens, pack_len), worst_fit_rows(lens[order], pack_len)
    tokens = lens.sum()
    assert plan.efficiency >= tokens / (bfd * pack_len), (len(plan.rows), bfd)
    assert plan.efficiency >= tokens / (greedy * pack_len), (len(plan.rows), greedy)
    assert len(plan.rows) >= _lower_bound(lens, pack_len), "no plan beats the lower bound"


@settings(max_examples=150, deadline=None)
@given(pack_args())
def test_a_drawn_plan_has_no_more_rows_than_best_fit_decreasing(args: dict[str, Any]) -> None:
    args = {**args, "window": None, "max_rows": None}
    lens = np.asarray(args["lengths"])
    kept = lens[lens <= args["pack_len"]]
    plan = plan_packs(**args)
    fitting = sum(1 for r in plan.rows if lens[r].sum() <= args["pack_len"])
    assert _lower_bound(kept, args["pack_len"]) <= fitting <= _count_rows(kept, args["pack_len"])


def test_rows_mix_lengths_where_best_fit_decreasing_leaves_a_tail() -> None:
    """NOTE [ rows that mix ]: no tail of rows holding only the shortest samples."""
    for mean, sigma, cap in [(4.6, 0.8, 512), (3.5, 1.0, 512), (5.5, 1.2, 4096)]:
        lens = lognormal(20_000, cap, seed=6, mean=mean, sigma=sigma)
        plan = plan_packs(lens, cap, batch_size=32, seed=0)
        tail = plan_packs(lens, cap, batch_size=32, seed=0, window=lens.size)  # mixed as well
        by_bfd = lens[np.argsort(-lens, kind="stable")]
        assert short_only(plan, lens) <= 0.02 < 0.3 <= _bfd_short_only(by_bfd, cap)
        assert len(plan.rows) == len(tail.rows)


def _bfd_short_only(lens: Any, pack_len: int) -> float:
    """The short-only share of best-fit decreasing's rows (lengths longest first)."""
    rooms: list[tuple[int, int]] = []
    row_of = []
    n_rows = 0
    for length in lens.tolist():
        i = bisect.bisect_left(rooms, (length, -1))
        if i == len(rooms):
            room, row = pack_len, n_rows
            n_rows += 1
        else:
            room, row = rooms.pop(i)
        row_of.append(row)
        if room - length:
            bisect.insort(rooms, (room - length, row))
    rows = np.asarray(row_of)
    longest = np.zeros(n_rows, dtype=np.int64)
    np.maximum.at(longest, rows, lens)
    return float((longest[rows] < np.median(lens)).mean())


@settings(max_examples=150, deadline=None)
@given(lengths(max_size=300, max_len=200), st.integers(0, 3), st.integers(0, 2**31))
def test_mixing_keeps_the_rows_and_never_adds_a_short_only_row(
    lens: Any, extra: int, seed: int
) -> None:
    pack_len = int(lens.max()) * (1 + extra)
    order = np.random.default_rng(seed).permutation(lens.size)
    rows = next_fit_rows(lens[order], pack_len)  # any rows within pack_len will do
    items, offsets = _mix_rows(lens, order, rows, pack_len)
    assert np.array_equal(np.sort(items), np.arange(lens.size)), "exactly once"
    assert offsets.size == rows.size, "as many rows"
    assert np.add.reduceat(lens[items], offsets[:-1]).max() <= pack_len, "within pack_len"
    median = max(1, int(np.median(lens)))

    def n_short(it: Any, off: Any) -> int:
        return int((np.maximum.reduceat(lens[it], off[:-1]) < median).sum())

    assert n_short(items, offsets) <= n_short(order, rows)


@settings(max_examples=100, deadline=None)
@given(lengths(max_size=200, max_len=100), st.integers(1, 120))
def test_balanced_rows_are_within_pack_len_or_none(lens: Any, n_rows: int) -> None:
    pack_len = int(lens.max()) + 20
    got = _balanced_rows(lens, np.arange(lens.size), pack_len, n_rows)
    if got is None:
        assert n_rows < lens.size, "a row each never fails"
        return
    items, offsets = got
    assert np.array_equal(np.sort(items), np.arange(lens.size)), "exactly once"
    assert offsets.size - 1 <= n_rows and (np.diff(offsets) > 0).all(), "no empty row"
    assert np.add.reduceat(lens[items], offsets[:-1]).max() <= pack_len, "within pack_len"


def test_a_huge_pack_len_packs_every_sample_in_one_row() -> None:
    """Rooms, bound and givers are kept by the lengths there are, not per token of pack_len."""
    lens = lognormal(3000, 10_000, seed=7)
    plan = plan_packs(lens, 10**12, batch_size=32)
    assert len(plan.rows) == 1 and plan.num_updates == 1
    assert _lower_bound(lens, 10**12) == 1


# -- planning time on unusual corpora (NOTE [ packing windows ], speed): the same rows, faster --
@settings(max_examples=100, deadline=None)
@given(lengths(max_size=200, max_len=100), st.integers(1, 120), st.integers(0, 40))
def test_balanced_rows_per_length_fill_as_one_at_a_time(lens: Any, n_rows: int, extra: int) -> None:
    """_balanced_runs places a run of equal lengths at once: the same rows, feasible alike."""
    pack_len = int(lens.max()) + extra
    order = np.random.default_rng(n_rows).permutation(lens.size)
    one = _balanced_rows(lens, order, pack_len, n_rows)
    sort = np.argsort(-lens[order], kind="stable")
    values, counts = np.unique(lens, return_counts=True)
    runs = _balanced_runs(order[sort], values[::-1], counts[::-1], pack_len, n_rows)
    assert (one is None) == (runs is None), "the same rows fit"
    if one is None or runs is None:
        return
    items, offsets = runs
    assert offsets.size == one[1].size, "as many rows"
    assert np.array_equal(np.sort(items), np.arange(lens.size)), "exactly once"
    assert (np.diff(offsets) > 0).all(), "no empty row"
    assert np.add.reduceat(lens[items], offsets[:-1]).max() <= pack_len, "within pack_len"


def _lookahead_one_at_a_time(lens: Any, order: Any, pack_len: int) -> list[list[int]]:
    """The look-ahead packer's rule sample by sample: one sorted list of rooms, a stack a room."""
    shortest = int(lens.min())
    placed = sorted(order.tolist(), key=lambda i: -int(lens[i]))  # stable: the order's ties
    to_come = int(lens.sum())
    sizes: list[int] = []
    rows_with: dict[int, list[int]] = {}
    rows: list[list[int]] = []
    for i in placed:
        length = int(lens[i])
        to_come -= length
        k = bisect.bisect_left(sizes, length)
        if k < len(sizes) and 0 < sizes[k] - length < shortest:
            usable = bisect.bisect_left(sizes, length + shortest)
            open_room = sum(r * len(rows_with[r]) for r in sizes)
            if usable < len(sizes):
                k = usable
            elif to_come >= open_room - sizes[k] + pack_len - length:
                k = len(sizes)
        if k == len(sizes):
            room, row = pack_len, len(rows)
            rows.append([])
        else:
            room = sizes[k]
            row = rows_with[room].pop()
            if not rows_with[room]:
                del sizes[k]
        rows[row].append(i)
        if room - length >= shortest:
            if not rows_with.setdefault(room - length, []):
                bisect.insort(sizes, room - length)
            rows_with[room - length].append(row)
    return rows


@settings(max_examples=150, deadline=None)
@given(lengths(max_size=300, max_len=100), st.integers(0, 60), st.integers(0, 2**31))
def test_look_ahead_in_runs_is_the_look_ahead_one_at_a_time(
    lens: Any, extra: int, seed: int
) -> None:
    pack_len = int(lens.max()) + extra
    order = np.random.default_rng(seed).permutation(lens.size)
    items, offsets = _best_fit_lookahead(lens, order, pack_len)
    expected = _lookahead_one_at_a_time(lens, order, pack_len)
    got = [row.tolist() for row in np.split(items, offsets[1:-1])]
    assert got == expected


def test_rooms_are_a_sorted_set_across_chunks() -> None:
    rng = np.random.default_rng(8)
    rooms, model = _Rooms(), []
    for value in rng.integers(0, 10**9, 6 * _CHUNK).tolist():  # several chunk splits
        if value not in model:
            rooms.add(value)
            bisect.insort(model, value)
        probe = int(rng.integers(0, 10**9))
        at = bisect.bisect_left(model, probe)
        assert rooms.ceiling(probe) == (model[at] if at < len(model) else -1)
        if rng.random() < 0.3:
            gone = model.pop(int(rng.integers(len(model))))
            rooms.remove(gone)
        assert rooms.smallest() == model[0] and bool(rooms) == bool(model)


def test_a_huge_pack_len_with_every_length_distinct_is_best_fit_decreasing() -> None:
    """Rooms by the thousand (rows of 10**9 tokens) kept in chunks: still best fit."""
    lens = np.random.default_rng(9).integers(1, 10**9, 5000)
    plan = plan_packs(lens, 10**9, batch_size=32)
    assert len(plan.rows) == _count_rows(lens, 10**9)


def test_the_other_packers_are_tried_only_where_they_can_win() -> None:
    """One length: best fit is optimal; past _MANY_LENGTHS lengths best fit's rows are kept."""
    one = plan_packs(np.full(999, 3), 8, batch_size=4)
    assert len(one.rows) == -(-999 // 2), "as many a row as fit"
    rng = np.random.default_rng(10)
    pack_len = 131_072  # a third in 0.3-0.5 of the row: past the bound by more than 1 %
    lens = np.concatenate(
        [rng.integers(int(0.3 * pack_len), pack_len // 2, 3000), rng.integers(1, 3000, 6000)]
    )
    assert np.unique(lens).size > _MANY_LENGTHS
    order = rng.permutation(lens.size)
    rows = next_fit_rows(lens[order], pack_len)
    assert rows.size - 1 > 1.01 * _lower_bound(lens, pack_len), "the trigger fires"
    items, offsets = _pack_harder(lens, order, pack_len, order, rows)
    assert items is order and offsets is rows, "not tried"
