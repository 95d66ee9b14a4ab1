"""cupyconv.kernels: beside each kernel file the module of its stem, listing
that file's part of _kernels.all_instantiations(); _kernels re-exports every
name the kernel modules define, as the same objects."""

from __future__ import annotations

import ast
import importlib
import inspect
import pathlib

import pytest

from cupyconv import _kernels

STEMS = sorted(path.stem for path in (pathlib.Path(_kernels.__file__).parent / "kernels").glob("*.cu"))


def _defined(module) -> list:
    """The names a module assigns or defines at its top level."""
    names = []
    for node in ast.parse(inspect.getsource(module)).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [target.id for target in node.targets]
    return names


@pytest.mark.parametrize("stem", STEMS)
def test_each_kernel_file_lists_its_part_of_all_instantiations(stem):
    part = importlib.import_module(f"cupyconv.kernels.{stem}").instantiations()
    assert part and part == [entry for entry in _kernels.all_instantiations() if entry[0] == f"{stem}.cu"]


def test_all_instantiations_come_from_the_kernel_files():
    assert {filename for filename, _ in _kernels.all_instantiations()} == {f"{stem}.cu" for stem in STEMS}


def test_each_kernel_module_name_has_one_home_and_the_facade_re_exports_it_as_is():
    """A name is defined by one kernel module (a module's own `_S`, the
    settings accessor, aside); every name _kernels re-exports is its home
    module's object."""
    homes = {}
    for stem in ["common", "phases", "window", "rules"] + STEMS:
        module = importlib.import_module(f"cupyconv.kernels.{stem}")
        for name in _defined(module):
            if name in ("instantiations", "_S") or name.endswith("_instantiations"):
                continue  # each module's own parts of all_instantiations(), and its settings accessor
            assert name not in homes, (name, homes.get(name), stem)
            homes[name] = stem
            if hasattr(_kernels, name):
                assert getattr(_kernels, name) is getattr(module, name), (stem, name)
    facade = [node for node in ast.parse(inspect.getsource(_kernels)).body if isinstance(node, ast.ImportFrom) and node.module]
    for node in facade:
        for alias in node.names:
            if node.module.startswith("kernels."):
                assert homes.get(alias.name) == node.module.split(".")[1], alias.name
