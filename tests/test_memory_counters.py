"""The allocator's counters: paddle's CPU counters for real, the device ones against a stand-in.

Only the CPU allocator runs here. The CUDA, XPU and custom-device counters are checked
against a stand-in for paddle's device modules: that they call the functions paddle documents,
with the device paddle's functions expect. That they return the right numbers on a real
device is not tested here (no GPU, XPU or NPU).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import paddle
import pytest

import dynbatch.memory.counters as counters
from dynbatch.memory import (
    AllocatorStatsUnavailable,
    Counter,
    current_memory_mib,
    memory_source,
    memory_target,
    peak_memory_mib,
    reset_peak_memory,
)
from dynbatch.memory.counters import DeviceCounter, HostCounter, counter_for


# -- the allocator's counters -------------------------------------------------------------------
def test_allocator_counters_follow_a_tensor() -> None:
    reset_peak_memory()
    before = current_memory_mib()
    x = paddle.ones([16 * 2**18], dtype="float32")  # 16 MiB
    assert current_memory_mib() == pytest.approx(before + 16, abs=0.1)
    del x
    assert current_memory_mib() == pytest.approx(before, abs=0.1)
    assert peak_memory_mib() == pytest.approx(before + 16, abs=0.1)
    reset_peak_memory()
    assert peak_memory_mib() == pytest.approx(before, abs=0.1)


def test_the_allocator_is_chosen_by_device_and_build() -> None:
    # the CUDA branch is chosen only on a CUDA build; it cannot run here (untested on GPU)
    assert memory_source() == "cpu allocator"
    assert counter_for("cpu", cuda_build=False).name == "cpu allocator"
    assert counter_for("cpu", cuda_build=True).name == "cpu allocator"
    assert counter_for("gpu:1", cuda_build=True).name == "cuda allocator"
    with pytest.raises(AllocatorStatsUnavailable, match="'gpu:0' on a build without CUDA"):
        counter_for("gpu:0", cuda_build=False)
    with pytest.raises(AllocatorStatsUnavailable, match="'xpu:0'"):
        counter_for("xpu:0", cuda_build=False)


def test_memory_target_on_cpu_says_to_give_max_cost_in_mib() -> None:
    with pytest.raises(RuntimeError, match="give max_cost in MiB"):
        memory_target()
    for bad in (0, 1.5, True, "0.9"):
        with pytest.raises(ValueError, match="fraction must be a number in"):
            memory_target(bad)  # type: ignore[arg-type]


def test_host_counter_reads_bytes() -> None:
    host = HostCounter()
    assert isinstance(host, Counter) and host.name == "cpu allocator"
    host.reset_peak()
    before = host.current_bytes()
    x = paddle.ones([2**18], dtype="float32")
    assert host.current_bytes() - before == 2**20
    del x
    assert host.peak_bytes() - before == 2**20 and host.current_bytes() == before


class StandIn:
    """A paddle device module that records each call and answers with a number."""

    def __init__(self, missing: tuple[str, ...] = ()) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.missing = missing

    def __getattr__(self, name: str) -> Any:
        if name in self.missing or name.startswith("__"):
            raise AttributeError(name)

        def call(*args: Any) -> Any:
            self.calls.append((name, args))
            if name == "get_device_properties":
                return SimpleNamespace(total_memory=8 * 2**30)
            return {"max_memory_allocated": 3 * 2**20, "memory_allocated": 2**20}.get(
                name, 4 * 2**30
            )

        return call


def stand_in_paddle(
    monkeypatch: pytest.MonkeyPatch,
    device: str,
    *,
    cuda: bool = False,
    xpu: bool = False,
    custom: list[str] | None = None,
    missing: tuple[str, ...] = (),
) -> dict[str, StandIn]:
    modules = {name: StandIn(missing) for name in ("cuda", "xpu", "custom_device")}
    fake = SimpleNamespace(
        device=SimpleNamespace(
            get_device=lambda: device,
            is_compiled_with_cuda=lambda: cuda,
            is_compiled_with_xpu=lambda: xpu,
            get_all_custom_device_type=lambda: custom,
            **modules,
        )
    )
    monkeypatch.setattr(counters, "_paddle", lambda: fake)
    return modules


@pytest.mark.parametrize(
    ("device", "build", "module", "name", "argument", "total"),
    [
        ("gpu:1", {"cuda": True}, "cuda", "cuda allocator", 1, ("get_device_properties", (1,))),
        ("xpu:1", {"xpu": True}, "xpu", "xpu allocator", 1, ("memory_total", (1,))),
        (
            "npu:1",
            {"custom": ["npu"]},
            "custom_device",
            "npu allocator",
            "npu:1",
            ("get_device_properties", ("npu:1",)),
        ),
    ],
)
def test_device_counters_call_paddles_own_module_for_the_device(
    monkeypatch: pytest.MonkeyPatch,
    device: str,
    build: dict[str, Any],
    module: str,
    name: str,
    argument: int | str,
    total: tuple[str, tuple[Any, ...]],
) -> None:
    modules = stand_in_paddle(monkeypatch, device, **build)
    assert memory_source() == name
    reset_peak_memory()
    assert peak_memory_mib() == 3.0 and current_memory_mib() == 1.0
    counter = counters.current_counter()
    assert isinstance(counter, DeviceCounter)
    counter.empty_cache()
    assert memory_target(0.5) == 0.5 * (4 if module == "xpu" else 8) * 1024
    assert modules[module].calls == [
        ("reset_max_memory_allocated", (argument,)),
        ("max_memory_allocated", (argument,)),
        ("memory_allocated", (argument,)),
        ("empty_cache", ()),
        total,
    ]
    assert all(not m.calls for key, m in modules.items() if key != module), "no other module"


def test_a_build_without_a_counter_names_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    stand_in_paddle(monkeypatch, "xpu:0", xpu=True, missing=("max_memory_allocated",))
    with pytest.raises(
        AllocatorStatsUnavailable, match=r"no paddle\.device\.xpu\.max_memory_alloc"
    ):
        peak_memory_mib()


def test_devices_paddle_counts_nothing_for_are_refused_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stand_in_paddle(monkeypatch, "ipu:0", custom=None)
    with pytest.raises(
        AllocatorStatsUnavailable, match=r"custom device paddle knows \(none here\); .*'ipu:0'"
    ):
        memory_source()
    assert counter_for("xpu:2", cuda_build=False, xpu_build=True) == DeviceCounter("xpu", 2)
    with pytest.raises(AllocatorStatsUnavailable, match="'npu:0'"):
        counter_for("npu:0", cuda_build=True, custom_types=["mlu"])
