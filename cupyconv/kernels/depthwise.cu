// The forward pass when every group has one input channel (depthwise, with
// any channel multiplier M = C_out / groups): no reduction over channels, so
// no GEMM shape.  Each output element is a short sum over the taps that
// reach it, which makes this a streaming stencil bound by memory traffic:
//
//   out[n, co, oh, ow] = bias[co] + sum_{kh, kw} weight[co, kh, kw] * in[n, co / M, ih, iw]
//   where oh + pad_h - kh * dil_h = ih * stride_h (likewise w), 0 <= ih < in_h.
//
// (weight (C_in, M, KH, KW) with C_in = groups is (C_out, KH, KW) in order.)
// A warp owns `warp_chunks` consecutive chunks of 32 * OUTS outputs of one
// row, lane l the outputs l, l + 32, ... of each: every store instruction
// writes 32 consecutive elements, and neighbouring lanes' input reads fall in
// the same lines.  The row's setup (its position, its H taps, the bias) is
// done once for all its chunks: with one chunk per warp it cost as much as
// the stencil itself (H100, X1: 0.45 of 0.94 ms).  Taps are
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
    int row_chunks,   // ceil(out_w / (32 * OUTS))
    int warp_chunks,  // consecutive chunks of one row per warp
    Index rows)       // batch * channels_out * out_h
{
    typedef typename ValueTraits<T>::acc Acc;
    const int row_warps = (row_chunks + warp_chunks - 1) / warp_chunks;
    const Index work = (static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;  // this warp's run of chunks
    if (work >= rows * row_warps) return;
    const Index row = work / row_warps;
    const int chunk_first = static_cast<int>(work - row * row_warps) * warp_chunks;
    const int chunk_end = min(chunk_first + warp_chunks, row_chunks);
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
    const int q_inc = 32 / stride_w, r_inc = 32 - q_inc * stride_w;
    T* y = out + row * out_w;
    for (int chunk = chunk_first; chunk < chunk_end; ++chunk) {
        const int ow0 = chunk * (32 * OUTS) + threadIdx.x % 32;
        int q = (ow0 + pad_w) / stride_w;
        int r = (ow0 + pad_w) - q * stride_w;
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
}

// ---------------------------------------------------------------------------
// The backward pass of the same problems, grad_input and grad_weight in one
// read of grad_output and x.  For input channel c (one per group) and input
// position (n, ih, iw), tap t = (j, kh, kw) of the multiplier M and kernel
// reads
//     g_t = grad_output[n, c * M + j, ih * stride_h - pad_h + kh * dil_h, iw * stride_w - pad_w + kw * dil_w]
// (zero outside), and
//     grad_input[n, c, ih, iw]  = sum_t weight[c, j, kh, kw] * g_t            (a gather: no phases)
//     grad_weight[c, j, kh, kw] = sum_{n, ih, iw} x[n, c, ih, iw] * g_t.
// Block (channel, split) walks the split's share of the channel's
// batch * in_h * in_w positions, consecutive threads on consecutive positions.
// Each thread keeps one grad_weight sum per tap in registers (double, or
// compensated double for double: ReductionTraits), so up to MAX_TAPS taps;
// the block then reduces them in a fixed tree into workspace[split][c][t],
// which sum_splits adds in split order.  No atomics: bitwise deterministic.
// grad_input sums in the accumulator type, like the forward stencil.

__device__ __forceinline__ double combine(double a, double b) { return a + b; }
__device__ __forceinline__ compensated combine(compensated a, compensated b) {
    double s, e;
    two_sum(a.hi, b.hi, s, e);
    return compensated{s, (a.lo + b.lo) + e};
}
__device__ __forceinline__ double shuffle_down(double v, int delta) { return __shfl_down_sync(0xffffffffu, v, delta); }
__device__ __forceinline__ compensated shuffle_down(compensated v, int delta) {
    return compensated{__shfl_down_sync(0xffffffffu, v.hi, delta), __shfl_down_sync(0xffffffffu, v.lo, delta)};
}

template <typename T, typename Index, int MAX_TAPS, int THREADS>
__global__ void __launch_bounds__(THREADS) depthwise_backward(
    const T* __restrict__ grad_output,  // (batch, channels * multiplier, out_h, out_w)
    const T* __restrict__ x,            // (batch, channels, in_h, in_w)
    const T* __restrict__ weight,       // (channels, multiplier, kernel_h, kernel_w)
    T* __restrict__ grad_input,         // like x, or null when not wanted
    double* __restrict__ workspace,     // (splits, channels, multiplier * kernel_h * kernel_w), or null
    int batch, int channels, int multiplier, int in_h, int in_w, int out_h, int out_w, int kernel_h, int kernel_w,
    int stride_h, int stride_w, int pad_h, int pad_w, int dil_h, int dil_w,
    long long per_split)  // positions per split
{
    typedef typename ValueTraits<T>::acc Acc;
    typedef typename ReductionTraits<T>::sum Sum;
    constexpr int WARPS = THREADS / 32;
    static_assert(THREADS % 32 == 0 && MAX_TAPS <= THREADS, "one thread per tap at the end");
    __shared__ int tap_dh[MAX_TAPS], tap_dw[MAX_TAPS];
    __shared__ Index tap_offset[MAX_TAPS];
    __shared__ Acc tap_weight[MAX_TAPS];
    __shared__ Sum warp_sums[WARPS][MAX_TAPS];

    const int channel = blockIdx.x % channels;
    const int split = blockIdx.x / channels;
    const int kernel_taps = kernel_h * kernel_w;
    const int taps = multiplier * kernel_taps;
    const Index in_hw = static_cast<Index>(in_h) * in_w;
    const Index out_hw = static_cast<Index>(out_h) * out_w;
    for (int t = threadIdx.x; t < taps; t += THREADS) {
        const int j = t / kernel_taps;
        const int kh = (t - j * kernel_taps) / kernel_w;
        const int kw = t - j * kernel_taps - kh * kernel_w;
        tap_dh[t] = kh * dil_h;
        tap_dw[t] = kw * dil_w;
        tap_offset[t] = j * out_hw + static_cast<Index>(kh * dil_h) * out_w + kw * dil_w;
        tap_weight[t] = ValueTraits<T>::to_acc(weight[static_cast<Index>(channel) * taps + t]);
    }
    __syncthreads();

    Sum acc[MAX_TAPS];
#pragma unroll
    for (int t = 0; t < MAX_TAPS; ++t) acc[t] = Sum{};
    const bool want_weight = workspace != nullptr;
    const long long total = static_cast<long long>(batch) * in_hw;
    const long long begin = static_cast<long long>(split) * per_split;
    const long long end = min(total, begin + per_split);
    long long f = begin + threadIdx.x;
    if (f < end) {
        int n = static_cast<int>(f / in_hw);
        const Index pos = static_cast<Index>(f - static_cast<long long>(n) * in_hw);
        int ih = static_cast<int>(pos / in_w);
        int iw = static_cast<int>(pos - static_cast<Index>(ih) * in_w);
        for (; f < end; f += THREADS) {
            const int oh0 = ih * stride_h - pad_h;
            const int ow0 = iw * stride_w - pad_w;
            const Index plane = static_cast<Index>(n) * channels + channel;
            const Index gy_base = plane * multiplier * out_hw + static_cast<Index>(oh0) * out_w + ow0;
            const Index x_index = plane * in_hw + static_cast<Index>(ih) * in_w + iw;
            const Acc xv = want_weight ? ValueTraits<T>::to_acc(x[x_index]) : Acc(0);
            Acc g = Acc(0);
#pragma unroll
            for (int t = 0; t < MAX_TAPS; ++t) {
                if (t < taps) {
                    const int oh = oh0 + tap_dh[t];
                    const int ow = ow0 + tap_dw[t];
                    if (static_cast<unsigned>(oh) < static_cast<unsigned>(out_h) &&
                        static_cast<unsigned>(ow) < static_cast<unsigned>(out_w)) {
                        const Acc v = ValueTraits<T>::to_acc(grad_output[gy_base + tap_offset[t]]);
                        g = mac(tap_weight[t], v, g);
                        if (want_weight) acc[t] = mac(xv, v, acc[t]);
                    }
                }
            }
            if (grad_input != nullptr) grad_input[x_index] = ValueTraits<T>::from_acc(g);
            // Next position, THREADS further on: a division only when a row wraps.
            iw += THREADS;
            if (iw >= in_w) {
                const int rows = iw / in_w;
                iw -= rows * in_w;
                ih += rows;
                if (ih >= in_h) {
                    const int images = ih / in_h;
                    ih -= images * in_h;
                    n += images;
                }
            }
        }
    }
    if (!want_weight) return;

    // Fixed-order reduction: a shuffle tree within each warp, then the warps'
    // sums in warp order.
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (int t = 0; t < MAX_TAPS; ++t) {
        if (t < taps) {
            Sum v = acc[t];
#pragma unroll
            for (int delta = 16; delta > 0; delta /= 2) v = combine(v, shuffle_down(v, delta));
            if (lane == 0) warp_sums[warp][t] = v;
        }
    }
    __syncthreads();
    if (threadIdx.x < taps) {
        Sum v = warp_sums[0][threadIdx.x];
#pragma unroll
        for (int w = 1; w < WARPS; ++w) v = combine(v, warp_sums[w][threadIdx.x]);
        workspace[(static_cast<Index>(split) * channels + channel) * taps + threadIdx.x] = to_double(v);
    }
}
