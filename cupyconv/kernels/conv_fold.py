"""conv_fold.cu on the host: conv_fold's sizes as the kernel has them, its
names and pack_fold_weight's, its packed weight rows and shared memory.
"""

from __future__ import annotations

from .common import CUDA_TYPE, INDEX_TYPES, instantiation_loop

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
