"""The forward pass of every case (sweep.CASES) in every mode, routed as the
library routes it, against float64 in poisoned memory (helpers.check_forward);
and on another stream, with 64-bit indices (both passes) and on
non-contiguous inputs."""

from __future__ import annotations

import numpy
import pytest
from gpu_available import HAVE_GPU, cupy
from helpers import LARGE_CASES, _ops, _to_gpu, check_forward, poisoned_allocations
from oracle import MODES
from sweep import CASES, relative_error

import cupyconv
from cupyconv import reference

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")]


@pytest.mark.parametrize("mode", MODES, ids=["-".join(m) for m in MODES])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_forward(case, mode):
    check_forward(case, mode)


@pytest.mark.parametrize("case", [c for c in CASES if c.name in ("1d_s2_p1_op1", "2d_s5_d2", "1d_wide_channels")], ids=str)
def test_non_default_stream(case):
    rng = numpy.random.default_rng(22)
    x, w, b = case.arrays(rng, numpy.float32)
    oracle = _ops(case).ref_forward(x, w, b, **case.kwargs)
    fn = _ops(case).forward
    backward = _ops(case).backward
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream, poisoned_allocations():
        xg, wg, bg = _to_gpu(x, numpy.float32), _to_gpu(w, numpy.float32), _to_gpu(b, numpy.float32)
        y = fn(xg, wg, bg, **case.kwargs)
        grads = backward(cupy.ones_like(y), xg, wg, **case.kwargs)
        stream.synchronize()
    assert relative_error(cupy.asnumpy(y), oracle) < 1e-5
    expected = _ops(case).ref_backward(
        numpy.ones(oracle.shape), x, w, **case.kwargs
    )
    for grad, oracle_grad in zip(grads, expected):
        assert relative_error(cupy.asnumpy(grad), oracle_grad) < 1e-5


@pytest.mark.parametrize("case", [c for c in CASES + LARGE_CASES if c.name in ("1d_s3_d2_p2_op1", "2d_per_axis", "1d_wide_channels", "1d_dw_long")], ids=str)
def test_64_bit_index_kernels(case, settings_override):
    """The long long instantiations (used past 2**31 elements) on small data."""
    settings_override(index_type="long long")
    rng = numpy.random.default_rng(24)
    x, w, b = case.arrays(rng, numpy.float32)
    oracle = _ops(case).ref_forward(x, w, b, **case.kwargs)
    fn = _ops(case).forward
    with poisoned_allocations():
        y = fn(_to_gpu(x, numpy.float32), _to_gpu(w, numpy.float32), _to_gpu(b, numpy.float32), **case.kwargs)
        gy = cupy.asarray(rng.standard_normal(oracle.shape).astype(numpy.float32))
        backward = _ops(case).backward
        grads = backward(gy, _to_gpu(x, numpy.float32), _to_gpu(w, numpy.float32), **case.kwargs)
    assert relative_error(cupy.asnumpy(y), oracle) < 1e-5
    expected = _ops(case).ref_backward(
        cupy.asnumpy(gy).astype(numpy.float64), x, w, **case.kwargs
    )
    for grad, oracle_grad in zip(grads, expected):
        assert relative_error(cupy.asnumpy(grad), oracle_grad) < 1e-5


def test_non_contiguous_gpu_input():
    rng = numpy.random.default_rng(25)
    x = cupy.asarray(rng.standard_normal((3, 10, 5)).astype(numpy.float32)).transpose(0, 2, 1)
    w = cupy.asarray(rng.standard_normal((5, 4, 3)).astype(numpy.float32))[:, :, ::-1]
    y = cupyconv.conv_transpose1d(x, w, stride=2, padding=1)
    expected = reference.conv_transpose1d(cupy.asnumpy(x).astype(numpy.float64), cupy.asnumpy(w).astype(numpy.float64), stride=2, padding=1)
    assert relative_error(cupy.asnumpy(y), expected) < 1e-5
