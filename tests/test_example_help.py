"""Every example's ``--help`` explains every flag: a line of help, and the default it takes."""

from __future__ import annotations

import re

import pytest
from example_runs import EXAMPLES, run_example

#: the examples a user runs with flags (the others take none)
SCRIPTS = sorted(p.name for p in EXAMPLES.glob("*.py") if "add_argument(" in p.read_text())
#: an option's line in argparse's help: two spaces, the flag, its metavar, then maybe its help
OPTION = re.compile(r"^  (?:-\w, )?(--[\w-]+)(?: \S+)?(?:  +(\S.*))?$")


def flags_and_help(text: str) -> dict[str, str]:
    """Each ``--flag`` of a ``--help`` text, and its help (the lines below it, joined).

    >>> text = "options:\\n  --a A    the a\\n  --bee BEE\\n             the b\\n  --c C\\n"
    >>> flags_and_help(text)
    {'--a': 'the a', '--bee': 'the b', '--c': ''}
    """
    lines = text.split("options:", 1)[1].splitlines()
    found: dict[str, str] = {}
    flag = None
    for line in lines:
        match = OPTION.match(line)
        if match:
            flag = match.group(1)
            found[flag] = match.group(2) or ""
        elif flag is not None and line.startswith("    ") and line.strip():
            found[flag] = f"{found[flag]} {line.strip()}".strip()
    return found


def test_the_examples_with_flags_are_found() -> None:
    assert {"bert_chnsenticorp.py", "seq2seq_pinyin.py", "sft_causal_lm.py"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_flag_of_an_example_has_help_and_a_default(script: str) -> None:
    done = run_example(script, "--help", timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    flags = flags_and_help(done.stdout)
    assert len(flags) > 3, f"{script}: its flags are read from --help"
    bare = [flag for flag, said in flags.items() if not said]
    assert not bare, f"{script} --help: no help for {bare}"
    unsaid = [f for f, said in flags.items() if f != "--help" and "default" not in said]
    assert not unsaid, f"{script} --help: no default shown for {unsaid}"
