"""grad_weight.cu on the host: grad_weight_partial's tiles, the names of
grad_weight_partial, grad_weight_mma, grad_bias_partial and sum_splits.
"""

from __future__ import annotations

import functools
import math

import numpy

from .. import settings
from .._geometry import Geometry
from .._launch import _blocks_for, _i32, _i64, _index_type, _Launch
from .._plan import Buffer, Family, Plan, Step
from .common import (
    CUDA_TYPE,
    MMA_TILES,
    MMA_TUNE_TILES,
    OVERLAP_DTYPES,
    MmaTile,
    Tile,
    instantiation_loop,
    pick_tile,
)
from .rules import _problem_passes, _size

# grad_weight_partial tiles, chosen by in_channels per group.
GRAD_WEIGHT_TILES = (Tile(16, 128, 16, 2, 4), Tile(32, 128, 8, 4, 4), Tile(64, 64, 8, 4, 4))
BIAS_THREADS = 256
REDUCE_THREADS = 256


def grad_weight_name(dtype: str, index: str, tile: Tile) -> str:
    return f"grad_weight_partial<{CUDA_TYPE[dtype]}, {index}, {tile.bm}, {tile.bn}, {tile.bk}, {tile.tm}, {tile.tn}>"


def grad_weight_mma_name(dtype: str, index: str, tile: MmaTile, passes: int = 1) -> str:
    t = tile
    return f"grad_weight_mma<{CUDA_TYPE[dtype]}, {index}, {t.bm}, {t.bn}, {t.bk}, {t.warps_m}, {t.warps_n}, {passes}>"


def grad_bias_name(dtype: str) -> str:
    return f"grad_bias_partial<{CUDA_TYPE[dtype]}, {BIAS_THREADS}>"


def sum_splits_name(dtype: str, workspace: str = "double") -> str:
    return f"sum_splits<{CUDA_TYPE[dtype]}, {workspace}>"


def partial_instantiations(dtype: str, index: str) -> list[tuple[str, str]]:
    """grad_weight_partial's builds for one dtype and index type."""
    return [("grad_weight.cu", grad_weight_name(dtype, index, t)) for t in GRAD_WEIGHT_TILES]


def mma_instantiations(dtype: str, index: str) -> list[tuple[str, str]]:
    """grad_weight_mma's builds for one dtype and index type: every tuned
    tile in one pass (not float64), and for float32 MMA_TILES in 3xTF32."""
    names = []
    if dtype != "float64":
        names += [("grad_weight.cu", grad_weight_mma_name(dtype, index, t)) for t in MMA_TUNE_TILES]
    if dtype == "float32":
        names += [("grad_weight.cu", grad_weight_mma_name(dtype, index, t, 3)) for t in MMA_TILES]
    return names


def reduction_instantiations(dtype: str) -> list[tuple[str, str]]:
    """grad_bias_partial's and sum_splits' builds for one dtype."""
    names = [("grad_weight.cu", grad_bias_name(dtype)), ("grad_weight.cu", sum_splits_name(dtype))]
    if dtype in OVERLAP_DTYPES or dtype == "float32":  # grad_weight_overlap's float partials
        names.append(("grad_weight.cu", sum_splits_name(dtype, "float")))
    return names


def instantiations() -> list[tuple[str, str]]:
    """This file's part of _kernels.all_instantiations(), in its order:
    every (file, name) of grad_weight.cu the library can launch."""
    return instantiation_loop(trailing=(partial_instantiations, mma_instantiations), per_dtype=(reduction_instantiations,))


_S = settings.current  # the routing settings in force



def _splits(independent_blocks: int, positions: int, min_positions: int, multiprocessors: int, blocks_per_multiprocessor: int = 4) -> int:
    """How many pieces to cut a reduction of `positions` into: enough blocks to
    keep every multiprocessor busy, none shorter than min_positions."""
    wanted = -(-blocks_per_multiprocessor * multiprocessors // max(independent_blocks, 1))
    return max(1, min(wanted, positions // max(min_positions, 1)))


def _sum_splits_plan(dtype: str, count: int, splits: int, multiprocessors: int, workspace: str = "double") -> _Launch:
    blocks = max(1, min(-(-count // REDUCE_THREADS), 8 * multiprocessors))
    name = sum_splits_name(dtype, workspace)
    return _Launch("grad_weight.cu", name, blocks, REDUCE_THREADS, (_i64(count), _i32(splits)))


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
    name = grad_weight_mma_name(dtype, index, tile, passes) if passes else grad_weight_name(dtype, index, tile)
    partial = _Launch("grad_weight.cu", name, blocks, tile.threads, scalars)
    count = math.prod(geometry.weight_shape4)
    return partial, workspace_shape, _sum_splits_plan(dtype, count, splits, multiprocessors)


@functools.lru_cache(maxsize=1024)
def _grad_bias_plan(s, geometry: Geometry, dtype: str, multiprocessors: int):
    """(grad_bias_partial launch, workspace shape, sum_splits launch)."""
    channels = geometry.out_channels
    plane = geometry.out_size[0] * geometry.out_size[1]
    total = geometry.batch * plane
    splits = _splits(channels, total, 16 * BIAS_THREADS, multiprocessors, s.bias_blocks_per_multiprocessor)
    per_split = -(-total // splits)
    splits = -(-total // per_split)
    scalars = (_i32(geometry.batch), _i32(channels), _i64(plane), _i64(per_split), _i32(splits))
    partial = _Launch("grad_weight.cu", grad_bias_name(dtype), _blocks_for(channels * splits), BIAS_THREADS, scalars)
    return partial, (splits, channels), _sum_splits_plan(dtype, channels, splits, multiprocessors)


def _split_steps(plan_for, inputs: tuple, sizes: tuple, workspace_dtype, first: int = 0):
    """(steps, buffers) of _run_split_reduction: the partials into t<first>,
    summed into "out"."""
    partial, workspace_shape, finish = plan_for("int")
    index = _index_type(*sizes, math.prod(workspace_shape))
    if index != "int":
        partial, workspace_shape, finish = plan_for(index)
    t = f"t{first}"
    return (Step(partial, inputs + (t,)), Step(finish, (t, "out"))), (Buffer(workspace_shape, numpy.dtype(workspace_dtype)),)


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
        return pick_tile(MMA_TILES if self.tensor_cores else GRAD_WEIGHT_TILES, p.geometry.in_channels_per_group)

    def tiles(self, p):
        passes = _problem_passes(p)
        return (MMA_TUNE_TILES if passes == 1 else MMA_TILES) if passes else GRAD_WEIGHT_TILES

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
