"""examples/sft_causal_lm.py --runner paddleformers: the SFT example on PaddleFormers' Trainer,
end to end at tiny sizes, in the PaddleFormers environment (where paddlenlp is not).

The runner is the paddlenlp one given another host (NOTE [ one Trainer runner, two hosts ] in
``examples/sft_hosts.py``); tests/test_sft_example.py checks it on paddlenlp.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest
from example_runs import EXAMPLES, check_shifted_labels_give_token_loss_mean, run_example

pytest.importorskip("paddleformers.trainer", reason="paddleformers is not installed")
import paddle

#: 96 training pairs in updates of 16 (6 an epoch), for 2 epochs, of at most 64 tokens
TRAIN, BATCH, EPOCHS = 96, 16, 2
TINY = (
    "--max-train-samples", str(TRAIN), "--max-eval-samples", "40", "--max-len", "64",
    "--batch-size", str(BATCH), "--epochs", str(EPOCHS), "--vocab-size", "300",
)  # fmt: skip


def test_both_modes_train_the_same_updates_on_paddleformers(
    tmp_path: Path, chnsenticorp_csv: Path
) -> None:
    """The stock Trainer (fixed) and DynamicBatchTrainer (dynamic) of PaddleFormers, at equal
    epochs: the same updates, every training pair once an epoch, and the rows' numbers."""
    done = run_example(
        "sft_causal_lm.py", "--runner", "paddleformers", "--data-file", str(chnsenticorp_csv),
        *TINY, "--time-model", "none", "--output-dir", str(tmp_path), timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    rows = {r["mode"]: r for r in json.loads((tmp_path / "results.json").read_text())}
    assert list(rows) == ["fixed", "dynamic"], list(rows)
    fixed, dynamic = rows["fixed"], rows["dynamic"]
    per_epoch = -(-TRAIN // BATCH)
    assert fixed["steps"] == dynamic["steps"] == per_epoch * EPOCHS, "equal updates"
    assert dynamic["steps"] == dynamic["planned_steps"], "the Trainer's steps are the plan's"
    assert dynamic["every_pair_once"], "each epoch's windows hold every pair exactly once"
    for mode, row in rows.items():
        assert row["runner"] == "paddleformers" and row["train_pairs"] == TRAIN, mode
        assert row["pairs_trained"] == TRAIN * EPOCHS, (mode, "every pair once an epoch")
        assert math.isfinite(row["eval_loss"]) and row["eval_loss"] > 0, mode
        assert 0 <= row["eval_answer_accuracy"] <= 1, mode
        assert row["eval_loss"] < row["eval_loss_before"], (mode, "it trained")
        assert row["real_tokens_per_sec"] > 0 and row["wall_seconds"] > 0, mode
        assert row["peak_memory_mb"] > 0 and row["memory_source"] == "cpu allocator", mode
        assert row["lr_at_end"] == pytest.approx(0.0, abs=1e-12), (mode, "the whole schedule")
    assert dynamic["real_tokens"] == fixed["real_tokens"], "the same pairs' tokens"
    assert dynamic["padding_efficiency"] > fixed["padding_efficiency"], "padding-free"
    table = (tmp_path / "results.md").read_text()
    assert "tiny Llama; runner paddleformers;" in table, table
    assert "| fixed | paddleformers |" in table and "| dynamic | paddleformers |" in table
    assert "[DataLoad global_step:" not in done.stdout + done.stderr, "its line each step"
    said = done.stdout + done.stderr
    assert "***** Running training *****" not in said, "PaddleFormers' info lines are left out"
    assert "dynbatch: " in said, "but dynbatch's own, through the same logger, are kept"
    assert "No ccache found" not in said, "and paddle's notice"


def test_the_paddlenlp_runner_names_its_install_here(tmp_path: Path) -> None:
    """--runner trainer in PaddleFormers' environment: one line naming paddlenlp's install."""
    done = run_example("sft_causal_lm.py", "--runner", "trainer", timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: --runner trainer needs paddlenlp, which this Python lacks: ")
    assert 'pip install -e ".[cpu,examples]"' in line, line


def test_the_stock_trainers_shifted_labels_give_token_losss_mean() -> None:
    """PaddleFormers' Llama, as paddlenlp's Qwen2, does not shift its labels: its own loss on
    the labels the fixed mode's collator moves left by one is ``token_loss``'s mean on the
    pairs' own (NOTE [ paddlenlp's labels are already shifted ] in examples/sft_mode.py)."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        import sft_mode
    finally:
        sys.path.remove(str(EXAMPLES))

    def build_model(meta: dict[str, int], hidden: int) -> Any:
        with paddle.utils.unique_name.guard():
            return sft_mode.build_model(meta, hidden, "paddleformers")

    check_shifted_labels_give_token_loss_mean(sft_mode, build_model)
