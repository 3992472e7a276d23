"""dynbatch.calibrate on a real causal LM: paddlenlp's Qwen2, a token loss, AdamW, on CPU.

A causal LM's peak grows with its logits, ``n * L * vocab`` floats and their gradients, far
more than with its width: the n·L term of the fit has to carry them, and the fitted cost has
to predict steps of shapes it never probed, as tests/test_memory.py checks for an encoder.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from example_runs import EXAMPLES

import dynbatch
from dynbatch.memory import peak_memory_mib, reset_peak_memory

paddle = pytest.importorskip("paddle")
pytest.importorskip("paddlenlp")

sys.path.insert(0, str(EXAMPLES))  # the example's own model

VOCAB, MAX_LEN = 1000, 96
TOLERANCE = 0.10  # calibrate's own default: the error it promises on shapes it did not fit


def make_trainer(seed: int = 0) -> tuple[Any, Callable[[int, int], None]]:
    """The tiny Qwen2 of examples/sft_causal_lm.py and one training step of it on random ids."""
    from sft_mode import build_model

    paddle.seed(seed)
    model = build_model({"vocab_size": VOCAB, "pad_id": 0, "bos_id": 2, "eos_id": 3}, MAX_LEN)
    opt = paddle.optimizer.AdamW(1e-3, parameters=model.parameters())
    rng = np.random.default_rng(seed)

    def step(n: int, length: int) -> None:
        ids = paddle.to_tensor(rng.integers(4, VOCAB, size=(n, length)), dtype="int64")
        labels = ids.clone()
        labels[:, : length // 2] = -100  # a masked prompt, as in SFT
        loss_sum, count = dynbatch.token_loss(model(input_ids=ids)[0], labels)
        (loss_sum / count.astype("float32").clip(min=1)).backward()
        opt.step()
        opt.clear_grad()

    return model, step


@pytest.fixture(scope="module")
def calibrated() -> tuple[Callable[[int, int], None], dynbatch.MemoryCost]:
    model, step = make_trainer()
    return step, dynbatch.calibrate(step, max_len=MAX_LEN, restore=[model])


def measure(step: Callable[[int, int], None], n: int, length: int) -> float:
    reset_peak_memory()
    step(n, length)
    return peak_memory_mib()


def test_the_logits_make_the_per_token_term(calibrated: Any) -> None:
    _, cost = calibrated
    logits_mib = VOCAB * 4 / 2**20  # one float32 row of logits per token
    assert cost.a >= logits_mib, f"a={cost.a:.5f} MiB per token under the logits' {logits_mib}"
    assert cost.report.held_out_error <= cost.report.tolerance == TOLERANCE


@pytest.mark.parametrize(("n", "length"), [(3, 90), (40, 10), (9, 77), (70, 13), (1, 96)])
def test_the_cost_predicts_shapes_it_never_probed(calibrated: Any, n: int, length: int) -> None:
    step, cost = calibrated
    assert (n, length) not in {(p.n, p.length) for p in cost.report.probes}
    measure(step, n, length)  # the first step of a new shape may build kernels: not measured
    measured = measure(step, n, length)
    predicted = float(cost(n, length))
    assert abs(predicted - measured) / measured <= TOLERANCE, (n, length, measured, predicted)
