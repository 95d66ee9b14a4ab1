"""The host side of grouped_forward: its families' rules and plans."""

from __future__ import annotations

import functools
import math
from typing import Tuple

from .. import _kernels, settings
from .._geometry import Geometry
from .._launch import _i32, _Launch
from .._plan import Family, Plan, Step, Table
from .rules import _gemm_index, _tensor_core_passes

_S = settings.current  # the routing settings in force



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


class GroupedForward(Family):
    name, ops = "grouped_forward", ("forward",)

    def reject(self, p):
        return None if _grouped_forward_routed(p.geometry, p.dtype, p.precision) else "its rule (groups of few channels, large outputs) does not take it"

    def plan(self, p, tile):
        launch, taps = _grouped_forward_plan(p.geometry, p.dtype, _gemm_index(p))
        return Plan(self.name, None, (Step(launch, ("source", "weight", "bias", "out", Table(taps))),))
