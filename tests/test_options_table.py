"""Every option against every promise: one table of options, random combinations.

:data:`strategies.OPTION_ROWS` holds one row per public option; Hypothesis draws a
combination, :func:`build` makes it (every rank's ``DistributedDynamicBatchSampler``
in-process, or a stream), and each invariant of :data:`INVARIANTS` that applies to the
combination is checked: exactly once (or the documented drops), equal steps, budget, exact
step counts, resume equality at a random point, never predicted slower than the fixed
batch, and refusals named. A new option is one row there; a new promise one row here.

The two cases below were found by the table (issue 28: a time split with a batch_size off the
multiple, streams ignoring the time options) and stay as named examples of it.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st
from strategies import lognormal_pairs, option_combinations

import dynbatch
from conftest import shared_file
from dynbatch import DistributedDynamicBatchSampler, InputError, PlanOptions
from dynbatch.plan.costs import charge, rows_cost
from dynbatch.plan.lengths import loss_token_bound, sample_tokens
from dynbatch.plan.packs import PackLayout, packed_epoch_seconds
from dynbatch.plan.packs.layout import packed_rows
from dynbatch.plan.pair_steptime import PairStepTimeModel
from dynbatch.plan.planning import find_oversize, padded_lengths
from dynbatch.plan.sharding import ShardedPlan
from dynbatch.plan.splits import epoch_seconds, shuffled
from dynbatch.plan.steptime import FLAT_STEP, StepTimeModel, StepTimeTable
from dynbatch.stream.planner import StreamPlanner
from dynbatch.stream.sources import open_source

EPOCHS = 2
pytestmark = pytest.mark.filterwarnings("ignore:skipping .* over budget")  # oversize="skip" says so


@functools.cache
def h100() -> StepTimeModel:
    return StepTimeTable.load(shared_file("h100_bert_base_step_times.json")).fit()


def time_model(name: str | None, pairs: bool = False) -> Any:
    """The step time a combination names: of one length, or for (source, target) pairs of two
    (the H100's fit on each side, the cross term as a side's attention)."""
    models = {
        None: lambda: None,
        "flat": lambda: FLAT_STEP,
        "linear": lambda: StepTimeModel(c=1e-3, a=1e-5, b=0.0),
        "h100": h100,
    }
    model = models[name]()
    if not pairs or model is None:
        return model
    return PairStepTimeModel(
        c=model.c, a_s=model.a, a_t=model.a, b_s=model.b, b_t=model.b, cross=model.b,
        error=model.error,
    )  # fmt: skip


def priced(model: Any, per_rank: int, rows: np.ndarray) -> float:
    """A step of ``per_rank`` samples a rank at the longest of ``rows`` (padded lengths): both
    sides' for a step time of pairs, else the longest length (a pair's: its tokens)."""
    if isinstance(model, PairStepTimeModel):
        return float(np.asarray(model(per_rank, *rows.max(axis=0))))
    return float(np.asarray(model(per_rank, int(sample_tokens(rows).max()))))


# -- making a combination -------------------------------------------------------------------------
@dataclass
class Built:
    """A drawn combination, made: every rank's batches of each epoch and how to remake it."""

    combo: dict[str, Any]
    lengths: np.ndarray
    options: PlanOptions
    ranks: list[list[list[list[int]]]]  # [epoch][rank] -> batches (lists of indices)
    padding: list[list[np.ndarray]]  # [epoch][rank] -> padding mask
    plans: list[ShardedPlan | None]  # [epoch], in memory only
    steps_for_epochs: int | None
    remake: Callable[[], Any]


def _option_kwargs(combo: dict[str, Any], lengths: np.ndarray) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "order": combo["order"],
        "seed": combo["seed"],
        "batch_size_multiple": combo["batch_size_multiple"],
        "pad_to_multiple_of": combo["pad_to_multiple_of"],
        "oversize": combo["oversize"],
        "drop_last": combo["drop_last"],
        "update_unit": combo["update_unit"],
    }
    if combo["time_model"] is not None:
        kwargs["time_model"] = time_model(combo["time_model"], combo["pairs"])
    if combo["group_by_length"]:
        kwargs["group_by_length"] = True
    if combo["pack_len"] is not None:
        kwargs["pack_len"] = max(1, int(combo["pack_len"] * int(lengths.max())))
    if combo.get("attention") is not None:  # like_fixed's: the layout packed rows run in
        kwargs["attention"] = combo["attention"]
    if combo["batch_size"] is None:
        kwargs.update(cost="linear", max_cost=_longest_alone(lengths) * combo["budget"])
        if combo["update_size"] is not None:
            kwargs["update_size"] = combo["update_size"]
    return kwargs


def _longest_alone(lengths: np.ndarray) -> float:
    """What the longest sample (for pairs: the longest source and target) costs alone."""
    return float(np.asarray(charge("linear", 1, lengths.max(axis=0)[None]))[0])


def memory_samplers(combo: dict[str, Any], lengths: np.ndarray) -> list[Any]:
    loss_tokens = None
    if combo["loss_tokens"]:  # of a pair: of its target
        rng = np.random.default_rng(combo["seed"])
        loss_tokens = rng.integers(0, loss_token_bound(lengths) + 1)
    return [
        DistributedDynamicBatchSampler(
            lengths=lengths,
            num_replicas=combo["ranks"],
            rank=rank,
            batch_size=combo["batch_size"],
            loss_tokens=loss_tokens,
            **_option_kwargs(combo, lengths),
        )
        for rank in range(combo["ranks"])
    ]


def build_memory(combo: dict[str, Any], lengths: np.ndarray) -> Built:
    samplers = memory_samplers(combo, lengths)
    ranks, padding, plans = [], [], []
    for epoch in range(EPOCHS):
        for s in samplers:
            s.set_epoch(epoch)
        ranks.append([[list(b) for b in s] for s in samplers])
        padding.append([s.padding_mask() for s in samplers])
        plans.append(samplers[0].epoch_plan(epoch))
    return Built(
        combo,
        lengths,
        samplers[0].options,
        ranks,
        padding,
        plans,
        samplers[0].steps_for_epochs(range(EPOCHS)),
        lambda: memory_samplers(combo, lengths),
    )


def stream_planner(combo: dict[str, Any], lengths: np.ndarray) -> StreamPlanner:
    kwargs = _option_kwargs(combo, lengths)
    if combo["batch_size"] is not None:  # a stream has no lengths to size like_fixed by
        kwargs.update(cost="linear", max_cost=_longest_alone(lengths) * combo["budget"])
        kwargs["update_size"] = combo["batch_size"] * combo["ranks"]
    # a pair's length_fn returns (source, target) (NOTE [ a stream of pairs ])
    source = open_source(
        [(i, tuple(n.tolist()) if n.ndim else int(n)) for i, n in enumerate(lengths)]
    )
    options = PlanOptions(**kwargs)
    return StreamPlanner(source, lambda s: s[1], options, combo["buffer_size"], combo["ranks"])


def build_stream(combo: dict[str, Any], lengths: np.ndarray) -> Built:
    planner = stream_planner(combo, lengths)
    ranks, padding = [], []
    for epoch in range(EPOCHS):
        seqs = [list(planner.sequence(epoch, r, combo["workers"])) for r in range(combo["ranks"])]
        ranks.append([[[int(s[0]) for s in b] for b in seq] for seq in seqs])
        padding.append([np.array([b.info.padding for b in seq], dtype=bool) for seq in seqs])
    return Built(
        combo,
        lengths,
        planner.options,
        ranks,
        padding,
        [None] * EPOCHS,
        None,
        lambda: stream_planner(combo, lengths),
    )


def build(combo: dict[str, Any], lengths: np.ndarray) -> Built:
    return (build_stream if combo["source"] == "stream" else build_memory)(combo, lengths)


# -- the invariants -------------------------------------------------------------------------------
def exactly_once(b: Built, data: st.DataObject) -> None:
    expected = set(range(len(b.lengths)))
    if b.options.oversize == "skip":
        expected -= set(find_oversize(b.lengths, options=b.options).tolist())
    for epoch, ranks in enumerate(b.ranks):
        real = [
            i
            for rank, pad in zip(ranks, b.padding[epoch], strict=True)
            for batch, is_pad in zip(rank, pad, strict=True)
            if not is_pad
            for i in batch
        ]
        assert len(real) == len(set(real)), f"epoch {epoch}: no sample twice"
        if b.options.drop_last:
            assert set(real) <= expected, f"epoch {epoch}: only plannable samples"
        else:
            assert set(real) == expected, f"epoch {epoch}: every sample once"


def equal_steps(b: Built, data: st.DataObject) -> None:
    for epoch, ranks in enumerate(b.ranks):
        assert len({len(r) for r in ranks}) == 1, f"epoch {epoch}: equal steps on every rank"


def within_budget(b: Built, data: st.DataObject) -> None:
    opts = b.options
    if opts.pack_len is not None:
        within_rows(b)
        return
    plens = padded_lengths(b.lengths, opts.pad_to_multiple_of)
    for ranks in b.ranks:
        for rank in ranks:
            for batch in rank:
                n = len(batch)
                assert n >= 1, "no empty batch"
                if opts.max_batch_size is not None:  # or the fixed batch's own step, kept whole
                    cap = max(opts.max_batch_size, opts.fixed_step_size or 0)
                    assert n <= cap, "within max_batch_size"
                longest = plens[batch].max(axis=0)[None]  # pairs: its longest source and target
                cost = float(np.asarray(charge(opts.cost, n, longest))[0])
                assert cost <= opts.max_cost * (1 + 1e-12) or n == 1, "within max_cost"


def within_rows(b: Built) -> None:
    """A packed micro-batch as the collator lays it out (NOTE [ a micro-batch's layout ]): at
    most ``max_rows`` rows, each within ``pack_len`` tokens or a single oversize sample; or,
    with a time model, padded within the budget."""
    opts = b.options
    assert opts.pack_len is not None
    layout = PackLayout.from_options(opts)
    for ranks in b.ranks:
        for rank in ranks:
            for batch in rank:
                assert len(batch) >= 1, "no empty micro-batch"
                lens = b.lengths[batch]
                rows, width = layout.rows(lens)
                if opts.time_model is None:
                    built = packed_rows(lens, opts.pack_len, opts.pad_to_multiple_of)
                    assert np.array_equal(rows, built[0]) and width == built[1], "packed"
                    tokens = np.add.reduceat(lens, rows[:-1])
                    fullest = -(-int(tokens.max()) // opts.pad_to_multiple_of)
                    assert width == fullest * opts.pad_to_multiple_of, "as wide as the fullest"
                longest = -(-int(lens.max()) // opts.pad_to_multiple_of) * opts.pad_to_multiple_of
                if rows.size - 1 == len(batch) and width == longest and len(batch) > 1:
                    cost = float(np.asarray(opts.cost(len(batch), int(width))))
                    assert cost <= opts.max_cost * (1 + 1e-12), "padded: within max_cost"
                    continue
                # max_rows is the most rows of pack_len the budget holds: the planner's cap
                # without a time model; with one, a micro-batch it runs packed may hold more
                # rows narrower than pack_len, within the budget all the same
                cap = opts.max_rows if opts.time_model is None else opts.max_batch_size
                assert cap is None or rows.size - 1 <= cap, "rows within max_rows"
                # priced as its layout runs (NOTE [ attention layouts ]): within the budget
                cost = float(np.asarray(rows_cost(opts.cost)(rows.size - 1, int(width))))
                assert cost <= opts.max_cost * (1 + 1e-12) or rows.size == 2, "rows: max_cost"
                for a, z in itertools.pairwise(rows.tolist()):
                    one_over = z - a == 1 and lens[a] > opts.pack_len
                    assert lens[a:z].sum() <= opts.pack_len or one_over, "a row within pack_len"


def exact_step_counts(b: Built, data: st.DataObject) -> None:
    if b.steps_for_epochs is None:
        return
    updates = 0
    for plan in b.plans:
        assert plan is not None
        updates += plan.num_steps if plan.window_ends is None else int(plan.window_ends.size)
    assert b.steps_for_epochs == updates, "steps_for_epochs counts the updates the plans make"
    combo = b.combo
    if combo["batch_size"] is not None and combo["update_unit"] == "samples":
        # the fixed batch's count, from the options alone: ceil(N / (B * R)) (drop_last: floor)
        n = len(b.lengths)
        if b.options.oversize == "skip":
            n -= find_oversize(b.lengths, options=b.options).size
        update = combo["batch_size"] * combo["ranks"]
        each = n // update if b.options.drop_last else -(-n // update)
        # left: drop_last with fewer samples than one update makes 0 updates on 1 rank, 1 on more
        # packed or not, with a time model or not: the fixed batch's count, exactly
        assert (b.options.drop_last and each == 0) or b.steps_for_epochs == EPOCHS * each, (
            f"{EPOCHS} epochs of {n} samples make {EPOCHS} x {each} updates of {update}"
        )
    for epoch, plan in enumerate(b.plans):
        assert plan is not None and plan.num_steps == len(b.ranks[epoch][0]), "len is exact"


def resume_equality(b: Built, data: st.DataObject) -> None:
    if b.combo["source"] == "stream":
        return  # tests/test_streaming.py draws stream resumes over workers and shards
    epoch = data.draw(st.integers(0, EPOCHS - 1), label="resume epoch")
    whole = b.ranks[epoch]
    k = data.draw(st.integers(0, len(whole[0])), label="resume at")
    samplers = b.remake()
    for s in samplers:
        s.set_epoch(epoch)
    state = json.loads(json.dumps(samplers[0].state_dict(consumed_batches=k)))
    fresh = b.remake()
    for s in fresh:
        s.load_state_dict(state)
        s.set_epoch(epoch)
    rest = [[list(batch) for batch in s] for s in fresh]
    assert rest == [r[k:] for r in whole], "a resume yields exactly the rest, on every rank"


def resume_on_other_ranks(b: Built, data: st.DataObject) -> None:
    """NOTE [ resume on another number of ranks ]: the global update kept, the rest dealt anew."""
    combo = b.combo
    if combo["source"] == "stream" or b.options.update_size is None:
        return
    ranks = data.draw(st.integers(1, 4), label="resume on ranks")
    other = {**combo, "ranks": ranks}
    if combo["batch_size"] is not None:
        global_batch = combo["batch_size"] * combo["ranks"]
        other["batch_size"] = max(1, global_batch // ranks)  # not kept where ranks do not divide
    epoch = data.draw(st.integers(0, EPOCHS - 1), label="resume epoch")
    whole = b.ranks[epoch]
    k = data.draw(st.integers(0, len(whole[0])), label="resume at")
    saved = b.remake()
    for s in saved:
        s.set_epoch(epoch)
    state = json.loads(json.dumps(saved[0].state_dict(consumed_batches=k)))
    try:
        fresh = memory_samplers(other, b.lengths)
    except InputError:
        return  # the options refused on these ranks (their own named refusal)
    plan = b.plans[epoch]
    assert plan is not None
    ends = [0] if plan.window_ends is None else [0, *plan.window_ends.tolist()]
    if fresh[0].options.update_size != b.options.update_size:
        with pytest.raises(InputError, match=r"Keep the global update: with num_replicas="):
            fresh[0].load_state_dict(state)
        return
    if ranks != combo["ranks"] and k not in ends and k < len(whole[0]):
        with pytest.raises(InputError, match=r"saved inside an update"):
            fresh[0].load_state_dict(state)
        return
    for s in fresh:
        s.load_state_dict(state)
        s.set_epoch(epoch)
    rest = [[list(batch) for batch in s] for s in fresh]
    masks = [s.padding_mask()[-len(r) :] if r else [] for s, r in zip(fresh, rest, strict=True)]
    assert len({len(r) for r in rest}) == 1, "equal steps on the new ranks"
    done = [
        i
        for rank, pad in zip(whole, b.padding[epoch], strict=True)
        for batch, is_pad in list(zip(rank, pad, strict=True))[:k]
        if not is_pad
        for i in batch
    ]
    left = [
        i
        for rank, pad in zip(rest, masks, strict=True)
        for batch, is_pad in zip(rank, pad, strict=True)
        if not is_pad
        for i in batch
    ]
    planned = [
        i
        for rank, pad in zip(whole, b.padding[epoch], strict=True)
        for batch, is_pad in zip(rank, pad, strict=True)
        if not is_pad
        for i in batch
    ]
    assert sorted(done + left) == sorted(planned), "the rest of the epoch, every sample once"


def fixed_seconds(plan: ShardedPlan, lengths: np.ndarray, model: Any, pad: int = 1) -> float:
    """The fixed batch of the same updates: each update one step per rank, padded (to ``pad``)."""
    ends = np.r_[0, plan.window_ends] * plan.num_replicas
    total = 0.0
    for a, e in itertools.pairwise(ends):
        members = [plan.plan[k] for k in range(a, e) if not plan.is_padding[k]]
        if not members:
            continue
        per_rank = -(-sum(m.size for m in members) // plan.num_replicas)
        total += priced(model, per_rank, padded_lengths(lengths[np.concatenate(members)], pad))
    return total


def the_fixed_batch_seconds(b: Built, epoch: int, model: Any) -> float:
    """An independent yardstick: the fixed batch's own shuffle (``shuffled``, the draws a
    fixed batch of ``batch_size`` makes) cut into updates of ``batch_size`` x ranks, each one
    step of ``ceil(n / ranks)`` samples a rank padded to its longest (paddle's deal)."""
    opts, combo = b.options, b.combo
    plens = padded_lengths(b.lengths, opts.pad_to_multiple_of)
    keep = np.ones(len(b.lengths), dtype=bool)
    if opts.oversize == "skip":
        keep[find_oversize(b.lengths, options=opts)] = False
    order = shuffled(np.flatnonzero(keep), opts.seed, epoch)
    update = combo["batch_size"] * combo["ranks"]
    if opts.drop_last:
        order = order[: order.size - order.size % update]
    total = 0.0
    for start in range(0, order.size, update):
        members = order[start : start + update]
        per_rank = -(-members.size // combo["ranks"])
        total += priced(model, per_rank, plens[members])
    return total


def never_slower_than_fixed(b: Built, data: st.DataObject) -> None:
    if b.combo["time_model"] is None or b.combo["source"] == "stream":
        return
    model = time_model(b.combo["time_model"], b.combo["pairs"])
    assert b.options.time_model == model, "a time model given is followed, never dropped"
    if b.combo["batch_size"] is None:
        return  # under a budget of its own the fixed batch may not fit: nothing to compare
    for epoch, plan in enumerate(b.plans):
        assert plan is not None and plan.window_ends is not None
        if b.options.group_by_length:  # its own updates (grouped by length), each run whole
            fixed = fixed_seconds(plan, b.lengths, model, b.options.pad_to_multiple_of)
        else:
            fixed = the_fixed_batch_seconds(b, epoch, model)
        if b.options.pack_len is not None:  # each micro-batch as the collator lays it out
            predicted = packed_epoch_seconds(plan, b.lengths, b.options)
        else:
            two = isinstance(model, PairStepTimeModel)  # else of a pair's tokens (a flat one)
            lengths = b.lengths if two else sample_tokens(b.lengths)
            predicted = epoch_seconds(plan, lengths, model, b.options.pad_to_multiple_of)
        assert predicted <= fixed * (1 + 1e-9) + 1e-12, (
            f"epoch {epoch}: predicted {predicted:.6g}s, the fixed batch {fixed:.6g}s"
        )


@dataclass(frozen=True)
class Invariant:
    name: str
    check: Callable[[Built, st.DataObject], None]


#: Every promise a combination is held to; each checks only what applies to it.
INVARIANTS = (
    Invariant("exactly once", exactly_once),
    Invariant("equal steps", equal_steps),
    Invariant("budget", within_budget),
    Invariant("exact step counts", exact_step_counts),
    Invariant("resume equality", resume_equality),
    Invariant("resume on another number of ranks", resume_on_other_ranks),
    Invariant("never slower than the fixed batch", never_slower_than_fixed),
)


NAMED = (InputError,)  # a refusal is an InputError (InputTypeError is one), never another error


def refused_by_name(err: InputError, combo: dict[str, Any]) -> None:
    """The refusal names an option (drawn, or one the recipe derives) and echoes its value."""
    message = str(err)
    names = [*combo, "max_cost", "update_size", "max_batch_size", "cost"]
    echoed = [name for name in names if re.search(rf"\b{name}=\S", message)]
    assert echoed, f"the refusal names the option it refuses and its value: {message!r}"


@settings(  # examples: the profile's (150 in CI)
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],  # explaining takes minutes
)
@given(case=option_combinations(), data=st.data())
def test_every_option_combination_keeps_every_promise(case: dict[str, Any], data: Any) -> None:
    combo, lengths = case["combo"], case["lengths"]
    try:
        built = build(combo, lengths)
    except NAMED as err:
        event(f"refused: {str(err)[:50]}")
        refused_by_name(err, combo)
        return
    event(f"built: {combo['source']}" + (", pairs" if combo["pairs"] else ""))
    for invariant in INVARIANTS:
        invariant.check(built, data)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=option_combinations(pairs=True), data=st.data())
def test_every_option_combination_of_pairs_keeps_every_promise(
    case: dict[str, Any], data: Any
) -> None:
    """The table above, every combination of (source, target) pairs (a quarter of its own)."""
    test_every_option_combination_keeps_every_promise.hypothesis.inner_test(  # type: ignore[attr-defined]
        case=case, data=data
    )


@settings(max_examples=5, deadline=None)
@given(data=st.data())
def test_the_table_is_not_vacuous(data: Any) -> None:
    """The default combination builds and keeps every promise: the test above checks them."""
    lengths = np.random.default_rng(0).integers(1, 80, 97)
    combo = {**_default(), "ranks": 2}
    for source in ("memory", "stream"):
        built = build({**combo, "source": source}, lengths)
        for invariant in INVARIANTS:
            invariant.check(built, data)
    pairs = lognormal_pairs(97, 0.7, seed=0, max_len=200)  # and of (source, target) pairs
    for source in ("memory", "stream"):
        for grouped in ({}, {"group_by_length": True, "time_model": "flat"}):
            built = build({**combo, **grouped, "pairs": True, "source": source}, pairs)
            for invariant in INVARIANTS:
                invariant.check(built, data)


@pytest.mark.parametrize("time_model", [None, "linear", "h100"])
@pytest.mark.parametrize("pack_len", [0.6, 1.0, 2.5])
@settings(max_examples=3, deadline=None)
@given(data=st.data())
def test_packed_combinations_keep_every_promise(
    pack_len: float, time_model: str | None, data: Any
) -> None:
    """Packing builds (most packed draws above are refused by another option) and keeps them,
    alone or chosen per update by a time model (NOTE [ choosing packing per update ])."""
    lengths = np.random.default_rng(1).integers(1, 80, 97)
    combo = {
        **_default(),
        "ranks": 3,
        "pack_len": pack_len,
        "time_model": time_model,
        "oversize": "alone",
        "order": "shuffle",
    }
    for source in ("memory", "stream"):
        built = build({**combo, "source": source}, lengths)
        assert built.options.pack_len is not None
        for invariant in INVARIANTS:
            invariant.check(built, data)


@pytest.mark.parametrize("attention", ["dense", "flashmask", "varlen"])
@pytest.mark.parametrize("pack_len", [1.0, 4.0])  # 4.0: dense rows stop short, at L_max·√B
@settings(max_examples=3, deadline=None)
@given(data=st.data())
def test_every_packed_layout_keeps_every_promise(
    pack_len: float, attention: str, data: Any
) -> None:
    """Each layout the recipe prices its rows by (NOTE [ attention layouts ]) keeps the table's
    promises, on 3 ranks; a stream takes no layout (its options are not like_fixed's)."""
    lengths = np.random.default_rng(2).integers(1, 80, 97)
    combo = {
        **_default(),
        "ranks": 3,
        "pack_len": pack_len,
        "attention": attention,
        "oversize": "alone",
        "order": "shuffle",
    }
    built = build(combo, lengths)
    opts = built.options
    assert opts.pack_len is not None
    for invariant in INVARIANTS:
        invariant.check(built, data)
    # the fixed batch's worst, B·L_max tokens, holds a dense row's attention only as L_max·W
    longest, widest = int(lengths.max()), 0
    for batch in itertools.chain.from_iterable(itertools.chain.from_iterable(built.ranks)):
        rows, width = packed_rows(lengths[batch], opts.pack_len)
        widest = max(widest, width)
        grows = max(1.0, width / longest) if attention == "dense" else 1.0
        assert (rows.size - 1) * width * grows <= opts.max_cost, (attention, rows, width)
    assert (widest <= longest * math.sqrt(8)) == (attention == "dense" or pack_len == 1.0)


# -- examples the table found (issue 28) ---------------------------------------------------------
LENGTHS = np.random.default_rng(7).integers(1, 120, 160)


def test_a_time_split_with_an_odd_batch_size_is_never_slower_than_the_fixed_batch() -> None:
    for s in memory_samplers(
        {**_default(), "batch_size": 12, "batch_size_multiple": 8, "time_model": "flat"}, LENGTHS
    )[:1]:
        plan = s.epoch_plan(0)
        assert epoch_seconds(plan, LENGTHS, FLAT_STEP) <= fixed_seconds(plan, LENGTHS, FLAT_STEP)


@pytest.mark.parametrize("option", [{"time_model": FLAT_STEP}, {"group_by_length": True}])
def test_a_stream_honours_or_refuses_the_time_options(option: dict[str, Any]) -> None:
    fields = {"time_model": FLAT_STEP, **option}  # group_by_length needs a time model
    base = PlanOptions(max_cost=4000, cost="linear", update_size=16)
    source = [(i, int(n)) for i, n in enumerate(LENGTHS)]
    plain = dynbatch.DynamicBatchIterable(source, length_fn=lambda s: s[1], options=base)
    try:
        timed = dynbatch.DynamicBatchIterable(
            source, length_fn=lambda s: s[1], options=base.replace(**fields)
        )
    except InputError:
        return  # refused by name: the promise kept
    ids = [[[s[0] for s in b] for b in it] for it in (plain, timed)]
    assert ids[0] != ids[1], "a time model the stream accepts changes its batches"


def _default() -> dict[str, Any]:
    return {
        "order": "bucket",
        "seed": 0,
        "batch_size": 8,
        "update_size": None,
        "update_unit": "samples",
        "batch_size_multiple": 1,
        "pad_to_multiple_of": 1,
        "oversize": "error",
        "drop_last": False,
        "time_model": None,
        "group_by_length": False,
        "loss_tokens": False,
        "ranks": 1,
        "workers": 0,
        "source": "memory",
        "budget": 8.0,
        "buffer_size": 30,
        "pack_len": None,
        "pairs": False,
    }
