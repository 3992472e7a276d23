"""The built-in WordPiece counter against paddlenlp's BertTokenizer on real reviews."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from dynbatch import InputError
from dynbatch.text import wordpiece_counter


def test_builtin_counter_agrees_with_paddlenlp(chnsenticorp_csv: Path, bert_vocab: Path) -> None:
    pytest.importorskip("paddlenlp")
    # paddlenlp's tokenizer built here, not through wordpiece_counter, which falls back to the
    # built-in counter when paddlenlp.transformers does not import: then it would compare the
    # built-in counter with itself.
    from paddlenlp.transformers import BertTokenizer

    tokenizer = BertTokenizer(vocab_file=str(bert_vocab))
    with open(chnsenticorp_csv, encoding="utf-8") as fh:
        texts = [row["review"] for row, _ in zip(csv.DictReader(fh), range(1500), strict=False)]
    ours = wordpiece_counter(bert_vocab, prefer_paddlenlp=False)
    theirs = [len(tokenizer.tokenize(t)) for t in texts]
    counts = [ours(t) for t in texts]
    same = sum(a == b for a, b in zip(theirs, counts, strict=True))
    assert same >= 0.99 * len(texts), f"only {same}/{len(texts)} counts agree"
    assert all(abs(a - b) <= 3 for a, b in zip(theirs, counts, strict=True)), "never far off"
    assert sum(theirs) > len(texts), "a real comparison: paddlenlp counted real tokens"


def test_missing_vocab() -> None:
    with pytest.raises(FileNotFoundError, match="vocab file not found"):
        wordpiece_counter("no/such/vocab.txt")


@pytest.mark.parametrize("prefer_paddlenlp", [False, True])
def test_empty_vocab_is_named(tmp_path: Path, prefer_paddlenlp: bool) -> None:
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"vocab file .*vocab.txt holds no tokens"):
        wordpiece_counter(vocab, prefer_paddlenlp=prefer_paddlenlp)
