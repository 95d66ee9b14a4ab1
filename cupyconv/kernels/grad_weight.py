"""grad_weight.cu on the host: grad_weight_partial's tiles, the names of
grad_weight_partial, grad_weight_mma, grad_bias_partial and sum_splits.
"""

from __future__ import annotations

from .common import (
    CUDA_TYPE,
    MMA_TILES,
    MMA_TUNE_TILES,
    OVERLAP_DTYPES,
    MmaTile,
    Tile,
    instantiation_loop,
)

# grad_weight_partial tiles, chosen by in_channels per group.
GRAD_WEIGHT_TILES = (Tile(16, 128, 16, 2, 4), Tile(32, 128, 8, 4, 4), Tile(64, 64, 8, 4, 4))
BIAS_THREADS = 256
REDUCE_THREADS = 256


def grad_weight_name(dtype: str, index: str, tile: Tile) -> str:
    return f"grad_weight_partial<{CUDA_TYPE[dtype]}, {index}, {tile.bm}, {tile.bn}, {tile.bk}, {tile.tm}, {tile.tn}>"


def grad_weight_mma_name(dtype: str, index: str, tile: MmaTile, passes: int = 1) -> str:
    t = tile
    return f"grad_weight_mma<{CUDA_TYPE[dtype]}, {index}, {t.bm}, {t.bn}, {t.bk}, {t.warps_m}, {t.warps_n}, {passes}>"


def grad_bias_name(dtype: str) -> str:
    return f"grad_bias_partial<{CUDA_TYPE[dtype]}, {BIAS_THREADS}>"


def sum_splits_name(dtype: str, workspace: str = "double") -> str:
    return f"sum_splits<{CUDA_TYPE[dtype]}, {workspace}>"


def partial_instantiations(dtype: str, index: str) -> list[tuple[str, str]]:
    """grad_weight_partial's builds for one dtype and index type."""
    return [("grad_weight.cu", grad_weight_name(dtype, index, t)) for t in GRAD_WEIGHT_TILES]


def mma_instantiations(dtype: str, index: str) -> list[tuple[str, str]]:
    """grad_weight_mma's builds for one dtype and index type: every tuned
    tile in one pass (not float64), and for float32 MMA_TILES in 3xTF32."""
    names = []
    if dtype != "float64":
        names += [("grad_weight.cu", grad_weight_mma_name(dtype, index, t)) for t in MMA_TUNE_TILES]
    if dtype == "float32":
        names += [("grad_weight.cu", grad_weight_mma_name(dtype, index, t, 3)) for t in MMA_TILES]
    return names


def reduction_instantiations(dtype: str) -> list[tuple[str, str]]:
    """grad_bias_partial's and sum_splits' builds for one dtype."""
    names = [("grad_weight.cu", grad_bias_name(dtype)), ("grad_weight.cu", sum_splits_name(dtype))]
    if dtype in OVERLAP_DTYPES or dtype == "float32":  # grad_weight_overlap's float partials
        names.append(("grad_weight.cu", sum_splits_name(dtype, "float")))
    return names


def instantiations() -> list[tuple[str, str]]:
    """This file's part of _kernels.all_instantiations(), in its order:
    every (file, name) of grad_weight.cu the library can launch."""
    return instantiation_loop(trailing=(partial_instantiations, mma_instantiations), per_dtype=(reduction_instantiations,))
