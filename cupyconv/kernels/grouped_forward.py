"""grouped_forward.cu on the host: its builds, tiles, tap table, the problems
it takes and its shared-memory layout.
"""

from __future__ import annotations

import functools
import math
from typing import Tuple

from .. import settings
from .._geometry import Geometry
from .._launch import _i32, _Launch
from .._plan import Family, Plan, Step, Table
from .common import CUDA_TYPE, GROUPED_DTYPES, _axes, _is_1d, instantiation_loop
from .rules import _gemm_index, _tensor_core_passes

# grouped_forward (grouped_forward.cu): the forward pass of 1D problems with
# few channels per group on CUDA cores.  MG output channels a group and
# stride S are template arguments (its accumulators are MG * S * J registers).
GROUPED_FORWARD_THREADS = 128
GROUPED_FORWARD_WARPS = GROUPED_FORWARD_THREADS // 32
GROUPED_FORWARD_ACC = 64
GROUPED_FORWARD_MAX_J = 4
GROUPED_FORWARD_OUT_CHANNELS = (4, 8, 16)  # its MG
GROUPED_FORWARD_STRIDES = (1, 2, 3, 4)  # its S
GROUPED_FORWARD_MAX_CHANNELS = 16  # input channels per group it takes
GROUPED_FORWARD_MAX_TAPS = 16
GROUPED_FORWARD_MAX_SHARED = 64 * 1024  # three or more blocks a multiprocessor


def grouped_forward_name(dtype: str, index: str, out_channels: int, stride: int) -> str:
    return f"grouped_forward<{CUDA_TYPE[dtype]}, {index}, {out_channels}, {stride}>"


def grouped_forward_tile(out_channels: int, stride: int) -> tuple[int, int]:
    """(J, TILE) of grouped_forward.cu's GroupedForwardTile: steps per thread,
    input steps per block."""
    j = max(1, min(GROUPED_FORWARD_MAX_J, GROUPED_FORWARD_ACC // (out_channels * stride)))
    return j, 32 * j * GROUPED_FORWARD_WARPS


def grouped_forward_taps(geometry: Geometry) -> tuple[int, ...]:
    """grouped_forward's tap table: for stride S, S + 1 starts into the
    entries, then (k, a) per entry, the entries of phase r = (k * d) % S
    together; a = (k * d) // S is how many steps before its output's step the
    tap's input lies."""
    _, kernel, stride, _, dilation, _ = _axes(geometry)[1]
    by_phase = [[(k, k * dilation // stride) for k in range(kernel) if k * dilation % stride == r] for r in range(stride)]
    starts = [0]
    for entries in by_phase:
        starts.append(starts[-1] + len(entries))
    return tuple(starts) + tuple(v for entries in by_phase for entry in entries for v in entry)


def grouped_forward_layout(geometry: Geometry) -> tuple[int, int, int, int]:
    """(halo, x_row, tiles, shared-memory bytes) of grouped_forward: the
    weight ([k][c][m] floats), the tap table, then the larger of x's staged
    rows (C rows of x_row floats) and the sums (MG rows of S * TILE)."""
    _, kernel, stride, padding, dilation, out_w = _axes(geometry)[1]
    channels, out_channels = geometry.in_channels_per_group, geometry.out_channels_per_group
    _, tile = grouped_forward_tile(out_channels, stride)
    halo = (kernel - 1) * dilation // stride
    x_row = -(-(tile + halo) // 4) * 4
    tiles = -(-(-(-(out_w + padding) // stride)) // tile)
    head = kernel * channels * out_channels + stride + 1 + 2 * kernel
    floats = -(-head // 4) * 4 + max(channels * x_row, out_channels * stride * tile)
    return halo, x_row, tiles, 4 * floats


def grouped_forward_applies(geometry: Geometry, dtype: str) -> bool:
    """Whether grouped_forward can run this problem: 1D, 2 to
    GROUPED_FORWARD_MAX_CHANNELS input channels a group, output channels a
    group and stride among its template arguments, up to
    GROUPED_FORWARD_MAX_TAPS taps, staging within GROUPED_FORWARD_MAX_SHARED."""
    if dtype not in GROUPED_DTYPES or not _is_1d(geometry):
        return False
    _, kernel, stride, _, _, _ = _axes(geometry)[1]
    if not (
        2 <= geometry.in_channels_per_group <= GROUPED_FORWARD_MAX_CHANNELS
        and geometry.out_channels_per_group in GROUPED_FORWARD_OUT_CHANNELS
        and stride in GROUPED_FORWARD_STRIDES
        and kernel <= GROUPED_FORWARD_MAX_TAPS
    ):
        return False
    return grouped_forward_layout(geometry)[3] <= GROUPED_FORWARD_MAX_SHARED


def grouped_forward_instantiations(dtype: str, index: str) -> list[tuple[str, str]]:
    """grouped_forward's builds for one dtype and index type, by output
    channels and stride."""
    names = []
    if dtype in GROUPED_DTYPES:
        names += [
            ("grouped_forward.cu", grouped_forward_name(dtype, index, m, s))
            for m in GROUPED_FORWARD_OUT_CHANNELS
            for s in GROUPED_FORWARD_STRIDES
        ]
    return names


def instantiations() -> list[tuple[str, str]]:
    """This file's part of _kernels.all_instantiations(), in its order:
    every (file, name) of grouped_forward.cu the library can launch."""
    return instantiation_loop(trailing=(grouped_forward_instantiations,))


_S = settings.current  # the routing settings in force



def _grouped_forward_routed(geometry: Geometry, dtype: str, precision: str) -> bool:
    """Where grouped_forward runs: every problem it takes, with at least
    _S().grouped_forward_min_output outputs; in the modes of one tensor-core
    product (tf32, float16, bfloat16) only up to _S().grouped_forward_max_tc_rows
    outputs a step (MG * S), past which conv_mma is faster (perf notes v16)."""
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
    return grouped_forward_applies(geometry, dtype)


@functools.lru_cache(maxsize=1024)
def _grouped_forward_plan(geometry: Geometry, dtype: str, index: str) -> Tuple[_Launch, tuple]:
    """grouped_forward over every (image, group, tile of steps), and its tap
    table."""
    halo, x_row, tiles, shared = grouped_forward_layout(geometry)
    batch, in_w, out_w = geometry.batch, geometry.in_size[1], geometry.out_size[1]
    scalars = (
        _i32(geometry.groups), _i32(geometry.in_channels_per_group), _i32(geometry.kernel[1]), _i32(in_w), _i32(out_w),
        _i32(geometry.padding[1]), _i32(halo), _i32(x_row), _i32(tiles),
    )  # fmt: skip
    name = grouped_forward_name(dtype, index, geometry.out_channels_per_group, geometry.stride[1])
    blocks = batch * geometry.groups * tiles
    return _Launch("grouped_forward.cu", name, blocks, GROUPED_FORWARD_THREADS, scalars, shared), grouped_forward_taps(geometry)


class GroupedForward(Family):
    name, ops = "grouped_forward", ("forward",)

    def reject(self, p):
        return None if _grouped_forward_routed(p.geometry, p.dtype, p.precision) else "its rule (groups of few channels, large outputs) does not take it"

    def plan(self, p, tile):
        launch, taps = _grouped_forward_plan(p.geometry, p.dtype, _gemm_index(p))
        return Plan(self.name, None, (Step(launch, ("source", "weight", "bias", "out", Table(taps))),))
