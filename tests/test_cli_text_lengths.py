"""A text file whose every non-empty line is a number is lengths, one a line, as a ``.npy`` of
lengths is (NOTE [ a text of numbers is lengths ] in dynbatch.cli.corpora): it was read as
text, each line's digits counted ("lengths 1..3 (median 2)"), a meaningless plan, exit 0."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dynbatch.cli import main, read_corpus

LENS = np.random.default_rng(5).integers(1, 700, 400)


def stats(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[dict, str]:
    assert main(["stats", *argv, "--json", "--max-cost", "4e6"]) == 0
    out = capsys.readouterr()
    return json.loads(out.out), out.err


@pytest.mark.parametrize(
    "write",
    [
        lambda path: path.write_text("\n".join(map(str, LENS)) + "\n", encoding="utf-8"),
        lambda path: np.savetxt(path, LENS),  # 1.000000000000000000e+01 a line
        lambda path: np.savetxt(path, LENS, fmt="%d"),
        lambda path: path.write_text(" " + "\n\n".join(map(str, LENS)) + " \n\n", encoding="utf-8"),
    ],
    ids=["print", "savetxt", "savetxt-%d", "blank-lines-and-spaces"],
)
def test_a_text_of_numbers_plans_as_the_npy_of_those_lengths(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, write
) -> None:
    write(tmp_path / "lengths.txt")
    np.save(tmp_path / "lengths.npy", LENS)
    text, note = stats(capsys, str(tmp_path / "lengths.txt"))
    npy, _ = stats(capsys, str(tmp_path / "lengths.npy"))
    assert text["length_max"] == int(LENS.max()), "the numbers, not the digits counted"
    assert text == npy, "the same plan as the .npy of those lengths"
    assert "read as lengths, one a line" in note, "said, on stderr"


def test_a_bad_length_is_named_by_its_line(tmp_path: Path) -> None:
    path = tmp_path / "lengths.txt"
    path.write_text("12\n7\n\n2.5\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 4 of .*lengths.txt is 2.5: a length must be"):
        read_corpus(path, progress=False)
    path.write_text("12\n0\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 2 of .*lengths.txt is 0: .*--skip-empty"):
        read_corpus(path, progress=False)
    assert read_corpus(path, skip_empty=True, progress=False).rows.tolist() == [1]


def test_text_with_one_line_of_words_is_text(tmp_path: Path) -> None:
    path = tmp_path / "reviews.txt"
    path.write_text("12\n345\nnot a number\n", encoding="utf-8")
    assert read_corpus(path, progress=False).lengths.tolist() == [2, 3, 12], "characters"


def test_vocab_on_lengths_is_refused(tmp_path: Path) -> None:
    path, vocab = tmp_path / "lengths.txt", tmp_path / "vocab.txt"
    path.write_text("12\n7\n", encoding="utf-8")
    vocab.write_text("[PAD]\n[UNK]\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"--vocab measures text; .*lengths.txt holds lengths"):
        read_corpus(path, vocab=vocab, progress=False)


@pytest.mark.parametrize("header", ["length", "n_tokens\r", "# lengths of train.jsonl"])
def test_a_header_line_above_numbers_is_left_out_and_said(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, header: str
) -> None:
    """A header above the numbers (what ``df.to_csv(index=False)`` of one column writes) made
    the file text: the header and each number's digits planned, exit 0 and not a word."""
    (tmp_path / "lengths.txt").write_text(
        "\n" + header + "\n" + "\n".join(map(str, LENS)) + "\n", encoding="utf-8"
    )
    np.save(tmp_path / "lengths.npy", LENS)
    text, note = stats(capsys, str(tmp_path / "lengths.txt"))
    npy, _ = stats(capsys, str(tmp_path / "lengths.npy"))
    assert text == npy, "the lengths below the header, as the .npy of them plans"
    assert f"line 2 ({header.strip()!r}) is not a number" in note and "left out" in note
    assert read_corpus(tmp_path / "lengths.txt", progress=False).rows[0] == 3, "lines kept"


def test_a_title_above_words_or_alone_is_text(tmp_path: Path) -> None:
    path = tmp_path / "reviews.txt"
    path.write_text("title\n", encoding="utf-8")
    assert read_corpus(path, progress=False).lengths.tolist() == [5], "one line of text"
    path.write_text("title\n12\nwords here\n", encoding="utf-8")
    assert read_corpus(path, progress=False).lengths.tolist() == [5, 2, 10], "characters"


@pytest.mark.parametrize("kind", ["csv", "jsonl", "csv-pairs"])
def test_a_column_of_numbers_is_lengths_and_said(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str
) -> None:
    """``--column length`` of a CSV whose every value is a number (``df.to_csv`` of lengths)
    planned each number's digits: lengths 1..3, a meaningless plan, exit 0, not a word."""
    pairs = kind.endswith("pairs")
    lens = np.stack([LENS, LENS[::-1]], axis=1) if pairs else LENS
    np.save(tmp_path / "lengths.npy", lens)
    if kind == "jsonl":
        path = tmp_path / "lengths.jsonl"
        path.write_text("".join(f'{{"n": "{n}"}}\n' for n in LENS), encoding="utf-8")
        flags = ["--field", "n"]
    else:
        path = tmp_path / "lengths.csv"
        rows = [",".join(map(str, np.atleast_1d(row))) for row in lens]
        path.write_text("src,tgt\n" + "\n".join(rows) + "\n", encoding="utf-8")
        flags = ["--column", "src"] + (["--column", "tgt"] if pairs else [])
    text, note = stats(capsys, str(path), *flags)
    npy, _ = stats(capsys, str(tmp_path / "lengths.npy"))
    assert text == npy, "the numbers, as the .npy of them plans"
    assert "every value is a number: read as lengths" in note


def test_a_column_with_one_word_is_text(tmp_path: Path) -> None:
    path = tmp_path / "reviews.csv"
    path.write_text("review\n12\nfine hotel\n", encoding="utf-8")
    assert read_corpus(path, column="review", progress=False).lengths.tolist() == [2, 10]
    path.write_text("review\n12\n2.5\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 3 of .*reviews.csv is 2.5: a length must be"):
        read_corpus(path, column="review", progress=False)
