"""grad_weight_overlap and grad_weight_multicast (X2-like stride-8
grad_weight, Hopper only): copy sizes, splits, the same bits on a second
run, 64-bit indices, and the problems the rule declines."""

from __future__ import annotations

import numpy
import pytest
from gpu_available import HAVE_GPU, cupy
from helpers import (
    _ON_HOPPER_ONLY,
    OVERLAP_MODES,
    _is_hopper,
    _ops,
    _spy_launches,
    _to_gpu,
    check_backward,
)
from oracle import numpy_dtype
from sweep import Case

from cupyconv import _kernels

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")]


# grad_weight_overlap: X2-like problems with an item (64 positions) that
# ends short, input- and output-channel tiles that end short, 12 taps (taps
# 12-15 computed and dropped), 16-byte copies (padding 8, rows of whole
# vectors) and 8-byte ones (padding 4, or an output_padding of 4), several
# splits of the reduction, an unbatched call, and whole channel tiles
# (copies without bounds for the items inside the rows).
GRAD_WEIGHT_OVERLAP_CASES = [
    (Case("gwo_x2", 1, 2, 256, 128, (16,), (600,), stride=8, padding=4), 8),
    (Case("gwo_tails", 1, 3, 200, 30, (12,), (136,), stride=8, padding=0), 8),
    (Case("gwo_pad8", 1, 2, 64, 40, (16,), (256,), stride=8, padding=8, bias=False), 16),
    (Case("gwo_pad8_op4", 1, 1, 64, 40, (16,), (256,), stride=8, padding=8, output_padding=4), 8),
    (Case("gwo_splits", 1, 4, 128, 32, (16,), (2048,), stride=8, padding=4), 8),
    (Case("gwo_unbatched", 1, None, 96, 72, (12,), (64,), stride=8, padding=4), 8),
    (Case("gwo_whole_tiles", 1, 2, 256, 16, (16,), (512,), stride=8, padding=4), 8),
]


@pytest.mark.parametrize("mode", [m for m in OVERLAP_MODES if m[0] != "float32"], ids=["float16", "bfloat16"])
@pytest.mark.parametrize(("case", "copy"), GRAD_WEIGHT_OVERLAP_CASES, ids=[str(c) for c, _ in GRAD_WEIGHT_OVERLAP_CASES])
def test_grad_weight_overlap(case, copy, mode, monkeypatch):
    """grad_weight_overlap (routed) against float64, within twice torch's
    error (test_backward), with the copy size and the splits expected, its
    float partials summed by sum_splits' float build; and bitwise the same
    on a second run.  (float32 "tf32": test_grad_weight_multicast.)"""
    from cupyconv import _cuda

    if _cuda._compute_capability() != 90:
        pytest.skip("grad_weight_overlap is built for compute capability 9.0 only")
    ran, launch = [], _cuda._launch
    monkeypatch.setattr(_cuda, "_launch", lambda plan, arrays: (ran.append((plan.name, plan.blocks)), launch(plan, arrays))[1])
    check_backward(case, mode)
    names = [name for name, _ in ran if name.startswith("grad_weight_overlap<")]
    assert names and all(name.endswith(f", {copy}>") for name in names), ran
    float_sums = f"sum_splits<{_kernels.CUDA_TYPE[mode[0]]}, float>"  # (grad_bias's sums take the double build)
    assert [name for name, _ in ran if name == float_sums] == [float_sums] * len(names), ran
    if case.name == "gwo_splits":  # 4 x 1 tiles (8 output channels x 256 input channels) and 128 items: 8 splits
        assert [blocks for name, blocks in ran if name.startswith("grad_weight_overlap<")] == [32]
    dtype = numpy_dtype(mode[0])
    rng = numpy.random.default_rng(5)
    x, w, _ = case.arrays(rng, dtype)
    gy = rng.standard_normal(_ops(case).ref_forward(x, w, **case.kwargs).shape).astype(dtype)
    args = (_to_gpu(gy, dtype), _to_gpu(x, dtype), _to_gpu(w, dtype))
    first, again = (_ops(case).backward(*args, **case.kwargs, output_mask=(False, True, False))[1] for _ in range(2))
    assert cupy.array_equal(first, again)


@pytest.mark.parametrize("multiprocessors", [None, 4])
@pytest.mark.parametrize("case", [c for c, _ in GRAD_WEIGHT_OVERLAP_CASES], ids=str)
def test_grad_weight_multicast(case, multiprocessors, monkeypatch, settings_override):
    """grad_weight_multicast, which takes the float32 "tf32" grad_weight of
    these problems, against float64 within twice torch's error
    (test_backward), in poisoned memory (its rounded copy of x, its float
    partials summed by sum_splits' float build), on the device's clusters
    and on two (the splits then fewer and longer); and bitwise the same on a
    second run."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_launches(monkeypatch, settings_override, multiprocessors)
    check_backward(case, ("float32", "tf32"))
    names = [name for name, _ in ran]
    ours = [name for name in names if name.startswith("grad_weight_multicast<")]
    assert ours == [_kernels.grad_weight_multicast_name("int")] and names.count(_kernels.ROUND_TF32_COPY) == 1, names
    assert not any(name.startswith("grad_weight_overlap<") for name in names), names
    assert names[names.index(ours[0]) + 1] == "sum_splits<float, float>", names
    if multiprocessors is not None:
        (blocks,) = [b for name, b in ran if name in ours]
        pairs = -(-case.out_channels // 16) * -(-case.in_channels // 256)
        assert blocks == 2 * pairs  # one split where the tiles fill the clusters
    rng = numpy.random.default_rng(5)
    x, w, _ = case.arrays(rng, numpy.float32)
    gy = rng.standard_normal(_ops(case).ref_forward(x, w, **case.kwargs).shape).astype(numpy.float32)
    args = (_to_gpu(gy, numpy.float32), _to_gpu(x, numpy.float32), _to_gpu(w, numpy.float32))
    first, again = (_ops(case).backward(*args, **case.kwargs, output_mask=(False, True, False), precision="tf32")[1] for _ in range(2))
    assert cupy.array_equal(first, again)


def test_grad_weight_multicast_64_bit_index(monkeypatch, settings_override):
    """The build with 64-bit indices (taken where an array passes 2**31 elements)."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    settings_override(index_type="long long")
    ran = _spy_launches(monkeypatch, settings_override)
    check_backward(GRAD_WEIGHT_OVERLAP_CASES[4][0], ("float32", "tf32"))
    assert _kernels.grad_weight_multicast_name("long long") in [name for name, _ in ran], ran


def test_grad_weight_overlap_declines():
    """Problems outside its rule keep the other kernels: input rows not a
    multiple of 8, stride 4, 8 taps, two groups, grad_output rows of odd
    length at padding 4."""
    from cupyconv import _geometry
    from cupyconv.kernels import grad_weight_overlap

    aligned = cupy.empty(64, dtype=numpy.float16)
    for dims, xs, ws, stride, padding, groups in [
        (1, (2, 16, 68), (16, 8, 16), 8, 4, 1),
        (1, (2, 16, 64), (16, 8, 16), 4, 4, 1),
        (1, (2, 16, 64), (16, 8, 8), 8, 4, 1),
        (1, (2, 16, 64), (16, 8, 16), 8, 4, 2),
        (1, (2, 16, 64), (16, 8, 13), 8, 2, 1),
    ]:
        g = _geometry.make_geometry(dims, xs, ws, None, stride, padding, 0, groups, 1)
        assert not grad_weight_overlap._grad_weight_overlap_copy(g, "float16", aligned.data.ptr % 256, aligned.data.ptr % 256)
    g = _geometry.make_geometry(1, (2, 16, 64), (16, 8, 16), None, 8, 4, 0, 1, 1)
    assert grad_weight_overlap._grad_weight_overlap_copy(g, "float16", aligned.data.ptr % 256, aligned.data.ptr % 256) == 8
    assert not grad_weight_overlap._grad_weight_overlap_copy(g, "float16", aligned.data.ptr % 256, aligned[1:].data.ptr % 256)  # x not 16-byte aligned
    # float ("tf32"; the caller routes one pass only): 16-byte copies, x rows of whole 16 bytes
    assert grad_weight_overlap._grad_weight_overlap_copy(g, "float32", aligned.data.ptr % 256, aligned.data.ptr % 256) == 16
    assert not grad_weight_overlap._grad_weight_overlap_copy(g, "float32", aligned[4:].data.ptr % 256, aligned.data.ptr % 256)  # grad_output 8 bytes off
    g = _geometry.make_geometry(1, (2, 16, 66), (16, 8, 16), None, 8, 4, 0, 1, 1)
    assert not grad_weight_overlap._grad_weight_overlap_copy(g, "float32", aligned.data.ptr % 256, aligned.data.ptr % 256)
    assert not grad_weight_overlap._grad_weight_overlap_copy(g, "float64", aligned.data.ptr % 256, aligned.data.ptr % 256)
