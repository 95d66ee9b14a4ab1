"""conv_tf32.cu on the host: conv_wgmma_tf32, conv_tf32_stream and
conv_tf32_multicast, float32 forward passes in TF32 on wgmma: their builds,
sizes as the kernels have them, names and shared-memory layouts.
"""

from __future__ import annotations

import functools
from typing import Optional

from .. import settings
from .._geometry import Geometry
from .._launch import _blocks_for, _i32, _index_type, _Launch, _TensorMap
from .._plan import Plan, Step
from .common import INT32_LIMIT, WGMMA_THREADS, WINDOW_DTYPES, instantiation_loop
from .pack_weight import _window_weight_steps, window_channels_padded
from .phases import window_kernel_w, window_records
from .rules import _gemm_index, _problem_passes, _size
from .window import _Hopper, _window_problem, _WindowGroup

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


_S = settings.current  # the routing settings in force



@functools.lru_cache(maxsize=1024)
def _conv_tf32_plan(geometry: Geometry, pass_name: str, index: str, multiprocessors: int, max_shared: int):
    """(conv_wgmma_tf32 launch, phase records), or None where it cannot run
    this pass (not one stride-1 record or one folded record, no build for
    its taps, too little shared memory).  A folded record (X3) takes a FOLD
    build: its tiles are 128 (output channel, sub-phase) columns.  One block
    per multiprocessor: every (group, output-channel tile) combination gets
    the same number of blocks, as many as fit in one wave, each working
    through its share of the (image, column tile) items."""
    problem = _window_problem(geometry, pass_name, "float32", row_unit=4)
    if problem is None:
        return None
    flat, fold, red_channels, out_channels, source4, out4 = problem
    if len(flat) != 9 or flat[4] != 1 or (fold == 1 and (flat[2] != 1 or flat[5] != 0 or flat[6] != 1)):
        return None
    layout = conv_tf32_layout(flat, red_channels)
    if layout is None or layout[3] > max_shared:
        return None
    vectors, raw_row, weight_blocks, shared = layout
    # its copy offsets (a slice's rows) and source row indices are 32-bit
    if CONV_TF32_SLICE * source4[3] + 4 * vectors > INT32_LIMIT or source4[0] * source4[1] > INT32_LIMIT:
        return None
    count, out_base, out_step, in_base, _, tap_first, tap_step, taps, tap_in_step = flat
    co_tiles = -(-out_channels * fold // CONV_TF32_ROWS)
    combos = geometry.groups * co_tiles
    items = source4[0] * -(-count // CONV_TF32_POSITIONS)
    # one block a multiprocessor: as many blocks per combination as fit in one wave
    per_combo = max(1, min(items, multiprocessors // combos))
    kernel_w = window_kernel_w(geometry, pass_name) if fold > 1 else taps
    scalars = (
        _i32(source4[0]), _i32(geometry.groups), _i32(red_channels), _i32(window_channels_padded(red_channels, "float32")),
        _i32(out_channels), _i32(source4[3]), _i32(out4[3]), _i32(count), _i32(out_base), _i32(in_base), _i32(tap_in_step),
        _i32(vectors), _i32(raw_row), _i32(weight_blocks), _i32(co_tiles), _i32(per_combo),
        _i32(fold.bit_length() - 1), _i32(kernel_w), _i32(tap_first), _i32(tap_step), _i32(out_step),
    )  # fmt: skip
    name = conv_tf32_name(index, taps, fold > 1)
    return _Launch("conv_tf32.cu", name, _blocks_for(combos * per_combo), WGMMA_THREADS, scalars, shared), flat


@functools.lru_cache(maxsize=1024)
def _conv_tf32_stream_plan(geometry: Geometry, index: str, passes: int, multiprocessors: int, max_shared: int):
    """(conv_tf32_stream launch, packed weight's elements a pass, whether the
    resident FOLD tile would fit), or None where it cannot run the forward
    pass (not one folded record of a fold it takes, no build for its taps,
    too little shared memory).  One block a multiprocessor, as
    _conv_tf32_plan's."""
    problem = _window_problem(geometry, "forward", "float32", row_unit=4)
    if problem is None:
        return None
    flat, fold, red_channels, out_channels, source4, out4 = problem
    if len(flat) != 9 or flat[4] != 1 or not 2 <= fold <= CONV_TF32_STREAM_MAX_FOLD or fold & (fold - 1):
        return None
    layout = conv_tf32_stream_layout(flat, passes)
    if layout is None or layout[2] > max_shared:
        return None
    vectors, raw_row, shared = layout
    # its copy offsets (a slice's rows) and source row indices are 32-bit
    if CONV_TF32_SLICE * source4[3] + 4 * vectors > INT32_LIMIT or source4[0] * source4[1] > INT32_LIMIT:
        return None
    count, out_base, out_step, in_base, _, tap_first, tap_step, taps, tap_in_step = flat
    channels_padded = window_channels_padded(red_channels, "float32")
    kernel_w = window_kernel_w(geometry, "forward")
    packed = geometry.groups * kernel_w * out_channels * channels_padded
    if 2 * packed > INT32_LIMIT:  # its weight offsets are 32-bit
        return None
    co_tiles = -(-out_channels * fold // CONV_TF32_STREAM_COLS[passes])
    combos = geometry.groups * co_tiles
    items = source4[0] * -(-count // CONV_TF32_POSITIONS)
    per_combo = max(1, min(items, multiprocessors // combos))
    scalars = (
        _i32(source4[0]), _i32(geometry.groups), _i32(red_channels), _i32(channels_padded), _i32(out_channels), _i32(source4[3]),
        _i32(out4[3]), _i32(count), _i32(out_base), _i32(in_base), _i32(tap_in_step), _i32(vectors), _i32(raw_row), _i32(co_tiles),
        _i32(per_combo), _i32(fold.bit_length() - 1), _i32(kernel_w), _i32(tap_first), _i32(tap_step), _i32(out_step), _i32(packed),
    )  # fmt: skip
    name = conv_tf32_stream_name(index, taps, passes)
    resident = conv_tf32_layout(flat, red_channels)
    resident_fits = resident is not None and resident[3] <= max_shared
    return _Launch("conv_tf32.cu", name, _blocks_for(combos * per_combo), WGMMA_THREADS, scalars, shared), packed, resident_fits


@functools.lru_cache(maxsize=1024)
def _conv_tf32_multicast_plan(geometry: Geometry, index: str, multiprocessors: int, max_shared: int):
    """conv_tf32_multicast's launch for a pass conv_tf32_stream takes in TF32,
    or None where it does not apply."""
    problem = _window_problem(geometry, "forward", "float32", row_unit=16)
    if problem is None:
        return None
    flat, fold, red_channels, out_channels, source4, out4 = problem
    if fold not in CONV_TF32_MULTICAST_FOLDS or flat[7] != 2:
        return None
    if geometry.groups > 1 and red_channels % CONV_TF32_SLICE:
        return None
    layout = conv_tf32_layout(flat, 1)
    if layout is None:
        return None
    raw_row = layout[1]
    shared = conv_tf32_multicast_shared(raw_row)
    if shared > max_shared or raw_row > 256:  # (a tensor map's box is at most 256 elements a dimension)
        return None
    count, out_base, out_step, in_base, _, tap_first, tap_step, _, tap_in_step = flat
    batch, rows_total, src_w = source4[0], source4[1], source4[3]
    channels_padded = window_channels_padded(red_channels, "float32")
    kernel_w = window_kernel_w(geometry, "forward")
    co_per = CONV_TF32_MULTICAST_COLS // fold
    co_tiles = -(-out_channels // co_per)
    items = batch * -(-count // CONV_TF32_POSITIONS)
    units = -(-items // 2) * geometry.groups * co_tiles
    if units > INT32_LIMIT or max(src_w, rows_total, count * out_step) > INT32_LIMIT:
        return None
    source_map = _TensorMap(
        dims=(src_w, rows_total, batch), strides=(src_w * 4, src_w * 4 * rows_total),
        box=(raw_row, CONV_TF32_SLICE, 1), data_type=7, swizzle=0,  # FLOAT32, no swizzle
    )  # fmt: skip
    weight_map = _TensorMap(
        dims=(channels_padded, out_channels, kernel_w, geometry.groups),
        strides=(channels_padded * 4, channels_padded * 4 * out_channels, channels_padded * 4 * out_channels * kernel_w),
        box=(CONV_TF32_SLICE, co_per, fold // 2, 1), data_type=7, swizzle=2, array=1,  # FLOAT32, 64-byte swizzle
    )  # fmt: skip
    scalars = (source_map, weight_map) + tuple(
        _i32(v)
        for v in (batch, geometry.groups, red_channels, out_channels, out4[3], count, out_base, in_base, tap_in_step, raw_row, co_tiles,
                  tap_first, tap_step, out_step)
    )  # fmt: skip
    grid = 2 * max(1, min(units, multiprocessors // 2))
    name = conv_tf32_multicast_name(index, fold)
    return _Launch("conv_tf32.cu", name, grid, CONV_TF32_MULTICAST_THREADS, scalars, shared)


class ConvTf32Stream(_WindowGroup):
    name, ops = "conv_tf32_stream", ("forward",)

    def _plans(self, p):
        index = _index_type(_size(p.geometry.input_shape4), p.output_size)  # (the weight's offsets are 32-bit)
        plan = _conv_tf32_stream_plan(p.geometry, index, _problem_passes(p), p.device.multiprocessors, p.device.max_shared)
        return index, plan

    def reject(self, p):
        reason = self.window_reject(p)
        if reason:
            return reason
        if p.dtype != "float32" or p.device.compute_capability != 90:
            return "float32 on compute capability 9.0 only"
        if not _S().use_conv_tf32_stream:
            return "off (use_conv_tf32_stream)"
        _, plan = self._plans(p)
        if plan is None:
            return "not one folded record it takes, or does not fit"
        if plan[2] and _S().use_conv_tf32_stream != "anywhere":
            return "conv_wgmma_tf32's resident weight tile fits"
        return None

    def plan(self, p, tile):
        passes = _problem_passes(p)
        index, plan = self._plans(p)
        multicast = None
        if passes == 1 and _S().use_conv_tf32_multicast:
            multicast = _conv_tf32_multicast_plan(p.geometry, index, p.device.multiprocessors, p.device.max_shared)
        steps, buffers = _window_weight_steps(p, "forward", "float32", round_tf32=True, split=passes == 3)
        main = Step(multicast or plan[0], ("source", "t0", "bias", "out"))
        return Plan(self.name, "multicast" if multicast else None, steps + (main,), buffers)


class ConvTf32(_Hopper):
    name = "conv_wgmma_tf32"

    def _plan(self, p):
        return _conv_tf32_plan(p.geometry, p.op, _gemm_index(p), p.device.multiprocessors, p.device.max_shared)

    def reject(self, p):
        reason = self.hopper_reject(p)
        if reason:
            return reason
        if p.dtype != "float32":
            return "float32 (\"tf32\") only"
        if not _S().use_conv_tf32:
            return "off (use_conv_tf32)"
        if self._plan(p) is None:
            return "not one stride-1 or folded record with a build for its taps, or does not fit"
        if _S().use_conv_tf32 != "anywhere":
            g = p.geometry
            fold = (window_records(g, p.op) or (None, 1))[1]
            rows = g.out_channels_per_group if p.op == "forward" else g.in_channels_per_group
            if (fold == 1 and rows <= _S().conv_tf32_min_rows) or 1 < fold < _S().conv_tf32_min_fold:
                return "too few rows (conv_tf32_min_rows) or too small a fold (conv_tf32_min_fold)"
        return None

    def plan(self, p, tile):
        steps, buffers = _window_weight_steps(p, p.op, "float32", round_tf32=True)
        return Plan(self.name, None, steps + (Step(self._plan(p)[0], ("source", "t0", self.bias(p), "out")),), buffers)
