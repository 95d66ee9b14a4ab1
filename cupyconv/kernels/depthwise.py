"""depthwise.cu on the host: depthwise_forward's and depthwise_backward's
builds, names and tables.
"""

from __future__ import annotations

import math

from .._geometry import Geometry
from .common import CUDA_TYPE, instantiation_loop

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
