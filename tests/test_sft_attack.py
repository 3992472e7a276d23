"""Defects of examples/sft_causal_lm.py an outside tester found: each test failed before its fix."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from example_runs import EXAMPLES, run_example

SHARED_ROWS = [
    "1,房间很干净，服务也不错，下次还会再来。",
    "0,太吵了，晚上根本睡不着，前台态度很差。",
    "1,位置方便，早餐丰富，性价比高。",
    "0,设施陈旧，卫生间有异味，不推荐。",
]


def reviews(n: int) -> str:
    return "\n".join(SHARED_ROWS[i % 4] + str(i) for i in range(n))


def run(*args: str, timeout: int = 120) -> subprocess.CompletedProcess[str]:
    return run_example("sft_causal_lm.py", *args, timeout=timeout)


def rows_of(out: Path) -> dict[str, dict[str, Any]]:
    return {r["mode"]: r for r in json.loads((out / "results.json").read_text())}


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr[-1500:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines[-5:]
    return lines[0]


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


TINY = ("--max-train-samples", "40", "--max-len", "24", "--epochs", "1")


# -- data files: corpus.load_file, sft_causal_lm.prepare -----------------------------------
def test_a_utf8_bom_csv_is_read(tmp_path: Path) -> None:
    """corpus.load_file: Excel's 'CSV UTF-8' starts with a BOM; the header becomes
    '\\ufefflabel' and the file is refused as having no 'label' column."""
    data = write(tmp_path / "bom.csv", ("\ufefflabel,review\n" + reviews(30) + "\n").encode())
    done = run(
        "--data-file", str(data), "--modes", "fixed", *TINY, "--output-dir", str(tmp_path / "o")
    )
    assert done.returncode == 0, done.stderr[-500:]


def test_a_trailing_blank_line_is_not_a_malformed_row(tmp_path: Path) -> None:
    """corpus.load_file: csv.reader yields [] for a blank line, refused as 'expected 2 fields,
    got 0' (a file ending in an empty line is common)."""
    data = write(tmp_path / "r.csv", ("label,review\n" + reviews(30) + "\n\n").encode())
    done = run(
        "--data-file", str(data), "--modes", "fixed", *TINY, "--output-dir", str(tmp_path / "o")
    )
    assert done.returncode == 0, done.stderr[-500:]


def test_a_non_utf8_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """corpus.load_file: a GBK CSV raises UnicodeDecodeError: a traceback, exit 1."""
    data = write(tmp_path / "gbk.csv", ("label,review\n" + reviews(10) + "\n").encode("gbk"))
    line = one_error_line(run("--data-file", str(data), "--output-dir", str(tmp_path / "o")))
    assert "gbk.csv" in line


def test_a_file_with_too_few_rows_for_a_split_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """sft_causal_lm.prepare: one row goes to the held-out split, no training pair is left and
    np.concatenate([]) raises ValueError: a traceback, exit 1."""
    data = write(tmp_path / "one.csv", ("label,review\n" + reviews(1) + "\n").encode())
    one_error_line(run("--data-file", str(data), "--output-dir", str(tmp_path / "o")))


# -- flags: sft_causal_lm.parse_args / main --------------------------------------------------
def test_an_output_dir_that_is_a_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """main: work.mkdir raises NotADirectoryError outside the try: a traceback, exit 1."""
    data = write(tmp_path / "r.csv", ("label,review\n" + reviews(30) + "\n").encode())
    (tmp_path / "afile").write_text("x")
    line = one_error_line(run("--data-file", str(data), "--output-dir", str(tmp_path / "afile")))
    assert "--output-dir" in line


def test_a_seed_numpy_cannot_take_is_refused(tmp_path: Path) -> None:
    """parse_args accepts any --seed >= 0; np.random.seed(2**32) then fails in the worker:
    a traceback and 'mode fixed exited with 1'."""
    data = write(tmp_path / "r.csv", ("label,review\n" + reviews(30) + "\n").encode())
    line = one_error_line(
        run("--data-file", str(data), "--seed", str(2**32), "--output-dir", str(tmp_path / "o"))
    )
    assert "--seed" in line


def test_an_infinite_learning_rate_is_refused(tmp_path: Path) -> None:
    """parse_args: `not args.lr > 0` lets inf through; training then gives eval_loss NaN and
    results.json holds NaN/Infinity (not JSON), exit 0."""
    data = write(tmp_path / "r.csv", ("label,review\n" + reviews(30) + "\n").encode())
    done = run(
        "--data-file",
        str(data),
        "--lr",
        "inf",
        "--modes",
        "fixed",
        *TINY,
        "--output-dir",
        str(tmp_path / "o"),
    )
    assert "--lr" in one_error_line(done)


def test_a_small_vocab_size_keeps_the_two_answers_apart(tmp_path: Path) -> None:
    """prepare / CharVocab.build: with --vocab-size 30 (accepted: >= 5) 正 and 负 fall out of
    the vocabulary and both answers encode as [<unk>, <unk>]: the labels vanish from the task
    silently (eval_answer_accuracy then measures nothing)."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        import sft_causal_lm as sft
    finally:
        sys.path.remove(str(EXAMPLES))
    rows = "\n".join(
        f"{i % 2},{'的了是在我有他这中大来上个国到说们为子和你地出道也时年' * 3}{i}"
        for i in range(60)
    )
    data = write(tmp_path / "r.csv", ("label,review\n" + rows + "\n").encode())
    args = sft.parse_args(
        ["--data-file", str(data), "--vocab-size", "30", "--output-dir", str(tmp_path)]
    )
    sft.prepare(args, tmp_path)
    vocab = sft.CharVocab(json.loads((tmp_path / "vocab.json").read_text()))
    assert vocab.encode(sft.ANSWERS[0]) != vocab.encode(sft.ANSWERS[1])


# -- what the results say ------------------------------------------------------------------
@pytest.mark.slow
def test_steps_stay_within_one_of_the_fixed_batch_at_equal_epochs(tmp_path: Path) -> None:
    """sft_mode.train_loop: the fixed batch makes ceil(N/B) updates an epoch, the plan
    round(N/B): N=100, B=16, 3 epochs give 21 against 18 (the gap grows by one an epoch)."""
    data = write(tmp_path / "r.csv", ("label,review\n" + reviews(130) + "\n").encode())
    done = run(
        "--data-file",
        str(data),
        "--max-train-samples",
        "100",
        "--max-len",
        "24",
        "--epochs",
        "3",
        "--output-dir",
        str(tmp_path / "o"),
    )
    assert done.returncode == 0, done.stderr[-1500:]
    rows = rows_of(tmp_path / "o")
    assert abs(rows["fixed"]["steps"] - rows["dynamic"]["steps"]) <= 1, (
        rows["fixed"]["steps"],
        rows["dynamic"]["steps"],
    )


@pytest.mark.slow
def test_a_run_of_one_update_trains_the_model(tmp_path: Path) -> None:
    """sft_mode.make_schedule: with one update (--batch-size >= the training pairs, 1 epoch)
    the schedule is LinearWarmup(start_lr=0) and that update runs at learning rate 0: the
    model is never changed, so --lr 1e-3 and --lr 1e-2 give the same eval_loss to the bit."""
    data = write(tmp_path / "r.csv", ("label,review\n" + reviews(30) + "\n").encode())
    losses = []
    for lr in ("1e-3", "1e-2"):
        out = tmp_path / lr
        done = run(
            "--data-file",
            str(data),
            "--modes",
            "fixed",
            *TINY,
            "--batch-size",
            "64",
            "--lr",
            lr,
            "--output-dir",
            str(out),
        )
        assert done.returncode == 0, done.stderr[-1500:]
        (row,) = rows_of(out).values()
        assert row["steps"] == 1
        losses.append(row["eval_loss"])
    assert losses[0] != losses[1], "the only update had learning rate 0"


@pytest.mark.slow
def test_trainer_runner_dynamic_peak_is_not_above_fixed_when_batch_exceeds_data(
    tmp_path: Path, chnsenticorp_csv: Path
) -> None:
    """sft_mode.train_trainer: with --batch-size above the pairs both modes train the same one
    batch, yet DynamicBatchTrainer + token_cross_entropy peaks ~20% above the stock Trainer
    (one more logits-sized buffer; the cap comes from the loop's calibration)."""
    done = run(
        "--data-file",
        str(chnsenticorp_csv),
        "--runner",
        "trainer",
        "--max-train-samples",
        "50",
        "--max-len",
        "32",
        "--epochs",
        "1",
        "--batch-size",
        "500",
        "--output-dir",
        str(tmp_path / "o"),
    )
    assert done.returncode == 0, done.stderr[-1500:]
    rows = rows_of(tmp_path / "o")
    assert rows["dynamic"]["micro_batches"] == rows["fixed"]["micro_batches"] == 1
    assert rows["dynamic"]["peak_memory_mb"] <= 1.05 * rows["fixed"]["peak_memory_mb"], (
        rows["dynamic"]["peak_memory_mb"],
        rows["fixed"]["peak_memory_mb"],
    )


# -- the output directory ------------------------------------------------------------------
@pytest.mark.slow
def test_an_unreadable_cached_calibration_is_calibrated_again(tmp_path: Path) -> None:
    """sft_mode.memory_cost: MemoryCost.save writes in place (not atomically); a cut cache
    file makes MemoryCost.load raise in the worker: a traceback, 'mode dynamic exited with 1',
    and the previous run's results.json left in place."""
    data = write(tmp_path / "r.csv", ("label,review\n" + reviews(50) + "\n").encode())
    out = tmp_path / "o"
    args = ("--data-file", str(data), "--modes", "dynamic", *TINY, "--output-dir", str(out))
    assert run(*args).returncode == 0
    (calib,) = out.glob("calib-*.json")
    calib.write_text(calib.read_text()[:100])
    done = run(*args)
    assert done.returncode == 0, done.stderr[-600:]


def test_a_failed_run_does_not_leave_the_previous_results(tmp_path: Path) -> None:
    """main: results.json/results.md of an earlier run survive a later failed run in the same
    --output-dir (only work/*.json rows are removed), so they read as this run's."""
    out = tmp_path / "o"
    out.mkdir()
    (out / "results.json").write_text('[{"mode": "fixed", "eval_loss": 0.1}]')
    bad = write(tmp_path / "bad.csv", b"label,review\n2,x\n1,y\n")
    assert run("--data-file", str(bad), "--output-dir", str(out)).returncode == 2
    assert not (out / "results.json").exists(), "a stale results.json from an earlier run"
