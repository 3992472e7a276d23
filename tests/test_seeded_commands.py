"""Every README and docs command that takes a seed runs with a second seed: the seed sets the
split, the weights and the order of every mode, so a multi-seed run of any comparison works.

The commands run as written, in their own processes, cut down by their own size flags.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from example_runs import EXAMPLES, run_example

pytest.importorskip("paddlenlp")
ROOT = Path(__file__).resolve().parents[1]


def bert_example() -> object:
    sys.path.insert(0, str(EXAMPLES))
    try:
        return importlib.import_module("bert_chnsenticorp")
    finally:
        sys.path.remove(str(EXAMPLES))


@pytest.mark.parametrize("modes", ["fixed,dynamic", "fixed", "dynamic", "fixed,group,dynamic,pack"])
@pytest.mark.parametrize("seed", ["0", "1"])
def test_the_recipe_modes_take_any_seed(modes: str, seed: str) -> None:
    args = bert_example().parse_args(["--modes", modes, "--seed", seed])  # type: ignore[attr-defined]
    assert args.seed == int(seed), "the seed is kept, for the split, the weights and the order"


def test_the_recipe_modes_still_refuse_the_plans_own_flags() -> None:
    from corpus import UsageError

    with pytest.raises(UsageError, match=r"--max-cost=.* plans only the modes"):
        bert_example().parse_args(["--modes", "fixed,dynamic", "--max-cost", "5000"])  # type: ignore[attr-defined]


SMALL_BERT = ("--max-train-samples", "64", "--epochs", "1")


@pytest.mark.slow
def test_the_accuracy_benchmark_runs_the_main_comparison_over_two_seeds(tmp_path: Path) -> None:
    """The README's ``python benchmarks/accuracy.py --max-lens 256 --modes fixed,dynamic``,
    cut down: its second seed was refused."""
    done = subprocess.run(
        [
            *(sys.executable, str(ROOT / "benchmarks" / "accuracy.py"), "--max-lens", "32"),
            *("--modes", "fixed,dynamic", "--seeds", "0,1", *SMALL_BERT),
            *("--output-dir", str(tmp_path)),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for seed in (0, 1):
        rows = json.loads((tmp_path / f"L32_s{seed}" / "results.json").read_text())["rows"]
        assert [r["mode"] for r in rows] == ["fixed", "dynamic"], f"seed {seed}: both modes"
    assert "seeds 0,1" in done.stdout and "seed 0" in done.stdout and "seed 1" in done.stdout


@pytest.mark.slow
def test_the_pinyin_example_runs_two_seeds(tmp_path: Path) -> None:
    done = run_example(
        "seq2seq_pinyin.py",
        *("--seeds", "0,1", "--max-train-samples", "64", "--dev-samples", "16"),
        *("--epochs", "1", "--max-chars", "40", "--output-dir", str(tmp_path)),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads((tmp_path / "results.json").read_text())
    assert sorted({r["seed"] for r in rows}) == [0, 1], "a row per seed"
    assert "No ccache found" not in done.stderr, "paddle's notice, silenced"


@pytest.mark.slow
@pytest.mark.parametrize("seed", ["0", "1"])
def test_the_sft_example_runs_any_seed(tmp_path: Path, seed: str) -> None:
    """docs/sft.md's command over ``--seed 0``, ``1`` and ``2``, cut down."""
    done = run_example(
        "sft_causal_lm.py",
        *("--model", "tiny", "--runner", "loop", "--modes", "fixed,dynamic"),
        *("--epochs", "1", "--max-train-samples", "48", "--max-len", "48", "--batch-size", "8"),
        *("--seed", seed, "--output-dir", str(tmp_path)),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "No ccache found" not in done.stderr, "paddle's notice, silenced in every process"


def run_benchmark(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The benchmark in its own process; skipped where it skips itself (no shared data)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / name), *args],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode == 0 and done.stdout.startswith("skipped"):
        pytest.skip(done.stdout.strip())
    return done


@pytest.mark.slow
def test_the_seq2seq_benchmark_runs_two_seeds_into_its_output_dir(tmp_path: Path) -> None:
    """docs/seq2seq.md's ``python benchmarks/seq2seq_accuracy.py``, cut down."""
    done = run_benchmark(
        "seq2seq_accuracy.py",
        *("--seeds", "0,1", "--max-train-samples", "64", "--dev-samples", "16"),
        *("--epochs", "1", "--max-chars", "40", "--output-dir", str(tmp_path)),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads((tmp_path / "results.json").read_text())
    assert sorted({r["seed"] for r in rows}) == [0, 1], "a row per seed"
    assert "seeds 0,1" in done.stdout, "the gap of each seed's pair of modes, over both seeds"


@pytest.mark.slow
def test_the_sft_benchmark_runs_two_seeds_into_its_output_dir(tmp_path: Path) -> None:
    """docs/sft.md's ``python benchmarks/sft_accuracy.py``, cut down."""
    done = run_benchmark(
        "sft_accuracy.py",
        *("--seeds", "0,1", "--modes", "fixed,dynamic", "--max-train-samples", "48"),
        *("--epochs", "1", "--max-len", "48", "--batch-size", "8", "--output-dir", str(tmp_path)),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for seed in (0, 1):
        rows = json.loads((tmp_path / f"N48_L48_B8_E1_s{seed}" / "results.json").read_text())
        assert [r["mode"] for r in rows] == ["fixed", "dynamic"], f"seed {seed}: both modes"
    assert "seeds 0,1" in done.stdout
    assert "Per seed" in done.stdout, "each seed's loss and answer accuracy, beside the spread"


@pytest.mark.slow
def test_the_fill_benchmark_runs_two_seeds_into_its_output_dir(tmp_path: Path) -> None:
    """docs' ``python benchmarks/fill_accuracy.py``, cut down: equal epochs and to a target;
    docs/gpu.md's ``--parts a`` first, equal epochs alone, which the full run then reuses."""
    small = (
        *("--seeds", "0,1", "--max-train-samples", "64", "--max-len", "32"),
        *("--epochs", "1", "--cap", "2", "--scalings", "sqrt", "--output-dir", str(tmp_path)),
    )
    done = run_benchmark("fill_accuracy.py", *small, "--parts", "a")
    assert done.returncode == 0, done.stderr[-3000:]
    for seed in (0, 1):
        assert (tmp_path / f"L32_s{seed}" / "fill_sqrt_e1" / "results.json").exists(), seed
        assert not (tmp_path / f"L32_s{seed}" / "fill_sqrt_e2").exists(), "(b) did not run"
    assert "Per seed (a)" in done.stdout, "each seed's row of the equal-epochs table"
    assert "(b)" not in done.stdout
    done = run_benchmark("fill_accuracy.py", *small, "--reuse")
    assert done.returncode == 0, done.stderr[-3000:]
    for seed in (0, 1):
        assert (tmp_path / f"L32_s{seed}" / "fixed_group" / "results.json").exists(), seed
        assert (tmp_path / f"L32_s{seed}" / "fill_sqrt_e2" / "results.json").exists(), seed
    assert "seeds 0,1" in done.stdout
    assert "(b) Time to" in done.stdout


@pytest.mark.parametrize("parts", ["b", "a,b,c", ""])
def test_the_fill_benchmark_refuses_parts_it_cannot_run(parts: str) -> None:
    done = run_benchmark("fill_accuracy.py", "--parts", parts)
    assert done.returncode == 2
    assert "--parts must be a (equal epochs) or a,b" in done.stderr, done.stderr[-3000:]
    assert repr(parts) in done.stderr
