"""Every bad call raises TypeError or ValueError naming the argument, before
any work; the next good call still works.  Run on NumPy arrays (the same
checks guard the CuPy path: tests/test_gpu.py repeats the GPU-only ones)."""

from __future__ import annotations

import numpy
import pytest

import cupyconv

rng = numpy.random.default_rng(0)
X1 = rng.standard_normal((2, 4, 7))
W1 = rng.standard_normal((4, 3, 3))
X2 = rng.standard_normal((2, 4, 5, 6))
W2 = rng.standard_normal((4, 3, 3, 3))


def _good_call_still_works():
    y = cupyconv.conv_transpose1d(X1, W1, stride=2)
    assert y.shape == (2, 3, 15)


BAD_FORWARD = [
    # (what, call kwargs, exception, message fragment)
    ("input ndim", dict(input=X1[0, 0]), ValueError, "input must have 2 .* or 3"),
    ("weight ndim", dict(weight=W1[0]), ValueError, "weight must have 3 dimensions"),
    ("channel mismatch", dict(weight=rng.standard_normal((5, 3, 3))), ValueError, r"weight.shape\[0\]"),
    ("groups not dividing", dict(groups=3), ValueError, "groups=3 must divide in_channels=4"),
    ("groups zero", dict(groups=0), ValueError, "groups must be positive"),
    ("groups float", dict(groups=2.0), TypeError, "groups must be an int"),
    ("stride zero", dict(stride=0), ValueError, "stride must be positive"),
    ("stride negative", dict(stride=-1), ValueError, "stride must be positive"),
    ("dilation zero", dict(dilation=0), ValueError, "dilation must be positive"),
    ("padding negative", dict(padding=-1), ValueError, "padding must be non-negative"),
    ("output_padding negative", dict(output_padding=-1), ValueError, "output_padding must be non-negative"),
    ("output_padding too large", dict(stride=2, dilation=2, output_padding=2), ValueError, "output_padding must be smaller"),
    ("stride tuple length", dict(stride=(1, 2)), ValueError, "stride must be an int or a sequence of 1"),
    ("stride float", dict(stride=1.5), TypeError, "stride must be an int"),
    ("stride bool", dict(stride=True), TypeError, "stride must be an int"),
    ("output size not positive", dict(padding=10), ValueError, "computed output size"),
    ("dtype mismatch", dict(weight=W1.astype(numpy.float32)), TypeError, "weight has dtype float32 but input has dtype float64"),
    ("integer dtype", dict(input=X1.astype(numpy.int64), weight=W1.astype(numpy.int64)), TypeError, "floating dtype"),
    ("complex dtype", dict(input=X1.astype(numpy.complex128), weight=W1.astype(numpy.complex128)), TypeError, "floating dtype"),
    ("bias shape", dict(bias=numpy.ones(4)), ValueError, r"bias must have shape \(3,\)"),
    ("bias dtype", dict(bias=numpy.ones(3, numpy.float32)), TypeError, "bias has dtype"),
    ("input not an array", dict(input=X1.tolist()), TypeError, "input must be a numpy.ndarray or cupy.ndarray"),
    ("weight not an array", dict(weight=3.0), TypeError, "weight must be a numpy.ndarray"),
    ("precision", dict(precision="fast"), ValueError, "precision must be None or one of"),
    ("empty spatial", dict(input=numpy.ones((2, 4, 0))), ValueError, "spatial size must be positive"),
    ("empty kernel", dict(weight=numpy.ones((4, 3, 0))), ValueError, "kernel size"),
]


@pytest.mark.parametrize("what, kwargs, exc, message", BAD_FORWARD, ids=[b[0] for b in BAD_FORWARD])
def test_bad_forward_call_raises(what, kwargs, exc, message):
    call = dict(input=X1, weight=W1, bias=None)
    call.update(kwargs)
    with pytest.raises(exc, match=message):
        cupyconv.conv_transpose1d(**call)
    _good_call_still_works()


BAD_FORWARD_2D = [
    ("2d input ndim", dict(input=X2[0, 0]), ValueError, "input must have 3 .* or 4"),
    ("2d per-axis output_padding", dict(stride=(2, 1), output_padding=(1, 1)), ValueError, "output_padding must be smaller"),
    ("2d stride triple", dict(stride=(1, 1, 1)), ValueError, "sequence of 2"),
    ("2d weight ndim", dict(weight=W1), ValueError, "weight must have 4 dimensions"),
]


@pytest.mark.parametrize("what, kwargs, exc, message", BAD_FORWARD_2D, ids=[b[0] for b in BAD_FORWARD_2D])
def test_bad_forward_2d_call_raises(what, kwargs, exc, message):
    call = dict(input=X2, weight=W2)
    call.update(kwargs)
    with pytest.raises(exc, match=message):
        cupyconv.conv_transpose2d(**call)
    _good_call_still_works()


def test_bad_backward_calls_raise():
    gy = rng.standard_normal((2, 3, 9))
    with pytest.raises(ValueError, match=r"grad_output must have the forward output's shape \(2, 3, 9\)"):
        cupyconv.conv_transpose1d_backward(gy[:, :, :8], X1, W1)
    with pytest.raises(ValueError, match="output_mask must be a sequence of 3"):
        cupyconv.conv_transpose1d_backward(gy, X1, W1, output_mask=(True, True))
    with pytest.raises(TypeError, match="grad_output has dtype float32"):
        cupyconv.conv_transpose1d_backward(gy.astype(numpy.float32), X1, W1)
    with pytest.raises(ValueError, match="precision"):
        cupyconv.conv_transpose1d_backward(gy, X1, W1, precision="tf64")
    with pytest.raises(ValueError, match="stride must be positive"):
        cupyconv.conv_transpose1d_backward(gy, X1, W1, stride=0)
    _good_call_still_works()


def test_per_axis_arguments_accept_lists_and_numpy_ints():
    y = cupyconv.conv_transpose2d(X2, W2, stride=[2, numpy.int64(1)], padding=(numpy.int32(1), 0))
    assert y.shape == (2, 3, 9, 8)


def test_remembered_geometry_answers_only_plain_arguments():
    """geometry_of remembers make_geometry's answers, but True, 2.0 and
    (1.0,) equal and hash like 1, 2 and (1,): after good calls with the plain
    values, the lookalikes must still raise."""
    from cupyconv import _geometry

    first = _geometry.geometry_of(1, X1.shape, (4, 1, 3), None, 1, 0, 0, 2, 1)
    assert _geometry.geometry_of(1, X1.shape, (4, 1, 3), None, 1, 0, 0, 2, 1) is first  # remembered
    assert first == _geometry.make_geometry(1, X1.shape, (4, 1, 3), None, 1, 0, 0, 2, 1)
    cupyconv.conv_transpose1d(X1, W1, stride=(1,), groups=1)
    for kwargs, message in (
        (dict(stride=True), "stride must be an int"),
        (dict(stride=(1.0,)), "stride must be an int"),
        (dict(groups=1.0), "groups must be an int"),
        (dict(dilation=(True,)), "dilation must be an int"),
    ):
        with pytest.raises(TypeError, match=message):
            cupyconv.conv_transpose1d(X1, W1, **kwargs)
    # lists and NumPy ints are not remembered, but work
    assert _geometry.geometry_of(1, X1.shape, W1.shape, None, [2], numpy.int64(0), 0, 1, 1) == _geometry.geometry_of(
        1, X1.shape, W1.shape, None, 2, 0, 0, 1, 1
    )
