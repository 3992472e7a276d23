"""NOTE [ atomic writes ]: a file dynbatch writes is replaced whole, or left as it was."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dynbatch._files import atomic_write, write_text_atomic


def test_a_write_replaces_the_file_whole(tmp_path: Path) -> None:
    target = tmp_path / "kept.json"
    target.write_text("old")
    write_text_atomic(target, "new, whole")
    assert target.read_text() == "new, whole"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.json"], "no partial file left"


def test_a_write_that_fails_leaves_the_old_file_and_no_partial_one(tmp_path: Path) -> None:
    target = tmp_path / "kept.json"
    target.write_text("old")
    with pytest.raises(RuntimeError, match="killed"), atomic_write(target) as fh:
        fh.write(b"half of the n")
        raise RuntimeError("killed mid-write")
    assert target.read_text() == "old", "the reader still sees the whole old file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.json"]


def test_a_write_that_cannot_reach_the_disk_leaves_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full_disk(fd: int) -> None:
        raise OSError(28, "No space left on device")

    target = tmp_path / "kept.json"
    target.write_text("old")
    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        write_text_atomic(target, "new")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.json"]
