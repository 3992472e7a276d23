"""The allocator's counters behind one small interface: what calibrate and preflight read.

A :class:`Counter` resets and reads the peak, and reads the current amount, of
memory an allocator has handed out, in bytes. Paddle keeps such counters for
its host (CPU) allocator and for each device allocator; :func:`current_counter`
picks the one for paddle's current device, and ``calibrate(..., counter=...)``
or ``preflight(..., counter=...)`` take any other (a test's own, say).

NOTE [ which counters paddle has ]
    CPU: ``paddle.base.core.host_memory_stat_{peak,current}_value("Allocated", 0)``
    and ``host_memory_stat_reset_peak_value``. CUDA, XPU and custom devices
    (``npu``, ``mlu``, ... through PaddleCustomDevice): the per-device modules
    ``paddle.device.cuda``, ``paddle.device.xpu`` and
    ``paddle.device.custom_device``, each with ``max_memory_allocated``,
    ``memory_allocated``, ``reset_max_memory_allocated`` and ``empty_cache`` (on a
    CUDA build ``paddle.device.max_memory_allocated`` *is* the CUDA one; the
    explicit modules also keep a CUDA build with a custom device plugin apart).
    Only the CPU counters run where dynbatch is tested; the CUDA, XPU and custom
    device ones follow paddle's documented API and are exercised against a
    stand-in module only. A build or device without counters raises
    :class:`AllocatorStatsUnavailable`, naming what is missing.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol, runtime_checkable

from .._checks import InputError, InputTypeError
from .._optional import require

__all__ = [
    "MIB",
    "AllocatorStatsUnavailable",
    "Counter",
    "DeviceCounter",
    "HostCounter",
    "check_counter",
    "counter_for",
    "current_counter",
    "current_memory_mib",
    "memory_source",
    "memory_target",
    "peak_memory_mib",
    "reset_peak_memory",
]

#: bytes in a MiB: every amount dynbatch reports is in MiB
MIB = float(2**20)


class AllocatorStatsUnavailable(RuntimeError):
    """Paddle keeps no allocator statistics here (an old build, or a device whose
    allocator paddle does not count)."""


@runtime_checkable
class Counter(Protocol):
    """An allocator's counters, in bytes: what :func:`~dynbatch.calibrate` measures with.

    ``reset_peak()`` sets the peak to what is allocated now, so that the next
    ``peak_bytes()`` is the highest point since; ``current_bytes()`` is what is
    allocated now; ``name`` says which allocator (``"cpu allocator"``).
    """

    @property
    def name(self) -> str: ...

    def reset_peak(self) -> None: ...

    def peak_bytes(self) -> int: ...

    def current_bytes(self) -> int: ...


def _paddle() -> ModuleType:
    return require("paddle", "dynbatch.memory")


def _function(owner: Any, where: str, name: str) -> Callable[..., Any]:
    fn = getattr(owner, name, None)
    if not callable(fn):
        raise AllocatorStatsUnavailable(f"this paddle build has no {where}.{name}")
    return fn  # type: ignore[no-any-return]


@dataclass(frozen=True)
class HostCounter:
    """Paddle's host (CPU) allocator (NOTE [ which counters paddle has ])."""

    name: str = "cpu allocator"

    def _stat(self, which: str) -> Callable[..., Any]:
        core = getattr(getattr(_paddle(), "base", None), "core", None)
        return _function(core, "paddle.base.core", f"host_memory_stat_{which}")

    def reset_peak(self) -> None:
        self._stat("reset_peak_value")("Allocated", 0)

    def peak_bytes(self) -> int:
        return int(self._stat("peak_value")("Allocated", 0))

    def current_bytes(self) -> int:
        return int(self._stat("current_value")("Allocated", 0))


#: paddle's device module per device kind; any other kind is a custom device
_MODULES = {"gpu": "cuda", "xpu": "xpu"}


@dataclass(frozen=True)
class DeviceCounter:
    """A device allocator paddle counts per device: ``kind`` ``"gpu"`` (CUDA), ``"xpu"``
    or a custom device type such as ``"npu"``, number ``index``
    (NOTE [ which counters paddle has ]).

    >>> DeviceCounter("gpu", 1).name, DeviceCounter("npu").name
    ('cuda allocator', 'npu allocator')
    """

    kind: str
    index: int = 0

    @property
    def name(self) -> str:
        return "cuda allocator" if self.kind == "gpu" else f"{self.kind} allocator"

    def _api(self, name: str) -> Callable[..., Any]:
        module = _MODULES.get(self.kind, "custom_device")
        owner = getattr(getattr(_paddle(), "device", None), module, None)
        return _function(owner, f"paddle.device.{module}", name)

    @property
    def _device(self) -> int | str:
        """How paddle's device module names this device: the index, or ``"npu:0"``."""
        return self.index if self.kind in _MODULES else f"{self.kind}:{self.index}"

    def reset_peak(self) -> None:
        self._api("reset_max_memory_allocated")(self._device)

    def peak_bytes(self) -> int:
        return int(self._api("max_memory_allocated")(self._device))

    def current_bytes(self) -> int:
        return int(self._api("memory_allocated")(self._device))

    def empty_cache(self) -> None:
        """Give cached blocks back to the device (after a step ran out of memory)."""
        self._api("empty_cache")()

    def total_bytes(self) -> int:
        """The device's memory."""
        if self.kind == "xpu":
            return int(self._api("memory_total")(self._device))
        return int(self._api("get_device_properties")(self._device).total_memory)


def counter_for(
    device: str, *, cuda_build: bool, xpu_build: bool = False, custom_types: Sequence[str] = ()
) -> HostCounter | DeviceCounter:
    """The counter of ``device`` (paddle's ``get_device()`` string) on a build like this.

    >>> counter_for("cpu", cuda_build=True).name
    'cpu allocator'
    >>> counter_for("gpu:1", cuda_build=True)
    DeviceCounter(kind='gpu', index=1)
    >>> counter_for("npu:0", cuda_build=False, custom_types=["npu"])
    DeviceCounter(kind='npu', index=0)
    """
    if device == "cpu":
        return HostCounter()
    kind, _, number = device.partition(":")
    index = int(number) if number.isdigit() else 0
    built = {"gpu": (cuda_build, "CUDA"), "xpu": (xpu_build, "XPU")}
    if kind in built:
        if built[kind][0]:
            return DeviceCounter(kind, index)
        without = f" on a build without {built[kind][1]}"
    elif kind in custom_types:
        return DeviceCounter(kind, index)
    else:
        without = ""
    raise AllocatorStatsUnavailable(
        f"dynbatch.memory reads the allocator of the CPU, a CUDA GPU, an XPU or a custom device "
        f"paddle knows ({', '.join(custom_types) or 'none here'}); paddle's current device is "
        f"{device!r}{without}"
    )


def current_counter() -> HostCounter | DeviceCounter:
    """The counter of paddle's current device (raises :class:`AllocatorStatsUnavailable`
    on a device paddle keeps no statistics for)."""
    device = _paddle().device
    custom = getattr(device, "get_all_custom_device_type", None)
    xpu = getattr(device, "is_compiled_with_xpu", None)
    return counter_for(
        str(device.get_device()),
        cuda_build=bool(device.is_compiled_with_cuda()),
        xpu_build=bool(xpu()) if callable(xpu) else False,
        custom_types=tuple((custom() if callable(custom) else None) or ()),
    )


def check_counter(counter: Any) -> Counter:
    """``counter``, or the current device's when None; anything else must be a :class:`Counter`."""
    if counter is None:
        return current_counter()
    if not isinstance(counter, Counter):
        raise InputTypeError(
            "counter must have name, reset_peak(), peak_bytes() and current_bytes() (a "
            f"dynbatch.memory.Counter), got counter={counter!r}"
        )
    return counter


def memory_source() -> str:
    """Which allocator counts memory on paddle's current device: ``"cpu allocator"``,
    ``"cuda allocator"``, ``"xpu allocator"``, ``"npu allocator"``, ..."""
    return current_counter().name


def peak_memory_mib() -> float:
    """Peak memory allocated by paddle since the last :func:`reset_peak_memory` (MiB).

    >>> import paddle
    >>> reset_peak_memory()
    >>> before = current_memory_mib()
    >>> x = paddle.ones([2**18])  # 1 MiB of float32
    >>> del x
    >>> round(peak_memory_mib() - before, 3), round(current_memory_mib() - before, 3)
    (1.0, 0.0)
    """
    return current_counter().peak_bytes() / MIB


def current_memory_mib() -> float:
    """Memory allocated by paddle right now (MiB)."""
    return current_counter().current_bytes() / MIB


def reset_peak_memory() -> None:
    """Set the peak counter to what is allocated now, so the next peak is the next step's."""
    current_counter().reset_peak()


def memory_target(fraction: float = 0.9) -> float:
    """A memory budget for ``max_cost``: ``fraction`` of the current device's memory, in MiB.

    The rest is headroom for what the allocator reserves beyond what it
    allocates (fragmentation): :func:`~dynbatch.calibrate` measures what is allocated. On CPU
    there is no device memory to take a fraction of, so this raises: give ``max_cost`` in MiB.

    Args:
        fraction: the share of the device's memory, in (0, 1].
    """  # NOTE [ what calibrate measures ] in dynbatch.memory.probe
    wrong_type = isinstance(fraction, bool) or not isinstance(fraction, numbers.Real)
    if wrong_type or not 0 < float(fraction) <= 1:
        raise InputError(f"fraction must be a number in (0, 1], got fraction={fraction!r}")
    counter = current_counter()
    if not isinstance(counter, DeviceCounter):
        raise RuntimeError(
            "memory_target() sizes the budget from device memory, and paddle's current device "
            "is the CPU: give max_cost in MiB yourself (the memory training may use)"
        )
    return float(fraction) * counter.total_bytes() / MIB
