"""``python -m dynbatch``: the same as the ``dynbatch`` console script."""

from __future__ import annotations

from .cli import main

raise SystemExit(main())
