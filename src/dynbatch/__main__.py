"""``python -m dynbatch``: the same as the ``dynbatch`` console script."""

from __future__ import annotations

from .cli import main

__all__: list[str] = []  # a script: nothing to import from it

raise SystemExit(main())
