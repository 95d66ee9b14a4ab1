"""grad_weight_window.cu on the host: its tiles, sizes, name and layout."""

from __future__ import annotations

from typing import NamedTuple

from .._geometry import Geometry
from .common import CUDA_TYPE, _axes, _is_1d, instantiation_loop


class GradWeightWindowTile(NamedTuple):
    """A grad_weight_window block: BM input channels x 64 output channels
    (one 128-byte window row) x up to `taps` kernel taps, over WARPS_M x 4
    warps."""

    bm: int
    taps: int
    warps_m: int

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * 4


# grad_weight_window tiles: 8 taps for long or strided kernels (a stride-s
# window serves every tap of a residue class, so more taps per block reuse
# more of it), 64 channels for short kernels.
GRAD_WEIGHT_WINDOW_TILES = (GradWeightWindowTile(32, 8, 2), GradWeightWindowTile(64, 4, 2))
GRAD_WEIGHT_WINDOW_DTYPES = ("float16", "bfloat16")
GRAD_WEIGHT_WINDOW_MIN_CHANNELS = 16  # fewer input or output channels per group keep grad_weight_mma
GRAD_WEIGHT_WINDOW_SLICE = 32  # reduction positions per slice (64 bytes of x)
GRAD_WEIGHT_WINDOW_COLUMNS = 64  # output channels per block (one 128-byte window row)


def grad_weight_window_name(dtype: str, index: str, tile: GradWeightWindowTile) -> str:
    return f"grad_weight_window<{CUDA_TYPE[dtype]}, {index}, {tile.bm}, {tile.taps}, {tile.warps_m}>"


def grad_weight_window_layout(geometry: Geometry, tile: GradWeightWindowTile, dtype: str):
    """(window rows, shared-memory bytes) of grad_weight_window, or None where
    it does not apply (not 16-bit, not 1D, a stride that is not a power of
    two, input rows that are not whole 16-byte vectors, too few channels per
    group).

    The window holds every grad_output position a slice's (position, tap)
    pairs read, from the first aligned down to 16 bytes: (32 - 1) * s +
    (taps - 1) * d + 1 rows plus up to 7 of alignment, rounded up to whole
    vectors; one 128-byte row each.  Two stages of it and of A (BM rows of
    80 bytes)."""
    if dtype not in GRAD_WEIGHT_WINDOW_DTYPES or not _is_1d(geometry):
        return None
    in_w, kernel, stride, _, dilation, _ = _axes(geometry)[1]
    if stride & (stride - 1) or in_w % 8:
        return None
    if min(geometry.in_channels_per_group, geometry.out_channels_per_group) < GRAD_WEIGHT_WINDOW_MIN_CHANNELS:
        return None
    taps = min(tile.taps, kernel)
    rows = (GRAD_WEIGHT_WINDOW_SLICE - 1) * stride + (taps - 1) * dilation + 1 + 7
    rows = -(-rows // 8) * 8
    return rows, 2 * (tile.bm * 80 + rows * 128)


def window_instantiations(dtype: str, index: str) -> list[tuple[str, str]]:
    """grad_weight_window's builds for one dtype and index type."""
    names = []
    if dtype in GRAD_WEIGHT_WINDOW_DTYPES:
        names += [("grad_weight_window.cu", grad_weight_window_name(dtype, index, t)) for t in GRAD_WEIGHT_WINDOW_TILES]
    return names


def instantiations() -> list[tuple[str, str]]:
    """This file's part of _kernels.all_instantiations(), in its order:
    every (file, name) of grad_weight_window.cu the library can launch."""
    return instantiation_loop(trailing=(window_instantiations,))
