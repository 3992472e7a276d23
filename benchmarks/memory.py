"""Peak memory per batch, measured by paddle's allocator: fixed batches against four budgets.

    python benchmarks/memory.py [--sample 24] [--all]

ChnSentiCorp (lengths = characters + 2, cut at 512) and the BERT example's model and
optimizer (examples/train_mode.py: the tiny BERT ``TINY`` with BERT-base's head width, hidden
128, 2 heads of 64, 2 layers, intermediate 512, here with bert-base-chinese's 21128 tokens;
AdamW with weight decay and gradient clipping), on CPU.
Every measured batch is one real training step (forward, backward, update) on a batch of
that plan's shape: each sample's length of random token ids, padded with [PAD] to the
batch's longest (memory and time depend on the shape, not on which ids).

1. The target: the peak of fixed-20's worst batch (20 samples padded to 512), measured.
2. ``dynbatch.calibrate`` fits a MemoryCost to this model (time and held-out error shown).
3. Plans, all in bucket order but fixed-20 (shuffled): the calibrated MemoryCost at
   max_cost = target; the quadratic default n*L^2 <= 20*512^2/4 with no cap and with
   max_batch_size=80; linear n*L <= 20*512.
4. Per plan, a measured sample of batches: a uniform random sample (``--sample``), plus the
   3 batches the calibrated cost predicts highest and the batches with the most samples and
   with the longest length. The batches of all plans run interleaved in one random order, so
   a busy machine slows every plan alike. ``--all`` measures every batch (about 25 minutes).

Columns: the worst measured peak (its n, L); the median peak of the random sample; real
tokens/s, where an epoch's time is the time model's prediction for every batch of the plan,
scaled by measured / predicted time over the random sample (a ratio estimator), against the
same for fixed-20. Prints numbers and the issue's targets; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import BUDGET, chnsenticorp_lengths, print_table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from train_mode import build_model, make_optimizer

from dynbatch import calibrate, plan_batches
from dynbatch.memory import peak_memory_mib, reset_peak_memory
from dynbatch.plan.stats import batch_table, fixed_batches

VOCAB = 21128
K = 3  # highest-predicted batches always measured


def build() -> tuple[Any, Any]:
    """The example's tiny BERT and optimizer: what the example trains is what is measured."""
    import paddle

    paddle.seed(0)
    model = build_model({"model": "tiny", "vocab_size": VOCAB, "num_labels": 2, "pad_id": 0})
    return model, make_optimizer(model, 1e-3)


def trainer(model: Any, opt: Any, seed: int = 0) -> Any:
    """``train(lengths)``: one step on a padded batch of samples of these lengths."""
    import paddle

    rng = np.random.default_rng(seed)

    def train(lengths: np.ndarray) -> None:
        longest = int(lengths.max())
        ids = rng.integers(1, VOCAB, size=(lengths.size, longest))
        ids[np.arange(longest)[None, :] >= lengths[:, None]] = 0  # [PAD]
        labels = paddle.to_tensor(rng.integers(0, 2, size=lengths.size), dtype="int64")
        loss = paddle.nn.functional.cross_entropy(model(paddle.to_tensor(ids)), labels)
        loss.backward()
        opt.step()
        opt.clear_grad()

    return train


def measure(train: Any, lengths: np.ndarray) -> tuple[float, float]:
    """(peak MiB, seconds) of one step."""
    reset_peak_memory()
    start = time.perf_counter()
    train(lengths)
    return peak_memory_mib(), time.perf_counter() - start


def chosen(table: dict[str, np.ndarray], predicted: np.ndarray, rng: Any, sample: int) -> Any:
    """(random sample, extra batches): see the module docstring."""
    count = predicted.size
    picked = rng.choice(count, size=min(sample, count), replace=False).tolist()
    extra = [int(i) for i in np.argsort(-predicted, kind="stable")[:K]]
    for key in ("batch_size", "max_len"):
        extra.append(int(np.lexsort((-predicted, -table[key]))[0]))
    return picked, [i for i in dict.fromkeys(extra) if i not in picked]


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--sample", type=int, default=24, help="random batches per plan")
    parser.add_argument("--all", action="store_true", help="measure every batch of every plan")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    lens = chnsenticorp_lengths()
    os.environ.setdefault("FLAGS_call_stack_level", "0")
    model, opt = build()
    train = trainer(model, opt, args.seed)
    train(np.array([16]))  # warm-up: the optimizer's state exists from here on

    fixed = fixed_batches(lens.size, 20, seed=args.seed)
    longest = max(range(len(fixed)), key=lambda i: (fixed[i].size, lens[fixed[i]].max()))
    target, _ = measure(train, lens[fixed[longest]])
    print(
        f"ChnSentiCorp: {lens.size} reviews, lengths {lens.min()}..{lens.max()} "
        f"(median {np.median(lens):g}); CPU, {os.cpu_count()} cores\n"
        f"target = fixed-20's worst batch (n={fixed[longest].size}, "
        f"L={lens[fixed[longest]].max()}): {target:.1f} MiB\n",
        flush=True,
    )

    start = time.perf_counter()
    cost = calibrate(lambda n, L: train(np.full(n, L)), max_len=int(lens.max()))
    seconds = time.perf_counter() - start
    report, time_model = cost.report, cost.time_model  # calibrate attaches both
    print(f"calibrate: {seconds:.1f} s, {cost.spec()}\n{report}\n", flush=True)

    plans = {
        "fixed-20 (shuffled)": fixed,
        "calibrated MemoryCost <= target": plan_batches(lens, target, cost=cost, oversize="alone"),
        "quadratic n*L^2 <= 20*512^2/4": plan_batches(lens, BUDGET, oversize="alone"),
        "quadratic, max_batch_size=80": plan_batches(
            lens, BUDGET, max_batch_size=80, oversize="alone"
        ),
        "linear n*L <= 20*512": plan_batches(lens, 20 * 512, cost="linear", oversize="alone"),
    }
    rng = np.random.default_rng(args.seed)
    tables, samples, jobs = {}, {}, []
    for name, plan in plans.items():
        table = batch_table(lens, plan, cost=cost)
        tables[name] = table
        if args.all:
            picked, extra = list(range(len(plan))), []
        else:
            picked, extra = chosen(table, table["cost"], rng, args.sample)
        samples[name] = picked
        jobs += [(name, i) for i in picked + extra]
    order = rng.permutation(len(jobs))
    print(f"measuring {len(jobs)} batches of {len(plans)} plans, interleaved ...", flush=True)
    results: dict[str, dict[int, tuple[float, float]]] = {name: {} for name in plans}
    start = time.perf_counter()
    for j in order:
        name, i = jobs[j]
        results[name][i] = measure(train, lens[plans[name][i]])
    print(f"measured in {time.perf_counter() - start:.0f} s\n", flush=True)

    rows, checks, speed = [], [], {}
    for name, plan in plans.items():
        table, got = tables[name], results[name]
        peaks = {i: m for i, (m, _) in got.items()}
        worst = max(peaks, key=peaks.__getitem__)
        median = float(np.median([peaks[i] for i in samples[name]]))
        times = np.asarray(time_model(table["batch_size"], table["max_len"]))
        sampled = samples[name]
        scale = sum(got[i][1] for i in sampled) / float(times[sampled].sum())
        speed[name] = float(table["real_tokens"].sum()) / (float(times.sum()) * scale)
        rows.append(
            [
                name,
                len(plan),
                f"{peaks[worst]:.0f} ({table['batch_size'][worst]}, {table['max_len'][worst]})",
                f"{median:.0f}",
                f"{peaks[worst] / median:.2f}",
                f"{peaks[worst] / target:.2f}",
                f"{median / target:.2f}",
                f"{speed[name] / speed['fixed-20 (shuffled)']:.2f}x",
            ]
        )
        error = max(abs(table["cost"][i] - m) / m for i, m in peaks.items())
        checks.append(
            [
                name,
                f"{len(got)} ({len(sampled)} random)",
                f"{table['cost'].max():.0f}",
                f"{table['cost'].max() / target:.2f}",
                f"{error:.2%}",
            ]
        )
    print_table(
        [
            "plan",
            "batches",
            "worst batch MiB (n, L)",
            "median MiB",
            "worst/median",
            "worst/target",
            "median/target",
            "real tokens/s vs fixed",
        ],
        rows,
    )
    print()
    print_table(
        [
            "plan",
            "batches measured",
            "predicted worst of all batches, MiB",
            "predicted worst/target",
            "largest |predicted - measured| / measured",
        ],
        checks,
    )
    cal = "calibrated MemoryCost <= target"
    peaks = {i: m for i, (m, _) in results[cal].items()}
    above = [i for i in peaks if peaks[i] >= 0.2 * target]
    worst_error = max(abs(tables[cal]["cost"][i] - peaks[i]) / peaks[i] for i in above)
    median = float(np.median([peaks[i] for i in samples[cal]]))
    print(
        f"\nTargets (printed, not asserted), calibrated bucket plan:\n"
        f"  every measured batch <= 1.05 x target: worst {max(peaks.values()) / target:.3f} x\n"
        f"  median >= 0.80 x target: {median / target:.3f} x\n"
        f"  real tokens/s >= 4.5 x fixed-20: {speed[cal] / speed['fixed-20 (shuffled)']:.2f} x\n"
        f"  fit error <= 10% on held-out shapes above 20% of the target: calibration "
        f"{report.held_out_error:.2%}, the plan's measured batches {worst_error:.2%}\n"
        f"  calibration <= 60 s: {seconds:.1f} s"
    )


if __name__ == "__main__":
    main()
