"""The BERT example end to end in real processes: every mode, every output file, and bad input."""

from __future__ import annotations

import importlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from example_runs import EXAMPLES, run_example

from conftest import shared_file

pytest.importorskip("paddlenlp")
pytestmark = pytest.mark.slow
KEYS = {
    "mode",
    "wall_s",
    "epochs",
    "steps",
    "samples_per_sec",
    "real_tokens_per_sec",
    "padding_efficiency",
    "peak_memory_mb",
    "median_memory_mb",
    "memory_max_over_median",
    "dev_accuracy_same_data",
    "dev_accuracy",
    "skipped_steps",
    "every_sample_once",
}
NO_NETWORK = """
import socket

def _refuse(*args, **kwargs):
    raise OSError("no network in this test")

socket.create_connection = _refuse
"""


def run(
    *args: str, timeout: int = 900, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return run_example("bert_chnsenticorp.py", *args, timeout=timeout, env=env)


def example_module(name: str) -> ModuleType:
    sys.path.insert(0, str(EXAMPLES))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(EXAMPLES))


def test_every_mode_on_the_shared_corpus(
    tmp_path: Path, chnsenticorp_csv: Path, bert_vocab: Path
) -> None:
    done = run(
        "--data-file",
        str(chnsenticorp_csv),
        "--vocab",
        str(bert_vocab),
        "--model",
        "tiny",
        "--epochs",
        "1",
        "--max-train-samples",
        "160",
        "--max-len",
        "128",
        "--output-dir",
        str(tmp_path),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    rows = {r["mode"]: r for r in results["rows"]}
    assert list(rows) == [
        "fixed",
        "dynamic",
        "fill",
        "shuffle",
        "ascending",
        "bucket",
        "calibrated",
    ], "in order"
    for mode, row in rows.items():
        assert set(row) >= KEYS, f"{mode}: every documented key"
        assert row["wall_s"] > 0 and row["steps"] > 0 and row["samples_per_sec"] > 0
        assert 0 < row["padding_efficiency"] <= 1 and 0 <= row["dev_accuracy"] <= 1
        assert 0 < row["median_memory_mb"] <= row["peak_memory_mb"] and row["skipped_steps"] == 0
        assert row["every_sample_once"], f"{mode}: no sample lost or repeated over the epoch"
        assert row["epochs"] == 1.0, f"{mode}: equal epochs by default"
    assert rows["bucket"]["padding_efficiency"] > rows["fixed"]["padding_efficiency"]
    dynamic = rows["dynamic"]
    assert abs(dynamic["steps"] - rows["fixed"]["steps"]) <= 1, "the fixed batch's updates"
    assert dynamic["padding_efficiency"] > rows["fixed"]["padding_efficiency"]
    assert dynamic["peak_memory_mb"] <= rows["fixed"]["peak_memory_mb"], "within its worst"
    for mode in ("fill", "calibrated"):
        row = rows[mode]
        assert row["target_mb"] == rows["fixed"]["peak_memory_mb"], "the fixed mode's peak"
        assert row["peak_memory_mb"] <= 1.05 * row["target_mb"], f"{mode}: within the target"
    assert (tmp_path / "work" / "calib.json").exists(), "the calibration is kept"
    md = (tmp_path / "results.md").read_text()
    assert md.count("\n| ") == 8 and "| calibrated |" in md, "a header and a row per mode"
    png = (tmp_path / "curves.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    visualdl = pytest.importorskip("visualdl")
    for mode in rows:
        (log,) = (tmp_path / "vdl" / mode).glob("vdlrecords.*")
        losses = visualdl.LogReader(file_path=str(log)).get_data("scalar", "train/loss")
        assert len(losses) == rows[mode]["micro_batches"], f"{mode}: a loss per micro-batch"
        assert rows[mode]["micro_batches"] >= rows[mode]["steps"]


def test_offline_default_trains_on_the_shipped_chnsenticorp_and_max_steps_stops(
    tmp_path: Path,
) -> None:
    offline = tmp_path / "offline"
    offline.mkdir()
    (offline / "sitecustomize.py").write_text(NO_NETWORK)  # every connection refused
    path = os.pathsep.join(p for p in (str(offline), os.environ.get("PYTHONPATH", "")) if p)
    done = run(
        "--model",
        "tiny",
        "--modes",
        "bucket",
        "--epochs",
        "1",
        "--max-train-samples",
        "300",
        "--max-steps",
        "2",
        "--max-len",
        "64",
        "--output-dir",
        str(tmp_path / "out"),
        env={**os.environ, "PYTHONPATH": path},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    said = done.stdout
    assert "ChnSentiCorp is not reachable (offline?)" in said, "says it is offline"
    assert "7,766 ChnSentiCorp hotel reviews shipped with the examples" in said, "its namesake"
    assert "character vocabulary" in said, "says it built a vocabulary"
    meta = json.loads((tmp_path / "out" / "results.json").read_text())["meta"]
    assert (
        meta["source"].startswith("ChnSentiCorp hotel reviews shipped") and meta["model"] == "tiny"
    )
    assert meta["train_samples"] == 300 and meta["dev_samples"] == 776, "a tenth of 7,765 held out"
    row = json.loads((tmp_path / "out" / "results.json").read_text())["rows"][0]
    assert row["steps"] == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--modes", "fixed,sorted"], "unknown mode(s) ['sorted']"),
        (["--modes", ","], "--modes names no mode; choose from fixed, "),
        (  # the plan's flags shape the study's modes only: unused, they are refused
            ["--pack", "--batch-size-multiple", "8"],
            "--batch-size-multiple=8 plans only the modes fill, shuffle, ascending, bucket, ",
        ),
        (["--data-file", "no/such.csv"], "data file not found: no/such.csv"),
        (["--data-file", "{bad}"], "must name a 'label' column"),
        (["--data-file", "{ragged}"], "expected 2 fields, got 3"),
        (["--data-file", "{ragged}", "--vocab", "{vocab}"], "lacks [CLS], [SEP]"),
        (["--data-file", "{one}"], "one.csv has 1 sample(s): a train/dev split needs at least 2"),
        (["--data-file", "{negative}"], "negative.csv:3: label -1 is negative"),
        (["--epochs", "0"], "--epochs must be >= 1"),
        (["--time-budget", "soon"], "--time-budget must be auto, none or a positive number"),
        (["--max-cost", "-1"], "max_cost must be a positive finite number, got max_cost=-1"),
        (["--modes", "calibrated"], "modes calibrated need a memory target"),
        (["--modes", "dynamic,fill"], "modes fill need a memory target"),
        (["--fill", "1"], "--fill must be a fraction in (0, 1)"),
        (["--warmup", "2"], "--warmup must be a fraction of an epoch in [0, 1]"),
        (["--memory-target", "-5"], "--memory-target must be positive MiB, got -5.0"),
        (["--target-accuracy", "1.5"], "--target-accuracy must be a dev accuracy in (0, 1]"),
        (["--target-accuracy", "0"], "got --target-accuracy=0.0"),
        (["--time-table", "no/such.json"], "--time-table: 'no/such.json' is not a step-time"),
        (["--time-table", "{bad}"], "--time-table: '"),
        (["--modes", "group,fill"], "modes fill need a memory target"),
        (["--max-len", "513"], "--max-len must be at most 512 (BERT's max_position_embeddings)"),
        (["--pack", "--max-len", str(10**20)], "--max-len must be at most 512"),
        (  # rows of 512 tokens against the fixed batch's worst: one review of a few tokens
            [
                *("--data-file", "{short}", "--modes", "pack", "--batch-size", "1"),
                *("--epochs", "1", "--max-len", "512"),  # a GPU's default length, given here
            ],
            "mode pack (pack_len is --max-len): like_fixed: one row of pack_len=512 tokens",
        ),
    ],
)
def test_bad_input_exits_2_without_a_traceback(
    tmp_path: Path, args: list[str], message: str
) -> None:
    (tmp_path / "bad.csv").write_text("stars,review\n5,好\n", encoding="utf-8")
    (tmp_path / "ragged.csv").write_text("label,review\n1,好,多\n", encoding="utf-8")
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n好\n", encoding="utf-8")
    (tmp_path / "one.csv").write_text("label,review\n1,好\n", encoding="utf-8")
    (tmp_path / "negative.csv").write_text("label,review\n1,好\n-1,差\n", encoding="utf-8")
    (tmp_path / "short.csv").write_text("label,review\n" + "1,好\n0,差\n" * 5, encoding="utf-8")
    paths = {
        k: str(tmp_path / f"{k}.{'txt' if k == 'vocab' else 'csv'}")
        for k in ("bad", "ragged", "vocab", "one", "negative", "short")
    }
    done = run(
        *(a.format(**paths) for a in args), "--output-dir", str(tmp_path / "out"), timeout=300
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert message in done.stderr and "Traceback" not in done.stderr


def test_pack_mode_refused_before_the_fixed_mode_trains(tmp_path: Path) -> None:
    """Rows of --max-len over the fixed batch's worst were refused only once the pack mode ran,
    after the modes before it had trained; the parent now plans it first."""
    short = tmp_path / "short.csv"
    short.write_text("label,review\n" + "1,好\n0,差\n" * 5, encoding="utf-8")
    done = run(
        *("--data-file", str(short), "--modes", "fixed,pack", "--batch-size", "1"),
        *("--epochs", "1", "--max-len", "512", "--output-dir", str(tmp_path / "out")),
        timeout=300,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "mode pack (pack_len is --max-len): like_fixed: one row of pack_len=512" in done.stderr
    assert "== fixed ==" not in done.stdout, "refused before the fixed mode trained"


def test_recompute_amp_and_accumulation_flags_run(tmp_path: Path, chnsenticorp_csv: Path) -> None:
    done = run(
        "--data-file",
        str(chnsenticorp_csv),
        "--model",
        "tiny",
        "--modes",
        "bucket",
        "--recompute",
        "--amp",
        "--accumulate-tokens",
        "3000",
        "--max-train-samples",
        "120",
        "--max-len",
        "96",
        "--epochs",
        "1",
        "--output-dir",
        str(tmp_path),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    row = json.loads((tmp_path / "results.json").read_text())["rows"][0]
    assert row["steps"] >= 1 and row["every_sample_once"]


def test_group_sampler_groups_lengths_like_hugging_face() -> None:
    sampler_class = example_module("train_mode").LengthGroupedBatchSampler
    lengths = np.random.default_rng(0).integers(1, 200, size=1003)
    sampler = sampler_class(lengths, batch_size=8, seed=3, mega_batch_mult=5)
    epochs = []
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        epochs.append(batches)
        flat = [i for b in batches for i in b]
        assert len(batches) == len(sampler) == 126, "125 full batches and the short last one"
        assert sorted(flat) == list(range(1003)), "every sample once an epoch"
        assert [len(b) for b in batches] == [8] * 125 + [3]
        for start in range(0, 1003, 40):  # a mega-batch of 5 batches: longest first throughout
            assert (np.diff(lengths[flat[start : start + 40]]) <= 0).all(), f"mega at {start}"
    assert epochs[0] != epochs[1], "a new shuffle each epoch"
    sampler.set_epoch(0)
    assert list(sampler) == epochs[0], "the same (seed, epoch), the same batches"


def test_group_and_fill_planned_for_a_device_with_a_target(
    tmp_path: Path, chnsenticorp_csv: Path, bert_vocab: Path
) -> None:
    table = shared_file("h100_bert_base_step_times.json")
    common = (
        *("--data-file", str(chnsenticorp_csv), "--vocab", str(bert_vocab), "--model", "tiny"),
        *("--max-train-samples", "160", "--max-len", "64", "--batch-size", "16"),
        *("--time-table", str(table), "--fill", "0.5", "--lr", "0.001"),
    )
    never = run(
        *common,
        *("--modes", "fixed,group,fill", "--lr-scaling", "linear", "--epochs", "2"),
        *("--target-accuracy", "1", "--output-dir", str(tmp_path / "never")),
    )
    assert never.returncode == 0, never.stderr[-3000:]
    results = json.loads((tmp_path / "never" / "results.json").read_text())
    rows = {r["mode"]: r for r in results["rows"]}
    assert list(rows) == ["fixed", "group", "fill"], "fixed first, the others as asked"
    for mode, row in rows.items():
        assert row["epochs"] == 2.0 and row["epochs_to_target"] is None, f"{mode}: never reached"
        by_epoch = row["dev_accuracy_by_epoch"]
        assert len(by_epoch) == 2 and by_epoch[-1] == row["dev_accuracy"], f"{mode}: per epoch"
        assert row["target_accuracy"] == 1.0 and row["every_sample_once"]
    group, fixed, fill = rows["group"], rows["fixed"], rows["fill"]
    assert group["steps"] == fixed["steps"] == 2 * 10, "group: the fixed batch's updates"
    assert group["padding_efficiency"] > fixed["padding_efficiency"], "near-equal lengths"
    assert group["lr"] == fixed["lr"] == 0.001, "a batch of --batch-size: no lr scaling"
    assert "target_mb" not in fill and fill["time_table"] == str(table), "not calibrated here"
    assert fill["fill_max_cost"] == 512 * 128, "the table's largest measured batch"
    per_update = 160 / (fill["steps"] / 2)  # samples per update (every epoch has as many)
    assert per_update > 16, "filling the device: fewer, larger updates"
    assert fill["lr"] == pytest.approx(0.001 * per_update / 16), "linear: the mean update / B"
    summary = (tmp_path / "never" / "results.md").read_text()
    assert "Epochs to dev accuracy 1 (at most 2): fixed never, group never, fill never" in summary

    reached = run(
        *common,
        *("--modes", "fill", "--epochs", "3", "--target-accuracy", "0.01"),
        *("--output-dir", str(tmp_path / "reached")),
    )
    assert reached.returncode == 0, reached.stderr[-3000:]  # fill with a table: no memory target
    (row,) = json.loads((tmp_path / "reached" / "results.json").read_text())["rows"]
    assert row["epochs_to_target"] == 1 and row["epochs"] == 1.0, "stops at the first epoch"
    assert len(row["dev_accuracy_by_epoch"]) == 1 and row["lr"] == 0.001, "--lr-scaling none"


def test_pack_mode_trains_the_fixed_batchs_updates_packed_as_if_unpacked(
    tmp_path: Path, chnsenticorp_csv: Path, bert_vocab: Path
) -> None:
    done = run(
        *("--data-file", str(chnsenticorp_csv), "--vocab", str(bert_vocab), "--model", "tiny"),
        *("--modes", "fixed,pack", "--epochs", "1", "--max-train-samples", "300"),
        *("--max-len", "128", "--batch-size", "32", "--output-dir", str(tmp_path)),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    said = done.stdout
    assert "modes: fixed, pack; each 1 epoch of 300 reviews at --max-len 128" in said, said
    assert "\nestimated time: about " in said and "a rough estimate" in said, "before training"
    for mode in ("fixed", "pack"):
        assert f"\n{mode}: epoch 1/1: training loss " in said, f"{mode}: its epoch's line"
    assert "No ccache found" not in done.stderr, "paddle's notice, silenced in every process"
    assert "Setuptools is replacing distutils" not in done.stderr
    results = json.loads((tmp_path / "results.json").read_text())
    rows = {r["mode"]: r for r in results["rows"]}
    assert list(rows) == ["fixed", "pack"]
    pack = rows["pack"]
    assert set(pack) >= KEYS, "every documented key"
    assert pack["every_sample_once"] and pack["epochs"] == 1.0, "every review once an epoch"
    assert pack["steps"] == rows["fixed"]["steps"] == 10, "the fixed batch's updates"
    assert pack["padding_efficiency"] >= 0.9, "rows of --max-len nearly full"
    assert pack["padding_efficiency"] > rows["fixed"]["padding_efficiency"]
    assert "| pack |" in (tmp_path / "results.md").read_text()
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # the first micro-batch's loss, packed, is its reviews' loss each run alone
    import paddle

    import dynbatch

    train_mode = example_module("train_mode")
    meta = json.loads((tmp_path / "work" / "meta.json").read_text())
    train = example_module("corpus").TokenIds(np.load(tmp_path / "work" / "data.npz"), "train")
    paddle.seed(0)
    model = train_mode.build_model(meta)
    model.eval()  # no dropout: the same review gives the same logits
    sampler = dynbatch.DynamicBatchSampler(
        train, lengths=train.lengths, batch_size=32, seed=0, pack_len=128
    )
    first = next(iter(sampler))
    batch = train_mode.pack_collate(meta, 128)([train[i] for i in first])
    assert batch[0].shape[0] < len(first), "several reviews share a row"
    assert batch[-1].tolist() == list(first), "the labels follow the reviews"
    with paddle.no_grad():
        logits = train_mode.packed_logits(model, [paddle.to_tensor(a) for a in batch])
        packed = paddle.nn.functional.cross_entropy(
            logits, paddle.to_tensor(batch[-2]), reduction="none"
        ).numpy()
        alone = np.array(
            [
                float(
                    paddle.nn.functional.cross_entropy(
                        model(paddle.to_tensor(train[i][0][None])),
                        paddle.to_tensor([int(train[i][1])]),
                    )
                )
                for i in first
            ]
        )
    np.testing.assert_allclose(packed.ravel(), alone, atol=1e-5, rtol=0)
    assert abs(packed.mean() - alone.mean()) <= 1e-5, "the micro-batch's mean loss"


def test_pack_flag_adds_the_pack_mode_once() -> None:
    parse = example_module("bert_chnsenticorp").parse_args
    assert parse(["--modes", "fixed,dynamic", "--pack"]).modes == ["fixed", "dynamic", "pack"]
    assert parse(["--modes", "pack,fixed", "--pack"]).modes == ["fixed", "pack"], "fixed first"
    assert "pack" not in parse([]).modes, "a mode on request"


def test_pack_alone_runs_the_fixed_batch_its_recipe_and_packed() -> None:
    """docs/packing.md: `--pack` runs fixed,dynamic,pack; it ran the seven default modes and
    pack."""
    parse = example_module("bert_chnsenticorp").parse_args
    assert parse(["--pack"]).modes == ["fixed", "dynamic", "pack"]
    assert parse(["--pack"]).pack_alone and not parse(["--pack", "--modes", "fixed"]).pack_alone


#: make demo's flags (the Makefile): every default that depends on the device given
DEMO = ["--model", "tiny", "--modes", "fixed,dynamic", "--epochs", "2", "--batch-size", "32"]
DEMO += ["--max-train-samples", "3000", "--max-len", "128", "--output-dir", "runs/demo"]


@pytest.mark.parametrize("gpu", [False, True])
def test_defaults_fit_the_device_and_flags_given_are_kept(
    monkeypatch: pytest.MonkeyPatch, gpu: bool
) -> None:
    """On a CPU --max-len 512 and --model auto (bert-base-chinese when reachable) over every
    review meant hours: a CPU's defaults are the tiny model, 128 tokens and 3,000 reviews."""
    example = example_module("bert_chnsenticorp")
    monkeypatch.setattr(example, "gpu_available", lambda: gpu)
    args = example.parse_args([])
    if gpu:
        assert (args.model, args.max_len, args.max_train_samples) == ("auto", 512, 0)
        assert args.cpu_defaults == []
    else:
        assert (args.model, args.max_len, args.max_train_samples) == ("tiny", 128, 3000)
        assert args.cpu_defaults == ["--model tiny", "--max-len 128", "--max-train-samples 3000"]
    assert args.max_cost == 20 * args.max_len**2 / 4, "the study's budget at that length"
    demo = example.parse_args(DEMO)
    assert (demo.model, demo.max_len, demo.max_train_samples) == ("tiny", 128, 3000)
    assert demo.cpu_defaults == [] and demo.modes == ["fixed", "dynamic"], "make demo's own"
    given = example.parse_args(["--model", "auto", "--max-len", "64", "--max-train-samples", "0"])
    assert (given.max_len, given.max_train_samples) == (64, 0), "0: every review"


def test_the_run_says_its_modes_and_an_estimated_time_before_training(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    example = example_module("bert_chnsenticorp")
    monkeypatch.setattr(example, "gpu_available", lambda: False)
    lengths = np.random.default_rng(0).integers(10, 129, size=3000)
    args = example.parse_args(["--pack"])
    modes, estimate = example.header(args, "tiny", lengths, lengths[:300])
    assert (
        modes
        == "modes: fixed, dynamic, pack (--pack); each 2 epochs of 3000 reviews at --max-len 128"
    )
    assert estimate.startswith("estimated time: about ") and "a rough estimate" in estimate
    assert "(fixed " in estimate and ", dynamic " in estimate and ", pack " in estimate
    seconds = example.estimate_seconds(args, "tiny", lengths, lengths[:300])
    assert seconds["fixed"] > seconds["dynamic"], "the fixed batch computes its padding"
    assert 60 < sum(seconds.values()) < 20 * 60, "minutes on a CPU"
    base = example.estimate_seconds(args, "bert-base-chinese", lengths, lengths[:300])
    assert base["fixed"] > 10 * seconds["fixed"], "bert-base costs more than the tiny BERT"
    longer = example.parse_args(["--pack", "--epochs", "4"])
    assert (
        example.estimate_seconds(longer, "tiny", lengths, lengths[:300])["fixed"] > seconds["fixed"]
    )
    capped = example.parse_args(["--modes", "dynamic", "--max-steps", "3"])
    assert "estimated time: at most about" in example.header(capped, "tiny", lengths, lengths)[1]
    monkeypatch.setattr(example, "gpu_available", lambda: True)
    on_gpu = example.header(example.parse_args([]), "tiny", lengths, lengths)
    assert on_gpu[1] == "estimated time: none on a GPU (the rough per-mode costs are a CPU's)"


def test_the_fixed_batchs_token_slots_pad_each_batch_to_its_longest() -> None:
    slots = example_module("bert_chnsenticorp").fixed_batch_slots
    assert slots(np.array([1, 2, 3, 4]), 4, seed=0) == 16.0, "one batch of 4, padded to 4"
    assert slots(np.array([5, 5, 5]), 2, seed=0) == 15.0, "a last batch of one: no slot for it"
    lengths = np.random.default_rng(1).integers(1, 100, size=101)
    assert lengths.sum() <= slots(lengths, 8, seed=3) <= 99 * 101


def test_the_examples_silence_two_paddle_notices_and_no_other_warning() -> None:
    """Every mode's process printed paddle's "No ccache found" and setuptools' "Setuptools is
    replacing distutils"; the examples silence those two, before paddle is imported, and keep
    every other warning."""
    code = (
        "import warnings\n"
        "from corpus import quiet_paddle_notices\n"
        "quiet_paddle_notices()\n"
        "import paddle\n"
        "warnings.warn('No ccache found. (a repeat)', UserWarning)\n"
        "warnings.warn('Setuptools is replacing distutils.', UserWarning)\n"
        "warnings.warn('another notice', UserWarning)\n"
        "warnings.warn('No ccache found, but a DeprecationWarning', DeprecationWarning)\n"
    )
    path = os.pathsep.join(p for p in (str(EXAMPLES), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path}
    done = subprocess.run(
        [sys.executable, "-W", "default", "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "No ccache found. " not in done.stderr and "replacing distutils" not in done.stderr
    assert "another notice" in done.stderr, "other warnings still show"
    assert "No ccache found, but a DeprecationWarning" in done.stderr, "UserWarnings only"
    for script in ("bert_chnsenticorp.py", "sft_causal_lm.py", "trainer_chnsenticorp.py"):
        main = (EXAMPLES / script).read_text(encoding="utf-8").split('if __name__ == "__main__":')
        assert "quiet_paddle_notices()" in main[-1], f"{script}: every mode's process"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_mode_draws_its_progress_bar_on_a_terminal_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`make demo` was silent while a mode trained: a bar on a terminal's stderr, none in a
    pipe or a captured test (as `dynbatch stats`)."""
    corpus = example_module("corpus")
    piped = io.StringIO()
    monkeypatch.setattr(sys, "stderr", piped)
    bar = corpus.progress(3, "fixed")
    bar.update(3)
    bar.close()
    assert piped.getvalue() == "", "no bar in a pipe"
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    bar = corpus.progress(3, "fixed")
    bar.set_postfix({"epoch": "1/2", "loss": "0.6931"}, refresh=False)
    bar.update(3)
    bar.close()
    drawn = terminal.getvalue()
    assert "fixed: 100%" in drawn and "3/3" in drawn and "loss=0.6931" in drawn, drawn
