"""Run training steps and read the allocator around each: warm-up, snapshot and restore,
out of memory, in one copy for :func:`~dynbatch.calibrate` and :func:`~dynbatch.preflight`.

NOTE [ what calibrate measures ]
    Each probe resets the allocator's peak counter (which sets it to the memory
    allocated right now: weights, gradients, optimizer state), runs one full
    step (forward, backward, optimizer update) and reads the peak. That is the
    *absolute* peak allocated during the step, resident state included, because
    that is what has to fit on the device; ``c`` absorbs the resident state. A
    model of "peak minus baseline" would make every user add the baseline back
    and would hide the floor (NOTE [ the floor ]). Process RSS is not used: it
    counts the Python heap, freed-but-cached pages and shared libraries, and
    never goes down. On a device this is peak *allocated* memory; the caching
    allocator keeps a little more reserved (fragmentation), which is what the
    margin of :func:`~dynbatch.memory_target` (``fraction=0.9``) is for. A
    warm-up step runs first so that the optimizer's state exists, as it will in
    training. The snapshot taken for ``restore=`` is kept in host numpy arrays,
    outside paddle's allocator, so it is not measured.

NOTE [ restoring state ]
    Probes train on random data. ``restore=[model, optimizer]`` snapshots their
    ``state_dict()`` (to host memory) before the warm-up step and puts it back
    with ``set_state_dict()`` afterwards, as tensors of their own dtype, also
    when a step fails. A fresh optimizer has no state yet, and
    ``set_state_dict`` cannot remove the state the warm-up step creates, so such
    an object is reported right after the warm-up (an error naming it) instead
    of being left half-restored: make the optimizer after calibrating, or
    calibrate with a throwaway optimizer of the same kind and pass
    ``restore=[model]``.

NOTE [ collecting between probes ]
    Each probe starts with ``gc.collect()``, so that tensors the last step
    left in reference cycles are freed before the peak is reset, not counted
    as resident. A full collection walks every object of the process, and
    with paddlenlp imported that is 0.56 s a probe on the CPU here, most of
    a tiny model's calibration. So after the warm-up step one full
    collection runs and ``gc.freeze()`` sets every object alive then aside:
    the collection before each probe then walks only what the probes made,
    which is all a probe can leave behind. ``gc.unfreeze()`` returns them
    after the last probe.
"""

from __future__ import annotations

import gc
import inspect
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from .._checks import InputError, InputTypeError, check_nonnegative_number
from .._optional import require
from .counters import MIB, Counter, DeviceCounter

__all__ = ["Restorable", "Run", "Step", "check_restore", "check_step", "measure"]

#: ``step(n, L)``: one training step on a random batch of ``n`` samples padded to ``L``; for
#: (source, target) pairs ``step(n, Ls, Lt)``, its sources padded to ``Ls``, targets to ``Lt``.
Step = Callable[..., object]


class Restorable(Protocol):
    """What ``restore=`` needs: a model or optimizer with ``state_dict``/``set_state_dict``."""

    def state_dict(self) -> Any: ...

    def set_state_dict(self, state_dict: Any) -> Any: ...


@dataclass(frozen=True)
class Run:
    """One measured step: its peak (MiB, None if it ran out of memory), what was
    allocated before it (MiB) and how long it took (seconds)."""

    peak_mib: float | None
    resident_mib: float
    seconds: float


def check_step(step: Any, pairs: bool = False, hint: str = "") -> Step:
    """``step`` if it can be called as ``step(n, L)``, or for pairs as ``step(n, Ls, Lt)``; a
    step of the other arity is refused by name, ``hint`` saying how to give pairs."""
    form = "step(n, Ls, Lt)" if pairs else "step(n, L)"
    what = (
        "n (source, target) pairs, sources padded to Ls and targets to Lt"
        if pairs
        else "n samples padded to length L"
    )
    if not _binds(step, 3 if pairs else 2):
        other = ""
        if pairs and _binds(step, 2):
            other = (
                " (it takes step(n, L), a batch of one length, but the lengths are (source, "
                f"target) pairs{hint})"
            )
        elif not pairs and _binds(step, 3):
            other = (
                " (it takes step(n, Ls, Lt), a batch of (source, target) pairs, but the "
                f"lengths are one per sample{hint})"
            )
        raise InputTypeError(
            f"step must be a callable {form} that runs one training step on {what}, got "
            f"step={step!r}{other}"
        )
    return step  # type: ignore[no-any-return]


def _binds(step: Any, arity: int) -> bool:
    """Whether ``step`` can be called with ``arity`` positional arguments."""
    if not callable(step):
        return False
    try:
        inspect.signature(step).bind(*[1] * arity)
    except TypeError:
        return False
    except ValueError:  # builtins without a signature: trust them
        pass
    return True


def check_restore(restore: Any) -> list[Restorable]:
    """``restore`` as a list of objects with ``state_dict`` and ``set_state_dict``."""
    if restore is None:
        return []
    if not isinstance(restore, Sequence) or isinstance(restore, str):
        restore = [restore]
    for i, obj in enumerate(restore):
        if not (
            callable(getattr(obj, "state_dict", None))
            and callable(getattr(obj, "set_state_dict", None))
        ):
            raise InputTypeError(
                f"restore[{i}] must have state_dict() and set_state_dict() (a paddle Layer or "
                f"optimizer), got restore[{i}]={obj!r}"
            )
    return list(restore)


def measure(
    step: Step,
    shapes: Sequence[tuple[int, ...]],
    *,
    counter: Counter,
    restore: list[Restorable],
    warmup: tuple[int, ...],
) -> list[Run]:
    """Run ``step(*warmup)``, then ``step(*shape)`` for each shape (``(n, L)``, or ``(n, Ls,
    Lt)`` for pairs), reading ``counter``.

    The state of the ``restore`` objects is snapshot first and put back at the
    end, also when a step fails (NOTE [ restoring state ]). A step that runs out
    of memory is recorded (``peak_mib=None``); any other error propagates.
    """
    snapshot = [_to_host(dict(obj.state_dict())) for obj in restore]
    try:
        step(*warmup)  # the optimizer's state exists from here on
        grown = _grown(restore, snapshot)
        if grown:
            raise _grown_error(restore, grown)
        gc.collect()  # NOTE [ collecting between probes ]
        gc.freeze()
        try:
            return [_run(step, shape, counter) for shape in shapes]
        finally:
            gc.unfreeze()
    finally:
        skip = {i for i, _ in _grown(restore, snapshot)}
        for i, (obj, snap) in enumerate(zip(restore, snapshot, strict=True)):
            if i not in skip:
                obj.set_state_dict(_from_host(snap))


def _run(step: Step, shape: tuple[int, ...], counter: Counter) -> Run:
    gc.collect()  # NOTE [ collecting between probes ]
    counter.reset_peak()
    resident = _mib(counter.current_bytes(), "current_bytes")
    start = time.perf_counter()
    try:
        step(*shape)
    except Exception as exc:
        if not _is_oom(exc):
            raise
        del exc
        gc.collect()
        if isinstance(counter, DeviceCounter):
            counter.empty_cache()
        return Run(None, resident, time.perf_counter() - start)
    seconds = time.perf_counter() - start
    return Run(_mib(counter.peak_bytes(), "peak_bytes"), resident, seconds)


def _mib(value: Any, reading: str) -> float:
    """A counter's reading in MiB, once it is checked to be bytes."""
    return check_nonnegative_number(f"counter.{reading}()", value) / MIB


def _is_oom(exc: BaseException) -> bool:
    text = f"{type(exc).__name__} {exc}".lower()
    return isinstance(exc, MemoryError) or "out of memory" in text or "resourceexhausted" in text


# -- snapshot and restore (NOTE [ restoring state ]) ----------------------------------------------
@dataclass(frozen=True, eq=False)
class _Host:
    """A tensor's values in host memory, outside paddle's allocator, and its paddle dtype
    (numpy holds bfloat16 as uint16)."""

    values: NDArray[Any]
    dtype: Any


def _to_host(value: Any) -> Any:
    """A copy of a state_dict value that lives outside paddle's allocator."""
    if isinstance(value, dict):
        return {k: _to_host(v) for k, v in value.items()}
    if hasattr(value, "numpy") and hasattr(value, "dtype"):
        # numpy() of a CPU tensor can share paddle's allocation: copy into numpy's own memory,
        # or the snapshot would be measured as part of every probe
        return _Host(np.array(value.numpy(), copy=True), value.dtype)
    return value


def _from_host(value: Any) -> Any:
    """Tensors again, of their own dtype, for ``set_state_dict`` (after probing, unmeasured)."""
    if isinstance(value, dict):
        return {k: _from_host(v) for k, v in value.items()}
    if isinstance(value, _Host):
        if value.values.dtype == np.uint16:  # bfloat16: numpy cannot say so, a tensor can
            return require("paddle", "dynbatch.memory").to_tensor(value.values, dtype=value.dtype)
        # numpy, not tensors: an optimizer keeps the dict it is given (_accumulators_holder),
        # and tensors there would stay allocated beside the state they were copied into
        return value.values
    return value


def _grown(objects: list[Restorable], snapshot: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """``(index, new keys)`` of objects whose state gained entries since the snapshot."""
    out = []
    for i, (obj, snap) in enumerate(zip(objects, snapshot, strict=True)):
        new = set(obj.state_dict()) - set(snap)
        if new:
            out.append((i, len(new)))
    return out


def _grown_error(objects: list[Restorable], grown: list[tuple[int, int]]) -> InputError:
    i, count = grown[0]
    return InputError(
        f"restore[{i}] ({type(objects[i]).__name__}) had no state for {count} entries before "
        f"the warm-up step (a fresh optimizer?), and set_state_dict cannot remove state, so it "
        f"cannot be restored; the other objects were. restore[{i}] must be a model or an "
        f"optimizer that has already stepped, got restore[{i}]={objects[i]!r}: make the "
        f"optimizer after this call, or use a throwaway optimizer of the same kind in step and "
        f"pass restore=[model]"
    )
