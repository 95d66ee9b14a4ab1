"""The host side of grad_input_phase: its families' rules and plans."""

from __future__ import annotations

import functools

from .. import _kernels, settings
from .._geometry import Geometry
from .._launch import _i32, _index_type, _Launch
from .._plan import Family, Plan, Step
from .rules import _problem_passes, _size

_S = settings.current  # the routing settings in force



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
