"""Paddle's "No ccache found" notice is not printed by the processes dynbatch and its
examples start: it concerns building C++ extensions, which none of them does."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("paddle")
NOTICE = "No ccache found"


def python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def test_paddle_imported_by_dynbatch_prints_no_ccache_notice() -> None:
    done = python(
        "import dynbatch, sys\ndynbatch.DynamicBatchSampler\nprint('paddle' in sys.modules)"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "True", "the sampler imported paddle"
    assert NOTICE not in done.stderr, done.stderr[-2000:]


def test_only_paddles_own_notice_is_left_out() -> None:
    done = python(
        "import warnings, dynbatch\n"
        "dynbatch.DynamicBatchSampler\n"
        "warnings.warn('No ccache found, said by another module', UserWarning)\n"
    )
    assert "No ccache found, said by another module" in done.stderr, "other modules' still show"


def test_the_cli_prints_no_ccache_notice(tmp_path) -> None:  # type: ignore[no-untyped-def]
    lengths = tmp_path / "lengths.npy"
    np.save(lengths, np.arange(1, 200))
    done = subprocess.run(
        [sys.executable, "-m", "dynbatch", "stats", str(lengths), "--max-cost", "200000"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert NOTICE not in done.stdout + done.stderr
