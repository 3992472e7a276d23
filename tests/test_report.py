"""The example's curves (examples/report.py) show what a reader compares between modes: the
update size (samples per optimizer update), the loss, the dev accuracy of every epoch and the
memory, on axes with plain tick labels."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from example_runs import EXAMPLES

pytest.importorskip("matplotlib")


def report() -> ModuleType:
    sys.path.insert(0, str(EXAMPLES))
    try:
        return importlib.import_module("report")
    finally:
        sys.path.remove(str(EXAMPLES))


def row(mode: str, micro: list[int], per_update: int, accuracy: list[float]) -> dict[str, Any]:
    """A mode's record: micro-batches of ``micro`` samples, ``per_update`` of them an update."""
    steps = len(micro)
    ends = [(i + 1) % per_update == 0 for i in range(steps)]
    sizes = [sum(micro[i - per_update + 1 : i + 1]) for i in range(steps) if ends[i]]
    times = [float(i + 1) for i in range(steps) if ends[i]]
    return {
        "mode": mode,
        "dev_accuracy_by_epoch": accuracy,
        "history": {
            "time": [float(i + 1) for i in range(steps)],
            "loss": list(np.linspace(0.7, 0.4, steps)),
            "batch_size": [float(n) for n in micro],
            "memory": [30.0 + n for n in micro],
            "update_time": times,
            "update_size": [float(s) for s in sizes],
        },
    }


@pytest.fixture
def figure() -> Any:
    rows = [
        row("fixed", [32] * 60, 1, [0.70, 0.80]),
        row("dynamic", [8, 9, 7, 8] * 60, 4, [0.72, 0.81]),
    ]
    fig = report().figure(rows)
    fig.canvas.draw()  # tick labels are made when the figure is drawn
    yield fig
    import matplotlib.pyplot as plt

    plt.close(fig)


def axis(fig: Any, word: str) -> Any:
    (found,) = [ax for ax in fig.axes if word in ax.get_title().lower()]
    return found


def test_the_update_size_is_drawn_not_the_micro_batch_size(figure: Any) -> None:
    updates = axis(figure, "update")
    drawn = {line.get_label(): np.asarray(line.get_ydata()) for line in updates.get_lines()}
    assert set(drawn) >= {"fixed", "dynamic"}, drawn
    assert (drawn["fixed"] == 32).all(), "a fixed batch's update is its batch"
    assert (drawn["dynamic"] == 32).all(), "four micro-batches of 8, 9, 7, 8: updates of 32"
    assert "samples" in updates.get_ylabel()


def test_the_dev_accuracy_of_every_epoch_is_beside_the_loss(figure: Any) -> None:
    accuracy = axis(figure, "accuracy")
    lines = {line.get_label(): line for line in accuracy.get_lines()}
    assert list(lines["dynamic"].get_xdata()) == [1, 2], "after epochs 1 and 2"
    assert list(lines["dynamic"].get_ydata()) == [0.72, 0.81]
    loss = axis(figure, "loss")
    assert loss.get_subplotspec().rowspan == accuracy.get_subplotspec().rowspan, "side by side"


def test_every_axis_has_plain_tick_labels(figure: Any) -> None:
    for ax in figure.axes:
        assert ax.get_yscale() == "linear" and ax.get_xscale() == "linear", ax.get_title()
        labels = [t.get_text() for t in ax.get_yticklabels() + ax.get_xticklabels()]
        odd = [text for text in labels if "times" in text or "^" in text or "e+" in text]
        assert not odd, f"{ax.get_title()}: {odd}"
        offsets = ax.yaxis.get_offset_text().get_text() + ax.xaxis.get_offset_text().get_text()
        assert offsets == "", f"{ax.get_title()}: an offset or multiplier {offsets!r}"


def test_the_curves_are_written(tmp_path: Path) -> None:
    rows = [row("fixed", [32] * 10, 1, [0.7])]
    report().curves(rows, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
