"""Adapters for training frameworks; each imports its framework when it is itself imported.

``dynbatch.integrations.paddlenlp``:
:class:`~dynbatch.integrations.paddlenlp.DynamicBatchTrainer`, paddlenlp's
``Trainer`` with dynamic batches (needs paddlenlp: ``pip install ".[paddlenlp]"`` from a
clone of dynbatch, which brings paddlenlp 3.0.0b4 with the pins it imports with).
Its logic is :mod:`dynbatch.integrations.core`'s, which every framework's adapter shares
(it imports paddle and no framework; each adapter gives it the framework's names as a
:class:`~dynbatch.integrations.core.Host`). Importing this package imports no framework.
"""

from __future__ import annotations

__all__: list[str] = []
