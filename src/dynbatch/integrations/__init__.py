"""Adapters for training frameworks; each imports its framework when it is itself imported.

``dynbatch.integrations.paddlenlp``:
:class:`~dynbatch.integrations.paddlenlp.DynamicBatchTrainer`, paddlenlp's
``Trainer`` with dynamic batches (needs ``pip install "dynbatch[examples]"``).
Importing this package imports no framework.
"""

from __future__ import annotations

__all__: list[str] = []
