"""grad_weight_overlap.cu on the host: grad_weight_overlap, grad_weight_multicast
and round_tf32_copy: sizes as the kernels have them, names.
"""

from __future__ import annotations

import functools
import math

import numpy

from .. import settings
from .._geometry import Geometry
from .._launch import _blocks_for, _i32, _i64, _Launch, _TensorMap
from .._plan import Buffer, Plan, Step
from .common import (
    CUDA_TYPE,
    INDEX_TYPES,
    INT32_LIMIT,
    OVERLAP_DTYPES,
    _is_1d,
    instantiation_loop,
)
from .grad_weight import _GradWeightFamily, _split_steps, _sum_splits_plan
from .pack_weight import PACK_MAX_BLOCKS, PACK_THREADS
from .rules import _problem_passes, _size

# grad_weight_overlap.cu (perf notes v33): grad_weight of the same problems,
# grad_output's rows read in place as the M-major A operand of rows
# (output channel, phase).
GRAD_WEIGHT_OVERLAP_THREADS = 384  # two consumer warpgroups and a producer
GRAD_WEIGHT_OVERLAP_CO = 8  # output channels a block
GRAD_WEIGHT_OVERLAP_BN = 256  # input channels a block
GRAD_WEIGHT_OVERLAP_P = 64  # positions an item
GRAD_WEIGHT_OVERLAP_STAGES = 5
GRAD_WEIGHT_OVERLAP_SHARED = GRAD_WEIGHT_OVERLAP_STAGES * (
    GRAD_WEIGHT_OVERLAP_BN * GRAD_WEIGHT_OVERLAP_P * 2 + GRAD_WEIGHT_OVERLAP_CO * ((GRAD_WEIGHT_OVERLAP_P + 1) * 16 + 16) + 16
)  # the buffers, then their mbarriers (full, empty)
GRAD_WEIGHT_OVERLAP_COPIES = (16, 8)  # bytes a grad_output copy


def grad_weight_overlap_name(dtype: str, index: str, copy: int) -> str:
    return f"grad_weight_overlap<{CUDA_TYPE[dtype]}, {index}, {copy}>"


# grad_weight_multicast (grad_weight_overlap.cu, perf notes v48): the float32
# "tf32" grad_weight of the same problems with grad_input_multicast's
# pipeline: x rounded to TF32 once (round_tf32_copy), its tiles shared by
# clusters of two output-channel tiles (TMA multicast), grad_output's
# stretch as the MMAs' register operand.  Stages of 1024-byte-aligned
# buffers: x's tile (GRAD_WEIGHT_MULTICAST_COLS rows of 128 bytes), then
# the stretch (GRAD_WEIGHT_MULTICAST_SPANS boxes of GRAD_WEIGHT_MULTICAST_SPAN
# floats x GRAD_WEIGHT_MULTICAST_CO channels), then the barriers.
GRAD_WEIGHT_MULTICAST_STAGES = 5
GRAD_WEIGHT_MULTICAST_CO = 8  # output channels a block
GRAD_WEIGHT_MULTICAST_COLS = 256  # input channels a tile
GRAD_WEIGHT_MULTICAST_P = 32  # positions an item
GRAD_WEIGHT_MULTICAST_SPAN = 132
GRAD_WEIGHT_MULTICAST_SPANS = 2
GRAD_WEIGHT_MULTICAST_THREADS = 384
_GWM_STAGE = -(-(GRAD_WEIGHT_MULTICAST_COLS * GRAD_WEIGHT_MULTICAST_P * 4 + GRAD_WEIGHT_MULTICAST_SPANS * GRAD_WEIGHT_MULTICAST_CO * GRAD_WEIGHT_MULTICAST_SPAN * 4) // 1024) * 1024
GRAD_WEIGHT_MULTICAST_SHARED = GRAD_WEIGHT_MULTICAST_STAGES * _GWM_STAGE + 2 * GRAD_WEIGHT_MULTICAST_STAGES * 8
ROUND_TF32_COPY = "round_tf32_copy<float>"


def grad_weight_multicast_name(index: str) -> str:
    return f"grad_weight_multicast<{index}>"


def multicast_instantiations(dtype: str, index: str, passes: int) -> list[tuple[str, str]]:
    """float32's builds (passes 1): grad_weight_multicast and round_tf32_copy
    (listed with the index type int)."""
    names = []
    if dtype == "float32" and passes == 1:
        names.append(("grad_weight_overlap.cu", grad_weight_multicast_name(index)))
        names += [("grad_weight_overlap.cu", ROUND_TF32_COPY)] if index == INDEX_TYPES[0] else []
    return names


def overlap_instantiations(dtype: str, index: str) -> list[tuple[str, str]]:
    """grad_weight_overlap's 16-bit builds, by grad_output copy size."""
    names = []
    if dtype in OVERLAP_DTYPES:
        names += [("grad_weight_overlap.cu", grad_weight_overlap_name(dtype, index, c)) for c in GRAD_WEIGHT_OVERLAP_COPIES]
    return names


def instantiations() -> list[tuple[str, str]]:
    """This file's part of _kernels.all_instantiations(), in its order:
    every (file, name) of grad_weight_overlap.cu the library can launch."""
    return instantiation_loop(passes=(multicast_instantiations,), trailing=(overlap_instantiations,))


_S = settings.current  # the routing settings in force



def _grad_weight_overlap_copy(geometry: Geometry, dtype: str, gy_offset: int, x_offset: int) -> int:
    """The kernel's grad_output copy size (16 or 8 bytes; float32: grad_weight_multicast's rule, 16), or 0 where it does not apply."""
    itemsize = 4 if dtype == "float32" else 2
    if not (
        (dtype in OVERLAP_DTYPES or dtype == "float32") and _is_1d(geometry) and geometry.groups == 1
        and geometry.stride[1] == 8 and geometry.dilation[1] == 1 and 8 < geometry.kernel[1] <= 16
        and geometry.in_size[1] * itemsize % 16 == 0 and x_offset % 16 == 0
    ):  # fmt: skip
        return 0
    for copy in (16,) if dtype == "float32" else GRAD_WEIGHT_OVERLAP_COPIES:
        unit = copy // itemsize
        if geometry.padding[1] % unit == 0 and geometry.out_size[1] % unit == 0 and gy_offset % copy == 0:
            return copy
    return 0


@functools.lru_cache(maxsize=1024)
def _grad_weight_overlap_plan(geometry: Geometry, dtype: str, index: str, multiprocessors: int, copy: int):
    """(grad_weight_overlap launch, workspace shape, sum_splits launch).  One
    block a multiprocessor: the splits of the (image, 64-position) items
    that fill the most of whole waves, fewest first."""
    channels, out_channels = geometry.in_channels, geometry.out_channels
    batch, _, _, in_w = geometry.input_shape4
    co_tiles = -(-out_channels // GRAD_WEIGHT_OVERLAP_CO)
    ci_tiles = -(-channels // GRAD_WEIGHT_OVERLAP_BN)
    positions = GRAD_WEIGHT_OVERLAP_P
    items = batch * -(-in_w // positions)
    independent = co_tiles * ci_tiles

    def filled(splits):  # the fraction of its waves' block slots a grid uses
        blocks = independent * splits
        return blocks / (-(-blocks // multiprocessors) * multiprocessors)

    most = max(1, min(8, items // 16))  # 1024 positions or more a split
    splits = max(range(1, most + 1), key=lambda s: (round(filled(s), 2), -s))
    per_split = -(-items // splits)
    splits = -(-items // per_split)
    scalars = tuple(
        _i32(v) for v in (batch, channels, out_channels, in_w, geometry.out_size[1], geometry.kernel[1], geometry.padding[1], per_split, co_tiles, ci_tiles)
    )  # fmt: skip
    name = grad_weight_overlap_name(dtype, index, copy)
    partial = _Launch(
        "grad_weight_overlap.cu", name, _blocks_for(independent * splits), GRAD_WEIGHT_OVERLAP_THREADS, scalars,
        GRAD_WEIGHT_OVERLAP_SHARED,
    )  # fmt: skip
    count = math.prod(geometry.weight_shape4)
    return partial, (splits,) + geometry.weight_shape4, _sum_splits_plan(dtype, count, splits, multiprocessors, "float")


@functools.lru_cache(maxsize=1024)
def _grad_weight_multicast_plan(geometry: Geometry, index: str, multiprocessors: int):
    """(grad_weight_multicast launch, workspace shape, sum_splits launch), or
    None where its counts pass 32 bits.  The splits of the items fill the
    device's clusters once (at least 1024 positions a split)."""
    batch, in_channels, out_channels = geometry.batch, geometry.in_channels, geometry.out_channels
    in_w, out_w = geometry.in_size[1], geometry.out_size[1]
    co_pairs = -(-out_channels // (2 * GRAD_WEIGHT_MULTICAST_CO))
    ci_tiles = -(-in_channels // GRAD_WEIGHT_MULTICAST_COLS)
    items = batch * -(-in_w // GRAD_WEIGHT_MULTICAST_P)
    independent = co_pairs * ci_tiles
    splits = max(1, min(multiprocessors // 2 // independent, items // (1024 // GRAD_WEIGHT_MULTICAST_P)))
    per_split = -(-items // splits)
    splits = -(-items // per_split)
    if max(items, 8 * in_w + 1024, 2 * independent * splits) > INT32_LIMIT:
        return None
    x_map = _TensorMap(
        dims=(in_w, in_channels, batch), strides=(in_w * 4, in_w * 4 * in_channels),
        box=(GRAD_WEIGHT_MULTICAST_P, GRAD_WEIGHT_MULTICAST_COLS // 2, 1), data_type=7, swizzle=3,  # FLOAT32, 128-byte swizzle
    )  # fmt: skip
    gy_map = _TensorMap(
        dims=(out_w, out_channels, batch), strides=(out_w * 4, out_w * 4 * out_channels),
        box=(GRAD_WEIGHT_MULTICAST_SPAN, GRAD_WEIGHT_MULTICAST_CO, 1), data_type=7, swizzle=0, array=1,  # FLOAT32
    )  # fmt: skip
    scalars = (x_map, gy_map) + tuple(
        _i32(v) for v in (batch, in_channels, out_channels, in_w, geometry.kernel[1], geometry.padding[1], per_split, co_pairs, ci_tiles)
    )  # fmt: skip
    partial = _Launch(
        "grad_weight_overlap.cu", grad_weight_multicast_name(index), 2 * independent * splits, GRAD_WEIGHT_MULTICAST_THREADS,
        scalars, GRAD_WEIGHT_MULTICAST_SHARED,
    )  # fmt: skip
    finish = _sum_splits_plan("float32", math.prod(geometry.weight_shape4), splits, multiprocessors, "float")
    return partial, (splits,) + geometry.weight_shape4, finish


@functools.lru_cache(maxsize=1024)
def _round_tf32_copy_plan(count: int) -> _Launch:
    """round_tf32_copy's launch for `count` floats (a multiple of 4)."""
    blocks = max(1, min(-(-count // (4 * PACK_THREADS)), PACK_MAX_BLOCKS))
    return _Launch("grad_weight_overlap.cu", ROUND_TF32_COPY, blocks, PACK_THREADS, (_i64(count),))


class GradWeightOverlap(_GradWeightFamily):
    """grad_weight_overlap (16-bit) and grad_weight_multicast (float32 "tf32")."""

    name = "grad_weight_overlap"

    def _copy(self, p):
        offsets = dict(p.alignment)
        return _grad_weight_overlap_copy(p.geometry, p.dtype, offsets["grad_output"], offsets["x"])

    def reject(self, p):
        if _problem_passes(p) != 1:
            return "not one product a pair"
        if not _S().use_grad_weight_overlap or p.device.compute_capability != 90:
            return "off (use_grad_weight_overlap) or not compute capability 9.0"
        if not self._copy(p):
            return "not a 1D stride-8 problem of 9 to 16 taps it takes, or misaligned"
        if p.dtype == "float32":
            if not _S().use_grad_weight_multicast or GRAD_WEIGHT_MULTICAST_SHARED > p.device.max_shared:
                return "float32: grad_weight_multicast off or does not fit"
            if _grad_weight_multicast_plan(p.geometry, "int", p.device.multiprocessors) is None:
                return "float32: grad_weight_multicast's counts pass 32 bits"
            return None
        if GRAD_WEIGHT_OVERLAP_SHARED > p.device.max_shared:
            return "does not fit in shared memory"
        return None

    def plan(self, p, tile):
        g, multiprocessors = p.geometry, p.device.multiprocessors
        if p.dtype == "float32":
            count = _size(g.input_shape4)
            rounded = (Step(_round_tf32_copy_plan(count), ("x", "t0")),)
            steps, buffers = _split_steps(
                lambda index: _grad_weight_multicast_plan(g, index, multiprocessors), ("t0", "grad_output"), self.sizes(p), numpy.float32, first=1
            )  # fmt: skip
            return Plan("grad_weight_multicast", None, rounded + steps, (Buffer(g.input_shape4, numpy.dtype(numpy.float32)),) + buffers)
        copy = self._copy(p)
        steps, buffers = _split_steps(
            lambda index: _grad_weight_overlap_plan(g, p.dtype, index, multiprocessors, copy), self.inputs, self.sizes(p), numpy.float32
        )  # fmt: skip
        return Plan(self.name, copy, steps, buffers)
