"""Collect ``src/dynbatch``'s doctests only where their optional dependencies are installed."""

from __future__ import annotations

import importlib.util

collect_ignore: list[str] = []
if importlib.util.find_spec("paddlenlp") is None:  # the Trainer integration (a package) needs it
    collect_ignore.append("src/dynbatch/integrations/paddlenlp")
