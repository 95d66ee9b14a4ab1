"""The host side of pack_weight: its families' rules and plans."""

from __future__ import annotations

import functools
import math

import cupy

from .. import _kernels
from .._geometry import Geometry
from .._launch import _i32, _i64, _Launch, _launch
from .._plan import Buffer, Problem, Step
from .rules import _weight_dtype


@functools.lru_cache(maxsize=1024)
def _window_weight_plan(geometry: Geometry, pass_name: str, dtype: str, fold: bool, round_tf32: bool, split: bool = False):
    """(pack_window_weight launch, packed shape): the layout of
    _kernels.pack_window_weight with the channels padded to 16 bytes; with
    `split`, two of them (3xTF32's hi and lo)."""
    taps = geometry.kernel[1]
    taps_out = _kernels.window_kernel_w(geometry, pass_name) if fold else taps
    step = geometry.dilation[1] if taps_out != taps else 1
    forward = pass_name == "forward"
    rows = geometry.out_channels_per_group if forward else geometry.in_channels_per_group
    channels = geometry.in_channels_per_group if forward else geometry.out_channels_per_group
    shape = (geometry.groups, taps_out, rows, _kernels.window_channels_padded(channels, dtype))
    total = math.prod(shape)
    scalars = (
        _i32(taps_out), _i32(rows), _i32(channels), _i32(shape[3]), _i32(geometry.in_channels_per_group),
        _i32(geometry.out_channels_per_group), _i32(taps), _i32(step), _i32(forward), _i64(total),
    )  # fmt: skip
    if forward:  # a block a tile of PACK_TILE channels x PACK_TILE (row, tap) pairs of a group
        work = geometry.groups * -(-shape[3] // _kernels.PACK_TILE) * -(-rows * taps // _kernels.PACK_TILE)
    else:  # a thread an element
        work = -(-total // _kernels.PACK_THREADS)
    blocks = max(1, min(work, _kernels.PACK_MAX_BLOCKS))
    name = _kernels.pack_weight_name(dtype, round_tf32 and not split, split)
    return _Launch("pack_weight.cu", name, blocks, _kernels.PACK_THREADS, scalars), ((2,) + shape if split else shape)


def _window_weight(weight, geometry: Geometry, pass_name: str, dtype: str, fold: bool = True, round_tf32: bool = False, split: bool = False):
    """The weight as the window kernels read it: (groups, KW, M, C) with C
    padded with zeros to 16 bytes (`fold`: see _kernels.pack_window_weight),
    float values rounded to TF32 with `round_tf32` (conv_wgmma's tensor cores
    read the weight as stored, and conv_window's TF32 builds take it as
    loaded), made in one launch of pack_window_weight.
    With `split` (float), (2, groups, KW, M, C): 3xTF32's hi (rounded) and lo
    (the remainder, rounded), for conv_wgmma_x3."""
    split = split and dtype == "float32"
    plan, shape = _window_weight_plan(geometry, pass_name, dtype, fold, round_tf32 and dtype == "float32", split)
    packed = cupy.empty(shape, dtype=weight.dtype)
    if packed.size:
        _launch(plan, (weight, packed))
    return packed


def _window_weight_steps(p: Problem, pass_name: str, dtype: str, fold: bool = True, round_tf32: bool = False, split: bool = False):
    """(steps, buffers) of _window_weight: the packed weight into t0."""
    split = split and dtype == "float32"
    plan, shape = _window_weight_plan(p.geometry, pass_name, dtype, fold, round_tf32 and dtype == "float32", split)
    steps = (Step(plan, ("weight", "t0")),) if math.prod(shape) else ()
    return steps, (Buffer(shape, _weight_dtype(p)),)
