// 1D strided correlation on Hopper's warpgroup tensor cores (wgmma, sm_90a):
// conv_window's GEMM -- the same phase records, fold, packed weight and
// epilogue (conv_window.cu, window.cuh) -- with both operands read by the
// tensor cores from shared memory, for float ("tf32"), half and bfloat16.
//
// GEMM per (group, phase): rows m = co * fold + r, columns q, reduction over
// (channel slice, tap, channel), as in conv_window.cu.  A block is two
// warpgroups (256 threads); each issues wgmma.m64n128 on 64 rows x 128
// columns of the BM x BN tile: BM 128, BN 128 (the warpgroups split the
// rows) or BM 64, BN 256 (they split the columns).
//
// Shared memory, per channel slice of 64 bytes (WGMMA_CHUNKS chunks of 16
// bytes: 8 half/bfloat16 channels or 4 float channels each), three buffers:
//   * A, per tap: BM rows x 4 chunks of the packed weight, in wgmma's
//     K-major layout without swizzle: row m, chunk c at
//     (m / 8) * 512 + c * 128 + (m % 8) * 16, i.e. 8-row x 16-byte core
//     matrices, 128 bytes apart along k (the descriptor's leading offset)
//     and 512 along m (its stride offset).  Copied with cp.async.
//   * the window, transposed: chunk c, position l at c * chunk_stride + l * 16
//     holds the chunk's channels at input position window_first + l.  Eight
//     consecutive positions of a chunk form a core matrix wherever they
//     start, so each tap's B operand is the one window with the descriptor's
//     start moved by the tap's shift (16 bytes a position; leading offset
//     chunk_stride, stride offset 128).  The input is read from global memory
//     once per slice for every tap, through registers: a thread loads VEC
//     channels x VEC positions (16-byte vectors along the positions) and
//     stores them as VEC rows of 16 bytes.
// float weights come rounded to TF32 by the host and the window is rounded
// here (cvt.rn), so the products are round-to-nearest TF32, as conv_window's.
//
// Pipeline: slice s + 1 is loaded while the tensor cores work through slice
// s (and the end of s - 1): one barrier per slice, after which every
// warpgroup has finished slice s - 2 (wgmma.wait_group 1), whose buffer is
// the one refilled.
//
// Requirements checked by the host: compute capability 9.0 (the code is
// built for sm_90a; other targets compile an empty body), in_w a multiple of
// 16 bytes' worth of elements, a 16-byte-aligned input, channels padded to a
// multiple of 16 bytes in the packed weight (zeros), fold a power of two.
#include "common.cuh"
#include "mma.cuh"
#include "window.cuh"
#include "wgmma.cuh"

constexpr int WGMMA_THREADS = 256;  // two warpgroups
constexpr int WGMMA_STAGES = 3;     // shared-memory buffers
constexpr int WGMMA_CHUNKS = 4;     // 16-byte chunks of a channel slice
// Window vectors a thread loads per slice, at most (the host checks): float
// windows are twice as many vectors as 16-bit ones of the same span.
template <typename T>
__host__ __device__ constexpr int wgmma_max_tasks() { return sizeof(T) == 4 ? 2 : 1; }

// Four 16-bit channel rows of 8 positions each (raw[e]: channel e) stored as
// 8 positions of those 4 channels: 8 bytes at dst + 16 * position.
__device__ __forceinline__ void store_positions16(const uint4 (&raw)[4], unsigned char* dst) {
#pragma unroll
    for (int pos = 0; pos < 8; ++pos) {
        unsigned word[2];  // channels (0, 1) and (2, 3) at this position
#pragma unroll
        for (int j = 0; j < 2; ++j)
            word[j] = __byte_perm(reinterpret_cast<const unsigned*>(&raw[2 * j])[pos / 2],
                                  reinterpret_cast<const unsigned*>(&raw[2 * j + 1])[pos / 2], pos % 2 ? 0x7632 : 0x5410);
        *reinterpret_cast<uint2*>(dst + pos * 16) = make_uint2(word[0], word[1]);
    }
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// This thread's accumulators of an m64nN wgmma as float pairs into a
// row-major float tile: (PTX ISA) warp w of the warpgroup holds rows 16w + g
// and 16w + g + 8 (g = lane / 4), columns 8j + 2t and 8j + 2t + 1 (t = lane %
// 4), as d[4j], d[4j + 1] and d[4j + 2], d[4j + 3]; they go to rows row0 +
// .., columns col0 + .. of tile (row_stride floats a row; columns swizzled
// by `swizzle` as window.cuh's stage_at, for store_window_tile).
template <int N>
__device__ __forceinline__ void stage_accumulators(const float (&d)[N / 2], float* tile, int row_stride, int row0, int col0, int w, int g,
                                                   int t4, int swizzle = 0) {
#pragma unroll
    for (int j = 0; j < N / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
            *reinterpret_cast<float2*>(&tile[stage_at(row0 + 16 * w + g + 8 * h, col0 + 8 * j + 2 * t4, row_stride, swizzle)]) =
                make_float2(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
}

// One warpgroup's MMAs of a channel slice as a runtime loop over its taps,
// committed: tap t's A descriptor is a_of(t), its B at b_desc + b_base
// bytes moved t * tap_in_step positions of 16 bytes (from the far end if
// that is negative); the first MMA adds the accumulators only if
// `accumulate`.  (See slice_mmas for what the loop costs.)
template <typename T, typename ADescriptor>
__device__ __forceinline__ void tap_loop_mmas(float (&d)[64], int taps, const ADescriptor& a_of, unsigned long long b_desc, unsigned b_base,
                                              int tap_in_step, int chunk_stride, bool accumulate) {
    for (int t = 0; t < taps; ++t) {
        wgmma_fence();  // in each iteration of this runtime loop (ptxas would inject one)
        const int shift = tap_in_step < 0 ? (taps - 1 - t) * -tap_in_step : t * tap_in_step;
        const unsigned long long a_t = a_of(t);
        const unsigned long long b_t = b_desc + ((b_base + shift * 16) >> 4);
#pragma unroll
        for (int ks = 0; ks < WGMMA_CHUNKS / 2; ++ks)
            wgmma_m64n128<T>(d, a_t + ((ks * 256) >> 4), b_t + ((2 * ks * chunk_stride) >> 4), accumulate || t > 0 || ks > 0);
    }
    wgmma_commit();
}
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// One warpgroup's MMAs of a channel slice, committed as one group: taps t <
// `taps`, tap t's A at descriptor a + t * a_tap and B at b + b_first + t *
// b_step (16-byte units; b_first + t * b_step >= 0), WGMMA_CHUNKS / 2
// k-steps of 32 bytes each; the first MMA adds the accumulators only if
// `accumulate`.
//
// Up to STRAIGHT taps run as one straight sequence, the recursion picking
// the count as a constant.  In a loop, the branches among the MMAs make
// ptxas close a group at each and commit an empty one at the end, so the
// callers' wgmma.wait_group 1 waits for every MMA of the slice: none stays in
// flight while the next slice is staged (perf notes v14).  The straight
// sequences cost registers: conv_wgmma and the two-block (128-register)
// builds of conv_wgmma_resident keep their loops; longer kernels take it.
constexpr int WGMMA_STRAIGHT_TAPS = 8;
template <typename T, int STRAIGHT, int N = STRAIGHT>
__device__ __forceinline__ void slice_mmas(float (&d)[64], int taps, unsigned long long a, unsigned a_tap, unsigned long long b, int b_first,
                                           int b_step, int chunk_stride, bool accumulate) {
    constexpr int KSTEPS = WGMMA_CHUNKS / 2;
    if constexpr (N == STRAIGHT) {
        if (taps > N) {
            for (int t = 0; t < taps; ++t) {
                wgmma_fence();  // in each iteration of this runtime loop (ptxas would inject one)
#pragma unroll
                for (int ks = 0; ks < KSTEPS; ++ks)
                    wgmma_m64n128<T>(d, a + t * a_tap + ks * 16, b + (b_first + t * b_step) + ((2 * ks * chunk_stride) >> 4),
                                     accumulate || t > 0 || ks > 0);
            }
            wgmma_commit();
            return;
        }
    }
    if constexpr (N > 1) {
        if (taps < N) {
            slice_mmas<T, STRAIGHT, N - 1>(d, taps, a, a_tap, b, b_first, b_step, chunk_stride, accumulate);
            return;
        }
    } else if constexpr (N == 1) {
        if (taps < 1) {
            wgmma_commit();
            return;
        }
    }
    if constexpr (N > 0) {
        wgmma_fence();
#pragma unroll
        for (int t = 0; t < N; ++t)
#pragma unroll
            for (int ks = 0; ks < KSTEPS; ++ks)
                wgmma_m64n128<T>(d, a + t * a_tap + ks * 16, b + (b_first + t * b_step) + ((2 * ks * chunk_stride) >> 4),
                                 accumulate || t > 0 || ks > 0);
        wgmma_commit();
    }
}
#endif

// The per-thread copies of conv_wgmma and conv_wgmma_x3, fixed for a block.
//   * A (the weight): each thread copies fixed (row, chunk) pairs for every
//     tap; tap t + 1's source is a_tap_step elements further on (tap_step
//     kernel taps).  a_dst: the pair's offset in a tap's A buffer.
//   * The window: task (chunk c, vector v) loads VEC channels of chunk c at
//     positions window_first + v * VEC ..; consecutive threads take the four
//     chunks of a vector, then the next vector (coalesced along each
//     channel).  w_dst: the task's offset in a stage, past its a_bytes of A
//     buffers; slice s's channels are s * slice_step elements on.
template <typename T, typename Index, int BM>
struct WgmmaCopies {
    static constexpr int VEC = 16 / sizeof(T);
    static constexpr int TASKS = wgmma_max_tasks<T>();
    static constexpr int A_PAIRS = BM * WGMMA_CHUNKS / WGMMA_THREADS;  // (row, chunk) copies per thread and tap
    const T* a_src[A_PAIRS];
    int a_dst[A_PAIRS], a_chunk[A_PAIRS];
    bool a_valid[A_PAIRS];
    Index a_tap_step;
    const T* w_src[TASKS];
    int w_dst[TASKS], w_channel[TASKS];
    bool w_exists[TASKS], w_inside[TASKS];
    Index slice_step;

    __device__ __forceinline__ WgmmaCopies(int tid, const T* in, const T* weight, const AxisPhase& p, int m_tile, int n, int group,
                                          int fold_shift, int groups, int channels, int channels_padded, int out_channels, int in_w,
                                          int kernel_w, int window_first, int window_vectors, int chunk_stride, int a_bytes) {
        const int fold = 1 << fold_shift;
        const int rows = out_channels << fold_shift;
        const Index in_base = (static_cast<Index>(n) * groups + group) * channels * static_cast<Index>(in_w);
        const Index w_base = static_cast<Index>(group) * kernel_w * out_channels * channels_padded;
#pragma unroll
        for (int i = 0; i < A_PAIRS; ++i) {
            const int pair = tid + i * WGMMA_THREADS;
            const int chunk = pair % WGMMA_CHUNKS, row = pair / WGMMA_CHUNKS;
            const int m = m_tile * BM + row;
            const int co = m >> fold_shift, r = m & (fold - 1);
            a_valid[i] = m < rows;
            a_src[i] = weight + w_base + (static_cast<Index>(p.tap_first + r) * out_channels + co) * channels_padded + chunk * VEC;
            a_dst[i] = (row / 8) * (WGMMA_CHUNKS * 128) + chunk * 128 + (row % 8) * 16;
            a_chunk[i] = chunk * VEC;
        }
        a_tap_step = static_cast<Index>(p.tap_step) * out_channels * channels_padded;
#pragma unroll
        for (int i = 0; i < TASKS; ++i) {
            const int task = tid + i * WGMMA_THREADS;
            const int chunk = task % WGMMA_CHUNKS, v = task / WGMMA_CHUNKS;
            const int l = window_first + v * VEC;
            w_exists[i] = v < window_vectors;
            w_inside[i] = w_exists[i] && l >= 0 && l < in_w;  // in_w % VEC == 0: all or nothing
            w_channel[i] = chunk * VEC;
            w_src[i] = in + in_base + static_cast<Index>(w_channel[i]) * in_w + l;
            w_dst[i] = a_bytes + chunk * chunk_stride + v * VEC * 16;
        }
        slice_step = static_cast<Index>(WGMMA_CHUNKS * VEC) * in_w;
    }

    // Slice s's weight pairs for every tap into stage (tap t's A buffer
    // a_tap bytes after tap t - 1's); with LO, the lo array too (lo_offset
    // elements on in `weight`, lo_bytes on in the stage).  The caller commits.
    template <bool LO = false>
    __device__ __forceinline__ void copy_weight(unsigned char* stage, int s, int taps, const T* weight, int channels_padded, int a_tap,
                                                Index lo_offset = 0, int lo_bytes = 0) const {
        const int c0 = s * WGMMA_CHUNKS * VEC;
#pragma unroll
        for (int i = 0; i < A_PAIRS; ++i) {
            const bool valid = a_valid[i] && c0 + a_chunk[i] < channels_padded;
            const T* src = a_src[i] + c0;
            unsigned char* dst = stage + a_dst[i];
            for (int t = 0; t < taps; ++t) {
                cp_async16(dst, valid ? src : weight, valid);
                if constexpr (LO) cp_async16(dst + lo_bytes, valid ? src + lo_offset : weight, valid);
                src += a_tap_step;
                dst += a_tap;
            }
        }
    }
};

template <typename T, typename Index, int BM, int BN>
__global__ void __launch_bounds__(WGMMA_THREADS, 2) conv_wgmma(
    const T* __restrict__ in,        // (batch, groups * channels, in_w)
    const T* __restrict__ weight,    // packed (groups, kernel_w, out_channels, channels_padded); float: TF32 values
    const T* __restrict__ bias,      // (groups * out_channels,), or null for none
    T* __restrict__ out,             // (batch, groups * out_channels, out_w)
    const int* __restrict__ phases,  // num_phases AxisPhase records
    int num_phases, int fold_shift,  // fold = 1 << fold_shift rows per output channel
    int batch, int groups, int channels, int channels_padded, int out_channels,
    int in_w, int out_w, int kernel_w,
    int max_taps, int window_vectors, int chunk_stride,  // A buffers per tap; window vectors per chunk; bytes between chunks
    int m_tiles, int col_tiles) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr bool WIDE = sizeof(T) == 4;
    constexpr int VEC = 16 / sizeof(T);        // channels per chunk, and positions per vector
    constexpr int BK = WGMMA_CHUNKS * VEC;     // channels per slice
    constexpr int WG_M = BM / 64, WG_N = 2 / WG_M;
    static_assert(WG_M * WG_N == 2 && BN / WG_N == 128, "two warpgroups of m64n128");
    constexpr int A_TAP = BM * WGMMA_CHUNKS * 16;               // bytes of one tap's A

    extern __shared__ __align__(128) unsigned char smem[];

    const WindowBlock wb = window_block(phases, num_phases, m_tiles, col_tiles, batch, BM, BN, VEC, fold_shift, out_w);
    if (wb.q0 >= wb.q_end) return;  // this phase or row tile has fewer columns than the largest
    const AxisPhase& p = wb.p;
    const int m_tile = wb.m_tile, n = wb.n, group = wb.group, q0 = wb.q0;
    const int taps = p.tap_count, window_first = wb.window_first, head = wb.head;

    const int tid = threadIdx.x;
    const int warpgroup = tid / 128;

    const int a_bytes = max_taps * A_TAP;
    const int stage_bytes = a_bytes + WGMMA_CHUNKS * chunk_stride;  // a multiple of 128 (host)
    const int slices = taps > 0 ? (channels + BK - 1) / BK : 0;  // a phase no tap reaches writes the bias

    using Copies = WgmmaCopies<T, Index, BM>;
    const Copies plan(tid, in, weight, p, m_tile, n, group, fold_shift, groups, channels, channels_padded, out_channels, in_w, kernel_w,
                      window_first, window_vectors, chunk_stride, a_bytes);

    // Slice s into buffer buf: A by cp.async (one commit group), the window
    // through registers.
    auto load = [&](int s, int buf) {
        unsigned char* stage = smem + buf * stage_bytes;
        const int c0 = s * BK;
        plan.copy_weight(stage, s, taps, weight, channels_padded, A_TAP);
        cp_async_commit();
        const Index offset = s * plan.slice_step;
#pragma unroll
        for (int i = 0; i < Copies::TASKS; ++i) {
            if (!plan.w_exists[i]) continue;
            unsigned char* dst = stage + plan.w_dst[i];
            if constexpr (WIDE) {
                uint4 raw[4];  // raw[e]: channel c0 + w_channel + e at 4 positions
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    raw[e] = make_uint4(0, 0, 0, 0);
                    if (plan.w_inside[i] && c0 + plan.w_channel[i] + e < channels)
                        raw[e] = *reinterpret_cast<const uint4*>(plan.w_src[i] + offset + static_cast<Index>(e) * in_w);
                }
#pragma unroll
                for (int pos = 0; pos < 4; ++pos) {
                    unsigned word[4];  // this position's 4 channels, TF32-rounded
#pragma unroll
                    for (int e = 0; e < 4; ++e) word[e] = to_tf32(__uint_as_float(reinterpret_cast<const unsigned*>(&raw[e])[pos]));
                    *reinterpret_cast<uint4*>(dst + pos * 16) = make_uint4(word[0], word[1], word[2], word[3]);
                }
            } else {
                // Two halves of 4 channels (8 bytes of each row), to hold 16
                // registers rather than 32 next to the accumulators.
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    uint4 raw[4];  // raw[e]: channel c0 + w_channel + 4 * half + e at 8 positions
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int c = 4 * half + e;
                        raw[e] = make_uint4(0, 0, 0, 0);
                        if (plan.w_inside[i] && c0 + plan.w_channel[i] + c < channels)
                            raw[e] = *reinterpret_cast<const uint4*>(plan.w_src[i] + offset + static_cast<Index>(c) * in_w);
                    }
                    store_positions16(raw, dst + half * 8);
                }
            }
        }
    };

    // This warpgroup's operands: rows wm.. of A, columns wn.. of the tile.
    const int wm = (WG_M == 2 ? warpgroup : 0) * 64, wn = (WG_N == 2 ? warpgroup : 0) * 128;
    const unsigned base = shared_address(smem);
    const unsigned long long a_desc = wgmma_descriptor(base + (wm / 8) * (WGMMA_CHUNKS * 128), 128, WGMMA_CHUNKS * 128);
    const unsigned long long b_desc = wgmma_descriptor(base + a_bytes + (head + wn) * 16, chunk_stride, 128);

    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;

    if (slices > 0) load(0, 0);
    for (int s = 0; s < slices; ++s) {
        const int buf = s % WGMMA_STAGES;
        cp_async_wait_all();
        fence_proxy_async();
        __syncthreads();  // slice s is in buf; every warpgroup has finished slice s - 2
        pin(acc);
        const unsigned stage_offset = buf * stage_bytes;
        tap_loop_mmas<T>(acc, taps, [&](int t) { return a_desc + ((stage_offset + t * A_TAP) >> 4); }, b_desc, stage_offset, p.tap_in_step,
                         chunk_stride, true);
        if (s + 1 < slices) load(s + 1, (s + 1) % WGMMA_STAGES);
        wgmma_wait<1>();
    }
    wgmma_wait<0>();
    pin(acc);
    __syncthreads();  // the buffers are free for the staged tile

    // The tile through shared memory (stage_accumulators: the accumulators' layout).
    constexpr int SROW = window_stage_row<BN>();
    float* stage = reinterpret_cast<float*>(smem);
    {
        const int lane = tid % 32, w = (tid / 32) % 4;
        const int g = lane / 4, t4 = lane % 4;
        stage_accumulators<128>(acc, stage, SROW, wm, wn, w, g, t4, stage_swizzle(fold_shift));
    }
    __syncthreads();
    store_window_tile<T, Index, BM, BN, WGMMA_THREADS>(stage, p, bias, out, n, groups, group, out_channels, out_w, m_tile, q0, fold_shift);
#endif
}

// conv_wgmma_x3: conv_wgmma's GEMM for float32 "highest", float32-accurate
// as 3xTF32 (MmaOp<float, 3>) but on wgmma, where conv_window's mma.sync
// version issues three HMMAs, splits every operand register of every k-step
// (cvt, subtract, cvt) and adds a fresh accumulator per k-step: about 140
// other instructions per 48 HMMAs a warp (perf notes v21).  Here the
// operands are split once, into shared memory: the host packs the weight as
// two arrays, hi (rounded to TF32 as cvt.rn rounds) and lo (the remainder,
// rounded), and the window is split where it is transposed.  A stage holds
// conv_wgmma's buffer twice (hi, then lo at half_bytes).  Per k-step (k8) a
// warpgroup takes lo_a hi_b + hi_a lo_b + hi_a hi_b into a fresh accumulator
// (scale-d 0 on the first) and adds it to its sum with ordinary FADDs, as
// MmaOp<float, 3> does (the tensor core truncates as it adds; the sum's error
// then grows as in-order FFMA's) -- CHAIN 0; CHAIN 1 lets a tap's two k-steps
// (six MMAs) share the fresh accumulator, CHAIN 2 a slice's taps
// (_kernels.WGMMA_X3_CHAIN says which the host runs, and why).
//
// Pipeline: two stages; each k-step's MMAs are waited for before their sum is
// added, so at the barrier that starts slice s every warpgroup is done with
// slice s - 1, whose buffer takes slice s + 1: its weight by cp.async and its
// window loaded into registers before slice s's MMAs and split into the
// buffer after them.  One block per multiprocessor (two accumulator sets of
// 64 floats a thread).  COPY: the bytes of one window load (16, 8 or 4),
// the largest that divides an input row's bytes, as conv_wgmma_resident's:
// rows that are not whole 16-byte vectors (grad_input's grad_output rows of
// L_out floats) load each 16-byte vector in 16 / COPY pieces, each all in or
// all out of the row.  Otherwise conv_wgmma's arguments and requirements (in_w
// a multiple of COPY / 4 floats, not of 4); `weight` holds the two packed
// arrays.
constexpr int WGMMA_X3_STAGES = 2;
template <typename Index, int BM, int BN, int CHAIN = 0, int COPY = 16>
__global__ void __launch_bounds__(WGMMA_THREADS, 1) conv_wgmma_x3(
    const float* __restrict__ in,        // (batch, groups * channels, in_w)
    const float* __restrict__ weight,    // packed (2, groups, kernel_w, out_channels, channels_padded): TF32 hi, then lo
    const float* __restrict__ bias,      // (groups * out_channels,), or null for none
    float* __restrict__ out,             // (batch, groups * out_channels, out_w)
    const int* __restrict__ phases,      // num_phases AxisPhase records
    int num_phases, int fold_shift,      // fold = 1 << fold_shift rows per output channel
    int batch, int groups, int channels, int channels_padded, int out_channels,
    int in_w, int out_w, int kernel_w,
    int max_taps, int window_vectors, int chunk_stride,  // A buffers per tap; window vectors per chunk; bytes between chunks
    int m_tiles, int col_tiles) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int VEC = 4;                     // channels per chunk, and positions per vector
    constexpr int BK = WGMMA_CHUNKS * VEC;     // channels per slice
    constexpr int WG_M = BM / 64, WG_N = 2 / WG_M;
    static_assert(WG_M * WG_N == 2 && BN / WG_N == 128, "two warpgroups of m64n128");
    constexpr int A_TAP = BM * WGMMA_CHUNKS * 16;               // bytes of one tap's A
    constexpr int PIECE = COPY / 4;                             // floats per window load
    static_assert(COPY == 16 || COPY == 8 || COPY == 4, "window loads of 16, 8 or 4 bytes");

    extern __shared__ __align__(128) unsigned char smem[];

    const WindowBlock wb = window_block(phases, num_phases, m_tiles, col_tiles, batch, BM, BN, VEC, fold_shift, out_w);
    if (wb.q0 >= wb.q_end) return;  // this phase or row tile has fewer columns than the largest
    const AxisPhase& p = wb.p;
    const int m_tile = wb.m_tile, n = wb.n, group = wb.group, q0 = wb.q0;
    const int taps = p.tap_count, window_first = wb.window_first, head = wb.head;

    const int tid = threadIdx.x;
    const int warpgroup = tid / 128;

    const Index lo_offset = static_cast<Index>(groups) * kernel_w * out_channels * channels_padded;  // the lo array

    const int a_bytes = max_taps * A_TAP;
    const int half_bytes = (a_bytes + WGMMA_CHUNKS * chunk_stride + 127) / 128 * 128;  // hi's buffer; lo's follows
    const int stage_bytes = 2 * half_bytes;
    const int slices = taps > 0 ? (channels + BK - 1) / BK : 0;  // a phase no tap reaches writes the bias

    using Copies = WgmmaCopies<float, Index, BM>;
    const Copies plan(tid, in, weight, p, m_tile, n, group, fold_shift, groups, channels, channels_padded, out_channels, in_w, kernel_w,
                      window_first, window_vectors, chunk_stride, a_bytes);

    // Slice s's weight, hi and lo, into buffer buf (one commit group).
    auto fetch_a = [&](int s, int buf) {
        plan.template copy_weight<true>(smem + buf * stage_bytes, s, taps, weight, channels_padded, A_TAP, lo_offset, half_bytes);
        cp_async_commit();
    };
    // COPY < 16: how many of task i's pieces lie in the row (a prefix: its
    // positions start at a multiple of 4, in_w is a multiple of PIECE).
    int pieces[Copies::TASKS];
#pragma unroll
    for (int i = 0; i < Copies::TASKS; ++i) {
        const int l = window_first + (tid + i * WGMMA_THREADS) / WGMMA_CHUNKS * VEC;
        pieces[i] = plan.w_exists[i] && l >= 0 ? max(0, min(VEC, in_w - l)) / PIECE : 0;
    }
    // Slice s's window into registers (raw[i][e]: channel c0 + w_channel + e at 4 positions) ...
    uint4 raw[Copies::TASKS][4];
    auto fetch_window = [&](int s) {
        const int c0 = s * BK;
        const Index offset = s * plan.slice_step;
#pragma unroll
        for (int i = 0; i < Copies::TASKS; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                raw[i][e] = make_uint4(0, 0, 0, 0);
                const float* src = plan.w_src[i] + offset + static_cast<Index>(e) * in_w;
                if constexpr (COPY == 16) {
                    if (plan.w_inside[i] && c0 + plan.w_channel[i] + e < channels) raw[i][e] = *reinterpret_cast<const uint4*>(src);
                } else if (c0 + plan.w_channel[i] + e < channels) {
                    unsigned* words = reinterpret_cast<unsigned*>(&raw[i][e]);
#pragma unroll
                    for (int h = 0; h < 16 / COPY; ++h) {
                        if (h >= pieces[i]) continue;
                        if constexpr (COPY == 8) {
                            const uint2 v = *reinterpret_cast<const uint2*>(src + h * PIECE);
                            words[2 * h] = v.x, words[2 * h + 1] = v.y;
                        } else {
                            words[h] = *reinterpret_cast<const unsigned*>(src + h);
                        }
                    }
                }
            }
    };
    // ... and from them, split, into buffer buf: position l of chunk c holds its 4 channels, hi and lo.
    auto stash_window = [&](int buf) {
        unsigned char* stage = smem + buf * stage_bytes;
#pragma unroll
        for (int i = 0; i < Copies::TASKS; ++i) {
            if (!plan.w_exists[i]) continue;
            unsigned char* dst = stage + plan.w_dst[i];
#pragma unroll
            for (int pos = 0; pos < 4; ++pos) {
                unsigned hi[4], lo[4];
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float v = __uint_as_float(reinterpret_cast<const unsigned*>(&raw[i][e])[pos]);
                    hi[e] = to_tf32(v);
                    lo[e] = to_tf32(v - __uint_as_float(hi[e]));
                }
                *reinterpret_cast<uint4*>(dst + pos * 16) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
                *reinterpret_cast<uint4*>(dst + half_bytes + pos * 16) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
            }
        }
    };

    const int wm = (WG_M == 2 ? warpgroup : 0) * 64, wn = (WG_N == 2 ? warpgroup : 0) * 128;
    const unsigned base = shared_address(smem);
    const unsigned long long a_desc = wgmma_descriptor(base + (wm / 8) * (WGMMA_CHUNKS * 128), 128, WGMMA_CHUNKS * 128);
    const unsigned long long b_desc = wgmma_descriptor(base + a_bytes + (head + wn) * 16, chunk_stride, 128);
    const unsigned lo_step = half_bytes >> 4;  // hi's descriptor to lo's

    float acc[64], part[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = part[i] = 0.0f;

    if (slices > 0) {
        fetch_a(0, 0);
        fetch_window(0);
        stash_window(0);
    }
    for (int s = 0; s < slices; ++s) {
        const int buf = s % WGMMA_X3_STAGES;
        cp_async_wait_all();
        fence_proxy_async();
        __syncthreads();  // slice s is in buf; every warpgroup is done with slice s - 1
        if (s + 1 < slices) {
            fetch_a(s + 1, buf ^ 1);
            fetch_window(s + 1);
        }
        const unsigned stage_offset = buf * stage_bytes;
        if constexpr (CHAIN == 2) wgmma_fence();
        for (int t = 0; t < taps; ++t) {
            const int shift = p.tap_in_step < 0 ? (taps - 1 - t) * -p.tap_in_step : t * p.tap_in_step;
            const unsigned long long a_hi = a_desc + ((stage_offset + t * A_TAP) >> 4);
            const unsigned long long b_hi = b_desc + ((stage_offset + shift * 16) >> 4);
            if constexpr (CHAIN != 0) wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < WGMMA_CHUNKS / 2; ++ks) {
                const unsigned long long a = a_hi + ((ks * 256) >> 4), b = b_hi + ((2 * ks * chunk_stride) >> 4);
                if constexpr (CHAIN == 0) wgmma_fence();
                const int fresh = CHAIN == 0 || (ks == 0 && (CHAIN == 1 || t == 0));
                wgmma_m64n128<float>(part, a + lo_step, b, !fresh);
                wgmma_m64n128<float>(part, a, b + lo_step, 1);
                wgmma_m64n128<float>(part, a, b, 1);
                if constexpr (CHAIN == 0) {
                    wgmma_commit();
                    wgmma_wait<0>();
                    pin(part);
#pragma unroll
                    for (int i = 0; i < 64; ++i) acc[i] += part[i];
                }
            }
            if constexpr (CHAIN == 1) {
                wgmma_commit();
                wgmma_wait<0>();
                pin(part);
#pragma unroll
                for (int i = 0; i < 64; ++i) acc[i] += part[i];
            }
        }
        if constexpr (CHAIN == 2) {
            wgmma_commit();
            wgmma_wait<0>();
            pin(part);
#pragma unroll
            for (int i = 0; i < 64; ++i) acc[i] += part[i];
        }
        if (s + 1 < slices) stash_window(buf ^ 1);
    }
    __syncthreads();  // the buffers are free for the staged tile

    constexpr int SROW = window_stage_row<BN>();
    float* stage = reinterpret_cast<float*>(smem);
    {
        const int lane = tid % 32, w = (tid / 32) % 4;
        const int g = lane / 4, t4 = lane % 4;
        stage_accumulators<128>(acc, stage, SROW, wm, wn, w, g, t4, stage_swizzle(fold_shift));
    }
    __syncthreads();
    store_window_tile<float, Index, BM, BN, WGMMA_THREADS>(stage, p, bias, out, n, groups, group, out_channels, out_w, m_tile, q0, fold_shift);
#endif
}

// conv_wgmma_resident: conv_wgmma's GEMM in a persistent block that keeps its
// row tile of the weight in shared memory and streams the window.
//
// Where conv_wgmma re-reads its weight tile from L2 for every slice of every
// block, and waits on the window's global loads in registers before it can
// store them (perf notes v12: L2- and latency-bound), a block here takes one
// (phase, row tile, group), copies that row tile's weight -- every channel
// slice and tap -- into shared memory once, and then works through its share
// of the (image, column tile) items: items first_item, first_item +
// per_combo, ... where the grid is combos x per_combo blocks, combination
// fastest (blocks of the combinations that read the same window run side by
// side).  Per (item, slice) step:
//   * the window's slice arrives by cp.async two steps ahead into one of three
//     raw buffers, [channel][position] as in global memory: channel ch's row
//     at ch * raw_row, window_vectors 16-byte vectors (16-bit: raw_row an odd
//     number of vectors, so that the 8 rows an ldmatrix phase reads lie in 8
//     distinct bank groups; float: + (ch / 4) * 16, so that the four
//     chunks a quarter-warp reads do);
//   * it is transposed shared-to-shared (float: rounded to TF32) into one of
//     two window buffers in conv_wgmma's layout (chunk c, position l at
//     c * chunk_stride + 16 * l), which the tensor cores read for every tap;
//   * wgmma.m64n128 over the taps and the slice's 64 bytes of channels.
// After an item's last slice the block waits for its MMAs and writes the tile
// out one warpgroup's 64 x 128 part at a time, staged in floats over the two
// window buffers, while the next steps' copies are in flight.
//
// Shared memory (host: _kernels.resident_layout): the weight (slices x
// max_taps x BM rows x 64 bytes, conv_wgmma's A layout per slice and tap),
// three raw buffers, and the two window buffers (at least one staged part).
// MIN_BLOCKS is the launch bound: 2 where two blocks fit a multiprocessor's
// shared memory (128 registers), else 1 (the registers ptxas wants).
// COPY is the size of one window copy (16, 8 or 4 bytes): the largest that
// divides the bytes of an input row, so that source rows that are not whole
// 16-byte vectors (grad_input's grad_output rows of L_out elements, inputs of
// any even 16-bit length) still arrive by cp.async, each copy inside one row
// (all in or all out of the padding) and aligned.  The raw buffers' layout is
// the same for every COPY.  FILL: the fill epilogue (store_fill_part).
// Otherwise the same arguments and requirements as conv_wgmma.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// A warp's 16 x 128 part of a warpgroup's m64n128 accumulators into shared
// memory as 16-bit values (row r at staged + r * row_words words, the bias
// added if BIAS: bias[r] for row r).  The accumulators are in stmatrix's
// layout (rows g and g + 8, columns 8j + 2 t4 and + 1): columns 8j.. and
// 8(j + 1).. of both row halves go in one stmatrix.x4 (lane 8m + i: row i +
// 8 (m % 2), columns 8 (j + m / 2)..).  row_words * 4 must be an odd
// multiple of 16 bytes (conflict-free).  (32 4-byte stores a thread before:
// perf notes v22.)
template <typename T, bool BIAS>
__device__ __forceinline__ void stage_part16(const float (&acc)[64], unsigned* staged, int row_words, const T* bias, int lane) {
    static_assert(sizeof(T) == 2, "16-bit values");
    float b[2] = {0.0f, 0.0f};
    if constexpr (BIAS) {
#pragma unroll
        for (int h = 0; h < 2; ++h) b[h] = ValueTraits<T>::to_acc(bias[lane / 4 + 8 * h]);
    }
    unsigned* const lane_row = staged + ((lane / 8) % 2 * 8 + lane % 8) * row_words + (lane / 16) * 4;
#pragma unroll
    for (int j = 0; j < 16; j += 2) {
        unsigned words[4];
#pragma unroll
        for (int m = 0; m < 4; ++m) {
            const int jj = j + m / 2, h = m % 2;
            float x0 = acc[4 * jj + 2 * h], x1 = acc[4 * jj + 2 * h + 1];
            if constexpr (BIAS) x0 += b[h], x1 += b[h];
            words[m] = pack2<T>(x0, x1);
        }
        stmatrix_x4(lane_row + 4 * j, words);
    }
}
// A warp's staged 16 x 128 part (stage_part16: row r at staged + r *
// row_words words) out to rows out_rows + r * out_w, every row and column
// existing and each row's pairs 4-byte aligned: 16-byte vectors aligned in
// global memory.  A row that starts a elements past a 16-byte boundary (a
// even) is written as cols [8l - a, 8l - a + 8) for l = 1..15 by lanes 1..15
// of its half-warp (and l = 0 where a is 0); then lanes 2r and 2r + 1 write
// row r's first 8 - a and last a columns, at most 12 bytes each (a 4-, an 8-
// and a 4-byte store as alignment allows), all 32 lanes at once (perf notes
// v22: lane 0 writing both ends of every row in turn was a sixth of P2's
// instructions).
template <typename T, typename Index>
__device__ __forceinline__ void write_part16(const unsigned* staged, int row_words, T* out_rows, int out_w, int lane) {
    __syncwarp();
    const int l = lane % 16;
#pragma unroll 2
    for (int it = 0; it < 8; ++it) {
        const int r = 2 * it + lane / 16;
        T* const row = out_rows + r * static_cast<Index>(out_w);
        const int a = static_cast<int>(reinterpret_cast<unsigned long long>(row) / sizeof(T) % 8);
        const unsigned* const src = staged + r * row_words;
        if (l > 0 || a == 0) {
            const int c = (8 * l - a) / 2;  // first word
            store_global16(row + 8 * l - a, make_uint4(src[c], src[c + 1], src[c + 2], src[c + 3]));
        }
    }
    {
        const int r = lane / 2;
        T* const row = out_rows + r * static_cast<Index>(out_w);
        const int a = static_cast<int>(reinterpret_cast<unsigned long long>(row) / sizeof(T) % 8);
        const unsigned* const src = staged + r * row_words;
        // columns [c, end): 2 to 6 of them, c even, row + c 4-byte aligned
        int c = lane % 2 == 0 ? 0 : 128 - a;
        const int end = lane % 2 == 0 ? 8 - a : 128;
        if (a != 0) {
            if (reinterpret_cast<unsigned long long>(row + c) % 8 != 0) {
                *reinterpret_cast<unsigned*>(row + c) = src[c / 2];
                c += 2;
            }
            if (c + 4 <= end) {
                *reinterpret_cast<uint2*>(row + c) = make_uint2(src[c / 2], src[c / 2 + 1]);
                c += 4;
            }
            if (c < end) *reinterpret_cast<unsigned*>(row + c) = src[c / 2];
        }
    }
}
#endif
// Two consecutive outputs (8 bytes of float, 4 of half or bfloat16) in one store.
template <typename T>
__device__ __forceinline__ void store_pair(T* dst, float a, float b) {
    if constexpr (sizeof(T) == 4) {
        *reinterpret_cast<float2*>(dst) = make_float2(a, b);
    } else {
        *reinterpret_cast<unsigned*>(dst) = pack2<T>(a, b);
    }
}

// The fill epilogue of conv_wgmma_resident (its builds with FILL true, which
// the host runs for a forward pass of stride FILL_STEP = 2 whose taps all
// land on one phase, the dilation a multiple of the stride, so that the
// other phase is bias only; perf notes v17).  A block's columns then cover
// every output: (out_w + 1) / 2 of them.  Tile column q stands for outputs 2q and 2q +
// 1: `sum_at` (the phase record's out_base, 0 or 1) of them holds the sum,
// the other the bias.  One warp's part, 16 rows x 128 columns of
// accumulators, is 16 rows of 256 consecutive outputs (`rows` of them exist,
// the first `outs` outputs of each).  The rows are staged FILL_ROWS at a
// time in T, the bias added, over the window buffers: output o of a row at
// element fill_lead + o of its staged row (16-bit: one 8-byte store of 4
// outputs a thread per 8 columns; float: one 16-byte store).  Then lane l
// takes the aligned 16-byte vectors l, l + 32, ... in global memory of every
// staged row (and lane r the one past row r's last): each is the 16 bytes of
// two consecutive staged vectors that start at the row's misalignment (two
// conflict-free 16-byte reads and a funnel shift; perf notes v17), written
// in one store where the part's outputs cover it, element by element at
// the row's ends.  Where not every row and output of the part
// exists (`whole` false), the outputs that do go out one by one.
constexpr int FILL_STEP = 2;
template <typename T>
__host__ __device__ constexpr int fill_rows() { return sizeof(T) == 2 ? 8 : 4; }  // rows a warp stages at once
template <typename T>
__host__ __device__ constexpr int fill_lead() { return 16 / static_cast<int>(sizeof(T)); }  // elements ahead of a staged row's outputs
// Elements a staged row: the outputs, the lead, and room after them for the
// last vector's read; 544 (16-bit) or 1088 (float) bytes, so that the 8- or
// 16-byte stores of a warp's rows fill whole wavefronts.
template <typename T>
__host__ __device__ constexpr int fill_stage_row() { return FILL_STEP * 128 + 16; }
// The 16 bytes that start `bytes` (0 to 16) bytes into lo, hi.
__device__ __forceinline__ uint4 bytes_from(const uint4& lo, const uint4& hi, int bytes) {
    unsigned w0, w1, w2, w3, w4;
    switch (bytes >> 2) {
        case 0: w0 = lo.x, w1 = lo.y, w2 = lo.z, w3 = lo.w, w4 = hi.x; break;
        case 1: w0 = lo.y, w1 = lo.z, w2 = lo.w, w3 = hi.x, w4 = hi.y; break;
        case 2: w0 = lo.z, w1 = lo.w, w2 = hi.x, w3 = hi.y, w4 = hi.z; break;
        case 3: w0 = lo.w, w1 = hi.x, w2 = hi.y, w3 = hi.z, w4 = hi.w; break;
        default: return hi;
    }
    const unsigned shift = (bytes & 3) * 8;
    return make_uint4(__funnelshift_r(w0, w1, shift), __funnelshift_r(w1, w2, shift), __funnelshift_r(w2, w3, shift), __funnelshift_r(w3, w4, shift));
}
template <typename T, typename Index>
__device__ __forceinline__ void store_fill_part(const float (&d)[64], T* __restrict__ staged, T* __restrict__ out_rows, const T* __restrict__ bias,
                                                int out_w, int rows, int outs, int sum_at, bool whole, int lane) {
    static_assert(FILL_STEP == 2, "a thread's two columns are four outputs");
    constexpr int VEC = 16 / sizeof(T);
    constexpr int OUTS = FILL_STEP * 128;  // outputs of a row of the part
    constexpr int ROWS = fill_rows<T>();
    constexpr int LEAD = fill_lead<T>();
    constexpr int SROW = fill_stage_row<T>();
    static_assert(LEAD == VEC && SROW >= LEAD + OUTS + VEC && SROW % VEC == 0, "the reads of a row's last vector stay in its staged row");
    const int g = lane / 4, t4 = lane % 4;
#pragma unroll
    for (int pass = 0; pass < 16 / ROWS; ++pass) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = g + 8 * h;
            if (r / ROWS != pass) continue;
            const float b = bias != nullptr && r < rows ? ValueTraits<T>::to_acc(bias[r]) : 0.0f;
            T* const s = staged + (r % ROWS) * SROW + LEAD + 4 * t4;  // outputs 16 j + 4 t4 .. + 3: columns 8 j + 2 t4, + 1
#pragma unroll
            for (int j = 0; j < 16; ++j) {
                const float x0 = d[4 * j + 2 * h] + b, x1 = d[4 * j + 2 * h + 1] + b;
                if constexpr (sizeof(T) == 4) {
                    *reinterpret_cast<float4*>(s + 16 * j) = sum_at ? make_float4(b, x0, b, x1) : make_float4(x0, b, x1, b);
                } else {
                    const unsigned fill = ValueTraits<T>::from_acc(b).bits, w0 = ValueTraits<T>::from_acc(x0).bits,
                                   w1 = ValueTraits<T>::from_acc(x1).bits;  // (16 bits each)
                    *reinterpret_cast<uint2*>(s + 16 * j) = sum_at ? make_uint2(fill | w0 << 16, fill | w1 << 16) : make_uint2(w0 | fill << 16, w1 | fill << 16);
                }
            }
        }
        __syncwarp();
        if (whole) {
            // Vector v of staged row r (uniform misalignment a across the
            // lanes, but for the last vectors below).
            auto out_vector = [&](int r, int v) {
                T* const row = out_rows + (pass * ROWS + r) * static_cast<Index>(out_w);
                const int a = static_cast<int>(reinterpret_cast<unsigned long long>(row) / sizeof(T) % VEC);
                if (v == OUTS / VEC && a == 0) return;  // an aligned row has no vector past its last
                const uint4* const src = reinterpret_cast<const uint4*>(staged + r * SROW);  // staged vectors
                // Outputs VEC v - a .. (staged elements LEAD + VEC v - a ..): staged vectors v and v + 1.
                const int first = VEC * v - a;
                union {
                    T value[VEC];
                    uint4 whole;
                } vector;
                vector.whole = a == 0 ? src[v + 1] : bytes_from(src[v], src[v + 1], (VEC - a) * static_cast<int>(sizeof(T)));
                if (first >= 0 && first + VEC <= OUTS) {
                    store_global16(row + first, vector.whole);
                } else {
#pragma unroll
                    for (int e = 0; e < VEC; ++e)
                        if (first + e >= 0 && first + e < OUTS) row[first + e] = vector.value[e];
                }
            };
            // Lane l: vectors l, l + 32, .. of every row, 8 (16-bit) or 4
            // (float: 2 rows) unrolled so that their reads are in flight
            // together (4 rows of float spilled 68 bytes in the two-block
            // build), then lane r the vector past row r's last whole one.
            constexpr int ROWS_AT_ONCE = sizeof(T) == 2 ? 8 : 2;
#pragma unroll ROWS_AT_ONCE
            for (int r = 0; r < ROWS; ++r)
#pragma unroll
                for (int k = 0; k < OUTS / VEC / 32; ++k) out_vector(r, lane + 32 * k);
            if (lane < ROWS) out_vector(lane, OUTS / VEC);
        } else {
            const int last = min(outs, OUTS);
            for (int r = 0; r < ROWS && pass * ROWS + r < rows; ++r) {
                T* const row = out_rows + (pass * ROWS + r) * static_cast<Index>(out_w);
                for (int o = lane; o < last; o += 32) row[o] = staged[r * SROW + LEAD + o];
            }
        }
        __syncwarp();
    }
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The resident kernels' blocks (conv_wgmma_resident, conv_wgmma_split): a
// block's (phase, row tile, group) combination is blockIdx.x % combos, and
// its items (image n, column tile q0 / BN) are items first_item, first_item +
// per_combo, .. of the phase's batch x col_tiles (BN columns a tile over
// `columns`: the phase's count, or with the fill epilogue every output).
struct ResidentBlock {
    AxisPhase p;
    int m_tile, group;
    int per_combo, first_item, col_tiles;
    int items;  // this block's
    template <int BN>
    __device__ __forceinline__ void item(int i, int& n, int& q0) const {
        const int at = first_item + i * per_combo;
        n = at / col_tiles;
        q0 = at % col_tiles * BN;
    }
};
template <int BN, bool FILL>
__device__ __forceinline__ ResidentBlock resident_block(const int* __restrict__ phases, int num_phases, int m_tiles, int groups, int batch,
                                                        int out_w) {
    ResidentBlock b;
    const int combos = num_phases * m_tiles * groups;
    const int combo = blockIdx.x % combos;
    b.per_combo = gridDim.x / combos;
    b.first_item = blockIdx.x / combos;
    b.m_tile = (combo / num_phases) % m_tiles;
    b.group = combo / (num_phases * m_tiles);
    b.p = load_axis_phase(phases, combo % num_phases);
    const int columns = FILL ? (out_w + FILL_STEP - 1) / FILL_STEP : b.p.count;  // FILL: every output, the bias-only ones too
    b.col_tiles = (columns + BN - 1) / BN;
    const int items = batch * b.col_tiles;
    b.items = b.first_item < items ? (items - b.first_item + b.per_combo - 1) / b.per_combo : 0;
    return b;
}

// A resident block's row tile of the weight (BM rows m_tile * BM.., row m:
// output channel m >> fold_shift at tap offset m & (fold - 1)), every channel
// slice and tap, into shared memory by cp.async from THREADS threads: (slice
// s, tap t) at (s * max_taps + t) * A_TAP bytes in conv_wgmma's A layout, zeros
// for rows past `rows` and channels past channels_padded.  The caller commits.
template <typename T, typename Index, int BM, int THREADS>
__device__ __forceinline__ void copy_weight_rows(unsigned char* smem, const T* __restrict__ weight, const AxisPhase& p, int group,
                                                 int kernel_w, int out_channels, int channels_padded, int rows, int m_tile,
                                                 int fold_shift, int slices, int taps, int max_taps, int tid) {
    constexpr int VEC = 16 / sizeof(T);
    constexpr int BK = WGMMA_CHUNKS * VEC;
    constexpr int A_TAP = BM * WGMMA_CHUNKS * 16;
    const int fold = 1 << fold_shift;
    const Index w_base = static_cast<Index>(group) * kernel_w * out_channels * channels_padded;
    const int pairs = BM * WGMMA_CHUNKS;
    const int total = slices * taps * pairs;
    for (int task = tid; task < total; task += THREADS) {
        const int pair = task % pairs, st = task / pairs;
        const int s = st / taps, t = st % taps;
        const int chunk = pair % WGMMA_CHUNKS, row = pair / WGMMA_CHUNKS;
        const int m = m_tile * BM + row;
        const int co = m >> fold_shift, r = m & (fold - 1);
        const int c = s * BK + chunk * VEC;
        const bool valid = m < rows && c < channels_padded;
        const T* src = weight + w_base + (static_cast<Index>(p.tap_first + r + t * p.tap_step) * out_channels + co) * channels_padded + c;
        cp_async16(smem + (s * max_taps + t) * A_TAP + (row / 8) * (WGMMA_CHUNKS * 128) + chunk * 128 + (row % 8) * 16,
                   valid ? src : weight, valid);
    }
}

// Channel `channel`'s row of a window slice into dst by cp.async, COPY
// bytes a copy, copies my_lane, my_lane + LANES, .. of it (LANES threads a
// row): window_vectors 16-byte vectors from input position window_first
// (src: that position of the row).  A row wholly inside the input and its
// channels copies with no checks; otherwise the copies outside are zeros.
template <typename T, int COPY, int LANES>
__device__ __forceinline__ void copy_window_row(unsigned char* dst, const T* src, const T* __restrict__ in, int channel, int channels,
                                                int window_first, int in_w, int window_vectors, int my_lane) {
    constexpr int UNIT = COPY / sizeof(T);
    const int copies = window_vectors * (16 / COPY);
    if (channel < channels && window_first >= 0 && window_first + copies * UNIT <= in_w) {
        for (int u = my_lane; u < copies; u += LANES) cp_async_vector<COPY>(dst + u * COPY, src + u * UNIT, true);
    } else {
        for (int u = my_lane; u < copies; u += LANES) {
            const int l = window_first + u * UNIT;
            const bool valid = channel < channels && l >= 0 && l < in_w;  // in_w % UNIT == 0: all or nothing
            cp_async_vector<COPY>(dst + u * COPY, valid ? src + u * UNIT : in, valid);
        }
    }
}

// A 16-bit raw window slice (channel ch's row at src0 + ch * raw_row) into
// the window buffer dst0 (chunk c, position v at c * chunk_stride + 16 v) by
// WARPS warps: warp `warp` takes vectors v = warp, warp + WARPS, ..: the four
// chunks' 8 x 8 blocks (channels 8i + j, positions 8v + ..) in one
// ldmatrix.x4.trans (lane 8i + j: channel 8i + j's row) and out transposed in
// one stmatrix.x4 (lane 8i + j: position 8v + j's 16 bytes of chunk i),
// AT_ONCE vectors' loads in flight before their stores.
template <int WARPS, int AT_ONCE>
__device__ __forceinline__ void transpose_slice16(const unsigned char* src0, unsigned char* dst0, int raw_row, int chunk_stride,
                                                  int window_vectors, int warp, int lane) {
    static_assert(WGMMA_CHUNKS == 4, "one ldmatrix.x4 per vector: the four chunks");
    const unsigned char* const src = src0 + lane * raw_row;  // channel lane (8i + j)
    unsigned char* const dst = dst0 + (lane / 8) * chunk_stride + (lane % 8) * 16;
    for (int v0 = warp; v0 < window_vectors; v0 += WARPS * AT_ONCE) {
        unsigned block[AT_ONCE][4];
#pragma unroll
        for (int u = 0; u < AT_ONCE; ++u)
            if (v0 + WARPS * u < window_vectors) ldmatrix_x4_trans(block[u], src + (v0 + WARPS * u) * 16);
#pragma unroll
        for (int u = 0; u < AT_ONCE; ++u)
            if (v0 + WARPS * u < window_vectors) stmatrix_x4(dst + (v0 + WARPS * u) * 128, block[u]);
    }
}
#endif

template <typename T, typename Index, int BM, int BN, int MIN_BLOCKS, int COPY, bool FILL = false>
__global__ void __launch_bounds__(WGMMA_THREADS, MIN_BLOCKS) conv_wgmma_resident(
    const T* __restrict__ in, const T* __restrict__ weight, const T* __restrict__ bias, T* __restrict__ out,
    const int* __restrict__ phases, int num_phases, int fold_shift,
    int batch, int groups, int channels, int channels_padded, int out_channels,
    int in_w, int out_w, int kernel_w,
    int max_taps, int window_vectors, int chunk_stride,
    int m_tiles, int col_tiles) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr bool WIDE = sizeof(T) == 4;
    constexpr int VEC = 16 / sizeof(T);     // channels per chunk, positions per vector
    constexpr int BK = WGMMA_CHUNKS * VEC;  // channels per slice
    constexpr int WG_M = BM / 64, WG_N = 2 / WG_M;
    static_assert(WG_M * WG_N == 2 && BN / WG_N == 128, "two warpgroups of m64n128");
    constexpr int A_TAP = BM * WGMMA_CHUNKS * 16;  // bytes of one (slice, tap) of the weight
    constexpr int PART_ROW = window_stage_row<128>();
    constexpr int UNIT = COPY / sizeof(T);  // elements per window copy
    constexpr int TRANSPOSE_AT_ONCE = MIN_BLOCKS == 1 ? 3 : 1;  // 16-bit: vectors a warp transposes at once (registers: 4 each)
    static_assert((COPY == 16 || COPY == 8 || COPY == 4) && UNIT >= 1, "cp.async copies 4, 8 or 16 bytes");
    (void)col_tiles;

    extern __shared__ __align__(128) unsigned char smem[];
    const int tid = threadIdx.x;
    const int warpgroup = tid / 128;

    // The block's combination and items.
    const ResidentBlock work = resident_block<BN, FILL>(phases, num_phases, m_tiles, groups, batch, out_w);
    const AxisPhase& p = work.p;
    const int m_tile = work.m_tile, group = work.group, my_items = work.items;
    if (my_items == 0) return;

    const int taps = p.tap_count;
    const int tap_span = taps > 0 ? (taps - 1) * abs(p.tap_in_step) : 0;
    const int lo_base = p.in_base - (p.tap_in_step < 0 ? tap_span : 0);  // + q0: the first position read; in_step is 1
    const int head = lo_base - floor_to(lo_base, VEC);                     // the same for every item (BN % VEC == 0)
    const int slices = taps > 0 ? (channels + BK - 1) / BK : 0;          // a phase no tap reaches writes the bias
    const int fold = 1 << fold_shift;
    const int rows = out_channels << fold_shift;

    const int raw_row = (WIDE ? window_vectors : window_vectors | 1) * 16;  // (host: _kernels.resident_layout)
    const int raw_bytes = (BK * raw_row + (WIDE ? 128 : 0) + 127) / 128 * 128;
    const int a_bytes = (channels + BK - 1) / BK * max_taps * A_TAP;
    const int trans_bytes = WGMMA_CHUNKS * chunk_stride;
    unsigned char* const raw_base = smem + a_bytes;
    unsigned char* const trans_base = raw_base + 3 * raw_bytes;
    float* const part = reinterpret_cast<float*>(trans_base);  // the staged 64 x 128 part, over the window buffers

    // The weight's row tile: every slice and tap, once (one commit group).
    copy_weight_rows<T, Index, BM, WGMMA_THREADS>(smem, weight, p, group, kernel_w, out_channels, channels_padded, rows, m_tile, fold_shift,
                                                  slices, taps, max_taps, tid);
    cp_async_commit();

    // Step k's slice of its item's window (item i, slice s) into raw buffer
    // k % 3 (the caller commits): LANES threads per channel row, on
    // consecutive copies.  Steps load in order, so an item's window_first
    // and first channel row are worked out at its first slice and kept for
    // the others: a step costs no division (perf notes v22: the divisions
    // were a fifth of P2's instructions).  A slice wholly inside the input
    // and its channels copies with no checks.
    constexpr int LANES = WGMMA_THREADS / BK;
    const int my_channel = tid / LANES, my_lane = tid % LANES;
    int item_first = 0;    // window_first of the item being loaded
    Index item_rows = 0;   // and its first channel row, (n * groups + group) * channels
    auto load_raw = [&](int k, int i, int s) {
        if (s == 0) {
            int n, q0;
            work.item<BN>(i, n, q0);
            item_first = floor_to(lo_base + q0, VEC);
            item_rows = (static_cast<Index>(n) * groups + group) * channels;
        }
        const int channel = s * BK + my_channel;
        copy_window_row<T, COPY, LANES>(raw_base + (k % 3) * raw_bytes + my_channel * raw_row + (WIDE ? (my_channel / 4) * 16 : 0),
                                        in + (item_rows + channel) * static_cast<Index>(in_w) + item_first, in, channel, channels,
                                        item_first, in_w, window_vectors, my_lane);
    };

    // Raw buffer k % 3 into window buffer k % 2.
    //   * 16-bit: warp w takes vectors v = w, w + 8, ..: the four chunks' 8 x 8
    //     blocks (channels 8i + j, positions 8v + ..) in one ldmatrix.x4.trans
    //     (lane 8i + j: channel 8i + j's row) and out transposed in one
    //     stmatrix.x4 (lane 8i + j: position 8v + j's 16 bytes of chunk i),
    //     TRANSPOSE_AT_ONCE vectors' loads in flight before their stores (the
    //     barrier after the transpose waits for the warp with most vectors).
    //     (Four 16-byte reads, eight 8-byte writes and 16 byte permutes a
    //     thread per 32 elements before: perf notes v22.)
    //   * float: task (chunk c, half h, vector v) reads the 8 bytes h of
    //     channels 4c .. 4c + 3 and writes their 16 bytes of 2 positions,
    //     rounded to TF32; the 8 (chunk, half) tasks of a quarter-warp read 8
    //     distinct bank groups.
    auto transpose = [&](int k) {
        const unsigned char* const src0 = raw_base + (k % 3) * raw_bytes;
        unsigned char* const dst0 = trans_base + (k % 2) * trans_bytes;
        if constexpr (WIDE) {
            const int total = 2 * WGMMA_CHUNKS * window_vectors;
            for (int task = tid; task < total; task += WGMMA_THREADS) {
                const int chunk = task % WGMMA_CHUNKS, half = task / WGMMA_CHUNKS % 2, v = task / (2 * WGMMA_CHUNKS);
                unsigned char* dst = dst0 + chunk * chunk_stride + v * VEC * 16;
                const int c0 = 4 * chunk;
                const unsigned char* src = src0 + c0 * raw_row + chunk * 16 + v * 16 + half * 8;
                uint2 raw[4];  // raw[e]: channel c0 + e at positions 2 half, 2 half + 1
#pragma unroll
                for (int e = 0; e < 4; ++e) raw[e] = *reinterpret_cast<const uint2*>(src + e * raw_row);
                *reinterpret_cast<uint4*>(dst + (2 * half) * 16) =
                    make_uint4(to_tf32(__uint_as_float(raw[0].x)), to_tf32(__uint_as_float(raw[1].x)),
                               to_tf32(__uint_as_float(raw[2].x)), to_tf32(__uint_as_float(raw[3].x)));
                *reinterpret_cast<uint4*>(dst + (2 * half + 1) * 16) =
                    make_uint4(to_tf32(__uint_as_float(raw[0].y)), to_tf32(__uint_as_float(raw[1].y)),
                               to_tf32(__uint_as_float(raw[2].y)), to_tf32(__uint_as_float(raw[3].y)));
            }
        } else {
            transpose_slice16<WGMMA_THREADS / 32, TRANSPOSE_AT_ONCE>(src0, dst0, raw_row, chunk_stride, window_vectors, tid / 32, tid % 32);
        }
    };

    float acc[64];  // zeros for the bias-only case; an item's first MMA does not add them
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;

    // This warpgroup's part of the tile: rows wm.., columns wn...
    const int wm = (WG_M == 2 ? warpgroup : 0) * 64, wn = (WG_N == 2 ? warpgroup : 0) * 128;
    const int lane = tid % 32, w = (tid / 32) % 4;
    const int g = lane / 4, t4 = lane % 4;
    // The fast epilogue: where the tile does not fold (fold 1, out_step 1),
    // every row is in range and the rows' pairs of outputs are aligned, a tile
    // whose columns all exist and land inside the output is written without
    // block-wide staging: float pairs straight from the accumulators, 16-bit
    // values through a per-warp staging area (below).
    const bool direct_rows = fold == 1 && p.out_step == 1 && (m_tile + 1) * BM <= rows && out_w % 2 == 0 && p.out_base % 2 == 0 &&
                             reinterpret_cast<unsigned long long>(out) % (2 * sizeof(T)) == 0;  // every row's pairs aligned

    // Item i's tile out (the next item's first MMA overwrites the
    // accumulators).  Staged: one warpgroup's part at a time, over the window
    // buffers, which must be free (the caller has waited for its MMAs; the
    // first barrier covers the other warpgroup's).
    auto epilogue = [&](int i) {
        int n, q0;
        work.item<BN>(i, n, q0);
        if constexpr (FILL) {
            __syncthreads();  // every warpgroup's MMAs are done: the window buffers are free
            const int row0 = m_tile * BM + wm + 16 * w, o_first = FILL_STEP * (q0 + wn);
            const bool whole = (m_tile + 1) * BM <= rows && FILL_STEP * (q0 + BN) <= out_w;  // the same for every warp
            T* const out_rows = out + ((static_cast<Index>(n) * groups + group) * out_channels + row0) * out_w + o_first;
            store_fill_part<T, Index>(acc, reinterpret_cast<T*>(trans_base) + (tid / 32) * fill_rows<T>() * fill_stage_row<T>(), out_rows,
                                      bias != nullptr ? bias + group * out_channels + row0 : nullptr, out_w, rows - row0, out_w - o_first,
                                      p.out_base, whole, lane);
            return;
        }
        if (direct_rows && q0 + BN <= p.count && p.out_base + q0 >= 0 && p.out_base + q0 + BN <= out_w) {
            T* const out_rows = out + ((static_cast<Index>(n) * groups + group) * out_channels + m_tile * BM + wm + 16 * w) * out_w + p.out_base + q0 + wn;
            if constexpr (WIDE) {
                // Pairs of floats (8 bytes): a warp's store fills whole 32-byte sectors.
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const float b = bias != nullptr ? bias[group * out_channels + m_tile * BM + wm + 16 * w + g + 8 * h] : 0.0f;
                    T* const dst = out_rows + (g + 8 * h) * static_cast<Index>(out_w) + 2 * t4;
#pragma unroll
                    for (int j = 0; j < 16; ++j) store_pair(dst + 8 * j, acc[4 * j + 2 * h] + b, acc[4 * j + 2 * h + 1] + b);
                }
            } else {
                // Each warp stages its 16 rows x 128 columns (16-bit, the bias
                // added) over the window buffers, then writes them out
                // (write_part16).
                constexpr int WROW = 64 + 4;  // words per staged row (an odd number of 16-byte units: conflict-free)
                __syncthreads();              // every warpgroup's MMAs are done: the window buffers are free
                unsigned* const staged = reinterpret_cast<unsigned*>(trans_base) + (tid / 32) * 16 * WROW;
                const T* const part_bias = bias != nullptr ? bias + group * out_channels + m_tile * BM + wm + 16 * w : nullptr;
                if (part_bias != nullptr) {
                    stage_part16<T, true>(acc, staged, WROW, part_bias, lane);
                } else {
                    stage_part16<T, false>(acc, staged, WROW, part_bias, lane);
                }
                write_part16<T, Index>(staged, WROW, out_rows, out_w, lane);
            }
            return;
        }
#pragma unroll
        for (int owner = 0; owner < 2; ++owner) {
            __syncthreads();
            if (warpgroup == owner) stage_accumulators<128>(acc, part, PART_ROW, 0, 0, w, g, t4);
            __syncthreads();
            const int pm = (WG_M == 2 ? owner : 0) * 64, pn = (WG_N == 2 ? owner : 0) * 128;
            // (the two-block builds write folds below VEC element by element:
            // the runs' code made them spill, 80-88 bytes; no build here takes
            // the deep-fold runs, which made them spill 108-132)
            store_window_tile<T, Index, 64, 128, WGMMA_THREADS, MIN_BLOCKS == 1, false, false>(
                part, p, bias, out, n, groups, group, out_channels, out_w, (m_tile * BM + pm) / 64, q0 + pn, fold_shift);
        }
        __syncthreads();
    };

    if (slices == 0) {
        cp_async_wait_all();
        for (int i = 0; i < my_items; ++i) epilogue(i);
        return;
    }

    // This warpgroup's operands: rows wm.. of A, columns wn.. of the tile.
    const unsigned base = shared_address(smem);
    const unsigned long long a_desc = wgmma_descriptor(base + (wm / 8) * (WGMMA_CHUNKS * 128), 128, WGMMA_CHUNKS * 128);
    const unsigned long long b_desc = wgmma_descriptor(base + static_cast<unsigned>(trans_base - smem) + (head + wn) * 16, chunk_stride, 128);

    const int steps = my_items * slices;
    load_raw(0, 0, 0);
    cp_async_commit();
    if (steps > 1) load_raw(1, slices > 1 ? 0 : 1, slices > 1 ? 1 : 0);
    cp_async_commit();
    for (int i = 0, k = 0; i < my_items; ++i) {
        for (int s = 0; s < slices; ++s, ++k) {
            cp_async_wait_group<1>();  // the weight and step k's raw slice are here (step k + 1's may not be)
            __syncthreads();           // ... for every thread; raw buffer (k + 2) % 3 and window buffer k % 2 are free
            transpose(k);
            if (k + 2 < steps) {  // step k + 2: item i2, slice s2
                int i2 = i, s2 = s + 2;
                for (int wrap = 0; wrap < 2 && s2 >= slices; ++wrap) s2 -= slices, ++i2;
                load_raw(k + 2, i2, s2);
            }
            cp_async_commit();
            fence_proxy_async();
            __syncthreads();  // window buffer k % 2 is written
            pin(acc);
            const unsigned window_offset = (k % 2) * trans_bytes;
            if constexpr (MIN_BLOCKS == 1) {
                slice_mmas<T, WGMMA_STRAIGHT_TAPS>(acc, taps, a_desc + ((s * max_taps * A_TAP) >> 4), A_TAP >> 4, b_desc + (window_offset >> 4),
                                                   p.tap_in_step < 0 ? (taps - 1) * -p.tap_in_step : 0, p.tap_in_step, chunk_stride, s > 0);
            } else {  // the loop: the two-block builds measured slower with slice_mmas's (perf notes v14)
                tap_loop_mmas<T>(acc, taps, [&](int t) { return a_desc + (((s * max_taps + t) * A_TAP) >> 4); }, b_desc, window_offset,
                                 p.tap_in_step, chunk_stride, s > 0);
            }
            wgmma_wait<1>();
        }
        wgmma_wait<0>();
        pin(acc);
        epilogue(i);
    }
#endif
}

// conv_wgmma_split: conv_wgmma_resident's 16-bit GEMM on 128 x 128 tiles
// (one stride-1 phase, no fold: P2's forward pass and grad_input) with the
// work split by role, so that the tensor cores are not kept waiting on each
// warp's copies and transposes (perf notes v55).  conv_wgmma_resident's 8
// warps each copy, transpose, issue MMAs and store, with two block-wide
// barriers a channel slice, and its instruction stream is the critical path
// (perf notes v54: 1447 instructions a warp an item at 6.5 cycles each,
// against 3.1 k cycles of MMAs).  Here a block is three warpgroups:
//   * warpgroup 2, the producer: each step's raw window slice by cp.async
//     SPLIT_RAW - 1 steps ahead (as conv_wgmma_resident's, 4 threads a
//     channel row), then its transpose into one of SPLIT_STAGES window
//     buffers; it waits only for that buffer's `empty` mbarrier and its own
//     copies (a named barrier among its 128 threads), and arrives on the
//     buffer's `full` mbarrier (each thread after fence.proxy.async);
//   * warpgroups 0 and 1, the consumers: rows 64 w.. of the tile; per step
//     they wait for `full` (and for their own warpgroup's warps: named
//     barrier 2 + warpgroup, which keeps ptxas from serializing the MMAs),
//     issue the slice's MMAs, and once the previous step's are done
//     (wgmma.wait_group 1) arrive on its buffer's `empty` (lane 0 of each
//     warp).  After an item's last slice each warp stages its 16 x 128
//     part in an area of its own (stage_part16) and writes it out
//     (write_part16), with no block-wide barrier: the producer meanwhile
//     fills the next item's buffers.
//     (Writing the part in pieces after each of the next item's slices'
//     MMAs were issued measured 13% slower on P2, in a build whose MMAs
//     ptxas had serialized: perf notes v55.)
// The weight's row tile is resident as in conv_wgmma_resident, copied once
// by every thread before the roles part.  A warp whose part is not all in
// the output (a ragged last column tile, rows past the output channels)
// writes its outputs one by one from its accumulators.
//
// Shared memory (host: _kernels.split_layout): the weight, SPLIT_RAW raw
// buffers, SPLIT_STAGES window buffers, 8 warps' staged parts and the
// mbarriers.  Requirements checked by the host: compute capability 9.0
// (sm_90a), one phase record with in_step and out_step 1, fold 1 (fold_shift
// 0), 16-bit values, a 16-byte-aligned input, source rows a whole number of
// COPY bytes.
constexpr int SPLIT_THREADS = 384;                    // two consumer warpgroups, one producer warpgroup
constexpr int SPLIT_STAGES = 4;                       // transposed window buffers
constexpr int SPLIT_RAW = 3;                          // raw window buffers (those loaded ahead, and the one transposed)
constexpr int SPLIT_PART_WORDS = 64 + 4;              // words a staged row of a warp's part (odd 16-byte units: conflict-free)
constexpr int SPLIT_PART_BYTES = 16 * SPLIT_PART_WORDS * 4;  // a warp's staged part
constexpr int SPLIT_TRANSPOSE_AT_ONCE = 5;            // vectors a producer warp transposes at once

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// An arrival on the mbarrier at `address` where `go`, predicated inside the
// asm (a branch around it among a warpgroup's MMAs in flight would make
// ptxas serialize them, as cluster_release's note says).
__device__ __forceinline__ void mbarrier_arrive_if(unsigned address, bool go) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %1, 0;\n@p mbarrier.arrive.shared::cta.b64 _, [%0];\n}\n" ::"r"(address), "r"(go ? 1 : 0)
                 : "memory");
}
// The producer warpgroup's own barrier (named barrier 1, its 128 threads),
// and a consumer warpgroup's (named barrier 2 + warpgroup, its 128: the id in
// a register).  One barrier of both consumer warpgroups (256 threads) also
// kept ptxas from serializing the MMAs, but tied each warpgroup to the other:
// 1-4% slower on P2 (perf notes v55-v56).
__device__ __forceinline__ void split_producer_sync() { asm volatile("bar.sync 1, 128;\n" ::: "memory"); }
__device__ __forceinline__ void split_consumer_sync(int warpgroup) {
    asm volatile("bar.sync %0, 128;\n" ::"r"(2 + warpgroup) : "memory");
}
#endif

template <typename T, typename Index, int COPY>
__global__ void __launch_bounds__(SPLIT_THREADS, 1) conv_wgmma_split(
    const T* __restrict__ in, const T* __restrict__ weight, const T* __restrict__ bias, T* __restrict__ out,
    const int* __restrict__ phases, int num_phases, int fold_shift,
    int batch, int groups, int channels, int channels_padded, int out_channels,
    int in_w, int out_w, int kernel_w,
    int max_taps, int window_vectors, int chunk_stride,
    int m_tiles, int col_tiles) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(sizeof(T) == 2, "16-bit values (wgmma reads float B K-major only, and TF32 has its own kernels)");
    constexpr int BM = 128, BN = 128;
    constexpr int VEC = 8;                  // channels per chunk, positions per vector
    constexpr int BK = WGMMA_CHUNKS * VEC;  // channels per slice
    constexpr int A_TAP = BM * WGMMA_CHUNKS * 16;
    constexpr int UNIT = COPY / sizeof(T);
    static_assert((COPY == 16 || COPY == 8 || COPY == 4) && UNIT >= 1, "cp.async copies 4, 8 or 16 bytes");
    (void)col_tiles, (void)fold_shift;

    extern __shared__ __align__(128) unsigned char smem[];
    const int tid = threadIdx.x;
    const int warpgroup = tid / 128;

    const ResidentBlock work = resident_block<BN, false>(phases, num_phases, m_tiles, groups, batch, out_w);
    const AxisPhase& p = work.p;
    const int m_tile = work.m_tile, group = work.group, my_items = work.items;
    if (my_items == 0) return;

    const int taps = p.tap_count;
    const int tap_span = taps > 0 ? (taps - 1) * abs(p.tap_in_step) : 0;
    const int lo_base = p.in_base - (p.tap_in_step < 0 ? tap_span : 0);
    const int head = lo_base - floor_to(lo_base, VEC);
    const int slices = taps > 0 ? (channels + BK - 1) / BK : 0;
    const int rows = out_channels;

    const int raw_row = (window_vectors | 1) * 16;
    const int raw_bytes = (BK * raw_row + 127) / 128 * 128;
    const int a_bytes = (channels + BK - 1) / BK * max_taps * A_TAP;
    const int trans_bytes = WGMMA_CHUNKS * chunk_stride;
    unsigned char* const raw_base = smem + a_bytes;
    unsigned char* const trans_base = raw_base + SPLIT_RAW * raw_bytes;
    unsigned char* const parts = trans_base + SPLIT_STAGES * trans_bytes;
    const unsigned barriers = shared_address(parts + 8 * SPLIT_PART_BYTES);  // full[b] at + 8 b, empty[b] at + 8 (STAGES + b)

    // The weight's row tile (every thread), and the barriers.
    {
        copy_weight_rows<T, Index, BM, SPLIT_THREADS>(smem, weight, p, group, kernel_w, out_channels, channels_padded, rows, m_tile, 0,
                                                      slices, taps, max_taps, tid);
        cp_async_commit();
        if (tid == 0) {
            for (int b = 0; b < SPLIT_STAGES; ++b) {
                mbarrier_init(barriers + 8 * b, 128);                  // full: every producer thread
                mbarrier_init(barriers + 8 * (SPLIT_STAGES + b), 8);   // empty: lane 0 of every consumer warp
            }
            fence_mbarrier_init();
        }
        cp_async_wait_all();
        fence_proxy_async();
        __syncthreads();
    }
    const int steps = my_items * slices;

    if (warpgroup == 2) {
        // The producer.  Step k (item i, slice s): raw buffer k % SPLIT_RAW,
        // window buffer k % SPLIT_STAGES.
        const int ptid = tid - 256;
        constexpr int LANES = 128 / BK;  // threads a channel row
        const int my_channel = ptid / LANES, my_lane = ptid % LANES;
        int item_first = 0;   // window_first of the item being loaded
        Index item_rows = 0;  // and its first channel row
        auto load_raw = [&](int k, int i, int s) {
            if (s == 0) {
                int n, q0;
                work.item<BN>(i, n, q0);
                item_first = floor_to(lo_base + q0, VEC);
                item_rows = (static_cast<Index>(n) * groups + group) * channels;
            }
            const int channel = s * BK + my_channel;
            copy_window_row<T, COPY, LANES>(raw_base + (k % SPLIT_RAW) * raw_bytes + my_channel * raw_row,
                                            in + (item_rows + channel) * static_cast<Index>(in_w) + item_first, in, channel, channels,
                                            item_first, in_w, window_vectors, my_lane);
        };
        constexpr int AHEAD = SPLIT_RAW - 1;  // steps loaded ahead of the one transposed
#pragma unroll
        for (int j = 0; j < AHEAD; ++j) {
            if (j < steps) load_raw(j, j / slices, j % slices);
            cp_async_commit();
        }
        const int lane = ptid % 32, pw = ptid / 32;
        for (int i = 0, k = 0; i < my_items; ++i) {
            for (int s = 0; s < slices; ++s, ++k) {
                cp_async_wait_group<AHEAD - 1>();  // this thread's copies of step k are here
                split_producer_sync();             // ... every producer thread's; raw buffer (k + AHEAD) % SPLIT_RAW is free
                if (k + AHEAD < steps) {
                    int i2 = i, s2 = s + AHEAD;
                    for (int wrap = 0; wrap < AHEAD && s2 >= slices; ++wrap) s2 -= slices, ++i2;
                    load_raw(k + AHEAD, i2, s2);
                }
                cp_async_commit();
                const int b = k % SPLIT_STAGES;
                if (k >= SPLIT_STAGES) mbarrier_wait(barriers + 8 * (SPLIT_STAGES + b), (k / SPLIT_STAGES + 1) & 1);
                // The transpose (as conv_wgmma_resident's, over 4 warps):
                // vector v's four chunks' 8 x 8 blocks in one ldmatrix.x4.trans
                // and out in one stmatrix.x4.
                transpose_slice16<4, SPLIT_TRANSPOSE_AT_ONCE>(raw_base + (k % SPLIT_RAW) * raw_bytes, trans_base + b * trans_bytes, raw_row,
                                                              chunk_stride, window_vectors, pw, lane);
                fence_proxy_async();
                mbarrier_arrive(barriers + 8 * b);
            }
        }
        return;
    }

    // The consumers.
    const int wm = warpgroup * 64;
    const int lane = tid % 32, w = (tid / 32) % 4;
    const int row0 = m_tile * BM + wm + 16 * w;  // this warp's first output channel
    unsigned* const staged = reinterpret_cast<unsigned*>(parts + (tid / 32) * SPLIT_PART_BYTES);
    const bool direct_rows = p.out_step == 1 && row0 + 16 <= rows && out_w % 2 == 0 && p.out_base % 2 == 0 &&
                             reinterpret_cast<unsigned long long>(out) % (2 * sizeof(T)) == 0;
    const T* const part_bias = bias != nullptr ? bias + group * out_channels + row0 : nullptr;
    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;

    // Item i's part: staged, its rows returned for write_part16; or, where
    // it is not all in the output, written one by one (nullptr returned).
    auto epilogue = [&](int i) -> T* {
        int n, q0;
        work.item<BN>(i, n, q0);
        T* const out_rows = out + (static_cast<Index>(n) * groups + group) * out_channels * static_cast<Index>(out_w);
        if (direct_rows && q0 + BN <= p.count && p.out_base + q0 >= 0 && p.out_base + q0 + BN <= out_w) {
            __syncwarp();  // the previous part's writes have read the staging area (write_part16 syncs the warp before reading)
            if (part_bias != nullptr) {
                stage_part16<T, true>(acc, staged, SPLIT_PART_WORDS, part_bias, lane);
            } else {
                stage_part16<T, false>(acc, staged, SPLIT_PART_WORDS, part_bias, lane);
            }
            return out_rows + row0 * static_cast<Index>(out_w) + p.out_base + q0;
        }
        // One by one: rows g and g + 8, columns 8 j + 2 t4 (+ 1) of this warp's part.
        const int g = lane / 4, t4 = lane % 4;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = row0 + g + 8 * h;
            if (r >= rows) continue;
            const float b = bias != nullptr ? ValueTraits<T>::to_acc(bias[group * out_channels + r]) : 0.0f;
            T* const row = out_rows + r * static_cast<Index>(out_w);
#pragma unroll
            for (int j = 0; j < 16; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int q = q0 + 8 * j + 2 * t4 + e;
                    const int o = p.out_base + q * p.out_step;
                    if (q < p.count && o >= 0 && o < out_w) row[o] = ValueTraits<T>::from_acc(acc[4 * j + 2 * h + e] + b);
                }
        }
        return nullptr;
    };

    if (slices == 0) {
        for (int i = 0; i < my_items; ++i) {
            T* const rows_out = epilogue(i);
            if (rows_out != nullptr) write_part16<T, Index>(staged, SPLIT_PART_WORDS, rows_out, out_w, lane);
        }
        return;
    }
    const unsigned base = shared_address(smem);
    const unsigned long long a_desc = wgmma_descriptor(base + (wm / 8) * (WGMMA_CHUNKS * 128), 128, WGMMA_CHUNKS * 128);
    const unsigned long long b_desc = wgmma_descriptor(base + static_cast<unsigned>(trans_base - smem) + head * 16, chunk_stride, 128);
    const int b_first = p.tap_in_step < 0 ? (taps - 1) * -p.tap_in_step : 0;
    for (int i = 0, k = 0; i < my_items; ++i) {
        for (int s = 0; s < slices; ++s, ++k) {
            const int b = k % SPLIT_STAGES;
            mbarrier_wait(barriers + 8 * b, (k / SPLIT_STAGES) & 1);
            // The warpgroup's own barrier: without a convergence point here
            // ptxas put a warpgroup.arrive in a path it took as divergent
            // and serialized every wgmma (C7520: each followed by a wait for
            // it; perf notes v55).
            split_consumer_sync(warpgroup);
            pin(acc);
            slice_mmas<T, WGMMA_STRAIGHT_TAPS>(acc, taps, a_desc + ((s * max_taps * A_TAP) >> 4), A_TAP >> 4,
                                               b_desc + ((b * trans_bytes) >> 4), b_first, p.tap_in_step, chunk_stride, s > 0);
            wgmma_wait<1>();  // step k - 1's MMAs are done: its buffer is free
            mbarrier_arrive_if(barriers + 8 * (SPLIT_STAGES + (k + SPLIT_STAGES - 1) % SPLIT_STAGES), s > 0 && lane == 0);
        }
        wgmma_wait<0>();
        pin(acc);
        if (lane == 0) mbarrier_arrive(barriers + 8 * (SPLIT_STAGES + (k + SPLIT_STAGES - 1) % SPLIT_STAGES));
        T* const rows_out = epilogue(i);
        if (rows_out != nullptr) write_part16<T, Index>(staged, SPLIT_PART_WORDS, rows_out, out_w, lane);
    }
#endif
}

// grad_weight_wgmma: grad_weight of a stride-1 1D problem (16-bit) on wgmma.
//
// Per tap t, GEMM D_t[co][ci] = sum over (n, l) of gy[n, co, l - padding +
// t * dilation] * x[n, ci, l]: rows the output channels co (wgmma's M, 64 a
// block), columns the input channels ci (N = BN), the reduction the input
// positions.  The reduction is split: block (split, group, co tile, ci tile)
// sums items first .. first + per_split of (image n, chunk of GW_POSITIONS
// positions) and writes its tile, for every tap, as doubles to
// workspace[split]; sum_splits adds the splits in order (bitwise repeatable).
//
// Per item, both operands are staged in shared memory for every tap:
//   * x (B, K-major as in global memory): BN channel rows x 128 positions,
//     by 16-byte cp.async into two 128-byte-swizzled atoms of 64 positions
//     (one per warpgroup): channel ci's 16-byte chunk c (positions 64 h +
//     8c..) at h * BN * 128 + ci * 128 + 16 (c ^ ci % 8).  A warp copies 4
//     rows x 128 bytes, each into one 128-byte line of shared memory, so L1
//     merges each row's 8 copies into one L2 request (perf notes v24: the
//     unswizzled core matrices, 16 bytes a line, took one request a copy).
//     Loaded GW_AHEAD items ahead (three: P2 2.21-2.27 ms against 2.40 with
//     two, perf notes v14).
//   * gy (A): the window of every position the taps reach, 64 channel rows,
//     by cp.async of COPY bytes (grad_output rows of out_w elements need not
//     be whole vectors) into raw [channel][position] buffers, then
//     transposed into conv_wgmma's window layout (chunk c of 8 channels,
//     position v at c * chunk_stride + 16 v): read M-major, tap t's operand
//     is the window moved by t * dilation positions (16 bytes each).
// BN 32 or 64: the warpgroups split each item's positions (64 each, 4
// k-steps of 16) and keep MAX_TAPS accumulators of 64 x BN; at the end
// warpgroup 1's partial goes through shared memory and warpgroup 0 adds it
// and writes the tile.  BN 128: the warpgroups split the input channels (64
// each, their rows of both atoms) and each takes every position of the item
// (8 k-steps), so one transposed window serves twice the MMAs and grad_output
// is read once per 128 input channels; each writes its own 64 x 64 tiles.
// Its x tiles being twice as large, it loads two items ahead, not three.
//
// Requirements checked by the host: compute capability 9.0 (sm_90a), stride
// 1, in_w a multiple of 8, out_w a multiple of COPY / 2, kernel_w <=
// MAX_TAPS, 16-byte-aligned x and gy.
constexpr int GW_POSITIONS = 128;               // reduction positions per item
constexpr int GW_AHEAD = 3;                     // items loaded ahead of the one in use
constexpr int GW_RAW_BUFFERS = GW_AHEAD + 1;    // raw windows: those ahead and the one transposed
constexpr int GW_X_BUFFERS = GW_AHEAD + 2;      // x tiles: those, and the one the MMAs may still read

// Raw 16-bit [channel][position] rows (channel ch's row of `vectors` 16-byte
// vectors at ch * raw_row + (ch / 4) * 16) into the transposed window: chunk
// c (8 channels), position v at c * chunk_stride + 16 v.  Task (chunk, half,
// vector) reads 4 channels' 16 bytes and writes 8 positions' 8 bytes.
template <int CHUNKS, int THREADS>
__device__ __forceinline__ void transpose_window16(const unsigned char* src0, unsigned char* dst0, int raw_row, int chunk_stride, int vectors, int tid) {
    const int total = 2 * CHUNKS * vectors;
    for (int task = tid; task < total; task += THREADS) {
        const int chunk = task % CHUNKS, half = task / CHUNKS % 2, v = task / (2 * CHUNKS);
        const int c0 = 8 * chunk + 4 * half;
        const unsigned char* src = src0 + c0 * raw_row + (c0 / 4) * 16 + v * 16;
        uint4 raw[4];  // raw[e]: channel c0 + e at 8 positions
#pragma unroll
        for (int e = 0; e < 4; ++e) raw[e] = *reinterpret_cast<const uint4*>(src + e * raw_row);
        store_positions16(raw, dst0 + chunk * chunk_stride + v * 128 + half * 8);
    }
}

// One warpgroup's MMAs of an item: taps t < `taps` (<= MAX_TAPS) of its
// ATOMS x 64 positions, 4 k-steps of 16 each per 64; window: its first
// position's row for tap 0 (taps step `dilation` rows of 16 bytes), x_atom:
// the first of its 128-byte-swizzled atoms of x (NW channel rows; a k-step
// is 32 bytes further along each row, the next 64 positions atom_bytes on).
// The recursion picks the tap count as a constant, so the MMAs are one
// straight run with no branch among them, committed as one group.
template <typename T, int NW, int MAX_TAPS, int ATOMS, int N = MAX_TAPS>
__device__ __forceinline__ void grad_weight_mmas(float (&acc)[MAX_TAPS][NW / 2], int taps, unsigned window, int dilation,
                                                 int chunk_stride, unsigned x_atom, int atom_bytes) {
    if constexpr (N > 1) {
        if (taps < N) {
            grad_weight_mmas<T, NW, MAX_TAPS, ATOMS, N - 1>(acc, taps, window, dilation, chunk_stride, x_atom, atom_bytes);
            return;
        }
    }
#pragma unroll
    for (int t = 0; t < N; ++t)
#pragma unroll
        for (int h = 0; h < ATOMS; ++h)
#pragma unroll
            for (int ks = 0; ks < 4; ++ks) {
                // A: M-major, K-adjacent core matrices (8 positions) 128 bytes apart, M-adjacent (8 channels) chunk_stride
                const unsigned long long a = wgmma_descriptor(window + (h * 64 + ks * 16 + t * dilation) * 16, 128, chunk_stride);
                // B: K-major, 128-byte-swizzled, 8-channel groups 1024 bytes apart
                const unsigned long long b = wgmma_descriptor_fields(16, 1024, true) | (((x_atom + h * atom_bytes + ks * 32) >> 4) & 0x3FFF);
                wgmma_m64k16_mn_a<T, NW>(acc[t], a, b);
            }
    wgmma_commit();  // here, not after the caller's branches join: there ptxas would commit an empty group of its own
}

template <typename T, typename Index, int BN, int MAX_TAPS, int COPY>
__global__ void __launch_bounds__(WGMMA_THREADS, 1) grad_weight_wgmma(
    const T* __restrict__ x,          // (batch, groups * channels, in_w)
    const T* __restrict__ gy,         // (batch, groups * out_channels, out_w)
    double* __restrict__ workspace,   // (splits, groups * channels, out_channels, kernel_w)
    int batch, int groups, int channels, int out_channels, int in_w, int out_w, int kernel_w,
    int padding, int dilation, int window_vectors, int chunk_stride, int per_split, int co_tiles, int ci_tiles) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(sizeof(T) == 2, "16-bit operands only (wgmma transposes no others)");
    static_assert(BN == 32 || BN == 64 || BN == 128, "wgmma.m64n32 or m64n64 (BN 128: two of 64)");
    // BN 128: the warpgroups take 64 input channels each over all of an
    // item's positions; else half of its positions each over all BN channels.
    constexpr bool SPLIT_CI = BN == 128;
    constexpr int NW = SPLIT_CI ? BN / 2 : BN;      // a warpgroup's wgmma N
    constexpr int AHEAD = SPLIT_CI ? 2 : GW_AHEAD;  // (shared memory: BN 128's x tiles are twice as large)
    constexpr int RAW_BUFFERS = AHEAD + 1, X_BUFFERS = AHEAD + 2;  // as GW_RAW_BUFFERS, GW_X_BUFFERS
    constexpr int VEC = 8, UNIT = COPY / 2, BM = 64;
    constexpr int X_ATOM = BN * 128;                // bytes of one x atom (64 positions of BN channels)
    constexpr int X_BYTES = BN * GW_POSITIONS * 2;  // two atoms
    constexpr int ACC = NW / 2;
    static_assert((COPY == 16 || COPY == 8 || COPY == 4) && BN * GW_POSITIONS / 8 % WGMMA_THREADS == 0, "copies");
    static_assert(GW_POSITIONS == 128 && X_BYTES % 1024 == 0, "two 1024-byte-aligned atoms an x tile");

    extern __shared__ __align__(1024) unsigned char smem[];  // the x atoms are 1024-byte aligned (at the start)
    const int tid = threadIdx.x;
    const int warpgroup = tid / 128;

    int b = blockIdx.x;
    const int ci_tile = b % ci_tiles;
    b /= ci_tiles;
    const int co_tile = b % co_tiles;
    b /= co_tiles;
    const int group = b % groups;
    const int split = b / groups;
    const int chunks = (in_w + GW_POSITIONS - 1) / GW_POSITIONS;
    const int first = split * per_split;
    const int steps = max(0, min(batch * chunks, first + per_split) - first);
    const int taps = kernel_w;
    // An item's window starts at window_first = floor_to(l0 - padding, 8) (l0 is a multiple of 8);
    // position l0 - padding is window row shift0.
    const int shift0 = -padding - floor_to(-padding, VEC);

    const int raw_row = window_vectors * 16;
    const int raw_bytes = (BM * raw_row + (BM / 4) * 16 + 127) / 128 * 128;
    const int trans_bytes = (BM / 8) * chunk_stride;
    unsigned char* const x_base = smem;
    unsigned char* const raw_base = smem + X_BUFFERS * X_BYTES;
    unsigned char* const trans_base = raw_base + RAW_BUFFERS * raw_bytes;

    // Item k's x tile and gy window into their buffers (the caller commits).
    const int my_row = tid / 4, my_lane = tid % 4;  // gy: 4 threads per channel row
    auto load = [&](int k) {
        const int item = first + k;
        const int n = item / chunks, l0 = item % chunks * GW_POSITIONS;
        // x: two atoms of 64 positions (X_ATOM bytes apart)
        const T* const image = x + (static_cast<Index>(n) * groups + group) * channels * static_cast<Index>(in_w);
        copy_x_atoms<T, Index, BN, GW_POSITIONS / 64, WGMMA_THREADS>(x_base + (k % X_BUFFERS) * X_BYTES, image, x, ci_tile * BN, channels, l0, in_w);
        // gy: positions window_first .. of channel co's row, COPY bytes a copy
        const int co = co_tile * BM + my_row;
        const int window_first = l0 - padding - shift0;  // a multiple of 8
        const bool row_ok = co < out_channels;
        const T* const src = gy + ((static_cast<Index>(n) * groups + group) * out_channels + co) * static_cast<Index>(out_w) + window_first;
        unsigned char* const dst = raw_base + (k % RAW_BUFFERS) * raw_bytes + my_row * raw_row + (my_row / 4) * 16;
        const int copies = window_vectors * (16 / COPY);
        if (row_ok && window_first >= 0 && window_first + copies * UNIT <= out_w) {
            // wholly inside the row: no checks (the checked loop was 40% of P2's instructions: perf notes v22)
            for (int u = my_lane; u < copies; u += 4) cp_async_vector<COPY>(dst + u * COPY, src + u * UNIT, true);
        } else {
            for (int u = my_lane; u < copies; u += 4) {
                const int l = window_first + u * UNIT;
                const bool valid = row_ok && l >= 0 && l < out_w;  // out_w % UNIT == 0: all or nothing
                cp_async_vector<COPY>(dst + u * COPY, valid ? src + u * UNIT : gy, valid);
            }
        }
    };

    float acc[MAX_TAPS][ACC];
#pragma unroll
    for (int t = 0; t < MAX_TAPS; ++t)
#pragma unroll
        for (int i = 0; i < ACC; ++i) acc[t][i] = 0.0f;

    const unsigned base = shared_address(smem);
    const unsigned trans_address = base + static_cast<unsigned>(trans_base - smem);
#pragma unroll
    for (int k = 0; k < AHEAD; ++k) {
        if (k < steps) load(k);
        cp_async_commit();
    }
    for (int k = 0; k < steps; ++k) {
        cp_async_wait_group<AHEAD - 1>();  // item k's tiles are here (later ones may not be)
        // ... for every thread.  Free now: raw buffer (k + AHEAD) % RAW_BUFFERS (item k - 1's,
        // transposed), window k % 2 and x tile (k + AHEAD) % X_BUFFERS (item k - 2's MMAs are done)
        __syncthreads();
        transpose_window16<BM / 8, WGMMA_THREADS>(raw_base + (k % RAW_BUFFERS) * raw_bytes, trans_base + (k % 2) * trans_bytes,
                                                  raw_row, chunk_stride, window_vectors, tid);
        if (k + AHEAD < steps) load(k + AHEAD);
        cp_async_commit();
        fence_proxy_async();
        __syncthreads();  // window k % 2 is written
#pragma unroll
        for (int t = 0; t < MAX_TAPS; ++t) pin(acc[t]);
        wgmma_fence();
        const unsigned window = trans_address + (k % 2) * trans_bytes;
        const unsigned x_tile = base + (k % X_BUFFERS) * X_BYTES;
        // The item's MMAs for its `taps` taps (a branch between wgmma
        // instructions would make ptxas close a group there, and the wait
        // below then wait for all of them: no overlap with the next item).
        if constexpr (SPLIT_CI)  // channels 64 w.. of both atoms (8 KB into each), every position
            grad_weight_mmas<T, NW, MAX_TAPS, 2>(acc, taps, window + shift0 * 16, dilation, chunk_stride, x_tile + warpgroup * (NW * 128),
                                                 X_ATOM);  // and commits them
        else  // positions 64 w.., every channel
            grad_weight_mmas<T, NW, MAX_TAPS, 1>(acc, taps, window + (shift0 + warpgroup * (GW_POSITIONS / 2)) * 16, dilation,
                                                 chunk_stride, x_tile + warpgroup * X_ATOM, X_ATOM);
        wgmma_wait<1>();
    }
    wgmma_wait<0>();
#pragma unroll
    for (int t = 0; t < MAX_TAPS; ++t) pin(acc[t]);
    cp_async_wait_all();

    const int lane = tid % 32, w = (tid / 32) % 4;
    const int g = lane / 4, t4 = lane % 4;
    // BN 128: each warpgroup writes its own 64 input channels.  Else
    // warpgroup 1's partial goes through shared memory (every buffer is free
    // once all threads are here) and warpgroup 0 adds it and writes the tile.
    float* const stage = reinterpret_cast<float*>(smem);  // [tap][row 64][BN], MAX_TAPS x 64 x BN floats (host: shared bytes)
    if constexpr (!SPLIT_CI) {
        __syncthreads();
        if (warpgroup == 1) {
#pragma unroll
            for (int t = 0; t < MAX_TAPS; ++t)
                if (t < taps) stage_accumulators<BN>(acc[t], stage, BN, t * BM, 0, w, g, t4);
        }
        __syncthreads();
    }
    if (SPLIT_CI || warpgroup == 0) {
        double* const out = workspace + (static_cast<Index>(split) * groups + group) * channels * static_cast<Index>(out_channels) * kernel_w;
        const int col0 = SPLIT_CI ? warpgroup * NW : 0;
#pragma unroll
        for (int t = 0; t < MAX_TAPS; ++t)
            if (t < taps)
#pragma unroll
                for (int j = 0; j < NW / 8; ++j)
#pragma unroll
                    for (int h = 0; h < 2; ++h)
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            const int row = 16 * w + g + 8 * h, col = col0 + 8 * j + 2 * t4 + e;
                            const int co = co_tile * BM + row, ci = ci_tile * BN + col;
                            float value = acc[t][4 * j + 2 * h + e];
                            if constexpr (!SPLIT_CI) value += stage[(t * BM + row) * BN + col];
                            if (co < out_channels && ci < channels)
                                out[(static_cast<Index>(ci) * out_channels + co) * kernel_w + t] = static_cast<double>(value);
                        }
    }
#endif
}
