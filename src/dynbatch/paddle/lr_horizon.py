"""Whether an LR scheduler's horizon is the plan's updates: paddle's schedulers, duck-typed.

NOTE [ a schedule's horizon and the planned updates ]
    :class:`~dynbatch.GradientAccumulator` steps its ``lr_scheduler`` once an update, and
    an update is several micro-batches. The usual ``decay_steps=len(loader) * epochs``
    counts micro-batches (50 an epoch, say) where the schedule is stepped 13 times an
    epoch, so the rate never finishes its decay (it ends at 0.000766, not 0). The
    accumulator knows the planned updates (:meth:`~dynbatch.GradientAccumulator.steps_for_epochs`),
    so it compares each horizon a paddle scheduler holds with them: ``PolynomialDecay``'s
    ``decay_steps`` (without ``cycle``), ``CosineAnnealingDecay``'s ``T_max``,
    ``OneCycleLR``'s and ``LinearLR``'s ``total_steps``, ``LinearWarmup``'s
    ``warmup_steps`` and the horizon of the schedule it warms up (the run's updates, or
    those after the warm-up: paddle steps it from the warm-up's end), the last milestone of
    ``MultiStepDecay`` and boundary of ``PiecewiseDecay``. Given ``epochs=``, a horizon
    other than the run's updates (a milestone or a warm-up beyond them) is named with the
    value to give. Without it, the run's length is unknown, so what is named is the
    mistake above: a horizon that is a whole number of epochs of micro-batches, where the
    updates differ.

    It warns rather than refuses: a horizon that differs may be meant (a schedule that a
    later run continues, a decay meant to end above its floor, a scheduler also stepped
    elsewhere), and without ``epochs=`` it is inferred. A warning naming the numbers and
    the value to write catches the mistake without forbidding those.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

from .._checks import InputError, check_int

__all__ = ["LRHorizonWarning", "check_horizon", "check_lr_horizon", "horizons"]


class LRHorizonWarning(UserWarning):
    """An LR scheduler's horizon is not the planned updates.

    NOTE [ a schedule's horizon and the planned updates ] says when it is raised."""


#: a paddle scheduler's class name -> the attribute that holds the steps its schedule runs
_HORIZONS = {
    "PolynomialDecay": "decay_steps",
    "CosineAnnealingDecay": "T_max",
    "OneCycleLR": "total_steps",
    "LinearLR": "total_steps",
}


def horizons(scheduler: Any, warm: int = 0) -> Iterator[tuple[str, int, int, str]]:
    """``(what, steps, warm, kind)`` of each horizon ``scheduler`` holds: its name as the user
    wrote it, its steps, the warm-up before it, and ``"end"`` (a schedule's end), ``"warmup"``
    or ``"milestone"`` (reached within the run)."""
    name = type(scheduler).__name__
    attr = _HORIZONS.get(name)
    if attr is not None and not (name == "PolynomialDecay" and getattr(scheduler, "cycle", False)):
        yield (
            f"{name}({attr}={getattr(scheduler, attr)})",
            int(getattr(scheduler, attr)),
            warm,
            "end",
        )
    elif name == "LinearWarmup":
        steps = int(scheduler.warmup_steps)
        yield f"LinearWarmup(warmup_steps={steps})", steps, warm, "warmup"
        inner = getattr(scheduler, "learning_rate", None)
        if inner is not None and not isinstance(inner, (int, float)):
            yield from horizons(inner, warm + steps)
    elif name in ("MultiStepDecay", "PiecewiseDecay"):
        attr = "milestones" if name == "MultiStepDecay" else "boundaries"
        values = list(getattr(scheduler, attr, []) or [])
        if values:
            yield f"{name}({attr}=[..., {values[-1]}])", int(values[-1]), warm, "milestone"


def check_lr_horizon(
    scheduler: Any,
    micro_batches: int,
    updates_for: Callable[[int], int],
    epochs: int | None,
) -> list[str]:
    """Warn, naming the numbers, for each horizon of ``scheduler`` that is not the planned
    updates (NOTE [ a schedule's horizon and the planned updates ]); the messages warned.

    Args:
        scheduler: the accumulator's ``lr_scheduler``.
        micro_batches: the loader's micro-batches an epoch (``len(sampler)``).
        updates_for: ``k -> acc.steps_for_epochs(range(k))``.
        epochs: the epochs the run takes, if the user said.
    """
    said: list[str] = []
    for what, steps, warm, kind in horizons(scheduler):
        if epochs is not None:
            total = updates_for(epochs)
            run = (
                f"the run's {epochs} epoch(s) make {total} updates "
                f"(acc.steps_for_epochs(range({epochs})))"
            )
            if kind == "end" and steps not in (total, total - warm):
                after = f" ({total - warm} after the warm-up)" if warm else ""
                said.append(
                    f"lr_scheduler {what} ends its schedule after {steps} steps, but it is "
                    f"stepped once an update and {run}: give {total - warm if warm else total}"
                    f"{after}"
                )
            elif kind != "end" and steps >= total:
                said.append(
                    f"lr_scheduler {what} is beyond the run: {run}, so the rate never gets "
                    f"past it; give fewer than {total}"
                )
            continue
        whole = steps % micro_batches == 0
        if kind == "milestone" or steps <= 0 or not (whole or (steps + warm) % micro_batches == 0):
            continue
        horizon = steps if whole else steps + warm
        k = max(1, horizon // micro_batches)
        total = updates_for(k)
        if total == k * micro_batches:
            continue  # an update a micro-batch: the two counts agree
        j = max(1, round(horizon / max(1, updates_for(1))))
        if updates_for(j) == horizon:
            continue  # j epochs of updates, a multiple of the micro-batches by chance
        less = "" if whole else ", less the warm-up's updates"
        said.append(
            f"lr_scheduler {what} counts {k} epoch(s) of micro-batches ({micro_batches} an "
            f"epoch, len(loader)), but it is stepped once an update and the plan makes {total} "
            f"updates in {k} epoch(s): count it in updates, acc.steps_for_epochs(range({k})) = "
            f"{total}{less} (GradientAccumulator(..., epochs=E) checks it against the run's E "
            "epochs exactly)"
        )
    for message in said:
        warnings.warn(message, LRHorizonWarning, stacklevel=3)
    return said


def check_horizon(acc: Any, epochs: Any, stream: Any) -> None:
    """Check ``acc``'s (a :class:`~dynbatch.GradientAccumulator`) ``lr_scheduler`` against its
    planned updates, over ``epochs`` if given; ``stream`` is the stream it follows, if any."""
    epochs = check_int("epochs", epochs, minimum=1, allow_none=True)
    if epochs is not None and (acc.lr_scheduler is None or acc.sampler is None):
        raise InputError(
            f"epochs={epochs} checks the lr_scheduler's horizon against the sampler's "
            "planned updates: give lr_scheduler= and sampler= too, or leave epochs out"
        )
    if acc.lr_scheduler is None or acc.sampler is None:
        return
    if epochs is None and stream is not None:
        return  # a stream's updates are counted by reading it: only when epochs= asks

    def updates_for(k: int) -> int:  # exact for the run asked, else a few epochs planned
        if k == epochs or k <= 16:
            return int(acc.steps_for_epochs(range(k)))
        return k * int(acc.steps_per_epoch(0))

    micro = stream.source.count(0).steps if stream is not None else len(acc.sampler)
    check_lr_horizon(acc.lr_scheduler, int(micro), updates_for, epochs)
