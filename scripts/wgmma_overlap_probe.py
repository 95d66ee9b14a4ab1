"""Does wgmma read B as overlapping core matrices of one contiguous row?

The trick grad_input_overlap.cu is built on (perf notes v31): for a stride-8
problem the 16 taps of column n are the row's elements 8n .. 8n + 15, so with
the row in shared memory as it lies, a K-major B operand is the row itself
with the descriptor's leading offset (between the two 8-tap halves) 16
bytes, overlapping its neighbour.  Run on a Hopper GPU
(``python scripts/wgmma_overlap_probe.py``); prints the largest difference
from NumPy for:
  * 16-bit: B[k][n] = S[8n + k], leading offset 16 bytes;
  * TF32 (4-byte elements, a column's run 32 bytes): the row's 16-byte chunks
    de-interleaved into an even and an odd region, B[k][n] = S[8n + k + off]
    for off 0 and 4, the leading offset the distance between the regions.
Small integers as values, so every product and sum is exact: 0.0 expected.
"""
import importlib.resources

import numpy

from cupyconv import _kernels


def _expand(text, seen=None):
    """`text` with the package's `#include "x.cuh"` lines inlined once each."""
    folder = importlib.resources.files("cupyconv.kernels")
    seen = set() if seen is None else seen

    def sub(match):
        if match.group(1) in seen:
            return ""
        seen.add(match.group(1))
        return _expand(folder.joinpath(match.group(1)).read_text(), seen)

    return _kernels._INCLUDE.sub(sub, text)


SRC = _expand('#include "mma.cuh"\n#include "wgmma.cuh"\n') + r'''
extern "C" __global__ void probe16(const half_t* A, const half_t* S, float* D, int lbo) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    __shared__ __align__(1024) unsigned char smem[2048 + 8 * 128 * 2 + 64];
    const int tid = threadIdx.x;
    half_t* sa = reinterpret_cast<half_t*>(smem);
    for (int i = tid; i < 64 * 16; i += 128) {
        const int m = i / 16, k = i % 16;
        sa[((m / 8) * 256 + (k / 8) * 128 + (m % 8) * 16) / 2 + k % 8] = A[i];
    }
    half_t* sb = reinterpret_cast<half_t*>(smem + 2048);
    for (int i = tid; i < 8 * 128 + 16; i += 128) sb[i] = S[i];
    fence_proxy_async();
    __syncthreads();
    const unsigned base = shared_address(smem);
    const unsigned long long a = wgmma_descriptor(base, 128, 256);
    const unsigned long long b = wgmma_descriptor(base + 2048, lbo, 128);
    float d[64];
    for (int i = 0; i < 64; ++i) d[i] = 0.0f;
    wgmma_fence();
    wgmma_m64n128<half_t>(d, a, b, 0);
    wgmma_commit();
    wgmma_wait<0>();
    const int w = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
    for (int j = 0; j < 16; ++j) {
        D[(16 * w + g) * 128 + 8 * j + 2 * t4] = d[4 * j];
        D[(16 * w + g) * 128 + 8 * j + 2 * t4 + 1] = d[4 * j + 1];
        D[(16 * w + g + 8) * 128 + 8 * j + 2 * t4] = d[4 * j + 2];
        D[(16 * w + g + 8) * 128 + 8 * j + 2 * t4 + 1] = d[4 * j + 3];
    }
#endif
}
// TF32: A 64 x 8; S's chunk q (4 floats) at region (q % 2 == 0 ? even_at : odd_at) + 16 (q / 2) bytes
extern "C" __global__ void probe32(const float* A, const float* S, float* D, int even_at, int odd_at, int start, int lbo) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    __shared__ __align__(1024) unsigned char smem[2048 + 2 * (8 * 128 + 64) * 4];
    const int tid = threadIdx.x;
    float* sa = reinterpret_cast<float*>(smem);
    for (int i = tid; i < 64 * 8; i += 128) {
        const int m = i / 8, k = i % 8;
        sa[((m / 8) * 256 + (k / 4) * 128 + (m % 8) * 16) / 4 + k % 4] = A[i];
    }
    for (int i = tid; i < 8 * 128 + 32; i += 128) {
        const int q = i / 4;
        *reinterpret_cast<float*>(smem + 2048 + ((q % 2) ? odd_at : even_at) + 16 * (q / 2) + 4 * (i % 4)) = S[i];
    }
    fence_proxy_async();
    __syncthreads();
    const unsigned base = shared_address(smem);
    const unsigned long long a = wgmma_descriptor(base, 128, 256);
    const unsigned long long b = wgmma_descriptor(base + 2048 + start, lbo, 128);
    float d[64];
    for (int i = 0; i < 64; ++i) d[i] = 0.0f;
    wgmma_fence();
    wgmma_m64n128<float>(d, a, b, 0);
    wgmma_commit();
    wgmma_wait<0>();
    const int w = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
    for (int j = 0; j < 16; ++j) {
        D[(16 * w + g) * 128 + 8 * j + 2 * t4] = d[4 * j];
        D[(16 * w + g) * 128 + 8 * j + 2 * t4 + 1] = d[4 * j + 1];
        D[(16 * w + g + 8) * 128 + 8 * j + 2 * t4] = d[4 * j + 2];
        D[(16 * w + g + 8) * 128 + 8 * j + 2 * t4 + 1] = d[4 * j + 3];
    }
#endif
}
'''


def main():
    import cupy

    mod = cupy.RawModule(code=SRC, options=("-std=c++17", "-arch=sm_90a"))
    rng = numpy.random.default_rng(0)
    # 16-bit
    A = rng.integers(-4, 5, (64, 16)).astype(numpy.float16)
    S = rng.integers(-4, 5, 8 * 128 + 16).astype(numpy.float16)
    D = cupy.full((64, 128), numpy.nan, dtype=numpy.float32)
    mod.get_function("probe16")((1,), (128,), (cupy.asarray(A), cupy.asarray(S), D, numpy.int32(16)))
    B = numpy.stack([S[8 * n: 8 * n + 16] for n in range(128)], axis=1).astype(numpy.float64)  # (16, 128)
    expect = A.astype(numpy.float64) @ B
    print("fp16 overlapping (lbo 16): max |diff|", float(numpy.abs(cupy.asnumpy(D) - expect).max()))
    # TF32
    A32 = rng.integers(-4, 5, (64, 8)).astype(numpy.float32)
    S32 = rng.integers(-4, 5, 8 * 128 + 32).astype(numpy.float32)
    region = (8 * 128 + 64) * 4 // 2  # bytes per region
    for name, even_at, odd_at, off in (("E first, off 0", 0, region, 0), ("O first, off 4", region, 0, 4)):
        # off 0: chunks 2n (E[n]) and 2n + 1 (O[n]): start E, leading O - E
        # off 4: chunks 2n + 1 (O[n]) and 2n + 2 (E[n + 1]): start O, leading E + 16 - O
        lbo = odd_at - even_at if off == 0 else even_at + 16 - odd_at
        st = even_at if off == 0 else odd_at
        D = cupy.full((64, 128), numpy.nan, dtype=numpy.float32)
        mod.get_function("probe32")((1,), (128,), (cupy.asarray(A32), cupy.asarray(S32), D, numpy.int32(even_at), numpy.int32(odd_at), numpy.int32(st), numpy.int32(lbo)))
        B = numpy.stack([S32[8 * n + off: 8 * n + off + 8] for n in range(128)], axis=1).astype(numpy.float64)
        expect = A32.astype(numpy.float64) @ B
        print(f"tf32 {name} (start {st}, lbo {lbo}): max |diff|", float(numpy.abs(cupy.asnumpy(D) - expect).max()))


if __name__ == "__main__":
    main()
