// Strided correlation as an implicit GEMM: the transposed convolution's
// forward pass (one launch covers every polyphase phase) and its grad_input.
//
// For one group g, one phase (ph, pw) and one column col = (n, qh, qw):
//
//   out[n, g*M + m, oh, ow] = bias[g*M + m]
//       + sum_{th < ph.tap_count} sum_{tw < pw.tap_count} sum_{c < C}
//             weight[A(g, m, c, kh, kw)] * in[n, g*C + c, ih, iw]
//
//   with oh = ph.out_base + qh * ph.out_step,   kh = ph.tap_first + th * ph.tap_step,
//        ih = ph.in_base + qh * ph.in_step + th * ph.tap_in_step     (likewise w),
//        A(g, m, c, kh, kw) = g * w_stride_group + m * w_stride_m + c * w_stride_c + kh * KW + kw.
//
// GEMM shape per (group, phase): rows m < M (out_channels), columns over
// (n, qh, qw), reduction over (tap, c).  The forward pass reads x with
// weight[ci, j, kh, kw] as A (m = j, c = ci); grad_input reads grad_output with
// the same weight transposed (m = ci, c = j).  Only taps that reach a phase
// are ever visited: no thread tests `% stride`.
//
// Tiling: a block computes a BM x BN tile of one (group, phase) and walks the
// reduction in BK-deep slices, tap by tap (so one slice shares a single input
// shift), staging A and B through double-buffered shared memory (as the
// accumulator type).  What multiplies the staged slices is a policy:
//   * SimtMath (conv_gemm): each thread owns a TM x TN block of accumulators
//     and runs FFMA (DFMA for double);
//   * MmaMath (conv_mma): each warp owns a tile of m16n8 accumulator
//     fragments and runs mma.sync on tensor cores (sm_80 and later):
//     TF32 m16n8k8 for float (PASSES 1) or 3xTF32 (PASSES 3: each operand
//     split into a TF32 high and low part, three products), FP16/BF16
//     m16n8k16 for the 16-bit types; float accumulators throughout.
#include "common.cuh"

// ---------------------------------------------------------------------------
// Math policies.  Each stages slices as Acc in shared memory, rows padded by
// PAD elements, and provides:
//   Frag                      the thread's accumulators
//   zero(frag)
//   slice(a, b, frag, tid)    frag += the BK-deep slice a[BK][BM+PAD] x b[BK][BN+PAD]
//   stage(frag, out, r0, tid) write rows [r0, r0 + STAGE_ROWS) of the tile to out[row - r0][col]

template <typename T, int BM_, int BN_, int BK_, int TM, int TN>
struct SimtMath {
    typedef typename ValueTraits<T>::acc Acc;
    static constexpr int BM = BM_, BN = BN_, BK = BK_, PAD = 0;
    static constexpr int THREADS = (BM / TM) * (BN / TN);
    struct Frag {
        Acc v[TM][TN];
    };
    static __device__ __forceinline__ void zero(Frag& f) {
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) f.v[i][j] = Acc(0);
    }
    static __device__ __forceinline__ void slice(const Acc (&a)[BK][BM + PAD], const Acc (&b)[BK][BN + PAD], Frag& f,
                                                 int tid) {
        const int ty = tid / (BN / TN), tx = tid % (BN / TN);
        if constexpr (sizeof(Acc) == 8) {
            // float64: blocked sums (registers allow it; float32 keeps the
            // plain chain, which already matches cuDNN's error)
            accumulate_slice_blocked<Acc, BM, BN, BK, TM, TN>(a, b, f.v, ty, tx);
        } else {
            accumulate_slice<Acc, Acc, BM, BN, BK, TM, TN>(a, b, f.v, ty, tx);
        }
    }
    template <int STAGE_ROWS>
    static __device__ __forceinline__ void stage(const Frag& f, Acc (&out)[STAGE_ROWS][BN + PAD], int r0, int tid) {
        const int ty = tid / (BN / TN), tx = tid % (BN / TN);
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int row = fragment_index<BM, TM>(ty, i) - r0;
            if (row >= 0 && row < STAGE_ROWS) {
#pragma unroll
                for (int j = 0; j < TN; ++j) out[row][fragment_index<BN, TN>(tx, j)] = f.v[i][j];
            }
        }
    }
};

// Tensor-core operand registers from float values (which hold exact T values).
__device__ __forceinline__ unsigned to_tf32(float v) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
    return r;
}
// Two values in one register, `first` in the low half (the lower k index).
template <typename T>
__device__ __forceinline__ unsigned pack2(float first, float second);
template <>
__device__ __forceinline__ unsigned pack2<half_t>(float first, float second) {
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(second), "f"(first));
    return r;
}
template <>
__device__ __forceinline__ unsigned pack2<bfloat16_t>(float first, float second) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(second), "f"(first));
    return r;
}

__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <typename T>
__device__ __forceinline__ void mma_16bit(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]);
template <>
__device__ __forceinline__ void mma_16bit<half_t>(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <>
__device__ __forceinline__ void mma_16bit<bfloat16_t>(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Warp tiles of m16n8 fragments.  Fragment layouts (PTX ISA, mma.m16n8k8 /
// m16n8k16; g = lane / 4, t = lane % 4):
//   A (row-major 16 x K):  rows g and g + 8; k = t and t + 4 (tf32), or the
//                          pairs 2t, 2t + 1 and 2t + 8, 2t + 9 (16-bit)
//   B (col-major K x 8):   column g; k as for A's columns
//   C (16 x 8, float):     rows g and g + 8, columns 2t and 2t + 1
// Rows of the staged slices are padded by 4 floats, so that the 32 lanes'
// fragment reads (row stride 4 words apart in banks) never conflict.
template <typename T, int BM_, int BN_, int BK_, int WARPS_M, int WARPS_N, int PASSES>
struct MmaMath {
    typedef float Acc;
    static constexpr int BM = BM_, BN = BN_, BK = BK_, PAD = 4;
    static constexpr int THREADS = 32 * WARPS_M * WARPS_N;
    static constexpr bool TF32 = sizeof(T) == 4;
    static constexpr int KSTEP = TF32 ? 8 : 16;
    static constexpr int WARP_M = BM / WARPS_M, WARP_N = BN / WARPS_N;
    static constexpr int MI = WARP_M / 16, NI = WARP_N / 8;
    static_assert(sizeof(T) == 4 || sizeof(T) == 2, "tensor cores here take float, half or bfloat16");
    static_assert(TF32 || PASSES == 1, "3xTF32 is for float");
    static_assert(BK % KSTEP == 0 && WARP_M % 16 == 0 && WARP_N % 8 == 0, "tile must split into mma shapes");
    struct Frag {
        float v[MI][NI][4];
    };
    static __device__ __forceinline__ void zero(Frag& f) {
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) f.v[i][j][e] = 0.0f;
    }
    static __device__ __forceinline__ void slice(const float (&a)[BK][BM + PAD], const float (&b)[BK][BN + PAD], Frag& f,
                                                 int tid) {
        const int warp = tid / 32, lane = tid % 32;
        const int m0 = (warp / WARPS_N) * WARP_M + lane / 4;
        const int n0 = (warp % WARPS_N) * WARP_N + lane / 4;
        const int t = lane % 4;
#pragma unroll
        for (int k0 = 0; k0 < BK; k0 += KSTEP) {
            if constexpr (TF32) {
                unsigned a_hi[MI][4], a_lo[MI][4], b_hi[NI][2], b_lo[NI][2];
#pragma unroll
                for (int i = 0; i < MI; ++i) {
                    const int m = m0 + i * 16;
                    const float v[4] = {a[k0 + t][m], a[k0 + t][m + 8], a[k0 + t + 4][m], a[k0 + t + 4][m + 8]};
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        a_hi[i][e] = to_tf32(v[e]);
                        if constexpr (PASSES == 3) a_lo[i][e] = to_tf32(v[e] - __uint_as_float(a_hi[i][e]));
                    }
                }
#pragma unroll
                for (int j = 0; j < NI; ++j) {
                    const int n = n0 + j * 8;
                    const float v[2] = {b[k0 + t][n], b[k0 + t + 4][n]};
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        b_hi[j][e] = to_tf32(v[e]);
                        if constexpr (PASSES == 3) b_lo[j][e] = to_tf32(v[e] - __uint_as_float(b_hi[j][e]));
                    }
                }
#pragma unroll
                for (int i = 0; i < MI; ++i)
#pragma unroll
                    for (int j = 0; j < NI; ++j) {
                        if constexpr (PASSES == 3) {  // the small terms first
                            mma_tf32(f.v[i][j], a_lo[i], b_hi[j]);
                            mma_tf32(f.v[i][j], a_hi[i], b_lo[j]);
                        }
                        mma_tf32(f.v[i][j], a_hi[i], b_hi[j]);
                    }
            } else {
                unsigned a_reg[MI][4], b_reg[NI][2];
#pragma unroll
                for (int i = 0; i < MI; ++i) {
                    const int m = m0 + i * 16;
                    a_reg[i][0] = pack2<T>(a[k0 + 2 * t][m], a[k0 + 2 * t + 1][m]);
                    a_reg[i][1] = pack2<T>(a[k0 + 2 * t][m + 8], a[k0 + 2 * t + 1][m + 8]);
                    a_reg[i][2] = pack2<T>(a[k0 + 2 * t + 8][m], a[k0 + 2 * t + 9][m]);
                    a_reg[i][3] = pack2<T>(a[k0 + 2 * t + 8][m + 8], a[k0 + 2 * t + 9][m + 8]);
                }
#pragma unroll
                for (int j = 0; j < NI; ++j) {
                    const int n = n0 + j * 8;
                    b_reg[j][0] = pack2<T>(b[k0 + 2 * t][n], b[k0 + 2 * t + 1][n]);
                    b_reg[j][1] = pack2<T>(b[k0 + 2 * t + 8][n], b[k0 + 2 * t + 9][n]);
                }
#pragma unroll
                for (int i = 0; i < MI; ++i)
#pragma unroll
                    for (int j = 0; j < NI; ++j) mma_16bit<T>(f.v[i][j], a_reg[i], b_reg[j]);
            }
        }
    }
    template <int STAGE_ROWS>
    static __device__ __forceinline__ void stage(const Frag& f, float (&out)[STAGE_ROWS][BN + PAD], int r0, int tid) {
        const int warp = tid / 32, lane = tid % 32;
        const int m0 = (warp / WARPS_N) * WARP_M + lane / 4;
        const int n0 = (warp % WARPS_N) * WARP_N + 2 * (lane % 4);
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int row = m0 + i * 16 + half * 8 - r0;
                if (row >= 0 && row < STAGE_ROWS) {
#pragma unroll
                    for (int j = 0; j < NI; ++j) {
                        out[row][n0 + j * 8] = f.v[i][j][2 * half];
                        out[row][n0 + j * 8 + 1] = f.v[i][j][2 * half + 1];
                    }
                }
            }
    }
};

// ---------------------------------------------------------------------------
// The kernel body, shared by both policies.

template <typename T, typename Index, typename Math>
__device__ __forceinline__ void conv_gemm_body(
    const T* __restrict__ in,        // (batch, groups * red_channels, in_h, in_w)
    const T* __restrict__ weight,    // (C_in, C_out / groups, kernel_h, kernel_w), read through A(...)
    const T* __restrict__ bias,      // (groups * out_channels,), or null for none
    T* __restrict__ out,             // (batch, groups * out_channels, out_h, out_w)
    const int* __restrict__ phases,  // phases_h AxisPhase records for H, then phases_w for W
    int phases_h, int phases_w,
    int batch, int groups,
    int red_channels,  // C: reduction channels per group
    int out_channels,  // M: output channels per group
    int in_h, int in_w, int out_h, int out_w, int kernel_w,
    long long w_stride_group, long long w_stride_m, long long w_stride_c,
    int cols_h, int cols_w,  // column grid per image: the largest phase's (qh, qw) extent
    int m_tiles, int col_tiles) {
    typedef typename Math::Acc Acc;
    constexpr int BM = Math::BM, BN = Math::BN, BK = Math::BK, PAD = Math::PAD;
    constexpr int THREADS = Math::THREADS;
    constexpr int A_ROWS_STEP = THREADS / BM;
    constexpr int B_ROWS_STEP = THREADS / BN;
    constexpr int A_PER_THREAD = BK / A_ROWS_STEP;
    constexpr int B_PER_THREAD = BK / B_ROWS_STEP;
    static_assert(THREADS % BM == 0 && BK % A_ROWS_STEP == 0, "A tile must split evenly over the threads");
    static_assert(THREADS % BN == 0 && BK % B_ROWS_STEP == 0, "B tile must split evenly over the threads");

    __shared__ __align__(16) Acc a_tile[2][BK][BM + PAD];
    __shared__ __align__(16) Acc b_tile[2][BK][BN + PAD];

    // Block -> (phase, m tile, column tile, group).  The phase varies fastest so
    // that blocks writing the interleaved phases of one output region run
    // together and their partial-sector writes merge in L2.
    unsigned block = blockIdx.x;
    const int num_phases = phases_h * phases_w;
    const int phase = block % num_phases;
    block /= num_phases;
    const int m_tile = block % m_tiles;
    block /= m_tiles;
    const int col_tile = block % col_tiles;
    const int group = block / col_tiles;
    const AxisPhase ph = load_axis_phase(phases, phase / phases_w);
    const AxisPhase pw = load_axis_phase(phases, phases_h + phase % phases_w);
    if (ph.count == 0 || pw.count == 0) return;  // phase holds no output position at all

    const int tid = threadIdx.x;
    const Index in_hw = static_cast<Index>(in_h) * in_w;
    const Index out_hw = static_cast<Index>(out_h) * out_w;
    const Index cols_per_image = static_cast<Index>(cols_h) * cols_w;
    const Index col_base = static_cast<Index>(col_tile) * BN;

    // The one column this thread loads B for and, in the epilogue, stores:
    // (n, qh, qw), the input position of its tap (0, 0) and its output pixel.
    const int load_col = tid % BN;
    const int b_row0 = tid / BN;
    bool load_col_valid;
    int ih0, iw0;
    Index in_col_offset, out_pixel;
    {
        const Index col = col_base + load_col;
        const Index n = col / cols_per_image;
        const Index rem = col - n * cols_per_image;
        const int qh = static_cast<int>(rem / cols_w);
        const int qw = static_cast<int>(rem - static_cast<Index>(qh) * cols_w);
        load_col_valid = n < batch && qh < ph.count && qw < pw.count;
        ih0 = ph.in_base + qh * ph.in_step;
        iw0 = pw.in_base + qw * pw.in_step;
        // (offsets of columns past the end are never used; keep them in range)
        in_col_offset = load_col_valid ? (n * groups + group) * static_cast<Index>(red_channels) * in_hw : Index(0);
        const int oh = ph.out_base + qh * ph.out_step;
        const int ow = pw.out_base + qw * pw.out_step;
        out_pixel = load_col_valid ? n * groups * static_cast<Index>(out_channels) * out_hw + static_cast<Index>(oh) * out_w + ow
                                   : Index(0);
    }
    // The one output channel this thread loads A for.
    const int a_m = tid % BM;
    const int a_row0 = tid / BM;
    const bool a_m_valid = m_tile * BM + a_m < out_channels;
    const Index a_offset = static_cast<Index>(group) * w_stride_group + static_cast<Index>(m_tile * BM + a_m) * w_stride_m;

    const int c_tiles = (red_channels + BK - 1) / BK;
    const int k_tiles = ph.tap_count * pw.tap_count * c_tiles;

    Acc a_reg[A_PER_THREAD];
    Acc b_reg[B_PER_THREAD];

    // Fetch reduction slice kt = (tap, channel block) into registers.
    auto fetch = [&](int kt) {
        const int tap = kt / c_tiles;
        const int c0 = (kt - tap * c_tiles) * BK;
        const int th = tap / pw.tap_count;
        const int tw = tap - th * pw.tap_count;
        const int kh = ph.tap_first + th * ph.tap_step;
        const int kw = pw.tap_first + tw * pw.tap_step;
        const int ih = ih0 + th * ph.tap_in_step;
        const int iw = iw0 + tw * pw.tap_in_step;
        const bool inside = load_col_valid && ih >= 0 && ih < in_h && iw >= 0 && iw < in_w;
        const Index pixel = in_col_offset + static_cast<Index>(ih) * in_w + iw;
#pragma unroll
        for (int i = 0; i < B_PER_THREAD; ++i) {
            const int c = c0 + b_row0 + i * B_ROWS_STEP;
            b_reg[i] = (inside && c < red_channels) ? ValueTraits<T>::to_acc(in[pixel + static_cast<Index>(c) * in_hw])
                                                     : Acc(0);
        }
        const Index tap_offset = a_offset + static_cast<Index>(kh) * kernel_w + kw;
#pragma unroll
        for (int i = 0; i < A_PER_THREAD; ++i) {
            const int c = c0 + a_row0 + i * A_ROWS_STEP;
            a_reg[i] = (a_m_valid && c < red_channels)
                           ? ValueTraits<T>::to_acc(weight[tap_offset + static_cast<Index>(c) * w_stride_c])
                           : Acc(0);
        }
    };
    auto stash = [&](int buf) {
#pragma unroll
        for (int i = 0; i < B_PER_THREAD; ++i) b_tile[buf][b_row0 + i * B_ROWS_STEP][load_col] = b_reg[i];
#pragma unroll
        for (int i = 0; i < A_PER_THREAD; ++i) a_tile[buf][a_row0 + i * A_ROWS_STEP][a_m] = a_reg[i];
    };

    typename Math::Frag acc;
    Math::zero(acc);

    if (k_tiles > 0) {
        fetch(0);
        stash(0);
    }
    __syncthreads();
    for (int kt = 0; kt < k_tiles; ++kt) {
        const int buf = kt & 1;
        if (kt + 1 < k_tiles) fetch(kt + 1);  // global loads in flight during the math below
        Math::slice(a_tile[buf], b_tile[buf], acc, tid);
        if (kt + 1 < k_tiles) stash(buf ^ 1);
        __syncthreads();
    }

    // Epilogue: add the bias and write each output once.  The tile goes
    // through shared memory (the B buffers, 2*BK rows of BN at a time) so that
    // a warp stores consecutive columns: unit-stride outputs coalesce fully,
    // and a phase of stride s touches ~s sectors per 8 values instead of one
    // sector per value.  Each thread stores its load column (tid % BN).
    constexpr int STAGE_ROWS = 2 * BK;
    Acc(&stage)[STAGE_ROWS][BN + PAD] = *reinterpret_cast<Acc(*)[STAGE_ROWS][BN + PAD]>(&b_tile[0][0][0]);
#pragma unroll
    for (int r0 = 0; r0 < BM; r0 += STAGE_ROWS) {
        __syncthreads();  // the previous pass (or the main loop) is done with the buffer
        Math::template stage<STAGE_ROWS>(acc, stage, r0, tid);
        __syncthreads();
        if (load_col_valid) {
            for (int row = b_row0; row < STAGE_ROWS && r0 + row < BM; row += B_ROWS_STEP) {
                const int m = m_tile * BM + r0 + row;
                if (m >= out_channels) break;
                const int channel = group * out_channels + m;
                const Acc bias_value = bias != nullptr ? ValueTraits<T>::to_acc(bias[channel]) : Acc(0);
                out[out_pixel + static_cast<Index>(channel) * out_hw] = ValueTraits<T>::from_acc(stage[row][load_col] + bias_value);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The kernels.

#define CONV_GEMM_PARAMS                                                                                         \
    const T *__restrict__ in, const T *__restrict__ weight, const T *__restrict__ bias, T *__restrict__ out,      \
        const int *__restrict__ phases, int phases_h, int phases_w, int batch, int groups, int red_channels,     \
        int out_channels, int in_h, int in_w, int out_h, int out_w, int kernel_w, long long w_stride_group,      \
        long long w_stride_m, long long w_stride_c, int cols_h, int cols_w, int m_tiles, int col_tiles
#define CONV_GEMM_ARGS                                                                                       \
    in, weight, bias, out, phases, phases_h, phases_w, batch, groups, red_channels, out_channels, in_h, in_w, \
        out_h, out_w, kernel_w, w_stride_group, w_stride_m, w_stride_c, cols_h, cols_w, m_tiles, col_tiles

// FFMA (float, half, bfloat16) or DFMA (double) on CUDA cores.
template <typename T, typename Index, int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN)) conv_gemm(CONV_GEMM_PARAMS) {
    conv_gemm_body<T, Index, SimtMath<T, BM, BN, BK, TM, TN>>(CONV_GEMM_ARGS);
}

// mma.sync on tensor cores (sm_80 and later).
template <typename T, typename Index, int BM, int BN, int BK, int WARPS_M, int WARPS_N, int PASSES>
__global__ void __launch_bounds__(32 * WARPS_M * WARPS_N) conv_mma(CONV_GEMM_PARAMS) {
    conv_gemm_body<T, Index, MmaMath<T, BM, BN, BK, WARPS_M, WARPS_N, PASSES>>(CONV_GEMM_ARGS);
}
