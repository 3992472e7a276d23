"""What ``benchmarks/paddleformers_cli.py`` measures inside each CLI run: its YAML's
``custom_register_path`` is this file, which loads dynbatch's plug-in first when
``DYNBATCH_BENCH_PLUGIN=1``, then wraps whatever trainer the workflow makes.

Over training (the model in train mode) it counts the token positions the model computes (the
``input_ids`` it is fed: padding and packing included) and the allocator's peak, and writes
them with the run's real tokens to ``$DYNBATCH_BENCH_OUT`` (JSON) when training ends.
"""

from __future__ import annotations

import json
import os
from typing import Any

import paddle

if os.environ.get("DYNBATCH_BENCH_PLUGIN") == "1":
    import dynbatch.integrations.paddleformers.cli_plugin  # noqa: F401  (installs the plug-in)

from paddleformers.cli.train.sft import workflow
from paddleformers.trainer import TrainerCallback

__all__: list[str] = []

_make = workflow.SFTTrainer
_SEEN = {"computed": 0}


def _count(layer: Any, inputs: Any, kwargs: dict[str, Any]) -> None:
    ids = kwargs.get("input_ids", inputs[0] if inputs else None)
    if layer.training and ids is not None:
        _SEEN["computed"] += int(ids.shape[0]) * int(ids.shape[-1])


def _peak() -> int:
    return int(paddle.base.core.host_memory_stat_peak_value("Allocated", 0))


class _Measure(TrainerCallback):  # type: ignore[misc]
    """The allocator's peak, read at each step's end: dynbatch's log resets it at each log
    line, so the run's peak is the largest of these reads (the stock Trainer's never resets)."""

    peak = 0

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        paddle.base.core.host_memory_stat_reset_peak_value("Allocated", 0)

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.peak = max(self.peak, _peak())

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        peak = max(self.peak, _peak())
        out = os.environ.get("DYNBATCH_BENCH_OUT")
        if out and paddle.distributed.get_rank() == 0:
            with open(out, "w") as fh:
                json.dump({"computed": _SEEN["computed"], "peak_mib": peak / 2**20}, fh)


def _trainer(*args: Any, **kwargs: Any) -> Any:
    trainer = _make(*args, **kwargs)
    trainer.model.register_forward_pre_hook(_count, with_kwargs=True)
    trainer.add_callback(_Measure())
    return trainer


workflow.SFTTrainer = _trainer
