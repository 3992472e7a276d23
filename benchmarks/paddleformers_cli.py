"""``paddleformers-cli train`` head to head, through the real CLI on a tiny Llama: the stock
workflow, PaddleFormers' ``packing`` (bin packing), ``greedy_intokens`` packing and
``padding_free``, and dynbatch's plug-in (``custom_register_path``) plain and packed, at equal
epochs, over seeds.

    python benchmarks/paddleformers_cli.py [--seeds 3] [--epochs 1] [--n 200] [--runs NAME,...]

Run in PaddleFormers' environment (``.venv-pf``; NOTE [ paddleformers-cli on a CPU ] in
``tests/paddleformers/pf_cli.py`` says what the CLI needs on a CPU). Each row is the mean over
seeds (the YAML's ``seed``); the data and the model's weights are made once.
Updates and losses come from the workflow's log; real tokens/s is the examples' tokens (each
valid example once an epoch, as the workflow tokenises and truncates them) over the training
time; padding is the share of the positions the model computed in training that are not those
tokens; the peak is paddle's CPU allocator's, over training.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "paddleformers"))

import pf_cli  # noqa: E402  (tests/paddleformers: the CLI's CPU environment)

PROBE = HERE / "paddleformers_cli_probe.py"

#: name: (YAML changes, dynbatch's plug-in loaded)
RUNS: dict[str, tuple[dict[str, Any], bool]] = {
    "stock": ({}, False),
    "PaddleFormers packing (binpacking)": ({"packing": True, "binpacking": True}, False),
    "PaddleFormers greedy_intokens": (
        {"packing": True, "greedy_intokens": True, "binpacking": False},
        False,
    ),
    "PaddleFormers padding_free": ({"padding_free": True}, False),
    "dynbatch plain": ({}, True),
    "dynbatch packed (packing: true)": ({"packing": True}, True),
}


def run_one(folder: Path, name: str, seed: int, epochs: int, plugin: bool, changes: Any) -> dict:
    tag = re.sub(r"\W+", "-", name).strip("-") + f"-s{seed}"
    out = folder / f"{tag}.json"
    cfg = pf_cli.config(out=f"out-{tag}", plugin=False, seed=seed, num_train_epochs=epochs)
    cfg.update(max_seq_len=128, custom_register_path=str(PROBE), **changes)
    env = {"DYNBATCH_BENCH_OUT": str(out), "DYNBATCH_BENCH_PLUGIN": "1" if plugin else "0"}
    code, log = pf_cli.train(folder, cfg, tag, extra=env)
    if code != 0:
        raise RuntimeError(f"{name} seed {seed} failed:\n{log[-3000:]}")
    probe = json.loads(out.read_text())
    return {
        "updates": pf_cli.logged(log, "global_step")[-1],
        "train_loss": pf_cli.logged(log, "train_loss")[-1],
        "eval_loss": pf_cli.logged(log, "eval_loss")[-1],
        "runtime": pf_cli.logged(log, "train_runtime")[-1],
        "tokens": re.findall(
            # the map dataset counts what it skipped; the iterable one says it cannot
            r"dynbatch: \d+ valid examples of \w+(?:, \d+ skipped| \([^)]*\)), (\d+) tokens",
            log,
        ),
        **probe,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--n", type=int, default=200, help="training examples")
    parser.add_argument(
        "--runs",
        default=",".join(RUNS),
        help="the runs to make, comma-separated names from: " + ", ".join(RUNS),
    )
    opts = parser.parse_args()
    chosen = [name.strip() for name in opts.runs.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in RUNS]
    if unknown or "dynbatch plain" not in chosen:
        parser.error(
            f"--runs={opts.runs!r}: give names from {', '.join(RUNS)}, 'dynbatch plain' among "
            f"them (its log counts the real tokens); unknown: {', '.join(unknown) or 'none'}"
        )
    folder = pf_cli.make_folder(Path(tempfile.mkdtemp(prefix="pf-cli-")), n_train=opts.n, n_eval=40)
    results: dict[str, list[dict]] = {name: [] for name in chosen}
    for seed in range(1, opts.seeds + 1):  # PaddleFormers refuses seed 0
        for name in chosen:
            changes, plugin = RUNS[name]
            try:
                results[name].append(run_one(folder, name, seed, opts.epochs, plugin, changes))
            except (RuntimeError, OSError, ValueError, IndexError) as exc:
                print(f"{name}, seed {seed}: no result: {str(exc)[-1500:]}", flush=True)
            else:
                print(f"{name}, seed {seed}: {results[name][-1]}", flush=True)
    real = [int(t) for r in results["dynbatch plain"] for t in r["tokens"]]
    tokens = real[0] * opts.epochs  # the valid examples' tokens, each once an epoch
    print(
        f"{opts.n} examples, {real[0]} real tokens an epoch, {opts.epochs} epoch(s), "
        f"{opts.seeds} seeds, batch 8, max_seq_len 128, 1 CPU process"
    )
    print("| run | updates | train loss | eval loss | real tokens/s | peak MiB | padding |")
    print("|---|---|---|---|---|---|---|")
    for name, rows in results.items():
        if not rows:
            print(f"| {name} | failed |")
            continue

        def mean(key: str, rows: list[dict] = rows) -> float:
            return sum(r[key] for r in rows) / len(rows)

        speed = sum(tokens / r["runtime"] for r in rows) / len(rows)
        padding = sum(1 - tokens / r["computed"] for r in rows) / len(rows)
        print(
            f"| {name} | {mean('updates'):.0f} | {mean('train_loss'):.4f} | "
            f"{mean('eval_loss'):.4f} | {speed:,.0f} | {mean('peak_mib'):.1f} | {padding:.1%} |"
        )


if __name__ == "__main__":
    main()
