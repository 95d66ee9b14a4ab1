"""The host side of conv_window: its families' rules and plans."""

from __future__ import annotations

import functools

from .. import _kernels, settings
from .._geometry import Geometry
from .._launch import _Launch
from .._plan import Family, Plan, Step, Table
from .pack_weight import _window_weight_steps
from .rules import _gemm_index, _gemm_rows, _problem_passes, _tensor_core_passes
from .window import _window_problem, _window_scalars, _WindowGroup

_S = settings.current  # the routing settings in force



@functools.lru_cache(maxsize=1024)
def _window_plan(geometry: Geometry, pass_name: str, dtype: str, index: str, tile, max_shared: int, passes: int = 1, fill: bool = False):
    """(conv_window launch, phase records), or None where conv_window cannot
    run this problem with `tile` (see _window_problem; or a window too long
    for the 16-bit kernel's registers, or too little shared memory).  With
    `fill`, its fill build (the forward pass's one tapped phase, columns
    covering every output)."""
    problem = _window_problem(geometry, pass_name, dtype, fill=fill)
    if problem is None:
        return None
    max_taps, vectors, stride, shared = _kernels.window_layout(problem[0], tile, dtype)
    if vectors > (_kernels.WINDOW_MAX_VECTORS if _kernels.ITEMSIZE[dtype] == 2 else _kernels.WINDOW_MAX_VECTORS_WIDE) or shared > max_shared:
        return None
    blocks, scalars = _window_scalars(geometry, pass_name, dtype, problem, tile, max_taps, vectors, stride, fill)
    name = _kernels.window_name(dtype, index, tile, passes, fill)
    return _Launch("conv_window.cu", name, blocks, tile.threads, scalars, shared), problem[0]


class WindowFill(Family):
    """conv_window's fill build in float32 "highest" (3xTF32)."""

    name, ops = "conv_window_fill", ("forward",)

    def reject(self, p):
        s = _S()
        if not (s.use_fill and s.use_window_fill):
            return "off (use_fill, use_window_fill)"
        if p.dtype != "float32" or _tensor_core_passes(p.dtype, p.precision) != _kernels.WINDOW_FILL_PASSES:
            return "not float32 \"highest\" on tensor cores"
        if p.output_size < s.window_min_output:
            return "output below window_min_output"
        if not p.aligned("source", 16):
            return "input not 16-byte aligned"
        if _kernels.fill_record(p.geometry, "forward") is None:
            return "no fill (stride 2 and a dilation that is a multiple of it)"
        if self._plan(p, self.heuristic(p)) is None:
            return "does not fit"
        return None

    def _plan(self, p, tile):
        return _window_plan(p.geometry, "forward", p.dtype, _gemm_index(p), tile, p.device.max_shared, _kernels.WINDOW_FILL_PASSES, True)

    def heuristic(self, p):
        return _kernels.pick_tile(_kernels.WINDOW_TILES, _gemm_rows(p.geometry, "forward"))

    def tiles(self, p):
        return tuple(t for t in _kernels.WINDOW_TUNE_TILES if self._plan(p, t))

    def tune_key(self, p):
        return "conv_window", (p.dtype, _kernels.WINDOW_FILL_PASSES, "forward", _gemm_index(p), p.geometry, "fill")

    def plan(self, p, tile):
        steps, buffers = _window_weight_steps(p, "forward", p.dtype, fold=False)
        launch, flat = self._plan(p, tile)
        return Plan(self.name, tile, steps + (Step(launch, ("source", "t0", "bias", "out", Table(flat))),), buffers)


class ConvWindow(_WindowGroup):
    name = "conv_window"

    def _plan(self, p, tile):
        return _window_plan(p.geometry, p.op, p.dtype, _gemm_index(p), tile, p.device.max_shared, _problem_passes(p))

    def reject(self, p):
        reason = self.window_reject(p)
        if reason:
            return reason
        if self._plan(p, self.heuristic(p)) is None:
            return "not 1D, grad_input with a stride, too few rows, rows of part vectors, or does not fit"
        return None

    def heuristic(self, p):
        return _kernels.pick_tile(_kernels.WINDOW_TILES, self.rows(p))

    def tiles(self, p):
        return tuple(t for t in _kernels.WINDOW_TUNE_TILES if self._plan(p, t))

    def tune_key(self, p):
        return "conv_window", (p.dtype, _problem_passes(p), p.op, _gemm_index(p), p.geometry)

    def plan(self, p, tile):
        passes = _problem_passes(p)
        steps, buffers = _window_weight_steps(p, p.op, p.dtype, round_tf32=passes == 1)  # TF32: conv_window takes A as packed
        launch, flat = self._plan(p, tile)
        return Plan(self.name, tile, steps + (Step(launch, ("source", "t0", self.bias(p), "out", Table(flat))),), buffers)
