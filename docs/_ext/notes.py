"""The small Sphinx pieces of this site: links to notes, and the ``public-api`` directive.

NOTE [ a note cited by a link to its file ]
    The code keeps the *why* of a design in named notes, ``NOTE [ name ]``, and the docs cite
    them. A reader who meets one must be able to open it, on this site and where the Markdown
    is read as it is (GitHub), so a page cites a note by a plain Markdown link whose text is
    the note's name and whose target is the source file that opens it:
    ``the note [mixed updates](../src/dynbatch/plan/windows.py)``. GitHub follows it to the
    file; here the link goes to the line that opens the note (``NOTE [ name ]`` first on its
    line, after a ``#`` in a comment), on a page of the file's source that this extension
    writes, found when the site is built. Modules move between packages, so the build checks
    every such link (a link to a ``.py`` file of ``src/dynbatch``, ``examples`` or
    ``benchmarks`` is a note's): a file that does not open the note named is a warning that says
    which file opens it now, if any, and ``make docs`` (``-W``) turns it into a failed build. A
    moved, renamed or deleted note cannot leave a dead citation behind. The MyST role
    ``{note}`name``` that pages used before reads as raw text on GitHub: it is a warning too,
    naming the link to write instead.

The ``public-api`` directive documents the names of ``dynbatch.__all__`` it lists as users
import them (``dynbatch.like_fixed``), by autodoc, so the reference never names a module path
that a move could break; the build fails unless the API reference lists every public name
exactly once. A documented class's bases are shown as public names.
"""

from __future__ import annotations

import html
import inspect
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst.states import Inliner
from docutils.statemachine import StringList
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

__all__ = ["NoteSite", "find_note", "note_links", "setup", "source_path"]

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


def _openings(root: Path, path: Path, name: str) -> Iterator[tuple[bool, NoteSite]]:
    """Each line of ``path`` that opens ``NOTE [ name ]``: (alone on its line, where)."""
    text = path.read_text(encoding="utf-8")
    if f"NOTE [ {name.split()[0]}" not in text:
        return
    pattern = _opening(" ".join(name.split()))
    for number, line in enumerate(text.splitlines(), start=1):
        match = pattern.match(line)
        if match is not None:
            site = NoteSite(path.relative_to(root).as_posix(), number)
            yield match.group("rest").strip() == "", site


def find_note(root: Path, name: str, path: str | None = None) -> NoteSite | None:
    """The line that opens ``NOTE [ name ]`` under ``root``'s sources (or in the file ``path``,
    relative to ``root``), or None.

    A line with the note alone (the head of a note in a docstring) wins over one where text
    follows it (``# NOTE [ name ]: why``); among equals, the first source tree, then path.
    """
    name = " ".join(name.split())
    best: tuple[int, NoteSite] | None = None
    for rank_tree, tree in enumerate(SOURCES):
        files = sorted((root / tree).rglob("*.py"))
        if path is not None:
            files = [f for f in files if f.relative_to(root).as_posix() == path]
        for file in files:
            for alone, site in _openings(root, file, name):
                rank = (0 if alone else 1) * len(SOURCES) + rank_tree
                if best is None or rank < best[0]:
                    best = (rank, site)
    return None if best is None else best[1]


def source_path(root: Path, page: Path, target: str) -> str | None:
    """A link's target, from the page ``page``, as a ``.py`` file of the sources relative to
    ``root`` (``src/dynbatch/plan/windows.py``), or None when it is not one."""
    if "://" in target or not target.split("#")[0].endswith(".py"):
        return None
    resolved = (page.parent / target.split("#")[0]).resolve()
    try:
        path = resolved.relative_to(root.resolve()).as_posix()
    except ValueError:
        return None
    return path if any(path.startswith(f"{tree}/") for tree in SOURCES) else None


def _root(env: BuildEnvironment) -> Path:
    return Path(env.srcdir).resolve().parent


def _page(path: str) -> str:
    return f"{PAGES}/{path.removesuffix('.py')}"


def _link(env: BuildEnvironment, rawtext: str, name: str, site: NoteSite) -> nodes.reference:
    """A link to the line that opens the note, on the page of its file's source."""
    files: dict[str, set[str]] = env.dynbatch_note_files  # type: ignore[attr-defined]
    files.setdefault(env.docname, set()).add(site.path)
    uri = env.app.builder.get_relative_uri(env.docname, _page(site.path))
    ref = nodes.reference(rawtext, "", refuri=f"{uri}#L-{site.line}", internal=False)
    ref["reftitle"] = f"NOTE [ {name} ] in {site.path}, line {site.line}"
    ref += nodes.Text(name)
    return ref


#: docutils' smart quotes, back to the plain ones a note's name is written with
_PLAIN_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})


def note_links(app: Sphinx, doctree: nodes.document) -> None:
    """Every Markdown link of the page to a source ``.py`` file, as a link to the line that
    opens the note its text names (NOTE [ a note cited by a link to its file ]).

    MyST reads such a link as a download of the file; this runs before Sphinx collects the
    downloads, so the file is not copied.
    """
    env = app.env
    root, page = _root(env), Path(env.doc2path(env.docname))
    for node in list(doctree.findall(addnodes.download_reference)):
        path = source_path(root, page, str(node.get("reftarget", "")))
        if path is None:
            continue
        name = " ".join(node.astext().translate(_PLAIN_QUOTES).split())  # smartquotes undone
        site = find_note(root, name, path)
        if site is None:
            elsewhere = find_note(root, name)
            now = f"; {elsewhere.path} opens it" if elsewhere else "; no source file opens it"
            logger.warning(
                "the link [%s](%s) cites NOTE [ %s ], which %s does not open%s",
                name,
                node["reftarget"],
                name,
                path,
                now,
                location=node,
            )
            node.replace_self(nodes.literal(node.rawsource, name))
            continue
        node.replace_self(_link(env, node.rawsource, name, site))


def note_role(
    name: str,
    rawtext: str,
    text: str,
    lineno: int,
    inliner: Inliner,
    options: dict[str, Any] | None = None,
    content: list[str] | None = None,
) -> tuple[list[nodes.Node], list[nodes.system_message]]:
    """``{note}`name```, the role pages used before: a warning naming the link to write (the
    role reads as raw text where the Markdown is read as it is); the link is still made."""
    env: BuildEnvironment = inliner.document.settings.env
    note = " ".join(text.split())
    site = find_note(_root(env), note)
    page = Path(env.doc2path(env.docname)).parent
    target = "<the file that opens it>"
    if site is not None:
        target = Path(os.path.relpath(_root(env) / site.path, page)).as_posix()
    logger.warning(
        "{note}`%s` reads as raw text on GitHub: write the note [%s](%s)",
        note,
        note,
        target,
        location=(env.docname, lineno),
    )
    if site is None:
        return [nodes.literal(rawtext, f"NOTE [ {note} ]")], []
    return [_link(env, rawtext, note, site)], []


def _init(app: Sphinx, env: BuildEnvironment, docnames: list[str]) -> None:
    if not hasattr(env, "dynbatch_note_files"):
        env.dynbatch_note_files = {}  # type: ignore[attr-defined]
    if not hasattr(env, "dynbatch_api_names"):
        env.dynbatch_api_names = {}  # type: ignore[attr-defined]


def _outdated(
    app: Sphinx, env: BuildEnvironment, added: set[str], changed: set[str], removed: set[str]
) -> list[str]:
    """Pages that cite notes are read again on every build: the notes they link may have
    moved since the last one (a cached link to a moved line, or file, would go unchecked)."""
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
    # before Sphinx's download collector (500): a note's link is no download
    app.connect("doctree-read", note_links, priority=400)
    app.add_directive("public-api", PublicApi)
    app.connect("env-before-read-docs", _init)
    app.connect("env-get-outdated", _outdated)
    app.connect("env-purge-doc", _purge)
    app.connect("env-merge-info", _merge)
    app.connect("env-check-consistency", _check_public_api)
    app.connect("autodoc-process-bases", _public_bases)
    app.connect("html-collect-pages", _source_pages)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
