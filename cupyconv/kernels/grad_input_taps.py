"""The host side of grad_input_taps: its families' rules and plans."""

from __future__ import annotations

import functools
import math

import numpy

from .. import _kernels, settings
from .._geometry import Geometry
from .._launch import _blocks_for, _i32, _index_type, _Launch
from .._plan import Buffer, Family, Plan, Step
from .grad_weight import _sum_splits_plan
from .rules import _problem_passes, _size

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
        name, shared = _kernels.grad_input_taps_name(dtype, index, tile, vector, passes), tile.shared
    else:  # columns (j, t), reduction (n, l)
        columns, reduction, out_shape4 = out_channels * kernel, batch * in_w, geometry.weight_shape4
        name, shared = _kernels.grad_weight_taps_name(dtype, index, tile, vector, passes), _kernels.grad_weight_taps_shared(tile)
    m_tiles = -(-rows // tile.bm)
    col_tiles = -(-columns // tile.bn)
    chunks = -(-(reduction * _kernels.ITEMSIZE[dtype]) // 128)  # 128-byte stages
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
            "grad_input": (_kernels.grad_input_taps_vector, _kernels.GRAD_INPUT_TAPS_TILES),
            "grad_weight": (_kernels.grad_weight_taps_vector, _kernels.GRAD_WEIGHT_TAPS_TILES),
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
        return _kernels.pick_tile(self.candidates, p.geometry.in_channels_per_group)

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
