"""The host side of conv_gemm: its families' rules and plans."""

from __future__ import annotations

import functools
from typing import Tuple

import numpy

from .. import _kernels, settings
from .._geometry import Geometry
from .._launch import _blocks_for, _i32, _i64, _Launch
from .._plan import Buffer, Copy, Family, Plan, Step, Table
from .rules import _gemm_index, _gemm_rows, _problem_passes, _weight_dtype

_S = settings.current  # the routing settings in force



def _packs_weight(geometry: Geometry, pass_name: str, out_size: int) -> bool:
    return out_size >= _S().pack_min_output and _kernels.gemm_weight_strides(geometry, pass_name)[1] != 1


@functools.lru_cache(maxsize=1024)
def _gemm_plan(geometry: Geometry, pass_name: str, dtype: str, index: str, passes: int, packed: bool, tile) -> Tuple[_Launch, tuple]:
    """conv_gemm (passes 0) or conv_mma with `tile` over every (group, phase,
    row tile, column tile), and its phase table, for the forward pass or
    grad_input."""
    if pass_name == "forward":
        flat, phases_h, phases_w = _kernels.forward_phases(geometry)
        red_channels, out_channels = geometry.in_channels_per_group, geometry.out_channels_per_group
        source4, out4 = geometry.input_shape4, geometry.output_shape4
    else:
        flat, phases_h, phases_w = _kernels.grad_input_phases(geometry)
        red_channels, out_channels = geometry.out_channels_per_group, geometry.in_channels_per_group
        source4, out4 = geometry.output_shape4, geometry.input_shape4
    w_strides = _kernels.gemm_weight_strides(geometry, pass_name, packed)
    counts = flat[0::9]
    cols_h, cols_w = max(counts[:phases_h]), max(counts[phases_h:])
    batch, _, in_h, in_w = source4
    _, _, out_h, out_w = out4
    m_tiles = -(-out_channels // tile.bm)
    col_tiles = -(-(batch * cols_h * cols_w) // tile.bn)
    blocks = _blocks_for(phases_h * phases_w * m_tiles * col_tiles * geometry.groups)
    scalars = (
        _i32(phases_h), _i32(phases_w), _i32(batch), _i32(geometry.groups),
        _i32(red_channels), _i32(out_channels),
        _i32(in_h), _i32(in_w), _i32(out_h), _i32(out_w), _i32(geometry.kernel[1]),
        _i64(w_strides[0]), _i64(w_strides[1]), _i64(w_strides[2]), _i64(w_strides[3]),
        _i32(cols_h), _i32(cols_w), _i32(m_tiles), _i32(col_tiles),
    )  # fmt: skip
    name = _kernels.mma_name(dtype, index, tile, passes) if passes else _kernels.gemm_name(dtype, index, tile)
    return _Launch("conv_gemm.cu", name, blocks, tile.threads, scalars), flat


def _gemm_heuristic(geometry: Geometry, pass_name: str, passes: int):
    return _kernels.pick_tile(_kernels.MMA_TILES if passes else _kernels.GEMM_TILES, _gemm_rows(geometry, pass_name))


class ConvGemm(Family):
    """conv_mma (tensor cores) or conv_gemm (CUDA cores): every forward pass and grad_input."""

    ops, fallback = ("forward", "grad_input"), True

    def __init__(self, tensor_cores: bool):
        self.tensor_cores = tensor_cores
        self.name = "conv_mma" if tensor_cores else "conv_gemm"

    def reject(self, p):
        if bool(_problem_passes(p)) != self.tensor_cores:
            return "on CUDA cores" if self.tensor_cores else "on tensor cores"
        return None

    def _packed(self, p):
        return _packs_weight(p.geometry, p.op, p.output_size)

    def heuristic(self, p):
        return _gemm_heuristic(p.geometry, p.op, _problem_passes(p))

    def tiles(self, p):
        passes = _problem_passes(p)
        return (_kernels.MMA_TUNE_TILES if passes == 1 else _kernels.MMA_TILES) if passes else _kernels.GEMM_TUNE_TILES

    def tune_key(self, p):
        return self.name, (p.dtype, p.op, _gemm_index(p), _problem_passes(p), self._packed(p), p.geometry)

    def plan(self, p, tile):
        packed = self._packed(p)
        launch, flat = _gemm_plan(p.geometry, p.op, p.dtype, _gemm_index(p), _problem_passes(p), packed, tile)
        bias = "bias" if p.op == "forward" else None
        if not packed:
            return Plan(self.name, tile, (Step(launch, ("source", "weight", bias, "out", Table(flat))),))
        g = p.geometry
        shape = _kernels.pack_gemm_weight(numpy.empty(g.weight_shape4[:2] + (g.kernel[0] * g.kernel[1],), numpy.uint8), g, p.op).shape
        steps = (Copy("weight", "t0", g, p.op), Step(launch, ("source", "t0", bias, "out", Table(flat))))
        return Plan(self.name, tile, steps, (Buffer(shape, _weight_dtype(p)),))
