"""The pinyin example (examples/seq2seq_pinyin.py): its pairs, its plan on them, and a run end to
end in its own process, fixed against dynamic."""

from __future__ import annotations

import importlib
import json
import math
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from example_runs import EXAMPLES, run_example

pytest.importorskip("pypinyin")
pytest.importorskip("paddle")


@pytest.fixture(scope="module")
def example() -> ModuleType:
    sys.path.insert(0, str(EXAMPLES))
    try:
        return importlib.import_module("seq2seq_pinyin")
    finally:
        sys.path.remove(str(EXAMPLES))


def test_a_target_is_the_syllables_of_the_sources_chinese_characters(example: ModuleType) -> None:
    assert example.syllables("房间很干净，OK 123") == ["fang", "jian", "hen", "gan", "jing"]
    src = example.vocabulary(["房间", "房"], min_count=2)
    tgt = example.vocabulary([["fang"]], min_count=1)
    pairs = example.Pairs(["房间很好，", "好"], src, tgt, max_chars=3)
    assert pairs.lengths.tolist() == [[3, 4], [1, 2]], "cut at 3 characters; syllables + </s>"
    assert pairs[0]["source"].tolist() == [src["房"], example.UNK, example.UNK]
    assert pairs[0]["target"].tolist() == [tgt["fang"], example.UNK, example.UNK, example.EOS]


@pytest.mark.slow  # pypinyin over every review: half a minute
def test_the_plan_keeps_the_fixed_batchs_updates_and_pads_little_on_both_sides(
    example: ModuleType, chnsenticorp_csv: Path
) -> None:
    """Every training pair of the shared reviews, as the example plans them: ``ceil(N / B)``
    updates an epoch, and at least 0.93 padding efficiency on each side (the issue's promise),
    where the shuffled fixed batch pads far more."""
    import dynbatch

    args = example.parse_args(["--data-file", str(chnsenticorp_csv), "--max-train-samples", "0"])
    train, _, _ = example.prepare(args)
    sampler = dynbatch.DynamicBatchSampler(lengths=train.lengths, batch_size=32, seed=0)
    assert sampler.steps_for_epochs([0]) == math.ceil(len(train) / 32), "the fixed batch's"
    dynamic = dynbatch.plan_stats(train.lengths, sampler.batches(0), cost="linear")
    perm = np.random.default_rng(0).permutation(len(train))
    fixed = dynbatch.plan_stats(
        train.lengths, [perm[i : i + 32] for i in range(0, len(perm), 32)], cost="linear"
    )
    assert dynamic.source_padding_efficiency >= 0.93, "source: padding-free"
    assert dynamic.target_padding_efficiency >= 0.93, "target: padding-free"
    assert fixed.source_padding_efficiency < 0.8 and fixed.target_padding_efficiency < 0.8


def check_same_updates(rows: dict[str, dict[str, Any]], pairs: int, batch: int) -> None:
    """Both modes' updates, padding and measures; ``pairs`` a multiple of ``batch``, so every
    update holds ``batch`` pairs (else the plan spreads the remainder over an epoch's last
    updates, where the fixed batch leaves it to its last)."""
    fixed, dynamic = rows["fixed"], rows["dynamic"]
    per_epoch = math.ceil(pairs / batch)
    assert fixed["steps"] == dynamic["steps"] == 2 * per_epoch, "ceil(N / B) updates an epoch"
    assert sorted(fixed["update_pairs"]) == sorted(dynamic["update_pairs"]), "B pairs each"
    assert sum(dynamic["update_pairs"]) == 2 * pairs, "every pair once an epoch"
    assert dynamic["micro_batches"] > dynamic["steps"], "updates cut into micro-batches"
    for side in ("source", "target"):
        key = f"{side}_padding_efficiency"
        assert dynamic[key] > fixed[key], f"{side}: dynamic pads less"
    for row in (fixed, dynamic):
        assert 0.0 <= row["eval_accuracy"] <= 1.0 and np.isfinite(row["eval_loss"])
        assert row["peak_memory_mb"] > 0 and row["real_tokens_per_sec"] > 0


@pytest.mark.slow
def test_fixed_and_dynamic_train_the_same_updates(tmp_path: Path, chnsenticorp_csv: Path) -> None:
    done = run_example(
        "seq2seq_pinyin.py",
        *("--data-file", str(chnsenticorp_csv), "--seeds", "0", "--epochs", "2"),
        *("--max-train-samples", "128", "--dev-samples", "20", "--max-chars", "60"),
        *("--batch-size", "16", "--d-model", "16", "--output-dir", str(tmp_path)),
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {r["mode"]: r for r in json.loads((tmp_path / "results.json").read_text())}
    check_same_updates(rows, 128, 16)
    assert "dynamic vs fixed over seeds 0: real tokens/s x" in done.stdout, "the summary"


@pytest.mark.slow
def test_without_the_shared_data_it_says_so_and_runs_offline(tmp_path: Path) -> None:
    env = {**os.environ, "DYNBATCH_SHARED_DATA": str(tmp_path / "no-shared-data")}
    done = run_example(
        "seq2seq_pinyin.py",
        *("--seeds", "0", "--epochs", "2", "--max-train-samples", "40", "--dev-samples", "8"),
        *("--max-chars", "30", "--batch-size", "8", "--d-model", "16"),
        *("--output-dir", str(tmp_path / "out")),
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "chnsenticorp_htl_all.csv not found" in done.stdout, "says so"
    rows = {r["mode"]: r for r in json.loads((tmp_path / "out" / "results.json").read_text())}
    check_same_updates(rows, 40, 8)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--modes", "fixed,group"], "--modes takes fixed, dynamic; got group"),
        (["--epochs", "0"], "--epochs must be >= 1, got 0"),
        (["--data-file", "nowhere.csv"], "data file not found: nowhere.csv"),
    ],
)
def test_bad_flags_are_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    done = run_example("seq2seq_pinyin.py", *args, "--output-dir", str(tmp_path), timeout=120)
    assert done.returncode != 0 and message in done.stderr, done.stderr[-2000:]
