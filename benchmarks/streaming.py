"""Streams side by side: padding against the in-memory planner and lhotse, speed, memory.

python benchmarks/streaming.py

* padding efficiency and batch counts of ``DynamicBatchIterable``'s planner (buffer 10,000)
  against the in-memory bucket planner on the same lengths, and against lhotse's
  ``DynamicBucketingSampler`` (buffer 10,000, 30 buckets) where lhotse is importable
  (``pip install lhotse``: measured with it, never a dependency of dynbatch);
* samples per second through the batcher alone (lengths in, batches of samples out), against
  the in-memory sampler's epoch (plan, shard, yield every batch) on the same lengths;
* the peak of Python's allocator (tracemalloc) over a whole epoch read from a generator, for
  the same buffer over 10x more samples.

Every corpus but ChnSentiCorp is one the planner was not tuned on.
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable, Iterator

import numpy as np
from _common import BUDGET, chnsenticorp_lengths, print_table

from dynbatch import PlanOptions, plan_batches
from dynbatch.plan.epochs import Epochs
from dynbatch.stream.planner import StreamPlanner
from dynbatch.stream.sources import open_source
from dynbatch.stream.state import count_epoch

BUFFER = 10_000
TOKENS = 8192.0  # the linear budget: padded tokens per batch
SIZE = 300_000


def corpora() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    chn = chnsenticorp_lengths()
    return {
        "ChnSentiCorp": chn,
        "ChnSentiCorp x40, shuffled": rng.permutation(np.tile(chn, 40)),
        "lognormal(4, 0.8) <= 1024": np.minimum(np.ceil(rng.lognormal(4, 0.8, SIZE)), 1024),
        "uniform 2..512": rng.integers(2, 513, SIZE),
        "bimodal 20 / 300": np.concatenate(
            [rng.normal(20, 5, SIZE // 2), rng.normal(300, 60, SIZE - SIZE // 2)]
        ).clip(2, 512)[rng.permutation(SIZE)],
        "pareto tail <= 4096": np.minimum(np.ceil(8 * (1 + rng.pareto(1.2, SIZE))), 4096),
        # held out: short texts (queries, tweets), a spread of short and long, long documents
        "held out: short lognormal(2.5, 0.5) <= 64": np.minimum(
            np.ceil(rng.lognormal(2.5, 0.5, SIZE)), 64
        ),
        "held out: geometric(0.02) <= 2048": np.minimum(rng.geometric(0.02, SIZE) + 1, 2048),
        "held out: long lognormal(6, 0.6) <= 4096": np.minimum(
            np.ceil(rng.lognormal(6, 0.6, SIZE)), 4096
        ),
    }


def efficiency(lengths: np.ndarray, batches: list[np.ndarray]) -> float:
    real = sum(int(lengths[b].sum()) for b in batches)
    padded = sum(len(b) * int(lengths[b].max()) for b in batches)
    return real / padded


def stream_batches(lengths: np.ndarray, options: PlanOptions) -> list[np.ndarray]:
    planner = StreamPlanner(open_source(range(lengths.size)), lengths.__getitem__, options, BUFFER)
    return [np.asarray(b) for b in planner.sequence(0)]


def lhotse_batches(lengths: np.ndarray) -> list[np.ndarray] | None:
    try:
        from lhotse import CutSet, MonoCut
        from lhotse.dataset.sampling import DynamicBucketingSampler
    except ImportError:
        return None
    cuts = CutSet.from_cuts(
        MonoCut(id=str(i), start=0.0, duration=float(n), channel=0) for i, n in enumerate(lengths)
    )
    sampler = DynamicBucketingSampler(
        cuts,
        max_duration=TOKENS,
        num_buckets=30,
        buffer_size=BUFFER,
        shuffle=True,
        seed=0,
        world_size=1,
        rank=0,
    )
    return [np.asarray([int(c.id) for c in batch]) for batch in sampler]


def padding_table() -> None:
    rows = []
    have_lhotse = True
    for name, raw in corpora().items():
        lengths = np.asarray(raw, dtype=np.int64)
        for cost, budget in (("quadratic", BUDGET), ("linear", TOKENS)):
            options = PlanOptions(max_cost=budget, cost=cost, oversize="alone")
            memory = list(plan_batches(lengths, options=options))
            stream = stream_batches(lengths, options)
            e_mem, e_stream = efficiency(lengths, memory), efficiency(lengths, stream)
            peer = "-"
            if cost == "linear" and have_lhotse:
                lhotse = lhotse_batches(lengths)
                have_lhotse = lhotse is not None
                if lhotse is not None:
                    peer = f"{efficiency(lengths, lhotse):.3f} ({len(lhotse):,})"
            rows.append(
                [
                    name,
                    f"{lengths.size:,}",
                    f"{cost} <= {budget:g}",
                    f"{e_mem:.3f} ({len(memory):,})",
                    f"{e_stream:.3f} ({len(stream):,})",
                    f"{e_stream / e_mem:.3f}",
                    peer,
                ]
            )
    print(f"padding efficiency (batches); stream and lhotse buffer {BUFFER:,}")
    if not have_lhotse:
        print("lhotse is not installed: its column is left out (pip install lhotse to measure it)")
    print_table(
        [
            "corpus",
            "samples",
            "budget",
            "in-memory bucket",
            "stream",
            "stream / in-memory",
            "lhotse DynamicBucketingSampler",
        ],
        rows,
    )


def buffer_table() -> None:
    """Where a batch holds thousands of samples, a block of 10,000 holds few batches: the
    short held-out corpus under n*L^2 at a larger buffer."""
    lengths = np.asarray(corpora()["held out: short lognormal(2.5, 0.5) <= 64"], dtype=np.int64)
    options = PlanOptions(max_cost=BUDGET, cost="quadratic", oversize="alone")
    memory = len(list(plan_batches(lengths, options=options)))
    rows = []
    for buffer in (10_000, 100_000):
        planner = StreamPlanner(
            open_source(range(lengths.size)), lengths.__getitem__, options, buffer
        )
        batches = [np.asarray(b) for b in planner.sequence(0)]
        rows.append(
            [
                f"{buffer:,}",
                f"{efficiency(lengths, batches):.3f}",
                f"{len(batches):,}",
                f"{len(batches) / memory:.2f}",
            ]
        )
    print(f"\nshort lognormal(2.5, 0.5) <= 64 under n*L^2: in memory {memory} batches")
    print_table(["buffer", "padding efficiency", "batches", "batches / in-memory"], rows)


def best(fn: Callable[[], int], repeat: int = 3) -> tuple[float, int]:
    times, n = [], 0
    for _ in range(repeat):
        start = time.perf_counter()
        n = fn()
        times.append(time.perf_counter() - start)
    return min(times), n


def speed_table() -> None:
    rng = np.random.default_rng(1)
    lengths = np.minimum(np.ceil(rng.lognormal(4, 0.8, 1_000_000)), 1024).astype(np.int64)
    options = PlanOptions(max_cost=TOKENS, cost="linear")
    rows = []
    samples = lengths.tolist()  # the samples are their lengths: the batcher alone
    for replicas in (1, 8):
        planner = StreamPlanner(open_source(samples), int, options, BUFFER, replicas)
        t_stream, _ = best(lambda p=planner: sum(len(b) for b in p.sequence(0)))
        epochs = Epochs(lengths, options, replicas)
        fresh = iter(range(1, 100))

        def memory_epoch(e: Epochs = epochs, fresh: Iterator[int] = fresh) -> int:
            e.set_epoch(next(fresh))  # a new epoch each time: planned, not cached
            return sum(len(b) for b in e.iterate(0))

        t_memory, _ = best(memory_epoch)
        rows.append(
            [
                f"{lengths.size:,}",
                replicas,
                f"{lengths.size / t_stream:,.0f}",
                f"{lengths.size / t_memory:,.0f}",
            ]
        )
    print(
        "\nsamples per second through the batcher alone, best of 3: every sample is read (and,"
        " in memory, planned) on every rank; rank 0's batches are made and yielded"
    )
    print_table(["samples", "ranks", "stream", "in-memory sampler epoch"], rows)


def peak(n: int) -> tuple[float, int]:
    """tracemalloc's peak over an epoch of ``n`` samples made lazily, each 4 bytes a token."""

    def source(epoch: int) -> Iterator[bytes]:  # made 1,000 at a time: nothing kept
        rng = np.random.default_rng(epoch)
        for _ in range(n // 1000):
            for length in np.minimum(np.ceil(rng.lognormal(4, 0.8, 1000)), 1024).astype(int):
                yield b"\0" * (4 * int(length))

    planner = StreamPlanner(
        open_source(source),
        lambda s: len(s) // 4,
        PlanOptions(max_cost=TOKENS, cost="linear"),
        BUFFER,
    )
    tracemalloc.start()
    batches = sum(1 for _ in planner.sequence(0))
    top = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return top / 2**20, batches


def memory_table() -> None:
    rows = []
    peaks = {}
    for n in (100_000, 1_000_000):
        peaks[n], batches = peak(n)
        rows.append([f"{n:,}", f"{BUFFER:,}", f"{batches:,}", f"{peaks[n]:.1f}"])
    print("\npeak of Python's allocator (tracemalloc) over one epoch from a generator, MiB")
    print_table(["samples", "buffer", "batches", "peak MiB"], rows)
    print(f"10x the samples: {peaks[1_000_000] / peaks[100_000]:.3f}x the peak")


def estimate_table() -> None:
    """What an LR schedule can take before a stream is read: the updates of ``target=64``
    samples estimated from a declared sample count, against a first pass's exact count."""
    rows = []
    for name, raw in corpora().items():
        lengths = np.asarray(raw, dtype=np.int64)
        planner = StreamPlanner(
            open_source(range(lengths.size)),
            lengths.__getitem__,
            PlanOptions(max_cost=TOKENS, cost="linear", max_batch_size=16, oversize="alone"),
            BUFFER,
        )
        start = time.perf_counter()
        exact = count_epoch(planner, 0).updates(target=64)
        seconds = time.perf_counter() - start
        declared = -(-lengths.size // 64)
        rows.append(
            [name, f"{exact:,}", f"{declared:,}", f"{declared / exact - 1:+.1%}", f"{seconds:.2f}"]
        )
    print("\nupdates of an epoch, target=64 samples (micro-batches of at most 16)")
    print_table(
        ["corpus", "first pass (exact)", "ceil(N / 64)", "estimate error", "first pass s"], rows
    )


if __name__ == "__main__":
    padding_table()
    buffer_table()
    speed_table()
    memory_table()
    estimate_table()
