// 1D strided correlation on tensor cores with the input staged once per
// channel slice and shared by every tap: the forward pass of a 1D transposed
// convolution (per polyphase phase, or all phases at once when they fold, see
// below) and its grad_input, for float ("tf32"), half and bfloat16.
//
// GEMM per (group, phase): rows m < M * fold, columns q (positions of one
// image), reduction over (channel slice, tap, channel).  Row m is output
// channel co = m / fold with sub-phase r = m % fold; column q and tap t read
//
//   weight  packed[g][k][co][c]          k = tap_first + r + t * tap_step
//   input   in[n][g*C + c][l]            l = in_base + q * in_step + t * tap_in_step
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
// Requirements checked by the host: sm_80 or later, in_w a multiple of 16
// bytes' worth of elements, a 16-byte-aligned input, channels padded to a
// multiple of 16 bytes in the packed weight (zeros), fold a power of two.
#include "common.cuh"
#include "mma.cuh"

__device__ __forceinline__ unsigned shared_address(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// 16 bytes global -> shared, asynchronously; zeros where !valid (src-size 0).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)), "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(p)));
}

__host__ __device__ constexpr int log2_of(int v) { return v > 1 ? 1 + log2_of(v / 2) : 0; }

__device__ __forceinline__ int floor_to(int v, int step) {  // largest multiple of step <= v (step > 0)
    return v >= 0 ? v / step * step : -((-v + step - 1) / step) * step;
}

// The window holds at most this many 16-byte vectors per row for the 16-bit
// types (they pass through registers); the host checks it.
constexpr int WINDOW_MAX_VECTORS = 32;

template <typename T, typename Index, int BM, int BN, int WARPS_M, int WARPS_N>
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
    constexpr int ROUNDS = (WROWS * WINDOW_MAX_VECTORS + THREADS - 1) / THREADS;
    static_assert(WM % 16 == 0 && WN % 8 == 0, "warp tile must split into m16n8 fragments");
    static_assert((BN & (BN - 1)) == 0 && (BM & (BM - 1)) == 0, "tile sides are powers of two");

    extern __shared__ __align__(16) unsigned char smem[];

    unsigned block = blockIdx.x;
    const int phase = block % num_phases;
    block /= num_phases;
    const int m_tile = block % m_tiles;
    block /= m_tiles;
    const int col_tile = block % col_tiles;
    block /= col_tiles;
    const int n = block % batch;
    const int group = block / batch;
    const AxisPhase p = load_axis_phase(phases, phase);
    const int q0 = col_tile * BN;
    if (q0 >= p.count) return;  // this phase has fewer columns than the largest one

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int taps = p.tap_count;
    const int tap_span = taps > 0 ? (taps - 1) * abs(p.tap_in_step) : 0;
    // First input position of the window, aligned down to a 16-byte vector.
    const int lo = p.in_base + q0 * p.in_step - (p.tap_in_step < 0 ? tap_span : 0);
    const int window_first = floor_to(lo, VEC);
    const int head = lo - window_first;

    const int fold = 1 << fold_shift;
    const int rows = out_channels << fold_shift;
    const Index in_base = (static_cast<Index>(n) * groups + group) * channels * static_cast<Index>(in_w);
    const Index w_base = static_cast<Index>(group) * kernel_w * out_channels * channels_padded;

    const int a_bytes = max_taps * BM * AROW * static_cast<int>(sizeof(T));
    const int stage_bytes = a_bytes + WROWS * window_stride * 4;
    auto a_tile = [&](int buf) { return reinterpret_cast<T*>(smem + buf * stage_bytes); };
    auto window = [&](int buf) { return reinterpret_cast<unsigned*>(smem + buf * stage_bytes + a_bytes); };

    const int slices = taps > 0 ? (channels + BK - 1) / BK : 0;  // a phase no tap reaches writes the bias
    uint4 held[ROUNDS][2];  // 16-bit types: the next slice's window, in registers between fetch and stash

    // Start loading channel slice `s` into buffer `buf`.
    auto fetch = [&](int s, int buf) {
        const int c0 = s * BK;
        T* a = a_tile(buf);
        for (int task = tid; task < taps * BM * 4; task += THREADS) {
            const int chunk = task & 3, row = (task >> 2) & (BM - 1), t = (task >> 2) / BM;
            const int m = m_tile * BM + row;
            const int co = m >> fold_shift, r = m & (fold - 1);
            const int k = p.tap_first + r + t * p.tap_step;
            const int c = c0 + chunk * VEC;
            const bool valid = m < rows && c < channels_padded;
            const T* src = valid ? weight + w_base + (static_cast<Index>(k) * out_channels + co) * channels_padded + c : weight;
            cp_async16(a + (t * BM + row) * AROW + chunk * VEC, src, valid);
        }
        if constexpr (WIDE) {
            unsigned* w = window(buf);
            for (int task = tid; task < WROWS * window_vectors; task += THREADS) {
                const int row = task / window_vectors, v = task - row * window_vectors;
                const int c = c0 + row, l = window_first + v * VEC;
                const bool valid = c < channels && l >= 0 && l < in_w;  // in_w % VEC == 0: all or nothing
                const T* src = valid ? in + in_base + static_cast<Index>(c) * in_w + l : in;
                cp_async16(w + row * window_stride + v * VEC, src, valid);
            }
        } else {
#pragma unroll
            for (int i = 0; i < ROUNDS; ++i) {
                const int task = tid + i * THREADS;
                const int row = task / window_vectors, v = task - row * window_vectors;
                const int l = window_first + v * VEC;
                const bool inside = task < WROWS * window_vectors && l >= 0 && l < in_w;
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int c = c0 + 2 * row + h;
                    held[i][h] = make_uint4(0, 0, 0, 0);
                    if (inside && c < channels)
                        held[i][h] = *reinterpret_cast<const uint4*>(in + in_base + static_cast<Index>(c) * in_w + l);
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
                const int task = tid + i * THREADS;
                if (task < WROWS * window_vectors) {
                    const int row = task / window_vectors, v = task - row * window_vectors;
                    const unsigned* even = reinterpret_cast<const unsigned*>(&held[i][0]);
                    const unsigned* odd = reinterpret_cast<const unsigned*>(&held[i][1]);
                    unsigned words[8];
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        words[2 * j] = __byte_perm(even[j], odd[j], 0x5410);
                        words[2 * j + 1] = __byte_perm(even[j], odd[j], 0x7632);
                    }
                    uint4* dst = reinterpret_cast<uint4*>(w + row * window_stride + v * VEC);
                    dst[0] = make_uint4(words[0], words[1], words[2], words[3]);
                    dst[1] = make_uint4(words[4], words[5], words[6], words[7]);
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
    const int b_column = head + (warp_n + g) * p.in_step;

    auto compute = [&](int buf) {
        const T* a = a_tile(buf);
        const unsigned* w = window(buf);
        for (int t = 0; t < taps; ++t) {
            const int shift = p.tap_in_step < 0 ? (taps - 1 - t) * -p.tap_in_step : t * p.tap_in_step;
            const unsigned* wt = w + b_column + shift;
            const T* at = a + (t * BM + warp_m + (lane & 15)) * AROW + (lane >> 4) * VEC;
#pragma unroll
            for (int kk = 0; kk < BK; kk += KSTEP) {
                unsigned af[MI][4], bf[NI][2];
#pragma unroll
                for (int i = 0; i < MI; ++i) {
                    ldmatrix_x4(af[i], at + i * 16 * AROW + kk);
                    if constexpr (WIDE) {
#pragma unroll
                        for (int e = 0; e < 4; ++e) af[i][e] = to_tf32(__uint_as_float(af[i][e]));
                    }
                }
                constexpr int WORDS_PER_K = WIDE ? 1 : 2;  // reduction entries per window word
                const int krow = kk / WORDS_PER_K + t4;
#pragma unroll
                for (int j = 0; j < NI; ++j) {
                    const unsigned* col = wt + j * 8 * p.in_step;
                    bf[j][0] = col[krow * window_stride];
                    bf[j][1] = col[(krow + 4) * window_stride];
                    if constexpr (WIDE) {
                        bf[j][0] = to_tf32(__uint_as_float(bf[j][0]));
                        bf[j][1] = to_tf32(__uint_as_float(bf[j][1]));
                    }
                }
#pragma unroll
                for (int i = 0; i < MI; ++i)
#pragma unroll
                    for (int j = 0; j < NI; ++j) {
                        if constexpr (WIDE) {
                            mma_tf32(acc[i][j], af[i], bf[j]);
                        } else {
                            mma_16bit<T>(acc[i][j], af[i], bf[j]);
                        }
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
    __syncthreads();
    for (int s = 0; s < slices; ++s) {
        const int buf = s & 1;
        if (s + 1 < slices) fetch(s + 1, buf ^ 1);
        compute(buf);
        if (s + 1 < slices) stash(buf ^ 1);
        cp_async_wait_all();
        __syncthreads();
    }

    // Epilogue: through shared memory, so that consecutive threads write
    // consecutive outputs: along q for one row (fold 1), or along (q, r) for
    // one output channel when the tile's rows are sub-phases of it.  The row
    // stride's padding keeps the reads below free of bank conflicts.
    constexpr int BN_SHIFT = log2_of(BN);
    const int rt_shift = fold_shift < log2_of(BM) ? fold_shift : log2_of(BM);  // log2 of one channel's rows in the tile
    const int stride = BN + (rt_shift == 0 ? 4 : 32 >> (rt_shift < 5 ? rt_shift : 5));
    float* stage = reinterpret_cast<float*>(smem);
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                stage[(warp_m + i * 16 + g + (e / 2) * 8) * stride + warp_n + j * 8 + 2 * t4 + (e % 2)] = acc[i][j][e];
    __syncthreads();

    const Index out_image = (static_cast<Index>(n) * groups + group) * out_channels;
    for (int idx = tid; idx < BM * BN; idx += THREADS) {
        const int r_local = idx & ((1 << rt_shift) - 1);
        const int rest = idx >> rt_shift;
        const int col = rest & (BN - 1);
        const int row = ((rest >> BN_SHIFT) << rt_shift) + r_local;
        const int m = m_tile * BM + row;
        const int q = q0 + col;
        if (m >= rows || q >= p.count) continue;
        const int co = m >> fold_shift, r = m & (fold - 1);
        const int o = p.out_base + q * p.out_step + r;
        if (o < 0 || o >= out_w) continue;
        float v = stage[row * stride + col];
        if (bias != nullptr) v += ValueTraits<T>::to_acc(bias[group * out_channels + co]);
        out[(out_image + co) * out_w + o] = ValueTraits<T>::from_acc(v);
    }
}
