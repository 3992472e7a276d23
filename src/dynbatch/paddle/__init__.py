"""The paddle adapters: samplers, the accumulator and its update, collators, losses, logs.

Each module imports paddle (or visualdl) on first use, through ``dynbatch._optional``,
and says how to install what is missing. The planner below them (``dynbatch.plan``,
``dynbatch.stream``) never imports paddle.
"""

from __future__ import annotations

__all__: list[str] = []
