// One phase of each row of grad_output, gathered into contiguous rows (the
// backward pass's phase rewrite, _cuda._phase_backward_geometry):
//
//   out[row, t] = source[row, first + stride * t]   for t in [lo, hi)
//   out[row, t] = 0                                  for other t < out_w
//
// Block b takes row b / chunks and GATHER_THREADS * GATHER_ELEMS consecutive t
// of it: each thread issues its GATHER_ELEMS loads (consecutive lanes on
// positions stride apart) before it stores any.
#include "common.cuh"

constexpr int GATHER_THREADS = 256;
constexpr int GATHER_ELEMS = 8;

template <typename T, typename Index>
__global__ void __launch_bounds__(GATHER_THREADS) phase_gather(
    const T* __restrict__ source,  // (rows, in_w)
    T* __restrict__ out,           // (rows, out_w)
    int in_w, int out_w, int stride, int first, int lo, int hi,
    int chunks)  // blocks per row: ceil(out_w / (GATHER_THREADS * GATHER_ELEMS))
{
    const Index row = blockIdx.x / chunks;
    const int t0 = static_cast<int>(blockIdx.x % chunks) * GATHER_THREADS * GATHER_ELEMS + threadIdx.x;
    const T* const from = source + row * in_w + first;
    T v[GATHER_ELEMS];
#pragma unroll
    for (int e = 0; e < GATHER_ELEMS; ++e) {
        const int t = t0 + e * GATHER_THREADS;
        v[e] = T{};
        if (t >= lo && t < hi) v[e] = from[static_cast<Index>(stride) * t];
    }
    T* const to = out + row * out_w;
#pragma unroll
    for (int e = 0; e < GATHER_ELEMS; ++e) {
        const int t = t0 + e * GATHER_THREADS;
        if (t < out_w) to[t] = v[e];
    }
}
