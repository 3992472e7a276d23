"""The docs site (docs/, Sphinx + MyST) builds with warnings as errors, as ``make docs`` builds
it, and its API reference documents every public name as users import it."""

from __future__ import annotations

import html
import importlib.util
import inspect
import re
import subprocess
import sys
import types
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
    assert groups["Collators"] == [
        *("Pad", "Stack", "Tuple", "Dict", "Seq2SeqCollator", "PackCollator", "safe_collate")
    ]
    assert listed != sorted(listed, key=str.lower), "grouped by task, not alphabetical"


@pytest.mark.slow
def test_a_cited_note_links_to_the_line_that_opens_it(site: Path) -> None:
    """docs/loop.md cites it as a Markdown link to the file (what GitHub follows); the site
    links the line that opens it, on a page of the file's source."""
    assert "the note\n[the fixed batch's recipe](../src/dynbatch/plan/recipes.py)" in (
        DOCS / "loop.md"
    ).read_text(encoding="utf-8")
    page = (site / "loop.html").read_text(encoding="utf-8")
    found = re.findall(r'href="([^"]+)" title="([^"]+recipes\.py, line \d+)">([^<]+)</a>', page)
    assert {html.unescape(text) for *_, text in found} == {"the fixed batch's recipe"}, found
    (link,) = {(href, title) for href, title, _ in found}
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


def params_extension() -> types.ModuleType:
    """``docs/_ext/params.py``: the build's check that every public parameter is described."""
    pytest.importorskip("sphinx")
    spec = importlib.util.spec_from_file_location("dynbatch_docs_params", DOCS / "_ext/params.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def napoleon_lines(doc: str, what: str = "function") -> list[str]:
    """What napoleon hands the check: the Google sections turned into fields."""
    from sphinx.ext.napoleon import Config
    from sphinx.ext.napoleon.docstring import GoogleDocstring

    return GoogleDocstring(inspect.cleandoc(doc), Config(), what=what).lines()


def test_an_undescribed_public_parameter_is_found() -> None:
    params = params_extension()

    def sample(dataset: object, *rest: object, lengths: object = None, **shortcuts: object) -> None:
        """Plan.

        Args:
            lengths: per-sample lengths.
        """

    def described(self: object, num_replicas: int, rank: int, _private: int = 0, **kw: int) -> None:
        """Shard.

        Args:
            num_replicas, rank: the ranks.
            **kw: options.
        """

    def known(fn: object, what: str = "function") -> set[str]:
        return set(params.described(napoleon_lines(fn.__doc__ or "", what), what))

    found = params.undescribed(sample, "function", known(sample))
    assert found == ["dataset", "*rest", "**shortcuts"], found
    assert params.undescribed(described, "method", known(described, "method")) == []
    assert params.undescribed(property(), "property", set()) == [], "only callables are read"

    class Options:
        """Options.

        Attributes:
            seed: the seed.
        """

        def __init__(self, seed: int, order: str) -> None: ...

    assert params.undescribed(Options, "class", known(Options, "class")) == ["order"]


@pytest.mark.slow
def test_the_build_fails_on_an_undescribed_public_parameter(tmp_path: Path) -> None:
    """The check runs in the real build: a site of one page documenting one function."""
    pytest.importorskip("sphinx")
    source, package = tmp_path / "docs", tmp_path / "sample_api"
    (source / "_ext").mkdir(parents=True)
    package.mkdir()
    (source / "_ext" / "params.py").write_text((DOCS / "_ext/params.py").read_text())
    doc = '"""Plan.\n\n    Args:\n        lengths: sizes.\n    """'
    (package / "__init__.py").write_text(f"def plan(lengths, max_cost):\n    {doc}\n")
    (source / "conf.py").write_text(
        "import sys\n"
        f"sys.path[:0] = [{str(source / '_ext')!r}, {str(tmp_path)!r}]\n"
        'extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "params"]\n'
    )
    (source / "index.rst").write_text("API\n===\n\n.. autofunction:: sample_api.plan\n")
    build = [sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", str(source)]
    done = subprocess.run([*build, str(tmp_path / "html")], capture_output=True, text=True)
    assert done.returncode != 0, "the build passed"
    assert "sample_api.plan: parameter max_cost is not described" in done.stderr, done.stderr
