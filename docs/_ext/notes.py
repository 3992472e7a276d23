"""The small Sphinx pieces of this site: the ``note`` role and the ``public-api`` directive.

NOTE [ NOTE links found at build time ]
    The code keeps the *why* of a design in named notes, ``NOTE [ name ]``, and the docs cite
    them. A reader who meets one must be able to open it, and modules move between packages,
    so a page never names the file: ``{note}`name``` searches the sources (``src/dynbatch``,
    ``examples``, ``benchmarks``) when the site is built, for the line that opens the note
    (``NOTE [ name ]`` first on its line, after a ``#`` in a comment), and links to that line
    of a page of the file's source that this extension writes. A note that no file opens is a
    warning, which ``make docs`` (``-W``) turns into a failed build: a renamed or deleted note
    cannot leave a dead citation behind.

The ``public-api`` directive documents the names of ``dynbatch.__all__`` it lists as users
import them (``dynbatch.like_fixed``), by autodoc, so the reference never names a module path
that a move could break; the build fails unless the API reference lists every public name
exactly once. A documented class's bases are shown as public names.
"""

from __future__ import annotations

import html
import inspect
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
    if not hasattr(env, "dynbatch_api_names"):
        env.dynbatch_api_names = {}  # type: ignore[attr-defined]


def _outdated(
    app: Sphinx, env: BuildEnvironment, added: set[str], changed: set[str], removed: set[str]
) -> list[str]:
    """Pages that cite notes are read again on every build: the sources they link may have
    moved since the last one (a cached link to a moved file would break the build)."""
    return sorted(getattr(env, "dynbatch_note_files", {}))


def _purge(app: Sphinx, env: BuildEnvironment, docname: str) -> None:
    getattr(env, "dynbatch_note_files", {}).pop(docname, None)
    for pages in getattr(env, "dynbatch_api_names", {}).values():
        pages[:] = [page for page in pages if page != docname]


def _merge(
    app: Sphinx, env: BuildEnvironment, docnames: list[str], other: BuildEnvironment
) -> None:
    _init(app, env, docnames)
    env.dynbatch_note_files.update(other.dynbatch_note_files)  # type: ignore[attr-defined]
    names: dict[str, list[str]] = env.dynbatch_api_names  # type: ignore[attr-defined]
    for name, pages in other.dynbatch_api_names.items():  # type: ignore[attr-defined]
        names.setdefault(name, []).extend(pages)


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


def _kind(obj: Any) -> str:
    """The autodoc directive that documents ``obj``: ``exception``, ``class``, ``function``..."""
    if inspect.isclass(obj):
        return "exception" if issubclass(obj, BaseException) else "class"
    return "function" if callable(obj) else "data"


class PublicApi(SphinxDirective):
    """``public-api``: autodoc of the names of ``dynbatch.__all__`` listed, one a line.

    The API reference lists every name once, grouped by task, in the order its page gives
    (not alphabetical): each group is a heading of the page and a ``public-api`` block of its
    names. A name that is not public is a warning here, and a public name that no block lists,
    or that two list, is one when every page has been read (``_check_public_api``). For MyST
    pages: the rST it generates is read through MyST's ``eval-rst``.
    """

    has_content = True

    def run(self) -> list[nodes.Node]:
        import dynbatch

        names = [line.strip() for line in self.content if line.strip()]
        listed: dict[str, list[str]] = self.env.dynbatch_api_names  # type: ignore[attr-defined]
        # autodoc writes rST, and a MyST page reads nested text as Markdown: one eval-rst fence
        lines = ["```{eval-rst}"]
        for name in names:
            if name not in dynbatch.__all__:
                logger.warning(
                    "public-api lists %r, which is not in dynbatch.__all__",
                    name,
                    location=self.get_location(),
                )
                continue
            listed.setdefault(name, []).append(self.env.docname)
            kind = _kind(getattr(dynbatch, name))
            lines.append(f".. auto{kind}:: dynbatch.{name}")
            if kind in ("class", "exception"):
                # its own members and those of its dynbatch bases (a sampler's set_epoch is
                # _Cursor's), never paddle's or Python's
                foreign = [
                    base.__name__
                    for base in getattr(dynbatch, name).__mro__[1:]
                    if not base.__module__.startswith("dynbatch")
                ]
                lines += ["   :members:", f"   :inherited-members: {', '.join(foreign)}"]
            lines.append("")
        lines.append("```")
        node = nodes.section()
        node.document = self.state.document
        self.state.nested_parse(StringList(lines, source="dynbatch.__all__"), 0, node)
        return list(node.children)


def _public_bases(app: Sphinx, name: str, obj: Any, options: Any, bases: list[Any]) -> None:
    """A class's "Bases:" line names what users know: a dynbatch base that is not public
    (``_Cursor``, a mixin of the Trainer) is shown as the bases it stands on, recursively."""
    import dynbatch

    public = {id(getattr(dynbatch, each)) for each in dynbatch.__all__}

    def shown(base: Any) -> list[Any]:
        if base is object:
            return []
        if id(base) in public or not str(getattr(base, "__module__", "")).startswith("dynbatch"):
            return [base]
        return [each for parent in getattr(base, "__bases__", ()) for each in shown(parent)]

    kept: list[Any] = []
    for base in bases:
        kept.extend(each for each in shown(base) if each not in kept)
    bases[:] = kept or [object]


def _check_public_api(app: Sphinx, env: BuildEnvironment) -> None:
    """Every name of ``dynbatch.__all__`` in exactly one ``public-api`` block of the site."""
    import dynbatch

    listed: dict[str, list[str]] = getattr(env, "dynbatch_api_names", {})
    if not listed:
        return  # a site without an API reference (a partial build)
    for name in dynbatch.__all__:
        where = listed.get(name, [])
        if len(where) != 1:
            logger.warning(
                "dynbatch.%s is listed by %d public-api blocks (%s), not by exactly one",
                name,
                len(where),
                ", ".join(where) or "none",
            )


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_role("note", note_role)
    app.add_directive("public-api", PublicApi)
    app.connect("env-before-read-docs", _init)
    app.connect("env-get-outdated", _outdated)
    app.connect("env-purge-doc", _purge)
    app.connect("env-merge-info", _merge)
    app.connect("env-check-consistency", _check_public_api)
    app.connect("autodoc-process-bases", _public_bases)
    app.connect("html-collect-pages", _source_pages)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
