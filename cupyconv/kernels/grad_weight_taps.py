"""grad_weight_taps.cu on the host: its tiles, stage, name, shared memory and
the problems it takes (common._taps_vector).
"""

from __future__ import annotations

from .._geometry import Geometry
from .common import (
    CUDA_TYPE,
    GRAD_INPUT_TAPS_VECTORS,
    ITEMSIZE,
    TapsTile,
    _axes,
    _taps_vector,
    instantiation_loop,
)

# grad_weight_taps: the same problems' grad_weight.  Its tiles are BM x 128
# columns (TapsTile.bn is 128) with 128 bytes of positions per stage.
GRAD_WEIGHT_TAPS_TILES = (TapsTile(64, 128, 2, 4, 4), TapsTile(128, 128, 2, 4, 3))
GRAD_WEIGHT_TAPS_DTYPES = ("float32", "float16", "bfloat16")


def grad_weight_taps_stage(dtype: str) -> int:
    """Positions per grad_weight_taps stage (128 bytes of x)."""
    return 128 // ITEMSIZE[dtype]


def grad_weight_taps_name(dtype: str, index: str, tile: TapsTile, vector: int, passes: int = 1) -> str:
    t = tile
    return f"grad_weight_taps<{CUDA_TYPE[dtype]}, {index}, {t.bm}, {t.warps_m}, {t.warps_n}, {t.stages}, {vector}, {passes}>"


def grad_weight_taps_shared(tile: TapsTile) -> int:
    """Shared bytes: per stage, A (BM rows of 128 bytes) and B (128 bytes of
    positions, rows of 128 columns)."""
    return tile.stages * (tile.bm * 128 + 128 * 128)


def grad_weight_taps_vector(geometry: Geometry, dtype: str):
    """grad_input_taps_vector's vector where x's rows are whole vectors too
    and at least one stage (128 bytes) long; else None."""
    if dtype not in GRAD_WEIGHT_TAPS_DTYPES:
        return None
    in_w, kernel, stride, padding, _, out_w = _axes(geometry)[1]
    if in_w < grad_weight_taps_stage(dtype):
        return None
    return _taps_vector(geometry, dtype, (kernel, stride, padding, out_w, in_w))


def taps_instantiations(dtype: str, index: str, passes: int) -> list[tuple[str, str]]:
    """grad_weight_taps' builds for one dtype, index type and passes: every
    tile and vector."""
    names = []
    if dtype in GRAD_WEIGHT_TAPS_DTYPES:
        names += [
            ("grad_weight_taps.cu", grad_weight_taps_name(dtype, index, t, v, passes))
            for t in GRAD_WEIGHT_TAPS_TILES
            for v in GRAD_INPUT_TAPS_VECTORS
        ]
    return names


def instantiations() -> list[tuple[str, str]]:
    """This file's part of _kernels.all_instantiations(), in its order:
    every (file, name) of grad_weight_taps.cu the library can launch."""
    return instantiation_loop(passes=(taps_instantiations,))
