// Accuracy probe for float32-accurate GEMM on TF32 tensor cores (3xTF32):
// how the accumulation order changes the error against float64.  One warp
// per 16 x 8 tile of C = A * B^T (A: M x K, B: N x K, both row-major),
// fragments read straight from global memory: this measures rounding, not
// speed.  Driven by scripts/tf32x3_probe.py.
//
// MODE 0: 1xTF32, one accumulator
// MODE 1: 3xTF32, one accumulator, small terms first (MmaMath PASSES=3)
// MODE 2: 3xTF32, all three products of CHUNK k-steps into a fresh
//         accumulator, then added to the running sum with FADD
// MODE 3: 3xTF32, big products into the running sum, small ones into a
//         second accumulator added at the end
// MODE 4: float FFMA in k order (what a CUDA-core kernel does)
#include "mma.cuh"

__device__ __forceinline__ void split_tf32(float v, unsigned& hi, unsigned& lo) {
    hi = to_tf32(v);
    lo = to_tf32(v - __uint_as_float(hi));
}

template <int MODE, int CHUNK>
__global__ void gemm_probe(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int m_size,
                           int n_size, int k_size) {
    const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    const int m0 = blockIdx.y * 16, n0 = blockIdx.x * 8;
    const float* a0 = a + static_cast<long long>(m0 + g) * k_size;
    const float* a1 = a0 + 8LL * k_size;
    const float* b0 = b + static_cast<long long>(n0 + g) * k_size;
    float sum[4] = {0, 0, 0, 0}, part[4] = {0, 0, 0, 0}, small[4] = {0, 0, 0, 0};
    if constexpr (MODE == 4) {
        const float* ar[2] = {a + static_cast<long long>(m0 + g) * k_size, a + static_cast<long long>(m0 + g + 8) * k_size};
        const float* br[2] = {b + static_cast<long long>(n0 + 2 * t) * k_size, b + static_cast<long long>(n0 + 2 * t + 1) * k_size};
        for (int k = 0; k < k_size; ++k)
            for (int e = 0; e < 4; ++e) sum[e] = fmaf(ar[e / 2][k], br[e % 2][k], sum[e]);
    } else {
        for (int k0 = 0; k0 < k_size; k0 += 8) {
            const float av[4] = {a0[k0 + t], a1[k0 + t], a0[k0 + t + 4], a1[k0 + t + 4]};
            const float bv[2] = {b0[k0 + t], b0[k0 + t + 4]};
            unsigned ah[4], al[4], bh[2], bl[2];
            for (int e = 0; e < 4; ++e) split_tf32(av[e], ah[e], al[e]);
            for (int e = 0; e < 2; ++e) split_tf32(bv[e], bh[e], bl[e]);
            if constexpr (MODE == 0) {
                mma_tf32(sum, ah, bh);
            } else if constexpr (MODE == 1) {
                mma_tf32(sum, al, bh);
                mma_tf32(sum, ah, bl);
                mma_tf32(sum, ah, bh);
            } else if constexpr (MODE == 2) {
                mma_tf32(part, al, bh);
                mma_tf32(part, ah, bl);
                mma_tf32(part, ah, bh);
                if ((k0 / 8 + 1) % CHUNK == 0 || k0 + 8 >= k_size) {
                    for (int e = 0; e < 4; ++e) {
                        sum[e] += part[e];
                        part[e] = 0.0f;
                    }
                }
            } else {
                mma_tf32(small, al, bh);
                mma_tf32(small, ah, bl);
                mma_tf32(sum, ah, bh);
            }
        }
        if constexpr (MODE == 3)
            for (int e = 0; e < 4; ++e) sum[e] += small[e];
    }
    for (int e = 0; e < 4; ++e) c[static_cast<long long>(m0 + g + 8 * (e / 2)) * n_size + n0 + 2 * t + e % 2] = sum[e];
}
