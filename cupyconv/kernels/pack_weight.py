"""pack_weight.cu on the host: pack_window_weight's and pack_direct_weight's
builds and launch sizes, and pack_window_weight's layout in NumPy (or CuPy).
"""

from __future__ import annotations

import functools
import math

import cupy
import numpy

from .._geometry import Geometry
from .._launch import _i32, _i64, _Launch, _launch
from .._plan import Buffer, Problem, Step
from .common import (
    CUDA_TYPE,
    INDEX_TYPES,
    ITEMSIZE,
    WINDOW_DTYPES,
    instantiation_loop,
    pack_gemm_weight,
)
from .phases import window_kernel_w
from .rules import _weight_dtype


def window_channels_padded(channels: int, dtype: str) -> int:
    vec = 16 // numpy.dtype(dtype).itemsize
    return -(-channels // vec) * vec


# pack_weight.cu: the layout below (channels padded, float optionally rounded
# to TF32) made on the GPU in one launch, for _cuda._window_weight: the CuPy
# views, copy, padding and rounding it replaces took 33-66 us of host time a
# call on the H100 host (perf notes v20).
PACK_THREADS = 256
PACK_MAX_BLOCKS = 4096  # a grid-stride loop beyond this
PACK_TILE = 32  # pack_window_weight's forward tiles: channels x (row, tap) pairs


def pack_weight_name(dtype: str, round_tf32: bool, split: bool = False) -> str:
    """pack_window_weight's build: `split` (float) writes 3xTF32's hi and lo arrays (conv_wgmma_x3)."""
    bits = "unsigned" if ITEMSIZE[dtype] == 4 else "unsigned short"
    return f"pack_window_weight<{bits}, {'true' if round_tf32 else 'false'}{', true' if split else ''}>"


def pack_direct_weight_name(dtype: str) -> str:
    return f"pack_direct_weight<{CUDA_TYPE[dtype]}>"


def pack_gemm_weight_name(dtype: str) -> str:
    return f"pack_gemm_weight<{CUDA_TYPE[dtype]}>"


def pack_window_weight(weight, geometry: Geometry, pass_name: str, fold: bool = True):
    """`weight` (NumPy or CuPy) ordered (groups, KW, M, C), conv_window's A
    layout before the channels are padded to 16 bytes: a view, or where the
    forward pass folds a dilated kernel (window_kernel_w taps, more than KW;
    not with `fold` False, as conv_wgmma_resident's fill reads it) a new array
    with the kernel's taps at every dilation-th place and zeros between."""
    view = pack_gemm_weight(weight, geometry, pass_name).transpose(0, 1, 3, 2)
    taps = window_kernel_w(geometry, pass_name) if fold else view.shape[1]
    if taps == view.shape[1]:
        return view
    dilation = geometry.dilation[1]
    dense = numpy.zeros_like(view, shape=(view.shape[0], taps) + view.shape[2:])  # CuPy for CuPy (NEP 18)
    dense[:, : dilation * (view.shape[1] - 1) + 1 : dilation] = view
    return dense


def window_pack_instantiations(dtype: str, index: str, passes: int) -> list[tuple[str, str]]:
    """pack_window_weight's builds for a window dtype (listed with the index
    type int and passes 1): plain, and for float32 rounding to TF32 and
    splitting into 3xTF32's hi and lo."""
    names = []
    if dtype in WINDOW_DTYPES and index == INDEX_TYPES[0] and passes == 1:
        names += [("pack_weight.cu", pack_weight_name(dtype, False))]
        names += [("pack_weight.cu", pack_weight_name(dtype, True))] if dtype == "float32" else []
        names += [("pack_weight.cu", pack_weight_name(dtype, False, True))] if dtype == "float32" else []
    return names


def direct_pack_instantiations(dtype: str, index: str) -> list[tuple[str, str]]:
    """pack_direct_weight's build for a dtype (listed with the index type int)."""
    return [("pack_weight.cu", pack_direct_weight_name(dtype))] if index == INDEX_TYPES[0] else []


def gemm_pack_instantiations(dtype: str, index: str) -> list[tuple[str, str]]:
    """pack_gemm_weight's build for a dtype (listed with the index type int)."""
    return [("pack_weight.cu", pack_gemm_weight_name(dtype))] if index == INDEX_TYPES[0] else []


def instantiations() -> list[tuple[str, str]]:
    """This file's part of _kernels.all_instantiations(), in its order:
    every (file, name) of pack_weight.cu the library can launch."""
    return instantiation_loop(passes=(window_pack_instantiations,), trailing=(direct_pack_instantiations, gemm_pack_instantiations))


@functools.lru_cache(maxsize=1024)
def gemm_weight_plan(geometry: Geometry, pass_name: str, dtype: str):
    """(pack_gemm_weight launch, packed shape): kernels/common.py's
    pack_gemm_weight layout, made on the GPU in one launch."""
    g = geometry
    taps = g.kernel[0] * g.kernel[1]
    channels = (g.in_channels_per_group, g.out_channels_per_group)
    shape = (g.groups, taps) + (channels if pass_name == "forward" else channels[::-1])
    total = math.prod(shape)
    scalars = (_i32(taps), _i32(channels[0]), _i32(channels[1]), _i32(pass_name == "forward"), _i64(total))
    blocks = max(1, min(-(-total // PACK_THREADS), PACK_MAX_BLOCKS))
    return _Launch("pack_weight.cu", pack_gemm_weight_name(dtype), blocks, PACK_THREADS, scalars), shape


@functools.lru_cache(maxsize=1024)
def _window_weight_plan(geometry: Geometry, pass_name: str, dtype: str, fold: bool, round_tf32: bool, split: bool = False):
    """(pack_window_weight launch, packed shape): the layout of
    pack_window_weight with the channels padded to 16 bytes; with
    `split`, two of them (3xTF32's hi and lo)."""
    taps = geometry.kernel[1]
    taps_out = window_kernel_w(geometry, pass_name) if fold else taps
    step = geometry.dilation[1] if taps_out != taps else 1
    forward = pass_name == "forward"
    rows = geometry.out_channels_per_group if forward else geometry.in_channels_per_group
    channels = geometry.in_channels_per_group if forward else geometry.out_channels_per_group
    shape = (geometry.groups, taps_out, rows, window_channels_padded(channels, dtype))
    total = math.prod(shape)
    scalars = (
        _i32(taps_out), _i32(rows), _i32(channels), _i32(shape[3]), _i32(geometry.in_channels_per_group),
        _i32(geometry.out_channels_per_group), _i32(taps), _i32(step), _i32(forward), _i64(total),
    )  # fmt: skip
    if forward:  # a block a tile of PACK_TILE channels x PACK_TILE (row, tap) pairs of a group
        work = geometry.groups * -(-shape[3] // PACK_TILE) * -(-rows * taps // PACK_TILE)
    else:  # a thread an element
        work = -(-total // PACK_THREADS)
    blocks = max(1, min(work, PACK_MAX_BLOCKS))
    name = pack_weight_name(dtype, round_tf32 and not split, split)
    return _Launch("pack_weight.cu", name, blocks, PACK_THREADS, scalars), ((2,) + shape if split else shape)


def _window_weight(weight, geometry: Geometry, pass_name: str, dtype: str, fold: bool = True, round_tf32: bool = False, split: bool = False):
    """The weight as the window kernels read it: (groups, KW, M, C) with C
    padded with zeros to 16 bytes (`fold`: see pack_window_weight),
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
