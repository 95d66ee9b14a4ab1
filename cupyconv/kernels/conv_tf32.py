"""The host side of conv_tf32: its families' rules and plans."""

from __future__ import annotations

import functools

from .. import _kernels, settings
from .._geometry import Geometry
from .._launch import _blocks_for, _i32, _index_type, _Launch, _TensorMap
from .._plan import Plan, Step
from .pack_weight import _window_weight_steps
from .rules import _gemm_index, _problem_passes, _size
from .window import _Hopper, _window_problem, _WindowGroup

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
    layout = _kernels.conv_tf32_layout(flat, red_channels)
    if layout is None or layout[3] > max_shared:
        return None
    vectors, raw_row, weight_blocks, shared = layout
    # its copy offsets (a slice's rows) and source row indices are 32-bit
    if _kernels.CONV_TF32_SLICE * source4[3] + 4 * vectors > _kernels.INT32_LIMIT or source4[0] * source4[1] > _kernels.INT32_LIMIT:
        return None
    count, out_base, out_step, in_base, _, tap_first, tap_step, taps, tap_in_step = flat
    co_tiles = -(-out_channels * fold // _kernels.CONV_TF32_ROWS)
    combos = geometry.groups * co_tiles
    items = source4[0] * -(-count // _kernels.CONV_TF32_POSITIONS)
    # one block a multiprocessor: as many blocks per combination as fit in one wave
    per_combo = max(1, min(items, multiprocessors // combos))
    kernel_w = _kernels.window_kernel_w(geometry, pass_name) if fold > 1 else taps
    scalars = (
        _i32(source4[0]), _i32(geometry.groups), _i32(red_channels), _i32(_kernels.window_channels_padded(red_channels, "float32")),
        _i32(out_channels), _i32(source4[3]), _i32(out4[3]), _i32(count), _i32(out_base), _i32(in_base), _i32(tap_in_step),
        _i32(vectors), _i32(raw_row), _i32(weight_blocks), _i32(co_tiles), _i32(per_combo),
        _i32(fold.bit_length() - 1), _i32(kernel_w), _i32(tap_first), _i32(tap_step), _i32(out_step),
    )  # fmt: skip
    name = _kernels.conv_tf32_name(index, taps, fold > 1)
    return _Launch("conv_tf32.cu", name, _blocks_for(combos * per_combo), _kernels.WGMMA_THREADS, scalars, shared), flat


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
    if len(flat) != 9 or flat[4] != 1 or not 2 <= fold <= _kernels.CONV_TF32_STREAM_MAX_FOLD or fold & (fold - 1):
        return None
    layout = _kernels.conv_tf32_stream_layout(flat, passes)
    if layout is None or layout[2] > max_shared:
        return None
    vectors, raw_row, shared = layout
    # its copy offsets (a slice's rows) and source row indices are 32-bit
    if _kernels.CONV_TF32_SLICE * source4[3] + 4 * vectors > _kernels.INT32_LIMIT or source4[0] * source4[1] > _kernels.INT32_LIMIT:
        return None
    count, out_base, out_step, in_base, _, tap_first, tap_step, taps, tap_in_step = flat
    channels_padded = _kernels.window_channels_padded(red_channels, "float32")
    kernel_w = _kernels.window_kernel_w(geometry, "forward")
    packed = geometry.groups * kernel_w * out_channels * channels_padded
    if 2 * packed > _kernels.INT32_LIMIT:  # its weight offsets are 32-bit
        return None
    co_tiles = -(-out_channels * fold // _kernels.CONV_TF32_STREAM_COLS[passes])
    combos = geometry.groups * co_tiles
    items = source4[0] * -(-count // _kernels.CONV_TF32_POSITIONS)
    per_combo = max(1, min(items, multiprocessors // combos))
    scalars = (
        _i32(source4[0]), _i32(geometry.groups), _i32(red_channels), _i32(channels_padded), _i32(out_channels), _i32(source4[3]),
        _i32(out4[3]), _i32(count), _i32(out_base), _i32(in_base), _i32(tap_in_step), _i32(vectors), _i32(raw_row), _i32(co_tiles),
        _i32(per_combo), _i32(fold.bit_length() - 1), _i32(kernel_w), _i32(tap_first), _i32(tap_step), _i32(out_step), _i32(packed),
    )  # fmt: skip
    name = _kernels.conv_tf32_stream_name(index, taps, passes)
    resident = _kernels.conv_tf32_layout(flat, red_channels)
    resident_fits = resident is not None and resident[3] <= max_shared
    return _Launch("conv_tf32.cu", name, _blocks_for(combos * per_combo), _kernels.WGMMA_THREADS, scalars, shared), packed, resident_fits


@functools.lru_cache(maxsize=1024)
def _conv_tf32_multicast_plan(geometry: Geometry, index: str, multiprocessors: int, max_shared: int):
    """conv_tf32_multicast's launch for a pass conv_tf32_stream takes in TF32,
    or None where it does not apply."""
    problem = _window_problem(geometry, "forward", "float32", row_unit=16)
    if problem is None:
        return None
    flat, fold, red_channels, out_channels, source4, out4 = problem
    if fold not in _kernels.CONV_TF32_MULTICAST_FOLDS or flat[7] != 2:
        return None
    if geometry.groups > 1 and red_channels % _kernels.CONV_TF32_SLICE:
        return None
    layout = _kernels.conv_tf32_layout(flat, 1)
    if layout is None:
        return None
    raw_row = layout[1]
    shared = _kernels.conv_tf32_multicast_shared(raw_row)
    if shared > max_shared or raw_row > 256:  # (a tensor map's box is at most 256 elements a dimension)
        return None
    count, out_base, out_step, in_base, _, tap_first, tap_step, _, tap_in_step = flat
    batch, rows_total, src_w = source4[0], source4[1], source4[3]
    channels_padded = _kernels.window_channels_padded(red_channels, "float32")
    kernel_w = _kernels.window_kernel_w(geometry, "forward")
    co_per = _kernels.CONV_TF32_MULTICAST_COLS // fold
    co_tiles = -(-out_channels // co_per)
    items = batch * -(-count // _kernels.CONV_TF32_POSITIONS)
    units = -(-items // 2) * geometry.groups * co_tiles
    if units > _kernels.INT32_LIMIT or max(src_w, rows_total, count * out_step) > _kernels.INT32_LIMIT:
        return None
    source_map = _TensorMap(
        dims=(src_w, rows_total, batch), strides=(src_w * 4, src_w * 4 * rows_total),
        box=(raw_row, _kernels.CONV_TF32_SLICE, 1), data_type=7, swizzle=0,  # FLOAT32, no swizzle
    )  # fmt: skip
    weight_map = _TensorMap(
        dims=(channels_padded, out_channels, kernel_w, geometry.groups),
        strides=(channels_padded * 4, channels_padded * 4 * out_channels, channels_padded * 4 * out_channels * kernel_w),
        box=(_kernels.CONV_TF32_SLICE, co_per, fold // 2, 1), data_type=7, swizzle=2, array=1,  # FLOAT32, 64-byte swizzle
    )  # fmt: skip
    scalars = (source_map, weight_map) + tuple(
        _i32(v)
        for v in (batch, geometry.groups, red_channels, out_channels, out4[3], count, out_base, in_base, tap_in_step, raw_row, co_tiles,
                  tap_first, tap_step, out_step)
    )  # fmt: skip
    grid = 2 * max(1, min(units, multiprocessors // 2))
    name = _kernels.conv_tf32_multicast_name(index, fold)
    return _Launch("conv_tf32.cu", name, grid, _kernels.CONV_TF32_MULTICAST_THREADS, scalars, shared)


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
            fold = (_kernels.window_records(g, p.op) or (None, 1))[1]
            rows = g.out_channels_per_group if p.op == "forward" else g.in_channels_per_group
            if (fold == 1 and rows <= _S().conv_tf32_min_rows) or 1 < fold < _S().conv_tf32_min_fold:
                return "too few rows (conv_tf32_min_rows) or too small a fold (conv_tf32_min_fold)"
        return None

    def plan(self, p, tile):
        steps, buffers = _window_weight_steps(p, p.op, "float32", round_tf32=True)
        return Plan(self.name, None, steps + (Step(self._plan(p)[0], ("source", "t0", self.bias(p), "out")),), buffers)
