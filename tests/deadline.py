"""``within(seconds)``: a test that would hang fails instead (SIGALRM, main thread, POSIX)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType


class Hang(AssertionError):
    """The code under test did not return in time: a loop without end."""


@contextlib.contextmanager
def within(seconds: int) -> Iterator[None]:
    """Fail with :class:`Hang` if the block runs longer than ``seconds``."""

    def fire(signum: int, frame: FrameType | None) -> None:
        raise Hang(f"did not return within {seconds} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
