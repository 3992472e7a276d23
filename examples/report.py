"""The report of the example: results.json, results.md and curves.png from every mode's record."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

KEYS = (
    "mode",
    "wall_s",
    "epochs",
    "steps",
    "samples_per_sec",
    "real_tokens_per_sec",
    "padding_efficiency",
    "peak_memory_mb",
    "median_memory_mb",
    "memory_max_over_median",
    "dev_accuracy_same_data",
    "dev_accuracy",
    "skipped_steps",
    "every_sample_once",
)


def write(
    args: argparse.Namespace, meta: dict[str, Any], rows: list[dict[str, Any]], out: Path
) -> None:
    """results.json (every key but the per-step history), results.md and curves.png."""
    extra = (
        "micro_batches",
        "calibration_s",
        "target_mb",
        "lr",
        "dev_accuracy_by_epoch",
        "target_accuracy",
        "epochs_to_target",
        "time_table",
        "fill_max_cost",
    )
    (out / "results.json").write_text(
        json.dumps(
            {
                "meta": meta,
                "rows": [
                    {k: r[k] for k in KEYS} | {k: r[k] for k in extra if k in r} for r in rows
                ],
            },
            indent=2,
        )
    )
    lines = [*summary(args, meta, rows), "", *table(rows)]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n" + "\n".join(lines), flush=True)
    curves(rows, out / "curves.png")


def summary(
    args: argparse.Namespace, meta: dict[str, Any], rows: list[dict[str, Any]]
) -> list[str]:
    budget = {"auto": "the fixed mode's training time", "none": "none (equal epochs)"}.get(
        args.time_budget, f"{args.time_budget} s"
    )
    said = [
        f"Data: {meta['source']}; {meta['train_samples']} train / {meta['dev_samples']} dev "
        f"samples; model: {meta['model']}; vocabulary: {meta['vocab_desc']}; "
        f"epochs: {args.epochs}; time budget of the dynamic modes: {budget}; "
        f"max_cost: {args.max_cost:g} ({args.cost}); max_batch_size: {args.max_batch_size}; "
        f"lr scaling: {args.lr_scaling}; memory: {meta['memory_source']}."
    ]
    for calibrated in (r for r in rows if "target_mb" in r):
        said.append(
            f"{calibrated['mode']}: target {calibrated['target_mb']:.1f} MiB (the fixed mode's "
            f"worst batch), calibration {calibrated['calibration_s']:.1f} s."
        )
    for planned in (r for r in rows if "time_table" in r):
        said.append(
            f"{planned['mode']}: planned for the step times of {planned['time_table']}, "
            f"micro-batches within {planned['fill_max_cost']:g} tokens (not calibrated here)."
        )
    if args.target_accuracy is not None:
        reached = ", ".join(f"{r['mode']} {r['epochs_to_target'] or 'never'}" for r in rows)
        said.append(
            f"Epochs to dev accuracy {args.target_accuracy:g} (at most {args.epochs}): {reached}."
        )
    return said


def table(rows: list[dict[str, Any]]) -> list[str]:
    fixed = next((r for r in rows if r["mode"] == "fixed"), None)
    lines = [
        "| mode | train s | epochs | optimizer steps | real tokens/s | vs fixed "
        "| padding efficiency | peak MiB | median MiB | peak / median "
        "| dev acc (fixed's samples) | dev acc (end) | skipped |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        speed = r["real_tokens_per_sec"] / fixed["real_tokens_per_sec"] if fixed else None
        lines.append(
            f"| {r['mode']} | {r['wall_s']:.1f} | {r['epochs']:.2f} | {r['steps']} "
            f"| {r['real_tokens_per_sec']:.0f} | {f'{speed:.2f}x' if speed else '-'} "
            f"| {r['padding_efficiency']:.3f} | {r['peak_memory_mb']:.1f} "
            f"| {r['median_memory_mb']:.1f} | {r['memory_max_over_median']:.2f} "
            f"| {r['dev_accuracy_same_data']:.4f} | {r['dev_accuracy']:.4f} "
            f"| {r['skipped_steps']} |"
        )
    return lines


def curves(rows: list[dict[str, Any]], path: Path) -> None:
    """curves.png: :func:`figure`, saved."""
    import matplotlib.pyplot as plt

    fig = figure(rows)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def figure(rows: list[dict[str, Any]]) -> Any:
    """Four panels, one line per mode: the training loss and the dev accuracy of every epoch
    side by side, then the samples of each optimizer update and the peak memory of each step.

    Time is training seconds (modes take different steps); the update size is what a mode
    changes for the optimizer, so it is drawn rather than the micro-batch size. Every axis is
    linear with plain tick labels.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator, ScalarFormatter

    fig, ((ax_loss, ax_acc), (ax_upd, ax_mem)) = plt.subplots(2, 2, figsize=(13, 8))
    styles = ("-", "--", ":", "-.")  # equal update sizes of two modes stay visible
    for i, r in enumerate(rows):
        h = r["history"]
        t, loss = np.asarray(h["time"]), np.asarray(h["loss"])
        window = max(1, len(loss) // 40)
        smooth = np.convolve(loss, np.ones(window) / window, mode="valid")
        (line,) = ax_loss.plot(t[window - 1 :], smooth, label=r["mode"], lw=1.2)
        accuracy = r.get("dev_accuracy_by_epoch") or []
        epochs = list(range(1, len(accuracy) + 1))
        ax_acc.plot(
            epochs,
            accuracy,
            marker="o",
            label=r["mode"],
            ls=styles[i % len(styles)],
            color=line.get_color(),
        )
        ax_upd.plot(
            h.get("update_time", []),
            h.get("update_size", []),
            label=r["mode"],
            lw=1.2,
            ls=styles[i % len(styles)],
            color=line.get_color(),
        )
        ax_mem.plot(t, h["memory"], label=r["mode"], lw=0.8, color=line.get_color())
        if "target_mb" in r:
            ax_mem.axhline(r["target_mb"], color="k", ls="--", lw=0.8, label="target")
    ax_loss.set(title="training loss (moving average)", xlabel="training seconds", ylabel="loss")
    ax_acc.set(title="dev accuracy after each epoch", xlabel="epoch", ylabel="accuracy")
    ax_acc.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_upd.set(
        title="update size (samples per optimizer update)",
        xlabel="training seconds",
        ylabel="samples per update",
    )
    ax_upd.set_ylim(bottom=0)
    ax_mem.set(title="peak allocated memory per step", xlabel="training seconds", ylabel="MiB")
    for ax in (ax_loss, ax_acc, ax_upd, ax_mem):
        for scale in (ax.xaxis, ax.yaxis):
            plain = ScalarFormatter(useOffset=False)
            plain.set_scientific(False)
            scale.set_major_formatter(plain)
        ax.legend()
    fig.tight_layout()
    return fig
