"""conv_direct.cu on the host: conv_direct's tiles, sizes as the kernel has
them, heuristic, name, weight layout and shared-memory layout.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy

from .. import settings
from .._geometry import Geometry
from .._launch import _blocks_for, _i32, _i64, _Launch
from .._plan import Buffer, Family, Plan, Step
from .common import CUDA_TYPE, instantiation_loop, pick_tile
from .pack_weight import PACK_MAX_BLOCKS, PACK_THREADS, pack_direct_weight_name
from .rules import _gemm_index, _products_per_output, _tensor_core_passes


class DirectTile(NamedTuple):
    """A conv_direct block: BM output channels (8 channel threads of BM / 8
    each) by 32 column threads, each taking TN consecutive columns of one
    phase at a time."""

    bm: int
    tn: int


DIRECT_TILES = (DirectTile(16, 8), DirectTile(32, 4), DirectTile(64, 4))
DIRECT_THREADS = 256
DIRECT_MAX_H_TAPS = 16  # conv_direct.cu keeps a row's H taps in arrays of 16
DIRECT_STAGE_BYTES = 80 * 1024  # the most shared memory the output tile may take
DIRECT_MAX_SLOT_GROUPS = 8  # CP is 4 * TN * k for k up to this
DIRECT_HEADER_BYTES = 912  # conv_direct.cu: the class's H taps, their first rows, the slots with W taps and their first taps, ahead of the arrays
DIRECT_MAX_STRIDE_W = 64  # conv_direct.cu lists up to this many slots (W phases)
DIRECT_WARPS = DIRECT_THREADS // 32  # the sums' units are dealt to these
DIRECT_FETCH = 8  # conv_direct.cu: input values a thread fetches per tile, at most
DIRECT_MAX_TILES_PER_BLOCK = 16
DIRECT_HEURISTIC_ROWS = 32  # the heuristic takes the narrowest tile covering min(M, this)
DIRECT_MIN_BLOCKS_PER_SM = 8  # tiles per block shrink (to 1) to keep at least this many blocks per multiprocessor


def direct_heuristic(out_channels: int) -> DirectTile:
    """conv_direct's tile without the autotuner: the narrowest covering up to
    DIRECT_HEURISTIC_ROWS output channels per group, so 16x8 for up to 16,
    else 32x4 (more blocks a multiprocessor than 64x4: perf notes v11)."""
    return pick_tile(DIRECT_TILES, min(out_channels, DIRECT_HEURISTIC_ROWS))


def direct_name(dtype: str, index: str, tile: DirectTile) -> str:
    return f"conv_direct<{CUDA_TYPE[dtype]}, {index}, {tile.bm}, {tile.tn}>"


def direct_tiles_per_block(tiles: int, multiprocessors: int) -> int:
    """Tiles a conv_direct block walks (its weight staged once): up to
    DIRECT_MAX_TILES_PER_BLOCK, fewer while the grid would have under
    DIRECT_MIN_BLOCKS_PER_SM blocks per multiprocessor."""
    return max(1, min(DIRECT_MAX_TILES_PER_BLOCK, tiles // (DIRECT_MIN_BLOCKS_PER_SM * multiprocessors)))


def pack_direct_weight(weight, geometry: Geometry):
    """A view of `weight` ordered (groups, KH, KW, C, M), conv_direct's
    layout before M is padded to the tile."""
    k = geometry
    w = weight.reshape(k.groups, k.in_channels_per_group, k.out_channels_per_group, k.kernel[0], k.kernel[1])
    return w.transpose(0, 3, 4, 1, 2)


def direct_h_taps(geometry: Geometry) -> int:
    """The most H taps any output row of the forward pass has (input bounds
    ignored)."""
    kernel, stride, padding, dilation = geometry.kernel[0], geometry.stride[0], geometry.padding[0], geometry.dilation[0]
    return max(sum((r + padding - k * dilation) % stride == 0 for k in range(kernel)) for r in range(stride))


def direct_w_slots(geometry: Geometry) -> int:
    """How many W phases (conv_direct's slots) of the forward pass have a W
    tap: the others are bias alone."""
    kernel, stride, padding, dilation = geometry.kernel[1], geometry.stride[1], geometry.padding[1], geometry.dilation[1]
    return sum(any((s + padding - k * dilation) % stride == 0 for k in range(kernel)) for s in range(stride))


def direct_layout(geometry: Geometry, tile: DirectTile, dtype: str):
    """(cp, span, th_max, shared bytes) of conv_direct with `tile`, or None
    where a row has more H taps than the kernel holds, a stride along W over
    DIRECT_MAX_STRIDE_W, or a tile's input rows more values than its threads
    fetch (256 * DIRECT_FETCH).

    CP (columns per phase slot) is 4 * TN * k, so that a unit of a warp's
    4 column threads stays in one slot; k is chosen for the best product of
    two efficiencies: the units' (k per slot with a W tap) share of the last
    round dealt to the 8 warps, and the output columns' share of the tiles
    covering them (with the output tile within DIRECT_STAGE_BYTES, and the
    tile's input rows within what its threads fetch)."""
    th_max = direct_h_taps(geometry)
    if th_max > DIRECT_MAX_H_TAPS or geometry.stride[1] > DIRECT_MAX_STRIDE_W:
        return None
    slots = direct_w_slots(geometry)
    acc = 8 if dtype == "float64" else 4
    kernel_w, stride_w, pad_w, dil_w = geometry.kernel[1], geometry.stride[1], geometry.padding[1], geometry.dilation[1]
    out_w = geometry.out_size[1]
    channels = geometry.in_channels_per_group

    def span_of(bw):
        return (bw - 1 + pad_w) // stride_w - (pad_w - (kernel_w - 1) * dil_w) // stride_w + 1

    best, best_score = None, -1.0
    for k in range(1, DIRECT_MAX_SLOT_GROUPS + 1):
        cp = 4 * tile.tn * k
        bw = stride_w * cp
        if th_max * channels * span_of(bw) > DIRECT_THREADS * DIRECT_FETCH:
            break
        if k > 1 and tile.bm * (bw + 1) * acc > DIRECT_STAGE_BYTES:
            break
        units = slots * k
        balance = units / (-(-units // DIRECT_WARPS) * DIRECT_WARPS) if units else 1.0
        score = balance * out_w / (-(-out_w // bw) * bw)
        if score > best_score + 1e-9:
            best, best_score = cp, score
    if best is None:
        return None
    bw = stride_w * best
    span = span_of(bw)
    shared = DIRECT_HEADER_BYTES + acc * (th_max * kernel_w * channels * tile.bm + th_max * channels * span + tile.bm * (bw + 1))
    return best, span, th_max, shared


def direct_instantiations(dtype: str, index: str) -> list[tuple[str, str]]:
    """conv_direct's builds for one dtype and index type."""
    return [("conv_direct.cu", direct_name(dtype, index, t)) for t in DIRECT_TILES]


def instantiations() -> list[tuple[str, str]]:
    """This file's part of _kernels.all_instantiations(), in its order:
    every (file, name) of conv_direct.cu the library can launch."""
    return instantiation_loop(trailing=(direct_instantiations,))


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
    layout = direct_layout(geometry, tile, dtype)
    if layout is None or layout[3] > max_shared:
        return None
    cp, span, th_max, shared = layout
    batch, _, in_h, in_w = geometry.input_shape4
    _, _, out_h, out_w = geometry.output_shape4
    out_channels = geometry.out_channels_per_group
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = geometry.kernel, geometry.stride, geometry.padding, geometry.dilation
    w_tiles = -(-out_w // (sw * cp))
    m_tiles = -(-out_channels // tile.bm)
    per_block = direct_tiles_per_block(out_h * w_tiles * m_tiles * batch * geometry.groups, multiprocessors)
    chunks = -(-(-(-out_h // sh) * w_tiles) // per_block)
    blocks = _blocks_for(chunks * sh * m_tiles * batch * geometry.groups)
    scalars = (
        _i32(batch), _i32(geometry.groups), _i32(geometry.in_channels_per_group), _i32(out_channels), _i32(m_tiles * tile.bm),
        _i32(in_h), _i32(in_w), _i32(out_h), _i32(out_w),
        _i32(kh), _i32(kw), _i32(sh), _i32(sw), _i32(ph), _i32(pw), _i32(dh), _i32(dw),
        _i32(th_max), _i32(cp), _i32(span), _i32(w_tiles), _i32(m_tiles), _i32(per_block), _i32(chunks),
    )  # fmt: skip
    return _Launch("conv_direct.cu", direct_name(dtype, index, tile), blocks, DIRECT_THREADS, scalars, shared)


@functools.lru_cache(maxsize=1024)
def _direct_weight_plan(geometry: Geometry, dtype: str, bm: int):
    """(pack_direct_weight launch, packed shape): the layout of
    pack_direct_weight with M padded to a multiple of `bm`."""
    taps = geometry.kernel[0] * geometry.kernel[1]
    rows = geometry.out_channels_per_group
    shape = (geometry.groups, geometry.kernel[0], geometry.kernel[1], geometry.in_channels_per_group, -(-rows // bm) * bm)
    total = math.prod(shape)
    scalars = (_i32(taps), _i32(geometry.in_channels_per_group), _i32(rows), _i32(shape[4]), _i64(total))
    blocks = max(1, min(-(-total // PACK_THREADS), PACK_MAX_BLOCKS))
    return _Launch("pack_weight.cu", pack_direct_weight_name(dtype), blocks, PACK_THREADS, scalars), shape


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
        return direct_heuristic(p.geometry.out_channels_per_group)

    def tiles(self, p):
        return tuple(t for t in DIRECT_TILES if self._plan(p, t))

    def tune_key(self, p):
        return "conv_direct", (p.dtype, _gemm_index(p), p.geometry)

    def plan(self, p, tile):
        pack, shape = _direct_weight_plan(p.geometry, p.dtype, tile.bm)
        steps = (Step(pack, ("weight", "t0")),) if math.prod(shape) else ()
        buffers = (Buffer(shape, numpy.dtype(numpy.float64 if p.dtype == "float64" else numpy.float32)),)
        return Plan(self.name, tile, steps + (Step(self._plan(p, tile), ("source", "t0", "bias", "out")),), buffers)
