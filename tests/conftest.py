from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).parent))  # tests/strategies.py

settings.register_profile(
    "ci", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "dev", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def chnsenticorp_csv() -> Path:
    path = SHARED / "chnsenticorp_htl_all.csv"
    if not path.exists():
        pytest.skip(f"shared corpus not found at {path}")
    return path


@pytest.fixture(scope="session")
def bert_vocab() -> Path:
    path = SHARED / "bert-base-chinese-vocab.txt"
    if not path.exists():
        pytest.skip(f"shared vocabulary not found at {path}")
    return path
