// grad_weight of a strided 1D transposed convolution whose taps read
// consecutive grad_output positions (dilation 1), on tensor cores (float as
// TF32 or float32-accurate 3xTF32, float16, bfloat16):
//
//   grad_weight[g*C + ci, j, t] = sum_{n, l} x[n, g*C + ci, l] * gy[n, g*M + j, l*s - p + t]
//
// a GEMM with rows ci, columns q = j*K + t (the weight's own memory order)
// and reduction r = (n, l).  A (x) is contiguous along r; B is contiguous
// along q: for one position (n, l) and channel j, the K taps read K
// consecutive grad_output values.  Each stage holds BK = 128 bytes of
// positions (64 of a 16-bit type, 32 floats): A as BM shared rows of 128 bytes
// (ldmatrix), B as BK rows of BN = 128 columns.  For the 16-bit types
// ldmatrix.trans gives mma's k-pairs; TF32's B fragment is one value per
// register, read with scalar loads.  Both operands are cp.async'd as they
// lie, in vectors of VB bytes that the host has checked never cross a channel
// or a row end (VB / sizeof(T) divides K, the stride, the padding and both
// rows).
//
// The reduction over positions can be split across blocks (X2: 512 x 4096
// outputs but 65536 positions): each split writes its float tile to
// workspace[split] (double) and sum_splits adds them in split order, so the
// result is bitwise repeatable; with one split the block writes grad_weight.
#include "common.cuh"
#include "mma.cuh"

template <typename T, typename Index, int BM, int WARPS_M, int WARPS_N, int STAGES, int VB, int PASSES>
__global__ void __launch_bounds__(32 * WARPS_M * WARPS_N, 2) grad_weight_taps(
    const T* __restrict__ input,        // x: (batch, groups * in_channels, in_w)
    const T* __restrict__ grad_output,  // (batch, groups * out_channels, out_w)
    T* __restrict__ grad_weight,        // (groups * in_channels, out_channels, kernel): written when splits == 1
    double* __restrict__ workspace,     // (splits, groups * in_channels, out_channels, kernel): otherwise
    int batch, int groups,
    int in_channels,   // C per group: GEMM rows
    int out_channels,  // M per group
    int in_w, int out_w, int kernel, int stride, int padding,
    int chunks_per_split, int m_tiles, int col_tiles, int splits) {
    constexpr bool TF32 = sizeof(T) == 4;
    constexpr int BN = 128, BK = 128 / sizeof(T);                  // columns per block, positions per stage
    constexpr int A_ROW = BK * sizeof(T), B_ROW = BN * sizeof(T);  // bytes
    constexpr int KSTEP = TF32 ? 8 : 16;
    constexpr int THREADS = 32 * WARPS_M * WARPS_N;
    constexpr int VE = VB / sizeof(T);
    constexpr int A_PER_ROW = A_ROW / VB, B_PER_ROW = B_ROW / VB;
    constexpr int A_ROWS_PER_PASS = THREADS / A_PER_ROW, B_ROWS_PER_PASS = THREADS / B_PER_ROW;
    constexpr int A_LOADS = BM / A_ROWS_PER_PASS, B_LOADS = BK / B_ROWS_PER_PASS;
    constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;
    constexpr int MI = WM / 16, NI = WN / 8;
    constexpr int A_BYTES = BM * A_ROW, STAGE_BYTES = A_BYTES + BK * B_ROW;
    static_assert(VB == 16 || VB == 8, "vectors of 16 or 8 bytes");
    static_assert(BM % A_ROWS_PER_PASS == 0 && BK % B_ROWS_PER_PASS == 0, "tiles must split evenly over the threads");
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

    const int columns = out_channels * kernel;
    const Index positions = static_cast<Index>(batch) * in_w;
    const Index chunks = (positions + BK - 1) / BK;
    const Index chunk_begin = static_cast<Index>(split) * chunks_per_split;
    const int chunk_count = static_cast<int>(min(static_cast<Index>(chunks_per_split), chunks - chunk_begin));

    const int tid = threadIdx.x;
    // The stage's first position (c_n, c_l), advanced BK positions per
    // stage; the host routes only rows of at least BK positions, so a stage
    // reaches at most into the next image.
    Index c_n;
    int c_l;
    {
        const Index r = chunk_begin * BK;
        c_n = r / in_w;
        c_l = static_cast<int>(r - c_n * in_w);
    }
    // A: rows ci0 + i * A_ROWS_PER_PASS, this thread's vector of positions.
    const int a_vec = tid % A_PER_ROW;
    const int a_row0 = tid / A_PER_ROW;
    const int ci0 = m_tile * BM + a_row0;
    // B: this thread's fixed column vector q = j*K + t, rows b_row0 + i * B_ROWS_PER_PASS.
    const int b_vec = tid % B_PER_ROW;
    const int b_row0 = tid / B_PER_ROW;
    const int q = col_tile * BN + b_vec * VE;
    const int b_j = q / kernel, b_t = q - (q / kernel) * kernel;
    const bool q_ok = q < columns;

    auto load = [&](int stage) {
        unsigned char* a_stage = smem + stage * STAGE_BYTES;
        unsigned char* b_stage = a_stage + A_BYTES;
        {
            int l = c_l + a_vec * VE;
            const bool next = l >= in_w;
            const Index n = c_n + next;
            l -= next ? in_w : 0;
            const bool n_ok = n < batch;
            const Index base = ((n * groups + group) * in_channels + ci0) * static_cast<Index>(in_w) + l;
#pragma unroll
            for (int i = 0; i < A_LOADS; ++i) {
                const bool ok = n_ok && ci0 + i * A_ROWS_PER_PASS < in_channels;
                const T* src = input + base + static_cast<Index>(i * A_ROWS_PER_PASS) * in_w;
                cp_async_vector<VB>(a_stage + swizzled_offset<A_ROW>(a_row0 + i * A_ROWS_PER_PASS, a_vec * VB), ok ? src : input, ok);
            }
        }
#pragma unroll
        for (int i = 0; i < B_LOADS; ++i) {
            int l = c_l + b_row0 + i * B_ROWS_PER_PASS;
            const bool next = l >= in_w;
            const Index n = c_n + next;
            l -= next ? in_w : 0;
            const int pos = l * stride - padding + b_t;
            const bool ok = q_ok && n < batch && pos >= 0 && pos < out_w;
            const T* src = grad_output + ((n * groups + group) * out_channels + b_j) * static_cast<Index>(out_w) + pos;
            cp_async_vector<VB>(b_stage + swizzled_offset<B_ROW, TF32>(b_row0 + i * B_ROWS_PER_PASS, b_vec * VB), ok ? src : grad_output, ok);
        }
        c_l += BK;
        if (c_l >= in_w) {
            c_l -= in_w;
            ++c_n;
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
        const unsigned char* b_stage = a_stage + A_BYTES;
#pragma unroll
        for (int ks = 0; ks < BK / KSTEP; ++ks) {
            typename Op::A af[MI];
            typename Op::B bf[NI];
            load_a_fragments<Op, A_ROW>(af, a_stage, warp_m * WM, ks, lane);
            if constexpr (TF32) {  // b0 = B[k0 + t][n0 + g], b1 = B[k0 + t + 4][n0 + g]
#pragma unroll
                for (int jj = 0; jj < NI; ++jj) {
                    const int col_byte = (warp_n * WN + jj * 8 + lane / 4) * 4;
                    unsigned r[2];
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int row = ks * 8 + lane % 4 + 4 * e;
                        r[e] = *reinterpret_cast<const unsigned*>(b_stage + swizzled_offset<B_ROW, true>(row, col_byte));
                    }
                    Op::make(bf[jj], r);
                }
            } else {
#pragma unroll
                for (int jj = 0; jj < NI; jj += 2) {
                    const int row = ks * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
                    const int chunk = (warp_n * WN + jj * 8) / 8 + (lane >> 4);
                    unsigned r[4];
                    ldmatrix_x4_trans(r, b_stage + swizzled_offset<B_ROW>(row, chunk * 16));
                    Op::make(bf[jj], {r[0], r[1]});
                    Op::make(bf[jj + 1], {r[2], r[3]});
                }
            }
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int jj = 0; jj < NI; ++jj) Op::mma(acc[i][jj], af[i], bf[jj]);
        }
    });

    // Epilogue: accumulator (i, jj, e) is row g + 8*(e/2) of fragment i and
    // column 2*(lane%4) + e%2 of fragment jj; grad_weight's rows are (ci, q).
    const Index count = static_cast<Index>(groups) * in_channels * columns;
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int m = m_tile * BM + warp_m * WM + i * 16 + lane / 4 + half * 8;
            if (m >= in_channels) continue;
            const Index row_offset = static_cast<Index>(group * in_channels + m) * columns;
#pragma unroll
            for (int jj = 0; jj < NI; ++jj)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int col = col_tile * BN + warp_n * WN + jj * 8 + 2 * (lane % 4) + e;
                    if (col >= columns) continue;
                    const float v = acc[i][jj][2 * half + e];
                    if (splits == 1) {
                        grad_weight[row_offset + col] = ValueTraits<T>::from_acc(v);
                    } else {
                        workspace[split * count + row_offset + col] = v;
                    }
                }
        }
}
