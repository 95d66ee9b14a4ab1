"""Calls a careful user runs unattended, on the GPU: arrays past 2**31
elements, and running out of device memory.

Large arrays are checked against the transposed convolution's formula, in
float64 on the host, at output (and grad_input) positions at the start, the
middle and the end; grad_weight and grad_bias, which sum over everything,
against float64 sums on the GPU.  Skipped where there is no GPU (with
CUPYCONV_REQUIRE_GPU=1 a missing GPU fails instead).
"""

from __future__ import annotations


import numpy
import pytest

import cupyconv

from gpu_available import HAVE_GPU, cupy

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")]


def _formula_forward(x, w, b, stride, padding, positions):
    """y[n, co, o] = b[co] + sum over ci, k with o = l * stride - padding + k of
    w[ci, co, k] * x[n, ci, l], in float64, at the given output positions
    (1D, one group, dilation 1); x is read from the GPU only where needed."""
    wh = w.get().astype(numpy.float64)
    in_channels, out_channels, taps = wh.shape
    length = x.shape[2]
    out = numpy.zeros((x.shape[0], out_channels, len(positions)))
    for j, o in enumerate(positions):
        for k in range(taps):
            t = o + padding - k
            if t % stride == 0 and 0 <= t // stride < length:
                column = x[:, :, t // stride].get().astype(numpy.float64)  # (N, C_in)
                out[:, :, j] += column @ wh[:, :, k]
    return out + (0 if b is None else b.get().astype(numpy.float64)[None, :, None])


def _formula_grad_input(gy, w, stride, padding, positions):
    """grad_input[n, ci, l] = sum over co, k of w[ci, co, k] * gy[n, co, l *
    stride - padding + k] (indices outside grad_output skipped), in float64."""
    wh = w.get().astype(numpy.float64)
    taps = wh.shape[2]
    out = numpy.zeros((gy.shape[0], wh.shape[0], len(positions)))
    for j, l in enumerate(positions):
        for k in range(taps):
            o = l * stride - padding + k
            if 0 <= o < gy.shape[2]:
                out[:, :, j] += gy[:, :, o].get().astype(numpy.float64) @ wh[:, :, k].T
    return out


def _places(length, count=6):
    """Positions at the start, the middle and the end of a row."""
    middle = length // 2
    return sorted({*range(count), *range(middle - count // 2, middle + count // 2), *range(length - count, length)})


def _close(actual, expected, tolerance):
    actual = numpy.asarray(actual, dtype=numpy.float64)
    scale = max(numpy.abs(expected).max(), 1e-30)
    assert numpy.isfinite(actual).all()
    assert numpy.abs(actual - expected).max() <= tolerance * scale, (actual, expected)


LARGE = [
    # (input shape, weight shape, stride, padding): a row past 2**31 (run as pieces), then 2**31 elements in short rows
    # (the 64-bit-index builds)
    ((1, 1, 2**31 + 2**20), (1, 1, 3), 2, 0),
    ((2, 64, 2**24 + 3), (64, 32, 3), 2, 1),
]


@pytest.mark.parametrize("shape, weight_shape, stride, padding", LARGE, ids=["long_row", "many_elements"])
def test_float16_past_2_31_elements(shape, weight_shape, stride, padding):
    free, _ = cupy.cuda.runtime.memGetInfo()
    if free < 48 * 2**30:
        pytest.skip(f"needs 48 GiB of free device memory, has {free / 2**30:.0f}")
    pool = cupy.get_default_memory_pool()
    try:
        rng = cupy.random.default_rng(0)
        x = rng.standard_normal(shape, dtype=cupy.float32).astype(cupy.float16)
        w = (rng.standard_normal(weight_shape, dtype=cupy.float32) / (weight_shape[0] * weight_shape[2]) ** 0.5).astype(cupy.float16)
        b = rng.standard_normal((weight_shape[1],), dtype=cupy.float32).astype(cupy.float16)
        assert x.size > 2**31 - 1
        y = cupyconv.conv_transpose1d(x, w, b, stride=stride, padding=padding)
        length = (shape[2] - 1) * stride - 2 * padding + weight_shape[2]
        assert y.shape == (shape[0], weight_shape[1], length)
        places = _places(length)
        _close(y[:, :, places].get(), _formula_forward(x, w, b, stride, padding, places), 2e-3)
        del y

        # scaled so that grad_bias's sums of 2**32 terms stay inside float16's range
        gy = (rng.standard_normal((shape[0], weight_shape[1], length), dtype=cupy.float32) / 256).astype(cupy.float16)
        grad_input, grad_weight, grad_bias = cupyconv.conv_transpose1d_backward(gy, x, w, stride=stride, padding=padding)
        places = _places(shape[2])
        _close(grad_input[:, :, places].get(), _formula_grad_input(gy, w, stride, padding, places), 2e-3)
        del grad_input
        # grad_weight[ci, co, k] = sum over n, l of x[n, ci, l] * gy[n, co, l * stride - padding + k]
        expected = numpy.zeros(weight_shape)
        for k in range(weight_shape[2]):
            first = max(0, -(-(padding - k) // stride))  # the first l whose output lies in the row
            last = min(shape[2], (length - 1 + padding - k) // stride + 1)
            columns = gy[:, :, first * stride - padding + k :: stride][:, :, : last - first]
            for n in range(shape[0]):
                expected[:, :, k] += (x[n, :, first:last].astype(cupy.float64) @ columns[n].astype(cupy.float64).T).get()
        _close(grad_weight.get(), expected, 2e-3)
        _close(grad_bias.get(), gy.sum(axis=(0, 2), dtype=cupy.float64).get(), 2e-3)
    finally:
        pool.free_all_blocks()


def _problem():
    rng = numpy.random.default_rng(3)
    x = cupy.asarray(rng.standard_normal((4, 64, 4096)).astype(numpy.float32))
    w = cupy.asarray((rng.standard_normal((64, 48, 8)) / 16).astype(numpy.float32))
    b = cupy.asarray(rng.standard_normal(48).astype(numpy.float32))
    gy = cupy.asarray(rng.standard_normal((4, 48, (4096 - 1) * 4 + 8)).astype(numpy.float32))
    return x, w, b, gy


@pytest.mark.parametrize("warm", [0, 5], ids=["first_call", "remembered"])
@pytest.mark.parametrize("room", ["none", "outputs"])
def test_out_of_memory_raises_and_the_next_call_works(warm, room):
    """A memory-pool limit below what a call needs raises CuPy's
    OutOfMemoryError, while making the output (room "none") or, with the
    three gradients made, a workspace ("outputs"); the next call, with the
    limit lifted, gives the right results.  After `warm` calls the failing
    call is a remembered call's replay.  The calls run on a pool of their own,
    so that what earlier tests left in CuPy's default pool cannot serve them."""
    pool = cupy.cuda.MemoryPool()
    with cupy.cuda.using_allocator(pool.malloc):
        x, w, b, gy = _problem()
        host = [a.get().astype(numpy.float64) for a in (x, w, b, gy)]
        expected_y = cupyconv.conv_transpose1d(*host[:3], stride=4)
        expected_grads = cupyconv.conv_transpose1d_backward(host[3], *host[:2], stride=4)
        call = (lambda: cupyconv.conv_transpose1d(x, w, b, stride=4)) if room == "none" else (lambda: cupyconv.conv_transpose1d_backward(gy, x, w, stride=4))
        for _ in range(warm):
            call()
        cupy.cuda.Device().synchronize()
        pool.free_all_blocks()
        # the three gradients' blocks (the pool's are multiples of 512 bytes), not a byte of workspace
        spare = 0 if room == "none" else x.nbytes + w.nbytes + 512
        try:
            pool.set_limit(size=pool.total_bytes() + spare)
            with pytest.raises(cupy.cuda.memory.OutOfMemoryError):
                call()
        finally:
            pool.set_limit(size=0)
        y = cupyconv.conv_transpose1d(x, w, b, stride=4)
        assert numpy.abs(y.get() - expected_y).max() < 1e-4 * numpy.abs(expected_y).max()
        for got, want in zip(cupyconv.conv_transpose1d_backward(gy, x, w, stride=4), expected_grads):
            assert numpy.abs(got.get() - want).max() < 1e-4 * numpy.abs(want).max()


def test_adapter_out_of_memory_raises_torchs_error_and_the_next_call_works():
    """Through the adapter, memory comes from torch's caching allocator: with
    torch's per-process limit below what a call needs, the call raises
    torch.OutOfMemoryError, and the next call, with the limit lifted, gives
    torch's result."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs torch with CUDA")
    import cupyconv.torch as ct

    torch.manual_seed(0)
    allow_tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False  # both sides float32-accurate: the comparison below is tight
    try:
        _adapter_out_of_memory(torch, ct)
    finally:
        torch.backends.cudnn.allow_tf32 = allow_tf32


def _adapter_out_of_memory(torch, ct):
    layer = ct.ConvTranspose1d(64, 48, 8, stride=4).cuda()
    x = torch.randn(4, 64, 4096, device="cuda")
    with torch.no_grad():
        expected = torch.nn.functional.conv_transpose1d(x, layer.weight, layer.bias, stride=4)
        layer(x)  # compiled and planned: the failing call fails for want of memory alone
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(x.device).total_memory
    try:
        torch.cuda.set_per_process_memory_fraction((torch.cuda.memory_reserved() + 2**20) / total)
        with pytest.raises(torch.OutOfMemoryError), torch.no_grad():
            layer(x)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    with torch.no_grad():
        y = layer(x)
    assert (y - expected).abs().max().item() <= 1e-4 * expected.abs().max().item()


# Problems of their own shapes (first calls in this process), in two dtypes and
# routes of several families; each runs on two threads at once.
THREADED = [
    (1, (2, 24, 1000), (24, 40, 5), dict(dilation=3, padding=2), numpy.float32),
    (1, (2, 16, 700), (16, 32, 3), dict(stride=2, padding=1, dilation=2), numpy.float16),
    (2, (1, 8, 30, 40), (8, 16, 3, 3), dict(stride=2, padding=1, output_padding=1), numpy.float32),
    (1, (3, 32, 257), (32, 16, 16), dict(stride=8, padding=4), numpy.float16),
]


def _relative(actual, expected):
    return numpy.linalg.norm(actual.astype(numpy.float64) - expected) / numpy.linalg.norm(expected)


def test_concurrent_first_calls_from_threads():
    """Eight threads start their first calls (compiles, plans, remembered-call
    tables) at once, two on each problem; every result matches the float64
    reference."""
    import threading

    rng = numpy.random.default_rng(7)
    problems = []
    for dims, shape, weight_shape, kwargs, dtype in THREADED:
        x = rng.standard_normal(shape).astype(dtype)
        w = (rng.standard_normal(weight_shape) / numpy.sqrt(weight_shape[0] * numpy.prod(weight_shape[2:]))).astype(dtype)
        b = rng.standard_normal(weight_shape[1]).astype(dtype)
        forward = cupyconv.conv_transpose1d if dims == 1 else cupyconv.conv_transpose2d
        backward = cupyconv.conv_transpose1d_backward if dims == 1 else cupyconv.conv_transpose2d_backward
        host = [a.astype(numpy.float64) for a in (x, w, b)]
        y64 = forward(*host, **kwargs)
        gy = rng.standard_normal(y64.shape).astype(dtype)
        grads64 = backward(gy.astype(numpy.float64), host[0], host[1], **kwargs)
        problems.append((forward, backward, kwargs, [cupy.asarray(a) for a in (x, w, b, gy)], y64, grads64, dtype))
    jobs = [p for p in problems for _ in range(2)]
    start = threading.Barrier(len(jobs))
    results, errors = [None] * len(jobs), []

    def work(k):
        forward, backward, kwargs, (x, w, b, gy), _, _, _ = jobs[k]
        try:
            start.wait()
            y = forward(x, w, b, **kwargs)
            grads = backward(gy, x, w, **kwargs)
            cupy.cuda.get_current_stream().synchronize()
            results[k] = (y.get(), [g.get() for g in grads])
        except BaseException as error:  # reported below, on the test's thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for (_, _, _, _, y64, grads64, dtype), (y, grads) in zip(jobs, results):
        bar = 1e-5 if dtype == numpy.float32 else 5e-3  # float16: its rounding of the result, about 3e-4, with room
        assert _relative(y, y64) < bar
        for got, want in zip(grads, grads64):
            assert _relative(got, want) < bar


def test_memory_pool_does_not_grow_over_thousands_of_calls():
    """Thousands of forward and backward calls of a few signatures (remembered
    calls and their replays, small and large) leave the pool's memory as it
    was after the first few: nothing kept per call."""
    pool = cupy.cuda.MemoryPool()
    with cupy.cuda.using_allocator(pool.malloc):
        rng = numpy.random.default_rng(9)
        calls = []
        for dims, shape, weight_shape, kwargs, dtype in THREADED + [(1, (1, 4, 5), (4, 8, 3), {}, numpy.float32)]:
            x = cupy.asarray(rng.standard_normal(shape).astype(dtype))
            w = cupy.asarray(rng.standard_normal(weight_shape).astype(dtype))
            forward = cupyconv.conv_transpose1d if dims == 1 else cupyconv.conv_transpose2d
            backward = cupyconv.conv_transpose1d_backward if dims == 1 else cupyconv.conv_transpose2d_backward
            gy = cupy.ones(forward(x, w, **kwargs).shape, dtype=dtype)
            calls.append(lambda f=forward, g=backward, x=x, w=w, gy=gy, kw=kwargs: (f(x, w, **kw), g(gy, x, w, **kw)))

        def run(times):
            for _ in range(times):
                for call in calls:
                    call()
            cupy.cuda.Device().synchronize()

        run(10)
        used, total = pool.used_bytes(), pool.total_bytes()
        run(2000)
        assert pool.used_bytes() == used and pool.total_bytes() <= total, (used, total, pool.used_bytes(), pool.total_bytes())
