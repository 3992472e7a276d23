"""The PaddleFormers host's tests, run in their own environment (``make test`` makes
``.venv-pf``, where paddlenlp is not installed); a skip here fails under CI.

NOTE [ no skips under CI ]
    These tests are the only check that dynbatch works with PaddleFormers' Trainer, and
    they run in a second environment that CI builds just for them. A test here that skips
    (paddleformers missing from that environment, a name PaddleFormers renamed, a file not
    found) would let CI pass without checking anything. So when ``CI`` is set
    (``tests/ci.py``), every skip in this folder is reported as a failure with its reason:
    a module's skip at collection, a skip mark, a skip inside a test. Locally a skip stays
    a skip. An expected failure (``xfail``) is not a skip and stays one.
"""

from __future__ import annotations

import sys
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
from ci import IN_CI, ci_value

# the paddlenlp tests' toys and references (they import no framework), shared here (pf_toy.py)
sys.path.insert(0, str(Path(__file__).parents[1] / "scripts"))
#: the tests' helpers, which hold no doctests: the tests import them (and skip first where
#: PaddleFormers' Trainer is missing), pytest's --doctest-modules need not
collect_ignore = ["pf_toy.py", "pf_ranks.py", "pf_cli.py"]

_WHY = "a test of tests/paddleformers fails rather than skips (NOTE [ no skips under CI ])"


def _reason(longrepr: Any) -> str:
    """The skip's reason from a skipped report's ``(path, line, reason)``."""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


def _fail_skip(report: Any) -> None:
    if IN_CI and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"{_reason(report.longrepr)} ({ci_value()}: {_WHY})"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: Any) -> Generator[None, Any, None]:
    outcome = yield
    _fail_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Generator[None, Any, None]:
    outcome = yield
    _fail_skip(outcome.get_result())
