"""docs/paddleformers.md's Python blocks run as written, here: the main suite runs every other
block of the docs (tests/test_readme.py) in paddlenlp's environment, which cannot import
PaddleFormers, and leaves out the blocks marked ``<!-- paddleformers -->``."""

from __future__ import annotations

from pathlib import Path

from test_readme import DOCS, PADDLEFORMERS, python_blocks, run_blocks

PAGE = DOCS / "paddleformers.md"


def test_every_python_block_of_the_paddleformers_page_runs_here(tmp_path: Path) -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert python_blocks(text, PADDLEFORMERS), "the page's examples are found"
    assert not python_blocks(text), "each is marked: paddlenlp's environment cannot run it"
    done = run_blocks(PAGE, tmp_path, PADDLEFORMERS)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
