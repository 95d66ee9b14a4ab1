"""grad_weight_tf32.cu on the host: grad_weight_wgmma_tf32's builds, sizes,
name and layout.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple, Optional

import numpy

from .. import settings
from .._geometry import Geometry
from .._launch import _blocks_for, _i32, _Launch
from .._plan import Plan
from .common import (
    INT32_LIMIT,
    RESIDENT_COPY_BYTES,
    WGMMA_THREADS,
    _axes,
    _is_1d,
    instantiation_loop,
    resident_copy_bytes,
)
from .grad_weight import _GradWeightFamily, _split_steps, _splits, _sum_splits_plan
from .rules import _problem_passes

# grad_weight_tf32.cu: float32 1D grad_weight on wgmma, TF32 (passes 1) or
# 3xTF32 (passes 3); its sizes as the kernel has them.  Tap mode (stride 1, an
# accumulator a tap) and fold mode (strides, the taps in the rows).
GRAD_WEIGHT_TF32_TAPS = (3,)  # MAX_TAPS builds of tap mode: accumulators for up to this many taps
GRAD_WEIGHT_TF32_FOLD_MAX_KERNEL = 64  # fold mode: kernels of up to this many taps (at least 2 output channels a block)
GRAD_WEIGHT_TF32_PASSES = (1, 3)
GRAD_WEIGHT_TF32_POSITIONS = 64  # GWT_POSITIONS: reduction positions per item
GRAD_WEIGHT_TF32_ROWS = 128  # GWT_ROWS: rows per block (tap mode: output channels)
GRAD_WEIGHT_TF32_COLUMNS = 64  # GWT_COLUMNS: input channels per block
GRAD_WEIGHT_TF32_BUFFERS = 3  # GWT_BUFFERS: window and x buffers


# k-steps (8 positions each) per group of MMAs, by passes: its CHAIN (3xTF32,
# a fresh accumulator a group: 4 errs over twice cuDNN on short sums; 1 errs
# more on long ones and is slower; TF32, straight into the sums: 4 and 8
# measured alike on P2, perf notes v27 and v29).
GRAD_WEIGHT_TF32_CHAIN = {1: 4, 3: 2}


def grad_weight_tf32_name(index: str, taps: int, passes: int, copy: int, fold: bool = False) -> str:
    return f"grad_weight_wgmma_tf32<{index}, {taps}, {passes}, {copy}, {GRAD_WEIGHT_TF32_CHAIN[passes]}, {str(fold).lower()}>"


class GradWeightTf32Layout(NamedTuple):
    fold: bool
    taps: int  # MAX_TAPS of the build (1 in fold mode)
    tile_co: int  # output channels a block
    vectors: int  # 16-byte vectors of an item's grad_output window row
    raw_row: int  # bytes between window rows in shared memory
    shared: int  # shared-memory bytes
    copy: int  # bytes a window copy


def grad_weight_tf32_layout(geometry: Geometry, dtype: str, passes: int) -> Optional[GradWeightTf32Layout]:
    """grad_weight_wgmma_tf32's layout, or None where it does not apply: not
    float32, not 1D, input rows that are not whole 16-byte vectors; at stride
    1 more taps than tap mode's largest build; strided, more than
    GRAD_WEIGHT_TF32_FOLD_MAX_KERNEL taps (fold mode).

    An item's window covers grad_output positions stride * l0 - padding -
    shift0 .. (shift0 < 4 aligns it down to a vector), stride *
    (GRAD_WEIGHT_TF32_POSITIONS - 1) + (K - 1) d + 1 past shift0, in whole
    vectors; a raw row is that, rounded up to an odd number of vectors (in tap
    mode its float count 4 more than a multiple of 8: conflict-free fragment
    loads).  Shared memory: three x tiles (64 channels x the positions, hi
    and for 3xTF32 lo) and three raw windows of tile_co rows (128 in tap
    mode, 128 // K in fold mode)."""
    if dtype != "float32" or passes not in GRAD_WEIGHT_TF32_PASSES or not _is_1d(geometry):
        return None
    in_w, kernel, stride, padding, dilation, out_w = _axes(geometry)[1]
    if in_w % 4:
        return None
    fold = stride != 1
    if fold:
        if kernel > GRAD_WEIGHT_TF32_FOLD_MAX_KERNEL:
            return None
        taps, tile_co = 1, GRAD_WEIGHT_TF32_ROWS // kernel
    else:
        taps = next((t for t in GRAD_WEIGHT_TF32_TAPS if t >= kernel), None)
        if taps is None:
            return None
        tile_co = GRAD_WEIGHT_TF32_ROWS
    copy = resident_copy_bytes(out_w, dtype)
    shift0 = -padding % 4
    vectors = -(-(shift0 + stride * (GRAD_WEIGHT_TF32_POSITIONS - 1) + 1 + (kernel - 1) * dilation) // 4)
    raw_row = (vectors | 1) * 16
    x_tile = GRAD_WEIGHT_TF32_COLUMNS * GRAD_WEIGHT_TF32_POSITIONS * 4 * (2 if passes == 3 else 1)
    shared = GRAD_WEIGHT_TF32_BUFFERS * (x_tile + tile_co * raw_row)
    return GradWeightTf32Layout(fold, taps, tile_co, vectors, raw_row, shared, copy)


def tf32_instantiations(dtype: str, index: str) -> list[tuple[str, str]]:
    """grad_weight_wgmma_tf32's builds (float32): tap mode's and fold mode's,
    in TF32 and 3xTF32, by copy size."""
    names = []
    if dtype == "float32":
        names += [
            ("grad_weight_tf32.cu", grad_weight_tf32_name(index, taps, passes, copy, fold))
            for taps, fold in [(t, False) for t in GRAD_WEIGHT_TF32_TAPS] + [(1, True)]
            for passes in GRAD_WEIGHT_TF32_PASSES
            for copy in RESIDENT_COPY_BYTES
        ]
    return names


def instantiations() -> list[tuple[str, str]]:
    """This file's part of _kernels.all_instantiations(), in its order:
    every (file, name) of grad_weight_tf32.cu the library can launch."""
    return instantiation_loop(trailing=(tf32_instantiations,))


_S = settings.current  # the routing settings in force



@functools.lru_cache(maxsize=1024)
def _grad_weight_tf32_plan(geometry: Geometry, index: str, passes: int, multiprocessors: int, max_shared: int):
    """(grad_weight_wgmma_tf32 launch, workspace shape, sum_splits launch),
    or None where it does not apply (see grad_weight_tf32_layout) or does not
    fit in shared memory.  One block per multiprocessor: the (group, output-
    channel tile, input-channel tile) combinations times enough splits of the
    (image, 64-position chunk) items to fill them."""
    layout = grad_weight_tf32_layout(geometry, "float32", passes)
    if layout is None or layout.shared > max_shared:
        return None
    channels, out_channels = geometry.in_channels_per_group, geometry.out_channels_per_group
    batch, _, _, in_w = geometry.input_shape4
    co_tiles = -(-out_channels // layout.tile_co)
    ci_tiles = -(-channels // GRAD_WEIGHT_TF32_COLUMNS)
    items = batch * -(-in_w // GRAD_WEIGHT_TF32_POSITIONS)
    independent = co_tiles * ci_tiles * geometry.groups
    splits = _splits(independent, items, 4, multiprocessors, blocks_per_multiprocessor=1)
    per_split = -(-items // splits)
    splits = -(-items // per_split)
    if per_split > INT32_LIMIT:
        return None
    scalars = (
        _i32(batch), _i32(geometry.groups), _i32(channels), _i32(out_channels), _i32(in_w), _i32(geometry.output_shape4[3]),
        _i32(geometry.kernel[1]), _i32(geometry.stride[1]), _i32(geometry.padding[1]), _i32(geometry.dilation[1]),
        _i32(layout.vectors), _i32(layout.raw_row), _i32(per_split), _i32(co_tiles), _i32(ci_tiles),
    )  # fmt: skip
    name = grad_weight_tf32_name(index, layout.taps, passes, layout.copy, layout.fold)
    partial = _Launch("grad_weight_tf32.cu", name, _blocks_for(independent * splits), WGMMA_THREADS, scalars, layout.shared)
    count = math.prod(geometry.weight_shape4)
    return partial, (splits,) + geometry.weight_shape4, _sum_splits_plan("float32", count, splits, multiprocessors)


class GradWeightTf32(_GradWeightFamily):
    """grad_weight_wgmma_tf32, in one of its two places (3xTF32 first, TF32 later)."""

    def __init__(self, passes: int):
        self.passes = passes
        self.name = "grad_weight_wgmma_tf32" + ("" if passes == 1 else " (3xTF32)")

    def _plan_for(self, p):
        return lambda index: _grad_weight_tf32_plan(p.geometry, index, self.passes, p.device.multiprocessors, p.device.max_shared)

    def reject(self, p):
        passes = _problem_passes(p)
        if passes != self.passes:
            return f"not {'TF32' if self.passes == 1 else '3xTF32'}"
        if not _S().use_grad_weight_tf32 or p.dtype != "float32" or passes not in GRAD_WEIGHT_TF32_PASSES:
            return "off (use_grad_weight_tf32), or not float32"
        reason = self.common_reject(p, hopper=True)
        if reason:
            return reason
        g = p.geometry
        if min(g.in_channels_per_group, g.out_channels_per_group) < _S().grad_weight_tf32_min_channels:
            return "fewer channels a group than grad_weight_tf32_min_channels"
        if self._plan_for(p)("int") is None:
            return "not 1D with a layout it takes, or does not fit"
        return None

    def plan(self, p, tile):
        steps, buffers = _split_steps(self._plan_for(p), self.inputs, self.sizes(p), numpy.float64)
        return Plan("grad_weight_wgmma_tf32", None, steps, buffers)
