"""The built-in WordPiece counter against paddlenlp's BertTokenizer on real reviews."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from dynbatch.text import wordpiece_counter


def test_builtin_counter_agrees_with_paddlenlp(chnsenticorp_csv: Path, bert_vocab: Path) -> None:
    pytest.importorskip("paddlenlp")
    with open(chnsenticorp_csv, encoding="utf-8") as fh:
        texts = [row["review"] for row, _ in zip(csv.DictReader(fh), range(1500), strict=False)]
    theirs = wordpiece_counter(bert_vocab)
    ours = wordpiece_counter(bert_vocab, prefer_paddlenlp=False)
    same = sum(theirs(t) == ours(t) for t in texts)
    assert same >= 0.99 * len(texts), f"only {same}/{len(texts)} counts agree"
    assert all(abs(theirs(t) - ours(t)) <= 3 for t in texts), "never far off"


def test_missing_vocab() -> None:
    with pytest.raises(FileNotFoundError, match="vocab file not found"):
        wordpiece_counter("no/such/vocab.txt")
