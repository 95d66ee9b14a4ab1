// 1D strided correlation on tensor cores with the input staged once per
// channel slice and shared by every tap: the forward pass of a 1D transposed
// convolution (per polyphase phase, or all phases at once when they fold, see
// below) and its grad_input, for float ("tf32", or float32-accurate 3xTF32
// with PASSES 3), half and bfloat16.
//
// GEMM per (group, phase): rows m < M * fold, columns q (positions of one
// image), reduction over (channel slice, tap, channel).  Row m is output
// channel co = m / fold with sub-phase r = m % fold; column q and tap t read
//
//   weight  packed[g][k][co][c]          k = tap_first + r + t * tap_step
//   input   in[n][g*C + c][l]            l = in_base + q + t * tap_in_step
//   output  out[n][g*M + co][o]          o = out_base + q * out_step + r
//
// Fold: when the dilation is 1 and the stride s divides the kernel, every
// phase r has the taps r, r + s, ... reading the same input positions
// (q - t), so the s phases are one GEMM with s times the rows (the host gives
// one record with tap_first 0, fold s).  A block's outputs are then whole
// runs of consecutive positions, instead of one in s.
//
// Staging, per channel slice (BK channels) into one of two buffers:
//   * A: for each of the phase's taps, BM rows x BK channels of the packed
//     weight (cp.async, 16 bytes), rows of 80 bytes (conflict-free ldmatrix);
//   * the window: the BK channels' input over every position any column and
//     tap of the block reads (BN + (taps - 1) * |tap_in_step| and alignment),
//     loaded with 16-byte vectors.  float rows are one channel each
//     (cp.async); half/bfloat16 rows hold channels 2c and 2c + 1 interleaved,
//     one 32-bit word per position, so a B fragment register is one load.
// Then each tap's B fragment is the window shifted by that tap: the input is
// read from global memory once per channel slice, not once per tap.
//
// FILL: conv_wgmma.cu's fill (a forward pass of stride 2 whose taps all land
// on one phase, run as that phase; the epilogue writes the bias between the
// sums, window.cuh); the host builds it for 3xTF32.
//
// Requirements checked by the host: sm_80 or later, in_w a multiple of 16
// bytes' worth of elements, a 16-byte-aligned input, channels padded to a
// multiple of 16 bytes in the packed weight (zeros), fold a power of two;
// for TF32 (float, PASSES 1) the packed weight's values rounded to TF32
// (A goes to the tensor cores as loaded; the window is rounded in shared
// memory once per slice, round_window).
#include "common.cuh"
#include "mma.cuh"
#include "window.cuh"

// The window holds at most this many 16-byte vectors per row for the 16-bit
// types (they pass through registers); the host checks it.
constexpr int WINDOW_MAX_VECTORS = 32;
// float windows go through cp.async with no registers held; this bounds the
// per-thread task list the kernel precomputes (the host checks it too).
constexpr int WINDOW_MAX_VECTORS_WIDE = 64;

template <typename T, typename Index, int BM, int BN, int WARPS_M, int WARPS_N, int PASSES, bool FILL = false>
__global__ void __launch_bounds__(32 * WARPS_M * WARPS_N, 2) conv_window(
    const T* __restrict__ in,        // (batch, groups * channels, in_w)
    const T* __restrict__ weight,    // packed (groups, kernel_w, out_channels, channels_padded)
    const T* __restrict__ bias,      // (groups * out_channels,), or null for none
    T* __restrict__ out,             // (batch, groups * out_channels, out_w)
    const int* __restrict__ phases,  // num_phases AxisPhase records
    int num_phases, int fold_shift,  // fold = 1 << fold_shift rows per output channel
    int batch, int groups, int channels, int channels_padded, int out_channels,
    int in_w, int out_w, int kernel_w,
    int max_taps, int window_vectors, int window_stride,  // A buffers per tap; window row length (16-byte vectors, words)
    int m_tiles, int col_tiles) {
    constexpr bool WIDE = sizeof(T) == 4;
    constexpr int VEC = 16 / sizeof(T);     // elements per 16 bytes
    constexpr int BK = WIDE ? 16 : 32;      // channels per slice
    constexpr int KSTEP = WIDE ? 8 : 16;    // reduction depth of one mma
    constexpr int WROWS = 16;               // window rows per slice (channels, or channel pairs)
    constexpr int AROW = BK + VEC;          // A row: 64 bytes + 16 of padding
    constexpr int THREADS = 32 * WARPS_M * WARPS_N;
    constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;
    constexpr int MI = WM / 16, NI = WN / 8;
    constexpr int ROUNDS = (2 * WROWS * WINDOW_MAX_VECTORS + THREADS - 1) / THREADS;  // 16-bit: half-vector tasks
    static_assert(WM % 16 == 0 && WN % 8 == 0, "warp tile must split into m16n8 fragments");
    static_assert((BN & (BN - 1)) == 0 && (BM & (BM - 1)) == 0, "tile sides are powers of two");
    typedef MmaOp<T, PASSES> Op;  // float: TF32 (PASSES 1) or float32-accurate 3xTF32 (PASSES 3)

    extern __shared__ __align__(16) unsigned char smem[];

    const WindowBlock wb = window_block(phases, num_phases, m_tiles, col_tiles, batch, BM, BN, VEC, fold_shift, out_w);
    if (wb.q0 >= (FILL ? (out_w + 1) / 2 : wb.q_end)) return;  // this phase or row tile has fewer columns than the largest (FILL: every output's)
    const AxisPhase& p = wb.p;
    const int m_tile = wb.m_tile, n = wb.n, group = wb.group, q0 = wb.q0;
    const int taps = p.tap_count, window_first = wb.window_first, head = wb.head;

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

    const int fold = 1 << fold_shift;
    const int rows = out_channels << fold_shift;
    const Index in_base = (static_cast<Index>(n) * groups + group) * channels * static_cast<Index>(in_w);
    const Index w_base = static_cast<Index>(group) * kernel_w * out_channels * channels_padded;

    const int a_bytes = max_taps * BM * AROW * static_cast<int>(sizeof(T));
    const int stage_bytes = a_bytes + WROWS * window_stride * 4;
    auto a_tile = [&](int buf) { return reinterpret_cast<T*>(smem + buf * stage_bytes); };
    auto window = [&](int buf) { return reinterpret_cast<unsigned*>(smem + buf * stage_bytes + a_bytes); };

    const int slices = taps > 0 ? (channels + BK - 1) / BK : 0;  // a phase no tap reaches writes the bias
    uint2 held[ROUNDS][2];  // 16-bit types: the next slice's window (channels 2c and 2c + 1), between fetch and stash

    // A: each thread owns fixed (row, 16-byte chunk) pairs of the BM x 64-byte
    // slice and copies them for every tap; the source of tap t + 1 is
    // tap_step kernel taps further on.  Computed once per block.
    constexpr int A_PAIRS = (BM * 4 + THREADS - 1) / THREADS;
    const T* a_src[A_PAIRS];
    int a_dst[A_PAIRS], a_chunk[A_PAIRS];
    bool a_valid[A_PAIRS];
#pragma unroll
    for (int i = 0; i < A_PAIRS; ++i) {
        const int pair = tid + i * THREADS;
        const int chunk = pair & 3, row = pair >> 2;
        const int m = m_tile * BM + row;
        const int co = m >> fold_shift, r = m & (fold - 1);
        a_valid[i] = pair < BM * 4 && m < rows;
        a_src[i] = weight + w_base + (static_cast<Index>(p.tap_first + r) * out_channels + co) * channels_padded + chunk * VEC;
        a_dst[i] = row * AROW + chunk * VEC;
        a_chunk[i] = chunk * VEC;
    }
    const Index a_tap_step = static_cast<Index>(p.tap_step) * out_channels * channels_padded;
    // The window: fixed tasks per thread, sources advancing by BK channels
    // per slice.  float: one 16-byte vector of one channel (cp.async).
    // 16-bit: half a vector (4 positions) of channels 2c and 2c + 1, so that
    // consecutive threads store consecutive 16-byte words of the interleaved
    // row (no bank conflicts).
    constexpr int W_TASKS = WIDE ? (WROWS * WINDOW_MAX_VECTORS_WIDE + THREADS - 1) / THREADS : ROUNDS;
    constexpr int W_SPAN = WIDE ? VEC : VEC / 2;  // positions per task
    const int row_tasks = WIDE ? window_vectors : 2 * window_vectors;
    const T* w_src[W_TASKS];
    int w_dst[W_TASKS], w_channel[W_TASKS];
    bool w_inside[W_TASKS];
#pragma unroll
    for (int i = 0; i < W_TASKS; ++i) {
        const int task = tid + i * THREADS;
        const int row = task / row_tasks, v = task - row * row_tasks;
        const int l = window_first + v * W_SPAN;
        const bool exists = task < WROWS * row_tasks;
        w_inside[i] = exists && l >= 0 && l < in_w;  // in_w % VEC == 0: all or nothing
        w_channel[i] = exists ? row * (WIDE ? 1 : 2) : channels;  // first channel, at slice 0
        w_src[i] = in + in_base + static_cast<Index>(w_channel[i]) * in_w + l;
        w_dst[i] = exists ? row * window_stride + v * W_SPAN : -1;
    }
    const Index slice_step = static_cast<Index>(BK) * in_w;

    // Start loading channel slice `s` into buffer `buf`.
    auto fetch = [&](int s, int buf) {
        const int c0 = s * BK;
        T* a = a_tile(buf);
#pragma unroll
        for (int i = 0; i < A_PAIRS; ++i) {
            const bool valid = a_valid[i] && c0 + a_chunk[i] < channels_padded;
            const T* src = a_src[i] + c0;
            T* dst = a + a_dst[i];
            for (int t = 0; t < taps; ++t) {
                cp_async16(dst, valid ? src : weight, valid);
                src += a_tap_step;
                dst += BM * AROW;
            }
        }
        const Index offset = s * slice_step;
        if constexpr (WIDE) {
            unsigned* w = window(buf);
#pragma unroll
            for (int i = 0; i < W_TASKS; ++i) {
                if (w_dst[i] >= 0) {
                    const bool valid = w_inside[i] && c0 + w_channel[i] < channels;
                    cp_async16(w + w_dst[i], valid ? w_src[i] + offset : in, valid);
                }
            }
        } else {
#pragma unroll
            for (int i = 0; i < ROUNDS; ++i) {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    held[i][h] = make_uint2(0, 0);
                    if (w_inside[i] && c0 + w_channel[i] + h < channels)
                        held[i][h] = *reinterpret_cast<const uint2*>(w_src[i] + offset + h * in_w);
                }
            }
        }
        cp_async_commit();
    };
    // 16-bit types: interleave the held channel pairs into the window.
    auto stash = [&](int buf) {
        if constexpr (!WIDE) {
            unsigned* w = window(buf);
#pragma unroll
            for (int i = 0; i < ROUNDS; ++i) {
                if (w_dst[i] >= 0) {
                    const unsigned* even = reinterpret_cast<const unsigned*>(&held[i][0]);
                    const unsigned* odd = reinterpret_cast<const unsigned*>(&held[i][1]);
                    *reinterpret_cast<uint4*>(w + w_dst[i]) =
                        make_uint4(__byte_perm(even[0], odd[0], 0x5410), __byte_perm(even[0], odd[0], 0x7632),
                                   __byte_perm(even[1], odd[1], 0x5410), __byte_perm(even[1], odd[1], 0x7632));
                }
            }
        }
    };

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

    const int warp_m = (warp / WARPS_N) * WM, warp_n = (warp % WARPS_N) * WN;
    const int g = lane / 4, t4 = lane % 4;
    // Window word of this lane's B column for tap 0, before the tap's shift.
    // This lane's B words for tap 0 before the tap's shift: column warp_n + g
    // (+ 8j, an immediate offset), rows t4 + 4h + kk / (entries per word).
    constexpr int WORDS_PER_K = WIDE ? 1 : 2;  // reduction entries per window word
    constexpr int KSTEPS = BK / KSTEP;
    const int b_lane = head + warp_n + g + t4 * window_stride;
    const int b_half = 4 * window_stride;  // rows t4 + 4
    const int a_lane = (warp_m + (lane & 15)) * AROW + (lane >> 4) * VEC;

    auto compute = [&](int buf) {
        const T* a = a_tile(buf) + a_lane;
        const unsigned* w = window(buf) + b_lane;
        for (int t = 0; t < taps; ++t) {
            const int shift = p.tap_in_step < 0 ? (taps - 1 - t) * -p.tap_in_step : t * p.tap_in_step;
            const unsigned* wt = w + shift;
            const T* at = a + t * BM * AROW;
#pragma unroll
            for (int ks = 0; ks < KSTEPS; ++ks) {
                const int kk = ks * KSTEP;
                typename Op::A af[MI];
                typename Op::B bf[NI];
#pragma unroll
                for (int i = 0; i < MI; ++i) {
                    unsigned raw[4];
                    ldmatrix_x4(raw, at + i * 16 * AROW + kk);
                    if constexpr (WIDE && PASSES == 1) {  // TF32: the host packs the weight rounded (round_tf32)
#pragma unroll
                        for (int e = 0; e < 4; ++e) af[i].r[e] = raw[e];
                    } else {
                        Op::make(af[i], raw);
                    }
                }
                const unsigned* lo_rows = wt + (kk / WORDS_PER_K) * window_stride;
                const unsigned* hi_rows = lo_rows + b_half;
#pragma unroll
                for (int j = 0; j < NI; ++j) {
                    if constexpr (WIDE && PASSES == 1) {  // TF32: rounded in place (round_window)
                        bf[j].r[0] = lo_rows[j * 8];
                        bf[j].r[1] = hi_rows[j * 8];
                    } else {
                        Op::make(bf[j], {lo_rows[j * 8], hi_rows[j * 8]});
                    }
                }
#pragma unroll
                for (int i = 0; i < MI; ++i)
#pragma unroll
                    for (int j = 0; j < NI; ++j) Op::mma(acc[i][j], af[i], bf[j]);
            }
        }
    };

    // TF32: each thread rounds the window vectors it copied itself, once its
    // copies have landed and before the barrier that publishes them, so that
    // the B fragments of every tap go to the tensor cores as loaded.
    auto round_window = [&](int buf) {
        if constexpr (WIDE && PASSES == 1) {
            unsigned* w = window(buf);
#pragma unroll
            for (int i = 0; i < W_TASKS; ++i) {
                if (w_dst[i] >= 0) {
                    uint4* v = reinterpret_cast<uint4*>(w + w_dst[i]);
                    const uint4 raw = *v;
                    *v = make_uint4(to_tf32(__uint_as_float(raw.x)), to_tf32(__uint_as_float(raw.y)), to_tf32(__uint_as_float(raw.z)),
                                    to_tf32(__uint_as_float(raw.w)));
                }
            }
        }
    };

    // Two buffers: slice s + 1 loads while slice s multiplies.
    if (slices > 0) {
        fetch(0, 0);
        stash(0);
    }
    cp_async_wait_all();
    if (slices > 0) round_window(0);
    __syncthreads();
    for (int s = 0; s < slices; ++s) {
        const int buf = s & 1;
        if (s + 1 < slices) fetch(s + 1, buf ^ 1);
        compute(buf);
        if (s + 1 < slices) stash(buf ^ 1);
        cp_async_wait_all();
        if (s + 1 < slices) round_window(buf ^ 1);
        __syncthreads();
    }

    // Epilogue: through shared memory, then out with the bias (window.cuh).
    constexpr int SROW = window_stage_row<BN>();
    float* stage = reinterpret_cast<float*>(smem);
    const int swizzle = stage_swizzle(fold_shift);
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h)
                *reinterpret_cast<float2*>(&stage[stage_at(warp_m + i * 16 + g + h * 8, warp_n + j * 8 + 2 * t4, SROW, swizzle)]) =
                    make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
    __syncthreads();

    store_window_tile<T, Index, BM, BN, THREADS, true, FILL>(stage, p, bias, out, n, groups, group, out_channels, out_w, m_tile, q0, fold_shift);
}
