"""The host side of grad_weight: its families' rules and plans."""

from __future__ import annotations

import functools
import math

import numpy

from .. import _kernels, settings
from .._geometry import Geometry
from .._launch import _blocks_for, _i32, _i64, _index_type, _Launch
from .._plan import Buffer, Family, Plan, Step
from .rules import _problem_passes, _size

_S = settings.current  # the routing settings in force



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
