"""Run the notebooks top to bottom.

    python scripts/run_notebooks.py            # execute each notebook; fail on the first error
    python scripts/run_notebooks.py --save     # ... and write the outputs back, tidied

With nbclient and ipykernel installed (the `test` extra) each notebook runs in
a Jupyter kernel, in notebooks/, as a user would run it.  Where they are
missing (a bare GPU image), --plain runs each notebook's code cells in order
in a fresh Python process instead, with matplotlib's non-interactive backend.
--save keeps the figures and short printed outputs, and drops execution
counts and run metadata so that re-running changes as little as possible.
"""

import argparse
import pathlib
import subprocess
import sys

NOTEBOOKS = pathlib.Path(__file__).resolve().parent.parent / "notebooks"


def run_in_kernel(path: pathlib.Path, save: bool) -> None:
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    if save:
        for cell in notebook.cells:
            cell.metadata = {}
            if cell.cell_type == "code":
                cell.execution_count = None
                for output in cell.outputs:
                    output.pop("execution_count", None)
                    output.metadata = {}
        notebook.metadata.pop("widgets", None)
        nbformat.write(notebook, path)


def run_plain(path: pathlib.Path) -> None:
    import json

    cells = json.loads(path.read_text())["cells"]
    code = "import matplotlib\nmatplotlib.use('Agg')\n" + "\n\n".join(
        "".join(c["source"]) for c in cells if c["cell_type"] == "code"
    )
    subprocess.run([sys.executable, "-c", code], cwd=path.parent, check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--save", action="store_true", help="write the outputs back into the notebooks")
    parser.add_argument("--plain", action="store_true", help="run the code cells in a Python process (no Jupyter)")
    parser.add_argument("names", nargs="*", help="notebook file names (default: all)")
    args = parser.parse_args()
    paths = [NOTEBOOKS / n for n in args.names] if args.names else sorted(NOTEBOOKS.glob("*.ipynb"))
    for path in paths:
        print(f"running {path.name}", flush=True)
        run_plain(path) if args.plain else run_in_kernel(path, args.save)
    print(f"{len(paths)} notebooks ran top to bottom")
    return 0


if __name__ == "__main__":
    sys.exit(main())
