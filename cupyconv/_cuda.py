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
import numpy

from . import _autotune, _chunks, _geometry, _kernels, _remember, settings
from ._geometry import Geometry
from ._launch import (
    _RECORDING, _Launch, _TensorMap, _blocks_for, _compute_capability, _i32, _i64,
    _index_type, _kernel_function, _launch, _max_shared, _multiprocessors, _phase_table, _pick,
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


def _resident(source4, weight, bias, out4, geometry: Geometry, pass_name: str, index: str, dtype: str, rows: int, max_shared: int) -> bool:
    """Runs the pass with conv_wgmma_resident if it applies (its fill first,
    where that does); False if not."""
    multiprocessors = _multiprocessors()
    fill = _S().use_fill and _kernels.fill_record(geometry, pass_name) is not None
    if fill:
        fill_rows = _gemm_rows(geometry, pass_name)  # no fold
        heuristic = _resident_heuristic(geometry, pass_name, dtype, index, fill_rows, max_shared, multiprocessors, True)
        fill = heuristic is not None and (_S().use_resident_anywhere or _resident_routed(_S(), geometry, pass_name, dtype, heuristic, True))
    if not fill:
        heuristic = _resident_heuristic(geometry, pass_name, dtype, index, rows, max_shared, multiprocessors)
        if heuristic is None or not (_S().use_resident_anywhere or _resident_routed(_S(), geometry, pass_name, dtype, heuristic)):
            return False
    packed = _window_weight(weight, geometry, pass_name, dtype, fold=not fill, round_tf32=True)
    if not fill and _S().use_split and heuristic == _kernels.SPLIT_TILE:
        split = _resident_plan(geometry, pass_name, dtype, index, heuristic, max_shared, multiprocessors, split=True)
        if split is not None:
            _launch(split[0], (source4, packed, bias, out4, _phase_table(split[1])))
            return True

    def launch(tile):
        plan, flat = _resident_plan(geometry, pass_name, dtype, index, tile, max_shared, multiprocessors, fill)
        _launch(plan, (source4, packed, bias, out4, _phase_table(flat)))

    fitting = () if not _autotune.enabled() else tuple(
        t for t in _kernels.WGMMA_TILES if _resident_plan(geometry, pass_name, dtype, index, t, max_shared, multiprocessors, fill)
    )
    key = (dtype, pass_name, index, geometry) + (("fill",) if fill else ())
    launch(_pick("conv_wgmma_resident", key, fitting, heuristic, launch))
    return True


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


def _conv_tf32(source4, weight, bias, out4, geometry: Geometry, pass_name: str, index: str) -> bool:
    """Runs the pass with conv_wgmma_tf32 if it is routed (see _S().use_conv_tf32); False if not."""
    if not _S().use_conv_tf32:
        return False
    plan = _conv_tf32_plan(geometry, pass_name, index, _multiprocessors(), _max_shared())
    if plan is None:
        return False
    if _S().use_conv_tf32 != "anywhere":
        fold = (_kernels.window_records(geometry, pass_name) or (None, 1))[1]
        rows = geometry.out_channels_per_group if pass_name == "forward" else geometry.in_channels_per_group
        if (fold == 1 and rows <= _S().conv_tf32_min_rows) or 1 < fold < _S().conv_tf32_min_fold:
            return False
    packed = _window_weight(weight, geometry, pass_name, "float32", round_tf32=True)
    _launch(plan[0], (source4, packed, bias, out4))
    return True


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


def _conv_tf32_stream(x4, weight, bias, out4, geometry: Geometry, passes: int) -> bool:
    """Runs the forward pass with conv_tf32_stream (TF32: conv_tf32_multicast
    where it applies) if the rule above sends it there; False if not."""
    if not _S().use_conv_tf32_stream:
        return False
    index = _index_type(x4.size, out4.size)  # (the weight's offsets are 32-bit)
    plan = _conv_tf32_stream_plan(geometry, index, passes, _multiprocessors(), _max_shared())
    if plan is None or (plan[2] and _S().use_conv_tf32_stream != "anywhere"):
        return False
    multicast = None
    if passes == 1 and _S().use_conv_tf32_multicast:
        multicast = _conv_tf32_multicast_plan(geometry, index, _multiprocessors(), _max_shared())
    packed = _window_weight(weight, geometry, "forward", "float32", round_tf32=True, split=passes == 3)
    _launch(multicast or plan[0], (x4, packed, bias, out4))
    return True


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


def _fold(x4, weight, bias, out4, geometry: Geometry) -> bool:
    """Runs the forward pass with conv_fold if the rule above sends it there;
    False if not."""
    dtype = _geometry.dtype_name(out4.dtype)
    if not _fold_applies(geometry, dtype) or out4.size < _S().window_min_output or x4.data.ptr % 16 or _compute_capability() != 90:
        return False
    index = _index_type(x4.size, out4.size, weight.size)
    raw = _S().use_fold_raw_weight and geometry.kernel[1] == _kernels.FOLD_TAPS and weight.data.ptr % 16 == 0
    plan = _fold_plan(geometry, dtype, index, _S().fold_blocks or _multiprocessors(), _max_shared(), raw)
    if plan is None:
        return False
    launch, pack, packed_shape = plan
    if raw:
        _launch(launch, (x4, weight, bias, out4))
        return True
    packed = cupy.empty(packed_shape, dtype=weight.dtype)
    _launch(pack, (weight, packed))
    _launch(launch, (x4, packed, bias, out4))
    return True


# conv_window's fill takes the float32 "highest" forward passes that
# conv_wgmma_resident's fill takes in the other modes (stride 2, a dilation
# that is a multiple of it: P4), as 3xTF32 on tensor cores: one phase of 64
# GEMM rows, where conv_direct (FFMA) or the dilated fold (128 rows) would
# run.  Ahead of conv_direct on sums under _S().tf32x3_min_products too (P4: 96
# products an output); measured in perf notes v17.  False keeps it off.


def _window_fill(x4, weight, bias, out4, geometry: Geometry, precision: str) -> bool:
    """Runs the forward pass with conv_window's fill if the rule above sends
    it there; False if not."""
    dtype = _geometry.dtype_name(out4.dtype)
    if not (_S().use_fill and _S().use_window_fill) or dtype != "float32" or _tensor_core_passes(dtype, precision) != _kernels.WINDOW_FILL_PASSES:
        return False
    if out4.size < _S().window_min_output or x4.data.ptr % 16 or _kernels.fill_record(geometry, "forward") is None:
        return False
    index = _index_type(x4.size, out4.size, weight.size)
    max_shared, passes = _max_shared(), _kernels.WINDOW_FILL_PASSES
    heuristic = _kernels.pick_tile(_kernels.WINDOW_TILES, _gemm_rows(geometry, "forward"))
    if _window_plan(geometry, "forward", dtype, index, heuristic, max_shared, passes, True) is None:
        return False
    packed = _window_weight(weight, geometry, "forward", dtype, fold=False)

    def launch(tile):
        plan, flat = _window_plan(geometry, "forward", dtype, index, tile, max_shared, passes, True)
        _launch(plan, (x4, packed, bias, out4, _phase_table(flat)))

    fitting = () if not _autotune.enabled() else tuple(
        t for t in _kernels.WINDOW_TUNE_TILES if _window_plan(geometry, "forward", dtype, index, t, max_shared, passes, True)
    )
    launch(_pick("conv_window", (dtype, passes, "forward", index, geometry, "fill"), fitting, heuristic, launch))
    return True


def _wgmma(source4, weight, bias, out4, geometry: Geometry, pass_name: str, index: str, dtype: str, rows: int, max_shared: int) -> bool:
    """Runs the pass with conv_wgmma if it applies; False if it does not."""
    if rows > _S().wgmma_max_rows:
        return False
    heuristic = _kernels.wgmma_heuristic(rows)
    if _wgmma_plan(geometry, pass_name, dtype, index, heuristic, max_shared) is None:
        return False
    taps, slices = _wgmma_work(geometry, pass_name, dtype)
    if slices > 1 and taps < _S().wgmma_min_taps:
        return False
    packed = _window_weight(weight, geometry, pass_name, dtype, round_tf32=True)

    def launch(tile):
        plan, flat = _wgmma_plan(geometry, pass_name, dtype, index, tile, max_shared)
        _launch(plan, (source4, packed, bias, out4, _phase_table(flat)))

    fitting = () if not _autotune.enabled() else tuple(
        t for t in _kernels.WGMMA_TILES if _wgmma_plan(geometry, pass_name, dtype, index, t, max_shared)
    )
    launch(_pick("conv_wgmma", (dtype, pass_name, index, geometry), fitting, heuristic, launch))
    return True


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


def _wgmma_x3(source4, weight, bias, out4, geometry: Geometry, pass_name: str, index: str, rows: int, max_shared: int) -> bool:
    """Runs the pass with conv_wgmma_x3 if it applies; False if it does not."""
    if not (_S().wgmma_x3_min_rows <= rows <= _S().wgmma_x3_max_rows or _S().use_wgmma_x3_anywhere):
        return False
    heuristic = next((t for t in WGMMA_X3_TILES if _wgmma_plan(geometry, pass_name, "float32", index, t, max_shared, 3)), None)
    if heuristic is None:
        return False
    packed = _window_weight(weight, geometry, pass_name, "float32", split=True)

    def launch(tile):
        plan, flat = _wgmma_plan(geometry, pass_name, "float32", index, tile, max_shared, 3)
        _launch(plan, (source4, packed, bias, out4, _phase_table(flat)))

    fitting = () if not _autotune.enabled() else tuple(
        t for t in _kernels.WGMMA_TILES if _wgmma_plan(geometry, pass_name, "float32", index, t, max_shared, 3)
    )
    launch(_pick("conv_wgmma_x3", (pass_name, index, geometry), fitting, heuristic, launch))
    return True


def _window(source4, weight, bias, out4, geometry: Geometry, pass_name: str, index: str, dtype: str, passes: int = 1) -> bool:
    """Runs the pass with conv_tf32_stream (see _S().use_conv_tf32_stream),
    conv_wgmma (see _S().use_wgmma), conv_wgmma_x3 (passes 3, see _S().use_wgmma_x3)
    or conv_window (float: TF32, or 3xTF32 with passes 3) if one applies;
    False if none does."""
    if out4.size < _S().window_min_output or source4.data.ptr % 16:
        return False
    rows = _gemm_rows(geometry, pass_name) * (_kernels.window_records(geometry, pass_name) or (None, 1))[1]
    max_shared = _max_shared()
    if dtype == "float32" and pass_name == "forward" and _compute_capability() == 90 and _conv_tf32_stream(source4, weight, bias, out4, geometry, passes):
        return True
    if _S().use_wgmma and passes == 1 and _compute_capability() == 90:
        if dtype == "float32" and _conv_tf32(source4, weight, bias, out4, geometry, pass_name, index):
            return True
        if _S().use_resident and _resident(source4, weight, bias, out4, geometry, pass_name, index, dtype, rows, max_shared):
            return True
        if _wgmma(source4, weight, bias, out4, geometry, pass_name, index, dtype, rows, max_shared):
            return True
    if _S().use_wgmma_x3 and passes == 3 and _compute_capability() == 90:
        if _wgmma_x3(source4, weight, bias, out4, geometry, pass_name, index, rows, max_shared):
            return True
    heuristic = _kernels.pick_tile(_kernels.WINDOW_TILES, rows)
    if _window_plan(geometry, pass_name, dtype, index, heuristic, max_shared) is None:
        return False
    packed = _window_weight(weight, geometry, pass_name, dtype, round_tf32=passes == 1)  # TF32: conv_window takes A as packed

    def launch(tile):
        plan, flat = _window_plan(geometry, pass_name, dtype, index, tile, max_shared, passes)
        _launch(plan, (source4, packed, bias, out4, _phase_table(flat)))

    # the candidates that fit, listed only when the autotuner will time them
    fitting = () if not _autotune.enabled() else tuple(
        t for t in _kernels.WINDOW_TUNE_TILES if _window_plan(geometry, pass_name, dtype, index, t, max_shared)
    )
    launch(_pick("conv_window", (dtype, passes, pass_name, index, geometry), fitting, heuristic, launch))
    return True


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


def _taps(pass_name: str, inputs: tuple, out, gy4, geometry: Geometry, dtype: str, passes: int) -> bool:
    """Runs grad_input (inputs grad_output, weight) or grad_weight (inputs x,
    grad_output) with its taps kernel (float: TF32, or 3xTF32 with passes 3)
    if it applies; False if not.  The
    partials of a split reduction go to a float64 workspace that sum_splits
    adds, in split order, into `out`."""
    vector_for, tiles = {
        "grad_input": (_kernels.grad_input_taps_vector, _kernels.GRAD_INPUT_TAPS_TILES),
        "grad_weight": (_kernels.grad_weight_taps_vector, _kernels.GRAD_WEIGHT_TAPS_TILES),
    }[pass_name]
    vector = vector_for(geometry, dtype)
    if vector is None or gy4.size < _S().window_min_output or any(a.data.ptr % vector for a in inputs):
        return False
    multiprocessors = _multiprocessors()

    def launch(tile):
        partial, workspace_shape, finish = _taps_plan(_S(), geometry, pass_name, dtype, "int", vector, multiprocessors, tile, passes)
        index = _index_type(*(a.size for a in inputs), out.size, math.prod(workspace_shape or (0,)))
        if index != "int":
            partial, workspace_shape, finish = _taps_plan(_S(), geometry, pass_name, dtype, index, vector, multiprocessors, tile, passes)
        if finish is None:
            _launch(partial, inputs + (out, None))
        else:
            workspace = cupy.empty(workspace_shape, dtype=numpy.float64)
            _launch(partial, inputs + (None, workspace))
            _launch(finish, (workspace, out))

    heuristic = _kernels.pick_tile(tiles, geometry.in_channels_per_group)
    launch(_pick(f"{pass_name}_taps", (dtype, passes, vector, geometry), tiles if _autotune.enabled() else (), heuristic, launch))
    return True


def _grad_input_taps(gy4, weight, grad4, geometry: Geometry, dtype: str, passes: int = 1) -> bool:
    return _taps("grad_input", (gy4, weight), grad4, gy4, geometry, dtype, passes)


def _grad_weight_taps(gy4, x4, grad, geometry: Geometry, dtype: str, passes: int = 1) -> bool:
    return _taps("grad_weight", (x4, gy4), grad, gy4, geometry, dtype, passes)


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


def _grad_input_overlap_applies(geometry: Geometry, dtype: str, source4, out4, passes: int = 1) -> bool:
    itemsize = 4 if dtype == "float32" else 2
    return (
        (dtype in _kernels.OVERLAP_DTYPES or (dtype == "float32" and passes == 1)) and _kernels._is_1d(geometry) and geometry.groups == 1
        and geometry.stride[1] == 8 and geometry.dilation[1] == 1 and 8 < geometry.kernel[1] <= 16
        and geometry.padding[1] % 4 == 0 and geometry.out_size[1] % 4 == 0 and geometry.in_size[1] % 2 == 0
        and source4.data.ptr % (4 * itemsize) == 0 and out4.data.ptr % (2 * itemsize) == 0
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


def _grad_input_overlap(gy4, weight, grad4, geometry: Geometry, dtype: str, index: str, passes: int) -> bool:
    """Runs grad_input with grad_input_overlap (float: grad_input_multicast
    where routed) if it is routed and applies; False if not."""
    if not _S().use_grad_input_overlap or _compute_capability() != 90 or not _grad_input_overlap_applies(geometry, dtype, gy4, grad4, passes):
        return False
    if dtype == "float32" and _S().use_grad_input_multicast and _kernels.GRAD_INPUT_MULTICAST_SHARED <= _max_shared():
        plan = _grad_input_multicast_plan(geometry, index, _multiprocessors())
        if plan is not None:
            launch, pack, packed_shape = plan
            packed = cupy.empty(packed_shape, dtype=weight.dtype)
            _launch(pack, (weight, packed))
            _launch(launch, (gy4, packed, grad4))
            return True
    if _kernels.overlap_layout(dtype)[1] > _max_shared():
        return False
    launch, pack, packed_shape = _grad_input_overlap_plan(geometry, dtype, index)
    packed = cupy.empty(packed_shape, dtype=weight.dtype)
    _launch(pack, (weight, packed))
    _launch(launch, (gy4, packed, grad4))
    return True


def _gemm(source4, weight, bias, out4, geometry: Geometry, pass_name: str, precision: str) -> None:
    index = _index_type(source4.size, out4.size, weight.size)
    dtype = _geometry.dtype_name(out4.dtype)
    passes = _passes(dtype, precision, geometry, pass_name)
    if pass_name == "grad_input" and _grad_input_overlap(source4, weight, out4, geometry, dtype, index, passes):
        return
    if passes and pass_name == "grad_input" and _grad_input_taps(source4, weight, out4, geometry, dtype, passes):
        return
    if passes and pass_name == "grad_input" and _grad_input_phase(source4, weight, out4, geometry, dtype, passes):
        return
    if passes and dtype in _kernels.WINDOW_DTYPES and _window(source4, weight, bias, out4, geometry, pass_name, index, dtype, passes):
        return
    packed = _packs_weight(geometry, pass_name, out4.size)
    if packed:
        weight = cupy.ascontiguousarray(_kernels.pack_gemm_weight(weight, geometry, pass_name))
        if _RECORDING.recorder is not None:  # CuPy operations, not launches: a recording would miss them
            _RECORDING.recorder.unsafe = True

    def launch(tile):
        plan, flat = _gemm_plan(geometry, pass_name, dtype, index, passes, packed, tile)
        _launch(plan, (source4, weight, bias, out4, _phase_table(flat)))  # bias None: a null pointer

    heuristic = _gemm_heuristic(geometry, pass_name, passes)
    candidates = (_kernels.MMA_TUNE_TILES if passes == 1 else _kernels.MMA_TILES) if passes else _kernels.GEMM_TUNE_TILES
    launch(_pick("conv_mma" if passes else "conv_gemm", (dtype, pass_name, index, passes, packed, geometry), candidates, heuristic, launch))


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


def _grad_input_phase(gy4, weight, grad4, geometry: Geometry, dtype: str, passes: int) -> bool:
    """Runs grad_input with grad_input_phase if it is routed; False if not."""
    if not _S().use_grad_input_phase or dtype != "float32" or passes not in _kernels.GRAD_INPUT_PHASE_PASSES or grad4.data.ptr % 8:
        return False
    if _S().use_grad_input_phase != "anywhere" and (gy4.size < _S().window_min_output or (geometry.stride[1] == 1 and not _grad_input_phase_stride_one(geometry))):
        return False
    index = _index_type(gy4.size, weight.size, grad4.size)
    plan = _grad_input_phase_plan(geometry, index, passes, _max_shared())
    if plan is None:
        return False
    _launch(plan, (gy4, weight, grad4))
    return True


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


def _direct_weight(weight, geometry: Geometry, tile):
    """The weight as conv_direct reads it: (groups, KH, KW, C, M padded to the
    tile) in the accumulator type (float64 for float64, float32 otherwise),
    made in one launch of pack_direct_weight."""
    plan, shape = _direct_weight_plan(geometry, _geometry.dtype_name(weight.dtype), tile.bm)
    packed = cupy.empty(shape, dtype=numpy.float64 if weight.dtype == numpy.float64 else numpy.float32)
    if packed.size:
        _launch(plan, (weight, packed))
    return packed


def _direct(x4, weight, bias, out4, geometry: Geometry, precision: str) -> bool:
    """Runs the forward pass with conv_direct if it applies; False if not."""
    dtype = _geometry.dtype_name(out4.dtype)
    if out4.size < _S().direct_min_output or _products_per_output(geometry, "forward") > _direct_limit(geometry, dtype, precision):
        return False
    index = _index_type(x4.size, out4.size, weight.size)
    max_shared, multiprocessors = _max_shared(), _multiprocessors()
    heuristic = _kernels.direct_heuristic(geometry.out_channels_per_group)
    if _direct_plan(geometry, dtype, index, heuristic, max_shared, multiprocessors) is None:
        return False

    def launch(tile):
        plan = _direct_plan(geometry, dtype, index, tile, max_shared, multiprocessors)
        _launch(plan, (x4, _direct_weight(weight, geometry, tile), bias, out4))

    fitting = () if not _autotune.enabled() else tuple(
        t for t in _kernels.DIRECT_TILES if _direct_plan(geometry, dtype, index, t, max_shared, multiprocessors)
    )  # fmt: skip
    launch(_pick("conv_direct", (dtype, index, geometry), fitting, heuristic, launch))
    return True


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


def _depthwise(x4, weight, bias, out4, geometry: Geometry) -> None:
    index = _index_type(x4.size, out4.size, weight.size)
    plan, first_taps = _depthwise_plan(geometry, _geometry.dtype_name(out4.dtype), index, _multiprocessors())
    _launch(plan, (x4, weight, bias, out4, _phase_table(first_taps)))


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


def _grouped_forward(x4, weight, bias, out4, geometry: Geometry) -> None:
    index = _index_type(x4.size, out4.size, weight.size)
    plan, taps = _grouped_forward_plan(geometry, _geometry.dtype_name(out4.dtype), index)
    _launch(plan, (x4, weight, bias, out4, _phase_table(taps)))  # an int32 table like the phase tables


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


@functools.lru_cache(maxsize=1024)
def _small_forward_launch(s, geometry: Geometry, dtype: str, index: str, precision: str, device: int, tiny: bool) -> _Bound:
    """The one launch of a small forward pass (the decisions of forward() and
    _gemm() for an output below settings.small_forward_max_output, without
    autotuning; conv_tiny's with autotuning too).  The settings `s`, `device`
    and `tiny` (_tiny_routed) are part of the key: each changes the answer."""
    if tiny:
        plan = _tiny_plan(geometry, dtype, index)
        return _Bound(plan.name, _kernel_function(plan), (plan.blocks,), (plan.threads,), plan.scalars, plan.shared)
    if geometry.in_channels_per_group == 1:
        plan, flat = _depthwise_plan(geometry, dtype, index, _multiprocessors())
    else:
        passes = _passes(dtype, precision, geometry, "forward")
        plan, flat = _gemm_plan(geometry, "forward", dtype, index, passes, False, _gemm_heuristic(geometry, "forward", passes))
    return _Bound(plan.name, _kernel_function(plan), (plan.blocks,), (plan.threads,), (_phase_table(flat),) + plan.scalars, plan.shared)


def forward(x, weight, bias, geometry: Geometry, precision: str, out=None, fast_key=None, remember_small=None):
    """conv_transpose on CuPy arrays; returns the output in the user's shape
    (written into `out` when given).  A call with `fast_key` may be
    remembered (_remember.FAST_FORWARD); one into `out` that runs as one small
    launch on the arrays as given hands `remember_small` its _FastForward
    (the torch adapter's remembered calls).

    float16 and bfloat16, and float32 with precision "tf32", run on tensor
    cores (sm_80 and later); float64 on CUDA cores.  16-bit passes of stride
    8 with two taps a phase run conv_fold on compute capability 9.0
    (_S().use_fold).  Depthwise problems (one
    input channel per group) run a stencil kernel that accumulates in float32
    (float64 for float64) in every mode.  Large 1D problems on tensor cores
    run conv_window (see _S().window_min_output), float32 "highest" included (as
    3xTF32, _S().float32_highest; where the stride is 2 and the dilation a multiple
    of it, its fill, _S().use_window_fill); large problems whose outputs sum few
    products run conv_direct (DIRECT_MAX_PRODUCTS); tiny ones conv_tiny
    (_S().tiny_max_output); others conv_gemm/conv_mma, float32 "highest" on CUDA
    cores.
    """
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
        small = y.size < min(_S().small_forward_max_output, _S().window_min_output, _S().pack_min_output)
        tiny = small and _tiny_routed(geometry, y.size)  # conv_tiny has no tiles to tune
        if tiny or (small and not _autotune.enabled()):
            index = _index_type(x.size, y.size, weight.size)
            bound = _small_forward_launch(_S(), geometry, _geometry.dtype_name(x.dtype), index, precision, x.device.id, tiny)
            bound.function(bound.grid, bound.block, (x, weight, bias, y) + bound.tail, shared_mem=bound.shared)
            for observe in _RECORDING.observers:
                observe(bound, (x, weight, bias, y))
            if all(a is b for a, b in zip((x, weight, bias), given)):  # no copies were made, as a remembered launch takes none
                if out is None:
                    _remember_fast(fast_key, bound, y)
                elif remember_small is not None:
                    remember_small(_FastForward(bound, y.shape, y.dtype, y.data.device_id))
        else:
            x4, y4 = x.reshape(geometry.input_shape4), y.reshape(geometry.output_shape4)

            def run():
                if geometry.in_channels_per_group == 1:  # depthwise (any multiplier): a stencil, no GEMM
                    _depthwise(x4, weight, bias, y4, geometry)
                elif _grouped_forward_routed(geometry, _geometry.dtype_name(x.dtype), precision):
                    _grouped_forward(x4, weight, bias, y4, geometry)
                elif not (
                    _fold(x4, weight, bias, y4, geometry)
                    or _window_fill(x4, weight, bias, y4, geometry, precision)
                    or _direct(x4, weight, bias, y4, geometry, precision)
                ):
                    _gemm(x4, weight, bias, y4, geometry, "forward", precision)

            remember = _S().use_remembered_forward and fast_key is not None and out is None
            if remember and all(a is b for a, b in zip((x, weight, bias), given)):  # no copies were made
                _remember.remember(fast_key, _remember.FAST_FORWARD, lambda: (run(), (y,))[1], (x, weight, bias))
            else:
                run()
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
        grad_bias = _grad_bias(gy4, geometry, out[2])
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


def _backward(grad_output, x, weight, geometry: Geometry, output_mask, precision: str, out):
    """backward's checked path, on grad_output's device."""
    want_input, want_weight, want_bias = output_mask
    if not geometry.batch:  # an empty batch: sums over nothing, and no kernel grid to launch
        return _empty_batch_backward(geometry, grad_output.dtype, output_mask, out)
    gy4 = _contiguous4(grad_output, geometry.output_shape4)
    grad_input = grad_weight = grad_bias = None
    if (want_input or want_weight) and _depthwise_backward_applies(geometry):
        # one pass for both; grad_bias below
        grad_input, grad_weight = _depthwise_backward(
            gy4, _contiguous4(x, geometry.input_shape4), cupy.ascontiguousarray(weight), geometry, want_input, want_weight, out
        )
        want_input = want_weight = False
    if (want_input or want_weight) and _grouped_backward_routed(geometry, _geometry.dtype_name(gy4.dtype)):
        grad_input, grad_weight = _grouped_backward(
            gy4, _contiguous4(x, geometry.input_shape4), cupy.ascontiguousarray(weight), geometry, want_input, want_weight, out
        )
        want_input = want_weight = False
    phase = _phase_backward_routed(geometry, _geometry.dtype_name(gy4.dtype)) if want_input or want_weight else None
    if phase is not None:  # a stride-1 problem on one phase of grad_output
        sub = phase[0]
        sub_gy4 = _phase_grad_output(gy4, geometry, *phase)
        if want_input:
            grad_input = _grad_input(sub_gy4, cupy.ascontiguousarray(weight), sub, precision, out[0])
        if want_weight:
            grad_weight = _grad_weight(sub_gy4, _contiguous4(x, geometry.input_shape4), sub, precision, out[1])
        want_input = want_weight = False
    if want_input and want_weight:
        fused = _grad_phase_fused(gy4, x, weight, geometry, precision, out)
        if fused is not None:
            grad_input, grad_weight = fused
            want_input = want_weight = False
    # grad_weight first: its main kernel needs nothing made in the call, so the
    # GPU starts on it at once, and grad_input's weight pack and launches are
    # queued while it runs (launched first, the pack's few microseconds ran
    # ahead of the host, which left the GPU idle until grad_input's launch)
    if want_weight:
        grad_weight = _grad_weight(gy4, _contiguous4(x, geometry.input_shape4), geometry, precision, out[1])
    if want_input:
        grad_input = _grad_input(gy4, cupy.ascontiguousarray(weight), geometry, precision, out[0])
    if want_bias:
        grad_bias = _grad_bias(gy4, geometry, out[2])
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


def _depthwise_backward(gy4, x4, weight, geometry: Geometry, want_input: bool, want_weight: bool, out):
    """grad_input and grad_weight (each None unless wanted) of a depthwise
    problem, in one pass over grad_output and x."""
    dtype = _geometry.dtype_name(gy4.dtype)
    index = _index_type(x4.size, gy4.size, weight.size)
    launch, workspace_shape, finish = _depthwise_backward_plan(geometry, dtype, index, _multiprocessors())
    grad_input = _output(out[0], geometry.input_shape4, gy4.dtype) if want_input else None
    grad_weight = _output(out[1], geometry.weight_shape4, gy4.dtype) if want_weight else None
    workspace = cupy.empty(workspace_shape, dtype=numpy.float64) if want_weight else None
    _launch(launch, (gy4, x4, weight, grad_input, workspace))  # None: a null pointer
    if want_weight:
        _launch(finish, (workspace, grad_weight))
        grad_weight = grad_weight.reshape(geometry.user_shape(geometry.weight_shape4, is_weight=True))
    if want_input:
        grad_input = grad_input.reshape(geometry.user_shape(geometry.input_shape4))
    return grad_input, grad_weight


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


def _grouped_backward(gy4, x4, weight, geometry: Geometry, want_input: bool, want_weight: bool, out):
    """grad_input and grad_weight (each None unless wanted) of a problem
    grouped_backward takes, in one pass over grad_output and x."""
    dtype = _geometry.dtype_name(gy4.dtype)
    grad_input = _output(out[0], geometry.input_shape4, gy4.dtype) if want_input else None
    grad_weight = _output(out[1], geometry.weight_shape4, gy4.dtype) if want_weight else None
    multiprocessors = _multiprocessors()
    launch, workspace_shape, finish = _grouped_backward_plan(_S(), geometry, dtype, "int", multiprocessors, want_input, want_weight)
    index = _index_type(x4.size, gy4.size, weight.size, math.prod(workspace_shape or (0,)))
    if index != "int":
        launch, workspace_shape, finish = _grouped_backward_plan(_S(), geometry, dtype, index, multiprocessors, want_input, want_weight)
    workspace = cupy.empty(workspace_shape, dtype=numpy.float64) if want_weight else None
    _launch(launch, (gy4, x4, weight, grad_input, workspace))  # None: a null pointer
    if want_weight:
        _launch(finish, (workspace, grad_weight))
    if want_weight:
        grad_weight = grad_weight.reshape(geometry.user_shape(geometry.weight_shape4, is_weight=True))
    if want_input:
        grad_input = grad_input.reshape(geometry.user_shape(geometry.input_shape4))
    return grad_input, grad_weight


def _grad_input(gy4, weight, geometry: Geometry, precision: str, out=None):
    grad4 = _output(out, geometry.input_shape4, gy4.dtype)
    if grad4.size:
        _gemm(gy4, weight, None, grad4, geometry, "grad_input", precision)
    return grad4.reshape(geometry.user_shape(geometry.input_shape4))


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


def _run_split_reduction(plan_for, inputs: tuple, sizes: tuple, out, workspace_dtype=numpy.float64) -> None:
    """A split reduction's two launches: plan_for(index) gives (partial
    launch, workspace shape, sum_splits launch); the partials go to a
    workspace (float64; float32 where the partial kernel writes float sums
    and its sum_splits launch reads floats) that sum_splits adds, in split
    order and in double, into `out`.  The index type covers `sizes` (element
    counts the partial kernel indexes) and the workspace, whose shape does
    not depend on it."""
    partial, workspace_shape, finish = plan_for("int")
    index = _index_type(*sizes, math.prod(workspace_shape))
    if index != "int":
        partial, workspace_shape, finish = plan_for(index)
    workspace = cupy.empty(workspace_shape, dtype=workspace_dtype)
    _launch(partial, inputs + (workspace,))
    _launch(finish, (workspace, out))


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


def _grad_weight_window(gy4, x4, grad, geometry: Geometry, dtype: str) -> bool:
    """Runs grad_weight with grad_weight_window if it applies; False if not."""
    if dtype not in _kernels.GRAD_WEIGHT_WINDOW_DTYPES or gy4.size < _S().window_min_output or x4.data.ptr % 16 or gy4.data.ptr % 16:
        return False
    multiprocessors, max_shared = _multiprocessors(), _max_shared()
    # 8 taps per block where the kernel is long or strided, else 64 channels
    heuristic = _kernels.GRAD_WEIGHT_WINDOW_TILES[0 if geometry.kernel[1] > 4 or geometry.stride[1] > 2 or geometry.in_channels_per_group <= 32 else 1]
    if _grad_weight_window_plan(geometry, dtype, "int", multiprocessors, heuristic, max_shared) is None:
        return False

    def launch(tile):
        # (a margin: the window's vector indices run up to window_rows + 8 past grad_output's last element)
        _run_split_reduction(
            lambda index: _grad_weight_window_plan(geometry, dtype, index, multiprocessors, tile, max_shared),
            (x4, gy4), (x4.size, gy4.size + (1 << 16)), grad,
        )  # fmt: skip

    fitting = () if not _autotune.enabled() else tuple(
        t for t in _kernels.GRAD_WEIGHT_WINDOW_TILES if _grad_weight_window_plan(geometry, dtype, "int", multiprocessors, t, max_shared)
    )
    launch(_pick("grad_weight_window", (dtype, geometry), fitting, heuristic, launch))
    return True


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


def _grad_weight_wgmma(gy4, x4, grad, geometry: Geometry, dtype: str) -> bool:
    """Runs grad_weight with grad_weight_wgmma if it applies; False if not."""
    if not _S().use_grad_weight_wgmma or dtype not in _kernels.GRAD_WEIGHT_WGMMA_DTYPES or _compute_capability() != 90:
        return False
    if gy4.size < _S().window_min_output or x4.data.ptr % 16 or gy4.data.ptr % 16:
        return False
    multiprocessors, max_shared = _multiprocessors(), _max_shared()
    # the narrowest tile that covers the group's input channels (128 at
    # most) where its taps do, then the narrower ones, widest first
    tiles = _kernels.GRAD_WEIGHT_WGMMA_TILES
    covering = [t for t in tiles if t.bn >= min(geometry.in_channels_per_group, tiles[-1].bn)]
    order = covering + [t for t in tiles if t not in covering][::-1]
    heuristic = next((t for t in order if _grad_weight_wgmma_plan(geometry, dtype, "int", multiprocessors, t, max_shared)), None)
    if heuristic is None:
        return False

    def launch(tile):
        _run_split_reduction(
            lambda index: _grad_weight_wgmma_plan(geometry, dtype, index, multiprocessors, tile, max_shared),
            (x4, gy4), (x4.size, gy4.size), grad,
        )  # fmt: skip

    fitting = () if not _autotune.enabled() else tuple(
        t for t in tiles if _grad_weight_wgmma_plan(geometry, dtype, "int", multiprocessors, t, max_shared)
    )
    launch(_pick("grad_weight_wgmma", (dtype, geometry), fitting, heuristic, launch))
    return True


# grad_weight_overlap (grad_weight_overlap.cu, perf notes v33) takes the
# 16-bit grad_weight of the problems grad_input_overlap takes (stride 8, 9
# to 16 taps, dilation 1, one group, 1D) on compute capability 9.0: grad_output's
# rows read in place as the A operand of rows (output channel, phase).
# Warp-specialized like grad_input_overlap, one tap a consumer warpgroup over
# 256 input channels: X2's 16-bit grad_weight 0.65-0.88 -> 0.51-0.64 ms
# (H100, perf notes v37).  Its float32 "tf32" problems go to
# grad_weight_multicast (below); its float build is gone (perf notes v57).


def _grad_weight_overlap_copy(geometry: Geometry, dtype: str, gy4, x4) -> int:
    """The kernel's grad_output copy size (16 or 8 bytes; float32: grad_weight_multicast's rule, 16), or 0 where it does not apply."""
    itemsize = 4 if dtype == "float32" else 2
    if not (
        (dtype in _kernels.OVERLAP_DTYPES or dtype == "float32") and _kernels._is_1d(geometry) and geometry.groups == 1
        and geometry.stride[1] == 8 and geometry.dilation[1] == 1 and 8 < geometry.kernel[1] <= 16
        and geometry.in_size[1] * itemsize % 16 == 0 and x4.data.ptr % 16 == 0
    ):  # fmt: skip
        return 0
    for copy in (16,) if dtype == "float32" else _kernels.GRAD_WEIGHT_OVERLAP_COPIES:
        unit = copy // itemsize
        if geometry.padding[1] % unit == 0 and geometry.out_size[1] % unit == 0 and gy4.data.ptr % copy == 0:
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


def _grad_weight_multicast(gy4, x4, grad, geometry: Geometry) -> bool:
    """Runs a float grad_weight that grad_weight_overlap's rule takes (its
    16-byte copies: padding and grad_output's rows whole 16-byte quads, both
    arrays 16-byte aligned) with grad_weight_multicast if it is routed and
    applies: x rounded to TF32 into a copy, then the split reduction; False
    if not."""
    if not _S().use_grad_weight_multicast or _kernels.GRAD_WEIGHT_MULTICAST_SHARED > _max_shared():
        return False
    multiprocessors = _multiprocessors()
    if _grad_weight_multicast_plan(geometry, "int", multiprocessors) is None:
        return False
    rounded = cupy.empty(x4.shape, dtype=x4.dtype)
    _launch(_round_tf32_copy_plan(x4.size), (x4, rounded))
    _run_split_reduction(
        lambda index: _grad_weight_multicast_plan(geometry, index, multiprocessors), (rounded, gy4), (x4.size, gy4.size), grad,
        numpy.float32,  # float sums, the same values as doubles
    )
    return True


def _grad_weight_overlap(gy4, x4, grad, geometry: Geometry, dtype: str) -> bool:
    """Runs grad_weight with grad_weight_overlap (float: grad_weight_multicast
    where routed) if it is routed and applies; False if not."""
    if not _S().use_grad_weight_overlap or _compute_capability() != 90:
        return False
    copy = _grad_weight_overlap_copy(geometry, dtype, gy4, x4)
    if dtype == "float32":
        return bool(copy) and _grad_weight_multicast(gy4, x4, grad, geometry)
    if not copy or _kernels.GRAD_WEIGHT_OVERLAP_SHARED > _max_shared():
        return False
    multiprocessors = _multiprocessors()
    _run_split_reduction(
        lambda index: _grad_weight_overlap_plan(geometry, dtype, index, multiprocessors, copy), (x4, gy4), (x4.size, gy4.size), grad,
        numpy.float32,  # its partials are float sums: stored as floats, half the bytes of doubles, the same values
    )
    return True


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


def _grad_weight_tf32(gy4, x4, grad, geometry: Geometry, dtype: str, passes: int) -> bool:
    """Runs grad_weight with grad_weight_wgmma_tf32 if it is routed; False if not."""
    if not _S().use_grad_weight_tf32 or dtype != "float32" or passes not in _kernels.GRAD_WEIGHT_TF32_PASSES or _compute_capability() != 90:
        return False
    if gy4.size < _S().window_min_output or x4.data.ptr % 16 or gy4.data.ptr % 16:
        return False
    if min(geometry.in_channels_per_group, geometry.out_channels_per_group) < _S().grad_weight_tf32_min_channels:
        return False
    multiprocessors, max_shared = _multiprocessors(), _max_shared()
    if _grad_weight_tf32_plan(geometry, "int", passes, multiprocessors, max_shared) is None:
        return False
    _run_split_reduction(
        lambda index: _grad_weight_tf32_plan(geometry, index, passes, multiprocessors, max_shared), (x4, gy4), (x4.size, gy4.size), grad
    )
    return True


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


def _grad_weight_phase(gy4, x4, grad, geometry: Geometry, dtype: str, passes: int) -> bool:
    """Runs grad_weight with grad_weight_phase if it is routed; False if not."""
    if not _S().use_grad_weight_phase or dtype != "float32" or passes not in _kernels.GRAD_WEIGHT_PHASE_PASSES:
        return False
    channels, out_channels = geometry.in_channels_per_group, geometry.out_channels_per_group
    tiles = -(-channels // _kernels.GRAD_WEIGHT_PHASE_CHANNELS) * -(-out_channels // _kernels.GRAD_WEIGHT_PHASE_COLUMNS)
    if _S().use_grad_weight_phase != "anywhere" and (
        gy4.size < _S().window_min_output or min(channels, out_channels) < _S().grad_weight_phase_min_channels or tiles > (_S().grad_weight_phase_max_tiles_tf32 if passes == 1 else _S().grad_weight_phase_max_tiles_3xtf32)
    ):
        return False
    multiprocessors, max_shared = _multiprocessors(), _max_shared()
    if _grad_weight_phase_plan(geometry, "int", passes, multiprocessors, max_shared) is None:
        return False
    _run_split_reduction(
        lambda index: _grad_weight_phase_plan(geometry, index, passes, multiprocessors, max_shared), (x4, gy4, None, None), (x4.size, gy4.size), grad
    )
    return True


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


def _grad_phase_fused(gy4, x, weight, geometry: Geometry, precision: str, out):
    """(grad_input, grad_weight) from grad_weight_phase's GX build where it is
    routed, else None (nothing launched)."""
    dtype = _geometry.dtype_name(gy4.dtype)
    if not (_S().use_grad_phase_fused and _S().use_grad_input_phase and _S().use_grad_weight_phase) or dtype != "float32":
        return None
    passes = _passes(dtype, precision, geometry, "grad_input")
    if passes not in _kernels.GRAD_WEIGHT_PHASE_PASSES or passes != _passes(dtype, precision, geometry, "grad_weight"):
        return None
    if geometry.batch * geometry.in_size[0] * geometry.in_size[1] == 0:
        return None
    channels, out_channels = geometry.in_channels_per_group, geometry.out_channels_per_group
    if _S().use_grad_phase_fused != "anywhere" and (
        passes != 1 or geometry.stride[1] == 1 or gy4.size < _S().window_min_output or min(channels, out_channels) < _S().grad_weight_phase_min_channels
    ):
        return None
    multiprocessors, max_shared = _multiprocessors(), _max_shared()
    if _grad_weight_phase_plan(geometry, "int", passes, multiprocessors, max_shared, True) is None:
        return None
    grad4 = _output(out[0], geometry.input_shape4, gy4.dtype)
    if grad4.data.ptr % 8:  # float2 stores
        return None
    x4, weight = _contiguous4(x, geometry.input_shape4), cupy.ascontiguousarray(weight)
    grad = _output(out[1], geometry.weight_shape4, gy4.dtype)
    _run_split_reduction(
        lambda index: _grad_weight_phase_plan(geometry, index, passes, multiprocessors, max_shared, True),
        (x4, gy4, weight, grad4),
        (x4.size, gy4.size, grad4.size, weight.size),
        grad,
    )
    return grad4.reshape(geometry.user_shape(geometry.input_shape4)), grad.reshape(geometry.user_shape(geometry.weight_shape4, is_weight=True))


def _grad_weight(gy4, x4, geometry: Geometry, precision: str, out=None):
    """Tensor cores (one product per pair, float sums within a split) where the
    forward pass uses them too -- grad_weight_wgmma_tf32 (3xTF32),
    grad_weight_overlap, grad_weight_taps, grad_weight_wgmma, grad_weight_window,
    grad_weight_wgmma_tf32 (TF32) or grad_weight_phase where they apply,
    else grad_weight_mma; else CUDA cores with double sums."""
    dtype = _geometry.dtype_name(gy4.dtype)
    passes = _passes(dtype, precision, geometry, "grad_weight")
    grad = _output(out, geometry.weight_shape4, gy4.dtype)
    if grad.size and not (
        (passes == 3 and _grad_weight_tf32(gy4, x4, grad, geometry, dtype, passes))
        or (passes == 1 and _grad_weight_overlap(gy4, x4, grad, geometry, dtype))
        or (passes and _grad_weight_taps(gy4, x4, grad, geometry, dtype, passes))
        or (passes == 1 and (_grad_weight_wgmma(gy4, x4, grad, geometry, dtype) or _grad_weight_window(gy4, x4, grad, geometry, dtype)))
        or (passes == 1 and _grad_weight_tf32(gy4, x4, grad, geometry, dtype, passes))
        or (passes and _grad_weight_phase(gy4, x4, grad, geometry, dtype, passes))
    ):
        multiprocessors = _multiprocessors()

        def launch(tile):
            _run_split_reduction(
                lambda index: _grad_weight_plan(geometry, dtype, index, multiprocessors, passes, tile), (x4, gy4), (x4.size, gy4.size), grad
            )

        heuristic = _kernels.pick_tile(_kernels.MMA_TILES if passes else _kernels.GRAD_WEIGHT_TILES, geometry.in_channels_per_group)
        candidates = (_kernels.MMA_TUNE_TILES if passes == 1 else _kernels.MMA_TILES) if passes else _kernels.GRAD_WEIGHT_TILES
        launch(_pick("grad_weight", (dtype, passes, geometry), candidates, heuristic, launch))
    return grad.reshape(geometry.user_shape(geometry.weight_shape4, is_weight=True))


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


def _grad_bias(gy4, geometry: Geometry, out=None):
    grad = _output(out, (geometry.out_channels,), gy4.dtype)
    if grad.size:  # (an empty batch never comes here: _empty_batch_backward)
        partial, workspace_shape, finish = _grad_bias_plan(_S(), geometry, _geometry.dtype_name(gy4.dtype), _multiprocessors())
        workspace = cupy.empty(workspace_shape, dtype=numpy.float64)
        _launch(partial, (gy4, workspace))
        _launch(finish, (workspace, grad))
    return grad
