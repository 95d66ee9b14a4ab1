"""The host side of depthwise: its families' rules and plans."""

from __future__ import annotations

import functools
import math
from typing import Tuple

import numpy

from .. import _kernels
from .._geometry import Geometry
from .._launch import _blocks_for, _i32, _i64, _index_type, _Launch
from .._plan import Buffer, Family, Plan, Step, Table
from .grad_weight import _splits, _sum_splits_plan
from .rules import _gemm_index, _size


@functools.lru_cache(maxsize=1024)
def _depthwise_plan(geometry: Geometry, dtype: str, index: str, multiprocessors: int) -> Tuple[_Launch, tuple]:
    """depthwise_forward over every row of the output, and its tap table."""
    batch, channels_out, out_h, out_w = geometry.output_shape4
    in_h, in_w = geometry.in_size
    chunk = 32 * _kernels.DEPTHWISE_OUTS
    row_chunks = -(-out_w // chunk)
    rows = batch * channels_out * out_h
    warp_chunks = _kernels.depthwise_warp_chunks(rows, row_chunks, multiprocessors)
    threads = _kernels.DEPTHWISE_THREADS
    blocks = _blocks_for(-(-rows * -(-row_chunks // warp_chunks) * 32 // threads))
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = geometry.kernel, geometry.stride, geometry.padding, geometry.dilation
    scalars = (
        _i32(geometry.out_channels_per_group), _i32(channels_out), _i32(in_h), _i32(in_w), _i32(out_h), _i32(out_w),
        _i32(kh), _i32(kw), _i32(sh), _i32(sw), _i32(ph), _i32(pw), _i32(dh), _i32(dw),
        _i32(_kernels.depthwise_tap_step(sh, dh)), _i32(_kernels.depthwise_tap_step(sw, dw)),
        _i32(row_chunks), _i32(warp_chunks), _i64(rows),
    )  # fmt: skip
    name = _kernels.depthwise_name(dtype, index, _kernels.depthwise_taps_w(geometry))
    return _Launch("depthwise.cu", name, blocks, threads, scalars), _kernels.depthwise_first_taps(geometry)


def _depthwise_backward_applies(geometry: Geometry) -> bool:
    return (
        _kernels.depthwise_backward_taps(geometry) > 0
        and geometry.batch * geometry.in_size[0] * geometry.in_size[1] > 0
        and math.prod(geometry.output_shape4) > 0
    )


@functools.lru_cache(maxsize=1024)
def _depthwise_backward_plan(geometry: Geometry, dtype: str, index: str, multiprocessors: int):
    """(depthwise_backward launch, workspace shape, sum_splits launch): blocks
    (channel, split), about 16 per multiprocessor."""
    channels = geometry.in_channels
    positions = geometry.batch * geometry.in_size[0] * geometry.in_size[1]
    threads = _kernels.DEPTHWISE_BACKWARD_THREADS
    splits = _splits(channels, positions, 4 * threads, multiprocessors, blocks_per_multiprocessor=16)
    per_split = -(-positions // splits)
    splits = -(-positions // per_split)
    batch, _, in_h, in_w = geometry.input_shape4
    _, _, out_h, out_w = geometry.output_shape4
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = geometry.kernel, geometry.stride, geometry.padding, geometry.dilation
    scalars = (
        _i32(batch), _i32(channels), _i32(geometry.out_channels_per_group), _i32(in_h), _i32(in_w), _i32(out_h), _i32(out_w),
        _i32(kh), _i32(kw), _i32(sh), _i32(sw), _i32(ph), _i32(pw), _i32(dh), _i32(dw), _i64(per_split),
    )  # fmt: skip
    name = _kernels.depthwise_backward_name(dtype, index, _kernels.depthwise_backward_taps(geometry))
    launch = _Launch("depthwise.cu", name, _blocks_for(channels * splits), threads, scalars)
    count = math.prod(geometry.weight_shape4)
    return launch, (splits,) + geometry.weight_shape4, _sum_splits_plan(dtype, count, splits, multiprocessors)


class DepthwiseForward(Family):
    name, ops = "depthwise_forward", ("forward",)

    def reject(self, p):
        return None if p.geometry.in_channels_per_group == 1 else "not depthwise (one input channel a group)"

    def plan(self, p, tile):
        g = p.geometry
        launch, first_taps = _depthwise_plan(g, p.dtype, _gemm_index(p), p.device.multiprocessors)
        return Plan(self.name, None, (Step(launch, ("source", "weight", "bias", "out", Table(first_taps))),))


class DepthwiseBackward(Family):
    name, ops = "depthwise_backward", ("backward",)

    def reject(self, p):
        return None if _depthwise_backward_applies(p.geometry) else "not depthwise with at most 16 taps an input channel"

    def plan(self, p, tile):
        g = p.geometry
        index = _index_type(_size(g.input_shape4), _size(g.output_shape4), _size(g.weight_shape4))
        launch, workspace_shape, finish = _depthwise_backward_plan(g, p.dtype, index, p.device.multiprocessors)
        want_input, want_weight = p.wants
        args = ("grad_output", "x", "weight", "grad_input" if want_input else None, "t0" if want_weight else None)
        if not want_weight:
            return Plan(self.name, None, (Step(launch, args),))
        steps = (Step(launch, args), Step(finish, ("t0", "grad_weight")))
        return Plan(self.name, None, steps, (Buffer(workspace_shape, numpy.dtype(numpy.float64)),))
