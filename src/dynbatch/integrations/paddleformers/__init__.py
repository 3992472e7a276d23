"""PaddleFormers' ``Trainer`` on dynamic batches: exact steps, exact loss normalisation and resume.

::

    from paddleformers.trainer import TrainingArguments
    from dynbatch.integrations.paddleformers import DynamicBatchTrainer

    trainer = DynamicBatchTrainer(
        model=model,
        args=TrainingArguments(per_device_train_batch_size=32, amp_master_grad=False, ...),
        train_dataset=train_ds, eval_dataset=dev_ds, data_collator=collate,
        lengths=train_lengths,
    )
    trainer.train()                                  # or train(resume_from_checkpoint=...)

The Trainer is :mod:`dynbatch.integrations.core`'s, which every framework's adapter shares;
:mod:`.adapter` holds what is PaddleFormers' own, and NOTE [ PaddleFormers' defaults ] there what
its ``TrainingArguments`` need (``amp_master_grad=False`` without fp16 or bf16; ``sharding=""``
on more than one rank) and what the Trainer changes on its copy of them (the checkpoint format).
Written for paddleformers 1.2.0; a release outside ``>=1.2,<1.3`` is refused by name when this
package is imported, before any of its names are read.
"""

from __future__ import annotations

import importlib.metadata
import re

from ..._checks import InputError
from ..._optional import install_hint, require

__all__ = [
    "STATE_FILE",
    "DynamicBatchTrainer",
    "Window",
    "per_sample_cross_entropy",
    "token_cross_entropy",
]

#: The paddleformers releases this adapter runs on, by ``major.minor``: from the first, below the
#: second. The private names it touches are those of 1.2.0 (its host's ``written_for``).
_SUPPORTED = ((1, 2), (1, 3))


def _installed() -> str:
    """The installed paddleformers' version, from its metadata (nothing of it is imported)."""
    try:
        return importlib.metadata.version("paddleformers")
    except importlib.metadata.PackageNotFoundError:
        raise ImportError(
            "dynbatch.integrations.paddleformers cannot run without paddleformers, which is not "
            f"installed: {install_hint('paddleformers')}"
        ) from None


def _check_version(installed: str) -> None:
    """Refuse a paddleformers release outside :data:`_SUPPORTED`, naming it and the range.

    >>> _check_version("1.2.0")
    >>> _check_version("1.3.0")
    Traceback (most recent call last):
    ...
    dynbatch.errors.InputError: ... runs on paddleformers>=1.2,<1.3 ... got paddleformers 1.3.0 ...
    """
    low, high = _SUPPORTED
    match = re.match(r"(\d+)\.(\d+)", installed)
    version = (int(match.group(1)), int(match.group(2))) if match else None
    if version is None or not low <= version < high:
        raise InputError(
            f"dynbatch.integrations.paddleformers runs on paddleformers>={low[0]}.{low[1]},"
            f"<{high[0]}.{high[1]} (the Trainer's private hooks it overrides are those "
            f"releases'), got paddleformers {installed} installed: {install_hint('paddleformers')}"
        )


require("paddle", "dynbatch.integrations.paddleformers")
_check_version(_installed())  # before any of its names is read: a renamed one is no ImportError
require("paddleformers.trainer", "dynbatch.integrations.paddleformers")

from ..core import STATE_FILE, Window, per_sample_cross_entropy, token_cross_entropy  # noqa: E402
from .adapter import DynamicBatchTrainer  # noqa: E402
