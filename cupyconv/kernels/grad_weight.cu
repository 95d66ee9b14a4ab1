// grad_weight and grad_bias of the transposed convolution, deterministic.
//
//   grad_weight[g*C + ci, j, kh, kw] = sum_{n, h, w} x[n, g*C + ci, h, w]
//                                        * grad_output[n, g*M + j, h*sh - ph + kh*dh, w*sw - pw + kw*dw]
//   grad_bias[co] = sum_{n, oh, ow} grad_output[n, co, oh, ow]
//
// grad_weight is a GEMM with rows ci < C, columns (j, kh, kw) and a long
// reduction over r = (n, h, w).  The reduction is cut into `splits` ranges;
// each block writes its partial tile to workspace[split] and sum_splits adds
// the partials in split order.  No atomics: the same inputs give the same bits
// on every run.  On CUDA cores these reductions sum in double (compensated
// double for double inputs; ReductionTraits), so they stay correctly rounded or
// nearly so however long they are; on tensor cores each split sums in float.
// The workspace is double, or float where every partial is a float sum
// (grad_weight_overlap): sum_splits adds in double either way.
#include "common.cuh"
#include "mma.cuh"

// The products of one BK-deep slice go through a policy, as in conv_gemm.cu:
//   SimtSum: FFMA/DFMA products summed in ReductionTraits<T>::sum (double, or
//            compensated double for double) -- float32 "highest" and float64;
//   MmaMath (mma.cuh): tensor-core products (TF32, FP16, BF16) summed in float
//            within the split -- float32 "tf32" and the 16-bit types.
// Either way the split partials are stored and summed in double.
template <typename T, int BM_, int BN_, int BK_, int TM, int TN>
struct SimtSum {
    typedef typename ValueTraits<T>::acc Acc;
    typedef typename ReductionTraits<T>::sum Sum;
    static constexpr int BM = BM_, BN = BN_, BK = BK_, PAD = 0;
    static constexpr int THREADS = (BM / TM) * (BN / TN);
    struct Frag {
        Sum v[TM][TN];
    };
    static __device__ __forceinline__ void zero(Frag& f) {
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) f.v[i][j] = Sum{};
    }
    static __device__ __forceinline__ void slice(const Acc (&a)[BK][BM], const Acc (&b)[BK][BN], Frag& f, int tid) {
        accumulate_slice<Acc, Sum, BM, BN, BK, TM, TN>(a, b, f.v, tid / (BN / TN), tid % (BN / TN));
    }
    template <typename F>
    static __device__ __forceinline__ void each(const Frag& frag, int tid, F f) {
        const int ty = tid / (BN / TN), tx = tid % (BN / TN);
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) f(fragment_index<BM, TM>(ty, i), fragment_index<BN, TN>(tx, j), to_double(frag.v[i][j]));
    }
};

template <typename T, typename Index, typename Math>
__device__ __forceinline__ void grad_weight_body(
    const T* __restrict__ input,        // x: (batch, groups * in_channels, in_h, in_w)
    const T* __restrict__ grad_output,  // (batch, groups * out_channels, out_h, out_w)
    double* __restrict__ workspace,  // (splits, groups * in_channels, out_channels * kernel_h * kernel_w)
    int batch, int groups,
    int in_channels,   // C per group: GEMM rows
    int out_channels,  // M per group
    int in_h, int in_w, int out_h, int out_w, int kernel_h, int kernel_w,
    int stride_h, int stride_w, int pad_h, int pad_w, int dilation_h, int dilation_w,
    long long positions_per_split,  // reduction positions each split covers (a multiple of BK)
    int splits, int m_tiles, int col_tiles) {
    typedef typename Math::Acc Acc;
    constexpr int BM = Math::BM, BN = Math::BN, BK = Math::BK, PAD = Math::PAD;
    constexpr int THREADS = Math::THREADS;
    constexpr int COLS_STEP = THREADS / BK;  // threads sharing one reduction row
    constexpr int A_PER_THREAD = BM / COLS_STEP;
    constexpr int B_PER_THREAD = BN / COLS_STEP;
    static_assert(THREADS % BK == 0 && BM % COLS_STEP == 0 && BN % COLS_STEP == 0, "tiles must split evenly");

    __shared__ __align__(16) Acc a_tile[2][BK][BM + PAD];
    __shared__ __align__(16) Acc b_tile[2][BK][BN + PAD];

    // Block -> (m tile, column tile, split, group): tiles of one split read the
    // same stretch of x and grad_output, so they run side by side.
    unsigned block = blockIdx.x;
    const int m_tile = block % m_tiles;
    block /= m_tiles;
    const int col_tile = block % col_tiles;
    block /= col_tiles;
    const int split = block % splits;
    const int group = block / splits;

    const int tid = threadIdx.x;
    const int taps = kernel_h * kernel_w;
    const int columns = out_channels * taps;
    const Index in_hw = static_cast<Index>(in_h) * in_w;
    const Index out_hw = static_cast<Index>(out_h) * out_w;
    const Index positions = static_cast<Index>(batch) * in_hw;
    const Index r_begin = static_cast<Index>(split) * positions_per_split;
    const Index r_end = min(positions, r_begin + static_cast<Index>(positions_per_split));

    // Each thread loads reduction row `row` of every slice, for A_PER_THREAD
    // rows (ci) and B_PER_THREAD columns (j, kh, kw) spaced COLS_STEP apart.
    const int row = tid % BK;
    const int lane_col = tid / BK;
    Index b_channel_offset[B_PER_THREAD];
    int b_off_h[B_PER_THREAD], b_off_w[B_PER_THREAD];
    bool b_valid[B_PER_THREAD];
#pragma unroll
    for (int i = 0; i < B_PER_THREAD; ++i) {
        const int col = col_tile * BN + lane_col + i * COLS_STEP;
        b_valid[i] = col < columns;
        const int j = col / taps;
        const int tap = col - j * taps;
        const int kh = tap / kernel_w;
        const int kw = tap - kh * kernel_w;
        b_channel_offset[i] = static_cast<Index>(group * out_channels + j) * out_hw;
        b_off_h[i] = kh * dilation_h - pad_h;
        b_off_w[i] = kw * dilation_w - pad_w;
    }

    // Position of reduction row r = r_begin + row, as (n, h, w), advanced by BK
    // per slice without dividing.
    Index r = r_begin + row;
    int n, h, w;
    {
        const Index rr = r < positions ? r : Index(0);
        const Index nn = rr / in_hw;
        const Index pos = rr - nn * in_hw;
        n = static_cast<int>(nn);
        h = static_cast<int>(pos / in_w);
        w = static_cast<int>(pos - static_cast<Index>(h) * in_w);
    }

    Acc a_reg[A_PER_THREAD];
    Acc b_reg[B_PER_THREAD];
    auto fetch = [&]() {
        const bool live = r < r_end;
        // (rows past the split's end load nothing; keep their offsets in range)
        const Index x_pixel =
            live ? (static_cast<Index>(n) * groups + group) * in_channels * in_hw + static_cast<Index>(h) * in_w + w : Index(0);
        const Index gy_image = live ? static_cast<Index>(n) * groups * out_channels * out_hw : Index(0);
#pragma unroll
        for (int i = 0; i < A_PER_THREAD; ++i) {
            const int m = m_tile * BM + lane_col + i * COLS_STEP;
            a_reg[i] = (live && m < in_channels) ? ValueTraits<T>::to_acc(input[x_pixel + static_cast<Index>(m) * in_hw]) : Acc(0);
        }
#pragma unroll
        for (int i = 0; i < B_PER_THREAD; ++i) {
            const int oh = h * stride_h + b_off_h[i];
            const int ow = w * stride_w + b_off_w[i];
            const bool inside = live && b_valid[i] && oh >= 0 && oh < out_h && ow >= 0 && ow < out_w;
            b_reg[i] = inside ? ValueTraits<T>::to_acc(grad_output[gy_image + b_channel_offset[i] + static_cast<Index>(oh) * out_w + ow])
                              : Acc(0);
        }
        // Advance this thread's reduction row by one slice.
        r += BK;
        w += BK;
        while (w >= in_w) {
            w -= in_w;
            if (++h == in_h) {
                h = 0;
                ++n;
            }
        }
    };
    auto stash = [&](int buf) {
#pragma unroll
        for (int i = 0; i < A_PER_THREAD; ++i) a_tile[buf][row][lane_col + i * COLS_STEP] = a_reg[i];
#pragma unroll
        for (int i = 0; i < B_PER_THREAD; ++i) b_tile[buf][row][lane_col + i * COLS_STEP] = b_reg[i];
    };

    typename Math::Frag acc;
    Math::zero(acc);

    const Index span = r_end > r_begin ? r_end - r_begin : Index(0);
    const int k_tiles = static_cast<int>((span + BK - 1) / BK);
    if (k_tiles > 0) {
        fetch();
        stash(0);
    }
    __syncthreads();
    for (int kt = 0; kt < k_tiles; ++kt) {
        const int buf = kt & 1;
        if (kt + 1 < k_tiles) fetch();
        Math::slice(a_tile[buf], b_tile[buf], acc, tid);
        if (kt + 1 < k_tiles) stash(buf ^ 1);
        __syncthreads();
    }

    // Every (row, column) of the tile is written, zeros included, so the
    // workspace needs no clearing.
    const Index slab = static_cast<Index>(split * groups + group) * in_channels;
    Math::each(acc, tid, [&](int row, int col, double value) {
        const int m = m_tile * BM + row;
        col += col_tile * BN;
        if (m < in_channels && col < columns) workspace[(slab + m) * columns + col] = value;
    });
}

#define GRAD_WEIGHT_PARAMS                                                                                          \
    const T *__restrict__ input, const T *__restrict__ grad_output, double *__restrict__ workspace, int batch,      \
        int groups, int in_channels, int out_channels, int in_h, int in_w, int out_h, int out_w, int kernel_h,      \
        int kernel_w, int stride_h, int stride_w, int pad_h, int pad_w, int dilation_h, int dilation_w,            \
        long long positions_per_split, int splits, int m_tiles, int col_tiles
#define GRAD_WEIGHT_ARGS                                                                                            \
    input, grad_output, workspace, batch, groups, in_channels, out_channels, in_h, in_w, out_h, out_w, kernel_h,  \
        kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, positions_per_split, splits, m_tiles,   \
        col_tiles

template <typename T, typename Index, int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN)) grad_weight_partial(GRAD_WEIGHT_PARAMS) {
    grad_weight_body<T, Index, SimtSum<T, BM, BN, BK, TM, TN>>(GRAD_WEIGHT_ARGS);
}

// Tensor cores (sm_80 and later); float, half or bfloat16.
template <typename T, typename Index, int BM, int BN, int BK, int WARPS_M, int WARPS_N, int PASSES>
__global__ void __launch_bounds__(32 * WARPS_M * WARPS_N) grad_weight_mma(GRAD_WEIGHT_PARAMS) {
    grad_weight_body<T, Index, MmaMath<T, BM, BN, BK, WARPS_M, WARPS_N, PASSES>>(GRAD_WEIGHT_ARGS);
}

// grad_bias partial sums: block (channel, split) adds grad_output[n, channel, :]
// over its share of the (n, position) range, then reduces across the block in
// a fixed tree.
template <typename T, int THREADS>
__global__ void __launch_bounds__(THREADS) grad_bias_partial(
    const T* __restrict__ grad_output,  // (batch, channels, plane)
    double* __restrict__ workspace,  // (splits, channels)
    int batch, int channels, long long plane,
    long long per_split,  // (n, position) pairs per split
    int splits) {
    typedef typename ReductionTraits<T>::sum Sum;  // compensated for double, as grad_weight's sums
    __shared__ Sum partial[THREADS];
    const int channel = blockIdx.x % channels;
    const int split = blockIdx.x / channels;
    const long long total = static_cast<long long>(batch) * plane;
    const long long begin = static_cast<long long>(split) * per_split;
    const long long end = min(total, begin + per_split);

    // The split's range as runs of one image's row; each thread takes every
    // THREADS-th element of a run, eight loads issued before their adds (one
    // load in flight a thread read grad_output at about a third of DRAM
    // bandwidth).  A thread's terms keep their order: the same bits each run.
    Sum sum = Sum{};
    long long n = begin / plane, pos = begin - n * plane;
    for (long long f = begin; f < end; ++n, pos = 0) {
        const long long run = min(plane - pos, end - f);
        const T* const row = grad_output + (n * channels + channel) * plane + pos;
        constexpr int BATCH = 8;
        long long i = threadIdx.x;
        for (; i + (BATCH - 1) * THREADS < run; i += BATCH * THREADS) {
            T v[BATCH];
#pragma unroll
            for (int b = 0; b < BATCH; ++b) v[b] = row[i + b * THREADS];
#pragma unroll
            for (int b = 0; b < BATCH; ++b) sum = add_term(sum, static_cast<double>(ValueTraits<T>::to_acc(v[b])));
        }
        for (; i < run; i += THREADS) sum = add_term(sum, static_cast<double>(ValueTraits<T>::to_acc(row[i])));
        f += run;
    }
    partial[threadIdx.x] = sum;
    __syncthreads();
#pragma unroll
    for (int half = THREADS / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) partial[threadIdx.x] = add_sums(partial[threadIdx.x], partial[threadIdx.x + half]);
        __syncthreads();
    }
    if (threadIdx.x == 0) workspace[static_cast<long long>(split) * channels + channel] = to_double(partial[0]);
}

// out[i] = sum over s < splits of workspace[s * count + i], in order of s, in
// double, rounded once to T.
template <typename T, typename W>
__global__ void sum_splits(const W* __restrict__ workspace, T* __restrict__ out, long long count, int splits) {
    typedef typename ValueTraits<T>::acc Acc;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < count;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        double sum = 0.0;
        for (int s = 0; s < splits; ++s) sum += static_cast<double>(workspace[s * count + i]);
        out[i] = ValueTraits<T>::from_acc(static_cast<Acc>(sum));
    }
}
