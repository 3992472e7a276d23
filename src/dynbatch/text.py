"""Lengths of text: characters, or BERT WordPiece tokens from a vocabulary file.

``wordpiece_counter(vocab)`` uses paddlenlp's ``BertTokenizer`` when it is
installed, else a small built-in tokenizer with BERT's rules (lower case,
punctuation and CJK characters split out, greedy longest-match word pieces
with ``##``); both count ``[CLS]``/``[SEP]`` only if you add them (``--add 2``).

>>> import tempfile, os
>>> vocab = os.path.join(tempfile.mkdtemp(), "vocab.txt")
>>> _ = open(vocab, "w").write("\\n".join(["[PAD]", "[UNK]", "play", "##ing", "好"]))
>>> count = wordpiece_counter(vocab, prefer_paddlenlp=False)
>>> count("Playing 好好!"), count("xyz")
(5, 1)
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from pathlib import Path

from ._checks import InputError

__all__ = ["load_vocab", "wordpiece_counter"]


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


def _is_cjk(ch: str) -> bool:
    cp = ord(ch)
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


def _is_punct(ch: str) -> bool:
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _basic_words(text: str) -> list[str]:
    text = unicodedata.normalize("NFD", text.lower())
    text = "".join(ch for ch in text if unicodedata.category(ch) != "Mn")
    spaced = "".join(f" {ch} " if _is_cjk(ch) or _is_punct(ch) else ch for ch in text)
    return spaced.split()


def _builtin_counter(vocab: dict[str, int]) -> Callable[[str], int]:
    def pieces(word: str) -> int:
        if len(word) > 100:
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

    return lambda text: sum(pieces(w) for w in _basic_words(text))


def wordpiece_counter(
    vocab_file: str | Path, *, prefer_paddlenlp: bool = True
) -> Callable[[str], int]:
    """A function ``text -> number of WordPiece tokens`` for the vocabulary in ``vocab_file``."""
    path = Path(vocab_file)
    if not path.is_file():
        raise FileNotFoundError(f"vocab file not found: {path}")
    vocab = load_vocab(path)  # refuses an empty file, which paddlenlp only asserts against
    if prefer_paddlenlp:
        try:
            from paddlenlp.transformers import BertTokenizer
        except ImportError:
            pass
        else:
            tokenizer = BertTokenizer(vocab_file=str(path))
            return lambda text: len(tokenizer.tokenize(text))
    return _builtin_counter(vocab)
