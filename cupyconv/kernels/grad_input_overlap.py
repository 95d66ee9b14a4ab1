"""The host side of grad_input_overlap: its families' rules and plans."""

from __future__ import annotations

import functools
import math

from .. import _kernels, settings
from .._geometry import Geometry
from .._launch import _i32, _i64, _Launch, _TensorMap
from .._plan import Buffer, Family, Plan, Step
from .rules import _gemm_index, _problem_passes, _weight_dtype

_S = settings.current  # the routing settings in force



def _grad_input_overlap_applies(geometry: Geometry, dtype: str, source_offset: int, out_offset: int, passes: int = 1) -> bool:
    itemsize = 4 if dtype == "float32" else 2
    return (
        (dtype in _kernels.OVERLAP_DTYPES or (dtype == "float32" and passes == 1)) and _kernels._is_1d(geometry) and geometry.groups == 1
        and geometry.stride[1] == 8 and geometry.dilation[1] == 1 and 8 < geometry.kernel[1] <= 16
        and geometry.padding[1] % 4 == 0 and geometry.out_size[1] % 4 == 0 and geometry.in_size[1] % 2 == 0
        and source_offset % (4 * itemsize) == 0 and out_offset % (2 * itemsize) == 0
    )  # fmt: skip


@functools.lru_cache(maxsize=1024)
def _grad_input_overlap_plan(geometry: Geometry, dtype: str, index: str):
    """(grad_input_overlap launch, pack_overlap_weight launch, packed shape)."""
    in_w, out_w = geometry.in_size[1], geometry.out_size[1]
    m_tiles, n_tiles = -(-geometry.in_channels // _kernels.OVERLAP_BM), -(-in_w // _kernels.OVERLAP_BN)
    scalars = tuple(_i32(v) for v in (geometry.in_channels, geometry.out_channels, in_w, out_w, geometry.padding[1], m_tiles, n_tiles))
    blocks = m_tiles * n_tiles * geometry.batch
    name = _kernels.grad_input_overlap_name(dtype, index)
    cb, shared = _kernels.overlap_layout(dtype)
    launch = _Launch("grad_input_overlap.cu", name, blocks, _kernels.OVERLAP_THREADS, scalars, shared)
    co_padded = -(-geometry.out_channels // cb) * cb
    per_chunk = 4 if dtype == "float32" else 8  # taps in 16 bytes
    packed_shape = (co_padded, m_tiles, 16 // per_chunk, _kernels.OVERLAP_BM, per_chunk)
    total = math.prod(packed_shape)
    pack_scalars = (_i32(geometry.in_channels), _i32(geometry.out_channels), _i32(geometry.kernel[1]), _i32(m_tiles), _i64(total))
    pack_blocks = max(1, min(-(-total // (16 * _kernels.PACK_THREADS)), _kernels.PACK_MAX_BLOCKS))  # a thread a row of 16 taps
    pack = _Launch("grad_input_overlap.cu", _kernels.pack_overlap_weight_name(dtype), pack_blocks, _kernels.PACK_THREADS, pack_scalars)
    return launch, pack, packed_shape


@functools.lru_cache(maxsize=1024)
def _grad_input_multicast_plan(geometry: Geometry, index: str, multiprocessors: int):
    """(grad_input_multicast launch, pack_multicast_weight launch, packed
    shape) for a float grad_input the overlap rule takes, or None where its
    work or rows pass 32-bit counts."""
    batch, in_w, out_w = geometry.batch, geometry.in_size[1], geometry.out_size[1]
    in_channels, out_channels = geometry.in_channels, geometry.out_channels
    ci_tiles = -(-in_channels // _kernels.GRAD_INPUT_MULTICAST_COLS)
    items = batch * -(-in_w // _kernels.GRAD_INPUT_MULTICAST_POSITIONS)
    units = -(-items // 2) * ci_tiles
    if max(units, 8 * in_w + 2048, out_channels * in_channels) > _kernels.INT32_LIMIT:
        return None
    gy_map = _TensorMap(
        dims=(out_w, out_channels, batch), strides=(out_w * 4, out_w * 4 * out_channels),
        box=(_kernels.GRAD_INPUT_MULTICAST_SPAN, _kernels.GRAD_INPUT_MULTICAST_CO, 1), data_type=7, swizzle=0,  # FLOAT32, no swizzle
    )  # fmt: skip
    weight_map = _TensorMap(
        dims=(16, in_channels, out_channels, 1), strides=(64, 64 * in_channels, 64 * in_channels * out_channels),
        box=(16, _kernels.GRAD_INPUT_MULTICAST_COLS // 2, 1, 1), data_type=7, swizzle=2, array=1,  # FLOAT32, 64-byte swizzle
    )  # fmt: skip
    scalars = (gy_map, weight_map) + tuple(_i32(v) for v in (batch, in_channels, out_channels, in_w, geometry.padding[1], ci_tiles))
    grid = 2 * max(1, min(units, multiprocessors // 2))
    launch = _Launch(
        "grad_input_overlap.cu", _kernels.grad_input_multicast_name(index), grid, _kernels.GRAD_INPUT_MULTICAST_THREADS, scalars,
        _kernels.GRAD_INPUT_MULTICAST_SHARED,
    )  # fmt: skip
    rows = out_channels * in_channels
    pack_scalars = (_i32(in_channels), _i32(out_channels), _i32(geometry.kernel[1]), _i64(rows))
    pack_blocks = max(1, min(-(-rows // _kernels.PACK_THREADS), _kernels.PACK_MAX_BLOCKS))
    pack = _Launch("grad_input_overlap.cu", _kernels.PACK_MULTICAST_WEIGHT, pack_blocks, _kernels.PACK_THREADS, pack_scalars)
    return launch, pack, (out_channels, in_channels, 16)


class GradInputOverlap(Family):
    """grad_input_overlap, and its float build grad_input_multicast."""

    name, ops = "grad_input_overlap", ("grad_input",)

    def _multicast(self, p):
        if p.dtype == "float32" and _S().use_grad_input_multicast and _kernels.GRAD_INPUT_MULTICAST_SHARED <= p.device.max_shared:
            return _grad_input_multicast_plan(p.geometry, _gemm_index(p), p.device.multiprocessors)
        return None

    def reject(self, p):
        if not _S().use_grad_input_overlap or p.device.compute_capability != 90:
            return "off (use_grad_input_overlap) or not compute capability 9.0"
        offsets = dict(p.alignment)
        if not _grad_input_overlap_applies(p.geometry, p.dtype, offsets["source"], offsets["out"], _problem_passes(p)):
            return "not a 1D stride-8 pass of 9 to 16 taps it takes (16-bit, or float32 \"tf32\"), or misaligned"
        if self._multicast(p) is None and _kernels.overlap_layout(p.dtype)[1] > p.device.max_shared:
            return "does not fit in shared memory"
        return None

    def plan(self, p, tile):
        multicast = self._multicast(p)
        launch, pack, packed_shape = multicast or _grad_input_overlap_plan(p.geometry, p.dtype, _gemm_index(p))
        steps = (Step(pack, ("weight", "t0")), Step(launch, ("source", "t0", "out")))
        return Plan("grad_input_multicast" if multicast else self.name, None, steps, (Buffer(packed_shape, _weight_dtype(p)),))
