"""Files dynbatch writes itself, written whole or not at all.

NOTE [ atomic writes ]
    A job killed while it writes (preemption, ``kill -9``, a full disk) must
    leave either the old file or the new one, never a torn one that a later
    run half-reads: the kept step time, the cost and length caches and the
    states beside checkpoints are all read back by the next run. So each is
    written to a unique temporary file in the same folder, flushed to disk
    (``fsync``) and renamed over the target with ``os.replace``, which is
    atomic on POSIX and Windows within one file system. A writer that fails
    removes its temporary file. Readers still check what they read (a file
    from another tool, or from before this note, may be torn): each names the
    file and what to do, never returns half of it.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from typing import IO

__all__ = ["atomic_write", "write_text_atomic"]


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str]) -> Iterator[IO[bytes]]:
    """A binary file that replaces ``path`` whole when the block ends without an error.

    >>> import tempfile, pathlib
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "kept.txt"
    >>> with atomic_write(target) as fh:
    ...     _ = fh.write(b"whole")
    >>> target.read_bytes()
    b'whole'
    """
    target = os.fspath(path)
    folder, name = os.path.split(target)
    partial = os.path.join(folder, f".{name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.partial")
    try:
        with open(partial, "xb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(partial, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(partial)
        raise


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` whole or not at all (NOTE [ atomic writes ])."""
    with atomic_write(path) as fh:
        fh.write(text.encode("utf-8"))
