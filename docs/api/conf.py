"""Sphinx configuration of cupyconv's API reference (built by tests/test_docs.py, warnings as errors)."""

import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

import cupyconv  # noqa: E402

project = "cupyconv"
release = version = cupyconv.__version__
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon"]
napoleon_google_docstring = False
napoleon_numpy_docstring = True
autodoc_typehints = "description"
autodoc_member_order = "bysource"
html_theme = "alabaster"
exclude_patterns = ["_build"]
