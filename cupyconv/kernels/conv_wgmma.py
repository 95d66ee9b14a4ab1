"""conv_wgmma.cu on the host: conv_wgmma and conv_wgmma_x3, conv_wgmma_resident
(and its fill), conv_wgmma_split and grad_weight_wgmma: their tiles, sizes
as the kernels have them, names and shared-memory layouts.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple, Tuple

import numpy

from .. import settings
from .._geometry import Geometry
from .._launch import _blocks_for, _i32, _Launch
from .._plan import Plan, Problem, Step, Table
from .common import (
    CUDA_TYPE,
    ITEMSIZE,
    RESIDENT_COPY_BYTES,
    WGMMA_THREADS,
    WINDOW_DTYPES,
    _axes,
    _is_1d,
    instantiation_loop,
    resident_copy_bytes,
)
from .grad_weight import _GradWeightFamily, _split_steps, _splits, _sum_splits_plan
from .pack_weight import _window_weight_steps
from .phases import FILL_STEP, fill_record
from .rules import _gemm_index, _gemm_rows, _problem_passes
from .window import (
    _Hopper,
    _window_columns,
    _window_problem,
    _window_scalars,
    _WindowGroup,
)


class WgmmaTile(NamedTuple):
    """A conv_wgmma block: BM rows x BN columns over two warpgroups, each
    issuing wgmma.m64n128 (BM 128: they split the rows; BM 64, BN 256: the
    columns)."""

    bm: int
    bn: int

    @property
    def threads(self) -> int:
        return WGMMA_THREADS


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


def wgmma_layout(flat: tuple[int, ...], tile: WgmmaTile, dtype: str, passes: int = 1) -> tuple[int, int, int, int]:
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


# conv_wgmma_resident's launch bounds (blocks per multiprocessor) by tile:
# two where they fit in shared memory for the 64 x 256 tile only (under 128
# registers ptxas spills a few epilogue values of the 128 x 128 tile's 16-bit
# code too many; one block of it at 200-odd registers measured faster).
RESIDENT_VARIANTS = ((WGMMA_TILES[0], 1), (WGMMA_TILES[1], 1), (WGMMA_TILES[1], 2))


# conv_wgmma_resident's fill (phases.fill_record; perf notes v17): a warp
# stages FILL_ROWS[item size] rows at once over the window buffers, each of
# FILL_STEP * 128 outputs and 16 elements to spare (at most
# RESIDENT_PART_BYTES for 8 warps).  Built as conv_wgmma_resident<..., true>.
FILL_ROWS = {2: 8, 4: 4}  # conv_wgmma.cu's fill_rows<T>()


def fill_stage_bytes(dtype: str) -> int:
    """The shared memory conv_wgmma_resident's fill epilogue stages in (8
    warps; conv_wgmma.cu's fill_stage_row)."""
    item = ITEMSIZE[dtype]
    return 8 * FILL_ROWS[item] * (FILL_STEP * 128 + 16) * item


RESIDENT_RAW_BUFFERS = 3  # conv_wgmma_resident: raw window slices in flight
RESIDENT_WINDOW_BUFFERS = 2  # and transposed ones
RESIDENT_PART_BYTES = 64 * (128 + 8) * 4  # one warpgroup's staged 64 x 128 part (window_stage_row<128>)


def _resident_buffers(flat: tuple[int, ...], tile: WgmmaTile, dtype: str, channels: int) -> tuple[int, int, int, int, int]:
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


def resident_layout(flat: tuple[int, ...], tile: WgmmaTile, dtype: str, channels: int) -> tuple[int, int, int, int]:
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


def split_layout(flat: tuple[int, ...], dtype: str, channels: int) -> tuple[int, int, int, int]:
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


def wgmma_instantiations(dtype: str, index: str, passes: int) -> list[tuple[str, str]]:
    """conv_wgmma_x3's builds (passes 3) and conv_wgmma's (passes 1) for a
    window dtype."""
    names = []
    if dtype in WINDOW_DTYPES:
        if passes == 3:
            names += [("conv_wgmma.cu", wgmma_x3_name(index, t, copy)) for t in WGMMA_TILES for copy in RESIDENT_COPY_BYTES]
        if passes == 1:
            names += [("conv_wgmma.cu", wgmma_name(dtype, index, t)) for t in WGMMA_TILES]
    return names


def resident_instantiations(dtype: str, index: str, passes: int) -> list[tuple[str, str]]:
    """conv_wgmma_resident's builds (with and without the fill) and
    conv_wgmma_split's, for a window dtype and passes 1."""
    names = []
    if dtype in WINDOW_DTYPES and passes == 1:
        names += [
            ("conv_wgmma.cu", resident_name(dtype, index, t, b, copy, fill))
            for t, b in RESIDENT_VARIANTS
            for copy in RESIDENT_COPY_BYTES
            for fill in (False, True)
        ]
        names += [("conv_wgmma.cu", split_name(dtype, index, copy)) for copy in RESIDENT_COPY_BYTES] if dtype in SPLIT_DTYPES else []
    return names


def grad_weight_wgmma_instantiations(dtype: str, index: str) -> list[tuple[str, str]]:
    """grad_weight_wgmma's builds for one dtype and index type."""
    names = []
    if dtype in GRAD_WEIGHT_WGMMA_DTYPES:
        names += [
            ("conv_wgmma.cu", grad_weight_wgmma_name(dtype, index, t, copy))
            for t in GRAD_WEIGHT_WGMMA_TILES
            for copy in RESIDENT_COPY_BYTES
        ]
    return names


def instantiations() -> list[tuple[str, str]]:
    """This file's part of _kernels.all_instantiations(), in its order:
    every (file, name) of conv_wgmma.cu the library can launch."""
    return instantiation_loop(passes=(wgmma_instantiations, resident_instantiations), trailing=(grad_weight_wgmma_instantiations,))


_S = settings.current  # the routing settings in force



@functools.lru_cache(maxsize=1024)
def _wgmma_plan(geometry: Geometry, pass_name: str, dtype: str, index: str, tile, max_shared: int, passes: int = 1):
    """(conv_wgmma launch, phase records), or None where conv_wgmma cannot run
    this problem with `tile` (see _window_problem; or more window vectors
    than its threads load, or too little shared memory).  passes 3 (float):
    conv_wgmma_x3's, whose source rows need only be a whole number of its
    loads (resident_copy_bytes, as conv_wgmma_resident's copies)."""
    copy = _resident_copy(geometry, pass_name, dtype) if passes == 3 else 16
    problem = _window_problem(geometry, pass_name, dtype, copy) if copy is not None else None
    if problem is None:
        return None
    max_taps, vectors, chunk_stride, shared = wgmma_layout(problem[0], tile, dtype, passes)
    tasks = WGMMA_MAX_TASKS[ITEMSIZE[dtype]] * WGMMA_THREADS
    if vectors * WGMMA_CHUNKS > tasks or shared > max_shared:
        return None
    blocks, scalars = _window_scalars(geometry, pass_name, dtype, problem, tile, max_taps, vectors, chunk_stride)
    name = wgmma_x3_name(index, tile, copy) if passes == 3 else wgmma_name(dtype, index, tile)
    return _Launch("conv_wgmma.cu", name, blocks, tile.threads, scalars, shared), problem[0]


# conv_wgmma_resident blocks resident on a multiprocessor at once: two where
# the tile has a two-block build (RESIDENT_VARIANTS) and two fit in
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
    its copies (resident_copy_bytes).  With `fill`, its fill (the
    forward pass's one tapped phase; its columns cover every output).  With
    `split`, conv_wgmma_split's launch instead, one block a multiprocessor,
    or None where that cannot run the pass: not 16-bit on its tile, not one
    phase record with out_step 1 and no fold."""
    copy = _resident_copy(geometry, pass_name, dtype)
    problem = _window_problem(geometry, pass_name, dtype, copy, fill) if copy is not None else None
    if problem is None:
        return None
    flat, fold, red_channels, out_channels, source4, out4 = problem
    if split and (fill or dtype not in SPLIT_DTYPES or tile != SPLIT_TILE or len(flat) != 9 or fold != 1 or flat[2] != 1):
        return None
    if split:
        max_taps, vectors, chunk_stride, shared = split_layout(flat, dtype, red_channels)
    else:
        max_taps, vectors, chunk_stride, shared = resident_layout(flat, tile, dtype, red_channels)
    if shared > max_shared:
        return None
    _, scalars = _window_scalars(geometry, pass_name, dtype, problem, tile, max_taps, vectors, chunk_stride, fill)
    two = not split and (tile, 2) in RESIDENT_VARIANTS and 2 * (shared + 1024) <= SHARED_PER_MULTIPROCESSOR
    per_multiprocessor = 2 if two else 1
    row_tiles = -(-(out_channels * fold) // tile.bm) * geometry.groups
    combos = len(flat) // 9 * row_tiles
    working = sum(1 for taps in flat[7::9] if taps) * row_tiles  # a phase no tap reaches only writes the bias
    items = source4[0] * -(-_window_columns(problem, fill) // tile.bn)
    per_combo = max(1, min(items, -(-multiprocessors * per_multiprocessor // max(working, 1))))
    blocks = _blocks_for(combos * per_combo)
    if split:
        return _Launch("conv_wgmma.cu", split_name(dtype, index, copy), blocks, SPLIT_THREADS, scalars, shared), flat
    name = resident_name(dtype, index, tile, per_multiprocessor, copy, fill)
    return _Launch("conv_wgmma.cu", name, blocks, tile.threads, scalars, shared), flat


def _resident_copy(geometry: Geometry, pass_name: str, dtype: str):
    """conv_wgmma_resident's copy size for this pass's source rows, or None."""
    source4 = geometry.input_shape4 if pass_name == "forward" else geometry.output_shape4
    return resident_copy_bytes(source4[3], dtype)


@functools.lru_cache(maxsize=1024)
def _wgmma_work(geometry: Geometry, pass_name: str, dtype: str) -> Tuple[int, int]:
    """(most taps of any phase, channel slices) of a conv_wgmma block: what
    its routing rule weighs (the caller has checked that a plan exists)."""
    flat, _, red_channels, *_ = _window_problem(geometry, pass_name, dtype)
    return max(flat[7::9]), -(-red_channels // (WGMMA_CHUNKS * 16 // ITEMSIZE[dtype]))


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
    order = WGMMA_TILES if rows > 64 else WGMMA_TILES[::-1]
    for tile in order:
        if _resident_plan(geometry, pass_name, dtype, index, tile, max_shared, multiprocessors, fill) is not None:
            return tile
    return None


# conv_wgmma_x3's tiles in its heuristic's order (the wider first: perf notes v21).
WGMMA_X3_TILES = (WGMMA_TILES[1], WGMMA_TILES[0])


@functools.lru_cache(maxsize=1024)
def _grad_weight_wgmma_plan(geometry: Geometry, dtype: str, index: str, multiprocessors: int, tile, max_shared: int):
    """(grad_weight_wgmma launch, workspace shape, sum_splits launch), or
    None where it does not apply with `tile` (see grad_weight_wgmma_layout)
    or does not fit in shared memory.  One block per multiprocessor: the
    (group, output-channel tile, input-channel tile) combinations times
    enough splits of the (image, 128-position chunk) items to fill them."""
    layout = grad_weight_wgmma_layout(geometry, tile, dtype)
    if layout is None or layout[2] > max_shared:
        return None
    vectors, chunk_stride, shared, copy = layout
    channels, out_channels = geometry.in_channels_per_group, geometry.out_channels_per_group
    batch, _, _, in_w = geometry.input_shape4
    co_tiles = -(-out_channels // GRAD_WEIGHT_WGMMA_ROWS)
    ci_tiles = -(-channels // tile.bn)
    items = batch * -(-in_w // GRAD_WEIGHT_WGMMA_POSITIONS)
    independent = co_tiles * ci_tiles * geometry.groups
    splits = _splits(independent, items, 4, multiprocessors, blocks_per_multiprocessor=1)
    per_split = -(-items // splits)
    splits = -(-items // per_split)
    scalars = (
        _i32(batch), _i32(geometry.groups), _i32(channels), _i32(out_channels), _i32(in_w), _i32(geometry.output_shape4[3]),
        _i32(geometry.kernel[1]), _i32(geometry.padding[1]), _i32(geometry.dilation[1]), _i32(vectors), _i32(chunk_stride),
        _i32(per_split), _i32(co_tiles), _i32(ci_tiles),
    )  # fmt: skip
    name = grad_weight_wgmma_name(dtype, index, tile, copy)
    partial = _Launch("conv_wgmma.cu", name, _blocks_for(independent * splits), tile.threads, scalars, shared)
    count = math.prod(geometry.weight_shape4)
    return partial, (splits,) + geometry.weight_shape4, _sum_splits_plan(dtype, count, splits, multiprocessors)


@functools.lru_cache(maxsize=1024)
def _resident_choice(p: Problem, s):
    """conv_wgmma_resident's decision (_resident): ("fill" | "plain" |
    "split", heuristic tile), or (None, reason)."""
    g, pass_name, dtype = p.geometry, p.op, p.dtype
    index, max_shared, multiprocessors = _gemm_index(p), p.device.max_shared, p.device.multiprocessors
    fill = s.use_fill and fill_record(g, pass_name) is not None
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
    if s.use_split and heuristic == SPLIT_TILE:
        split = _resident_plan(g, pass_name, dtype, index, heuristic, max_shared, multiprocessors, split=True)
        if split is not None:
            return "split", heuristic
    return "plain", heuristic


class _Resident(_Hopper):
    """conv_wgmma_split and conv_wgmma_resident: one decision (_resident_choice) serves both."""

    def resident_reject(self, p, takes: tuple):
        """None where _resident_choice's build is one of `takes`, else why not."""
        reason = self.hopper_reject(p)
        if reason:
            return reason
        if not _S().use_resident:
            return "off (use_resident)"
        kind, detail = _resident_choice(p, _S())
        if kind is None:
            return detail
        return None if kind in takes else f"its {kind} build is another family's"


class ConvWgmmaSplit(_Resident):
    name = "conv_wgmma_split"

    def reject(self, p):
        return self.resident_reject(p, ("split",))

    def plan(self, p, tile):
        _, heuristic = _resident_choice(p, _S())
        steps, buffers = _window_weight_steps(p, p.op, p.dtype, fold=True, round_tf32=True)
        launch, flat = _resident_plan(p.geometry, p.op, p.dtype, _gemm_index(p), heuristic, p.device.max_shared, p.device.multiprocessors, split=True)
        return Plan(self.name, heuristic, steps + (Step(launch, ("source", "t0", self.bias(p), "out", Table(flat))),), buffers)


class ConvWgmmaResident(_Resident):
    name = "conv_wgmma_resident"

    def reject(self, p):
        return self.resident_reject(p, ("plain", "fill"))

    def _fill(self, p):
        return _resident_choice(p, _S())[0] == "fill"

    def _plan(self, p, tile):
        return _resident_plan(p.geometry, p.op, p.dtype, _gemm_index(p), tile, p.device.max_shared, p.device.multiprocessors, self._fill(p))

    def heuristic(self, p):
        return _resident_choice(p, _S())[1]

    def tiles(self, p):
        return tuple(t for t in WGMMA_TILES if self._plan(p, t))

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
        return wgmma_heuristic(self.rows(p))

    def tiles(self, p):
        return tuple(t for t in WGMMA_TILES if self._plan(p, t))

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
        return tuple(t for t in WGMMA_TILES if self._plan(p, t))

    def tune_key(self, p):
        return "conv_wgmma_x3", (p.op, _gemm_index(p), p.geometry)

    def plan(self, p, tile):
        steps, buffers = _window_weight_steps(p, p.op, "float32", split=True)
        launch, flat = self._plan(p, tile)
        return Plan(self.name, tile, steps + (Step(launch, ("source", "t0", self.bias(p), "out", Table(flat))),), buffers)


class GradWeightWgmma(_GradWeightFamily):
    name = "grad_weight_wgmma"

    def _plan(self, p, tile, index="int"):
        return _grad_weight_wgmma_plan(p.geometry, p.dtype, index, p.device.multiprocessors, tile, p.device.max_shared)

    def reject(self, p):
        if _problem_passes(p) != 1:
            return "not one product a pair"
        if not _S().use_grad_weight_wgmma:
            return "off (use_grad_weight_wgmma)"
        reason = self.common_reject(p, GRAD_WEIGHT_WGMMA_DTYPES, hopper=True)
        if reason:
            return reason
        if self.heuristic(p) is None:
            return "not a stride-1 1D problem it takes, or does not fit"
        return None

    def heuristic(self, p):
        # the narrowest tile that covers the group's input channels (128 at
        # most) where its taps do, then the narrower ones, widest first
        tiles = GRAD_WEIGHT_WGMMA_TILES
        covering = [t for t in tiles if t.bn >= min(p.geometry.in_channels_per_group, tiles[-1].bn)]
        order = covering + [t for t in tiles if t not in covering][::-1]
        return next((t for t in order if self._plan(p, t)), None)

    def tiles(self, p):
        return tuple(t for t in GRAD_WEIGHT_WGMMA_TILES if self._plan(p, t))

    def tune_key(self, p):
        return self.name, (p.dtype, p.geometry)

    def plan(self, p, tile):
        steps, buffers = _split_steps(lambda index: self._plan(p, tile, index), self.inputs, self.sizes(p), numpy.float64)
        return Plan(self.name, tile, steps, buffers)
