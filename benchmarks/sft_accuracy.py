"""SFT accuracy at equal epochs: the fixed batch, dynbatch's dynamic recipe and packing, over seeds.

    python benchmarks/sft_accuracy.py [--seeds 0,1,2] [--modes fixed,dynamic,pack]
        [--max-train-samples 2000] [--epochs 2] [--batch-size 16] [--max-len 128] [--reuse]
        [--output-dir runs/sft_accuracy]

Runs ``examples/sft_causal_lm.py`` (the example's tiny paddlenlp Qwen2 on prompt → answer pairs
of the shared ChnSentiCorp reviews, the hand-written loop) once per seed, every mode for the
same number of epochs, and prints per mode the mean and the spread (min to max) over seeds of:
the held-out loss per loss token, its gap to the dynamic and to the fixed mode of the same
seed, the held-out answer accuracy, optimizer steps, real tokens/s and peak allocator memory
against the fixed batch of the same run, and padding efficiency (real tokens over the tokens
computed: padded batches, or packed rows of --max-len); then each seed's held-out loss and
answer accuracy per mode. The defaults are the example's. Each run is in --output-dir's
N{pairs}_L{max_len}_B{batch}_E{epochs}_s{seed}/ (results.md, results.json); ``--reuse`` takes a
run's results.json from there when it holds every mode, so an interrupted benchmark resumes. It
asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
from _common import SHARED, print_table

ROOT = Path(__file__).resolve().parents[1]


def run(args: argparse.Namespace, seed: int) -> dict[str, dict[str, float]]:
    name = f"N{args.max_train_samples}_L{args.max_len}_B{args.batch_size}_E{args.epochs}_s{seed}"
    out = Path(args.output_dir) / name
    done = out / "results.json"
    if args.reuse and done.exists():
        rows = {r["mode"]: r for r in json.loads(done.read_text())}
        if set(args.modes.split(",")) <= set(rows):
            print(f"== seed {seed}: reused {done}", flush=True)
            return rows
    cmd = [
        sys.executable,
        str(ROOT / "examples" / "sft_causal_lm.py"),
        *("--data-file", str(SHARED / "chnsenticorp_htl_all.csv")),
        *("--model", "tiny", "--runner", "loop", "--modes", args.modes),
        *("--epochs", str(args.epochs), "--batch-size", str(args.batch_size)),
        *("--max-len", str(args.max_len), "--max-train-samples", str(args.max_train_samples)),
        *("--seed", str(seed), "--output-dir", str(out)),
    ]
    print(f"== seed {seed}", flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return {r["mode"]: r for r in json.loads(done.read_text())}


def spread(values: list[float], fmt: str) -> str:
    v = np.asarray(values, dtype=float)
    return f"{v.mean():{fmt}} ({v.min():{fmt}}–{v.max():{fmt}})"


def against(
    runs: list[dict[str, dict[str, float]]],
    mode: str,
    base: str,
    compare: Callable[[dict[str, float], dict[str, float]], float],
    fmt: str,
) -> str:
    """``compare(mode's row, base's row)`` of each seed's run, its spread; "–" without base."""
    if any(base not in r for r in runs):
        return "–"
    return spread([compare(r[mode], r[base]) for r in runs], fmt)


def loss_gap(a: dict[str, float], b: dict[str, float]) -> float:
    return a["eval_loss"] - b["eval_loss"]


def ratio(key: str) -> Callable[[dict[str, float], dict[str, float]], float]:
    return lambda a, b: a[key] / b[key]


def main() -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--modes", default="fixed,dynamic,pack")
    p.add_argument("--max-train-samples", type=int, default=2000, help="0: every pair")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-len", type=int, default=128)
    p.add_argument(
        "--output-dir", default=str(ROOT / "runs" / "sft_accuracy"), help="the runs' folder"
    )
    p.add_argument("--reuse", action="store_true", help="take finished runs from --output-dir")
    args = p.parse_args()
    if not (SHARED / "chnsenticorp_htl_all.csv").exists():
        print(f"skipped: {SHARED} has no chnsenticorp_htl_all.csv")
        return
    seeds = [int(s) for s in args.seeds.split(",")]
    modes = args.modes.split(",")
    runs = [run(args, seed) for seed in seeds]
    table = []
    for mode in modes:
        rows = [r[mode] for r in runs]
        table.append(
            [
                mode,
                spread([r["eval_loss"] for r in rows], ".4f"),
                against(runs, mode, "dynamic", loss_gap, "+.4f"),
                against(runs, mode, "fixed", loss_gap, "+.4f"),
                spread([r["eval_answer_accuracy"] for r in rows], ".4f"),
                spread([r["steps"] for r in rows], ".0f"),
                against(runs, mode, "fixed", ratio("real_tokens_per_sec"), ".2f"),
                against(runs, mode, "fixed", ratio("peak_memory_mb"), ".2f"),
                spread([r["padding_efficiency"] for r in rows], ".3f"),
            ]
        )
    pairs = runs[0][modes[0]]["train_pairs"]
    print(
        f"\n{pairs} training pairs of at most {args.max_len} tokens, {args.epochs} epochs for "
        f"every mode, a fixed batch of {args.batch_size}, seeds {args.seeds}: mean (min–max)\n"
    )
    print_table(
        [
            "mode",
            "held-out loss/token",
            "vs dynamic",
            "vs fixed",
            "answer accuracy",
            "optimizer steps",
            "real tokens/s vs fixed",
            "peak memory vs fixed",
            "padding efficiency",
        ],
        table,
    )
    print("\nPer seed\n")
    print_table(
        ["seed", "mode", "held-out loss/token", "answer accuracy", "optimizer steps"],
        [
            [seed, mode, f"{r[mode]['eval_loss']:.4f}", f"{r[mode]['eval_answer_accuracy']:.4f}",
             r[mode]["steps"]]
            for seed, r in zip(seeds, runs, strict=True)
            for mode in modes
        ],
    )  # fmt: skip


if __name__ == "__main__":
    main()
