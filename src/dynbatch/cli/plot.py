"""``dynbatch stats --plot``: lengths, batch sizes and the cost of each batch, in one figure."""

from __future__ import annotations

import warnings

import numpy as np
from numpy.typing import NDArray

from .._optional import install_hint
from ..plan.options import PlanOptions
from ..plan.planning import plan_batches
from ..plan.stats import baseline_batches, batch_table
from .args import UsageError

__all__ = ["plot"]


def plot(
    path: str, lengths: NDArray[np.int64], options: PlanOptions, fixed_batch_size: int
) -> None:
    """Write the figure to ``path`` (``.png``, ``.svg`` or ``.pdf``; matplotlib needed)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError(f"--plot needs matplotlib: {install_hint('matplotlib')}") from None
    common = {
        "cost": options.cost,
        "max_cost": options.max_cost,
        "pad_to_multiple_of": options.pad_to_multiple_of,
    }
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="skipping .* over max_cost")
        bucket_plan = plan_batches(lengths, options=options)
    bucket = batch_table(lengths, bucket_plan, **common)
    fixed = batch_table(lengths, baseline_batches(lengths, options, fixed_batch_size), **common)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    axes[0].hist(lengths, bins=60, color="tab:blue")
    axes[0].set(title="sample lengths", xlabel="length", ylabel="samples")
    sizes = bucket["batch_size"]
    bins = np.unique(np.geomspace(1, sizes.max() + 1, 40).astype(np.int64))
    axes[1].hist(sizes, bins=bins if bins.size > 1 else 1, color="tab:green")
    axes[1].set(title="dynamic batch sizes (bucket)", xlabel="samples per batch", ylabel="batches")
    axes[1].set_xscale("log")
    # NOTE [ the cost plot ]: batches sorted by cost and drawn as steps as wide as their share
    # of the samples, so a plan of 170 batches and one of 400 both span the axis and read as
    # "this share of the data is in batches at or below this fraction of the budget".
    ax = axes[2]
    for name, table, color in (
        (f"fixed {fixed_batch_size}", fixed, "tab:red"),
        ("bucket", bucket, "tab:green"),
    ):
        order = np.argsort(table["cost_ratio"], kind="stable")
        ratio, share = table["cost_ratio"][order], table["batch_size"][order]
        edges = np.concatenate([[0], np.cumsum(share)]) / share.sum()
        label = f"{name}: {ratio.size} batches, mean {ratio.mean():.2f}, max {ratio.max():.2f}"
        ax.stairs(ratio, edges, baseline=None, color=color, lw=1.5, label=label)
    ax.axhline(1.0, color="k", ls="--", lw=0.8, label="max_cost")
    ax.set(
        title="batch cost / max_cost, batches sorted by cost",
        xlabel="share of the epoch's samples (one step per batch)",
        ylabel="cost / max_cost",
        xlim=(0, 1),
        ylim=(0, None),
    )
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise UsageError(f"--plot {path}: cannot write it: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
