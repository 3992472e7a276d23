"""Collect a Trainer host's package (its doctests) and tests only where that host is installed.

paddlenlp 3.0.0b4 and paddleformers 1.2.0 cannot share an environment (their datasets,
pyarrow and numpy pins part), so ``make test`` runs each in its own: the suite in ``.venv``
(paddlenlp) and ``tests/paddleformers`` in ``.venv-pf``, named by path. Importing a host's
modules where it is missing would be a collection error.
"""

from __future__ import annotations

import importlib.util

#: Each Trainer host, and the paths that import it.
HOSTS: dict[str, tuple[str, ...]] = {
    "paddlenlp": ("src/dynbatch/integrations/paddlenlp",),
    "paddleformers": ("src/dynbatch/integrations/paddleformers", "tests/paddleformers"),
}

collect_ignore: list[str] = [
    path
    for host, paths in HOSTS.items()
    if importlib.util.find_spec(host) is None
    for path in paths
]
