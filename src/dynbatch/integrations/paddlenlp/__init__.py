"""paddlenlp's ``Trainer`` on dynamic batches: exact steps, exact loss normalisation, exact resume.

::

    from dynbatch.integrations.paddlenlp import DynamicBatchTrainer

    trainer = DynamicBatchTrainer(
        model=model, args=TrainingArguments(per_device_train_batch_size=32, ...),
        train_dataset=train_ds, eval_dataset=dev_ds, data_collator=collate,
        lengths=train_lengths,
    )
    trainer.train()                                  # or train(resume_from_checkpoint=...)

The Trainer is :mod:`dynbatch.integrations.core`'s, which every framework's adapter shares (its
docstring says what replaces each place where paddlenlp's Trainer assumes fixed batches, and in
which module); :mod:`.adapter` holds what is paddlenlp's own (written for 3.0.0b4).
"""

from __future__ import annotations

from ..._optional import require

require("paddle", "dynbatch.integrations.paddlenlp")
require("paddlenlp.trainer", "dynbatch.integrations.paddlenlp")

from ..core import (  # noqa: E402
    STATE_FILE,
    Window,
    per_sample_cross_entropy,
    token_cross_entropy,
)
from .adapter import DynamicBatchTrainer  # noqa: E402

__all__ = [
    "STATE_FILE",
    "DynamicBatchTrainer",
    "Window",
    "per_sample_cross_entropy",
    "token_cross_entropy",
]
