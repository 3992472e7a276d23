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
