"""Running an example script as a user would: its own process, its output captured; and the
checks the examples' modules share across Trainers."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_example(
    name: str, *args: str, timeout: int = 900, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python examples/NAME ARGS...``, with stdout and stderr as text."""
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def check_shifted_labels_give_token_loss_mean(
    mode: Any, build_model: Callable[[dict[str, int], int], Any]
) -> None:
    """A model's own loss on the labels ``mode``'s collator shifts is ``token_loss``'s mean on
    the samples' own (NOTE [ paddlenlp's labels are already shifted ] in examples/sft_mode.py),
    for the model ``build_model(meta, hidden)`` of one Trainer's library (paddlenlp's Qwen2,
    PaddleFormers' Llama)."""
    import paddle

    import dynbatch

    paddle.seed(0)
    model = build_model({"vocab_size": 50, "pad_id": 0, "bos_id": 2, "eos_id": 3}, 32)
    rng = np.random.default_rng(0)
    samples: list[dict[str, Any]] = []
    for n in (7, 12, 20):
        ids = rng.integers(4, 50, n)
        samples.append({"input_ids": ids, "labels": np.where(np.arange(n) < n - 3, -100, ids)})
    plain = mode.collate_records(samples, 0, shift=False)
    shifted = mode.collate_records(samples, 0, shift=True)
    ids = paddle.to_tensor(plain["input_ids"])
    loss_sum, count = dynbatch.token_loss(
        model(input_ids=ids)[0], paddle.to_tensor(plain["labels"])
    )
    own = model(input_ids=ids, labels=paddle.to_tensor(shifted["labels"]))[0]
    assert int(count) == 9, "3 loss tokens a pair"
    assert float(own) == pytest.approx(float(loss_sum) / int(count), rel=1e-5)
