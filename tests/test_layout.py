"""The arrays' layout: a 2D call whose input has channels-last strides gets
its output and grad_input in channels-last strides (grad_weight and
grad_bias C-contiguous), on NumPy here and on CuPy where there is a GPU,
with the values of the channels-first call; and the channels-last test is
torch's own."""

from __future__ import annotations

import itertools

import numpy
import pytest
from gpu_available import HAVE_GPU

import cupyconv
from cupyconv import _api

XPS = ["numpy", pytest.param("cupy", marks=[pytest.mark.gpu, pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")])]


def _xp(name):
    if name == "numpy":
        return numpy
    import cupy

    return cupy


def _channels_last(xp, a):
    return xp.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def _is_channels_last(a) -> bool:
    return not a.flags.c_contiguous and _api.channels_last(a.shape, tuple(s // a.itemsize for s in a.strides))


def test_channels_last_is_torchs_test():
    torch = pytest.importorskip("torch")
    from torch._prims_common import suggest_memory_format

    from cupyconv.torch import _functional

    checked = 0
    for shape in itertools.product([0, 1, 2, 3], [1, 2, 3], [1, 2, 4], [1, 3]):
        base = torch.empty(shape)
        for order in itertools.permutations(range(4)):
            t = base.permute(order).contiguous().permute([order.index(i) for i in range(4)])
            expected = suggest_memory_format(t) == torch.channels_last
            assert _api.channels_last(tuple(t.shape), t.stride()) == expected, (shape, order, t.stride())
            assert _functional._is_channels_last(t) == expected, (shape, order, t.stride())
            checked += 1
    assert checked == 1728


@pytest.mark.parametrize("xp_name", XPS)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_channels_last_input_gives_channels_last_results(xp_name, dtype):
    xp = _xp(xp_name)
    rng = numpy.random.default_rng(5)
    x = xp.asarray(rng.standard_normal((2, 16, 5, 6)).astype(dtype))
    w = xp.asarray(rng.standard_normal((16, 8, 3, 3)).astype(dtype))
    b = xp.asarray(rng.standard_normal(8).astype(dtype))
    kwargs = dict(stride=2, padding=1, output_padding=1)
    x_last = _channels_last(xp, x)
    assert _is_channels_last(x_last)
    y = cupyconv.conv_transpose2d(x, w, b, **kwargs)
    y_last = cupyconv.conv_transpose2d(x_last, w, b, **kwargs)
    assert y.flags.c_contiguous and _is_channels_last(y_last)
    assert bool((y_last == y).all())
    gy = xp.asarray(rng.standard_normal(y.shape).astype(dtype))
    grads = cupyconv.conv_transpose2d_backward(gy, x, w, **kwargs)
    grads_last = cupyconv.conv_transpose2d_backward(gy, x_last, w, **kwargs)
    assert _is_channels_last(grads_last[0]) and grads_last[1].flags.c_contiguous and grads_last[2].flags.c_contiguous
    for g, g_last in zip(grads, grads_last):
        assert bool((g_last == g).all())


@pytest.mark.parametrize("xp_name", XPS)
def test_other_layouts_give_c_contiguous_results(xp_name):
    """1D calls, channels-first and other strided 2D inputs: C-contiguous
    results, as before; a channels-last weight alone does not move the
    output (the array API follows the input)."""
    xp = _xp(xp_name)
    rng = numpy.random.default_rng(6)
    x = xp.asarray(rng.standard_normal((2, 8, 5, 6)).astype("float32"))
    w = xp.asarray(rng.standard_normal((8, 4, 3, 3)).astype("float32"))
    assert cupyconv.conv_transpose2d(x[:, :, :, ::-1], w).flags.c_contiguous
    assert cupyconv.conv_transpose2d(x, _channels_last(xp, w)).flags.c_contiguous
    x1 = xp.asarray(rng.standard_normal((2, 8, 7)).astype("float32"))
    assert cupyconv.conv_transpose1d(x1.transpose(0, 2, 1).copy().transpose(0, 2, 1), w[..., 0]).flags.c_contiguous


def test_a_c_contiguous_input_counts_as_channels_first():
    """An (N, C, 1, 1) input with torch's channels-last strides is also
    C-contiguous: its results are C-contiguous, as a remembered call's are."""
    x = numpy.lib.stride_tricks.as_strided(numpy.ones(6, dtype="float32"), (2, 3, 1, 1), (12, 4, 12, 12))
    assert x.flags.c_contiguous and _api.channels_last(x.shape, (3, 1, 3, 3))
    assert cupyconv.conv_transpose2d(x, numpy.ones((3, 2, 2, 2), dtype="float32")).flags.c_contiguous
