"""How the scripts run under ``paddle.distributed.launch`` end: together, without teardown.

NOTE [ ending a launched script ]
    On CPU (gloo), a rank that leaves while the other is still tearing down its
    process group sometimes aborts inside paddle's C++ destructors (SIGABRT:
    the launcher exits 250), after every line of the script has run and its
    results are written. That is paddle's teardown, not the code under test, and
    it made the 2-rank tests flaky under load. So each script ends with
    :func:`finish`: a barrier (both ranks are done), flushed output, and
    ``os._exit(0)``, which skips the destructors.
"""

from __future__ import annotations

import os
import sys

import paddle.distributed as dist


def finish() -> None:
    """Wait for every rank, flush, and leave without running paddle's destructors (one rank
    has no process group to wait for)."""
    if dist.is_initialized():
        dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
