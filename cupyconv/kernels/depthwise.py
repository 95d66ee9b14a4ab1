"""depthwise.cu on the host: depthwise_forward's and depthwise_backward's
builds, names and tables.
"""

from __future__ import annotations

import functools
import math
from typing import Tuple

import numpy

from .._geometry import Geometry
from .._launch import _blocks_for, _i32, _i64, _index_type, _Launch
from .._plan import Buffer, Family, Plan, Step, Table
from .common import CUDA_TYPE, instantiation_loop
from .grad_weight import _splits, _sum_splits_plan
from .rules import _gemm_index, _size

DEPTHWISE_OUTS = 4  # outputs per thread (a warp covers 32 * DEPTHWISE_OUTS of a row)
DEPTHWISE_THREADS = 256
# A warp walks up to this many consecutive chunks of 32 * DEPTHWISE_OUTS
# outputs of one row, doing the row's setup once; fewer where the GPU would
# otherwise have under DEPTHWISE_MIN_WARPS_PER_SM warps per multiprocessor.
DEPTHWISE_WARP_CHUNKS = 8
DEPTHWISE_MIN_WARPS_PER_SM = 64


def depthwise_warp_chunks(rows: int, row_chunks: int, multiprocessors: int) -> int:
    """Chunks per warp for depthwise_forward: DEPTHWISE_WARP_CHUNKS, or fewer
    (down to 1) while the grid would be short of warps."""
    chunks = DEPTHWISE_WARP_CHUNKS
    while chunks > 1 and rows * -(-row_chunks // chunks) < DEPTHWISE_MIN_WARPS_PER_SM * multiprocessors:
        chunks //= 2
    return max(1, min(chunks, row_chunks))


# Bounds on the taps reaching one output along W for which depthwise_forward
# has an unrolled walk; 0 is its general loop.
DEPTHWISE_TAPS_W = (2, 4, 8, 0)


def depthwise_name(dtype: str, index: str, taps_w: int) -> str:
    return f"depthwise_forward<{CUDA_TYPE[dtype]}, {index}, {DEPTHWISE_OUTS}, {taps_w}>"


def depthwise_taps_w(geometry: Geometry) -> int:
    """The smallest unrolled bound covering the taps that can reach one output
    along W (ceil(kernel / tap step)), else 0."""
    most = -(-geometry.kernel[1] // depthwise_tap_step(geometry.stride[1], geometry.dilation[1]))
    return next((bound for bound in DEPTHWISE_TAPS_W if bound and most <= bound), 0)


def depthwise_first_taps(geometry: Geometry) -> tuple[int, ...]:
    """depthwise.cu's table: per axis (H, then W) and residue r < stride, the
    smallest tap k with k * dilation = r (mod stride), or the kernel size if
    no tap reaches that residue; then, per W residue, that tap's input offset
    (k * dilation - r) / stride (0 where no tap reaches)."""
    firsts = []
    for kernel, stride, dilation in zip(geometry.kernel, geometry.stride, geometry.dilation):
        firsts.append([next((k for k in range(kernel) if k * dilation % stride == r), kernel) for r in range(stride)])
    kernel_w, stride_w, dilation_w = geometry.kernel[1], geometry.stride[1], geometry.dilation[1]
    offsets = [(k * dilation_w - r) // stride_w if k < kernel_w else 0 for r, k in enumerate(firsts[1])]
    return tuple(firsts[0] + firsts[1] + offsets)


def depthwise_tap_step(stride: int, dilation: int) -> int:
    """Kernel indices between consecutive taps that reach one output."""
    return stride // math.gcd(stride, dilation)


# depthwise_backward: instantiations by the most taps (multiplier * KH * KW)
# a thread keeps a grad_weight sum for; more taps than the last go through
# the GEMM kernels.
DEPTHWISE_BACKWARD_TAPS = (4, 16)
DEPTHWISE_BACKWARD_THREADS = 256


def depthwise_backward_name(dtype: str, index: str, max_taps: int) -> str:
    return f"depthwise_backward<{CUDA_TYPE[dtype]}, {index}, {max_taps}, {DEPTHWISE_BACKWARD_THREADS}>"


def depthwise_backward_taps(geometry: Geometry) -> int:
    """The smallest depthwise_backward bound covering the geometry's taps, or 0
    if none does (or it is not depthwise)."""
    if geometry.in_channels_per_group != 1:
        return 0
    taps = geometry.out_channels_per_group * geometry.kernel[0] * geometry.kernel[1]
    return next((bound for bound in DEPTHWISE_BACKWARD_TAPS if 0 < taps <= bound), 0)


def depthwise_instantiations(dtype: str, index: str) -> list[tuple[str, str]]:
    """depthwise_forward's builds, then depthwise_backward's, for one dtype
    and index type."""
    names = [("depthwise.cu", depthwise_name(dtype, index, taps)) for taps in DEPTHWISE_TAPS_W]
    names += [("depthwise.cu", depthwise_backward_name(dtype, index, taps)) for taps in DEPTHWISE_BACKWARD_TAPS]
    return names


def instantiations() -> list[tuple[str, str]]:
    """This file's part of _kernels.all_instantiations(), in its order:
    every (file, name) of depthwise.cu the library can launch."""
    return instantiation_loop(trailing=(depthwise_instantiations,))


@functools.lru_cache(maxsize=1024)
def _depthwise_plan(geometry: Geometry, dtype: str, index: str, multiprocessors: int) -> Tuple[_Launch, tuple]:
    """depthwise_forward over every row of the output, and its tap table."""
    batch, channels_out, out_h, out_w = geometry.output_shape4
    in_h, in_w = geometry.in_size
    chunk = 32 * DEPTHWISE_OUTS
    row_chunks = -(-out_w // chunk)
    rows = batch * channels_out * out_h
    warp_chunks = depthwise_warp_chunks(rows, row_chunks, multiprocessors)
    threads = DEPTHWISE_THREADS
    blocks = _blocks_for(-(-rows * -(-row_chunks // warp_chunks) * 32 // threads))
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = geometry.kernel, geometry.stride, geometry.padding, geometry.dilation
    scalars = (
        _i32(geometry.out_channels_per_group), _i32(channels_out), _i32(in_h), _i32(in_w), _i32(out_h), _i32(out_w),
        _i32(kh), _i32(kw), _i32(sh), _i32(sw), _i32(ph), _i32(pw), _i32(dh), _i32(dw),
        _i32(depthwise_tap_step(sh, dh)), _i32(depthwise_tap_step(sw, dw)),
        _i32(row_chunks), _i32(warp_chunks), _i64(rows),
    )  # fmt: skip
    name = depthwise_name(dtype, index, depthwise_taps_w(geometry))
    return _Launch("depthwise.cu", name, blocks, threads, scalars), depthwise_first_taps(geometry)


def _depthwise_backward_applies(geometry: Geometry) -> bool:
    return (
        depthwise_backward_taps(geometry) > 0
        and geometry.batch * geometry.in_size[0] * geometry.in_size[1] > 0
        and math.prod(geometry.output_shape4) > 0
    )


@functools.lru_cache(maxsize=1024)
def _depthwise_backward_plan(geometry: Geometry, dtype: str, index: str, multiprocessors: int):
    """(depthwise_backward launch, workspace shape, sum_splits launch): blocks
    (channel, split), about 16 per multiprocessor."""
    channels = geometry.in_channels
    positions = geometry.batch * geometry.in_size[0] * geometry.in_size[1]
    threads = DEPTHWISE_BACKWARD_THREADS
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
    name = depthwise_backward_name(dtype, index, depthwise_backward_taps(geometry))
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
