"""The package as a stranger gets it: a wheel and an sdist built from this
tree, the wheel installed into a clean virtual environment with only its
core dependencies (no CuPy, no torch), imported from outside the tree and
run on the NumPy path; the sdist carrying what its tests need."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import venv
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CALL = """
import numpy, cupyconv
x = numpy.arange(2 * 3 * 5, dtype=numpy.float32).reshape(2, 3, 5)
w = numpy.ones((3, 4, 2), dtype=numpy.float32)
y = cupyconv.conv_transpose1d(x, w, stride=2)
assert y.shape == (2, 4, 10) and float(y.sum()) == float(x.sum()) * 4 * 2, (y.shape, float(y.sum()))
print(cupyconv.__version__, cupyconv.__file__)
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(wheel, sdist) paths, built with the setuptools already installed from
    a copy of the tree (the build writes its own directories there)."""
    source, out = tmp_path_factory.mktemp("source") / "cupyconv", tmp_path_factory.mktemp("dist")
    skip = shutil.ignore_patterns(
        ".git", "build", "bdist_wheel", "*.egg-info", "__pycache__", ".cupy-cache", ".scratch", ".hypothesis", "_build", ".pytest_cache",
        ".venv", ".whl", "gpu-logs", ".ruff_cache", ".tox",
    )  # fmt: skip
    shutil.copytree(ROOT, source, ignore=skip)
    build = (
        "import json, sys, setuptools.build_meta as b; "
        "out, names = sys.argv[1:3]; "  # (the backend rewrites sys.argv as it runs)
        "open(names, 'w').write(json.dumps([b.build_wheel(out), b.build_sdist(out)]))"
    )
    names = out / "names.json"
    result = subprocess.run([sys.executable, "-c", build, str(out), str(names)], cwd=source, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    wheel, sdist = json.loads(names.read_text())
    return out / wheel, out / sdist


def test_wheel_holds_the_kernels_and_no_tests(built):
    wheel, _ = built
    names = zipfile.ZipFile(wheel).namelist()
    assert "cupyconv/py.typed" in names
    assert any(n.startswith("cupyconv/kernels/") and n.endswith(".cu") for n in names)
    assert any(n.endswith(".cuh") for n in names)
    assert not any(n.startswith("tests/") for n in names)


def test_sdist_carries_what_its_tests_read(built):
    _, sdist = built
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    for needed in ("tests/sweep.py", "tests/oracle.py", "tests/conftest.py", "tests/gpu/helpers.py", "LICENSE", "CHANGELOG.md", "pyproject.toml"):
        assert needed in names, needed
    assert any(n.startswith("tests/data/routing-") for n in names)


def test_wheel_in_a_clean_venv_runs_the_numpy_path(built, tmp_path):
    """Only the core dependencies come with it (pip resolves them from the
    configured index); `import cupyconv` needs no CuPy and no torch."""
    wheel, _ = built
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    python = str(env_dir / "bin" / "python")
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    install = subprocess.run([python, "-m", "pip", "install", "-q", str(wheel)], capture_output=True, text=True, timeout=900, env=environment)
    assert install.returncode == 0, install.stdout[-4000:] + install.stderr[-4000:]
    listed = subprocess.run([python, "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True, env=environment).stdout.lower()
    installed = {re.sub(r"[-_.]+", "-", line.split("==")[0]) for line in listed.split()}
    assert installed >= {"cupyconv", "numpy", "ml-dtypes", "tqdm"} and not any(n.startswith(("cupy-", "torch")) for n in installed), listed
    run = subprocess.run([python, "-c", CALL], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=environment)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert str(env_dir) in run.stdout  # the installed copy, not this tree
    version = subprocess.run([python, "-m", "cupyconv", "--version"], cwd=tmp_path, capture_output=True, text=True, env=environment)
    assert version.returncode == 0 and version.stdout.startswith("cupyconv "), version.stdout + version.stderr
