"""grouped_backward.cu on the host: its builds, the problems it takes and its
shared-memory layout.
"""

from __future__ import annotations

import functools
import math

import numpy

from .. import settings
from .._geometry import Geometry
from .._launch import _blocks_for, _i32, _i64, _index_type, _Launch
from .._plan import Buffer, Family, Plan, Step
from .common import CUDA_TYPE, GROUPED_DTYPES, _axes, _is_1d, instantiation_loop
from .grad_weight import _sum_splits_plan
from .rules import _size

# grouped_backward (grouped_backward.cu): 1D problems with few channels per
# group, grad_input and grad_weight in one pass on CUDA cores.
GROUPED_CHANNELS = (4, 8, 16)  # its CG: input channels per group
GROUPED_THREADS = 256
GROUPED_MAX_TAPS = 8
GROUPED_X_PAD = 4
GROUPED_MAX_SPLIT_SUM = 256  # products a lane sums in float within a split
GROUPED_TILES = (512, 256, 128, 64)  # input positions per item, the longest that fits taken
GROUPED_MAX_SHARED = 100 * 1024  # two blocks a multiprocessor
GROUPED_PIPE_CHANNELS = (8, 16)  # C of the pipelined float32 build (PIPE: two cp.async staging buffers)


def grouped_backward_name(dtype: str, index: str, channels: int, taps: int, pipe: bool = False) -> str:
    return f"grouped_backward<{CUDA_TYPE[dtype]}, {index}, {channels}, {taps}{', true' if pipe else ''}>"


def grouped_backward_pipes(geometry: Geometry, dtype: str) -> bool:
    """Whether the pipelined build (PIPE) can take this grouped_backward
    problem: float32 (its cp.async copies are floats, with no conversion), C
    in GROUPED_PIPE_CHANNELS (grad_input's threads take C / 2 channels, four
    at a time) and the shortest item's two staging buffers in
    GROUPED_MAX_SHARED."""
    return (
        dtype == "float32"
        and geometry.in_channels_per_group in GROUPED_PIPE_CHANNELS
        and grouped_backward_layout(geometry, GROUPED_TILES[-1], True, True, 2)[3] <= GROUPED_MAX_SHARED
    )


def grouped_backward_applies(geometry: Geometry, dtype: str) -> bool:
    """Whether grouped_backward can run this problem: 1D, C input channels a
    group in GROUPED_CHANNELS and M output channels with C / 4 * M <= 32 (a
    warp's lanes own grad_weight's (channel quad, output channel) pairs), up
    to GROUPED_MAX_TAPS taps, and a stride short enough that the shortest
    item's staging fits in GROUPED_MAX_SHARED."""
    if dtype not in GROUPED_DTYPES or not _is_1d(geometry):
        return False
    channels, out_channels = geometry.in_channels_per_group, geometry.out_channels_per_group
    _, kernel, stride, _, dilation, _ = _axes(geometry)[1]
    span = (max(GROUPED_TILES) - 1) * stride + (kernel - 1) * dilation + 1  # the kernel divides positions below 2**20 by the stride in float
    if not (channels in GROUPED_CHANNELS and channels // 4 * out_channels <= 32 and kernel <= GROUPED_MAX_TAPS and span < 1 << 20):
        return False
    return grouped_backward_layout(geometry, GROUPED_TILES[-1], True, True)[3] <= GROUPED_MAX_SHARED  # the shortest item fits


def grouped_backward_layout(geometry: Geometry, tile: int, want_input: bool, want_weight: bool, buffers: int = 1) -> tuple[int, int, int, int]:
    """(span, phase_row, m_row, shared-memory bytes) of grouped_backward with
    `tile` input positions per item: the weight ([m][k][c], for grad_input),
    then `buffers` staging buffers (two for the pipelined build) of
    grad_output's span of positions split into `stride` phases of phase_row
    floats, m_row floats per output channel (1 more than a multiple of 32, so
    that the lanes' output channels fall in distinct banks), and the
    transposed x (for grad_weight); at least the final reduction's 32 x 4 x
    taps doubles."""
    _, kernel, stride, _, dilation, _ = _axes(geometry)[1]
    channels, out_channels = geometry.in_channels_per_group, geometry.out_channels_per_group
    span = (tile - 1) * stride + (kernel - 1) * dilation + 1
    phase_row = -(-span // stride)
    m_row = stride * phase_row + (1 - stride * phase_row) % 32
    x_floats = channels * (tile + GROUPED_X_PAD) if buffers == 2 else tile * (channels + GROUPED_X_PAD)  # pipelined: rows of positions
    staging = -(-out_channels * m_row // 4) * 4 + (x_floats if want_weight else 0)
    floats = (out_channels * kernel * channels if want_input else 0) + buffers * staging
    reduction = 32 * 4 * kernel * 8 if want_weight else 0
    return span, phase_row, m_row, max(4 * floats, reduction)


def grouped_instantiations(dtype: str, index: str) -> list[tuple[str, str]]:
    """grouped_backward's builds for one dtype and index type, by channels
    and taps, and for float32 the pipelined ones."""
    names = []
    if dtype in GROUPED_DTYPES:
        names += [
            ("grouped_backward.cu", grouped_backward_name(dtype, index, c, t))
            for c in GROUPED_CHANNELS
            for t in range(1, GROUPED_MAX_TAPS + 1)
        ]
        if dtype == "float32":
            names += [
                ("grouped_backward.cu", grouped_backward_name(dtype, index, c, t, True))
                for c in GROUPED_PIPE_CHANNELS
                for t in range(1, GROUPED_MAX_TAPS + 1)
            ]
    return names


def instantiations() -> list[tuple[str, str]]:
    """This file's part of _kernels.all_instantiations(), in its order:
    every (file, name) of grouped_backward.cu the library can launch."""
    return instantiation_loop(trailing=(grouped_instantiations,))


_S = settings.current  # the routing settings in force



def _grouped_backward_routed(geometry: Geometry, dtype: str) -> bool:
    return _S().use_grouped_backward and math.prod(geometry.input_shape4) >= _S().grouped_min_input and grouped_backward_applies(geometry, dtype)


@functools.lru_cache(maxsize=1024)
def _grouped_backward_plan(s, geometry: Geometry, dtype: str, index: str, multiprocessors: int, want_input: bool, want_weight: bool):
    """(grouped_backward launch, workspace shape or None, sum_splits launch or
    None): the pipelined build where it applies (s.grouped_pipe); the longest
    item (GROUPED_TILES) whose staging (two buffers when pipelined) fits two
    blocks a multiprocessor; splits of the (image, item) list sized for about
    four blocks a multiprocessor, and where grad_weight is wanted short enough
    that a lane sums at most GROUPED_MAX_SPLIT_SUM products in float."""
    pipe = s.grouped_pipe and grouped_backward_pipes(geometry, dtype)
    for tile in GROUPED_TILES:
        span, phase_row, m_row, shared = grouped_backward_layout(geometry, tile, want_input, want_weight, 2 if pipe else 1)
        if shared <= GROUPED_MAX_SHARED:
            break
    batch, _, _, in_w = geometry.input_shape4
    tiles = -(-in_w // tile)
    items = batch * tiles
    per_split = -(-items * geometry.groups // (4 * multiprocessors))
    if want_weight:
        per_split = min(per_split, GROUPED_MAX_SPLIT_SUM // (tile // (GROUPED_THREADS // 32)))
    per_split = max(1, per_split)
    splits = -(-items // per_split)
    scalars = (
        _i32(geometry.groups), _i32(geometry.out_channels_per_group), _i32(in_w), _i32(geometry.output_shape4[3]),
        _i32(geometry.stride[1]), _i32(geometry.padding[1]), _i32(geometry.dilation[1]),
        _i32(tile), _i32(span), _i32(phase_row), _i32(m_row), _i32(tiles), _i64(items), _i32(per_split),
    )  # fmt: skip
    name = grouped_backward_name(dtype, index, geometry.in_channels_per_group, geometry.kernel[1], pipe)
    launch = _Launch("grouped_backward.cu", name, _blocks_for(geometry.groups * splits), GROUPED_THREADS, scalars, shared)
    if not want_weight:
        return launch, None, None
    count = math.prod(geometry.weight_shape4)
    return launch, (splits,) + geometry.weight_shape4, _sum_splits_plan(dtype, count, splits, multiprocessors)


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
