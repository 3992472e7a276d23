"""The planner: numpy only, never paddle.

Costs and the step-time model, the options, plans of batches and their sharding, the
plans of epochs, optimizer windows, the time split of updates, recipes, statistics, the
contracts between the pieces, and the lengths they plan on. Everything here imports
numpy and the modules beside it or below it (``dynbatch.errors``, ``dynbatch._checks``).
The public names are imported from ``dynbatch`` itself.
"""

from __future__ import annotations

__all__: list[str] = []
