"""What the tensor-core kernels' operands go through: mma.cuh's to_tf32
rounding and pack_window_weight (the window kernels' weight in one launch),
bitwise against NumPy models."""

from __future__ import annotations

import numpy
import pytest
from gpu_available import HAVE_GPU, cupy
from helpers import poisoned_allocations
from oracle import numpy_dtype

from cupyconv import _geometry, _kernels

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")]


def _tf32_model(bits, ties_to_even: bool):
    """Finite floats (as uint32 bits) rounded to TF32 (10 mantissa bits) to
    nearest, the low 13 bits cleared."""
    low, base = bits & 0x1FFF, bits & ~numpy.uint32(0x1FFF)
    tie_up = (base & 0x2000) != 0 if ties_to_even else numpy.ones(bits.shape, bool)
    up = (low > 0x1000) | ((low == 0x1000) & tie_up)
    return numpy.where(up, base + numpy.uint32(0x2000), base).astype(numpy.uint32)


def test_to_tf32_rounds_to_nearest():
    """mma.cuh's to_tf32, which makes every TF32 and 3xTF32 operand: the float
    rounded to nearest TF32 with the low 13 bits zero (3xTF32's low part is
    the float minus that), ties to even on sm_90 (cvt.rn) and away from zero
    before (cvt.rna); infinities stay, NaN stays NaN."""
    from cupyconv import _cuda

    code = _kernels.source("mma.cuh") + """
extern "C" __global__ void round_tf32(const float* x, unsigned* y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = to_tf32(x[i]);
}
"""
    kernel = cupy.RawModule(code=code, options=("-std=c++17",)).get_function("round_tf32")
    rng = numpy.random.default_rng(27)
    finite = [
        (rng.standard_normal(20000) * numpy.exp2(rng.integers(-140, 120, 20000))).astype(numpy.float32).view(numpy.uint32),
        (rng.integers(0, 1 << 18, 4000, dtype=numpy.uint32) << 13) | 0x1000,  # exact ties, both parities, both signs
        numpy.array([0, 0x80000000, 1, 0x1000, 0x3000, 0x807FFFFF, 0x7F7FFFFF, 0xFF7FF000, 0x7F7FEFFF], numpy.uint32),  # zeros, subnormals, overflow
    ]
    finite = numpy.concatenate(finite).astype(numpy.uint32)
    finite = finite[(finite >> 23) & 0xFF != 0xFF]  # drop the NaN and infinity patterns
    special = numpy.array([0x7F800000, 0xFF800000, 0x7FFFFFFF, 0x7FC00000, 0xFFFFFFFF, 0x7F800001], numpy.uint32)
    x = cupy.asarray(numpy.concatenate([finite, special]).view(numpy.float32))
    y = cupy.empty(x.size, dtype=numpy.uint32)
    kernel(((x.size + 255) // 256,), (256,), (x, y, numpy.int32(x.size)))
    y = cupy.asnumpy(y)
    expected = _tf32_model(finite, ties_to_even=_cuda._compute_capability() >= 90)
    wrong = numpy.flatnonzero(y[: finite.size] != expected)
    assert wrong.size == 0, [(hex(finite[i]), hex(y[i]), hex(expected[i])) for i in wrong[:8]]
    rounded = y[finite.size :].view(numpy.float32)
    assert list(rounded[:2]) == [numpy.inf, -numpy.inf] and numpy.isnan(rounded[2:]).all(), [hex(v) for v in y[finite.size :]]


@pytest.mark.parametrize(
    "shapes",
    [
        dict(x=(2, 6, 40), w=(6, 5, 3), groups=2),  # channels padded (3 of 4 or 8), two groups
        dict(x=(2, 16, 40), w=(16, 8, 3), stride=2, padding=1, dilation=2),  # the forward pass folds the dilated kernel
        dict(x=(1, 8, 40), w=(8, 24, 8), stride=4, padding=2),  # dense taps, the kernel a multiple of the stride
        dict(x=(1, 12, 40), w=(12, 8, 5), stride=3, dilation=2, groups=4),
        dict(x=(1, 40, 8), w=(40, 70, 80)),  # several tiles of taps, rows and channels (the kernel's 32 x 32)
        dict(x=(1, 36, 8), w=(36, 20, 30), stride=2, padding=1, dilation=4),  # a dilated fold whose taps span tiles
    ],
    ids=["groups_pad", "dilated_fold", "dense", "stride3", "tiles", "dilated_tiles"],
)
@pytest.mark.parametrize("dtype,round_tf32", [("float32", False), ("float32", True), ("float32", "split"), ("float16", False), ("bfloat16", False)])
def test_window_weight_pack(shapes, dtype, round_tf32):
    """pack_window_weight (the window kernels' weight in one launch) against
    _kernels.pack_window_weight in NumPy, channels padded with zeros, float
    rounded to TF32 as to_tf32 rounds on sm_90 (ties to even; Inf and NaN
    kept), or split for 3xTF32 ("split": that rounding, then the remainder
    rounded the same way, as MmaOp<float, 3> splits): bitwise, for both
    passes, folded or not, in poisoned memory."""
    from cupyconv.kernels import pack_weight

    kwargs = {k: v for k, v in shapes.items() if k not in ("x", "w")}
    geometry = _geometry.make_geometry(1, shapes["x"], shapes["w"], None, kwargs.get("stride", 1), kwargs.get("padding", 0), 0,
                                       kwargs.get("groups", 1), kwargs.get("dilation", 1))  # fmt: skip
    rng = numpy.random.default_rng(31)
    w = rng.standard_normal(shapes["w"]).astype(numpy_dtype(dtype))
    if dtype == "float32":  # ties of both parities, infinities and NaN
        bits = w.reshape(-1).view(numpy.uint32)
        bits[:6] = (bits[:6] & ~numpy.uint32(0x1FFF)) | 0x1000
        bits[6:9] = [0x7F800000, 0xFF800000, 0x7FC00001]
    wide = numpy.uint32 if dtype == "float32" else numpy.uint16
    for pass_name in ("forward", "grad_input"):
        for fold in (True, False):
            expected = numpy.ascontiguousarray(_kernels.pack_window_weight(w, geometry, pass_name, fold))
            padded = _kernels.window_channels_padded(expected.shape[3], dtype)
            expected = numpy.concatenate([expected, numpy.zeros(expected.shape[:3] + (padded - expected.shape[3],), expected.dtype)], axis=3)
            expected = expected.view(wide)
            if round_tf32:
                finite = (expected >> 23) & 0xFF != 0xFF
                hi = numpy.where(finite, _tf32_model(expected, ties_to_even=True), expected)
                if round_tf32 == "split":
                    with numpy.errstate(invalid="ignore", over="ignore"):
                        rest = (expected.view(numpy.float32) - hi.view(numpy.float32)).view(numpy.uint32)
                    lo = numpy.where((rest >> 23) & 0xFF != 0xFF, _tf32_model(rest, ties_to_even=True), rest)
                    expected = numpy.stack([hi, lo])
                else:
                    expected = hi
            with poisoned_allocations():
                packed = pack_weight._window_weight(cupy.asarray(w), geometry, pass_name, dtype, fold, round_tf32 is True, round_tf32 == "split")
                got = cupy.asnumpy(packed).view(wide)
            assert got.shape == expected.shape, (pass_name, fold, got.shape, expected.shape)
            differ = got != expected
            if round_tf32 == "split":  # lo of Inf or NaN: a NaN (the GPU's subtraction gives its own NaN bits)
                differ[1] &= ~(numpy.isnan(got[1].view(numpy.float32)) & numpy.isnan(expected[1].view(numpy.float32)))
            wrong = numpy.argwhere(differ)
            assert wrong.size == 0, (pass_name, fold, [(tuple(i), hex(got[tuple(i)]), hex(expected[tuple(i)])) for i in wrong[:6]])
