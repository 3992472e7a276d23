"""The PaddleFormers CLI benchmark's command, as docs/paddleformers.md gives it, runs over two
seeds: each seed's run is made and the table is the mean over them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("paddleformers.cli.train.sft.workflow")

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_cli_benchmark_runs_over_two_seeds() -> None:
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "paddleformers_cli.py"),
        "--seeds",
        "2",
        "--n",
        "32",
        "--runs",
        "dynbatch plain",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    for seed in (1, 2):
        assert f"dynbatch plain, seed {seed}: {{" in out, f"seed {seed} made no run:\n{out[-3000:]}"
    assert "32 examples" in out and "2 seeds" in out
    assert "| dynbatch plain | 4 |" in out, "ceil(32 / 8) updates, the mean over both seeds"


def test_the_cli_benchmark_refuses_a_run_it_does_not_know() -> None:
    command = [sys.executable, str(ROOT / "benchmarks" / "paddleformers_cli.py"), "--runs", "nope"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2
    assert "--runs='nope'" in done.stderr and "unknown: nope" in done.stderr
