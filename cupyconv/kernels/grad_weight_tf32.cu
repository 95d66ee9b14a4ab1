// grad_weight_wgmma_tf32: float32 grad_weight of a 1D problem on Hopper's
// wgmma, in TF32 (PASSES 1) or 3xTF32 (PASSES 3, float32-accurate).
//
// Tap mode (FOLD false, stride 1): per tap t, D_t[co][ci] = sum over (n, l)
// of gy[n, co, l - padding + t * dilation] * x[n, ci, l]: rows the output
// channels (M), columns the input channels (N), the reduction the input
// positions, one accumulator a tap.
// Fold mode (FOLD true, any stride; X2's vocoder layer): D[(co, t)][ci] = sum
// over (n, l) of gy[n, co, stride * l - padding + t * dilation] * x[n, ci, l]:
// the rows are (output channel, tap) pairs, tile_co = GWT_ROWS / kernel_w
// output channels of all their taps, one accumulator.  (In tap mode a stride
// would need a window a tap; in fold mode a tap is a row's offset.)
// Either way the reduction is split across blocks as grad_weight_wgmma's:
// block (split, group, co tile, ci tile) sums items first .. first +
// per_split of (image n, GWT_POSITIONS positions) and writes its tile, every
// tap, as doubles to workspace[split]; sum_splits adds the splits in order
// (bitwise repeatable).
//
// TF32 wgmma reads only K-major operands from shared memory, and tap t's
// grad_output is the window moved by t * dilation floats: 4 bytes, not the
// 16 that a core matrix's rows may move.  (The 16-bit grad_weight_wgmma reads
// its window M-major, where a tap is a 16-byte row; perf notes v14.)  So the
// shifted operand, grad_output, is A from registers: each thread loads its
// fragment elements from the window as it arrived ([channel][position], any
// shift) and splits them into TF32 hi and lo (3xTF32) or rounds them (TF32)
// as mma.sync's kernels do.  x is B, K-major exactly as stored, split once
// per item into hi and lo tiles.
//
// Block: two warpgroups, GWT_ROWS = 128 rows (64 each) x GWT_COLUMNS = 64
// input channels; blocks of one split and co tile over the ci tiles are
// neighbours, so they read the same grad_output at about the same time (L2).
// Per item:
//   * gy: the tile's tile_co rows of the window (positions window_first ..
//     window_first + 4 window_vectors; window_first = stride * l0 - padding -
//     shift0, a multiple of 4), by cp.async of COPY bytes (grad_output rows of
//     out_w floats need not be whole vectors) into raw rows raw_row bytes
//     apart, GWT_AHEAD items ahead.  Tap mode: raw_row / 4 is 4 more than a
//     multiple of 8, so the 8 rows x 4 columns of a fragment load fall in 32
//     distinct banks.  Fold mode: a warp's 16 rows are taps of one output
//     channel or several (X2: 16 taps, stride 8: banks 8 t4 + g, distinct).
//   * x: 64 rows x 64 positions by 16-byte cp.async GWT_AHEAD items ahead (in
//     the window's commit group), straight
//     into the hi part of an x buffer in the 128-byte-swizzled K-major layout
//     (two atoms of 32 positions: channel r's chunk c at h * 8 KB + r * 128 +
//     16 (c ^ r % 8)); once they are here, each thread rounds its own copies
//     to TF32 in place and, for 3xTF32, stores the remainders (lo) in the
//     buffer's second half.  (Through registers instead, the copies' 16
//     registers were the ones the pipelined MMAs below needed.)
// MMAs: wgmma.m64n64k8 (A from registers), in groups of CHAIN k-steps; two
// fragment register sets alternate, so that a group's MMAs run while the
// next one's fragments load (item_mmas).  The tensor core truncates as it
// adds into its accumulator, which biases a long sum (mma.cuh, MmaOp<float,
// 3>).  In 3xTF32 each group of one tap goes into a fresh accumulator (two
// alternate), added to the tap's sum with FADDs once the group is done.
// CHAIN (_kernels.GRAD_WEIGHT_TF32_CHAIN): a short sum's error grows with it
// (2.4e-7 at 4 k-steps on a sum of 400 products, over twice cuDNN's 8.7e-8;
// within at 2), a long sum's falls (fewer FADDs: P2 1.6e-6 at 1, 1.1e-6 at
// 2, 8.3e-7 at 4; perf notes v27).  TF32's own rounding (2^-11) dwarfs the
// bias, so its MMAs add straight into the tap's sum: P2 3.3e-4 against 2.9e-4
// with fresh accumulators (cuDNN 9.6e-4), 2% faster, 196 registers, not 251
// (perf notes v29).
//
// Requirements checked by the host: compute capability 9.0 (sm_90a), in_w a
// multiple of 4, out_w a multiple of COPY / 4, 16-byte-aligned x and gy; tap
// mode stride 1 and kernel_w <= MAX_TAPS, fold mode kernel_w <= GWT_ROWS.
#include "common.cuh"
#include "mma.cuh"
#include "wgmma.cuh"

constexpr int GWT_THREADS = 256;     // two warpgroups
constexpr int GWT_POSITIONS = 64;    // reduction positions per item
constexpr int GWT_ROWS = 128;        // rows per block (tap mode: output channels)
constexpr int GWT_COLUMNS = 64;      // input channels per block
constexpr int GWT_AHEAD = 2;         // items whose grad_output and x are loaded ahead of the one in use
constexpr int GWT_BUFFERS = GWT_AHEAD + 1;  // raw window and x buffers

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Group f's A fragments (CHAIN k-steps of tap f / groups, from position
// (f % groups) * CHAIN * 8 of the window moved t * dilation): hi, and lo for
// 3xTF32.  window: this thread's row g at its column t4; its row g + 8 is
// rows8 floats on; a position is `step` floats (the stride; 1 in tap mode).
template <int PASSES, int CHAIN>
__device__ __forceinline__ void load_fragments(unsigned (&a)[CHAIN][2][4], const float* window, int t, int q, int dilation, int rows8,
                                               int step) {
    const float* const src = window + t * dilation + q * CHAIN * 8 * step;
#pragma unroll
    for (int s = 0; s < CHAIN; ++s) {
        const float* const k = src + 8 * s * step;
        const float v[4] = {k[0], k[rows8], k[4 * step], k[rows8 + 4 * step]};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            a[s][0][e] = to_tf32(v[e]);
            if constexpr (PASSES == 3) a[s][1][e] = to_tf32(v[e] - __uint_as_float(a[s][0][e]));
        }
    }
}

// One warpgroup's MMAs of an item: for each tap t < taps (the recursion picks
// the count as a constant, so the sequence is straight-line code) and each
// group q of CHAIN k-steps (f = t * groups + q), wgmma.m64n64k8 into acc[t]
// (TF32) or into a fresh accumulator part[f % 2] added to acc[t] once the
// next group is issued and this one is done (3xTF32; wait_group 1); the next
// group's fragments load meanwhile into the other register set.  B: the item's x tile (hi,
// then lo GWT_POSITIONS * GWT_COLUMNS * 4 bytes on), K-major, 128-byte
// swizzled: 32 positions (a row of 128 bytes) an atom, 8-channel groups 1024
// bytes apart, a k-step 32 bytes along the rows.
template <int PASSES, int CHAIN, int MAX_TAPS, int N = MAX_TAPS, typename First, typename Last>
__device__ __forceinline__ void item_mmas(float (&acc)[MAX_TAPS][32], float (&part)[2][32], int taps, const float* window, int dilation,
                                          int rows8, int step, unsigned x_tile, First&& after_first, Last&& after_last) {
    if constexpr (N > 1) {
        if (taps < N) {
            item_mmas<PASSES, CHAIN, MAX_TAPS, N - 1>(acc, part, taps, window, dilation, rows8, step, x_tile, after_first, after_last);
            return;
        }
    }
    constexpr int GROUPS = GWT_POSITIONS / 8 / CHAIN, F = N * GROUPS;
    constexpr int X_PART = GWT_POSITIONS * GWT_COLUMNS * 4;
    unsigned a[2][CHAIN][2][4];
    load_fragments<PASSES, CHAIN>(a[0], window, 0, 0, dilation, rows8, step);
#pragma unroll
    for (int f = 0; f < F; ++f) {
        // TF32 adds straight into the tap's sum; 3xTF32 into a fresh accumulator, added with FADDs.
        float(&d)[32] = PASSES == 1 ? acc[f / GROUPS] : part[f % 2];
        wgmma_fence();
#pragma unroll
        for (int s = 0; s < CHAIN; ++s) {
            const int p = ((f % GROUPS) * CHAIN + s) * 8;  // the k-step's first position
            const unsigned address = x_tile + (p / 32) * (GWT_COLUMNS * 128) + (p % 32) * 4;
            const unsigned long long b_hi = wgmma_descriptor_fields(16, 1024, true) | ((address >> 4) & 0x3FFF);
            if constexpr (PASSES == 3) {
                const unsigned long long b_lo = b_hi + (X_PART >> 4);
                wgmma_m64n64k8_tf32_rs(d, a[f % 2][s][1], b_hi, s > 0);
                wgmma_m64n64k8_tf32_rs(d, a[f % 2][s][0], b_lo, 1);
                wgmma_m64n64k8_tf32_rs(d, a[f % 2][s][0], b_hi, 1);
            } else {
                wgmma_m64n64k8_tf32_rs(d, a[f % 2][s][0], b_hi, 1);
            }
        }
        wgmma_commit();
        if (f == 0) after_first();
        if (f == F - 1) after_last();
        if (f > 0) {
            wgmma_wait<1>();  // group f - 1 is done: its fragments' registers are free (3xTF32: its sum too)
            if constexpr (PASSES == 3) {
                pin(part[(f - 1) % 2]);
#pragma unroll
                for (int i = 0; i < 32; ++i) acc[(f - 1) / GROUPS][i] += part[(f - 1) % 2][i];
            }
        }
        if (f + 1 < F) load_fragments<PASSES, CHAIN>(a[(f + 1) % 2], window, (f + 1) / GROUPS, (f + 1) % GROUPS, dilation, rows8, step);
    }
    wgmma_wait<0>();
    if constexpr (PASSES == 3) {
        pin(part[(F - 1) % 2]);
#pragma unroll
        for (int i = 0; i < 32; ++i) acc[(F - 1) / GROUPS][i] += part[(F - 1) % 2][i];
    } else {
#pragma unroll
        for (int t = 0; t < MAX_TAPS; ++t) pin(acc[t]);
    }
}
#endif

template <typename Index, int MAX_TAPS, int PASSES, int COPY, int CHAIN, bool FOLD>
__global__ void __launch_bounds__(GWT_THREADS, 1) grad_weight_wgmma_tf32(
    const float* __restrict__ x,      // (batch, groups * channels, in_w)
    const float* __restrict__ gy,     // (batch, groups * out_channels, out_w)
    double* __restrict__ workspace,   // (splits, groups * channels, out_channels, kernel_w)
    int batch, int groups, int channels, int out_channels, int in_w, int out_w, int kernel_w, int stride,
    int padding, int dilation, int window_vectors, int raw_row, int per_split, int co_tiles, int ci_tiles) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(PASSES == 1 || PASSES == 3, "TF32 or 3xTF32");
    static_assert(!FOLD || MAX_TAPS == 1, "fold mode: the taps are rows, one accumulator");
    static_assert(COPY == 16 || COPY == 8 || COPY == 4, "copies of 16, 8 or 4 bytes");
    constexpr int UNIT = COPY / 4;                          // floats per copy
    constexpr int ATOM = GWT_COLUMNS * 128;                 // 32 positions of the tile's channels
    constexpr int ATOMS = GWT_POSITIONS / 32;
    constexpr int X_PART = ATOMS * ATOM;                    // hi (or lo) of one item
    constexpr int X_BYTES = (PASSES == 3 ? 2 : 1) * X_PART;
    constexpr int X_TASKS = GWT_COLUMNS * GWT_POSITIONS / 4 / GWT_THREADS;  // 16-byte x loads a thread per item
    static_assert(X_TASKS * GWT_THREADS * 4 == GWT_COLUMNS * GWT_POSITIONS && GWT_POSITIONS % (8 * CHAIN) == 0, "tiles");

    extern __shared__ __align__(1024) unsigned char smem[];  // the x atoms first: 1024-byte aligned
    const int tid = threadIdx.x;
    const int warpgroup = tid / 128;
    const int lane = tid % 32, w = (tid / 32) % 4;
    const int g = lane / 4, t4 = lane % 4;

    int b = blockIdx.x;
    const int ci_tile = b % ci_tiles;
    b /= ci_tiles;
    const int co_tile = b % co_tiles;
    b /= co_tiles;
    const int group = b % groups;
    const int split = b / groups;
    const int chunks = (in_w + GWT_POSITIONS - 1) / GWT_POSITIONS;
    const int first = split * per_split;
    const int steps = max(0, min(batch * chunks, first + per_split) - first);
    const int taps = FOLD ? 1 : kernel_w;  // accumulators in use
    // Output channels a block: GWT_ROWS, or in fold mode as many as have all their taps in GWT_ROWS rows.
    const int tile_co = FOLD ? GWT_ROWS / kernel_w : GWT_ROWS;
    const int step = FOLD ? stride : 1;  // floats between positions of grad_output a tap reads
    // Position stride * l0 - padding (padding >= 0; stride * l0 a multiple of 4) is window column shift0.
    const int shift0 = (4 - padding % 4) % 4;

    const int raw_bytes = tile_co * raw_row;
    unsigned char* const x_base = smem;
    unsigned char* const raw_base = smem + GWT_BUFFERS * X_BYTES;

    // Item k's grad_output window into raw buffer `buffer` (k % GWT_BUFFERS; the caller commits):
    // 8 threads a row, 32 rows a pass.
    auto load_gy = [&](int k, int buffer) {
        const int item = first + k;
        const int n = item / chunks, l0 = item % chunks * GWT_POSITIONS;
        const int window_first = step * l0 - padding - shift0;  // a multiple of 4
        const int copies = window_vectors * (16 / COPY);
        unsigned char* const raw = raw_base + buffer * raw_bytes;
        const bool inside = window_first >= 0 && window_first + copies * UNIT <= out_w;
#pragma unroll 1  // rolled: unrolled, the 64-bit 3xTF32 builds spill
        for (int pass = 0; pass < GWT_ROWS / 32; ++pass) {
            const int row = pass * 32 + tid / 8;
            if (FOLD && row >= tile_co) break;
            const int co = co_tile * tile_co + row;
            const bool row_ok = co < out_channels;
            const float* const src = gy + ((static_cast<Index>(n) * groups + group) * out_channels + co) * static_cast<Index>(out_w) + window_first;
            unsigned char* const dst = raw + row * raw_row;
            if (row_ok && inside) {
                for (int u = tid % 8; u < copies; u += 8) cp_async_vector<COPY>(dst + u * COPY, src + u * UNIT, true);
            } else {
                for (int u = tid % 8; u < copies; u += 8) {
                    const int l = window_first + u * UNIT;
                    const bool valid = row_ok && l >= 0 && l < out_w;  // out_w % UNIT == 0: all or nothing
                    cp_async_vector<COPY>(dst + u * COPY, valid ? src + u * UNIT : gy, valid);
                }
            }
        }
    };
    // Item k's x tile by cp.async into the hi part of x buffer `buffer` (k % GWT_BUFFERS; task i: channel row r, 4 positions
    // at 4c, into its swizzled place; the caller commits) ...
    auto x_slot = [&](int buf, int i) {
        const int task = tid + i * GWT_THREADS;
        const int c = task % (GWT_POSITIONS / 4), r = task / (GWT_POSITIONS / 4);
        return x_base + buf * X_BYTES + (c / 8) * ATOM + r * 128 + (((c % 8) ^ (r % 8)) * 16);
    };
    auto copy_x = [&](int k, int buffer) {
        const int item = first + k;
        const int n = item / chunks, l0 = item % chunks * GWT_POSITIONS;
#pragma unroll
        for (int i = 0; i < X_TASKS; ++i) {
            const int task = tid + i * GWT_THREADS;
            const int c = task % (GWT_POSITIONS / 4), r = task / (GWT_POSITIONS / 4);
            const int ci = ci_tile * GWT_COLUMNS + r, l = l0 + 4 * c;
            const bool valid = ci < channels && l < in_w;  // in_w % 4 == 0: all or nothing
            const float* src = x + ((static_cast<Index>(n) * groups + group) * channels + ci) * static_cast<Index>(in_w) + l;
            cp_async16(x_slot(buffer, i), valid ? src : x, valid);
        }
    };
    // ... then, once this thread's copies are here, rounded in place (TF32) or split (hi in place, lo X_PART on).
    auto split_x = [&](int buf) {
#pragma unroll
        for (int i = 0; i < X_TASKS; ++i) {
            unsigned char* const dst = x_slot(buf, i);
            const uint4 raw = *reinterpret_cast<const uint4*>(dst);
            const unsigned* v = reinterpret_cast<const unsigned*>(&raw);
            unsigned hi[4], lo[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float f = __uint_as_float(v[e]);
                hi[e] = to_tf32(f);
                lo[e] = to_tf32(f - __uint_as_float(hi[e]));
            }
            *reinterpret_cast<uint4*>(dst) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
            if constexpr (PASSES == 3) *reinterpret_cast<uint4*>(dst + X_PART) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
        }
    };

    float acc[MAX_TAPS][32], part[2][32];
#pragma unroll
    for (int t = 0; t < MAX_TAPS; ++t)
#pragma unroll
        for (int i = 0; i < 32; ++i) acc[t][i] = 0.0f;
#pragma unroll
    for (int i = 0; i < 32; ++i) part[0][i] = part[1][i] = 0.0f;

    // Commit groups: one an item, its x tile and window (empty where past the end): items 0 ..
    // GWT_AHEAD - 1 here, item k + GWT_AHEAD in step k.
#pragma unroll
    for (int k = 0; k < GWT_AHEAD; ++k) {
        if (k < steps) {
            copy_x(k, k);
            load_gy(k, k);
        }
        cp_async_commit();
    }
    cp_async_wait_group<GWT_AHEAD - 1>();  // item 0's
    if (steps > 0) split_x(0);

    const unsigned x_address = shared_address(x_base);
    // This thread's fragment rows (g and g + 8 of its warp's 16) in a raw buffer, at its column t4 (bytes),
    // and the second row's distance from the first (floats).  In fold mode row r is output channel r /
    // kernel_w of the tile at tap r % kernel_w: its window row, moved by the tap; rows past the tile's
    // taps read row 0 (their sums are not stored).
    const int row0 = warpgroup * 64 + 16 * w + g;
    int row_offset = row0 * raw_row + 4 * t4, rows8 = 2 * raw_row;
    if constexpr (FOLD) {
        auto row_start = [&](int r) {  // floats from the buffer's start
            if (r >= tile_co * kernel_w) r = 0;
            return r / kernel_w * (raw_row / 4) + r % kernel_w * dilation;
        };
        row_offset = (row_start(row0) + step * t4) * 4;
        rows8 = row_start(row0 + 8) - row_start(row0);
    }
    static_assert(GWT_BUFFERS == 3, "buffer rotation");
    for (int k = 0, buffer = 0; k < steps; ++k, buffer = buffer == 2 ? 0 : buffer + 1) {  // buffer: k % 3
        const int next = buffer == 2 ? 0 : buffer + 1, ahead = next == 2 ? 0 : next + 1;
        cp_async_wait_group<GWT_AHEAD - 1>();  // item k's window is here (later ones may not be)
        fence_proxy_async();                   // item k's x tile, split by this thread, for the tensor cores
        // ... for every thread.  Free now: buffers `ahead` (item k - 1's: its loads and MMAs are done)
        __syncthreads();

        auto copies = [&] {  // item k + GWT_AHEAD's copies
            if (k + GWT_AHEAD < steps) {
                copy_x(k + GWT_AHEAD, ahead);
                load_gy(k + GWT_AHEAD, ahead);
            }
            cp_async_commit();
        };
        // The next x tile's split.  Its copies went out an item ago: in fold mode an item's MMAs are too
        // short to hide them (perf notes v29).
        auto split_next = [&] {
            cp_async_wait_group<GWT_AHEAD - 1>();  // item k + 1's (item k + 2's may still be in flight)
            if (k + 1 < steps) split_x(next);
        };
        const float* const window = reinterpret_cast<const float*>(raw_base + buffer * raw_bytes + row_offset);
        const unsigned x_tile = x_address + buffer * X_BYTES;
        if constexpr (PASSES == 1) {  // under the MMAs of the item's first and last groups
            item_mmas<PASSES, CHAIN, MAX_TAPS>(acc, part, taps, window + shift0, dilation, rows8, step, x_tile, copies, split_next);
        } else {  // around them (3xTF32: no registers to spare for them under the MMAs; 60-70% tensor-bound as it is)
            copies();
            item_mmas<PASSES, CHAIN, MAX_TAPS>(acc, part, taps, window + shift0, dilation, rows8, step, x_tile, [] {}, [] {});
            split_next();
        }
    }
    cp_async_wait_all();

    double* const out = workspace + (static_cast<Index>(split) * groups + group) * channels * static_cast<Index>(out_channels) * kernel_w;
#pragma unroll
    for (int t = 0; t < MAX_TAPS; ++t)
        if (t < taps)
#pragma unroll
            for (int j = 0; j < 8; ++j)
#pragma unroll
                for (int h = 0; h < 2; ++h)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int r = row0 + 8 * h;  // fold mode: output channel r / kernel_w of the tile, tap r % kernel_w
                        const int co = co_tile * tile_co + (FOLD ? r / kernel_w : r), tap = FOLD ? r % kernel_w : t;
                        const int ci = ci_tile * GWT_COLUMNS + 8 * j + 2 * t4 + e;
                        if ((!FOLD || r < tile_co * kernel_w) && co < out_channels && ci < channels)
                            out[(static_cast<Index>(ci) * out_channels + co) * kernel_w + tap] = static_cast<double>(acc[t][4 * j + 2 * h + e]);
                    }
#endif
}
