"""conv_tf32.cu on the host: conv_wgmma_tf32, conv_tf32_stream and
conv_tf32_multicast, float32 forward passes in TF32 on wgmma: their builds,
sizes as the kernels have them, names and shared-memory layouts.
"""

from __future__ import annotations

from typing import Optional

from .common import WGMMA_THREADS, WINDOW_DTYPES, instantiation_loop

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


def conv_tf32_layout(record: tuple[int, ...], channels: int) -> Optional[tuple[int, int, int, int]]:
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


def conv_tf32_stream_layout(record: tuple[int, ...], passes: int) -> Optional[tuple[int, int, int]]:
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


def stream_instantiations(dtype: str, index: str, passes: int) -> list[tuple[str, str]]:
    """conv_tf32_stream's builds and (passes 1) conv_tf32_multicast's, for
    float32."""
    names = []
    if dtype in WINDOW_DTYPES and dtype == "float32":
        names += [("conv_tf32.cu", conv_tf32_stream_name(index, taps, passes)) for taps in CONV_TF32_STREAM_TAPS]
        names += [("conv_tf32.cu", conv_tf32_multicast_name(index, f)) for f in CONV_TF32_MULTICAST_FOLDS] if passes == 1 else []
    return names


def tf32_instantiations(dtype: str, index: str, passes: int) -> list[tuple[str, str]]:
    """conv_wgmma_tf32's builds (float32, passes 1), with and without FOLD."""
    names = []
    if dtype in WINDOW_DTYPES and dtype == "float32" and passes == 1:
        names += [("conv_tf32.cu", conv_tf32_name(index, taps, fold)) for taps in CONV_TF32_TAPS for fold in (False, True)]
    return names


def instantiations() -> list[tuple[str, str]]:
    """This file's part of _kernels.all_instantiations(), in its order:
    every (file, name) of conv_tf32.cu the library can launch."""
    return instantiation_loop(passes=(stream_instantiations, tf32_instantiations))
