"""The host side of grad_weight_window: its families' rules and plans."""

from __future__ import annotations

import functools
import math

import numpy

from .. import _kernels
from .._geometry import Geometry
from .._launch import _blocks_for, _i32, _Launch
from .._plan import Plan
from .grad_weight import _GradWeightFamily, _split_steps, _splits, _sum_splits_plan
from .rules import _problem_passes


@functools.lru_cache(maxsize=1024)
def _grad_weight_window_plan(geometry: Geometry, dtype: str, index: str, multiprocessors: int, tile, max_shared: int):
    """(grad_weight_window launch, workspace shape, sum_splits launch), or
    None where it does not apply with `tile` (see grad_weight_window_layout)
    or its window does not fit in shared memory."""
    layout = _kernels.grad_weight_window_layout(geometry, tile, dtype)
    if layout is None or layout[1] > max_shared:
        return None
    window_rows, shared = layout
    channels, out_channels = geometry.in_channels_per_group, geometry.out_channels_per_group
    batch, _, _, in_w = geometry.input_shape4
    out_w = geometry.output_shape4[3]
    kernel = geometry.kernel[1]
    m_tiles = -(-channels // tile.bm)
    j_tiles = -(-out_channels // _kernels.GRAD_WEIGHT_WINDOW_COLUMNS)
    tap_chunks = -(-kernel // tile.taps)
    slices = batch * -(-in_w // _kernels.GRAD_WEIGHT_WINDOW_SLICE)
    if slices > _kernels.INT32_LIMIT // 2:  # the kernel counts slices in int
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
    name = _kernels.grad_weight_window_name(dtype, index, tile)
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
        reason = self.common_reject(p, _kernels.GRAD_WEIGHT_WINDOW_DTYPES)
        if reason:
            return reason
        if self._plan(p, self.heuristic(p)) is None:
            return "not a 1D problem with a power-of-two stride it takes, or does not fit"
        return None

    def heuristic(self, p):
        g = p.geometry
        # 8 taps per block where the kernel is long or strided, else 64 channels
        return _kernels.GRAD_WEIGHT_WINDOW_TILES[0 if g.kernel[1] > 4 or g.stride[1] > 2 or g.in_channels_per_group <= 32 else 1]

    def tiles(self, p):
        return tuple(t for t in _kernels.GRAD_WEIGHT_WINDOW_TILES if self._plan(p, t))

    def tune_key(self, p):
        return self.name, (p.dtype, p.geometry)

    def plan(self, p, tile):
        x_size, gy_size = self.sizes(p)
        # (a margin: the window's vector indices run up to window_rows + 8 past grad_output's last element)
        steps, buffers = _split_steps(lambda index: self._plan(p, tile, index), self.inputs, (x_size, gy_size + (1 << 16)), numpy.float64)
        return Plan(self.name, tile, steps, buffers)
