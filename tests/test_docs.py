"""The docs site (docs/, Sphinx + MyST) builds with warnings as errors, as ``make docs`` builds
it, and its API reference documents every public name as users import it."""

from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path

import pytest

import dynbatch

DOCS = Path(__file__).resolve().parents[1] / "docs"
#: the columns of code a page shows whole at a 1,280 px window (docs/_static/dynbatch.css)
CODE_COLUMNS = 120
FENCE = re.compile(r"^(?P<fence>```+|~~~+)[^\n]*\n(?P<body>.*?)^(?P=fence)[ \t]*$", re.S | re.M)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_parser")
    out = tmp_path_factory.mktemp("html")
    build = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html"]
    done = subprocess.run(
        [*build, "-d", str(out / ".doctrees"), str(DOCS), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return out


@pytest.mark.slow
def test_the_api_reference_documents_every_public_name_once(site: Path) -> None:
    page = (site / "api.html").read_text(encoding="utf-8")
    ids = re.findall(r'id="(dynbatch\.[\w.]+)"', page)
    counts = {name: ids.count(f"dynbatch.{name}") for name in dynbatch.__all__}
    assert all(n == 1 for n in counts.values()), {k: n for k, n in counts.items() if n != 1}
    assert "dynbatch.integrations.paddlenlp.DynamicBatchTrainer" in ids


def public_api_blocks() -> list[tuple[str, list[str]]]:
    """``(heading, names)`` of each ``public-api`` block of docs/api.md, in page order."""
    text = (DOCS / "api.md").read_text(encoding="utf-8")
    blocks = []
    for block in FENCE.finditer(text):
        if block.group(0).startswith("```{public-api}"):
            heading = re.findall(r"^#+ (.+)$", text[: block.start()], re.M)[-1]
            blocks.append((heading, block["body"].split()))
    return blocks


def test_the_api_reference_lists_every_public_name_once_grouped_by_task() -> None:
    listed = [name for _, names in public_api_blocks() for name in names]
    assert sorted(listed) == sorted(dynbatch.__all__), set(listed) ^ set(dynbatch.__all__)
    assert len(listed) == len(set(listed)), [n for n in set(listed) if listed.count(n) > 1]
    groups = {heading: names for heading, names in public_api_blocks()}
    headings = list(groups)
    assert headings[0] == "Samplers" and headings[-1] == "The original study's API", headings
    assert groups["The original study's API"] == ["DatasetForDBL", "get_dynamic_batch_loader"]
    assert groups["Collators"] == ["Pad", "Stack", "Tuple", "Dict", "PackCollator", "safe_collate"]
    assert listed != sorted(listed, key=str.lower), "grouped by task, not alphabetical"


@pytest.mark.slow
def test_a_cited_note_links_to_the_line_that_opens_it(site: Path) -> None:
    page = (site / "loop.html").read_text(encoding="utf-8")
    (link,) = set(re.findall(r'href="([^"]+)" title="([^"]+recipes\.py, line \d+)"', page))
    target, line = link[0].split("#L-")
    source = (site / target).read_text(encoding="utf-8")
    assert f'id="L-{line}"' in source, "the anchor exists on the source page"
    opened = re.search(rf'id="L-{line}".*?</span></a>(.*?)\n', source)
    assert opened is not None, "the line is on the page"
    assert "NOTE [ the fixed batch's recipe ]" in html.unescape(opened.group(1)), opened.group(1)


def test_every_line_of_code_in_the_docs_shows_whole_at_1280_px() -> None:
    """furo's text column, widened by docs/_static/dynbatch.css, shows CODE_COLUMNS columns of
    code at a 1,280 px window; a longer line would end behind a scroll bar."""
    wide = [
        f"{path.name}: {len(line)} columns: {line[:60]}"
        for path in sorted(DOCS.glob("*.md"))
        for block in FENCE.finditer(path.read_text(encoding="utf-8"))
        for line in block["body"].splitlines()
        if len(line) > CODE_COLUMNS
    ]
    assert not wide, "\n".join(wide)
    conf = (DOCS / "conf.py").read_text(encoding="utf-8")
    assert 'html_theme = "furo"' in conf and '"dynbatch.css"' in conf
