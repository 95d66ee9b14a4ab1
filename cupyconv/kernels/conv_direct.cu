// The forward pass as a direct, output-stationary sum on CUDA cores, for
// problems whose outputs sum few products: strides at or above the kernel's
// reach, where most phases hold one tap or none (P5: 3x3, stride 5).  There
// the polyphase GEMMs (conv_gemm, conv_mma, conv_window) write each phase as
// its own strided lattice: a warp's store touches one 32-byte sector per
// value, L2 merges the partial sectors of many blocks, and what it evicts
// half-written is read back from DRAM.  Here a block writes contiguous runs
// of outputs across every phase, once, in order.
//
// Tile: one (group, image n, output row oh, BM output channels, BW =
// stride_w * CP consecutive output columns starting at a multiple of BW).
// With ow0 = w_tile * BW, tile column c = slot * CP + j is output column
//
//   ow = ow0 + slot + stride_w * j        (slot < stride_w, j < CP)
//
// so a slot holds one W phase and consecutive j read consecutive input
// columns.  Output row oh reads the H taps kh with (oh + pad_h - kh * dil_h)
// divisible by stride_h, which depend only on the row's class
// (oh + pad_h) mod stride_h.
//
// Block: one (group, n, BM channels, row class) and up to tiles_per_block
// consecutive tiles (row, w_tile) of that class, rows oh = class_first +
// stride_h * i.  The class's weight is staged once per block; each tile's
// input rows are fetched into registers while the previous tile computes.
//
// Threads: 256 = 8 along channels (TM = BM / 8 each) x 32 along columns.  A
// thread takes TN consecutive columns of one slot at a time (a column group)
// and loops over the tile's groups; the 4 column threads of a warp take
// 4 * TN consecutive columns, one slot (the host makes CP a multiple of
// 4 * TN), so a warp's taps are uniform and only its own phase's taps are
// visited.  Per (H tap, W tap, channel) a thread does TM x TN FMAs from TN
// input and TM weight values in shared memory.
//
// The weight comes packed by the host in the accumulator type,
// (groups, KH, KW, C, M_pad) with M_pad = m_tiles * BM (zeros past M).
//
// Shared memory (accumulator type), after a 144-byte header (the class's H
// taps):
//   ws     [th_max][KW][C][BM]   the weight of the class's H taps
//   xs     [th_max][C][span]     the tile's input rows ih(th), columns iw_lo .. iw_lo + span - 1 (zero outside)
//   stage  [BM][BW + 1]          the tile's outputs, written out in order
// where span = floor((BW - 1 + pad_w) / s_w) - floor((pad_w - (KW - 1) d_w) / s_w) + 1
// (the host computes it, th_max, the most H taps of any class, and checks
// th_max * C * span <= 256 * DIRECT_FETCH).
#include "common.cuh"

constexpr int DIRECT_HEADER_BYTES = 144;  // 17 ints (H taps, count), with room to spare, 16-byte aligned (_kernels.DIRECT_HEADER_BYTES)
constexpr int DIRECT_FETCH = 8;           // input values per thread per tile, at most (_kernels.DIRECT_FETCH)

__device__ __forceinline__ int floor_div(int a, int b) {  // b > 0
    const int q = a / b;
    return q - ((a % b != 0) && ((a < 0) != (b < 0)));
}

template <typename T, typename Index, int BM, int TN>
__global__ void __launch_bounds__(256, (BM >= 64 || sizeof(T) == 8) ? 2 : 4) conv_direct(
    const T* __restrict__ in,                                // (batch, groups * channels, in_h, in_w)
    const typename ValueTraits<T>::acc* __restrict__ packed,  // (groups, kernel_h, kernel_w, channels, m_pad)
    const T* __restrict__ bias,                              // (groups * out_channels,), or null for none
    T* __restrict__ out,                                     // (batch, groups * out_channels, out_h, out_w)
    int batch, int groups, int channels, int out_channels, int m_pad,
    int in_h, int in_w, int out_h, int out_w,
    int kernel_h, int kernel_w, int stride_h, int stride_w, int pad_h, int pad_w, int dil_h, int dil_w,
    int th_max, int cp, int span, int w_tiles, int m_tiles, int tiles_per_block, int chunks) {
    typedef typename ValueTraits<T>::acc Acc;
    constexpr int THREADS = 256, CO_THREADS = 8, COL_THREADS = THREADS / CO_THREADS;
    constexpr int TM = BM / CO_THREADS;
    constexpr int VEC = 16 / sizeof(Acc);
    static_assert(BM % CO_THREADS == 0 && BM % VEC == 0, "BM must split over 8 channel threads and 16-byte vectors");

    // Dynamic shared memory only (the host sizes it and allows the device's
    // most): the class's H taps first (th_max <= 16, host), then the arrays.
    extern __shared__ __align__(16) unsigned char smem[];
    int* s_kh = reinterpret_cast<int*>(smem);
    int* s_nth = s_kh + 16;

    const int bw = stride_w * cp;
    Acc* ws = reinterpret_cast<Acc*>(smem + DIRECT_HEADER_BYTES);
    Acc* xs = ws + th_max * kernel_w * channels * BM;
    Acc* stage = xs + th_max * channels * span;
    const int stage_stride = bw + 1;

    unsigned block = blockIdx.x;
    const int chunk = block % chunks;
    block /= chunks;
    const int row_class = block % stride_h;  // rows oh = row_class + stride_h * i
    block /= stride_h;
    const int m_tile = block % m_tiles;
    block /= m_tiles;
    const int n = block % batch;
    const int group = block / batch;
    const int class_rows = row_class < out_h ? (out_h - 1 - row_class) / stride_h + 1 : 0;
    const int tile_first = chunk * tiles_per_block;
    const int tile_end = min(tile_first + tiles_per_block, class_rows * w_tiles);
    if (tile_first >= tile_end) return;
    const int m0 = m_tile * BM;
    const int tid = threadIdx.x;

    if (tid == 0) {
        int count = 0;
        for (int kh = 0; kh < kernel_h && count < th_max; ++kh) {
            if ((row_class + pad_h - kh * dil_h) % stride_h != 0) continue;  // C's %: zero exactly when divisible
            s_kh[count++] = kh;
        }
        *s_nth = count;
    }
    __syncthreads();
    const int nth = *s_nth;

    // The class's weight: rows (t, kw, c) of BM channels, 16-byte copies.
    {
        const int row_vectors = BM / VEC;
        const int vectors = nth * kernel_w * channels * row_vectors;
        for (int e = tid; e < vectors; e += THREADS) {
            const int v = e % row_vectors;
            int row = e / row_vectors;
            const int c = row % channels;
            row /= channels;
            const int kw = row % kernel_w;
            const int t = row / kernel_w;
            const Index src = ((static_cast<Index>(group) * kernel_h + s_kh[t]) * kernel_w + kw) * channels + c;
            reinterpret_cast<uint4*>(ws)[e] = *reinterpret_cast<const uint4*>(packed + src * m_pad + m0 + v * VEC);
        }
    }

    const Index in_plane = static_cast<Index>(in_h) * in_w;
    const Index in_image = (static_cast<Index>(n) * groups + group) * channels * in_plane;
    const int xs_count = nth * channels * span;
    T held[DIRECT_FETCH];
    // Fetch tile f's input rows into registers: element e = (t, c, u) of xs.
    auto fetch = [&](int f) {
        const int oh = row_class + stride_h * (f / w_tiles);
        const int ow0 = (f % w_tiles) * bw;
        const int iw_lo = floor_div(ow0 + pad_w - (kernel_w - 1) * dil_w, stride_w);
#pragma unroll
        for (int i = 0; i < DIRECT_FETCH; ++i) {
            const int e = tid + i * THREADS;
            held[i] = T();  // zero in every type
            if (e < xs_count) {
                const int u = e % span;
                const int rest = e / span;
                const int c = rest % channels;
                const int t = rest / channels;
                const int ih = floor_div(oh + pad_h - s_kh[t] * dil_h, stride_h);  // exact: the class's tap
                const int iw = iw_lo + u;
                if (ih >= 0 && ih < in_h && iw >= 0 && iw < in_w) held[i] = in[in_image + c * in_plane + static_cast<Index>(ih) * in_w + iw];
            }
        }
    };

    const int co_t = tid % CO_THREADS, col_t = tid / CO_THREADS;
    const int column_groups = bw / TN;
    const int w_stride_tap = channels * BM;
    const Index out_plane = static_cast<Index>(out_h) * out_w;
    const int rows = min(BM, out_channels - m0);

    fetch(tile_first);
    for (int f = tile_first; f < tile_end; ++f) {
#pragma unroll
        for (int i = 0; i < DIRECT_FETCH; ++i) {
            const int e = tid + i * THREADS;
            if (e < xs_count) xs[e] = ValueTraits<T>::to_acc(held[i]);
        }
        __syncthreads();  // xs (and, the first time, ws) staged; the last tile's write-out is done with stage
        if (f + 1 < tile_end) fetch(f + 1);  // global loads in flight during the sums

        const int oh = row_class + stride_h * (f / w_tiles);
        const int ow0 = (f % w_tiles) * bw;
        const int iw_lo = floor_div(ow0 + pad_w - (kernel_w - 1) * dil_w, stride_w);
        for (int grp = col_t; grp < column_groups; grp += COL_THREADS) {
            const int first = grp * TN;
            const int slot = first / cp, j0 = first - slot * cp;
            const int ow_first = ow0 + slot + stride_w * j0;
            Acc acc[TM][TN];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = Acc(0);
            for (int t = 0; t < nth; ++t) {
                for (int kw = 0; kw < kernel_w; ++kw) {
                    const int num = ow_first + pad_w - kw * dil_w;
                    if (num % stride_w != 0) continue;  // not this slot's tap (uniform over the warp)
                    const Acc* xp = xs + t * channels * span + (floor_div(num, stride_w) - iw_lo);
                    const Acc* wp = ws + (t * kernel_w + kw) * w_stride_tap + co_t * TM;
#pragma unroll 4
                    for (int c = 0; c < channels; ++c) {
                        Acc xv[TN], wv[TM];
#pragma unroll
                        for (int j = 0; j < TN; ++j) xv[j] = xp[c * span + j];
#pragma unroll
                        for (int i = 0; i < TM; ++i) wv[i] = wp[c * BM + i];
#pragma unroll
                        for (int i = 0; i < TM; ++i)
#pragma unroll
                            for (int j = 0; j < TN; ++j) acc[i][j] = mac(wv[i], xv[j], acc[i][j]);
                    }
                }
            }
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) stage[(co_t * TM + i) * stage_stride + slot + stride_w * (j0 + j)] = acc[i][j];
        }
        __syncthreads();  // the tile is staged, and every thread is done with xs

        // Write the tile in order: a warp per channel row, consecutive lanes
        // on consecutive columns.
        const int cols = min(bw, out_w - ow0);
        for (int m = tid / 32; m < rows; m += THREADS / 32) {
            const int channel = group * out_channels + m0 + m;
            const Acc b = bias != nullptr ? ValueTraits<T>::to_acc(bias[channel]) : Acc(0);
            T* dst = out + (static_cast<Index>(n) * groups * out_channels + channel) * out_plane + static_cast<Index>(oh) * out_w + ow0;
            const Acc* src = stage + m * stage_stride;
            for (int x = tid % 32; x < cols; x += 32) dst[x] = ValueTraits<T>::from_acc(src[x] + b);
        }
    }
}
