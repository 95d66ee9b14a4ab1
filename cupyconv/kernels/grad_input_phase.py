"""grad_input_phase.cu on the host: its sizes as the kernel has them, name and
layout.
"""

from __future__ import annotations

import functools

from .. import settings
from .._geometry import Geometry
from .._launch import _i32, _index_type, _Launch
from .._plan import Family, Plan, Step
from .common import INT32_LIMIT, _axes, _is_1d, instantiation_loop
from .rules import _problem_passes, _size

# grad_input_phase (grad_input_phase.cu): float32 1D grad_input on TF32
# tensor cores (one pass or 3xTF32) where every tap lands on one phase of
# grad_output, read straight from grad_output.  Blocks of 32 input channels x
# 512 positions, stages of 8 output channels with every tap.
GRAD_INPUT_PHASE_POSITIONS = 512  # its GIP_L
GRAD_INPUT_PHASE_CHANNELS = 32  # its GIP_BM
GRAD_INPUT_PHASE_STAGE_CHANNELS = 8  # its GIP_J
GRAD_INPUT_PHASE_WEIGHT_ROW = 12  # its GIP_WROW
GRAD_INPUT_PHASE_STAGES = 4  # its GIP_STAGES
GRAD_INPUT_PHASE_THREADS = 256  # its GIP_THREADS
GRAD_INPUT_PHASE_PASSES = (1, 3)


def grad_input_phase_name(index: str, passes: int) -> str:
    return f"grad_input_phase<float, {index}, {passes}>"


def grad_input_phase_layout(geometry: Geometry):
    """(step, window, row, shared bytes) of grad_input_phase, or None where it
    does not apply (not 1D, taps on more than one phase, positions past int).
    step = d / s; window = 512 + (K - 1) * step phase positions a stage
    reads; row = window rounded up to 8 mod 16 floats (conflict-free B
    reads).  Four stages of the weight (K x 32 rows of 12 floats) and the
    window (8 rows)."""
    if not _is_1d(geometry):
        return None
    in_w, kernel, stride, _, dilation, out_w = _axes(geometry)[1]
    if kernel > 1 and dilation % stride:
        return None
    step = dilation // stride if kernel > 1 else 0
    window = GRAD_INPUT_PHASE_POSITIONS + (kernel - 1) * step
    if max(in_w, out_w) >= 2**30 or (in_w + window) * stride + dilation * kernel >= 2**30:
        return None  # the kernel counts positions and phase indices in int
    row = window + (8 - window) % 16
    weight = kernel * GRAD_INPUT_PHASE_CHANNELS * GRAD_INPUT_PHASE_WEIGHT_ROW
    return step, window, row, 4 * GRAD_INPUT_PHASE_STAGES * (weight + GRAD_INPUT_PHASE_STAGE_CHANNELS * row)


def phase_instantiations(dtype: str, index: str) -> list[tuple[str, str]]:
    """grad_input_phase's builds (float32), by passes."""
    names = []
    if dtype == "float32":
        names += [("grad_input_phase.cu", grad_input_phase_name(index, passes)) for passes in GRAD_INPUT_PHASE_PASSES]
    return names


def instantiations() -> list[tuple[str, str]]:
    """This file's part of _kernels.all_instantiations(), in its order:
    every (file, name) of grad_input_phase.cu the library can launch."""
    return instantiation_loop(trailing=(phase_instantiations,))


_S = settings.current  # the routing settings in force



@functools.lru_cache(maxsize=1024)
def _grad_input_phase_plan(geometry: Geometry, index: str, passes: int, max_shared: int):
    """grad_input_phase's launch, or None where it does not apply (see
    grad_input_phase_layout) or does not fit in shared memory."""
    layout = grad_input_phase_layout(geometry)
    if layout is None or layout[3] > max_shared:
        return None
    step, window, row, shared = layout
    batch, _, _, in_w = geometry.input_shape4
    l_tiles = -(-in_w // GRAD_INPUT_PHASE_POSITIONS)
    ci_tiles = -(-geometry.in_channels_per_group // GRAD_INPUT_PHASE_CHANNELS)
    blocks = l_tiles * ci_tiles * geometry.groups * batch
    if blocks > INT32_LIMIT:
        return None
    scalars = (
        _i32(batch), _i32(geometry.groups), _i32(geometry.in_channels_per_group), _i32(geometry.out_channels_per_group),
        _i32(in_w), _i32(geometry.output_shape4[3]), _i32(geometry.kernel[1]), _i32(geometry.stride[1]), _i32(geometry.padding[1]),
        _i32(step), _i32(window), _i32(row), _i32(l_tiles), _i32(ci_tiles),
    )  # fmt: skip
    name = grad_input_phase_name(index, passes)
    return _Launch("grad_input_phase.cu", name, blocks, GRAD_INPUT_PHASE_THREADS, scalars, shared)


def _grad_input_phase_stride_one(geometry: Geometry) -> bool:
    if _S().grad_input_phase_stride_one == "one_tile":
        return geometry.in_channels_per_group <= GRAD_INPUT_PHASE_CHANNELS
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
        if not s.use_grad_input_phase or p.dtype != "float32" or passes not in GRAD_INPUT_PHASE_PASSES or not p.aligned("out", 8):
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
