"""Transposed convolution in NumPy: the CPU path and the test oracle.

Vectorised over batch, channels and positions; the only Python loop is over
the kernel taps.  With input ``x[n, ci, h, w]`` and weight ``w[ci, j, kh, kw]``
(j the output channel within ci's group), every tap adds one product to a
strided window of an uncropped output::

    y_full[n, co, h*sh + kh*dh, w*sw + kw*dw] += sum_ci x[n, ci, h, w] * w[ci, j, kh, kw]
    y = y_full[:, :, ph : ph + H_out, pw : pw + W_out]

and the backward passes read the same windows of the (zero-extended)
gradient.  Products accumulate in float32 for half, bfloat16 and float32
inputs, and in float64 for float64 inputs (in longdouble for longdouble
inputs, which the internal functions below accept for test oracles).

These functions take NumPy arrays; the public ``cupyconv.conv_transpose*``
functions route NumPy inputs here after validating them.
"""

from __future__ import annotations

import numpy

from ._geometry import Geometry


def accumulator_dtype(dtype) -> numpy.dtype:
    """float32 for the 16- and 32-bit types; wider types (float64, and the
    longdouble the GPU tests use for an oracle finer than float64) keep their own."""
    dtype = numpy.dtype(dtype)
    return numpy.dtype(numpy.float32) if dtype.itemsize <= 4 else dtype


def _grouped(array4: numpy.ndarray, groups: int) -> numpy.ndarray:
    """(N, C, H, W) -> (N, groups, C // groups, H, W)."""
    n, c, h, w = array4.shape
    return array4.reshape(n, groups, c // groups, h, w)


def _full_extent(geometry: Geometry, axis: int) -> int:
    """Length of the uncropped output along an axis, long enough to hold
    every tap's window and the cropped output (output_padding may reach past
    the last tap)."""
    size = geometry.in_size[axis]
    reach = (size - 1) * geometry.stride[axis] + geometry.dilation[axis] * (geometry.kernel[axis] - 1) + 1
    return max(reach, geometry.padding[axis] + geometry.out_size[axis])


def _tap_window(geometry: Geometry, kh: int, kw: int):
    """Index of the strided window of the uncropped output that tap (kh, kw) touches."""
    (h, w), (sh, sw), (dh, dw) = geometry.in_size, geometry.stride, geometry.dilation
    return (
        slice(None),
        slice(None),
        slice(None),
        slice(kh * dh, kh * dh + (h - 1) * sh + 1, sh),
        slice(kw * dw, kw * dw + (w - 1) * sw + 1, sw),
    )


def _crop(geometry: Geometry):
    (ph, pw), (ho, wo) = geometry.padding, geometry.out_size
    return (slice(None), slice(None), slice(None), slice(ph, ph + ho), slice(pw, pw + wo))


def forward(x4: numpy.ndarray, weight4: numpy.ndarray, bias, geometry: Geometry) -> numpy.ndarray:
    """y = conv_transpose(x, weight) + bias, all in (N, C, H, W) form."""
    g = geometry.groups
    acc = accumulator_dtype(x4.dtype)
    x = _grouped(x4.astype(acc, copy=False), g)  # (N, g, Cg_in, H, W)
    # (C_in, Cg_out, KH, KW) -> (g, Cg_in, Cg_out, KH, KW)
    w = weight4.astype(acc, copy=False).reshape((g, geometry.in_channels_per_group) + weight4.shape[1:])
    n = geometry.batch
    full = numpy.zeros((n, g, geometry.out_channels_per_group, _full_extent(geometry, 0), _full_extent(geometry, 1)), acc)
    kh_count, kw_count = geometry.kernel
    for kh in range(kh_count):
        for kw in range(kw_count):
            full[_tap_window(geometry, kh, kw)] += numpy.einsum("ngchw,gcj->ngjhw", x, w[..., kh, kw], optimize=True)
    y = full[_crop(geometry)].reshape(geometry.output_shape4)
    if bias is not None:
        y = y + bias.astype(acc, copy=False).reshape(1, -1, 1, 1)
    return y.astype(x4.dtype)


def backward(grad_output4, x4, weight4, geometry: Geometry, output_mask):
    """(grad_input, grad_weight, grad_bias) in (N, C, H, W) / weight form;
    a False entry of output_mask gives None."""
    g = geometry.groups
    dtype = grad_output4.dtype
    acc = accumulator_dtype(dtype)
    n = geometry.batch
    # Zero-extend grad_output into the uncropped frame so every tap window is in bounds.
    full = numpy.zeros((n, g, geometry.out_channels_per_group, _full_extent(geometry, 0), _full_extent(geometry, 1)), acc)
    full[_crop(geometry)] = _grouped(grad_output4.astype(acc, copy=False), g)
    w = weight4.astype(acc, copy=False).reshape((g, geometry.in_channels_per_group) + weight4.shape[1:])
    x = _grouped(x4.astype(acc, copy=False), g) if output_mask[1] else None

    grad_input = numpy.zeros(x4.shape, acc).reshape(_grouped(x4, g).shape) if output_mask[0] else None
    grad_weight = numpy.zeros(w.shape, acc) if output_mask[1] else None
    kh_count, kw_count = geometry.kernel
    for kh in range(kh_count):
        for kw in range(kw_count):
            window = full[_tap_window(geometry, kh, kw)]  # (N, g, Cg_out, H, W)
            if grad_input is not None:
                grad_input += numpy.einsum("ngjhw,gcj->ngchw", window, w[..., kh, kw], optimize=True)
            if grad_weight is not None:
                grad_weight[..., kh, kw] = numpy.einsum("ngchw,ngjhw->gcj", x, window, optimize=True)

    if grad_input is not None:
        grad_input = grad_input.reshape(x4.shape).astype(dtype)
    if grad_weight is not None:
        grad_weight = grad_weight.reshape(weight4.shape).astype(dtype)
    grad_bias = grad_output4.astype(acc, copy=False).sum(axis=(0, 2, 3)).astype(dtype) if output_mask[2] else None
    return grad_input, grad_weight, grad_bias


# --- the public signatures, NumPy arrays only ---------------------------------


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1, *, precision=None):
    """cupyconv.conv_transpose1d on NumPy arrays (``precision`` is checked, and moot on the CPU)."""
    from . import _api

    return _api.conv_transpose(1, input, weight, bias, stride, padding, output_padding, groups, dilation, precision, require="numpy")


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1, *, precision=None):
    """cupyconv.conv_transpose2d on NumPy arrays."""
    from . import _api

    return _api.conv_transpose(2, input, weight, bias, stride, padding, output_padding, groups, dilation, precision, require="numpy")


def conv_transpose1d_backward(
    grad_output, input, weight, stride=1, padding=0, output_padding=0, groups=1, dilation=1, *,
    output_mask=(True, True, True), precision=None,
):  # fmt: skip
    """cupyconv.conv_transpose1d_backward on NumPy arrays."""
    from . import _api

    return _api.conv_transpose_backward(
        1, grad_output, input, weight, stride, padding, output_padding, groups, dilation, output_mask, precision, require="numpy"
    )


def conv_transpose2d_backward(
    grad_output, input, weight, stride=1, padding=0, output_padding=0, groups=1, dilation=1, *,
    output_mask=(True, True, True), precision=None,
):  # fmt: skip
    """cupyconv.conv_transpose2d_backward on NumPy arrays."""
    from . import _api

    return _api.conv_transpose_backward(
        2, grad_output, input, weight, stride, padding, output_padding, groups, dilation, output_mask, precision, require="numpy"
    )
