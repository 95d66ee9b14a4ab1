"""grad_weight_phase.cu on the host: grad_weight_phase and its GX builds
(grad_input too): sizes as the kernel has them, names, layouts.
"""

from __future__ import annotations

import functools
import math

import numpy

from .. import settings
from .._geometry import Geometry
from .._launch import _blocks_for, _i32, _Launch
from .._plan import Family, Plan, Step
from .common import INT32_LIMIT, _axes, _is_1d, instantiation_loop
from .grad_weight import _GradWeightFamily, _split_steps, _splits, _sum_splits_plan
from .rules import _passes, _problem_passes, _size

# grad_weight_phase (grad_weight_phase.cu): float32 1D grad_weight on TF32
# tensor cores (one pass or 3xTF32) where every tap lands on one phase of
# grad_output (stride 1, a dilation that is a multiple of the stride, or one
# tap), read straight from grad_output.  Blocks of 32 input x 64 output
# channels x TAPS taps, items of 64 positions, three stages.
GRAD_WEIGHT_PHASE_TAPS = (1, 3, 5, 8)  # its TAPS: the smallest covering the kernel, else chunks of 8
GRAD_WEIGHT_PHASE_POSITIONS = 64  # its GWP_P
GRAD_WEIGHT_PHASE_X_ROW = GRAD_WEIGHT_PHASE_POSITIONS + 4  # its GWP_XS
GRAD_WEIGHT_PHASE_CHANNELS = 32  # its GWP_BM: input channels a block
GRAD_WEIGHT_PHASE_COLUMNS = 64  # its GWP_BN: output channels a block
GRAD_WEIGHT_PHASE_STAGES = 3  # its GWP_STAGES
GRAD_WEIGHT_PHASE_THREADS = 256  # its GWP_THREADS
GRAD_WEIGHT_PHASE_PASSES = (1, 3)


def grad_weight_phase_name(index: str, taps: int, passes: int, gx: bool = False) -> str:
    return f"grad_weight_phase<float, {index}, {taps}, {passes}{', true' if gx else ''}>"


def grad_weight_phase_layout(geometry: Geometry):
    """(taps, step, window, row, shared bytes) of grad_weight_phase, or None
    where it does not apply (not 1D, or taps on more than one phase: a
    dilation that is not a multiple of a stride above 1 with two or more
    taps; positions past int).

    step = d / s phase positions between taps; window = the positions one
    item's (position, tap) pairs read, 64 + (taps - 1) * step; row = window
    rounded up to 4 mod 8 floats (conflict-free B reads).  Shared memory:
    three stages of x (32 rows of 68 floats) and the window (64 rows), or
    the warps' partial sums at the end (taps * 8 KB), whichever is larger."""
    if not _is_1d(geometry):
        return None
    in_w, kernel, stride, _, dilation, out_w = _axes(geometry)[1]
    if kernel > 1 and dilation % stride:
        return None
    if max(in_w, out_w) >= 2**30 or (in_w + GRAD_WEIGHT_PHASE_POSITIONS) * stride + dilation * kernel >= 2**30:
        return None  # the kernel counts positions and phase indices in int
    taps = next((t for t in GRAD_WEIGHT_PHASE_TAPS if t >= kernel), GRAD_WEIGHT_PHASE_TAPS[-1])
    step = dilation // stride if kernel > 1 else 0
    window = GRAD_WEIGHT_PHASE_POSITIONS + (taps - 1) * step
    row = window + (4 - window) % 8
    stage = 4 * (GRAD_WEIGHT_PHASE_CHANNELS * GRAD_WEIGHT_PHASE_X_ROW + GRAD_WEIGHT_PHASE_COLUMNS * row)
    return taps, step, window, row, max(GRAD_WEIGHT_PHASE_STAGES * stage, taps * 8 * 1024)


# grad_weight_phase's GX builds (grad_phase_fused_layout): grad_input from
# the same staged windows, by 8 more warps, with the weight resident in
# shared memory as TF32 hi and lo parts, [TAPS][2][32][68] floats.
GRAD_PHASE_FUSED_TAPS = (1, 3)
GRAD_PHASE_FUSED_THREADS = 2 * GRAD_WEIGHT_PHASE_THREADS
GRAD_PHASE_FUSED_WEIGHT_ROW = GRAD_WEIGHT_PHASE_COLUMNS + 4  # its GWP_WROW


def grad_phase_fused_layout(geometry: Geometry):
    """(taps, step, window, row, shared bytes) of grad_weight_phase's GX
    build, which also writes grad_input, or None where it does not apply:
    where grad_weight_phase does not, or a group has more than one channel
    tile either way (32 input, 64 output channels) or more than 3 taps (one
    chunk; the 5-tap builds spilled in their MMA loops).  Shared memory:
    grad_weight_phase's stages, the resident weight (taps x 2 x 32 rows of
    68 floats) and 8 KB where half of the grad_input warps leave their sums
    for the other half."""
    layout = grad_weight_phase_layout(geometry)
    if layout is None:
        return None
    taps, step, window, row, _ = layout
    if taps not in GRAD_PHASE_FUSED_TAPS or geometry.kernel[1] > taps:
        return None
    if geometry.in_channels_per_group > GRAD_WEIGHT_PHASE_CHANNELS or geometry.out_channels_per_group > GRAD_WEIGHT_PHASE_COLUMNS:
        return None
    weight = 4 * taps * 2 * GRAD_WEIGHT_PHASE_CHANNELS * GRAD_PHASE_FUSED_WEIGHT_ROW + 8 * 1024  # and the grad_input halves
    stages = 4 * GRAD_WEIGHT_PHASE_STAGES * (GRAD_WEIGHT_PHASE_CHANNELS * GRAD_WEIGHT_PHASE_X_ROW + GRAD_WEIGHT_PHASE_COLUMNS * row)
    return taps, step, window, row, max(stages, taps * 8 * 1024) + weight


def phase_instantiations(dtype: str, index: str) -> list[tuple[str, str]]:
    """grad_weight_phase's builds (float32): without and with GX, by taps
    and passes."""
    names = []
    if dtype == "float32":
        names += [
            ("grad_weight_phase.cu", grad_weight_phase_name(index, taps, passes, gx))
            for gx in (False, True)
            for taps in (GRAD_PHASE_FUSED_TAPS if gx else GRAD_WEIGHT_PHASE_TAPS)
            for passes in GRAD_WEIGHT_PHASE_PASSES
        ]
    return names


def instantiations() -> list[tuple[str, str]]:
    """This file's part of _kernels.all_instantiations(), in its order:
    every (file, name) of grad_weight_phase.cu the library can launch."""
    return instantiation_loop(trailing=(phase_instantiations,))


_S = settings.current  # the routing settings in force



@functools.lru_cache(maxsize=1024)
def _grad_weight_phase_plan(geometry: Geometry, index: str, passes: int, multiprocessors: int, max_shared: int, gx: bool = False):
    """(grad_weight_phase launch, workspace shape, sum_splits launch), or None
    where it does not apply (see grad_weight_phase_layout, and with `gx`
    grad_phase_fused_layout) or does not fit in shared memory.  Two blocks a
    multiprocessor (one with 8 taps, or with `gx`: 512 threads) between the
    (group, tap chunk, channel tiles) combinations and the splits of the
    items (image, 64 positions)."""
    layout = (grad_phase_fused_layout if gx else grad_weight_phase_layout)(geometry)
    if layout is None or layout[4] > max_shared:
        return None
    taps, step, window, row, shared = layout
    channels, out_channels = geometry.in_channels_per_group, geometry.out_channels_per_group
    batch, _, _, in_w = geometry.input_shape4
    kernel = geometry.kernel[1]
    ci_tiles = -(-channels // GRAD_WEIGHT_PHASE_CHANNELS)
    j_tiles = -(-out_channels // GRAD_WEIGHT_PHASE_COLUMNS)
    tap_chunks = -(-kernel // taps)
    items = batch * -(-in_w // GRAD_WEIGHT_PHASE_POSITIONS)
    independent = ci_tiles * j_tiles * tap_chunks * geometry.groups
    splits = _splits(independent, items, 8, multiprocessors, blocks_per_multiprocessor=1 if gx or taps > 5 else 2)
    per_split = -(-items // splits)
    splits = -(-items // per_split)
    if per_split > INT32_LIMIT:
        return None
    scalars = (
        _i32(batch), _i32(geometry.groups), _i32(channels), _i32(out_channels), _i32(in_w), _i32(geometry.output_shape4[3]),
        _i32(kernel), _i32(geometry.stride[1]), _i32(geometry.padding[1]), _i32(step), _i32(window), _i32(row),
        _i32(per_split), _i32(ci_tiles), _i32(j_tiles), _i32(tap_chunks),
    )  # fmt: skip
    name = grad_weight_phase_name(index, taps, passes, gx)
    threads = GRAD_PHASE_FUSED_THREADS if gx else GRAD_WEIGHT_PHASE_THREADS
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
        if not s.use_grad_weight_phase or p.dtype != "float32" or passes not in GRAD_WEIGHT_PHASE_PASSES:
            return "off (use_grad_weight_phase), or not float32"
        channels, out_channels = g.in_channels_per_group, g.out_channels_per_group
        tiles = -(-channels // GRAD_WEIGHT_PHASE_CHANNELS) * -(-out_channels // GRAD_WEIGHT_PHASE_COLUMNS)
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
        if passes not in GRAD_WEIGHT_PHASE_PASSES or passes != _passes(p.dtype, p.precision, g, "grad_weight"):
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
