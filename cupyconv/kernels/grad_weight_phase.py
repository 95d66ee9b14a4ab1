"""The host side of grad_weight_phase: its families' rules and plans."""

from __future__ import annotations

import functools
import math

import numpy

from .. import _kernels, settings
from .._geometry import Geometry
from .._launch import _blocks_for, _i32, _Launch
from .._plan import Family, Plan, Step
from .grad_weight import _GradWeightFamily, _split_steps, _splits, _sum_splits_plan
from .rules import _passes, _problem_passes, _size

_S = settings.current  # the routing settings in force



@functools.lru_cache(maxsize=1024)
def _grad_weight_phase_plan(geometry: Geometry, index: str, passes: int, multiprocessors: int, max_shared: int, gx: bool = False):
    """(grad_weight_phase launch, workspace shape, sum_splits launch), or None
    where it does not apply (see grad_weight_phase_layout, and with `gx`
    grad_phase_fused_layout) or does not fit in shared memory.  Two blocks a
    multiprocessor (one with 8 taps, or with `gx`: 512 threads) between the
    (group, tap chunk, channel tiles) combinations and the splits of the
    items (image, 64 positions)."""
    layout = (_kernels.grad_phase_fused_layout if gx else _kernels.grad_weight_phase_layout)(geometry)
    if layout is None or layout[4] > max_shared:
        return None
    taps, step, window, row, shared = layout
    channels, out_channels = geometry.in_channels_per_group, geometry.out_channels_per_group
    batch, _, _, in_w = geometry.input_shape4
    kernel = geometry.kernel[1]
    ci_tiles = -(-channels // _kernels.GRAD_WEIGHT_PHASE_CHANNELS)
    j_tiles = -(-out_channels // _kernels.GRAD_WEIGHT_PHASE_COLUMNS)
    tap_chunks = -(-kernel // taps)
    items = batch * -(-in_w // _kernels.GRAD_WEIGHT_PHASE_POSITIONS)
    independent = ci_tiles * j_tiles * tap_chunks * geometry.groups
    splits = _splits(independent, items, 8, multiprocessors, blocks_per_multiprocessor=1 if gx or taps > 5 else 2)
    per_split = -(-items // splits)
    splits = -(-items // per_split)
    if per_split > _kernels.INT32_LIMIT:
        return None
    scalars = (
        _i32(batch), _i32(geometry.groups), _i32(channels), _i32(out_channels), _i32(in_w), _i32(geometry.output_shape4[3]),
        _i32(kernel), _i32(geometry.stride[1]), _i32(geometry.padding[1]), _i32(step), _i32(window), _i32(row),
        _i32(per_split), _i32(ci_tiles), _i32(j_tiles), _i32(tap_chunks),
    )  # fmt: skip
    name = _kernels.grad_weight_phase_name(index, taps, passes, gx)
    threads = _kernels.GRAD_PHASE_FUSED_THREADS if gx else _kernels.GRAD_WEIGHT_PHASE_THREADS
    partial = _Launch("grad_weight_phase.cu", name, _blocks_for(independent * splits), threads, scalars, shared)
    count = math.prod(geometry.weight_shape4)
    return partial, (splits,) + geometry.weight_shape4, _sum_splits_plan("float32", count, splits, multiprocessors)


class GradWeightPhase(_GradWeightFamily):
    name = "grad_weight_phase"

    def _plan_for(self, p):
        passes = _problem_passes(p)
        return lambda index: _grad_weight_phase_plan(p.geometry, index, passes, p.device.multiprocessors, p.device.max_shared)

    def reject(self, p):
        s, g = _S(), p.geometry
        passes = _problem_passes(p)
        if not passes:
            return "not on tensor cores"
        if not s.use_grad_weight_phase or p.dtype != "float32" or passes not in _kernels.GRAD_WEIGHT_PHASE_PASSES:
            return "off (use_grad_weight_phase), or not float32"
        channels, out_channels = g.in_channels_per_group, g.out_channels_per_group
        tiles = -(-channels // _kernels.GRAD_WEIGHT_PHASE_CHANNELS) * -(-out_channels // _kernels.GRAD_WEIGHT_PHASE_COLUMNS)
        most = s.grad_weight_phase_max_tiles_tf32 if passes == 1 else s.grad_weight_phase_max_tiles_3xtf32
        if s.use_grad_weight_phase != "anywhere" and (
            _size(g.output_shape4) < s.window_min_output or min(channels, out_channels) < s.grad_weight_phase_min_channels or tiles > most
        ):
            return "grad_output below window_min_output, or channels outside its rule"
        if self._plan_for(p)("int") is None:
            return "its taps do not land on one phase, or does not fit"
        return None

    def plan(self, p, tile):
        steps, buffers = _split_steps(self._plan_for(p), ("x", "grad_output", None, None), self.sizes(p), numpy.float64)
        return Plan(self.name, None, steps, buffers)


class GradPhaseFused(Family):
    name, ops = "grad_phase_fused", ("backward",)

    def _plan_for(self, p):
        passes = _passes(p.dtype, p.precision, p.geometry, "grad_input")
        return lambda index: _grad_weight_phase_plan(p.geometry, index, passes, p.device.multiprocessors, p.device.max_shared, True)

    def reject(self, p):
        s, g = _S(), p.geometry
        if p.wants != (True, True):
            return "not both gradients"
        if not (s.use_grad_phase_fused and s.use_grad_input_phase and s.use_grad_weight_phase) or p.dtype != "float32":
            return "off (use_grad_phase_fused), or not float32"
        passes = _passes(p.dtype, p.precision, g, "grad_input")
        if passes not in _kernels.GRAD_WEIGHT_PHASE_PASSES or passes != _passes(p.dtype, p.precision, g, "grad_weight"):
            return "not the same tensor-core mode for both gradients"
        if g.batch * g.in_size[0] * g.in_size[1] == 0:
            return "no input positions"
        channels, out_channels = g.in_channels_per_group, g.out_channels_per_group
        if s.use_grad_phase_fused != "anywhere" and (
            passes != 1 or g.stride[1] == 1 or _size(g.output_shape4) < s.window_min_output or min(channels, out_channels) < s.grad_weight_phase_min_channels
        ):
            return "its rule (\"tf32\", strided, large, channels) does not take it"
        if self._plan_for(p)("int") is None:
            return "its layout does not apply, or does not fit"
        if not p.aligned("grad_input", 8):
            return "grad_input not 8-byte aligned (float2 stores)"
        return None

    def plan(self, p, tile):
        g = p.geometry
        sizes = (_size(g.input_shape4), _size(g.output_shape4), _size(g.input_shape4), _size(g.weight_shape4))
        steps, buffers = _split_steps(self._plan_for(p), ("x", "grad_output", "weight", "grad_input"), sizes, numpy.float64)
        steps = tuple(Step(s.launch, tuple("grad_weight" if a == "out" else a for a in s.args)) for s in steps)
        return Plan(self.name, None, steps, buffers)
