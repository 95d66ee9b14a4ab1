// grad_weight_overlap: grad_weight of a 1D transposed convolution of stride 8
// whose kernel has 9 to 16 taps, dilation 1 and one group, in half or
// bfloat16, on Hopper's warpgroup tensor cores (wgmma, sm_90a): the other
// half of a vocoder upsampling layer's backward pass (benchmark X2), beside
// grad_input_overlap.cu; perf notes v33.
//
// With tap k = 8 h + j (h = 0, 1; j = 0..7) and G[n, co, m, j] =
// gy[n, co, 8 m + j - padding] (zero outside the row),
//
//   grad_weight[ci, co, 8 h + j] = sum over (n, l) of x[n, ci, l] * G[n, co, l + h, j]:
//
// a stride-1 correlation with two taps h whose "channels" are the pairs (co,
// j).  G's row is grad_output's row as it lies: position m is the 16 bytes
// at 16 m, its 8 phases j side by side.  So a stretch of grad_output's row
// copied into shared memory as it lies *is* the M-major A operand of rows
// (co, j) and reduction positions m: the core matrix of positions m..m+7 is
// the 128 bytes at 16 (m - m0), and tap h is the same operand 16 bytes on.
// Nothing is transposed and each grad_output element is copied once per
// block.
//
// GEMM per block: rows (co, j) of GWO_CO = 16 output channels (warpgroup h
// takes channels 8 h..8 h + 7: its 64 rows), columns GWO_BN = 128 input
// channels (wgmma N), reduction over items of GWO_P = 64 positions of one
// image, split across blocks: block (split, co tile, ci tile) sums the
// items first .. first + per_split and writes its tile as doubles to
// workspace[split]; sum_splits adds the splits in order (bitwise
// repeatable).  Per item, into one of GWO_STAGES buffers loaded GWO_STAGES -
// 2 ahead:
//   * x (B, K-major): 128 channel rows of 64 positions (128 bytes), one
//     128-byte-swizzled atom (chunk c of row ci at ci * 128 + 16 (c ^ ci % 8)),
//     16-byte cp.async, a warp's copies 4 whole rows;
//   * the stretch gy[n, co, 8 l0 - padding ..] of GWO_P + 1 positions of each
//     of the 16 output channels, COPY bytes a copy (8 where padding is 4 mod 8
//     and the stretch starts 8 bytes past a 16-byte boundary).
// Each warpgroup issues 2 taps x 4 k-steps of wgmma.m64n128k16 per item
// into two accumulators (128 floats a thread).
//
// Requirements checked by the host: compute capability 9.0 (other targets
// compile an empty body), stride 8, 9 to 16 taps, padding a multiple of
// COPY / 2, grad_output rows a multiple of COPY / 2 elements and
// COPY-aligned, x rows a multiple of 8 elements and 16-byte aligned.
#include "common.cuh"
#include "mma.cuh"
#include "wgmma.cuh"

constexpr int GWO_THREADS = 256;                    // two warpgroups
constexpr int GWO_CO = 16;                          // output channels a block (128 GEMM rows)
constexpr int GWO_BN = 128;                         // input channels a block
constexpr int GWO_P = 64;                           // positions an item
constexpr int GWO_STAGES = 5;                       // buffers, loaded GWO_STAGES - 2 items ahead
constexpr int GWO_X_BYTES = GWO_BN * GWO_P * 2;     // one swizzled atom, 1024-byte aligned
constexpr int GWO_ROW_BYTES = (GWO_P + 1) * 16;     // a channel's stretch: positions l0 .. l0 + GWO_P
constexpr int GWO_CHUNK = GWO_ROW_BYTES + 16;       // its stride in shared memory
constexpr int GWO_WINDOW_BYTES = GWO_CO * GWO_CHUNK;

template <typename T, typename Index, int COPY>
__global__ void __launch_bounds__(GWO_THREADS, 1) grad_weight_overlap(
    const T* __restrict__ x,         // (batch, in_channels, in_w)
    const T* __restrict__ gy,        // (batch, out_channels, out_w)
    double* __restrict__ workspace,  // (splits, in_channels, out_channels, kernel_w)
    int batch, int in_channels, int out_channels, int in_w, int out_w, int kernel_w, int padding, int per_split, int co_tiles,
    int ci_tiles) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(sizeof(T) == 2, "16-bit operands only (wgmma transposes no others)");
    static_assert(COPY == 16 || COPY == 8, "copies of 16 or 8 bytes");
    constexpr int UNIT = COPY / 2;                      // elements a copy
    constexpr int PER_ROW = GWO_ROW_BYTES / COPY;       // copies a channel's stretch
    static_assert(GWO_BN * GWO_P / 8 % GWO_THREADS == 0, "x copies");
    extern __shared__ __align__(1024) unsigned char smem[];  // x atoms (1024-byte aligned) first, then the stretches
    const int tid = threadIdx.x, warpgroup = tid / 128;

    int b = blockIdx.x;
    const int ci_tile = b % ci_tiles;
    b /= ci_tiles;
    const int co_tile = b % co_tiles;
    const int split = b / co_tiles;
    const int ci0 = ci_tile * GWO_BN, co0 = co_tile * GWO_CO;
    const int per_image = (in_w + GWO_P - 1) / GWO_P;
    const int first = split * per_split;
    const int steps = max(0, min(batch * per_image, first + per_split) - first);
    unsigned char* const x_base = smem;
    unsigned char* const w_base = smem + GWO_STAGES * GWO_X_BYTES;

    // Item k (the block's k-th) into buffer k % GWO_STAGES; zeros past the
    // channels, past in_w and outside grad_output's row.
    auto load = [&](int k) {
        const int item = first + k;
        const int n = item / per_image, l0 = item % per_image * GWO_P;
        const T* const image = x + static_cast<Index>(n) * in_channels * in_w;
        copy_x_atoms<T, Index, GWO_BN, GWO_P / 64, GWO_THREADS>(x_base + (k % GWO_STAGES) * GWO_X_BYTES, image, x, ci0, in_channels, l0, in_w);
        unsigned char* const wd = w_base + (k % GWO_STAGES) * GWO_WINDOW_BYTES;
        const int e0 = 8 * l0 - padding;  // a multiple of UNIT
        for (int task = tid; task < GWO_CO * PER_ROW; task += GWO_THREADS) {
            const int r = task / PER_ROW, u = task % PER_ROW;
            const int co = co0 + r, e = e0 + u * UNIT;
            const bool valid = co < out_channels && e >= 0 && e < out_w;  // out_w % UNIT == 0: all or nothing
            const T* src = gy + (static_cast<Index>(n) * out_channels + co) * out_w + e;
            if constexpr (COPY == 16)
                cp_async16(wd + r * GWO_CHUNK + u * COPY, valid ? src : gy, valid);
            else
                cp_async_small<8>(wd + r * GWO_CHUNK + u * COPY, valid ? src : gy, valid);
        }
    };

    float acc[2][64];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int i = 0; i < 64; ++i) acc[h][i] = 0.0f;

    const unsigned base = shared_address(smem);
#pragma unroll 1
    for (int k = 0; k < GWO_STAGES - 2; ++k) {
        if (k < steps) load(k);
        cp_async_commit();
    }
#pragma unroll 1
    for (int k = 0; k < steps; ++k) {
        cp_async_wait_group<GWO_STAGES - 3>();  // item k is here
        fence_proxy_async();
        __syncthreads();  // ... for every thread; every warpgroup is done with item k - 2
#pragma unroll
        for (int h = 0; h < 2; ++h) pin(acc[h]);
        wgmma_fence();
        const unsigned x_tile = base + (k % GWO_STAGES) * GWO_X_BYTES;
        const unsigned window = base + GWO_STAGES * GWO_X_BYTES + (k % GWO_STAGES) * GWO_WINDOW_BYTES + warpgroup * 8 * GWO_CHUNK;
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int ks = 0; ks < GWO_P / 16; ++ks) {
                // A: M-major, K-adjacent core matrices (8 positions) 128 bytes apart, M-adjacent (the next channel) GWO_CHUNK
                const unsigned long long a = wgmma_descriptor(window + (ks * 16 + h) * 16, 128, GWO_CHUNK);
                // B: K-major, 128-byte-swizzled, 8-channel groups 1024 bytes apart, a k-step 32 bytes along the rows
                const unsigned long long bd = wgmma_descriptor_fields(16, 1024, true) | (((x_tile + ks * 32) >> 4) & 0x3FFF);
                wgmma_m64k16_mn_a<T, GWO_BN>(acc[h], a, bd);
            }
        wgmma_commit();
        if (k + GWO_STAGES - 2 < steps) load(k + GWO_STAGES - 2);
        cp_async_commit();
        wgmma_wait<1>();
    }
    wgmma_wait<0>();
#pragma unroll
    for (int h = 0; h < 2; ++h) pin(acc[h]);
    cp_async_wait_all();

    // Accumulator (h, 4 jj + 2 hh + e): row 16 w + g + 8 hh = (channel, j), column 8 jj + 2 t4 + e.
    const int lane = tid % 32, w = (tid / 32) % 4, g = lane / 4, t4 = lane % 4;
    double* const out = workspace + static_cast<Index>(split) * in_channels * out_channels * kernel_w;
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int row = 16 * w + g + 8 * hh;
            const int co = co0 + 8 * warpgroup + row / 8, tap = 8 * h + row % 8;
            if (co >= out_channels || tap >= kernel_w) continue;
#pragma unroll
            for (int jj = 0; jj < GWO_BN / 8; ++jj)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int ci = ci0 + 8 * jj + 2 * t4 + e;
                    if (ci < in_channels)
                        out[(static_cast<Index>(ci) * out_channels + co) * kernel_w + tap] = static_cast<double>(acc[h][4 * jj + 2 * hh + e]);
                }
        }
#endif
}
