"""A floor estimate of a plan's time, for `explain`: what the launches cannot
beat, not a prediction (the families' efficiencies differ by more than it
shows, which is why the priority list and the autotuner decide).

    time = max(bytes / bandwidth, flops / (rate * fill)) + launches * LAUNCH_US

bytes: the pass's arrays once and each temporary buffer twice (written, then
read); flops: the pass's multiply-adds at the math's peak rate; fill: the
widest launch's blocks over the multiprocessors (at most 1), so that a grid
that leaves most of the GPU idle shows it.  Rates are nominal dense peaks of
an H200 (sm_90) and an A100 (sm_80), bandwidths the copy rates measured or
quoted for them.
"""

from __future__ import annotations

import math

import numpy

from ._plan import Plan, Problem, Sub

LAUNCH_US = 2.0  # a launch's own cost on the GPU's side, roughly
_RATES = {  # (compute capability) -> math -> FLOP/s
    90: {"tf32": 404e12, "3xtf32": 404e12 / 3, "mma16": 748e12, "fp32": 50e12, "fp64": 67e12},
    80: {"tf32": 156e12, "3xtf32": 156e12 / 3, "mma16": 312e12, "fp32": 19.5e12, "fp64": 19.5e12},
}
_BANDWIDTH = {90: 4.2e12, 80: 1.6e12}  # bytes/s


def _math(p: Problem) -> str:
    from .kernels.rules import _passes

    if p.dtype == "float64":
        return "fp64"
    if p.op == "grad_bias":
        return "fp32"  # sums on CUDA cores (their FLOPs are not counted)
    passes = _passes(p.dtype, p.precision, p.geometry, "grad_input" if p.op == "backward" else p.op)
    if passes == 0:
        return "fp32"
    if p.dtype in ("float16", "bfloat16"):
        return "mma16"
    return "3xtf32" if passes == 3 else "tf32"


def _pass_elements(p: Problem) -> int:
    g = p.geometry
    x, w, y = (math.prod(s) for s in (g.input_shape4, g.weight_shape4, g.output_shape4))
    return {
        "forward": x + w + y + g.out_channels, "grad_input": y + w + x, "grad_weight": x + y + w,
        "grad_bias": y + g.out_channels, "backward": y + x + w + x + w,
    }[p.op]  # fmt: skip


def _pass_flops(p: Problem) -> int:
    flops = p.geometry.flops
    if p.op == "grad_bias":
        return 0
    if p.op == "backward":
        return flops * sum(p.wants)
    return flops


def estimate_us(p: Problem, plan: Plan) -> float:
    """The floor estimate of `plan` for `p`, in microseconds (see the module)."""
    itemsize = 2 if p.dtype in ("float16", "bfloat16") else numpy.dtype(p.dtype).itemsize
    scratch = sum(math.prod(b.shape) * numpy.dtype(b.dtype).itemsize for b in plan.buffers)
    moved = _pass_elements(p) * itemsize + 2 * scratch
    launches = [s.launch for s in plan.steps if not isinstance(s, Sub)]
    cc = 90 if p.device.compute_capability >= 90 else 80
    fill = min(1.0, max((l.blocks for l in launches), default=1) / max(p.device.multiprocessors, 1))
    compute = _pass_flops(p) / (_RATES[cc][_math(p)] * fill)
    return 1e6 * max(moved / _BANDWIDTH[cc], compute) + LAUNCH_US * len(launches)
