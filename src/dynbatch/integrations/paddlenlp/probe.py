"""The device's step time, measured on the Trainer's own model and batches.

NOTE [ the Trainer measures the step time ]
    Whether the fixed batch's updates should be cut into micro-batches
    depends on the device (NOTE [ splitting updates at the step time ] in
    :mod:`dynbatch.timing`): on a CPU cuts pay, on a GPU below its knee they
    cost a whole step each. The Trainer has the model, so with the recipe and
    no ``time_model=`` it times a few real training steps (forward, the
    loss, backward and an AdamW step, the device synchronised) on batches
    made from the longest training samples, tiled or cut to each probed shape,
    and fits ``c + n·L·(a + b·L)`` with its error. The weights are put back
    afterwards. Every rank probes and the ranks average the coefficients, so
    all plan alike. The model is written to ``output_dir`` and read back by a
    later Trainer of the same ``output_dir`` (a resume plans the same
    batches); ``time_model=None`` skips the probe, an object uses it as given.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import paddle
from numpy.typing import NDArray
from paddlenlp.utils.log import logger

from ...memory.counters import check_counter
from ...memory.fit import fit_polynomial
from ...memory.probe import measure
from ...timing import StepTimeModel, check_time_model
from .run import split_batch

__all__ = ["TIME_MODEL_FILE", "measure_time_model", "probe_batch"]

#: Where the measured step time is kept in ``output_dir``.
TIME_MODEL_FILE = "dynbatch_time_model.json"


def probe_batch(batch: Mapping[str, Any], n: int, length: int) -> dict[str, Any]:
    """``batch`` (a collated dict) with ``n`` rows and, where a field has one, ``length``
    columns: rows and columns repeat cyclically, so every value stays a real one.

    >>> b = {"ids": np.arange(6).reshape(2, 3), "label": np.array([0, 1])}
    >>> out = probe_batch(b, 3, 4)
    >>> out["ids"].tolist(), out["label"].tolist()
    ([[0, 1, 2, 0], [3, 4, 5, 3], [0, 1, 2, 0]], [0, 1, 0])
    """
    rows = next(int(v.shape[0]) for v in batch.values() if getattr(v, "ndim", 0) >= 1)
    cols = max((int(v.shape[1]) for v in batch.values() if getattr(v, "ndim", 0) >= 2), default=0)
    out: dict[str, Any] = {}
    for key, value in batch.items():
        if getattr(value, "ndim", 0) >= 1 and int(value.shape[0]) == rows:
            value = _take(value, np.arange(n) % rows, 0)
            if value.ndim >= 2 and int(value.shape[1]) == cols:
                value = _take(value, np.arange(length) % cols, 1)
        out[key] = value
    return out


def _take(value: Any, index: NDArray[Any], axis: int) -> Any:
    if isinstance(value, paddle.Tensor):
        return paddle.index_select(value, paddle.to_tensor(index), axis=axis)
    return np.take(np.asarray(value), index, axis=axis)


def measure_time_model(
    trainer: Any, dataset: Any, lengths: NDArray[Any], batch_size: int
) -> StepTimeModel:
    """The step time of ``trainer``'s model on its device (NOTE [ the Trainer measures ... ])."""
    path = os.path.join(trainer.args.output_dir, TIME_MODEL_FILE)
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            model = check_time_model(json.load(f), f"{path}'s time model")
        if model is not None:
            logger.info(f"dynbatch: step time read from {path}: {model}")
            return model
    longest = np.argsort(-lengths, kind="stable")[: max(1, batch_size)]
    collated = trainer.data_collator([dataset[int(i)] for i in longest])  # as the loader would:
    base = {k: paddle.to_tensor(v) if isinstance(v, np.ndarray) else v for k, v in collated.items()}
    top = int(lengths[longest[0]])
    shapes = sorted(
        {(n, max(1, top // d)) for d in (4, 1) for n in (1, max(1, batch_size // 2), batch_size)}
    )
    net = trainer.model
    optimizer = paddle.optimizer.AdamW(learning_rate=0.0, parameters=net.parameters())
    device = str(paddle.device.get_device())

    def step(n: int, length: int) -> None:
        batch, inputs = split_batch(
            probe_batch(base, n, length),
            trainer.label_names,
            trainer.prepare_inputs,
            trainer.labels_to_model,
        )
        net.train()
        with trainer.autocast_smart_context_manager():
            losses = trainer.loss_fn(net(**inputs), batch)
        total = losses[0] if isinstance(losses, tuple) else losses
        total.sum().backward()
        optimizer.step()
        optimizer.clear_grad()
        if not device.startswith("cpu"):
            paddle.device.synchronize()

    start = time.perf_counter()
    runs = measure(step, shapes * 2, counter=check_counter(None), restore=[net], warmup=shapes[-1])
    n = np.array([s[0] for s in shapes * 2], dtype=np.float64)
    length = np.array([s[1] for s in shapes * 2], dtype=np.float64)
    seconds = np.array([r.seconds for r in runs])
    c, a, b = fit_polynomial(n, length, seconds)
    error = float(np.mean(np.abs(StepTimeModel(c=c, a=a, b=b)(n, length) / seconds - 1)))
    values = paddle.to_tensor([c, a, b, min(error, 0.99)], dtype="float64")
    if trainer.args.dataset_world_size > 1:  # every rank plans alike: the ranks' mean
        paddle.distributed.all_reduce(values)
        values = values / trainer.args.dataset_world_size
    c, a, b, error = (float(v) for v in values.numpy())
    model = StepTimeModel(c=c, a=a, b=b, error=error)
    took = time.perf_counter() - start
    logger.info(
        f"dynbatch: step time measured on {device} in {took:.1f} s ({len(runs)} steps): {model}"
    )
    if trainer.args.should_save:
        os.makedirs(trainer.args.output_dir, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"c": c, "a": a, "b": b, "error": error}, f)
    return model
