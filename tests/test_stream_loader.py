"""DynamicBatchIterable under real paddle DataLoaders: workers, ranks, resume, the accumulator."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import paddle
import pytest
from deadline import run_within

import dynbatch
from dynbatch import DynamicBatchIterable, InputError, InputTypeError

N = 600
LENS = np.minimum(np.ceil(np.random.default_rng(0).lognormal(3.2, 0.8, N)), 120).astype(int)
SAMPLES = [{"id": i, "ids": list(range(1, int(n) + 1))} for i, n in enumerate(LENS)]


def length(sample: dict) -> int:
    return len(sample["ids"])


def collate(samples: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    ids = dynbatch.Pad(pad_val=0)([np.asarray(s["ids"], dtype="int64") for s in samples])
    return ids, np.asarray([s["id"] for s in samples], dtype="int64")


def stream(source: object = SAMPLES, **kw: object) -> DynamicBatchIterable:
    args = {"length_fn": length, "max_cost": 2000, "cost": "linear", "buffer_size": 128}
    args.update(kw)
    return DynamicBatchIterable(source, **args)  # type: ignore[arg-type]


def write_shards(tmp: Path, count: int = 5) -> list[Path]:
    paths = []
    for k, part in enumerate(np.array_split(np.arange(N), count)):
        path = tmp / f"part{k}.jsonl"
        path.write_text("".join(json.dumps(SAMPLES[i]) + "\n" for i in part))
        paths.append(path)
    return paths


def ids_of(loader: object) -> list[list[int]]:
    return [index.numpy().tolist() for _, index in loader]  # type: ignore[attr-defined]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("sharded", [False, True], ids=["iterable", "shards"])
def test_a_real_dataloader_yields_the_planned_batches_in_order(
    tmp_path: Path, workers: int, sharded: bool
) -> None:
    source = write_shards(tmp_path) if sharded else SAMPLES
    kw = {"reader": dynbatch.read_jsonl} if sharded else {}
    it = stream(source, num_replicas=1, rank=0, **kw)
    got = ids_of(it.loader(collate, num_workers=workers))
    planned = [[s["id"] for s in b] for b in it.planner.sequence(0, 0, workers)]
    assert got == planned, "paddle's DataLoader takes the workers' batches in turn, as planned"
    assert sorted(i for b in got for i in b) == list(range(N)), "every sample exactly once"
    plain = paddle.io.DataLoader(it, batch_size=None, num_workers=workers, collate_fn=collate)
    assert ids_of(plain) == planned, "a DataLoader built by hand yields the same lists of samples"


@pytest.mark.parametrize("workers", [0, 2])
def test_two_ranks_share_every_sample_in_equal_steps(workers: int) -> None:
    ranks = [
        ids_of(stream(num_replicas=2, rank=r, seed=5).loader(collate, num_workers=workers))
        for r in range(2)
    ]
    assert len(ranks[0]) == len(ranks[1]) > 0, "the same number of steps on both ranks"
    assert sorted(i for r in ranks for b in r for i in b) == list(range(N))


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("sharded", [False, True], ids=["iterable", "shards"])
def test_resume_mid_epoch_under_workers_yields_the_rest(
    tmp_path: Path, workers: int, sharded: bool
) -> None:
    source = write_shards(tmp_path) if sharded else SAMPLES
    kw = {"reader": dynbatch.read_jsonl} if sharded else {}
    first = stream(source, seed=3, num_replicas=1, rank=0, **kw)
    first.set_epoch(2)
    whole = ids_of(first.loader(collate, num_workers=workers))
    first.set_epoch(2)
    taken = []
    for k, (_, index) in enumerate(first.loader(collate, num_workers=workers)):
        taken.append(index.numpy().tolist())
        if k == 6:
            state = first.state_dict()  # after the 7th batch was trained
            break
    again = stream(source, seed=3, num_replicas=1, rank=0, **kw)
    again.load_state_dict(json.loads(json.dumps(state)))
    again.set_epoch(2)
    rest = ids_of(again.loader(collate, num_workers=workers))
    assert taken + rest == whole, "the same remaining batches as the uninterrupted run"
    assert again.current_pass().start == 7


def test_the_accumulator_follows_a_stream_to_its_target() -> None:
    paddle.seed(0)
    model = paddle.nn.Sequential(paddle.nn.Embedding(200, 4), paddle.nn.Linear(4, 1))
    opt = paddle.optimizer.SGD(0.01, parameters=model.parameters())
    it = stream(num_replicas=1, rank=0)
    acc = dynbatch.GradientAccumulator(model, opt, sampler=it, target=64)
    expected = acc.steps_for_epochs([0])  # a first pass
    counted = it.count(0)
    assert expected == counted.updates(target=64) > 1
    sizes, window = [], 0
    for ids, _ in it.loader(collate):
        with acc.accumulate():
            loss = model(ids).sum(axis=[1, 2])
            window += ids.shape[0]
            if acc.backward(loss.sum(), count=ids.shape[0]):
                sizes.append(window)
                window = 0
    assert acc.optimizer_steps == expected, "the first pass counted the updates taken"
    assert all(s >= 64 for s in sizes[:-1]) and sum(sizes) == N
    assert acc.last_count == sizes[-1], "the epoch's last step ends the last update"


def sizes(samples: list[dict]) -> np.ndarray:
    return np.asarray([len(samples)])  # paddle's DataLoader drops a batch that holds no array


def test_the_accumulator_follows_the_plans_updates_and_refuses_a_hand_built_loader() -> None:
    model = paddle.nn.Linear(2, 1)
    opt = paddle.optimizer.SGD(0.01, parameters=model.parameters())
    it = stream(update_size=40, max_batch_size=8, num_replicas=1, rank=0)
    acc = dynbatch.GradientAccumulator(model, opt, sampler=it)
    with pytest.raises(InputError, match=r"iterate stream.loader\(...\)"), acc.accumulate():
        pass
    for size in it.loader(sizes):
        n = int(size[0])
        with acc.accumulate():
            acc.backward(model(paddle.ones([n, 2])).sum(), count=n)
    assert acc.optimizer_steps == it.count(0).updates(plan=True) == acc.steps_per_epoch(0) > 1
    size = next(iter(it.loader(sizes)))
    n = int(size[0])
    acc.backward(model(paddle.ones([n, 2])).sum(), count=n)
    with pytest.raises(InputError, match="backward was already called for step 0"):
        acc.backward(model(paddle.ones([n, 2])).sum(), count=n)


def test_a_jsonl_corpus_read_line_by_line(tmp_path: Path) -> None:
    (path,) = write_shards(tmp_path, 1)
    it = DynamicBatchIterable(
        [path], reader=dynbatch.read_jsonl, length_fn=length, max_cost=1500, cost="linear"
    )
    batches = ids_of(it.loader(collate, num_workers=2))
    assert sorted(i for b in batches for i in b) == list(range(N))


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: stream(length_fn=None), InputError, r"pass length_fn=callable\(sample\)"),
        (lambda: stream(max_cost=None), InputError, r"DynamicBatchIterable needs max_cost"),
        (lambda: stream(iter(SAMPLES)), InputTypeError, r"can be read only once"),
        (lambda: stream([]), InputError, r"source is empty"),
        (lambda: stream(rank=2, num_replicas=2), InputError, r"rank must be in \[0, 1\]"),
        (lambda: stream(drop_last=True), InputError, r"drop_last=True needs the epoch's"),
        (lambda: stream(buffer_size=0), InputError, r"buffer_size must be an integer >= 1"),
        (
            lambda: stream().loader(collate, persistent_workers=True),
            InputError,
            r"persistent_workers=True keeps the workers",
        ),
        (
            lambda: stream().loader(collate, batch_size=4),
            InputError,
            r"batch_size is the stream's business",
        ),
    ],
)
def test_bad_streams_are_named(call: object, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        call()  # type: ignore[operator]


def test_an_empty_stream_and_a_bad_length_fail_when_read(tmp_path: Path) -> None:
    with pytest.raises(InputTypeError, match=r"got '3' for the sample at record 1 of the stream"):
        next(iter(stream([{"n": 2}, {"n": "3"}], length_fn=lambda s: s["n"])))
    with pytest.raises(InputError, match=r"yielded no samples in epoch 0: there is nothing"):
        next(iter(stream(lambda epoch: [])))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    shards = stream([empty, empty], reader=dynbatch.read_jsonl)
    with pytest.raises(InputError, match=r"source \(2 shard\(s\)\) yielded no samples"):
        next(iter(shards.loader(collate, num_workers=2)))


def test_a_first_pass_counts_the_loaders_workers_before_it_runs(tmp_path: Path) -> None:
    it = stream(write_shards(tmp_path, 6), reader=dynbatch.read_jsonl, num_replicas=1, rank=0)
    loader = it.loader(collate, num_workers=3)  # three slots of two shards each
    counted = it.count(0)
    steps = ids_of(loader)
    assert counted.steps == len(steps) and counted.samples.tolist() == [len(b) for b in steps]


class Corpus(paddle.io.IterableDataset):  # type: ignore[misc]
    """A paddle IterableDataset read anew each pass (its len() raises, as paddle's does)."""

    def __iter__(self):  # type: ignore[no-untyped-def]
        yield from SAMPLES


def test_a_paddle_iterable_dataset_is_a_source() -> None:
    it = stream(Corpus(), num_replicas=1, rank=0)
    batches = ids_of(it.loader(collate, num_workers=2))
    assert sorted(i for b in batches for i in b) == list(range(N))


def test_a_collate_without_an_array_loses_no_batch() -> None:
    """paddle's DataLoader drops a batch whose collated value holds no array; the loader's
    does not (texts for a tokenizer in the main process, say)."""
    it = stream(num_replicas=1, rank=0)
    for workers in (0, 2):
        got = list(it.loader(lambda samples: [s["id"] for s in samples], num_workers=workers))
        assert sorted(i for b in got for i in b) == list(range(N))


def test_a_first_pass_before_the_loader_exists_asks_for_its_workers(tmp_path: Path) -> None:
    """The slots of a sharded source depend on the loader's workers: a count made before
    stream.loader(...) would silently count for another number of workers."""
    it = stream(write_shards(tmp_path, 6), reader=dynbatch.read_jsonl, num_replicas=1, rank=0)
    with pytest.raises(InputError, match=r"count\(num_workers=\.\.\.\).*stream.loader"):
        it.count(0)
    with pytest.raises(InputError, match=r"num_workers"):
        it.steps_for_epochs(range(2))
    assert it.count(0, num_workers=3).steps == it.count(0, num_workers=3).steps > 0
    loader = it.loader(collate, num_workers=3)
    assert it.count(0).steps == len(ids_of(loader)), "once the loader exists, its workers count"
    assert stream(num_replicas=1, rank=0).count(0).steps > 0, "a stream without shards: any"


def test_steps_for_epochs_checks_its_unit() -> None:
    it = stream(num_replicas=1, rank=0)
    with pytest.raises(InputError, match=r"unit must be one of .*samples.*tokens.*got unit='x'"):
        it.steps_for_epochs(range(1), target=64, unit="x")
    tokens = it.steps_for_epochs(range(1), target=4000, unit="tokens")
    assert tokens == it.count(0).updates(4000, "tokens") > 0


def test_a_source_that_reads_differently_each_time_is_named() -> None:
    """Every DataLoader worker reads a stream without shards in full, so a source that yields
    another order on every read (an unseeded shuffle) would duplicate and drop samples."""
    import random

    def shuffled(epoch: int) -> list[dict]:
        samples = list(SAMPLES)
        random.Random().shuffle(samples)  # a new order on every read: not a function of epoch
        return samples

    it = stream(shuffled, num_replicas=1, rank=0)
    with pytest.raises(InputError, match=r"source .* yielded other samples .* epoch 0.*seed"):
        ids_of(it.loader(collate, num_workers=2))

    def seeded(epoch: int) -> list[dict]:
        samples = list(SAMPLES)
        random.Random(epoch).shuffle(samples)
        return samples

    got = ids_of(stream(seeded, num_replicas=1, rank=0).loader(collate, num_workers=2))
    assert sorted(i for b in got for i in b) == list(range(N))


def test_updates_of_a_sharded_source_read_by_several_workers_are_refused(tmp_path: Path) -> None:
    shards = write_shards(tmp_path, 4)
    it = stream(shards, reader=dynbatch.read_jsonl, num_replicas=1, rank=0, update_size=16)
    it.loader(num_workers=1)  # one reader: the plan's updates hold
    with pytest.raises(dynbatch.InputError, match=r"update_size=16 with a sharded source read by"):
        it.loader(num_workers=2)
    plain = stream(shards, reader=dynbatch.read_jsonl, num_replicas=1, rank=0)
    plain.loader(num_workers=2)  # no update_size: GradientAccumulator(target=...) closes them


@pytest.mark.parametrize("how", ["for batch in stream", "list(stream)"])
def test_a_stream_iterated_directly_resumes_after_what_it_yielded(how: str) -> None:
    it = stream(num_replicas=1, rank=0, seed=4)
    whole = [[s["id"] for s in b] for b in it.planner.sequence(0)]
    if how == "list(stream)":
        taken = [[s["id"] for s in b] for b in list(it)]
        assert taken == whole
        k = len(whole)
    else:
        taken, k = [], 5
        for batch in it:
            taken.append([s["id"] for s in batch])
            if len(taken) == k:
                break
    state = it.state_dict()
    assert state["steps"] == k, "the state records the batches the loop took"
    again = stream(num_replicas=1, rank=0, seed=4)
    again.load_state_dict(state)
    assert taken + [[s["id"] for s in b] for b in again] == whole


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("before", ["nothing", "list(stream)"])
def test_a_hand_built_loader_then_state_dict_is_refused(before: str, workers: int) -> None:
    """Its thread or its workers read ahead of the loop, so what training took is not known;
    its workers are other processes, yet the stream they were forked from learns of them."""
    it = stream(num_replicas=1, rank=0)
    if before == "list(stream)":
        list(it)
    plain = paddle.io.DataLoader(it, batch_size=None, num_workers=workers, collate_fn=collate)
    batches = iter(plain)
    for _ in range(3):
        next(batches)
    del batches
    with pytest.raises(
        InputError,
        match=r"state_dict\(\).*DataLoader built by hand.*"
        r"stream.loader\(collate_fn, num_workers=...\)",
    ):
        it.state_dict()
    it.set_epoch(1)  # a new epoch starts from its beginning: known again
    assert it.state_dict()["steps"] == 0


FAILING = """
import sys
sys.path.insert(0, {tests!r})
import dynbatch
from test_stream_loader import SAMPLES, collate, stream

def length_fn(sample):
    if sample["id"] == 300:
        raise KeyError("ids")
    return len(sample["ids"])

it = stream(length_fn=length_fn, num_replicas=1, rank=0)
try:
    for _ in it.loader(collate, num_workers={workers}):
        pass
except dynbatch.InputError as exc:
    print("RAISED", type(exc).__name__, exc)
"""


@pytest.mark.parametrize("workers", [0, 2])
def test_an_error_in_length_fn_is_raised_by_the_loader_not_hung(workers: int) -> None:
    """paddle's loader thread prints an error in the dataset and waits forever; its workers
    turn it into a bare SystemError. The stream hands the error to the loader to raise."""
    import subprocess
    import sys

    code = FAILING.format(tests=str(Path(__file__).parent), workers=workers)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=240, check=False
    )
    assert (
        "RAISED InputError length_fn raised KeyError('ids') on the sample at record 300 of "
        "the stream" in done.stdout
    ), done.stdout + done.stderr[-2000:]


COLLATE_FAILS = """
import sys
sys.path.insert(0, {tests!r})
import dynbatch
from test_stream_loader import collate, stream

def packed(samples):
    if any(s["id"] == 300 for s in samples):
        return dynbatch.PackCollator(8)([{{"input_ids": [1], "id": 300}}])
    return collate(samples)

it = stream(num_replicas=1, rank=0)
taken = 0
try:
    for _ in it.loader(packed, num_workers={workers}):
        taken += 1
except Exception as exc:
    print("RAISED", type(exc).__name__, "|", exc)
    print("CAUSE", type(exc.__cause__).__name__, "|", str(exc.__cause__).splitlines()[0])
print("TAKEN", taken)
"""


@pytest.mark.parametrize("workers", [0, 2])
def test_a_collate_error_is_raised_by_the_loader_by_name(workers: int) -> None:
    """paddle's loader hangs when its collate_fn raises (num_workers=0) or raises a bare
    SystemError (workers): the stream's loader raises the collator's own error, naming it
    (NOTE [ a collate error in paddle's DataLoader ] in dynbatch.paddle.safe_collate)."""
    done = run_within(240, COLLATE_FAILS.format(tests=str(Path(__file__).parent), workers=workers))
    out = done.stdout
    assert "RAISED InputError | samples[0] has the field 'id', which the packed rows" in out, (
        out + done.stderr[-3000:]
    )
    assert re.search(
        r"CAUSE CollateError \| the collate_fn __main__.packed \(on \d+ samples\)", out
    )
    assert int(out.split("TAKEN ")[1]) > 0, "the batches before it arrive"


@pytest.mark.filterwarnings("ignore:skipping")
def test_shards_whose_every_sample_is_skipped_over_budget_say_so(tmp_path: Path) -> None:
    it = stream(write_shards(tmp_path, 2), reader=dynbatch.read_jsonl, max_cost=1, oversize="skip")
    with pytest.raises(InputError, match=r"yielded no batch in epoch 0: .*oversize='skip' skipped"):
        next(iter(it.loader(collate, num_workers=2)))


# -- a stream of (source, target) pairs (NOTE [ a stream of pairs ]) -----------------------------
TARGETS = np.minimum(np.ceil(LENS * np.random.default_rng(1).uniform(0.5, 2.0, N)), 200)
PAIRS = [{**s, "labels": list(range(1, int(t) + 1))} for s, t in zip(SAMPLES, TARGETS, strict=True)]


def pair_length(sample: dict) -> tuple[int, int]:
    return len(sample["ids"]), len(sample["labels"])


def pair_collate(samples: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    pad = dynbatch.Pad(pad_val=0)
    source = pad([np.asarray(s["ids"], dtype="int64") for s in samples])
    target = pad([np.asarray(s["labels"], dtype="int64") for s in samples])
    return source, target, np.asarray([s["id"] for s in samples], dtype="int64")


def pair_ids(loader: object) -> list[list[int]]:
    return [index.numpy().tolist() for _, _, index in loader]  # type: ignore[attr-defined]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_stream_of_pairs_under_ranks_workers_and_a_resume(tmp_path: Path, workers: int) -> None:
    """Each pair once over two ranks in equal steps, each batch within the budget of both
    sides, and a resume mid-epoch yields exactly the rest, under a real DataLoader."""
    paths = []
    for k, part in enumerate(np.array_split(np.arange(N), 4)):
        paths.append(tmp_path / f"pairs{k}.jsonl")
        paths[-1].write_text("".join(json.dumps(PAIRS[i]) + "\n" for i in part))
    kw = {"length_fn": pair_length, "cost": dynbatch.PairCost(), "max_cost": 3e5}
    kw.update(reader=dynbatch.read_jsonl, buffer_size=150, seed=4)
    ranks = []
    for r in range(2):
        it = stream(paths, num_replicas=2, rank=r, **kw)
        ranks.append([b for b in it.loader(pair_collate, num_workers=workers)])
    assert len(ranks[0]) == len(ranks[1]) > 0, "the same number of steps on both ranks"
    seen = [i for rank in ranks for _, _, index in rank for i in index.numpy().tolist()]
    assert len(seen) >= N and set(seen) == set(range(N)), "every pair, repeats only to even"
    for rank in ranks:
        for source, target, _ in rank:
            n, ls = source.shape
            assert dynbatch.PairCost()(n, ls, target.shape[1]) <= 3e5 or n == 1, "within budget"
    first = stream(paths, num_replicas=1, rank=0, **kw)
    whole = pair_ids(first.loader(pair_collate, num_workers=workers))
    taken = []
    for k, (_, _, index) in enumerate(first.loader(pair_collate, num_workers=workers)):
        taken.append(index.numpy().tolist())
        if k == 4:
            state = first.state_dict()
            break
    again = stream(paths, num_replicas=1, rank=0, **kw)
    again.load_state_dict(json.loads(json.dumps(state)))
    rest = pair_ids(again.loader(pair_collate, num_workers=workers))
    assert taken + rest == whole, "the same remaining batches as the uninterrupted run"
