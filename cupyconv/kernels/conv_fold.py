"""conv_fold.cu on the host: conv_fold's sizes as the kernel has them, its
names and pack_fold_weight's, its packed weight rows and shared memory.
"""

from __future__ import annotations

import functools
import math

from .. import settings
from .._geometry import Geometry
from .._launch import _i32, _i64, _Launch, _TensorMap
from .._plan import Buffer, Family, Plan, Step
from .common import CUDA_TYPE, INDEX_TYPES, INT32_LIMIT, _is_1d, instantiation_loop
from .pack_weight import PACK_MAX_BLOCKS, PACK_THREADS
from .rules import _gemm_index, _weight_dtype

# conv_fold.cu: the forward pass of stride 8 with 9 to 16 taps (two a phase),
# dilation 1, one group, in 16-bit on wgmma; its sizes as the kernel has them.
FOLD_THREADS = 256  # the consumer warpgroups
FOLD_BLOCK_THREADS = FOLD_THREADS + 128  # and the producer warpgroup
FOLD_CLUSTER = 2  # blocks a cluster: neighbouring row tiles sharing each k-block of the input (TMA multicast)
FOLD_STRIDE = 8
FOLD_ROWS = 128  # GEMM rows a block: 8 output channels x 16 taps
FOLD_TAPS = 16  # rows an output channel
FOLD_BN = 128  # input positions a tile
FOLD_BK = 64  # input channels a k-block
FOLD_STAGES = 5
FOLD_STAGE_BYTES = FOLD_BK * FOLD_BN * 2  # a k-block buffer: two TMA boxes of 64 positions x 64 channels, 128-byte swizzled
FOLD_OUT_BYTES = FOLD_STRIDE * FOLD_BN * 2 + 32  # a warp's staged outputs
FOLD_BARRIERS = 2 * FOLD_STAGES  # mbarriers: full and empty a buffer
FOLD_BOX = (64, FOLD_BK, 1)  # the input's tensor map box: positions, channels, images
FOLD_DTYPES = ("float16", "bfloat16")


def fold_name(dtype: str, index: str) -> str:
    return f"conv_fold<{CUDA_TYPE[dtype]}, {index}>"


PACK_FOLD_CI = 128  # pack_fold_weight's tile: input channels (x one output channel's 16 rows)


def pack_fold_weight_name(dtype: str) -> str:
    return f"pack_fold_weight<{CUDA_TYPE[dtype]}>"


def fold_channels_padded(in_channels: int) -> int:
    """conv_fold's packed weight rows: the input channels in whole k-blocks."""
    return -(-in_channels // FOLD_BK) * FOLD_BK


def fold_shared_bytes(channels_padded: int) -> int:
    """conv_fold's shared memory: the row tile's weight, the k-block
    buffers, each of its 8 consumer warps' staged outputs, and the buffers'
    mbarriers."""
    return FOLD_ROWS * channels_padded * 2 + FOLD_STAGES * FOLD_STAGE_BYTES + (FOLD_THREADS // 32) * FOLD_OUT_BYTES + 8 * FOLD_BARRIERS


def fold_instantiations(dtype: str, index: str) -> list[tuple[str, str]]:
    """conv_fold's build for one dtype and index type, and pack_fold_weight's
    (listed with the index type int)."""
    names = []
    if dtype in FOLD_DTYPES:
        names.append(("conv_fold.cu", fold_name(dtype, index)))
        names += [("conv_fold.cu", pack_fold_weight_name(dtype))] if index == INDEX_TYPES[0] else []
    return names


def instantiations() -> list[tuple[str, str]]:
    """This file's part of _kernels.all_instantiations(), in its order:
    every (file, name) of conv_fold.cu the library can launch."""
    return instantiation_loop(trailing=(fold_instantiations,))


_S = settings.current  # the routing settings in force



def _fold_applies(geometry: Geometry, dtype: str) -> bool:
    return (
        _S().use_fold and dtype in FOLD_DTYPES and _is_1d(geometry) and geometry.groups == 1
        and geometry.stride[1] == FOLD_STRIDE and geometry.dilation[1] == 1
        and FOLD_STRIDE < geometry.kernel[1] <= FOLD_TAPS and geometry.in_size[1] % 8 == 0
    )  # fmt: skip


@functools.lru_cache(maxsize=1024)
def _fold_plan(geometry: Geometry, dtype: str, index: str, blocks: int, max_shared: int, raw: bool):
    """(conv_fold launch, pack_fold_weight launch, packed shape), or None
    where the weight tile and buffers do not fit in shared memory; with
    `raw` (16 taps, a 16-byte-aligned weight) conv_fold reads the weight as
    given, and there is no pack (None, None)."""
    channels_padded = fold_channels_padded(geometry.in_channels)
    shared = fold_shared_bytes(channels_padded)
    if shared > max_shared:
        return None
    in_w, out_w, padding = geometry.in_size[1], geometry.out_size[1], geometry.padding[1]
    batch, in_channels = geometry.batch, geometry.in_channels
    groups_q = -(-(out_w + padding) // FOLD_STRIDE)  # output positions o + padding = 8q + r: q < groups_q
    tiles_per_row = -(-groups_q // FOLD_BN)
    full_tiles = -(-in_w // FOLD_BN)  # column tiles with input positions (the rest: no MMAs)
    row_tiles = -(-geometry.out_channels // (FOLD_ROWS // FOLD_TAPS))
    pairs = -(-row_tiles // FOLD_CLUSTER)  # a cluster's blocks take the row tiles of a pair (an odd count's last: zeros)
    work = pairs * batch * tiles_per_row
    if pairs * FOLD_CLUSTER * batch * tiles_per_row > INT32_LIMIT or max(in_w, tiles_per_row * FOLD_BN) > INT32_LIMIT:
        return None  # its tile numbers and the tensor map's coordinates are int
    # clusters in equal parts of each pair where there are enough (conv_fold.cu)
    clusters = max(blocks // FOLD_CLUSTER, 1)
    parts = clusters // pairs
    grid = FOLD_CLUSTER * (pairs * parts if parts else clusters)
    tensor_map = _TensorMap(
        dims=(in_w, in_channels, batch), strides=(in_w * 2, in_w * 2 * in_channels), box=FOLD_BOX,
    )  # fmt: skip
    scalars = (tensor_map,) + tuple(
        _i32(v) for v in (batch, channels_padded, geometry.out_channels, out_w, padding, tiles_per_row, full_tiles, in_channels, raw, work, parts)
    )  # fmt: skip
    launch = _Launch("conv_fold.cu", fold_name(dtype, index), grid, FOLD_BLOCK_THREADS, scalars, shared)
    if raw:
        return launch, None, None
    packed_shape = (pairs * FOLD_CLUSTER * FOLD_ROWS, channels_padded)
    total = math.prod(packed_shape)
    pack_scalars = (_i32(geometry.in_channels), _i32(geometry.out_channels), _i32(geometry.kernel[1]), _i32(channels_padded), _i64(total))
    pack_tiles = packed_shape[0] // FOLD_TAPS * -(-channels_padded // PACK_FOLD_CI)  # (output channel, input-channel tile)
    pack_blocks = max(1, min(pack_tiles, PACK_MAX_BLOCKS))
    pack = _Launch("conv_fold.cu", pack_fold_weight_name(dtype), pack_blocks, PACK_THREADS, pack_scalars)
    return launch, pack, packed_shape


class ConvFold(Family):
    name, ops = "conv_fold", ("forward",)

    def _raw(self, p):
        return _S().use_fold_raw_weight and p.geometry.kernel[1] == FOLD_TAPS and p.aligned("weight", 16)

    def _launches(self, p):
        s = _S()
        return _fold_plan(p.geometry, p.dtype, _gemm_index(p), s.fold_blocks or p.device.multiprocessors, p.device.max_shared, self._raw(p))

    def reject(self, p):
        if not _fold_applies(p.geometry, p.dtype):
            return "not a 16-bit 1D stride-8 pass of 9 to 16 taps, dilation 1, one group, rows of whole 16-byte vectors"
        if p.output_size < _S().window_min_output:
            return "output below window_min_output"
        if not p.aligned("source", 16):
            return "input not 16-byte aligned"
        if p.device.compute_capability != 90:
            return "needs compute capability 9.0"
        if self._launches(p) is None:
            return "its weight tile does not fit in shared memory, or its counts pass 32 bits"
        return None

    def plan(self, p, tile):
        launch, pack, packed_shape = self._launches(p)
        if pack is None:
            return Plan(self.name, "raw weight", (Step(launch, ("source", "weight", "bias", "out")),))
        steps = (Step(pack, ("weight", "t0")), Step(launch, ("source", "t0", "bias", "out")))
        return Plan(self.name, "packed weight", steps, (Buffer(packed_shape, _weight_dtype(p)),))
