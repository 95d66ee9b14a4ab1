"""conv_window.cu on the host: its tiles, sizes, names and shared-memory
layout (its phase records: phases.window_records).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy

from .common import CUDA_TYPE, WINDOW_DTYPES, instantiation_loop


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
WINDOW_MIN_ROWS = 32  # fewer GEMM rows stay on conv_mma (the window's tiles would be mostly padding)


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
