"""Under ``make test``'s two workers a module's fixture is made once: its tests share one
xdist group (NOTE [ one worker for a module's fixture ] in ``tests/conftest.py``)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def made_once() -> list[int]:
    return []


def groups(request: pytest.FixtureRequest) -> list[str]:
    return [m.kwargs.get("name", *m.args) for m in request.node.iter_markers("xdist_group")]


def test_a_test_on_a_module_fixture_runs_in_its_modules_group(
    request: pytest.FixtureRequest, made_once: list[int]
) -> None:
    assert groups(request) == ["tests/test_parallel_groups.py"]


def test_a_test_on_no_module_fixture_goes_to_any_worker(
    request: pytest.FixtureRequest, tmp_path: object
) -> None:
    assert groups(request) == []
