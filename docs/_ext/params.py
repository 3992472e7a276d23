"""A check of the API reference: every public parameter of a documented callable is described.

NOTE [ every public parameter described ]
    autodoc renders a signature whether or not the docstring below it says what each parameter
    means, so a parameter added without a word reads as documented. For every function, method
    and class that autodoc documents, ``autodoc-process-docstring`` (after napoleon has turned
    the Google sections into fields) compares the signature's parameters with those the
    docstring describes: an ``Args:`` or ``Keyword Args:`` entry, or for a class also an
    ``Attributes:`` entry (a dataclass's fields are its parameters). One entry may name several
    (``num_replicas, rank: ...``); ``*args`` and ``**kwargs`` are parameters too. A parameter
    whose name starts with ``_`` is private and ``self`` / ``cls`` are not the caller's. Each one
    missing is a warning at the line that defines the callable, which ``make docs`` (``-W``)
    turns into a failed build. A class is read with its ``__init__``'s docstring
    (``autoclass_content = "both"`` in ``conf.py``): that is where its arguments are written.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

from sphinx.application import Sphinx
from sphinx.util import logging

__all__ = ["described", "setup", "undescribed"]

logger = logging.getLogger(__name__)

#: napoleon's fields: ``:param x:``, ``:keyword x:``, and a class's ``.. attribute:: x``
FIELD = re.compile(
    r"^\s*:(?:param|parameter|arg|argument|keyword|kwarg|kwparam)\s+(?P<names>[^:]+):"
)
ATTRIBUTE = re.compile(r"^\s*\.\. attribute:: (?P<names>\S+)")
CHECKED = ("function", "method", "class", "exception")


def _plain(name: str) -> str:
    return name.replace("\\", "").lstrip("*").strip()


def described(lines: list[str], what: str) -> set[str]:
    """The parameter names the docstring's fields describe (napoleon's output, ``lines``)."""
    found: set[str] = set()
    for line in lines:
        match = FIELD.match(line)
        if match is None and what in ("class", "exception"):
            match = ATTRIBUTE.match(line)
        if match is not None:
            # ``:param int x:`` keeps the name last; ``:param a, b:`` names two
            found.update(_plain(part.split()[-1]) for part in match["names"].split(","))
    return found


def undescribed(obj: Any, what: str, known: set[str]) -> list[str]:
    """The public parameters of ``obj``'s signature not in ``known``, in order."""
    if what not in CHECKED:
        return []
    if inspect.isclass(obj) and getattr(obj, "_is_protocol", False):
        return []  # a Protocol is never called: its methods are what it says
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):  # a builtin's, or a class with no signature of its own
        return []
    params = list(signature.parameters.values())
    if params and params[0].name in ("self", "cls"):
        params = params[1:]
    missing = []
    for param in params:
        if param.name.startswith("_") or param.name in known:
            continue
        star = {param.VAR_POSITIONAL: "*", param.VAR_KEYWORD: "**"}.get(param.kind, "")
        missing.append(star + param.name)
    return missing


def _where(obj: Any) -> str | None:
    target = inspect.unwrap(obj)
    try:
        return f"{inspect.getsourcefile(target)}:{inspect.getsourcelines(target)[1]}"
    except (TypeError, OSError):
        return None


#: docname -> documented name -> (object, what, parameters described so far)
_PENDING: dict[str, dict[str, tuple[Any, str, set[str]]]] = {}


def _record(app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    """autodoc hands a class's docstring and its ``__init__``'s over one at a time: collect."""
    if what in CHECKED:
        page = _PENDING.setdefault(app.env.docname, {})
        page.setdefault(name, (obj, what, set()))[2].update(described(lines, what))


def _check(app: Sphinx, doctree: Any) -> None:
    """When a page has been read, every callable it documents, against its signature."""
    for name, (obj, what, known) in _PENDING.pop(app.env.docname, {}).items():
        for param in undescribed(obj, what, known):
            logger.warning(
                "%s: parameter %s is not described in its docstring (an Args: entry); "
                "NOTE [ every public parameter described ] in docs/_ext/params.py",
                name,
                param,
                location=_where(obj),
                type="dynbatch",
                subtype="undescribed-parameter",
            )


def setup(app: Sphinx) -> dict[str, Any]:
    app.setup_extension("sphinx.ext.napoleon")
    # napoleon turns the Google sections into fields at the default priority (500): read after it
    app.connect("autodoc-process-docstring", _record, priority=900)
    app.connect("doctree-read", _check)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
