"""Every cross-reference in the docstrings, the README and the docs names something that exists.

A Sphinx role in a docstring of ``src/dynbatch`` (``:func:``, ``:class:``, ``:meth:``,
``:data:``, ``:mod:``, ``:attr:``, ``:exc:``, ``:obj:``) is resolved as Sphinx would look it
up: a dotted ``dynbatch.x.y`` by import and getattr; a relative ``.x`` from the module's
package; a bare name in the class the docstring belongs to, then its module, then the
``dynbatch`` package. A backticked ``dynbatch.X`` in README.md or a page of ``docs/`` is
resolved the same way. A NOTE the docs cite is a Markdown link from its name to the source
file that opens it, ``[name](../src/dynbatch/x.py)``, and that file opens it
(NOTE [ a note cited by a link to its file ] in ``docs/_ext/notes.py``).

NOTE [ a reference on one line ]
    A role's target and a note's name are each written on one line, in the code, the tests,
    the examples, the benchmarks and the docs. Split, ``:func:`~dynbatch.x.`` then
    ``y``` on the next line is no role this check's pattern reads (nor one a reader can
    search for), and ``NOTE [ the`` then ``why ]`` matches no note's opening line and no grep
    for its name: each resolves to nothing, silently.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import dynbatch

SRC = Path(dynbatch.__file__).parent
ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
#: a Markdown link to a source file: the docs' citation of the note it names
NOTE_LINK = re.compile(r"\[(?P<name>[^\[\]\n]+)\]\((?P<target>[^)\s]+\.py)\)")
ROLE = re.compile(r":(func|class|meth|data|mod|attr|exc|obj):`~?(?P<target>[\w.]+)(?:\(\))?`")
README_NAME = re.compile(r"`(?P<target>dynbatch(?:\.\w+)+)")
ROLES = "func|class|meth|data|mod|attr|exc|obj"
#: a role (``:func:`` or MyST's ``{func}``, ``{note}``) whose target runs past its line, or a
#: ``NOTE [`` whose name does (NOTE [ a reference on one line ])
SPLIT = re.compile(
    rf"(?::(?:py:)?(?:{ROLES}):|\{{(?:py:)?(?:{ROLES}|note)\}})(?:`[^`\n]*|[ \t]*)\n"
    r"|\bNOTE(?:[ \t]*\[[^\]\n]*\n|[ \t]*\n[\s#\"']*\[)"
    r"|\[[^\]\n]*\n[^\]\n]*\]\([^)\s]*\.py\)"
)
MISSING = object()


def module_names() -> list[str]:
    names = []
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        if parts[-1] != "__main__":  # importing it runs the CLI
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def lookup(target: str) -> Any:
    """``dynbatch.a.b.c``: the longest importable module prefix, then attributes."""
    parts = target.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr, MISSING)
            if obj is MISSING:
                return MISSING
        return obj
    return MISSING


def attribute_path(scope: Any, dotted: str) -> Any:
    obj = scope
    for attr in dotted.split("."):
        if inspect.ismodule(obj) and not hasattr(obj, attr):
            try:  # a submodule not imported by its package
                obj = importlib.import_module(f"{obj.__name__}.{attr}")
                continue
            except ImportError:
                return MISSING
        obj = getattr(obj, attr, MISSING)
        if obj is MISSING:
            return MISSING
    return obj


def resolve(target: str, module: types.ModuleType, owner: type | None, role: str = "obj") -> Any:
    package = module.__name__ if hasattr(module, "__path__") else module.__package__
    if role == "mod":  # a module by its name, even where a function shadows it as an attribute
        name = f"{package}{target}" if target.startswith(".") else target
        for candidate in (name, f"dynbatch.{name}"):
            try:
                return importlib.import_module(candidate)
            except ImportError:
                continue
        return MISSING
    if target.startswith("dynbatch."):
        return lookup(target)
    if target.startswith("."):
        scopes: list[Any] = [owner, module, importlib.import_module(package or "dynbatch")]
        target = target.lstrip(".")
    else:
        scopes = [owner, module, dynbatch]
    for scope in scopes:
        if scope is not None:
            found = attribute_path(scope, target)
            if found is not MISSING:
                return found
    return MISSING


def docstrings(module: types.ModuleType) -> Iterator[tuple[str, type | None, str]]:
    """``(where, owning class, docstring)`` of the module, its classes and their members."""
    yield module.__name__, None, module.__doc__ or ""
    for name, obj in vars(module).items():
        if getattr(obj, "__module__", None) != module.__name__:
            continue  # imported from elsewhere: checked in its own module
        if inspect.isclass(obj):
            yield f"{module.__name__}.{name}", obj, obj.__doc__ or ""
            for attr, member in vars(obj).items():
                func = member.fget if isinstance(member, property) else member
                func = getattr(func, "__func__", func)  # classmethod, staticmethod
                if callable(func) and getattr(func, "__doc__", None):
                    yield f"{module.__name__}.{name}.{attr}", obj, func.__doc__
        elif inspect.isfunction(obj):
            yield f"{module.__name__}.{name}", None, obj.__doc__ or ""


def kind_fits(role: str, obj: Any) -> bool:
    if role == "mod":
        return inspect.ismodule(obj)
    if role in ("class", "exc"):
        return inspect.isclass(obj)
    if role in ("func", "meth"):
        return callable(obj)
    return True


def references() -> list[tuple[str, str, str]]:
    """``(where, role, target)`` of every role in every importable module's docstrings."""
    found = []
    for name in module_names():
        try:
            module = importlib.import_module(name)
        except ImportError:  # an optional dependency (paddlenlp) is not installed
            continue
        for where, _, doc in docstrings(module):
            found.extend((where, m.group(1), m.group("target")) for m in ROLE.finditer(doc))
    return found


def broken(name: str) -> list[str]:
    module = importlib.import_module(name)
    bad = []
    for where, owner, doc in docstrings(module):
        for match in ROLE.finditer(doc):
            role, target = match.group(1), match.group("target")
            obj = resolve(target, module, owner, role)
            if obj is MISSING:
                bad.append(f"{where}: :{role}:`{target}` names nothing")
            elif not kind_fits(role, obj):
                bad.append(f"{where}: :{role}:`{target}` is a {type(obj).__name__}")
    return bad


@pytest.mark.parametrize("name", module_names())
def test_every_role_in_the_docstrings_resolves(name: str) -> None:
    try:
        importlib.import_module(name)
    except ImportError as exc:
        pytest.skip(f"{name}: {exc}")
    bad = broken(name)
    assert not bad, "\n".join(bad)


def test_the_docstrings_are_read() -> None:
    """The walk sees the roles, including those of methods and of a class's own names."""
    found = references()
    assert len(found) > 100, len(found)
    assert ("dynbatch.plan.recipes", "func", "like_fixed") in found


def test_a_role_that_names_nothing_is_reported() -> None:
    from dynbatch.paddle import sampler

    assert resolve("PlanOptions.like_fixed", sampler, None) is MISSING
    assert resolve("~dynbatch.like_fixed".lstrip("~"), sampler, None) is dynbatch.like_fixed
    assert resolve("dynbatch.PlanOptions.from_args", sampler, None) is not MISSING
    assert resolve("dynbatch.no_such_name", sampler, None) is MISSING
    assert resolve("state_dict", sampler, sampler.DynamicBatchSampler) is not MISSING
    assert not kind_fits("mod", dynbatch.like_fixed) and kind_fits("mod", sampler)
    from dynbatch import memory

    assert inspect.isfunction(memory.calibrate), "the package's name for the function"
    assert resolve(".calibrate", memory, None, "mod").__name__ == "dynbatch.memory.calibrate"
    assert resolve(".no_such_module", memory, None, "mod") is MISSING


def prose() -> dict[str, str]:
    """The README and every page of the docs, by path from the repository root."""
    files = [README, *sorted(DOCS.glob("*.md"))]
    return {path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8") for path in files}


def written_files() -> list[Path]:
    """Every file a reference is written in: code, tests, examples, benchmarks and docs."""
    trees = [
        (ROOT / "src", "*.py"),
        *((ROOT / name, "*.py") for name in ("tests", "examples", "benchmarks", "docs")),
        (DOCS, "*.md"),
    ]
    found = {path for tree, glob in trees for path in tree.rglob(glob)}
    found |= {README, ROOT / "CHANGELOG.md", ROOT / "conftest.py"}
    return sorted(p for p in found if p.is_file() and not {"_build", "__pycache__"} & set(p.parts))


def splits(text: str) -> list[str]:
    """``line: text`` of each reference in ``text`` split across two lines."""
    found = []
    for match in SPLIT.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        shown = " ".join(text[match.start() : match.end() + 40].split())
        found.append(f"{line}: {shown}")
    return found


def test_no_reference_is_split_across_two_lines() -> None:
    """NOTE [ a reference on one line ]."""
    found = [
        f"{path.relative_to(ROOT).as_posix()}:{where}"
        for path in written_files()
        for where in splits(path.read_text(encoding="utf-8"))
    ]
    assert not found, f"{len(found)} references split across two lines:\n" + "\n".join(found)


def test_the_split_check_reads_every_place_references_are_written() -> None:
    read = {path.relative_to(ROOT).as_posix() for path in written_files()}
    assert {
        "README.md",
        "docs/packing.md",
        "docs/_ext/notes.py",
        "src/dynbatch/integrations/core/packing.py",
        "tests/test_cross_references.py",
        "examples/sft_causal_lm.py",
        "benchmarks/device_time.py",
    } <= read


@pytest.mark.parametrize(
    "text",
    [
        ":func:`~dynbatch.paddle.pack_collate.\n    additive_mask`",
        ":meth:`GradientAccumulator.backward(loss_sum)\n<dynbatch.GradientAccumulator.backward>`",
        ":class:\n`PackCollator`",
        "{note}`a step is\npriced at its quickest padding`",
        "(NOTE [ the\n    faster plan of each epoch ])",
        "#: packed (NOTE [ the\n#: Trainer packs ])",
        '"a stream (NOTE [ updates of a "\n "stream ])"',
        "x = a[b]  # NOTE [ a step is priced at its ...\nassert x == a[b]",
        "(NOTE\n    [ resuming a stream ])",
        "# (NOTE\n# [ resuming a stream ])",
        "the note [resuming a\nstream](../src/dynbatch/stream/planner.py)",
    ],
)
def test_a_split_reference_is_found(text: str) -> None:
    assert splits(f"Text before.\n{text} and after.\n") != [], text


@pytest.mark.parametrize(
    "text",
    [
        ":func:`~dynbatch.paddle.pack_collate.additive_mask`\nand :class:`PackCollator`",
        "NOTE [ one update, one mean ]\n    Opens the note.",
        "{note}`a step is priced at its quickest padding`",
        "``:func:``, ``:class:``,\n``:meth:``",
        "see the NOTE\nbelow",
        "the note\n[resuming a stream](../src/dynbatch/stream/planner.py)",
        "[the plain\nloop](loop.md)",
    ],
)
def test_a_reference_on_one_line_is_not_a_split(text: str) -> None:
    assert splits(f"Text before.\n{text} and after.\n") == [], text


def notes_extension() -> types.ModuleType:
    """``docs/_ext/notes.py``, the Sphinx extension that links a cited NOTE to its file."""
    pytest.importorskip("sphinx")
    spec = importlib.util.spec_from_file_location("dynbatch_docs_notes", DOCS / "_ext/notes.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", sorted(prose()))
def test_every_dynbatch_name_in_the_readme_and_the_docs_resolves(path: str) -> None:
    names = sorted(set(README_NAME.findall(prose()[path])))
    missing = [name for name in names if lookup(name) is MISSING]
    assert not missing, f"{path} names {missing}, which do not exist"


def test_the_dynbatch_names_of_the_readme_and_the_docs_are_found() -> None:
    names = {name for text in prose().values() for name in README_NAME.findall(text)}
    assert {"dynbatch.like_fixed", "dynbatch.calibrate", "dynbatch.PlanOptions"} <= names


def test_the_docs_cite_notes_only_by_links_to_their_files() -> None:
    """A bare ``NOTE [ ... ]`` would be text with no file to find it in, and the MyST role
    ``{note}`name``` reads as raw text on GitHub: a Markdown link to the file reads on both."""
    bare = [
        f"{path}:{text.count(chr(10), 0, match.start()) + 1}"
        for path, text in prose().items()
        for match in re.finditer(r"NOTE\s*\[|\{note\}`", text)
    ]
    assert not bare, f"write the note [name](../src/dynbatch/file.py) instead, at {bare}"


def note_links() -> list[tuple[str, str, str]]:
    """``(page, note name, source file relative to the root)`` of every note the docs cite."""
    source_path = notes_extension().source_path
    found = []
    for path, text in prose().items():
        for match in NOTE_LINK.finditer(text):
            source = source_path(ROOT, ROOT / path, match["target"])
            if source is not None:
                found.append((path, " ".join(match["name"].split()), source))
    return found


def test_every_note_the_docs_cite_is_opened_by_the_file_they_link() -> None:
    find_note = notes_extension().find_note
    cited = note_links()
    assert len({name for _, name, _ in cited}) >= 10, cited
    assert ("docs/loop.md", "mixed updates", "src/dynbatch/plan/windows.py") in cited
    wrong = [
        f"{page}: [{name}]({source}), which opens no NOTE [ {name} ]"
        + (f" ({site.path} does)" if (site := find_note(ROOT, name)) else "")
        for page, name, source in cited
        if find_note(ROOT, name, source) is None
    ]
    assert not wrong, "\n".join(wrong)


def test_a_link_to_a_source_file_is_a_note_and_other_links_are_not() -> None:
    source_path = notes_extension().source_path
    page = DOCS / "loop.md"
    assert source_path(ROOT, page, "../src/dynbatch/plan/windows.py") == (
        "src/dynbatch/plan/windows.py"
    )
    assert source_path(ROOT, page, "../examples/sft_mode.py#L3") == "examples/sft_mode.py"
    assert source_path(ROOT, page, "loop.md") is None
    assert source_path(ROOT, page, "https://github.com/x/y/blob/main/a.py") is None
    assert source_path(ROOT, page, "../tests/test_layers.py") is None, "tests hold no cited note"


def test_a_note_is_found_where_it_opens_not_where_it_is_cited(tmp_path: Path) -> None:
    find_note = notes_extension().find_note
    package = tmp_path / "src" / "dynbatch"
    package.mkdir(parents=True)
    (package / "a.py").write_text('"""Cites it (NOTE [ the why ]).\n\nNOTE [ the why ]: aside"""\n')
    (package / "b.py").write_text('"""Module.\n\nNOTE [ the why ]\n    Opens it.\n"""\n')
    site = find_note(tmp_path, "the  why")
    assert site is not None and (site.path, site.line) == ("src/dynbatch/b.py", 3), site
    assert find_note(tmp_path, "the how") is None, "a note no file opens is not found"
    site = find_note(tmp_path, "the why", "src/dynbatch/a.py")
    assert site is not None and (site.path, site.line) == ("src/dynbatch/a.py", 3), "in one file"
    assert find_note(tmp_path, "the why", "src/dynbatch/c.py") is None, "a file that is not there"
    (package / "b.py").unlink()
    site = find_note(tmp_path, "the why")
    assert site is not None and (site.path, site.line) == ("src/dynbatch/a.py", 3), "a comment's"


def public_docstrings() -> Iterator[tuple[str, str]]:
    """``(name, docstring)`` of every object the API reference renders: the names of
    ``dynbatch.__all__``, their public methods and properties (their dynbatch bases' too) and a
    class's ``__init__``, and the Trainer's documented names."""
    objects: list[tuple[str, Any]] = [
        (f"dynbatch.{name}", getattr(dynbatch, name))
        for name in dynbatch.__all__
        if name != "__version__"
    ]
    try:
        from dynbatch.integrations import paddlenlp
    except ImportError:  # paddlenlp is not installed
        paddlenlp = None
    if paddlenlp is not None:
        trainer = paddlenlp.DynamicBatchTrainer
        objects.append(("DynamicBatchTrainer", trainer))
        objects += [(f"DynamicBatchTrainer.{m}", getattr(trainer, m)) for m in RENDERED_TRAINER]
        objects.append(("token_cross_entropy", paddlenlp.token_cross_entropy))
    for name, obj in objects:
        yield name, inspect.getdoc(obj) or ""
        if not inspect.isclass(obj) or name.startswith("DynamicBatchTrainer"):
            continue
        for cls in obj.__mro__:
            if not cls.__module__.startswith("dynbatch"):
                continue
            for attr, member in vars(cls).items():
                if attr.startswith("_") and attr != "__init__":
                    continue
                func = member.fget if isinstance(member, property) else member
                func = getattr(func, "__func__", func)
                if callable(func) or isinstance(member, property):
                    yield f"{name}.{attr}", getattr(func, "__doc__", None) or ""


#: the Trainer's members that docs/api.md renders (``:members:``)
RENDERED_TRAINER = ("steps_per_epoch", "total_steps")


def message_strings() -> Iterator[tuple[str, str]]:
    """``(where, text)`` of every string literal in ``src/dynbatch`` that is not a docstring:
    error and warning messages, log lines, help text (an f-string's literal parts)."""
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docs
            ):
                yield f"src/{path.relative_to(SRC.parent).as_posix()}:{node.lineno}", node.value


def test_no_message_or_public_docstring_cites_a_note() -> None:
    """A user reads the reason, not a maintainer's ``NOTE [ ... ]`` name: the API reference's
    docstrings and every message string say why in words (the note's name may follow in a
    code comment)."""
    cited = [name for name, doc in public_docstrings() if "NOTE [" in doc]
    cited += [where for where, text in message_strings() if "NOTE [" in text]
    assert not cited, f"{len(cited)} user-facing texts cite a NOTE:\n" + "\n".join(cited)


def test_the_user_facing_texts_are_read() -> None:
    names = dict(public_docstrings())
    assert "Args:" in names["dynbatch.DynamicBatchSampler.__init__"], "a class's __init__"
    assert "dynbatch.DynamicBatchSampler.set_epoch" in names, "a base's public method"
    assert "dynbatch.PlanOptions.max_rows" in names, "a property"
    assert "Plan this epoch next" in names["dynbatch.DistributedDynamicBatchSampler.set_epoch"]
    messages = [text for _, text in message_strings()]
    assert any("give lengths or a way to measure them" in text for text in messages)
    assert not any(text.startswith("Paddle batch samplers over") for text in messages), "docs"
