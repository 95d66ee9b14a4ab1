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
// GX builds also write grad_input from the same stages, where a group is one
// tile each way and one tap chunk (C <= 32, M <= 64, K <= TAPS):
//
//   grad_input[n, g*C + ci, l] = sum_{j, k} w[g*C + ci, j, k] * G[n, j, l + k*e],
//
// the window every item stages already.  Eight more warps (512 threads, one
// block a multiprocessor) take it: warp q of them 16 positions of the item
// (q % 4) and half of the channels j (q / 4), k-steps of 8 channels a tap in
// grad_input_phase's order, A from the weight held in shared memory for the
// whole block as TF32 hi and lo parts (no split in the loop); the halves
// are added through shared memory and each item's grad_input written once.
// grad_output is read once for both gradients instead of once for each.
//
// Requirements checked by the host: sm_80 or later; K == 1 or d % s == 0;
// row >= P + (TAPS - 1)*e and row % 8 == 4; positions and phase indices in
// int (in_w, out_w below 2^30); GX: the limits above and grad_input 8-byte
// aligned.
#include "common.cuh"
#include "mma.cuh"

constexpr int GWP_P = 64;                  // reduction positions per item
constexpr int GWP_XS = GWP_P + 4;          // x row stride, floats
constexpr int GWP_BM = 32;                 // input channels ci per block
constexpr int GWP_BN = 64;                 // output channels j per block
constexpr int GWP_STAGES = 3;
constexpr int GWP_THREADS = 256;  // the grad_weight warps; GX builds add as many for grad_input
constexpr int GWP_WROW = GWP_BN + 4;  // GX: the resident weight's row stride, floats (ldmatrix conflict-free)


template <typename T, typename Index, int TAPS, int PASSES, bool GX = false>
__global__ void __launch_bounds__(GX ? 2 * GWP_THREADS : GWP_THREADS, GX || TAPS > 5 ? 1 : 2) grad_weight_phase(
    const T* __restrict__ x,         // (batch, groups * channels, in_w)
    const T* __restrict__ gy,        // (batch, groups * out_channels, out_w)
    const T* __restrict__ w,         // GX: (groups * channels, out_channels, kernel_w); else unused (null)
    T* __restrict__ gx,              // GX: grad_input, (batch, groups * channels, in_w); else unused (null)
    double* __restrict__ workspace,  // (splits, groups * channels, out_channels, kernel_w)
    int batch, int groups, int channels, int out_channels, int in_w, int out_w, int kernel_w,
    int stride, int padding, int step,  // step: e = d / s, the phase positions between taps
    int window, int row,                // window positions staged per item, and their row stride (floats)
    int items_per_split, int ci_tiles, int j_tiles, int tap_chunks) {
    static_assert(sizeof(T) == 4, "float: TF32 or 3xTF32");
    constexpr int KSTEP = 8;
    constexpr int KSTEPS = GWP_P / KSTEP / 2;  // per warp and item: half of the item's k-steps
    typedef MmaOp<T, PASSES> Op;
    constexpr int THREADS = GX ? 2 * GWP_THREADS : GWP_THREADS, WARPS = THREADS / 32;
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
    // The window's copies: warp w copies rows w, w + WARPS, ... (ROWS of them),
    // its lanes columns lane, lane + 32, ...: a column's grad_output position
    // and bounds are found once for its rows, which step by WARPS rows in
    // global and shared memory (copy_window_column).
    constexpr int ROWS = GWP_BN / WARPS;
    static_assert(GWP_BN == ROWS * WARPS, "whole rows a warp");
    const int g_warp_rows = min(ROWS, max(0, (out_channels - j0 - warp + WARPS - 1) / WARPS));  // rows w + WARPS i inside the channels
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
            for (int i = 0; i < GWP_BM * GWP_P / 4 / THREADS; ++i) {
                const int task = tid + i * THREADS, r = task / (GWP_P / 4), c = task % (GWP_P / 4) * 4;
                const bool valid = ci0 + r < channels && l0 + c < in_w;
                cp_async16(xs + r * GWP_XS + c, valid ? x_image + static_cast<Index>(r) * in_w + c : x, valid);
            }
        } else {
#pragma unroll 4
            for (int i = 0; i < GWP_BM * GWP_P / THREADS; ++i) {
                const int task = tid + i * THREADS, r = task / GWP_P, c = task % GWP_P;
                const bool valid = ci0 + r < channels && l0 + c < in_w;
                cp_async_small<4>(xs + r * GWP_XS + c, valid ? x_image + static_cast<Index>(r) * in_w + c : x, valid);
            }
        }
        const unsigned gs = shared_address(g_tile(buf) + warp * row);
        const int o0 = (l0 + k0 * step) * stride - padding;  // grad_output position of window position 0
        const T* g_image = gy + (image * out_channels + j0 + min(warp, max(out_channels - j0 - 1, 0))) * out_w;
        const Index g_step = static_cast<Index>(WARPS) * out_w;
        for (int c = lane; c < g_len; c += 32) {
            const int o = g_vectors ? o0 + 4 * c : o0 + c * stride;
            const bool inside = o >= 0 && o < out_w;
            const T* src = g_image + (inside ? o : 0);
            if (g_vectors) {
                if (g_warp_rows == ROWS) {
                    copy_window_column<16, ROWS, true>(gs + 16 * c, 4 * WARPS * row, src, g_step, inside, ROWS);
                } else {
                    copy_window_column<16, ROWS, false>(gs + 16 * c, 4 * WARPS * row, src, g_step, inside, g_warp_rows);
                }
            } else if (g_warp_rows == ROWS) {
                copy_window_column<4, ROWS, true>(gs + 4 * c, 4 * WARPS * row, src, g_step, inside, ROWS);
            } else {
                copy_window_column<4, ROWS, false>(gs + 4 * c, 4 * WARPS * row, src, g_step, inside, g_warp_rows);
            }
        }
    };

    const int jw = (warp & 3) * 16;   // the warp's 16 channels j
    const int half = (warp >> 2) & 1;  // and its half of each item's k-steps
    const bool gx_warp = GX && warp >= GWP_THREADS / 32;  // GX: warps 8-15 take grad_input

    // GX: the weight, resident for the whole block as TF32 hi and lo parts
    // ([TAPS][2][BM][WROW]: A fragments by ldmatrix with no split in the
    // loop), zeros past the channels and taps; read by the first item's
    // compute, after the pipeline's first barrier.
    T* const wres = reinterpret_cast<T*>(smem) + GWP_STAGES * stage_floats;
    if constexpr (GX) {
        for (int task = tid; task < TAPS * GWP_BM * GWP_BN; task += THREADS) {
            const int j = task % GWP_BN, ci = task / GWP_BN % GWP_BM, t = task / (GWP_BN * GWP_BM);
            float v = 0.0f;
            if (ci < channels && j < out_channels && t < kernel_w) v = w[((static_cast<Index>(group) * channels + ci) * out_channels + j) * kernel_w + t];
            const unsigned hi = to_tf32(v);
            wres[((2 * t) * GWP_BM + ci) * GWP_WROW + j] = __uint_as_float(hi);
            wres[((2 * t + 1) * GWP_BM + ci) * GWP_WROW + j] = __uint_as_float(to_tf32(v - __uint_as_float(hi)));
        }
    }
    Index citem = first;  // the item compute() takes
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
        if constexpr (GX) {
            const Index n = citem / per_image;
            const int l0 = static_cast<int>(citem - n * per_image) * GWP_P;
            ++citem;
            if (gx_warp) {
                // grad_input[ci, l0 + p0 .. + 16) over half of the channels j (chunks of 8, in order, every tap
                // for each): rows ci (2 m16 fragments), 2 n8 fragments of positions; warps q and q + 4 take
                // the two halves and add them through shared memory.
                const int q = warp - GWP_THREADS / 32, p0 = (q & 3) * 16, jh = q >> 2;
                float gacc[2][2][4] = {};
                const T* a_rows = wres + (lane & 15) * GWP_WROW + (lane >> 4) * 4;  // ldmatrix rows of fragment 0
                const T* b_rows = gs + t4 * row + p0 + g;                           // b0 = G[t4][l + g], b1 = G[t4 + 4][l + g]
#pragma unroll 1
                for (int jc = 4 * jh; jc < 4 * jh + 4 && jc * 8 < out_channels; ++jc) {
                    const T* a_chunk = a_rows + jc * 8;
                    const T* b_chunk = b_rows + jc * 8 * row;
#pragma unroll
                    for (int t = 0; t < TAPS; ++t) {
                        if (t >= kernel_w) break;
                        typename Op::A af[2];
#pragma unroll
                        for (int i = 0; i < 2; ++i) {
                            unsigned hi[4];
                            const T* a = a_chunk + ((2 * t) * GWP_BM + i * 16) * GWP_WROW;
                            ldmatrix_x4(hi, a);
                            if constexpr (PASSES == 3) {
                                unsigned lo[4];
                                ldmatrix_x4(lo, a + GWP_BM * GWP_WROW);
#pragma unroll
                                for (int e = 0; e < 4; ++e) af[i].hi[e] = hi[e], af[i].lo[e] = lo[e];
                            } else {
#pragma unroll
                                for (int e = 0; e < 4; ++e) af[i].r[e] = hi[e];
                            }
                        }
#pragma unroll
                        for (int nn = 0; nn < 2; ++nn) {
                            const T* at = b_chunk + nn * 8 + t * step;
                            const unsigned raw[2] = {__float_as_uint(at[0]), __float_as_uint(at[4 * row])};
                            typename Op::B bf;
                            Op::make(bf, raw);
#pragma unroll
                            for (int i = 0; i < 2; ++i) Op::mma(gacc[i][nn], af[i], bf);
                        }
                    }
                }
                // The halves' sums: warps q + 4 stage theirs (lane fastest), warps q add them and write (a barrier
                // of the 8 grad_input warps; the pipeline's next barrier orders the next item's staging after
                // these reads).
                float* halves = wres + TAPS * 2 * GWP_BM * GWP_WROW + (q & 3) * 16 * 32 + lane;  // [4][16][32]
                if (jh) {
#pragma unroll
                    for (int v = 0; v < 16; ++v) halves[v * 32] = gacc[v / 8][(v / 4) % 2][v % 4];
                }
                asm volatile("bar.sync 1, %0;" ::"n"(GWP_THREADS) : "memory");
                if (jh) return;
#pragma unroll
                for (int v = 0; v < 16; ++v) gacc[v / 8][(v / 4) % 2][v % 4] += halves[v * 32];
                // C fragment: rows g and g + 8 (ci), positions 2 t4 and 2 t4 + 1 of each n8 fragment.
#pragma unroll
                for (int i = 0; i < 2; ++i)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int ci = i * 16 + g + h * 8;
                        if (ci >= channels) continue;
                        T* out_row = gx + ((n * groups + group) * channels + ci) * static_cast<Index>(in_w);
#pragma unroll
                        for (int nn = 0; nn < 2; ++nn) {
                            const int l = l0 + p0 + nn * 8 + 2 * t4;
                            if (l + 1 < in_w && in_w % 2 == 0) {
                                *reinterpret_cast<float2*>(out_row + l) = make_float2(gacc[i][nn][2 * h], gacc[i][nn][2 * h + 1]);
                            } else {
                                if (l < in_w) out_row[l] = gacc[i][nn][2 * h];
                                if (l + 1 < in_w) out_row[l + 1] = gacc[i][nn][2 * h + 1];
                            }
                        }
                    }
                return;
            }
        }
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
    if (half && !gx_warp) {
        float* mine = partial + (warp & 3) * TAPS * 16 * 32 + lane;
#pragma unroll
        for (int t = 0; t < TAPS; ++t)
#pragma unroll
            for (int v = 0; v < 16; ++v) mine[(t * 16 + v) * 32] = acc[t][v / 8][(v / 4) % 2][v % 4];
    }
    __syncthreads();
    if (half || gx_warp) return;
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
