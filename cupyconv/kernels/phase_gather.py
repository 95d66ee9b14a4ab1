"""phase_gather.cu on the host: its dtypes, block and name."""

from __future__ import annotations

import functools
import math

import cupy
import numpy

from .. import _geometry, settings
from .._geometry import Geometry
from .._launch import _i32, _index_type, _Launch, _launch
from .._plan import Buffer, Family, Plan, Step, Sub
from .common import CUDA_TYPE, _axes, _is_1d, instantiation_loop
from .rules import _size, _weight_dtype

# phase_gather (phase_gather.cu): one phase of grad_output's rows gathered
# for the backward pass's phase rewrite (16-bit types only: in float32 the
# copy costs more than the stride-1 kernels save).
PHASE_BACKWARD_DTYPES = ("float16", "bfloat16")
GATHER_THREADS = 256
GATHER_ELEMS = 8


def phase_gather_name(dtype: str, index: str) -> str:
    return f"phase_gather<{CUDA_TYPE[dtype]}, {index}>"


def gather_instantiations(dtype: str, index: str) -> list[tuple[str, str]]:
    """phase_gather's build for one dtype and index type."""
    names = []
    if dtype in PHASE_BACKWARD_DTYPES:
        names.append(("phase_gather.cu", phase_gather_name(dtype, index)))
    return names


def instantiations() -> list[tuple[str, str]]:
    """This file's part of _kernels.all_instantiations(), in its order:
    every (file, name) of phase_gather.cu the library can launch."""
    return instantiation_loop(trailing=(gather_instantiations,))


_S = settings.current  # the routing settings in force



@functools.lru_cache(maxsize=1024)
def _phase_backward_geometry(geometry: Geometry):
    """(stride-1 geometry, lo, hi, first) for the phase rewrite above: the
    stride-1 problem's grad_output position t' is output first + s * t' of
    the original, which exists for t' in [lo, hi) (zero elsewhere).  None
    where the rewrite does not apply: not 1D, stride 1, or a dilation that is
    not a multiple of the stride.  The stride-1 problem takes padding
    ceil(p / s), so that its grad_output starts at the phase's first output and
    usually has the original's row length over s; where that would need an
    output padding PyTorch's rules reject, padding 0 and zeros at the ends."""
    if not _is_1d(geometry):
        return None
    in_w, kernel, stride, padding, dilation, out_w = _axes(geometry)[1]
    if stride == 1 or dilation % stride:
        return None
    ratio = dilation // stride
    input_shape = geometry.user_shape(geometry.input_shape4)
    weight_shape = geometry.user_shape(geometry.weight_shape4, is_weight=True)
    for pad in (-(-padding // stride), 0):
        first = stride * pad - padding
        natural = (in_w - 1) - 2 * pad + ratio * (kernel - 1) + 1  # the stride-1 output length with no output padding
        count = -(-(out_w - first) // stride)  # phase outputs from `first` on, before out_w
        try:
            sub = _geometry.make_geometry(1, input_shape, weight_shape, None, 1, pad, max(0, count - natural), geometry.groups, ratio)
        except ValueError:
            continue
        lo = -(-max(0, -first) // stride)
        return sub, lo, min(count, sub.out_size[1]), first
    return None


def _phase_backward_routed(geometry: Geometry, dtype: str):
    """_phase_backward_geometry where the rewrite is used: float16 and
    bfloat16 (PHASE_BACKWARD_DTYPES), large problems."""
    if not _S().use_phase_backward or dtype not in PHASE_BACKWARD_DTYPES:
        return None
    if _S().use_phase_backward != "anywhere" and math.prod(geometry.output_shape4) < _S().phase_backward_min_output:
        return None
    return _phase_backward_geometry(geometry)


def _phase_grad_output(gy4, geometry: Geometry, sub: Geometry, lo: int, hi: int, first: int):
    """The phase's outputs of grad_output as the stride-1 problem's
    grad_output: contiguous, zero outside [lo, hi).  CuPy arrays run
    phase_gather; NumPy arrays (tests of the rewrite on the CPU) slice."""
    stride, out_w = geometry.stride[1], sub.out_size[1]
    if isinstance(gy4, numpy.ndarray):
        gathered = numpy.zeros(sub.output_shape4, dtype=gy4.dtype)
        if hi > lo:
            gathered[..., lo:hi] = gy4[..., first + stride * lo :: stride][..., : hi - lo]
        return gathered
    gathered = cupy.empty(sub.output_shape4, dtype=gy4.dtype)
    if not gathered.size:
        return gathered
    rows = math.prod(sub.output_shape4[:3])
    chunks = -(-out_w // (GATHER_THREADS * GATHER_ELEMS))
    index = _index_type(gy4.size, gathered.size)
    scalars = (_i32(gy4.shape[3]), _i32(out_w), _i32(stride), _i32(first), _i32(lo), _i32(hi), _i32(chunks))
    plan = _Launch("phase_gather.cu", phase_gather_name(_geometry.dtype_name(gy4.dtype), index), rows * chunks, GATHER_THREADS, scalars)
    _launch(plan, (gy4, gathered))
    return gathered


class PhaseBackward(Family):
    """The phase rewrite: a 1D problem whose dilation is a multiple of its
    stride as a stride-1 problem on one phase of grad_output (phase_gather)."""

    name, ops = "phase_backward", ("backward",)

    def reject(self, p):
        return None if _phase_backward_routed(p.geometry, p.dtype) is not None else "not 16-bit 1D with a dilation a multiple of the stride, large"

    def plan(self, p, tile):
        g = p.geometry
        sub, lo, hi, first = _phase_backward_routed(g, p.dtype)
        steps = []
        if _size(sub.output_shape4):
            rows = math.prod(sub.output_shape4[:3])
            chunks = -(-sub.out_size[1] // (GATHER_THREADS * GATHER_ELEMS))
            index = _index_type(_size(g.output_shape4), _size(sub.output_shape4))
            scalars = (_i32(g.output_shape4[3]), _i32(sub.out_size[1]), _i32(g.stride[1]), _i32(first), _i32(lo), _i32(hi), _i32(chunks))
            gather = _gather_plan(phase_gather_name(p.dtype, index), rows * chunks, scalars)
            steps.append(Step(gather, ("grad_output", "t0")))
        offsets = dict(p.alignment)
        want_input, want_weight = p.wants
        if want_input:
            alignment = (("source", 0), ("weight", offsets["weight"]), ("out", offsets["grad_input"]))
            steps.append(Sub(p._replace(op="grad_input", geometry=sub, alignment=alignment), (("source", "t0"), ("weight", "weight"), ("out", "grad_input"))))
        if want_weight:
            alignment = (("x", offsets["x"]), ("grad_output", 0), ("out", offsets["grad_weight"]))
            steps.append(Sub(p._replace(op="grad_weight", geometry=sub, alignment=alignment), (("x", "x"), ("grad_output", "t0"), ("out", "grad_weight"))))
        return Plan(self.name, None, tuple(steps), (Buffer(sub.output_shape4, _weight_dtype(p)),))


def _gather_plan(name: str, blocks: int, scalars: tuple) -> _Launch:
    return _Launch("phase_gather.cu", name, blocks, GATHER_THREADS, scalars)
