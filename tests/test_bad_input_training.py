"""Bad input to the training helpers is a named error.

One part of the bad-input table (tests/bad_input.py says how it works): scale_lr,
accumulation_windows, GradientAccumulator (construction, backward, resume state) and the
VisualDLHook (where visualdl is installed).
"""

from __future__ import annotations

import functools
import importlib.util
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from bad_input import (
    A_DIRECTORY,
    DATA,
    NON_NEGATIVE_INT,
    TYPE,
    VALUE,
    Case,
    Cases,
    choice_family,
    number_family,
    raises_as_the_table_says,
    sampler,
    v,
)

from dynbatch import InputError, scale_lr
from dynbatch.plan.windows import accumulation_windows

paddle = pytest.importorskip("paddle")
from dynbatch import GradientAccumulator, VisualDLHook  # noqa: E402  (after paddle)

CASES = Cases()
case = CASES.add

# -- training and windows -------------------------------------------------------------------------

SCALE_LR = {"base_lr": 1e-4, "batch": 64, "reference_batch": 16}
for arg in SCALE_LR:
    for label, value, error, match in number_family(arg):
        case(
            f"scale_lr-{arg}-{label}",
            functools.partial(scale_lr, **{**SCALE_LR, arg: value}),
            error,
            match,
        )
for label, value, error, match in choice_family("rule", ["cubic", "", None, 1]):
    case(
        f"scale_lr-rule-{label}", functools.partial(scale_lr, **SCALE_LR, rule=value), error, match
    )

for label, value, error, match in number_family("target"):
    if value is None:
        continue  # None: a step after every micro-batch
    case(
        f"accumulation_windows-target-{label}",
        functools.partial(accumulation_windows, [5, 3], value),
        error,
        match,
    )
for label, value, error, match in [
    ("negative", [5, -3], VALUE, r"step_counts must be finite numbers >= 0; step_counts\[1\]=-3"),
    ("nan", [5, math.nan], VALUE, r"step_counts must be finite numbers >= 0; step_counts\[1\]=nan"),
    ("str", ["5"], TYPE, r"step_counts must be numbers, got dtype <U1"),
    ("bool", [True], TYPE, r"step_counts must be numbers, got dtype bool"),
    ("2-D", [[5, 3]], VALUE, r"step_counts must be 1-D, got shape \(1, 2\)"),
]:
    case(
        f"accumulation_windows-step_counts-{label}",
        functools.partial(accumulation_windows, value, 8),
        error,
        match,
    )

# -- GradientAccumulator --------------------------------------------------------------------------


def model() -> Any:
    paddle.seed(0)
    return paddle.nn.Linear(2, 1)


def accumulator(**kwargs: Any) -> GradientAccumulator:
    net = kwargs.pop("model", None) or model()
    opt = kwargs.pop("optimizer", None) or paddle.optimizer.SGD(parameters=net.parameters())
    return GradientAccumulator(net, opt, **kwargs)


def backward(loss_sum: Any = "tensor", count: Any = 2) -> bool:
    net = model()
    acc = GradientAccumulator(net, paddle.optimizer.SGD(parameters=net.parameters()))
    if isinstance(loss_sum, str) and loss_sum == "tensor":
        loss_sum = net(paddle.ones([2, 2])).sum()
    return acc.backward(loss_sum, count)


def backward_without_count() -> bool:
    """``acc.backward(loss)``: the count left out, as a first-time user writes it."""
    net = model()
    acc = GradientAccumulator(net, paddle.optimizer.SGD(parameters=net.parameters()))
    return acc.backward(net(paddle.ones([2, 2])).sum())


#: an open window as ``GradientAccumulator.state_dict()`` saves it, for ``model()``
WINDOW = {
    "micro_batches": 1,
    "count": 2.0,
    "bad": 0.0,
    "grads": {"weight": np.zeros((2, 1), "float32"), "bias": np.zeros(1, "float32")},
}


def window_state(window: Any) -> dict[str, Any]:
    return {"optimizer_steps": 0, "skipped_steps": 0, "window": window}


ACC_CASES: list[tuple[str, Callable[[], object], type[InputError], str]] = [
    (
        "model-None",
        lambda: GradientAccumulator(None, object()),
        TYPE,
        r"model must be a paddle.nn.Layer \(with parameters\), got model=None",
    ),
    (
        "model-int",
        lambda: GradientAccumulator(3, object()),
        TYPE,
        r"model must be a paddle.nn.Layer \(with parameters\), got model=3",
    ),
    (
        "optimizer-None",
        lambda: GradientAccumulator(model(), None),
        TYPE,
        r"optimizer must be a paddle optimizer \(with step, clear_grad\), got optimizer=None",
    ),
    (
        "optimizer-str",
        lambda: GradientAccumulator(model(), "sgd"),
        TYPE,
        r"optimizer must be a paddle optimizer .*got optimizer='sgd'",
    ),
    (
        "sampler-int",
        lambda: accumulator(sampler=3),
        TYPE,
        r"sampler must be a dynbatch sampler .*got builtins.int",
    ),
    (
        "sampler-list",
        lambda: accumulator(sampler=[[0, 1]]),
        TYPE,
        r"sampler must be a dynbatch sampler .*got builtins.list",
    ),
    (
        "sampler-paddle",
        lambda: accumulator(sampler=paddle.io.BatchSampler(DATA, batch_size=2)),
        TYPE,
        r"sampler must be a dynbatch sampler .*got paddle.io.*BatchSampler",
    ),
    (
        "target-without-sampler",
        lambda: accumulator(target=8),
        VALUE,
        r"target needs the sampler: windows are cut on its plan",
    ),
    (
        "scaler-int",
        lambda: accumulator(scaler=3),
        TYPE,
        r"scaler must be a GradScaler \(with scale, unscale_, step, update\), got scaler=3",
    ),
    (
        "lr_scheduler-int",
        lambda: accumulator(lr_scheduler=3),
        TYPE,
        r"lr_scheduler must be an LR scheduler \(with step\), got lr_scheduler=3",
    ),
    (
        "set_state_dict-None",
        lambda: accumulator().set_state_dict(None),
        VALUE,
        r"state must be the dict that GradientAccumulator.state_dict\(\) returned, got NoneType",
    ),
    (
        "set_state_dict-empty",
        lambda: accumulator().set_state_dict({}),
        VALUE,
        r"state must be the dict that GradientAccumulator.state_dict\(\) returned, got dict",
    ),
    (
        "steps_per_epoch-no-sampler",
        lambda: accumulator().steps_per_epoch(),
        VALUE,
        r"steps_per_epoch needs the sampler whose plan the loop follows",
    ),
    *(
        (
            f"target-{label}",
            functools.partial(accumulator, sampler=sampler(), target=value),
            error,
            match,
        )
        for label, value, error, match in number_family("target")
        if value is not None
    ),
    *(
        (f"unit-{label}", functools.partial(accumulator, unit=value), error, match)
        for label, value, error, match in choice_family("unit", ["rows", "", 1])
    ),
    (
        "backward-loss_sum-float",
        lambda: backward(loss_sum=1.5),
        TYPE,
        r"loss_sum must be a paddle.Tensor .*got float",
    ),
    (
        "backward-loss_sum-numpy",
        lambda: backward(loss_sum=np.float32(1.5)),
        TYPE,
        r"loss_sum must be a paddle.Tensor .*got float32",
    ),
    (
        "backward-loss_sum-None",
        lambda: backward(loss_sum=None),
        TYPE,
        r"loss_sum must be a paddle.Tensor .*got NoneType",
    ),
    *(
        (
            f"backward-count-{label}",
            functools.partial(backward, count=value),
            error,
            rf"count must be .*got count={v(value)}",
        )
        for label, value, error in [
            ("-1", -1, VALUE),
            ("nan", math.nan, VALUE),
            ("inf", math.inf, VALUE),
            ("True", True, TYPE),
            ("str", "3", TYPE),
            ("None", None, TYPE),
        ]
    ),
    (
        "backward-count-missing",
        backward_without_count,
        TYPE,
        r"count must be given: the number of samples in this micro-batch that loss_sum sums "
        r"over \(or its loss tokens, with per-token losses\).*got count=None",
    ),
    (
        "backward-count-tensor",
        lambda: backward(count=paddle.to_tensor([1.0, 2.0])),
        VALUE,
        r"count must be a single number, got a tensor of shape .*\[2\]",
    ),
    *(
        (
            f"backward-count-tensor-{label}",
            functools.partial(lambda x: backward(count=paddle.to_tensor([x])), value),
            VALUE,
            rf"count must be a finite number >= 0, got count={v(value)} \(a paddle.Tensor\)",
        )
        for label, value in [("-5", -5.0), ("nan", math.nan), ("-inf", -math.inf)]
    ),
    *(
        (
            f"set_state_dict-{key}-{label}",
            functools.partial(
                lambda k, x: accumulator().set_state_dict({**window_state(None), k: x}), key, value
            ),
            error,
            rf"state\['{key}'\] must be an integer >= 0, got state\['{key}'\]={v(value)}",
        )
        for key in ("optimizer_steps", "skipped_steps")
        for label, value, error in NON_NEGATIVE_INT
    ),
    *(
        (
            f"set_state_dict-window-{label}",
            functools.partial(lambda w: accumulator().set_state_dict(window_state(w)), window),
            error,
            match,
        )
        for label, window, error, match in [
            ("str", "window", TYPE, r"state\['window'\] must be None or a dict .*got 'window'"),
            (
                "no-grads",
                {"micro_batches": 1, "count": 2.0, "bad": 0.0},
                VALUE,
                r"state\['window'\] lacks the key\(s\) grads",
            ),
            (
                "micro_batches-str",
                {**WINDOW, "micro_batches": "1"},
                TYPE,
                r"state\['window'\]\['micro_batches'\] must be an integer >= 1, got .*='1'",
            ),
            (
                "count-negative",
                {**WINDOW, "count": -2.0},
                VALUE,
                r"state\['window'\]\['count'\] must be a finite number >= 0, got .*=-2.0",
            ),
            (
                "bad-nan",
                {**WINDOW, "bad": math.nan},
                VALUE,
                r"state\['window'\]\['bad'\] must be a finite number >= 0, got .*=nan",
            ),
            (
                "grads-list",
                {**WINDOW, "grads": [1.0]},
                TYPE,
                r"state\['window'\]\['grads'\] must be a dict of parameter name to gradient",
            ),
            (
                "grads-unknown",
                {**WINDOW, "grads": {"colour": np.zeros(2)}},
                VALUE,
                r"the saved window has gradients for unknown parameters \['colour'\]",
            ),
            (
                "grads-shape",
                {**WINDOW, "grads": {"weight": np.zeros((3, 3), "float32")}},
                VALUE,
                r"state\['window'\]\['grads'\]\['weight'\] has shape \(3, 3\), but the "
                r"parameter has shape \(2, 1\)",
            ),
            (
                "grads-str",
                {**WINDOW, "grads": {"weight": "x"}},
                TYPE,
                r"state\['window'\]\['grads'\]\['weight'\] must be an array of numbers, "
                r"got 'x'",
            ),
        ]
    ),
]
for label, call, error, match in ACC_CASES:
    case(f"GradientAccumulator-{label}", call, error, match)

# -- VisualDLHook ---------------------------------------------------------------------------------

NO_LOGS = str(Path(A_DIRECTORY) / "dynbatch-bad-input-logs")  # a case that fails would write here
HOOK_CASES: list[tuple[str, Callable[[], object], type[InputError], str]] = [
    ("logdir-int", lambda: VisualDLHook(5), TYPE, r"logdir must be a directory path, got logdir=5"),
    (
        "logdir-None",
        lambda: VisualDLHook(None),
        TYPE,
        r"logdir must be a directory path, got logdir=None",
    ),
    (
        "logdir-bytes",
        lambda: VisualDLHook(b"logs"),
        TYPE,
        r"logdir must be a directory path, got logdir=b'logs'",
    ),
    (
        "sampler-int",
        lambda: VisualDLHook(NO_LOGS, 3),
        TYPE,
        r"sampler must be a dynbatch sampler .*got builtins.int",
    ),
    (
        "sampler-list",
        lambda: VisualDLHook(NO_LOGS, [[0, 1]]),
        TYPE,
        r"sampler must be a dynbatch sampler .*got builtins.list",
    ),
    (
        "progress-str",
        lambda: VisualDLHook(NO_LOGS, progress="yes"),
        TYPE,
        r"progress must be True or False, got progress='yes'",
    ),
    (
        "progress-int",
        lambda: VisualDLHook(NO_LOGS, progress=1),
        TYPE,
        r"progress must be True or False, got progress=1",
    ),
]
if importlib.util.find_spec("visualdl") is not None:  # the hook's cases need it
    for label, call, error, match in HOOK_CASES:
        case(f"VisualDLHook-{label}", call, error, match)


def test_table_is_large() -> None:
    CASES.check_size(90)  # 97 without visualdl


@pytest.mark.parametrize("bad", CASES, ids=CASES.ids())
def test_bad_input_is_a_named_error(bad: Case) -> None:
    raises_as_the_table_says(bad)
