"""``python -m dynbatch.cli``: the same as the ``dynbatch`` console script."""

from __future__ import annotations

from . import main

__all__: list[str] = []

raise SystemExit(main())
