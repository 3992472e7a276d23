"""The streaming planner (numpy): invariants over random streams, ranks, workers and resumes.

Every sample exactly once per epoch over the ranks and workers; every batch within budget;
the same number of steps on every rank; the same ``(seed, epoch)`` gives the same batches;
a resume yields exactly what the uninterrupted run would have; for one length a sample and for
(source, target) pairs alike (NOTE [ a stream of pairs ]). Workers are simulated the way
paddle's DataLoader takes them (in turn); tests/test_stream_loader.py runs the real one.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import lengths, lognormal_pairs, named_costs, pair_lengths

from dynbatch import (
    InputError,
    InputTypeError,
    PairCost,
    PlanOptions,
    plan_batches,
    plan_stats,
    read_jsonl,
)
from dynbatch.plan.costs import charge
from dynbatch.plan.planning import padded_lengths
from dynbatch.stream.planner import StreamPlanner
from dynbatch.stream.sources import open_source
from dynbatch.stream.state import StreamProgress, count_epoch

Sample = tuple[int, int]  # (id, length)


def planner(
    lens: np.ndarray,
    *,
    buffer_size: int = 50,
    replicas: int = 1,
    shards: list[Path] | None = None,
    **options: object,
) -> StreamPlanner:
    opts = PlanOptions(**{"max_cost": 4000.0, "cost": "linear", **options})  # type: ignore[arg-type]
    if shards is None:
        source = open_source([(i, _length(n)) for i, n in enumerate(lens)])
        return StreamPlanner(source, lambda s: s[1], opts, buffer_size, replicas)
    source = open_source(shards, read_jsonl, seed=opts.seed)
    return StreamPlanner(source, lambda s: s[1], opts, buffer_size, replicas)


def write_shards(tmp: Path, lens: np.ndarray, count: int) -> list[Path]:
    """``lens`` as ``count`` JSONL shards of [id, length] records (some may be empty)."""
    tmp.mkdir(parents=True, exist_ok=True)
    paths = [tmp / f"shard{k}.jsonl" for k in range(count)]
    parts = np.array_split(np.arange(len(lens)), count)
    for path, part in zip(paths, parts, strict=True):
        path.write_text("".join(json.dumps([int(i), _length(lens[i])]) + "\n" for i in part))
    return paths


def _length(n: np.ndarray) -> object:
    """A sample's length as its length_fn returns it: a number, or a (source, target) pair."""
    return tuple(n.tolist()) if n.ndim else int(n)


def ids(batch: list) -> list[int]:
    return [int(s[0]) for s in batch]


def run_epoch(p: StreamPlanner, epoch: int, workers: int) -> list[list]:
    """Every rank's batches of an epoch, in the order its DataLoader yields them."""
    return [list(p.sequence(epoch, r, workers)) for r in range(p.num_replicas)]


def check_epoch(p: StreamPlanner, lens: np.ndarray, ranks: list[list]) -> None:
    opts = p.options
    counts = {len(r) for r in ranks}
    assert len(counts) == 1, f"equal steps on every rank, got {[len(r) for r in ranks]}"
    real = sorted(i for r in ranks for b in r if not b.info.padding for i in ids(b))
    assert real == list(range(len(lens))), "every sample exactly once over the ranks"
    for r in ranks:
        for b in r:
            n = len(b)
            longest = padded_lengths(lens[ids(b)], opts.pad_to_multiple_of).max(axis=0)
            assert n >= 1
            cost = float(np.asarray(charge(opts.cost, n, longest[None]))[0])  # pairs: both sides
            assert cost <= opts.max_cost or n == 1, "within budget"
            if opts.max_batch_size is not None:
                assert n <= opts.max_batch_size
    for step in range(len(ranks[0])):
        infos = [r[step].info for r in ranks]
        assert len({(i.slot, i.slot_step, i.samples, i.tokens) for i in infos}) == 1, (
            "step k is the same step on every rank, with the same global counts"
        )
        real_n = sum(len(r[step]) for r in ranks if not r[step].info.padding)
        assert infos[0].samples == real_n, "the step's samples over all ranks"


@st.composite
def stream_case(draw: st.DrawFn) -> dict:
    pairs = draw(st.booleans())
    lens = draw((pair_lengths if pairs else lengths)(max_size=240, max_len=200))
    cost = draw(named_costs)
    single = float(np.asarray(charge(cost, 1, -(-lens.max(axis=0)[None] // 8) * 8))[0])
    return {
        "lens": lens,
        "pairs": pairs,
        "cost": cost,
        "max_cost": single * draw(st.floats(1.0, 30.0)),
        "buffer_size": draw(st.integers(1, 120)),
        "replicas": draw(st.integers(1, 4)),
        "workers": draw(st.sampled_from([0, 1, 2, 3])),
        "seed": draw(st.integers(0, 2**31)),
        "epoch": draw(st.integers(0, 20)),
        "order": draw(st.sampled_from(["bucket", "shuffle", "none"])),
        "cap": draw(st.none() | st.integers(1, 20)),
        "shards": draw(st.sampled_from([0, 0, 1, 3, 7])),
        "update_size": draw(st.none() | st.integers(1, 64)),
        "pad": draw(st.sampled_from([1, 1, 8])),
        "multiple": draw(st.sampled_from([1, 1, 2, 4])),
        "time_model": draw(st.sampled_from([None, None, "1,0,0", "0.001,1e-6,1e-8"])),
        "group_by_length": draw(st.booleans()),
    }


def build(case: dict, tmp: Path) -> StreamPlanner:
    shards = write_shards(tmp, case["lens"], case["shards"]) if case["shards"] else None
    return planner(
        case["lens"],
        buffer_size=case["buffer_size"],
        replicas=case["replicas"],
        shards=shards,
        cost=case["cost"],
        max_cost=case["max_cost"],
        seed=case["seed"],
        order=case["order"],
        max_batch_size=None if case["cap"] is None else max(case["cap"], case["multiple"]),
        update_size=case["update_size"],
        pad_to_multiple_of=case["pad"],
        batch_size_multiple=case["multiple"],
        **time_split(case),
    )


def time_split(case: dict) -> dict:
    """``time_model`` (and ``group_by_length``) where the case allows them: update_size in
    samples and a random order (NOTE [ a stream at the step time ])."""
    if case["time_model"] is None or case["update_size"] is None or case["order"] == "none":
        return {}
    if case["pairs"]:  # a step time of two lengths is not there yet: a flat one, grouped
        return {"time_model": "1,0,0", "group_by_length": True}
    return {"time_model": case["time_model"], "group_by_length": case["group_by_length"]}


@settings(max_examples=60)
@given(case=stream_case())
def test_every_sample_once_within_budget_equal_steps(case: dict, tmp_path_factory) -> None:
    p = build(case, tmp_path_factory.mktemp("s"))
    ranks = run_epoch(p, case["epoch"], case["workers"])
    check_epoch(p, case["lens"], ranks)
    again = run_epoch(p, case["epoch"], case["workers"])
    assert [[ids(b) for b in r] for r in ranks] == [[ids(b) for b in r] for r in again], (
        "the same (seed, epoch) gives the same batches"
    )
    counted = count_epoch(p, case["epoch"], case["workers"])
    assert counted.steps == len(ranks[0]), "the first pass counts the steps the epoch takes"


@settings(max_examples=60)
@given(case=stream_case(), cut=st.floats(0.0, 1.0), data=st.data())
def test_a_resume_yields_exactly_the_rest_of_the_epoch(
    case: dict, cut: float, data: st.DataObject, tmp_path_factory
) -> None:
    p = build(case, tmp_path_factory.mktemp("s"))
    epoch, workers = case["epoch"], case["workers"]
    rank = data.draw(st.integers(0, case["replicas"] - 1))
    whole = list(p.sequence(epoch, rank, workers))
    k = int(cut * len(whole))
    progress = StreamProgress(p)
    progress.set_epoch(epoch)
    for taken, batch in enumerate(p.sequence(epoch, rank, workers, progress.begin(workers))):
        if taken == k:
            break
        progress.took(batch.info, last=taken == len(whole) - 1)
    state = json.loads(json.dumps(progress.state_dict()))  # it survives a JSON checkpoint
    fresh = StreamProgress(p)
    fresh.load_state_dict(state)
    fresh.set_epoch(epoch)  # as a loop does: keeps the loaded position
    rest = list(p.sequence(epoch, rank, workers, fresh.begin(workers)))
    assert [ids(b) for b in rest] == [ids(b) for b in whole[k:]], "exactly the remaining batches"
    assert [b.info for b in rest] == [b.info for b in whole[k:]]


def test_a_resume_twice_over_and_a_finished_epoch(tmp_path: Path) -> None:
    lens = np.random.default_rng(3).integers(1, 200, 500)
    p = planner(lens, buffer_size=37, replicas=2, shards=write_shards(tmp_path, lens, 5))
    whole = list(p.sequence(4, 1, 3))
    progress = StreamProgress(p)
    progress.set_epoch(4)
    got: list = []
    for stop in (7, 19, len(whole)):  # stop, save, resume; twice, then to the end
        for batch in p.sequence(4, 1, 3, progress.begin(3)):
            got.append(batch)
            progress.took(batch.info, last=len(got) == len(whole))
            if len(got) == stop:
                break
        state = progress.state_dict()
        progress = StreamProgress(p)
        progress.load_state_dict(state)
    assert [ids(b) for b in got] == [ids(b) for b in whole]
    assert list(p.sequence(4, 1, 3, progress.begin(3))) == [], "a finished epoch resumes empty"


def test_a_resume_needs_the_same_slots_and_options(tmp_path: Path) -> None:
    lens = np.arange(1, 60)
    p = planner(lens, shards=write_shards(tmp_path, lens, 4))
    progress = StreamProgress(p)
    first = next(p.sequence(0, 0, 2, progress.begin(2)))
    progress.took(first.info, last=False)  # mid-epoch: the slots' positions are the state
    state = progress.state_dict()
    other = StreamProgress(p)
    other.load_state_dict(state)
    with pytest.raises(InputError, match=r"saved with 2 reading slot\(s\).*num_workers=3"):
        other.begin(3)
    seeded = planner(lens, shards=write_shards(tmp_path, lens, 4), seed=9)
    with pytest.raises(InputError, match=r"other options.*seed: saved 0, here 9"):
        StreamProgress(seeded).load_state_dict(state)
    with pytest.raises(InputError, match="missing keys"):
        StreamProgress(p).load_state_dict({"epoch": 0})


def test_blocks_pad_like_the_in_memory_planner() -> None:
    lens = np.minimum(np.ceil(np.random.default_rng(1).lognormal(4.0, 0.8, 60_000)), 1024)
    lens = lens.astype(np.int64)
    p = planner(lens, buffer_size=10_000, max_cost=20 * 512.0)
    batches = [[s[1] for s in b] for b in p.sequence(0)]
    stream = sum(map(sum, batches)) / sum(len(b) * max(b) for b in batches)
    memory = plan_stats(lens, plan_batches(lens, 20 * 512, cost="linear"), cost="linear")
    assert stream >= 0.95 * memory.padding_efficiency, (stream, memory.padding_efficiency)


def test_blocks_of_pairs_pad_each_side_like_the_in_memory_planner() -> None:
    """NOTE [ a stream of pairs ]: a block is the in-memory planner's plan of its pairs, its
    batches padded below 1 - 4 * bucket_width on a side cut: each side pads as in memory, for
    few more batches where a block holds the corpus (measured 1.06-1.11x at 10,000 pairs)."""
    pairs = lognormal_pairs(10_000, 0.7, seed=1, max_len=400)
    opts = {"cost": PairCost(), "max_cost": float(PairCost()(32, 40, 40)), "oversize": "alone"}
    memory = plan_batches(pairs, **opts)
    expected = plan_stats(pairs, memory)
    for buffer_size in (2_500, 10_000):
        p = planner(pairs, buffer_size=buffer_size, **opts)
        batches = [ids(b) for b in p.sequence(0)]
        got = plan_stats(pairs, batches)
        for side in ("source", "target"):
            key = f"{side}_padding_efficiency"
            assert getattr(got, key) >= 0.97 * getattr(expected, key), (buffer_size, side)
        if buffer_size == 10_000:
            assert len(batches) <= 1.2 * len(memory), "a block of the whole corpus"


def test_consecutive_steps_mix_lengths() -> None:
    """NOTE [ mixed steps in a stream ]: each round of 4 steps takes one from every stratum."""
    caps = {10: 128, 40: 32, 160: 8, 640: 2}  # linear budget 1280: 25 steps of each length
    lens = np.concatenate([np.full(cap * 25, length) for length, cap in caps.items()])
    np.random.default_rng(0).shuffle(lens)
    p = planner(lens, buffer_size=lens.size, max_cost=1280.0)
    longest = [max(s[1] for s in b) for b in p.sequence(0)]
    assert len(longest) == 100
    for k in range(0, 100, 4):
        assert sorted(longest[k : k + 4]) == [10, 40, 160, 640], longest[k : k + 4]
    plain = plan_batches(lens, 1280.0, cost="linear")  # the in-memory order: shuffled only
    runs = [sorted(lens[b].max() for b in list(plain)[k : k + 4]) for k in range(0, 100, 4)]
    assert any(r != [10, 40, 160, 640] for r in runs), "a plain shuffle does not guarantee it"


def test_shards_are_split_among_workers_and_read_once_per_rank(tmp_path: Path) -> None:
    lens = np.arange(1, 301)
    shards = write_shards(tmp_path, lens, 6)
    p = planner(lens, shards=shards, buffer_size=40)
    opened: list[str] = []

    def reader(path: str, start: int = 0):
        opened.append(Path(path).name)
        return read_jsonl(path, start)

    p.source = open_source(shards, reader)
    for w in range(3):
        assert list(p.worker_batches(0, 0, w, 3)), f"worker {w} has batches"
    assert sorted(opened) == sorted(s.name for s in shards), "each shard read once, by one worker"


def test_a_resume_skips_the_shards_before_it_unread(tmp_path: Path) -> None:
    lens = np.arange(1, 401)
    shards = write_shards(tmp_path, lens, 8)
    opened: list[tuple[str, int]] = []

    def reader(path: str, start: int = 0):
        opened.append((Path(path).name, start))
        return read_jsonl(path, start)

    p = planner(lens, shards=shards, buffer_size=30)
    p.source = open_source(shards, reader)
    whole = list(p.sequence(0, 0, 0))
    progress = StreamProgress(p)
    for k, batch in enumerate(p.sequence(0, 0, 0, progress.begin(0))):
        progress.took(batch.info, last=False)
        if k == len(whole) * 3 // 4:
            break
    state = progress.state_dict()
    opened.clear()
    fresh = StreamProgress(p)
    fresh.load_state_dict(state)
    rest = list(p.sequence(0, 0, 0, fresh.begin(0)))
    assert [ids(b) for b in rest] == [ids(b) for b in whole[len(whole) * 3 // 4 + 1 :]]
    shard, record = state["cursors"][0][1:3]
    assert len(opened) == 8 - shard and opened[0][1] == record, (
        "the resume opened only the shards from the block's, seeking to its first record"
    )


def test_epochs_differ_and_shards_are_shuffled(tmp_path: Path) -> None:
    lens = np.random.default_rng(2).integers(1, 100, 400)
    p = planner(lens, shards=write_shards(tmp_path, lens, 4), buffer_size=100)
    one, two = ([ids(b) for b in p.sequence(e)] for e in (0, 1))
    assert one != two
    assert p.source.shards(0, 0, 1) != p.source.shards(1, 0, 1) or p.source.shards(
        2, 0, 1
    ) != p.source.shards(0, 0, 1)


def test_updates_of_the_plan_and_the_count(tmp_path: Path) -> None:
    lens = np.random.default_rng(5).integers(1, 100, 300)
    p = planner(lens, buffer_size=100, update_size=32, max_batch_size=8, replicas=2)
    counted = count_epoch(p, 0)
    assert counted.samples.sum() == lens.size
    assert counted.updates(plan=True) == sum(-(-100 // 32) for _ in range(3)), (
        "each block of 100 makes ceil(100 / 32) updates, as an epoch of 100 would"
    )
    assert counted.updates(target=50) <= -(-lens.size // 50) + 1


# -- bad sources, named -------------------------------------------------------------------------
def gen():
    yield from [[1, 2]]


@pytest.mark.parametrize(
    ("source", "error", "match"),
    [
        (gen(), InputTypeError, r"source is a generator, which can be read only once"),
        (iter([[1]]), InputTypeError, r"source is a list_iterator, which can be read only once"),
        (42, InputTypeError, r"source must be a re-iterable .* got source=42 \(int, not iterable"),
        ([], InputError, r"source is empty"),
        ("data.jsonl", InputTypeError, r"source is a path .*reader=dynbatch.read_jsonl"),
    ],
)
def test_bad_sources_are_named(source: object, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        open_source(source)


def test_bad_shards_are_named(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"shard not found: .*nope.jsonl"):
        open_source([tmp_path / "nope.jsonl"], read_jsonl)
    with pytest.raises(InputTypeError, match="with a reader, source must be a list of shard"):
        open_source(str(tmp_path), read_jsonl)
    with pytest.raises(InputTypeError, match="reader must be callable"):
        open_source([tmp_path], "json")


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("7", InputTypeError),
        (0, InputError),
        (2.5, InputError),
        (None, InputTypeError),
        (True, InputTypeError),
        (-3, InputError),
        (float("nan"), InputError),
    ],
)
def test_lengths_that_cannot_be_counted_name_the_sample(value: object, error: type) -> None:
    samples = [5, 6, value, 7]
    p = StreamPlanner(
        open_source(samples), lambda s: s, PlanOptions(max_cost=100, cost="linear"), 10
    )
    with pytest.raises(error, match=r"length_fn must return a whole number .* at record 2 of"):
        list(p.sequence(0))


def test_a_sample_over_budget_is_named_by_where_it_is(tmp_path: Path) -> None:
    lens = np.array([3, 4, 500, 2])
    shards = write_shards(tmp_path, lens, 2)
    opts = PlanOptions(max_cost=100, cost="linear")
    p = StreamPlanner(open_source(shards, read_jsonl, shuffle_shards=False), lambda s: s[1], opts)
    with pytest.raises(
        InputError,
        match=r"record 0 of shard .*shard1.jsonl has length 500 .*"
        r"over max_cost=100. Raise max_cost",
    ):
        list(p.sequence(0))
    skip = StreamPlanner(p.source, lambda s: s[1], opts.replace(oversize="skip"))
    with pytest.warns(UserWarning, match="skipping 1 sample"):
        kept = sorted(i for b in skip.sequence(0) for i in ids(b))
    assert kept == [0, 1, 3]
    alone = StreamPlanner(p.source, lambda s: s[1], opts.replace(oversize="alone"))
    assert [2] in [ids(b) for b in alone.sequence(0)]


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"drop_last": True}, r"drop_last=True needs the epoch's batch count"),
        ({"equal_epochs": True}, r"equal_epochs=True needs the epoch's batch count"),
        ({"order": "ascending"}, r"order='ascending' would sort each block"),
    ],
)
def test_options_a_stream_cannot_honour_are_refused(options: dict, match: str) -> None:
    with pytest.raises(InputError, match=match):
        StreamPlanner(open_source([1]), len, PlanOptions(max_cost=10, **options))


def test_bad_planner_arguments() -> None:
    opts = PlanOptions(max_cost=10)
    with pytest.raises(InputTypeError, match="length_fn must be callable"):
        StreamPlanner(open_source([1]), None, opts)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"buffer_size must be an integer >= 1, got buffer_size=0"):
        StreamPlanner(open_source([1]), len, opts, buffer_size=0)
    with pytest.raises(InputTypeError, match="source\\(0\\) must return an iterable"):
        list(StreamPlanner(open_source(lambda e: 3), len, opts).sequence(0))


def test_dynbatch_stats_has_a_row_for_a_stream(tmp_path: Path, capsys) -> None:
    from dynbatch.cli import main

    lens = np.random.default_rng(4).integers(1, 300, 3000)
    np.save(tmp_path / "l.npy", lens)
    args = ["stats", str(tmp_path / "l.npy"), "--max-cost", "20000", "--cost", "linear"]
    assert main([*args, "--buffer-size", "500", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    stream = rows["stream 500"]
    expected = planner(lens, buffer_size=500, max_cost=20000.0)
    assert stream["batches"] == len(list(expected.sequence(0)))
    assert stream["padding_efficiency"] >= 0.95 * rows["bucket"]["padding_efficiency"]
    assert main([*args, "--buffer-size", "0"]) == 2
    assert "--buffer-size must be an integer >= 1, got --buffer-size=0" in capsys.readouterr().err


def test_batches_stay_multiples_but_one_a_block() -> None:
    lens = np.random.default_rng(6).integers(1, 400, 5000)
    p = planner(lens, buffer_size=1000, max_cost=20000.0, batch_size_multiple=8, cost="linear")
    by_block: dict[int, list[int]] = {}
    for b in p.sequence(0):
        by_block.setdefault(b.info.block, []).append(len(b))
    for block, sizes in by_block.items():
        odd = [n for n in sizes if n % 8]
        assert len(odd) <= 1, f"block {block}: {odd} are not multiples of 8"


def test_after_set_epoch_the_state_is_the_coming_pass_not_the_finished_one() -> None:
    lens = np.arange(1, 200)
    p = planner(lens, buffer_size=40, replicas=2)
    progress = StreamProgress(p)
    progress.set_epoch(3)
    for batch in p.sequence(3, 0, 0, progress.begin(0)):
        progress.took(batch.info, last=False)
    done = progress.state_dict()
    assert all(c[-1] for c in done["cursors"]), "the finished pass: every slot done"
    progress.set_epoch(3)  # the same epoch again, nothing taken yet
    fresh = StreamProgress(p)
    fresh.load_state_dict(progress.state_dict())
    again = list(p.sequence(3, 0, 0, fresh.begin(0)))
    assert [ids(b) for b in again] == [ids(b) for b in p.sequence(3, 0, 0)], "the whole epoch"


def test_a_callable_source_that_takes_no_epoch_is_named() -> None:
    """A generator function without the epoch argument is the likely slip; it is named when
    the source is opened, not as a bare TypeError inside a DataLoader worker."""

    def corpus():  # type: ignore[no-untyped-def]
        yield from [[1, 2], [3]]

    with pytest.raises(InputTypeError, match=r"source must be called as source\(epoch\).*corpus"):
        open_source(corpus)
    assert open_source(lambda epoch, *rest: []).kind == "callable"
    assert open_source(lambda *args: []).kind == "callable"


def update_sizes(p: StreamPlanner, workers: int) -> list[int]:
    """The samples of each update as the accumulator makes them: the steps in the order the
    DataLoader yields them, an update ending at a step its plan ends one (or the last)."""
    sizes, running = [], 0
    batches = list(p.sequence(0, 0, workers))
    for k, batch in enumerate(batches):
        running += batch.info.samples
        if batch.info.update_end or k == len(batches) - 1:
            sizes.append(running)
            running = 0
    return sizes


def test_update_size_holds_with_one_reader_of_the_shards(tmp_path: Path) -> None:
    lens = np.random.default_rng(0).integers(1, 200, 4000)
    p = planner(lens, shards=write_shards(tmp_path, lens, 4), buffer_size=500, update_size=64)
    one = update_sizes(p, 1)
    assert max(one) <= 1.25 * 64 and min(one[:-1]) >= 0.75 * 64, "one reader: the plan's updates"
    several = update_sizes(p, 2)  # what a loader of 2 workers would take: refused there
    assert max(several) > 1.25 * 64 or min(several[:-2]) < 0.75 * 64, "interleaved plans"


@pytest.mark.parametrize("when", ["before the first pass", "after set_epoch(e + 1)"])
def test_a_state_saved_between_passes_loads_under_the_workers_that_saved_it(
    tmp_path: Path, when: str
) -> None:
    """A state at the start of an epoch holds no slot's position: it loads under any
    num_workers, and the next pass is the whole epoch."""
    lens = np.random.default_rng(2).integers(1, 200, 300)
    p = planner(lens, buffer_size=40, shards=write_shards(tmp_path, lens, 4))
    progress = StreamProgress(p)
    if when == "after set_epoch(e + 1)":
        for batch in p.sequence(0, 0, 2, progress.begin(2)):
            progress.took(batch.info, last=False)
        progress.set_epoch(1)
    state = json.loads(json.dumps(progress.state_dict()))
    epoch = state["epoch"]
    for workers in (2, 0, 3):
        fresh = StreamProgress(p)
        fresh.load_state_dict(state)
        got = list(p.sequence(epoch, 0, workers, fresh.begin(workers)))
        assert [ids(b) for b in got] == [ids(b) for b in p.sequence(epoch, 0, workers)], workers


def test_the_steps_of_a_block_come_in_rounds_that_span_its_quartiles() -> None:
    """NOTE [ mixed steps in a stream ] promises the rounds (steps 4k..4k+3 of a block), not
    any 4 consecutive steps: a window across two rounds may miss a quartile."""
    caps = {10: 128, 40: 32, 160: 8, 640: 2}
    lens = np.concatenate([np.full(cap * 25, length) for length, cap in caps.items()])
    np.random.default_rng(0).shuffle(lens)
    p = planner(lens, buffer_size=lens.size, max_cost=1280.0)
    longest = [max(s[1] for s in b) for b in p.sequence(0)]
    rounds = [sorted(longest[k : k + 4]) for k in range(0, 100, 4)]
    assert all(r == [10, 40, 160, 640] for r in rounds), "every round spans the quartiles"
    across = [sorted(set(longest[k : k + 4])) for k in range(100 - 3) if k % 4]
    assert any(len(w) < 4 for w in across), "a window across rounds is not promised to"


def test_a_length_fn_that_raises_names_the_sample(tmp_path: Path) -> None:
    lens = np.array([3, 4, 5, 6])
    shards = write_shards(tmp_path, lens, 2)
    source = open_source(shards, read_jsonl, shuffle_shards=False)

    def length_fn(sample: list) -> int:
        return {3: 3, 4: 4, 6: 6}[sample[1]]  # no 5: a KeyError on the third record

    p = StreamPlanner(source, length_fn, PlanOptions(max_cost=100, cost="linear"))
    with pytest.raises(
        InputError,
        match=r"length_fn raised KeyError\(5\) on the sample at record 0 of shard "
        r".*shard1.jsonl",
    ):
        list(p.sequence(0))


def test_a_reader_that_raises_is_named_with_its_shard(tmp_path: Path) -> None:
    lens = np.array([3, 4, 5, 6])
    shards = write_shards(tmp_path, lens, 2)

    def reader(path: Path) -> list:
        rows = list(read_jsonl(path))
        if path.name == "shard1.jsonl":
            raise OSError("disk gone")
        return rows

    p = StreamPlanner(
        open_source(shards, reader, shuffle_shards=False),
        lambda s: s[1],
        PlanOptions(max_cost=100, cost="linear"),
    )
    with pytest.raises(
        InputError,
        match=r"reader raised OSError\('disk gone'\) reading shard "
        r".*shard1.jsonl at record 0 \(epoch 0\)",
    ):
        list(p.sequence(0))


def test_a_stream_whose_every_sample_is_over_budget_says_so() -> None:
    opts = PlanOptions(max_cost=10, cost="linear", oversize="skip")
    p = StreamPlanner(open_source([[1] * 20, [1] * 30, [1] * 40]), len, opts, buffer_size=2)
    with (
        pytest.warns(UserWarning),
        pytest.raises(
            InputError,
            match=r"all 3 samples of epoch 0 are over max_cost=10 alone.*oversize='skip'",
        ),
    ):
        list(p.sequence(0))


@pytest.mark.parametrize("grouped", [False, True], ids=["random", "group_by_length"])
@pytest.mark.parametrize("replicas", [1, 2])
def test_a_time_model_splits_each_blocks_updates_as_in_memory(grouped: bool, replicas: int) -> None:
    """time_model and group_by_length are honoured: a block's plan is plan_split_updates' plan
    of the block's lengths, so each update is the fixed batch's, cut at the step time."""
    from dynbatch.plan.splits import plan_split_updates
    from dynbatch.stream.blocks import block_key

    lens = np.random.default_rng(5).integers(1, 300, 1000)
    model = "0.01,1e-6,1e-8"
    p = planner(
        lens,
        buffer_size=256,
        replicas=replicas,
        max_cost=300.0 * 16,
        update_size=16,
        time_model=model,
        group_by_length=grouped,
    )
    ranks = run_epoch(p, 0, 0)
    check_epoch(p, lens, ranks)
    plain = planner(lens, buffer_size=256, replicas=replicas, max_cost=300.0 * 16, update_size=16)
    assert [ids(b) for b in ranks[0]] != [ids(b) for b in plain.sequence(0)], "not ignored"
    block = lens[256:512]
    expected = plan_split_updates(block, p.options, block_key(0, 0, 1), replicas)
    got = [b for b in ranks[0] if b.info.block == 1]
    mine = expected.for_rank(0)
    assert [ids(b) for b in got] == [[256 + int(i) for i in batch] for batch in mine]
    sizes, running = [], 0
    for b in ranks[0]:
        running += b.info.samples
        if b.info.update_end:
            sizes.append(running)
            running = 0
    assert set(sizes[:-1]) == {16}, "every update but a block's last holds update_size samples"


def test_a_stream_of_pairs_skips_the_pairs_over_budget() -> None:
    """oversize='skip' drops the pair over budget alone and keeps the others (the mask of the
    kept samples had a place per side, two a pair)."""
    lens = np.array([[3, 4], [50, 60], [2, 2], [5, 1]])
    p = planner(lens, buffer_size=4, max_cost=40.0, oversize="skip")
    with pytest.warns(UserWarning, match=r"\(source, target\) lengths \(50, 60\)"):
        got = sorted(i for b in p.sequence(0) for i in ids(b))
    assert got == [0, 2, 3], "every pair but the one over budget"
