"""Every Python block of the README runs as written, in order, in one session (as a reader
pastes them), on CPU. A block right after the line ``<!-- gpu-only -->`` is left out."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
GPU_ONLY = "<!-- gpu-only -->"
BLOCK = re.compile(r"(?P<before>[^\n]*)\n```python\n(?P<code>.*?)\n```", re.DOTALL)


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(line number, code) of each Python block not marked GPU-only."""
    blocks = []
    for match in BLOCK.finditer(text):
        if match.group("before").strip() == GPU_ONLY:
            continue
        line = text.count("\n", 0, match.start("code")) + 1
        blocks.append((line, match.group("code")))
    return blocks


def test_the_block_finder_sees_blocks_and_the_gpu_mark() -> None:
    text = "a\n```python\nx = 1\n```\n<!-- gpu-only -->\n```python\ny = 2\n```\n"
    assert python_blocks(text) == [(3, "x = 1")]


@pytest.mark.slow
def test_every_python_block_of_the_readme_runs(tmp_path: Path) -> None:
    blocks = python_blocks(README.read_text(encoding="utf-8"))
    assert len(blocks) >= 5, "the README's examples are found"
    session = "\n".join(
        f"print('--- README line {line}', flush=True)\n"
        f"exec(compile({code!r}, 'README.md:{line}', 'exec'), ns)"
        for line, code in blocks
    )
    script = "ns = {'__name__': '__readme__'}\n" + session
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        cwd=tmp_path,  # what the blocks write (runs/, calib.json) lands here
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
