// grad_input of a float32 1D transposed convolution whose taps all land on
// one phase of grad_output (stride 1, a dilation that is a multiple of the
// stride, or one tap), on TF32 tensor cores (one pass, or float32-accurate
// 3xTF32):
//
//   grad_input[n, g*C + ci, l] = sum_{j, k} w[g*C + ci, j, k] * gy[n, g*M + j, l*s - p + k*d]
//                              = sum_{j, k} w[g*C + ci, j, k] * G[n, j, l + k*e]
//
// with d = e*s and the phase sequence G[m] = gy[m*s - p] (zero outside
// grad_output), read straight from grad_output.
//
// GEMM per (image, group): rows ci (32 a block), columns l (GIP_L = 512
// positions a block, 64 a warp), reduction over (j, k) in chunks of 8
// channels j, each chunk a cp.async stage holding
//   * the weight w[ci, j0 .. j0 + 8, k] for every tap k, as [k][ci][12]
//     floats (rows 12 floats apart: conflict-free ldmatrix for A);
//   * the window G[j0 .. j0 + 8][l0 .. l0 + window) with window = GIP_L +
//     (K - 1)*e, in rows of `row` floats (row = 8 or 24 mod 32: the scalar
//     B reads of 4 channels x 8 positions fall in 32 distinct banks at every
//     tap's shift).  4-byte copies, so that any stride, padding and row
//     length work.
// Tap k's k-step multiplies A = w[., ., k] (ci x 8 channels) by the window
// moved k*e positions.  Eight warps, each 32 ci x 64 positions (2 x 8 m16n8
// fragments); the sums are written straight from the accumulators (pairs of
// floats), each output once.
//
// Requirements checked by the host: sm_80 or later; K == 1 or d % s == 0;
// row >= window, row % 32 in {8, 24}; positions and phase indices in int.
#include "common.cuh"
#include "mma.cuh"

constexpr int GIP_L = 512;        // positions a block
constexpr int GIP_BM = 32;        // input channels ci a block
constexpr int GIP_J = 8;          // channels j a stage (one k-step per tap)
constexpr int GIP_WROW = 12;      // weight row stride, floats
constexpr int GIP_STAGES = 4;
constexpr int GIP_THREADS = 256;

template <typename T, typename Index, int PASSES>
__global__ void __launch_bounds__(GIP_THREADS, 2) grad_input_phase(
    const T* __restrict__ gy,  // (batch, groups * out_channels, out_w)
    const T* __restrict__ w,   // (groups * channels, out_channels, kernel_w)
    T* __restrict__ gx,        // (batch, groups * channels, in_w)
    int batch, int groups, int channels, int out_channels, int in_w, int out_w, int kernel_w,
    int stride, int padding, int step,  // step: e = d / s, the phase positions between taps
    int window, int row,                // window positions staged per stage, and their row stride (floats)
    int l_tiles, int ci_tiles) {
    static_assert(sizeof(T) == 4, "float: TF32 or 3xTF32");
    typedef MmaOp<T, PASSES> Op;
    extern __shared__ __align__(16) unsigned char smem[];
    const int w_floats = kernel_w * GIP_BM * GIP_WROW;
    const int stage_floats = w_floats + GIP_J * row;
    auto w_tile = [&](int buf) { return reinterpret_cast<T*>(smem) + buf * stage_floats; };  // [K][BM][WROW]
    auto g_tile = [&](int buf) { return w_tile(buf) + w_floats; };                        // [J][row]

    // Block -> position tile fastest, then ci tile, group, image.
    unsigned block = blockIdx.x;
    const int l_tile = block % l_tiles;
    block /= l_tiles;
    const int ci_tile = block % ci_tiles;
    block /= ci_tiles;
    const int group = block % groups;
    const Index n = block / groups;

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int g = lane / 4, t4 = lane % 4;
    const int ci0 = ci_tile * GIP_BM, l0 = l_tile * GIP_L;
    const Index gy_image = (n * groups + group) * out_channels;
    const int chunks = (out_channels + GIP_J - 1) / GIP_J;

    const bool g_vectors = stride == 1 && out_w % 4 == 0 && ((l0 - padding) & 3) == 0 && reinterpret_cast<unsigned long long>(gy) % 16 == 0;
    const int g_len = g_vectors ? (window + 3) / 4 : window;  // copies a window row
    // The weight: thread (ci, jj) = (tid / 8, tid % 8) copies w[ci, j0 + jj, k] for every tap k.
    static_assert(GIP_BM * GIP_J == GIP_THREADS, "one thread a (ci, j) pair of the weight tile");
    const int w_jj = tid % GIP_J, w_ci = tid / GIP_J;
    const bool w_row = ci0 + w_ci < channels;
    const T* w_src = w + ((static_cast<Index>(group) * channels + ci0 + w_ci) * out_channels + w_jj) * kernel_w;
    int chunk = 0;
    auto load = [&](int buf) {
        const int j0 = chunk * GIP_J;
        ++chunk;
        const unsigned ws = shared_address(w_tile(buf) + w_ci * GIP_WROW + w_jj);
        const bool w_valid = w_row && j0 + w_jj < out_channels;
        const T* w_at = w_valid ? w_src + static_cast<Index>(j0) * kernel_w : w;
        for (int k = 0; k < kernel_w; ++k) cp_async_to<4>(ws + 4 * k * GIP_BM * GIP_WROW, w_at + (w_valid ? k : 0), w_valid);
        // The window: GIP_J rows of `window` positions (16-byte copies of 4
        // where the rows allow: stride 1, whole vectors from the block's first
        // position).  Each thread copies whole columns (tid, tid + 256, ...):
        // a column's grad_output position and bounds are found once, and its
        // rows step by out_w in global memory and `row` floats in shared
        // memory (copy_window_column).
        const unsigned gs = shared_address(g_tile(buf));
        const T* g_rows = gy + (gy_image + j0) * out_w;
        const int rows = min(GIP_J, out_channels - j0);
        for (int c = tid; c < g_len; c += GIP_THREADS) {
            const int o = g_vectors ? l0 - padding + 4 * c : (l0 + c) * stride - padding;
            const bool inside = o >= 0 && o < out_w;
            const T* src = g_rows + (inside ? o : 0);
            if (g_vectors) {
                if (rows == GIP_J) {
                    copy_window_column<16, GIP_J, true>(gs + 16 * c, 4 * row, src, static_cast<Index>(out_w), inside, rows);
                } else {
                    copy_window_column<16, GIP_J, false>(gs + 16 * c, 4 * row, src, static_cast<Index>(out_w), inside, rows);
                }
            } else if (rows == GIP_J) {
                copy_window_column<4, GIP_J, true>(gs + 4 * c, 4 * row, src, static_cast<Index>(out_w), inside, rows);
            } else {
                copy_window_column<4, GIP_J, false>(gs + 4 * c, 4 * row, src, static_cast<Index>(out_w), inside, rows);
            }
        }
    };

    const int lw = warp * 64;  // the warp's 64 positions
    float acc[2][8][4];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int jj = 0; jj < 8; ++jj)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][jj][e] = 0.0f;

    cp_async_pipeline<GIP_STAGES>(chunks, load, [&](int buf) {
        const T* ws = w_tile(buf);
        const T* gs = g_tile(buf);
#pragma unroll 1
        for (int k = 0; k < kernel_w; ++k) {
            typename Op::A af[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                // lanes 0-15: rows i*16 + lane, channels 0-3; lanes 16-31: channels 4-7
                unsigned raw[4];
                ldmatrix_x4(raw, ws + (k * GIP_BM + i * 16 + (lane & 15)) * GIP_WROW + (lane >> 4) * 4);
                Op::make(af[i], raw);
            }
            const T* at = gs + t4 * row + lw + g + k * step;  // b0 = G[t4][l + g + k*e], b1 = G[t4 + 4][...]
#pragma unroll
            for (int jj = 0; jj < 8; ++jj) {
                typename Op::B bf;
                const unsigned raw[2] = {__float_as_uint(at[jj * 8]), __float_as_uint(at[4 * row + jj * 8])};
                Op::make(bf, raw);
#pragma unroll
                for (int i = 0; i < 2; ++i) Op::mma(acc[i][jj], af[i], bf);
            }
        }
    });

    // C fragment: rows g and g + 8 (ci), columns 2*t4 and 2*t4 + 1 (l).
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int ci = ci0 + i * 16 + g + h * 8;
            if (ci >= channels) continue;
            T* out_row = gx + ((n * groups + group) * channels + ci) * static_cast<Index>(in_w);
#pragma unroll
            for (int jj = 0; jj < 8; ++jj) {
                const int l = l0 + lw + jj * 8 + 2 * t4;
                if (l + 1 < in_w && (in_w % 2 == 0)) {
                    *reinterpret_cast<float2*>(out_row + l) = make_float2(acc[i][jj][2 * h], acc[i][jj][2 * h + 1]);
                } else {
                    if (l < in_w) out_row[l] = acc[i][jj][2 * h];
                    if (l + 1 < in_w) out_row[l + 1] = acc[i][jj][2 * h + 1];
                }
            }
        }
}
