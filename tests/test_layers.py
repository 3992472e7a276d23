"""The folder tree is the architecture: layers as packages, imports only down, no circle.

NOTE [ the layers ]
    ``src/dynbatch`` is read from the bottom up, each layer a package that imports only
    the layers below it (:data:`LAYERS`):

    - the public face's plumbing: ``errors``, ``_checks``, ``_optional``, ``_files``;
    - ``plan/``: the numpy planner (costs and the step-time model, options, plans, epochs,
      windows, the time split, recipes, statistics); never paddle;
    - ``stream/``: sources, block plans and stream state; numpy, never paddle;
    - ``memory/``: the allocator's counters, probes, fit, calibrate, preflight;
    - ``paddle/``: the adapters (samplers, the accumulator and its update, collators,
      losses, the logging hook, the stream's loader);
    - ``integrations/core/``: the Trainer written once for every framework, which imports none
      of them (NOTE [ one core, one host per adapter ] in ``integrations/core/host.py``); then
      ``integrations/``' adapters, one package per framework, each on the core; then ``cli/``;
    - the package itself (``dynbatch/__init__.py``, ``__main__``) on top: it gathers the
      public names, so nothing inside imports it.

    Every import counts, wherever it is written: at the top, inside a function (a
    "deferred" import still ties the two modules together) or under ``TYPE_CHECKING``.
    A circle, even one broken at run time by an import inside a function, means no module
    can be read or changed alone; an import up a layer is a circle waiting to happen.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import dynbatch

SRC = Path(dynbatch.__file__).parent

#: bottom to top; a module's layer is the longest prefix listed; imports go to lower or equal
LAYERS: list[tuple[str, ...]] = [
    ("dynbatch.errors", "dynbatch._checks", "dynbatch._optional", "dynbatch._files"),
    ("dynbatch.plan",),
    ("dynbatch.stream",),
    ("dynbatch.memory",),
    ("dynbatch.paddle",),
    ("dynbatch.integrations.core",),
    ("dynbatch.integrations",),
    ("dynbatch.cli",),
    ("dynbatch", "dynbatch.__main__"),
]
#: the layers that never import paddle (nor paddlenlp, visualdl), not even lazily
NO_PADDLE = ("dynbatch.plan", "dynbatch.stream")
HEAVY = ("paddle", "paddlenlp", "paddleformers", "visualdl")
#: the Trainer's core, which reaches a framework only through its adapter's host
NO_FRAMEWORK = ("dynbatch.integrations.core",)
FRAMEWORKS = ("paddlenlp", "paddleformers")
MAX_TOP_MODULES = 12
#: the house's bounds: a module past this many lines does several jobs, a class past
#: ``MAX_CLASS_LINES`` (its ``class`` line to its last) is more than a reader can hold
MAX_MODULE_LINES = 700
MAX_CLASS_LINES = 300


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def imported(name: str, path: Path, known: set[str]) -> Iterator[tuple[str, int]]:
    """``(module, line)`` of every import in the file, at any depth, relative ones resolved.

    ``from pkg import x`` names the module ``pkg.x`` where that is a module, else ``pkg``;
    importing ``pkg.sub`` is counted as importing ``pkg.sub`` only (not its parents).
    ``_optional.require("paddle")`` counts as importing paddle.
    """
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in known]
            yield from ((sub, node.lineno) for sub in subs)
            if len(subs) < len(node.names):
                yield target, node.lineno
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, (ast.Name, ast.Attribute))
            and (node.func.id if isinstance(node.func, ast.Name) else node.func.attr)
            in ("require", "import_module")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and node.args[0].value.split(".")[0] in HEAVY
        ):
            yield node.args[0].value, node.lineno


def graph() -> dict[str, dict[str, int]]:
    """Each dynbatch module -> the dynbatch modules it imports (with a line that does)."""
    found = modules()
    known = set(found)
    edges: dict[str, dict[str, int]] = {}
    for name, path in found.items():
        edges[name] = {}
        for target, line in imported(name, path, known):
            if target in known and target != name:
                edges[name].setdefault(target, line)
    return edges


def layer(name: str) -> int:
    best, rank = -1, -1
    for k, members in enumerate(LAYERS):
        for prefix in members:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), k
    assert rank >= 0, f"{name} is in no layer of LAYERS: add it"
    return rank


def cycles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module, and self-loops (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_is_read() -> None:
    """The walk sees imports at the top, inside functions, relative and absolute."""
    edges = graph()
    assert "dynbatch.plan.options" in edges["dynbatch.plan.planning"], "a top-level import"
    assert "dynbatch.paddle.sampler" in edges["dynbatch.integrations.core.arguments"]
    assert "dynbatch.cli" in edges["dynbatch.__main__"], "from .cli import main"
    assert "dynbatch.plan.text" in edges["dynbatch.cli.corpora"], "an import inside a function"
    assert len(edges) > 50, len(edges)


def test_a_circle_is_found() -> None:
    """The check itself: a made-up circle, through a function-level edge, is reported."""
    edges = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}
    assert cycles(edges) == [["a", "b", "c"]]
    assert cycles({"a": {"b": 1}, "b": {}}) == []


def test_no_import_circle_among_dynbatch_modules() -> None:
    edges = graph()
    found = cycles(edges)
    detail = [
        " -> ".join(c) + ": " + ", ".join(f"{a} imports {b}" for a in c for b in edges[a] if b in c)
        for c in found
    ]
    assert not found, "import circles (NOTE [ the layers ]):\n" + "\n".join(detail)


def test_imports_only_go_down_the_layers() -> None:
    up = [
        f"{name}:{line} imports {target} (layer {layer(target)} above {layer(name)})"
        for name, targets in graph().items()
        for target, line in targets.items()
        if layer(target) > layer(name)
    ]
    assert not up, "imports up a layer (NOTE [ the layers ]):\n" + "\n".join(up)


@pytest.mark.parametrize(
    "name", [n for n in modules() if any(n == p or n.startswith(p + ".") for p in NO_PADDLE)]
)
def test_the_planner_and_streams_never_import_paddle(name: str) -> None:
    found = modules()
    heavy = [
        f"{name}:{line} imports {target}"
        for target, line in imported(name, found[name], set(found))
        if target.split(".")[0] in HEAVY
    ]
    assert not heavy, "\n".join(heavy)


@pytest.mark.parametrize(
    "name", [n for n in modules() if any(n == p or n.startswith(p + ".") for p in NO_FRAMEWORK)]
)
def test_the_trainers_core_never_imports_a_framework(name: str) -> None:
    found = modules()
    frameworks = [
        f"{name}:{line} imports {target}"
        for target, line in imported(name, found[name], set(found))
        if target.split(".")[0] in FRAMEWORKS
    ]
    assert not frameworks, "\n".join(frameworks)


def test_a_lazy_paddle_import_is_seen() -> None:
    """``require("paddle")`` inside a function counts: the check would see it in the planner."""
    found = modules()
    name = "dynbatch.paddle.sampler"
    assert any(t == "paddle" for t, _ in imported(name, found[name], set(found)))


def test_few_modules_directly_in_the_package() -> None:
    top = sorted(p.name for p in SRC.glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, f"{len(top)} modules in src/dynbatch: {top}"
    every = modules()
    assert all(layer(name) >= 0 for name in every), "every module is in a layer"


def oversized(paths: dict[str, Path]) -> list[str]:
    """Every module over :data:`MAX_MODULE_LINES` and class over :data:`MAX_CLASS_LINES`."""
    found = []
    for name, path in sorted(paths.items()):
        text = path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            found.append(f"module {name}: {lines} lines (at most {MAX_MODULE_LINES})")
        for node in ast.walk(ast.parse(text, filename=str(path))):
            if isinstance(node, ast.ClassDef):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > MAX_CLASS_LINES:
                    found.append(
                        f"class {name}.{node.name}: {size} lines (at most {MAX_CLASS_LINES})"
                    )
    return found


def test_every_module_and_class_within_the_house_bounds() -> None:
    found = oversized(modules())
    assert not found, "split along its jobs:\n" + "\n".join(found)


def test_an_oversized_module_and_class_are_named_with_their_lines(tmp_path: Path) -> None:
    """The check itself: a long module, and a long class nested in a short one, each named."""

    def members(count: int, indent: str) -> str:
        return "".join(f"{indent}x{i} = {i}\n" for i in range(count))

    big = "class Outer:\n    class Inner:\n" + members(MAX_CLASS_LINES, " " * 8)
    (tmp_path / "big.py").write_text(big + "\n" * MAX_MODULE_LINES)
    (tmp_path / "fits.py").write_text("class Small:\n" + members(MAX_CLASS_LINES - 1, " " * 4))
    found = oversized({"big": tmp_path / "big.py", "fits": tmp_path / "fits.py"})
    assert found == [
        f"module big: {MAX_MODULE_LINES + MAX_CLASS_LINES + 2} lines (at most {MAX_MODULE_LINES})",
        f"class big.Outer: {MAX_CLASS_LINES + 2} lines (at most {MAX_CLASS_LINES})",
        f"class big.Inner: {MAX_CLASS_LINES + 1} lines (at most {MAX_CLASS_LINES})",
    ], found
