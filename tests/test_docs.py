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
def test_the_api_reference_documents_every_public_name(site: Path) -> None:
    page = (site / "api.html").read_text(encoding="utf-8")
    documented = set(re.findall(r'id="(dynbatch\.[\w.]+)"', page))
    missing = [name for name in dynbatch.__all__ if f"dynbatch.{name}" not in documented]
    assert not missing, f"api.html lacks {missing}"
    assert "dynbatch.integrations.paddlenlp.DynamicBatchTrainer" in documented


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
