// grad_weight on channels-last data as a GEMM per (group, tap), on tensor
// cores with mma.sync (sm_80 and later):
//
//   partial[split, kh*KW + kw, g*C + c, m] = sum_{p in split} x[n, ih, iw, g*C + c] * gy[n, oh, ow, g*M + m]
//
// over input positions p = (n, ih, iw), with oh = ih*sh - pad_h + kh*dh and
// ow likewise (terms outside grad_output are zero).  Rows are input
// channels c, columns output channels m, the reduction input positions:
// channels last, a slice of BK positions is BK rows of x, contiguous in c,
// and BK rows of grad_output, contiguous in m, each row copied to shared
// memory by cp.async in 16-byte pieces.  The tensor cores want both operands
// along the reduction, so the fragments are read transposed: ldmatrix.trans
// for half and bfloat16; for float (TF32, rounded to nearest as read)
// scalar loads, the rows padded by 8 floats so that a fragment's 32 loads
// fall in 32 banks.  Each split's float partial goes to the workspace;
// sum_taps adds them in split order (no atomics: the same bits every run).
//
// Requirements checked by the host: C and M multiples of 16 bytes' worth of
// elements, fewer than 2^31 input positions.
#include "common.cuh"
#include "mma.cuh"

template <typename T, int BM, int BN, int WARPS_M, int WARPS_N, int STAGES>
__global__ void __launch_bounds__(32 * WARPS_M * WARPS_N) grad_weight_nhwc(
    const T* __restrict__ x,         // (batch, in_h, in_w, groups * in_per)
    const T* __restrict__ gy,        // (batch, out_h, out_w, groups * out_per)
    float* __restrict__ partial,     // (splits, kernel_h * kernel_w, groups * in_per, out_per)
    int batch, int groups, int in_per, int out_per, int in_h, int in_w, int out_h, int out_w, int kernel_h, int kernel_w,
    int sh, int sw, int pad_h, int pad_w, int dh, int dw, int per_split, int splits, int m_tiles, int n_tiles) {
    constexpr int THREADS = 32 * WARPS_M * WARPS_N;
    constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;
    constexpr int FM = WM / 16, FN = WN / 8;
    static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tiles of whole ldmatrix.x4 loads");
    constexpr bool F32 = sizeof(T) == 4;
    constexpr int BK = 32;                      // positions a slice
    constexpr int E = 16 / sizeof(T);           // elements of a 16-byte piece
    constexpr int PAD = F32 ? 32 : 16;          // bytes after each shared row (see above)
    constexpr int A_ROW = BM * sizeof(T) + PAD, B_ROW = BN * sizeof(T) + PAD;
    constexpr int A_PIECES = BM / E, B_PIECES = BN / E;  // a row's 16-byte pieces
    constexpr int A_ITERS = (BK * A_PIECES + THREADS - 1) / THREADS, B_ITERS = (BK * B_PIECES + THREADS - 1) / THREADS;
    constexpr int STAGE_BYTES = BK * (A_ROW + B_ROW);
    extern __shared__ __align__(128) unsigned char smem[];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int block = blockIdx.x;
    const int n_tile = block % n_tiles;
    block /= n_tiles;
    const int m_tile = block % m_tiles;
    block /= m_tiles;
    const int taps = kernel_h * kernel_w;
    const int tap = block % taps;
    block /= taps;
    const int split = block % splits;
    const int group = block / splits;
    const int kh = tap / kernel_w, kw = tap - kh * kernel_w;
    const int positions = batch * in_h * in_w;
    const int p_begin = split * per_split;
    const int p_end = p_begin + min(per_split, positions - p_begin);  // (no int overflow in the last split)
    const int k_tiles = (p_end - p_begin + BK - 1) / BK;
    const long long in_total = static_cast<long long>(groups) * in_per, out_total = static_cast<long long>(groups) * out_per;

    auto load = [&](int kt, int stage) {
        const int p0 = p_begin + kt * BK;
        unsigned char* a_s = smem + stage * STAGE_BYTES;
        unsigned char* b_s = a_s + BK * A_ROW;
#pragma unroll
        for (int k = 0; k < A_ITERS; ++k) {
            const int idx = tid + k * THREADS;
            if (BK * A_PIECES % THREADS != 0 && idx >= BK * A_PIECES) break;
            const int row = idx / A_PIECES, piece = idx - row * A_PIECES;
            const int p = p0 + row, c = m_tile * BM + piece * E;
            const bool ok = p < p_end && c < in_per;
            const T* src = ok ? x + static_cast<long long>(p) * in_total + static_cast<long long>(group) * in_per + c : x;
            cp_async16(a_s + row * A_ROW + piece * 16, src, ok);
        }
#pragma unroll
        for (int k = 0; k < B_ITERS; ++k) {
            const int idx = tid + k * THREADS;
            if (BK * B_PIECES % THREADS != 0 && idx >= BK * B_PIECES) break;
            const int row = idx / B_PIECES, piece = idx - row * B_PIECES;
            const int p = p0 + row, m = n_tile * BN + piece * E;
            const int iw = p % in_w, r = p / in_w;
            const int ih = r % in_h, n = r / in_h;
            const int oh = ih * sh - pad_h + kh * dh, ow = iw * sw - pad_w + kw * dw;
            const bool ok = p < p_end && m < out_per && static_cast<unsigned>(oh) < static_cast<unsigned>(out_h) &&
                            static_cast<unsigned>(ow) < static_cast<unsigned>(out_w);
            const T* src = ok ? gy + ((static_cast<long long>(n) * out_h + oh) * out_w + ow) * out_total + static_cast<long long>(group) * out_per + m
                              : gy;
            cp_async16(b_s + row * B_ROW + piece * 16, src, ok);
        }
    };

    const int warp_m = warp % WARPS_M, warp_n = warp / WARPS_M;
    const int g = lane >> 2, t = lane & 3;
    float acc[FM][FN][4];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < k_tiles) load(s, s);
        cp_async_commit();
    }
    for (int kt = 0; kt < k_tiles; ++kt) {
        cp_async_wait_group<STAGES - 2>();
        __syncthreads();  // slice kt is in; every warp is done with slice kt - 1, whose buffer is refilled
        if (kt + STAGES - 1 < k_tiles) load(kt + STAGES - 1, (kt + STAGES - 1) % STAGES);
        cp_async_commit();
        const unsigned char* a_s = smem + (kt % STAGES) * STAGE_BYTES;
        const unsigned char* b_s = a_s + BK * A_ROW;
        if constexpr (F32) {
            const float* af = reinterpret_cast<const float*>(a_s);
            const float* bf = reinterpret_cast<const float*>(b_s);
            constexpr int AS = A_ROW / 4, BS = B_ROW / 4;
#pragma unroll
            for (int ks = 0; ks < BK / 8; ++ks) {
                unsigned a[FM][4], b[FN][2];
                const int k0 = ks * 8 + t;
#pragma unroll
                for (int i = 0; i < FM; ++i) {
                    const int m0 = warp_m * WM + i * 16 + g;
                    a[i][0] = to_tf32(af[k0 * AS + m0]);
                    a[i][1] = to_tf32(af[k0 * AS + m0 + 8]);
                    a[i][2] = to_tf32(af[(k0 + 4) * AS + m0]);
                    a[i][3] = to_tf32(af[(k0 + 4) * AS + m0 + 8]);
                }
#pragma unroll
                for (int j = 0; j < FN; ++j) {
                    const int n0 = warp_n * WN + j * 8 + g;
                    b[j][0] = to_tf32(bf[k0 * BS + n0]);
                    b[j][1] = to_tf32(bf[(k0 + 4) * BS + n0]);
                }
#pragma unroll
                for (int i = 0; i < FM; ++i)
#pragma unroll
                    for (int j = 0; j < FN; ++j) mma_tf32(acc[i][j], a[i], b[j]);
            }
        } else {
            const int mat = lane >> 3, r8 = lane & 7;
#pragma unroll
            for (int ks = 0; ks < BK / 16; ++ks) {
                unsigned a[FM][4], b[FN][2];
                // A: matrices (k 0-7, m 0-7), (k 0-7, m 8-15), (k 8-15, m 0-7), (k 8-15, m 8-15)
#pragma unroll
                for (int i = 0; i < FM; ++i)
                    ldmatrix_x4_trans(a[i], a_s + (ks * 16 + (mat >> 1) * 8 + r8) * A_ROW + (warp_m * WM + i * 16 + (mat & 1) * 8) * 2);
                // B: (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15)
#pragma unroll
                for (int j = 0; j < FN; j += 2) {
                    unsigned r[4];
                    ldmatrix_x4_trans(r, b_s + (ks * 16 + (mat & 1) * 8 + r8) * B_ROW + (warp_n * WN + j * 8 + (mat >> 1) * 8) * 2);
                    b[j][0] = r[0];
                    b[j][1] = r[1];
                    b[j + 1][0] = r[2];
                    b[j + 1][1] = r[3];
                }
#pragma unroll
                for (int i = 0; i < FM; ++i)
#pragma unroll
                    for (int j = 0; j < FN; ++j) mma_16bit<T>(acc[i][j], a[i], b[j]);
            }
        }
    }
    cp_async_wait_all();

    // Rows g and g + 8 of each m16 tile, columns 2t and 2t + 1 of each n8
    // tile: the partial runs tap-major, (splits, taps, groups * in_per,
    // out_per), so that a warp's stores go along m.
    float* out = partial + (static_cast<long long>(split) * taps + tap) * in_total * out_per;
    const bool pairs = out_per % 2 == 0;
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int c = m_tile * BM + warp_m * WM + i * 16 + h * 8 + g;
            if (c >= in_per) continue;
            float* row = out + (static_cast<long long>(group) * in_per + c) * out_per;
#pragma unroll
            for (int j = 0; j < FN; ++j) {
                const int m = n_tile * BN + warp_n * WN + j * 8 + 2 * t;
                if (pairs && m + 1 < out_per) {
                    *reinterpret_cast<float2*>(row + m) = make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
                } else {
                    if (m < out_per) row[m] = acc[i][j][2 * h];
                    if (m + 1 < out_per) row[m + 1] = acc[i][j][2 * h + 1];
                }
            }
        }
}

// The split partials summed in split order (in double, rounded once) and
// laid out as the weight: (splits, taps, rows) float to (rows, taps) T
// (rows = C_in x C_out / groups), a block a 32 x 32 tile through shared
// memory, read along the rows and written along the taps.
template <typename T>
__global__ void __launch_bounds__(256) sum_taps(const float* __restrict__ partial, T* __restrict__ out, int rows, int taps, int splits, int tap_tiles) {
    __shared__ float tile[32][33];
    const int tt = blockIdx.x % tap_tiles, rt = blockIdx.x / tap_tiles;
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const int tap = tt * 32 + ty + 8 * k, r = rt * 32 + tx;
        if (tap < taps && r < rows) {
            double sum = 0.0;
            for (int s = 0; s < splits; ++s) sum += partial[(static_cast<long long>(s) * taps + tap) * rows + r];
            tile[ty + 8 * k][tx] = static_cast<float>(sum);
        }
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const int r = rt * 32 + ty + 8 * k, tap = tt * 32 + tx;
        if (tap < taps && r < rows) out[static_cast<long long>(r) * taps + tap] = ValueTraits<T>::from_acc(tile[tx][ty + 8 * k]);
    }
}
