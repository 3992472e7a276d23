"""Bad input to ``dynbatch stats`` is one line on stderr and exit code 2.

One part of the bad-input table (tests/bad_input.py says how it works): the command line,
called through the public ``dynbatch.cli.main`` as the console script calls it: every flag's
bad values, and input files of every kind that cannot be measured.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dynbatch.cli import main

#: name -> file content: bytes, or a numpy array saved as .npy
CLI_FILES: dict[str, Any] = {
    "ok.npy": np.array([3, 4, 5]),
    "str.npy": np.array(["a", "b"]),
    "complex.npy": np.array([1 + 2j]),
    "datetime.npy": np.array(["2020-01-01"], dtype="datetime64[D]"),
    "bool.npy": np.array([True, False]),
    "empty.npy": np.array([], dtype=np.int64),
    "2d.npy": np.array([[3, 4, 5]]),
    "pairs.npy": np.array([[3, 4], [5, 0], [2, 2]]),
    "pairs-fraction.npy": np.array([[3.0, 4.0], [5.0, 2.5]]),
    "scalar.npy": np.array(7),
    "negative.npy": np.array([3, -2, 5]),
    "zero.npy": np.array([3, 0, 5]),
    "nan.npy": np.array([3.0, np.nan]),
    "fraction.npy": np.array([3.0, 2.5]),
    "huge.npy": np.array([3, 2**60], dtype=np.uint64),
    "over.npy": np.array([10, 20, 300, 40, 500]),
    "zero-bytes.npy": b"",
    "text.npy": b"3\n4\n",
    "reviews.csv": b"label,review\n1,good\n0,bad\n",
    "empty-row.csv": b'label,review\n1,good\n0,""\n1,fine\n',
    "short-row.csv": b"label,review\n1,good\n0\n",
    "header-only.csv": b"label,review\n",
    "empty.csv": b"",
    "latin1.csv": b"review\ncaf\xe9\n",
    "reviews.tsv": b"label\ttext_a\n1\tgood\n",
    "number.jsonl": b"5\n",
    "list.jsonl": b"[1, 2]\n",
    "string.jsonl": b'"text"\n',
    "null.jsonl": b'{"text": null}\n',
    "int.jsonl": b'{"text": 5}\n',
    "bool.jsonl": b'{"text": true}\n',
    "object.jsonl": b'{"text": {"a": 1}}\n',
    "broken.jsonl": b'{"text": "a"}\n{oops\n',
    "missing.jsonl": b'{"body": "a"}\n',
    "empty-text.jsonl": b'{"text": ""}\n',
    "pairs.jsonl": b'{"src": "abc", "tgt": "hello"}\n{"src": "de", "tgt": "x"}\n',
    "pairs-empty-target.jsonl": b'{"src": "abc", "tgt": "hello"}\n{"src": "de", "tgt": ""}\n',
    "pairs.csv": b"review,pinyin\nabc,abcdef\nde,\n",
    "reviews.txt": b"good\nbad\n",
    "empty-line.txt": b"good\n\nbad\n",
    "empty.txt": b"",
    "latin1.txt": b"caf\xe9\n",
    "vocab.txt": b"[PAD]\n[UNK]\ngood\n",
    "empty-vocab.txt": b"\n",
    "latin1-vocab.txt": b"caf\xe9\n",
}


@pytest.fixture(scope="module")
def cli_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli")
    for name, content in CLI_FILES.items():
        if isinstance(content, bytes):
            (root / name).write_bytes(content)
        else:
            np.save(root / name, content)
    (root / "a-directory.csv").mkdir()
    return root


#: (id, argv after "stats" with {dir} for the files' directory, regex of the one stderr line)
CLI_CASES: list[tuple[str, list[str], str]] = []


def cli(id: str, argv: list[str], match: str) -> None:
    CLI_CASES.append((id, argv, match))


OK = ["{dir}/ok.npy"]
FLAG_VALUES: dict[str, list[tuple[str, str]]] = {
    "--max-cost": [
        ("0", r"--max-cost must be a positive finite number, got --max-cost=0"),
        ("-1", r"--max-cost must be a positive finite number, got --max-cost=-1"),
        ("nan", r"--max-cost must be a positive finite number, got --max-cost=nan"),
        ("inf", r"--max-cost must be a positive finite number, got --max-cost=inf"),
        ("abc", r"argument --max-cost: invalid float value: 'abc'"),
        ("", r"argument --max-cost: invalid float value: ''"),
    ],
    "--cost": [
        ("cubic", r"--cost must be 'quadratic', 'linear', 'mixed:A,B'.*got --cost='cubic'"),
        ("mixed:1", r"cost 'mixed:A,B' needs two numbers, got --cost='mixed:1'"),
        ("mixed:a,b", r"needs two numbers, got --cost='mixed:a,b'"),
        ("mixed:-1,2", r"--cost=mixed:-1,2: MixedCost a must be a finite number >= 0, got a=-1"),
        ("mixed:0,0", r"--cost=mixed:0,0: MixedCost needs a > 0 or b > 0"),
    ],
    "--seed": [
        ("-1", r"--seed must be an integer >= 0, got --seed=-1"),
        ("x", r"argument --seed: invalid int value: 'x'"),
        ("1.5", r"argument --seed: invalid int value: '1.5'"),
    ],
    "--oversize": [
        ("maybe", r"argument --oversize: invalid choice: 'maybe' \(choose from"),
    ],
    "--bucket-width": [
        ("0", r"--bucket-width must be a positive finite number, got --bucket-width=0"),
        ("-1", r"--bucket-width must be a positive finite number, got --bucket-width=-1"),
        ("1e-4", r"--bucket-width must be in \[0.001, 10\] .*got --bucket-width=0.0001"),
        ("11", r"--bucket-width must be in \[0.001, 10\] .*got --bucket-width=11"),
        ("nan", r"--bucket-width must be a positive finite number, got --bucket-width=nan"),
        ("x", r"argument --bucket-width: invalid float value: 'x'"),
    ],
    "--fixed-batch-size": [
        ("0", r"--fixed-batch-size must be an integer >= 1, got --fixed-batch-size=0"),
        ("-1", r"--fixed-batch-size must be an integer >= 1, got --fixed-batch-size=-1"),
        ("x", r"argument --fixed-batch-size/--batch-size: invalid int value: 'x'"),
    ],
    "--add": [
        ("-1", r"--add must be an integer >= 0, got --add=-1"),
        ("x", r"argument --add: invalid int value: 'x'"),
        (str(2**53), r"--add must be below 2\*\*53 \(a length\), got --add=9007199254740992"),
        (
            str(2**63 - 1),
            r"--add must be below 2\*\*53 \(a length\), got --add=9223372036854775807",
        ),
        (str(2**53 - 3), r"--add=9007199254740989 makes .*ok.npy\[2\] 9007199254740994 long"),
    ],
    "--truncate": [
        ("0", r"--truncate must be an integer in \[1, 2\*\*53\), got --truncate=0"),
        ("-1", r"--truncate must be an integer in \[1, 2\*\*53\), got --truncate=-1"),
        ("x", r"argument --truncate: invalid int value: 'x'"),
        (str(2**53), r"--truncate must be an integer in \[1, 2\*\*53\), got --truncate=9007"),
    ],
    "--pack-len": [
        ("0", r"--pack-len must be an integer >= 1, got --pack-len=0"),
        ("-1", r"--pack-len must be an integer >= 1, got --pack-len=-1"),
        ("x", r"argument --pack-len: invalid int value: 'x'"),
        (str(2**53), r"--pack-len must be an integer in \[1, 2\*\*53\), got --pack-len=9007"),
        (
            "4",
            r"1 sample\(s\) are longer than --pack-len=4; the first is .*ok.npy\[2\] \(length "
            r"5\): raise --pack-len, --truncate them, or pass --oversize skip or --oversize alone",
        ),
    ],
    "--plot": [
        ("{dir}/out.jpg", r"--plot must name a .png, .svg, .pdf file, got --plot=.*out.jpg"),
        ("{dir}/no/such/dir/out.png", r"--plot .*out.png: directory .*no/such/dir does not exist"),
    ],
}
for flag in ("--max-batch-size", "--batch-size-multiple", "--pad-to-multiple-of"):
    FLAG_VALUES[flag] = [
        ("0", rf"{flag} must be an integer >= 1.*got {flag}=0"),
        ("-1", rf"{flag} must be an integer >= 1.*got {flag}=-1"),
        ("x", rf"argument {flag}: invalid int value: 'x'"),
        ("2.5", rf"argument {flag}: invalid int value: '2.5'"),
    ]
for flag, values in FLAG_VALUES.items():
    for value, match in values:
        argv = [*OK, "--max-cost", "1000", flag, value]
        if flag == "--max-cost":
            argv = [*OK, flag, value]
        cli(f"stats {flag}={value.replace('{dir}/', '') or 'empty'}", argv, match)

for name, match in [
    ("str.npy", r"str.npy must hold integer lengths, got dtype <U1 \(first value 'a'\)"),
    ("complex.npy", r"complex.npy must hold integer lengths, got dtype complex128"),
    ("datetime.npy", r"datetime.npy must hold integer lengths, got dtype datetime64\[D\]"),
    ("bool.npy", r"bool.npy must hold integer lengths, got dtype bool"),
    ("empty.npy", r"empty.npy holds no lengths \(an empty array\)"),
    (
        "2d.npy",
        r"2d.npy must hold a 1-D array of lengths, or an \[N, 2\] array of \(source, target\) "
        r"lengths, got shape \(1, 3\)",
    ),
    ("pairs.npy", r"pairs.npy\[1, 1\]=.*0 \(the target of sample 1\): a length must be >= 1"),
    (
        "pairs-fraction.npy",
        r"pairs-fraction.npy\[1, 1\]=.*2.5 \(the target of sample 1\): a length must be a whole",
    ),
    ("scalar.npy", r"scalar.npy must hold a 1-D array of lengths, or an .*got shape \(\)"),
    ("negative.npy", r"negative.npy\[1\]=-2: a length must be >= 1"),
    ("zero.npy", r"zero.npy\[1\]=0: a length must be >= 1 \(pass --skip-empty"),
    ("nan.npy", r"nan.npy\[1\]=nan: a length must be a whole number"),
    ("fraction.npy", r"fraction.npy\[1\]=2.5: a length must be a whole number"),
    ("huge.npy", r"huge.npy\[1\]=1152921504606846976: a length must be below 2\*\*53"),
    ("zero-bytes.npy", r"zero-bytes.npy is not a readable .npy array of lengths"),
    ("text.npy", r"text.npy is not a readable .npy array of lengths"),
    (
        "over.npy",
        r"3 sample\(s\) are over --max-cost=1000 even alone; the first is .*over.npy\[2\] "
        r"\(length 300.*The sampler refuses them \(--oversize error\)",
    ),
    ("missing.npy", r"input file not found: .*missing.npy"),
    ("a-directory.csv", r"input file not found: .*a-directory.csv"),
]:
    cli(f"stats-{name}", ["{dir}/" + name, "--max-cost", "1000"], match)
for extra, match in [
    (["--add", "1"], r"negative.npy\[1\]=-2: a length must be >= 1"),
    (["--truncate", "4"], r"negative.npy\[1\]=-2: a length must be >= 1"),
    (["--add", "1", "--truncate", "4"], r"negative.npy\[1\]=-2"),
]:
    cli(
        f"stats-negative.npy {' '.join(extra)}",
        ["{dir}/negative.npy", "--max-cost", "1000", *extra],
        match,
    )
cli(
    "stats-zero.npy --add 1",
    ["{dir}/zero.npy", "--max-cost", "1000", "--add", "1"],
    r"zero.npy\[1\]=0: a length must be >= 1",
)
cli(
    "stats-all-oversize-skip",
    ["{dir}/over.npy", "--max-cost", "1", "--oversize", "skip"],
    r"all 5 samples are over --max-cost=1 even alone.*--oversize='skip' would leave nothing",
)
for name, extra, match in [
    (
        "empty-row.csv",
        ["--column", "review"],
        r"line 3 of .*empty-row.csv is empty \(0 characters\); .*--add N .*--skip-empty",
    ),
    (
        "short-row.csv",
        ["--column", "review"],
        r"line 3 of .*short-row.csv has 1 field\(s\) and no 'review' \(column 2 of the header\)",
    ),
    ("header-only.csv", ["--column", "review"], r"header-only.csv holds no samples"),
    ("empty.csv", ["--column", "review"], r"empty.csv is empty: no header row with a 'review'"),
    ("latin1.csv", ["--column", "review"], r"latin1.csv is not UTF-8 text"),
    ("reviews.csv", ["--column", "text"], r"--column 'text' is not in .*reviews.csv; columns:"),
    ("reviews.csv", [], r"reviews.csv is a table: name the text column with --column"),
    (
        "reviews.csv",
        ["--column", "review", "--field", "text"],
        r"--field is for JSON lines; .*reviews.csv is a table: use --column",
    ),
    ("reviews.tsv", ["--column", "review"], r"--column 'review' is not in .*reviews.tsv"),
    (
        "number.jsonl",
        ["--field", "text"],
        r"line 1 of .*number.jsonl is a JSON int, not an object with a 'text' field: 5",
    ),
    ("list.jsonl", ["--field", "text"], r"line 1 of .*list.jsonl is a JSON list, not an object"),
    ("string.jsonl", ["--field", "text"], r"line 1 of .*string.jsonl is a JSON str, not an obj"),
    (
        "null.jsonl",
        ["--field", "text"],
        r"--field 'text' on line 1 of .*null.jsonl must be text \(a string\) or tokens \(a list\), "
        r"got null",
    ),
    (
        "int.jsonl",
        ["--field", "text"],
        r"--field 'text' on line 1 of .*int.jsonl must be text.*got 5",
    ),
    ("bool.jsonl", ["--field", "text"], r"--field 'text' on line 1 .*must be text.*got true"),
    ("object.jsonl", ["--field", "text"], r"--field 'text' on line 1 .*must be text.*got \{"),
    ("broken.jsonl", ["--field", "text"], r"line 2 of .*broken.jsonl is not JSON \(Expecting"),
    (
        "missing.jsonl",
        ["--field", "text"],
        r"--field 'text' is missing on line 1 of .*missing.jsonl; fields: \['body'\]$",
    ),
    ("empty-text.jsonl", ["--field", "text"], r"line 1 of .*empty-text.jsonl is empty"),
    ("number.jsonl", [], r"number.jsonl is JSON lines: name the text field with --field"),
    (
        "number.jsonl",
        ["--field", "text", "--column", "text"],
        r"--column is for a CSV/TSV; .*number.jsonl is JSON lines: use --field",
    ),
    ("empty-line.txt", [], r"line 2 of .*empty-line.txt is empty \(0 characters\)"),
    ("empty.txt", [], r"empty.txt holds no samples: there is nothing to batch"),
    ("latin1.txt", [], r"latin1.txt is not UTF-8 text"),
    ("reviews.txt", ["--column", "review"], r"--column is for a CSV/TSV or JSON lines file"),
    ("reviews.txt", ["--field", "text"], r"--field is for a CSV/TSV or JSON lines file"),
    (
        "reviews.txt",
        ["--vocab", "{dir}/empty-vocab.txt"],
        r"vocab file .*empty-vocab.txt holds no tokens",
    ),
    (
        "reviews.txt",
        ["--vocab", "{dir}/no-such-vocab.txt"],
        r"--vocab file not found: .*no-such-vocab.txt",
    ),
    (
        "reviews.txt",
        ["--vocab", "{dir}/latin1-vocab.txt"],
        r"--vocab file .*latin1-vocab.txt is not UTF-8 text",
    ),
    (
        "empty-line.txt",
        ["--vocab", "{dir}/vocab.txt"],
        r"line 2 of .*empty-line.txt is empty \(0 WordPiece tokens\)",
    ),
    ("ok.npy", ["--vocab", "{dir}/vocab.txt"], r"--vocab measures text; .*ok.npy is a .npy"),
    ("ok.npy", ["--column", "review"], r"--column measures text; .*ok.npy is a .npy"),
    ("ok.npy", ["--field", "text"], r"--field measures text; .*ok.npy is a .npy"),
    # two are a pair's source and target (NOTE [ stats of pairs ]); argparse kept the last of
    # three, silently
    (
        "pairs.jsonl",
        ["--field", "src", "--field", "tgt", "--field", "src"],
        r"--field given 3 times \(src, tgt, src\): give one \(a length per sample\) or two, "
        r"the source's and the target's",
    ),
    (
        "pairs.jsonl",
        ["--field", "src", "--field", "body"],
        r"--field 'body' is missing on line 1 of .*pairs.jsonl",
    ),
    (
        "pairs-empty-target.jsonl",
        ["--field", "src", "--field", "tgt"],
        r"line 2 of .*pairs-empty-target.jsonl has an empty target \(--field 'tgt'\) "
        r"\(0 characters\)",
    ),
    (
        "pairs.csv",
        ["--column", "review", "--column", "pinyin"],
        r"line 3 of .*pairs.csv has an empty target \(--column 'pinyin'\)",
    ),
    (
        "pairs.csv",
        ["--column", "review", "--column", "hanzi"],
        r"--column 'hanzi' is not in .*pairs.csv; columns: \['review', 'pinyin'\]",
    ),
    (
        "pairs.jsonl",
        ["--field", "src", "--field", "tgt", "--pack-len", "8"],
        r"--pack-len=8: .*pairs.jsonl holds \(source, target\) pairs, and packing is refused",
    ),
    (
        "pairs.jsonl",
        ["--field", "src", "--field", "tgt", "--time-model", "1,0,0"],
        r"--time-model 1,0,0: .*pairs.jsonl holds \(source, target\) pairs, and its step time "
        r"\(or memory model\) is of one length",
    ),
    (  # a pair over budget alone: named by its line, both lengths and its pair cost
        "pairs.jsonl",
        ["--field", "src", "--field", "tgt", "--cost", "linear", "--max-cost", "7"],
        r"1 sample\(s\) are over --max-cost=7 even alone; the first is line 1 of .*pairs.jsonl "
        r"\(\(source, target\) lengths \(3, 5\), costs 8 alone\)",
    ),
    ("reviews.csv", ["--column", "review", "--column", "review", "--column", "label"], r"3 times"),
]:
    label = " ".join(x.replace("{dir}/", "") for x in extra)
    cli(f"stats-{name} {label}".strip(), ["{dir}/" + name, "--max-cost", "1000", *extra], match)
cli(
    "stats-skip-empty-leaves-nothing",
    ["{dir}/empty-text.jsonl", "--max-cost", "9", "--field", "text", "--skip-empty"],
    r"empty-text.jsonl holds no non-empty samples",
)
cli("stats-no-max-cost", OK, r"--max-cost is required: the budget every batch fits")
cli("stats-no-input", ["--max-cost", "5"], r"the following arguments are required: input")
cli(
    "stats-unknown-flag",
    [*OK, "--max-cost", "5", "--colour", "red"],
    r"unrecognized arguments: --colour red",
)
cli(
    "stats-excluded-flag-order",
    [*OK, "--max-cost", "5", "--order", "none"],
    r"unrecognized arguments: --order none",
)

# what the sampler refuses with pack_len, --pack-len refuses by name, before reading the input
for flags, match in [
    (
        ["--batch-size-multiple", "2"],
        r"--pack-len=8 does not support --batch-size-multiple=2 \(the sampler refuses "
        r"batch_size_multiple with pack_len",
    ),
    (
        ["--group-by-length"],
        r"--pack-len=8 does not support --group-by-length \(the sampler refuses "
        r"group_by_length with pack_len",
    ),
]:
    for source in ("ok.npy", "missing.npy"):
        cli(
            f"stats-{source} --pack-len 8 {flags[0]}",
            ["{dir}/" + source, "--max-cost", "1000", "--pack-len", "8", *flags],
            match,
        )


def test_cli_table_is_large() -> None:
    assert len(CLI_CASES) >= 100, len(CLI_CASES)
    assert len({c[0] for c in CLI_CASES}) == len(CLI_CASES), "ids are unique"


@pytest.mark.parametrize(
    ("argv", "match"), [c[1:] for c in CLI_CASES], ids=[c[0] for c in CLI_CASES]
)
def test_stats_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], cli_dir: Path, argv: list[str], match: str
) -> None:
    args = [a.replace("{dir}", str(cli_dir)) for a in argv]
    assert main(["stats", *args, "--no-progress"]) == 2
    out, err = capsys.readouterr()
    assert out == "", "nothing on stdout"
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(("dynbatch stats: error: ", "dynbatch: error: ")), lines[0]
    assert re.search(match, lines[0]), f"{lines[0]} !~ {match}"


def test_the_files_are_fine_but_for_the_bad_part(
    capsys: pytest.CaptureFixture[str], cli_dir: Path
) -> None:
    """The files above that are fine really are: the table's errors come from the bad part."""
    for argv in (
        [*OK],
        ["{dir}/reviews.csv", "--column", "review"],
        ["{dir}/reviews.txt"],
        ["{dir}/reviews.txt", "--vocab", "{dir}/vocab.txt"],
        ["{dir}/empty-row.csv", "--column", "review", "--skip-empty"],
        ["{dir}/over.npy", "--oversize", "alone"],
        ["{dir}/zero.npy", "--skip-empty"],
    ):
        args = [a.replace("{dir}", str(cli_dir)) for a in argv]
        assert main(["stats", *args, "--max-cost", "1000", "--json"]) == 0, argv
        json.loads(capsys.readouterr().out)
