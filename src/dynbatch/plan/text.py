"""Lengths of text: characters, or BERT WordPiece tokens from a vocabulary file.

``wordpiece_counter(vocab)`` counts the tokens paddlenlp's ``BertTokenizer``
makes of a text (``[CLS]``/``[SEP]`` only if you add them: ``--add 2``), with
no dependency: lower case, accents stripped, control characters dropped, CJK
characters, punctuation and symbols split out, special tokens (``[SEP]``) that
stand alone kept whole, then greedy longest-match word pieces with ``##``
(NOTE [ one WordPiece counter ]).

NOTE [ one WordPiece counter ]
    dynbatch counted WordPiece tokens two ways, paddlenlp's ``BertTokenizer``
    when installed, else a counter of its own with Google BERT's rules, and the
    two differed on 32 of the 7,766 ChnSentiCorp reviews: paddlenlp also splits
    symbols out of words (``～``, ``￥``: Unicode category S), BERT splits only
    punctuation. ``python benchmarks/wordpiece.py`` counts those reviews with
    the bert-base-chinese vocabulary, 10 passes each (77,660 reviews; the
    counters take turns pass by pass, the rate is the median pass, scaled to
    1M reviews), on 2 CPU cores shared with other jobs (load 3 to 4.7)::

        counter                             reviews/s  1M reviews  differs from paddlenlp
        this module (pure Python)              10,147        99 s  0 of 7,766
        tokenizers BertWordPieceTokenizer       2,103       475 s  32 of 7,766 (by <= 3)
          (Rust, encode_batch)
        paddlenlp BertTokenizer                   700     1,428 s  (the reference)

    Over three such runs on this busy machine the rates ranged 10,000-21,000,
    2,100-6,700 and 700-740 reviews/s: this module was always the fastest,
    1.5x to 10x ``tokenizers`` (whose normaliser is slow on CJK text and whose
    threads found no free core) and 13x to 29x paddlenlp.

    One counter is kept: this one, now with paddlenlp's rules for symbols,
    control characters, CJK extension blocks and special tokens (``[SEP]``
    standing alone is one token). It is the fastest here, it counts what a
    paddle user's ``BertTokenizer`` makes, and it needs no package: ``dynbatch
    stats --vocab`` imports no paddle. ``tokenizers`` follows Google BERT and
    differs on the same 32 reviews; paddlenlp's own path (and its paddle
    import) is gone.

>>> import tempfile, os
>>> vocab = os.path.join(tempfile.mkdtemp(), "vocab.txt")
>>> _ = open(vocab, "w").write("\\n".join(["[PAD]", "[UNK]", "play", "##ing", "好"]))
>>> count = wordpiece_counter(vocab)
>>> count("Playing 好好!"), count("xyz"), count("3～4")
(5, 1, 3)
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from pathlib import Path

from .._checks import InputError

__all__ = ["MAX_WORD", "SPECIAL_TOKENS", "load_vocab", "wordpiece_counter"]

#: a longer word is one ``[UNK]``, as in BERT's ``WordpieceTokenizer``
MAX_WORD = 100


def load_vocab(path: str | Path) -> dict[str, int]:
    """One token a line, id = line number; a file with no token is refused.

    >>> import tempfile, os
    >>> empty = os.path.join(tempfile.mkdtemp(), "empty.txt")
    >>> _ = open(empty, "w").write("\\n")
    >>> load_vocab(empty)
    Traceback (most recent call last):
    ...
    dynbatch.errors.InputError: vocab file .../empty.txt holds no tokens; ...
    """
    with open(path, encoding="utf-8") as fh:
        vocab = {line.rstrip("\n"): i for i, line in enumerate(fh) if line.strip()}
    if not vocab:
        raise InputError(
            f"vocab file {path} holds no tokens; a vocabulary is one token a line "
            "(BERT's vocab.txt)"
        )
    return vocab


#: whole words kept whole, as paddlenlp's ``BertTokenizer`` keeps its special tokens
SPECIAL_TOKENS = frozenset({"[UNK]", "[SEP]", "[PAD]", "[CLS]", "[MASK]"})
# code points paddlenlp's BertTokenizer treats as CJK characters (each a word)
_CJK = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)
# letters paddlenlp's BertTokenizer splits out as symbols (after lower case and NFD)
_ODD_SYMBOLS = frozenset(map(chr, (0x00AD, 0x00B2, 0x00BA, 0x3007, 0x00B5, 0x00D8, 0x014B, 0x01B1)))


def _clean(ch: str) -> str | None:
    """Control characters dropped, white space a space; None for any other character."""
    if ch in "\t\n\r":
        return " "
    cat = unicodedata.category(ch)
    if cat[0] == "C" or ch == "\ufffd":
        return ""
    return " " if cat == "Zs" else None


def _is_cjk(ch: str) -> bool:
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in _CJK)


def _spaced(ch: str) -> str:
    """The first step of BERT's basic tokenizer: clean, and a space either side of CJK."""
    cleaned = _clean(ch)
    if cleaned is not None:
        return cleaned
    return f" {ch} " if _is_cjk(ch) else ch


def _rewrite(ch: str) -> str:
    """All the steps at once, on lower-cased NFD text: clean, accents dropped, and CJK,
    punctuation and symbols each a word of its own."""
    cleaned = _clean(ch)
    if cleaned is not None:
        return cleaned
    cat = unicodedata.category(ch)
    if cat == "Mn":  # an accent
        return ""
    cp = ord(ch)
    if (
        _is_cjk(ch)
        or 33 <= cp <= 47
        or 58 <= cp <= 64
        or 91 <= cp <= 96
        or 123 <= cp <= 126
        or cat[0] in "PS"
        or ch in _ODD_SYMBOLS
    ):
        return f" {ch} "
    return ch


class _Table(dict[int, str]):
    """``str.translate``'s table, filled one character at a time as texts bring them."""

    def __init__(self, rule: Callable[[str], str]) -> None:
        super().__init__()
        self.rule = rule

    def __missing__(self, cp: int) -> str:
        self[cp] = out = self.rule(chr(cp))
        return out


_SPACED = _Table(_spaced)
_REWRITES = _Table(_rewrite)


def _split(text: str) -> list[str]:
    return [w for w in text.split(" ") if w]


def _words(text: str) -> list[str]:
    """The words of paddlenlp's basic tokenizer: a special token that is a word of its own
    stays whole; elsewhere the order of its steps (clean, CJK, lower case, strip accents, split
    punctuation and symbols) commutes, so one pass of ``str.translate`` does them all."""
    if "[" not in text:  # no special token
        return _split(unicodedata.normalize("NFD", text.lower()).translate(_REWRITES))
    words: list[str] = []
    for word in _split(text.translate(_SPACED)):
        if word in SPECIAL_TOKENS:
            words.append(word)
        else:
            words += _split(unicodedata.normalize("NFD", word.lower()).translate(_REWRITES))
    return words


def _counter(vocab: dict[str, int]) -> Callable[[str], int]:
    def pieces(word: str) -> int:
        if len(word) == 1 or word in SPECIAL_TOKENS:  # itself or [UNK]: one piece
            return 1
        if len(word) > MAX_WORD:
            return 1
        count, start = 0, 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in vocab:
                    break
                end -= 1
            if end == start:
                return 1  # the whole word becomes [UNK]
            count += 1
            start = end
        return count

    return lambda text: sum(map(pieces, _words(text)))


def wordpiece_counter(vocab_file: str | Path) -> Callable[[str], int]:
    """A function ``text -> number of WordPiece tokens`` for the vocabulary in ``vocab_file``:
    the count of paddlenlp's ``BertTokenizer(vocab_file).tokenize(text)``, without paddlenlp
    (NOTE [ one WordPiece counter ]).

    Raises:
        FileNotFoundError: no such file.
        InputError: the file holds no token.
        UnicodeDecodeError: the file is not UTF-8.
    """
    path = Path(vocab_file)
    if not path.is_file():
        raise FileNotFoundError(f"vocab file not found: {path}")
    return _counter(load_vocab(path))
