"""conv_gemm.cu on the host: conv_gemm's tiles (conv_mma's are
common.MMA_TILES), the kernel names and the weight strides A reads.
"""

from __future__ import annotations

from .._geometry import Geometry
from .common import (
    CUDA_TYPE,
    MMA_TILES,
    MMA_TUNE_TILES,
    MmaTile,
    Tile,
    instantiation_loop,
)

# conv_gemm tiles, chosen by the GEMM's row count (output channels per group):
# wide rows reuse each input element across more FMAs; narrow ones waste less.
GEMM_TILES = (Tile(16, 128, 16, 2, 4), Tile(32, 128, 8, 4, 4), Tile(64, 128, 8, 4, 8))
GEMM_TUNE_TILES = GEMM_TILES + (Tile(128, 64, 8, 8, 4), Tile(64, 64, 16, 4, 4))


def gemm_name(dtype: str, index: str, tile: Tile) -> str:
    return f"conv_gemm<{CUDA_TYPE[dtype]}, {index}, {tile.bm}, {tile.bn}, {tile.bk}, {tile.tm}, {tile.tn}>"


def mma_name(dtype: str, index: str, tile: MmaTile, passes: int) -> str:
    t = tile
    return f"conv_mma<{CUDA_TYPE[dtype]}, {index}, {t.bm}, {t.bn}, {t.bk}, {t.warps_m}, {t.warps_n}, {passes}>"


def gemm_weight_strides(geometry: Geometry, pass_name: str, packed: bool = False) -> tuple[int, int, int, int]:
    """conv_gemm's (w_stride_group, w_stride_m, w_stride_c, w_stride_tap).

    The forward pass makes GEMM rows m the output channels j and reduces over
    ci; grad_input makes the rows ci and reduces over j.  Unpacked, A reads the
    weight as given, [(g*C_in/g + ci), j, kh, kw]; packed, it reads
    pack_gemm_weight's (groups, KH*KW, C, M) array, consecutive in m."""
    if pass_name not in ("forward", "grad_input"):
        raise ValueError(f"unknown pass {pass_name!r}")
    taps = geometry.kernel[0] * geometry.kernel[1]
    if packed:
        rows, red = geometry.out_channels_per_group, geometry.in_channels_per_group
        if pass_name == "grad_input":
            rows, red = red, rows
        return taps * red * rows, 1, rows, red * rows
    per_in_channel = geometry.out_channels_per_group * taps
    group = geometry.in_channels_per_group * per_in_channel
    if pass_name == "forward":
        return group, taps, per_in_channel, 1
    return group, per_in_channel, taps, 1


def gemm_instantiations(dtype: str, index: str) -> list[tuple[str, str]]:
    """conv_gemm's and conv_mma's builds for one dtype and index type."""
    names = [("conv_gemm.cu", gemm_name(dtype, index, t)) for t in GEMM_TUNE_TILES]
    for passes in (1, 3) if dtype == "float32" else (1,) if dtype in ("float16", "bfloat16") else ():
        names += [("conv_gemm.cu", mma_name(dtype, index, t, passes)) for t in (MMA_TUNE_TILES if passes == 1 else MMA_TILES)]
    return names


def instantiations() -> list[tuple[str, str]]:
    """This file's part of _kernels.all_instantiations(), in its order:
    every (file, name) of conv_gemm.cu the library can launch."""
    return instantiation_loop(leading=(gemm_instantiations,))
