"""Two small Sphinx pieces of this site: the ``note`` role and the ``public-api`` directive.

NOTE [ NOTE links found at build time ]
    The code keeps the *why* of a design in named notes, ``NOTE [ name ]``, and the docs cite
    them. A reader who meets one must be able to open it, and modules move between packages,
    so a page never names the file: ``{note}`name``` searches the sources (``src/dynbatch``,
    ``examples``, ``benchmarks``) when the site is built, for the line that opens the note
    (``NOTE [ name ]`` first on its line, after a ``#`` in a comment), and links to that line
    of a page of the file's source that this extension writes. A note that no file opens is a
    warning, which ``make docs`` (``-W``) turns into a failed build: a renamed or deleted note
    cannot leave a dead citation behind.

The ``public-api`` directive documents every name of ``dynbatch.__all__`` as users import it
(``dynbatch.like_fixed``), by autodoc, so the reference follows ``__all__`` and never names a
module path that a move could break.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst.states import Inliner
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

__all__ = ["NoteSite", "find_note", "setup"]

logger = logging.getLogger(__name__)

#: where notes are looked for, relative to the repository root, in this order
SOURCES = ("src/dynbatch", "examples", "benchmarks")
PAGES = "_sources_with_notes"  # the pages of source files this extension writes


@dataclass(frozen=True)
class NoteSite:
    """Where a note opens: a file relative to the repository root and a 1-based line."""

    path: str
    line: int


def _opening(name: str) -> re.Pattern[str]:
    return re.compile(r"^\s*(?:#\s*)?NOTE \[ " + re.escape(name) + r" \](?P<rest>.*)$")


def find_note(root: Path, name: str) -> NoteSite | None:
    """The line that opens ``NOTE [ name ]`` under ``root``'s sources, or None.

    A line with the note alone (the head of a note in a docstring) wins over one where text
    follows it (``# NOTE [ name ]: why``); among equals, the first source tree, then path.
    """
    pattern = _opening(" ".join(name.split()))
    best: tuple[int, NoteSite] | None = None
    for rank_tree, tree in enumerate(SOURCES):
        for path in sorted((root / tree).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            if f"NOTE [ {name.split()[0]}" not in text:
                continue
            for number, line in enumerate(text.splitlines(), start=1):
                match = pattern.match(line)
                if match is None:
                    continue
                alone = match.group("rest").strip() == ""
                rank = (0 if alone else 1) * len(SOURCES) + rank_tree
                site = NoteSite(path.relative_to(root).as_posix(), number)
                if best is None or rank < best[0]:
                    best = (rank, site)
    return None if best is None else best[1]


def _root(env: BuildEnvironment) -> Path:
    return Path(env.srcdir).resolve().parent


def _page(path: str) -> str:
    return f"{PAGES}/{path.removesuffix('.py')}"


def note_role(
    name: str,
    rawtext: str,
    text: str,
    lineno: int,
    inliner: Inliner,
    options: dict[str, Any] | None = None,
    content: list[str] | None = None,
) -> tuple[list[nodes.Node], list[nodes.system_message]]:
    """``{note}`name```: ``NOTE [ name ]``, linked to the line of the file that opens it."""
    env: BuildEnvironment = inliner.document.settings.env
    note = " ".join(text.split())
    label = f"NOTE [ {note} ]"
    site = find_note(_root(env), note)
    if site is None:
        logger.warning(
            "%s is opened by no file of %s",
            label,
            ", ".join(SOURCES),
            location=(env.docname, lineno),
        )
        return [nodes.literal(rawtext, label)], []
    files: dict[str, set[str]] = env.dynbatch_note_files  # type: ignore[attr-defined]
    files.setdefault(env.docname, set()).add(site.path)
    uri = env.app.builder.get_relative_uri(env.docname, _page(site.path))
    ref = nodes.reference(rawtext, "", refuri=f"{uri}#L-{site.line}", internal=False)
    ref["reftitle"] = f"{site.path}, line {site.line}"
    ref += nodes.literal(rawtext, label)
    ref += nodes.Text(f" ({site.path})")
    return [ref], []


def _init(app: Sphinx, env: BuildEnvironment, docnames: list[str]) -> None:
    if not hasattr(env, "dynbatch_note_files"):
        env.dynbatch_note_files = {}  # type: ignore[attr-defined]


def _outdated(
    app: Sphinx, env: BuildEnvironment, added: set[str], changed: set[str], removed: set[str]
) -> list[str]:
    """Pages that cite notes are read again on every build: the sources they link may have
    moved since the last one (a cached link to a moved file would break the build)."""
    return sorted(getattr(env, "dynbatch_note_files", {}))


def _purge(app: Sphinx, env: BuildEnvironment, docname: str) -> None:
    getattr(env, "dynbatch_note_files", {}).pop(docname, None)


def _merge(
    app: Sphinx, env: BuildEnvironment, docnames: list[str], other: BuildEnvironment
) -> None:
    _init(app, env, docnames)
    env.dynbatch_note_files.update(other.dynbatch_note_files)  # type: ignore[attr-defined]


def _source_pages(app: Sphinx) -> Iterator[tuple[str, dict[str, Any], str]]:
    """A page per cited file: its source, lines numbered and anchored ``L-<n>``."""
    root = _root(app.env)
    cited = sorted(set().union(*getattr(app.env, "dynbatch_note_files", {}).values()))
    for path in cited:
        code = (root / path).read_text(encoding="utf-8")
        body = app.builder.highlighter.highlight_block(  # type: ignore[attr-defined]
            code, "python", linenos="inline", lineanchors="L", anchorlinenos=True
        )
        title = html.escape(path)
        yield _page(path), {"title": path, "body": f"<h1>{title}</h1>\n{body}"}, "page.html"


class PublicApi(SphinxDirective):
    """``public-api``: autodoc of every name in ``dynbatch.__all__``, grouped by kind.

    For MyST pages: the rST it generates is read through MyST's ``eval-rst``.
    """

    def run(self) -> list[nodes.Node]:
        import inspect

        import dynbatch

        groups: dict[str, list[str]] = {"exception": [], "class": [], "function": [], "data": []}
        for name in dynbatch.__all__:
            obj = getattr(dynbatch, name)
            if inspect.isclass(obj) and issubclass(obj, BaseException):
                groups["exception"].append(name)
            elif inspect.isclass(obj):
                groups["class"].append(name)
            elif callable(obj):
                groups["function"].append(name)
            else:
                groups["data"].append(name)
        # autodoc writes rST, and a MyST page reads nested text as Markdown: one eval-rst fence
        lines = ["```{eval-rst}"]
        titles = {"class": "Classes", "function": "Functions", "exception": "Errors"}
        titles["data"] = "Data"
        for kind in ("class", "function", "exception", "data"):
            if not groups[kind]:
                continue
            lines += [f".. rubric:: {titles[kind]}", ""]
            for name in sorted(groups[kind], key=str.lower):
                lines.append(f".. auto{kind}:: dynbatch.{name}")
                if kind in ("class", "exception"):
                    lines.append("   :members:")
                lines.append("")
        lines.append("```")
        node = nodes.section()
        node.document = self.state.document
        self.state.nested_parse(StringList(lines, source="dynbatch.__all__"), 0, node)
        return list(node.children)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_role("note", note_role)
    app.add_directive("public-api", PublicApi)
    app.connect("env-before-read-docs", _init)
    app.connect("env-get-outdated", _outdated)
    app.connect("env-purge-doc", _purge)
    app.connect("env-merge-info", _merge)
    app.connect("html-collect-pages", _source_pages)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
