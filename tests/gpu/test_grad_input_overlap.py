"""grad_input_overlap and grad_input_multicast (X2-like stride-8 grad_input,
Hopper only): forced and default routes, grids of few clusters, 64-bit
indices, the weight's alignment, repeated and remembered calls, and the
problems their rule declines."""

from __future__ import annotations

import numpy
import pytest
from gpu_available import HAVE_GPU, cupy
from helpers import (
    _ON_HOPPER_ONLY,
    OVERLAP_MODES,
    _fast_calls,
    _grads_equal,
    _is_hopper,
    _ops,
    _spy_launches,
    check_backward,
    poisoned_allocations,
)
from sweep import Case

import cupyconv
from cupyconv import _kernels

if HAVE_GPU:
    import cupyconv._remember  # (cupyconv._remember.FAST_BACKWARD below: the remembered calls' tables)

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")]


# grad_input_overlap: X2-like problems with a row tile, column tiles and
# k-blocks that end short, a kernel under 16 taps, padding 0 and 8, an
# output_padding, an unbatched call, and 3 output channels (two float
# k-blocks, fewer than the float build's rounding lag: only its rounding
# after the loop).  Rows of grad_input of 4 positions or more (staged) and
# of 2 mod 4 (stored from the accumulators).
OVERLAP_CASES = [
    Case("ov_x2", 1, 2, 256, 128, (16,), (600,), stride=8, padding=4),
    Case("ov_short", 1, 3, 200, 30, (12,), (130,), stride=8, padding=0),
    Case("ov_pad8_op4", 1, 1, 64, 40, (16,), (258,), stride=8, padding=8, output_padding=4, bias=False),
    Case("ov_unbatched", 1, None, 96, 72, (12,), (64,), stride=8, padding=4),
    Case("ov_few", 1, 2, 64, 3, (16,), (300,), stride=8, padding=4),
]


@pytest.mark.parametrize("mode", OVERLAP_MODES, ids=["float16", "bfloat16", "tf32"])
@pytest.mark.parametrize("case", OVERLAP_CASES, ids=str)
def test_grad_input_overlap(case, mode, settings_override):
    """grad_input_overlap (forced on) against float64, within twice torch's
    error (test_backward), and the kernel ran."""
    from cupyconv import _cuda

    if _cuda._compute_capability() != 90:
        pytest.skip("grad_input_overlap is built for compute capability 9.0 only")
    settings_override(use_grad_input_overlap=True)
    settings_override(use_grad_input_multicast=False)  # (float's own build: test_grad_input_multicast takes the default)
    ran = settings_override.observe_launches()
    check_backward(case, mode)
    assert any(name.startswith("grad_input_overlap<") for name in ran), ran


@pytest.mark.parametrize("multiprocessors", [None, 2, 12])
@pytest.mark.parametrize("case", OVERLAP_CASES, ids=str)
def test_grad_input_multicast(case, multiprocessors, monkeypatch, settings_override):
    """grad_input_multicast, which takes the float32 "tf32" grad_input of
    these problems, against float64 within twice torch's error
    (test_backward), in poisoned memory, on grids of one cluster (every unit
    in turn: the buffers' phases wrap many times), of six and the device's;
    it ran, and grad_input_overlap did not."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_launches(monkeypatch, settings_override, multiprocessors)
    check_backward(case, ("float32", "tf32"))
    names = [name for name, _ in ran]
    assert names.count(_kernels.grad_input_multicast_name("int")) == 1 and names.count(_kernels.PACK_MULTICAST_WEIGHT) == 1, names
    assert not any(name.startswith("grad_input_overlap<") for name in names), names
    if multiprocessors is not None:
        (blocks,) = [b for name, b in ran if name.startswith("grad_input_multicast<")]
        assert blocks % 2 == 0 and blocks <= multiprocessors  # whole clusters, one a unit at most


def test_grad_input_multicast_64_bit_index(monkeypatch, settings_override):
    """The build with 64-bit indices (taken where an array passes 2**31 elements)."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    settings_override(index_type="long long")
    ran = _spy_launches(monkeypatch, settings_override, 4)
    check_backward(OVERLAP_CASES[0], ("float32", "tf32"))
    assert _kernels.grad_input_multicast_name("long long") in [name for name, _ in ran], ran


def test_grad_input_multicast_repeats_bitwise(monkeypatch, settings_override):
    """Runs of the same backward call give the same bits, and from the
    fourth call on the remembered replay (new arrays: both tensor maps
    rewritten) answers, in poisoned memory, with the checked path's; a
    weight one element off a 16-byte boundary (pack_multicast_weight's
    element-by-element reads) gives the same grad_input."""
    from cupyconv import _remember

    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    case = OVERLAP_CASES[0]
    rng = numpy.random.default_rng(41)
    x, w, _ = (cupy.asarray(a.astype(numpy.float32)) if a is not None else None for a in case.arrays(rng, numpy.float32))
    gy = cupy.asarray(rng.standard_normal(cupyconv.conv_transpose1d(x, w, **case.kwargs).shape).astype(numpy.float32))
    ran = _spy_launches(monkeypatch, settings_override)
    cupyconv._remember.FAST_BACKWARD.clear()
    _remember._REMEMBER_SEEN.clear()
    run = lambda weight: cupyconv.conv_transpose1d_backward(gy, x, weight, **case.kwargs, precision="tf32")
    grads = [run(w) for _ in range(3)]
    assert [name for name, _ in ran].count(_kernels.grad_input_multicast_name("int")) == 3, ran
    answered = _fast_calls(monkeypatch, _remember._Replay)
    with poisoned_allocations():
        grads += [run(w) for _ in range(2)]
        cupy.cuda.get_current_stream().synchronize()
    assert answered == [True, True]
    assert all(_grads_equal(g, grads[0]) for g in grads[1:])
    shifted = cupy.empty(w.size + 1, dtype=w.dtype)[1:].reshape(w.shape)
    shifted[...] = w
    assert shifted.data.ptr % 16 == 4
    assert cupy.array_equal(run(shifted)[0], grads[0][0])


@pytest.mark.parametrize("mode", [("bfloat16", "highest"), ("float32", "tf32")], ids=["bfloat16", "tf32"])
def test_grad_input_overlap_64_bit_index(mode, settings_override):
    """The builds with 64-bit indices (taken where an array passes 2**31 elements)."""
    from cupyconv import _cuda

    if _cuda._compute_capability() != 90:
        pytest.skip("grad_input_overlap is built for compute capability 9.0 only")
    settings_override(use_grad_input_overlap=True)
    settings_override(use_grad_input_multicast=False)
    settings_override(index_type="long long")
    ran = settings_override.observe_launches()
    check_backward(OVERLAP_CASES[1], mode)
    assert any(name.startswith("grad_input_overlap<") and name.endswith("long long>") for name in ran), ran


@pytest.mark.parametrize("mode", [("float16", "highest"), ("float32", "tf32")], ids=["float16", "tf32"])
def test_pack_overlap_weight_reads_any_alignment(mode, settings_override):
    """pack_overlap_weight reads a 16-tap row as 16-byte vectors where it
    lies on a 16-byte boundary, else element by element: a weight one
    element off that boundary gives grad_input bit for bit."""
    from cupyconv import _cuda

    if _cuda._compute_capability() != 90:
        pytest.skip("grad_input_overlap is built for compute capability 9.0 only")
    settings_override(use_grad_input_overlap=True)
    settings_override(use_grad_input_multicast=False)  # (float: the overlap build's pack; test_grad_input_multicast_repeats_bitwise reads pack_multicast_weight's)
    dtype, precision = numpy.dtype(mode[0]), mode[1]
    case = OVERLAP_CASES[0]
    rng = numpy.random.default_rng(24)
    x, w, _ = case.arrays(rng, dtype)
    gy = cupy.asarray(rng.standard_normal(_ops(case).ref_forward(x, w, **case.kwargs).shape).astype(dtype))
    xg, wg = cupy.asarray(x.astype(dtype)), cupy.asarray(w.astype(dtype))
    shifted = cupy.empty(wg.size + 1, dtype=wg.dtype)[1:].reshape(wg.shape)
    shifted[...] = wg
    assert shifted.data.ptr % 16 == dtype.itemsize
    ran = settings_override.observe_launches()
    run = lambda weight: cupyconv.conv_transpose1d_backward(gy, xg, weight, **case.kwargs, output_mask=(True, False, False), precision=precision)[0]  # noqa: E731
    assert cupy.asnumpy(run(shifted)).tobytes() == cupy.asnumpy(run(wg)).tobytes()
    assert sum(name.startswith("pack_overlap_weight<") for name in ran) == 2, ran
    assert sum(name.startswith("grad_input_overlap<") for name in ran) == 2, ran


def test_grad_input_overlap_declines():
    """Problems outside its rule (a row length of grad_output not a multiple
    of 4, stride 4) keep the other kernels."""
    from cupyconv import _geometry
    from cupyconv.kernels import grad_input_overlap

    for shape in [(1, (2, 16, 64), (16, 8, 9), 8, 4), (1, (2, 16, 64), (16, 8, 16), 4, 4)]:
        dims, xs, ws, stride, padding = shape
        g = _geometry.make_geometry(dims, xs, ws, None, stride, padding, 0, 1, 1)
        fake = cupy.empty(8, dtype=numpy.float16)
        assert not grad_input_overlap._grad_input_overlap_applies(g, "float16", fake.data.ptr % 256, fake.data.ptr % 256)
    # float: "tf32" only (3xTF32 is not built), and grad_output 16-byte aligned
    g = _geometry.make_geometry(1, (2, 16, 64), (16, 8, 16), None, 8, 4, 0, 1, 1)
    aligned = cupy.empty(64, dtype=numpy.float32)
    assert grad_input_overlap._grad_input_overlap_applies(g, "float32", aligned.data.ptr % 256, aligned.data.ptr % 256, 1)
    assert not grad_input_overlap._grad_input_overlap_applies(g, "float32", aligned.data.ptr % 256, aligned.data.ptr % 256, 3)
    assert not grad_input_overlap._grad_input_overlap_applies(g, "float32", aligned[2:].data.ptr % 256, aligned.data.ptr % 256, 1)
    assert not grad_input_overlap._grad_input_overlap_applies(g, "float64", aligned.data.ptr % 256, aligned.data.ptr % 256, 1)
