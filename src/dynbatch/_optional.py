"""Import optional dependencies with an error that says how to install them."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["INSTALL", "install_hint", "require"]

#: What installs each optional module today: the package from PyPI, and the extra of a clone
#: of dynbatch (dynbatch itself is not on PyPI yet, so ``dynbatch[...]`` would not resolve).
INSTALL = {
    "paddle": ("pip install paddlepaddle (or paddlepaddle-gpu)", "cpu"),
    "visualdl": ("pip install visualdl", "visualdl"),
    "paddlenlp": (
        'pip install paddlenlp==3.0.0b4 aistudio-sdk==0.2.6 "datasets<3" "pyarrow<17"',
        "paddlenlp",
    ),
    "paddleformers": (
        "pip install paddleformers==1.2.0 datasets==4.8.5 pyarrow==21.0.0",
        "paddleformers",
    ),
    "matplotlib": ("pip install matplotlib", "plot"),
}


def install_hint(module: str) -> str:
    """The command that installs ``module`` today, and the extra that does from a clone.

    >>> install_hint("visualdl")
    'pip install visualdl (from a clone of dynbatch: pip install ".[visualdl]")'
    """
    top = module.split(".")[0]
    command, extra = INSTALL.get(top, (f"pip install {top}", ""))
    return f'{command} (from a clone of dynbatch: pip install ".[{extra}]")' if extra else command


def require(module: str, what: str) -> ModuleType:
    """Import ``module`` or raise ImportError naming the pip command that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        raise ImportError(
            f"{what} cannot run without {top}, which is not installed: {install_hint(top)}"
        ) from exc
