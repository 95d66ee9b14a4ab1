"""The host side of grouped_backward: its families' rules and plans."""

from __future__ import annotations

import functools
import math

import numpy

from .. import _kernels, settings
from .._geometry import Geometry
from .._launch import _blocks_for, _i32, _i64, _index_type, _Launch
from .._plan import Buffer, Family, Plan, Step
from .grad_weight import _sum_splits_plan
from .rules import _size

_S = settings.current  # the routing settings in force



def _grouped_backward_routed(geometry: Geometry, dtype: str) -> bool:
    return _S().use_grouped_backward and math.prod(geometry.input_shape4) >= _S().grouped_min_input and _kernels.grouped_backward_applies(geometry, dtype)


@functools.lru_cache(maxsize=1024)
def _grouped_backward_plan(s, geometry: Geometry, dtype: str, index: str, multiprocessors: int, want_input: bool, want_weight: bool):
    """(grouped_backward launch, workspace shape or None, sum_splits launch or
    None): the pipelined build where it applies (s.grouped_pipe); the longest
    item (GROUPED_TILES) whose staging (two buffers when pipelined) fits two
    blocks a multiprocessor; splits of the (image, item) list sized for about
    four blocks a multiprocessor, and where grad_weight is wanted short enough
    that a lane sums at most GROUPED_MAX_SPLIT_SUM products in float."""
    pipe = s.grouped_pipe and _kernels.grouped_backward_pipes(geometry, dtype)
    for tile in _kernels.GROUPED_TILES:
        span, phase_row, m_row, shared = _kernels.grouped_backward_layout(geometry, tile, want_input, want_weight, 2 if pipe else 1)
        if shared <= _kernels.GROUPED_MAX_SHARED:
            break
    batch, _, _, in_w = geometry.input_shape4
    tiles = -(-in_w // tile)
    items = batch * tiles
    per_split = -(-items * geometry.groups // (4 * multiprocessors))
    if want_weight:
        per_split = min(per_split, _kernels.GROUPED_MAX_SPLIT_SUM // (tile // (_kernels.GROUPED_THREADS // 32)))
    per_split = max(1, per_split)
    splits = -(-items // per_split)
    scalars = (
        _i32(geometry.groups), _i32(geometry.out_channels_per_group), _i32(in_w), _i32(geometry.output_shape4[3]),
        _i32(geometry.stride[1]), _i32(geometry.padding[1]), _i32(geometry.dilation[1]),
        _i32(tile), _i32(span), _i32(phase_row), _i32(m_row), _i32(tiles), _i64(items), _i32(per_split),
    )  # fmt: skip
    name = _kernels.grouped_backward_name(dtype, index, geometry.in_channels_per_group, geometry.kernel[1], pipe)
    launch = _Launch("grouped_backward.cu", name, _blocks_for(geometry.groups * splits), _kernels.GROUPED_THREADS, scalars, shared)
    if not want_weight:
        return launch, None, None
    count = math.prod(geometry.weight_shape4)
    return launch, (splits,) + geometry.weight_shape4, _sum_splits_plan(dtype, count, splits, multiprocessors)


class GroupedBackward(Family):
    name, ops = "grouped_backward", ("backward",)

    def reject(self, p):
        return None if _grouped_backward_routed(p.geometry, p.dtype) else "its rule (1D, few channels a group, large inputs) does not take it"

    def plan(self, p, tile):
        g, (want_input, want_weight) = p.geometry, p.wants
        launch, workspace_shape, finish = _grouped_backward_plan(_S(), g, p.dtype, "int", p.device.multiprocessors, want_input, want_weight)
        index = _index_type(_size(g.input_shape4), _size(g.output_shape4), _size(g.weight_shape4), math.prod(workspace_shape or (0,)))
        if index != "int":
            launch, workspace_shape, finish = _grouped_backward_plan(_S(), g, p.dtype, index, p.device.multiprocessors, want_input, want_weight)
        args = ("grad_output", "x", "weight", "grad_input" if want_input else None, "t0" if want_weight else None)
        if not want_weight:
            return Plan(self.name, None, (Step(launch, args),))
        steps = (Step(launch, args), Step(finish, ("t0", "grad_weight")))
        return Plan(self.name, None, steps, (Buffer(workspace_shape, numpy.dtype(numpy.float64)),))
