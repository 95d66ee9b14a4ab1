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
// The values move as raw bits (Bits: 4 or 2 bytes).  One thread an output
// element in order, so the writes are coalesced; the reads gather from a
// weight small enough to stay in L2.
//
// pack_direct_weight: the same for conv_direct (_cuda._direct_weight), in its
// accumulator type (ValueTraits<T>::acc):
//
//   out[g, t, c, m] = weight[g * channels + c, m, t]   (t = kh * KW + kw; m < rows, zeros up to rows_padded)
#include "common.cuh"

constexpr int PACK_THREADS = 256;

__device__ __forceinline__ unsigned round_tf32_bits(unsigned u) {  // cvt.rn.tf32.f32's result, Inf and NaN kept
    return (u & 0x7f800000u) != 0x7f800000u ? (u + 0xfffu + ((u >> 13) & 1u)) & 0xffffe000u : u;
}

template <typename Bits, bool ROUND, bool SPLIT = false>
__global__ void __launch_bounds__(PACK_THREADS) pack_window_weight(
    const Bits* __restrict__ weight,  // (groups * in_per_group, out_per_group, taps)
    Bits* __restrict__ out,           // (groups, taps_out, rows, channels_padded); SPLIT: two of them, hi then lo
    int taps_out, int rows, int channels, int channels_padded, int in_per_group, int out_per_group, int taps, int step,
    int forward, long long total) {
    for (long long i = blockIdx.x * static_cast<long long>(PACK_THREADS) + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * PACK_THREADS) {
        const int c = static_cast<int>(i % channels_padded);
        const long long r = i / channels_padded;
        const int m = static_cast<int>(r % rows);
        const int k = static_cast<int>(r / rows % taps_out);
        const long long g = r / rows / taps_out;
        Bits value = 0, lo = 0;
        if (c < channels && k % step == 0 && k / step < taps) {
            const long long row = forward ? g * in_per_group + c : g * in_per_group + m;
            const int column = forward ? m : c;
            const Bits raw = weight[(row * out_per_group + column) * taps + k / step];
            value = raw;
            if constexpr (ROUND || SPLIT) value = round_tf32_bits(raw);
            if constexpr (SPLIT) lo = round_tf32_bits(__float_as_uint(__uint_as_float(raw) - __uint_as_float(value)));
        }
        out[i] = value;
        if constexpr (SPLIT) out[total + i] = lo;
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
