"""`dynbatch stats` in process: every input kind, the JSON schema, the plot, the errors."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dynbatch import MemoryCost, plan_batches, plan_stats
from dynbatch.cli import main
from dynbatch.plan.stats import lower_bound_batches

TEXTS = ["好" * n for n in (3, 40, 7, 120, 15, 15, 60, 2, 90, 33)]
ROW_KEYS = {
    "name",
    "batches",
    "updates",
    "padding_efficiency",
    "batch_size_min",
    "batch_size_median",
    "batch_size_max",
    "cost_max",
    "cost_mean",
    "cost_cv",
    "utilization",
    "seconds",  # the predicted epoch time with a step time (--time-table), else null
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
    assert out["lower_bound_batches"] == lower_bound_batches(lens, 20000)
    rows = {r["name"]: r for r in out["rows"]}
    assert set(rows) == {
        "bucket",
        "shuffle",
        "ascending",
        "descending",
        "none",
        "fixed",
        "like fixed",
    }
    assert all(set(r) == ROW_KEYS for r in out["rows"]), "the documented schema"
    expected = plan_stats(lens, plan_batches(lens, 20000, order="ascending"), max_cost=20000)
    assert rows["ascending"]["batches"] == expected.batches
    assert rows["ascending"]["padding_efficiency"] == pytest.approx(expected.padding_efficiency)


def test_every_plan_counts_its_updates(capsys, inputs) -> None:
    lens = np.array([len(t) for t in TEXTS])
    out = run_json(capsys, str(inputs["npy"]), "--max-cost", "1e9", "--fixed-batch-size", "4")
    rows = {r["name"]: r for r in out["rows"]}
    assert rows["fixed"]["updates"] == rows["fixed"]["batches"] == -(-lens.size // 4)
    assert rows["bucket"]["updates"] == rows["bucket"]["batches"], "a batch, an update"
    recipe = rows["like fixed"]
    assert abs(recipe["updates"] - lens.size / 4) <= 1, "the fixed batch's updates"
    assert recipe["padding_efficiency"] >= rows["fixed"]["padding_efficiency"]
    grouped = run_json(
        capsys, str(inputs["npy"]), "--max-cost", "130", "--cost", "linear", "--update-size", "5"
    )
    rows = {r["name"]: r for r in grouped["rows"]}
    assert rows["bucket"]["batches"] > rows["bucket"]["updates"] == round(lens.size / 5)


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


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list:
    """The figures ``--plot`` saves, kept to be read through their Axes, as saved."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    figures: list[Figure] = []
    save = Figure.savefig

    def keep(self: Figure, *args: object, **kwargs: object) -> None:
        save(self, *args, **kwargs)
        figures.append(self)

    monkeypatch.setattr(Figure, "savefig", keep)
    return figures


def plotted(drawn: list, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple:
    """The plotted figure's three Axes and the JSON rows of the same command."""
    rows = rows_of(run_json(capsys, *argv))
    assert main(["stats", *argv, "--plot", str(Path(argv[0]).with_suffix(".png"))]) == 0
    capsys.readouterr()
    (fig,) = drawn
    return (*fig.axes, rows)


@pytest.mark.parametrize("pack", [[], ["--pack-len", "128"]])
def test_the_plot_draws_the_recommended_rows_like_fixed_and_packed(
    drawn: list, capsys: pytest.CaptureFixture[str], inputs: dict[str, Path], pack: list[str]
) -> None:
    """The docs recommend ``like fixed`` (and ``packed``), so the plot draws them against the
    fixed batch: not ``bucket``."""
    argv = [str(inputs["npy"]), "--max-cost", "20000", *pack]
    _, sizes, cost, rows = plotted(drawn, capsys, *argv)
    drawn_rows = [p.get_label().split(":")[0] for p in cost.patches if p.get_label()[0] != "_"]
    want = ["fixed 20", "like fixed", *(["packed"] if pack else [])]
    assert drawn_rows == want, drawn_rows
    labels = cost.get_legend_handles_labels()[1]
    for row in want[1:]:
        said = f"{row}: {rows[row]['batches']} batches,"
        assert any(label.startswith(said) for label in labels), (said, labels)
    histograms = {bars[0].get_label(): bars for bars in sizes.containers}
    assert list(histograms) == want[1:], "the batch sizes of the same rows"
    for row, bars in histograms.items():
        heights = sum(bar.get_height() for bar in bars)
        assert heights == rows[row]["batches"], (row, heights)
    assert rows["bucket"]["batches"] != rows["like fixed"]["batches"], "the rows tell apart"


def test_the_plot_counts_in_whole_ticks_and_its_legends_cover_no_line(
    drawn: list, capsys: pytest.CaptureFixture[str], inputs: dict[str, Path]
) -> None:
    """A histogram counts samples and batches: its y ticks are whole numbers, even for a
    corpus of ten. A legend is drawn beside the Axes, never over what they show."""
    argv = [str(inputs["npy"]), "--max-cost", "20000", "--pack-len", "128"]
    lengths, sizes, cost, _ = plotted(drawn, capsys, *argv)
    for ax in (lengths, sizes):
        low, high = ax.get_ylim()
        ticks = [t for t in ax.get_yticks() if low <= t <= high]
        assert len(ticks) >= 2 and all(t == int(t) for t in ticks), (ax.get_title(), ticks)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = cost.figure
    FigureCanvasAgg(fig).draw()  # drawn again as saved: pyplot.close let its canvas go
    renderer = fig.canvas.get_renderer()
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    assert len(legends) == 2, "the sizes' and the costs'"
    for legend in legends:
        box = legend.get_window_extent(renderer)
        for ax in fig.axes:
            assert not box.overlaps(ax.get_window_extent(renderer)), (ax.get_title(), box)


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


# -- stats agrees with the sampler (NOTE [ stats agrees with the sampler ] in dynbatch.cli) ----

OVER = np.array([30, 300, 45, 12, 280, 60, 9, 310, 25, 50] * 3)  # 9 samples over 200**2 alone


def test_oversize_is_refused_by_default_as_the_sampler_refuses_it(capsys, tmp_path: Path) -> None:
    from dynbatch import DynamicBatchSampler

    path = tmp_path / "over.npy"
    np.save(path, OVER)
    with pytest.raises(ValueError, match=r"9 sample\(s\) are over budget") as sampler_error:
        DynamicBatchSampler(lengths=OVER, max_cost=200**2)
    assert main(["stats", str(path), "--max-cost", str(200**2), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "9 sample(s) are over --max-cost=40000 even alone" in err, "the sampler's count"
    assert f"the first is {path}[1] (length 300" in err, "the first one, by index"
    assert "The sampler refuses them (--oversize error)" in err
    assert "sample 1 has length 300" in str(sampler_error.value), "the same first sample"


@pytest.mark.parametrize("oversize", ["skip", "alone"])
def test_the_bucket_row_is_the_samplers_plan(capsys, tmp_path: Path, oversize: str) -> None:
    from dynbatch import DynamicBatchSampler

    path = tmp_path / "over.npy"
    np.save(path, OVER)
    out = run_json(capsys, str(path), "--max-cost", str(200**2), "--oversize", oversize)
    assert out["oversize"] == 9 and out["oversize_policy"] == oversize
    with pytest.warns(UserWarning) if oversize == "skip" else contextlib.nullcontext():
        sampler = DynamicBatchSampler(lengths=OVER, max_cost=200**2, oversize=oversize)
    rows = {r["name"]: r for r in out["rows"]}
    assert rows["bucket"]["batches"] == len(sampler), "stats plans what the sampler plans"
    batches = list(sampler)
    real = sum(int(OVER[b].sum()) for b in batches)
    padded = sum(len(b) * int(OVER[b].max()) for b in batches)
    assert rows["bucket"]["padding_efficiency"] == pytest.approx(real / padded)
    if oversize == "skip":
        assert rows["fixed"]["batches"] == -(-21 // 20), "the baseline skips them too"
        assert rows["bucket"]["utilization"] <= 1.0
    else:
        assert rows["bucket"]["cost_max"] == 310**2, "each alone, over budget, as trained"


def test_text_output_says_what_the_sampler_does_with_oversize(capsys, tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    # quoted fields across lines: the named line is where the row starts in the file
    rows = ['"a\nb"', "short", '"' + "长" * 250 + '"', "ok"]
    path.write_text("review\n" + "\n".join(rows) + "\n", encoding="utf-8")
    argv = ["stats", str(path), "--column", "review", "--max-cost", "10000", "--no-progress"]
    assert main([*argv, "--oversize", "skip"]) == 0
    out = capsys.readouterr().out
    assert f"1 sample(s) are over --max-cost=10000 even alone; the first is line 5 of {path}" in out
    assert "--oversize skip: the sampler leaves them out" in out
    assert main([*argv, "--oversize", "alone"]) == 0
    assert "--oversize alone: the sampler gives each a batch of its own" in capsys.readouterr().out


def test_json_carries_what_the_text_says(capsys, inputs) -> None:
    out = run_json(capsys, str(inputs["npy"]), "--max-cost", "20000", "--cost", "linear")
    lens = np.array([len(t) for t in TEXTS])
    assert out["samples"] == lens.size
    assert (out["length_min"], out["length_max"]) == (lens.min(), lens.max())
    assert out["length_median"] == np.median(lens)
    assert (out["max_cost"], out["cost"], out["oversize"]) == (20000, "linear", 0)


# -- inputs that are normal, and inputs that are not ------------------------------------------


def test_empty_rows_name_their_line_and_can_be_skipped(capsys, tmp_path: Path) -> None:
    path = tmp_path / "empty.csv"
    path.write_text('review\nhello\n""\nfoo\n', encoding="utf-8")
    argv = ["stats", str(path), "--column", "review", "--max-cost", "1000", "--json"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"line 3 of {path} is empty (0 characters)" in err
    assert "--add" in err and "--skip-empty" in err
    assert run_json(capsys, *argv[1:-1], "--skip-empty")["samples"] == 2
    assert run_json(capsys, *argv[1:-1], "--add", "2")["length_min"] == 2


def test_a_csv_field_longer_than_the_csv_default_limit(capsys, tmp_path: Path) -> None:
    path = tmp_path / "long.csv"
    path.write_text('review\nshort\n"' + "x" * 200_000 + '"\n', encoding="utf-8")
    out = run_json(capsys, str(path), "--column", "review", "--max-cost", "1e12")
    assert out["length_max"] == 200_000
    import csv

    assert csv.field_size_limit() == 131072, "the csv module's limit is restored"


def test_jsonl_tokens_are_counted_as_tokens(capsys, tmp_path: Path) -> None:
    path = tmp_path / "tok.jsonl"
    path.write_text('{"ids": [1, 2, 3]}\n\n{"ids": "hello"}\n', encoding="utf-8")
    out = run_json(capsys, str(path), "--field", "ids", "--max-cost", "1000")
    assert (out["samples"], out["length_min"], out["length_max"]) == (2, 3, 5)


def test_real_bugs_keep_their_traceback(inputs, monkeypatch: pytest.MonkeyPatch) -> None:
    import dynbatch.cli

    def broken(*args: object, **kwargs: object) -> None:
        raise ValueError("a bug, not bad input")

    monkeypatch.setattr(dynbatch.cli, "compare_orders", broken)
    with pytest.raises(ValueError, match="a bug, not bad input"):
        main(["stats", str(inputs["npy"]), "--max-cost", "20000"])


def test_argument_errors_are_one_line_too(capsys, inputs) -> None:
    assert main(["stats", str(inputs["npy"]), "--max-cost", "abc"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dynbatch stats: error: argument --max-cost: invalid float value")
    assert len(err.strip().splitlines()) == 1


def test_the_lower_bound_holds_for_a_calibrated_cost(capsys, tmp_path: Path) -> None:
    """A MemoryCost charges c (and its floor) once per batch: the bound must still hold."""
    lens = tmp_path / "lens.npy"
    np.save(lens, np.random.default_rng(0).integers(5, 120, 1000))
    cost = tmp_path / "calib.json"
    MemoryCost(c=20.0, a=0.002, b=1e-5).save(cost)
    out = run_json(capsys, str(lens), "--cost-file", str(cost), "--max-cost", "30")
    planned = min(r["batches"] for r in out["rows"] if r["name"] != "fixed")
    assert 0 < out["lower_bound_batches"] <= planned, (out["lower_bound_batches"], planned)


# -- stats learns the device: --time-table ------------------------------------------------------
def write_table(path: Path, rows: list[list[float]]) -> Path:
    path.write_text(json.dumps({"columns": ["n", "L", "step_s"], "rows": rows}))
    return path


def test_stats_with_a_step_time_table_prices_every_plan_and_follows_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lengths = tmp_path / "lengths.npy"
    np.save(lengths, np.random.default_rng(0).integers(5, 200, 600))
    flat = write_table(  # a device whose step costs 1 s at any shape measured
        tmp_path / "flat.json", [[n, L, 1.0] for n in (1, 64, 4096) for L in (8, 256)]
    )
    out = run_json(
        capsys,
        str(lengths),
        "--cost",
        "linear",
        "--max-cost",
        "6400",
        "--fixed-batch-size",
        "32",
        "--time-table",
        str(flat),
    )
    rows = {r["name"]: r for r in out["rows"]}
    assert rows["fixed"]["seconds"] == pytest.approx(rows["fixed"]["batches"]), "1 s a batch"
    assert all(r["seconds"] == pytest.approx(r["batches"]) for r in rows.values())
    like = rows["like fixed"]
    assert like["batches"] == like["updates"] == rows["fixed"]["updates"], "one batch an update"
    assert main(["stats", str(lengths), "--cost", "linear", "--max-cost", "6400"]) == 0
    plain = capsys.readouterr().out
    assert "epoch s" not in plain, "no step time, no time columns"
    assert (
        main(
            [
                "stats",
                str(lengths),
                "--cost",
                "linear",
                "--max-cost",
                "6400",
                "--time-table",
                str(flat),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "epoch s" in text and "vs fixed" in text and "1.00x" in text


def test_stats_refuses_a_bad_time_table_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lengths = tmp_path / "lengths.npy"
    np.save(lengths, np.arange(1, 50))
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main(["stats", str(lengths), "--max-cost", "1e6", "--time-table", str(bad)]) == 2
    assert "--time-table" in capsys.readouterr().err


@pytest.mark.parametrize("cell", ["fast", {}, None])
def test_stats_refuses_a_time_table_cell_that_is_not_a_number_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cell: object
) -> None:
    lengths = tmp_path / "lengths.npy"
    np.save(lengths, np.arange(1, 50))
    bad = write_table(tmp_path / "bad.json", [[1, 8, 0.1], [2, 8, cell]])
    assert main(["stats", str(lengths), "--max-cost", "1e6", "--time-table", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "--time-table" in err and "row 1" in err and len(err.strip().splitlines()) == 1


# -- issue 28: every flag works, every row fits the budget, the output can be piped -------------
def corpus(tmp_path: Path, n: int = 600, seed: int = 0) -> Path:
    path = tmp_path / "lengths.npy"
    np.save(path, np.random.default_rng(seed).integers(5, 200, n))
    return path


def rows_of(out: dict) -> dict[str, dict]:
    return {r["name"]: r for r in out["rows"]}


def test_a_time_model_alone_prices_every_row_and_drives_like_fixed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--time-model`` needs no ``--update-size``: it is a step time, as ``--time-table`` is."""
    path = corpus(tmp_path)
    argv = [str(path), "--cost", "linear", "--max-cost", "6400", "--fixed-batch-size", "32"]
    rows = rows_of(run_json(capsys, *argv, "--time-model", "1,0,0"))  # 1 s a step, any shape
    assert all(r["seconds"] == pytest.approx(r["batches"]) for r in rows.values())
    like = rows["like fixed"]
    assert like["batches"] == like["updates"] == rows["fixed"]["updates"], "one batch an update"


def test_the_fixed_batch_flag_has_its_own_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--batch-size`` is the fixed batch (``like_fixed``'s ``batch_size``), never an
    abbreviation of ``--batch-size-multiple``."""
    path = corpus(tmp_path)
    argv = [str(path), "--cost", "linear", "--max-cost", "6400"]
    short = rows_of(run_json(capsys, *argv, "--batch-size", "32"))
    named = rows_of(run_json(capsys, *argv, "--fixed-batch-size", "32"))
    assert short == named
    assert short["fixed"]["batch_size_max"] == 32


@pytest.mark.parametrize("flag", ["--batch-size-m", "--max-c", "--fixed", "--no-prog"])
def test_abbreviated_flags_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    path = corpus(tmp_path)
    assert main(["stats", str(path), "--max-cost", "6400", flag, "8"]) == 2
    assert f"unrecognized arguments: {flag}" in capsys.readouterr().err


def test_every_argument_parser_refuses_abbreviations() -> None:
    """argparse reads an unknown prefix as the flag it abbreviates (``--batch-size 32`` as
    ``--batch-size-multiple 32``): every parser of the repository turns that off."""
    root = Path(__file__).resolve().parents[1]
    found = []
    for path in sorted(root.glob("*/**/*.py")):
        if any(part.startswith(".") for part in path.relative_to(root).parts):
            continue  # .venv, .venv-pf (make test's second venv), caches: not the repository's
        text = path.read_text(encoding="utf-8")
        for call in re.finditer(r"(?<!class )\b(ArgumentParser|add_parser|_?Parser)\(", text):
            depth, end = 1, call.end()
            while depth:
                depth += {"(": 1, ")": -1}.get(text[end], 0)
                end += 1
            found.append(path.name)
            assert "allow_abbrev=False" in text[call.end() : end], (
                f"{path.relative_to(root)}: {text[call.start() : end]} without allow_abbrev=False"
            )
    assert "args.py" in found and "bert_chnsenticorp.py" in found


def test_group_by_length_adds_the_grouped_recipe(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = corpus(tmp_path)
    argv = [str(path), "--cost", "linear", "--max-cost", "6400", "--fixed-batch-size", "32"]
    rows = rows_of(run_json(capsys, *argv, "--group-by-length"))
    grouped = rows["grouped"]
    assert grouped["updates"] == rows["fixed"]["updates"], "the fixed batch's update count"
    assert grouped["padding_efficiency"] > rows["fixed"]["padding_efficiency"] + 0.2
    timed = rows_of(run_json(capsys, *argv, "--group-by-length", "--time-model", "1,0,0"))
    assert timed["grouped"]["seconds"] == pytest.approx(timed["grouped"]["batches"])


@pytest.mark.parametrize("step", [["--time-model", "0.01,1e-6,0"], ["--time-model", "1,0,0"], []])
@pytest.mark.parametrize("extra", [[], ["--group-by-length"], ["--buffer-size", "50"]])
def test_every_row_but_the_fixed_baseline_fits_the_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], step: list[str], extra: list[str]
) -> None:
    """Each planned row is a sampler's plan, and a sampler keeps every batch within
    ``--max-cost``; the fixed row is the batch used today, whatever it costs."""
    path = corpus(tmp_path)
    budget = 2000  # below cost(32, 199) = 6368 of the fixed batch's worst
    argv = [str(path), "--cost", "linear", "--max-cost", str(budget), "--fixed-batch-size", "32"]
    rows = rows_of(run_json(capsys, *argv, *step, *extra))
    assert rows["fixed"]["cost_max"] > budget, "the case that matters"
    for name, row in rows.items():
        if name != "fixed":
            assert row["cost_max"] <= budget, (name, row["cost_max"])


def test_the_stream_row_is_priced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = corpus(tmp_path)
    argv = [str(path), "--cost", "linear", "--max-cost", "6400", "--buffer-size", "100"]
    rows = rows_of(run_json(capsys, *argv, "--time-model", "1,0,0"))
    stream = rows["stream 100"]
    assert stream["seconds"] == pytest.approx(stream["batches"]), "1 s a step"
    rows = rows_of(run_json(capsys, *argv, "--time-model", "0,1e-3,0"))  # padded tokens
    assert rows["stream 100"]["seconds"] == pytest.approx(
        rows["stream 100"]["batches"] * rows["stream 100"]["cost_mean"] * 1e-3
    )
    assert main(["stats", *argv, "--time-model", "1,0,0"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("stream"))
    assert line.split()[-2] == str(stream["batches"]), line


@pytest.mark.parametrize("grouped", [False, True], ids=["split", "grouped"])
def test_with_update_size_a_step_time_rows_are_what_the_sampler_and_the_stream_make(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], grouped: bool
) -> None:
    """``--update-size`` with a step time: the sampler and the stream given ``time_model=``
    split the updates at the step time, so the ``split`` and ``stream`` rows are their plans."""
    paddle = pytest.importorskip("paddle")  # noqa: F841
    from dynbatch import DynamicBatchIterable, DynamicBatchSampler

    lens = np.random.default_rng(0).lognormal(3.5, 0.8, 500).clip(1, 256).astype(np.int64)
    path = tmp_path / "l.npy"
    np.save(path, lens)
    flags = ["--update-size", "32", "--time-model", "0.01,1e-6,0"]
    flags += ["--group-by-length"] if grouped else []
    argv = [str(path), "--max-cost", "20000", "--cost", "linear", "--buffer-size", "100", *flags]
    rows = rows_of(run_json(capsys, *argv))
    options = {"max_cost": 20000, "cost": "linear", "update_size": 32}
    options.update(time_model="0.01,1e-6,0", group_by_length=grouped)

    def seconds(batches: list) -> float:
        return sum(0.01 + 1e-6 * len(b) * int(lens[list(b)].max()) for b in batches)

    sampler = DynamicBatchSampler(lengths=lens, **options)  # type: ignore[arg-type]
    planned = list(sampler)
    assert rows["split"]["batches"] == len(planned), "the sampler's plan"
    assert rows["split"]["updates"] == sampler.steps_for_epochs([0])
    assert rows["split"]["seconds"] == pytest.approx(seconds(planned))
    it = DynamicBatchIterable(
        list(range(lens.size)),
        length_fn=lambda i: int(lens[i]),
        buffer_size=100,
        num_replicas=1,
        rank=0,
        **options,  # type: ignore[arg-type]
    )
    read = list(it)
    assert rows["stream 100"]["batches"] == len(read), "the stream's plan"
    assert rows["stream 100"]["updates"] == it.steps_for_epochs([0])
    assert rows["stream 100"]["seconds"] == pytest.approx(seconds(read))


FLAG = re.compile(r"(?<![\w-])--[a-z][a-z-]*")

#: argv that reach each kind of refusal: argparse's, the flag checks', the options' own
BAD_ARGV = [
    ["--max-cost", "0"],
    ["--max-cost", "10", "--cost", "cubic"],
    ["--max-cost", "10", "--max-batch-size", "4", "--batch-size-multiple", "8"],
    ["--max-cost", "10", "--bucket-width", "7"],
    ["--max-cost", "10", "--update-size", "-1"],
    ["--max-cost", "10", "--update-unit", "tokens", "--update-size", "5", "--time-model", "1,0,0"],
    ["--max-cost", "10", "--time-model", "fast"],
    ["--max-cost", "10", "--time-model", "1,0,0", "--time-table", "missing.json"],
    ["--max-cost", "10", "--fixed-batch-size", "0"],
    ["--max-cost", "10", "--pad-to-multiple-of", "0"],
    ["--max-cost", "10", "--seed", "x"],
    ["--max-cost", "10", "--oversize", "drop"],
    ["--max-cost", "10", "--buffer-size", "0"],
    ["--max-cost", "10", "--pack-len", "0"],
    ["--max-cost", "1e9", "--pack-len", "50"],
    ["--max-cost", "10", "--pack-len", "256"],
    ["--max-cost", "10", "--truncate", "0"],
    ["--max-cost", "10", "--plot", "x.gif"],
    ["--max-cost", "10", "--cost", "linear", "--cost-file", "c.json"],
    ["--max-cost", "10", "--unknown"],
    [],
]


@pytest.mark.parametrize("argv", BAD_ARGV, ids=lambda a: " ".join(a) or "nothing")
def test_errors_name_only_flags_that_exist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    from dynbatch.cli.args import parser

    stats = parser()._subparsers._group_actions[0].choices["stats"]  # type: ignore[union-attr]
    flags = {s for action in stats._actions for s in action.option_strings}
    path = corpus(tmp_path, n=50)
    assert main(["stats", str(path), *argv]) == 2
    err = capsys.readouterr().err
    named = set(FLAG.findall(err))
    assert named <= flags | {"--unknown"}, (named - flags, err)


def test_the_sources_name_only_flags_that_exist() -> None:
    """Every ``--flag`` written in the command's sources (messages, help) is a flag of it."""
    from dynbatch.cli.args import parser

    stats = parser()._subparsers._group_actions[0].choices["stats"]  # type: ignore[union-attr]
    flags = {s for action in stats._actions for s in action.option_strings}
    src = Path(__file__).resolve().parents[1] / "src" / "dynbatch"
    for path in [*sorted((src / "cli").glob("*.py")), src / "plan" / "stats.py"]:
        named = set(FLAG.findall(path.read_text(encoding="utf-8")))
        assert named <= flags, (path.name, sorted(named - flags))


def test_piping_into_head_exits_quietly(tmp_path: Path) -> None:
    """The reader of the pipe is gone before the table is written: no traceback."""
    path = corpus(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "dynbatch", "stats", str(path), "--max-cost", "1e6"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # as `head` does once it has its lines
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) in (0, 141), err
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    shell = subprocess.run(
        f'"{sys.executable}" -m dynbatch stats "{path}" --max-cost 1e6 | head -n 1',
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shell.stdout.startswith("600 samples") and "Traceback" not in shell.stderr


def test_help_explains_every_column_and_how_to_pick_the_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = corpus(tmp_path)
    argv = [str(path), "--cost", "linear", "--max-cost", "6400", "--buffer-size", "100"]
    argv += ["--pack-len", "256"]
    assert main(["stats", *argv, "--time-model", "0.01,1e-6,0"]) == 0
    head = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("order"))
    columns = re.split(r"\s{2,}", head.strip())
    assert len(columns) == 13, columns
    with pytest.raises(SystemExit) as exit_:
        main(["stats", "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    epilog = text[text.index("rows (") :]
    for column in columns:
        assert re.search(rf"^\s+{re.escape(column)}\s{{2,}}\S", epilog, re.M), column
    for row in ("bucket", "shuffle", "fixed", "like fixed", "grouped", "stream N", "packed"):
        assert re.search(rf"^\s+{re.escape(row)}\s{{2,}}\S", epilog, re.M), row
    assert "B·L²" in epilog and "--max-cost" in epilog


def test_vs_fixed_is_a_plain_speed_up_only_at_the_fixed_batchs_updates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``vs fixed`` is the fixed row's epoch s / the row's. Rows that make the fixed batch's
    updates (like fixed, packed) run the same training: a plain ratio. A row that makes other
    updates (bucket: fewer, larger ones) is another training: its ratio is marked ``*``, and a
    legend under the table gives its update count and says what the ratio compares."""
    path = corpus(tmp_path)
    argv = [str(path), "--cost", "linear", "--max-cost", "6400", "--fixed-batch-size", "32"]
    argv += ["--pack-len", "256", "--time-model", "0.01,1e-6,0"]
    rows = rows_of(run_json(capsys, *argv))
    fixed = rows["fixed"]["updates"]
    assert rows["like fixed"]["updates"] == rows["packed"]["updates"] == fixed
    assert rows["bucket"]["updates"] < fixed, "the case of the report: fewer, larger updates"
    assert main(["stats", *argv]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("order"))
    table = lines[head + 1 : head + 1 + len(rows)]
    cells = {re.split(r"\s{2,}", line)[0]: line.split()[-1] for line in table}
    for name, row in rows.items():
        ratio = f"{rows['fixed']['seconds'] / row['seconds']:.2f}x"
        same = row["updates"] == fixed
        assert cells[name] == (ratio if same else ratio + "*"), (name, row["updates"], fixed)
    legend = " ".join(line.strip() for line in lines[head + 1 + len(rows) :])
    assert legend.startswith("* "), legend
    assert f"other than fixed's {fixed} (" in legend, legend
    for name, row in rows.items():
        listed = f"{name} {row['updates']}"
        assert (listed in legend) == (row["updates"] != fixed), (listed, legend)
    assert "not the same training" in legend, legend
    with pytest.raises(SystemExit):
        main(["stats", "--help"])
    epilog = capsys.readouterr().out
    entry = " ".join(epilog[epilog.index("  vs fixed ") : epilog.index("picking --max")].split())
    assert "makes the fixed batch's updates" in entry, entry
    assert "Marked * where a row makes other updates" in entry, entry


def test_like_fixed_follows_a_time_table_within_the_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A flat step time asks for whole updates of the fixed batch; the budget still caps them."""
    path = corpus(tmp_path)
    flat = write_table(
        tmp_path / "flat.json", [[n, L, 1.0] for n in (1, 64, 4096) for L in (8, 256)]
    )
    argv = [str(path), "--cost", "linear", "--max-cost", "2000", "--fixed-batch-size", "32"]
    rows = rows_of(run_json(capsys, *argv, "--time-table", str(flat)))
    assert rows["fixed"]["cost_max"] > 2000
    assert rows["like fixed"]["cost_max"] <= 2000
    assert rows["like fixed"]["updates"] == rows["fixed"]["updates"]


def test_the_packed_row_counts_micro_batches_and_is_never_slower_than_whole_updates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--pack-len``: the sampler's packed micro-batches as batches, the tokens they compute
    as laid out, the fixed batch's update count, and the epoch each update run packed, split
    or whole."""
    from dynbatch import DynamicBatchSampler, choose_packing
    from dynbatch.plan.packs import PackLayout

    path = corpus(tmp_path)
    lens = np.load(path)
    argv = [str(path), "--cost", "linear", "--max-cost", "6400", "--fixed-batch-size", "32"]
    rows = rows_of(run_json(capsys, *argv, "--pack-len", "256"))
    packed = rows["packed"]
    sampler = DynamicBatchSampler(lengths=lens, batch_size=32, pack_len=256, max_cost=6400,
                                  cost="linear")  # fmt: skip
    layout = PackLayout.from_options(sampler.options)
    shapes = [layout.rows(lens[b]) for b in sampler]
    computed = sum((offsets.size - 1) * width for offsets, width in shapes)
    assert packed["batches"] == len(sampler), "the sampler's micro-batches, as batches"
    assert packed["updates"] == rows["fixed"]["updates"] == 19
    assert packed["padding_efficiency"] == pytest.approx(lens.sum() / computed), "as laid out"
    # each update packed alone leaves a part-filled row: a tenth wasted at most
    assert packed["padding_efficiency"] > 0.9 > rows["fixed"]["padding_efficiency"]
    widest = max((offsets.size - 1) * width for offsets, width in shapes)
    assert packed["cost_max"] == widest <= 6400, "rows x their width, within budget"
    assert packed["seconds"] is None, "no step time, no seconds"
    model = "5,1e-3,0"  # a fixed part: packing wins where a long sample pads the short ones
    timed = rows_of(run_json(capsys, *argv, "--pack-len", "256", "--time-model", model))
    choice = choose_packing(lens, 256, batch_size=32, time_model=model, max_cost=6400,
                            cost="linear")  # fmt: skip
    assert timed["packed"]["seconds"] == pytest.approx(choice.epoch_seconds)
    assert choice.epoch_seconds <= choice.whole_seconds
    assert timed["packed"]["seconds"] < timed["fixed"]["seconds"], "faster than the fixed batch"
    assert main(["stats", *argv, "--pack-len", "256", "--time-model", model]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("packed"))
    assert line.split()[1] == str(len(choice.micro_batches)), line


@pytest.mark.parametrize("step", ["5,1e-3,0", "0.01,2e-5,0", "table"])
def test_the_packed_row_prices_the_samplers_own_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], step: str
) -> None:
    """One code path: ``stats --pack-len N`` with a step time prices the epoch the sampler
    plans with the same options (NOTE [ choosing packing per update ])."""
    from dynbatch import DynamicBatchSampler, PlanOptions, StepTimeTable, choose_packing
    from dynbatch.plan.packs import packed_epoch_seconds

    path = corpus(tmp_path)
    lens = np.load(path)
    argv = [str(path), "--cost", "linear", "--max-cost", "6400", "--fixed-batch-size", "32"]
    if step == "table":  # a table is priced as measured: choose_packing, the same planner
        table = write_table(
            tmp_path / "t.json",
            [[n, L, 0.01 + 1e-5 * n * L] for n in (1, 8, 32, 64) for L in (8, 64, 256)],
        )
        timed = rows_of(run_json(capsys, *argv, "--pack-len", "256", "--time-table", str(table)))
        chosen = choose_packing(lens, 256, batch_size=32, time_model=StepTimeTable.load(table),
                                max_cost=6400, cost="linear")  # fmt: skip
        assert timed["packed"]["seconds"] == pytest.approx(chosen.epoch_seconds)
        return
    timed = rows_of(run_json(capsys, *argv, "--pack-len", "256", "--time-model", step))
    options = PlanOptions(max_cost=6400, cost="linear", pack_len=256, update_size=32,
                          order="shuffle", time_model=step)  # fmt: skip
    sampler = DynamicBatchSampler(lengths=lens, options=options)
    seconds = packed_epoch_seconds(sampler.epoch_plan(0), lens, options)
    assert timed["packed"]["seconds"] == pytest.approx(seconds), "the sampler's epoch"
    assert timed["packed"]["seconds"] <= timed["fixed"]["seconds"] * (1 + 1e-9), "never slower"


def sampler_row(lens: np.ndarray, **options: object) -> dict[str, object]:
    """What ``stats``' packed row must say of the packing sampler built with ``options``."""
    from dynbatch import DynamicBatchSampler
    from dynbatch.plan.packs import PackLayout
    from dynbatch.plan.windows import optimizer_steps

    sampler = DynamicBatchSampler(lengths=lens, **options)  # type: ignore[arg-type]
    layout = PackLayout.from_options(sampler.options)
    batches = list(sampler)  # epoch 0: one pass (the next pass is the next epoch)
    shapes = [layout.rows(lens[b]) for b in batches]
    sizes = [len(b) for b in batches]
    return {
        "batches": len(batches),
        "updates": optimizer_steps(sampler.epoch_plan(0), lens),
        "padding_efficiency": pytest.approx(
            lens.sum() / sum((offsets.size - 1) * width for offsets, width in shapes)
        ),
        "batch_size_min": min(sizes),
        "batch_size_max": max(sizes),
    }


def test_the_packed_row_pads_rows_to_pad_to_multiple_of_as_the_sampler_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--pad-to-multiple-of`` goes into the options the packed row is planned with: rows up
    to 256 tokens are 288 wide, so a micro-batch holds 3 rows of --max-cost 1100, not 4."""
    path = corpus(tmp_path)
    lens = np.load(path)
    argv = [str(path), "--cost", "linear", "--max-cost", "1100", "--fixed-batch-size", "32"]
    argv += ["--pack-len", "256"]
    plain = rows_of(run_json(capsys, *argv))["packed"]
    padded = rows_of(run_json(capsys, *argv, "--pad-to-multiple-of", "96"))["packed"]
    want = sampler_row(lens, batch_size=32, pack_len=256, max_cost=1100, cost="linear",
                       pad_to_multiple_of=96)  # fmt: skip
    assert {k: padded[k] for k in want} == want, "the sampler's packed epoch, padded rows"
    assert padded["batches"] > plain["batches"], "3 rows a micro-batch, not 4"


def test_the_packed_row_counts_updates_in_tokens_as_the_sampler_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--update-unit tokens``: the packed row's updates are the sampler's, of as many real
    tokens as --fixed-batch-size samples hold on average; a step time, which cuts no update in
    tokens (the sampler refuses one there), prices the epoch as it runs: packed rows."""
    path = tmp_path / "skewed.npy"
    rng = np.random.default_rng(3)
    np.save(path, np.minimum(np.ceil(rng.lognormal(3.5, 0.9, 600)), 250).astype(np.int64))
    lens = np.load(path)
    argv = [str(path), "--cost", "linear", "--max-cost", "6400", "--fixed-batch-size", "32"]
    argv += ["--pack-len", "256", "--update-unit", "tokens"]
    packed = rows_of(run_json(capsys, *argv))["packed"]
    options = {"batch_size": 32, "pack_len": 256, "max_cost": 6400, "cost": "linear"}
    want = sampler_row(lens, **options, update_unit="tokens")
    assert want != sampler_row(lens, **options), "tokens plan another epoch than samples here"
    assert {k: packed[k] for k in want} == want, "the sampler's packed epoch, in tokens"
    timed = rows_of(run_json(capsys, *argv, "--time-model", "5,1e-3,0"))["packed"]
    assert {k: timed[k] for k in want} == want, "a step time cuts no update in tokens"
    from dynbatch import DynamicBatchSampler
    from dynbatch.plan.packs import PackLayout

    sampler = DynamicBatchSampler(lengths=lens, **options, update_unit="tokens")  # type: ignore[arg-type]
    layout = PackLayout.from_options(sampler.options)
    shapes = [layout.rows(lens[b]) for b in sampler]
    seconds = sum(5 + 1e-3 * (offsets.size - 1) * width for offsets, width in shapes)
    assert timed["seconds"] == pytest.approx(seconds), "priced as laid out: packed rows"
