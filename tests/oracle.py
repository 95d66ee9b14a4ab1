"""The accuracy oracle the GPU tests share: the NumPy reference in longdouble
(64-bit mantissa on x86), finer than every dtype under test, float64 included,
and the error bounds each mode is held to."""

from __future__ import annotations

import numpy

from cupyconv import _geometry, reference

from sweep import relative_error

# (dtype name, precision): every dtype, and both float32 modes.
MODES = [("float32", "highest"), ("float32", "tf32"), ("float64", "highest"), ("float16", "highest"), ("bfloat16", "highest")]
UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8, "float32": 2.0**-24, "float64": 2.0**-53}


def numpy_dtype(name):
    if name == "bfloat16":
        import ml_dtypes

        return numpy.dtype(ml_dtypes.bfloat16)
    return numpy.dtype(name)


def bound(dtype_name, torch_error):
    """What a result may err by: twice torch's error on the same inputs in the
    same mode, never less than one unit roundoff (a correctly rounded result)."""
    return max(2.0 * torch_error, UNIT_ROUNDOFF[dtype_name])


def check_accuracy(host, oracle, dtype_name, precision, reference_error, what):
    """The GPU tests' verdict on one result (`host`, float64 on the CPU): no
    unwritten (NaN) element, float32 "highest" under 1e-5, and within
    bound(dtype, reference_error), where reference_error is torch's error on
    the same inputs (in tf32 mode, or an ideal TF32 computation's if larger)."""
    assert not numpy.isnan(host).any(), f"{what}: unwritten (NaN) elements"
    error = relative_error(host, oracle)
    if dtype_name == "float32" and precision == "highest":
        assert error < 1e-5, f"{what}: relative error {error:.3g}"
    assert error <= bound(dtype_name, reference_error), f"{what}: error {error:.3g} vs torch {reference_error:.3g}"


def round_tf32(a):
    """float32 values rounded to TF32 (10 mantissa bits, to nearest with ties
    away from zero: cvt.rna.tf32.f32), returned as float64."""
    bits = numpy.asarray(a, dtype=numpy.float64).astype(numpy.float32).view(numpy.uint32)
    bits = (bits + numpy.uint32(0x1000)) & numpy.uint32(0xFFFFE000)
    return bits.view(numpy.float32).astype(numpy.float64)


def ideal_tf32_errors(case, x, w, b, gy):
    """The relative errors of an ideal TF32 computation (every multiplied
    operand rounded to TF32, all else exact) of (output, grad_input,
    grad_weight, grad_bias).

    precision="tf32" permits exactly this rounding, but cuDNN computes small
    problems in plain float32 even when TF32 is allowed, so its error there is
    no yardstick for a TF32 result: in that mode a result may err by twice
    the larger of torch's error and this one."""
    r = round_tf32
    rounded_output = exact_forward(case, r(x), r(w), b)
    rounded_grads = exact_backward(case, r(gy), r(x), r(w))
    errors = [relative_error(rounded_output, exact_forward(case, x, w, b))]
    errors += [relative_error(g, e) for g, e in zip(rounded_grads, exact_backward(case, gy, x, w))]
    return tuple(errors)


def geometry_of(case):
    lead = () if case.batch is None else (case.batch,)
    return _geometry.make_geometry(
        case.dims, lead + (case.in_channels,) + case.size,
        (case.in_channels, case.out_channels // case.groups) + case.kernel,
        None, case.stride, case.padding, case.output_padding, case.groups, case.dilation,
    )  # fmt: skip


def exact_forward(case, x, w, b):
    g = geometry_of(case)
    wide = lambda a: None if a is None else a.astype(numpy.longdouble)  # noqa: E731
    y = reference.forward(wide(x).reshape(g.input_shape4), wide(w).reshape(g.weight_shape4), wide(b), g)
    return y.astype(numpy.float64).reshape(g.output_shape)


def exact_backward(case, gy, x, w):
    g = geometry_of(case)
    wide = lambda a: a.astype(numpy.longdouble)  # noqa: E731
    grads = reference.backward(
        wide(gy).reshape(g.output_shape4), wide(x).reshape(g.input_shape4), wide(w).reshape(g.weight_shape4), g, (True, True, True)
    )
    shapes = (x.shape, w.shape, (case.out_channels,))
    return tuple(grad.astype(numpy.float64).reshape(shape) for grad, shape in zip(grads, shapes))
