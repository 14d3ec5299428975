"""Sphinx configuration of the nemo-recipes docs: MyST Markdown pages, the generated reference (docs/_ext/reference.py
writes it from the code when the build starts) and the API reference from docstrings (autodoc).

Build: `python -m sphinx -W -b html docs build/docs` (warnings are errors, as in CI: tests/test_docs.py)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))  # the checkout's package, whatever is installed

from nemo_recipes import __version__  # noqa: E402

project = "nemo-recipes"
author = "nemo-recipes contributors"
copyright = "nemo-recipes contributors, Apache-2.0"
release = version = __version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "reference"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "README.md", "reference/generated/recipe_table.md"]
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]
# The API pages document the fast path (catalog, planner, errors): importable without NeMo, torch or NeMo-Run.
autodoc_default_options = {"members": True, "undoc-members": False, "member-order": "bysource"}
autodoc_typehints = "description"
# The docstrings are written for `help()`: `code` in single backquotes reads as code, not as a cross-reference.
default_role = "literal"
html_theme = "alabaster"
html_title = f"nemo-recipes {release}"
html_static_path: list[str] = []
