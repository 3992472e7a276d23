"""The suite's own rules: a local run skips where a CI run fails, and each Trainer host's
tests and doctests are collected only where that host is installed."""

from __future__ import annotations

import os
import shutil
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


HIDE = """
import sys


class _Hidden:
    \"\"\"A finder that finds no {name}, as if it were not installed.\"\"\"

    def __init__(self, finder):
        self.finder = finder

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "{name}":
            return None
        return self.finder.find_spec(name, path, target)

    def __getattr__(self, name):
        return getattr(self.finder, name)


sys.meta_path[:] = [_Hidden(f) if hasattr(f, "find_spec") else f for f in sys.meta_path]
"""
HIDE_PADDLENLP = HIDE.replace("{name}", "paddlenlp")


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


#: A test file of tests/paddleformers with every kind of skip, a pass and an expected failure.
SKIPPING_TESTS = """
import pytest


def test_passes():
    pass


@pytest.mark.skip(reason="a skip mark")
def test_marked():
    pass


def test_skips_inside():
    pytest.skip("a skip inside the test")


@pytest.mark.xfail(reason="an expected failure", strict=True)
def test_expected_failure():
    raise AssertionError
"""
#: A test module of tests/paddleformers that skips whole, at collection.
SKIPPING_MODULE = """
import pytest

pytest.importorskip("no_such_module_anywhere", reason="a module skipped whole")


def test_never_runs():
    pass
"""


@pytest.mark.parametrize(
    ("ci", "outcome"),
    [
        ("true", "1 failed, 1 passed, 1 xfailed, 2 errors"),
        ("false", "1 passed, 3 skipped, 1 xfailed"),
    ],
)
def test_a_skip_in_tests_paddleformers_fails_in_ci(tmp_path: Path, ci: str, outcome: str) -> None:
    """tests/paddleformers/conftest.py (NOTE [ no skips under CI ]), run on its own copy beside
    tests/conftest.py: under CI every kind of skip fails with its reason; locally it skips."""
    tests = tmp_path / "tests"
    (tests / "paddleformers").mkdir(parents=True)
    for name in ("conftest.py", "ci.py", "paddleformers/conftest.py"):
        shutil.copy(TESTS / name, tests / name)
    (tests / "paddleformers" / "test_skips.py").write_text(SKIPPING_TESTS)
    (tests / "paddleformers" / "test_skipped_module.py").write_text(SKIPPING_MODULE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    argv = ["-q", "-p", "no:cacheprovider", "--continue-on-collection-errors", "-rA"]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *argv, "tests/paddleformers"],
        capture_output=True,
        text=True,
        env={**os.environ, "CI": ci},
        cwd=tmp_path,
    )
    assert outcome in run.stdout, run.stdout[-3000:]
    assert (run.returncode != 0) == (ci == "true"), "CI fails the run; a local run passes"
    if ci == "true":
        for reason in ("a skip mark", "a skip inside the test", "a module skipped whole"):
            assert f"{reason} (CI=true: a test of tests/paddleformers fails" in run.stdout, reason


@pytest.mark.parametrize("installed", [False, True])
def test_tests_paddleformers_are_collected_only_where_paddleformers_is(
    tmp_path: Path, installed: bool
) -> None:
    """The root conftest.py leaves tests/paddleformers and the paddleformers host's package
    out of a suite without paddleformers (the paddlenlp one in .venv): importing them would be
    a collection error. ``installed`` puts an empty ``paddleformers`` package first on the
    path, so the tests are collected (and skip: it has no Trainer); else the package is
    hidden. The host's own package is left out where it is installed: its doctests import its
    Trainer, which the empty package has not (``make test-paddleformers`` collects them)."""
    others = [f"--ignore={p}" for p in sorted(TESTS.glob("*.py")) if p.name != "conftest.py"]
    if installed:
        (tmp_path / "paddleformers").mkdir()
        (tmp_path / "paddleformers" / "__init__.py").write_text("")
        others.append(f"--ignore={TESTS.parent / 'src/dynbatch/integrations/paddleformers'}")
    else:
        (tmp_path / "sitecustomize.py").write_text(HIDE.replace("{name}", "paddleformers"))
    path = os.pathsep.join(str(p) for p in (tmp_path, TESTS.parent / "src"))
    argv = ["--collect-only", "-q", "-p", "no:cacheprovider", "tests", "src/dynbatch/integrations"]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *argv, *others, f"--ignore={TESTS / 'scripts'}"],
        capture_output=True,
        text=True,
        # a local run's collection: under CI a module's skip there fails by design (the
        # empty stand-in has no Trainer), which is not what this test is about
        env={**os.environ, "PYTHONPATH": path, "CI": "false"},
        cwd=TESTS.parent,
    )
    assert run.returncode in (0, 5), run.stdout[-3000:]  # 5: nothing collected
    assert "error" not in run.stdout.lower(), run.stdout[-3000:]
    assert ("tests/paddleformers/" in run.stdout) == installed, run.stdout[-3000:]
    assert "integrations/paddleformers/" not in run.stdout or installed, run.stdout[-3000:]
