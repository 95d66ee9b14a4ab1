"""The GPU path: launches the kernels of cupyconv/kernels on CuPy arrays.

Imported only when a CuPy array is passed (``import cupyconv`` works without
CuPy).  Kernels compile on first use through ``cupy.RawModule`` with one
name expression per template instantiation, memoized per device; CuPy's
on-disk cache keeps the compiled code across processes.  Every launch runs on
the arrays' device and CuPy's current stream.
"""

from __future__ import annotations

import functools
import math
from typing import Tuple

import cupy
import ml_dtypes
import numpy

from . import _autotune, _chunks, _geometry, _kernels, _remember, settings
from ._geometry import Geometry
from ._plan import Buffer, Copy, Device, Family, Plan, Problem, Step, Sub, Table
from ._launch import (
    _RECORDING, _Launch, _TensorMap, _blocks_for, _compute_capability, _device_signature, _gpu_seconds, _i32, _i64, _index_type,
    _kernel_function, _launch, _max_shared, _multiprocessors, _phase_table, _tuned,
)  # fmt: skip
from ._launch import observe_launches  # noqa: F401 (the tests' entry point, re-exported)
from ._remember import _Bound, _FastForward, _remember_fast, note_allocation  # noqa: F401 (note_allocation: the adapter's)

_S = settings.current  # the routing settings in force
_SETTINGS = settings._STATE  # ["version"]: moves on with every change of the settings


def _contiguous4(array, shape4):
    return cupy.ascontiguousarray(array).reshape(shape4)


def _output(out, shape, dtype):
    """A fresh array of `shape`, or the caller's viewed in it (C-contiguous,
    of the right size and dtype: the torch adapter passes torch-allocated
    outputs)."""
    if out is None:
        return cupy.empty(shape, dtype=dtype)
    if out.dtype != dtype or out.size != math.prod(shape) or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous {numpy.dtype(dtype).name} array of shape {shape}, got {out.shape} {out.dtype}")
    return out.reshape(shape)


# Launch plans: everything about a launch that depends only on the geometry,
# dtype, index type and (for split reductions) the multiprocessor count,
# computed once; a call then only packs its arrays.


# float32 "highest": "3xtf32" runs it as 3xTF32 on tensor cores where the pass
# sums at least _S().tf32x3_min_products products per output, and on CUDA cores
# (FFMA) elsewhere; "simt" runs it on CUDA cores everywhere.
# 3xTF32 (mma.cuh, MmaOp<float, 3>) sums each k-step's three products apart
# and adds them with FADD, so its error grows with the sum's length like
# FFMA's.  But a float's 24 bits do not fit in two 11-bit TF32 parts: each
# product keeps an error of up to a few 2^-22, which FFMA's exact products do
# not have.  On short sums FFMA is the more accurate (H100: cuDNN errs 4e-8 to
# 6e-8 on the GPU sweep's sums of 3 to 60 products, 3xTF32 1e-7 to 1.7e-7);
# on long ones 3xTF32 is as accurate or more (the benchmark problems' sums of
# 160 products and more: 1.1e-7 to 2.2e-7 against cuDNN's 1.5e-7 to 4.1e-7).


def _tensor_core_passes(dtype: str, precision: str) -> int:
    """How the tensor-core kernels should multiply: 1 (one TF32, FP16 or BF16
    product), 3 (3xTF32, float32 "highest" where _S().float32_highest allows), or
    0 for CUDA cores (float64, and every dtype before sm_80)."""
    if _compute_capability() < 80:
        return 0
    if dtype in ("float16", "bfloat16"):
        return 1
    if dtype == "float32":
        if precision == "tf32":
            return 1
        return 3 if _S().float32_highest == "3xtf32" else 0
    return 0


def _products_per_output(geometry: Geometry, pass_name: str) -> float:
    """How many products each output of the pass sums, on average."""
    products = geometry.flops // 2
    shape = {"forward": geometry.output_shape4, "grad_input": geometry.input_shape4, "grad_weight": geometry.weight_shape4}[pass_name]
    return products / max(math.prod(shape), 1)


def _passes(dtype: str, precision: str, geometry: Geometry, pass_name: str) -> int:
    """_tensor_core_passes, with 3xTF32 only on sums of _S().tf32x3_min_products or
    more (else 0: CUDA cores)."""
    passes = _tensor_core_passes(dtype, precision)
    if passes == 3 and _products_per_output(geometry, pass_name) < _S().tf32x3_min_products:
        return 0
    return passes


# conv_gemm reads the weight packed (groups, KH*KW, C, M) when the output has
# at least this many elements: one copy of the weight per call, so that a
# warp's weight loads are consecutive instead of KH*KW (forward) or
# C_out/groups*KH*KW (grad_input) elements apart.  Below it the copy's launch
# would cost more than it saves.


def _packs_weight(geometry: Geometry, pass_name: str, out_size: int) -> bool:
    return out_size >= _S().pack_min_output and _kernels.gemm_weight_strides(geometry, pass_name)[1] != 1


def _gemm_rows(geometry: Geometry, pass_name: str) -> int:
    return geometry.out_channels_per_group if pass_name == "forward" else geometry.in_channels_per_group


@functools.lru_cache(maxsize=1024)
def _gemm_plan(geometry: Geometry, pass_name: str, dtype: str, index: str, passes: int, packed: bool, tile) -> Tuple[_Launch, tuple]:
    """conv_gemm (passes 0) or conv_mma with `tile` over every (group, phase,
    row tile, column tile), and its phase table, for the forward pass or
    grad_input."""
    if pass_name == "forward":
        flat, phases_h, phases_w = _kernels.forward_phases(geometry)
        red_channels, out_channels = geometry.in_channels_per_group, geometry.out_channels_per_group
        source4, out4 = geometry.input_shape4, geometry.output_shape4
    else:
        flat, phases_h, phases_w = _kernels.grad_input_phases(geometry)
        red_channels, out_channels = geometry.out_channels_per_group, geometry.in_channels_per_group
        source4, out4 = geometry.output_shape4, geometry.input_shape4
    w_strides = _kernels.gemm_weight_strides(geometry, pass_name, packed)
    counts = flat[0::9]
    cols_h, cols_w = max(counts[:phases_h]), max(counts[phases_h:])
    batch, _, in_h, in_w = source4
    _, _, out_h, out_w = out4
    m_tiles = -(-out_channels // tile.bm)
    col_tiles = -(-(batch * cols_h * cols_w) // tile.bn)
    blocks = _blocks_for(phases_h * phases_w * m_tiles * col_tiles * geometry.groups)
    scalars = (
        _i32(phases_h), _i32(phases_w), _i32(batch), _i32(geometry.groups),
        _i32(red_channels), _i32(out_channels),
        _i32(in_h), _i32(in_w), _i32(out_h), _i32(out_w), _i32(geometry.kernel[1]),
        _i64(w_strides[0]), _i64(w_strides[1]), _i64(w_strides[2]), _i64(w_strides[3]),
        _i32(cols_h), _i32(cols_w), _i32(m_tiles), _i32(col_tiles),
    )  # fmt: skip
    name = _kernels.mma_name(dtype, index, tile, passes) if passes else _kernels.gemm_name(dtype, index, tile)
    return _Launch("conv_gemm.cu", name, blocks, tile.threads, scalars), flat


# conv_window (the 1D tensor-core kernel that stages each channel slice's
# input once for all taps) runs where it applies and the output has at least
# this many elements; smaller problems keep conv_mma, which needs no padded
# weight copy.


def _window_problem(geometry: Geometry, pass_name: str, dtype: str, row_unit: int = 16, fill: bool = False):
    """What the 1D window kernels (conv_window, conv_wgmma, conv_wgmma_resident)
    need of a pass: (phase records, fold, reduction channels, output
    channels, source shape, output shape), or None where they do not apply
    (not 1D, grad_input with a stride, too few GEMM rows, source rows that are
    not a whole number of `row_unit` bytes: 16 but for conv_wgmma_resident
    and conv_wgmma_x3, whose copies may be smaller).  With `fill`, conv_wgmma_resident's fill:
    the one record of _kernels.fill_record, no fold."""
    if fill:
        record = _kernels.fill_record(geometry, pass_name)
        found = None if record is None else (record, 1)
    else:
        found = _kernels.window_records(geometry, pass_name)
    if found is None:
        return None
    flat, fold = found
    if any(step != 1 for step in flat[4::9]):  # grad_input with a stride: its window would be stride times longer
        return None
    if pass_name == "forward":
        red_channels, out_channels = geometry.in_channels_per_group, geometry.out_channels_per_group
        source4, out4 = geometry.input_shape4, geometry.output_shape4
    else:
        red_channels, out_channels = geometry.out_channels_per_group, geometry.in_channels_per_group
        source4, out4 = geometry.output_shape4, geometry.input_shape4
    if out_channels * fold < _kernels.WINDOW_MIN_ROWS or source4[3] * _kernels.ITEMSIZE[dtype] % row_unit:
        return None
    return flat, fold, red_channels, out_channels, source4, out4


def _window_columns(problem, fill: bool) -> int:
    """The window kernels' GEMM columns: the longest phase's, or with `fill`
    (its one phase) every output's."""
    flat, *_, out4 = problem
    return -(-out4[3] // _kernels.FILL_STEP) if fill else max(flat[0::9])


def _window_scalars(geometry: Geometry, pass_name: str, dtype: str, problem, tile, max_taps: int, vectors: int, stride: int, fill: bool = False):
    """(blocks, scalar arguments) of conv_window or conv_wgmma (their
    arguments differ only in what `stride` measures); with `fill`, of their
    fill builds (the weight packed unfolded, columns covering every output)."""
    flat, fold, red_channels, out_channels, source4, out4 = problem
    num_phases = len(flat) // 9
    m_tiles = -(-(out_channels * fold) // tile.bm)
    if fill:
        col_tiles = -(-_window_columns(problem, fill) // tile.bn)
    else:  # per row tile where the fold is deep (window.cuh's window_block)
        col_tiles = max(1, _kernels.window_col_tiles(flat, fold, tile.bm, tile.bn, out4[3]))
    kernel_w = geometry.kernel[1] if fill else _kernels.window_kernel_w(geometry, pass_name)
    batch = source4[0]
    blocks = _blocks_for(num_phases * m_tiles * col_tiles * batch * geometry.groups)
    scalars = (
        _i32(num_phases), _i32(fold.bit_length() - 1), _i32(batch), _i32(geometry.groups),
        _i32(red_channels), _i32(_kernels.window_channels_padded(red_channels, dtype)), _i32(out_channels),
        _i32(source4[3]), _i32(out4[3]), _i32(kernel_w),
        _i32(max_taps), _i32(vectors), _i32(stride), _i32(m_tiles), _i32(col_tiles),
    )  # fmt: skip
    return blocks, scalars


@functools.lru_cache(maxsize=1024)
def _window_plan(geometry: Geometry, pass_name: str, dtype: str, index: str, tile, max_shared: int, passes: int = 1, fill: bool = False):
    """(conv_window launch, phase records), or None where conv_window cannot
    run this problem with `tile` (see _window_problem; or a window too long
    for the 16-bit kernel's registers, or too little shared memory).  With
    `fill`, its fill build (the forward pass's one tapped phase, columns
    covering every output)."""
    problem = _window_problem(geometry, pass_name, dtype, fill=fill)
    if problem is None:
        return None
    max_taps, vectors, stride, shared = _kernels.window_layout(problem[0], tile, dtype)
    if vectors > (_kernels.WINDOW_MAX_VECTORS if _kernels.ITEMSIZE[dtype] == 2 else _kernels.WINDOW_MAX_VECTORS_WIDE) or shared > max_shared:
        return None
    blocks, scalars = _window_scalars(geometry, pass_name, dtype, problem, tile, max_taps, vectors, stride, fill)
    name = _kernels.window_name(dtype, index, tile, passes, fill)
    return _Launch("conv_window.cu", name, blocks, tile.threads, scalars, shared), problem[0]


@functools.lru_cache(maxsize=1024)
def _wgmma_plan(geometry: Geometry, pass_name: str, dtype: str, index: str, tile, max_shared: int, passes: int = 1):
    """(conv_wgmma launch, phase records), or None where conv_wgmma cannot run
    this problem with `tile` (see _window_problem; or more window vectors
    than its threads load, or too little shared memory).  passes 3 (float):
    conv_wgmma_x3's, whose source rows need only be a whole number of its
    loads (_kernels.resident_copy_bytes, as conv_wgmma_resident's copies)."""
    copy = _resident_copy(geometry, pass_name, dtype) if passes == 3 else 16
    problem = _window_problem(geometry, pass_name, dtype, copy) if copy is not None else None
    if problem is None:
        return None
    max_taps, vectors, chunk_stride, shared = _kernels.wgmma_layout(problem[0], tile, dtype, passes)
    tasks = _kernels.WGMMA_MAX_TASKS[_kernels.ITEMSIZE[dtype]] * _kernels.WGMMA_THREADS
    if vectors * _kernels.WGMMA_CHUNKS > tasks or shared > max_shared:
        return None
    blocks, scalars = _window_scalars(geometry, pass_name, dtype, problem, tile, max_taps, vectors, chunk_stride)
    name = _kernels.wgmma_x3_name(index, tile, copy) if passes == 3 else _kernels.wgmma_name(dtype, index, tile)
    return _Launch("conv_wgmma.cu", name, blocks, tile.threads, scalars, shared), problem[0]


# conv_wgmma_resident blocks resident on a multiprocessor at once: two where
# the tile has a two-block build (_kernels.RESIDENT_VARIANTS) and two fit in
# shared memory (228 KB, 1 KB of it reserved per block), else one.
SHARED_PER_MULTIPROCESSOR = 228 * 1024


@functools.lru_cache(maxsize=1024)
def _resident_plan(geometry: Geometry, pass_name: str, dtype: str, index: str, tile, max_shared: int, multiprocessors: int, fill: bool = False, split: bool = False):
    """(conv_wgmma_resident launch, phase records), or None where it cannot
    run this problem with `tile` (see _window_problem; or the weight row tile
    and the window buffers do not fit in shared memory).  Every (phase, row
    tile, group) combination gets the same number of blocks: enough for those
    with taps to fill the multiprocessors once, and no more than it has
    (image, column tile) items.  Source rows need only be a whole number of
    its copies (_kernels.resident_copy_bytes).  With `fill`, its fill (the
    forward pass's one tapped phase; its columns cover every output).  With
    `split`, conv_wgmma_split's launch instead, one block a multiprocessor,
    or None where that cannot run the pass: not 16-bit on its tile, not one
    phase record with out_step 1 and no fold."""
    copy = _resident_copy(geometry, pass_name, dtype)
    problem = _window_problem(geometry, pass_name, dtype, copy, fill) if copy is not None else None
    if problem is None:
        return None
    flat, fold, red_channels, out_channels, source4, out4 = problem
    if split and (fill or dtype not in _kernels.SPLIT_DTYPES or tile != _kernels.SPLIT_TILE or len(flat) != 9 or fold != 1 or flat[2] != 1):
        return None
    if split:
        max_taps, vectors, chunk_stride, shared = _kernels.split_layout(flat, dtype, red_channels)
    else:
        max_taps, vectors, chunk_stride, shared = _kernels.resident_layout(flat, tile, dtype, red_channels)
    if shared > max_shared:
        return None
    _, scalars = _window_scalars(geometry, pass_name, dtype, problem, tile, max_taps, vectors, chunk_stride, fill)
    two = not split and (tile, 2) in _kernels.RESIDENT_VARIANTS and 2 * (shared + 1024) <= SHARED_PER_MULTIPROCESSOR
    per_multiprocessor = 2 if two else 1
    row_tiles = -(-(out_channels * fold) // tile.bm) * geometry.groups
    combos = len(flat) // 9 * row_tiles
    working = sum(1 for taps in flat[7::9] if taps) * row_tiles  # a phase no tap reaches only writes the bias
    items = source4[0] * -(-_window_columns(problem, fill) // tile.bn)
    per_combo = max(1, min(items, -(-multiprocessors * per_multiprocessor // max(working, 1))))
    blocks = _blocks_for(combos * per_combo)
    if split:
        return _Launch("conv_wgmma.cu", _kernels.split_name(dtype, index, copy), blocks, _kernels.SPLIT_THREADS, scalars, shared), flat
    name = _kernels.resident_name(dtype, index, tile, per_multiprocessor, copy, fill)
    return _Launch("conv_wgmma.cu", name, blocks, tile.threads, scalars, shared), flat


def _resident_copy(geometry: Geometry, pass_name: str, dtype: str):
    """conv_wgmma_resident's copy size for this pass's source rows, or None."""
    source4 = geometry.input_shape4 if pass_name == "forward" else geometry.output_shape4
    return _kernels.resident_copy_bytes(source4[3], dtype)


@functools.lru_cache(maxsize=1024)
def _window_weight_plan(geometry: Geometry, pass_name: str, dtype: str, fold: bool, round_tf32: bool, split: bool = False):
    """(pack_window_weight launch, packed shape): the layout of
    _kernels.pack_window_weight with the channels padded to 16 bytes; with
    `split`, two of them (3xTF32's hi and lo)."""
    taps = geometry.kernel[1]
    taps_out = _kernels.window_kernel_w(geometry, pass_name) if fold else taps
    step = geometry.dilation[1] if taps_out != taps else 1
    forward = pass_name == "forward"
    rows = geometry.out_channels_per_group if forward else geometry.in_channels_per_group
    channels = geometry.in_channels_per_group if forward else geometry.out_channels_per_group
    shape = (geometry.groups, taps_out, rows, _kernels.window_channels_padded(channels, dtype))
    total = math.prod(shape)
    scalars = (
        _i32(taps_out), _i32(rows), _i32(channels), _i32(shape[3]), _i32(geometry.in_channels_per_group),
        _i32(geometry.out_channels_per_group), _i32(taps), _i32(step), _i32(forward), _i64(total),
    )  # fmt: skip
    if forward:  # a block a tile of PACK_TILE channels x PACK_TILE (row, tap) pairs of a group
        work = geometry.groups * -(-shape[3] // _kernels.PACK_TILE) * -(-rows * taps // _kernels.PACK_TILE)
    else:  # a thread an element
        work = -(-total // _kernels.PACK_THREADS)
    blocks = max(1, min(work, _kernels.PACK_MAX_BLOCKS))
    name = _kernels.pack_weight_name(dtype, round_tf32 and not split, split)
    return _Launch("pack_weight.cu", name, blocks, _kernels.PACK_THREADS, scalars), ((2,) + shape if split else shape)


def _window_weight(weight, geometry: Geometry, pass_name: str, dtype: str, fold: bool = True, round_tf32: bool = False, split: bool = False):
    """The weight as the window kernels read it: (groups, KW, M, C) with C
    padded with zeros to 16 bytes (`fold`: see _kernels.pack_window_weight),
    float values rounded to TF32 with `round_tf32` (conv_wgmma's tensor cores
    read the weight as stored, and conv_window's TF32 builds take it as
    loaded), made in one launch of pack_window_weight.
    With `split` (float), (2, groups, KW, M, C): 3xTF32's hi (rounded) and lo
    (the remainder, rounded), for conv_wgmma_x3."""
    split = split and dtype == "float32"
    plan, shape = _window_weight_plan(geometry, pass_name, dtype, fold, round_tf32 and dtype == "float32", split)
    packed = cupy.empty(shape, dtype=weight.dtype)
    if packed.size:
        _launch(plan, (weight, packed))
    return packed


# conv_wgmma (wgmma, Hopper's warpgroup tensor cores) takes the passes
# conv_window would run with one product per pair (tf32, float16, bfloat16) on
# compute capability 9.0, where it fits and where it measured faster (H100,
# scripts/wgmma_compare.py, perf notes v12): GEMMs of at most _S().wgmma_max_rows
# rows (its 64 x 256 tile) whose blocks do either one channel slice or at
# least _S().wgmma_min_taps taps per slice.  P1 (5 taps) and P4 in 16-bit (one
# slice, before its dilated kernel folded) gained 10-25%; P4 in tf32 (two
# slices of 3 taps), and every problem with more rows (P2, X2, X3: 128 x 128
# tiles), lose 5-30%.  P4 now folds into 128 rows (_kernels.FOLD_DILATED):
# conv_window 0.78-0.81 ms in 16-bit, conv_wgmma 128 x 128 0.84-0.85, the
# unfolded conv_wgmma 0.77-0.78 (perf notes v15).  False keeps conv_window
# everywhere.

@functools.lru_cache(maxsize=1024)
def _wgmma_work(geometry: Geometry, pass_name: str, dtype: str) -> Tuple[int, int]:
    """(most taps of any phase, channel slices) of a conv_wgmma block: what
    its routing rule weighs (the caller has checked that a plan exists)."""
    flat, _, red_channels, *_ = _window_problem(geometry, pass_name, dtype)
    return max(flat[7::9]), -(-red_channels // (_kernels.WGMMA_CHUNKS * 16 // _kernels.ITEMSIZE[dtype]))


# conv_wgmma_resident takes the passes conv_wgmma would (one product per
# pair, compute capability 9.0) where it measured faster (H100,
# scripts/wgmma_compare.py, perf notes v13): one phase (a stride-1
# correlation: P1, P2; fold 1, consecutive outputs) whose GEMM rows fit one
# row tile, so that each window is read by one block; in float32 (TF32) up to
# _S().resident_tf32_row_tiles row tiles, whose blocks each read the same windows
# (P2: 128 rows in 64-row tiles, its 128-row weight tile too large): P2's
# forward pass 3.41 -> 3.12 ms against conv_window, and its grad_input, whose
# rows conv_window cannot take (65538 floats, not whole 16-byte vectors),
# 6.2 ms on conv_mma before (perf notes v25; v13 measured it slower, before
# v22's instruction cut).  Not where phases interleave their outputs or fold
# (X2, X3; P4's dilated fold, which its fill below replaces): slower there.
# False keeps it off; _S().use_resident_anywhere lifts the rule (tests,
# comparisons).

# conv_wgmma_resident's fill (_kernels.fill_record) takes the forward passes
# of stride 2 whose dilation is even (P4), in the modes conv_wgmma_resident
# runs, where the output channels fit one row tile: the tapped phase alone,
# as a stride-1 correlation of 64 GEMM rows, its epilogue writing the bias
# between the sums.  Where it applies it comes before the routes above (the
# dilated fold: 128 rows, twice the MMAs).  Measured in perf notes v17.
# False keeps it off.


@functools.lru_cache(maxsize=1024)
def _resident_routed(s, geometry: Geometry, pass_name: str, dtype: str, tile, fill: bool = False) -> bool:
    """Whether the routing rules above send this pass to conv_wgmma_resident
    with `tile` (and its fill, with `fill`)."""
    flat, fold, _, out_channels, _, _ = _window_problem(geometry, pass_name, dtype, _resident_copy(geometry, pass_name, dtype), fill)
    row_tiles = s.resident_tf32_row_tiles if dtype == "float32" and not fill else 1  # (the fill: measured with one)
    return (fill or (len(flat) == 9 and fold == 1 and flat[2] == 1)) and out_channels <= row_tiles * tile.bm


def _resident_heuristic(geometry: Geometry, pass_name: str, dtype: str, index: str, rows: int, max_shared: int, multiprocessors: int,
                        fill: bool = False):  # fmt: skip
    """The first tile whose plan fits, in the heuristic's order, or None."""
    order = _kernels.WGMMA_TILES if rows > 64 else _kernels.WGMMA_TILES[::-1]
    for tile in order:
        if _resident_plan(geometry, pass_name, dtype, index, tile, max_shared, multiprocessors, fill) is not None:
            return tile
    return None


# conv_wgmma_split (conv_wgmma.cu: a producer warpgroup copies and
# transposes the window while two consumer warpgroups issue the MMAs and
# store) takes the 16-bit passes conv_wgmma_resident would run on its 128 x
# 128 tile where they are one stride-1 correlation with no fold (P2's forward
# pass and grad_input), ahead of it (_resident_plan with `split`): perf notes
# v55.  With autotuning on it still runs where it applies (it has one tile).
# False keeps it off.


# conv_wgmma_tf32 (conv_tf32.cu) takes the float32 "tf32" passes that are one
# stride-1 correlation (the forward pass of a stride-1 problem, its
# grad_input) with a build for their taps, on compute capability 9.0, ahead
# of conv_wgmma_resident, where their output channels are more than
# _S().conv_tf32_min_rows a group: there conv_wgmma_resident's 128-row weight
# tile does not fit (P2), and it splits the rows over two blocks that each
# transpose the same windows: P2's forward pass 3.16 -> 2.25-2.45 ms, its
# grad_input 2.86 -> 2.3-2.5 (perf notes v28).  Where it declines (5 or more
# taps, a weight tile over the shared memory), conv_wgmma_resident's
# _S().resident_tf32_row_tiles rule still applies.  False keeps it off; "anywhere"
# lifts the row rule (tests, comparisons).
#
# Its FOLD builds take a forward pass that folds (window_records: the stride
# divides the kernel, dilation 1) into one record whose fold is at least
# _S().conv_tf32_min_fold: X3 (fold 256, 4 taps), whose conv_window ran
# mma.sync tiles that each read a 128 KB weight tile for 128 columns (perf
# notes v34).  The block keeps its 128 (channel, sub-phase) rows' weight, 4
# taps x 64 channels, and streams the input.  "anywhere" lifts this rule too.


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


# conv_tf32_stream (conv_tf32.cu) takes the float32 forward passes in "tf32"
# (passes 1) and "highest" (passes 3, float32-accurate 3xTF32) that fold into
# one record (a stride that divides the kernel, dilation 1) with a fold of 2
# to CONV_TF32_STREAM_MAX_FOLD and 2 taps a sub-phase, on compute capability
# 9.0, where conv_wgmma_tf32's FOLD weight tile does not fit in shared
# memory: X2, a vocoder's upsampling layer (512 channels x 2 taps x 128
# columns of weight, 512 KB), whose conv_window (TF32) and conv_wgmma_x3
# (3xTF32) it replaces.  False keeps it off; "anywhere" lifts the rule
# (tests, comparisons).


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


# conv_tf32_multicast (conv_tf32.cu) runs the TF32 passes conv_tf32_stream
# takes where its fold is one of _kernels.CONV_TF32_MULTICAST_FOLDS, the
# source rows are whole 16-byte vectors (its tensor map's strides) and the
# window box reads no other group's channels (one group, or channels a
# multiple of the slice): blocks in clusters of two share each stage's
# weight, copied by TMA (perf notes v47).  False keeps conv_tf32_stream.


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


# conv_fold (perf notes v23, v44) takes the 16-bit forward passes of stride 8
# with 9 to 16 taps, dilation 1 and one group on compute capability 9.0 (X2, a
# vocoder's upsampling layer): one GEMM over (output channel, tap) rows and
# the input as stored, the two taps of each phase folded in its epilogue; the
# input read through a TMA tensor map by clusters of two blocks, one k-block
# for both.  Inputs whose rows are not whole 16-byte vectors, or whose
# channels' weight tile does not fit in shared memory, keep the other
# kernels.  False keeps it off; _S().fold_blocks (tests) sets its grid in place of
# one block a multiprocessor (rounded down to whole clusters, at least one).
# A kernel of 16 taps (X2's) whose weight is 16-byte aligned is read by
# conv_fold as given, each row tile's weight transposed into shared memory
# as a run starts (conv_fold.cu's raw_weight), without pack_fold_weight's
# launch and buffer (perf notes v45).  False packs every weight.


def _fold_applies(geometry: Geometry, dtype: str) -> bool:
    return (
        _S().use_fold and dtype in _kernels.FOLD_DTYPES and _kernels._is_1d(geometry) and geometry.groups == 1
        and geometry.stride[1] == _kernels.FOLD_STRIDE and geometry.dilation[1] == 1
        and _kernels.FOLD_STRIDE < geometry.kernel[1] <= _kernels.FOLD_TAPS and geometry.in_size[1] % 8 == 0
    )  # fmt: skip


@functools.lru_cache(maxsize=1024)
def _fold_plan(geometry: Geometry, dtype: str, index: str, blocks: int, max_shared: int, raw: bool):
    """(conv_fold launch, pack_fold_weight launch, packed shape), or None
    where the weight tile and buffers do not fit in shared memory; with
    `raw` (16 taps, a 16-byte-aligned weight) conv_fold reads the weight as
    given, and there is no pack (None, None)."""
    channels_padded = _kernels.fold_channels_padded(geometry.in_channels)
    shared = _kernels.fold_shared_bytes(channels_padded)
    if shared > max_shared:
        return None
    in_w, out_w, padding = geometry.in_size[1], geometry.out_size[1], geometry.padding[1]
    batch, in_channels = geometry.batch, geometry.in_channels
    groups_q = -(-(out_w + padding) // _kernels.FOLD_STRIDE)  # output positions o + padding = 8q + r: q < groups_q
    tiles_per_row = -(-groups_q // _kernels.FOLD_BN)
    full_tiles = -(-in_w // _kernels.FOLD_BN)  # column tiles with input positions (the rest: no MMAs)
    row_tiles = -(-geometry.out_channels // (_kernels.FOLD_ROWS // _kernels.FOLD_TAPS))
    pairs = -(-row_tiles // _kernels.FOLD_CLUSTER)  # a cluster's blocks take the row tiles of a pair (an odd count's last: zeros)
    work = pairs * batch * tiles_per_row
    if pairs * _kernels.FOLD_CLUSTER * batch * tiles_per_row > _kernels.INT32_LIMIT or max(in_w, tiles_per_row * _kernels.FOLD_BN) > _kernels.INT32_LIMIT:
        return None  # its tile numbers and the tensor map's coordinates are int
    # clusters in equal parts of each pair where there are enough (conv_fold.cu)
    clusters = max(blocks // _kernels.FOLD_CLUSTER, 1)
    parts = clusters // pairs
    grid = _kernels.FOLD_CLUSTER * (pairs * parts if parts else clusters)
    tensor_map = _TensorMap(
        dims=(in_w, in_channels, batch), strides=(in_w * 2, in_w * 2 * in_channels), box=_kernels.FOLD_BOX,
    )  # fmt: skip
    scalars = (tensor_map,) + tuple(
        _i32(v) for v in (batch, channels_padded, geometry.out_channels, out_w, padding, tiles_per_row, full_tiles, in_channels, raw, work, parts)
    )  # fmt: skip
    launch = _Launch("conv_fold.cu", _kernels.fold_name(dtype, index), grid, _kernels.FOLD_BLOCK_THREADS, scalars, shared)
    if raw:
        return launch, None, None
    packed_shape = (pairs * _kernels.FOLD_CLUSTER * _kernels.FOLD_ROWS, channels_padded)
    total = math.prod(packed_shape)
    pack_scalars = (_i32(geometry.in_channels), _i32(geometry.out_channels), _i32(geometry.kernel[1]), _i32(channels_padded), _i64(total))
    pack_tiles = packed_shape[0] // _kernels.FOLD_TAPS * -(-channels_padded // _kernels.PACK_FOLD_CI)  # (output channel, input-channel tile)
    pack_blocks = max(1, min(pack_tiles, _kernels.PACK_MAX_BLOCKS))
    pack = _Launch("conv_fold.cu", _kernels.pack_fold_weight_name(dtype), pack_blocks, _kernels.PACK_THREADS, pack_scalars)
    return launch, pack, packed_shape


# conv_window's fill takes the float32 "highest" forward passes that
# conv_wgmma_resident's fill takes in the other modes (stride 2, a dilation
# that is a multiple of it: P4), as 3xTF32 on tensor cores: one phase of 64
# GEMM rows, where conv_direct (FFMA) or the dilated fold (128 rows) would
# run.  Ahead of conv_direct on sums under _S().tf32x3_min_products too (P4: 96
# products an output); measured in perf notes v17.  False keeps it off.


# conv_wgmma_x3 (conv_wgmma's GEMM in 3xTF32 on wgmma, operands split once
# into shared memory) takes the float32 "highest" passes conv_window would
# run with 3xTF32 on compute capability 9.0, where it fits and where it
# measured faster (H100, scripts/wgmma_x3_compare.py, perf notes v21): GEMMs
# of _S().wgmma_x3_min_rows (its tiles' height) to _S().wgmma_x3_max_rows rows.  P1
# forward 1.79-1.94 -> 1.76-1.78 ms, P2 7.92-7.95 -> 6.82-6.96, X2
# 5.14-5.19 -> 5.02-5.17; X3 (16384 rows, 4 slices of 4 taps) no faster,
# 1.01-1.13 against 1.01-1.09, so it keeps conv_window.  False keeps
# conv_window everywhere; _S().use_wgmma_x3_anywhere (tests) lifts the row rule.
WGMMA_X3_TILES = (_kernels.WGMMA_TILES[1], _kernels.WGMMA_TILES[0])  # the heuristic's order: 64 x 256 measured faster on P1, P2, X2, X3


# grad_input_taps and grad_weight_taps split a reduction into pieces of at
# least this many 128-byte stages, and only while the blocks fit on the GPU at
# once (two per multiprocessor: their launch bounds and shared memory).


@functools.lru_cache(maxsize=1024)
def _taps_plan(s, geometry: Geometry, pass_name: str, dtype: str, index: str, vector: int, multiprocessors: int, tile, passes: int = 1):
    """(grad_input_taps or grad_weight_taps launch, workspace shape,
    sum_splits launch); the last two are None where the reduction is not
    split (the kernel then writes the gradient itself).  The reduction is
    split where the GEMM has fewer blocks than fit on the GPU at once, into
    pieces of at least s.grad_input_taps_min_chunks stages."""
    rows, out_channels = geometry.in_channels_per_group, geometry.out_channels_per_group
    batch, _, _, in_w = geometry.input_shape4
    out_w = geometry.output_shape4[3]
    kernel = geometry.kernel[1]
    if pass_name == "grad_input":  # columns (n, l), reduction (j, t)
        columns, reduction, out_shape4 = batch * in_w, out_channels * kernel, geometry.input_shape4
        name, shared = _kernels.grad_input_taps_name(dtype, index, tile, vector, passes), tile.shared
    else:  # columns (j, t), reduction (n, l)
        columns, reduction, out_shape4 = out_channels * kernel, batch * in_w, geometry.weight_shape4
        name, shared = _kernels.grad_weight_taps_name(dtype, index, tile, vector, passes), _kernels.grad_weight_taps_shared(tile)
    m_tiles = -(-rows // tile.bm)
    col_tiles = -(-columns // tile.bn)
    chunks = -(-(reduction * _kernels.ITEMSIZE[dtype]) // 128)  # 128-byte stages
    independent = m_tiles * col_tiles * geometry.groups
    capacity = s.grad_input_taps_blocks_per_multiprocessor * multiprocessors
    splits = max(1, min(capacity // independent, chunks // s.grad_input_taps_min_chunks))
    per_split = -(-chunks // splits)
    splits = -(-chunks // per_split)
    scalars = (
        _i32(batch), _i32(geometry.groups), _i32(rows), _i32(out_channels), _i32(in_w), _i32(out_w), _i32(kernel),
        _i32(geometry.stride[1]), _i32(geometry.padding[1]), _i32(per_split), _i32(m_tiles), _i32(col_tiles), _i32(splits),
    )  # fmt: skip
    partial = _Launch(f"{pass_name}_taps.cu", name, _blocks_for(independent * splits), tile.threads, scalars, shared)
    if splits == 1:
        return partial, None, None
    return partial, (splits,) + out_shape4, _sum_splits_plan(dtype, math.prod(out_shape4), splits, multiprocessors)


def _gemm_heuristic(geometry: Geometry, pass_name: str, passes: int):
    return _kernels.pick_tile(_kernels.MMA_TILES if passes else _kernels.GEMM_TILES, _gemm_rows(geometry, pass_name))


# grad_input_overlap (grad_input_overlap.cu, perf notes v32) takes the 16-bit
# grad_input of 1D problems of stride 8 with 9 to 16 taps, dilation 1 and
# one group (X2) on compute capability 9.0: one wgmma k-step per output
# channel, its B operand grad_output's row read as overlapping core
# matrices.  X2's 16-bit grad_input 1.38-1.42 -> 0.76-0.81 ms against
# grad_input_taps, the same error (H100, perf notes v32); warp-specialized
# (a producer warpgroup, two consumers, mbarriers) 0.75-0.86 -> 0.45-0.48
# (v37); six output channels a k-block and the weight as the MMAs' register
# operand, 4-6% more (v43).  Its float build takes float32 "tf32" (one pass)
# there too (v40).
# Routed ahead of grad_input_taps; False keeps it off (the taps kernels'
# tests do).


def _grad_input_overlap_applies(geometry: Geometry, dtype: str, source_offset: int, out_offset: int, passes: int = 1) -> bool:
    itemsize = 4 if dtype == "float32" else 2
    return (
        (dtype in _kernels.OVERLAP_DTYPES or (dtype == "float32" and passes == 1)) and _kernels._is_1d(geometry) and geometry.groups == 1
        and geometry.stride[1] == 8 and geometry.dilation[1] == 1 and 8 < geometry.kernel[1] <= 16
        and geometry.padding[1] % 4 == 0 and geometry.out_size[1] % 4 == 0 and geometry.in_size[1] % 2 == 0
        and source_offset % (4 * itemsize) == 0 and out_offset % (2 * itemsize) == 0
    )  # fmt: skip


@functools.lru_cache(maxsize=1024)
def _grad_input_overlap_plan(geometry: Geometry, dtype: str, index: str):
    """(grad_input_overlap launch, pack_overlap_weight launch, packed shape)."""
    in_w, out_w = geometry.in_size[1], geometry.out_size[1]
    m_tiles, n_tiles = -(-geometry.in_channels // _kernels.OVERLAP_BM), -(-in_w // _kernels.OVERLAP_BN)
    scalars = tuple(_i32(v) for v in (geometry.in_channels, geometry.out_channels, in_w, out_w, geometry.padding[1], m_tiles, n_tiles))
    blocks = m_tiles * n_tiles * geometry.batch
    name = _kernels.grad_input_overlap_name(dtype, index)
    cb, shared = _kernels.overlap_layout(dtype)
    launch = _Launch("grad_input_overlap.cu", name, blocks, _kernels.OVERLAP_THREADS, scalars, shared)
    co_padded = -(-geometry.out_channels // cb) * cb
    per_chunk = 4 if dtype == "float32" else 8  # taps in 16 bytes
    packed_shape = (co_padded, m_tiles, 16 // per_chunk, _kernels.OVERLAP_BM, per_chunk)
    total = math.prod(packed_shape)
    pack_scalars = (_i32(geometry.in_channels), _i32(geometry.out_channels), _i32(geometry.kernel[1]), _i32(m_tiles), _i64(total))
    pack_blocks = max(1, min(-(-total // (16 * _kernels.PACK_THREADS)), _kernels.PACK_MAX_BLOCKS))  # a thread a row of 16 taps
    pack = _Launch("grad_input_overlap.cu", _kernels.pack_overlap_weight_name(dtype), pack_blocks, _kernels.PACK_THREADS, pack_scalars)
    return launch, pack, packed_shape


# grad_input_multicast (grad_input_overlap.cu, perf notes v48) takes the
# float32 "tf32" grad_input that grad_input_overlap's float build would:
# clusters of two blocks share each stage's weight (TMA multicast) and the
# grad_output stretch is the MMAs' register operand, rounded as it loads.
# Its tensor map over grad_output needs rows of whole 16-byte quads (the
# overlap rule's out_w % 4 and 16-byte alignment).  False keeps
# grad_input_overlap's float build.


@functools.lru_cache(maxsize=1024)
def _grad_input_multicast_plan(geometry: Geometry, index: str, multiprocessors: int):
    """(grad_input_multicast launch, pack_multicast_weight launch, packed
    shape) for a float grad_input the overlap rule takes, or None where its
    work or rows pass 32-bit counts."""
    batch, in_w, out_w = geometry.batch, geometry.in_size[1], geometry.out_size[1]
    in_channels, out_channels = geometry.in_channels, geometry.out_channels
    ci_tiles = -(-in_channels // _kernels.GRAD_INPUT_MULTICAST_COLS)
    items = batch * -(-in_w // _kernels.GRAD_INPUT_MULTICAST_POSITIONS)
    units = -(-items // 2) * ci_tiles
    if max(units, 8 * in_w + 2048, out_channels * in_channels) > _kernels.INT32_LIMIT:
        return None
    gy_map = _TensorMap(
        dims=(out_w, out_channels, batch), strides=(out_w * 4, out_w * 4 * out_channels),
        box=(_kernels.GRAD_INPUT_MULTICAST_SPAN, _kernels.GRAD_INPUT_MULTICAST_CO, 1), data_type=7, swizzle=0,  # FLOAT32, no swizzle
    )  # fmt: skip
    weight_map = _TensorMap(
        dims=(16, in_channels, out_channels, 1), strides=(64, 64 * in_channels, 64 * in_channels * out_channels),
        box=(16, _kernels.GRAD_INPUT_MULTICAST_COLS // 2, 1, 1), data_type=7, swizzle=2, array=1,  # FLOAT32, 64-byte swizzle
    )  # fmt: skip
    scalars = (gy_map, weight_map) + tuple(_i32(v) for v in (batch, in_channels, out_channels, in_w, geometry.padding[1], ci_tiles))
    grid = 2 * max(1, min(units, multiprocessors // 2))
    launch = _Launch(
        "grad_input_overlap.cu", _kernels.grad_input_multicast_name(index), grid, _kernels.GRAD_INPUT_MULTICAST_THREADS, scalars,
        _kernels.GRAD_INPUT_MULTICAST_SHARED,
    )  # fmt: skip
    rows = out_channels * in_channels
    pack_scalars = (_i32(in_channels), _i32(out_channels), _i32(geometry.kernel[1]), _i64(rows))
    pack_blocks = max(1, min(-(-rows // _kernels.PACK_THREADS), _kernels.PACK_MAX_BLOCKS))
    pack = _Launch("grad_input_overlap.cu", _kernels.PACK_MULTICAST_WEIGHT, pack_blocks, _kernels.PACK_THREADS, pack_scalars)
    return launch, pack, (out_channels, in_channels, 16)


# grad_input_phase takes float32 1D grad_input on tensor cores where every
# tap lands on one phase of grad_output and the stride is above 1 (perf
# notes v18: P4), and at stride 1 where one tile of input channels covers a
# group (_S().grad_input_phase_stride_one: each grad_output element read by one
# block, in 16-byte copies; perf notes v19: P1); True takes every stride-1
# problem, False none.  _S().use_grad_input_phase False keeps the other kernels;
# "anywhere" lifts the size and stride rules (tests).


@functools.lru_cache(maxsize=1024)
def _grad_input_phase_plan(geometry: Geometry, index: str, passes: int, max_shared: int):
    """grad_input_phase's launch, or None where it does not apply (see
    grad_input_phase_layout) or does not fit in shared memory."""
    layout = _kernels.grad_input_phase_layout(geometry)
    if layout is None or layout[3] > max_shared:
        return None
    step, window, row, shared = layout
    batch, _, _, in_w = geometry.input_shape4
    l_tiles = -(-in_w // _kernels.GRAD_INPUT_PHASE_POSITIONS)
    ci_tiles = -(-geometry.in_channels_per_group // _kernels.GRAD_INPUT_PHASE_CHANNELS)
    blocks = l_tiles * ci_tiles * geometry.groups * batch
    if blocks > _kernels.INT32_LIMIT:
        return None
    scalars = (
        _i32(batch), _i32(geometry.groups), _i32(geometry.in_channels_per_group), _i32(geometry.out_channels_per_group),
        _i32(in_w), _i32(geometry.output_shape4[3]), _i32(geometry.kernel[1]), _i32(geometry.stride[1]), _i32(geometry.padding[1]),
        _i32(step), _i32(window), _i32(row), _i32(l_tiles), _i32(ci_tiles),
    )  # fmt: skip
    name = _kernels.grad_input_phase_name(index, passes)
    return _Launch("grad_input_phase.cu", name, blocks, _kernels.GRAD_INPUT_PHASE_THREADS, scalars, shared)


def _grad_input_phase_stride_one(geometry: Geometry) -> bool:
    if _S().grad_input_phase_stride_one == "one_tile":
        return geometry.in_channels_per_group <= _kernels.GRAD_INPUT_PHASE_CHANNELS
    return bool(_S().grad_input_phase_stride_one)


# conv_direct runs the forward pass where an output sums at most this many
# products on average and the output has at least _S().direct_min_output
# elements: there the passes are bound by writing the output, and conv_direct
# writes it once, in order, where the polyphase GEMMs write one strided
# lattice per phase.  Smaller outputs keep the small-call launch (no packed
# weight copy).  The limit is by what the GEMMs would run on: against the
# tensor-core GEMMs (float16, bfloat16, float32 "tf32") conv_direct wins on
# P5 (11.5 products: 0.52-0.58 ms against 0.83-1.64) and loses or ties on P4
# (48: 1.66 ms against 0.84-1.61); against float32's CUDA-core GEMM ("highest"
# below _S().tf32x3_min_products) it also wins on P4 (1.59-1.66 ms against
# 1.76-1.85), where its tiles' rows are full (_S().direct_full_rows output channels
# per group; P3's 8 leave half of a 16-row tile idle; P4 itself now takes
# conv_window's fill, _window_fill, ahead of conv_direct).  float64 and GPUs
# before sm_80 keep 16, the limit measured there (P5 float64: 1.22-1.45 ms
# against 2.87).  Measured on H100, perf notes v10 and v11.


def _direct_limit(geometry: Geometry, dtype: str, precision: str) -> float:
    """The most products per output conv_direct takes for this problem."""
    if _tensor_core_passes(dtype, precision) == 1:
        return _S().direct_max_products_tensor_cores
    if dtype == "float32" and geometry.out_channels_per_group >= _S().direct_full_rows:  # measured in float32 only
        return _S().direct_max_products_full_rows
    return _S().direct_max_products_cuda_cores


@functools.lru_cache(maxsize=1024)
def _direct_plan(geometry: Geometry, dtype: str, index: str, tile, max_shared: int, multiprocessors: int):
    """conv_direct's launch with `tile`, or None where it does not fit (a
    class of rows with too many H taps, a tile's input rows too long, or too
    little shared memory)."""
    layout = _kernels.direct_layout(geometry, tile, dtype)
    if layout is None or layout[3] > max_shared:
        return None
    cp, span, th_max, shared = layout
    batch, _, in_h, in_w = geometry.input_shape4
    _, _, out_h, out_w = geometry.output_shape4
    out_channels = geometry.out_channels_per_group
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = geometry.kernel, geometry.stride, geometry.padding, geometry.dilation
    w_tiles = -(-out_w // (sw * cp))
    m_tiles = -(-out_channels // tile.bm)
    per_block = _kernels.direct_tiles_per_block(out_h * w_tiles * m_tiles * batch * geometry.groups, multiprocessors)
    chunks = -(-(-(-out_h // sh) * w_tiles) // per_block)
    blocks = _blocks_for(chunks * sh * m_tiles * batch * geometry.groups)
    scalars = (
        _i32(batch), _i32(geometry.groups), _i32(geometry.in_channels_per_group), _i32(out_channels), _i32(m_tiles * tile.bm),
        _i32(in_h), _i32(in_w), _i32(out_h), _i32(out_w),
        _i32(kh), _i32(kw), _i32(sh), _i32(sw), _i32(ph), _i32(pw), _i32(dh), _i32(dw),
        _i32(th_max), _i32(cp), _i32(span), _i32(w_tiles), _i32(m_tiles), _i32(per_block), _i32(chunks),
    )  # fmt: skip
    return _Launch("conv_direct.cu", _kernels.direct_name(dtype, index, tile), blocks, _kernels.DIRECT_THREADS, scalars, shared)


@functools.lru_cache(maxsize=1024)
def _direct_weight_plan(geometry: Geometry, dtype: str, bm: int):
    """(pack_direct_weight launch, packed shape): the layout of
    _kernels.pack_direct_weight with M padded to a multiple of `bm`."""
    taps = geometry.kernel[0] * geometry.kernel[1]
    rows = geometry.out_channels_per_group
    shape = (geometry.groups, geometry.kernel[0], geometry.kernel[1], geometry.in_channels_per_group, -(-rows // bm) * bm)
    total = math.prod(shape)
    scalars = (_i32(taps), _i32(geometry.in_channels_per_group), _i32(rows), _i32(shape[4]), _i64(total))
    blocks = max(1, min(-(-total // _kernels.PACK_THREADS), _kernels.PACK_MAX_BLOCKS))
    return _Launch("pack_weight.cu", _kernels.pack_direct_weight_name(dtype), blocks, _kernels.PACK_THREADS, scalars), shape


@functools.lru_cache(maxsize=1024)
def _depthwise_plan(geometry: Geometry, dtype: str, index: str, multiprocessors: int) -> Tuple[_Launch, tuple]:
    """depthwise_forward over every row of the output, and its tap table."""
    batch, channels_out, out_h, out_w = geometry.output_shape4
    in_h, in_w = geometry.in_size
    chunk = 32 * _kernels.DEPTHWISE_OUTS
    row_chunks = -(-out_w // chunk)
    rows = batch * channels_out * out_h
    warp_chunks = _kernels.depthwise_warp_chunks(rows, row_chunks, multiprocessors)
    threads = _kernels.DEPTHWISE_THREADS
    blocks = _blocks_for(-(-rows * -(-row_chunks // warp_chunks) * 32 // threads))
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = geometry.kernel, geometry.stride, geometry.padding, geometry.dilation
    scalars = (
        _i32(geometry.out_channels_per_group), _i32(channels_out), _i32(in_h), _i32(in_w), _i32(out_h), _i32(out_w),
        _i32(kh), _i32(kw), _i32(sh), _i32(sw), _i32(ph), _i32(pw), _i32(dh), _i32(dw),
        _i32(_kernels.depthwise_tap_step(sh, dh)), _i32(_kernels.depthwise_tap_step(sw, dw)),
        _i32(row_chunks), _i32(warp_chunks), _i64(rows),
    )  # fmt: skip
    name = _kernels.depthwise_name(dtype, index, _kernels.depthwise_taps_w(geometry))
    return _Launch("depthwise.cu", name, blocks, threads, scalars), _kernels.depthwise_first_taps(geometry)


# grouped_forward: large 1D forward passes with few channels a group (P3), on
# CUDA cores.  Tests set _S().use_grouped_forward to "anywhere" to lift the size
# rule, or False to keep the GEMMs.


def _grouped_forward_routed(geometry: Geometry, dtype: str, precision: str) -> bool:
    """Where grouped_forward runs: every problem it takes, with at least
    _S().grouped_forward_min_output outputs; in the modes of one tensor-core
    product (tf32, float16, bfloat16) only up to _S().grouped_forward_max_tc_rows
    outputs a step (MG * S): with 16 output channels a group at stride 4 it
    measured 0.32-0.35 ms against conv_mma's 0.23-0.28 (perf notes v16)."""
    passes = _tensor_core_passes(dtype, precision)
    return _grouped_forward_decision(geometry, dtype, passes, _S().use_grouped_forward, _S().grouped_forward_min_output, _S().grouped_forward_max_tc_rows)


@functools.lru_cache(maxsize=1024)
def _grouped_forward_decision(geometry: Geometry, dtype: str, passes: int, use, min_output: int, max_tc_rows: int) -> bool:
    """_grouped_forward_routed, remembered (the settings are arguments: tests
    change them)."""
    if not use:
        return False
    if use != "anywhere":
        if math.prod(geometry.output_shape4) < min_output:
            return False
        if passes == 1 and geometry.out_channels_per_group * geometry.stride[1] > max_tc_rows:
            return False
    return _kernels.grouped_forward_applies(geometry, dtype)


@functools.lru_cache(maxsize=1024)
def _grouped_forward_plan(geometry: Geometry, dtype: str, index: str) -> Tuple[_Launch, tuple]:
    """grouped_forward over every (image, group, tile of steps), and its tap
    table."""
    halo, x_row, tiles, shared = _kernels.grouped_forward_layout(geometry)
    batch, in_w, out_w = geometry.batch, geometry.in_size[1], geometry.out_size[1]
    scalars = (
        _i32(geometry.groups), _i32(geometry.in_channels_per_group), _i32(geometry.kernel[1]), _i32(in_w), _i32(out_w),
        _i32(geometry.padding[1]), _i32(halo), _i32(x_row), _i32(tiles),
    )  # fmt: skip
    name = _kernels.grouped_forward_name(dtype, index, geometry.out_channels_per_group, geometry.stride[1])
    blocks = batch * geometry.groups * tiles
    return _Launch("grouped_forward.cu", name, blocks, _kernels.GROUPED_FORWARD_THREADS, scalars, shared), _kernels.grouped_forward_taps(geometry)


# A forward pass whose output has fewer elements than this (and than
# _S().window_min_output and _S().pack_min_output: no padded or packed weight copy) is
# one launch whose plan depends only on the call's signature; with autotuning
# off, that launch is remembered whole (_small_forward_launch), so a tiny call
# costs little more than an allocation and a kernel launch.


# conv_tiny runs the small forward passes whose output has at most
# _S().tiny_max_output elements, each summing at most _S().tiny_max_products products
# on average, in every dtype and mode (FMA in the accumulator type, so
# float32 "tf32" as accurate as "highest"), with autotuning on or off: one
# thread an output, no tiles.  conv_gemm's and conv_mma's smallest tiles and
# depthwise_forward take longer there (H100, remembered calls timed whole:
# X4 12.9 against 13.0 us, 27.5 against 34.8 at 16384 outputs of 192
# products, 28.3 against 46.8 at 2400 of 512; perf notes v50).  Both limits
# are the largest measured.


def _tiny_routed(geometry: Geometry, output_size: int) -> bool:
    return output_size <= _S().tiny_max_output and _products_per_output(geometry, "forward") <= _S().tiny_max_products


@functools.lru_cache(maxsize=1024)
def _tiny_plan(geometry: Geometry, dtype: str, index: str) -> _Launch:
    """conv_tiny's launch: a thread an output element."""
    batch, _, in_h, in_w = geometry.input_shape4
    _, channels, out_h, out_w = geometry.output_shape4
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = geometry.kernel, geometry.stride, geometry.padding, geometry.dilation
    scalars = tuple(
        _i32(v) for v in (batch, geometry.groups, geometry.in_channels_per_group, geometry.out_channels_per_group,
                          in_h, in_w, out_h, out_w, kh, kw, sh, sw, ph, pw, dh, dw)
    )  # fmt: skip
    blocks = _blocks_for(-(-batch * channels * out_h * out_w // _kernels.TINY_THREADS))
    return _Launch("conv_tiny.cu", _kernels.tiny_name(dtype, index), blocks, _kernels.TINY_THREADS, scalars)


def forward(x, weight, bias, geometry: Geometry, precision: str, out=None, fast_key=None, remember_small=None):
    """conv_transpose on CuPy arrays; returns the output in the user's shape
    (written into `out` when given).  The kernel is the first family of the
    registry's forward list that takes the problem (python -m cupyconv
    explain shows which and why).  A call with `fast_key` may be remembered
    (_remember.FAST_FORWARD); one into `out` that runs as one small launch on
    the arrays as given hands `remember_small` its _FastForward (the torch
    adapter's remembered calls)."""
    with x.device:
        # the kernels see pointers only: the output is made in the user's shape
        y = _output(out, geometry.output_shape, x.dtype)
        if not y.size:
            return y
        axis = _chunks.long_axis(geometry)
        if axis is not None:  # rows longer than the kernels' int lengths: as pieces of ordinary problems
            run = lambda sub, piece: forward(piece, weight, bias, sub, precision)  # noqa: E731
            _chunks.forward_by_pieces(cupy, x.reshape(geometry.input_shape4), y.reshape(geometry.output_shape4), geometry, axis, run)
            return y
        given = (x, weight, bias)
        x = cupy.ascontiguousarray(x)
        weight = cupy.ascontiguousarray(weight)
        bias = cupy.ascontiguousarray(bias) if bias is not None else None
        dtype = _geometry.dtype_name(x.dtype)
        p = _problem("forward", geometry, dtype, precision, (("source", x), ("weight", weight), ("bias", bias), ("out", y)))
        s = _S()
        small = y.size < min(s.small_forward_max_output, s.window_min_output, s.pack_min_output)
        tiny = small and _tiny_routed(geometry, y.size)  # conv_tiny has no tiles to tune
        bound = _small_forward_launch(s, p, x.device.id) if tiny or (small and not _autotune.enabled()) else None
        if bound is not None:
            bound.function(bound.grid, bound.block, (x, weight, bias, y) + bound.tail, shared_mem=bound.shared)
            for observe in _RECORDING.observers:
                observe(bound, (x, weight, bias, y))
            if all(a is b for a, b in zip((x, weight, bias), given)):  # no copies were made, as a remembered launch takes none
                if out is None:
                    _remember_fast(fast_key, bound, y)
                elif remember_small is not None:
                    remember_small(_FastForward(bound, y.shape, y.dtype, y.data.device_id))
            return y
        arrays = {"source": x.reshape(geometry.input_shape4), "weight": weight, "bias": bias, "out": y.reshape(geometry.output_shape4)}
        remember = s.use_remembered_forward and fast_key is not None and out is None
        if remember and all(a is b for a, b in zip((x, weight, bias), given)):  # no copies were made
            _remember.remember(fast_key, _remember.FAST_FORWARD, lambda: (_run_pass(p, arrays), (y,))[1], (x, weight, bias))
        else:
            _run_pass(p, arrays)
        return y


def backward(
    grad_output, x, weight, geometry: Geometry, output_mask, precision: str, out=(None, None, None), fast_key=None, remember_into=None
):
    """(grad_input, grad_weight, grad_bias) on CuPy arrays, None where masked;
    each written into the matching entry of `out` when that is given.

    Depthwise problems with up to 16 taps per input channel (multiplier x
    kernel) get grad_input and grad_weight from one pass of
    depthwise_backward, large 1D problems with few channels a group (see
    _kernels.grouped_backward_applies) from one pass of grouped_backward.
    16-bit 1D problems of stride 8 with 9 to 16 taps run grad_input_overlap
    and grad_weight_overlap on Hopper (float32 "tf32": their TF32 builds).  Large strided 1D problems with
    contiguous taps run
    grad_input_taps and grad_weight_taps on tensor cores; large float32
    strided 1D problems whose taps land on one phase of grad_output run
    grad_input_phase (and in "tf32", with one channel tile each way and up
    to 3 taps, grad_weight_phase's GX build makes both gradients in one
    pass).  Others run
    grad_input as a GEMM (conv_gemm/conv_mma, or the window kernels for large
    stride-1 1D problems on tensor cores: on Hopper conv_wgmma_tf32 or
    conv_wgmma_resident where routed) and grad_weight as a split-K GEMM (on tensor cores where the
    forward pass uses them; on Hopper grad_weight_wgmma for large stride-1 1D
    float16/bfloat16 problems of up to 8 taps; grad_weight_window for large
    1D float16/bfloat16 problems with a power-of-two stride;
    grad_weight_phase for large float32 1D problems whose taps land on one
    phase of grad_output).  float32 "highest" runs the taps kernels,
    conv_window and grad_weight_phase as 3xTF32, the other kernels on CUDA
    cores.  grad_bias is its own split reduction.  A call with `fast_key`
    (_api._fast_backward_key) may be remembered (_S().use_remembered_backward)
    into _remember.FAST_BACKWARD, or with `out` into `remember_into` (the torch
    adapter's table, whose replays launch into its tensors: _Replay.launch_raw)."""
    axis = _chunks.long_axis(geometry)
    if axis is not None:
        with grad_output.device:
            return _backward_by_pieces(grad_output, x, weight, geometry, axis, output_mask, precision, out)
    remember = (
        _S().use_remembered_backward and fast_key is not None and (remember_into is not None or not any(o is not None for o in out))
        and grad_output.flags.c_contiguous and x.flags.c_contiguous and weight.flags.c_contiguous
    )  # fmt: skip
    with grad_output.device:
        if remember:  # no copies are made of contiguous inputs
            table = _remember.FAST_BACKWARD if remember_into is None else remember_into
            return tuple(_remember.remember(fast_key, table, lambda: _backward(grad_output, x, weight, geometry, output_mask, precision, out), (grad_output, x, weight)))
        return _backward(grad_output, x, weight, geometry, output_mask, precision, out)


def _backward_by_pieces(grad_output, x, weight, geometry: Geometry, axis: int, output_mask, precision: str, out):
    """backward of a problem with rows longer than the kernels' int lengths
    (_chunks); grad_bias's kernel takes any row length."""
    want_input, want_weight, want_bias = output_mask
    gy4 = grad_output.reshape(geometry.output_shape4)
    grad_input = grad_weight = grad_bias = None
    if want_input or want_weight:
        grad_input = _output(out[0], geometry.input_shape4, gy4.dtype) if want_input else None

        def run(sub, gy_piece, x_piece, wanted):
            x_piece = x_piece if x_piece is not None else cupy.empty(sub.input_shape4, dtype=gy4.dtype)  # read by no kernel
            return _backward(gy_piece, x_piece, weight, sub, wanted + (False,), precision, (None, None, None))[:2]

        summed = _chunks.backward_by_pieces(cupy, gy4, x.reshape(geometry.input_shape4), geometry, axis, (want_input, want_weight), run, grad_input)
        if want_input:
            grad_input = grad_input.reshape(geometry.user_shape(geometry.input_shape4))
        if want_weight:
            grad_weight = _output(out[1], geometry.weight_shape4, gy4.dtype)
            grad_weight[...] = summed.reshape(geometry.weight_shape4)
            grad_weight = grad_weight.reshape(geometry.user_shape(geometry.weight_shape4, is_weight=True))
    if want_bias:
        grad_bias = _backward(gy4, x, weight, geometry, (False, False, True), precision, (None, None, out[2]))[2]
    return grad_input, grad_weight, grad_bias


def _empty_batch_backward(geometry: Geometry, dtype, output_mask, out):
    shapes = (geometry.input_shape4, geometry.weight_shape4, (geometry.out_channels,))
    grads = []
    for wanted, shape, given in zip(output_mask, shapes, out):
        grad = _output(given, shape, dtype) if wanted else None
        if grad is not None:
            grad.fill(0)
        grads.append(grad)
    grad_input, grad_weight, grad_bias = grads
    if grad_input is not None:
        grad_input = grad_input.reshape(geometry.user_shape(geometry.input_shape4))
    if grad_weight is not None:
        grad_weight = grad_weight.reshape(geometry.user_shape(geometry.weight_shape4, is_weight=True))
    return grad_input, grad_weight, grad_bias


# The backward pass of a 1D problem whose dilation is a multiple of its stride
# (P4: stride 2, dilation 2): every tap lands on one phase of the output, so
# grad_input and grad_weight read only outputs o = s * t' + offset.  Gathered
# into a contiguous array (one strided copy), those are the grad_output of a
# stride-1 problem with dilation d / s and padding ceil(p / s), which the
# stride-1 kernels run (wgmma and window kernels, whole 16-byte rows).  Tests
# set _S().use_phase_backward to "anywhere" to lift the size rule.


@functools.lru_cache(maxsize=1024)
def _phase_backward_geometry(geometry: Geometry):
    """(stride-1 geometry, lo, hi, first) for the phase rewrite above: the
    stride-1 problem's grad_output position t' is output first + s * t' of
    the original, which exists for t' in [lo, hi) (zero elsewhere).  None
    where the rewrite does not apply: not 1D, stride 1, or a dilation that is
    not a multiple of the stride.  The stride-1 problem takes padding
    ceil(p / s), so that its grad_output starts at the phase's first output and
    usually has the original's row length over s; where that would need an
    output padding PyTorch's rules reject, padding 0 and zeros at the ends."""
    if not _kernels._is_1d(geometry):
        return None
    in_w, kernel, stride, padding, dilation, out_w = _kernels._axes(geometry)[1]
    if stride == 1 or dilation % stride:
        return None
    ratio = dilation // stride
    input_shape = geometry.user_shape(geometry.input_shape4)
    weight_shape = geometry.user_shape(geometry.weight_shape4, is_weight=True)
    for pad in (-(-padding // stride), 0):
        first = stride * pad - padding
        natural = (in_w - 1) - 2 * pad + ratio * (kernel - 1) + 1  # the stride-1 output length with no output padding
        count = -(-(out_w - first) // stride)  # phase outputs from `first` on, before out_w
        try:
            sub = _geometry.make_geometry(1, input_shape, weight_shape, None, 1, pad, max(0, count - natural), geometry.groups, ratio)
        except ValueError:
            continue
        lo = -(-max(0, -first) // stride)
        return sub, lo, min(count, sub.out_size[1]), first
    return None


def _phase_backward_routed(geometry: Geometry, dtype: str):
    """_phase_backward_geometry where the rewrite is used: float16 and
    bfloat16 (_kernels.PHASE_BACKWARD_DTYPES), large problems."""
    if not _S().use_phase_backward or dtype not in _kernels.PHASE_BACKWARD_DTYPES:
        return None
    if _S().use_phase_backward != "anywhere" and math.prod(geometry.output_shape4) < _S().phase_backward_min_output:
        return None
    return _phase_backward_geometry(geometry)


def _phase_grad_output(gy4, geometry: Geometry, sub: Geometry, lo: int, hi: int, first: int):
    """The phase's outputs of grad_output as the stride-1 problem's
    grad_output: contiguous, zero outside [lo, hi).  CuPy arrays run
    phase_gather; NumPy arrays (tests of the rewrite on the CPU) slice."""
    stride, out_w = geometry.stride[1], sub.out_size[1]
    if isinstance(gy4, numpy.ndarray):
        gathered = numpy.zeros(sub.output_shape4, dtype=gy4.dtype)
        if hi > lo:
            gathered[..., lo:hi] = gy4[..., first + stride * lo :: stride][..., : hi - lo]
        return gathered
    gathered = cupy.empty(sub.output_shape4, dtype=gy4.dtype)
    if not gathered.size:
        return gathered
    rows = math.prod(sub.output_shape4[:3])
    chunks = -(-out_w // (_kernels.GATHER_THREADS * _kernels.GATHER_ELEMS))
    index = _index_type(gy4.size, gathered.size)
    scalars = (_i32(gy4.shape[3]), _i32(out_w), _i32(stride), _i32(first), _i32(lo), _i32(hi), _i32(chunks))
    plan = _Launch("phase_gather.cu", _kernels.phase_gather_name(_geometry.dtype_name(gy4.dtype), index), rows * chunks, _kernels.GATHER_THREADS, scalars)
    _launch(plan, (gy4, gathered))
    return gathered


def _depthwise_backward_applies(geometry: Geometry) -> bool:
    return (
        _kernels.depthwise_backward_taps(geometry) > 0
        and geometry.batch * geometry.in_size[0] * geometry.in_size[1] > 0
        and math.prod(geometry.output_shape4) > 0
    )


@functools.lru_cache(maxsize=1024)
def _depthwise_backward_plan(geometry: Geometry, dtype: str, index: str, multiprocessors: int):
    """(depthwise_backward launch, workspace shape, sum_splits launch): blocks
    (channel, split), about 16 per multiprocessor."""
    channels = geometry.in_channels
    positions = geometry.batch * geometry.in_size[0] * geometry.in_size[1]
    threads = _kernels.DEPTHWISE_BACKWARD_THREADS
    splits = _splits(channels, positions, 4 * threads, multiprocessors, blocks_per_multiprocessor=16)
    per_split = -(-positions // splits)
    splits = -(-positions // per_split)
    batch, _, in_h, in_w = geometry.input_shape4
    _, _, out_h, out_w = geometry.output_shape4
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = geometry.kernel, geometry.stride, geometry.padding, geometry.dilation
    scalars = (
        _i32(batch), _i32(channels), _i32(geometry.out_channels_per_group), _i32(in_h), _i32(in_w), _i32(out_h), _i32(out_w),
        _i32(kh), _i32(kw), _i32(sh), _i32(sw), _i32(ph), _i32(pw), _i32(dh), _i32(dw), _i64(per_split),
    )  # fmt: skip
    name = _kernels.depthwise_backward_name(dtype, index, _kernels.depthwise_backward_taps(geometry))
    launch = _Launch("depthwise.cu", name, _blocks_for(channels * splits), threads, scalars)
    count = math.prod(geometry.weight_shape4)
    return launch, (splits,) + geometry.weight_shape4, _sum_splits_plan(dtype, count, splits, multiprocessors)


# grouped_backward takes both passes of large 1D problems with few channels a
# group (_kernels.grouped_backward_applies; P3) in float32 (every precision),
# float16 and bfloat16: one read of grad_output and x on CUDA cores, where the
# GEMMs' tensor-core tiles would be mostly padding.  False keeps the GEMMs.
# float32 problems with 8 or 16 channels a group take the pipelined build
# (_kernels.grouped_backward_pipes: two cp.async staging buffers); False keeps
# the one-buffer build.


def _grouped_backward_routed(geometry: Geometry, dtype: str) -> bool:
    return _S().use_grouped_backward and math.prod(geometry.input_shape4) >= _S().grouped_min_input and _kernels.grouped_backward_applies(geometry, dtype)


@functools.lru_cache(maxsize=1024)
def _grouped_backward_plan(s, geometry: Geometry, dtype: str, index: str, multiprocessors: int, want_input: bool, want_weight: bool):
    """(grouped_backward launch, workspace shape or None, sum_splits launch or
    None): the pipelined build where it applies (s.grouped_pipe); the longest
    item (GROUPED_TILES) whose staging (two buffers when pipelined) fits two
    blocks a multiprocessor; splits of the (image, item) list sized for about
    four blocks a multiprocessor, and where grad_weight is wanted short enough
    that a lane sums at most GROUPED_MAX_SPLIT_SUM products in float."""
    pipe = s.grouped_pipe and _kernels.grouped_backward_pipes(geometry, dtype)
    for tile in _kernels.GROUPED_TILES:
        span, phase_row, m_row, shared = _kernels.grouped_backward_layout(geometry, tile, want_input, want_weight, 2 if pipe else 1)
        if shared <= _kernels.GROUPED_MAX_SHARED:
            break
    batch, _, _, in_w = geometry.input_shape4
    tiles = -(-in_w // tile)
    items = batch * tiles
    per_split = -(-items * geometry.groups // (4 * multiprocessors))
    if want_weight:
        per_split = min(per_split, _kernels.GROUPED_MAX_SPLIT_SUM // (tile // (_kernels.GROUPED_THREADS // 32)))
    per_split = max(1, per_split)
    splits = -(-items // per_split)
    scalars = (
        _i32(geometry.groups), _i32(geometry.out_channels_per_group), _i32(in_w), _i32(geometry.output_shape4[3]),
        _i32(geometry.stride[1]), _i32(geometry.padding[1]), _i32(geometry.dilation[1]),
        _i32(tile), _i32(span), _i32(phase_row), _i32(m_row), _i32(tiles), _i64(items), _i32(per_split),
    )  # fmt: skip
    name = _kernels.grouped_backward_name(dtype, index, geometry.in_channels_per_group, geometry.kernel[1], pipe)
    launch = _Launch("grouped_backward.cu", name, _blocks_for(geometry.groups * splits), _kernels.GROUPED_THREADS, scalars, shared)
    if not want_weight:
        return launch, None, None
    count = math.prod(geometry.weight_shape4)
    return launch, (splits,) + geometry.weight_shape4, _sum_splits_plan(dtype, count, splits, multiprocessors)


def _splits(independent_blocks: int, positions: int, min_positions: int, multiprocessors: int, blocks_per_multiprocessor: int = 4) -> int:
    """How many pieces to cut a reduction of `positions` into: enough blocks to
    keep every multiprocessor busy, none shorter than min_positions."""
    wanted = -(-blocks_per_multiprocessor * multiprocessors // max(independent_blocks, 1))
    return max(1, min(wanted, positions // max(min_positions, 1)))


def _sum_splits_plan(dtype: str, count: int, splits: int, multiprocessors: int, workspace: str = "double") -> _Launch:
    blocks = max(1, min(-(-count // _kernels.REDUCE_THREADS), 8 * multiprocessors))
    name = _kernels.sum_splits_name(dtype, workspace)
    return _Launch("grad_weight.cu", name, blocks, _kernels.REDUCE_THREADS, (_i64(count), _i32(splits)))


@functools.lru_cache(maxsize=1024)
def _grad_weight_plan(geometry: Geometry, dtype: str, index: str, multiprocessors: int, passes: int, tile):
    """(grad_weight_partial or grad_weight_mma launch, workspace shape,
    sum_splits launch)."""
    rows = geometry.in_channels_per_group
    kernel_h, kernel_w = geometry.kernel
    columns = geometry.out_channels_per_group * kernel_h * kernel_w
    positions = geometry.batch * geometry.in_size[0] * geometry.in_size[1]
    m_tiles = -(-rows // tile.bm)
    col_tiles = -(-columns // tile.bn)
    splits = _splits(m_tiles * col_tiles * geometry.groups, positions, 32 * tile.bk, multiprocessors)
    per_split = -(-positions // splits)
    per_split = -(-per_split // tile.bk) * tile.bk
    splits = -(-positions // per_split)
    workspace_shape = (splits,) + geometry.weight_shape4  # reductions sum in double
    (sh, sw), (ph, pw), (dh, dw) = geometry.stride, geometry.padding, geometry.dilation
    batch, _, in_h, in_w = geometry.input_shape4
    _, _, out_h, out_w = geometry.output_shape4
    scalars = (
        _i32(batch), _i32(geometry.groups), _i32(rows), _i32(geometry.out_channels_per_group),
        _i32(in_h), _i32(in_w), _i32(out_h), _i32(out_w), _i32(kernel_h), _i32(kernel_w),
        _i32(sh), _i32(sw), _i32(ph), _i32(pw), _i32(dh), _i32(dw),
        _i64(per_split), _i32(splits), _i32(m_tiles), _i32(col_tiles),
    )  # fmt: skip
    blocks = _blocks_for(m_tiles * col_tiles * splits * geometry.groups)
    name = _kernels.grad_weight_mma_name(dtype, index, tile, passes) if passes else _kernels.grad_weight_name(dtype, index, tile)
    partial = _Launch("grad_weight.cu", name, blocks, tile.threads, scalars)
    count = math.prod(geometry.weight_shape4)
    return partial, workspace_shape, _sum_splits_plan(dtype, count, splits, multiprocessors)


@functools.lru_cache(maxsize=1024)
def _grad_weight_window_plan(geometry: Geometry, dtype: str, index: str, multiprocessors: int, tile, max_shared: int):
    """(grad_weight_window launch, workspace shape, sum_splits launch), or
    None where it does not apply with `tile` (see grad_weight_window_layout)
    or its window does not fit in shared memory."""
    layout = _kernels.grad_weight_window_layout(geometry, tile, dtype)
    if layout is None or layout[1] > max_shared:
        return None
    window_rows, shared = layout
    channels, out_channels = geometry.in_channels_per_group, geometry.out_channels_per_group
    batch, _, _, in_w = geometry.input_shape4
    out_w = geometry.output_shape4[3]
    kernel = geometry.kernel[1]
    m_tiles = -(-channels // tile.bm)
    j_tiles = -(-out_channels // _kernels.GRAD_WEIGHT_WINDOW_COLUMNS)
    tap_chunks = -(-kernel // tile.taps)
    slices = batch * -(-in_w // _kernels.GRAD_WEIGHT_WINDOW_SLICE)
    if slices > _kernels.INT32_LIMIT // 2:  # the kernel counts slices in int
        return None
    independent = m_tiles * j_tiles * tap_chunks * geometry.groups
    splits = _splits(independent, slices, 8, multiprocessors)
    per_split = -(-slices // splits)
    splits = -(-slices // per_split)
    scalars = (
        _i32(batch), _i32(geometry.groups), _i32(channels), _i32(out_channels), _i32(in_w), _i32(out_w), _i32(kernel),
        _i32(geometry.stride[1].bit_length() - 1), _i32(geometry.padding[1]), _i32(geometry.dilation[1]), _i32(window_rows),
        _i32(per_split), _i32(m_tiles), _i32(j_tiles), _i32(tap_chunks), _i32(splits),
    )  # fmt: skip
    name = _kernels.grad_weight_window_name(dtype, index, tile)
    partial = _Launch("grad_weight_window.cu", name, _blocks_for(independent * splits), tile.threads, scalars, shared)
    count = math.prod(geometry.weight_shape4)
    return partial, (splits,) + geometry.weight_shape4, _sum_splits_plan(dtype, count, splits, multiprocessors)


# grad_weight_wgmma takes 16-bit stride-1 1D grad_weight on compute
# capability 9.0 where it applies (perf notes v14: P1, P2).  False keeps
# grad_weight_window there.


@functools.lru_cache(maxsize=1024)
def _grad_weight_wgmma_plan(geometry: Geometry, dtype: str, index: str, multiprocessors: int, tile, max_shared: int):
    """(grad_weight_wgmma launch, workspace shape, sum_splits launch), or
    None where it does not apply with `tile` (see grad_weight_wgmma_layout)
    or does not fit in shared memory.  One block per multiprocessor: the
    (group, output-channel tile, input-channel tile) combinations times
    enough splits of the (image, 128-position chunk) items to fill them."""
    layout = _kernels.grad_weight_wgmma_layout(geometry, tile, dtype)
    if layout is None or layout[2] > max_shared:
        return None
    vectors, chunk_stride, shared, copy = layout
    channels, out_channels = geometry.in_channels_per_group, geometry.out_channels_per_group
    batch, _, _, in_w = geometry.input_shape4
    co_tiles = -(-out_channels // _kernels.GRAD_WEIGHT_WGMMA_ROWS)
    ci_tiles = -(-channels // tile.bn)
    items = batch * -(-in_w // _kernels.GRAD_WEIGHT_WGMMA_POSITIONS)
    independent = co_tiles * ci_tiles * geometry.groups
    splits = _splits(independent, items, 4, multiprocessors, blocks_per_multiprocessor=1)
    per_split = -(-items // splits)
    splits = -(-items // per_split)
    scalars = (
        _i32(batch), _i32(geometry.groups), _i32(channels), _i32(out_channels), _i32(in_w), _i32(geometry.output_shape4[3]),
        _i32(geometry.kernel[1]), _i32(geometry.padding[1]), _i32(geometry.dilation[1]), _i32(vectors), _i32(chunk_stride),
        _i32(per_split), _i32(co_tiles), _i32(ci_tiles),
    )  # fmt: skip
    name = _kernels.grad_weight_wgmma_name(dtype, index, tile, copy)
    partial = _Launch("conv_wgmma.cu", name, _blocks_for(independent * splits), tile.threads, scalars, shared)
    count = math.prod(geometry.weight_shape4)
    return partial, (splits,) + geometry.weight_shape4, _sum_splits_plan(dtype, count, splits, multiprocessors)


# grad_weight_overlap (grad_weight_overlap.cu, perf notes v33) takes the
# 16-bit grad_weight of the problems grad_input_overlap takes (stride 8, 9
# to 16 taps, dilation 1, one group, 1D) on compute capability 9.0: grad_output's
# rows read in place as the A operand of rows (output channel, phase).
# Warp-specialized like grad_input_overlap, one tap a consumer warpgroup over
# 256 input channels: X2's 16-bit grad_weight 0.65-0.88 -> 0.51-0.64 ms
# (H100, perf notes v37).  Its float32 "tf32" problems go to
# grad_weight_multicast (below); its float build is gone (perf notes v57).


def _grad_weight_overlap_copy(geometry: Geometry, dtype: str, gy_offset: int, x_offset: int) -> int:
    """The kernel's grad_output copy size (16 or 8 bytes; float32: grad_weight_multicast's rule, 16), or 0 where it does not apply."""
    itemsize = 4 if dtype == "float32" else 2
    if not (
        (dtype in _kernels.OVERLAP_DTYPES or dtype == "float32") and _kernels._is_1d(geometry) and geometry.groups == 1
        and geometry.stride[1] == 8 and geometry.dilation[1] == 1 and 8 < geometry.kernel[1] <= 16
        and geometry.in_size[1] * itemsize % 16 == 0 and x_offset % 16 == 0
    ):  # fmt: skip
        return 0
    for copy in (16,) if dtype == "float32" else _kernels.GRAD_WEIGHT_OVERLAP_COPIES:
        unit = copy // itemsize
        if geometry.padding[1] % unit == 0 and geometry.out_size[1] % unit == 0 and gy_offset % copy == 0:
            return copy
    return 0


@functools.lru_cache(maxsize=1024)
def _grad_weight_overlap_plan(geometry: Geometry, dtype: str, index: str, multiprocessors: int, copy: int):
    """(grad_weight_overlap launch, workspace shape, sum_splits launch).  One
    block a multiprocessor: the splits of the (image, 64-position) items
    that fill the most of whole waves, fewest first."""
    channels, out_channels = geometry.in_channels, geometry.out_channels
    batch, _, _, in_w = geometry.input_shape4
    co_tiles = -(-out_channels // _kernels.GRAD_WEIGHT_OVERLAP_CO)
    ci_tiles = -(-channels // _kernels.GRAD_WEIGHT_OVERLAP_BN)
    positions = _kernels.GRAD_WEIGHT_OVERLAP_P
    items = batch * -(-in_w // positions)
    independent = co_tiles * ci_tiles

    def filled(splits):  # the fraction of its waves' block slots a grid uses
        blocks = independent * splits
        return blocks / (-(-blocks // multiprocessors) * multiprocessors)

    most = max(1, min(8, items // 16))  # 1024 positions or more a split
    splits = max(range(1, most + 1), key=lambda s: (round(filled(s), 2), -s))
    per_split = -(-items // splits)
    splits = -(-items // per_split)
    scalars = tuple(
        _i32(v) for v in (batch, channels, out_channels, in_w, geometry.out_size[1], geometry.kernel[1], geometry.padding[1], per_split, co_tiles, ci_tiles)
    )  # fmt: skip
    name = _kernels.grad_weight_overlap_name(dtype, index, copy)
    partial = _Launch(
        "grad_weight_overlap.cu", name, _blocks_for(independent * splits), _kernels.GRAD_WEIGHT_OVERLAP_THREADS, scalars,
        _kernels.GRAD_WEIGHT_OVERLAP_SHARED,
    )  # fmt: skip
    count = math.prod(geometry.weight_shape4)
    return partial, (splits,) + geometry.weight_shape4, _sum_splits_plan(dtype, count, splits, multiprocessors, "float")


# grad_weight_multicast (grad_weight_overlap.cu, perf notes v48) takes the
# float32 "tf32" grad_weight that grad_weight_overlap's float build would,
# where padding and grad_output's rows are whole 16-byte quads (its tensor
# map's boxes): x rounded to TF32 once into a copy, whose tiles clusters of
# two output-channel tiles share (TMA multicast), and grad_output's stretch
# as the MMAs' register operand.  False keeps grad_weight_overlap's build.


@functools.lru_cache(maxsize=1024)
def _grad_weight_multicast_plan(geometry: Geometry, index: str, multiprocessors: int):
    """(grad_weight_multicast launch, workspace shape, sum_splits launch), or
    None where its counts pass 32 bits.  The splits of the items fill the
    device's clusters once (at least 1024 positions a split)."""
    batch, in_channels, out_channels = geometry.batch, geometry.in_channels, geometry.out_channels
    in_w, out_w = geometry.in_size[1], geometry.out_size[1]
    co_pairs = -(-out_channels // (2 * _kernels.GRAD_WEIGHT_MULTICAST_CO))
    ci_tiles = -(-in_channels // _kernels.GRAD_WEIGHT_MULTICAST_COLS)
    items = batch * -(-in_w // _kernels.GRAD_WEIGHT_MULTICAST_P)
    independent = co_pairs * ci_tiles
    splits = max(1, min(multiprocessors // 2 // independent, items // (1024 // _kernels.GRAD_WEIGHT_MULTICAST_P)))
    per_split = -(-items // splits)
    splits = -(-items // per_split)
    if max(items, 8 * in_w + 1024, 2 * independent * splits) > _kernels.INT32_LIMIT:
        return None
    x_map = _TensorMap(
        dims=(in_w, in_channels, batch), strides=(in_w * 4, in_w * 4 * in_channels),
        box=(_kernels.GRAD_WEIGHT_MULTICAST_P, _kernels.GRAD_WEIGHT_MULTICAST_COLS // 2, 1), data_type=7, swizzle=3,  # FLOAT32, 128-byte swizzle
    )  # fmt: skip
    gy_map = _TensorMap(
        dims=(out_w, out_channels, batch), strides=(out_w * 4, out_w * 4 * out_channels),
        box=(_kernels.GRAD_WEIGHT_MULTICAST_SPAN, _kernels.GRAD_WEIGHT_MULTICAST_CO, 1), data_type=7, swizzle=0, array=1,  # FLOAT32
    )  # fmt: skip
    scalars = (x_map, gy_map) + tuple(
        _i32(v) for v in (batch, in_channels, out_channels, in_w, geometry.kernel[1], geometry.padding[1], per_split, co_pairs, ci_tiles)
    )  # fmt: skip
    partial = _Launch(
        "grad_weight_overlap.cu", _kernels.grad_weight_multicast_name(index), 2 * independent * splits, _kernels.GRAD_WEIGHT_MULTICAST_THREADS,
        scalars, _kernels.GRAD_WEIGHT_MULTICAST_SHARED,
    )  # fmt: skip
    finish = _sum_splits_plan("float32", math.prod(geometry.weight_shape4), splits, multiprocessors, "float")
    return partial, (splits,) + geometry.weight_shape4, finish


@functools.lru_cache(maxsize=1024)
def _round_tf32_copy_plan(count: int) -> _Launch:
    """round_tf32_copy's launch for `count` floats (a multiple of 4)."""
    blocks = max(1, min(-(-count // (4 * _kernels.PACK_THREADS)), _kernels.PACK_MAX_BLOCKS))
    return _Launch("grad_weight_overlap.cu", _kernels.ROUND_TF32_COPY, blocks, _kernels.PACK_THREADS, (_i64(count),))


# grad_weight_wgmma_tf32 takes float32 1D grad_weight in both tensor-core
# modes on compute capability 9.0 where it applies and a group has at least
# _S().grad_weight_tf32_min_channels input and output channels (its block is 128
# rows -- output channels, or in fold mode (strides) (output channel, tap)
# pairs -- x 64 input channels): stride 1 in tap mode, ahead of
# grad_weight_phase; strided in fold mode, ahead of grad_weight_taps in
# 3xTF32 only (H100, ms, fold against taps: X2 3.99-4.12 against 5.89-6.02
# in "highest", 2.74-2.79 against 2.45-2.50 in "tf32"; where taps does not
# apply, fold beat grad_weight_mma in both modes; perf notes v29).  False
# keeps grad_weight_taps, grad_weight_phase or grad_weight_mma there.


@functools.lru_cache(maxsize=1024)
def _grad_weight_tf32_plan(geometry: Geometry, index: str, passes: int, multiprocessors: int, max_shared: int):
    """(grad_weight_wgmma_tf32 launch, workspace shape, sum_splits launch),
    or None where it does not apply (see grad_weight_tf32_layout) or does not
    fit in shared memory.  One block per multiprocessor: the (group, output-
    channel tile, input-channel tile) combinations times enough splits of the
    (image, 64-position chunk) items to fill them."""
    layout = _kernels.grad_weight_tf32_layout(geometry, "float32", passes)
    if layout is None or layout.shared > max_shared:
        return None
    channels, out_channels = geometry.in_channels_per_group, geometry.out_channels_per_group
    batch, _, _, in_w = geometry.input_shape4
    co_tiles = -(-out_channels // layout.tile_co)
    ci_tiles = -(-channels // _kernels.GRAD_WEIGHT_TF32_COLUMNS)
    items = batch * -(-in_w // _kernels.GRAD_WEIGHT_TF32_POSITIONS)
    independent = co_tiles * ci_tiles * geometry.groups
    splits = _splits(independent, items, 4, multiprocessors, blocks_per_multiprocessor=1)
    per_split = -(-items // splits)
    splits = -(-items // per_split)
    if per_split > _kernels.INT32_LIMIT:
        return None
    scalars = (
        _i32(batch), _i32(geometry.groups), _i32(channels), _i32(out_channels), _i32(in_w), _i32(geometry.output_shape4[3]),
        _i32(geometry.kernel[1]), _i32(geometry.stride[1]), _i32(geometry.padding[1]), _i32(geometry.dilation[1]),
        _i32(layout.vectors), _i32(layout.raw_row), _i32(per_split), _i32(co_tiles), _i32(ci_tiles),
    )  # fmt: skip
    name = _kernels.grad_weight_tf32_name(index, layout.taps, passes, layout.copy, layout.fold)
    partial = _Launch("grad_weight_tf32.cu", name, _blocks_for(independent * splits), _kernels.WGMMA_THREADS, scalars, layout.shared)
    count = math.prod(geometry.weight_shape4)
    return partial, (splits,) + geometry.weight_shape4, _sum_splits_plan("float32", count, splits, multiprocessors)


# grad_weight_phase takes float32 1D grad_weight on tensor cores where every
# tap lands on one phase of grad_output (perf notes v18: P1, P4), for groups
# of at least 16 input and output channels that fit in at most
# (_S().grad_weight_phase_max_tiles_tf32 if passes == 1 else _S().grad_weight_phase_max_tiles_3xtf32) of its channel tiles.  With more (P2:
# 4 x 2 tiles) it re-reads x for every tile of output channels and
# grad_output for every tile of input channels: in 3xTF32 that measured
# slower than grad_weight_mma (P2 9.95 ms against 9.31), in TF32 faster (6.18
# against 6.65; perf notes v26).  False keeps grad_weight_mma there;
# "anywhere" lifts the size and channel rules (tests).


@functools.lru_cache(maxsize=1024)
def _grad_weight_phase_plan(geometry: Geometry, index: str, passes: int, multiprocessors: int, max_shared: int, gx: bool = False):
    """(grad_weight_phase launch, workspace shape, sum_splits launch), or None
    where it does not apply (see grad_weight_phase_layout, and with `gx`
    grad_phase_fused_layout) or does not fit in shared memory.  Two blocks a
    multiprocessor (one with 8 taps, or with `gx`: 512 threads) between the
    (group, tap chunk, channel tiles) combinations and the splits of the
    items (image, 64 positions)."""
    layout = (_kernels.grad_phase_fused_layout if gx else _kernels.grad_weight_phase_layout)(geometry)
    if layout is None or layout[4] > max_shared:
        return None
    taps, step, window, row, shared = layout
    channels, out_channels = geometry.in_channels_per_group, geometry.out_channels_per_group
    batch, _, _, in_w = geometry.input_shape4
    kernel = geometry.kernel[1]
    ci_tiles = -(-channels // _kernels.GRAD_WEIGHT_PHASE_CHANNELS)
    j_tiles = -(-out_channels // _kernels.GRAD_WEIGHT_PHASE_COLUMNS)
    tap_chunks = -(-kernel // taps)
    items = batch * -(-in_w // _kernels.GRAD_WEIGHT_PHASE_POSITIONS)
    independent = ci_tiles * j_tiles * tap_chunks * geometry.groups
    splits = _splits(independent, items, 8, multiprocessors, blocks_per_multiprocessor=1 if gx or taps > 5 else 2)
    per_split = -(-items // splits)
    splits = -(-items // per_split)
    if per_split > _kernels.INT32_LIMIT:
        return None
    scalars = (
        _i32(batch), _i32(geometry.groups), _i32(channels), _i32(out_channels), _i32(in_w), _i32(geometry.output_shape4[3]),
        _i32(kernel), _i32(geometry.stride[1]), _i32(geometry.padding[1]), _i32(step), _i32(window), _i32(row),
        _i32(per_split), _i32(ci_tiles), _i32(j_tiles), _i32(tap_chunks),
    )  # fmt: skip
    name = _kernels.grad_weight_phase_name(index, taps, passes, gx)
    threads = _kernels.GRAD_PHASE_FUSED_THREADS if gx else _kernels.GRAD_WEIGHT_PHASE_THREADS
    partial = _Launch("grad_weight_phase.cu", name, _blocks_for(independent * splits), threads, scalars, shared)
    count = math.prod(geometry.weight_shape4)
    return partial, (splits,) + geometry.weight_shape4, _sum_splits_plan("float32", count, splits, multiprocessors)


# Where both gradients would run the phase kernels (grad_input_phase and
# grad_weight_phase) and a group fits one tile of each (32 input channels, 64
# output channels, up to 3 taps), one launch of grad_weight_phase's GX build
# computes both from each staged window, reading grad_output once instead of
# twice.  Routed in "tf32" at strides above 1, where the two kernels read
# every sector of grad_output for half of its elements: P4 1.04 -> 0.81 ms.
# In "highest" (P4 1.24-1.26 against 1.22-1.25) and at stride 1 (P1 "tf32"
# 1.46 against 2.06, with 5 taps) its one block of 16 warps a
# multiprocessor, half of them on each GEMM in step, gained nothing or lost
# (perf notes v35).  False runs the two kernels; "anywhere" lifts the size,
# channel, mode and stride rules (tests).


@functools.lru_cache(maxsize=1024)
def _grad_bias_plan(s, geometry: Geometry, dtype: str, multiprocessors: int):
    """(grad_bias_partial launch, workspace shape, sum_splits launch)."""
    channels = geometry.out_channels
    plane = geometry.out_size[0] * geometry.out_size[1]
    total = geometry.batch * plane
    splits = _splits(channels, total, 16 * _kernels.BIAS_THREADS, multiprocessors, s.bias_blocks_per_multiprocessor)
    per_split = -(-total // splits)
    splits = -(-total // per_split)
    scalars = (_i32(geometry.batch), _i32(channels), _i64(plane), _i64(per_split), _i32(splits))
    partial = _Launch("grad_weight.cu", _kernels.grad_bias_name(dtype), _blocks_for(channels * splits), _kernels.BIAS_THREADS, scalars)
    return partial, (splits, channels), _sum_splits_plan(dtype, channels, splits, multiprocessors)


def _backward(grad_output, x, weight, geometry: Geometry, output_mask, precision: str, out):
    """backward's checked path, on grad_output's device: the joint families
    (both gradients in one pass) where one takes the call, then grad_weight,
    grad_input and grad_bias each from its own priority list."""
    want_input, want_weight, want_bias = output_mask
    if not geometry.batch:  # an empty batch: sums over nothing, and no kernel grid to launch
        return _empty_batch_backward(geometry, grad_output.dtype, output_mask, out)
    gy4 = _contiguous4(grad_output, geometry.output_shape4)
    dtype = _geometry.dtype_name(gy4.dtype)
    weight = cupy.ascontiguousarray(weight)
    x4 = None
    grad_input = _output(out[0], geometry.input_shape4, gy4.dtype) if want_input else None
    grad_weight = _output(out[1], geometry.weight_shape4, gy4.dtype) if want_weight else None
    if want_input or want_weight:
        x4 = _contiguous4(x, geometry.input_shape4)
        p = _problem(
            "backward", geometry, dtype, precision,
            (("grad_output", gy4), ("x", x4), ("weight", weight), ("grad_input", grad_input), ("grad_weight", grad_weight)),
            (want_input, want_weight),
        )  # fmt: skip
        family = _choose(p, _S())
        if family is not None:
            _run(family.plan(p, None), {"grad_output": gy4, "x": x4, "weight": weight, "grad_input": grad_input, "grad_weight": grad_weight})
            want_input = want_weight = False
    # grad_weight first: its main kernel needs nothing made in the call, so the
    # GPU starts on it at once, and grad_input's weight pack and launches are
    # queued while it runs
    if want_weight and grad_weight.size:
        p = _problem("grad_weight", geometry, dtype, precision, (("x", x4), ("grad_output", gy4), ("out", grad_weight)))
        _run_pass(p, {"x": x4, "grad_output": gy4, "out": grad_weight})
    if want_input and grad_input.size:
        p = _problem("grad_input", geometry, dtype, precision, (("source", gy4), ("weight", weight), ("out", grad_input)))
        _run_pass(p, {"source": gy4, "weight": weight, "out": grad_input})
    grad_bias = None
    if want_bias:
        grad_bias = _output(out[2], (geometry.out_channels,), gy4.dtype)
        if grad_bias.size:  # (an empty batch never comes here: _empty_batch_backward)
            p = _problem("grad_bias", geometry, dtype, precision, (("grad_output", gy4), ("out", grad_bias)))
            _run_pass(p, {"grad_output": gy4, "out": grad_bias})
    if grad_input is not None:
        grad_input = grad_input.reshape(geometry.user_shape(geometry.input_shape4))
    if grad_weight is not None:
        grad_weight = grad_weight.reshape(geometry.user_shape(geometry.weight_shape4, is_weight=True))
    return grad_input, grad_weight, grad_bias


# --- the kernel families (cupyconv._plan.Family), in the order of the routing
# rules above.  Each family's reject() holds every condition of its rule;
# plan() builds the launches of its runner, each array by its role: the
# pass's "source" (forward: x; grad_input: grad_output), "weight", "bias",
# "out", or for grad_weight "x" and "grad_output"; temporaries "t<k>".


def _size(shape4) -> int:
    return math.prod(shape4)


def _pass_shapes(p: Problem):
    """(source shape, output shape) of a forward or grad_input problem."""
    g = p.geometry
    return (g.input_shape4, g.output_shape4) if p.op == "forward" else (g.output_shape4, g.input_shape4)


def _gemm_index(p: Problem) -> str:
    source4, out4 = _pass_shapes(p)
    return _index_type(_size(source4), _size(out4), _size(p.geometry.weight_shape4))


def _problem_passes(p: Problem) -> int:
    return _passes(p.dtype, p.precision, p.geometry, p.op)


def _weight_dtype(p: Problem):
    return _DTYPES[p.dtype]


def _window_weight_steps(p: Problem, pass_name: str, dtype: str, fold: bool = True, round_tf32: bool = False, split: bool = False):
    """(steps, buffers) of _window_weight: the packed weight into t0."""
    split = split and dtype == "float32"
    plan, shape = _window_weight_plan(p.geometry, pass_name, dtype, fold, round_tf32 and dtype == "float32", split)
    steps = (Step(plan, ("weight", "t0")),) if math.prod(shape) else ()
    return steps, (Buffer(shape, _weight_dtype(p)),)


def _split_steps(plan_for, inputs: tuple, sizes: tuple, workspace_dtype, first: int = 0):
    """(steps, buffers) of _run_split_reduction: the partials into t<first>,
    summed into "out"."""
    partial, workspace_shape, finish = plan_for("int")
    index = _index_type(*sizes, math.prod(workspace_shape))
    if index != "int":
        partial, workspace_shape, finish = plan_for(index)
    t = f"t{first}"
    return (Step(partial, inputs + (t,)), Step(finish, (t, "out"))), (Buffer(workspace_shape, numpy.dtype(workspace_dtype)),)


_DTYPES = {name: numpy.dtype(ml_dtypes.bfloat16 if name == "bfloat16" else name) for name in _geometry.SUPPORTED_DTYPES}


class ConvTiny(Family):
    name, ops = "conv_tiny", ("forward",)

    def reject(self, p):
        out = p.output_size
        s = _S()
        if out >= min(s.small_forward_max_output, s.window_min_output, s.pack_min_output):
            return "not a small call"
        if not _tiny_routed(p.geometry, out):
            return f"more than {s.tiny_max_output} outputs or {s.tiny_max_products} products an output"
        return None

    def plan(self, p, tile):
        g = p.geometry
        index = _index_type(_size(g.input_shape4), p.output_size, _size(g.weight_shape4))
        return Plan(self.name, None, (Step(_tiny_plan(g, p.dtype, index), ("source", "weight", "bias", "out")),))


class DepthwiseForward(Family):
    name, ops = "depthwise_forward", ("forward",)

    def reject(self, p):
        return None if p.geometry.in_channels_per_group == 1 else "not depthwise (one input channel a group)"

    def plan(self, p, tile):
        g = p.geometry
        launch, first_taps = _depthwise_plan(g, p.dtype, _gemm_index(p), p.device.multiprocessors)
        return Plan(self.name, None, (Step(launch, ("source", "weight", "bias", "out", Table(first_taps))),))


class GroupedForward(Family):
    name, ops = "grouped_forward", ("forward",)

    def reject(self, p):
        return None if _grouped_forward_routed(p.geometry, p.dtype, p.precision) else "its rule (groups of few channels, large outputs) does not take it"

    def plan(self, p, tile):
        launch, taps = _grouped_forward_plan(p.geometry, p.dtype, _gemm_index(p))
        return Plan(self.name, None, (Step(launch, ("source", "weight", "bias", "out", Table(taps))),))


class ConvFold(Family):
    name, ops = "conv_fold", ("forward",)

    def _raw(self, p):
        return _S().use_fold_raw_weight and p.geometry.kernel[1] == _kernels.FOLD_TAPS and p.aligned("weight", 16)

    def _launches(self, p):
        s = _S()
        return _fold_plan(p.geometry, p.dtype, _gemm_index(p), s.fold_blocks or p.device.multiprocessors, p.device.max_shared, self._raw(p))

    def reject(self, p):
        if not _fold_applies(p.geometry, p.dtype):
            return "not a 16-bit 1D stride-8 pass of 9 to 16 taps, dilation 1, one group, rows of whole 16-byte vectors"
        if p.output_size < _S().window_min_output:
            return "output below window_min_output"
        if not p.aligned("source", 16):
            return "input not 16-byte aligned"
        if p.device.compute_capability != 90:
            return "needs compute capability 9.0"
        if self._launches(p) is None:
            return "its weight tile does not fit in shared memory, or its counts pass 32 bits"
        return None

    def plan(self, p, tile):
        launch, pack, packed_shape = self._launches(p)
        if pack is None:
            return Plan(self.name, "raw weight", (Step(launch, ("source", "weight", "bias", "out")),))
        steps = (Step(pack, ("weight", "t0")), Step(launch, ("source", "t0", "bias", "out")))
        return Plan(self.name, "packed weight", steps, (Buffer(packed_shape, _weight_dtype(p)),))


class WindowFill(Family):
    """conv_window's fill build in float32 "highest" (3xTF32)."""

    name, ops = "conv_window_fill", ("forward",)

    def reject(self, p):
        s = _S()
        if not (s.use_fill and s.use_window_fill):
            return "off (use_fill, use_window_fill)"
        if p.dtype != "float32" or _tensor_core_passes(p.dtype, p.precision) != _kernels.WINDOW_FILL_PASSES:
            return "not float32 \"highest\" on tensor cores"
        if p.output_size < s.window_min_output:
            return "output below window_min_output"
        if not p.aligned("source", 16):
            return "input not 16-byte aligned"
        if _kernels.fill_record(p.geometry, "forward") is None:
            return "no fill (stride 2 and a dilation that is a multiple of it)"
        if self._plan(p, self.heuristic(p)) is None:
            return "does not fit"
        return None

    def _plan(self, p, tile):
        return _window_plan(p.geometry, "forward", p.dtype, _gemm_index(p), tile, p.device.max_shared, _kernels.WINDOW_FILL_PASSES, True)

    def heuristic(self, p):
        return _kernels.pick_tile(_kernels.WINDOW_TILES, _gemm_rows(p.geometry, "forward"))

    def tiles(self, p):
        return tuple(t for t in _kernels.WINDOW_TUNE_TILES if self._plan(p, t))

    def tune_key(self, p):
        return "conv_window", (p.dtype, _kernels.WINDOW_FILL_PASSES, "forward", _gemm_index(p), p.geometry, "fill")

    def plan(self, p, tile):
        steps, buffers = _window_weight_steps(p, "forward", p.dtype, fold=False)
        launch, flat = self._plan(p, tile)
        return Plan(self.name, tile, steps + (Step(launch, ("source", "t0", "bias", "out", Table(flat))),), buffers)


class ConvDirect(Family):
    name, ops = "conv_direct", ("forward",)

    def reject(self, p):
        if p.output_size < _S().direct_min_output:
            return "output below direct_min_output"
        limit = _direct_limit(p.geometry, p.dtype, p.precision)
        if _products_per_output(p.geometry, "forward") > limit:
            return f"more than {limit} products an output"
        if self._plan(p, self.heuristic(p)) is None:
            return "does not fit"
        return None

    def _plan(self, p, tile):
        return _direct_plan(p.geometry, p.dtype, _gemm_index(p), tile, p.device.max_shared, p.device.multiprocessors)

    def heuristic(self, p):
        return _kernels.direct_heuristic(p.geometry.out_channels_per_group)

    def tiles(self, p):
        return tuple(t for t in _kernels.DIRECT_TILES if self._plan(p, t))

    def tune_key(self, p):
        return "conv_direct", (p.dtype, _gemm_index(p), p.geometry)

    def plan(self, p, tile):
        pack, shape = _direct_weight_plan(p.geometry, p.dtype, tile.bm)
        steps = (Step(pack, ("weight", "t0")),) if math.prod(shape) else ()
        buffers = (Buffer(shape, numpy.dtype(numpy.float64 if p.dtype == "float64" else numpy.float32)),)
        return Plan(self.name, tile, steps + (Step(self._plan(p, tile), ("source", "t0", "bias", "out")),), buffers)


class _WindowGroup(Family):
    """The 1D window kernels' common rule (_window): a tensor-core pass of a
    dtype they take, an output of window_min_output or more, a 16-byte
    aligned source."""

    ops = ("forward", "grad_input")

    def window_reject(self, p):
        passes = _problem_passes(p)
        if not passes or p.dtype not in _kernels.WINDOW_DTYPES:
            return "not on tensor cores"
        if p.output_size < _S().window_min_output:
            return "output below window_min_output"
        if not p.aligned("source", 16):
            return "source not 16-byte aligned"
        return None

    @staticmethod
    def rows(p):
        return _gemm_rows(p.geometry, p.op) * (_kernels.window_records(p.geometry, p.op) or (None, 1))[1]

    @staticmethod
    def bias(p):
        return "bias" if p.op == "forward" else None


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


class _Hopper(_WindowGroup):
    """conv_wgmma_tf32, conv_wgmma_split, conv_wgmma_resident and conv_wgmma:
    one product a pair on compute capability 9.0 (use_wgmma)."""

    def hopper_reject(self, p):
        reason = self.window_reject(p)
        if reason:
            return reason
        if not _S().use_wgmma or _problem_passes(p) != 1 or p.device.compute_capability != 90:
            return "not one product a pair on compute capability 9.0 (use_wgmma)"
        return None


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


@functools.lru_cache(maxsize=1024)
def _resident_choice(p: Problem, s):
    """conv_wgmma_resident's decision (_resident): ("fill" | "plain" |
    "split", heuristic tile), or (None, reason)."""
    g, pass_name, dtype = p.geometry, p.op, p.dtype
    index, max_shared, multiprocessors = _gemm_index(p), p.device.max_shared, p.device.multiprocessors
    fill = s.use_fill and _kernels.fill_record(g, pass_name) is not None
    if fill:
        heuristic = _resident_heuristic(g, pass_name, dtype, index, _gemm_rows(g, pass_name), max_shared, multiprocessors, True)
        fill = heuristic is not None and (s.use_resident_anywhere or _resident_routed(s, g, pass_name, dtype, heuristic, True))
    if fill:
        return "fill", heuristic
    heuristic = _resident_heuristic(g, pass_name, dtype, index, _WindowGroup.rows(p), max_shared, multiprocessors)
    if heuristic is None:
        return None, "no tile fits"
    if not (s.use_resident_anywhere or _resident_routed(s, g, pass_name, dtype, heuristic)):
        return None, "not one stride-1 phase whose rows fit its row tiles"
    if s.use_split and heuristic == _kernels.SPLIT_TILE:
        split = _resident_plan(g, pass_name, dtype, index, heuristic, max_shared, multiprocessors, split=True)
        if split is not None:
            return "split", heuristic
    return "plain", heuristic


class ConvWgmmaSplit(_Hopper):
    name = "conv_wgmma_split"

    def reject(self, p):
        reason = self.hopper_reject(p)
        if reason:
            return reason
        if not _S().use_resident:
            return "off (use_resident)"
        kind, detail = _resident_choice(p, _S())
        if kind != "split":
            return detail if kind is None else f"conv_wgmma_resident's {kind} build takes it"
        return None

    def plan(self, p, tile):
        _, heuristic = _resident_choice(p, _S())
        steps, buffers = _window_weight_steps(p, p.op, p.dtype, fold=True, round_tf32=True)
        launch, flat = _resident_plan(p.geometry, p.op, p.dtype, _gemm_index(p), heuristic, p.device.max_shared, p.device.multiprocessors, split=True)
        return Plan(self.name, heuristic, steps + (Step(launch, ("source", "t0", self.bias(p), "out", Table(flat))),), buffers)


class ConvWgmmaResident(_Hopper):
    name = "conv_wgmma_resident"

    def reject(self, p):
        reason = self.hopper_reject(p)
        if reason:
            return reason
        if not _S().use_resident:
            return "off (use_resident)"
        kind, detail = _resident_choice(p, _S())
        if kind is None:
            return detail
        if kind == "split":
            return "conv_wgmma_split takes it"
        return None

    def _fill(self, p):
        return _resident_choice(p, _S())[0] == "fill"

    def _plan(self, p, tile):
        return _resident_plan(p.geometry, p.op, p.dtype, _gemm_index(p), tile, p.device.max_shared, p.device.multiprocessors, self._fill(p))

    def heuristic(self, p):
        return _resident_choice(p, _S())[1]

    def tiles(self, p):
        return tuple(t for t in _kernels.WGMMA_TILES if self._plan(p, t))

    def tune_key(self, p):
        return "conv_wgmma_resident", (p.dtype, p.op, _gemm_index(p), p.geometry) + (("fill",) if self._fill(p) else ())

    def plan(self, p, tile):
        fill = self._fill(p)
        steps, buffers = _window_weight_steps(p, p.op, p.dtype, fold=not fill, round_tf32=True)
        launch, flat = self._plan(p, tile)
        return Plan(self.name, (tile, "fill") if fill else tile, steps + (Step(launch, ("source", "t0", self.bias(p), "out", Table(flat))),), buffers)


class ConvWgmma(_Hopper):
    name = "conv_wgmma"

    def _plan(self, p, tile):
        return _wgmma_plan(p.geometry, p.op, p.dtype, _gemm_index(p), tile, p.device.max_shared)

    def reject(self, p):
        reason = self.hopper_reject(p)
        if reason:
            return reason
        rows = self.rows(p)
        if rows > _S().wgmma_max_rows:
            return f"{rows} GEMM rows, more than wgmma_max_rows"
        if self._plan(p, self.heuristic(p)) is None:
            return "does not fit"
        taps, slices = _wgmma_work(p.geometry, p.op, p.dtype)
        if slices > 1 and taps < _S().wgmma_min_taps:
            return "several channel slices of fewer than wgmma_min_taps taps"
        return None

    def heuristic(self, p):
        return _kernels.wgmma_heuristic(self.rows(p))

    def tiles(self, p):
        return tuple(t for t in _kernels.WGMMA_TILES if self._plan(p, t))

    def tune_key(self, p):
        return "conv_wgmma", (p.dtype, p.op, _gemm_index(p), p.geometry)

    def plan(self, p, tile):
        steps, buffers = _window_weight_steps(p, p.op, p.dtype, round_tf32=True)
        launch, flat = self._plan(p, tile)
        return Plan(self.name, tile, steps + (Step(launch, ("source", "t0", self.bias(p), "out", Table(flat))),), buffers)


class ConvWgmmaX3(_WindowGroup):
    name = "conv_wgmma_x3"

    def _plan(self, p, tile):
        return _wgmma_plan(p.geometry, p.op, "float32", _gemm_index(p), tile, p.device.max_shared, 3)

    def reject(self, p):
        reason = self.window_reject(p)
        if reason:
            return reason
        s = _S()
        if not s.use_wgmma_x3 or _problem_passes(p) != 3 or p.device.compute_capability != 90:
            return "not 3xTF32 on compute capability 9.0 (use_wgmma_x3)"
        rows = self.rows(p)
        if not (s.wgmma_x3_min_rows <= rows <= s.wgmma_x3_max_rows or s.use_wgmma_x3_anywhere):
            return f"{rows} GEMM rows, outside wgmma_x3_min_rows to wgmma_x3_max_rows"
        if self.heuristic(p) is None:
            return "does not fit"
        return None

    def heuristic(self, p):
        return next((t for t in WGMMA_X3_TILES if self._plan(p, t)), None)

    def tiles(self, p):
        return tuple(t for t in _kernels.WGMMA_TILES if self._plan(p, t))

    def tune_key(self, p):
        return "conv_wgmma_x3", (p.op, _gemm_index(p), p.geometry)

    def plan(self, p, tile):
        steps, buffers = _window_weight_steps(p, p.op, "float32", split=True)
        launch, flat = self._plan(p, tile)
        return Plan(self.name, tile, steps + (Step(launch, ("source", "t0", self.bias(p), "out", Table(flat))),), buffers)


class ConvWindow(_WindowGroup):
    name = "conv_window"

    def _plan(self, p, tile):
        return _window_plan(p.geometry, p.op, p.dtype, _gemm_index(p), tile, p.device.max_shared, _problem_passes(p))

    def reject(self, p):
        reason = self.window_reject(p)
        if reason:
            return reason
        if self._plan(p, self.heuristic(p)) is None:
            return "not 1D, grad_input with a stride, too few rows, rows of part vectors, or does not fit"
        return None

    def heuristic(self, p):
        return _kernels.pick_tile(_kernels.WINDOW_TILES, self.rows(p))

    def tiles(self, p):
        return tuple(t for t in _kernels.WINDOW_TUNE_TILES if self._plan(p, t))

    def tune_key(self, p):
        return "conv_window", (p.dtype, _problem_passes(p), p.op, _gemm_index(p), p.geometry)

    def plan(self, p, tile):
        passes = _problem_passes(p)
        steps, buffers = _window_weight_steps(p, p.op, p.dtype, round_tf32=passes == 1)  # TF32: conv_window takes A as packed
        launch, flat = self._plan(p, tile)
        return Plan(self.name, tile, steps + (Step(launch, ("source", "t0", self.bias(p), "out", Table(flat))),), buffers)


class ConvGemm(Family):
    """conv_mma (tensor cores) or conv_gemm (CUDA cores): every forward pass and grad_input."""

    ops, fallback = ("forward", "grad_input"), True

    def __init__(self, tensor_cores: bool):
        self.tensor_cores = tensor_cores
        self.name = "conv_mma" if tensor_cores else "conv_gemm"

    def reject(self, p):
        if bool(_problem_passes(p)) != self.tensor_cores:
            return "on CUDA cores" if self.tensor_cores else "on tensor cores"
        return None

    def _packed(self, p):
        return _packs_weight(p.geometry, p.op, p.output_size)

    def heuristic(self, p):
        return _gemm_heuristic(p.geometry, p.op, _problem_passes(p))

    def tiles(self, p):
        passes = _problem_passes(p)
        return (_kernels.MMA_TUNE_TILES if passes == 1 else _kernels.MMA_TILES) if passes else _kernels.GEMM_TUNE_TILES

    def tune_key(self, p):
        return self.name, (p.dtype, p.op, _gemm_index(p), _problem_passes(p), self._packed(p), p.geometry)

    def plan(self, p, tile):
        packed = self._packed(p)
        launch, flat = _gemm_plan(p.geometry, p.op, p.dtype, _gemm_index(p), _problem_passes(p), packed, tile)
        bias = "bias" if p.op == "forward" else None
        if not packed:
            return Plan(self.name, tile, (Step(launch, ("source", "weight", bias, "out", Table(flat))),))
        g = p.geometry
        shape = _kernels.pack_gemm_weight(numpy.empty(g.weight_shape4[:2] + (g.kernel[0] * g.kernel[1],), numpy.uint8), g, p.op).shape
        steps = (Copy("weight", "t0", g, p.op), Step(launch, ("source", "t0", bias, "out", Table(flat))))
        return Plan(self.name, tile, steps, (Buffer(shape, _weight_dtype(p)),))


class GradInputOverlap(Family):
    """grad_input_overlap, and its float build grad_input_multicast."""

    name, ops = "grad_input_overlap", ("grad_input",)

    def _multicast(self, p):
        if p.dtype == "float32" and _S().use_grad_input_multicast and _kernels.GRAD_INPUT_MULTICAST_SHARED <= p.device.max_shared:
            return _grad_input_multicast_plan(p.geometry, _gemm_index(p), p.device.multiprocessors)
        return None

    def reject(self, p):
        if not _S().use_grad_input_overlap or p.device.compute_capability != 90:
            return "off (use_grad_input_overlap) or not compute capability 9.0"
        offsets = dict(p.alignment)
        if not _grad_input_overlap_applies(p.geometry, p.dtype, offsets["source"], offsets["out"], _problem_passes(p)):
            return "not a 1D stride-8 pass of 9 to 16 taps it takes (16-bit, or float32 \"tf32\"), or misaligned"
        if self._multicast(p) is None and _kernels.overlap_layout(p.dtype)[1] > p.device.max_shared:
            return "does not fit in shared memory"
        return None

    def plan(self, p, tile):
        multicast = self._multicast(p)
        launch, pack, packed_shape = multicast or _grad_input_overlap_plan(p.geometry, p.dtype, _gemm_index(p))
        steps = (Step(pack, ("weight", "t0")), Step(launch, ("source", "t0", "out")))
        return Plan("grad_input_multicast" if multicast else self.name, None, steps, (Buffer(packed_shape, _weight_dtype(p)),))


class Taps(Family):
    """grad_input_taps or grad_weight_taps (float: TF32, or 3xTF32)."""

    def __init__(self, pass_name: str):
        self.pass_name = pass_name
        self.name, self.ops = f"{pass_name}_taps", (pass_name,)
        self.inputs = ("source", "weight") if pass_name == "grad_input" else ("x", "grad_output")
        self.vector_for, self.candidates = {
            "grad_input": (_kernels.grad_input_taps_vector, _kernels.GRAD_INPUT_TAPS_TILES),
            "grad_weight": (_kernels.grad_weight_taps_vector, _kernels.GRAD_WEIGHT_TAPS_TILES),
        }[pass_name]

    def reject(self, p):
        passes = _problem_passes(p)
        if not passes:
            return "not on tensor cores"
        vector = self.vector_for(p.geometry, p.dtype)
        if vector is None:
            return "not a strided 1D problem with contiguous taps it takes"
        if _size(p.geometry.output_shape4) < _S().window_min_output:
            return "grad_output below window_min_output"
        if not all(p.aligned(role, vector) for role in self.inputs):
            return f"inputs not {vector}-byte aligned"
        return None

    def heuristic(self, p):
        return _kernels.pick_tile(self.candidates, p.geometry.in_channels_per_group)

    def tiles(self, p):
        return self.candidates

    def tune_key(self, p):
        return self.name, (p.dtype, _problem_passes(p), self.vector_for(p.geometry, p.dtype), p.geometry)

    def plan(self, p, tile):
        g, passes = p.geometry, _problem_passes(p)
        vector = self.vector_for(g, p.dtype)
        partial, workspace_shape, finish = _taps_plan(_S(), g, self.pass_name, p.dtype, "int", vector, p.device.multiprocessors, tile, passes)
        sizes = (_size(g.output_shape4), _size(g.weight_shape4)) if self.pass_name == "grad_input" else (_size(g.input_shape4), _size(g.output_shape4))
        index = _index_type(*sizes, p.output_size, math.prod(workspace_shape or (0,)))
        if index != "int":
            partial, workspace_shape, finish = _taps_plan(_S(), g, self.pass_name, p.dtype, index, vector, p.device.multiprocessors, tile, passes)
        if finish is None:
            return Plan(self.name, tile, (Step(partial, self.inputs + ("out", None)),))
        steps = (Step(partial, self.inputs + (None, "t0")), Step(finish, ("t0", "out")))
        return Plan(self.name, tile, steps, (Buffer(workspace_shape, numpy.dtype(numpy.float64)),))


class GradInputPhase(Family):
    name, ops = "grad_input_phase", ("grad_input",)

    def _plan(self, p):
        g = p.geometry
        index = _index_type(_size(g.output_shape4), _size(g.weight_shape4), p.output_size)
        return _grad_input_phase_plan(g, index, _problem_passes(p), p.device.max_shared)

    def reject(self, p):
        s, g = _S(), p.geometry
        passes = _problem_passes(p)
        if not passes:
            return "not on tensor cores"
        if not s.use_grad_input_phase or p.dtype != "float32" or passes not in _kernels.GRAD_INPUT_PHASE_PASSES or not p.aligned("out", 8):
            return "not float32 on tensor cores (use_grad_input_phase), or grad_input not 8-byte aligned"
        if s.use_grad_input_phase != "anywhere" and (
            _size(g.output_shape4) < s.window_min_output or (g.stride[1] == 1 and not _grad_input_phase_stride_one(g))
        ):
            return "grad_output below window_min_output, or stride 1 past its rule (grad_input_phase_stride_one)"
        if self._plan(p) is None:
            return "its taps do not land on one phase, or does not fit"
        return None

    def plan(self, p, tile):
        return Plan(self.name, None, (Step(self._plan(p), ("source", "weight", "out")),))


FORWARD = (
    ConvTiny(), DepthwiseForward(), GroupedForward(), ConvFold(), WindowFill(), ConvDirect(),
    ConvTf32Stream(), ConvTf32(), ConvWgmmaSplit(), ConvWgmmaResident(), ConvWgmma(), ConvWgmmaX3(), ConvWindow(),
    ConvGemm(True), ConvGemm(False),
)  # fmt: skip
GRAD_INPUT = (
    GradInputOverlap(), Taps("grad_input"), GradInputPhase(),
    ConvTf32(), ConvWgmmaSplit(), ConvWgmmaResident(), ConvWgmma(), ConvWgmmaX3(), ConvWindow(),
    ConvGemm(True), ConvGemm(False),
)  # fmt: skip


class _GradWeightFamily(Family):
    ops = ("grad_weight",)
    inputs = ("x", "grad_output")

    def common_reject(self, p, dtypes=None, hopper=False, aligned=True):
        g = p.geometry
        if dtypes is not None and p.dtype not in dtypes:
            return f"not {', '.join(dtypes)}"
        if hopper and p.device.compute_capability != 90:
            return "needs compute capability 9.0"
        if _size(g.output_shape4) < _S().window_min_output:
            return "grad_output below window_min_output"
        if aligned and not (p.aligned("x", 16) and p.aligned("grad_output", 16)):
            return "x or grad_output not 16-byte aligned"
        return None

    def sizes(self, p):
        g = p.geometry
        return _size(g.input_shape4), _size(g.output_shape4)


class GradWeightTf32(_GradWeightFamily):
    """grad_weight_wgmma_tf32, in one of its two places (3xTF32 first, TF32 later)."""

    def __init__(self, passes: int):
        self.passes = passes
        self.name = "grad_weight_wgmma_tf32" + ("" if passes == 1 else " (3xTF32)")

    def _plan_for(self, p):
        return lambda index: _grad_weight_tf32_plan(p.geometry, index, self.passes, p.device.multiprocessors, p.device.max_shared)

    def reject(self, p):
        passes = _problem_passes(p)
        if passes != self.passes:
            return f"not {'TF32' if self.passes == 1 else '3xTF32'}"
        if not _S().use_grad_weight_tf32 or p.dtype != "float32" or passes not in _kernels.GRAD_WEIGHT_TF32_PASSES:
            return "off (use_grad_weight_tf32), or not float32"
        reason = self.common_reject(p, hopper=True)
        if reason:
            return reason
        g = p.geometry
        if min(g.in_channels_per_group, g.out_channels_per_group) < _S().grad_weight_tf32_min_channels:
            return "fewer channels a group than grad_weight_tf32_min_channels"
        if self._plan_for(p)("int") is None:
            return "not 1D with a layout it takes, or does not fit"
        return None

    def plan(self, p, tile):
        steps, buffers = _split_steps(self._plan_for(p), self.inputs, self.sizes(p), numpy.float64)
        return Plan("grad_weight_wgmma_tf32", None, steps, buffers)


class GradWeightOverlap(_GradWeightFamily):
    """grad_weight_overlap (16-bit) and grad_weight_multicast (float32 "tf32")."""

    name = "grad_weight_overlap"

    def _copy(self, p):
        offsets = dict(p.alignment)
        return _grad_weight_overlap_copy(p.geometry, p.dtype, offsets["grad_output"], offsets["x"])

    def reject(self, p):
        if _problem_passes(p) != 1:
            return "not one product a pair"
        if not _S().use_grad_weight_overlap or p.device.compute_capability != 90:
            return "off (use_grad_weight_overlap) or not compute capability 9.0"
        if not self._copy(p):
            return "not a 1D stride-8 problem of 9 to 16 taps it takes, or misaligned"
        if p.dtype == "float32":
            if not _S().use_grad_weight_multicast or _kernels.GRAD_WEIGHT_MULTICAST_SHARED > p.device.max_shared:
                return "float32: grad_weight_multicast off or does not fit"
            if _grad_weight_multicast_plan(p.geometry, "int", p.device.multiprocessors) is None:
                return "float32: grad_weight_multicast's counts pass 32 bits"
            return None
        if _kernels.GRAD_WEIGHT_OVERLAP_SHARED > p.device.max_shared:
            return "does not fit in shared memory"
        return None

    def plan(self, p, tile):
        g, multiprocessors = p.geometry, p.device.multiprocessors
        if p.dtype == "float32":
            count = _size(g.input_shape4)
            rounded = (Step(_round_tf32_copy_plan(count), ("x", "t0")),)
            steps, buffers = _split_steps(
                lambda index: _grad_weight_multicast_plan(g, index, multiprocessors), ("t0", "grad_output"), self.sizes(p), numpy.float32, first=1
            )  # fmt: skip
            return Plan("grad_weight_multicast", None, rounded + steps, (Buffer(g.input_shape4, numpy.dtype(numpy.float32)),) + buffers)
        copy = self._copy(p)
        steps, buffers = _split_steps(
            lambda index: _grad_weight_overlap_plan(g, p.dtype, index, multiprocessors, copy), self.inputs, self.sizes(p), numpy.float32
        )  # fmt: skip
        return Plan(self.name, copy, steps, buffers)


class GradWeightWgmma(_GradWeightFamily):
    name = "grad_weight_wgmma"

    def _plan(self, p, tile, index="int"):
        return _grad_weight_wgmma_plan(p.geometry, p.dtype, index, p.device.multiprocessors, tile, p.device.max_shared)

    def reject(self, p):
        if _problem_passes(p) != 1:
            return "not one product a pair"
        if not _S().use_grad_weight_wgmma:
            return "off (use_grad_weight_wgmma)"
        reason = self.common_reject(p, _kernels.GRAD_WEIGHT_WGMMA_DTYPES, hopper=True)
        if reason:
            return reason
        if self.heuristic(p) is None:
            return "not a stride-1 1D problem it takes, or does not fit"
        return None

    def heuristic(self, p):
        # the narrowest tile that covers the group's input channels (128 at
        # most) where its taps do, then the narrower ones, widest first
        tiles = _kernels.GRAD_WEIGHT_WGMMA_TILES
        covering = [t for t in tiles if t.bn >= min(p.geometry.in_channels_per_group, tiles[-1].bn)]
        order = covering + [t for t in tiles if t not in covering][::-1]
        return next((t for t in order if self._plan(p, t)), None)

    def tiles(self, p):
        return tuple(t for t in _kernels.GRAD_WEIGHT_WGMMA_TILES if self._plan(p, t))

    def tune_key(self, p):
        return self.name, (p.dtype, p.geometry)

    def plan(self, p, tile):
        steps, buffers = _split_steps(lambda index: self._plan(p, tile, index), self.inputs, self.sizes(p), numpy.float64)
        return Plan(self.name, tile, steps, buffers)


class GradWeightWindow(_GradWeightFamily):
    name = "grad_weight_window"

    def _plan(self, p, tile, index="int"):
        return _grad_weight_window_plan(p.geometry, p.dtype, index, p.device.multiprocessors, tile, p.device.max_shared)

    def reject(self, p):
        if _problem_passes(p) != 1:
            return "not one product a pair"
        reason = self.common_reject(p, _kernels.GRAD_WEIGHT_WINDOW_DTYPES)
        if reason:
            return reason
        if self._plan(p, self.heuristic(p)) is None:
            return "not a 1D problem with a power-of-two stride it takes, or does not fit"
        return None

    def heuristic(self, p):
        g = p.geometry
        # 8 taps per block where the kernel is long or strided, else 64 channels
        return _kernels.GRAD_WEIGHT_WINDOW_TILES[0 if g.kernel[1] > 4 or g.stride[1] > 2 or g.in_channels_per_group <= 32 else 1]

    def tiles(self, p):
        return tuple(t for t in _kernels.GRAD_WEIGHT_WINDOW_TILES if self._plan(p, t))

    def tune_key(self, p):
        return self.name, (p.dtype, p.geometry)

    def plan(self, p, tile):
        x_size, gy_size = self.sizes(p)
        # (a margin: the window's vector indices run up to window_rows + 8 past grad_output's last element)
        steps, buffers = _split_steps(lambda index: self._plan(p, tile, index), self.inputs, (x_size, gy_size + (1 << 16)), numpy.float64)
        return Plan(self.name, tile, steps, buffers)


class GradWeightPhase(_GradWeightFamily):
    name = "grad_weight_phase"

    def _plan_for(self, p):
        passes = _problem_passes(p)
        return lambda index: _grad_weight_phase_plan(p.geometry, index, passes, p.device.multiprocessors, p.device.max_shared)

    def reject(self, p):
        s, g = _S(), p.geometry
        passes = _problem_passes(p)
        if not passes:
            return "not on tensor cores"
        if not s.use_grad_weight_phase or p.dtype != "float32" or passes not in _kernels.GRAD_WEIGHT_PHASE_PASSES:
            return "off (use_grad_weight_phase), or not float32"
        channels, out_channels = g.in_channels_per_group, g.out_channels_per_group
        tiles = -(-channels // _kernels.GRAD_WEIGHT_PHASE_CHANNELS) * -(-out_channels // _kernels.GRAD_WEIGHT_PHASE_COLUMNS)
        most = s.grad_weight_phase_max_tiles_tf32 if passes == 1 else s.grad_weight_phase_max_tiles_3xtf32
        if s.use_grad_weight_phase != "anywhere" and (
            _size(g.output_shape4) < s.window_min_output or min(channels, out_channels) < s.grad_weight_phase_min_channels or tiles > most
        ):
            return "grad_output below window_min_output, or channels outside its rule"
        if self._plan_for(p)("int") is None:
            return "its taps do not land on one phase, or does not fit"
        return None

    def plan(self, p, tile):
        steps, buffers = _split_steps(self._plan_for(p), ("x", "grad_output", None, None), self.sizes(p), numpy.float64)
        return Plan(self.name, None, steps, buffers)


class GradWeightGemm(_GradWeightFamily):
    """grad_weight_mma (tensor cores) or grad_weight_partial (CUDA cores): every grad_weight."""

    fallback = True

    def __init__(self, tensor_cores: bool):
        self.tensor_cores = tensor_cores
        self.name = "grad_weight_mma" if tensor_cores else "grad_weight_partial"

    def reject(self, p):
        if bool(_problem_passes(p)) != self.tensor_cores:
            return "on CUDA cores" if self.tensor_cores else "on tensor cores"
        return None

    def heuristic(self, p):
        return _kernels.pick_tile(_kernels.MMA_TILES if self.tensor_cores else _kernels.GRAD_WEIGHT_TILES, p.geometry.in_channels_per_group)

    def tiles(self, p):
        passes = _problem_passes(p)
        return (_kernels.MMA_TUNE_TILES if passes == 1 else _kernels.MMA_TILES) if passes else _kernels.GRAD_WEIGHT_TILES

    def tune_key(self, p):
        return "grad_weight", (p.dtype, _problem_passes(p), p.geometry)

    def plan(self, p, tile):
        passes = _problem_passes(p)
        steps, buffers = _split_steps(
            lambda index: _grad_weight_plan(p.geometry, p.dtype, index, p.device.multiprocessors, passes, tile), self.inputs, self.sizes(p), numpy.float64
        )  # fmt: skip
        return Plan(self.name, tile, steps, buffers)


class GradBias(Family):
    name, ops, fallback = "grad_bias", ("grad_bias",), True

    def reject(self, p):
        return None

    def plan(self, p, tile):
        partial, workspace_shape, finish = _grad_bias_plan(_S(), p.geometry, p.dtype, p.device.multiprocessors)
        steps = (Step(partial, ("grad_output", "t0")), Step(finish, ("t0", "out")))
        return Plan(self.name, None, steps, (Buffer(workspace_shape, numpy.dtype(numpy.float64)),))


GRAD_WEIGHT = (
    GradWeightTf32(3), GradWeightOverlap(), Taps("grad_weight"), GradWeightWgmma(), GradWeightWindow(), GradWeightTf32(1),
    GradWeightPhase(), GradWeightGemm(True), GradWeightGemm(False),
)  # fmt: skip
GRAD_BIAS = (GradBias(),)


# --- both gradients in one pass ("backward" problems; `wants` says which):
# roles "grad_output", "x", "weight", "grad_input", "grad_weight".


class DepthwiseBackward(Family):
    name, ops = "depthwise_backward", ("backward",)

    def reject(self, p):
        return None if _depthwise_backward_applies(p.geometry) else "not depthwise with at most 16 taps an input channel"

    def plan(self, p, tile):
        g = p.geometry
        index = _index_type(_size(g.input_shape4), _size(g.output_shape4), _size(g.weight_shape4))
        launch, workspace_shape, finish = _depthwise_backward_plan(g, p.dtype, index, p.device.multiprocessors)
        want_input, want_weight = p.wants
        args = ("grad_output", "x", "weight", "grad_input" if want_input else None, "t0" if want_weight else None)
        if not want_weight:
            return Plan(self.name, None, (Step(launch, args),))
        steps = (Step(launch, args), Step(finish, ("t0", "grad_weight")))
        return Plan(self.name, None, steps, (Buffer(workspace_shape, numpy.dtype(numpy.float64)),))


class GroupedBackward(Family):
    name, ops = "grouped_backward", ("backward",)

    def reject(self, p):
        return None if _grouped_backward_routed(p.geometry, p.dtype) else "its rule (1D, few channels a group, large inputs) does not take it"

    def plan(self, p, tile):
        g, (want_input, want_weight) = p.geometry, p.wants
        launch, workspace_shape, finish = _grouped_backward_plan(_S(), g, p.dtype, "int", p.device.multiprocessors, want_input, want_weight)
        index = _index_type(_size(g.input_shape4), _size(g.output_shape4), _size(g.weight_shape4), math.prod(workspace_shape or (0,)))
        if index != "int":
            launch, workspace_shape, finish = _grouped_backward_plan(_S(), g, p.dtype, index, p.device.multiprocessors, want_input, want_weight)
        args = ("grad_output", "x", "weight", "grad_input" if want_input else None, "t0" if want_weight else None)
        if not want_weight:
            return Plan(self.name, None, (Step(launch, args),))
        steps = (Step(launch, args), Step(finish, ("t0", "grad_weight")))
        return Plan(self.name, None, steps, (Buffer(workspace_shape, numpy.dtype(numpy.float64)),))


class PhaseBackward(Family):
    """The phase rewrite: a 1D problem whose dilation is a multiple of its
    stride as a stride-1 problem on one phase of grad_output (phase_gather)."""

    name, ops = "phase_backward", ("backward",)

    def reject(self, p):
        return None if _phase_backward_routed(p.geometry, p.dtype) is not None else "not 16-bit 1D with a dilation a multiple of the stride, large"

    def plan(self, p, tile):
        g = p.geometry
        sub, lo, hi, first = _phase_backward_routed(g, p.dtype)
        steps = []
        if _size(sub.output_shape4):
            rows = math.prod(sub.output_shape4[:3])
            chunks = -(-sub.out_size[1] // (_kernels.GATHER_THREADS * _kernels.GATHER_ELEMS))
            index = _index_type(_size(g.output_shape4), _size(sub.output_shape4))
            scalars = (_i32(g.output_shape4[3]), _i32(sub.out_size[1]), _i32(g.stride[1]), _i32(first), _i32(lo), _i32(hi), _i32(chunks))
            gather = _gather_plan(_kernels.phase_gather_name(p.dtype, index), rows * chunks, scalars)
            steps.append(Step(gather, ("grad_output", "t0")))
        offsets = dict(p.alignment)
        want_input, want_weight = p.wants
        if want_input:
            alignment = (("source", 0), ("weight", offsets["weight"]), ("out", offsets["grad_input"]))
            steps.append(Sub(p._replace(op="grad_input", geometry=sub, alignment=alignment), (("source", "t0"), ("weight", "weight"), ("out", "grad_input"))))
        if want_weight:
            alignment = (("x", offsets["x"]), ("grad_output", 0), ("out", offsets["grad_weight"]))
            steps.append(Sub(p._replace(op="grad_weight", geometry=sub, alignment=alignment), (("x", "x"), ("grad_output", "t0"), ("out", "grad_weight"))))
        return Plan(self.name, None, tuple(steps), (Buffer(sub.output_shape4, _weight_dtype(p)),))


class GradPhaseFused(Family):
    name, ops = "grad_phase_fused", ("backward",)

    def _plan_for(self, p):
        passes = _passes(p.dtype, p.precision, p.geometry, "grad_input")
        return lambda index: _grad_weight_phase_plan(p.geometry, index, passes, p.device.multiprocessors, p.device.max_shared, True)

    def reject(self, p):
        s, g = _S(), p.geometry
        if p.wants != (True, True):
            return "not both gradients"
        if not (s.use_grad_phase_fused and s.use_grad_input_phase and s.use_grad_weight_phase) or p.dtype != "float32":
            return "off (use_grad_phase_fused), or not float32"
        passes = _passes(p.dtype, p.precision, g, "grad_input")
        if passes not in _kernels.GRAD_WEIGHT_PHASE_PASSES or passes != _passes(p.dtype, p.precision, g, "grad_weight"):
            return "not the same tensor-core mode for both gradients"
        if g.batch * g.in_size[0] * g.in_size[1] == 0:
            return "no input positions"
        channels, out_channels = g.in_channels_per_group, g.out_channels_per_group
        if s.use_grad_phase_fused != "anywhere" and (
            passes != 1 or g.stride[1] == 1 or _size(g.output_shape4) < s.window_min_output or min(channels, out_channels) < s.grad_weight_phase_min_channels
        ):
            return "its rule (\"tf32\", strided, large, channels) does not take it"
        if self._plan_for(p)("int") is None:
            return "its layout does not apply, or does not fit"
        if not p.aligned("grad_input", 8):
            return "grad_input not 8-byte aligned (float2 stores)"
        return None

    def plan(self, p, tile):
        g = p.geometry
        sizes = (_size(g.input_shape4), _size(g.output_shape4), _size(g.input_shape4), _size(g.weight_shape4))
        steps, buffers = _split_steps(self._plan_for(p), ("x", "grad_output", "weight", "grad_input"), sizes, numpy.float64)
        steps = tuple(Step(s.launch, tuple("grad_weight" if a == "out" else a for a in s.args)) for s in steps)
        return Plan(self.name, None, steps, buffers)


BACKWARD = (DepthwiseBackward(), GroupedBackward(), PhaseBackward(), GradPhaseFused())
REGISTRY = {"forward": FORWARD, "grad_input": GRAD_INPUT, "grad_weight": GRAD_WEIGHT, "grad_bias": GRAD_BIAS, "backward": BACKWARD}


@functools.lru_cache(maxsize=4096)
def _choose(p: Problem, s) -> Family:
    """The first family of p's priority list that does not reject p (among
    settings.families and the fallbacks, where that is set)."""
    for family in REGISTRY[p.op]:
        if s.families is not None and family.name not in s.families and not family.fallback:
            continue
        if family.reject(p) is None:
            return family
    return None


def _device() -> Device:
    return Device(_compute_capability(), _multiprocessors(), _max_shared())


def _problem(op: str, geometry: Geometry, dtype: str, precision: str, arrays, wants=(True, True)) -> Problem:
    alignment = tuple((role, None if a is None else a.data.ptr % 256) for role, a in arrays)
    return Problem(op, geometry, dtype, precision, _device(), alignment, wants)


def _run(plan: Plan, arrays: dict) -> None:
    """The plan's steps on `arrays` (role -> array), its buffers allocated first."""
    bound = dict(arrays)
    copies = {step.dest for step in plan.steps if isinstance(step, Copy)}
    for k, buffer in enumerate(plan.buffers):
        if f"t{k}" not in copies:
            bound[f"t{k}"] = cupy.empty(buffer.shape, dtype=buffer.dtype)
    for step in plan.steps:
        if isinstance(step, Sub):
            _run_pass(step.problem, {mine: bound[theirs] for mine, theirs in step.roles})
        elif isinstance(step, Copy):
            bound[step.dest] = cupy.ascontiguousarray(_kernels.pack_gemm_weight(bound[step.source], step.geometry, step.pass_name))
            if _RECORDING.recorder is not None:  # CuPy operations, not launches: a recording would miss them
                _RECORDING.recorder.unsafe = True
        else:
            _launch(step.launch, tuple(None if a is None else _phase_table(a.flat) if isinstance(a, Table) else bound[a] for a in step.args))


def _run_pass(p: Problem, arrays: dict) -> None:
    """Chooses p's family and runs its plan with the family's heuristic tile;
    with autotuning on, the fastest of every (family, tile) candidate of the
    families that do not reject p, timed on these arrays once per device and
    signature and remembered on disk."""
    if not _autotune.enabled():
        family = _choose(p, _S())
        _run(family.plan(p, family.heuristic(p)), arrays)
        return
    family, tile = _tuned_choice(p, arrays)
    _run(family.plan(p, tile), arrays)


def _candidates(p: Problem) -> list:
    """(family, tile) for every tile of every family that takes p, in priority order."""
    found, allowed = [], _S().families
    for family in REGISTRY[p.op]:
        if allowed is not None and family.name not in allowed and not family.fallback:
            continue
        if family.reject(p) is None:
            tiles = family.tiles(p) or (family.heuristic(p),)
            found += [(family, tile) for tile in tiles]
    return found


def _tuned_choice(p: Problem, arrays: dict):
    candidates = _candidates(p)
    if len(candidates) == 1:
        return candidates[0]
    g = p.geometry
    key = (p.op, p.dtype, p.precision, g, tuple((role, None if a is None else a % 16) for role, a in p.alignment), p.device)
    memo = (cupy.cuda.Device().id, "families", key, _S())
    choice = _tuned.get(memo)
    if choice is None:
        signature = "|".join([_device_signature(), "families"] + [str(k) for k in key])
        choice = _tuned[memo] = _autotune.choose(
            signature, candidates, name=lambda c: f"{c[0].name}:{c[1]}", label=f"{p.op} {p.dtype}",
            time=lambda c: _gpu_seconds(lambda: _run(c[0].plan(p, c[1]), arrays)),
        )  # fmt: skip
    return choice


@functools.lru_cache(maxsize=1024)
def _small_forward_launch(s, p: Problem, device: int):
    """The one launch of a small forward call as a _Bound (its phase table and
    scalars in place), or None where its plan is not one launch on the call's
    arrays.  The settings `s` and `device` are part of the key."""
    family = _choose(p, s)
    plan = family.plan(p, family.heuristic(p))
    if plan.buffers or len(plan.steps) != 1 or not isinstance(plan.steps[0], Step) or plan.steps[0].args[:4] != ("source", "weight", "bias", "out"):
        return None
    launch, extra = plan.steps[0].launch, plan.steps[0].args[4:]
    tail = tuple(_phase_table(a.flat) for a in extra)
    return _Bound(launch.name, _kernel_function(launch), (launch.blocks,), (launch.threads,), tail + launch.scalars, launch.shared)


def _gather_plan(name: str, blocks: int, scalars: tuple) -> _Launch:
    return _Launch("phase_gather.cu", name, blocks, _kernels.GATHER_THREADS, scalars)
