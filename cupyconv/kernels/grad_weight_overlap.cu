// grad_weight_overlap: grad_weight of a 1D transposed convolution of stride 8
// whose kernel has 9 to 16 taps, dilation 1 and one group, in half or
// bfloat16, on Hopper's warpgroup tensor cores (wgmma, sm_90a): the other
// half of a vocoder upsampling layer's backward pass (benchmark X2), beside
// grad_input_overlap.cu; perf notes v33.
//
// With tap k = 8 h + j (h = 0, 1; j = 0..7) and G[n, co, m, j] =
// gy[n, co, 8 m + j - padding] (zero outside the row),
//
//   grad_weight[ci, co, 8 h + j] = sum over (n, l) of x[n, ci, l] * G[n, co, l + h, j]:
//
// a stride-1 correlation with two taps h whose "channels" are the pairs (co,
// j).  G's row is grad_output's row as it lies: position m is the 16 bytes
// at 16 m, its 8 phases j side by side.  So a stretch of grad_output's row
// copied into shared memory as it lies *is* the M-major A operand of rows
// (co, j) and reduction positions m: the core matrix of positions m..m+7 is
// the 128 bytes at 16 (m - m0), and tap h is the same operand 16 bytes on.
// Nothing is transposed and each grad_output element is copied once per
// block.
//
// GEMM per block: rows (co, j) of GWO_CO = 8 output channels (64 rows),
// columns GWO_BN = 256 input channels (wgmma N), reduction over items of
// GWO_P = 64 positions of one image, split across blocks: block (split, co
// tile, ci tile) sums the items first .. first + per_split and writes its
// tile's float sums to workspace[split] as floats (half the bytes of
// doubles, the same values); sum_splits adds the splits in order, in double
// (bitwise repeatable).  Per item, into one of GWO_STAGES buffers:
//   * x (B, K-major): 256 channel rows of 64 positions (128 bytes), 128-byte
//     swizzled (chunk c of row ci at ci * 128 + 16 (c ^ ci % 8)), 16-byte
//     cp.async;
//   * the stretch gy[n, co, 8 l0 - padding ..] of GWO_P + 1 positions of each
//     of the 8 output channels, COPY bytes a copy (8 where padding is 4 mod 8
//     and the stretch starts 8 bytes past a 16-byte boundary).
// The block is three warpgroups, specialized as in grad_input_overlap.cu
// (perf notes v37): two consumers, warpgroup h issuing tap h's 4 k-steps of
// wgmma.m64n256k16 per item into its 128 accumulators and nothing else in
// its loop (one tap a warpgroup over 256 input channels reads 80 KB of
// shared memory per item for the MMAs, where two taps over 128 read 96 KB),
// and a producer whose threads make the copies, each the same pieces of
// every item (offsets and bounds worked out once).
// Buffer s's "full" mbarrier completes when the copies of every producer
// thread have landed (each thread's cp.async.mbarrier.arrive; the consumers
// fence the data for the tensor cores after their wait); its "empty" one
// when every consumer warp has arrived, once its MMAs of the buffer's item
// retired.
//
// Its float build (TF32, perf notes v40) is gone: grad_weight_multicast
// takes float32 "tf32" there (perf notes v57).
//
// Requirements checked by the host: compute capability 9.0 (other targets
// compile an empty body), stride 8, 9 to 16 taps, padding a multiple of
// COPY / sizeof(T), grad_output rows a multiple of COPY / sizeof(T)
// elements and COPY-aligned, x rows a multiple of 16 bytes
// and 16-byte aligned.
#include "common.cuh"
#include "mma.cuh"
#include "wgmma.cuh"

constexpr int GWO_THREADS = 384;                    // two consumer warpgroups, then the producer
constexpr int GWO_CO = 8;                           // output channels a block (64 GEMM rows)
constexpr int GWO_BN = 256;                         // input channels a block
constexpr int GWO_P = 64;                           // positions an item
constexpr int GWO_STAGES = 5;                       // buffers

// The shared-memory layout (16-bit T): x's swizzled atom
// (256 rows of 128 bytes, 1024-byte aligned), the GWO_CO stretches of
// positions l0 .. l0 + P (8 phases each), their stride, the buffers' mbarriers (full, empty) after them.
template <typename T>
struct GwoLayout {
    static_assert(sizeof(T) == 2, "16-bit builds only");
    static constexpr int P = GWO_P;
    static constexpr int X_BYTES = GWO_BN * P * static_cast<int>(sizeof(T));
    static constexpr int ROW_BYTES = (P + 1) * 8 * static_cast<int>(sizeof(T));
    static constexpr int CHUNK = ROW_BYTES + 16;
    static constexpr int WINDOW_BYTES = GWO_CO * CHUNK;
    static constexpr int BARRIERS = GWO_STAGES * (X_BYTES + WINDOW_BYTES);
    static_assert(X_BYTES == GWO_BN * 128, "x rows of 128 bytes");
};

template <typename T, typename Index, int COPY>
__global__ void __launch_bounds__(GWO_THREADS, 1) grad_weight_overlap(
    const T* __restrict__ x,         // (batch, in_channels, in_w)
    const T* __restrict__ gy,        // (batch, out_channels, out_w)
    float* __restrict__ workspace,   // (splits, in_channels, out_channels, kernel_w)
    int batch, int in_channels, int out_channels, int in_w, int out_w, int kernel_w, int padding, int per_split, int co_tiles,
    int ci_tiles) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef GwoLayout<T> L;
    constexpr int P = L::P, X_BYTES = L::X_BYTES, CHUNK = L::CHUNK, WINDOW_BYTES = L::WINDOW_BYTES, BARRIERS = L::BARRIERS;
    static_assert(COPY == 16 || COPY == 8, "copies of 16 or 8 bytes");
    constexpr int UNIT = COPY / sizeof(T);               // elements a copy
    constexpr int V = 16 / sizeof(T);                    // elements an x chunk
    constexpr int PER_ROW = L::ROW_BYTES / COPY;         // copies a channel's stretch
    static_assert(GWO_BN * P / V % 128 == 0 && P * sizeof(T) == 128, "x copies: whole tasks a producer thread, rows of 128 bytes");
    extern __shared__ __align__(1024) unsigned char smem[];  // x atoms (1024-byte aligned) first, then the stretches, then the mbarriers
    const int tid = threadIdx.x, warpgroup = tid / 128;

    int b = blockIdx.x;
    const int ci_tile = b % ci_tiles;
    b /= ci_tiles;
    const int co_tile = b % co_tiles;
    const int split = b / co_tiles;
    const int ci0 = ci_tile * GWO_BN, co0 = co_tile * GWO_CO;
    const int per_image = (in_w + P - 1) / P;
    const int first = split * per_split;
    const int steps = max(0, min(batch * per_image, first + per_split) - first);
    const unsigned base = shared_address(smem), full = base + BARRIERS, empty = full + GWO_STAGES * 8;

    if (tid == 0) {
        for (int s = 0; s < GWO_STAGES; ++s) {
            mbarrier_init(full + 8 * s, 128);  // the producer's threads
            mbarrier_init(empty + 8 * s, 8);   // the consumers' warps
        }
        fence_mbarrier_init();
    }
    __syncthreads();

    if (warpgroup == 2) {
        // The producer: item k (the block's k-th) into buffer k % GWO_STAGES; zeros past the channels, past
        // in_w and outside grad_output's row.  Thread p copies x's 16-byte chunk c = p % 8 of channel rows
        // p / 8 + 16 i, and the stretches' pieces t = p + 128 j (channel t / PER_ROW, piece t % PER_ROW).
        const int p = tid - 256, c = p % 8;
        constexpr int X_PER = GWO_BN * P / V / 128, PIECES = GWO_CO * PER_ROW, G_PER = (PIECES + 127) / 128;
        Index x_offset[X_PER];
        bool x_inside[X_PER];
#pragma unroll
        for (int i = 0; i < X_PER; ++i) {
            const int ci = ci0 + p / 8 + 16 * i;
            x_inside[i] = ci < in_channels;
            x_offset[i] = static_cast<Index>(x_inside[i] ? ci : 0) * in_w + V * c;
        }
        const unsigned x_dst = (p / 8) * 128 + (c ^ (p / 8 % 8)) * 16;  // + 2048 i: rows 16 apart keep their swizzle
        const bool whole_tile = ci0 + GWO_BN <= in_channels && co0 + GWO_CO <= out_channels;
        Index g_offset[G_PER];  // the piece's element in the image's rows, from element e0 of row 0
        unsigned g_dst[G_PER];
        bool g_inside[G_PER];
#pragma unroll
        for (int j = 0; j < G_PER; ++j) {
            const int t = p + 128 * j, r = t / PER_ROW, u = t % PER_ROW;
            g_inside[j] = t < PIECES && co0 + r < out_channels;
            g_offset[j] = static_cast<Index>(g_inside[j] ? co0 + r : 0) * out_w + u * UNIT;
            g_dst[j] = r * CHUNK + u * COPY;
        }
#pragma unroll 1
        for (int k = 0; k < steps; ++k) {
            const int s = k % GWO_STAGES;
            if (k >= GWO_STAGES) mbarrier_wait(empty + 8 * s, (k / GWO_STAGES - 1) & 1);  // item k - GWO_STAGES is done with it
            const int item = first + k;
            const int n = item / per_image, l0 = item % per_image * P;
            const T* const x_row = x + static_cast<Index>(n) * in_channels * in_w + l0;
            unsigned char* const xd = smem + s * X_BYTES + x_dst;
            const int e0 = 8 * l0 - padding;  // a multiple of UNIT
            const T* const g_row = gy + static_cast<Index>(n) * out_channels * out_w + e0;
            unsigned char* const wd = smem + GWO_STAGES * X_BYTES + s * WINDOW_BYTES;
            if (whole_tile && l0 + P <= in_w && e0 >= 0 && e0 + PER_ROW * UNIT <= out_w) {
                // every copy inside its array (all but the items at a row's ends): no bounds, no predicates
#pragma unroll
                for (int i = 0; i < X_PER; ++i) cp_async_inside<16>(xd + 2048 * i, x_row + x_offset[i]);
#pragma unroll
                for (int j = 0; j < G_PER; ++j) {
                    if (PIECES % 128 != 0 && j == G_PER - 1 && p >= PIECES % 128) break;
                    cp_async_inside<COPY>(wd + g_dst[j], g_row + g_offset[j]);
                }
            } else {
                const bool x_here = l0 + V * c < in_w;  // in_w % V == 0: a chunk is all or nothing
#pragma unroll
                for (int i = 0; i < X_PER; ++i) {
                    const bool valid = x_here && x_inside[i];
                    cp_async16(xd + 2048 * i, valid ? x_row + x_offset[i] : x, valid);
                }
#pragma unroll
                for (int j = 0; j < G_PER; ++j) {
                    if (PIECES % 128 != 0 && j == G_PER - 1 && p >= PIECES % 128) break;
                    const int e = e0 + static_cast<int>(g_dst[j] % CHUNK) / COPY * UNIT;
                    const bool valid = g_inside[j] && e >= 0 && e < out_w;  // out_w % UNIT == 0: all or nothing
                    const T* const src = valid ? g_row + g_offset[j] : gy;
                    if constexpr (COPY == 16)
                        cp_async16(wd + g_dst[j], src, valid);
                    else
                        cp_async_small<8>(wd + g_dst[j], src, valid);
                }
            }
            cp_async_arrive_noinc(full + 8 * s);  // once this item's copies have landed
        }
        cp_async_wait_all();
        return;
    }

    // The consumers: warpgroup h, tap h (its A the window 16 bytes on for h = 1), all GWO_CO output
    // channels (64 rows) and GWO_BN input channels.
    const int tap0 = 8 * warpgroup;
    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
    const int lane = tid % 32, w = (tid / 32) % 4, g = lane / 4, t4 = lane % 4;
#pragma unroll 1
    for (int k = 0; k < steps; ++k) {
        const int s = k % GWO_STAGES;
        mbarrier_wait(full + 8 * s, (k / GWO_STAGES) & 1);
        fence_proxy_async();  // the producer's writes, for the tensor cores' reads
        const unsigned x_tile = base + s * X_BYTES;
        pin(acc);
        wgmma_fence();
        const unsigned window = base + GWO_STAGES * X_BYTES + s * WINDOW_BYTES + warpgroup * 16;
#pragma unroll
        for (int ks = 0; ks < P / 16; ++ks) {
            // A: M-major, K-adjacent core matrices (8 positions) 128 bytes apart, M-adjacent (the next channel) CHUNK
            const unsigned long long a = wgmma_descriptor(window + ks * 16 * 16, 128, CHUNK);
            // B: K-major, 128-byte-swizzled, 8-channel groups 1024 bytes apart, a k-step 32 bytes along the rows
            const unsigned long long bd = wgmma_descriptor_fields(16, 1024, true) | (((x_tile + ks * 32) >> 4) & 0x3FFF);
            wgmma_m64k16_mn_a<T, GWO_BN>(acc, a, bd);
        }
        wgmma_commit();
        wgmma_wait<1>();
        if (k > 0 && lane == 0) mbarrier_arrive(empty + 8 * ((k - 1) % GWO_STAGES));  // this warp's MMAs of item k - 1 retired
    }
    wgmma_wait<0>();
    pin(acc);

    // Accumulator 4 jj + 2 hh + e: row 16 w + g + 8 hh = (channel, j), column 8 jj + 2 t4 + e.
    float* const out = workspace + static_cast<Index>(split) * in_channels * out_channels * kernel_w;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        const int row = 16 * w + g + 8 * hh;
        const int co = co0 + row / 8, tap = tap0 + row % 8;
        if (co >= out_channels || tap >= kernel_w) continue;
#pragma unroll
        for (int jj = 0; jj < GWO_BN / 8; ++jj)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int ci = ci0 + 8 * jj + 2 * t4 + e;
                if (ci < in_channels)
                    out[(static_cast<Index>(ci) * out_channels + co) * kernel_w + tap] = acc[4 * jj + 2 * hh + e];
            }
    }
#endif
}

// grad_weight_multicast: the float32 "tf32" grad_weight of grad_weight_overlap's
// problems (X2 backward), with grad_input_multicast's pipeline (perf notes
// v48).  grad_weight_overlap's float build copied x by cp.async and had its
// producer round x in place (a pass over shared memory beside the MMAs'
// reads) and its consumers wait for each k-step's MMA before the next
// fragment load: 1.13 ms on X2, 60% of the TF32 rate.
//
// The GEMM is grad_weight_overlap's: per block, rows (output channel co0 +
// r / 8, phase j = r % 8) of GWM_CO channels (64 rows), columns GWM_COLS
// input channels, the reduction the positions of items of GWM_P positions,
// warpgroup h computing tap 8 h + j; split across blocks and summed in order
// by sum_splits (float partials, double sums).
// - B, x's tile of an item: GWM_COLS rows of GWM_P floats (128 bytes),
//   128-byte swizzled, from a copy of x rounded to TF32 to nearest
//   (round_tf32_copy: the tensor cores would truncate), by a 3D tensor map
//   (positions, channels, images): zeros past in_w and in_channels.  Blocks
//   come in clusters of two on neighbouring output-channel tiles, the same
//   input-channel tile and items: each loads half of x's rows and
//   multicasts them into both.
// - A, G[co, m, j] = gy[n][co][8 m + j - padding] at m = l + h, from the
//   block's stretch of grad_output (GWM_CO rows of 8 GWM_P + 8 floats from
//   8 l0 - padding), the MMAs' register operand rounded to TF32 as it loads
//   (conflict-free: lane (g, t4) reads element 8 (position + h) + g, a
//   warp's 32 lanes 32 consecutive floats but where they cross a box).  The
//   stretch comes as GWM_SPANS boxes of GWM_SPAN floats x GWM_CO channels
//   (element e of channel c at (e / GWM_SPAN) GWM_CO GWM_SPAN + c GWM_SPAN
//   + e % GWM_SPAN), zeros outside the row and past out_channels.
// A stage is an item: GWM_P / 8 k-steps of wgmma.m64n256k8 a warpgroup, all
// its fragments loaded first (two register sets: the next item's load while
// this one's MMAs run), committed together, the item before waited for and
// its buffer released (`empty`, every consumer warp of both blocks) -- as in
// grad_input_multicast; `full` counts the producer's arrival and the bytes.
//
// Requirements checked by the host: compute capability 9.0, stride 8, 9 to
// 16 taps, dilation 1, one group, padding a multiple of 4, grad_output rows
// of a multiple of 4 floats and 16-byte aligned, x rows of a multiple of 4
// floats (the rounded copy's tensor map).
constexpr int GWM_STAGES = 5;
constexpr int GWM_CO = 8;                               // output channels a block: 64 rows (co, phase)
constexpr int GWM_COLS = 256;                           // input channels a tile
constexpr int GWM_P = 32;                               // positions an item: x rows of 128 bytes
constexpr int GWM_SPAN = 132;                           // floats of a stretch box's rows (528 bytes)
constexpr int GWM_SPANS = 2;                            // boxes a stretch: 8 x 32 + 8 floats a channel
constexpr int GWM_X = GWM_COLS * GWM_P * 4;             // x's tile, 32 KB
constexpr int GWM_BOX = GWM_CO * GWM_SPAN * 4;          // a stretch box, 4224 bytes
constexpr int GWM_STAGE = (GWM_X + GWM_SPANS * GWM_BOX + 1023) & ~1023;
constexpr int GWM_SHARED = GWM_STAGES * GWM_STAGE + 2 * GWM_STAGES * 8;
constexpr int GWM_THREADS = 384;                        // two consumer warpgroups, then the producer
static_assert(GWM_SPANS * GWM_SPAN >= 8 * GWM_P + 8 && GWM_BOX % 128 == 0 && GWM_X == GWM_COLS * 128, "the stretch; x rows of 128 bytes");

// out = x rounded to TF32 to nearest (as float bits), 4 floats a step; count a multiple of 4, both 16-byte aligned.
template <typename T>
__global__ void round_tf32_copy(const T* __restrict__ x, T* __restrict__ out, long long count) {
    static_assert(sizeof(T) == 4, "float");
    for (long long q = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; q < count / 4; q += static_cast<long long>(gridDim.x) * blockDim.x) {
        const float4 v = reinterpret_cast<const float4*>(x)[q];
        reinterpret_cast<float4*>(out)[q] = make_float4(__uint_as_float(to_tf32(v.x)), __uint_as_float(to_tf32(v.y)), __uint_as_float(to_tf32(v.z)),
                                                        __uint_as_float(to_tf32(v.w)));
    }
}

template <typename Index>
__global__ void CM_CLUSTER_DIMS __launch_bounds__(GWM_THREADS, 1) grad_weight_multicast(
    const float* __restrict__ x,      // (batch, in_channels, in_w), rounded to TF32: read through x_map
    const float* __restrict__ gy,     // (batch, out_channels, out_w): read through gy_map
    float* __restrict__ workspace,    // (splits, in_channels, out_channels, kernel_w)
    const __grid_constant__ CmMap x_map, const __grid_constant__ CmMap gy_map,
    int batch, int in_channels, int out_channels, int in_w, int kernel_w, int padding, int per_split, int co_pairs, int ci_tiles) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(1024) unsigned char smem[];
    const unsigned base = shared_address(smem);
    const unsigned barriers = base + GWM_STAGES * GWM_STAGE;  // full, then empty, a stage
    const int rank = static_cast<int>(blockIdx.x & 1);
    const int tid = threadIdx.x;
    int c = blockIdx.x / 2;  // the cluster: (split, ci tile, co pair), co pairs fastest
    const int co_pair = c % co_pairs;
    c /= co_pairs;
    const int ci_tile = c % ci_tiles, split = c / ci_tiles;
    const int co0 = (2 * co_pair + rank) * GWM_CO, ci0 = ci_tile * GWM_COLS;
    const int per_image = (in_w + GWM_P - 1) / GWM_P;
    const int first = split * per_split;
    const int steps = max(0, min(batch * per_image, first + per_split) - first);

    cm_make_barriers(barriers, GWM_STAGES, 256 / 32);

    if (tid >= 256) {  // the producer warpgroup: one thread issues the copies
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (tid == 256) {
            for (int k = 0; k < steps; ++k) {
                const int s = k % GWM_STAGES;
                const unsigned full = barriers + 8 * s, stage = base + s * GWM_STAGE;
                if (k >= GWM_STAGES) mbarrier_wait(full + 8 * GWM_STAGES, (k / GWM_STAGES - 1) & 1);
                const int item = first + k, n = item / per_image, l0 = (item - n * per_image) * GWM_P;
                mbarrier_expect_tx(full, GWM_X + GWM_SPANS * GWM_BOX);  // both halves of x land here
                mbarrier_arrive(full);
                cm_load_3d_multicast(stage + rank * (GWM_X / 2), &x_map, l0, ci0 + rank * (GWM_COLS / 2), n, full);
#pragma unroll
                for (int b = 0; b < GWM_SPANS; ++b)
                    cm_load_3d(stage + GWM_X + b * GWM_BOX, &gy_map, 8 * l0 - padding + b * GWM_SPAN, co0, n, full);
            }
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
        const int h = tid / 128, lane = tid % 32, w = (tid / 32) % 4;
        const int g = lane / 4, t4 = lane % 4;
        // A's fragment of k-step ks: rows (channel 2 w, phase g) and (2 w + 1, g), positions 8 ks + t4 (q = 0)
        // and + 4 (q = 1), at stretch element 8 (position + h) + g: its place in the boxes (bytes), channel 2 w
        int fragment[GWM_P / 8][2];
#pragma unroll
        for (int ks = 0; ks < GWM_P / 8; ++ks)
#pragma unroll
            for (int q = 0; q < 2; ++q) {
                const int e = 8 * (8 * ks + 4 * q + t4 + h) + g;
                fragment[ks][q] = GWM_X + 4 * ((e / GWM_SPAN) * GWM_CO * GWM_SPAN + 2 * w * GWM_SPAN + e % GWM_SPAN);
            }
        float acc[GWM_COLS / 2];
        unsigned frag[2][GWM_P / 8][4];
        // Item k (stage k % GWM_STAGES) with fragment registers `f`.
        auto stage = [&](unsigned (&f)[GWM_P / 8][4], int k) {
            const int s = k % GWM_STAGES;
            const unsigned x_tile = base + s * GWM_STAGE;
            mbarrier_wait(barriers + 8 * s, (k / GWM_STAGES) & 1);
            const unsigned char* const window = smem + s * GWM_STAGE;
#pragma unroll
            for (int ks = 0; ks < GWM_P / 8; ++ks) {
                f[ks][0] = to_tf32(*reinterpret_cast<const float*>(window + fragment[ks][0]));
                f[ks][1] = to_tf32(*reinterpret_cast<const float*>(window + fragment[ks][0] + 4 * GWM_SPAN));
                f[ks][2] = to_tf32(*reinterpret_cast<const float*>(window + fragment[ks][1]));
                f[ks][3] = to_tf32(*reinterpret_cast<const float*>(window + fragment[ks][1] + 4 * GWM_SPAN));
            }
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < GWM_P / 8; ++ks)
                // B: K-major, 128-byte-swizzled, 8-channel groups 1024 bytes apart, a k-step 32 bytes along the rows
                wgmma_m64n256k8_tf32_rs(acc, f[ks], wgmma_descriptor_fields(16, 1024, true) | (((x_tile + ks * 32) >> 4) & 0x3FFF),
                                        k > 0 || ks > 0);
            wgmma_commit();
            wgmma_wait<1>();  // item k - 1's MMAs: its buffer is free
            if (k > 0) cluster_release(barriers + 8 * (GWM_STAGES + (k - 1) % GWM_STAGES), rank ^ 1, lane == 0);
        };
        int k = 0;
        for (; k + 1 < steps; k += 2) {
            stage(frag[0], k);
            stage(frag[1], k + 1);
        }
        if (k < steps) stage(frag[0], k);
        wgmma_wait<0>();
        if (steps == 0) {
#pragma unroll
            for (int i = 0; i < GWM_COLS / 2; ++i) acc[i] = 0.0f;
        }
        pin(acc);
        // Accumulator 4 jj + 2 hh + e: row 16 w + g + 8 hh = (channel 2 w + hh, phase g), input channel 8 jj + 2 t4 + e.
        float* const out = workspace + static_cast<Index>(split) * in_channels * out_channels * kernel_w;
        const int tap = 8 * h + g;
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int co = co0 + 2 * w + hh;
            if (co >= out_channels || tap >= kernel_w) continue;
#pragma unroll
            for (int jj = 0; jj < GWM_COLS / 8; ++jj)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int ci = ci0 + 8 * jj + 2 * t4 + e;
                    if (ci < in_channels) out[(static_cast<Index>(ci) * out_channels + co) * kernel_w + tap] = acc[4 * jj + 2 * hh + e];
                }
        }
    }
    cluster_sync();  // the other block's copies into and arrivals on this block's shared memory are done
#endif
}
