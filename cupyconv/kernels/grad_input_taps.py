"""grad_input_taps.cu on the host: its tiles, name and the problems it takes
(common._taps_vector).
"""

from __future__ import annotations

import functools
import math

import numpy

from .. import settings
from .._geometry import Geometry
from .._launch import _blocks_for, _i32, _index_type, _Launch
from .._plan import Buffer, Family, Plan, Step
from .common import (
    CUDA_TYPE,
    GRAD_INPUT_TAPS_VECTORS,
    ITEMSIZE,
    TapsTile,
    _axes,
    _taps_vector,
    instantiation_loop,
    pick_tile,
)
from .grad_weight import _sum_splits_plan
from .grad_weight_taps import (
    GRAD_WEIGHT_TAPS_TILES,
    grad_weight_taps_name,
    grad_weight_taps_shared,
    grad_weight_taps_vector,
)
from .rules import _problem_passes, _size

# grad_input_taps tiles, chosen by the GEMM's row count (input channels per group).
GRAD_INPUT_TAPS_TILES = (TapsTile(32, 128, 1, 4, 4), TapsTile(64, 128, 2, 4, 4), TapsTile(128, 128, 2, 4, 3))
GRAD_INPUT_TAPS_DTYPES = ("float32", "float16", "bfloat16")


def grad_input_taps_name(dtype: str, index: str, tile: TapsTile, vector: int, passes: int = 1) -> str:
    t = tile
    return f"grad_input_taps<{CUDA_TYPE[dtype]}, {index}, {t.bm}, {t.bn}, {t.warps_m}, {t.warps_n}, {t.stages}, {vector}, {passes}>"


def grad_input_taps_vector(geometry: Geometry, dtype: str):
    """The widest cp.async vector (bytes) grad_input_taps can load this
    problem's grad_output and weight with, or None where it does not apply
    (_taps_vector's conditions, and a vector of 8 or 16 bytes whose values
    divide the kernel, the stride, the padding and grad_output's row, so that
    a vector never crosses a channel and lies wholly inside or outside its
    row)."""
    if dtype not in GRAD_INPUT_TAPS_DTYPES:
        return None
    _, kernel, stride, padding, _, out_w = _axes(geometry)[1]
    return _taps_vector(geometry, dtype, (kernel, stride, padding, out_w))


def taps_instantiations(dtype: str, index: str, passes: int) -> list[tuple[str, str]]:
    """grad_input_taps' builds for one dtype, index type and passes: every
    tile and vector at least one value wide."""
    names = []
    if dtype in GRAD_INPUT_TAPS_DTYPES:
        names += [
            ("grad_input_taps.cu", grad_input_taps_name(dtype, index, t, v, passes))
            for t in GRAD_INPUT_TAPS_TILES
            for v in GRAD_INPUT_TAPS_VECTORS
            if v >= ITEMSIZE[dtype]
        ]
    return names


def instantiations() -> list[tuple[str, str]]:
    """This file's part of _kernels.all_instantiations(), in its order:
    every (file, name) of grad_input_taps.cu the library can launch."""
    return instantiation_loop(passes=(taps_instantiations,))


_S = settings.current  # the routing settings in force



@functools.lru_cache(maxsize=1024)
def _taps_plan(s, geometry: Geometry, pass_name: str, dtype: str, index: str, vector: int, multiprocessors: int, tile, passes: int = 1):
    """(grad_input_taps or grad_weight_taps launch, workspace shape,
    sum_splits launch); the last two are None where the reduction is not
    split (the kernel then writes the gradient itself).  The reduction is
    split where the GEMM has fewer blocks than fit on the GPU at once, into
    pieces of at least s.grad_input_taps_min_chunks stages."""
    rows, out_channels = geometry.in_channels_per_group, geometry.out_channels_per_group
    batch, _, _, in_w = geometry.input_shape4
    out_w = geometry.output_shape4[3]
    kernel = geometry.kernel[1]
    if pass_name == "grad_input":  # columns (n, l), reduction (j, t)
        columns, reduction, out_shape4 = batch * in_w, out_channels * kernel, geometry.input_shape4
        name, shared = grad_input_taps_name(dtype, index, tile, vector, passes), tile.shared
    else:  # columns (j, t), reduction (n, l)
        columns, reduction, out_shape4 = out_channels * kernel, batch * in_w, geometry.weight_shape4
        name, shared = grad_weight_taps_name(dtype, index, tile, vector, passes), grad_weight_taps_shared(tile)
    m_tiles = -(-rows // tile.bm)
    col_tiles = -(-columns // tile.bn)
    chunks = -(-(reduction * ITEMSIZE[dtype]) // 128)  # 128-byte stages
    independent = m_tiles * col_tiles * geometry.groups
    capacity = s.grad_input_taps_blocks_per_multiprocessor * multiprocessors
    splits = max(1, min(capacity // independent, chunks // s.grad_input_taps_min_chunks))
    per_split = -(-chunks // splits)
    splits = -(-chunks // per_split)
    scalars = (
        _i32(batch), _i32(geometry.groups), _i32(rows), _i32(out_channels), _i32(in_w), _i32(out_w), _i32(kernel),
        _i32(geometry.stride[1]), _i32(geometry.padding[1]), _i32(per_split), _i32(m_tiles), _i32(col_tiles), _i32(splits),
    )  # fmt: skip
    partial = _Launch(f"{pass_name}_taps.cu", name, _blocks_for(independent * splits), tile.threads, scalars, shared)
    if splits == 1:
        return partial, None, None
    return partial, (splits,) + out_shape4, _sum_splits_plan(dtype, math.prod(out_shape4), splits, multiprocessors)


class Taps(Family):
    """grad_input_taps or grad_weight_taps (float: TF32, or 3xTF32)."""

    def __init__(self, pass_name: str):
        self.pass_name = pass_name
        self.name, self.ops = f"{pass_name}_taps", (pass_name,)
        self.inputs = ("source", "weight") if pass_name == "grad_input" else ("x", "grad_output")
        self.vector_for, self.candidates = {
            "grad_input": (grad_input_taps_vector, GRAD_INPUT_TAPS_TILES),
            "grad_weight": (grad_weight_taps_vector, GRAD_WEIGHT_TAPS_TILES),
        }[pass_name]

    def reject(self, p):
        if not getattr(_S(), f"use_{self.pass_name}_taps"):
            return f"off (use_{self.pass_name}_taps)"
        passes = _problem_passes(p)
        if not passes:
            return "not on tensor cores"
        vector = self.vector_for(p.geometry, p.dtype)
        if vector is None:
            return "not a strided 1D problem with contiguous taps it takes"
        if _size(p.geometry.output_shape4) < _S().window_min_output:
            return "grad_output below window_min_output"
        if not all(p.aligned(role, vector) for role in self.inputs):
            return f"inputs not {vector}-byte aligned"
        return None

    def heuristic(self, p):
        return pick_tile(self.candidates, p.geometry.in_channels_per_group)

    def tiles(self, p):
        return self.candidates

    def tune_key(self, p):
        return self.name, (p.dtype, _problem_passes(p), self.vector_for(p.geometry, p.dtype), p.geometry)

    def plan(self, p, tile):
        g, passes = p.geometry, _problem_passes(p)
        vector = self.vector_for(g, p.dtype)
        partial, workspace_shape, finish = _taps_plan(_S(), g, self.pass_name, p.dtype, "int", vector, p.device.multiprocessors, tile, passes)
        sizes = (_size(g.output_shape4), _size(g.weight_shape4)) if self.pass_name == "grad_input" else (_size(g.input_shape4), _size(g.output_shape4))
        index = _index_type(*sizes, p.output_size, math.prod(workspace_shape or (0,)))
        if index != "int":
            partial, workspace_shape, finish = _taps_plan(_S(), g, self.pass_name, p.dtype, index, vector, p.device.multiprocessors, tile, passes)
        if finish is None:
            return Plan(self.name, tile, (Step(partial, self.inputs + ("out", None)),))
        steps = (Step(partial, self.inputs + (None, "t0")), Step(finish, ("t0", "out")))
        return Plan(self.name, tile, steps, (Buffer(workspace_shape, numpy.dtype(numpy.float64)),))
