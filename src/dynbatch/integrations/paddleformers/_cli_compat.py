"""Every touch of PaddleFormers' CLI internals by the plug-in (:mod:`.sft_workflow`), in one place.

Written for paddleformers 1.2.0 (:data:`WRITTEN_FOR`). :data:`TOUCHED` names each module
attribute the plug-in rebinds and each private (or undocumented) name of the workflow's datasets
it reads; ``tests/paddleformers/test_cli_compat.py`` checks that the installed PaddleFormers
still has every one, and that no other module of the integration writes them, so an upgrade that
renames one fails loudly instead of silently training without dynbatch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Any

__all__ = [
    "TOUCHED",
    "WRITTEN_FOR",
    "generate_sequences",
    "is_map_dataset",
    "process_example",
    "raw_examples",
    "rebind_workflow",
    "run_sft",
]

#: The PaddleFormers release these touches were written for.
WRITTEN_FOR = "1.2.0"

_TUNER = "paddleformers.cli.train.tuner"
_WORKFLOW = "paddleformers.cli.train.sft.workflow"
_DATASETS = "paddleformers.datasets.SFTDataset"

#: Each module, or class by import path, whose names are touched here, with those names.
TOUCHED: dict[str, tuple[str, ...]] = {
    _TUNER: (
        "run_sft",  # rebound: looked up by run_tuner at its call
        "run_dpo",  # rebound: refused
    ),
    _WORKFLOW: (
        "SFTTrainer",  # rebound: looked up by run_sft when it builds the trainer
    ),
    f"{_DATASETS}.IteratorSFTDataset": (
        "_generate_sequences",  # called: one pass of the stream
    ),
    f"{_DATASETS}.MapSFTDataset": (
        "raw_data",  # read: the raw examples (set in __init__)
        "_current_processor_func",  # called: one raw example to a sequence (set in __init__)
    ),
}


def run_sft() -> Callable[..., Any]:
    """The workflow's ``run_sft`` as the tuner calls it now (dynbatch's wrapper once installed)."""
    return importlib.import_module(_TUNER).run_sft  # type: ignore[no-any-return]


def rebind_workflow(
    run_sft: Callable[..., Any], run_dpo: Callable[..., Any], sft_trainer: Callable[..., Any]
) -> None:
    """Make the tuner call ``run_sft`` and ``run_dpo``, and the SFT workflow build its trainer
    with ``sft_trainer``."""
    tuner = importlib.import_module(_TUNER)
    setattr(tuner, "run_sft", run_sft)  # noqa: B010 - a module's name, rebound
    setattr(tuner, "run_dpo", run_dpo)  # noqa: B010
    setattr(importlib.import_module(_WORKFLOW), "SFTTrainer", sft_trainer)  # noqa: B010


def is_map_dataset(dataset: Any) -> bool:
    """Whether ``dataset`` is the workflow's ``MapSFTDataset`` (else its iterable one)."""
    return isinstance(dataset, importlib.import_module(_DATASETS).MapSFTDataset)


def generate_sequences(dataset: Any) -> Iterator[Any]:
    """One pass of an ``IteratorSFTDataset``'s stream (its ``__iter__`` repeats for ever)."""
    return dataset._generate_sequences()  # type: ignore[no-any-return]


def raw_examples(dataset: Any) -> list[Any]:
    """A ``MapSFTDataset``'s raw examples, before its processor."""
    return dataset.raw_data  # type: ignore[no-any-return]


def process_example(dataset: Any, example: Any) -> Any:
    """A ``MapSFTDataset``'s processing of one raw example: a sequence, or None when skipped."""
    return dataset._current_processor_func(example, 1)
