"""``processes.run`` ends the whole tree a test starts (NOTE [ reaping a launch ]).

The tree is built as ``paddle.distributed.launch`` builds it, without paddle: a launcher
starts a rank in a session of its own; the rank starts a worker and SIGKILLs itself. The
worker is then an orphan in the rank's session, which the launcher's group does not reach.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from processes import MARK, Finished, alive, reap, run

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc (Linux)")

WORKER = "import time; time.sleep(600)"
RANK = """
import os, signal, subprocess, sys
worker = subprocess.Popen([sys.executable, "-c", {worker!r}])
open({pid_file!r}, "w").write(str(worker.pid))
os.kill(os.getpid(), signal.SIGKILL)
"""
LAUNCHER = """
import subprocess, sys
rank = subprocess.Popen([sys.executable, "-c", {rank!r}], start_new_session=True)
sys.exit(0 if rank.wait() == 0 else 1)
"""


def launcher(pid_file: Path) -> list[str]:
    rank = RANK.format(worker=WORKER, pid_file=str(pid_file))
    return [sys.executable, "-c", LAUNCHER.format(rank=rank)]


def gone(pid: int) -> bool:
    """No process ``pid``, or only its zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] in "ZX"


def test_the_orphan_of_a_killed_rank_outlives_its_launcher_and_is_found(tmp_path: Path) -> None:
    """Without reaping, the worker lives on after the launcher ended: ``alive`` names it."""
    pid_file, mark = tmp_path / "worker.pid", uuid.uuid4().hex
    proc = subprocess.Popen(
        launcher(pid_file), env={**os.environ, MARK: mark}, start_new_session=True
    )
    code = proc.wait(timeout=60)
    worker = int(pid_file.read_text())
    try:
        finished = Finished(returncode=code, pgid=proc.pid, mark=mark)
        assert code == 1, "the rank was SIGKILLed"
        assert not gone(worker), "precondition: the orphan is alive"
        assert os.getpgid(worker) != os.getpgid(0), "in the rank's session, not the launcher's"
        assert [line.split(":")[0] for line in alive(finished)] == [str(worker)]
        reap(finished)
        assert alive(finished) == [] and gone(worker)
    finally:
        if not gone(worker):
            os.kill(worker, 9)


def test_run_reaps_the_whole_tree_and_leaves_no_process_of_the_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "worker.pid"
    finished = run(launcher(pid_file), tmp_path / "run.log", timeout=60)
    assert finished.returncode == 1, (tmp_path / "run.log").read_text()
    assert gone(int(pid_file.read_text())), "the orphaned worker was ended"
    assert alive(finished) == []
    with pytest.raises(ProcessLookupError):
        os.killpg(finished.pgid, 0)


def test_a_run_that_times_out_is_reaped_too(tmp_path: Path) -> None:
    pid_file = tmp_path / "worker.pid"
    sleeper = (
        f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(600)"
    )
    with pytest.raises(subprocess.TimeoutExpired):
        run([sys.executable, "-c", sleeper], tmp_path / "run.log", timeout=3)
    assert gone(int(pid_file.read_text()))
