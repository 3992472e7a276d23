"""examples/corpus.py: the data files the examples read, the awkward ones included.

Both examples (``bert_chnsenticorp.py`` and ``sft_causal_lm.py``) read a ``--data-file``
through :func:`corpus.load_file` and split it with :func:`corpus.split`; a file they cannot
use is a ``CorpusError``, which they print as one line and exit with code 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from example_runs import EXAMPLES


@pytest.fixture(scope="module")
def corpus() -> Any:
    sys.path.insert(0, str(EXAMPLES))
    try:
        import corpus
    finally:
        sys.path.remove(str(EXAMPLES))
    return corpus


#: (id, file name, content, the examples read back): files that load
READABLE: list[tuple[str, str, bytes, list[tuple[str, int]]]] = [
    ("plain", "r.csv", "label,review\n1,好\n0,差\n".encode(), [("好", 1), ("差", 0)]),
    # Excel's "CSV UTF-8" starts with a byte-order mark: the header is still 'label'
    ("utf8-bom", "r.csv", "\ufefflabel,review\n1,好\n0,差\n".encode(), [("好", 1), ("差", 0)]),
    ("crlf", "r.csv", "label,review\r\n1,好\r\n0,差\r\n".encode(), [("好", 1), ("差", 0)]),
    ("trailing-blank-lines", "r.csv", "label,review\n1,好\n\n\n".encode(), [("好", 1)]),
    ("blank-line-inside", "r.csv", "label,review\n1,好\n\n0,差\n".encode(), [("好", 1), ("差", 0)]),
    ("empty-reviews-skipped", "r.csv", "label,review\n1,\n0,  \n1,好\n".encode(), [("好", 1)]),
    ("extra-columns", "r.csv", "id,label,review,stars\n7,1,好,5\n".encode(), [("好", 1)]),
    ("columns-reordered", "r.csv", "review,label\n好,1\n差,0\n".encode(), [("好", 1), ("差", 0)]),
    (
        "quoted-comma",
        "r.csv",
        b'label,review\n1,"great hotel, clean"\n0,dirty\n',
        [("great hotel, clean", 1), ("dirty", 0)],
    ),
    ("tsv", "r.tsv", "label\treview\n1\t好\n".encode(), [("好", 1)]),
    ("chnsenticorp-tsv", "train.tsv", "qid\tlabel\ttext_a\n0\t1\t好\n".encode(), [("好", 1)]),
    ("one-class", "r.csv", "label,review\n1,好\n1,不错\n".encode(), [("好", 1), ("不错", 1)]),
    ("one-row", "r.csv", "label,review\n1,好\n".encode(), [("好", 1)]),
]


@pytest.mark.parametrize(
    ("name", "content", "expected"), [c[1:] for c in READABLE], ids=[c[0] for c in READABLE]
)
def test_a_readable_file_loads_as_written(
    corpus: Any, tmp_path: Path, name: str, content: bytes, expected: list[tuple[str, int]]
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    assert corpus.load_file(path) == expected


#: (id, file name, content or None for a directory, regex of the CorpusError)
UNREADABLE: list[tuple[str, str, bytes | None, str]] = [
    ("empty-file", "r.csv", b"", r"r\.csv is empty$"),
    ("header-only", "r.csv", b"label,review\n", r"r\.csv has a header but no samples"),
    (
        "only-empty-reviews",
        "r.csv",
        b"label,review\n1,\n0, \n",
        r"r\.csv has a header but no samples",
    ),
    ("no-label-column", "r.csv", b"score,text_body\n1,x\n", r"header must name a 'label' column"),
    ("no-text-column", "r.csv", b"label,body\n1,x\n", r"no text column \('text_a', 'review' or"),
    (
        "tab-separated-named-csv",
        "r.csv",
        "label\treview\n1\t好\n".encode(),
        r"must name a 'label' column.*\(tab-separated\? name the file \.tsv\)",
    ),
    ("ragged-row", "r.csv", "label,review\n1,好,多\n".encode(), r"r\.csv:2: expected 2 fields"),
    ("word-label", "r.csv", b"label,review\npos,x\n", r"r\.csv:2: label 'pos' is not an integer"),
    ("float-label", "r.csv", b"label,review\n1.0,x\n", r"r\.csv:2: label '1\.0' is not an integer"),
    (
        "negative-label",
        "r.csv",
        b"label,review\n1,x\n-1,y\n",
        r"r\.csv:3: label -1 is negative: labels are class numbers 0, 1, \.\.\.",
    ),
    (
        "gbk",
        "r.csv",
        "label,review\n1,好\n".encode("gbk"),
        r"r\.csv is not UTF-8 text \(byte \d+: invalid start byte\); save it as UTF-8",
    ),
    ("a-directory", "data.csv", None, r"data file .*data\.csv is a directory: give a CSV or TSV"),
]


@pytest.mark.parametrize(
    ("name", "content", "match"), [c[1:] for c in UNREADABLE], ids=[c[0] for c in UNREADABLE]
)
def test_an_unreadable_file_is_a_corpus_error_that_says_why(
    corpus: Any, tmp_path: Path, name: str, content: bytes | None, match: str
) -> None:
    path = tmp_path / name
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    with pytest.raises(corpus.CorpusError, match=match):
        corpus.load_file(path)


def test_a_missing_file_is_named(corpus: Any, tmp_path: Path) -> None:
    with pytest.raises(corpus.CorpusError, match=r"data file not found: .*no-such\.csv"):
        corpus.load_file(tmp_path / "no-such.csv")


def test_the_split_keeps_a_sample_on_each_side(corpus: Any) -> None:
    two = [("好", 1), ("差", 0)]
    train, dev = corpus.split(two)
    assert len(train) == len(dev) == 1 and sorted(train + dev) == sorted(two)
    train, dev = corpus.split([(str(i), i % 2) for i in range(100)], seed=3)
    assert (len(train), len(dev)) == (90, 10), "90/10"
    assert sorted(train + dev) == sorted((str(i), i % 2) for i in range(100)), "each sample once"


def test_a_single_sample_cannot_be_split(corpus: Any) -> None:
    """One sample left nothing to train on: the BERT example crashed in tokenize (exit 1)."""
    with pytest.raises(corpus.CorpusError, match=r"^r.csv has 1 sample\(s\): a train/dev split"):
        corpus.split([("好", 1)], source="r.csv")
