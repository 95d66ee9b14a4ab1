"""The NumPy reference against torch on the CPU (torch is the oracle here)."""

from __future__ import annotations

import numpy
import pytest

import cupyconv
from cupyconv import reference

from sweep import CASES, relative_error

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _forward(case, x, w, b):
    fn = cupyconv.conv_transpose1d if case.dims == 1 else cupyconv.conv_transpose2d
    return fn(x, w, b, **case.kwargs)


def _torch_forward(case, x, w, b):
    fn = F.conv_transpose1d if case.dims == 1 else F.conv_transpose2d
    t = lambda a: None if a is None else torch.from_numpy(a)  # noqa: E731
    return fn(t(x), t(w), t(b), **case.kwargs)


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
def test_forward_matches_torch(case, dtype):
    rng = numpy.random.default_rng(1)
    x, w, b = (None if a is None else a.astype(dtype) for a in case.arrays(rng))
    expected = _torch_forward(case, x, w, b).numpy()
    actual = _forward(case, x, w, b)
    assert isinstance(actual, numpy.ndarray) and actual.dtype == dtype
    assert actual.shape == expected.shape
    assert relative_error(actual, expected) < (1e-6 if dtype == numpy.float32 else 1e-13)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_backward_matches_torch_autograd(case):
    rng = numpy.random.default_rng(2)
    x, w, b = case.arrays(rng)
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    bt = None if b is None else torch.tensor(b, requires_grad=True)
    fn = F.conv_transpose1d if case.dims == 1 else F.conv_transpose2d
    y = fn(xt, wt, bt, **case.kwargs)
    gy = rng.standard_normal(tuple(y.shape))
    y.backward(torch.from_numpy(gy))
    backward = cupyconv.conv_transpose1d_backward if case.dims == 1 else cupyconv.conv_transpose2d_backward
    grad_input, grad_weight, grad_bias = backward(gy, x, w, **case.kwargs)
    assert grad_input.shape == x.shape and grad_weight.shape == w.shape
    assert relative_error(grad_input, xt.grad.numpy()) < 1e-13
    assert relative_error(grad_weight, wt.grad.numpy()) < 1e-13
    expected_bias = gy.sum(axis=tuple(a for a in range(gy.ndim) if a != (1 if case.batch is not None else 0)))
    assert relative_error(grad_bias, expected_bias) < 1e-13


@pytest.mark.parametrize("case", CASES, ids=str)
def test_adjoint_identity(case):
    """<conv_transpose(x, w), y> = <x, grad_input(y, w)> for every configuration."""
    rng = numpy.random.default_rng(3)
    x, w, _ = case.arrays(rng)
    y = _forward(case, x, w, None)
    probe = rng.standard_normal(y.shape)
    backward = cupyconv.conv_transpose1d_backward if case.dims == 1 else cupyconv.conv_transpose2d_backward
    grad_input, _, _ = backward(probe, x, w, **case.kwargs, output_mask=(True, False, False))
    lhs, rhs = float(numpy.vdot(y, probe)), float(numpy.vdot(x, grad_input))
    assert abs(lhs - rhs) <= 1e-12 * max(1.0, abs(lhs), numpy.linalg.norm(y) * numpy.linalg.norm(probe))


def test_output_mask_gives_none():
    rng = numpy.random.default_rng(4)
    x, w = rng.standard_normal((2, 4, 5)), rng.standard_normal((4, 3, 3))
    gy = rng.standard_normal((2, 3, 7))
    gi, gw, gb = cupyconv.conv_transpose1d_backward(gy, x, w, output_mask=(False, True, False))
    assert gi is None and gb is None and gw.shape == w.shape


def test_non_contiguous_input_is_accepted():
    rng = numpy.random.default_rng(5)
    x = rng.standard_normal((2, 9, 4)).transpose(0, 2, 1)  # (2, 4, 9), not contiguous
    w = rng.standard_normal((4, 3, 3))[:, :, ::-1]  # negative strides
    expected = F.conv_transpose1d(torch.tensor(numpy.ascontiguousarray(x)), torch.tensor(numpy.ascontiguousarray(w)), stride=2)
    assert relative_error(cupyconv.conv_transpose1d(x, w, stride=2), expected.numpy()) < 1e-13


@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
def test_low_precision_dtypes_round_trip(dtype_name):
    """Half and bfloat16 NumPy inputs give outputs of the same dtype, computed
    with float32 accumulation (checked against float64 within the dtype's rounding)."""
    if dtype_name == "bfloat16":
        ml_dtypes = pytest.importorskip("ml_dtypes")
        dtype = numpy.dtype(ml_dtypes.bfloat16)
        unit = 2.0**-8
    else:
        dtype, unit = numpy.dtype(numpy.float16), 2.0**-11
    rng = numpy.random.default_rng(6)
    x, w, b = (a.astype(dtype) for a in CASES[1].arrays(rng))
    y = cupyconv.conv_transpose1d(x, w, b, **CASES[1].kwargs)
    assert y.dtype == dtype
    exact = reference.conv_transpose1d(*(a.astype(numpy.float64) for a in (x, w, b)), **CASES[1].kwargs)
    assert relative_error(y, exact) < 2 * unit


def test_reference_module_refuses_cupy_like_objects():
    with pytest.raises(TypeError, match="input"):
        reference.conv_transpose1d([[1.0]], numpy.ones((1, 1, 1)))
