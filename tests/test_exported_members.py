"""The public names, and that the core works without paddle."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
import textwrap
import traceback
from pathlib import Path

import pytest

import dynbatch
from dynbatch import errors

SRC = Path(dynbatch.__file__).parent


def test_all_names_resolve() -> None:
    for name in dynbatch.__all__:
        assert getattr(dynbatch, name) is not None, name
    assert sorted(dynbatch.__all__) == dynbatch.__all__ == sorted(set(dynbatch.__all__))


def module_names() -> list[str]:
    """Every module of the package, by its dotted name (``dynbatch.memory.fit``, ...)."""
    names = []
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


@pytest.mark.parametrize("name", module_names())
def test_every_module_declares_what_it_exports(name: str) -> None:
    """``__all__`` in the source of every module, each name in it defined once imported."""
    path = SRC.parent / (name.replace(".", "/") + ".py")
    if not path.exists():
        path = SRC.parent / name.replace(".", "/") / "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    declared = [
        node
        for node in tree.body
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name) and target.id == "__all__"
    ]
    assert declared, f"{path.name} has no __all__"
    if name.rsplit(".", 1)[-1] == "__main__":
        return  # importing it runs the CLI
    try:
        module = importlib.import_module(name)
    except ImportError as exc:  # an optional dependency (paddlenlp) is not installed
        pytest.skip(f"{name}: {exc}")
    for exported in module.__all__:
        assert hasattr(module, exported), f"{name}.__all__ names {exported!r}, not defined"


def test_the_errors_are_public_in_dynbatch_errors() -> None:
    assert errors.__all__ == ["InputError", "InputTypeError"]
    from dynbatch import _checks

    for name in errors.__all__:
        error = getattr(errors, name)
        assert getattr(dynbatch, name) is error and getattr(_checks, name) is error, name
        assert error.__module__ == "dynbatch.errors" and error.__qualname__ == name
    assert repr(dynbatch.InputError) == "<class 'dynbatch.errors.InputError'>"
    assert issubclass(dynbatch.InputError, ValueError)
    assert issubclass(dynbatch.InputTypeError, dynbatch.InputError)
    assert issubclass(dynbatch.InputTypeError, TypeError)


def test_a_traceback_names_dynbatch_errors() -> None:
    for call, shown in [
        (lambda: dynbatch.plan_batches([3, 5], max_cost=0), "dynbatch.errors.InputError"),
        (lambda: dynbatch.plan_batches([3, 5], max_cost="9"), "dynbatch.errors.InputTypeError"),
    ]:
        with pytest.raises(dynbatch.InputError) as info:
            call()
        last = traceback.format_exception_only(info.type, info.value)[-1]
        assert last.startswith(f"{shown}: max_cost must be a positive finite number"), last


def test_internals_stay_in_their_modules() -> None:
    """Plumbing is reached through its module, not the package's public names."""
    assert "accumulation_windows" not in dynbatch.__all__, (
        "dynbatch.plan.windows.accumulation_windows"
    )
    from dynbatch.paddle import update

    assert update.__all__ == ["ExactMeanUpdate", "Update"]
    assert "safe_collate" in dynbatch.__all__, "the one public name of a collate error's way"
    for name in ("CollateError", "CollateFailure", "SafeCollate", "raise_failure"):
        assert name not in dynbatch.__all__, f"dynbatch.paddle.safe_collate.{name}"


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
        packs = dynbatch.plan_packs([5, 3, 9, 2], 12, batch_size=2)
        dynbatch.PackCollator(12)([[1] * 5, [2] * 3])
        dynbatch.safe_collate(dynbatch.Pad())([[1], [2, 3]])
        assert sorted(i for b in packs for i in b) == [0, 1, 2, 3]
        from dynbatch.plan.epochs import Epochs

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
        from dynbatch.plan.epochs import Epochs  # the samplers' state is paddle-free

        epochs = Epochs([5, 3, 9, 2], dynbatch.PlanOptions(max_cost=200, cost="linear"))
        assert [i for b in epochs.iterate() for i in b] == [3, 1, 0, 2], "a pass without paddle"
        try:
            dynbatch.DynamicBatchSampler
        except ImportError as exc:
            print(exc)
        """
    )
    assert "pip install paddlepaddle" in out.stdout, "a command that works before PyPI has dynbatch"
    assert "dynbatch[" not in out.stdout and "needs paddle" not in out.stdout


def test_the_cost_of_pairs_is_public() -> None:
    """``PairCost`` prices (source, target) pairs where the named costs price one length."""
    from dynbatch.plan.costs import PairCost

    assert "PairCost" in dynbatch.__all__ and dynbatch.PairCost is PairCost
    assert dynbatch.PairCost()(2, 3, 4) == 2 * (3**2 + 4**2 + 3 * 4), "n (Ls² + Lt² + Ls Lt)"
