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
// Threads: 8 warps of 8 channel threads (TM = BM / 8 channels each) x 4
// column threads (TN consecutive columns of one slot each).  The sums are
// split into units of one slot's 4 * TN consecutive columns (the host makes
// CP a multiple of 4 * TN), dealt to the warps in turn; only the slots with
// a W tap (a phase whose outputs sum some products) have units, so a warp's
// taps are uniform and no warp waits on a slot of zeros.  The columns of the
// other slots stay zero in the stage from the block's start.  Per (H tap,
// W tap, channel) a thread does TM x TN FMAs from TN input and TM weight
// values in shared memory.
//
// The weight comes packed by the host in the accumulator type,
// (groups, KH, KW, C, M_pad) with M_pad = m_tiles * BM (zeros past M).
//
// Shared memory (accumulator type), after a 912-byte header (the class's H
// taps and their first input rows, the slots with W taps and each slot's
// first tap and input column):
//   ws     [th_max][KW][C][BM]   the weight of the class's H taps
//   xs     [th_max][C][span]     the tile's input rows ih(th), columns iw_lo .. iw_lo + span - 1 (zero outside)
//   stage  [BM][BW + 1]          the tile's outputs, written out in order; column BW holds the row's bias
// where span = floor((BW - 1 + pad_w) / s_w) - floor((pad_w - (KW - 1) d_w) / s_w) + 1
// (the host computes it, th_max, the most H taps of any class, and checks
// th_max * C * span <= 256 * DIRECT_FETCH, and stride_w <= 64).
//
// A thread's share of the input rows, elements e = tid + 256 * i of xs, is
// the same (t, c, u) in every tile, decoded by multiply-high divisions (the
// host keeps C and span within 2048); a tile only adds its row and first
// column.
#include "common.cuh"

constexpr int DIRECT_HEADER_BYTES = 912;  // 228 ints (H taps, their first rows, counts, slots and their first taps), 16-byte aligned (_kernels.DIRECT_HEADER_BYTES)
constexpr int DIRECT_MAX_STRIDE_W = 64;   // slots a block lists (_kernels.DIRECT_MAX_STRIDE_W)
constexpr int DIRECT_FETCH = 8;           // input values per thread per tile, at most (_kernels.DIRECT_FETCH)

// a / d for 0 <= a, a * d < 2^32, with magic = magic_for(d): 2^32 / d rounded
// up (0 for d = 1, where a / d is a).
__device__ __forceinline__ unsigned magic_for(int d) { return d == 1 ? 0u : 0xFFFFFFFFu / static_cast<unsigned>(d) + 1u; }
__device__ __forceinline__ int divide(int a, int d, unsigned magic) { return d == 1 ? a : static_cast<int>(__umulhi(static_cast<unsigned>(a), magic)); }

template <typename T, typename Index, int BM, int TN>
__global__ void __launch_bounds__(256, sizeof(T) == 8 ? 2 : BM >= 64 ? 3 : 4) conv_direct(
    const T* __restrict__ in,                                // (batch, groups * channels, in_h, in_w)
    const typename ValueTraits<T>::acc* __restrict__ packed,  // (groups, kernel_h, kernel_w, channels, m_pad)
    const T* __restrict__ bias,                              // (groups * out_channels,), or null for none
    T* __restrict__ out,                                     // (batch, groups * out_channels, out_h, out_w)
    int batch, int groups, int channels, int out_channels, int m_pad,
    int in_h, int in_w, int out_h, int out_w,
    int kernel_h, int kernel_w, int stride_h, int stride_w, int pad_h, int pad_w, int dil_h, int dil_w,
    int th_max, int cp, int span, int w_tiles, int m_tiles, int tiles_per_block, int chunks) {
    typedef typename ValueTraits<T>::acc Acc;
    constexpr int THREADS = 256, WARPS = THREADS / 32, CO_THREADS = 8;
    constexpr int TM = BM / CO_THREADS;
    constexpr int VEC = 16 / sizeof(Acc);
    static_assert(BM % CO_THREADS == 0 && BM % VEC == 0, "BM must split over 8 channel threads and 16-byte vectors");

    // Dynamic shared memory only (the host sizes it and allows the device's
    // most): the header first (th_max <= 16, stride_w <= 64: host), then the
    // arrays.
    extern __shared__ __align__(16) unsigned char smem[];
    int* s_kh = reinterpret_cast<int*>(smem);  // the class's H taps
    int* s_ih0 = s_kh + 16;                    // their input rows for the class's first output row
    int* s_nth = s_ih0 + 16;
    int* s_nslots = s_nth + 1;
    int* s_tap_step = s_nslots + 1;            // a slot's W taps are kw0, kw0 + step, ... (step = stride_w / gcd)
    int* s_tap_shift = s_tap_step + 1;         // and their input columns shift by dil_w / gcd each
    int* s_slots = s_tap_shift + 1;            // the slots (W phases) with a W tap
    int* s_kw0 = s_slots + DIRECT_MAX_STRIDE_W;  // the slot's first W tap
    int* s_q0 = s_kw0 + DIRECT_MAX_STRIDE_W;     // (slot + pad_w - kw0 * dil_w) / stride_w, exact

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
            const int num = row_class + pad_h - kh * dil_h;
            if (num % stride_h != 0) continue;  // C's %: zero exactly when divisible
            s_ih0[count] = num / stride_h;  // exact
            s_kh[count++] = kh;
        }
        *s_nth = count;
        // ow0 is a multiple of stride_w, so slot s holds the outputs ow = s
        // (mod stride_w) in every tile; its W taps are the kw with
        // kw * dil_w = s + pad_w (mod stride_w): kw0 and every step after.
        int slots = 0;
        for (int s = 0; s < stride_w; ++s) {
            for (int kw = 0; kw < kernel_w; ++kw) {
                const int num = s + pad_w - kw * dil_w;
                if (num % stride_w != 0) continue;
                s_slots[slots] = s;
                s_kw0[slots] = kw;
                s_q0[slots++] = num / stride_w;
                break;
            }
        }
        *s_nslots = slots;
        int a = stride_w, b = dil_w;
        while (b != 0) {
            const int r = a % b;
            a = b, b = r;
        }
        *s_tap_step = stride_w / a;
        *s_tap_shift = dil_w / a;
    }
    // The stage starts zero (the columns of slots without taps stay so), with
    // each row's bias in its pad column bw: a warp per row.
    for (int m = tid / 32; m < BM; m += WARPS) {
        const Acc b = bias != nullptr && m0 + m < out_channels ? ValueTraits<T>::to_acc(bias[group * out_channels + m0 + m]) : Acc(0);
        for (int x = tid % 32; x < stage_stride; x += 32) stage[m * stage_stride + x] = x == bw ? b : Acc(0);
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
    // Element e = tid + THREADS * i of xs is (t, c, u) = (q / C, q % C, e % span)
    // with q = e / span: divisions by multiply-high (exact for e * d < 2^32;
    // the host keeps e, span, C <= 2048), no registers held across tiles.
    const unsigned span_magic = magic_for(span), channels_magic = magic_for(channels);
    T held[DIRECT_FETCH];
    // Tile (row, w_tile) of the class: output row oh = row_class + stride_h *
    // row, columns from ow0 = w_tile * bw.  As ow0 is a multiple of stride_w,
    // its first input column is iw_lo = w_tile * cp + iw_base.
    const int iw_base = floor_div(pad_w - (kernel_w - 1) * dil_w, stride_w);
    // Fetch a tile's input rows into registers: row ih = s_ih0[t] + row (the
    // class's rows are stride_h apart), columns iw_lo + u.
    auto fetch = [&](int row, int w_tile) {
        const int iw_lo = w_tile * cp + iw_base;
#pragma unroll
        for (int i = 0; i < DIRECT_FETCH; ++i) {
            held[i] = T();  // zero in every type
            const int e = tid + i * THREADS;
            if (e < xs_count) {
                const int q = divide(e, span, span_magic);
                const int t = divide(q, channels, channels_magic);
                const int ih = s_ih0[t] + row;
                const int iw = iw_lo + (e - q * span);
                const int c = q - t * channels;
                if (ih >= 0 && ih < in_h && iw >= 0 && iw < in_w) held[i] = in[in_image + c * in_plane + static_cast<Index>(ih) * in_w + iw];
            }
        }
    };

    const int warp = tid / 32, co_t = tid % CO_THREADS, col_t = (tid % 32) / CO_THREADS;
    const int quads = cp / (4 * TN);  // units per slot
    const int units = nth > 0 ? *s_nslots * quads : 0;
    const int tap_step = *s_tap_step, tap_shift = *s_tap_shift;
    const int slot_first = warp / quads, quad_first = warp - slot_first * quads;  // the warp's first unit
    const int w_stride_tap = channels * BM;
    const Index out_plane = static_cast<Index>(out_h) * out_w;
    const int rows = min(BM, out_channels - m0);

    int row = tile_first / w_tiles, w_tile = tile_first - row * w_tiles;  // tile f, stepped below
    fetch(row, w_tile);
    for (int f = tile_first; f < tile_end; ++f) {
#pragma unroll
        for (int i = 0; i < DIRECT_FETCH; ++i) {
            const int e = tid + i * THREADS;
            if (e < xs_count) xs[e] = ValueTraits<T>::to_acc(held[i]);
        }
        __syncthreads();  // xs (and, the first time, ws) staged; the last tile's write-out is done with stage
        const int oh = row_class + stride_h * row;
        const int ow0 = w_tile * bw;
        if (++w_tile == w_tiles) w_tile = 0, ++row;
        if (f + 1 < tile_end) fetch(row, w_tile);  // global loads in flight during the sums

        // Unit = slot_index * quads + quad, dealt to the warps in turn.
        for (int unit = warp, si = slot_first, quad = quad_first; unit < units; unit += WARPS) {
            const int slot = s_slots[si];
            const int j0 = quad * 4 * TN + col_t * TN;
            // Output column ow0 + slot + stride_w * (j0 + j) reads, at W tap
            // kw0, input column ow0 / stride_w + j0 + j + q0 = iw_lo + (j0 +
            // q0 - iw_base) + j.
            const int first_tap = s_kw0[si], first_u = j0 + s_q0[si] - iw_base;
            for (quad += WARPS; quad >= quads; quad -= quads) ++si;  // the warp's next unit
            Acc acc[TM][TN];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = Acc(0);
            for (int t = 0; t < nth; ++t) {
                for (int kw = first_tap, u = first_u; kw < kernel_w; kw += tap_step, u -= tap_shift) {
                    const Acc* xp = xs + t * channels * span + u;
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
        // on consecutive columns (pointers stepped, not indexed: 64-bit
        // addresses cost four instructions each).
        const int lane = tid % 32;
        const int cols = min(bw, out_w - ow0) - lane;  // this lane's columns: lane + 32 * k below this
        const Acc* src = stage + warp * stage_stride + lane;
        T* dst = out + (static_cast<Index>(n) * groups * out_channels + group * out_channels + m0 + warp) * out_plane + static_cast<Index>(oh) * out_w + ow0 + lane;
        for (int m = warp; m < rows; m += WARPS, src += WARPS * stage_stride, dst += WARPS * out_plane) {
            const Acc b = src[bw - lane];  // the row's bias
            const Acc* s = src;
            T* d = dst;
#pragma unroll 4
            for (int x = 0; x < cols; x += 32, s += 32, d += 32) *d = ValueTraits<T>::from_acc(*s + b);
        }
    }
}
