"""A test that would hang fails instead.

``within(seconds)`` raises in the test's own thread (SIGALRM, main thread, POSIX). A main
thread blocked in C++ never runs the handler: paddle's single-process ``DataLoader`` waits for
a batch that way (NOTE [ a collate error in paddle's DataLoader ] in
:mod:`dynbatch.paddle.safe_collate`), so such code runs in a process of its own,
``run_within(seconds, code)``, killed with its children when time is up.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
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


def run_within(seconds: int, code: str) -> subprocess.CompletedProcess[str]:
    """``python -c code`` in a session of its own; :class:`Hang` (the session killed, the
    DataLoader's workers too) if it runs longer than ``seconds``."""
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise Hang(f"did not return within {seconds} s:\n{out[-2000:]}\n{err[-3000:]}") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
