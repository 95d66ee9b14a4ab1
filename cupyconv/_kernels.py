"""What the CUDA kernels are and how each problem is cut up for them.

Pure Python with no CuPy import, so the polyphase tables and the list of
kernel instantiations can be checked (and compiled by NVRTC) on a machine
without a GPU.  ``_cuda.py`` launches what this module describes.
"""

from __future__ import annotations

import functools
import importlib.resources
import math
import re
from typing import List, NamedTuple, Optional, Tuple

import numpy

from ._geometry import SUPPORTED_DTYPES, Geometry

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

# conv_gemm tiles, chosen by the GEMM's row count (output channels per group):
# wide rows reuse each input element across more FMAs; narrow ones waste less.
GEMM_TILES = (Tile(16, 128, 16, 2, 4), Tile(32, 128, 8, 4, 4), Tile(64, 128, 8, 4, 8))
GEMM_TUNE_TILES = GEMM_TILES + (Tile(128, 64, 8, 8, 4), Tile(64, 64, 16, 4, 4))
# grad_weight_partial tiles, chosen by in_channels per group.
GRAD_WEIGHT_TILES = (Tile(16, 128, 16, 2, 4), Tile(32, 128, 8, 4, 4), Tile(64, 64, 8, 4, 4))
BIAS_THREADS = 256
REDUCE_THREADS = 256


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


def gemm_name(dtype: str, index: str, tile: Tile) -> str:
    return f"conv_gemm<{CUDA_TYPE[dtype]}, {index}, {tile.bm}, {tile.bn}, {tile.bk}, {tile.tm}, {tile.tn}>"


def mma_name(dtype: str, index: str, tile: MmaTile, passes: int) -> str:
    t = tile
    return f"conv_mma<{CUDA_TYPE[dtype]}, {index}, {t.bm}, {t.bn}, {t.bk}, {t.warps_m}, {t.warps_n}, {passes}>"


class WindowTile(NamedTuple):
    """A conv_window block tile: BM rows x BN columns over WARPS_M x
    WARPS_N warps (each a (BM/WARPS_M) x (BN/WARPS_N) grid of m16n8
    fragments).  The channel slice is fixed by the dtype (64 bytes)."""

    bm: int
    bn: int
    warps_m: int
    warps_n: int

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * self.warps_n


# conv_window tiles, chosen by the GEMM's row count (output channels x fold).
WINDOW_TILES = (WindowTile(32, 128, 1, 4), WindowTile(64, 128, 2, 4), WindowTile(128, 128, 2, 4))
WINDOW_TUNE_TILES = WINDOW_TILES + (WindowTile(128, 128, 4, 2), WindowTile(128, 64, 4, 2), WindowTile(64, 64, 2, 2))
WINDOW_DTYPES = ("float32", "float16", "bfloat16")
WINDOW_MAX_VECTORS = 32  # conv_window.cu: 16-byte vectors per window row for the 16-bit types
WINDOW_MAX_VECTORS_WIDE = 64  # and for float
WINDOW_MIN_ROWS = 32  # fewer GEMM rows stay on conv_mma (the window's tiles would be mostly padding)


def window_name(dtype: str, index: str, tile: WindowTile, passes: int = 1, fill: bool = False) -> str:
    t = tile
    return f"conv_window<{CUDA_TYPE[dtype]}, {index}, {t.bm}, {t.bn}, {t.warps_m}, {t.warps_n}, {passes}{', true' if fill else ''}>"


# conv_window's fill builds (conv_window<..., true>): 3xTF32 only, for float32
# "highest" (the other modes take conv_wgmma_resident's on Hopper).
WINDOW_FILL_PASSES = 3


def _is_1d(geometry: Geometry) -> bool:
    return geometry.kernel[0] == 1 and geometry.in_size[0] == 1 and geometry.out_size[0] == 1 and geometry.padding[0] == 0


@functools.lru_cache(maxsize=1024)
def window_records(geometry: Geometry, pass_name: str):
    """conv_window's phase records along W and its fold, or None where the
    problem is not 1D (the H axis must be trivial).

    The forward pass folds its phases into the GEMM's rows when the dilation
    is 1, the stride s is a power of two and divides the kernel: phase r then
    has taps r, r + s, ... each reading input q - t, so one record serves all
    s phases, with tap_first 0 (the kernel adds r) and columns q covering
    every phase's range.  Otherwise one record per phase, as conv_gemm's."""
    if not _is_1d(geometry):
        return None
    in_w, kernel, stride, padding, dilation, out_w = _axes(geometry)[1]
    if pass_name == "grad_input":
        return _flatten(grad_input_axis_phase(in_w, kernel, stride, padding, dilation)), 1
    if pass_name != "forward":
        raise ValueError(f"unknown pass {pass_name!r}")
    dense = window_dense_taps(geometry, pass_name)
    if dense:
        q_lo = -((stride - 1 - padding) // stride)  # the smallest q of any phase: ceil((padding - stride + 1) / stride)
        q_hi = (out_w - 1 + padding) // stride  # the largest (phase 0's)
        count = max(0, q_hi - q_lo + 1)
        return _flatten([(count, q_lo * stride - padding, stride, q_lo, 1, 0, stride, dense // stride, -1)]), stride
    return _flatten(forward_axis_phases(in_w, kernel, stride, padding, dilation, out_w)), 1


# The forward pass also folds where the stride is 2 and the dilation even: then
# every tap lands on one phase and the other phase is bias only (P4), so that
# the phases' outputs would interleave, one written by blocks with no MMAs.
# Folded, the dilated kernel becomes a dense one with zero taps in between
# (and a zero tap at the end to make its length even): twice the MMAs, but
# whole runs of consecutive outputs.  False folds only dense kernels.
FOLD_DILATED = True


def window_dense_taps(geometry: Geometry, pass_name: str) -> int:
    """How many taps the window kernels' packed weight has along W when the
    forward pass folds its phases (see window_records), else 0: the kernel
    itself when the dilation is 1 and the stride s (a power of two) divides
    it; where FOLD_DILATED applies, the dilated kernel's span rounded up to a
    multiple of s, with zero taps where no tap of the kernel falls."""
    if pass_name != "forward" or not _is_1d(geometry):
        return 0
    _, kernel, stride, _, dilation, _ = _axes(geometry)[1]
    if stride & (stride - 1):
        return 0
    if dilation == 1 and kernel % stride == 0:
        return kernel
    if FOLD_DILATED and stride == 2 and dilation % 2 == 0 and kernel > 1:
        span = dilation * (kernel - 1) + 1
        return -(-span // stride) * stride
    return 0


def window_kernel_w(geometry: Geometry, pass_name: str) -> int:
    """The packed weight's taps along W (pack_window_weight)."""
    return window_dense_taps(geometry, pass_name) or geometry.kernel[1]


def window_column_range(record, fold: int, bm: int, out_w: int, r0: int) -> Tuple[int, int]:
    """(first, end) of the columns a window kernel's row tile computes for one
    phase record (window.cuh's window_block): every column, but where the
    fold has at least `bm` rows per output channel, so that the tile is the
    sub-phases r0 .. r0 + bm - 1 of one channel: then only the columns where
    one of them writes inside the output (column q of sub-phase r writes
    out_base + q * out_step + r)."""
    count, out_base, out_step = (int(v) for v in record[:3])
    if fold == 1 or bm > fold:
        return 0, count
    first = max(0, -((out_base + r0 + bm - 1) // out_step))
    return first, min(count, (out_w - 1 - out_base - r0) // out_step + 1)


def window_col_tiles(flat: Tuple[int, ...], fold: int, bm: int, bn: int, out_w: int) -> int:
    """Column tiles of the window kernels' grid: the most any (phase, row
    tile) needs (window_column_range)."""
    r0s = range(0, fold, bm) if 1 < fold and bm <= fold else (0,)
    return max(
        -(-(end - first) // bn)
        for record in numpy.asarray(flat).reshape(-1, 9)
        for first, end in (window_column_range(record, fold, bm, out_w, r0) for r0 in r0s)
    )


def window_layout(flat: Tuple[int, ...], tile: WindowTile, dtype: str) -> Tuple[int, int, int, int]:
    """(max_taps, window_vectors, window_stride, shared-memory bytes) of
    conv_window for these records: A holds max_taps tap slices of BM rows of
    80 bytes; a window row covers every position a block reads (BN columns,
    the taps' span, up to one vector of alignment), in 16-byte vectors, and
    its length in 32-bit words is 8 more than a multiple of 16 so that B
    fragment reads hit 32 distinct banks."""
    vec = 16 // numpy.dtype(dtype).itemsize
    records = numpy.asarray(flat).reshape(-1, 9)
    taps = records[:, 7]
    span = max(int((tile.bn - 1) * in_step + max(count - 1, 0) * abs(tap_in_step) + 1) for in_step, count, tap_in_step in records[:, [4, 7, 8]])
    vectors = -(-(vec - 1 + span) // vec)
    words = vectors * vec
    stride = words + (8 - words % 16) % 16
    stage = int(taps.max()) * tile.bm * 80 + 16 * stride * 4
    return int(taps.max()), vectors, stride, max(2 * stage, tile.bm * (tile.bn + 16) * 4)


class WgmmaTile(NamedTuple):
    """A conv_wgmma block: BM rows x BN columns over two warpgroups, each
    issuing wgmma.m64n128 (BM 128: they split the rows; BM 64, BN 256: the
    columns)."""

    bm: int
    bn: int

    @property
    def threads(self) -> int:
        return WGMMA_THREADS


WGMMA_THREADS = 256  # conv_wgmma.cu: two warpgroups
SM90A_FILES = ("conv_wgmma.cu", "conv_fold.cu", "grad_weight_tf32.cu", "conv_tf32.cu", "grad_input_overlap.cu", "grad_weight_overlap.cu")  # built for sm_90a (wgmma) on compute capability 9.0
WGMMA_TILES = (WgmmaTile(128, 128), WgmmaTile(64, 256))
WGMMA_CHUNKS = 4  # conv_wgmma.cu: 16-byte chunks of a channel slice
WGMMA_STAGES = 3  # and its shared-memory buffers
WGMMA_MAX_TASKS = {2: 1, 4: 2}  # window vectors a thread loads per slice, by item size (conv_wgmma.cu's wgmma_max_tasks)


def wgmma_name(dtype: str, index: str, tile: WgmmaTile) -> str:
    return f"conv_wgmma<{CUDA_TYPE[dtype]}, {index}, {tile.bm}, {tile.bn}>"


# conv_wgmma_x3's CHAIN, the MMAs that share a fresh accumulator: 0 a
# k-step's three, 1 a tap's six, 2 a slice's.  1 measured 2-9% faster than 0
# on P1, P2, X2, X3 with relative errors 1.5-2.0e-7 (0: 1.3-2.3e-7; torch
# 1.5-4.1e-7); 2 no faster than 1 and up to 5.7e-7 (perf notes v21).
WGMMA_X3_CHAIN = 1


def wgmma_x3_name(index: str, tile: WgmmaTile, copy: int = 16) -> str:
    """conv_wgmma_x3: conv_wgmma's GEMM in 3xTF32, for float32 "highest";
    `copy` the bytes of its window loads (resident_copy_bytes)."""
    return f"conv_wgmma_x3<{index}, {tile.bm}, {tile.bn}, {WGMMA_X3_CHAIN}, {copy}>"


WGMMA_X3_STAGES = 2  # conv_wgmma_x3's buffers, each twice conv_wgmma's (hi, lo)


def wgmma_heuristic(rows: int) -> WgmmaTile:
    """128 x 128 where the GEMM has more than 64 rows, else 64 x 256."""
    return WGMMA_TILES[0] if rows > 64 else WGMMA_TILES[1]


def wgmma_layout(flat: Tuple[int, ...], tile: WgmmaTile, dtype: str, passes: int = 1) -> Tuple[int, int, int, int]:
    """(max_taps, window_vectors, chunk_stride, shared-memory bytes) of
    conv_wgmma for these records.  A buffer holds max_taps taps of BM rows x
    64 bytes and the window: WGMMA_CHUNKS chunks of 16-byte rows, one per
    position a block reads (BN columns, the taps' span, up to one vector of
    alignment), chunk_stride bytes apart.  That stride is 32 more than a
    multiple of 128 bytes, so that the four chunks' rows a warp stores at
    once fall in distinct bank groups.  The tile is staged for the epilogue
    in the same memory.  With passes 3 (conv_wgmma_x3, float), WGMMA_X3_STAGES
    buffers, each two of these (hi, then lo)."""
    vec = 16 // ITEMSIZE[dtype]
    records = numpy.asarray(flat).reshape(-1, 9)
    taps = int(records[:, 7].max())
    span = max(int((tile.bn - 1) * in_step + max(count - 1, 0) * abs(tap_in_step) + 1) for in_step, count, tap_in_step in records[:, [4, 7, 8]])
    vectors = -(-(vec - 1 + span) // vec)
    rows = vectors * vec
    rows += (2 - rows) % 8
    chunk_stride = 16 * rows
    stage = taps * tile.bm * WGMMA_CHUNKS * 16 + WGMMA_CHUNKS * chunk_stride
    stage = -(-stage // 128) * 128
    stages = WGMMA_STAGES if passes == 1 else 2 * WGMMA_X3_STAGES
    return taps, vectors, chunk_stride, max(stages * stage, tile.bm * (tile.bn + 8) * 4)


def resident_name(dtype: str, index: str, tile: WgmmaTile, blocks: int, copy: int = 16, fill: bool = False) -> str:
    return f"conv_wgmma_resident<{CUDA_TYPE[dtype]}, {index}, {tile.bm}, {tile.bn}, {blocks}, {copy}{', true' if fill else ''}>"


# conv_wgmma_resident's window copies (its COPY): the largest of these that
# divides the bytes of a source row, so that every copy lies in one row.
RESIDENT_COPY_BYTES = (16, 8, 4)


def resident_copy_bytes(row_elements: int, dtype: str) -> Optional[int]:
    """conv_wgmma_resident's copy size for source rows of `row_elements`, or
    None where no copy size divides a row (16-bit rows of odd length)."""
    row_bytes = row_elements * ITEMSIZE[dtype]
    return next((copy for copy in RESIDENT_COPY_BYTES if row_bytes % copy == 0), None)


# conv_wgmma_resident's launch bounds (blocks per multiprocessor) by tile:
# two where they fit in shared memory for the 64 x 256 tile only (under 128
# registers ptxas spills a few epilogue values of the 128 x 128 tile's 16-bit
# code too many; one block of it at 200-odd registers measured faster).
RESIDENT_VARIANTS = ((WGMMA_TILES[0], 1), (WGMMA_TILES[1], 1), (WGMMA_TILES[1], 2))


# conv_wgmma_tf32 (conv_tf32.cu): a float32 stride-1 correlation in TF32 with
# the window as wgmma's register operand and the weight tile resident.  Its
# builds, by tap count (TAPS: one fragment register set per tap); its block
# (CT_POSITIONS columns x CT_ROWS output channels); its slices of CT_SLICE
# channels, CT_BUFFERS raw window buffers, at most CT_MAX_TASKS 16-byte
# copies a thread per slice; one (tap, 32-channel block) of the weight tile.
# Its FOLD builds take window_records' folded record (X3): GEMM columns are
# (output channel, sub-phase) pairs, read from the packed weight as it is.
CONV_TF32_TAPS = (2, 3, 4)
CONV_TF32_POSITIONS = 128
CONV_TF32_ROWS = 128
CONV_TF32_SLICE = 16
CONV_TF32_BUFFERS = 4
CONV_TF32_MAX_TASKS = 4
CONV_TF32_ATOM = CONV_TF32_ROWS * 128


def conv_tf32_name(index: str, taps: int, fold: bool = False) -> str:
    return f"conv_wgmma_tf32<{index}, {taps}{', true' if fold else ''}>"


def conv_tf32_layout(record: Tuple[int, ...], channels: int) -> Optional[Tuple[int, int, int, int]]:
    """(window_vectors, raw_row, weight_blocks, shared-memory bytes) of
    conv_wgmma_tf32 for one stride-1 phase record and its reduction
    channels, or None where it has no build for the taps or its copies do
    not cover the window.  A raw row holds a block's CONV_TF32_POSITIONS
    columns, the taps' reach and up to 3 floats of alignment, in whole
    vectors, rounded up to 8 more than a multiple of 32 floats (conflict-free
    fragment loads); the weight tile is taps x weight_blocks atoms of 32
    channels, then the bias tile (CONV_TF32_ROWS floats) and the buffers."""
    taps, tap_in_step = record[7], record[8]
    if taps not in CONV_TF32_TAPS:
        return None
    vectors = -(-(CONV_TF32_POSITIONS + 3 + (taps - 1) * abs(tap_in_step)) // 4)
    if CONV_TF32_SLICE * vectors > CONV_TF32_MAX_TASKS * WGMMA_THREADS:
        return None
    raw_row = 4 * vectors + (8 - 4 * vectors) % 32
    blocks = -(-channels // 32)
    shared = taps * blocks * CONV_TF32_ATOM + CONV_TF32_ROWS * 4 + CONV_TF32_BUFFERS * CONV_TF32_SLICE * raw_row * 4
    return vectors, raw_row, blocks, shared


# conv_tf32_stream (conv_tf32.cu): conv_wgmma_tf32's FOLD GEMM with the
# weight streamed beside the window, for folds whose weight tile does not fit
# (X2), in TF32 or 3xTF32 (passes).  Its builds, by tap count a sub-phase;
# its GEMM columns a block by passes (cs_cols); its stages in flight
# (CONV_TF32_STREAM_BUFFERS buffers of one slice's weight tiles, (3xTF32:
# hi and lo) x taps of columns x CONV_TF32_STREAM_LINE bytes, and window); the
# folds its epilogue takes.
CONV_TF32_STREAM_TAPS = (2,)
CONV_TF32_STREAM_COLS = {1: 256, 3: 128}
CONV_TF32_STREAM_BUFFERS = 4
CONV_TF32_STREAM_LINE = CONV_TF32_SLICE * 4
CONV_TF32_STREAM_MAX_FOLD = 64


def conv_tf32_stream_name(index: str, taps: int, passes: int) -> str:
    return f"conv_tf32_stream<{index}, {taps}, {passes}>"


def conv_tf32_stream_layout(record: Tuple[int, ...], passes: int) -> Optional[Tuple[int, int, int]]:
    """(window_vectors, raw_row, shared-memory bytes) of conv_tf32_stream for
    one folded record, or None where it has no build for its taps: the bias
    tile (a float a column), then the buffers, each a slice's weight tiles
    and its raw window (as conv_tf32_layout's)."""
    taps = record[7]
    layout = conv_tf32_layout(record, 1) if taps in CONV_TF32_STREAM_TAPS else None
    if layout is None:
        return None
    vectors, raw_row = layout[:2]
    cols = CONV_TF32_STREAM_COLS[passes]
    buffer = (2 if passes == 3 else 1) * taps * cols * CONV_TF32_STREAM_LINE + CONV_TF32_SLICE * raw_row * 4
    return vectors, raw_row, cols * 4 + CONV_TF32_STREAM_BUFFERS * buffer


# conv_tf32_multicast (conv_tf32.cu): conv_tf32_stream's TF32 GEMM (2 taps a
# sub-phase) in clusters of two blocks that share each stage's weight (TMA,
# multicast), its copies issued by a producer warpgroup.  Its builds, by
# fold; CONV_TF32_MULTICAST_STAGES buffers, each 1024-byte aligned: 2 taps x
# CONV_TF32_MULTICAST_COLS rows x CONV_TF32_STREAM_LINE bytes of weight, then
# the window (CONV_TF32_SLICE rows of raw_row floats), and two mbarriers a
# buffer after them.
CONV_TF32_MULTICAST_FOLDS = (4, 8, 16, 32)
CONV_TF32_MULTICAST_STAGES = 5
CONV_TF32_MULTICAST_COLS = 256
CONV_TF32_MULTICAST_THREADS = WGMMA_THREADS + 128
CONV_TF32_MULTICAST_ROW = 132


def conv_tf32_multicast_name(index: str, fold: int) -> str:
    return f"conv_tf32_multicast<{index}, {fold}>"


def conv_tf32_multicast_shared(raw_row: int) -> int:
    stage = 2 * CONV_TF32_MULTICAST_COLS * CONV_TF32_STREAM_LINE + CONV_TF32_SLICE * raw_row * 4
    staging = 128 + WGMMA_THREADS // 32 * 4 * CONV_TF32_MULTICAST_ROW * 4  # (after the barriers: fold 8's staged output rows)
    return CONV_TF32_MULTICAST_STAGES * -(-stage // 1024) * 1024 + staging


# conv_wgmma_resident's fill (perf notes v17): a forward pass of stride
# FILL_STEP whose dilation is a multiple of it has every tap on one phase and
# the others bias only (P4).  The kernel then runs that phase alone, as a
# stride-1 correlation, and its epilogue writes every output: the sums and,
# between them, the bias, in whole 16-byte vectors.  A warp stages
# FILL_ROWS[item size] rows at once over the window buffers, each of
# FILL_STEP * 128 outputs and 16 elements to spare (at most
# RESIDENT_PART_BYTES for 8 warps).  Built as conv_wgmma_resident<..., true>.
FILL_STEP = 2  # conv_wgmma.cu's FILL_STEP
FILL_ROWS = {2: 8, 4: 4}  # its fill_rows<T>()


def fill_stage_bytes(dtype: str) -> int:
    """The shared memory conv_wgmma_resident's fill epilogue stages in (8
    warps; conv_wgmma.cu's fill_stage_row)."""
    item = ITEMSIZE[dtype]
    return 8 * FILL_ROWS[item] * (FILL_STEP * 128 + 16) * item


@functools.lru_cache(maxsize=1024)
def fill_record(geometry: Geometry, pass_name: str) -> Optional[Tuple[int, ...]]:
    """The one phase record of the fill (conv_wgmma_resident's and
    conv_window's), or None where it does not apply: the forward pass of a 1D problem of stride FILL_STEP and
    a dilation that is a multiple of it.  Every tap then lands on phase 0 of
    forward_axis_phases, whose outputs start at out_base in [0, stride): its
    column q is output out_base + stride * q (tap t reading input in_base + q
    - t * dilation / stride), and the outputs between are bias only."""
    if pass_name != "forward" or not _is_1d(geometry):
        return None
    in_w, kernel, stride, padding, dilation, out_w = _axes(geometry)[1]
    if stride != FILL_STEP or dilation % stride:
        return None
    records = [record for record in forward_axis_phases(in_w, kernel, stride, padding, dilation, out_w) if record[7]]
    assert len(records) == 1 and 0 <= records[0][1] < stride, records  # phase 0, every tap
    return _flatten(records)


RESIDENT_RAW_BUFFERS = 3  # conv_wgmma_resident: raw window slices in flight
RESIDENT_WINDOW_BUFFERS = 2  # and transposed ones
RESIDENT_PART_BYTES = 64 * (128 + 8) * 4  # one warpgroup's staged 64 x 128 part (window_stage_row<128>)


def _resident_buffers(flat: Tuple[int, ...], tile: WgmmaTile, dtype: str, channels: int) -> Tuple[int, int, int, int, int]:
    """(max_taps, window_vectors, chunk_stride, weight bytes, raw buffer
    bytes) of the resident kernels (conv_wgmma_resident, conv_wgmma_split):
    the whole weight row tile (every 64-byte channel slice and tap, BM rows
    each) and one raw window slice ([channel][position]; rows of
    window_vectors 16-byte vectors, rounded up to an odd count in 16-bit, 16
    bytes of skew per four float channels: the kernels' raw_row and
    raw_bytes)."""
    taps, vectors, chunk_stride, _ = wgmma_layout(flat, tile, dtype)
    bk = WGMMA_CHUNKS * 16 // ITEMSIZE[dtype]
    weight = -(-channels // bk) * taps * tile.bm * WGMMA_CHUNKS * 16
    raw_row = (vectors | 1 if ITEMSIZE[dtype] == 2 else vectors) * 16
    raw = -(-(bk * raw_row + (128 if ITEMSIZE[dtype] == 4 else 0)) // 128) * 128
    return taps, vectors, chunk_stride, weight, raw


def resident_layout(flat: Tuple[int, ...], tile: WgmmaTile, dtype: str, channels: int) -> Tuple[int, int, int, int]:
    """(max_taps, window_vectors, chunk_stride, shared-memory bytes) of
    conv_wgmma_resident for these records and reduction channels: the weight
    row tile, three raw window slices (_resident_buffers) and two transposed
    ones as conv_wgmma's (or one staged 64 x 128 float part, if larger)."""
    taps, vectors, chunk_stride, weight, raw = _resident_buffers(flat, tile, dtype, channels)
    windows = max(RESIDENT_WINDOW_BUFFERS * WGMMA_CHUNKS * chunk_stride, RESIDENT_PART_BYTES)
    return taps, vectors, chunk_stride, weight + RESIDENT_RAW_BUFFERS * raw + windows


# conv_wgmma_split (conv_wgmma.cu): conv_wgmma_resident's 16-bit 128 x 128
# GEMM with a producer warpgroup (window copies and transposes) beside two
# consumer warpgroups (MMAs and the epilogue), mbarriers between them.
SPLIT_THREADS = 384
SPLIT_STAGES = 4  # transposed window buffers
SPLIT_RAW = 3  # raw window buffers
SPLIT_PART_BYTES = 16 * (64 + 4) * 4  # a consumer warp's staged 16 x 128 part
SPLIT_TILE = WGMMA_TILES[0]
SPLIT_DTYPES = ("float16", "bfloat16")


def split_name(dtype: str, index: str, copy: int = 16) -> str:
    return f"conv_wgmma_split<{CUDA_TYPE[dtype]}, {index}, {copy}>"


def split_layout(flat: Tuple[int, ...], dtype: str, channels: int) -> Tuple[int, int, int, int]:
    """(max_taps, window_vectors, chunk_stride, shared-memory bytes) of
    conv_wgmma_split: the weight row tile and SPLIT_RAW raw window slices
    (_resident_buffers), SPLIT_STAGES transposed window buffers, the 8
    consumer warps' staged parts and 2 x SPLIT_STAGES mbarriers."""
    taps, vectors, chunk_stride, weight, raw = _resident_buffers(flat, SPLIT_TILE, dtype, channels)
    windows = SPLIT_STAGES * WGMMA_CHUNKS * chunk_stride
    return taps, vectors, chunk_stride, weight + SPLIT_RAW * raw + windows + 8 * SPLIT_PART_BYTES + 16 * SPLIT_STAGES


class GradWeightWgmmaTile(NamedTuple):
    """A grad_weight_wgmma block: 64 output channels (wgmma's M) x `bn` input
    channels (its N) x up to `taps` kernel taps, two warpgroups."""

    bn: int
    taps: int

    @property
    def threads(self) -> int:
        return WGMMA_THREADS


# 32 channels by up to 8 taps, or 64 by up to 4: 128 accumulators a thread;
# or 128 channels by up to 4 taps, the warpgroups taking 64 channels each.
GRAD_WEIGHT_WGMMA_TILES = (GradWeightWgmmaTile(32, 8), GradWeightWgmmaTile(64, 4), GradWeightWgmmaTile(128, 4))
GRAD_WEIGHT_WGMMA_DTYPES = ("float16", "bfloat16")
GRAD_WEIGHT_WGMMA_POSITIONS = 128  # conv_wgmma.cu's GW_POSITIONS: reduction positions per item
GRAD_WEIGHT_WGMMA_AHEAD = 3  # its GW_AHEAD: items loaded ahead
GRAD_WEIGHT_WGMMA_RAW_BUFFERS = GRAD_WEIGHT_WGMMA_AHEAD + 1  # its GW_RAW_BUFFERS
GRAD_WEIGHT_WGMMA_X_BUFFERS = GRAD_WEIGHT_WGMMA_AHEAD + 2  # its GW_X_BUFFERS
GRAD_WEIGHT_WGMMA_ROWS = 64  # output channels per block
GRAD_WEIGHT_WGMMA_SPLIT_CI = 128  # the tile width whose warpgroups split the channels, two items ahead (its SPLIT_CI)


def grad_weight_wgmma_ahead(tile: GradWeightWgmmaTile) -> int:
    """Items grad_weight_wgmma loads ahead with `tile` (its AHEAD)."""
    return 2 if tile.bn == GRAD_WEIGHT_WGMMA_SPLIT_CI else GRAD_WEIGHT_WGMMA_AHEAD


def grad_weight_wgmma_name(dtype: str, index: str, tile: GradWeightWgmmaTile, copy: int) -> str:
    return f"grad_weight_wgmma<{CUDA_TYPE[dtype]}, {index}, {tile.bn}, {tile.taps}, {copy}>"


def grad_weight_wgmma_layout(geometry: Geometry, tile: GradWeightWgmmaTile, dtype: str):
    """(window_vectors, chunk_stride, shared-memory bytes, copy bytes) of
    grad_weight_wgmma, or None where it does not apply: not 16-bit, not 1D,
    a stride, more taps than the tile's, input rows that are not whole
    16-byte vectors, grad_output rows that no copy size divides.

    An item's window covers positions l0 - padding - shift0 .. (shift0 < 8
    aligns it down to a vector), GRAD_WEIGHT_WGMMA_POSITIONS + (K - 1) d
    positions past shift0, in whole vectors.  Shared memory: the x tiles
    (bn rows x 256 bytes; ahead + 2 of them), the raw windows (ahead + 1 of
    64 rows of those vectors, 16 bytes of skew per 4 rows) and two transposed
    ones (8 chunks of rows of 16 bytes, chunk_stride 32 more than a multiple
    of 128), or, if larger and the warpgroups split the positions, the final
    partial (taps x 64 x bn floats)."""
    if dtype not in GRAD_WEIGHT_WGMMA_DTYPES or not _is_1d(geometry):
        return None
    in_w, kernel, stride, padding, dilation, out_w = _axes(geometry)[1]
    if stride != 1 or kernel > tile.taps or in_w % 8:
        return None
    copy = resident_copy_bytes(out_w, dtype)
    if copy is None:
        return None
    shift0 = -padding - (-padding // 8) * 8
    vectors = -(-(shift0 + GRAD_WEIGHT_WGMMA_POSITIONS + (kernel - 1) * dilation) // 8)
    rows = vectors * 8
    rows += (2 - rows) % 8
    chunk_stride = 16 * rows
    rows_per_block = GRAD_WEIGHT_WGMMA_ROWS
    raw = -(-(rows_per_block * vectors * 16 + rows_per_block // 4 * 16) // 128) * 128
    x_tile = tile.bn * GRAD_WEIGHT_WGMMA_POSITIONS * 2
    ahead = grad_weight_wgmma_ahead(tile)
    shared = (ahead + 2) * x_tile + (ahead + 1) * raw + 2 * (rows_per_block // 8) * chunk_stride
    if tile.bn == GRAD_WEIGHT_WGMMA_SPLIT_CI:  # no partial goes through shared memory
        return vectors, chunk_stride, shared, copy
    return vectors, chunk_stride, max(shared, tile.taps * rows_per_block * tile.bn * 4), copy


# grad_weight_tf32.cu: float32 1D grad_weight on wgmma, TF32 (passes 1) or
# 3xTF32 (passes 3); its sizes as the kernel has them.  Tap mode (stride 1, an
# accumulator a tap) and fold mode (strides, the taps in the rows).
GRAD_WEIGHT_TF32_TAPS = (3,)  # MAX_TAPS builds of tap mode: accumulators for up to this many taps
GRAD_WEIGHT_TF32_FOLD_MAX_KERNEL = 64  # fold mode: kernels of up to this many taps (at least 2 output channels a block)
GRAD_WEIGHT_TF32_PASSES = (1, 3)
GRAD_WEIGHT_TF32_POSITIONS = 64  # GWT_POSITIONS: reduction positions per item
GRAD_WEIGHT_TF32_ROWS = 128  # GWT_ROWS: rows per block (tap mode: output channels)
GRAD_WEIGHT_TF32_COLUMNS = 64  # GWT_COLUMNS: input channels per block
GRAD_WEIGHT_TF32_BUFFERS = 3  # GWT_BUFFERS: window and x buffers


# k-steps (8 positions each) per group of MMAs, by passes: its CHAIN (3xTF32,
# a fresh accumulator a group: 4 errs over twice cuDNN on short sums; 1 errs
# more on long ones and is slower; TF32, straight into the sums: 4 and 8
# measured alike on P2, perf notes v27 and v29).
GRAD_WEIGHT_TF32_CHAIN = {1: 4, 3: 2}


def grad_weight_tf32_name(index: str, taps: int, passes: int, copy: int, fold: bool = False) -> str:
    return f"grad_weight_wgmma_tf32<{index}, {taps}, {passes}, {copy}, {GRAD_WEIGHT_TF32_CHAIN[passes]}, {str(fold).lower()}>"


class GradWeightTf32Layout(NamedTuple):
    fold: bool
    taps: int  # MAX_TAPS of the build (1 in fold mode)
    tile_co: int  # output channels a block
    vectors: int  # 16-byte vectors of an item's grad_output window row
    raw_row: int  # bytes between window rows in shared memory
    shared: int  # shared-memory bytes
    copy: int  # bytes a window copy


def grad_weight_tf32_layout(geometry: Geometry, dtype: str, passes: int) -> Optional[GradWeightTf32Layout]:
    """grad_weight_wgmma_tf32's layout, or None where it does not apply: not
    float32, not 1D, input rows that are not whole 16-byte vectors; at stride
    1 more taps than tap mode's largest build; strided, more than
    GRAD_WEIGHT_TF32_FOLD_MAX_KERNEL taps (fold mode).

    An item's window covers grad_output positions stride * l0 - padding -
    shift0 .. (shift0 < 4 aligns it down to a vector), stride *
    (GRAD_WEIGHT_TF32_POSITIONS - 1) + (K - 1) d + 1 past shift0, in whole
    vectors; a raw row is that, rounded up to an odd number of vectors (in tap
    mode its float count 4 more than a multiple of 8: conflict-free fragment
    loads).  Shared memory: three x tiles (64 channels x the positions, hi
    and for 3xTF32 lo) and three raw windows of tile_co rows (128 in tap
    mode, 128 // K in fold mode)."""
    if dtype != "float32" or passes not in GRAD_WEIGHT_TF32_PASSES or not _is_1d(geometry):
        return None
    in_w, kernel, stride, padding, dilation, out_w = _axes(geometry)[1]
    if in_w % 4:
        return None
    fold = stride != 1
    if fold:
        if kernel > GRAD_WEIGHT_TF32_FOLD_MAX_KERNEL:
            return None
        taps, tile_co = 1, GRAD_WEIGHT_TF32_ROWS // kernel
    else:
        taps = next((t for t in GRAD_WEIGHT_TF32_TAPS if t >= kernel), None)
        if taps is None:
            return None
        tile_co = GRAD_WEIGHT_TF32_ROWS
    copy = resident_copy_bytes(out_w, dtype)
    shift0 = -padding % 4
    vectors = -(-(shift0 + stride * (GRAD_WEIGHT_TF32_POSITIONS - 1) + 1 + (kernel - 1) * dilation) // 4)
    raw_row = (vectors | 1) * 16
    x_tile = GRAD_WEIGHT_TF32_COLUMNS * GRAD_WEIGHT_TF32_POSITIONS * 4 * (2 if passes == 3 else 1)
    shared = GRAD_WEIGHT_TF32_BUFFERS * (x_tile + tile_co * raw_row)
    return GradWeightTf32Layout(fold, taps, tile_co, vectors, raw_row, shared, copy)


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
OVERLAP_DTYPES = ("float16", "bfloat16")
# Its float build (TF32, perf notes v40): two k8 steps an output channel, the
# stretch in two planes of 16-byte chunks, rounded in place by the producer.
OVERLAP_TF32_CB = 2  # output channels a k-block
OVERLAP_TF32_STAGES = 6
OVERLAP_TF32_STAGE_BYTES = OVERLAP_TF32_CB * (OVERLAP_BM * 64 + 2 * (OVERLAP_BN + 1) * 16)
OVERLAP_TF32_SHARED = OVERLAP_TF32_STAGES * OVERLAP_TF32_STAGE_BYTES + OVERLAP_TF32_STAGES * 16


def overlap_layout(dtype: str) -> Tuple[int, int]:
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


def fold_channels_padded(in_channels: int) -> int:
    """conv_fold's packed weight rows: the input channels in whole k-blocks."""
    return -(-in_channels // FOLD_BK) * FOLD_BK


def fold_shared_bytes(channels_padded: int) -> int:
    """conv_fold's shared memory: the row tile's weight, the k-block
    buffers, each of its 8 consumer warps' staged outputs, and the buffers'
    mbarriers."""
    return FOLD_ROWS * channels_padded * 2 + FOLD_STAGES * FOLD_STAGE_BYTES + (FOLD_THREADS // 32) * FOLD_OUT_BYTES + 8 * FOLD_BARRIERS


def window_channels_padded(channels: int, dtype: str) -> int:
    vec = 16 // numpy.dtype(dtype).itemsize
    return -(-channels // vec) * vec


# pack_weight.cu: the layout below (channels padded, float optionally rounded
# to TF32) made on the GPU in one launch, for _cuda._window_weight: the CuPy
# views, copy, padding and rounding it replaces took 33-66 us of host time a
# call on the H100 host (perf notes v20).
PACK_THREADS = 256
PACK_MAX_BLOCKS = 4096  # a grid-stride loop beyond this
PACK_TILE = 32  # pack_window_weight's forward tiles: channels x (row, tap) pairs


def pack_weight_name(dtype: str, round_tf32: bool, split: bool = False) -> str:
    """pack_window_weight's build: `split` (float) writes 3xTF32's hi and lo arrays (conv_wgmma_x3)."""
    bits = "unsigned" if ITEMSIZE[dtype] == 4 else "unsigned short"
    return f"pack_window_weight<{bits}, {'true' if round_tf32 else 'false'}{', true' if split else ''}>"


def pack_direct_weight_name(dtype: str) -> str:
    return f"pack_direct_weight<{CUDA_TYPE[dtype]}>"


def pack_window_weight(weight, geometry: Geometry, pass_name: str, fold: bool = True):
    """`weight` (NumPy or CuPy) ordered (groups, KW, M, C), conv_window's A
    layout before the channels are padded to 16 bytes: a view, or where the
    forward pass folds a dilated kernel (window_kernel_w taps, more than KW;
    not with `fold` False, as conv_wgmma_resident's fill reads it) a new array
    with the kernel's taps at every dilation-th place and zeros between."""
    view = pack_gemm_weight(weight, geometry, pass_name).transpose(0, 1, 3, 2)
    taps = window_kernel_w(geometry, pass_name) if fold else view.shape[1]
    if taps == view.shape[1]:
        return view
    dilation = geometry.dilation[1]
    dense = numpy.zeros_like(view, shape=(view.shape[0], taps) + view.shape[2:])  # CuPy for CuPy (NEP 18)
    dense[:, : dilation * (view.shape[1] - 1) + 1 : dilation] = view
    return dense


class DirectTile(NamedTuple):
    """A conv_direct block: BM output channels (8 channel threads of BM / 8
    each) by 32 column threads, each taking TN consecutive columns of one
    phase at a time."""

    bm: int
    tn: int


DIRECT_TILES = (DirectTile(16, 8), DirectTile(32, 4), DirectTile(64, 4))
DIRECT_THREADS = 256
DIRECT_MAX_H_TAPS = 16  # conv_direct.cu keeps a row's H taps in arrays of 16
DIRECT_STAGE_BYTES = 80 * 1024  # the most shared memory the output tile may take
DIRECT_MAX_SLOT_GROUPS = 8  # CP is 4 * TN * k for k up to this
DIRECT_HEADER_BYTES = 912  # conv_direct.cu: the class's H taps, their first rows, the slots with W taps and their first taps, ahead of the arrays
DIRECT_MAX_STRIDE_W = 64  # conv_direct.cu lists up to this many slots (W phases)
DIRECT_WARPS = DIRECT_THREADS // 32  # the sums' units are dealt to these
DIRECT_FETCH = 8  # conv_direct.cu: input values a thread fetches per tile, at most
DIRECT_MAX_TILES_PER_BLOCK = 16
DIRECT_HEURISTIC_ROWS = 32  # the heuristic takes the narrowest tile covering min(M, this)
DIRECT_MIN_BLOCKS_PER_SM = 8  # tiles per block shrink (to 1) to keep at least this many blocks per multiprocessor


def direct_heuristic(out_channels: int) -> DirectTile:
    """conv_direct's tile without the autotuner: the narrowest covering up to
    DIRECT_HEURISTIC_ROWS output channels per group, so 16x8 for up to 16,
    else 32x4 (on H100, P5 and P4, 32x4 ran 0.58-0.65 ms
    and 1.66 ms against 64x4's 0.62-0.72 and 1.87-2.02: more blocks per
    multiprocessor; perf notes v11)."""
    return pick_tile(DIRECT_TILES, min(out_channels, DIRECT_HEURISTIC_ROWS))


def direct_name(dtype: str, index: str, tile: DirectTile) -> str:
    return f"conv_direct<{CUDA_TYPE[dtype]}, {index}, {tile.bm}, {tile.tn}>"


def direct_tiles_per_block(tiles: int, multiprocessors: int) -> int:
    """Tiles a conv_direct block walks (its weight staged once): up to
    DIRECT_MAX_TILES_PER_BLOCK, fewer while the grid would have under
    DIRECT_MIN_BLOCKS_PER_SM blocks per multiprocessor."""
    return max(1, min(DIRECT_MAX_TILES_PER_BLOCK, tiles // (DIRECT_MIN_BLOCKS_PER_SM * multiprocessors)))


def pack_direct_weight(weight, geometry: Geometry):
    """A view of `weight` ordered (groups, KH, KW, C, M), conv_direct's
    layout before M is padded to the tile."""
    k = geometry
    w = weight.reshape(k.groups, k.in_channels_per_group, k.out_channels_per_group, k.kernel[0], k.kernel[1])
    return w.transpose(0, 3, 4, 1, 2)


def direct_h_taps(geometry: Geometry) -> int:
    """The most H taps any output row of the forward pass has (input bounds
    ignored)."""
    kernel, stride, padding, dilation = geometry.kernel[0], geometry.stride[0], geometry.padding[0], geometry.dilation[0]
    return max(sum((r + padding - k * dilation) % stride == 0 for k in range(kernel)) for r in range(stride))


def direct_w_slots(geometry: Geometry) -> int:
    """How many W phases (conv_direct's slots) of the forward pass have a W
    tap: the others are bias alone."""
    kernel, stride, padding, dilation = geometry.kernel[1], geometry.stride[1], geometry.padding[1], geometry.dilation[1]
    return sum(any((s + padding - k * dilation) % stride == 0 for k in range(kernel)) for s in range(stride))


def direct_layout(geometry: Geometry, tile: DirectTile, dtype: str):
    """(cp, span, th_max, shared bytes) of conv_direct with `tile`, or None
    where a row has more H taps than the kernel holds, a stride along W over
    DIRECT_MAX_STRIDE_W, or a tile's input rows more values than its threads
    fetch (256 * DIRECT_FETCH).

    CP (columns per phase slot) is 4 * TN * k, so that a unit of a warp's
    4 column threads stays in one slot; k is chosen for the best product of
    two efficiencies: the units' (k per slot with a W tap) share of the last
    round dealt to the 8 warps, and the output columns' share of the tiles
    covering them (with the output tile within DIRECT_STAGE_BYTES, and the
    tile's input rows within what its threads fetch)."""
    th_max = direct_h_taps(geometry)
    if th_max > DIRECT_MAX_H_TAPS or geometry.stride[1] > DIRECT_MAX_STRIDE_W:
        return None
    slots = direct_w_slots(geometry)
    acc = 8 if dtype == "float64" else 4
    kernel_w, stride_w, pad_w, dil_w = geometry.kernel[1], geometry.stride[1], geometry.padding[1], geometry.dilation[1]
    out_w = geometry.out_size[1]
    channels = geometry.in_channels_per_group

    def span_of(bw):
        return (bw - 1 + pad_w) // stride_w - (pad_w - (kernel_w - 1) * dil_w) // stride_w + 1

    best, best_score = None, -1.0
    for k in range(1, DIRECT_MAX_SLOT_GROUPS + 1):
        cp = 4 * tile.tn * k
        bw = stride_w * cp
        if th_max * channels * span_of(bw) > DIRECT_THREADS * DIRECT_FETCH:
            break
        if k > 1 and tile.bm * (bw + 1) * acc > DIRECT_STAGE_BYTES:
            break
        units = slots * k
        balance = units / (-(-units // DIRECT_WARPS) * DIRECT_WARPS) if units else 1.0
        score = balance * out_w / (-(-out_w // bw) * bw)
        if score > best_score + 1e-9:
            best, best_score = cp, score
    if best is None:
        return None
    bw = stride_w * best
    span = span_of(bw)
    shared = DIRECT_HEADER_BYTES + acc * (th_max * kernel_w * channels * tile.bm + th_max * channels * span + tile.bm * (bw + 1))
    return best, span, th_max, shared


TINY_THREADS = 128  # conv_tiny.cu: threads a block, one output each


def tiny_name(dtype: str, index: str) -> str:
    return f"conv_tiny<{CUDA_TYPE[dtype]}, {index}>"


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


def depthwise_first_taps(geometry: Geometry) -> Tuple[int, ...]:
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


# grouped_backward (grouped_backward.cu): 1D problems with few channels per
# group, grad_input and grad_weight in one pass on CUDA cores.
GROUPED_DTYPES = ("float32", "float16", "bfloat16")
GROUPED_CHANNELS = (4, 8, 16)  # its CG: input channels per group
GROUPED_THREADS = 256
GROUPED_MAX_TAPS = 8
GROUPED_X_PAD = 4
GROUPED_MAX_SPLIT_SUM = 256  # products a lane sums in float within a split
GROUPED_TILES = (512, 256, 128, 64)  # input positions per item, the longest that fits taken
GROUPED_MAX_SHARED = 100 * 1024  # two blocks a multiprocessor
GROUPED_PIPE_CHANNELS = (8, 16)  # C of the pipelined float32 build (PIPE: two cp.async staging buffers)


def grouped_backward_name(dtype: str, index: str, channels: int, taps: int, pipe: bool = False) -> str:
    return f"grouped_backward<{CUDA_TYPE[dtype]}, {index}, {channels}, {taps}{', true' if pipe else ''}>"


def grouped_backward_pipes(geometry: Geometry, dtype: str) -> bool:
    """Whether the pipelined build (PIPE) can take this grouped_backward
    problem: float32 (its cp.async copies are floats, with no conversion), C
    in GROUPED_PIPE_CHANNELS (grad_input's threads take C / 2 channels, four
    at a time) and the shortest item's two staging buffers in
    GROUPED_MAX_SHARED."""
    return (
        dtype == "float32"
        and geometry.in_channels_per_group in GROUPED_PIPE_CHANNELS
        and grouped_backward_layout(geometry, GROUPED_TILES[-1], True, True, 2)[3] <= GROUPED_MAX_SHARED
    )


def grouped_backward_applies(geometry: Geometry, dtype: str) -> bool:
    """Whether grouped_backward can run this problem: 1D, C input channels a
    group in GROUPED_CHANNELS and M output channels with C / 4 * M <= 32 (a
    warp's lanes own grad_weight's (channel quad, output channel) pairs), up
    to GROUPED_MAX_TAPS taps, and a stride short enough that the shortest
    item's staging fits in GROUPED_MAX_SHARED."""
    if dtype not in GROUPED_DTYPES or not _is_1d(geometry):
        return False
    channels, out_channels = geometry.in_channels_per_group, geometry.out_channels_per_group
    _, kernel, stride, _, dilation, _ = _axes(geometry)[1]
    span = (max(GROUPED_TILES) - 1) * stride + (kernel - 1) * dilation + 1  # the kernel divides positions below 2**20 by the stride in float
    if not (channels in GROUPED_CHANNELS and channels // 4 * out_channels <= 32 and kernel <= GROUPED_MAX_TAPS and span < 1 << 20):
        return False
    return grouped_backward_layout(geometry, GROUPED_TILES[-1], True, True)[3] <= GROUPED_MAX_SHARED  # the shortest item fits


def grouped_backward_layout(geometry: Geometry, tile: int, want_input: bool, want_weight: bool, buffers: int = 1) -> Tuple[int, int, int, int]:
    """(span, phase_row, m_row, shared-memory bytes) of grouped_backward with
    `tile` input positions per item: the weight ([m][k][c], for grad_input),
    then `buffers` staging buffers (two for the pipelined build) of
    grad_output's span of positions split into `stride` phases of phase_row
    floats, m_row floats per output channel (1 more than a multiple of 32, so
    that the lanes' output channels fall in distinct banks), and the
    transposed x (for grad_weight); at least the final reduction's 32 x 4 x
    taps doubles."""
    _, kernel, stride, _, dilation, _ = _axes(geometry)[1]
    channels, out_channels = geometry.in_channels_per_group, geometry.out_channels_per_group
    span = (tile - 1) * stride + (kernel - 1) * dilation + 1
    phase_row = -(-span // stride)
    m_row = stride * phase_row + (1 - stride * phase_row) % 32
    x_floats = channels * (tile + GROUPED_X_PAD) if buffers == 2 else tile * (channels + GROUPED_X_PAD)  # pipelined: rows of positions
    staging = -(-out_channels * m_row // 4) * 4 + (x_floats if want_weight else 0)
    floats = (out_channels * kernel * channels if want_input else 0) + buffers * staging
    reduction = 32 * 4 * kernel * 8 if want_weight else 0
    return span, phase_row, m_row, max(4 * floats, reduction)


# grouped_forward (grouped_forward.cu): the forward pass of 1D problems with
# few channels per group on CUDA cores.  MG output channels a group and
# stride S are template arguments (its accumulators are MG * S * J registers).
GROUPED_FORWARD_THREADS = 128
GROUPED_FORWARD_WARPS = GROUPED_FORWARD_THREADS // 32
GROUPED_FORWARD_ACC = 64
GROUPED_FORWARD_MAX_J = 4
GROUPED_FORWARD_OUT_CHANNELS = (4, 8, 16)  # its MG
GROUPED_FORWARD_STRIDES = (1, 2, 3, 4)  # its S
GROUPED_FORWARD_MAX_CHANNELS = 16  # input channels per group it takes
GROUPED_FORWARD_MAX_TAPS = 16
GROUPED_FORWARD_MAX_SHARED = 64 * 1024  # three or more blocks a multiprocessor


def grouped_forward_name(dtype: str, index: str, out_channels: int, stride: int) -> str:
    return f"grouped_forward<{CUDA_TYPE[dtype]}, {index}, {out_channels}, {stride}>"


def grouped_forward_tile(out_channels: int, stride: int) -> Tuple[int, int]:
    """(J, TILE) of grouped_forward.cu's GroupedForwardTile: steps per thread,
    input steps per block."""
    j = max(1, min(GROUPED_FORWARD_MAX_J, GROUPED_FORWARD_ACC // (out_channels * stride)))
    return j, 32 * j * GROUPED_FORWARD_WARPS


def grouped_forward_taps(geometry: Geometry) -> Tuple[int, ...]:
    """grouped_forward's tap table: for stride S, S + 1 starts into the
    entries, then (k, a) per entry, the entries of phase r = (k * d) % S
    together; a = (k * d) // S is how many steps before its output's step the
    tap's input lies."""
    _, kernel, stride, _, dilation, _ = _axes(geometry)[1]
    by_phase = [[(k, k * dilation // stride) for k in range(kernel) if k * dilation % stride == r] for r in range(stride)]
    starts = [0]
    for entries in by_phase:
        starts.append(starts[-1] + len(entries))
    return tuple(starts) + tuple(v for entries in by_phase for entry in entries for v in entry)


def grouped_forward_layout(geometry: Geometry) -> Tuple[int, int, int, int]:
    """(halo, x_row, tiles, shared-memory bytes) of grouped_forward: the
    weight ([k][c][m] floats), the tap table, then the larger of x's staged
    rows (C rows of x_row floats) and the sums (MG rows of S * TILE)."""
    _, kernel, stride, padding, dilation, out_w = _axes(geometry)[1]
    channels, out_channels = geometry.in_channels_per_group, geometry.out_channels_per_group
    _, tile = grouped_forward_tile(out_channels, stride)
    halo = (kernel - 1) * dilation // stride
    x_row = -(-(tile + halo) // 4) * 4
    tiles = -(-(-(-(out_w + padding) // stride)) // tile)
    head = kernel * channels * out_channels + stride + 1 + 2 * kernel
    floats = -(-head // 4) * 4 + max(channels * x_row, out_channels * stride * tile)
    return halo, x_row, tiles, 4 * floats


def grouped_forward_applies(geometry: Geometry, dtype: str) -> bool:
    """Whether grouped_forward can run this problem: 1D, 2 to
    GROUPED_FORWARD_MAX_CHANNELS input channels a group, output channels a
    group and stride among its template arguments, up to
    GROUPED_FORWARD_MAX_TAPS taps, staging within GROUPED_FORWARD_MAX_SHARED."""
    if dtype not in GROUPED_DTYPES or not _is_1d(geometry):
        return False
    _, kernel, stride, _, _, _ = _axes(geometry)[1]
    if not (
        2 <= geometry.in_channels_per_group <= GROUPED_FORWARD_MAX_CHANNELS
        and geometry.out_channels_per_group in GROUPED_FORWARD_OUT_CHANNELS
        and stride in GROUPED_FORWARD_STRIDES
        and kernel <= GROUPED_FORWARD_MAX_TAPS
    ):
        return False
    return grouped_forward_layout(geometry)[3] <= GROUPED_FORWARD_MAX_SHARED


# phase_gather (phase_gather.cu): one phase of grad_output's rows gathered
# for the backward pass's phase rewrite (16-bit types only: in float32 the
# copy costs more than the stride-1 kernels save).
PHASE_BACKWARD_DTYPES = ("float16", "bfloat16")
GATHER_THREADS = 256
GATHER_ELEMS = 8


def phase_gather_name(dtype: str, index: str) -> str:
    return f"phase_gather<{CUDA_TYPE[dtype]}, {index}>"


def depthwise_backward_taps(geometry: Geometry) -> int:
    """The smallest depthwise_backward bound covering the geometry's taps, or 0
    if none does (or it is not depthwise)."""
    if geometry.in_channels_per_group != 1:
        return 0
    taps = geometry.out_channels_per_group * geometry.kernel[0] * geometry.kernel[1]
    return next((bound for bound in DEPTHWISE_BACKWARD_TAPS if 0 < taps <= bound), 0)


def grad_weight_name(dtype: str, index: str, tile: Tile) -> str:
    return f"grad_weight_partial<{CUDA_TYPE[dtype]}, {index}, {tile.bm}, {tile.bn}, {tile.bk}, {tile.tm}, {tile.tn}>"


def grad_weight_mma_name(dtype: str, index: str, tile: MmaTile, passes: int = 1) -> str:
    t = tile
    return f"grad_weight_mma<{CUDA_TYPE[dtype]}, {index}, {t.bm}, {t.bn}, {t.bk}, {t.warps_m}, {t.warps_n}, {passes}>"


class GradWeightWindowTile(NamedTuple):
    """A grad_weight_window block: BM input channels x 64 output channels
    (one 128-byte window row) x up to `taps` kernel taps, over WARPS_M x 4
    warps."""

    bm: int
    taps: int
    warps_m: int

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * 4


# grad_weight_window tiles: 8 taps for long or strided kernels (a stride-s
# window serves every tap of a residue class, so more taps per block reuse
# more of it), 64 channels for short kernels.
GRAD_WEIGHT_WINDOW_TILES = (GradWeightWindowTile(32, 8, 2), GradWeightWindowTile(64, 4, 2))
GRAD_WEIGHT_WINDOW_DTYPES = ("float16", "bfloat16")
GRAD_WEIGHT_WINDOW_MIN_CHANNELS = 16  # fewer input or output channels per group keep grad_weight_mma
GRAD_WEIGHT_WINDOW_SLICE = 32  # reduction positions per slice (64 bytes of x)
GRAD_WEIGHT_WINDOW_COLUMNS = 64  # output channels per block (one 128-byte window row)


def grad_weight_window_name(dtype: str, index: str, tile: GradWeightWindowTile) -> str:
    return f"grad_weight_window<{CUDA_TYPE[dtype]}, {index}, {tile.bm}, {tile.taps}, {tile.warps_m}>"


def grad_weight_window_layout(geometry: Geometry, tile: GradWeightWindowTile, dtype: str):
    """(window rows, shared-memory bytes) of grad_weight_window, or None where
    it does not apply (not 16-bit, not 1D, a stride that is not a power of
    two, input rows that are not whole 16-byte vectors, too few channels per
    group).

    The window holds every grad_output position a slice's (position, tap)
    pairs read, from the first aligned down to 16 bytes: (32 - 1) * s +
    (taps - 1) * d + 1 rows plus up to 7 of alignment, rounded up to whole
    vectors; one 128-byte row each.  Two stages of it and of A (BM rows of
    80 bytes)."""
    if dtype not in GRAD_WEIGHT_WINDOW_DTYPES or not _is_1d(geometry):
        return None
    in_w, kernel, stride, _, dilation, _ = _axes(geometry)[1]
    if stride & (stride - 1) or in_w % 8:
        return None
    if min(geometry.in_channels_per_group, geometry.out_channels_per_group) < GRAD_WEIGHT_WINDOW_MIN_CHANNELS:
        return None
    taps = min(tile.taps, kernel)
    rows = (GRAD_WEIGHT_WINDOW_SLICE - 1) * stride + (taps - 1) * dilation + 1 + 7
    rows = -(-rows // 8) * 8
    return rows, 2 * (tile.bm * 80 + rows * 128)


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


# grad_input_taps tiles, chosen by the GEMM's row count (input channels per group).
GRAD_INPUT_TAPS_TILES = (TapsTile(32, 128, 1, 4, 4), TapsTile(64, 128, 2, 4, 4), TapsTile(128, 128, 2, 4, 3))
GRAD_INPUT_TAPS_DTYPES = ("float32", "float16", "bfloat16")
GRAD_INPUT_TAPS_VECTORS = (16, 8)  # bytes per cp.async, widest first
GRAD_INPUT_TAPS_MIN_TAPS = 8  # shorter kernels keep conv_mma
GRAD_INPUT_TAPS_MIN_ROWS = 16  # as do groups with fewer input channels


def grad_input_taps_name(dtype: str, index: str, tile: TapsTile, vector: int, passes: int = 1) -> str:
    t = tile
    return f"grad_input_taps<{CUDA_TYPE[dtype]}, {index}, {t.bm}, {t.bn}, {t.warps_m}, {t.warps_n}, {t.stages}, {vector}, {passes}>"


def _taps_vector(geometry: Geometry, dtype: str, lengths: Tuple[int, ...]):
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


# grad_weight_phase (grad_weight_phase.cu): float32 1D grad_weight on TF32
# tensor cores (one pass or 3xTF32) where every tap lands on one phase of
# grad_output (stride 1, a dilation that is a multiple of the stride, or one
# tap), read straight from grad_output.  Blocks of 32 input x 64 output
# channels x TAPS taps, items of 64 positions, three stages.
GRAD_WEIGHT_PHASE_TAPS = (1, 3, 5, 8)  # its TAPS: the smallest covering the kernel, else chunks of 8
GRAD_WEIGHT_PHASE_POSITIONS = 64  # its GWP_P
GRAD_WEIGHT_PHASE_X_ROW = GRAD_WEIGHT_PHASE_POSITIONS + 4  # its GWP_XS
GRAD_WEIGHT_PHASE_CHANNELS = 32  # its GWP_BM: input channels a block
GRAD_WEIGHT_PHASE_COLUMNS = 64  # its GWP_BN: output channels a block
GRAD_WEIGHT_PHASE_STAGES = 3  # its GWP_STAGES
GRAD_WEIGHT_PHASE_THREADS = 256  # its GWP_THREADS
GRAD_WEIGHT_PHASE_PASSES = (1, 3)


def grad_weight_phase_name(index: str, taps: int, passes: int, gx: bool = False) -> str:
    return f"grad_weight_phase<float, {index}, {taps}, {passes}{', true' if gx else ''}>"


def grad_weight_phase_layout(geometry: Geometry):
    """(taps, step, window, row, shared bytes) of grad_weight_phase, or None
    where it does not apply (not 1D, or taps on more than one phase: a
    dilation that is not a multiple of a stride above 1 with two or more
    taps; positions past int).

    step = d / s phase positions between taps; window = the positions one
    item's (position, tap) pairs read, 64 + (taps - 1) * step; row = window
    rounded up to 4 mod 8 floats (conflict-free B reads).  Shared memory:
    three stages of x (32 rows of 68 floats) and the window (64 rows), or
    the warps' partial sums at the end (taps * 8 KB), whichever is larger."""
    if not _is_1d(geometry):
        return None
    in_w, kernel, stride, _, dilation, out_w = _axes(geometry)[1]
    if kernel > 1 and dilation % stride:
        return None
    if max(in_w, out_w) >= 2**30 or (in_w + GRAD_WEIGHT_PHASE_POSITIONS) * stride + dilation * kernel >= 2**30:
        return None  # the kernel counts positions and phase indices in int
    taps = next((t for t in GRAD_WEIGHT_PHASE_TAPS if t >= kernel), GRAD_WEIGHT_PHASE_TAPS[-1])
    step = dilation // stride if kernel > 1 else 0
    window = GRAD_WEIGHT_PHASE_POSITIONS + (taps - 1) * step
    row = window + (4 - window) % 8
    stage = 4 * (GRAD_WEIGHT_PHASE_CHANNELS * GRAD_WEIGHT_PHASE_X_ROW + GRAD_WEIGHT_PHASE_COLUMNS * row)
    return taps, step, window, row, max(GRAD_WEIGHT_PHASE_STAGES * stage, taps * 8 * 1024)


# grad_weight_phase's GX builds (grad_phase_fused_layout): grad_input from
# the same staged windows, by 8 more warps, with the weight resident in
# shared memory as TF32 hi and lo parts, [TAPS][2][32][68] floats.
GRAD_PHASE_FUSED_TAPS = (1, 3)
GRAD_PHASE_FUSED_THREADS = 2 * GRAD_WEIGHT_PHASE_THREADS
GRAD_PHASE_FUSED_WEIGHT_ROW = GRAD_WEIGHT_PHASE_COLUMNS + 4  # its GWP_WROW


def grad_phase_fused_layout(geometry: Geometry):
    """(taps, step, window, row, shared bytes) of grad_weight_phase's GX
    build, which also writes grad_input, or None where it does not apply:
    where grad_weight_phase does not, or a group has more than one channel
    tile either way (32 input, 64 output channels) or more than 3 taps (one
    chunk; the 5-tap builds spilled in their MMA loops).  Shared memory:
    grad_weight_phase's stages, the resident weight (taps x 2 x 32 rows of
    68 floats) and 8 KB where half of the grad_input warps leave their sums
    for the other half."""
    layout = grad_weight_phase_layout(geometry)
    if layout is None:
        return None
    taps, step, window, row, _ = layout
    if taps not in GRAD_PHASE_FUSED_TAPS or geometry.kernel[1] > taps:
        return None
    if geometry.in_channels_per_group > GRAD_WEIGHT_PHASE_CHANNELS or geometry.out_channels_per_group > GRAD_WEIGHT_PHASE_COLUMNS:
        return None
    weight = 4 * taps * 2 * GRAD_WEIGHT_PHASE_CHANNELS * GRAD_PHASE_FUSED_WEIGHT_ROW + 8 * 1024  # and the grad_input halves
    stages = 4 * GRAD_WEIGHT_PHASE_STAGES * (GRAD_WEIGHT_PHASE_CHANNELS * GRAD_WEIGHT_PHASE_X_ROW + GRAD_WEIGHT_PHASE_COLUMNS * row)
    return taps, step, window, row, max(stages, taps * 8 * 1024) + weight


# grad_input_phase (grad_input_phase.cu): float32 1D grad_input on TF32
# tensor cores (one pass or 3xTF32) where every tap lands on one phase of
# grad_output, read straight from grad_output.  Blocks of 32 input channels x
# 512 positions, stages of 8 output channels with every tap.
GRAD_INPUT_PHASE_POSITIONS = 512  # its GIP_L
GRAD_INPUT_PHASE_CHANNELS = 32  # its GIP_BM
GRAD_INPUT_PHASE_STAGE_CHANNELS = 8  # its GIP_J
GRAD_INPUT_PHASE_WEIGHT_ROW = 12  # its GIP_WROW
GRAD_INPUT_PHASE_STAGES = 4  # its GIP_STAGES
GRAD_INPUT_PHASE_THREADS = 256  # its GIP_THREADS
GRAD_INPUT_PHASE_PASSES = (1, 3)


def grad_input_phase_name(index: str, passes: int) -> str:
    return f"grad_input_phase<float, {index}, {passes}>"


def grad_input_phase_layout(geometry: Geometry):
    """(step, window, row, shared bytes) of grad_input_phase, or None where it
    does not apply (not 1D, taps on more than one phase, positions past int).
    step = d / s; window = 512 + (K - 1) * step phase positions a stage
    reads; row = window rounded up to 8 mod 16 floats (conflict-free B
    reads).  Four stages of the weight (K x 32 rows of 12 floats) and the
    window (8 rows)."""
    if not _is_1d(geometry):
        return None
    in_w, kernel, stride, _, dilation, out_w = _axes(geometry)[1]
    if kernel > 1 and dilation % stride:
        return None
    step = dilation // stride if kernel > 1 else 0
    window = GRAD_INPUT_PHASE_POSITIONS + (kernel - 1) * step
    if max(in_w, out_w) >= 2**30 or (in_w + window) * stride + dilation * kernel >= 2**30:
        return None  # the kernel counts positions and phase indices in int
    row = window + (8 - window) % 16
    weight = kernel * GRAD_INPUT_PHASE_CHANNELS * GRAD_INPUT_PHASE_WEIGHT_ROW
    return step, window, row, 4 * GRAD_INPUT_PHASE_STAGES * (weight + GRAD_INPUT_PHASE_STAGE_CHANNELS * row)


def grad_bias_name(dtype: str) -> str:
    return f"grad_bias_partial<{CUDA_TYPE[dtype]}, {BIAS_THREADS}>"


def sum_splits_name(dtype: str, workspace: str = "double") -> str:
    return f"sum_splits<{CUDA_TYPE[dtype]}, {workspace}>"


def all_instantiations() -> List[Tuple[str, str]]:
    """Every (source file, template instantiation) the library can launch."""
    names = []
    for dtype in SUPPORTED_DTYPES:
        for index in INDEX_TYPES:
            names += [("conv_gemm.cu", gemm_name(dtype, index, t)) for t in GEMM_TUNE_TILES]
            for passes in (1, 3) if dtype == "float32" else (1,) if dtype in ("float16", "bfloat16") else ():
                names += [("conv_gemm.cu", mma_name(dtype, index, t, passes)) for t in (MMA_TUNE_TILES if passes == 1 else MMA_TILES)]
            for passes in (1, 3) if dtype == "float32" else (1,):
                if dtype in WINDOW_DTYPES:
                    if index == INDEX_TYPES[0] and passes == 1:
                        names += [("pack_weight.cu", pack_weight_name(dtype, False))]
                        names += [("pack_weight.cu", pack_weight_name(dtype, True))] if dtype == "float32" else []
                        names += [("pack_weight.cu", pack_weight_name(dtype, False, True))] if dtype == "float32" else []
                    names += [("conv_window.cu", window_name(dtype, index, t, passes)) for t in WINDOW_TUNE_TILES]
                    if passes == WINDOW_FILL_PASSES:
                        names += [("conv_window.cu", window_name(dtype, index, t, passes, True)) for t in WINDOW_TUNE_TILES]
                    if dtype == "float32":
                        names += [("conv_tf32.cu", conv_tf32_stream_name(index, taps, passes)) for taps in CONV_TF32_STREAM_TAPS]
                        names += [("conv_tf32.cu", conv_tf32_multicast_name(index, f)) for f in CONV_TF32_MULTICAST_FOLDS] if passes == 1 else []
                    if passes == 3:
                        names += [("conv_wgmma.cu", wgmma_x3_name(index, t, copy)) for t in WGMMA_TILES for copy in RESIDENT_COPY_BYTES]
                    if passes == 1:
                        names += [("conv_wgmma.cu", wgmma_name(dtype, index, t)) for t in WGMMA_TILES]
                        names += [("conv_tf32.cu", conv_tf32_name(index, taps, fold)) for taps in CONV_TF32_TAPS for fold in (False, True)] if dtype == "float32" else []
                        names += [
                            ("conv_wgmma.cu", resident_name(dtype, index, t, b, copy, fill))
                            for t, b in RESIDENT_VARIANTS
                            for copy in RESIDENT_COPY_BYTES
                            for fill in (False, True)
                        ]
                        names += [("conv_wgmma.cu", split_name(dtype, index, copy)) for copy in RESIDENT_COPY_BYTES] if dtype in SPLIT_DTYPES else []
                if dtype == "float32" and passes == 1:
                    names.append(("grad_input_overlap.cu", grad_input_overlap_name(dtype, index)))
                    names += [("grad_input_overlap.cu", pack_overlap_weight_name(dtype))] if index == INDEX_TYPES[0] else []
                    names.append(("grad_input_overlap.cu", grad_input_multicast_name(index)))
                    names.append(("grad_weight_overlap.cu", grad_weight_multicast_name(index)))
                    names += [("grad_weight_overlap.cu", ROUND_TF32_COPY)] if index == INDEX_TYPES[0] else []
                    names += [("grad_input_overlap.cu", PACK_MULTICAST_WEIGHT)] if index == INDEX_TYPES[0] else []
                if dtype in GRAD_INPUT_TAPS_DTYPES:
                    names += [
                        ("grad_input_taps.cu", grad_input_taps_name(dtype, index, t, v, passes))
                        for t in GRAD_INPUT_TAPS_TILES
                        for v in GRAD_INPUT_TAPS_VECTORS
                        if v >= ITEMSIZE[dtype]
                    ]
                if dtype in GRAD_WEIGHT_TAPS_DTYPES:
                    names += [
                        ("grad_weight_taps.cu", grad_weight_taps_name(dtype, index, t, v, passes))
                        for t in GRAD_WEIGHT_TAPS_TILES
                        for v in GRAD_INPUT_TAPS_VECTORS
                    ]
            if dtype in GRAD_WEIGHT_WINDOW_DTYPES:
                names += [("grad_weight_window.cu", grad_weight_window_name(dtype, index, t)) for t in GRAD_WEIGHT_WINDOW_TILES]
            if dtype in FOLD_DTYPES:
                names.append(("conv_fold.cu", fold_name(dtype, index)))
                names += [("conv_fold.cu", pack_fold_weight_name(dtype))] if index == INDEX_TYPES[0] else []
            if dtype in OVERLAP_DTYPES:
                names.append(("grad_input_overlap.cu", grad_input_overlap_name(dtype, index)))
                names += [("grad_input_overlap.cu", pack_overlap_weight_name(dtype))] if index == INDEX_TYPES[0] else []
                names += [("grad_weight_overlap.cu", grad_weight_overlap_name(dtype, index, c)) for c in GRAD_WEIGHT_OVERLAP_COPIES]
            if dtype in GRAD_WEIGHT_WGMMA_DTYPES:
                names += [
                    ("conv_wgmma.cu", grad_weight_wgmma_name(dtype, index, t, copy))
                    for t in GRAD_WEIGHT_WGMMA_TILES
                    for copy in RESIDENT_COPY_BYTES
                ]
            names.append(("conv_tiny.cu", tiny_name(dtype, index)))
            names += [("grad_weight.cu", grad_weight_name(dtype, index, t)) for t in GRAD_WEIGHT_TILES]
            if dtype == "float32":
                names += [
                    ("grad_weight_tf32.cu", grad_weight_tf32_name(index, taps, passes, copy, fold))
                    for taps, fold in [(t, False) for t in GRAD_WEIGHT_TF32_TAPS] + [(1, True)]
                    for passes in GRAD_WEIGHT_TF32_PASSES
                    for copy in RESIDENT_COPY_BYTES
                ]
            if dtype != "float64":
                names += [("grad_weight.cu", grad_weight_mma_name(dtype, index, t)) for t in MMA_TUNE_TILES]
            if dtype == "float32":
                names += [("grad_weight.cu", grad_weight_mma_name(dtype, index, t, 3)) for t in MMA_TILES]
                names += [
                    ("grad_weight_phase.cu", grad_weight_phase_name(index, taps, passes, gx))
                    for gx in (False, True)
                    for taps in (GRAD_PHASE_FUSED_TAPS if gx else GRAD_WEIGHT_PHASE_TAPS)
                    for passes in GRAD_WEIGHT_PHASE_PASSES
                ]
                names += [("grad_input_phase.cu", grad_input_phase_name(index, passes)) for passes in GRAD_INPUT_PHASE_PASSES]
            names += [("conv_direct.cu", direct_name(dtype, index, t)) for t in DIRECT_TILES]
            names += [("pack_weight.cu", pack_direct_weight_name(dtype))] if index == INDEX_TYPES[0] else []
            names += [("depthwise.cu", depthwise_name(dtype, index, taps)) for taps in DEPTHWISE_TAPS_W]
            names += [("depthwise.cu", depthwise_backward_name(dtype, index, taps)) for taps in DEPTHWISE_BACKWARD_TAPS]
            if dtype in GROUPED_DTYPES:
                names += [
                    ("grouped_backward.cu", grouped_backward_name(dtype, index, c, t))
                    for c in GROUPED_CHANNELS
                    for t in range(1, GROUPED_MAX_TAPS + 1)
                ]
                if dtype == "float32":
                    names += [
                        ("grouped_backward.cu", grouped_backward_name(dtype, index, c, t, True))
                        for c in GROUPED_PIPE_CHANNELS
                        for t in range(1, GROUPED_MAX_TAPS + 1)
                    ]
                names += [
                    ("grouped_forward.cu", grouped_forward_name(dtype, index, m, s))
                    for m in GROUPED_FORWARD_OUT_CHANNELS
                    for s in GROUPED_FORWARD_STRIDES
                ]
            if dtype in PHASE_BACKWARD_DTYPES:
                names.append(("phase_gather.cu", phase_gather_name(dtype, index)))
        names += [("grad_weight.cu", grad_bias_name(dtype)), ("grad_weight.cu", sum_splits_name(dtype))]
        if dtype in OVERLAP_DTYPES or dtype == "float32":  # grad_weight_overlap's float partials
            names.append(("grad_weight.cu", sum_splits_name(dtype, "float")))
    return names


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


# --- polyphase tables ---------------------------------------------------------
# One AxisPhase record (common.cuh) is 9 int32 values:
# (count, out_base, out_step, in_base, in_step, tap_first, tap_step, tap_count, tap_in_step)


def forward_axis_phases(in_size: int, kernel: int, stride: int, padding: int, dilation: int, out_size: int):
    """The polyphase decomposition of one axis of the forward pass.

    Output o = q*stride + r - padding belongs to phase r.  Tap k reaches phase r
    iff k*dilation = r (mod stride): with g = gcd(stride, dilation) that needs
    g | r, and then the taps are k0, k0 + stride/g, ... where k0 solves
    k*(dilation/g) = r/g (mod stride/g).  Tap k reads input q - (k*dilation - r)/stride,
    so consecutive taps step back dilation/g input positions.
    """
    g = math.gcd(stride, dilation)
    tap_step = stride // g
    inverse = pow(dilation // g, -1, tap_step) if tap_step > 1 else 0
    records = []
    for r in range(stride):
        q_min = -((r - padding) // stride)  # ceil((padding - r) / stride)
        q_max = (out_size - 1 + padding - r) // stride
        count = max(0, q_max - q_min + 1)
        out_base = q_min * stride + r - padding
        tap_count, tap_first, in_base, tap_in_step = 0, 0, 0, 0
        if r % g == 0:
            tap_first = ((r // g) * inverse) % tap_step
            if tap_first < kernel:
                tap_count = (kernel - 1 - tap_first) // tap_step + 1
                first_offset = (tap_first * dilation - r) // stride  # exact
                in_base = q_min - first_offset
                tap_in_step = -(dilation // g)
        records.append((count, out_base, stride, in_base, 1, tap_first, tap_step, tap_count, tap_in_step))
    return records


def grad_input_axis_phase(in_size: int, kernel: int, stride: int, padding: int, dilation: int):
    """grad_input[l] reads grad_output[l*stride - padding + k*dilation] for every tap."""
    return [(in_size, 0, 1, -padding, stride, 0, 1, kernel, dilation)]


def _axes(geometry: Geometry):
    return [
        (geometry.in_size[a], geometry.kernel[a], geometry.stride[a], geometry.padding[a], geometry.dilation[a], geometry.out_size[a])
        for a in (0, 1)
    ]


@functools.lru_cache(maxsize=1024)
def forward_phases(geometry: Geometry) -> Tuple[Tuple[int, ...], int, int]:
    """(flattened records for H then W, phases along H, phases along W)."""
    (h, w) = [forward_axis_phases(*axis) for axis in _axes(geometry)]
    return _flatten(h + w), len(h), len(w)


@functools.lru_cache(maxsize=1024)
def grad_input_phases(geometry: Geometry) -> Tuple[Tuple[int, ...], int, int]:
    (h, w) = [grad_input_axis_phase(*axis[:5]) for axis in _axes(geometry)]
    return _flatten(h + w), 1, 1


def _flatten(records) -> Tuple[int, ...]:
    flat = tuple(int(v) for record in records for v in record)
    if any(abs(v) > INT32_LIMIT for v in flat):
        raise ValueError("a spatial size or offset does not fit in 32 bits")
    return flat


def gemm_weight_strides(geometry: Geometry, pass_name: str, packed: bool = False) -> Tuple[int, int, int, int]:
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


def pack_gemm_weight(weight, geometry: Geometry, pass_name: str):
    """A view of `weight` (NumPy or CuPy) ordered (groups, KH*KW, C, M), the
    packed layout of gemm_weight_strides; the caller makes it contiguous."""
    taps = geometry.kernel[0] * geometry.kernel[1]
    w = weight.reshape(geometry.groups, geometry.in_channels_per_group, geometry.out_channels_per_group, taps)
    return w.transpose((0, 3, 1, 2) if pass_name == "forward" else (0, 3, 2, 1))


def phase_table_array(flat: Tuple[int, ...]) -> numpy.ndarray:
    return numpy.asarray(flat, dtype=numpy.int32)
