"""The repository holds the library and its own material: no stray files, no machine's paths.

NOTE [ what a clean repository is ]
    Every tracked file lives in a place of its own (``src/``, ``tests/``, ``examples/``,
    ``benchmarks/``, ``docs/``, ``.ci/``, ``.github/``) or is one of the known root files, so
    scratch scripts, probes and their data cannot ride along unnoticed: they belong in a
    temporary directory. No tracked text file names a path that exists on one machine only:
    an absolute path into a home directory (under home, Users or root; a Windows user's), a
    work directory (under work), a git worktree (its entry under the ``.git`` directory's
    worktrees, or a ``wt-NAME`` directory), a virtual or conda environment's ``bin`` or ``lib``,
    or an installed package's ``site-packages``. Allowed: ``/tmp`` (every POSIX machine has
    it: a docstring may write there), ``/dev/null``, ``/usr/bin/env``, paths relative to the
    clone (``../shared/data``, ``$(VENV)/bin/python``) or to a home (``~/...``), and URLs (a
    path after a host name is the host's, not this machine's). The patterns put a group right
    after each slash, so this file's own source does not match them, and the tests build the
    paths they plant at run time.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLACES = ("src", "tests", "examples", "benchmarks", "docs", ".ci", ".github")
ROOT_FILES = frozenset(
    {
        "README.md",
        "LICENSE",
        "CHANGELOG.md",
        "Makefile",
        "pyproject.toml",
        "conftest.py",
        ".gitignore",
    }
)
#: not after a word character, a dot, a tilde or a dash: "../work/", "host.com/home/" are fine
START = r"(?<![\w.~-])"
MACHINE_PATHS: list[tuple[str, re.Pattern[str]]] = [
    ("a home directory", re.compile(START + r"/(?:home|Users)/[\w.-]+")),
    ("root's home directory", re.compile(START + r"/(?:root)/")),
    ("a work directory", re.compile(START + r"/(?:work)/")),
    ("a Windows home directory", re.compile(r"\b[A-Za-z]:\\(?:Users|home)\\", re.IGNORECASE)),
    ("a git worktree", re.compile(r"(?:\.git/worktrees|/(?:wt)-[\w.-]+)/")),
    (
        "an environment's files",
        re.compile(START + r"/(?:[\w.+-]+/)*(?:\.?venv[\w.-]*|envs/[\w.+-]+)/(?:bin|lib|Scripts)/"),
    ),
    ("an installed package's files", re.compile(START + r"/(?:[\w.+-]+/)+(?:site|dist)-packages/")),
]


def misplaced(paths: Iterable[str]) -> list[str]:
    """The tracked paths (``/``-separated, as git lists them) outside the known places."""
    return [
        f"{path}: not in {', '.join(f'{p}/' for p in PLACES)} nor a known root file "
        f"({', '.join(sorted(ROOT_FILES))}); scratch files belong in a temporary directory"
        for path in paths
        if path.split("/", 1)[0] not in PLACES and path not in ROOT_FILES
    ]


def machine_paths(path: str, text: str) -> list[str]:
    """``path:line: what: the match`` for each path of one machine that ``text`` names."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for what, pattern in MACHINE_PATHS:
            found.extend(f"{path}:{number}: {what}: {m.group()}" for m in pattern.finditer(line))
    return found


def tracked(root: Path) -> list[str] | None:
    """The files git tracks under ``root``; None if ``root`` is not a git checkout's top."""
    if shutil.which("git") is None:
        return None
    top = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--show-toplevel"], capture_output=True, text=True
    )
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != root.resolve():
        return None
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z"], capture_output=True, text=True, check=True
    )
    return [p for p in listed.stdout.split("\0") if p]


def problems(root: Path, paths: list[str]) -> list[str]:
    """Every stray file and every machine's path in the text files among ``paths``."""
    found = misplaced(paths)
    for path in paths:
        file = root / path
        if not file.is_file():  # deleted in the work tree, not yet in the index
            continue
        data = file.read_bytes()
        if b"\0" in data:
            continue  # binary (an image)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        found.extend(machine_paths(path, text))
    return found


def test_the_repository_is_clean() -> None:
    paths = tracked(ROOT)
    if paths is None:
        pytest.skip(f"{ROOT} is not the top of a git checkout (an sdist?): nothing to check")
    assert paths, "git lists the tracked files"
    found = problems(ROOT, paths)
    assert not found, "\n".join(found)


def test_this_check_does_not_flag_itself() -> None:
    assert machine_paths("tests/test_repository.py", Path(__file__).read_text("utf-8")) == []


def test_a_stray_file_is_named() -> None:
    paths = [
        "src/dynbatch/__init__.py",
        "README.md",
        ".github/workflows/ci.yml",
        ".ci/run",
        "attack/run1.sh",
        "notes.txt",
        "srcs/x.py",
    ]
    found = misplaced(paths)
    assert [line.split(":")[0] for line in found] == ["attack/run1.sh", "notes.txt", "srcs/x.py"]
    assert "not in src/, tests/, examples/, benchmarks/, docs/, .ci/, .github/" in found[0]


def planted(*parts: str) -> str:
    """An absolute POSIX path, put together here so this file never holds it whole."""
    return "/" + "/".join(parts)


@pytest.mark.parametrize(
    ("line", "what", "shown"),
    [
        (
            f"cd {planted('home', 'alice', 'dynbatch')}",
            "a home directory",
            planted("home", "alice"),
        ),
        (f"'{planted('Users', 'bob', 'x.csv')}'", "a home directory", planted("Users", "bob")),
        (
            f"PY={planted('root', 'venv', 'bin', 'python')}",
            "root's home directory",
            planted("root", ""),
        ),
        (
            f"sys.path.insert(0, '{planted('work', 'main', 'src')}')",
            "a work directory",
            planted("work", ""),
        ),
        ("data = r'C:\\Users\\carol\\data.csv'", "a Windows home directory", "C:\\Users\\"),
        (f"see {planted('srv', 'repo', '.git', 'worktrees', 'x')}", "a git worktree", ".git/wor"),
        (f"export PYTHONPATH={planted('scratch', 'wt-attack2', 'src')}", "a git worktree", "/wt-"),
        (
            f"{planted('opt', 'proj', '.venv', 'bin', 'python')} -m pytest",
            "an environment's files",
            planted("opt", "proj", ".venv", "bin") + "/",
        ),
        (
            f"{planted('opt', 'conda', 'envs', 'dl', 'bin', 'python')}",
            "an environment's files",
            "envs/dl/bin/",
        ),
        (
            f"# {planted('usr', 'lib', 'python3.11', 'site-packages', 'paddle', 'io')}",
            "an installed package's files",
            "site-packages/",
        ),
    ],
)
def test_a_machines_path_is_named_with_its_line(line: str, what: str, shown: str) -> None:
    found = machine_paths("examples/x.py", f"first line\n{line}\n")
    assert found, line
    assert found[0].startswith(f"examples/x.py:2: {what}: "), found
    assert shown in found[0], found


@pytest.mark.parametrize(
    "line",
    [
        "python examples/x.py --data-file ../shared/data/chnsenticorp_htl_all.csv",
        "$(VENV)/bin/python -m pytest",
        "python -m venv .venv && .venv/bin/python -m pip install -e .",
        "dynbatch.VisualDLHook('/tmp/x')",
        "2>/dev/null",
        "#!/usr/bin/env bash",
        "https://github.com/home/work/blob/main/README.md",
        "https://example.com/Users/alice/root/",
        "~/projects/dynbatch and ~/.venv/bin/python: relative to a home, whoever's",
        "a framework's/work/ of its own",
    ],
)
def test_what_is_not_a_machines_path(line: str) -> None:
    assert machine_paths("README.md", line) == []


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_the_check_fails_on_files_planted_in_a_checkout(tmp_path: Path) -> None:
    """The whole check, as on this repository, on a fresh one with two planted files."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "ok.py").write_text("x = '/tmp/ok'\n")
    (tmp_path / "src" / "leak.py").write_text(f"DATA = '{planted('home', 'alice', 'd.csv')}'\n")
    (tmp_path / "probe.sh").write_text("echo probe\n")
    (tmp_path / "README.md").write_text("# readme\n")
    (tmp_path / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\0" + planted("home", "x").encode())
    (tmp_path / "untracked.txt").write_text(planted("work", "x"))
    names = ["src/ok.py", "src/leak.py", "probe.sh", "README.md", "logo.png"]
    subprocess.run(["git", "-C", str(tmp_path), "add", *names], check=True)
    paths = tracked(tmp_path)
    assert paths is not None and sorted(paths) == sorted(names)
    found = problems(tmp_path, paths)
    assert [line.split(":")[0] for line in found] == ["logo.png", "probe.sh", "src/leak.py"]
    assert found[-1] == f"src/leak.py:1: a home directory: {planted('home', 'alice')}"


def test_a_directory_that_is_not_a_checkout_is_not_checked(tmp_path: Path) -> None:
    assert tracked(tmp_path) is None


def test_the_readme_install_works_today_and_ci_runs_it() -> None:
    """dynbatch is not on PyPI yet: the README installs from the source tree or from the wheel
    ``make dist`` builds, twine-checks and installs in a fresh venv, which CI runs."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    install = readme[readme.index("## Install") :]
    install = install[: install.index("\n## ", 3)]
    lines = [x for x in install.splitlines() if "pip install" in x]
    assert any('pip install ".[cpu]"' in x for x in lines), "from the source tree"
    assert any("dist/dynbatch-" in x and ".whl" in x for x in lines), "from the wheel"
    for line in lines:
        if re.search(r'pip install "dynbatch\[', line):
            assert "once published" in line, f"PyPI has no dynbatch yet: {line}"
    assert "make dist" in install
    assert re.search(r"^make .*\bdist\b", (ROOT / ".ci/run").read_text(), re.M), "CI runs it"
    assert re.search(r"^dist:.*\n\tbash \.ci/dist", (ROOT / "Makefile").read_text(), re.M)
    extra = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    extra = extra[extra.index("\ndev = [") : extra.index("\n]", extra.index("\ndev = ["))]
    assert '"build' in extra and '"twine' in extra, "make dist's tools are in the dev extra"
    assert re.search(r"^TEST_EXTRAS \?= .*\bdev\b", (ROOT / "Makefile").read_text(), re.M)


#: A citation of a style guide the repository does not hold: its numbered rules or its file.
OUTSIDE_CITATION = re.compile(r"\bSTYLE(?:\.md\b| \d+)")


def outside_citations(path: str, text: str) -> list[str]:
    """``path:line: the match`` for each citation in ``text`` of a file outside the repository."""
    return [
        f"{path}:{number}: {m.group()}"
        for number, line in enumerate(text.splitlines(), 1)
        for m in OUTSIDE_CITATION.finditer(line)
    ]


def test_no_text_cites_a_file_outside_the_repository() -> None:
    paths = tracked(ROOT)
    if paths is None:
        pytest.skip(f"{ROOT} is not the top of a git checkout (an sdist?): nothing to check")
    found = [
        hit
        for path in paths
        if (ROOT / path).is_file() and (ROOT / path).suffix in (".py", ".md", ".txt", ".toml", "")
        for hit in outside_citations(path, (ROOT / path).read_text("utf-8", errors="replace"))
    ]
    assert not found, "a reader of the repository cannot open these:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("line", "shown"),
    # spelt in two parts, so that this file does not cite it
    [("a speed option (STYLE" + " 28)", "STYLE" + " 28"), ("see STYLE" + ".md", "STYLE" + ".md")],
)
def test_a_citation_of_an_outside_file_is_named(line: str, shown: str) -> None:
    assert outside_citations("x.py", line) == [f"x.py:1: {shown}"]


def test_a_word_in_capitals_is_not_a_citation() -> None:
    assert outside_citations("x.py", "STYLE = 'dark'  # a STYLE of its own") == []
