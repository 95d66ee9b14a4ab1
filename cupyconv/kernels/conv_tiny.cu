// The forward pass of a tiny problem (X4: N1 Ci4 Co8 K3 L5, 56 outputs of 12
// products each): one thread an output element, summing its products in the
// accumulator type with FMA (float32 for float32 and the 16-bit types, float64
// for float64: float32's "highest" and "tf32" alike, so as accurate as the
// CUDA-core GEMM), the bias last.  Such a call is all launch: conv_gemm's
// smallest tile takes 3.9 us on the H100 for X4's 56 outputs (its phase
// table, its staging and barriers), this 2.4 (CUPTI; perf notes v50).  The host
// routes here only outputs of up to 16384 elements whose sums are short
// (_cuda.TINY_MAX_OUTPUT, TINY_MAX_PRODUCTS): a thread's sum is serial.
//
//   out[n, g*M + m, oh, ow] = bias[g*M + m]
//       + sum_{kh, kw} sum_{c < C} in[n, g*C + c, ih, iw] * weight[g*C + c, m, kh, kw]
//   over the taps with oh + pad_h - kh * dil_h = ih * stride_h, 0 <= ih < in_h (likewise w).
//
// The weight is read as the user gave it, (C_in, C_out / groups, KH, KW).
#include "common.cuh"

constexpr int TINY_THREADS = 128;

template <typename T, typename Index>
__global__ void __launch_bounds__(TINY_THREADS) conv_tiny(
    const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias, T* __restrict__ y,
    int batch, int groups, int C, int M, int in_h, int in_w, int out_h, int out_w,
    int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw) {
    typedef ValueTraits<T> V;
    typedef typename V::acc Acc;
    const int channels = groups * M;
    const Index total = Index(batch) * channels * out_h * out_w;
    const Index in_plane = Index(in_h) * in_w;
    const Index w_channel = Index(M) * kh * kw;  // weight elements between input channels
    for (Index i = Index(blockIdx.x) * TINY_THREADS + threadIdx.x; i < total; i += Index(gridDim.x) * TINY_THREADS) {
        Index rest = i;
        const int ow = int(rest % out_w);
        rest /= out_w;
        const int oh = int(rest % out_h);
        rest /= out_h;
        const int co = int(rest % channels);
        const Index n = rest / channels;
        const int g = co / M, m = co - g * M;
        Acc sum = Acc(0);
        const T* x_group = x + ((n * groups + g) * C) * in_plane;  // in[n, g*C, 0, 0]
        const T* w_group = w + (Index(g) * C * M + m) * kh * kw;                // weight[g*C, m, 0, 0]
        for (int a = 0; a < kh; ++a) {
            const int th = oh + ph - a * dh;
            if (th < 0 || th % sh != 0 || th / sh >= in_h) continue;
            const int ih = th / sh;
            for (int b = 0; b < kw; ++b) {
                const int tw = ow + pw - b * dw;
                if (tw < 0 || tw % sw != 0 || tw / sw >= in_w) continue;
                const T* xp = x_group + Index(ih) * in_w + tw / sw;
                const T* wp = w_group + a * kw + b;
                for (int c = 0; c < C; ++c) sum = mac(V::to_acc(xp[c * in_plane]), V::to_acc(wp[c * w_channel]), sum);
            }
        }
        // The bias last: a sum started from it rounds every addition at the
        // bias's magnitude (twice the error on the test sweep's float32 cases).
        if (bias != nullptr) sum += V::to_acc(bias[co]);
        y[i] = V::from_acc(sum);
    }
}
