// The forward pass when every group has one input channel (depthwise, with
// any channel multiplier M = C_out / groups): no reduction over channels, so
// no GEMM shape.  Each output element is a short sum over the taps that
// reach it, which makes this a streaming stencil bound by memory traffic:
//
//   out[n, co, oh, ow] = bias[co] + sum_{kh, kw} weight[co, kh, kw] * in[n, co / M, ih, iw]
//   where oh + pad_h - kh * dil_h = ih * stride_h (likewise w), 0 <= ih < in_h.
//
// (weight (C_in, M, KH, KW) with C_in = groups is (C_out, KH, KW) in order.)
// A warp owns 32 * OUTS consecutive outputs of one row, lane l the outputs
// l, l + 32, ...: every store instruction writes 32 consecutive elements, and
// neighbouring lanes' input reads fall in the same lines.  Taps are
// visited per axis from the first that reaches the output's phase, in steps
// of stride / gcd(stride, dilation), so no tap is tested that cannot reach.
// Along W (the long axis) a thread follows its outputs' phase and position by
// additions: the stencil is memory-bound only if no division is done per
// output.
#include "common.cuh"

// The taps of one axis that reach output position `o`: the first index and
// the count, with ih = (o + pad - k * dil) / stride for k = first + i * step.
struct TapRange {
    int first;
    int count;
};
__device__ __forceinline__ TapRange taps_reaching(int o, int pad, int stride, int dil, int kernel, int in_size,
                                                  const int* __restrict__ first_tap, int tap_step) {
    const int shifted = o + pad;
    int first = first_tap[shifted % stride];  // smallest k with k * dil == shifted (mod stride), or kernel if none
    int count = 0;
    if (first < kernel) {
        const int step_in = tap_step * dil / stride;  // input positions between consecutive reaching taps
        int ih = (shifted - first * dil) / stride;    // exact
        if (ih >= in_size) {  // skip the taps whose input position lies past the end
            const int skip = (ih - in_size + step_in) / step_in;
            first += skip * tap_step;
            ih -= skip * step_in;
        }
        // Taps continue while k < kernel and ih >= 0.
        if (first < kernel && ih >= 0) {
            const int by_kernel = (kernel - 1 - first) / tap_step + 1;
            const int by_input = ih / step_in + 1;
            count = by_kernel < by_input ? by_kernel : by_input;
        }
    }
    return TapRange{first, count};
}

template <typename T, typename Index, int OUTS, int TAPS_W>
__global__ void __launch_bounds__(256) depthwise_forward(
    const T* __restrict__ in,       // (batch, groups, in_h, in_w)
    const T* __restrict__ weight,   // (groups * multiplier, kernel_h, kernel_w)
    const T* __restrict__ bias,     // (groups * multiplier,) or null
    T* __restrict__ out,            // (batch, groups * multiplier, out_h, out_w)
    const int* __restrict__ table,  // first tap per residue: stride_h entries for H, stride_w for W;
                                    // then per W residue r the input offset of that tap, (first * dil_w - r) / stride_w
    int multiplier, int channels_out, int in_h, int in_w, int out_h, int out_w, int kernel_h, int kernel_w,
    int stride_h, int stride_w, int pad_h, int pad_w, int dil_h, int dil_w, int tap_step_h, int tap_step_w,
    int row_chunks,  // ceil(out_w / (32 * OUTS))
    Index rows)      // batch * channels_out * out_h
{
    typedef typename ValueTraits<T>::acc Acc;
    const Index work = (static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;  // this warp's chunk
    if (work >= rows * row_chunks) return;
    const Index row = work / row_chunks;
    const int ow0 = static_cast<int>(work - row * row_chunks) * (32 * OUTS) + threadIdx.x % 32;
    const int oh = static_cast<int>(row % out_h);
    const Index plane = row / out_h;  // n * channels_out + co
    const int co = static_cast<int>(plane % channels_out);
    const Index n = plane / channels_out;
    const T* x = in + (n * (channels_out / multiplier) + co / multiplier) * static_cast<Index>(in_h) * in_w;
    const T* w = weight + static_cast<Index>(co) * kernel_h * kernel_w;
    const Acc b = bias != nullptr ? ValueTraits<T>::to_acc(bias[co]) : Acc(0);

    // H: the taps of this row, once.
    const TapRange th = taps_reaching(oh, pad_h, stride_h, dil_h, kernel_h, in_h, table, tap_step_h);
    const int ih0 = (oh + pad_h - th.first * dil_h) / stride_h;  // (unused when th.count == 0)
    const int ih_step = tap_step_h * dil_h / stride_h;
    // W: ow + pad_w = q * stride_w + r, followed from one output to the next
    // (32 apart) by additions; tap k = first[r] + c * step reads iw = q - off[r] - c * step_in.
    const int* first_w = table + stride_h;
    const int* off_w = first_w + stride_w;
    const int iw_step = tap_step_w * dil_w / stride_w;
    int q = (ow0 + pad_w) / stride_w;
    int r = (ow0 + pad_w) - q * stride_w;
    const int q_inc = 32 / stride_w, r_inc = 32 - q_inc * stride_w;
    T* y = out + row * out_w;
    Acc acc[OUTS];
    int kw_first[OUTS], iw_first[OUTS];
#pragma unroll
    for (int i = 0; i < OUTS; ++i) {
        acc[i] = b;
        kw_first[i] = first_w[r];
        iw_first[i] = q - off_w[r];
        q += q_inc;
        r += r_inc;
        if (r >= stride_w) {
            r -= stride_w;
            ++q;
        }
    }
    for (int a = 0; a < th.count; ++a) {
        const int kh = th.first + a * tap_step_h;
        const T* x_row = x + static_cast<Index>(ih0 - a * ih_step) * in_w;
        const T* w_row = w + kh * kernel_w;
        if constexpr (TAPS_W > 0) {
            // At most TAPS_W taps reach an output: a fully unrolled, predicated
            // walk, so every output's loads are in flight together.
#pragma unroll
            for (int i = 0; i < OUTS; ++i)
#pragma unroll
                for (int c = 0; c < TAPS_W; ++c) {
                    const int kw = kw_first[i] + c * tap_step_w;
                    const int iw = iw_first[i] - c * iw_step;
                    if (ow0 + 32 * i < out_w && kw < kernel_w && iw >= 0 && iw < in_w)
                        acc[i] = mac(ValueTraits<T>::to_acc(w_row[kw]), ValueTraits<T>::to_acc(x_row[iw]), acc[i]);
                }
        } else {
#pragma unroll
            for (int i = 0; i < OUTS; ++i) {
                if (ow0 + 32 * i >= out_w) break;
                int iw = iw_first[i];
                for (int kw = kw_first[i]; kw < kernel_w && iw >= 0; kw += tap_step_w, iw -= iw_step) {
                    if (iw < in_w) acc[i] = mac(ValueTraits<T>::to_acc(w_row[kw]), ValueTraits<T>::to_acc(x_row[iw]), acc[i]);
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < OUTS; ++i) {
        if (ow0 + 32 * i < out_w) y[ow0 + 32 * i] = ValueTraits<T>::from_acc(acc[i]);
    }
}
