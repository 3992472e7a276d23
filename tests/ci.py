"""Whether this run is CI's: where a local run skips, a CI run fails.

:data:`IN_CI` is read by ``tests/conftest.py`` (missing shared data) and
``tests/paddleformers/conftest.py`` (NOTE [ no skips under CI ] there).
"""

from __future__ import annotations

import os

__all__ = ["IN_CI", "ci_value"]

#: CI=true (GitHub Actions, GitLab, most CI services); "false", "0" or unset is a local run.
IN_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def ci_value() -> str:
    """``CI`` as set, for messages: ``"CI=true"``."""
    return f"CI={os.environ.get('CI', '')}"
