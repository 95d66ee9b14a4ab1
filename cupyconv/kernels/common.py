"""What several kernel files share: the C++ spelling and size of each dtype,
the index types, the GEMM tile records and pick_tile, the dtypes and
helpers of kernel families spread over several files, source() (a kernel
file with its headers inlined) and instantiation_loop (the order in which
_kernels.all_instantiations() lists every file's instantiations).

Pure Python with no CuPy import, like every module of this package.
"""

from __future__ import annotations

import functools
import importlib.resources
import re
from typing import NamedTuple, Optional

import numpy

from .._geometry import SUPPORTED_DTYPES, Geometry

# C++ spelling of each supported dtype in the kernels (common.cuh).
CUDA_TYPE = {"float16": "half_t", "bfloat16": "bfloat16_t", "float32": "float", "float64": "double"}
ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
INDEX_TYPES = ("int", "long long")
INT32_LIMIT = 2**31 - 1


class Tile(NamedTuple):
    """A block's tile: BM rows x BN columns, BK-deep reduction slices, and a
    TM x TN fragment of accumulators per thread ((BM/TM)*(BN/TN) threads)."""

    bm: int
    bn: int
    bk: int
    tm: int
    tn: int

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)


class MmaTile(NamedTuple):
    """A conv_mma block tile: BM x BN, BK-deep slices, split over
    WARPS_M x WARPS_N warps (each a (BM/WARPS_M) x (BN/WARPS_N) grid of m16n8
    tensor-core fragments)."""

    bm: int
    bn: int
    bk: int
    warps_m: int
    warps_n: int

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * self.warps_n


# conv_mma tiles, chosen like GEMM_TILES by the GEMM's row count.  128 x 128
# won the autotuner on every H100 benchmark problem with 128 or more rows.
MMA_TILES = (MmaTile(16, 128, 16, 1, 4), MmaTile(32, 128, 16, 2, 4), MmaTile(64, 128, 16, 2, 4), MmaTile(128, 128, 16, 4, 2))
# What the autotuner (CUPYCONV_AUTOTUNE=1) times for conv_mma and grad_weight_mma.
MMA_TUNE_TILES = MMA_TILES + (MmaTile(128, 64, 16, 4, 2), MmaTile(64, 64, 16, 2, 2), MmaTile(64, 64, 32, 2, 2))


def pick_tile(tiles, rows: int) -> Tile:
    """The narrowest tile whose height covers `rows`, else the widest."""
    for tile in tiles:
        if rows <= tile.bm:
            return tile
    return tiles[-1]


def index_type(*element_counts: int) -> str:
    """32-bit index math when every array involved has fewer than 2**31
    elements, 64-bit otherwise."""
    return "int" if max(element_counts) <= INT32_LIMIT else "long long"


def _is_1d(geometry: Geometry) -> bool:
    return geometry.kernel[0] == 1 and geometry.in_size[0] == 1 and geometry.out_size[0] == 1 and geometry.padding[0] == 0


def _axes(geometry: Geometry):
    return [
        (geometry.in_size[a], geometry.kernel[a], geometry.stride[a], geometry.padding[a], geometry.dilation[a], geometry.out_size[a])
        for a in (0, 1)
    ]


_INCLUDE = re.compile(r'^#include "([A-Za-z0-9_.]+)"\s*$', re.MULTILINE)


@functools.lru_cache(maxsize=None)
def source(filename: str) -> str:
    """A kernel file from the package with its local `#include "x.cuh"` lines
    inlined (once each), so that CuPy's on-disk cache key covers every line
    that is compiled and NVRTC needs no include path."""
    folder = importlib.resources.files("cupyconv.kernels")
    seen = set()

    def expand(name: str) -> str:
        if name in seen:
            return ""
        seen.add(name)
        text = folder.joinpath(name).read_text(encoding="utf-8")
        return _INCLUDE.sub(lambda m: expand(m.group(1)), text)

    return expand(filename)


SM90A_FILES = ("conv_wgmma.cu", "conv_fold.cu", "grad_weight_tf32.cu", "conv_tf32.cu", "grad_input_overlap.cu", "grad_weight_overlap.cu")  # built for sm_90a (wgmma) on compute capability 9.0


def phase_table_array(flat: tuple[int, ...]) -> numpy.ndarray:
    return numpy.asarray(flat, dtype=numpy.int32)


# conv_gemm's packed weight (conv_gemm.gemm_weight_strides), which
# pack_weight.pack_window_weight builds on.
def pack_gemm_weight(weight, geometry: Geometry, pass_name: str):
    """A view of `weight` (NumPy or CuPy) ordered (groups, KH*KW, C, M), the
    packed layout of gemm_weight_strides; the caller makes it contiguous."""
    taps = geometry.kernel[0] * geometry.kernel[1]
    w = weight.reshape(geometry.groups, geometry.in_channels_per_group, geometry.out_channels_per_group, taps)
    return w.transpose((0, 3, 1, 2) if pass_name == "forward" else (0, 3, 2, 1))


# The window kernels' dtypes: conv_window's, conv_wgmma's and conv_tf32's
# builds and pack_window_weight's.
WINDOW_DTYPES = ("float32", "float16", "bfloat16")


WGMMA_THREADS = 256  # conv_wgmma.cu: two warpgroups (conv_tf32.cu's and grad_weight_tf32.cu's blocks too)


# conv_wgmma_resident's window copies (its COPY): the largest of these that
# divides the bytes of a source row, so that every copy lies in one row.
RESIDENT_COPY_BYTES = (16, 8, 4)


def resident_copy_bytes(row_elements: int, dtype: str) -> Optional[int]:
    """conv_wgmma_resident's copy size for source rows of `row_elements`, or
    None where no copy size divides a row (16-bit rows of odd length)."""
    row_bytes = row_elements * ITEMSIZE[dtype]
    return next((copy for copy in RESIDENT_COPY_BYTES if row_bytes % copy == 0), None)


# The 16-bit builds of grad_input_overlap.cu and grad_weight_overlap.cu (and
# grad_weight.cu's float sum_splits for the latter's partials).
OVERLAP_DTYPES = ("float16", "bfloat16")


# grouped_backward's and grouped_forward's dtypes.
GROUPED_DTYPES = ("float32", "float16", "bfloat16")


# grad_input_taps.cu and grad_weight_taps.cu: their block tiles and the
# problems they take (_taps_vector).
class TapsTile(NamedTuple):
    """A grad_input_taps block tile: BM rows x BN columns over WARPS_M x
    WARPS_N warps, with `stages` cp.async stages of 128 bytes of reduction."""

    bm: int
    bn: int
    warps_m: int
    warps_n: int
    stages: int

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * self.warps_n

    @property
    def shared(self) -> int:
        return self.stages * (self.bm + self.bn) * 128 + self.bn * 12  # and the column table


GRAD_INPUT_TAPS_VECTORS = (16, 8)  # bytes per cp.async, widest first
GRAD_INPUT_TAPS_MIN_TAPS = 8  # shorter kernels keep conv_mma
GRAD_INPUT_TAPS_MIN_ROWS = 16  # as do groups with fewer input channels


def _taps_vector(geometry: Geometry, dtype: str, lengths: tuple[int, ...]):
    """The widest of GRAD_INPUT_TAPS_VECTORS whose values divide every one of
    `lengths`, for a 1D problem with contiguous taps (dilation 1), a stride
    above 1 (stride 1 is conv_window's and grad_weight_window's), at least
    GRAD_INPUT_TAPS_MIN_TAPS taps and GRAD_INPUT_TAPS_MIN_ROWS input channels
    per group; else None."""
    if not _is_1d(geometry):
        return None
    _, kernel, stride, padding, dilation, out_w = _axes(geometry)[1]
    if dilation != 1 or stride == 1 or kernel < GRAD_INPUT_TAPS_MIN_TAPS or geometry.in_channels_per_group < GRAD_INPUT_TAPS_MIN_ROWS:
        return None
    if geometry.out_channels_per_group * kernel > INT32_LIMIT - 256 or out_w + 2 * padding > 2**30:
        return None  # the kernels count k, columns and positions in int
    for vector in GRAD_INPUT_TAPS_VECTORS:
        values = vector // ITEMSIZE[dtype]
        if values and all(n % values == 0 for n in lengths):
            return vector
    return None


def instantiation_loop(leading=(), passes=(), trailing=(), per_dtype=()) -> list[tuple[str, str]]:
    """The (file, name) pairs that the given parts list, in the order of
    _kernels.all_instantiations(): for each dtype of SUPPORTED_DTYPES and
    each index type of INDEX_TYPES, every `leading` part's (dtype, index),
    then for each of the dtype's passes (1 and 3 for float32, else 1) every
    `passes` part's (dtype, index, passes), then every `trailing` part's
    (dtype, index); after the dtype's index types, every `per_dtype` part's
    (dtype).  A part is a function of those arguments that returns a list of
    pairs; a kernel module's instantiations() runs this loop over its own
    parts, all_instantiations() over every module's."""
    names = []
    for dtype in SUPPORTED_DTYPES:
        for index in INDEX_TYPES:
            for part in leading:
                names += part(dtype, index)
            for p in (1, 3) if dtype == "float32" else (1,):
                for part in passes:
                    names += part(dtype, index, p)
            for part in trailing:
                names += part(dtype, index)
        for part in per_dtype:
            names += part(dtype)
    return names
