// grad_weight of a float32 1D transposed convolution whose taps all land on
// one phase of grad_output (stride 1, a dilation that is a multiple of the
// stride, or one tap), on TF32 tensor cores (one pass, or float32-accurate
// 3xTF32):
//
//   grad_weight[g*C + ci, j, k] = sum_{n, l} x[n, g*C + ci, l] * gy[n, g*M + j, l*s - p + k*d]
//
// With d = e*s, gy[l*s - p + k*d] = G[l + k*e] for the phase sequence
// G[m] = gy[m*s - p] (zero outside grad_output): a stride-1 correlation with
// dilation e, read straight from grad_output (no gathered copy).
//
// GEMM per (group, chunk of TAPS taps): rows ci (32 a block), columns (j,
// tap) (64 channels j a block), reduction over (n, l) cut into items of P =
// 64 positions of one image.  Per item, three cp.async stages:
//   * x[n, ci, l0 .. l0 + P): 32 rows of XS = P + 4 floats (rows 4 banks
//     apart: ldmatrix reads the A fragments conflict-free);
//   * the window G[n, j, m0 .. m0 + window) with m0 = l0 + k0*e, every phase
//     position the item's (l, tap) pairs read: 64 rows of `row` floats (row
//     = 4 mod 8, so the scalar B reads of 8 channels x 4 positions fall in 32
//     distinct banks at every tap's shift).  4-byte copies, so that any
//     stride, padding and row length work.
// A fragments (ci x positions) are loaded once per k-step and serve every
// tap; tap t's B fragment is the window moved t*e positions.
//
// Eight warps: four take 16 channels j each, and the two halves of each item's
// k-steps are split between warps w and w + 4, whose sums are added through
// shared memory at the end.  Each block sums a contiguous range of items
// (its split) in float, with a fresh accumulator per k-step for 3xTF32
// (MmaOp), and writes its tile to workspace[split] (double) for sum_splits,
// which adds the splits in order: the same bits on every run.
//
// Requirements checked by the host: sm_80 or later; K == 1 or d % s == 0;
// row >= P + (TAPS - 1)*e and row % 8 == 4; positions and phase indices in
// int (in_w, out_w below 2^30).
#include "common.cuh"
#include "mma.cuh"

constexpr int GWP_P = 64;                  // reduction positions per item
constexpr int GWP_XS = GWP_P + 4;          // x row stride, floats
constexpr int GWP_BM = 32;                 // input channels ci per block
constexpr int GWP_BN = 64;                 // output channels j per block
constexpr int GWP_STAGES = 3;
constexpr int GWP_THREADS = 256;

template <typename T, typename Index, int TAPS, int PASSES>
__global__ void __launch_bounds__(GWP_THREADS, TAPS <= 5 ? 2 : 1) grad_weight_phase(
    const T* __restrict__ x,         // (batch, groups * channels, in_w)
    const T* __restrict__ gy,        // (batch, groups * out_channels, out_w)
    double* __restrict__ workspace,  // (splits, groups * channels, out_channels, kernel_w)
    int batch, int groups, int channels, int out_channels, int in_w, int out_w, int kernel_w,
    int stride, int padding, int step,  // step: e = d / s, the phase positions between taps
    int window, int row,                // window positions staged per item, and their row stride (floats)
    int items_per_split, int ci_tiles, int j_tiles, int tap_chunks) {
    static_assert(sizeof(T) == 4, "float: TF32 or 3xTF32");
    constexpr int KSTEP = 8;
    constexpr int KSTEPS = GWP_P / KSTEP / 2;  // per warp and item: half of the item's k-steps
    typedef MmaOp<T, PASSES> Op;
    extern __shared__ __align__(16) unsigned char smem[];
    const int stage_floats = GWP_BM * GWP_XS + GWP_BN * row;
    auto x_tile = [&](int buf) { return reinterpret_cast<T*>(smem) + buf * stage_floats; };  // [BM][XS]
    auto g_tile = [&](int buf) { return x_tile(buf) + GWP_BM * GWP_XS; };                  // [BN][row]

    // Block -> ci tile fastest, then j tile, tap chunk, group, split: the
    // tiles of one split read the same items side by side.
    unsigned block = blockIdx.x;
    const int ci_tile = block % ci_tiles;
    block /= ci_tiles;
    const int j_tile = block % j_tiles;
    block /= j_tiles;
    const int chunk = block % tap_chunks;
    block /= tap_chunks;
    const int group = block % groups;
    const int split = block / groups;

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int g = lane / 4, t4 = lane % 4;
    const int ci0 = ci_tile * GWP_BM, j0 = j_tile * GWP_BN, k0 = chunk * TAPS;
    const int per_image = (in_w + GWP_P - 1) / GWP_P;
    const Index items = static_cast<Index>(batch) * per_image;
    const Index first = static_cast<Index>(split) * items_per_split;
    const int count = static_cast<int>(min(static_cast<Index>(items_per_split), items - first));

    // Copies of the next item into buffer `buf`; zeros past the channels, past
    // in_w and outside grad_output.  16-byte copies where the rows allow
    // (x: in_w % 4 == 0; the window: stride 1 and every item's first
    // position a multiple of 4), else 4 bytes.  x's tasks divide by
    // constants; the window's are columns (below): a list of (row, position)
    // tasks cost about 33 instructions a 4-byte copy (SASS, P4), about as
    // many as the item's MMAs and splits.
    const bool x_vectors = in_w % 4 == 0 && reinterpret_cast<unsigned long long>(x) % 16 == 0;
    const bool g_vectors = stride == 1 && out_w % 4 == 0 && ((k0 * step - padding) & 3) == 0 &&
                           reinterpret_cast<unsigned long long>(gy) % 16 == 0;
    const int g_len = g_vectors ? (window + 3) / 4 : window;  // copies a window row
    // The window's copies: warp w copies rows w, w + 8, ..., w + 56, its lanes
    // columns lane, lane + 32, ...: a column's grad_output position and bounds
    // are found once for its 8 rows, which step by 8 rows in global and
    // shared memory (copy_window_column).
    static_assert(GWP_BN == 8 * (GWP_THREADS / 32), "eight rows a warp");
    const int g_warp_rows = min(8, max(0, (out_channels - j0 - warp + 7) / 8));  // rows w + 8i inside the channels
    Index item = first;
    auto load = [&](int buf) {
        const Index n = item / per_image;
        const int l0 = static_cast<int>(item - n * per_image) * GWP_P;
        ++item;
        const Index image = n * groups + group;
        T* xs = x_tile(buf);
        const T* x_image = x + (image * channels + ci0) * in_w + l0;  // row r at + r * in_w
        if (x_vectors) {
#pragma unroll
            for (int i = 0; i < GWP_BM * GWP_P / 4 / GWP_THREADS; ++i) {
                const int task = tid + i * GWP_THREADS, r = task / (GWP_P / 4), c = task % (GWP_P / 4) * 4;
                const bool valid = ci0 + r < channels && l0 + c < in_w;
                cp_async16(xs + r * GWP_XS + c, valid ? x_image + static_cast<Index>(r) * in_w + c : x, valid);
            }
        } else {
#pragma unroll 4
            for (int i = 0; i < GWP_BM * GWP_P / GWP_THREADS; ++i) {
                const int task = tid + i * GWP_THREADS, r = task / GWP_P, c = task % GWP_P;
                const bool valid = ci0 + r < channels && l0 + c < in_w;
                cp_async_small<4>(xs + r * GWP_XS + c, valid ? x_image + static_cast<Index>(r) * in_w + c : x, valid);
            }
        }
        const unsigned gs = shared_address(g_tile(buf) + warp * row);
        const int o0 = (l0 + k0 * step) * stride - padding;  // grad_output position of window position 0
        const T* g_image = gy + (image * out_channels + j0 + min(warp, max(out_channels - j0 - 1, 0))) * out_w;
        const Index g_step = static_cast<Index>(8) * out_w;
        for (int c = lane; c < g_len; c += 32) {
            const int o = g_vectors ? o0 + 4 * c : o0 + c * stride;
            const bool inside = o >= 0 && o < out_w;
            const T* src = g_image + (inside ? o : 0);
            if (g_vectors) {
                if (g_warp_rows == 8) {
                    copy_window_column<16, 8, true>(gs + 16 * c, 32 * row, src, g_step, inside, 8);
                } else {
                    copy_window_column<16, 8, false>(gs + 16 * c, 32 * row, src, g_step, inside, g_warp_rows);
                }
            } else if (g_warp_rows == 8) {
                copy_window_column<4, 8, true>(gs + 4 * c, 32 * row, src, g_step, inside, 8);
            } else {
                copy_window_column<4, 8, false>(gs + 4 * c, 32 * row, src, g_step, inside, g_warp_rows);
            }
        }
    };

    const int jw = (warp & 3) * 16;  // the warp's 16 channels j
    const int half = warp >> 2;      // and its half of each item's k-steps
    float acc[TAPS][2][2][4];
#pragma unroll
    for (int t = 0; t < TAPS; ++t)
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int jj = 0; jj < 2; ++jj)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[t][i][jj][e] = 0.0f;

    cp_async_pipeline<GWP_STAGES>(count, load, [&](int buf) {
        const T* xs = x_tile(buf);
        const T* gs = g_tile(buf);
#pragma unroll 1
        for (int kk = 0; kk < KSTEPS; ++kk) {
            const int kp = (half * KSTEPS + kk) * KSTEP;  // the k-step's first position in the item
            typename Op::A af[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                // ldmatrix: lanes 0-15 address rows i*16 + lane of positions kp .. kp + 3,
                // lanes 16-31 the same rows at kp + 4: a0..a3 = A[g][t4], A[g+8][t4], A[g][t4+4], A[g+8][t4+4]
                unsigned raw[4];
                ldmatrix_x4(raw, xs + (i * 16 + (lane & 15)) * GWP_XS + kp + (lane >> 4) * 4);
                Op::make(af[i], raw);
            }
#pragma unroll
            for (int t = 0; t < TAPS; ++t) {
                typename Op::B bf[2];
#pragma unroll
                for (int jj = 0; jj < 2; ++jj) {  // b0 = G[j][kp + t4 + t*e], b1 = G[j][kp + t4 + 4 + t*e]
                    const T* at = gs + (jw + jj * 8 + g) * row + kp + t4 + t * step;
                    const unsigned raw[2] = {__float_as_uint(at[0]), __float_as_uint(at[4])};
                    Op::make(bf[jj], raw);
                }
#pragma unroll
                for (int i = 0; i < 2; ++i)
#pragma unroll
                    for (int jj = 0; jj < 2; ++jj) Op::mma(acc[t][i][jj], af[i], bf[jj]);
            }
        }
    });

    // The two halves' sums: warps 4-7 stage theirs (lane fastest, no bank
    // conflicts), warps 0-3 add them and write.  The pipeline's last wait
    // covered this thread's copies; the barrier covers everyone's reads.
    __syncthreads();
    float* partial = reinterpret_cast<float*>(smem);  // [4 warps][TAPS * 16 values][32 lanes]
    if (half) {
        float* mine = partial + (warp & 3) * TAPS * 16 * 32 + lane;
#pragma unroll
        for (int t = 0; t < TAPS; ++t)
#pragma unroll
            for (int v = 0; v < 16; ++v) mine[(t * 16 + v) * 32] = acc[t][v / 8][(v / 4) % 2][v % 4];
    }
    __syncthreads();
    if (half) return;
    const float* theirs = partial + warp * TAPS * 16 * 32 + lane;
    const Index total = static_cast<Index>(groups) * channels * out_channels * kernel_w;
#pragma unroll
    for (int t = 0; t < TAPS; ++t) {
        const int k = k0 + t;
#pragma unroll
        for (int v = 0; v < 16; ++v) {
            const int i = v / 8, jj = (v / 4) % 2, e = v % 4;
            // C fragment: rows g and g + 8 (ci), columns 2*t4 and 2*t4 + 1 (j)
            const int ci = ci0 + i * 16 + g + (e / 2) * 8;
            const int j = j0 + jw + jj * 8 + 2 * t4 + e % 2;
            const float sum = acc[t][i][jj][e] + theirs[(t * 16 + v) * 32];
            if (k < kernel_w && ci < channels && j < out_channels) {
                const Index at = ((static_cast<Index>(group) * channels + ci) * out_channels + j) * kernel_w + k;
                workspace[split * total + at] = sum;
            }
        }
    }
}
