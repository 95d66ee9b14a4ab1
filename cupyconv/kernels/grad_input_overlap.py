"""grad_input_overlap.cu on the host: grad_input_overlap (16-bit and TF32),
grad_input_multicast and their weight packing: sizes as the kernels have
them, names, layouts.
"""

from __future__ import annotations

import functools
import math

from .. import settings
from .._geometry import Geometry
from .._launch import _i32, _i64, _Launch, _TensorMap
from .._plan import Buffer, Family, Plan, Step
from .common import (
    CUDA_TYPE,
    INDEX_TYPES,
    INT32_LIMIT,
    OVERLAP_DTYPES,
    _is_1d,
    instantiation_loop,
)
from .pack_weight import PACK_MAX_BLOCKS, PACK_THREADS
from .rules import _gemm_index, _problem_passes, _weight_dtype

# grad_input_overlap.cu (perf notes v32): grad_input of stride-8 1D 16-bit
# problems of 9 to 16 taps, one wgmma k-step per output channel, B read as
# overlapping core matrices of grad_output's rows.
OVERLAP_THREADS = 384  # two consumer warpgroups and a producer
OVERLAP_BM = 128  # input channels a block
OVERLAP_BN = 256  # input positions a block
OVERLAP_CB = 6  # output channels a k-block
OVERLAP_STAGES = 8
OVERLAP_STAGE_BYTES = OVERLAP_CB * ((8 * OVERLAP_BN + 8) * 2 + 16)  # B's stretches (A from registers, perf notes v43)
# room past the last buffer for its B operand's extent as N x K elements (GiLayout::BARRIERS)
OVERLAP_B_TAIL = OVERLAP_BN * 16 * 2 - ((8 * OVERLAP_BN + 8) * 2 + 16)
OVERLAP_SHARED = OVERLAP_STAGES * OVERLAP_STAGE_BYTES + OVERLAP_B_TAIL + OVERLAP_STAGES * 16  # the buffers, then their mbarriers (full, empty)
# Its float build (TF32, perf notes v40): two k8 steps an output channel, the
# stretch in two planes of 16-byte chunks, rounded in place by the producer.
OVERLAP_TF32_CB = 2  # output channels a k-block
OVERLAP_TF32_STAGES = 6
OVERLAP_TF32_STAGE_BYTES = OVERLAP_TF32_CB * (OVERLAP_BM * 64 + 2 * (OVERLAP_BN + 1) * 16)
OVERLAP_TF32_SHARED = OVERLAP_TF32_STAGES * OVERLAP_TF32_STAGE_BYTES + OVERLAP_TF32_STAGES * 16


def overlap_layout(dtype: str) -> tuple[int, int]:
    """(output channels a k-block, shared-memory bytes) of grad_input_overlap's build for dtype."""
    return (OVERLAP_TF32_CB, OVERLAP_TF32_SHARED) if dtype == "float32" else (OVERLAP_CB, OVERLAP_SHARED)


def grad_input_overlap_name(dtype: str, index: str) -> str:
    return f"grad_input_overlap<{CUDA_TYPE[dtype]}, {index}>"


def pack_overlap_weight_name(dtype: str) -> str:
    return f"pack_overlap_weight<{CUDA_TYPE[dtype]}>"


# grad_input_multicast (grad_input_overlap.cu, perf notes v48): the float32
# "tf32" grad_input of the same problems, conv_tf32_multicast's design:
# clusters of two blocks share each stage's weight (TMA multicast), the
# grad_output stretch is the MMAs' register operand.  GRAD_INPUT_MULTICAST_STAGES
# buffers of 1024-byte-aligned stages: GRAD_INPUT_MULTICAST_CO output
# channels' weight tiles (GRAD_INPUT_MULTICAST_COLS rows of 16 taps), then
# the window (GRAD_INPUT_MULTICAST_SPANS boxes of GRAD_INPUT_MULTICAST_SPAN
# floats x the stage's channels), then the barriers.
GRAD_INPUT_MULTICAST_STAGES = 5
GRAD_INPUT_MULTICAST_COLS = 256  # input channels a tile
GRAD_INPUT_MULTICAST_POSITIONS = 128  # input positions an item
GRAD_INPUT_MULTICAST_CO = 2  # output channels a stage
GRAD_INPUT_MULTICAST_SPAN = 176  # floats of a window box's rows
GRAD_INPUT_MULTICAST_SPANS = 6  # window boxes a stage
GRAD_INPUT_MULTICAST_THREADS = 384
_GIM_STAGE = -(-(GRAD_INPUT_MULTICAST_CO * (GRAD_INPUT_MULTICAST_COLS * 64 + GRAD_INPUT_MULTICAST_SPANS * GRAD_INPUT_MULTICAST_SPAN * 4)) // 1024) * 1024
GRAD_INPUT_MULTICAST_SHARED = GRAD_INPUT_MULTICAST_STAGES * _GIM_STAGE + 2 * GRAD_INPUT_MULTICAST_STAGES * 8


def grad_input_multicast_name(index: str) -> str:
    return f"grad_input_multicast<{index}>"


PACK_MULTICAST_WEIGHT = "pack_multicast_weight<float>"


def gm_tap(j: int) -> int:
    """The tap at column j of pack_multicast_weight's 16 (grad_input_overlap.cu's gm_tap)."""
    return (j & 8) + (2 * (j & 3) if (j & 7) < 4 else 2 * (j & 3) + 1)


def tf32_instantiations(dtype: str, index: str, passes: int) -> list[tuple[str, str]]:
    """float32's builds (passes 1): grad_input_overlap's TF32 build, its
    weight packing (listed with the index type int) and grad_input_multicast."""
    names = []
    if dtype == "float32" and passes == 1:
        names.append(("grad_input_overlap.cu", grad_input_overlap_name(dtype, index)))
        names += [("grad_input_overlap.cu", pack_overlap_weight_name(dtype))] if index == INDEX_TYPES[0] else []
        names.append(("grad_input_overlap.cu", grad_input_multicast_name(index)))
    return names


def pack_multicast_instantiations(dtype: str, index: str, passes: int) -> list[tuple[str, str]]:
    """pack_multicast_weight (float32, listed with the index type int and passes 1)."""
    names = []
    if dtype == "float32" and passes == 1 and index == INDEX_TYPES[0]:
        names.append(("grad_input_overlap.cu", PACK_MULTICAST_WEIGHT))
    return names


def overlap_instantiations(dtype: str, index: str) -> list[tuple[str, str]]:
    """grad_input_overlap's 16-bit builds and their weight packing (listed
    with the index type int)."""
    names = []
    if dtype in OVERLAP_DTYPES:
        names.append(("grad_input_overlap.cu", grad_input_overlap_name(dtype, index)))
        names += [("grad_input_overlap.cu", pack_overlap_weight_name(dtype))] if index == INDEX_TYPES[0] else []
    return names


def instantiations() -> list[tuple[str, str]]:
    """This file's part of _kernels.all_instantiations(), in its order:
    every (file, name) of grad_input_overlap.cu the library can launch."""
    return instantiation_loop(passes=(tf32_instantiations, pack_multicast_instantiations), trailing=(overlap_instantiations,))


_S = settings.current  # the routing settings in force



def _grad_input_overlap_applies(geometry: Geometry, dtype: str, source_offset: int, out_offset: int, passes: int = 1) -> bool:
    itemsize = 4 if dtype == "float32" else 2
    return (
        (dtype in OVERLAP_DTYPES or (dtype == "float32" and passes == 1)) and _is_1d(geometry) and geometry.groups == 1
        and geometry.stride[1] == 8 and geometry.dilation[1] == 1 and 8 < geometry.kernel[1] <= 16
        and geometry.padding[1] % 4 == 0 and geometry.out_size[1] % 4 == 0 and geometry.in_size[1] % 2 == 0
        and source_offset % (4 * itemsize) == 0 and out_offset % (2 * itemsize) == 0
    )  # fmt: skip


@functools.lru_cache(maxsize=1024)
def _grad_input_overlap_plan(geometry: Geometry, dtype: str, index: str):
    """(grad_input_overlap launch, pack_overlap_weight launch, packed shape)."""
    in_w, out_w = geometry.in_size[1], geometry.out_size[1]
    m_tiles, n_tiles = -(-geometry.in_channels // OVERLAP_BM), -(-in_w // OVERLAP_BN)
    scalars = tuple(_i32(v) for v in (geometry.in_channels, geometry.out_channels, in_w, out_w, geometry.padding[1], m_tiles, n_tiles))
    blocks = m_tiles * n_tiles * geometry.batch
    name = grad_input_overlap_name(dtype, index)
    cb, shared = overlap_layout(dtype)
    launch = _Launch("grad_input_overlap.cu", name, blocks, OVERLAP_THREADS, scalars, shared)
    co_padded = -(-geometry.out_channels // cb) * cb
    per_chunk = 4 if dtype == "float32" else 8  # taps in 16 bytes
    packed_shape = (co_padded, m_tiles, 16 // per_chunk, OVERLAP_BM, per_chunk)
    total = math.prod(packed_shape)
    pack_scalars = (_i32(geometry.in_channels), _i32(geometry.out_channels), _i32(geometry.kernel[1]), _i32(m_tiles), _i64(total))
    pack_blocks = max(1, min(-(-total // (16 * PACK_THREADS)), PACK_MAX_BLOCKS))  # a thread a row of 16 taps
    pack = _Launch("grad_input_overlap.cu", pack_overlap_weight_name(dtype), pack_blocks, PACK_THREADS, pack_scalars)
    return launch, pack, packed_shape


@functools.lru_cache(maxsize=1024)
def _grad_input_multicast_plan(geometry: Geometry, index: str, multiprocessors: int):
    """(grad_input_multicast launch, pack_multicast_weight launch, packed
    shape) for a float grad_input the overlap rule takes, or None where its
    work or rows pass 32-bit counts."""
    batch, in_w, out_w = geometry.batch, geometry.in_size[1], geometry.out_size[1]
    in_channels, out_channels = geometry.in_channels, geometry.out_channels
    ci_tiles = -(-in_channels // GRAD_INPUT_MULTICAST_COLS)
    items = batch * -(-in_w // GRAD_INPUT_MULTICAST_POSITIONS)
    units = -(-items // 2) * ci_tiles
    if max(units, 8 * in_w + 2048, out_channels * in_channels) > INT32_LIMIT:
        return None
    gy_map = _TensorMap(
        dims=(out_w, out_channels, batch), strides=(out_w * 4, out_w * 4 * out_channels),
        box=(GRAD_INPUT_MULTICAST_SPAN, GRAD_INPUT_MULTICAST_CO, 1), data_type=7, swizzle=0,  # FLOAT32, no swizzle
    )  # fmt: skip
    weight_map = _TensorMap(
        dims=(16, in_channels, out_channels, 1), strides=(64, 64 * in_channels, 64 * in_channels * out_channels),
        box=(16, GRAD_INPUT_MULTICAST_COLS // 2, 1, 1), data_type=7, swizzle=2, array=1,  # FLOAT32, 64-byte swizzle
    )  # fmt: skip
    scalars = (gy_map, weight_map) + tuple(_i32(v) for v in (batch, in_channels, out_channels, in_w, geometry.padding[1], ci_tiles))
    grid = 2 * max(1, min(units, multiprocessors // 2))
    launch = _Launch(
        "grad_input_overlap.cu", grad_input_multicast_name(index), grid, GRAD_INPUT_MULTICAST_THREADS, scalars,
        GRAD_INPUT_MULTICAST_SHARED,
    )  # fmt: skip
    rows = out_channels * in_channels
    pack_scalars = (_i32(in_channels), _i32(out_channels), _i32(geometry.kernel[1]), _i64(rows))
    pack_blocks = max(1, min(-(-rows // PACK_THREADS), PACK_MAX_BLOCKS))
    pack = _Launch("grad_input_overlap.cu", PACK_MULTICAST_WEIGHT, pack_blocks, PACK_THREADS, pack_scalars)
    return launch, pack, (out_channels, in_channels, 16)


class GradInputOverlap(Family):
    """grad_input_overlap, and its float build grad_input_multicast."""

    name, ops = "grad_input_overlap", ("grad_input",)

    def _multicast(self, p):
        if p.dtype == "float32" and _S().use_grad_input_multicast and GRAD_INPUT_MULTICAST_SHARED <= p.device.max_shared:
            return _grad_input_multicast_plan(p.geometry, _gemm_index(p), p.device.multiprocessors)
        return None

    def reject(self, p):
        if not _S().use_grad_input_overlap or p.device.compute_capability != 90:
            return "off (use_grad_input_overlap) or not compute capability 9.0"
        offsets = dict(p.alignment)
        if not _grad_input_overlap_applies(p.geometry, p.dtype, offsets["source"], offsets["out"], _problem_passes(p)):
            return "not a 1D stride-8 pass of 9 to 16 taps it takes (16-bit, or float32 \"tf32\"), or misaligned"
        if self._multicast(p) is None and overlap_layout(p.dtype)[1] > p.device.max_shared:
            return "does not fit in shared memory"
        return None

    def plan(self, p, tile):
        multicast = self._multicast(p)
        launch, pack, packed_shape = multicast or _grad_input_overlap_plan(p.geometry, p.dtype, _gemm_index(p))
        steps = (Step(pack, ("weight", "t0")), Step(launch, ("source", "t0", "out")))
        return Plan("grad_input_multicast" if multicast else self.name, None, steps, (Buffer(packed_shape, _weight_dtype(p)),))
