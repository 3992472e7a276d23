"""The device's step time, measured on the Trainer's own model and batches.

NOTE [ the Trainer measures the step time ]
    Whether the fixed batch's updates should be cut into micro-batches
    depends on the device (NOTE [ splitting updates at the step time ] in
    :mod:`dynbatch.plan.splits`): on a CPU cuts pay, on a GPU below its knee they
    cost a whole step each. The Trainer has the model, so with the recipe and
    no ``time_model=`` it times a few real training steps (forward, the
    loss, backward and an AdamW step, the device synchronised) on batches
    made from the longest training samples, tiled or cut to each probed shape,
    and fits ``c + n·L·(a + b·L)`` with its error. The weights and paddle's
    random state are put back afterwards, so a run that probes draws the
    dropout masks of one that reads the step time back. The probe's optimizer
    takes its accumulators' names in a scope of its own
    (``paddle.utils.unique_name.guard``): paddle numbers them by a
    process-wide counter and a checkpoint keeps them, so a probe that moved it
    saved names a resumed run, which reads the step time back and does not
    probe, would not find. Every rank probes
    and the ranks average the coefficients, so all plan alike. The model is
    written to ``output_dir`` and read back by a later Trainer of the same
    ``output_dir``; a resume plans by the step time its checkpoint's state
    holds (the one it was planned by), so it plans the same batches in
    another ``output_dir`` or after the kept file was deleted. ``time_model=None``
    skips the probe, an object uses it as given.
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

from ..._checks import InputError
from ..._files import write_text_atomic
from ...memory.counters import check_counter
from ...memory.probe import measure
from ...plan.costs import fit_polynomial
from ...plan.epochs import epoch_candidates, faster_candidate
from ...plan.packs import plan_timed_packs
from ...plan.pair_steptime import check_step_time
from ...plan.splits import epoch_seconds
from ...plan.steptime import StepTimeModel, check_time_model
from .run import check_fields, split_batch

__all__ = [
    "TIME_MODEL_FILE",
    "kept_time_model",
    "measure_time_model",
    "probe_batch",
    "read_time_model",
    "split_reason",
]

#: Where the measured step time is kept in ``output_dir``.
TIME_MODEL_FILE = "dynbatch_time_model.json"


def probe_batch(batch: Mapping[str, Any], n: int, length: int) -> dict[str, Any]:
    """``batch`` (a collated dict) with ``n`` rows and, where a field has one, ``length``
    columns: rows and columns repeat cyclically, so every value stays a real one. A list
    field of a row per sample (the DataLoader passes lists on) repeats its rows too.

    >>> b = {"ids": np.arange(6).reshape(2, 3), "label": [0, 1]}
    >>> out = probe_batch(b, 3, 4)
    >>> out["ids"].tolist(), out["label"]
    ([[0, 1, 2, 0], [3, 4, 5, 3], [0, 1, 2, 0]], [0, 1, 0])
    """
    sized = [v for v in batch.values() if getattr(v, "ndim", 0) >= 1]
    rows = int(sized[0].shape[0]) if sized else len(next(iter(batch.values())))
    cols = max((int(v.shape[1]) for v in batch.values() if getattr(v, "ndim", 0) >= 2), default=0)
    out: dict[str, Any] = {}
    for key, value in batch.items():
        if getattr(value, "ndim", 0) >= 1 and int(value.shape[0]) == rows:
            value = _take(value, np.arange(n) % rows, 0)
            if value.ndim >= 2 and int(value.shape[1]) == cols:
                value = _take(value, np.arange(length) % cols, 1)
        elif isinstance(value, (list, tuple)) and len(value) == rows:
            value = [value[i] for i in (np.arange(n) % rows).tolist()]
        out[key] = value
    return out


def _take(value: Any, index: NDArray[Any], axis: int) -> Any:
    if isinstance(value, paddle.Tensor):
        return paddle.index_select(value, paddle.to_tensor(index), axis=axis)
    return np.take(np.asarray(value), index, axis=axis)


def _on_every_rank(trainer: Any, flag: bool) -> bool:
    """Whether ``flag`` holds on every rank (one all-reduce when there are several)."""
    if trainer.args.dataset_world_size <= 1:
        return flag
    value = paddle.to_tensor([0 if flag else 1], dtype="int64")
    paddle.distributed.all_reduce(value)
    return int(value.numpy()[0]) == 0


def measure_time_model(
    trainer: Any, dataset: Any, lengths: NDArray[Any], batch_size: int
) -> StepTimeModel | None:
    """The step time of ``trainer``'s model on its device (NOTE [ the Trainer measures ... ])."""
    path, logger = kept_time_model(trainer.args.output_dir), trainer.host.logger
    if os.path.exists(path) and not os.path.isfile(path):  # before a probe that cannot keep it
        raise InputError(
            f"{path} is not a file: the Trainer keeps the step time it measures there; move "
            "it away, or pass time_model= (an object, 'c,a,b' or None)"
        )
    if _on_every_rank(trainer, os.path.isfile(path)):  # else every rank probes: none waits
        model = read_time_model(path)
        if model is not None:
            logger.info(f"dynbatch: step time read from {path}: {model}")
            return model
    longest = np.argsort(-lengths, kind="stable")[: max(1, batch_size)]
    collated = check_fields(  # as the loader would:
        trainer.data_collator([dataset[int(i)] for i in longest]), trainer.label_names
    )
    base = {k: paddle.to_tensor(v) if isinstance(v, np.ndarray) else v for k, v in collated.items()}
    top = int(lengths[longest[0]])
    shapes = sorted(
        {(n, max(1, top // d)) for d in (4, 1) for n in (1, max(1, batch_size // 2), batch_size)}
    )
    net = trainer.model
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
    random_state = paddle.get_rng_state()  # dropout draws: training's stream stays the seed's
    try:
        with paddle.utils.unique_name.guard():  # training's optimizer keeps its names
            optimizer = paddle.optimizer.AdamW(learning_rate=0.0, parameters=net.parameters())
            runs = measure(
                step, shapes * 2, counter=check_counter(None), restore=[net], warmup=shapes[0]
            )
    finally:
        paddle.set_rng_state(random_state)
    # each shape's faster run (the first may pay once-per-shape costs, kernel selection); a
    # shape that ran out of memory is left out
    timed = np.array([np.inf if r.peak_mib is None else r.seconds for r in runs])
    seconds = np.minimum.reduce(timed.reshape(2, -1))
    ok = np.isfinite(seconds)
    n = np.array([s[0] for s in shapes], dtype=np.float64)[ok]
    length = np.array([s[1] for s in shapes], dtype=np.float64)[ok]
    seconds = seconds[ok]
    fitted = n.size >= 3  # c, a and b need three shapes
    c, a, b = fit_polynomial(n, length, seconds) if fitted else (0.0, 0.0, 0.0)
    error = 0.0
    if fitted:
        error = min(
            float(np.mean(np.abs(StepTimeModel(c=c, a=a, b=b)(n, length) / seconds - 1))), 0.99
        )
    values = paddle.to_tensor([c, a, b, error, float(fitted)], "float64")
    world = trainer.args.dataset_world_size
    if world > 1:  # every rank plans alike: the ranks' mean
        paddle.distributed.all_reduce(values)
        values = values / world
    c, a, b, error, all_fitted = (float(v) for v in values.numpy())
    if all_fitted < 1.0:
        logger.warning(
            f"dynbatch: the step time could not be measured on {device} (steps ran out of "
            "memory on some rank): planning without it"
        )
        return None
    model = StepTimeModel(c=c, a=a, b=b, error=error)
    took = time.perf_counter() - start
    logger.info(
        f"dynbatch: step time measured on {device} in {took:.1f} s ({len(runs)} steps): {model}"
    )
    if trainer.args.should_save:  # NOTE [ atomic writes ]: a killed run leaves none or all
        os.makedirs(trainer.args.output_dir, exist_ok=True)
        write_text_atomic(path, json.dumps({"c": c, "a": a, "b": b, "error": error}))
    return model


def kept_time_model(output_dir: str) -> str:
    """Where the Trainer keeps the step time it measured for ``output_dir``."""
    return os.path.join(output_dir, TIME_MODEL_FILE)


def read_time_model(path: str) -> StepTimeModel | None:
    """The step time kept at ``path``, checked; a torn or garbled file is named, not half-read."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if not isinstance(data, dict):
            raise InputError(f"a JSON object with c, a, b and error, got {data!r}")
        return check_time_model(data, f"{path}'s time model")
    except (ValueError, OSError) as exc:  # InputError is a ValueError
        raise InputError(
            f"{path} is not a step time this Trainer kept ({exc}): delete it to measure the "
            "step time again (a resume plans by its checkpoint's own), or pass time_model= (an "
            "object, 'c,a,b' or None)"
        ) from None


def split_reason(sampler: Any, time_model: Any) -> str:
    """One line for the log: the split the step time chose for epoch 0, and why.

    ``sampler`` plans ``like_fixed(lengths, ..., time_model=time_model)``, which chooses each
    epoch between the padding-free split and whole updates cut at the step time
    (NOTE [ the faster plan of each epoch ]); the line gives the step time, the micro-batches and
    updates of epoch 0 and both candidates' predicted seconds.

    With ``pack_len`` the step time cuts no update: each of the fixed batch's updates runs
    packed, split or whole, the fastest (NOTE [ choosing packing per update ]); the line
    counts the updates run each way and gives the epoch's predicted seconds.
    """
    model = check_step_time(time_model)
    options = sampler.options
    if options.pack_len is not None:  # NOTE [ choosing packing per update ]: not a cut
        chosen = plan_timed_packs(
            sampler.lengths, options, 0, sampler.num_replicas, sampler.loss_tokens
        )
        ways = ", ".join(f"{n} {way}" for way, n in chosen.counts.items())
        assert chosen.sharded is not None
        return (
            f"dynbatch: step time {model}: planning rows of pack_len={options.pack_len} "
            "tokens, each update run packed, split or whole, whichever is predicted fastest, "
            f"for epoch 0: the fixed batch's {len(chosen.choice)} update(s), {ways} "
            f"({chosen.sharded.num_steps} micro-batch(es) a rank): predicted "
            f"{chosen.epoch_seconds:.3g} s an epoch"
        )
    if options.fixed_step_size is None:  # a time split without the padding-free candidate
        plan = sampler.epoch_plan(0)
        predicted = epoch_seconds(plan, sampler.lengths, model, options.pad_to_multiple_of)
        return (
            f"dynbatch: step time {model}: planning updates cut at the step time: predicted "
            f"{predicted:.3g} s an epoch"
        )
    plans, seconds = epoch_candidates(
        sampler.lengths, options, 0, sampler.num_replicas, sampler.loss_tokens
    )
    kept = faster_candidate(seconds)
    other = "padding-free" if kept == "time split" else "time split"
    plan = plans[kept]
    updates = plan.num_steps if plan.window_ends is None else len(plan.window_ends)
    whole = ", each update whole" if kept == "time split" and plan.num_steps == updates else ""
    names = {
        "time split": "whole updates cut at the step time",
        "padding-free": "the padding-free split",
    }
    return (
        f"dynbatch: step time {model}: planning {names[kept]} for epoch 0: predicted "
        f"{seconds[kept]:.3g} s an epoch ({plan.num_steps} micro-batch(es) a rank for "
        f"{updates} update(s){whole}), against {seconds[other]:.3g} s for {names[other]} "
        "(each epoch keeps the faster)"
    )
