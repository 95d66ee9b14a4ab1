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
//        A(g, m, c, kh, kw) = g * w_stride_group + m * w_stride_m + c * w_stride_c + (kh * KW + kw) * w_stride_tap.
//
// The strides let A read the weight as the user gave it, (C_in, C_out / groups,
// KH, KW), or packed by the host as (groups, KH * KW, C, M) so that a warp's
// loads of consecutive rows m are consecutive in memory.
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
#include "mma.cuh"

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

// ---------------------------------------------------------------------------
// The kernel body, shared by both policies.

template <typename T, typename Index, typename Math>
__device__ __forceinline__ void conv_gemm_body(
    const T* __restrict__ in,        // (batch, groups * red_channels, in_h, in_w)
    const T* __restrict__ weight,    // read through A(...)
    const T* __restrict__ bias,      // (groups * out_channels,), or null for none
    T* __restrict__ out,             // (batch, groups * out_channels, out_h, out_w)
    const int* __restrict__ phases,  // phases_h AxisPhase records for H, then phases_w for W
    int phases_h, int phases_w,
    int batch, int groups,
    int red_channels,  // C: reduction channels per group
    int out_channels,  // M: output channels per group
    int in_h, int in_w, int out_h, int out_w, int kernel_w,
    long long w_stride_group, long long w_stride_m, long long w_stride_c, long long w_stride_tap,
    int cols_h, int cols_w,  // column grid per image: the largest phase's (qh, qw) extent
    int m_tiles, int col_tiles,
    // Split reduction (conv_mma_split): block split sums its share of the
    // reduction slices into partial[split] (as Acc, no bias); else null.
    typename Math::Acc* __restrict__ partial = nullptr, int splits = 1, long long partial_count = 0) {
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
    block /= col_tiles;
    const int group = block % groups;
    const int split = block / groups;
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
    const int k_all = ph.tap_count * pw.tap_count * c_tiles;
    const int k_per_split = (k_all + splits - 1) / splits;
    const int k_begin = min(k_all, split * k_per_split);
    const int k_tiles = min(k_all, k_begin + k_per_split);  // this block walks slices [k_begin, k_tiles)

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
        const Index tap_offset = a_offset + static_cast<Index>(kh * kernel_w + kw) * w_stride_tap;
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

    if (k_begin < k_tiles) {
        fetch(k_begin);
        stash(0);
    }
    __syncthreads();
    for (int kt = k_begin; kt < k_tiles; ++kt) {
        const int buf = (kt - k_begin) & 1;
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
                const Index at = out_pixel + static_cast<Index>(channel) * out_hw;
                if (partial != nullptr) {
                    partial[split * partial_count + at] = stage[row][load_col];  // every split writes its tile, zeros included
                    continue;
                }
                const Acc bias_value = bias != nullptr ? ValueTraits<T>::to_acc(bias[channel]) : Acc(0);
                out[at] = ValueTraits<T>::from_acc(stage[row][load_col] + bias_value);
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
        long long w_stride_m, long long w_stride_c, long long w_stride_tap, int cols_h, int cols_w, int m_tiles, int col_tiles
#define CONV_GEMM_ARGS                                                                                       \
    in, weight, bias, out, phases, phases_h, phases_w, batch, groups, red_channels, out_channels, in_h, in_w, \
        out_h, out_w, kernel_w, w_stride_group, w_stride_m, w_stride_c, w_stride_tap, cols_h, cols_w, m_tiles, col_tiles

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

// conv_mma with the reduction cut into `splits` ranges (blockIdx's slowest
// digit): for grids too small to fill the GPU whose reduction is long (the
// grad_input of a layer with a small input).  sum_splits adds the float
// partials in split order, so the result does not depend on scheduling.
// Its arguments are conv_mma's with `out` replaced by the partials
// (splits, out count) and the two split sizes last.
template <typename T, typename Index, int BM, int BN, int BK, int WARPS_M, int WARPS_N, int PASSES>
__global__ void __launch_bounds__(32 * WARPS_M * WARPS_N) conv_mma_split(
    const T* __restrict__ in, const T* __restrict__ weight, const T* __restrict__ bias, float* __restrict__ partial,
    const int* __restrict__ phases, int phases_h, int phases_w, int batch, int groups, int red_channels, int out_channels,
    int in_h, int in_w, int out_h, int out_w, int kernel_w, long long w_stride_group, long long w_stride_m,
    long long w_stride_c, long long w_stride_tap, int cols_h, int cols_w, int m_tiles, int col_tiles, int splits,
    long long partial_count) {
    T* out = nullptr;
    conv_gemm_body<T, Index, MmaMath<T, BM, BN, BK, WARPS_M, WARPS_N, PASSES>>(CONV_GEMM_ARGS, partial, splits, partial_count);
}
