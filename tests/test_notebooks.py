"""Every notebook in notebooks/ runs top to bottom in a Jupyter kernel (on the
GPU when there is one, else on the CPU fallbacks each notebook describes),
and 03_performance shows the saved benchmark runs without a GPU."""

from __future__ import annotations

import pathlib

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _execute(path):
    """The notebook, run in a kernel from its own folder, with its outputs."""
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
    client.execute()  # raises CellExecutionError, with the cell and traceback, on any error
    return notebook


def _outputs(notebook):
    return [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs]


def test_the_three_notebooks_are_there():
    assert [p.name for p in NOTEBOOKS] == ["01_quickstart.ipynb", "02_pytorch.ipynb", "03_performance.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path):
    errors = [o for o in _outputs(_execute(path)) if o.output_type == "error"]
    assert not errors


def test_the_performance_notebook_shows_the_saved_runs(monkeypatch):
    """03_performance on docs/data's JSON (its path without a GPU, forced so
    that a GPU machine runs it too): both suites' rows, every mode and
    direction's geometric mean as the bench prints it, and a chart each."""
    from cupyconv import bench_zoo

    monkeypatch.setenv("CUPYCONV_NOTEBOOK_SOURCE", "json")  # the kernel inherits the environment
    outputs = _outputs(_execute(ROOT / "notebooks" / "03_performance.ipynb"))
    text = "".join(o.text for o in outputs if o.output_type == "stream")
    for name in ("problems", "zoo"):
        environment, rows = bench_zoo.load_json(str(ROOT / "docs" / "data" / f"{name}.json"), with_environment=True)
        assert f"{name}: {len(rows)} rows saved in docs/data/{name}.json, from {environment}" in text
        for means in bench_zoo.geometric_means(rows):
            assert bench_zoo.format_means(means) in text
    assert "Z44 stride-1 asymmetric" in text and "X5 2D N16 Ci128" in text  # a line per problem in each table
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 2
