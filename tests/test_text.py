"""dynbatch's WordPiece counter counts what paddlenlp's BertTokenizer makes
(NOTE [ one WordPiece counter ] in dynbatch.plan.text)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from dynbatch import InputError
from dynbatch.plan.text import wordpiece_counter

#: texts on each of the basic tokenizer's rules: symbols inside words (～ ￥ ° ©), punctuation,
#: accents, control characters, odd white space, CJK beyond the main block, long words, pieces
RULES = [
    "房间3～4层，￥380一晚",
    "服务～～～还行",
    "温度25°C，价格$99，©酒店",
    "Playing unaffable HOTELS!",
    "Café naïve résumé ÅNGSTRÖM",
    "a\u0000b\u200bc\ufffdd\x07e",
    "tab\there\u3000full\u00a0width\nline",
    "𠀀𪜀𫝀𫠠 CJK extensions",
    "x" * 101 + " " + "y" * 100,
    "i'm don't U.S.A. 1,000.50 -- ...",
    "ºµ²〇ŋ odd symbols",
    "[CLS] 好 [SEP]",
    "a[SEP]b [SEP]好 [sep] [MASK]\u0007 [ UNK ]",
]


@pytest.fixture(scope="module")
def paddlenlp_count(bert_vocab: Path):  # type: ignore[no-untyped-def]
    pytest.importorskip("paddlenlp")
    # paddlenlp's tokenizer built here, not through dynbatch, so this compares two counters
    from paddlenlp.transformers import BertTokenizer

    tokenizer = BertTokenizer(vocab_file=str(bert_vocab))
    return lambda text: len(tokenizer.tokenize(text))


@pytest.mark.parametrize("text", RULES)
def test_each_rule_counts_as_paddlenlp(paddlenlp_count, bert_vocab: Path, text: str) -> None:
    assert wordpiece_counter(bert_vocab)(text) == paddlenlp_count(text), text


def test_real_reviews_count_as_paddlenlp(
    paddlenlp_count, chnsenticorp_csv: Path, bert_vocab: Path
) -> None:
    with open(chnsenticorp_csv, encoding="utf-8") as fh:
        texts = [row["review"] for row, _ in zip(csv.DictReader(fh), range(2000), strict=False)]
    ours = wordpiece_counter(bert_vocab)
    differ = [(i, ours(t), paddlenlp_count(t)) for i, t in enumerate(texts)]
    differ = [d for d in differ if d[1] != d[2]]
    assert differ == [], f"{len(differ)} of {len(texts)} differ, first (review, ours, theirs)"
    assert sum(map(ours, texts)) > 50 * len(texts), "a real comparison: real token counts"


def test_symbols_are_words_of_their_own(tmp_path: Path) -> None:
    """paddlenlp splits symbols out of words; Google BERT (and `tokenizers`) would not."""
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[UNK]\n3\n4\n～\n400\n##400\n￥\n", encoding="utf-8")
    count = wordpiece_counter(vocab)
    assert count("3～4") == 3, "3 ～ 4, not the one word 3～4"
    assert count("￥400") == 2, "￥ 400, not ￥ ##400"


def test_missing_vocab() -> None:
    with pytest.raises(FileNotFoundError, match="vocab file not found"):
        wordpiece_counter("no/such/vocab.txt")


def test_empty_vocab_is_named(tmp_path: Path) -> None:
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"vocab file .*vocab.txt holds no tokens"):
        wordpiece_counter(vocab)
