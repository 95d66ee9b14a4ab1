"""grad_input_taps.cu on the host: its tiles, name and the problems it takes
(common._taps_vector).
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

# grad_input_taps tiles, chosen by the GEMM's row count (input channels per group).
GRAD_INPUT_TAPS_TILES = (TapsTile(32, 128, 1, 4, 4), TapsTile(64, 128, 2, 4, 4), TapsTile(128, 128, 2, 4, 3))
GRAD_INPUT_TAPS_DTYPES = ("float32", "float16", "bfloat16")


def grad_input_taps_name(dtype: str, index: str, tile: TapsTile, vector: int, passes: int = 1) -> str:
    t = tile
    return f"grad_input_taps<{CUDA_TYPE[dtype]}, {index}, {t.bm}, {t.bn}, {t.warps_m}, {t.warps_n}, {t.stages}, {vector}, {passes}>"


def grad_input_taps_vector(geometry: Geometry, dtype: str):
    """The widest cp.async vector (bytes) grad_input_taps can load this
    problem's grad_output and weight with, or None where it does not apply
    (_taps_vector's conditions, and a vector of 8 or 16 bytes whose values
    divide the kernel, the stride, the padding and grad_output's row, so that
    a vector never crosses a channel and lies wholly inside or outside its
    row)."""
    if dtype not in GRAD_INPUT_TAPS_DTYPES:
        return None
    _, kernel, stride, padding, _, out_w = _axes(geometry)[1]
    return _taps_vector(geometry, dtype, (kernel, stride, padding, out_w))


def taps_instantiations(dtype: str, index: str, passes: int) -> list[tuple[str, str]]:
    """grad_input_taps' builds for one dtype, index type and passes: every
    tile and vector at least one value wide."""
    names = []
    if dtype in GRAD_INPUT_TAPS_DTYPES:
        names += [
            ("grad_input_taps.cu", grad_input_taps_name(dtype, index, t, v, passes))
            for t in GRAD_INPUT_TAPS_TILES
            for v in GRAD_INPUT_TAPS_VECTORS
            if v >= ITEMSIZE[dtype]
        ]
    return names


def instantiations() -> list[tuple[str, str]]:
    """This file's part of _kernels.all_instantiations(), in its order:
    every (file, name) of grad_input_taps.cu the library can launch."""
    return instantiation_loop(passes=(taps_instantiations,))
