"""What every family's rule reads of a problem: how its pass multiplies
(TF32, 3xTF32 or FFMA by the sum's length), its GEMM rows, sizes and index type."""

from __future__ import annotations

import math

import ml_dtypes
import numpy

from .. import _geometry, settings
from .._geometry import Geometry
from .._launch import _compute_capability, _index_type
from .._plan import Problem

_S = settings.current  # the routing settings in force



def _tensor_core_passes(dtype: str, precision: str) -> int:
    """How the tensor-core kernels should multiply: 1 (one TF32, FP16 or BF16
    product), 3 (3xTF32, float32 "highest" where _S().float32_highest allows), or
    0 for CUDA cores (float64, and every dtype before sm_80)."""
    if _compute_capability() < 80:
        return 0
    if dtype in ("float16", "bfloat16"):
        return 1
    if dtype == "float32":
        if precision == "tf32":
            return 1
        return 3 if _S().float32_highest == "3xtf32" else 0
    return 0


def _products_per_output(geometry: Geometry, pass_name: str) -> float:
    """How many products each output of the pass sums, on average."""
    products = geometry.flops // 2
    shape = {"forward": geometry.output_shape4, "grad_input": geometry.input_shape4, "grad_weight": geometry.weight_shape4}[pass_name]
    return products / max(math.prod(shape), 1)


def _passes(dtype: str, precision: str, geometry: Geometry, pass_name: str) -> int:
    """_tensor_core_passes, with 3xTF32 only on sums of _S().tf32x3_min_products or
    more (else 0: CUDA cores)."""
    passes = _tensor_core_passes(dtype, precision)
    if passes == 3 and _products_per_output(geometry, pass_name) < _S().tf32x3_min_products:
        return 0
    return passes


def _gemm_rows(geometry: Geometry, pass_name: str) -> int:
    return geometry.out_channels_per_group if pass_name == "forward" else geometry.in_channels_per_group


def _size(shape4) -> int:
    return math.prod(shape4)


def _pass_shapes(p: Problem):
    """(source shape, output shape) of a forward or grad_input problem."""
    g = p.geometry
    return (g.input_shape4, g.output_shape4) if p.op == "forward" else (g.output_shape4, g.input_shape4)


def _gemm_index(p: Problem) -> str:
    source4, out4 = _pass_shapes(p)
    return _index_type(_size(source4), _size(out4), _size(p.geometry.weight_shape4))


def _problem_passes(p: Problem) -> int:
    return _passes(p.dtype, p.precision, p.geometry, p.op)


def _weight_dtype(p: Problem):
    return _DTYPES[p.dtype]


_DTYPES = {name: numpy.dtype(ml_dtypes.bfloat16 if name == "bfloat16" else name) for name in _geometry.SUPPORTED_DTYPES}
