"""Every Python block of the README and of each page of the docs (``docs/*.md``) runs as
written, on CPU: a file's blocks in order, in one fresh session of their own (as a reader
pastes them), so no page leans on a name another page defined. A block right after the line
``<!-- gpu-only -->`` is left out, and so is one right after ``<!-- paddleformers -->``: this
suite runs in paddlenlp's environment, which cannot hold PaddleFormers, and PaddleFormers'
runs those blocks instead (``tests/paddleformers/test_docs_page.py``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
GPU_ONLY = "<!-- gpu-only -->"
#: the line before a block that only PaddleFormers' environment runs
PADDLEFORMERS = "<!-- paddleformers -->"
MARKS = (GPU_ONLY, PADDLEFORMERS)
BLOCK = re.compile(r"(?P<before>[^\n]*)\n```python\n(?P<code>.*?)\n```", re.DOTALL)


def python_blocks(text: str, mark: str | None = None) -> list[tuple[int, str]]:
    """(line number, code) of each Python block with none of :data:`MARKS` on the line before
    it, or, given ``mark``, of each block with that one."""
    text = "\n" + text  # a block on the first line has a line before it too
    blocks = []
    for match in BLOCK.finditer(text):
        before = match.group("before").strip()
        if before != mark if mark else before in MARKS:
            continue
        line = text.count("\n", 0, match.start("code"))
        blocks.append((line, match.group("code")))
    return blocks


def doc_pages() -> list[Path]:
    """The pages of the docs site, in name order."""
    return sorted(DOCS.glob("*.md"))


def run_blocks(path: Path, cwd: Path, mark: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the file's Python blocks (those after ``mark``, given one: :func:`python_blocks`)
    in order in one new interpreter started in ``cwd``."""
    name = path.relative_to(ROOT).as_posix()
    blocks = python_blocks(path.read_text(encoding="utf-8"), mark)
    session = "\n".join(
        f"print('--- {name} line {line}', flush=True)\n"
        f"exec(compile({code!r}, '{name}:{line}', 'exec'), ns)"
        for line, code in blocks
    )
    script = "ns = {'__name__': '__docs__'}\n" + session
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        cwd=cwd,  # what the blocks write (runs/, calib.json, train.jsonl) lands here
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )


def test_the_block_finder_sees_blocks_and_the_gpu_mark() -> None:
    text = "a\n```python\nx = 1\n```\n<!-- gpu-only -->\n```python\ny = 2\n```\n"
    assert python_blocks(text) == [(3, "x = 1")]
    text += "<!-- paddleformers -->\n```python\nz = 3\n```\n"
    assert python_blocks(text) == [(3, "x = 1")], "PaddleFormers' environment runs z"
    assert python_blocks(text, PADDLEFORMERS) == [(11, "z = 3")]
    assert python_blocks("```python\nz = 3\n```\n") == [(2, "z = 3")], "a block on line 1"


def test_the_docs_pages_and_their_blocks_are_found() -> None:
    names = {page.stem for page in doc_pages()}
    guides = {"loop", "trainer", "sft", "multicard", "streams", "memory", "gpu", "stats"}
    assert guides | {"study", "design", "benchmarks", "api", "index"} <= names, names
    counts = {
        page.stem: len(python_blocks(page.read_text(encoding="utf-8"))) for page in doc_pages()
    }
    assert sum(counts.values()) >= 15, counts
    assert all(counts[page] >= 1 for page in guides - {"stats"}), counts


def test_a_page_runs_in_a_session_of_its_own(tmp_path: Path) -> None:
    """A page that uses a name only another page defined fails: pages share nothing."""
    (tmp_path / "a.md").write_text("```python\nshared = 1\n```\n")
    (tmp_path / "b.md").write_text("```python\nprint(shared)\n```\n")
    global ROOT
    root, ROOT = ROOT, tmp_path
    try:
        assert run_blocks(tmp_path / "a.md", tmp_path).returncode == 0
        done = run_blocks(tmp_path / "b.md", tmp_path)
    finally:
        ROOT = root
    assert done.returncode != 0 and "NameError" in done.stderr, done.stderr


@pytest.mark.slow
def test_every_python_block_of_the_readme_runs(tmp_path: Path) -> None:
    assert python_blocks(README.read_text(encoding="utf-8")), "the README's example is found"
    done = run_blocks(README, tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]


@pytest.mark.slow
@pytest.mark.parametrize(
    "page",
    [p for p in doc_pages() if python_blocks(p.read_text(encoding="utf-8"))],
    ids=lambda p: p.name,
)
def test_every_python_block_of_a_docs_page_runs_on_its_own(page: Path, tmp_path: Path) -> None:
    done = run_blocks(page, tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
