"""Every bad call raises TypeError or ValueError naming the argument, before
any work; the next good call still works.  Run on NumPy arrays (the same
checks guard the CuPy path: tests/gpu/test_errors_gpu.py repeats the GPU-only ones)."""

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
    # None and other wrong kinds of argument (issue 62)
    ("input None", dict(input=None), TypeError, "input must be a numpy.ndarray or cupy.ndarray, got None"),
    ("weight None", dict(weight=None), TypeError, "weight must be a numpy.ndarray or cupy.ndarray, got None"),
    ("input and weight None", dict(input=None, weight=None), TypeError, "input must be a numpy.ndarray or cupy.ndarray, got None"),
    ("input a float", dict(input=1.0), TypeError, "input must be a numpy.ndarray"),
    ("bias a list", dict(bias=[0.0, 0.0, 0.0]), TypeError, "bias must be a numpy.ndarray or cupy.ndarray, got builtins.list"),
    ("bias a float", dict(bias=0.0), TypeError, "bias must be a numpy.ndarray"),
    ("bias 2d", dict(bias=numpy.ones((1, 3))), ValueError, r"bias must have shape \(3,\)"),
    ("stride None", dict(stride=None), TypeError, "stride must be an int"),
    ("stride str", dict(stride="2"), TypeError, "stride must be an int"),
    ("stride nested list", dict(stride=[[2]]), TypeError, "stride must be an int"),
    ("stride numpy array", dict(stride=numpy.array([2])), TypeError, "stride must be an int"),
    ("stride numpy 0-d array", dict(stride=numpy.array(2)), TypeError, "stride must be an int"),
    ("stride tuple with a float", dict(stride=(2.0,)), TypeError, "stride must be an int"),
    ("padding None", dict(padding=None), TypeError, "padding must be an int"),
    ("padding float", dict(padding=1.0), TypeError, "padding must be an int"),
    ("padding str", dict(padding="same"), TypeError, "padding must be an int"),
    ("padding bool", dict(padding=False), TypeError, "padding must be an int"),
    ("output_padding None", dict(output_padding=None), TypeError, "output_padding must be an int"),
    ("output_padding float", dict(output_padding=0.0), TypeError, "output_padding must be an int"),
    ("output_padding tuple length", dict(output_padding=()), ValueError, "output_padding must be an int or a sequence of 1"),
    ("dilation None", dict(dilation=None), TypeError, "dilation must be an int"),
    ("dilation float", dict(dilation=2.0), TypeError, "dilation must be an int"),
    ("dilation bool", dict(dilation=True), TypeError, "dilation must be an int"),
    ("dilation negative", dict(dilation=-2), ValueError, "dilation must be positive"),
    ("groups None", dict(groups=None), TypeError, "groups must be an int"),
    ("groups str", dict(groups="1"), TypeError, "groups must be an int"),
    ("groups bool", dict(groups=True), TypeError, "groups must be an int"),
    ("groups tuple", dict(groups=(1,)), TypeError, "groups must be an int"),
    ("groups negative", dict(groups=-1), ValueError, "groups must be positive"),
    ("precision int", dict(precision=3), TypeError, "precision must be None or one of"),
    ("precision list", dict(precision=["tf32"]), TypeError, "precision must be None or one of"),
    ("precision bytes", dict(precision=b"tf32"), TypeError, "precision must be None or one of"),
    ("precision case", dict(precision="TF32"), ValueError, "precision must be None or one of"),
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
    ("2d input None", dict(input=None), TypeError, "input must be a numpy.ndarray or cupy.ndarray, got None"),
    ("2d weight None", dict(weight=None), TypeError, "weight must be a numpy.ndarray or cupy.ndarray, got None"),
    ("2d stride pair with None", dict(stride=(2, None)), TypeError, "stride must be an int or a sequence of 2"),
    ("2d padding pair of floats", dict(padding=(1.0, 1.0)), TypeError, "padding must be an int or a sequence of 2"),
    ("2d dilation nested", dict(dilation=[(1,), (1,)]), TypeError, "dilation must be an int or a sequence of 2"),
    ("2d groups float", dict(groups=1.0), TypeError, "groups must be an int"),
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


GY1 = rng.standard_normal((2, 3, 9))  # conv_transpose1d(X1, W1)'s output shape
GY2 = rng.standard_normal((2, 3, 7, 8))  # conv_transpose2d(X2, W2)'s

BAD_BACKWARD = [
    # (what, call kwargs, exception, message fragment), on conv_transpose1d_backward(GY1, X1, W1)
    ("grad_output None", dict(grad_output=None), TypeError, "grad_output must be a numpy.ndarray or cupy.ndarray, got None"),
    ("input None", dict(input=None), TypeError, "input must be a numpy.ndarray or cupy.ndarray, got None"),
    ("weight None", dict(weight=None), TypeError, "weight must be a numpy.ndarray or cupy.ndarray, got None"),
    ("all None", dict(grad_output=None, input=None, weight=None), TypeError, "grad_output must be a numpy.ndarray"),
    ("grad_output a list", dict(grad_output=GY1.tolist()), TypeError, "grad_output must be a numpy.ndarray"),
    ("input a list", dict(input=X1.tolist()), TypeError, "input must be a numpy.ndarray"),
    ("weight a float", dict(weight=1.0), TypeError, "weight must be a numpy.ndarray"),
    ("grad_output ndim", dict(grad_output=GY1[0, 0]), ValueError, "grad_output must have the forward output's shape"),
    ("input dtype", dict(input=X1.astype(numpy.float32)), TypeError, "input has dtype float32 but grad_output has dtype float64"),
    ("integer grad_output", dict(grad_output=GY1.astype(numpy.int64)), TypeError, "grad_output must have a floating dtype"),
    ("stride None", dict(stride=None), TypeError, "stride must be an int"),
    ("stride float", dict(stride=1.0), TypeError, "stride must be an int"),
    ("padding str", dict(padding="0"), TypeError, "padding must be an int"),
    ("padding negative", dict(padding=-1), ValueError, "padding must be non-negative"),
    ("output_padding bool", dict(output_padding=False), TypeError, "output_padding must be an int"),
    ("dilation nested", dict(dilation=[[1]]), TypeError, "dilation must be an int"),
    ("dilation tuple length", dict(dilation=(1, 1)), ValueError, "dilation must be an int or a sequence of 1"),
    ("groups None", dict(groups=None), TypeError, "groups must be an int"),
    ("groups float", dict(groups=1.0), TypeError, "groups must be an int"),
    ("groups zero", dict(groups=0), ValueError, "groups must be positive"),
    ("output_mask None", dict(output_mask=None), TypeError, "output_mask must be a sequence of 3"),
    ("output_mask str", dict(output_mask="yes"), TypeError, "output_mask must be a sequence of 3"),
    ("output_mask bool", dict(output_mask=True), TypeError, "output_mask must be a sequence of 3"),
    ("output_mask numpy array", dict(output_mask=numpy.ones(3, bool)), TypeError, "output_mask must be a sequence of 3"),
    ("output_mask length 4", dict(output_mask=(True,) * 4), ValueError, "output_mask must be a sequence of 3"),
    ("output_mask None entry", dict(output_mask=(None, True, True)), TypeError, "output_mask must be a sequence of 3"),
    ("output_mask str entries", dict(output_mask=("a", "b", "c")), TypeError, "output_mask must be a sequence of 3"),
    ("output_mask float entry", dict(output_mask=(1.0, 1, 1)), TypeError, "output_mask must be a sequence of 3"),
    ("output_mask int 2", dict(output_mask=(2, 0, 1)), TypeError, "output_mask must be a sequence of 3"),
    ("precision int", dict(precision=1), TypeError, "precision must be None or one of"),
    ("precision unknown", dict(precision="fast"), ValueError, "precision must be None or one of"),
]


def _good_backward_still_works():
    grads = cupyconv.conv_transpose1d_backward(GY1, X1, W1)
    assert [g.shape for g in grads] == [X1.shape, W1.shape, (3,)]


@pytest.mark.parametrize("what, kwargs, exc, message", BAD_BACKWARD, ids=[b[0] for b in BAD_BACKWARD])
def test_bad_backward_call_raises(what, kwargs, exc, message):
    call = dict(grad_output=GY1, input=X1, weight=W1)
    call.update(kwargs)
    with pytest.raises(exc, match=message):
        cupyconv.conv_transpose1d_backward(**call)
    _good_backward_still_works()
    _good_call_still_works()


BAD_BACKWARD_2D = [
    ("2d grad_output None", dict(grad_output=None), TypeError, "grad_output must be a numpy.ndarray or cupy.ndarray, got None"),
    ("2d input None", dict(input=None), TypeError, "input must be a numpy.ndarray or cupy.ndarray, got None"),
    ("2d weight None", dict(weight=None), TypeError, "weight must be a numpy.ndarray or cupy.ndarray, got None"),
    ("2d stride pair with a float", dict(stride=(1, 1.0)), TypeError, "stride must be an int or a sequence of 2"),
    ("2d padding triple", dict(padding=(0, 0, 0)), ValueError, "padding must be an int or a sequence of 2"),
    ("2d output_mask list of two", dict(output_mask=[True, False]), ValueError, "output_mask must be a sequence of 3"),
]


@pytest.mark.parametrize("what, kwargs, exc, message", BAD_BACKWARD_2D, ids=[b[0] for b in BAD_BACKWARD_2D])
def test_bad_backward_2d_call_raises(what, kwargs, exc, message):
    call = dict(grad_output=GY2, input=X2, weight=W2)
    call.update(kwargs)
    with pytest.raises(exc, match=message):
        cupyconv.conv_transpose2d_backward(**call)
    grads = cupyconv.conv_transpose2d_backward(GY2, X2, W2)
    assert [g.shape for g in grads] == [X2.shape, W2.shape, (3,)]


def test_output_mask_accepts_bools_numpy_bools_and_01():
    full = cupyconv.conv_transpose1d_backward(GY1, X1, W1)
    for mask in ((True, False, True), [numpy.True_, numpy.False_, True], (1, 0, 1), [numpy.int64(1), 0, 1]):
        grads = cupyconv.conv_transpose1d_backward(GY1, X1, W1, output_mask=mask)
        assert grads[1] is None
        numpy.testing.assert_array_equal(grads[0], full[0])
        numpy.testing.assert_array_equal(grads[2], full[2])


def test_cupy_fast_path_sends_none_to_the_checks(monkeypatch):
    """A CuPy call with a None weight (or bias of the wrong kind) takes no
    fast path: _fast_key gives None, and check_arrays raises the TypeError
    naming the argument (not an AttributeError reading None's shape).  Run
    without a GPU on a stand-in for cupy.ndarray (a class named ndarray in a
    module named cupy...), which nothing reads before the checks raise."""
    import types

    from cupyconv import _api

    stub = types.ModuleType("cupy_stub")
    exec("class ndarray:\n    pass", stub.__dict__)
    # the remembered calls' tables as _api sees them once a CuPy call has run
    monkeypatch.setattr(_api, "_REMEMBERED", types.SimpleNamespace(ndarray=stub.ndarray, FAST_FORWARD={}, FAST_BACKWARD={}))
    x = stub.ndarray()
    for spatial_dims in (1, 2):
        with pytest.raises(TypeError, match="weight must be a numpy.ndarray or cupy.ndarray, got None"):
            _api.conv_transpose(spatial_dims, x, None, None, 1, 0, 0, 1, 1, None)
        with pytest.raises(TypeError, match="bias must be a numpy.ndarray or cupy.ndarray, got builtins.list"):
            _api.conv_transpose(spatial_dims, x, x, [1.0], 1, 0, 0, 1, 1, None)
        with pytest.raises(TypeError, match="weight must be a numpy.ndarray or cupy.ndarray, got None"):
            _api.conv_transpose_backward(spatial_dims, x, x, None, 1, 0, 0, 1, 1, (True, True, True), None)
        with pytest.raises(TypeError, match="input must be a numpy.ndarray or cupy.ndarray, got None"):
            _api.conv_transpose_backward(spatial_dims, x, None, x, 1, 0, 0, 1, 1, (True, True, True), None)
    assert _api._fast_key(1, x, None, None, 1, 0, 0, 1, 1, None) is None
    assert _api._fast_backward_key(1, x, x, None, 1, 0, 0, 1, 1, (True, True, True), None) is None
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


# --------------------------------------------------------------------------
# The torch adapter on CPU tensors, where torch's own operator computes once
# the adapter has checked every argument: the same TypeError (or, for values
# and shapes, cupyconv.torch.ArgumentError, a RuntimeError and a ValueError)
# naming the argument, of a type torch's own function raises too.

try:
    import torch
    import torch.nn.functional as F

    import cupyconv.torch as ct
    from cupyconv.torch import _functional
except ImportError:  # torch is optional
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="needs torch")


@pytest.fixture(params=["custom_op", "function"])
def adapter_path(request):
    """Through the custom op (the eager fast path off), then the
    autograd.Function / implementation that plain eager calls take."""
    if request.param == "custom_op" and not _functional.HAS_CUSTOM_OP:
        pytest.skip("torch.library.custom_op needs torch >= 2.4")
    with _functional.operator_route(request.param):
        yield request.param


def _tensors():
    gen = torch.Generator().manual_seed(62)
    return dict(
        x1=torch.randn(2, 4, 7, generator=gen), w1=torch.randn(4, 3, 3, generator=gen),
        x2=torch.randn(2, 4, 5, 6, generator=gen), w2=torch.randn(4, 3, 3, 3, generator=gen),
    )  # fmt: skip


def _adapter_good_calls_still_work(t):
    for x, w, ours, theirs in ((t["x1"], t["w1"], ct.conv_transpose1d, F.conv_transpose1d), (t["x2"], t["w2"], ct.conv_transpose2d, F.conv_transpose2d)):
        w = w.clone().requires_grad_()
        y = ours(x, w, stride=2)
        assert torch.allclose(y, theirs(x, w, stride=2), rtol=1e-5, atol=1e-6)
        y.sum().backward()  # and through autograd
        assert w.grad is not None and w.grad.shape == w.shape


BAD_ADAPTER = [
    # (what, dims, call kwargs (a string names a tensor of _tensors()), exception, message fragment)
    ("input None", 1, dict(input=None), TypeError, "input must be a Tensor, got NoneType"),
    ("weight None", 1, dict(weight=None), TypeError, "weight must be a Tensor, got NoneType"),
    ("input and weight None", 1, dict(input=None, weight=None), TypeError, "input must be a Tensor"),
    ("input numpy", 1, dict(input=X1), TypeError, "input must be a Tensor, got ndarray"),
    ("weight a list", 1, dict(weight=[[1.0]]), TypeError, "weight must be a Tensor, got list"),
    ("bias a list", 1, dict(bias=[0.0, 0.0, 0.0]), TypeError, "bias must be a Tensor or None, got list"),
    ("bias numpy", 1, dict(bias=numpy.zeros(3, numpy.float32)), TypeError, "bias must be a Tensor or None"),
    ("bias a float", 1, dict(bias=0.0), TypeError, "bias must be a Tensor or None"),
    ("stride None", 1, dict(stride=None), TypeError, "stride must be an int, got NoneType"),
    ("stride float", 1, dict(stride=2.0), TypeError, "stride must be an int, got float"),
    ("stride str", 1, dict(stride="2"), TypeError, "stride must be an int"),
    ("stride bool", 1, dict(stride=True), TypeError, "stride must be an int, got bool"),
    ("stride nested list", 1, dict(stride=[[2]]), TypeError, "stride must be an int"),
    ("stride tuple with a float", 1, dict(stride=(2.0,)), TypeError, "stride must be an int"),
    ("padding None", 1, dict(padding=None), TypeError, "padding must be an int"),
    ("padding str", 1, dict(padding="same"), TypeError, "padding must be an int"),
    ("output_padding None", 1, dict(output_padding=None), TypeError, "output_padding must be an int"),
    ("output_padding float", 1, dict(output_padding=0.5), TypeError, "output_padding must be an int"),
    ("dilation None", 1, dict(dilation=None), TypeError, "dilation must be an int"),
    ("dilation bool", 1, dict(dilation=True), TypeError, "dilation must be an int"),
    ("groups None", 1, dict(groups=None), TypeError, "groups must be an int, got NoneType"),
    ("groups float", 1, dict(groups=1.0), TypeError, "groups must be an int"),
    ("groups str", 1, dict(groups="1"), TypeError, "groups must be an int"),
    ("groups bool", 1, dict(groups=True), TypeError, "groups must be an int"),
    ("padding negative", 1, dict(padding=-1), ValueError, "padding must be non-negative"),
    ("stride tuple length", 1, dict(stride=(1, 2)), ValueError, "expected stride to be a single integer value or a list of 1"),
    ("bias shape", 1, dict(bias=torch.zeros(4) if torch else None), ValueError, r"bias must have shape \(3,\)"),
    ("2d input None", 2, dict(input=None), TypeError, "input must be a Tensor, got NoneType"),
    ("2d weight None", 2, dict(weight=None), TypeError, "weight must be a Tensor, got NoneType"),
    ("2d stride pair with None", 2, dict(stride=(2, None)), TypeError, "stride must be an int, got NoneType"),
    ("2d padding pair of floats", 2, dict(padding=(1.0, 1.0)), TypeError, "padding must be an int, got float"),
    ("2d groups None", 2, dict(groups=None), TypeError, "groups must be an int"),
]


@needs_torch
@pytest.mark.parametrize("what, dims, kwargs, exc, message", BAD_ADAPTER, ids=[b[0] for b in BAD_ADAPTER])
def test_bad_adapter_call_raises(what, dims, kwargs, exc, message, adapter_path):
    """cupyconv.torch.conv_transpose1d/2d on CPU tensors: the adapter's
    exception names the argument and is of a type torch's own raises."""
    t = _tensors()
    call = dict(input=t[f"x{dims}"], weight=t[f"w{dims}"].clone().requires_grad_(), bias=None)
    call.update(kwargs)
    ours, theirs = (ct.conv_transpose1d, F.conv_transpose1d) if dims == 1 else (ct.conv_transpose2d, F.conv_transpose2d)
    with pytest.raises(exc, match=message) as our_error:
        ours(**call)
    with pytest.raises(Exception) as their_error:
        theirs(**call)
    assert isinstance(our_error.value, type(their_error.value)), f"torch raised {their_error.value!r}, we raised {our_error.value!r}"
    _adapter_good_calls_still_work(t)


BAD_MODULE_CALLS = [
    # (what, dims, forward's arguments, exception, message fragment)
    ("input None", 1, dict(input=None), TypeError, "input must be a Tensor, got NoneType"),
    ("input a list", 1, dict(input=[[1.0]]), TypeError, "input must be a Tensor, got list"),
    ("input numpy", 1, dict(input=X1), TypeError, "input must be a Tensor, got ndarray"),
    ("input None with output_size", 1, dict(input=None, output_size=[9]), TypeError, r"ConvTranspose1d.forward\(\): input must be a Tensor"),
    ("output_size str", 1, dict(output_size="9"), TypeError, "output_size must be None or a sequence of ints"),
    ("output_size an int", 1, dict(output_size=9), TypeError, "output_size must be None or a sequence of ints"),
    ("output_size float entry", 1, dict(output_size=[9.0]), TypeError, "output_size must be None or a sequence of ints"),
    ("output_size None entry", 1, dict(output_size=[None]), TypeError, "output_size must be None or a sequence of ints"),
    ("output_size bool entry", 1, dict(output_size=[True]), TypeError, "output_size must be None or a sequence of ints"),
    ("output_size out of range", 1, dict(output_size=[100]), ValueError, "requested an output size of"),  # torch's message
    ("output_size length", 1, dict(output_size=[9, 9]), ValueError, "output_size must have 1 or 3 elements"),  # torch's message
    ("2d input None", 2, dict(input=None), TypeError, "input must be a Tensor, got NoneType"),
    ("2d input None with output_size", 2, dict(input=None, output_size=[7, 8]), TypeError, r"ConvTranspose2d.forward\(\): input must be a Tensor"),
    ("2d output_size nested", 2, dict(output_size=[[7], [8]]), TypeError, "output_size must be None or a sequence of ints"),
    ("2d output_size float entry", 2, dict(output_size=(7, 8.0)), TypeError, "output_size must be None or a sequence of ints"),
]


@needs_torch
@pytest.mark.parametrize("what, dims, kwargs, exc, message", BAD_MODULE_CALLS, ids=[b[0] for b in BAD_MODULE_CALLS])
def test_bad_module_call_raises(what, dims, kwargs, exc, message, adapter_path):
    """ConvTranspose1d/2d.forward on CPU tensors, before anything runs."""
    t = _tensors()
    module = (ct.ConvTranspose1d if dims == 1 else ct.ConvTranspose2d)(4, 3, 3)
    call = dict(input=t[f"x{dims}"])
    call.update(kwargs)
    with pytest.raises(exc, match=message):
        module(**call)
    y = module(t[f"x{dims}"], output_size=[9] if dims == 1 else torch.Size([7, 8]))
    assert y.shape == ((2, 3, 9) if dims == 1 else (2, 3, 7, 8))
    y.sum().backward()
    assert module.weight.grad is not None
    _adapter_good_calls_still_work(t)


def test_torchs_precision_names():
    """"high" (torch.set_float32_matmul_precision's TF32) is "tf32";
    "medium" (bfloat16 products) is refused with a reason; precision is
    ignored for dtypes it cannot affect (float64 here: the same result)."""
    from cupyconv import _geometry

    assert _geometry.check_precision("high") == _geometry.check_precision("tf32") == "tf32"
    assert _geometry.check_precision("highest") == _geometry.check_precision(None) == "highest"
    with pytest.raises(ValueError, match="bfloat16 products for float32 are not supported"):
        cupyconv.conv_transpose1d(X1, W1, precision="medium")
    _good_call_still_works()
    assert numpy.array_equal(cupyconv.conv_transpose1d(X1, W1, precision="high"), cupyconv.conv_transpose1d(X1, W1))
    assert numpy.array_equal(cupyconv.conv_transpose1d(X1, W1, precision="tf32"), cupyconv.conv_transpose1d(X1, W1))
