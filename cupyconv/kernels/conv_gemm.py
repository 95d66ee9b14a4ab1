"""conv_gemm.cu on the host: conv_gemm's tiles (conv_mma's are
common.MMA_TILES), the kernel names and the weight strides A reads.
"""

from __future__ import annotations

import functools
import math
from typing import Tuple

from .. import settings
from .._geometry import Geometry
from .._launch import _blocks_for, _i32, _i64, _Launch
from .._plan import Buffer, Family, Plan, Step, Table
from .common import (
    CUDA_TYPE,
    INDEX_TYPES,
    MMA_TILES,
    MMA_TUNE_TILES,
    MmaTile,
    Tile,
    instantiation_loop,
    pick_tile,
)
from .grad_weight import _splits, _sum_splits_plan
from .pack_weight import gemm_weight_plan
from .phases import forward_phases, grad_input_phases
from .rules import _gemm_index, _gemm_rows, _problem_passes, _weight_dtype

# conv_gemm tiles, chosen by the GEMM's row count (output channels per group):
# wide rows reuse each input element across more FMAs; narrow ones waste less.
GEMM_TILES = (Tile(16, 128, 16, 2, 4), Tile(32, 128, 8, 4, 4), Tile(64, 128, 8, 4, 8))
GEMM_TUNE_TILES = GEMM_TILES + (Tile(128, 64, 8, 8, 4), Tile(64, 64, 16, 4, 4))


def gemm_name(dtype: str, index: str, tile: Tile) -> str:
    return f"conv_gemm<{CUDA_TYPE[dtype]}, {index}, {tile.bm}, {tile.bn}, {tile.bk}, {tile.tm}, {tile.tn}>"


def mma_name(dtype: str, index: str, tile: MmaTile, passes: int) -> str:
    t = tile
    return f"conv_mma<{CUDA_TYPE[dtype]}, {index}, {t.bm}, {t.bn}, {t.bk}, {t.warps_m}, {t.warps_n}, {passes}>"


def mma_split_name(dtype: str, index: str, tile: MmaTile, passes: int) -> str:
    t = tile
    return f"conv_mma_split<{CUDA_TYPE[dtype]}, {index}, {t.bm}, {t.bn}, {t.bk}, {t.warps_m}, {t.warps_n}, {passes}>"


# conv_mma_split: a block of at least MMA_SPLIT_FROM_SLICES BK-deep slices is
# cut (below, the second launch costs more than the idle multiprocessors),
# into splits of at least MMA_SPLIT_MIN_SLICES (each tile's write and read back
# stay small beside its products).
MMA_SPLIT_FROM_SLICES = 32
MMA_SPLIT_MIN_SLICES = 4


def gemm_weight_strides(geometry: Geometry, pass_name: str, packed: bool = False) -> tuple[int, int, int, int]:
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


def gemm_instantiations(dtype: str, index: str) -> list[tuple[str, str]]:
    """conv_gemm's and conv_mma's builds for one dtype and index type."""
    names = [("conv_gemm.cu", gemm_name(dtype, index, t)) for t in GEMM_TUNE_TILES]
    for passes in (1, 3) if dtype == "float32" else (1,) if dtype in ("float16", "bfloat16") else ():
        names += [("conv_gemm.cu", mma_name(dtype, index, t, passes)) for t in (MMA_TUNE_TILES if passes == 1 else MMA_TILES)]
        if index == INDEX_TYPES[0]:
            names += [("conv_gemm.cu", mma_split_name(dtype, index, t, passes)) for t in MMA_TILES]
    return names


def instantiations() -> list[tuple[str, str]]:
    """This file's part of _kernels.all_instantiations(), in its order:
    every (file, name) of conv_gemm.cu the library can launch."""
    return instantiation_loop(leading=(gemm_instantiations,))


_S = settings.current  # the routing settings in force



def _packs_weight(geometry: Geometry, pass_name: str, out_size: int) -> bool:
    return out_size >= _S().pack_min_output and gemm_weight_strides(geometry, pass_name)[1] != 1


@functools.lru_cache(maxsize=1024)
def _gemm_plan(
    geometry: Geometry, pass_name: str, dtype: str, index: str, passes: int, packed: bool, tile, split_for: int = 0
) -> Tuple[_Launch, tuple, int, int]:
    """conv_gemm (passes 0) or conv_mma with `tile` over every (group, phase,
    row tile, column tile), its phase table, its splits and its output's
    elements, for the forward pass or grad_input.  split_for: the
    multiprocessors to cut the reduction for when the grid leaves some of
    them idle (conv_mma_split); 0: never cut."""
    if pass_name == "forward":
        flat, phases_h, phases_w = forward_phases(geometry)
        red_channels, out_channels = geometry.in_channels_per_group, geometry.out_channels_per_group
        source4, out4 = geometry.input_shape4, geometry.output_shape4
    else:
        flat, phases_h, phases_w = grad_input_phases(geometry)
        red_channels, out_channels = geometry.out_channels_per_group, geometry.in_channels_per_group
        source4, out4 = geometry.output_shape4, geometry.input_shape4
    w_strides = gemm_weight_strides(geometry, pass_name, packed)
    counts = flat[0::9]
    cols_h, cols_w = max(counts[:phases_h]), max(counts[phases_h:])
    batch, _, in_h, in_w = source4
    _, _, out_h, out_w = out4
    m_tiles = -(-out_channels // tile.bm)
    col_tiles = -(-(batch * cols_h * cols_w) // tile.bn)
    independent = phases_h * phases_w * m_tiles * col_tiles * geometry.groups
    splits = 1
    if split_for and passes and independent < split_for:
        taps = max(flat[9 * h + 7] for h in range(phases_h)) * max(flat[9 * (phases_h + w) + 7] for w in range(phases_w))
        slices = taps * -(-red_channels // tile.bk)
        if slices >= MMA_SPLIT_FROM_SLICES:
            splits = _splits(independent, slices, MMA_SPLIT_MIN_SLICES, split_for, blocks_per_multiprocessor=2)
    blocks = _blocks_for(independent * splits)
    scalars = (
        _i32(phases_h), _i32(phases_w), _i32(batch), _i32(geometry.groups),
        _i32(red_channels), _i32(out_channels),
        _i32(in_h), _i32(in_w), _i32(out_h), _i32(out_w), _i32(geometry.kernel[1]),
        _i64(w_strides[0]), _i64(w_strides[1]), _i64(w_strides[2]), _i64(w_strides[3]),
        _i32(cols_h), _i32(cols_w), _i32(m_tiles), _i32(col_tiles),
    )  # fmt: skip
    count = math.prod(out4)
    if splits > 1:
        name = mma_split_name(dtype, index, tile, passes)
        return _Launch("conv_gemm.cu", name, blocks, tile.threads, scalars + (_i32(splits), _i64(count))), flat, splits, count
    name = mma_name(dtype, index, tile, passes) if passes else gemm_name(dtype, index, tile)
    return _Launch("conv_gemm.cu", name, blocks, tile.threads, scalars), flat, 1, count


def _gemm_heuristic(geometry: Geometry, pass_name: str, passes: int):
    return pick_tile(MMA_TILES if passes else GEMM_TILES, _gemm_rows(geometry, pass_name))


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
        return (MMA_TUNE_TILES if passes == 1 else MMA_TILES) if passes else GEMM_TUNE_TILES

    def tune_key(self, p):
        return self.name, (p.dtype, p.op, _gemm_index(p), _problem_passes(p), self._packed(p), p.geometry)

    def _split_for(self, p):
        """The multiprocessors conv_mma_split fills: grad_input on tensor cores
        in 32-bit indices (its output has no bias to add after the sum)."""
        if not (self.tensor_cores and p.op == "grad_input" and _S().use_gemm_split and _gemm_index(p) == INDEX_TYPES[0]):
            return 0
        return p.device.multiprocessors

    def plan(self, p, tile):
        packed = self._packed(p)
        launch, flat, splits, count = _gemm_plan(p.geometry, p.op, p.dtype, _gemm_index(p), _problem_passes(p), packed, tile, self._split_for(p))
        bias = "bias" if p.op == "forward" else None
        steps, buffers, weight = [], [], "weight"
        if packed:
            pack, shape = gemm_weight_plan(p.geometry, p.op, p.dtype)
            steps.append(Step(pack, ("weight", "t0")))
            buffers.append(Buffer(shape, _weight_dtype(p)))
            weight = "t0"
        if splits == 1:
            steps.append(Step(launch, ("source", weight, bias, "out", Table(flat))))
        else:
            partial = f"t{len(buffers)}"
            buffers.append(Buffer((splits, count), "float32"))
            steps.append(Step(launch, ("source", weight, None, partial, Table(flat))))
            steps.append(Step(_sum_splits_plan(p.dtype, count, splits, p.device.multiprocessors, "float"), (partial, "out")))
        return Plan(self.name, tile, tuple(steps), tuple(buffers))
