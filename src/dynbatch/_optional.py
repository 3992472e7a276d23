"""Import optional dependencies with an error that says how to install them."""

from __future__ import annotations

import importlib
import warnings
from types import ModuleType

__all__ = ["CCACHE_NOTICE", "INSTALL", "install_hint", "require"]

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


#: paddle's notice, from its C++-extension helper on import, that no ccache is installed: it
#: concerns building C++ extensions, which dynbatch never does (NOTE [ paddle's ccache notice ])
CCACHE_NOTICE = "No ccache found"


def require(module: str, what: str) -> ModuleType:
    """Import ``module`` or raise ImportError naming the pip command that provides it.

    NOTE [ paddle's ccache notice ]
        Importing paddle warns (a UserWarning) that no ccache is installed, in every process:
        the examples' modes, a launcher's ranks. dynbatch imports paddle here, and first
        ignores that one warning: its message's start, its category and paddle's module that
        warns it, so every other warning, paddle's included, still shows. Where a script
        imports paddle itself before dynbatch, the notice is paddle's, printed before dynbatch
        is involved.
    """
    warnings.filterwarnings(
        "ignore",
        message=CCACHE_NOTICE,
        category=UserWarning,
        module=r"paddle\.utils\.cpp_extension",
    )
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        raise ImportError(
            f"{what} cannot run without {top}, which is not installed: {install_hint(top)}"
        ) from exc
