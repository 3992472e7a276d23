"""Accuracy at equal epochs: the fixed batch against dynbatch's recipes, over seeds.

    python benchmarks/accuracy.py [--seeds 0,1,2] [--max-lens 128,256] [--modes fixed,dynamic,fill]
        [--max-train-samples 3000] [--epochs 2] [--batch-size 32] [--output-dir runs/accuracy]

Runs ``examples/bert_chnsenticorp.py`` (the example's tiny paddlenlp BERT on the ChnSentiCorp
hotel reviews shipped in examples/data, bert-base-chinese token ids from the shared
vocabulary) once per seed and length, every mode for the same number of epochs, and prints
per length and mode the mean and the spread (min to max) over seeds of: dev accuracy,
optimizer steps, real tokens/s against the fixed batch of the same run, and peak allocator
memory against the fixed batch's worst batch; then each seed's dev accuracy per mode. Each
run is in OUTPUT_DIR/L{max_len}_s{seed}/ (results.md, results.json, curves.png); ``--reuse``
takes a run's results.json from there when it holds every mode, so an interrupted benchmark
resumes. It asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from _common import SHARED, print_table

ROOT = Path(__file__).resolve().parents[1]
#: the example's own copy of the reviews (examples/data/README.md says whose)
DATA = ROOT / "examples" / "data" / "chnsenticorp_htl_all.csv.xz"
VOCAB = SHARED / "bert-base-chinese-vocab.txt"


def run(args: argparse.Namespace, max_len: int, seed: int) -> dict[str, dict[str, float]]:
    out = Path(args.output_dir) / f"L{max_len}_s{seed}"
    done = out / "results.json"
    if args.reuse and done.exists():
        rows = {r["mode"]: r for r in json.loads(done.read_text())["rows"]}
        if set(args.modes.split(",")) <= set(rows):
            print(f"== max_len {max_len}, seed {seed}: reused {done}", flush=True)
            return rows
    cmd = [
        sys.executable,
        str(ROOT / "examples" / "bert_chnsenticorp.py"),
        "--data-file",
        str(DATA),
        "--vocab",
        str(VOCAB),
        "--model",
        "tiny",
        "--modes",
        args.modes,
        "--epochs",
        str(args.epochs),
        "--time-budget",
        "none",
        "--batch-size",
        str(args.batch_size),
        "--max-len",
        str(max_len),
        "--max-train-samples",
        str(args.max_train_samples),
        "--seed",
        str(seed),
        "--output-dir",
        str(out),
    ]
    print(f"== max_len {max_len}, seed {seed}", flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    rows = json.loads((out / "results.json").read_text())["rows"]
    return {r["mode"]: r for r in rows}


def accuracy_vs_fixed(rows: dict[str, dict[str, float]], mode: str) -> str:
    """``"0.8410"`` for the fixed batch, ``"0.8350 (-0.6 pt)"`` for another mode of its run."""
    accuracy = rows[mode]["dev_accuracy"]
    if mode == "fixed":
        return f"{accuracy:.4f}"
    return f"{accuracy:.4f} ({100 * (accuracy - rows['fixed']['dev_accuracy']):+.1f} pt)"


def spread(values: list[float], fmt: str) -> str:
    v = np.asarray(values, dtype=float)
    return f"{v.mean():{fmt}} ({v.min():{fmt}}–{v.max():{fmt}})"


def main() -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--max-lens", default="128,256")
    p.add_argument("--modes", default="fixed,dynamic,fill")
    p.add_argument("--max-train-samples", type=int, default=3000)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--output-dir", default=str(ROOT / "runs" / "accuracy"), help="the runs' folder")
    p.add_argument("--reuse", action="store_true", help="take finished runs from --output-dir")
    args = p.parse_args()
    if not VOCAB.exists():
        print(f"skipped: {SHARED} has no {VOCAB.name}")
        return
    seeds = [int(s) for s in args.seeds.split(",")]
    lens = [int(s) for s in args.max_lens.split(",")]
    modes = args.modes.split(",")
    table, by_seed = [], []
    for max_len in lens:
        runs = [run(args, max_len, seed) for seed in seeds]
        for seed, r in zip(seeds, runs, strict=True):
            by_seed.append([max_len, seed, *(accuracy_vs_fixed(r, m) for m in modes)])
        for mode in modes:
            rows = [r[mode] for r in runs]
            speed = [
                r[mode]["real_tokens_per_sec"] / r["fixed"]["real_tokens_per_sec"] for r in runs
            ]
            memory = [r[mode]["peak_memory_mb"] / r["fixed"]["peak_memory_mb"] for r in runs]
            gap = [100 * (r[mode]["dev_accuracy"] - r["fixed"]["dev_accuracy"]) for r in runs]
            table.append(
                [
                    max_len,
                    mode,
                    spread([r["dev_accuracy"] for r in rows], ".4f"),
                    spread(gap, "+.1f"),
                    spread([r["steps"] for r in rows], ".0f"),
                    spread(speed, ".2f"),
                    spread(memory, ".2f"),
                    spread([r["padding_efficiency"] for r in rows], ".3f"),
                ]
            )
    print(
        f"\n{args.max_train_samples} training reviews, {args.epochs} epochs for every mode, a "
        f"fixed batch of {args.batch_size}, seeds {args.seeds}: mean (min–max)\n"
    )
    print_table(
        [
            "max_len",
            "mode",
            "dev accuracy",
            "vs fixed (pt)",
            "optimizer steps",
            "real tokens/s vs fixed",
            "peak memory vs fixed",
            "padding efficiency",
        ],
        table,
    )
    print("\neach seed's dev accuracy (vs the fixed batch of the same seed)\n")
    print_table(["max_len", "seed", *modes], by_seed)


if __name__ == "__main__":
    main()
