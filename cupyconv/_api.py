"""Validation and dispatch behind the public functions.

NumPy arrays go to the reference (CPU), CuPy arrays to the CUDA kernels; both
are validated here first, so a bad call raises before anything runs.
"""

from __future__ import annotations

from typing import Optional

import numpy

from . import _geometry, reference


def _prepare(spatial_dims, input, weight, bias, stride, padding, output_padding, groups, dilation, input_name="input"):
    kind = _geometry.check_arrays([(input_name, input), ("weight", weight), ("bias", bias)])
    geometry = _geometry.geometry_of(
        spatial_dims, input.shape, weight.shape, None if bias is None else bias.shape,
        stride, padding, output_padding, groups, dilation, input_name=input_name,
    )  # fmt: skip
    return kind, geometry


def _require(kind: str, require: Optional[str]):
    if require is not None and kind != require:
        raise TypeError(f"this function takes {require}.ndarray arrays, got {kind}.ndarray")


def conv_transpose(spatial_dims, input, weight, bias, stride, padding, output_padding, groups, dilation, precision, require=None):
    kind, geometry = _prepare(spatial_dims, input, weight, bias, stride, padding, output_padding, groups, dilation)
    precision = _geometry.check_precision(precision)
    _require(kind, require)
    if kind == "cupy":
        from . import _cuda

        return _cuda.forward(input, weight, bias, geometry, precision)
    x4 = numpy.ascontiguousarray(input).reshape(geometry.input_shape4)
    w4 = numpy.ascontiguousarray(weight).reshape(geometry.weight_shape4)
    return reference.forward(x4, w4, bias, geometry).reshape(geometry.output_shape)


def conv_transpose_backward(
    spatial_dims, grad_output, input, weight, stride, padding, output_padding, groups, dilation, output_mask, precision, require=None
):
    kind = _geometry.check_arrays([("grad_output", grad_output), ("input", input), ("weight", weight)])
    geometry = _geometry.geometry_of(spatial_dims, input.shape, weight.shape, None, stride, padding, output_padding, groups, dilation)
    _geometry.check_grad_output(geometry, grad_output.shape)
    output_mask = _geometry.check_output_mask(output_mask)
    precision = _geometry.check_precision(precision)
    _require(kind, require)
    if kind == "cupy":
        from . import _cuda

        return _cuda.backward(grad_output, input, weight, geometry, output_mask, precision)
    gy4 = numpy.ascontiguousarray(grad_output).reshape(geometry.output_shape4)
    x4 = numpy.ascontiguousarray(input).reshape(geometry.input_shape4)
    w4 = numpy.ascontiguousarray(weight).reshape(geometry.weight_shape4)
    grad_input, grad_weight, grad_bias = reference.backward(gy4, x4, w4, geometry, output_mask)
    if grad_input is not None:
        grad_input = grad_input.reshape(input.shape)
    if grad_weight is not None:
        grad_weight = grad_weight.reshape(weight.shape)
    return grad_input, grad_weight, grad_bias
