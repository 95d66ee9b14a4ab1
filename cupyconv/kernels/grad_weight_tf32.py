"""The host side of grad_weight_tf32: its families' rules and plans."""

from __future__ import annotations

import functools
import math

import numpy

from .. import _kernels, settings
from .._geometry import Geometry
from .._launch import _blocks_for, _i32, _Launch
from .._plan import Plan
from .grad_weight import _GradWeightFamily, _split_steps, _splits, _sum_splits_plan
from .rules import _problem_passes

_S = settings.current  # the routing settings in force



@functools.lru_cache(maxsize=1024)
def _grad_weight_tf32_plan(geometry: Geometry, index: str, passes: int, multiprocessors: int, max_shared: int):
    """(grad_weight_wgmma_tf32 launch, workspace shape, sum_splits launch),
    or None where it does not apply (see grad_weight_tf32_layout) or does not
    fit in shared memory.  One block per multiprocessor: the (group, output-
    channel tile, input-channel tile) combinations times enough splits of the
    (image, 64-position chunk) items to fill them."""
    layout = _kernels.grad_weight_tf32_layout(geometry, "float32", passes)
    if layout is None or layout.shared > max_shared:
        return None
    channels, out_channels = geometry.in_channels_per_group, geometry.out_channels_per_group
    batch, _, _, in_w = geometry.input_shape4
    co_tiles = -(-out_channels // layout.tile_co)
    ci_tiles = -(-channels // _kernels.GRAD_WEIGHT_TF32_COLUMNS)
    items = batch * -(-in_w // _kernels.GRAD_WEIGHT_TF32_POSITIONS)
    independent = co_tiles * ci_tiles * geometry.groups
    splits = _splits(independent, items, 4, multiprocessors, blocks_per_multiprocessor=1)
    per_split = -(-items // splits)
    splits = -(-items // per_split)
    if per_split > _kernels.INT32_LIMIT:
        return None
    scalars = (
        _i32(batch), _i32(geometry.groups), _i32(channels), _i32(out_channels), _i32(in_w), _i32(geometry.output_shape4[3]),
        _i32(geometry.kernel[1]), _i32(geometry.stride[1]), _i32(geometry.padding[1]), _i32(geometry.dilation[1]),
        _i32(layout.vectors), _i32(layout.raw_row), _i32(per_split), _i32(co_tiles), _i32(ci_tiles),
    )  # fmt: skip
    name = _kernels.grad_weight_tf32_name(index, layout.taps, passes, layout.copy, layout.fold)
    partial = _Launch("grad_weight_tf32.cu", name, _blocks_for(independent * splits), _kernels.WGMMA_THREADS, scalars, layout.shared)
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
        if not _S().use_grad_weight_tf32 or p.dtype != "float32" or passes not in _kernels.GRAD_WEIGHT_TF32_PASSES:
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
