"""conv_nhwc.cu on the host: the channels-last implicit GEMM's tiles, names,
instantiations and plans (forward and grad_input), with the layout changes
around it for channels-first arrays.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

from .. import settings
from .._launch import _blocks_for, _i32, _Launch
from .._plan import Buffer, Family, Plan, Problem, Step, Table
from .common import CUDA_TYPE, INDEX_TYPES, INT32_LIMIT, ITEMSIZE, instantiation_loop
from .phases import forward_phases, grad_input_phases
from .rules import _problem_passes, _weight_dtype

NHWC_DTYPES = ("float16", "bfloat16", "float32")
SLICE_BYTES = 64  # a shared row: conv_nhwc.cu's NHWC_ROW
TRANSPOSE_THREADS = 256


class NhwcTile(NamedTuple):
    """BM positions x BN channels a block, over WARPS_M x WARPS_N warps, STAGES slices in flight."""

    bm: int
    bn: int
    warps_m: int
    warps_n: int
    stages: int = 4

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * self.warps_n

    @property
    def shared(self) -> int:
        return self.stages * (self.bm + self.bn) * SLICE_BYTES


# By the pass's output channels (BN the smallest that holds them, up to 128),
# then BM 128, or 64 where 128 leaves the multiprocessors short of blocks.
NHWC_TILES = (
    NhwcTile(128, 128, 2, 4), NhwcTile(64, 128, 2, 4), NhwcTile(128, 64, 4, 2), NhwcTile(64, 64, 2, 2),
    NhwcTile(128, 32, 4, 1), NhwcTile(64, 32, 2, 1), NhwcTile(128, 16, 4, 1), NhwcTile(64, 16, 4, 1),
)  # fmt: skip


def nhwc_name(dtype: str, tile: NhwcTile) -> str:
    t = tile
    return f"conv_nhwc<{CUDA_TYPE[dtype]}, {t.bm}, {t.bn}, {t.warps_m}, {t.warps_n}, {t.stages}>"


def transpose_name(dtype: str) -> str:
    return f"transpose_nhwc<{CUDA_TYPE[dtype]}>"


def nhwc_instantiations(dtype: str, index: str) -> list[tuple[str, str]]:
    """conv_nhwc's builds for a dtype (listed with the index type int: it indexes in 64 bits)."""
    if dtype not in NHWC_DTYPES or index != INDEX_TYPES[0]:
        return []
    return [("conv_nhwc.cu", nhwc_name(dtype, t)) for t in NHWC_TILES] + [("conv_nhwc.cu", transpose_name(dtype))]


def instantiations() -> list[tuple[str, str]]:
    """This file's part of _kernels.all_instantiations(), in its order."""
    return instantiation_loop(trailing=(nhwc_instantiations,))


_S = settings.current  # the routing settings in force


def nhwc_products(p: Problem) -> float:
    """Products the call sums per element of its input and output (every
    pass of a call sums the same products over the same two arrays)."""
    g = p.geometry
    return (g.flops // 2) / max(math.prod(g.input_shape4) + math.prod(g.output_shape4), 1)


def nhwc_min_products(p: Problem) -> int:
    s = _S()
    return s.nhwc_min_products_tf32 if p.dtype == "float32" else s.nhwc_min_products


def _transposable(shape4) -> bool:
    """Whether transpose_nhwc's int rows and columns (with a tile's margin) hold an (N, C, H, W) array's."""
    return max(shape4[1], shape4[2] * shape4[3]) <= INT32_LIMIT - 64


def _pass(p: Problem):
    """(phase records, phases along H and W, source shape, output shape,
    reduction channels and output channels a group) of p's pass."""
    g = p.geometry
    if p.op == "forward":
        flat, phases_h, phases_w = forward_phases(g)
        return flat, phases_h, phases_w, g.input_shape4, g.output_shape4, g.in_channels_per_group, g.out_channels_per_group
    flat, phases_h, phases_w = grad_input_phases(g)
    return flat, phases_h, phases_w, g.output_shape4, g.input_shape4, g.out_channels_per_group, g.in_channels_per_group


def _rows(p: Problem) -> int:
    """GEMM rows of the largest phase (output positions)."""
    flat, phases_h, _, source4, _, _, _ = _pass(p)
    counts = flat[0::9]
    return source4[0] * max(counts[:phases_h]) * max(counts[phases_h:])


def _blocks(p: Problem, tile: NhwcTile) -> int:
    flat, phases_h, phases_w, _, _, _, out_channels = _pass(p)
    return -(-_rows(p) // tile.bm) * -(-out_channels // tile.bn) * phases_h * phases_w * p.geometry.groups


def _transpose(dtype: str, batch: int, rows: int, cols: int) -> _Launch:
    """transpose_nhwc: (batch, rows, cols) to (batch, cols, rows)."""
    tile = 64 if ITEMSIZE[dtype] == 2 else 32  # conv_nhwc.cu's TILE
    row_tiles, col_tiles = -(-rows // tile), -(-cols // tile)
    blocks = _blocks_for(batch * row_tiles * col_tiles)
    return _Launch("conv_nhwc.cu", transpose_name(dtype), blocks, TRANSPOSE_THREADS, (_i32(rows), _i32(cols), _i32(row_tiles), _i32(col_tiles)))


@functools.lru_cache(maxsize=1024)
def _nhwc_plan(p: Problem, tile: NhwcTile) -> Plan:
    g = p.geometry
    flat, phases_h, phases_w, source4, out4, red, out_channels = _pass(p)
    batch, source_c, in_h, in_w = source4
    _, out_c, out_h, out_w = out4
    taps = g.kernel[0] * g.kernel[1]
    row_tiles, n_tiles = -(-_rows(p) // tile.bm), -(-out_channels // tile.bn)
    scalars = (
        _i32(phases_h), _i32(phases_w), _i32(batch), _i32(g.groups), _i32(red), _i32(out_channels),
        _i32(in_h), _i32(in_w), _i32(out_h), _i32(out_w), _i32(g.kernel[1]), _i32(taps), _i32(row_tiles), _i32(n_tiles),
    )  # fmt: skip
    gemm = _Launch("conv_nhwc.cu", nhwc_name(p.dtype, tile), _blocks_for(_blocks(p, tile)), tile.threads, scalars, tile.shared)
    # The weight, given as (groups, C_in, C_out, taps), as (groups, output
    # channels, taps, reduction channels) of the pass: one transpose.
    if p.op == "forward":
        pack, packed_shape = _transpose(p.dtype, g.groups, red, out_channels * taps), (g.groups, out_channels, taps, red)
    else:
        pack, packed_shape = _transpose(p.dtype, g.groups * out_channels, red, taps), (g.groups, out_channels, taps, red)
    bias = "bias" if p.op == "forward" else None
    steps = (
        Step(pack, ("weight", "t0")),
        Step(_transpose(p.dtype, batch, source_c, in_h * in_w), ("source", "t1")),
        Step(gemm, ("t1", "t0", bias, "t2", Table(flat))),
        Step(_transpose(p.dtype, batch, out_h * out_w, out_c), ("t2", "out")),
    )
    buffers = (
        Buffer(packed_shape, _weight_dtype(p)),
        Buffer((batch, in_h, in_w, source_c), _weight_dtype(p)),
        Buffer((batch, out_h, out_w, out_c), _weight_dtype(p)),
    )
    return Plan("conv_nhwc", tile, steps, buffers)


class ConvNhwc(Family):
    """conv_nhwc: the forward pass and grad_input as a channels-last implicit
    GEMM on mma.sync tensor cores (TF32, FP16, BF16), the arrays changed to
    channels last and back around it."""

    name = "conv_nhwc"
    ops = ("forward", "grad_input")

    def reject(self, p):
        if p.device.compute_capability < 80:
            return "needs sm_80 (mma.sync, cp.async)"
        if p.dtype not in NHWC_DTYPES or _problem_passes(p) != 1:
            return "one tensor-core product a term only (TF32, FP16, BF16)"
        _, _, _, source4, out4, red, _ = _pass(p)
        if red * ITEMSIZE[p.dtype] % 16:
            return "reduction channels a group not a multiple of 16 bytes"
        if nhwc_products(p) < nhwc_min_products(p):
            return "memory-bound (nhwc_min_products): the layout changes would cost more than they save"
        if p.output_size < _S().nhwc_min_output:
            return "small (nhwc_min_output): one launch of conv_mma costs less host time"
        if _rows(p) > INT32_LIMIT or not _transposable(source4) or not _transposable(out4):
            return "too large: a GEMM's rows or an array's channels or positions past 32 bits"
        if self.heuristic(p).shared > p.device.max_shared:
            return "shared memory"
        return None

    def tiles(self, p):
        return tuple(t for t in NHWC_TILES if t.shared <= p.device.max_shared)

    def heuristic(self, p):
        out_channels = _pass(p)[6]
        bn = next((b for b in (16, 32, 64) if out_channels <= b), 128)
        big, small = (next(t for t in NHWC_TILES if (t.bm, t.bn) == (bm, bn)) for bm in (128, 64))
        return small if _blocks(p, big) < 2 * p.device.multiprocessors else big

    def tune_key(self, p):
        return self.name, (p.dtype, p.op, p.geometry)

    def plan(self, p, tile):
        return _nhwc_plan(p, tile)
