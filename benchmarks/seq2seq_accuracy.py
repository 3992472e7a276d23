"""Seq2seq at equal epochs: the fixed batch against dynbatch's dynamic recipe on pairs, over seeds.

    python benchmarks/seq2seq_accuracy.py [--seeds 0,1,2] [--epochs N] [--max-train-samples N]
        [--max-chars N] [--batch-size B] [--dev-samples N] [--output-dir runs/seq2seq_accuracy]

Runs ``examples/seq2seq_pinyin.py`` (ChnSentiCorp reviews -> pinyin syllables, a small
``paddle.nn.Transformer`` on the CPU; the flags not given are the example's defaults) once, every
seed and mode in one process, and prints per seed and mode, side by side: real tokens/s (source
and target), the allocator's peak memory, padding efficiency on each side, held-out loss per
target token and target-token accuracy; then the dynamic mode against the fixed one of the same
seed (tokens/s and peak memory as ratios, accuracy as a gap in points), mean (min–max). The
results are in --output-dir's results.json. It asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
from _common import SHARED, print_table

ROOT = Path(__file__).resolve().parents[1]


def spread(values: list[float], fmt: str) -> str:
    v = np.asarray(values, dtype=float)
    return f"{v.mean():{fmt}} ({v.min():{fmt}}–{v.max():{fmt}})"


def main() -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0,1,2")
    for flag in ("--epochs", "--max-train-samples", "--max-chars", "--batch-size", "--dev-samples"):
        p.add_argument(flag, type=int, default=None, help="the example's default when not given")
    p.add_argument(
        "--output-dir", default=str(ROOT / "runs" / "seq2seq_accuracy"), help="the run's folder"
    )
    args = p.parse_args()
    data = SHARED / "chnsenticorp_htl_all.csv"
    if not data.exists():
        print(f"skipped: {SHARED} has no chnsenticorp_htl_all.csv")
        return
    out = Path(args.output_dir)
    cmd = [
        sys.executable,
        str(ROOT / "examples" / "seq2seq_pinyin.py"),
        *("--data-file", str(data), "--seeds", args.seeds, "--output-dir", str(out)),
    ]
    for name in ("epochs", "max_train_samples", "max_chars", "batch_size", "dev_samples"):
        if getattr(args, name) is not None:
            cmd += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    subprocess.run(cmd, check=True)
    rows: list[dict[str, Any]] = json.loads((out / "results.json").read_text())
    print()
    print_table(
        ["seed", "mode", "real tokens/s", "peak MiB", "padding src", "padding tgt",
         "held-out loss/token", "accuracy", "updates", "micro-batches"],
        [
            [r["seed"], r["mode"], f"{r['real_tokens_per_sec']:.0f}", f"{r['peak_memory_mb']:.1f}",
             f"{r['source_padding_efficiency']:.3f}", f"{r['target_padding_efficiency']:.3f}",
             f"{r['eval_loss']:.4f}", f"{100 * r['eval_accuracy']:.2f}%", r["steps"],
             r["micro_batches"]]
            for r in rows
        ],
    )  # fmt: skip
    by = {(r["mode"], r["seed"]): r for r in rows}
    seeds = sorted({s for m, s in by if m == "dynamic" and ("fixed", s) in by})
    if not seeds:
        return
    ratio = lambda key: [by["dynamic", s][key] / by["fixed", s][key] for s in seeds]  # noqa: E731
    gap = [
        100 * (by["dynamic", s]["eval_accuracy"] - by["fixed", s]["eval_accuracy"]) for s in seeds
    ]
    loss = [by["dynamic", s]["eval_loss"] - by["fixed", s]["eval_loss"] for s in seeds]
    print(f"\ndynamic against fixed, seeds {','.join(map(str, seeds))}: mean (min–max)\n")
    print_table(
        ["real tokens/s", "peak memory", "accuracy (pt)", "held-out loss/token"],
        [[f"×{spread(ratio('real_tokens_per_sec'), '.2f')}",
          f"×{spread(ratio('peak_memory_mb'), '.2f')}", spread(gap, "+.2f"), spread(loss, "+.4f")]],
    )  # fmt: skip


if __name__ == "__main__":
    main()
