// grad_input of a strided 1D transposed convolution whose taps read
// consecutive grad_output positions (dilation 1), on tensor cores:
//
//   grad_input[n, g*C + ci, l] = sum_{j < M, t < K} w[g*C + ci, j, t] * gy[n, g*M + j, l*s - p + t]
//
// a GEMM with rows ci, columns (n, l) and reduction k = j*K + t.  Both
// operands are contiguous along k: a weight row is (j, t) in memory order, and
// column (n, l) reads K consecutive grad_output positions of each channel j.
// So both are staged as they lie, with cp.async, into shared rows of 128
// bytes of k (64 half/bfloat16 or 32 float values), and ldmatrix gives
// mma.sync's A and B fragments directly (B's "col" layout is k-contiguous).  conv_mma instead puts channels in the reduction's inner
// loop, so a warp's B loads for one tap are `stride` elements apart: one
// sector per value at X3's stride 256.
//
// A vector of VB bytes (VE = VB / sizeof(T) values) never crosses a channel
// and is either wholly inside grad_output's row or wholly outside it: the host
// routes problems only where VE divides K, the stride, the padding and the
// output row length (and the pointers are VB-aligned).
//
// The reduction can be split across blocks (X3: 64 rows x 4096 columns but
// 65536 deep): each split writes its float partial tile to
// workspace[split] (double) and sum_splits adds them in split order, so the
// result is bitwise repeatable; with one split the block writes grad_input.
//
// float runs as TF32 (PASSES 1) or as float32-accurate 3xTF32 (PASSES 3,
// MmaOp<float, 3>).
#include "common.cuh"
#include "mma.cuh"

// A column past the last one: its position plus any tap stays negative (the
// host keeps kernels below 2**30 taps).
constexpr int OUTSIDE = -(1 << 30);

template <typename T, typename Index, int BM, int BN, int WARPS_M, int WARPS_N, int STAGES, int VB, int PASSES>
__global__ void __launch_bounds__(32 * WARPS_M * WARPS_N, 2) grad_input_taps(
    const T* __restrict__ grad_output,  // (batch, groups * out_channels, out_w)
    const T* __restrict__ weight,       // (groups * in_channels, out_channels, kernel)
    T* __restrict__ grad_input,         // (batch, groups * in_channels, in_w): written when splits == 1
    double* __restrict__ workspace,     // (splits, batch, groups * in_channels, in_w): otherwise
    int batch, int groups,
    int in_channels,   // C per group: GEMM rows
    int out_channels,  // M per group
    int in_w, int out_w, int kernel, int stride, int padding,
    int chunks_per_split, int m_tiles, int col_tiles, int splits) {
    constexpr int THREADS = 32 * WARPS_M * WARPS_N;
    constexpr int ROW = 128;          // bytes of k per shared row and stage
    constexpr int KC = ROW / sizeof(T);  // k per stage
    constexpr int VE = VB / sizeof(T);   // k per vector
    constexpr int PER_ROW = ROW / VB;
    constexpr int ROWS_PER_PASS = THREADS / PER_ROW;
    constexpr int A_LOADS = BM / ROWS_PER_PASS, B_LOADS = BN / ROWS_PER_PASS;
    constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;
    constexpr int MI = WM / 16, NI = WN / 8;
    constexpr int STAGE_BYTES = (BM + BN) * ROW;
    static_assert(VB == 16 || VB == 8, "vectors of 16 or 8 bytes");
    static_assert(VB % sizeof(T) == 0 && THREADS % PER_ROW == 0, "vectors must tile a row");
    static_assert(BM % ROWS_PER_PASS == 0 && BN % ROWS_PER_PASS == 0, "tiles must split evenly over the threads");
    static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tiles are whole m16 x (2 x n8) fragments");
    typedef MmaOp<T, PASSES> Op;  // PASSES 3: float32-accurate 3xTF32
    extern __shared__ __align__(128) unsigned char smem[];

    unsigned block = blockIdx.x;
    const int m_tile = block % m_tiles;  // fastest: the blocks sharing a B tile run together
    block /= m_tiles;
    const int col_tile = block % col_tiles;
    block /= col_tiles;
    const int group = block % groups;
    const int split = block / groups;

    const int reduction = out_channels * kernel;
    const int chunks = (reduction + KC - 1) / KC;
    const int chunk_begin = split * chunks_per_split;
    const int chunk_count = min(chunks_per_split, chunks - chunk_begin);
    const Index columns = static_cast<Index>(batch) * in_w;

    const int tid = threadIdx.x;
    const int vec = tid % PER_ROW;  // the one vector of each row this thread loads
    const int row0 = tid / PER_ROW;

    // A rows m0 + row0 + i * ROWS_PER_PASS for i < a_rows; B columns from a
    // per-block table of (grad_output offset of (n, g*M, l*s - p), l*s - p),
    // which keeps the per-row state out of registers.
    const int a_first = m_tile * BM + row0;
    const int a_rows = in_channels - a_first;  // rows i * ROWS_PER_PASS < a_rows are valid
    const T* a_src = weight + static_cast<Index>(group * in_channels + min(a_first, in_channels - 1)) * reduction;
    Index* col_base = reinterpret_cast<Index*>(smem + STAGES * STAGE_BYTES);
    int* col_pos = reinterpret_cast<int*>(col_base + BN);
    for (int c = tid; c < BN; c += THREADS) {
        const Index col = static_cast<Index>(col_tile) * BN + c;
        const Index n = col / in_w;
        const int l = static_cast<int>(col - n * in_w);
        col_base[c] = (n * groups + group) * static_cast<Index>(out_channels) * out_w + (l * stride - padding);
        col_pos[c] = col < columns ? l * stride - padding : OUTSIDE;
    }
    __syncthreads();
    // This thread's reduction index k = j*K + t, advanced one stage at a time.
    int k = chunk_begin * KC + vec * VE;
    int j = k / kernel, t = k - (k / kernel) * kernel;
    const int step_j = KC / kernel, step_t = KC - step_j * kernel;

    auto load = [&](int stage) {
        unsigned char* a_stage = smem + stage * STAGE_BYTES;
        unsigned char* b_stage = a_stage + BM * ROW;
        const bool k_ok = k < reduction;
#pragma unroll
        for (int i = 0; i < A_LOADS; ++i) {
            const bool ok = k_ok && i * ROWS_PER_PASS < a_rows;
            const T* src = a_src + static_cast<Index>(i * ROWS_PER_PASS) * reduction + k;
            cp_async_vector<VB>(a_stage + swizzled_offset<ROW>(row0 + i * ROWS_PER_PASS, vec * VB), ok ? src : weight, ok);
        }
        const bool j_ok = j < out_channels;
        const Index channel = static_cast<Index>(j) * out_w + t;
#pragma unroll
        for (int i = 0; i < B_LOADS; ++i) {
            const int row = row0 + i * ROWS_PER_PASS;
            const int pos = col_pos[row] + t;
            const bool ok = j_ok && pos >= 0 && pos < out_w;
            cp_async_vector<VB>(b_stage + swizzled_offset<ROW>(row, vec * VB), ok ? grad_output + col_base[row] + channel : grad_output, ok);
        }
        k += KC;
        j += step_j;
        t += step_t;
        if (t >= kernel) {
            t -= kernel;
            ++j;
        }
    };

    const int warp = tid / 32, lane = tid % 32;
    const int warp_m = warp / WARPS_N, warp_n = warp % WARPS_N;
    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int jj = 0; jj < NI; ++jj)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][jj][e] = 0.0f;

    cp_async_pipeline<STAGES>(chunk_count, load, [&](int stage) {
        const unsigned char* a_stage = smem + stage * STAGE_BYTES;
        const unsigned char* b_stage = a_stage + BM * ROW;
#pragma unroll
        for (int ks = 0; ks < ROW / 32; ++ks) {
            typename Op::A af[MI];
            typename Op::B bf[NI];
            load_a_fragments<Op, ROW>(af, a_stage, warp_m * WM, ks, lane);
#pragma unroll
            for (int jj = 0; jj < NI; jj += 2) {
                const int row = warp_n * WN + jj * 8 + (lane & 7) + ((lane >> 4) << 3);
                unsigned r[4];
                ldmatrix_x4(r, b_stage + swizzled_offset<ROW>(row, (2 * ks + ((lane >> 3) & 1)) * 16));
                Op::make(bf[jj], {r[0], r[1]});
                Op::make(bf[jj + 1], {r[2], r[3]});
            }
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int jj = 0; jj < NI; ++jj) Op::mma(acc[i][jj], af[i], bf[jj]);
        }
    });

    // Epilogue: accumulator (i, jj, e) is row g + 8*(e/2) of fragment i and
    // column 2*(lane%4) + e%2 of fragment jj.
    const Index count = columns * groups * in_channels;
    Index col_offset[NI][2];
    bool col_ok[NI][2];
#pragma unroll
    for (int jj = 0; jj < NI; ++jj)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const Index col = static_cast<Index>(col_tile) * BN + warp_n * WN + jj * 8 + 2 * (lane % 4) + e;
            col_ok[jj][e] = col < columns;
            const Index n = col / in_w;
            col_offset[jj][e] = col_ok[jj][e] ? n * groups * in_channels * in_w + (col - n * in_w) : Index(0);
        }
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int m = m_tile * BM + warp_m * WM + i * 16 + lane / 4 + half * 8;
            if (m >= in_channels) continue;
            const Index row_offset = static_cast<Index>(group * in_channels + m) * in_w;
#pragma unroll
            for (int jj = 0; jj < NI; ++jj)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    if (!col_ok[jj][e]) continue;
                    const Index at = col_offset[jj][e] + row_offset;
                    const float v = acc[i][jj][2 * half + e];
                    if (splits == 1) {
                        grad_input[at] = ValueTraits<T>::from_acc(v);
                    } else {
                        workspace[split * count + at] = v;
                    }
                }
        }
}
