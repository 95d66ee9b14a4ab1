"""grad_weight_nhwc.cu on the host: the channels-last grad_weight GEMM's
tiles, names, instantiations and plan (x and grad_output changed to channels
last, the split partials summed and laid out as the weight by sum_taps).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy

from .._launch import _blocks_for, _i32, _Launch
from .._plan import Buffer, Family, Plan, Problem, Step
from .common import CUDA_TYPE, INDEX_TYPES, INT32_LIMIT, ITEMSIZE, instantiation_loop
from .. import settings
from .conv_nhwc import NHWC_DTYPES, _transpose, _transposable, nhwc_min_products, nhwc_products
from .grad_weight import _splits
from .rules import _problem_passes, _weight_dtype

SLICE_POSITIONS = 32  # grad_weight_nhwc.cu's BK


class GradNhwcTile(NamedTuple):
    """BM input channels x BN output channels a block, over WARPS_M x WARPS_N warps."""

    bm: int
    bn: int
    warps_m: int
    warps_n: int
    stages: int = 4

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * self.warps_n

    def shared_bytes(self, dtype: str) -> int:
        pad = 32 if ITEMSIZE[dtype] == 4 else 16
        return self.stages * SLICE_POSITIONS * ((self.bm + self.bn) * ITEMSIZE[dtype] + 2 * pad)


# One for each (BM, BN) of 32, 64 and 128: the smallest that holds the channels.
GRAD_NHWC_TILES = (
    GradNhwcTile(128, 128, 2, 4), GradNhwcTile(128, 64, 4, 2), GradNhwcTile(128, 32, 4, 1),
    GradNhwcTile(64, 128, 2, 4), GradNhwcTile(64, 64, 2, 2), GradNhwcTile(64, 32, 2, 2),
    GradNhwcTile(32, 128, 1, 4), GradNhwcTile(32, 64, 2, 2), GradNhwcTile(32, 32, 2, 2),
)  # fmt: skip
SUM_THREADS = 256

_S = settings.current  # the routing settings in force


def grad_weight_nhwc_name(dtype: str, tile: GradNhwcTile) -> str:
    t = tile
    return f"grad_weight_nhwc<{CUDA_TYPE[dtype]}, {t.bm}, {t.bn}, {t.warps_m}, {t.warps_n}, {t.stages}>"


def sum_taps_name(dtype: str) -> str:
    return f"sum_taps<{CUDA_TYPE[dtype]}>"


def nhwc_instantiations(dtype: str, index: str) -> list[tuple[str, str]]:
    """grad_weight_nhwc's and sum_taps' builds for a dtype (listed with the index type int)."""
    if dtype not in NHWC_DTYPES or index != INDEX_TYPES[0]:
        return []
    return [("grad_weight_nhwc.cu", grad_weight_nhwc_name(dtype, t)) for t in GRAD_NHWC_TILES] + [("grad_weight_nhwc.cu", sum_taps_name(dtype))]


def instantiations() -> list[tuple[str, str]]:
    """This file's part of _kernels.all_instantiations(), in its order."""
    return instantiation_loop(trailing=(nhwc_instantiations,))


def _positions(p: Problem) -> int:
    batch, _, in_h, in_w = p.geometry.input_shape4
    return batch * in_h * in_w


@functools.lru_cache(maxsize=1024)
def _grad_nhwc_plan(p: Problem, tile: GradNhwcTile) -> Plan:
    g = p.geometry
    batch, in_c, in_h, in_w = g.input_shape4
    _, out_c, out_h, out_w = g.output_shape4
    in_per, out_per = g.in_channels_per_group, g.out_channels_per_group
    kernel_h, kernel_w = g.kernel
    positions = _positions(p)
    m_tiles, n_tiles = -(-in_per // tile.bm), -(-out_per // tile.bn)
    independent = m_tiles * n_tiles * kernel_h * kernel_w * g.groups
    splits = _splits(independent, positions, 8 * SLICE_POSITIONS, p.device.multiprocessors)
    per_split = -(-positions // splits)
    per_split = -(-per_split // SLICE_POSITIONS) * SLICE_POSITIONS
    splits = -(-positions // per_split)
    (sh, sw), (ph, pw), (dh, dw) = g.stride, g.padding, g.dilation
    scalars = (
        _i32(batch), _i32(g.groups), _i32(in_per), _i32(out_per), _i32(in_h), _i32(in_w), _i32(out_h), _i32(out_w),
        _i32(kernel_h), _i32(kernel_w), _i32(sh), _i32(sw), _i32(ph), _i32(pw), _i32(dh), _i32(dw),
        _i32(per_split), _i32(splits), _i32(m_tiles), _i32(n_tiles),
    )  # fmt: skip
    gemm = _Launch(
        "grad_weight_nhwc.cu", grad_weight_nhwc_name(p.dtype, tile), _blocks_for(independent * splits), tile.threads, scalars, tile.shared_bytes(p.dtype)
    )  # fmt: skip
    rows, taps = in_c * out_per, kernel_h * kernel_w
    tap_tiles = -(-taps // 32)
    finish = _Launch(
        "grad_weight_nhwc.cu", sum_taps_name(p.dtype), _blocks_for(-(-rows // 32) * tap_tiles), SUM_THREADS,
        (_i32(rows), _i32(taps), _i32(splits), _i32(tap_tiles)),
    )  # fmt: skip
    dtype = _weight_dtype(p)
    steps = (
        Step(_transpose(p.dtype, batch, in_c, in_h * in_w), ("x", "t0")),
        Step(_transpose(p.dtype, batch, out_c, out_h * out_w), ("grad_output", "t1")),
        Step(gemm, ("t0", "t1", "t2")),
        Step(finish, ("t2", "out")),
    )
    buffers = (
        Buffer((batch, in_h, in_w, in_c), dtype),
        Buffer((batch, out_h, out_w, out_c), dtype),
        Buffer((splits, taps, rows), numpy.dtype(numpy.float32)),
    )
    return Plan("grad_weight_nhwc", tile, steps, buffers)


class GradWeightNhwc(Family):
    """grad_weight_nhwc: grad_weight as a channels-last GEMM a tap on mma.sync
    tensor cores (TF32, FP16, BF16), x and grad_output changed to channels
    last for it."""

    name = "grad_weight_nhwc"
    ops = ("grad_weight",)

    def reject(self, p):
        g = p.geometry
        if p.device.compute_capability < 80:
            return "needs sm_80 (mma.sync, cp.async)"
        if p.dtype not in NHWC_DTYPES or _problem_passes(p) != 1:
            return "one tensor-core product a term only (TF32, FP16, BF16)"
        if (g.in_channels_per_group * ITEMSIZE[p.dtype]) % 16 or (g.out_channels_per_group * ITEMSIZE[p.dtype]) % 16:
            return "channels a group not a multiple of 16 bytes"
        if nhwc_products(p) < nhwc_min_products(p):
            return "memory-bound (nhwc_min_products): the layout changes would cost more than they save"
        if math.prod(g.output_shape4) < _S().nhwc_min_output:
            return "small (nhwc_min_output): grad_weight_mma's two launches cost less host time"
        if _positions(p) > INT32_LIMIT - SLICE_POSITIONS or math.prod(g.weight_shape4) > INT32_LIMIT:
            return "too large"
        if not (_transposable(g.input_shape4) and _transposable(g.output_shape4)):
            return "too large"
        if self.heuristic(p).shared_bytes(p.dtype) > p.device.max_shared:
            return "shared memory"
        return None

    def tiles(self, p):
        return tuple(t for t in GRAD_NHWC_TILES if t.shared_bytes(p.dtype) <= p.device.max_shared)

    def heuristic(self, p):
        g = p.geometry
        bm, bn = (next((b for b in (32, 64) if channels <= b), 128) for channels in (g.in_channels_per_group, g.out_channels_per_group))
        return next(t for t in GRAD_NHWC_TILES if (t.bm, t.bn) == (bm, bn))

    def tune_key(self, p):
        return self.name, (p.dtype, p.geometry)

    def plan(self, p, tile):
        return _grad_nhwc_plan(p, tile)
