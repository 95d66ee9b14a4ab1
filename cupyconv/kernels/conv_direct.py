"""The host side of conv_direct: its families' rules and plans."""

from __future__ import annotations

import functools
import math

import numpy

from .. import _kernels, settings
from .._geometry import Geometry
from .._launch import _blocks_for, _i32, _i64, _Launch
from .._plan import Buffer, Family, Plan, Step
from .rules import _gemm_index, _products_per_output, _tensor_core_passes

_S = settings.current  # the routing settings in force



def _direct_limit(geometry: Geometry, dtype: str, precision: str) -> float:
    """The most products per output conv_direct takes for this problem."""
    if _tensor_core_passes(dtype, precision) == 1:
        return _S().direct_max_products_tensor_cores
    if dtype == "float32" and geometry.out_channels_per_group >= _S().direct_full_rows:  # measured in float32 only
        return _S().direct_max_products_full_rows
    return _S().direct_max_products_cuda_cores


@functools.lru_cache(maxsize=1024)
def _direct_plan(geometry: Geometry, dtype: str, index: str, tile, max_shared: int, multiprocessors: int):
    """conv_direct's launch with `tile`, or None where it does not fit (a
    class of rows with too many H taps, a tile's input rows too long, or too
    little shared memory)."""
    layout = _kernels.direct_layout(geometry, tile, dtype)
    if layout is None or layout[3] > max_shared:
        return None
    cp, span, th_max, shared = layout
    batch, _, in_h, in_w = geometry.input_shape4
    _, _, out_h, out_w = geometry.output_shape4
    out_channels = geometry.out_channels_per_group
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = geometry.kernel, geometry.stride, geometry.padding, geometry.dilation
    w_tiles = -(-out_w // (sw * cp))
    m_tiles = -(-out_channels // tile.bm)
    per_block = _kernels.direct_tiles_per_block(out_h * w_tiles * m_tiles * batch * geometry.groups, multiprocessors)
    chunks = -(-(-(-out_h // sh) * w_tiles) // per_block)
    blocks = _blocks_for(chunks * sh * m_tiles * batch * geometry.groups)
    scalars = (
        _i32(batch), _i32(geometry.groups), _i32(geometry.in_channels_per_group), _i32(out_channels), _i32(m_tiles * tile.bm),
        _i32(in_h), _i32(in_w), _i32(out_h), _i32(out_w),
        _i32(kh), _i32(kw), _i32(sh), _i32(sw), _i32(ph), _i32(pw), _i32(dh), _i32(dw),
        _i32(th_max), _i32(cp), _i32(span), _i32(w_tiles), _i32(m_tiles), _i32(per_block), _i32(chunks),
    )  # fmt: skip
    return _Launch("conv_direct.cu", _kernels.direct_name(dtype, index, tile), blocks, _kernels.DIRECT_THREADS, scalars, shared)


@functools.lru_cache(maxsize=1024)
def _direct_weight_plan(geometry: Geometry, dtype: str, bm: int):
    """(pack_direct_weight launch, packed shape): the layout of
    _kernels.pack_direct_weight with M padded to a multiple of `bm`."""
    taps = geometry.kernel[0] * geometry.kernel[1]
    rows = geometry.out_channels_per_group
    shape = (geometry.groups, geometry.kernel[0], geometry.kernel[1], geometry.in_channels_per_group, -(-rows // bm) * bm)
    total = math.prod(shape)
    scalars = (_i32(taps), _i32(geometry.in_channels_per_group), _i32(rows), _i32(shape[4]), _i64(total))
    blocks = max(1, min(-(-total // _kernels.PACK_THREADS), _kernels.PACK_MAX_BLOCKS))
    return _Launch("pack_weight.cu", _kernels.pack_direct_weight_name(dtype), blocks, _kernels.PACK_THREADS, scalars), shape


class ConvDirect(Family):
    name, ops = "conv_direct", ("forward",)

    def reject(self, p):
        if p.output_size < _S().direct_min_output:
            return "output below direct_min_output"
        limit = _direct_limit(p.geometry, p.dtype, p.precision)
        if _products_per_output(p.geometry, "forward") > limit:
            return f"more than {limit} products an output"
        if self._plan(p, self.heuristic(p)) is None:
            return "does not fit"
        return None

    def _plan(self, p, tile):
        return _direct_plan(p.geometry, p.dtype, _gemm_index(p), tile, p.device.max_shared, p.device.multiprocessors)

    def heuristic(self, p):
        return _kernels.direct_heuristic(p.geometry.out_channels_per_group)

    def tiles(self, p):
        return tuple(t for t in _kernels.DIRECT_TILES if self._plan(p, t))

    def tune_key(self, p):
        return "conv_direct", (p.dtype, _gemm_index(p), p.geometry)

    def plan(self, p, tile):
        pack, shape = _direct_weight_plan(p.geometry, p.dtype, tile.bm)
        steps = (Step(pack, ("weight", "t0")),) if math.prod(shape) else ()
        buffers = (Buffer(shape, numpy.dtype(numpy.float64 if p.dtype == "float64" else numpy.float32)),)
        return Plan(self.name, tile, steps + (Step(self._plan(p, tile), ("source", "t0", "bias", "out")),), buffers)
