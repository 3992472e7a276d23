"""`dynbatch stats` draws one progress bar (tqdm) on stderr, on a terminal only, never on stdout."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from dynbatch.cli import main, read_corpus


class Terminal(io.StringIO):
    """A stderr that says it is a terminal, as a user's shell is."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def reviews(tmp_path: Path) -> Path:
    path = tmp_path / "reviews.txt"
    path.write_text("".join("好" * n + "\n" for n in range(1, 13)), encoding="utf-8")
    return path


def stats(reviews: Path, *flags: str) -> list[str]:
    return ["stats", str(reviews), "--max-cost", "1000", *flags]


def test_a_terminal_gets_a_tqdm_bar_on_stderr(
    reviews: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    assert main(stats(reviews)) == 0
    drawn = err.getvalue()
    assert "reading reviews.txt: " in drawn, "the bar says what it reads"
    assert "12 samples [" in drawn and "samples/s]" in drawn, "tqdm's count, time and rate"
    out = capsys.readouterr().out
    assert "reading" not in out and "pad eff" in out, "stdout holds the table alone"


@pytest.mark.parametrize("flag", ["--no-progress", "--json"])
def test_no_progress_and_json_draw_nothing_on_a_terminal(
    reviews: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    flag: str,
) -> None:
    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    assert main(stats(reviews, flag)) == 0
    assert err.getvalue() == ""
    if flag == "--json":
        assert json.loads(capsys.readouterr().out)["samples"] == 12


def test_a_pipe_or_a_log_file_gets_no_bar(
    reviews: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(stats(reviews)) == 0  # capsys's stderr is not a terminal
    assert capsys.readouterr().err == ""


def test_read_corpus_draws_on_a_terminal_unless_told_not_to(
    reviews: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    assert read_corpus(reviews, progress=False).lengths.size == 12
    assert err.getvalue() == ""
    assert read_corpus(reviews).lengths.size == 12
    assert "reading reviews.txt: " in err.getvalue()
