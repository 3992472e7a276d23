"""Import optional dependencies with an error that says how to install them."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["require"]

_EXTRA = {
    "paddle": "cpu",
    "visualdl": "visualdl",
    "paddlenlp": "examples",
    "matplotlib": "examples",
}


def require(module: str, what: str) -> ModuleType:
    """Import ``module`` or raise ImportError naming the pip command that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        extra = _EXTRA.get(top, top)
        hint = f'pip install "dynbatch[{extra}]"'
        if top == "paddle":
            hint += ' (or "dynbatch[gpu]" for paddlepaddle-gpu)'
        raise ImportError(f"{what} needs {top}, which is not installed: {hint}") from exc
