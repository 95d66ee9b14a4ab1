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


def channels_last(shape, strides) -> bool:
    """Whether 4D (N, C, H, W) strides, in elements, put the channels last:
    c10's is_channels_last_strides_2d, the test behind torch's
    suggest_memory_format (a tensor of one channel or one position is
    classed as torch classes it)."""
    if len(shape) != 4 or strides[1] == 0:
        return False
    smallest = 0
    for d in (1, 3, 2, 0):
        if shape[d] == 0 or strides[d] < smallest or (d == 0 and smallest == strides[1]):
            return False
        smallest = strides[d] * shape[d] if shape[d] > 1 else strides[d]
    return True


def _array_channels_last(array) -> bool:
    # A C-contiguous array counts as channels first whatever its strides say
    # (an (N, C, 1, 1) one can pass both tests): remembered calls, which
    # take C-contiguous arrays only, return C-contiguous results.
    return array.ndim == 4 and not array.flags.c_contiguous and channels_last(array.shape, tuple(s // array.itemsize for s in array.strides))


def _in_layout_of(like, result):
    """`result` (C-contiguous, the kernels' or the reference's) with `like`'s
    layout: channels last where `like` is a 2D call's channels-last array
    (a copy), else as it is.  NumPy and CuPy alike."""
    if result is None or not _array_channels_last(like):
        return result
    xp = numpy if isinstance(result, numpy.ndarray) else _gpu().cupy
    return xp.ascontiguousarray(result.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def _require(kind: str, require: Optional[str]):
    if require is not None and kind != require:
        raise TypeError(f"this function takes {require}.ndarray arrays, got {kind}.ndarray")


# A call that matches one checked before goes straight to its remembered
# launches (cupyconv._remember, which owns the tables), before any checks:
# the key (_fast_key) holds everything the checks and the plan read from the
# call.  _REMEMBERED is that module once a CuPy array has been seen (the GPU
# path imports CuPy; NumPy calls never do).
_REMEMBERED = None


def _gpu():
    """The GPU path (cupyconv._cuda), imported on the first CuPy call."""
    global _REMEMBERED
    from . import _cuda, _remember

    _REMEMBERED = _remember
    return _cuda


def _fast_key(spatial_dims, input, weight, bias, stride, padding, output_padding, groups, dilation, precision):
    """The key of a CuPy forward call in _FAST_FORWARD, or None for calls
    that always take the checked path: arrays not all cupy.ndarray, arguments
    that are not plain ints or tuples of ints (True and 2.0 equal 1 and 2 but
    are rejected), a precision that is not None or a str.  Shapes, strides,
    dtypes and devices of every array are in it, so a call that matches a
    validated one passes the same checks.  A None (or any other non-array)
    weight or bias gives None here, so it reaches check_arrays, which raises
    the TypeError naming it (input is cupy.ndarray: the caller checked)."""
    ndarray = _REMEMBERED.ndarray
    if type(weight) is not ndarray or (bias is not None and type(bias) is not ndarray):
        return None
    if not (type(stride) is int and type(padding) is int and type(output_padding) is int and type(groups) is int and type(dilation) is int):
        plain = _geometry._plain  # (the ints above skip its five calls)
        if not (plain(stride) and plain(padding) and plain(output_padding) and type(groups) is int and plain(dilation)):
            return None
    if precision is not None and type(precision) is not str:
        return None
    b = None if bias is None else (bias.shape, bias.strides, bias.dtype, bias.data.device_id)
    return (
        spatial_dims, input.shape, input.strides, input.dtype, input.data.device_id,
        weight.shape, weight.strides, weight.dtype, weight.data.device_id, b,
        stride, padding, output_padding, groups, dilation, precision,
    )  # fmt: skip


def _fast_backward_key(spatial_dims, grad_output, input, weight, stride, padding, output_padding, groups, dilation, output_mask, precision):
    """The key of a CuPy backward call in _FAST_BACKWARD, or None for calls
    that always take the checked path (as _fast_key; an output_mask that is
    not a tuple or list of three bools)."""
    ndarray = _REMEMBERED.ndarray
    if type(grad_output) is not ndarray or type(input) is not ndarray:
        return None
    if type(output_mask) not in (tuple, list) or len(output_mask) != 3 or not all(type(m) is bool for m in output_mask):
        return None
    key = _fast_key(spatial_dims, input, weight, None, stride, padding, output_padding, groups, dilation, precision)
    if key is None:
        return None
    return key + (grad_output.shape, grad_output.strides, grad_output.dtype, grad_output.data.device_id, tuple(output_mask))


def conv_transpose(spatial_dims, input, weight, bias, stride, padding, output_padding, groups, dilation, precision, require=None):
    key = None
    remembered = _REMEMBERED
    if remembered is not None and type(input) is remembered.ndarray and require is None:
        key = _fast_key(spatial_dims, input, weight, bias, stride, padding, output_padding, groups, dilation, precision)
        fast = remembered.FAST_FORWARD.get(key)
        if fast is not None:
            y = fast(input, weight, bias)
            if y is not None:
                return y
    kind, geometry = _prepare(spatial_dims, input, weight, bias, stride, padding, output_padding, groups, dilation)
    given_precision, precision = precision, _geometry.check_precision(precision)
    _require(kind, require)
    if kind == "cupy":
        cuda = _gpu()
        if key is None and require is None:  # (the first CuPy call: the tables were not loaded yet; keyed as later calls are)
            key = _fast_key(spatial_dims, input, weight, bias, stride, padding, output_padding, groups, dilation, given_precision)
        # (a channels-last input is copied on the way in, so no call of one is
        # remembered: the fast path above never sees one)
        return _in_layout_of(input, cuda.forward(input, weight, bias, geometry, precision, fast_key=key))
    x4 = numpy.ascontiguousarray(input).reshape(geometry.input_shape4)
    w4 = numpy.ascontiguousarray(weight).reshape(geometry.weight_shape4)
    return _in_layout_of(input, reference.forward(x4, w4, bias, geometry).reshape(geometry.output_shape))


def conv_transpose_backward(
    spatial_dims, grad_output, input, weight, stride, padding, output_padding, groups, dilation, output_mask, precision, require=None
):
    key = None
    remembered = _REMEMBERED
    if require is None and remembered is not None:
        key = _fast_backward_key(spatial_dims, grad_output, input, weight, stride, padding, output_padding, groups, dilation, output_mask, precision)
        fast = remembered.FAST_BACKWARD.get(key) if key is not None else None
        if fast is not None:
            grads = fast(grad_output, input, weight)
            if grads is not None:
                return grads
    kind = _geometry.check_arrays([("grad_output", grad_output), ("input", input), ("weight", weight)])
    geometry = _geometry.geometry_of(spatial_dims, input.shape, weight.shape, None, stride, padding, output_padding, groups, dilation)
    _geometry.check_grad_output(geometry, grad_output.shape)
    given = output_mask, precision
    output_mask = _geometry.check_output_mask(output_mask)
    precision = _geometry.check_precision(precision)
    _require(kind, require)
    if kind == "cupy":
        cuda = _gpu()
        if remembered is None and require is None:  # (the first CuPy call: the tables were not loaded yet; keyed as later calls are)
            key = _fast_backward_key(spatial_dims, grad_output, input, weight, stride, padding, output_padding, groups, dilation, *given)
        grad_input, grad_weight, grad_bias = cuda.backward(grad_output, input, weight, geometry, output_mask, precision, fast_key=key)
        return _in_layout_of(input, grad_input), grad_weight, grad_bias
    gy4 = numpy.ascontiguousarray(grad_output).reshape(geometry.output_shape4)
    x4 = numpy.ascontiguousarray(input).reshape(geometry.input_shape4)
    w4 = numpy.ascontiguousarray(weight).reshape(geometry.weight_shape4)
    grad_input, grad_weight, grad_bias = reference.backward(gy4, x4, w4, geometry, output_mask)
    if grad_input is not None:
        grad_input = _in_layout_of(input, grad_input.reshape(input.shape))
    if grad_weight is not None:
        grad_weight = grad_weight.reshape(weight.shape)
    return grad_input, grad_weight, grad_bias
