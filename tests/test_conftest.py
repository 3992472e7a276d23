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
    argv = ["-q", "-p", "no:cacheprovider", str(TESTS / "test_text.py"), "-k", "real_reviews"]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=TESTS.parent,
    )
    assert outcome in run.stdout, run.stdout[-2000:]
    assert (run.returncode != 0) == (ci == "true"), "CI fails the run; a local run passes"


HIDE_PADDLENLP = """
import sys


class _Hidden:
    \"\"\"A finder that finds no paddlenlp, as if it were not installed.\"\"\"

    def __init__(self, finder):
        self.finder = finder

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "paddlenlp":
            return None
        return self.finder.find_spec(name, path, target)

    def __getattr__(self, name):
        return getattr(self.finder, name)


sys.meta_path[:] = [_Hidden(f) if hasattr(f, "find_spec") else f for f in sys.meta_path]
"""


def test_without_paddlenlp_the_integrations_doctests_are_left_out(tmp_path: Path) -> None:
    """The root conftest.py ignores the paddlenlp integration's modules when paddlenlp is
    missing: importing them for their doctests would be a collection error."""
    (tmp_path / "sitecustomize.py").write_text(HIDE_PADDLENLP)
    path = os.pathsep.join(str(p) for p in (tmp_path, TESTS.parent / "src"))
    env = {**os.environ, "PYTHONPATH": path}
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import importlib.util; print(importlib.util.find_spec('paddlenlp'))",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert probe.stdout.strip() == "None", "paddlenlp is hidden"
    argv = ["--collect-only", "-q", "-p", "no:cacheprovider", "src/dynbatch/integrations"]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=TESTS.parent,
    )
    assert run.returncode in (0, 5), run.stdout[-3000:]  # 5: nothing collected
    assert "error" not in run.stdout.lower(), run.stdout[-3000:]
    assert "integrations/paddlenlp/" not in run.stdout, "none of its doctests is collected"
