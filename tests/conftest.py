from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).parent))  # tests/strategies.py, tests/ci.py
from ci import IN_CI, ci_value

settings.register_profile(
    "ci", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "dev", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci" if IN_CI else "dev")

#: The shared corpus and vocabulary: beside the clone (``../shared/data``), or where
#: DYNBATCH_SHARED_DATA says.
SHARED = Path(
    os.environ.get("DYNBATCH_SHARED_DATA")
    or Path(__file__).resolve().parents[1].parent / "shared" / "data"
)


def shared_file(name: str) -> Path:
    """A shared data file; missing, it skips the test locally and fails it in CI.

    A CI run must exercise the real-data tests, so it cannot pass by skipping them.
    """
    path = SHARED / name
    if not path.is_file():
        message = (
            f"shared data file not found at {path}: put shared/data beside the clone or set "
            "DYNBATCH_SHARED_DATA"
        )
        if IN_CI:
            pytest.fail(f"{message} ({ci_value()}: missing data fails, never skips)")
        pytest.skip(message)
    return path


@pytest.fixture(scope="session")
def chnsenticorp_csv() -> Path:
    return shared_file("chnsenticorp_htl_all.csv")


@pytest.fixture(scope="session")
def bert_vocab() -> Path:
    return shared_file("bert-base-chinese-vocab.txt")


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist registers the mark itself; without it (a plain `pytest`) it is still known
    config.addinivalue_line("markers", "xdist_group(name): run on one worker under -n (xdist)")


# NOTE [ one worker for a module's fixture ]
#     ``make test`` runs the suite on two workers (pytest-xdist, ``-n 2 --dist loadgroup``). A
#     module-scoped fixture is made once per worker that runs a test of its module, and some are
#     runs of their own (the docs' build, a training run, a model calibrated), so dealing those
#     tests to both workers would make them twice. Every test that uses a fixture of module
#     scope is put in its module's ``xdist_group``: one worker runs them, the fixture made once;
#     every other test goes to whichever worker is free.
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Group the tests on a module's fixture (NOTE [ one worker for a module's fixture ])."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.values() if info is not None else ()
        if any(d and d[-1].scope == "module" for d in defs):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
