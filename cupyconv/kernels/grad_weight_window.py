"""grad_weight_window.cu on the host: its tiles, sizes, name and layout."""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy

from .._geometry import Geometry
from .._launch import _blocks_for, _i32, _Launch
from .._plan import Plan
from .common import CUDA_TYPE, INT32_LIMIT, _axes, _is_1d, instantiation_loop
from .grad_weight import _GradWeightFamily, _split_steps, _splits, _sum_splits_plan
from .rules import _problem_passes


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


@functools.lru_cache(maxsize=1024)
def _grad_weight_window_plan(geometry: Geometry, dtype: str, index: str, multiprocessors: int, tile, max_shared: int):
    """(grad_weight_window launch, workspace shape, sum_splits launch), or
    None where it does not apply with `tile` (see grad_weight_window_layout)
    or its window does not fit in shared memory."""
    layout = grad_weight_window_layout(geometry, tile, dtype)
    if layout is None or layout[1] > max_shared:
        return None
    window_rows, shared = layout
    channels, out_channels = geometry.in_channels_per_group, geometry.out_channels_per_group
    batch, _, _, in_w = geometry.input_shape4
    out_w = geometry.output_shape4[3]
    kernel = geometry.kernel[1]
    m_tiles = -(-channels // tile.bm)
    j_tiles = -(-out_channels // GRAD_WEIGHT_WINDOW_COLUMNS)
    tap_chunks = -(-kernel // tile.taps)
    slices = batch * -(-in_w // GRAD_WEIGHT_WINDOW_SLICE)
    if slices > INT32_LIMIT // 2:  # the kernel counts slices in int
        return None
    independent = m_tiles * j_tiles * tap_chunks * geometry.groups
    splits = _splits(independent, slices, 8, multiprocessors)
    per_split = -(-slices // splits)
    splits = -(-slices // per_split)
    scalars = (
        _i32(batch), _i32(geometry.groups), _i32(channels), _i32(out_channels), _i32(in_w), _i32(out_w), _i32(kernel),
        _i32(geometry.stride[1].bit_length() - 1), _i32(geometry.padding[1]), _i32(geometry.dilation[1]), _i32(window_rows),
        _i32(per_split), _i32(m_tiles), _i32(j_tiles), _i32(tap_chunks), _i32(splits),
    )  # fmt: skip
    name = grad_weight_window_name(dtype, index, tile)
    partial = _Launch("grad_weight_window.cu", name, _blocks_for(independent * splits), tile.threads, scalars, shared)
    count = math.prod(geometry.weight_shape4)
    return partial, (splits,) + geometry.weight_shape4, _sum_splits_plan(dtype, count, splits, multiprocessors)


class GradWeightWindow(_GradWeightFamily):
    name = "grad_weight_window"

    def _plan(self, p, tile, index="int"):
        return _grad_weight_window_plan(p.geometry, p.dtype, index, p.device.multiprocessors, tile, p.device.max_shared)

    def reject(self, p):
        if _problem_passes(p) != 1:
            return "not one product a pair"
        reason = self.common_reject(p, GRAD_WEIGHT_WINDOW_DTYPES)
        if reason:
            return reason
        if self._plan(p, self.heuristic(p)) is None:
            return "not a 1D problem with a power-of-two stride it takes, or does not fit"
        return None

    def heuristic(self, p):
        g = p.geometry
        # 8 taps per block where the kernel is long or strided, else 64 channels
        return GRAD_WEIGHT_WINDOW_TILES[0 if g.kernel[1] > 4 or g.stride[1] > 2 or g.in_channels_per_group <= 32 else 1]

    def tiles(self, p):
        return tuple(t for t in GRAD_WEIGHT_WINDOW_TILES if self._plan(p, t))

    def tune_key(self, p):
        return self.name, (p.dtype, p.geometry)

    def plan(self, p, tile):
        x_size, gy_size = self.sizes(p)
        # (a margin: the window's vector indices run up to window_rows + 8 past grad_output's last element)
        steps, buffers = _split_steps(lambda index: self._plan(p, tile, index), self.inputs, (x_size, gy_size + (1 << 16)), numpy.float64)
        return Plan(self.name, tile, steps, buffers)
