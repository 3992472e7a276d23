"""The examples' own copy of ChnSentiCorp: read as shipped, compressed, and attributed."""

from __future__ import annotations

import gzip
import lzma
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "examples" / "data"
sys.path.insert(0, str(ROOT / "examples"))
from corpus import BUNDLED, CorpusError, load_file  # noqa: E402

sys.path.remove(str(ROOT / "examples"))


def test_the_shipped_hotel_reviews_read_as_they_are() -> None:
    examples = load_file(BUNDLED)
    assert BUNDLED.parent == DATA and BUNDLED.name.endswith(".csv.xz"), "compressed, beside them"
    assert len(examples) == 7765, "every ChnSentiCorp_htl_all review (one of its 7,766 is empty)"
    assert sum(label for _, label in examples) == 5322, "5,322 positive, the rest negative"
    assert {label for _, label in examples} == {0, 1}
    assert BUNDLED.stat().st_size < 1_000_000, "compressed: under a megabyte"


def test_the_shipped_data_says_whose_it_is() -> None:
    notice = (DATA / "README.md").read_text(encoding="utf-8")
    for said in ("Tan Songbo", "ChineseNlpCorpus", "ChnSentiCorp_htl_all", "research use"):
        assert said in notice, f"the notice names {said!r}"


@pytest.mark.parametrize(("suffix", "opener"), [(".csv.gz", gzip.open), (".csv.xz", lzma.open)])
def test_a_compressed_csv_reads_as_the_csv(tmp_path: Path, suffix: str, opener: object) -> None:
    path = tmp_path / f"reviews{suffix}"
    with opener(path, "wt", encoding="utf-8") as fh:  # type: ignore[operator]
        fh.write('label,review\n1,"好,很好"\n0,差\n')
    assert load_file(path) == [("好,很好", 1), ("差", 0)], "the CSV's delimiter, not a TSV's"


def test_a_broken_archive_is_named(tmp_path: Path) -> None:
    path = tmp_path / "reviews.csv.xz"
    path.write_bytes(b"not xz at all")
    with pytest.raises(CorpusError, match=r"reviews\.csv\.xz cannot be read as \.xz"):
        load_file(path)


def test_the_data_is_tracked_and_not_ignored() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "--error-unmatch", str(BUNDLED.relative_to(ROOT))],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    ignored = subprocess.run(["git", "check-ignore", "-q", str(BUNDLED)], cwd=ROOT)
    assert ignored.returncode == 1, ".gitignore leaves the data in"
    if (ROOT / ".git").exists():
        assert tracked.returncode == 0, tracked.stderr
