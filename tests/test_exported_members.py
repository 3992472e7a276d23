"""The public names, and that the core works without paddle."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import dynbatch


def test_all_names_resolve() -> None:
    for name in dynbatch.__all__:
        assert getattr(dynbatch, name) is not None, name
    assert sorted(dynbatch.__all__) == dynbatch.__all__ == sorted(set(dynbatch.__all__))


def test_internals_stay_in_their_modules() -> None:
    """Plumbing is reached through its module, not the package's public names."""
    assert "accumulation_windows" not in dynbatch.__all__, "dynbatch.windows.accumulation_windows"
    from dynbatch import update

    assert update.__all__ == ["ExactMeanUpdate", "Update"]


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True
    )


def test_planning_and_stats_import_no_paddle(tmp_path: Path) -> None:
    """paddle is installed here, so importing it would succeed: the check is that nobody does."""
    text = tmp_path / "r.txt"
    text.write_text("好的 hotel\n很好\n", encoding="utf-8")
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n好\n的\n很\nhotel\n", encoding="utf-8")
    out = run_python(
        f"""
        import json, sys
        import dynbatch
        from dynbatch.cli import main

        plan = dynbatch.plan_batches([5, 3, 9, 2], 200, cost="linear")
        assert sorted(i for b in plan for i in b) == [0, 1, 2, 3]
        dynbatch.plan_stats([5, 3, 9, 2], plan, cost="linear", max_cost=200)
        dynbatch.shard_plan(plan, [5, 3, 9, 2], 2, max_cost=200, cost="linear")
        dynbatch.Pad()([[1, 2], [3]])
        from dynbatch.epochs import Epochs

        epochs = Epochs([5, 3, 9, 2], dynbatch.PlanOptions(max_cost=10, cost="linear"), 2)
        state = epochs.state_dict()
        assert [i for b in epochs.iterate(1) for i in b], "rank 1 has batches"
        epochs.load_state_dict(state)
        epochs.seek(1, 1)
        assert len(epochs) == epochs.len_for_epochs([1]) - 1
        code = main(["stats", {str(text)!r}, "--max-cost", "100", "--json",
                     "--vocab", {str(vocab)!r}])
        assert code == 0, code
        heavy = ("paddle", "paddlenlp", "visualdl")
        print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in heavy)))
        """
    )
    imported = json.loads(out.stdout.strip().splitlines()[-1])
    assert imported == [], f"planning and `dynbatch stats --vocab` imported {imported[:5]}"


def test_without_paddle_the_samplers_say_how_to_install_it() -> None:
    out = run_python(
        """
        import sys
        sys.modules["paddle"] = None  # as if not installed
        import dynbatch
        dynbatch.plan_batches([5, 3, 9, 2], 200, cost="linear")
        from dynbatch.epochs import Epochs  # the samplers' state is paddle-free

        epochs = Epochs([5, 3, 9, 2], dynbatch.PlanOptions(max_cost=200, cost="linear"))
        assert [i for b in epochs.iterate() for i in b] == [3, 1, 0, 2], "a pass without paddle"
        try:
            dynbatch.DynamicBatchSampler
        except ImportError as exc:
            print(exc)
        """
    )
    assert 'pip install "dynbatch[cpu]"' in out.stdout
