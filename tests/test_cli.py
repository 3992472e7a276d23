"""`dynbatch stats` in process: every input kind, the JSON schema, the plot, the errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dynbatch import plan_batches, plan_stats
from dynbatch.cli import main

TEXTS = ["好" * n for n in (3, 40, 7, 120, 15, 15, 60, 2, 90, 33)]
ROW_KEYS = {
    "name",
    "batches",
    "padding_efficiency",
    "batch_size_min",
    "batch_size_median",
    "batch_size_max",
    "cost_max",
    "cost_mean",
    "cost_cv",
    "utilization",
}


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["stats", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    paths = {
        "npy": tmp_path / "lens.npy",
        "txt": tmp_path / "reviews.txt",
        "csv": tmp_path / "reviews.csv",
        "tsv": tmp_path / "reviews.tsv",
        "jsonl": tmp_path / "reviews.jsonl",
    }
    np.save(paths["npy"], np.array([len(t) for t in TEXTS]))
    paths["txt"].write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    paths["csv"].write_text(
        "label,review\n" + "".join(f'1,"{t}"\n' for t in TEXTS), encoding="utf-8"
    )
    paths["tsv"].write_text(
        "label\ttext_a\n" + "".join(f"0\t{t}\n" for t in TEXTS), encoding="utf-8"
    )
    paths["jsonl"].write_text(
        "".join(json.dumps({"text": t}) + "\n" for t in TEXTS), encoding="utf-8"
    )
    return paths


@pytest.mark.parametrize(
    ("kind", "extra"),
    [
        ("npy", []),
        ("txt", []),
        ("csv", ["--column", "review"]),
        ("tsv", ["--column", "text_a"]),
        ("jsonl", ["--field", "text"]),
    ],
)
def test_every_input_kind_gives_the_same_numbers(
    capsys, inputs, kind: str, extra: list[str]
) -> None:
    out = run_json(capsys, str(inputs[kind]), "--max-cost", "20000", *extra)
    lens = np.array([len(t) for t in TEXTS])
    assert out["lower_bound_batches"] == int(np.ceil((lens**2).sum() / 20000))
    rows = {r["name"]: r for r in out["rows"]}
    assert set(rows) == {"bucket", "shuffle", "ascending", "descending", "none", "fixed"}
    assert all(set(r) == ROW_KEYS for r in out["rows"]), "the documented schema"
    expected = plan_stats(lens, plan_batches(lens, 20000, order="ascending"), max_cost=20000)
    assert rows["ascending"]["batches"] == expected.batches
    assert rows["ascending"]["padding_efficiency"] == pytest.approx(expected.padding_efficiency)


def test_add_truncate_and_wordpiece_vocab(capsys, inputs, tmp_path: Path) -> None:
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n好\n", encoding="utf-8")
    out = run_json(
        capsys,
        str(inputs["txt"]),
        "--max-cost",
        "1e9",
        "--add",
        "2",
        "--truncate",
        "50",
        "--vocab",
        str(vocab),
        "--fixed-batch-size",
        "10",
    )
    fixed = next(r for r in out["rows"] if r["name"] == "fixed")
    assert fixed["batches"] == 1 and fixed["batch_size_max"] == 10
    lens = np.minimum(np.array([len(t) for t in TEXTS]) + 2, 50)  # one token per CJK character
    assert fixed["padding_efficiency"] == pytest.approx(lens.sum() / (10 * 50))


def test_table_and_plot(capsys, inputs, tmp_path: Path) -> None:
    png = tmp_path / "stats.png"
    assert main(["stats", str(inputs["npy"]), "--max-cost", "20000", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "pad eff" in out and "lower bound on batches" in out and "fixed" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["missing.csv", "--max-cost", "10"], "input file not found: missing.csv"),
        (["{csv}", "--max-cost", "10", "--column", "text"], "--column 'text' is not in"),
        (["{csv}", "--max-cost", "10"], "name the text column with --column"),
        (
            ["{npy}", "--max-cost", "0"],
            "--max-cost must be a positive finite number, got --max-cost=0",
        ),
        (["{npy}", "--max-cost", "-3"], "--max-cost must be a positive finite number"),
        (["{npy}", "--max-cost", "10", "--cost", "cubic"], "--cost must be"),
        (["{jsonl}", "--max-cost", "10", "--field", "body"], "--field 'body' is missing on line 1"),
        (
            ["{npy}", "--max-cost", "10", "--max-batch-size", "0"],
            "--max-batch-size must be an integer >= 1",
        ),
    ],
)
def test_errors_exit_2_with_one_line(capsys, inputs, argv: list[str], message: str) -> None:
    argv = [a.format(**{k: str(v) for k, v in inputs.items()}) for a in argv]
    assert main(["stats", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_python_dash_m(inputs) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "dynbatch",
            "stats",
            str(inputs["npy"]),
            "--max-cost",
            "20000",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout)["rows"]


def test_shared_corpus_with_the_real_vocab(
    capsys, chnsenticorp_csv: Path, bert_vocab: Path
) -> None:
    out = run_json(
        capsys,
        str(chnsenticorp_csv),
        "--column",
        "review",
        "--add",
        "2",
        "--truncate",
        "512",
        "--max-cost",
        str(20 * 512**2 / 4),
        "--vocab",
        str(bert_vocab),
    )
    rows = {r["name"]: r for r in out["rows"]}
    assert rows["bucket"]["padding_efficiency"] >= 0.95 > rows["fixed"]["padding_efficiency"]
