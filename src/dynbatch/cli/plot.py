"""``dynbatch stats --plot``: lengths, batch sizes and the cost of each batch, in one figure.

It draws the rows the docs recommend, ``like fixed`` (and ``packed`` with ``--pack-len``),
against the fixed batch, planned as their rows of the table are.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from numpy.typing import NDArray

from .._optional import install_hint
from ..plan.epochs import plan_epoch
from ..plan.options import PlanOptions
from ..plan.stats import baseline_batches, batch_table, like_fixed_options, packed_table
from .args import UsageError

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["figure", "plot"]

#: the colour of each drawn row, the same in every panel
COLORS = {"fixed": "tab:red", "like fixed": "tab:blue", "packed": "tab:green"}


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError(f"--plot needs matplotlib: {install_hint('matplotlib')}") from None
    return plt


def _tables(
    lengths: NDArray[np.int64],
    options: PlanOptions,
    fixed_batch_size: int,
    step_time: Any,
    pack_len: int | None,
) -> dict[str, dict[str, NDArray[Any]]]:
    """The batch table of each drawn row, planned as :func:`~dynbatch.plan.stats.compare_orders`
    and :func:`~dynbatch.plan.stats.packed_stats` plan its row."""
    common = {
        "cost": options.cost,
        "max_cost": options.max_cost,
        "pad_to_multiple_of": options.pad_to_multiple_of,
    }
    fixed = baseline_batches(lengths, options, fixed_batch_size)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="skipping .* over (max_cost|budget)")
        recipe = like_fixed_options(lengths, options, fixed_batch_size, step_time)
        like = plan_epoch(lengths, recipe, 0).plan
    tables = {
        f"fixed {fixed_batch_size}": batch_table(lengths, fixed, **common),
        "like fixed": batch_table(lengths, like, **common),
    }
    if pack_len is not None:
        tables["packed"], _, _ = packed_table(
            lengths,
            pack_len,
            batch_size=fixed_batch_size,
            cost=options.cost,
            max_cost=options.max_cost,
            step_time=step_time,
            oversize=options.oversize,
            seed=options.seed,
            pad_to_multiple_of=options.pad_to_multiple_of,
            update_unit=options.update_unit,
        )
    return tables


def _counts(ax: Axes) -> None:
    """Whole-number ticks on a histogram's count axis (a count of 1 is not 0.25 steps)."""
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if ax.get_xscale() == "linear":  # lengths and sizes are whole numbers too
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _legend_below(ax: Axes) -> None:
    """The legend under the Axes, outside them, so it covers nothing they show."""
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.15), fontsize=8, frameon=False)


def figure(
    lengths: NDArray[np.int64],
    options: PlanOptions,
    fixed_batch_size: int,
    *,
    step_time: Any = None,
    pack_len: int | None = None,
) -> Figure:
    """The figure of ``--plot``: the lengths, the samples per micro-batch of ``like fixed``
    (and ``packed`` with ``pack_len``) and each batch's cost against the fixed batch's.

    Its caller closes it (``matplotlib.pyplot.close``); matplotlib needed.
    """
    plt = _pyplot()
    tables = _tables(lengths, options, fixed_batch_size, step_time, pack_len)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8), layout="constrained")
    ax = axes[0]
    if lengths.ndim == 2:  # (source, target) pairs: each side's lengths
        ax.hist(
            [lengths[:, 0], lengths[:, 1]],
            bins=60,
            color=["tab:gray", "tab:olive"],
            label=["source", "target"],
            histtype="stepfilled",
            alpha=0.6,
        )
        _legend_below(ax)
    else:
        ax.hist(lengths, bins=60, color="tab:gray")
    ax.set(title="sample lengths", xlabel="length", ylabel="samples")
    _counts(ax)
    ax = axes[1]
    planned = {name: table for name, table in tables.items() if not name.startswith("fixed")}
    largest = max(int(t["batch_size"].max()) for t in planned.values())
    if largest <= 64:  # one bar per size
        bins: Any = np.arange(1, largest + 2) - 0.5
    else:
        bins = np.unique(np.geomspace(1, largest + 1, 40).astype(np.int64))
        ax.set_xscale("log")
    ax.hist(  # side by side, a bar per row and size
        [table["batch_size"] for table in planned.values()],
        bins=bins,
        color=[COLORS[name] for name in planned],
        label=list(planned),
    )
    ax.set(
        title="samples per micro-batch",
        xlabel=f"samples per micro-batch (the fixed batch: {fixed_batch_size})",
        ylabel="micro-batches",
    )
    _counts(ax)
    _legend_below(ax)
    # NOTE [ the cost plot ]: batches sorted by cost and drawn as steps as wide as their share
    # of the samples, so a plan of 170 batches and one of 400 both span the axis and read as
    # "this share of the data is in batches at or below this fraction of the budget".
    ax = axes[2]
    for name, table in tables.items():
        order = np.argsort(table["cost_ratio"], kind="stable")
        ratio, share = table["cost_ratio"][order], table["batch_size"][order]
        edges = np.concatenate([[0], np.cumsum(share)]) / share.sum()
        label = f"{name}: {ratio.size} batches, mean {ratio.mean():.2f}, max {ratio.max():.2f}"
        color = COLORS["fixed" if name.startswith("fixed") else name]
        ax.stairs(ratio, edges, baseline=None, color=color, lw=1.5, label=label)
    ax.axhline(1.0, color="k", ls="--", lw=0.8, label="max_cost")
    ax.set(
        title="batch cost / max_cost, batches sorted by cost",
        xlabel="share of the epoch's samples (one step per batch)",
        ylabel="cost / max_cost",
        xlim=(0, 1),
        ylim=(0, None),
    )
    _legend_below(ax)
    return cast("Figure", fig)


def plot(
    path: str,
    lengths: NDArray[np.int64],
    options: PlanOptions,
    fixed_batch_size: int,
    *,
    step_time: Any = None,
    pack_len: int | None = None,
) -> None:
    """Write :func:`figure` to ``path`` (``.png``, ``.svg`` or ``.pdf``; matplotlib needed)."""
    plt = _pyplot()
    fig = figure(lengths, options, fixed_batch_size, step_time=step_time, pack_len=pack_len)
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise UsageError(f"--plot {path}: cannot write it: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
