"""A Trainer on dynamic batches, written once for every framework: exact steps, exact loss
normalisation, exact resume.

Users import an adapter, which names its framework::

    from dynbatch.integrations.paddlenlp import DynamicBatchTrainer

    trainer = DynamicBatchTrainer(
        model=model, args=TrainingArguments(per_device_train_batch_size=32, ...),
        train_dataset=train_ds, eval_dataset=dev_ds, data_collator=collate,
        lengths=train_lengths,
    )
    trainer.train()                                  # or train(resume_from_checkpoint=...)

This package is what the adapters share. It imports paddle and no framework: every name of
one it needs comes from the adapter's :class:`~.host.Host`, and
:class:`~.trainer.DynamicBatchTrainerCore` is a mixin the adapter puts before its framework's
``Trainer`` (NOTE [ one core, one host per adapter ] in :mod:`.host` says how to write one).

With no plan options, the Trainer trains like the fixed batch of ``args``
(``per_device_train_batch_size`` x ``gradient_accumulation_steps`` x ranks per
update) without its padding: :func:`dynbatch.like_fixed`, NOTE [ the fixed batch's recipe ].
Plan options (``max_cost=..., cost=..., order=...`` or
``options=``) plan the study's way instead: one micro-batch per planned batch.

The ``Trainer`` (paddlenlp's ``paddlenlp.trainer.Trainer``, and those derived alike) assumes
fixed batches in four places, and each one breaks with dynamic batches: it sizes the run once
from ``len(train_dataloader)``, it divides every micro-batch's loss by
``gradient_accumulation_steps``, it resumes by consumed-samples arithmetic or
by replaying batches, and it only calls ``set_epoch`` on a
``paddle.io.DistributedBatchSampler``. One module per job says what replaces
each; read them one at a time:

* :mod:`.run`: the run's windows from the plan, NOTE [ one Trainer epoch holds every real epoch ];
* :mod:`.trainer`: the class and its arguments; :mod:`.training`: its training overrides;
  :mod:`.step`: NOTE [ one update, one mean ] (the update itself is :mod:`dynbatch.paddle.update`);
* :mod:`.planner`: the training sampler at the step time measured, kept or given,
  NOTE [ dynbatch's checks before the probe ] (the probe is :mod:`.probe`);
* :mod:`.checkpoints`: the state file and checkpoint discovery, NOTE [ resume from the plan ];
* :mod:`.evaluation`: its evaluation overrides, NOTE [ evaluation with unequal batches ];
* :mod:`.logs`: the plan's numbers in the Trainer's logs;
* :mod:`.packing`: ``pack_len``'s rows for a causal LM or a classifier, NOTE [ the Trainer packs ];
* :mod:`.seq2seq`: encoder–decoders on (source, target) pairs, NOTE [ the Trainer on pairs ];
* :mod:`.losses`: per-sample losses, and per-token ones for language models
  (:func:`token_cross_entropy`); :mod:`.arguments`: ``TrainingArguments``;
* :mod:`.host`: what differs between frameworks, NOTE [ one core, one host per adapter ];
* :mod:`._compat`: every touch of the Trainer's private names (written for paddlenlp
  3.0.0b4), NOTE [ VisualDL and protobuf bools ].
"""

from __future__ import annotations

from ..._optional import require

require("paddle", "dynbatch.integrations.core")

from .checkpoints import STATE_FILE  # noqa: E402
from .host import CausalPacking, Host, framework_names  # noqa: E402
from .losses import per_sample_cross_entropy, token_cross_entropy  # noqa: E402
from .run import Window  # noqa: E402
from .trainer import DynamicBatchTrainerCore  # noqa: E402

__all__ = [
    "STATE_FILE",
    "CausalPacking",
    "DynamicBatchTrainerCore",
    "Host",
    "Window",
    "framework_names",
    "per_sample_cross_entropy",
    "token_cross_entropy",
]
