"""The plug-in's touches of PaddleFormers' CLI internals (``_cli_compat``): every name still
there in the installed PaddleFormers, and written nowhere else in the integration, so an upgrade
that renames one fails here, loudly, instead of the CLI silently training without dynbatch."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

pytest.importorskip("paddleformers.cli.train.sft.workflow")

from dynbatch.integrations.paddleformers import _cli_compat


def _owner(path: str) -> object:
    try:
        return importlib.import_module(path)
    except ModuleNotFoundError:
        module, _, name = path.rpartition(".")
        return getattr(importlib.import_module(module), name)


def test_every_name_the_plugin_touches_still_exists_in_paddleformers() -> None:
    import paddleformers

    assert _cli_compat.WRITTEN_FOR == "1.2.0"
    assert paddleformers.__version__.startswith(_cli_compat.WRITTEN_FOR), (
        f"paddleformers {paddleformers.__version__}: check each name of _cli_compat.TOUCHED "
        f"(written for {_cli_compat.WRITTEN_FOR}) and update WRITTEN_FOR"
    )
    for path, names in _cli_compat.TOUCHED.items():
        owner = _owner(path)
        for name in names:
            found = hasattr(owner, name) or any(  # an attribute its (bases') __init__ sets
                f"self.{name} =" in inspect.getsource(cls.__init__)
                for cls in getattr(owner, "__mro__", ())
                if cls.__module__.startswith("paddleformers")
            )
            assert found, f"{path} has no {name} any more: update _cli_compat"


def test_the_touched_names_are_written_only_in_cli_compat() -> None:
    package = Path(_cli_compat.__file__).parent
    private = {name for names in _cli_compat.TOUCHED.values() for name in names if name[0] == "_"}
    rebound = ("tuner.run_sft =", "tuner.run_dpo =", ".SFTTrainer =")
    found = [
        f"{path.name}: {needle}"
        for path in sorted(package.glob("*.py"))
        if path.name != "_cli_compat.py"
        for needle in (*sorted(private), ".raw_data", *rebound)
        if needle in path.read_text(encoding="utf-8")
    ]
    assert not found, f"PaddleFormers' CLI internals only in _cli_compat: {found}"


def test_installing_twice_wraps_run_sft_once_and_rebinds_the_trainer() -> None:
    from paddleformers.cli.train import tuner
    from paddleformers.cli.train.sft import workflow

    from dynbatch.integrations.paddleformers import sft_workflow

    before = (tuner.run_sft, tuner.run_dpo, workflow.SFTTrainer)
    try:
        sft_workflow.install()
        once = tuner.run_sft
        sft_workflow.install()
        assert tuner.run_sft is once and once.dynbatch, "one wrapper, not a wrapper of it"
        assert workflow.SFTTrainer is sft_workflow.dynamic_sft_trainer
    finally:
        tuner.run_sft, tuner.run_dpo, workflow.SFTTrainer = before
