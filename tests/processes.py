"""``run(cmd, log, ...)``: a real process tree a test starts ends with it, orphans included.

NOTE [ reaping a launch ]
    ``paddle.distributed.launch`` starts every rank in a session of its own (``os.setsid``)
    and a rank's DataLoader workers are its children. When a rank is SIGKILLed (the resume
    tests kill ranks on purpose), its workers are orphaned: adopted by init and left in the
    rank's session, not the launcher's. Waiting on the launcher, or killing its process
    group, does not end them: ``make test`` once left 8 such workers alive. So every test that
    kills a process, or a launch, runs it through :func:`run`. The command runs in a session of
    its own, and its environment carries a mark of its own (:data:`MARK`) that every
    descendant inherits: a rank, a worker or an orphan. When the command ends or times out,
    the whole group and every marked process are SIGKILLed. Then :func:`run` waits, a bounded
    time, until none of them is alive. One that is still alive then fails the test, named with
    its command line. Zombies count as ended: they hold no memory and run nothing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: the environment variable whose value marks every process of one :func:`run`
MARK = "DYNBATCH_TEST_RUN"
#: seconds :func:`run` waits for the killed processes to be gone
REAP_SECONDS = 30.0
PROC = Path("/proc")


@dataclass(frozen=True)
class Finished:
    """A command :func:`run` ran: its exit code, its process group and its mark."""

    returncode: int
    pgid: int
    mark: str

    def __post_init__(self) -> None:
        if self.pgid <= 1:  # killpg(0) is the caller's own group: the test run itself
            raise ValueError(f"pgid must be a process group above 1, got pgid={self.pgid}")


def _state_and_group(pid: str) -> tuple[str, int] | None:
    """``(state, process group)`` from ``/proc/<pid>/stat``, or None once it is gone."""
    try:
        stat = (PROC / pid / "stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # the command name may hold spaces
    return fields[0], int(fields[2])


def alive(finished: Finished) -> list[str]:
    """``pid: command`` of each live process of ``finished``'s group or carrying its mark.

    A zombie (``Z``) or dead (``X``) process is not alive. Where ``/proc`` is missing, only
    the group is asked, with ``os.killpg(pgid, 0)``.
    """
    if not PROC.is_dir():
        try:
            os.killpg(finished.pgid, 0)
        except ProcessLookupError:
            return []
        return [f"process group {finished.pgid}"]
    needle = f"{MARK}={finished.mark}".encode()
    found = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        seen = _state_and_group(entry.name)
        if seen is None or seen[0] in "ZX":
            continue
        try:
            marked = needle in (entry / "environ").read_bytes().split(b"\0")
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if marked or seen[1] == finished.pgid:
            found.append(f"{entry.name}: {command}")
    return found


def _kill(finished: Finished) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(finished.pgid, signal.SIGKILL)
    for line in alive(finished):
        if line.split(":")[0].isdigit():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(line.split(":")[0]), signal.SIGKILL)


def reap(finished: Finished, seconds: float = REAP_SECONDS) -> None:
    """SIGKILL ``finished``'s group and marked processes; fail if any lives ``seconds`` on."""
    deadline = time.monotonic() + seconds
    while True:
        _kill(finished)
        left = alive(finished)
        if not left:
            return
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{len(left)} processes of the run still alive {seconds:g} s after SIGKILL "
                "(NOTE [ reaping a launch ]):\n" + "\n".join(left)
            )
        time.sleep(0.05)


def run(
    cmd: Sequence[str],
    log: Path,
    *,
    timeout: float,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Finished:
    """Run ``cmd`` to its end or ``timeout``, its output appended to ``log``, then reap it.

    Output goes to a file, not a pipe: an orphan that holds a pipe open would keep a reader
    waiting. On a timeout the tree is reaped and ``subprocess.TimeoutExpired`` raised.
    """
    mark = uuid.uuid4().hex
    with open(log, "a") as out:
        proc = subprocess.Popen(
            list(cmd),
            cwd=cwd,
            env={**(os.environ if env is None else env), MARK: mark},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own session and group: pgid == pid
        )
        finished = Finished(returncode=0, pgid=proc.pid, mark=mark)
        try:
            code = proc.wait(timeout=timeout)
        finally:
            reap(finished)
            proc.wait()
    return Finished(returncode=code, pgid=proc.pid, mark=mark)
