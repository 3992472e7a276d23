"""The shared-data fixtures: a local run without the data skips, a CI run fails."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent


@pytest.mark.parametrize(("ci", "outcome"), [("true", "1 error"), ("false", "1 skipped")])
def test_missing_shared_data_fails_in_ci_and_skips_locally(ci: str, outcome: str) -> None:
    env = {**os.environ, "CI": ci, "DYNBATCH_SHARED_DATA": str(TESTS / "no-such-dir")}
    argv = ["-q", "-p", "no:cacheprovider", str(TESTS / "test_text.py"), "-k", "paddlenlp"]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=TESTS.parent,
    )
    assert outcome in run.stdout, run.stdout[-2000:]
    assert (run.returncode != 0) == (ci == "true"), "CI fails the run; a local run passes"
