"""What filling a GPU, and its peer group_by_length, cost in accuracy: equal epochs, to a target.

    python benchmarks/fill_accuracy.py [--seeds 0,1,2] [--reuse] [--output-dir runs/fill_accuracy]
        [--scalings none,sqrt,linear] [--parts a,b]
        [--time-table ../shared/data/h100_bert_base_step_times.json] [--fill 0.5]

Real CPU training runs of ``examples/bert_chnsenticorp.py`` (the tiny paddlenlp BERT on the
shared ChnSentiCorp reviews, bert-base-chinese token ids cut at 128, 3,000 training reviews,
a fixed batch of 32), one set per seed. The arithmetic is this machine's; only the speed is
the device's, replayed from its measured step times (``--time-table``, the H100 file by
default) with ``benchmarks/device_time.py``'s helpers: every micro-batch priced by its shape
``(n, longest)``, an epoch the sum.

(a) Equal epochs (2): ``fixed``, ``group`` (Hugging Face's ``group_by_length``: the fixed
    batch's updates, each of near-equal lengths) and ``fill`` planned for the device
    (``--time-table``, ``--fill``) with ``--lr-scaling`` none, sqrt and linear: dev accuracy,
    its difference from the fixed batch of the same seed in points, updates per epoch, and the
    replayed epoch time against the fixed batch's.
(b) Time to accuracy: each ``fill`` scaling trained with 3x the epochs (its learning-rate
    schedule spans them) and ``--target-accuracy`` the fixed batch's 2-epoch dev accuracy of
    that seed; it stops after the first epoch that reaches it. Epochs taken (over the seeds
    that reached it), how many reached it, and the replayed time of those epochs against the
    fixed batch's 2.

``--parts a`` runs and prints (a) alone, its table and each seed's row; (b), the long part
(fill trains up to 3x the epochs for every scaling and seed), needs (a)'s fixed accuracy as
its target, so ``--parts a,b`` (the default) is the only way to run it.

Fixed and group are replayed on their own shuffles (device_time's), fill on the very plans
it trained (``plan_epoch``). Runs go to --output-dir's L{max_len}_s{seed}/; ``--reuse``
takes a finished run's results.json from there, so an interrupted benchmark resumes. It
asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
from _common import SHARED, print_table
from device_time import fixed, group_by_length, planned, replay

import dynbatch
from dynbatch.plan.steptime import StepTimeTable

ROOT = Path(__file__).resolve().parents[1]
SCALINGS = ("none", "sqrt", "linear")  # --lr-scaling's values, every one by default
PARTS = ("a", "a,b")  # --parts' values: (b) targets (a)'s fixed accuracy, so never alone
Rows = dict[str, dict[str, Any]]


def example(args: argparse.Namespace, out: Path, seed: int, *flags: str) -> Rows:
    """One run of the example (its modes by name), or the finished one with ``--reuse``."""
    done = out / "results.json"
    modes = flags[flags.index("--modes") + 1].split(",")
    goal = (
        float(flags[flags.index("--target-accuracy") + 1]) if "--target-accuracy" in flags else None
    )
    if args.reuse and done.exists():
        rows = {r["mode"]: r for r in json.loads(done.read_text())["rows"]}
        if set(modes) <= set(rows) and all(rows[m].get("target_accuracy") == goal for m in modes):
            print(f"== {out.relative_to(args.output_dir)}: reused", flush=True)
            return rows
    cmd = [
        sys.executable,
        str(ROOT / "examples" / "bert_chnsenticorp.py"),
        *("--data-file", str(SHARED / "chnsenticorp_htl_all.csv")),
        *("--vocab", str(SHARED / "bert-base-chinese-vocab.txt")),
        *("--model", "tiny", "--time-budget", "none"),
        *("--batch-size", str(args.batch_size), "--max-len", str(args.max_len)),
        *("--max-train-samples", str(args.max_train_samples), "--seed", str(seed)),
        *("--output-dir", str(out)),
        *flags,
    ]
    print(f"== {out.relative_to(args.output_dir)}", flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return {r["mode"]: r for r in json.loads(done.read_text())["rows"]}


def train_lengths(out: Path) -> np.ndarray:
    """The token counts the run trained on (its work/data.npz)."""
    with np.load(out / "work" / "data.npz") as data:
        return np.diff(data["train_offsets"])


class Device:
    """Replayed seconds of each mode's epochs on the step-time table."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.table = StepTimeTable.load(args.time_table)
        self.model = self.table.fit()
        self.largest = float((self.table.n * self.table.lengths).max())
        self.args = args

    def fill(self, lens: np.ndarray, seed: int) -> Any:
        """The plan of the example's fill mode with --time-table: the very same options."""
        options = dynbatch.fill_device(
            lens,
            self.model,
            max_cost=self.largest,
            cost="linear",
            fraction=self.args.fill,
            batch_size=self.args.batch_size,
            seed=seed,
        )
        return planned(lens, options)

    def seconds(self, mode: str, lens: np.ndarray, seed: int, epochs: int) -> list[float]:
        """Per epoch: fixed and group on their own shuffles, fill on the plan it trained."""
        plan = (
            self.fill(lens, seed)
            if mode == "fill"
            else {"fixed": fixed, "group": group_by_length}[mode]
        )
        b = self.args.batch_size
        return [replay(plan(lens, b, e)[0], lens, self.table)[0] for e in range(epochs)]

    def fill_updates(self, lens: np.ndarray, seed: int, epochs: int) -> int:
        """The optimizer updates of fill's first ``epochs`` epochs, from the plan."""
        plan = self.fill(lens, seed)
        return sum(plan(lens, self.args.batch_size, e)[1] for e in range(epochs))


def spread(values: list[float], fmt: str) -> str:
    if not values:
        return "-"
    v = np.asarray(values, dtype=float)
    return f"{v.mean():{fmt}} ({v.min():{fmt}}–{v.max():{fmt}})"


def main() -> int:
    p = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--max-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-train-samples", type=int, default=3000)
    p.add_argument("--epochs", type=int, default=2, help="the equal epochs of (a)")
    p.add_argument("--cap", type=int, default=3, help="(b): fill trains at most cap x --epochs")
    p.add_argument("--fill", type=float, default=0.5)
    p.add_argument("--scalings", default=",".join(SCALINGS), help="fill's --lr-scaling values")
    p.add_argument("--time-table", default=str(SHARED / "h100_bert_base_step_times.json"))
    p.add_argument(
        "--output-dir", default=str(ROOT / "runs" / "fill_accuracy"), help="the runs' folder"
    )
    p.add_argument("--reuse", action="store_true", help="take finished runs from --output-dir")
    p.add_argument(
        "--parts",
        default="a,b",
        help="a: equal epochs only; a,b: then time to accuracy too (long)",
    )
    args = p.parse_args()
    needed = [SHARED / "chnsenticorp_htl_all.csv", SHARED / "bert-base-chinese-vocab.txt"]
    missing = [f for f in [*needed, Path(args.time_table)] if not f.exists()]
    if missing:
        print(f"skipped: {missing[0]} not found (the benchmarks read ../shared/data)")
        return 1 if os.environ.get("CI", "").lower() in ("1", "true", "yes") else 0
    seeds = [int(s) for s in args.seeds.split(",")]
    scalings = args.scalings.split(",")
    if not scalings or not set(scalings) <= set(SCALINGS):
        p.error(
            f"--scalings must be a comma-separated subset of {','.join(SCALINGS)}, "
            f"got {args.scalings!r}"
        )
    if args.parts not in PARTS:
        p.error(
            f"--parts must be a (equal epochs) or a,b (and time to accuracy, which targets (a)'s "
            f"fixed accuracy, so never runs alone), got {args.parts!r}"
        )
    with_b = args.parts == "a,b"
    device = Device(args)
    base = Path(args.output_dir)
    common = ("--time-table", args.time_table, "--fill", f"{args.fill:g}")
    e, cap = args.epochs, args.cap * args.epochs

    def where(seed: int, name: str) -> Path:
        return base / f"L{args.max_len}_s{seed}" / name

    # (a) first for every seed, then (b): an interrupted benchmark has the equal epochs done
    equal: dict[int, Rows] = {}
    for seed in seeds:
        runs = example(
            args, where(seed, "fixed_group"), seed, "--modes", "fixed,group", "--epochs", str(e)
        )
        for s in scalings:
            flags = ("--modes", "fill", "--lr-scaling", s, "--epochs", str(e), *common)
            runs[f"fill {s}"] = example(args, where(seed, f"fill_{s}_e{e}"), seed, *flags)["fill"]
        equal[seed] = runs
    to_target: dict[int, Rows] = {}
    for seed in seeds if with_b else []:
        goal = repr(equal[seed]["fixed"]["dev_accuracy"])
        to_target[seed] = {}
        for s in scalings:
            flags = ("--modes", "fill", "--lr-scaling", s, "--epochs", str(cap), *common)
            out = where(seed, f"fill_{s}_e{cap}")
            to_target[seed][s] = example(args, out, seed, *flags, "--target-accuracy", goal)["fill"]

    lens = {seed: train_lengths(where(seed, "fixed_group")) for seed in seeds}
    replayed = cap if with_b else e
    seconds = {  # replayed seconds of each epoch, per seed and plan
        seed: {m: device.seconds(m, lens[seed], seed, replayed) for m in ("fixed", "group", "fill")}
        for seed in seeds
    }
    for seed in seeds:  # the replayed fill plan must be the one trained
        for s in scalings:
            row = equal[seed][f"fill {s}"]
            if device.fill_updates(lens[seed], seed, e) != row["steps"]:
                print(
                    f"warning: seed {seed} fill {s}: the replayed plan's updates differ from "
                    "the run's"
                )

    # (a)'s columns per mode and seed: dev accuracy, vs fixed (pt), updates / epoch, replayed
    # epoch seconds, speed vs fixed; the table gives their spread, "Per seed (a)" each seed's
    modes = ("fixed", "group", *(f"fill {s}" for s in scalings))
    columns: dict[str, dict[int, list[float]]] = {}
    for mode in modes:
        plan = mode.split()[0]
        columns[mode] = {
            s: [
                equal[s][mode]["dev_accuracy"],
                100 * (equal[s][mode]["dev_accuracy"] - equal[s]["fixed"]["dev_accuracy"]),
                equal[s][mode]["steps"] / equal[s][mode]["epochs"],
                float(np.mean(seconds[s][plan][:e])),
                float(np.sum(seconds[s]["fixed"][:e]) / np.sum(seconds[s][plan][:e])),
            ]
            for s in seeds
        }
    formats = (".4f", "+.1f", ".0f", ".2f", ".2f")

    def label(mode: str) -> str:
        return mode if not mode.startswith("fill") else f"fill, lr scaling {mode.split()[1]}"

    table_a = [
        [
            label(mode),
            *(spread([columns[mode][s][k] for s in seeds], fmt) for k, fmt in enumerate(formats)),
        ]
        for mode in modes
    ]
    head_a = [
        "mode",
        "dev accuracy",
        "vs fixed (pt)",
        "updates / epoch",
        "epoch s (table)",
        "speed vs fixed",
    ]
    print(
        f"\n(a) Equal epochs: {args.max_train_samples} training reviews cut at {args.max_len} "
        f"tokens, {e} epochs for every mode, a fixed batch of {args.batch_size}, fill "
        f"{args.fill:g} planned for {Path(args.time_table).name}; seeds {args.seeds}: mean "
        "(min–max). Epoch time replayed on the table.\n"
    )
    print_table(head_a, table_a)
    print(f"\nPer seed (a): each seed's row of the table above, after {e} epochs.\n")
    print_table(
        ["seed", *head_a],
        [
            [
                s,
                label(mode),
                *(f"{v:{fmt}}" for v, fmt in zip(columns[mode][s], formats, strict=True)),
            ]
            for s in seeds
            for mode in modes
        ],
    )
    if not with_b:
        return 0

    table_b = [
        [
            "fixed (its accuracy is the target)",
            f"{len(seeds)}/{len(seeds)}",
            spread([float(e)] * len(seeds), ".1f"),
            spread([equal[seed]["fixed"]["dev_accuracy"] for seed in seeds], ".4f"),
            spread([1.0] * len(seeds), ".2f"),
        ]
    ]
    for s in scalings:
        hit = [seed for seed in seeds if to_target[seed][s]["epochs_to_target"] is not None]
        taken = [to_target[seed][s]["epochs_to_target"] for seed in hit]
        time_ratio = [
            np.sum(seconds[seed]["fill"][: to_target[seed][s]["epochs_to_target"]])
            / np.sum(seconds[seed]["fixed"][:e])
            for seed in hit
        ]
        table_b.append(
            [
                f"fill, lr scaling {s}",
                f"{len(hit)}/{len(seeds)}",
                spread(taken, ".1f"),
                spread([float(to_target[seed][s]["dev_accuracy"]) for seed in seeds], ".4f"),
                spread([1 / r for r in time_ratio], ".2f"),
            ]
        )
    print(
        f"\n(b) Time to the fixed batch's accuracy: each fill scaling trained at most {cap} "
        f"epochs (its schedule spans {cap}), stopping after the first epoch whose dev accuracy "
        f"reaches that seed's fixed {e}-epoch accuracy; epochs and speed over the seeds that "
        f"reached it, speed = the fixed batch's {e} epochs over fill's epochs to the target, "
        "both replayed on the table.\n"
    )
    print_table(
        [
            "mode",
            "reached",
            "epochs to target",
            "dev accuracy at stop",
            f"speed vs fixed's {e} epochs",
        ],
        table_b,
    )

    detail = []
    for seed in seeds:
        detail.append(
            [
                seed,
                f"{equal[seed]['fixed']['dev_accuracy']:.4f}",
                f"{equal[seed]['group']['dev_accuracy']:.4f}",
                *(f"{equal[seed][f'fill {s}']['dev_accuracy']:.4f}" for s in scalings),
                *(
                    " ".join(f"{a:.3f}" for a in to_target[seed][s]["dev_accuracy_by_epoch"])
                    for s in scalings
                ),
            ]
        )
    print(
        f"\nPer seed: dev accuracy after {e} epochs, and each fill scaling's dev accuracy after "
        "every epoch of (b).\n"
    )
    print_table(
        [
            "seed",
            "fixed",
            "group",
            *(f"fill {s}" for s in scalings),
            *(f"(b) fill {s} by epoch" for s in scalings),
        ],
        detail,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
