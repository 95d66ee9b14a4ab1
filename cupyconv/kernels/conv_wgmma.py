"""The host side of conv_wgmma: its families' rules and plans."""

from __future__ import annotations

import functools
import math
from typing import Tuple

import numpy

from .. import _kernels, settings
from .._geometry import Geometry
from .._launch import _blocks_for, _i32, _Launch
from .._plan import Plan, Problem, Step, Table
from .grad_weight import _GradWeightFamily, _split_steps, _splits, _sum_splits_plan
from .pack_weight import _window_weight_steps
from .rules import _gemm_index, _gemm_rows, _problem_passes
from .window import (
    _Hopper,
    _window_columns,
    _window_problem,
    _window_scalars,
    _WindowGroup,
)

_S = settings.current  # the routing settings in force



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
def _wgmma_work(geometry: Geometry, pass_name: str, dtype: str) -> Tuple[int, int]:
    """(most taps of any phase, channel slices) of a conv_wgmma block: what
    its routing rule weighs (the caller has checked that a plan exists)."""
    flat, _, red_channels, *_ = _window_problem(geometry, pass_name, dtype)
    return max(flat[7::9]), -(-red_channels // (_kernels.WGMMA_CHUNKS * 16 // _kernels.ITEMSIZE[dtype]))


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
