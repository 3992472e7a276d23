"""examples/quickstart.py is the README's first block, and it trains: the loss falls, the
held-out accuracy is well above chance, and the updates are the ones planned."""

from __future__ import annotations

import re

import pytest
from example_runs import EXAMPLES, run_example
from test_readme import README, python_blocks

QUICKSTART = EXAMPLES / "quickstart.py"
EPOCH = re.compile(r"^epoch (\d+): train loss ([\d.]+), dev accuracy ([\d.]+)$", re.MULTILINE)


def test_the_readme_shows_the_quickstart_whole() -> None:
    first = python_blocks(README.read_text(encoding="utf-8"))[0][1]
    assert first == QUICKSTART.read_text(encoding="utf-8").rstrip("\n"), (
        "README's first Python block is examples/quickstart.py, character for character"
    )


def test_the_quickstart_is_short() -> None:
    code = [
        line
        for line in QUICKSTART.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    assert len(code) <= 60, f"{len(code)} lines of code"


@pytest.mark.slow
def test_the_quickstart_trains() -> None:
    done = run_example("quickstart.py", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    epochs = [(int(e), float(loss), float(acc)) for e, loss, acc in EPOCH.findall(done.stdout)]
    assert [e for e, _, _ in epochs] == [0, 1, 2], done.stdout
    losses = [loss for _, loss, _ in epochs]
    assert losses == sorted(losses, reverse=True) and losses[-1] < losses[0] - 0.05, losses
    assert epochs[-1][2] >= 0.8, "held-out accuracy well above chance (0.5)"
    steps = re.search(r"^(\d+) updates, as planned: (\d+)$", done.stdout, re.MULTILINE)
    assert steps is not None and steps[1] == steps[2], done.stdout
    assert abs(int(steps[1]) - 3 * 2000 / 32) <= 3, "an update per 32 reviews, 3 epochs"
