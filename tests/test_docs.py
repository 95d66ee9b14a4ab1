"""The API reference (docs/api, Sphinx) builds with no warning, and the
examples in the public docstrings run as written."""

from __future__ import annotations

import doctest
import pathlib
import subprocess
import sys

import pytest

import cupyconv

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_public_docstring_examples_run():
    failed, attempted = doctest.testmod(cupyconv, verbose=False)
    assert attempted >= 4 and failed == 0


def test_api_reference_builds_without_warnings(tmp_path):
    pytest.importorskip("sphinx")
    pytest.importorskip("torch")  # the adapter's pages import it
    built = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(ROOT / "docs" / "api"), str(tmp_path)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout + built.stderr
    page = (tmp_path / "index.html").read_text()
    for name in ("conv_transpose1d", "conv_transpose2d_backward", "set_autotune", "ConvTranspose2d", "convert"):
        assert name in page
