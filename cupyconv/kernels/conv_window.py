"""conv_window.cu on the host: its tiles, sizes, names and shared-memory
layout (its phase records: phases.window_records).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy

from .. import settings
from .._geometry import Geometry
from .._launch import _Launch
from .._plan import Family, Plan, Step, Table
from .common import CUDA_TYPE, ITEMSIZE, WINDOW_DTYPES, instantiation_loop, pick_tile
from .pack_weight import _window_weight_steps
from .phases import fill_record
from .rules import _gemm_index, _gemm_rows, _problem_passes, _tensor_core_passes
from .window import _window_problem, _window_scalars, _WindowGroup


class WindowTile(NamedTuple):
    """A conv_window block tile: BM rows x BN columns over WARPS_M x
    WARPS_N warps (each a (BM/WARPS_M) x (BN/WARPS_N) grid of m16n8
    fragments).  The channel slice is fixed by the dtype (64 bytes)."""

    bm: int
    bn: int
    warps_m: int
    warps_n: int

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * self.warps_n


# conv_window tiles, chosen by the GEMM's row count (output channels x fold).
WINDOW_TILES = (WindowTile(32, 128, 1, 4), WindowTile(64, 128, 2, 4), WindowTile(128, 128, 2, 4))
WINDOW_TUNE_TILES = WINDOW_TILES + (WindowTile(128, 128, 4, 2), WindowTile(128, 64, 4, 2), WindowTile(64, 64, 2, 2))
WINDOW_MAX_VECTORS = 32  # conv_window.cu: 16-byte vectors per window row for the 16-bit types
WINDOW_MAX_VECTORS_WIDE = 64  # and for float


def window_name(dtype: str, index: str, tile: WindowTile, passes: int = 1, fill: bool = False) -> str:
    t = tile
    return f"conv_window<{CUDA_TYPE[dtype]}, {index}, {t.bm}, {t.bn}, {t.warps_m}, {t.warps_n}, {passes}{', true' if fill else ''}>"


# conv_window's fill builds (conv_window<..., true>): 3xTF32 only, for float32
# "highest" (the other modes take conv_wgmma_resident's on Hopper).
WINDOW_FILL_PASSES = 3


def window_layout(flat: tuple[int, ...], tile: WindowTile, dtype: str) -> tuple[int, int, int, int]:
    """(max_taps, window_vectors, window_stride, shared-memory bytes) of
    conv_window for these records: A holds max_taps tap slices of BM rows of
    80 bytes; a window row covers every position a block reads (BN columns,
    the taps' span, up to one vector of alignment), in 16-byte vectors, and
    its length in 32-bit words is 8 more than a multiple of 16 so that B
    fragment reads hit 32 distinct banks."""
    vec = 16 // numpy.dtype(dtype).itemsize
    records = numpy.asarray(flat).reshape(-1, 9)
    taps = records[:, 7]
    span = max(int((tile.bn - 1) * in_step + max(count - 1, 0) * abs(tap_in_step) + 1) for in_step, count, tap_in_step in records[:, [4, 7, 8]])
    vectors = -(-(vec - 1 + span) // vec)
    words = vectors * vec
    stride = words + (8 - words % 16) % 16
    stage = int(taps.max()) * tile.bm * 80 + 16 * stride * 4
    return int(taps.max()), vectors, stride, max(2 * stage, tile.bm * (tile.bn + 16) * 4)


def window_instantiations(dtype: str, index: str, passes: int) -> list[tuple[str, str]]:
    """conv_window's builds for one dtype, index type and passes: every tile,
    and with WINDOW_FILL_PASSES every tile's fill build too."""
    names = []
    if dtype in WINDOW_DTYPES:
        names += [("conv_window.cu", window_name(dtype, index, t, passes)) for t in WINDOW_TUNE_TILES]
        if passes == WINDOW_FILL_PASSES:
            names += [("conv_window.cu", window_name(dtype, index, t, passes, True)) for t in WINDOW_TUNE_TILES]
    return names


def instantiations() -> list[tuple[str, str]]:
    """This file's part of _kernels.all_instantiations(), in its order:
    every (file, name) of conv_window.cu the library can launch."""
    return instantiation_loop(passes=(window_instantiations,))


_S = settings.current  # the routing settings in force



@functools.lru_cache(maxsize=1024)
def _window_plan(geometry: Geometry, pass_name: str, dtype: str, index: str, tile, max_shared: int, passes: int = 1, fill: bool = False):
    """(conv_window launch, phase records), or None where conv_window cannot
    run this problem with `tile` (see _window_problem; or a window too long
    for the 16-bit kernel's registers, or too little shared memory).  With
    `fill`, its fill build (the forward pass's one tapped phase, columns
    covering every output)."""
    problem = _window_problem(geometry, pass_name, dtype, fill=fill)
    if problem is None:
        return None
    max_taps, vectors, stride, shared = window_layout(problem[0], tile, dtype)
    if vectors > (WINDOW_MAX_VECTORS if ITEMSIZE[dtype] == 2 else WINDOW_MAX_VECTORS_WIDE) or shared > max_shared:
        return None
    blocks, scalars = _window_scalars(geometry, pass_name, dtype, problem, tile, max_taps, vectors, stride, fill)
    name = window_name(dtype, index, tile, passes, fill)
    return _Launch("conv_window.cu", name, blocks, tile.threads, scalars, shared), problem[0]


class WindowFill(Family):
    """conv_window's fill build in float32 "highest" (3xTF32)."""

    name, ops = "conv_window_fill", ("forward",)

    def reject(self, p):
        s = _S()
        if not (s.use_fill and s.use_window_fill):
            return "off (use_fill, use_window_fill)"
        if p.dtype != "float32" or _tensor_core_passes(p.dtype, p.precision) != WINDOW_FILL_PASSES:
            return "not float32 \"highest\" on tensor cores"
        if p.output_size < s.window_min_output:
            return "output below window_min_output"
        if not p.aligned("source", 16):
            return "input not 16-byte aligned"
        if fill_record(p.geometry, "forward") is None:
            return "no fill (stride 2 and a dilation that is a multiple of it)"
        if self._plan(p, self.heuristic(p)) is None:
            return "does not fit"
        return None

    def _plan(self, p, tile):
        return _window_plan(p.geometry, "forward", p.dtype, _gemm_index(p), tile, p.device.max_shared, WINDOW_FILL_PASSES, True)

    def heuristic(self, p):
        return pick_tile(WINDOW_TILES, _gemm_rows(p.geometry, "forward"))

    def tiles(self, p):
        return tuple(t for t in WINDOW_TUNE_TILES if self._plan(p, t))

    def tune_key(self, p):
        return "conv_window", (p.dtype, WINDOW_FILL_PASSES, "forward", _gemm_index(p), p.geometry, "fill")

    def plan(self, p, tile):
        steps, buffers = _window_weight_steps(p, "forward", p.dtype, fold=False)
        launch, flat = self._plan(p, tile)
        return Plan(self.name, tile, steps + (Step(launch, ("source", "t0", "bias", "out", Table(flat))),), buffers)


class ConvWindow(_WindowGroup):
    name = "conv_window"

    def _plan(self, p, tile):
        return _window_plan(p.geometry, p.op, p.dtype, _gemm_index(p), tile, p.device.max_shared, _problem_passes(p))

    def reject(self, p):
        reason = self.window_reject(p)
        if reason:
            return reason
        if self._plan(p, self.heuristic(p)) is None:
            return "not 1D, grad_input with a stride, too few rows, rows of part vectors, or does not fit"
        return None

    def heuristic(self, p):
        return pick_tile(WINDOW_TILES, self.rows(p))

    def tiles(self, p):
        return tuple(t for t in WINDOW_TUNE_TILES if self._plan(p, t))

    def tune_key(self, p):
        return "conv_window", (p.dtype, _problem_passes(p), p.op, _gemm_index(p), p.geometry)

    def plan(self, p, tile):
        passes = _problem_passes(p)
        steps, buffers = _window_weight_steps(p, p.op, p.dtype, round_tf32=passes == 1)  # TF32: conv_window takes A as packed
        launch, flat = self._plan(p, tile)
        return Plan(self.name, tile, steps + (Step(launch, ("source", "t0", self.bias(p), "out", Table(flat))),), buffers)
