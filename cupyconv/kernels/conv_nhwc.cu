// Strided correlation as an implicit GEMM on channels-last data, on tensor
// cores with mma.sync (sm_80 and later): the transposed convolution's forward
// pass (every polyphase phase in one launch) and its grad_input.
//
// For one group g, one phase (ph, pw) (common.cuh's AxisPhase records, the
// ones conv_gemm reads) and one GEMM row r = (n, qh, qw):
//
//   out[n, oh, ow, g*M + m] = bias[g*M + m]
//       + sum_{th < ph.tap_count} sum_{tw < pw.tap_count} sum_{c < C}
//             in[n, ih, iw, g*C + c] * weight[g, m, kh*KW + kw, c]
//
// with oh, ih and kh as in conv_gemm.cu.  GEMM rows are output positions,
// columns output channels, the reduction (tap, channel).  Channels last, both
// operands run contiguous along the reduction: each 16-byte piece of a row
// goes from global to shared memory by cp.async (zero-filled outside the
// input), and ldmatrix gives the tensor cores their fragments from there.
// The forward pass reads x and the weight as (groups, C_out, taps, C_in),
// grad_input grad_output and the weight as (groups, C_in, taps, C_out): each
// one transpose_nhwc of the weight as given (below).
//
// Tiles: a block BM positions x BN channels of one (group, phase), its
// WARPS_M x WARPS_N warps each (BM/WARPS_M) x (BN/WARPS_N) of m16n8
// fragments.  The reduction goes by slices of 64 bytes of channels of one
// tap (32 half or bfloat16, 16 float), STAGES slices in flight.  A shared row
// is 64 bytes, its four 16-byte chunks swizzled (chunk ^ (row / 2) % 4) so
// that the eight rows an ldmatrix reads fall in distinct banks.
// float runs TF32 m16n8k8, each operand rounded to nearest (mma.cuh's to_tf32) as it
// leaves shared memory; half and bfloat16 m16n8k16; float accumulators.
//
// Requirements checked by the host: C a multiple of 16 bytes' worth of
// elements, in and weight 16-byte aligned.
#include "common.cuh"
#include "mma.cuh"

constexpr int NHWC_ROW = 64;  // bytes of one shared row: a slice of one position's (or channel's) reduction

__device__ __forceinline__ int nhwc_offset(int row, int chunk) { return row * NHWC_ROW + ((chunk ^ ((row >> 1) & 3)) << 4); }

// The tensor-core step on 32 bytes of reduction.
template <typename T>
struct NhwcMath {
    static __device__ __forceinline__ void round(unsigned (&)[4]) {}
    static __device__ __forceinline__ void round(unsigned (&)[2]) {}
    static __device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) { mma_16bit<T>(d, a, b); }
};
template <>
struct NhwcMath<float> {
    static __device__ __forceinline__ void round(unsigned (&r)[4]) {
#pragma unroll
        for (int i = 0; i < 4; ++i) r[i] = to_tf32(__uint_as_float(r[i]));
    }
    static __device__ __forceinline__ void round(unsigned (&r)[2]) {
#pragma unroll
        for (int i = 0; i < 2; ++i) r[i] = to_tf32(__uint_as_float(r[i]));
    }
    static __device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) { mma_tf32(d, a, b); }
};

template <typename T>
__device__ __forceinline__ void store_pair(T* p, float v0, float v1) {
    *reinterpret_cast<unsigned*>(p) = pack2<T>(v0, v1);
}
template <>
__device__ __forceinline__ void store_pair<float>(float* p, float v0, float v1) {
    *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
}

template <typename T, int BM, int BN, int WARPS_M, int WARPS_N, int STAGES>
__global__ void __launch_bounds__(32 * WARPS_M * WARPS_N) conv_nhwc(
    const T* __restrict__ in,      // (batch, in_h, in_w, groups * red)
    const T* __restrict__ weight,  // (groups, out_channels, taps, red)
    const T* __restrict__ bias,    // (groups * out_channels) or null
    T* __restrict__ out,           // (batch, out_h, out_w, groups * out_channels)
    const int* __restrict__ phases, int phases_h, int phases_w, int batch, int groups, int red, int out_channels,
    int in_h, int in_w, int out_h, int out_w, int kernel_w, int taps, int row_tiles, int n_tiles) {
    constexpr int THREADS = 32 * WARPS_M * WARPS_N;
    constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;
    constexpr int FM = WM / 16, FN = WN / 8;
    static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tiles of whole ldmatrix.x4 loads");
    static_assert(BM * 4 % THREADS == 0, "every thread loads whole A chunks");
    constexpr int E = 16 / sizeof(T);        // elements of a 16-byte chunk
    constexpr int SLICE = NHWC_ROW / sizeof(T);  // elements of a slice
    constexpr int A_ITERS = BM * 4 / THREADS;
    constexpr int B_ITERS = (BN * 4 + THREADS - 1) / THREADS;
    constexpr int STAGE_BYTES = (BM + BN) * NHWC_ROW;
    extern __shared__ __align__(128) unsigned char smem[];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int block = blockIdx.x;
    const int n_tile = block % n_tiles;
    block /= n_tiles;
    const int row_tile = block % row_tiles;
    block /= row_tiles;
    const int phase = block % (phases_h * phases_w);
    const int group = block / (phases_h * phases_w);
    const AxisPhase ph = load_axis_phase(phases, phase / phases_w);
    const AxisPhase pw = load_axis_phase(phases, phases_h + phase % phases_w);
    const int plane = ph.count * pw.count;
    const long long rows = static_cast<long long>(batch) * plane;
    if (static_cast<long long>(row_tile) * BM >= rows) return;  // a phase with fewer positions than the largest

    const long long in_channels_total = static_cast<long long>(groups) * red;
    const int chunk = tid & 3;
    // The rows this thread loads A for: their first input position and pixel offset.
    int a_ih[A_ITERS], a_iw[A_ITERS];
    long long a_base[A_ITERS];
#pragma unroll
    for (int k = 0; k < A_ITERS; ++k) {
        const long long r = static_cast<long long>(row_tile) * BM + tid / 4 + k * (THREADS / 4);
        if (r < rows) {
            const int n = static_cast<int>(r / plane), rem = static_cast<int>(r - static_cast<long long>(n) * plane);
            const int qh = rem / pw.count, qw = rem - qh * pw.count;
            a_ih[k] = ph.in_base + qh * ph.in_step;
            a_iw[k] = pw.in_base + qw * pw.in_step;
            a_base[k] = static_cast<long long>(n) * in_h * in_w * in_channels_total + static_cast<long long>(group) * red + chunk * E;
        } else {
            a_ih[k] = -(1 << 29);  // outside the input for every tap
            a_iw[k] = 0;
            a_base[k] = 0;
        }
    }
    const long long w_group = static_cast<long long>(group) * out_channels;

    const int c_tiles = (red + SLICE - 1) / SLICE;
    const int k_tiles = ph.tap_count * pw.tap_count * c_tiles;
    auto load = [&](int kt, int stage) {
        const int tap = kt / c_tiles;
        const int c0 = (kt - tap * c_tiles) * SLICE;
        const int th = tap / pw.tap_count, tw = tap - th * pw.tap_count;
        const int kh = ph.tap_first + th * ph.tap_step, kw = pw.tap_first + tw * pw.tap_step;
        const int dh = th * ph.tap_in_step, dw = tw * pw.tap_in_step;
        const bool c_ok = c0 + chunk * E < red;
        unsigned char* a_s = smem + stage * STAGE_BYTES;
        unsigned char* b_s = a_s + BM * NHWC_ROW;
#pragma unroll
        for (int k = 0; k < A_ITERS; ++k) {
            const int row = tid / 4 + k * (THREADS / 4);
            const int ih = a_ih[k] + dh, iw = a_iw[k] + dw;
            const bool ok = c_ok && static_cast<unsigned>(ih) < static_cast<unsigned>(in_h) && static_cast<unsigned>(iw) < static_cast<unsigned>(in_w);
            const T* src = ok ? in + a_base[k] + (static_cast<long long>(ih) * in_w + iw) * in_channels_total + c0 : in;
            cp_async16(a_s + nhwc_offset(row, chunk), src, ok);
        }
        const int tap_index = kh * kernel_w + kw;
#pragma unroll
        for (int k = 0; k < B_ITERS; ++k) {
            const int row = tid / 4 + k * (THREADS / 4);
            if (BN * 4 % THREADS != 0 && row >= BN) break;
            const int m = n_tile * BN + row;
            const bool ok = c_ok && m < out_channels;
            const T* src = ok ? weight + ((w_group + m) * taps + tap_index) * red + c0 + chunk * E : weight;
            cp_async16(b_s + nhwc_offset(row, chunk), src, ok);
        }
    };

    const int warp_m = warp % WARPS_M, warp_n = warp / WARPS_M;
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
        const unsigned char* b_s = a_s + BM * NHWC_ROW;
#pragma unroll
        for (int ks = 0; ks < 2; ++ks) {  // two 32-byte steps a slice
            unsigned a[FM][4], b[FN][2];
#pragma unroll
            for (int i = 0; i < FM; ++i) {
                ldmatrix_x4(a[i], a_s + nhwc_offset(warp_m * WM + i * 16 + (lane & 15), ks * 2 + (lane >> 4)));
                NhwcMath<T>::round(a[i]);
            }
#pragma unroll
            for (int j = 0; j < FN; j += 2) {
                unsigned r[4];
                ldmatrix_x4(r, b_s + nhwc_offset(warp_n * WN + j * 8 + (lane & 7) + ((lane >> 4) << 3), ks * 2 + ((lane >> 3) & 1)));
                b[j][0] = r[0];
                b[j][1] = r[1];
                b[j + 1][0] = r[2];
                b[j + 1][1] = r[3];
                NhwcMath<T>::round(b[j]);
                NhwcMath<T>::round(b[j + 1]);
            }
#pragma unroll
            for (int i = 0; i < FM; ++i)
#pragma unroll
                for (int j = 0; j < FN; ++j) NhwcMath<T>::mma(acc[i][j], a[i], b[j]);
        }
    }
    cp_async_wait_all();

    // Epilogue: each thread's fragments hold rows g and g + 8 of an m16 tile,
    // columns 2t and 2t + 1 of an n8 tile (g = lane / 4, t = lane % 4): pairs
    // of consecutive channels, stored together where aligned.
    const int g = lane >> 2, t = lane & 3;
    const long long out_channels_total = static_cast<long long>(groups) * out_channels;
    const bool pairs = out_channels % 2 == 0 && (reinterpret_cast<size_t>(out) & (2 * sizeof(T) - 1)) == 0;
    float bias_v[FN][2];
#pragma unroll
    for (int j = 0; j < FN; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int m = n_tile * BN + warp_n * WN + j * 8 + 2 * t + e;
            bias_v[j][e] = bias != nullptr && m < out_channels ? ValueTraits<T>::to_acc(bias[group * out_channels + m]) : 0.f;
        }
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const long long r = static_cast<long long>(row_tile) * BM + warp_m * WM + i * 16 + h * 8 + g;
            if (r >= rows) continue;
            const int n = static_cast<int>(r / plane), rem = static_cast<int>(r - static_cast<long long>(n) * plane);
            const int qh = rem / pw.count, qw = rem - qh * pw.count;
            const int oh = ph.out_base + qh * ph.out_step, ow = pw.out_base + qw * pw.out_step;
            T* o = out + ((static_cast<long long>(n) * out_h + oh) * out_w + ow) * out_channels_total + static_cast<long long>(group) * out_channels;
#pragma unroll
            for (int j = 0; j < FN; ++j) {
                const int m = n_tile * BN + warp_n * WN + j * 8 + 2 * t;
                const float v0 = acc[i][j][2 * h] + bias_v[j][0], v1 = acc[i][j][2 * h + 1] + bias_v[j][1];
                if (pairs && m + 1 < out_channels) {
                    store_pair<T>(o + m, v0, v1);
                } else {
                    if (m < out_channels) o[m] = ValueTraits<T>::from_acc(v0);
                    if (m + 1 < out_channels) o[m + 1] = ValueTraits<T>::from_acc(v1);
                }
            }
        }
}

// The layout change between channels first and channels last (and the
// weight's packing): in (batch, rows, cols) to out (batch, cols, rows), a
// block a TILE x TILE tile through shared memory, TILE = 32 4-byte words:
// 16-bit elements go two to a word on both sides where the sizes and
// addresses allow (`pairs`), so that a warp moves 128 bytes a row.
template <typename T>
__global__ void __launch_bounds__(256) transpose_nhwc(const T* __restrict__ in, T* __restrict__ out, int rows, int cols, int row_tiles, int col_tiles) {
    constexpr int VEC = sizeof(T) == 2 ? 2 : 1;
    constexpr int TILE = 32 * VEC;
    __shared__ __align__(16) T tile[TILE][TILE + VEC];  // rows of 33 words, read and written as words for the pairs
    long long block = blockIdx.x;
    const int ct = static_cast<int>(block % col_tiles);
    block /= col_tiles;
    const int rt = static_cast<int>(block % row_tiles);
    const long long b = block / row_tiles;
    const int lane = threadIdx.x & 31, ty = threadIdx.x >> 5;
    const T* src = in + b * rows * cols;
    T* dst = out + b * rows * cols;
    const bool pairs = VEC == 2 && rows % 2 == 0 && cols % 2 == 0 && (reinterpret_cast<size_t>(in) & 3) == 0 && (reinterpret_cast<size_t>(out) & 3) == 0;
    for (int i = ty; i < TILE; i += 8) {
        const int r = rt * TILE + i, c = ct * TILE + VEC * lane;
        if (r >= rows) break;
        if (pairs && c < cols) {
            *reinterpret_cast<unsigned*>(&tile[i][VEC * lane]) = *reinterpret_cast<const unsigned*>(src + static_cast<long long>(r) * cols + c);
        } else {
#pragma unroll
            for (int v = 0; v < VEC; ++v)
                if (c + v < cols) tile[i][VEC * lane + v] = src[static_cast<long long>(r) * cols + c + v];
        }
    }
    __syncthreads();
    for (int i = ty; i < TILE; i += 8) {
        const int c = ct * TILE + i, r = rt * TILE + VEC * lane;
        if (c >= cols) break;
        if (pairs && r < rows) {
            const unsigned lo = *reinterpret_cast<const unsigned short*>(&tile[VEC * lane][i]);
            const unsigned hi = *reinterpret_cast<const unsigned short*>(&tile[VEC * lane + 1][i]);
            *reinterpret_cast<unsigned*>(dst + static_cast<long long>(c) * rows + r) = lo | hi << 16;
        } else {
#pragma unroll
            for (int v = 0; v < VEC; ++v)
                if (r + v < rows) dst[static_cast<long long>(c) * rows + r + v] = tile[VEC * lane + v][i];
        }
    }
}
