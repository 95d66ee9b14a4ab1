"""The API reference (docs/api, Sphinx) builds with no warning, the
examples in the public docstrings run as written, and the README stays a
user's page: short, free of kernel names, with CI's test command and live links."""

from __future__ import annotations

import doctest
import pathlib
import re
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


# The README is for users: short, no kernel names but inside a link to docs/,
# the test command exactly what .ci/run runs, and every relative link alive.

README = (ROOT / "README.md").read_text(encoding="utf-8")
_DOCS_LINK = r"\[[^\]]*\]\(docs/[^)]*\)"
_API_NAMES = {"grad_input", "grad_weight", "grad_bias"}  # the backward functions' results, not kernels


def _kernel_names() -> set:
    """Every kernel family's name, every kernel file's stem, and every name in
    docs/routing.md's kernel columns (variants such as the multicast builds)."""
    from cupyconv import _registry

    names = {family.name.split(" ")[0] for families in _registry.REGISTRY.values() for family in families}
    names |= {path.stem for path in (ROOT / "cupyconv" / "kernels").glob("*.cu")}
    for row in re.findall(r"^\| [PX]\d .*$", (ROOT / "docs" / "routing.md").read_text(encoding="utf-8"), re.M):
        names |= set(re.findall(r"\b[a-z0-9]+(?:_[a-z0-9]+)+\b", "|".join(row.split("|")[3:])))
    return {name for name in names if "_" in name} - _API_NAMES


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_readme_is_short():
    assert len(README.splitlines()) <= 150


def test_readme_names_no_kernel_outside_a_link_to_docs():
    text = re.sub(_DOCS_LINK, "", README)
    found = sorted(name for name in _kernel_names() if re.search(rf"\b{re.escape(name)}\b", text))
    assert not found, f"kernel names in README.md: {found}"


def test_readme_test_command_is_what_ci_runs():
    command = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert command.startswith("python -m pip install")
    assert f"```sh\n{command}\n```" in README


@pytest.mark.parametrize("name", ["README.md", "docs/guide.md", "docs/layout.md"])
def test_relative_links_resolve(name):
    page = ROOT / name
    text = page.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{name}: {target}"
        if anchor and linked.suffix == ".md":
            headings = re.findall(r"^#+ (.+)$", linked.read_text(encoding="utf-8"), re.M)
            assert anchor in {_slug(h) for h in headings}, f"{name}: {target}"
