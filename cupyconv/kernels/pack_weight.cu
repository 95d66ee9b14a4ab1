// The weight as the 1D window kernels read it (conv_window, conv_wgmma,
// conv_wgmma_resident; _cuda._window_weight), in one pass:
//
//   out[g, k, m, c] = weight[g * in_per_group + c, m, t]   forward: M output, C input channels a group
//   out[g, k, m, c] = weight[g * in_per_group + m, c, t]   grad_input: M input, C output channels a group
//
// for k = t * step and t < taps, c < channels, and zeros elsewhere: the taps
// between (step is the dilation where the forward pass folds a dilated kernel
// into dense taps, else 1; taps_out may round the span up) and the channels
// padded up to channels_padded (16 bytes).  _kernels.pack_window_weight is the
// same layout in NumPy.  With ROUND the float values are rounded to TF32 as
// cvt.rn.tf32.f32 rounds (to nearest, ties to even; Inf and NaN kept), for the
// wgmma kernels, which read the weight as stored, and conv_window's TF32
// builds, which hand it to the tensor cores as loaded.  With SPLIT (float) the
// output holds two such arrays, hi then lo: hi the value rounded so, lo the
// remainder (value - hi, exact in float) rounded so, as MmaOp<float, 3>
// splits an operand for 3xTF32 (conv_wgmma_x3 reads both from shared memory).
//
// The values move as raw bits (Bits: 4 or 2 bytes); the forward layout by
// tiles through shared memory (below).
//
// pack_direct_weight: the same for conv_direct (_cuda._direct_weight), in its
// accumulator type (ValueTraits<T>::acc):
//
//   out[g, t, c, m] = weight[g * channels + c, m, t]   (t = kh * KW + kw; m < rows, zeros up to rows_padded)
//
// pack_gemm_weight: conv_gemm's and conv_mma's packed weight (_packs_weight
// in conv_gemm.py), consecutive in the GEMM's rows, values as stored:
//
//   out[g, t, c, m] = weight[g * in_per_group + c, m, t]   forward (c input, m output channels a group)
//   out[g, t, m, c] = weight[g * in_per_group + c, m, t]   grad_input
#include "common.cuh"

constexpr int PACK_THREADS = 256;

__device__ __forceinline__ unsigned round_tf32_bits(unsigned u) {  // cvt.rn.tf32.f32's result, Inf and NaN kept
    return (u & 0x7f800000u) != 0x7f800000u ? (u + 0xfffu + ((u >> 13) & 1u)) & 0xffffe000u : u;
}

// The forward pass's weight runs contiguous along (m, t) for each input
// channel c, and the packed rows along c, so one thread an output element
// read elements rows x taps apart, a sector each (39 us a call on X3's 16 MB
// weight, 15% of its "tf32" forward pass; perf notes v39).  So the forward
// layout goes by tiles of PACK_TILE channels x PACK_TILE consecutive (m, t)
// pairs of one group, through shared memory: read along (m, t), written
// along c.  The thread of pair (m, t) and channel c writes row k = t * step
// and the zeros of rows k + 1 .. up to the next tap's (past the last tap: up
// to taps_out).  grad_input's runs are along (c, t), the packed rows' order:
// it keeps one thread an output element.
constexpr int PACK_TILE = 32;

template <typename Bits, bool ROUND, bool SPLIT>
__device__ __forceinline__ void pack_window_store(Bits* out, long long at, long long total, Bits raw) {
    Bits value = raw, lo = 0;
    if constexpr (ROUND || SPLIT) value = round_tf32_bits(raw);
    if constexpr (SPLIT) lo = round_tf32_bits(__float_as_uint(__uint_as_float(raw) - __uint_as_float(value)));
    out[at] = value;
    if constexpr (SPLIT) out[total + at] = lo;
}

template <typename Bits, bool ROUND, bool SPLIT = false>
__global__ void __launch_bounds__(PACK_THREADS) pack_window_weight(
    const Bits* __restrict__ weight,  // (groups * in_per_group, out_per_group, taps)
    Bits* __restrict__ out,           // (groups, taps_out, rows, channels_padded); SPLIT: two of them, hi then lo
    int taps_out, int rows, int channels, int channels_padded, int in_per_group, int out_per_group, int taps, int step,
    int forward, long long total) {
    if (!forward) {
        for (long long i = blockIdx.x * static_cast<long long>(PACK_THREADS) + threadIdx.x; i < total;
             i += static_cast<long long>(gridDim.x) * PACK_THREADS) {
            const int c = static_cast<int>(i % channels_padded);
            const long long r = i / channels_padded;
            const int m = static_cast<int>(r % rows);
            const int k = static_cast<int>(r / rows % taps_out);
            const long long g = r / rows / taps_out;
            const bool inside = c < channels && k % step == 0 && k / step < taps;
            pack_window_store<Bits, ROUND, SPLIT>(out, i, total, inside ? weight[((g * in_per_group + m) * out_per_group + c) * taps + k / step] : Bits{});
        }
        return;
    }
    __shared__ Bits tile[PACK_TILE][PACK_TILE + 1];
    const int run = rows * taps;  // an input channel's (m, t) pairs
    const int c_tiles = (channels_padded + PACK_TILE - 1) / PACK_TILE, j_tiles = (run + PACK_TILE - 1) / PACK_TILE;
    const long long groups = total / (static_cast<long long>(taps_out) * rows * channels_padded);
    const long long tiles = groups * c_tiles * j_tiles;
    const int tx = threadIdx.x % PACK_TILE, ty = threadIdx.x / PACK_TILE;  // PACK_THREADS / PACK_TILE rows at once
    for (long long i = blockIdx.x; i < tiles; i += gridDim.x) {
        const int j0 = static_cast<int>(i % j_tiles) * PACK_TILE;
        const int c0 = static_cast<int>(i / j_tiles % c_tiles) * PACK_TILE;
        const long long g = i / j_tiles / c_tiles;
        __syncthreads();  // (the previous tile's reads of `tile`)
        for (int cc = ty; cc < PACK_TILE; cc += PACK_THREADS / PACK_TILE) {
            const int c = c0 + cc, j = j0 + tx;
            tile[cc][tx] = c < channels && j < run ? weight[(g * in_per_group + c) * static_cast<long long>(run) + j] : Bits{};
        }
        __syncthreads();
        const int c = c0 + tx;
        if (c >= channels_padded) continue;
        for (int jj = ty; jj < PACK_TILE && j0 + jj < run; jj += PACK_THREADS / PACK_TILE) {
            const int m = (j0 + jj) / taps, t = (j0 + jj) % taps;
            const int k = t * step, next = t + 1 < taps ? k + step : taps_out;
            if (k >= taps_out) continue;  // (taps_out spans every tap: not taken)
            const long long at = ((g * taps_out + k) * rows + m) * static_cast<long long>(channels_padded) + c;
            pack_window_store<Bits, ROUND, SPLIT>(out, at, total, tile[tx][jj]);
            for (int z = k + 1; z < next; ++z)
                pack_window_store<Bits, false, SPLIT>(out, at + (z - k) * static_cast<long long>(rows) * channels_padded, total, Bits{});
        }
    }
}

template <typename T>
__global__ void __launch_bounds__(PACK_THREADS) pack_direct_weight(
    const T* __restrict__ weight,                     // (groups * channels, rows, taps)
    typename ValueTraits<T>::acc* __restrict__ out,   // (groups, taps, channels, rows_padded)
    int taps, int channels, int rows, int rows_padded, long long total) {
    for (long long i = blockIdx.x * static_cast<long long>(PACK_THREADS) + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * PACK_THREADS) {
        const int m = static_cast<int>(i % rows_padded);
        const long long r = i / rows_padded;
        const int c = static_cast<int>(r % channels);
        const int t = static_cast<int>(r / channels % taps);
        const long long g = r / channels / taps;
        typename ValueTraits<T>::acc value = 0;
        if (m < rows) value = ValueTraits<T>::to_acc(weight[((g * channels + c) * rows + m) * taps + t]);
        out[i] = value;
    }
}

template <typename T>
__global__ void __launch_bounds__(PACK_THREADS) pack_gemm_weight(
    const T* __restrict__ weight,  // (groups * in_per_group, out_per_group, taps)
    T* __restrict__ out,           // (groups, taps, in_per_group, out_per_group); grad_input: the last two swapped
    int taps, int in_per_group, int out_per_group, int forward, long long total) {
    for (long long i = blockIdx.x * static_cast<long long>(PACK_THREADS) + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * PACK_THREADS) {
        const int inner = forward ? out_per_group : in_per_group, outer = forward ? in_per_group : out_per_group;
        const int a = static_cast<int>(i % inner);
        const long long r = i / inner;
        const int b = static_cast<int>(r % outer);
        const int t = static_cast<int>(r / outer % taps);
        const long long g = r / outer / taps;
        const int c = forward ? b : a, m = forward ? a : b;
        out[i] = weight[((g * in_per_group + c) * out_per_group + m) * taps + t];
    }
}
