"""MemoryCost: coefficients, JSON save/load (and the files it refuses), no paddle needed."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import dynbatch
from dynbatch import MemoryCost
from dynbatch.memory.cost import CalibrationReport, Probe, StepTimeModel


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bad.json"
    path.write_text(text)
    return path


GOOD = {"format": "dynbatch.MemoryCost", "version": 1, "c": 1.0, "a": 0.5, "b": 0.0, "floor": 0.0}


@pytest.mark.parametrize(
    ("content", "error", "match"),
    [
        (None, FileNotFoundError, "MemoryCost file not found: .*missing.json"),
        ("{not json", ValueError, "bad.json is not valid JSON"),
        ('{"c": 1}', ValueError, "bad.json is not a saved MemoryCost"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "b"}), ValueError, "lacks the key"),
        (json.dumps(GOOD | {"a": "0.5"}), ValueError, "bad.json: MemoryCost a must be a finite"),
        (json.dumps(GOOD | {"c": -1.0}), ValueError, "bad.json: MemoryCost c must be .* >= 0"),
        (json.dumps(GOOD | {"report": {"probes": 3}}), ValueError, "bad.json: "),
    ],
)
def test_load_errors_name_the_file(
    tmp_path: Path, content: str | None, error: type[Exception], match: str
) -> None:
    path = tmp_path / "missing.json" if content is None else write(tmp_path, content)
    with pytest.raises(error, match=match):
        MemoryCost.load(path)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"a": -0.1}, "MemoryCost a must be a finite number >= 0, got a=-0.1"),
        ({"c": float("nan")}, "got c=nan"),
        ({"b": True}, "got b=True"),
        ({"a": 0.0, "b": 0.0}, "needs a > 0 or b > 0"),
    ],
)
def test_memory_cost_rejects_bad_coefficients(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        MemoryCost(**({"c": 1.0, "a": 1.0, "b": 1.0} | kwargs))


def test_memory_cost_is_nondecreasing() -> None:
    cost = MemoryCost(c=40.0, a=0.02, b=3e-5, floor=50.0)
    n, length = np.meshgrid(np.arange(0, 300), np.arange(1, 600), indexing="ij")
    values = cost(n, length)
    assert values.dtype == np.float64
    assert (np.diff(values, axis=0) >= 0).all() and (np.diff(values, axis=1) >= 0).all()
    assert values.min() == 50.0, "the floor"


def test_memory_cost_imports_and_plans_without_paddle() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["paddle"] = None  # as if not installed
        from dynbatch.memory import MemoryCost, calibrate
        import dynbatch
        cost = MemoryCost(c=10.0, a=0.5, b=0.0)
        plan = dynbatch.plan_batches([5, 3, 9, 2], 25, cost=cost, order="none")
        print([b.tolist() for b in plan])
        try:
            calibrate(lambda n, L: None, max_len=8)
        except ImportError as exc:
            print(exc)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[0] == "[[0, 1, 2], [3]]"
    assert "pip install paddlepaddle" in out.stdout and "dynbatch[" not in out.stdout


# -- bad input, named (each failed before its fix) -------------------------------------------------
def test_load_of_a_directory_is_a_named_input_error(tmp_path: Path) -> None:
    with pytest.raises(dynbatch.InputError, match=r"MemoryCost file .* is a directory"):
        MemoryCost.load(tmp_path)


def test_load_of_a_file_that_is_not_utf8_is_a_named_input_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"format": "dynbatch.MemoryCost", "note": "caf\xe9"}')
    with pytest.raises(dynbatch.InputError, match=r"latin1.json is not UTF-8 text"):
        MemoryCost.load(path)


@pytest.mark.parametrize(
    ("report", "match"),
    [
        ({"probes": [{"n": "many"}]}, r"report\.probes\[0\]\.n must be an integer >= 1"),
        ({"max_len": -5}, r"report\.max_len must be an integer >= 1, got max_len=-5"),
        ({"probes": [{"role": "guess"}]}, r"report\.probes\[0\]\.role must be one of"),
        ({"probes": [{"peak_mib": -1.0}]}, r"report\.probes\[0\]\.peak_mib must be"),
        ({"fit_error": "small"}, r"report\.fit_error must be"),
        ({"source": 3}, r"report\.source must be a string"),
    ],
)
def test_load_refuses_nonsense_report_fields_by_name(
    tmp_path: Path, report: dict[str, Any], match: str
) -> None:
    cost = MemoryCost(c=1.0, a=0.5, b=0.0, report=_a_report())
    cost.save(tmp_path / "good.json")
    data = json.loads((tmp_path / "good.json").read_text())
    for key, value in report.items():
        if key == "probes":
            data["report"]["probes"][0].update(value[0])
        else:
            data["report"][key] = value
    with pytest.raises(dynbatch.InputError, match=match):
        MemoryCost.load(write(tmp_path, json.dumps(data)))


def _a_report() -> Any:
    probe = Probe(
        n=2, length=8, role="fit", peak_mib=3.0, resident_mib=1.0, seconds=0.1, predicted_mib=3.0
    )
    return CalibrationReport(
        probes=(probe,),
        fit_error=0.0,
        held_out_error=0.0,
        time_held_out_error=0.0,
        tolerance=0.1,
        seconds=1.0,
        source="cpu allocator",
        device="cpu",
        paddle_version="3.0.0",
        max_len=8,
        max_batch_size=None,
        min_len=1,
        max_tokens=16,
    )


#: a file as the single-module dynbatch.memory wrote it (calibrate on paddle 3.3.1, CPU), its
#: report cut to two probes
WRITTEN_BEFORE = {
    "format": "dynbatch.MemoryCost",
    "version": 1,
    "c": 0.0,
    "a": 0.00048828124999999984,
    "b": 0.0,
    "floor": 0.0009765625,
    "time_model": {
        "c": 0.0002476367886185346,
        "a": 3.7063023018160157e-09,
        "b": 1.6868226351967189e-09,
    },
    "report": {
        "probes": [
            {
                "n": 1,
                "length": 2,
                "role": "floor",
                "peak_mib": 0.0009765625,
                "resident_mib": 0.0,
                "seconds": 0.000264106000031461,
                "predicted_mib": 0.0009765625,
            },
            {
                "n": 128,
                "length": 2,
                "role": "fit",
                "peak_mib": 0.125,
                "resident_mib": 0.0,
                "seconds": 0.00022825200005627266,
                "predicted_mib": 0.12499999999999996,
            },
        ],
        "fit_error": 3.50885301609926e-16,
        "held_out_error": 3.383536836952858e-16,
        "time_held_out_error": 0.2672684020859612,
        "tolerance": 0.1,
        "seconds": 1.7910514090000333,
        "source": "cpu allocator",
        "device": "cpu",
        "paddle_version": "3.3.1",
        "max_len": 64,
        "max_batch_size": None,
        "min_len": 2,
        "max_tokens": 1024,
    },
}


def test_files_written_before_the_package_split_still_load(tmp_path: Path) -> None:
    path = write(tmp_path, json.dumps(WRITTEN_BEFORE))
    cost = MemoryCost.load(path)
    assert (cost.c, cost.a, cost.b, cost.floor) == (0.0, 0.00048828124999999984, 0.0, 0.0009765625)
    assert cost.time_model == StepTimeModel(
        c=0.0002476367886185346, a=3.7063023018160157e-09, b=1.6868226351967189e-09
    )
    assert cost.report is not None and cost.report.probes[1].peak_mib == 0.125
    assert cost.time_model.error == 0.0, "a file without the time model's error: taken as exact"
    cost.save(tmp_path / "again.json")
    again = json.loads((tmp_path / "again.json").read_text())
    time_model = {**WRITTEN_BEFORE["time_model"], "error": 0.0}  # the one key added since
    assert again == {**WRITTEN_BEFORE, "time_model": time_model}, "same format"


coefficient = st.floats(0, 1e6, allow_nan=False, allow_subnormal=True)


@given(c=coefficient, a=coefficient, b=coefficient, floor=coefficient, data=st.data())
def test_save_load_round_trip_of_any_coefficients_is_exact(
    c: float, a: float, b: float, floor: float, data: st.DataObject
) -> None:
    if a == 0 and b == 0:
        a = data.draw(st.floats(1e-300, 1e6), label="a")
    time_model = data.draw(
        st.none() | st.builds(StepTimeModel, c=coefficient, a=coefficient, b=coefficient)
    )
    cost = MemoryCost(c=c, a=a, b=b, floor=floor, time_model=time_model, report=_a_report())
    with tempfile.TemporaryDirectory() as tmp:
        cost.save(Path(tmp) / "cost.json")
        loaded = MemoryCost.load(Path(tmp) / "cost.json")
    assert loaded == cost and loaded.spec() == cost.spec()
    assert loaded.time_model == time_model and loaded.report == cost.report
    n, length = np.array([1, 7, 300]), np.array([1, 64, 4096])
    assert np.array_equal(loaded(n, length), cost(n, length))


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        "null",
        '"dynbatch.MemoryCost"',
        json.dumps(GOOD | {"time_model": [1, 2, 3]}),
        json.dumps(GOOD | {"time_model": {"c": 1, "a": 1}}),
        json.dumps(GOOD | {"time_model": {"c": 1, "a": 1, "b": 1, "floor": 2}}),
        json.dumps(GOOD | {"report": []}),
        json.dumps(GOOD | {"report": {"probes": [[1, 2]]}}),
        json.dumps(GOOD | {"c": float("inf")}),
        json.dumps(GOOD | {"floor": None}),
        json.dumps(GOOD | {"a": [0.5]}),
    ],
)
def test_load_of_malformed_files_is_always_an_input_error(tmp_path: Path, text: str) -> None:
    with pytest.raises(dynbatch.InputError, match=r"bad\.json"):
        MemoryCost.load(write(tmp_path, text))


@pytest.mark.parametrize("version", [True, 1.0, "1"])
def test_load_refuses_a_version_that_only_equals_one(tmp_path: Path, version: Any) -> None:
    with pytest.raises(dynbatch.InputError, match=rf"MemoryCost of version {version!r}"):
        MemoryCost.load(write(tmp_path, json.dumps(GOOD | {"version": version})))


def test_load_of_deeply_nested_json_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(dynbatch.InputError, match=r"bad\.json is not valid JSON"):
        MemoryCost.load(write(tmp_path, "[" * 100_000 + "]" * 100_000))


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(obj, dict):
        out += [p for k, v in obj.items() for p in _paths(v, (*prefix, k))]
    elif isinstance(obj, list):
        out += [p for i, v in enumerate(obj) for p in _paths(v, (*prefix, i))]
    return out[1:] if not prefix else out


ODD_VALUES = [None, True, 0, -1, 2**70, 1.5, -0.0, float("nan"), float("inf"), "x", [], {}, [1]]


@given(
    edits=st.lists(
        st.tuples(st.sampled_from(_paths(WRITTEN_BEFORE)), st.sampled_from([*ODD_VALUES, "DEL"])),
        min_size=1,
        max_size=3,
    )
)
def test_any_edit_of_a_saved_file_loads_exactly_or_is_an_input_error(
    edits: list[tuple[tuple[Any, ...], Any]],
) -> None:
    data = json.loads(json.dumps(WRITTEN_BEFORE))
    for path, value in edits:
        parent = data
        try:
            for key in path[:-1]:
                parent = parent[key]
            if value == "DEL" and isinstance(parent, dict):
                parent.pop(path[-1], None)
            elif value != "DEL":
                parent[path[-1]] = json.loads(json.dumps(value))
        except (KeyError, IndexError, TypeError):
            pass  # an earlier edit removed or replaced the way there
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "edited.json"
        path.write_text(json.dumps(data))
        try:
            cost = MemoryCost.load(path)
        except dynbatch.InputError:
            return
        cost.save(path)
        again = MemoryCost.load(path)
    assert again == cost and again.report == cost.report and again.time_model == cost.time_model


def test_a_report_without_probes_is_refused(tmp_path: Path) -> None:
    data = json.loads(json.dumps(WRITTEN_BEFORE))
    data["report"]["probes"] = []
    with pytest.raises(dynbatch.InputError, match=r"report\.probes must be Probe records"):
        MemoryCost.load(write(tmp_path, json.dumps(data)))


def test_a_torn_save_is_named_on_load_and_a_failed_one_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NOTE [ atomic writes ]: a cost cut off mid-file is an InputError naming it, never half
    a cost; a save that cannot reach the disk leaves the cost saved before."""
    import os

    path = tmp_path / "cost.json"
    MemoryCost(c=1.0, a=0.5, b=0.25).save(path)
    whole = path.read_bytes()
    for cut in (len(whole) // 2, len(whole) - 3):
        path.write_bytes(whole[:cut])
        with pytest.raises(dynbatch.InputError, match=r"cost\.json is not valid JSON"):
            MemoryCost.load(path)
    path.write_bytes(whole)

    def full_disk(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        MemoryCost(c=2.0, a=0.5, b=0.25).save(path)
    assert MemoryCost.load(path).c == 1.0, "the cost saved before, whole"
    assert [p.name for p in tmp_path.iterdir()] == ["cost.json"], "no partial file left"


def test_the_reports_last_line_says_what_each_error_is_of() -> None:
    """ "step time held-out 45.1%" read as a memory error: the line names the model each error
    is of, and what the step time's is measured against."""
    report = dataclasses.replace(_a_report(), fit_error=0.0012, time_held_out_error=0.451)
    last = str(report).splitlines()[-1]
    assert "of the memory model: fit 0.12%, held-out 0.00% (tolerance 10%)" in last, last
    assert "of the step-time model on the held-out probes: 45.1%" in last, last
    assert "predicted seconds against the measured" in last, last
