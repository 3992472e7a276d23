"""Sphinx configuration of dynbatch's documentation: ``make docs`` builds it, warnings as errors."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))  # document this tree's sources, not an install
sys.path.insert(0, str(HERE / "_ext"))

import dynbatch  # noqa: E402

project = "dynbatch"
author = "dynbatch maintainers"
copyright = "dynbatch maintainers, Apache-2.0"
release = dynbatch.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "notes",  # _ext/notes.py: links to notes, checked; the public-api directive
    "params",  # _ext/params.py: a public parameter no docstring describes fails the build
]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autoclass_content = "both"  # a class's arguments are described in its __init__'s docstring
autodoc_default_options = {"show-inheritance": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False

# furo: a text column wide enough for code (_static/dynbatch.css widens it to 100 columns)
html_theme = "furo"
html_static_path = ["_static"]
html_css_files = ["dynbatch.css"]
html_title = f"dynbatch {release}"
