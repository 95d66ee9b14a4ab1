// conv_fold: the forward pass of a 1D transposed convolution of stride 8
// whose kernel has 9 to 16 taps (two taps a phase), dilation 1 and one group,
// in half or bfloat16, on Hopper's warpgroup tensor cores (wgmma, sm_90a):
// the upsampling layer of a vocoder (benchmark X2).
//
// GEMM: D[(co, k), l] = sum over ci of W[ci, co, k] * x[n, ci, l].  Rows are
// 16 per output channel (k = 0..15; taps past the kernel are zero in the
// packed weight), columns the input positions l as stored, the reduction the
// input channels.  Output o = 8 l + k - padding takes D[(co, k), l], so with
// o + padding = 8 q + r:
//     out[o] = D[(co, r), q] + D[(co, r + 8), q - 1] + bias[co].
// The phases' taps are summed by folding two neighbouring columns in the
// epilogue, and the input is B as it lies in memory: MN-major (positions
// contiguous), copied 16 bytes at a time, with no shift and no transpose
// (the window kernels transpose every slice because each tap moves the
// window by one position; perf notes v21).
//
// A block (one per multiprocessor) is two consumer warpgroups and a producer
// warpgroup (below), and owns FOLD_ROWS = 128 GEMM rows (8 output channels).
// A consumer warpgroup computes whole tiles (all 128 rows x 128 columns):
// two wgmma.m64n128k16 a k-step, into `lo` (rows 0..63) and `hi` (rows
// 64..127).  Row 16w + 8e + g of a half (w the warp, g = lane / 4) is output
// channel w (lo) or 4 + w (hi), tap 8e + g, so each thread holds both taps a
// phase needs, and for its columns 2(lane % 4) and + 1 of every 8 the one
// missing value (the second tap of the column before) is one shuffle away
// (lane - 1, or lane + 3 for the 8 columns before).
//
// Work: tiles (row tile of 8 output channels, image, 128 columns) in that
// order, split over the blocks (see the kernel), and a block's tiles of a
// row tile into two chains, one a consumer warpgroup (fold_split).  A row's
// last tile can lie wholly past the input (columns q >= in_w: the outputs
// 8 in_w - padding .. take only the carry and the bias; X2's 4096 positions
// make it one tile in 33): its D is zero, so it has no copies and no MMAs
// (perf notes v45).
// A block keeps its row tile's weight (128 rows x all input channels,
// K-major core matrices) in shared memory while its warpgroups walk their
// chains in order, so the second tap of a tile's first column comes from the
// warpgroup's tile before (the carry).  A chain that starts inside a row
// first computes the tile before it without storing it (its lead-in).
//
// Clusters (perf notes v44): the blocks come in clusters of two that take
// neighbouring row tiles (2p and 2p + 1) over the same tiles in the same
// order, so each k-block of the input serves both: each block loads half of
// it (64 positions x 64 channels) with one TMA copy multicast into both
// blocks' shared memory.  That halves the input's 2.1 GB of L2 reads on X2.
// A block is two consumer warpgroups (the MMAs and the epilogue) and a
// producer warpgroup whose one thread issues the copies as buffers come free
// (`setmaxnreg`: 40 registers for the producer, 232 for the consumers).
//
// Pipeline: the input is streamed in k-blocks of 64 channels x 128 positions
// (16 KB, FOLD_STAGES buffers).  Each buffer has two mbarriers: `full`
// (its 16 KB have landed: the block's own half and the other block's) and
// `empty` (the 8 consumer warps of the cluster that multiplied it are done
// with it: one arrival from each, on both blocks' barriers).  A consumer warp
// releases k-block kb - 2 when it starts k-block kb (its MMAs are done by
// then), and a tile's last two once all its MMAs are done.
// Ping-pong (perf notes v49): the consumer warpgroups take turns at the
// tensor cores, chain 0's tile i, chain 1's tile i, chain 0's tile i + 1, ...
// (the order the producer loads them in), handing the turn on by named
// barriers once a tile's MMAs are issued.  A warpgroup then waits for its
// MMAs and folds, converts and stages its tile (stmatrix, transposed into
// output order: positions 8q + r consecutive) and stores it, a channel at a
// time, while the other warpgroup's MMAs run; the stores are off the path of
// the MMAs, which before (two accumulator sets a warpgroup, the stores
// between the next tile's k-blocks) cost 15-18% of the kernel (v44).
//
// Requirements checked by the host: compute capability 9.0 (other targets
// compile an empty body), a 16-byte-aligned input whose rows are multiples of
// 8 elements (the tensor map's), the packed weight of pack_fold_weight
// (input channels padded with zeros to a multiple of FOLD_BK, an even number
// of row tiles: the last of an odd count is zeros, and its block stores
// nothing) or, with `raw`, the weight as given (16 taps, 16-byte aligned:
// raw_weight makes the same tile), and the input's tensor map
// (_cuda._TensorMap: 3D, positions x channels x images, boxes of 64 x 64 x
// 1, 128-byte swizzle, zeros outside).
#include "common.cuh"
#include "mma.cuh"
#include "wgmma.cuh"

constexpr int FOLD_THREADS = 256;  // the two consumer warpgroups (a block: FOLD_THREADS + 128 with the producer)
constexpr int FOLD_STRIDE = 8;
constexpr int FOLD_ROWS = 128;     // GEMM rows a block: 8 output channels x 16 taps
constexpr int FOLD_BN = 128;       // input positions a tile
constexpr int FOLD_BK = 64;        // input channels a k-block
constexpr int FOLD_STAGES = 5;     // k-block buffers
constexpr int FOLD_INFLIGHT = 2;   // k-blocks of MMAs in flight a warpgroup (a buffer is released once its k-block's are done)
// A k-block buffer: two TMA boxes of 64 positions x 64 channels (positions
// 64h.. at 8192 h), each the MN-major layout with 128-byte swizzling: channel
// c's 128 bytes at 128 c, its 16-byte vector v at v ^ (c % 8); atoms of 8
// channels x 64 positions (1024 bytes).  (The cp.async copies before wrote
// the same swizzle: whole 128-byte lines, perf notes v23.)
constexpr int FOLD_STAGE_BYTES = FOLD_BK * FOLD_BN * 2;
constexpr int FOLD_OUT_BYTES = FOLD_STRIDE * FOLD_BN * 2 + 32;  // a warp's staged outputs, and room for unaligned reads
static_assert(FOLD_STRIDE * FOLD_BN * 2 <= 4 * 512, "a staged row is at most four chunks of 512 bytes (store_chunk)");
constexpr int FOLD_BARRIERS = 2 * FOLD_STAGES;  // full, then empty, a buffer (8 bytes each, after the staging rows)

// The input's tensor map, passed by value (_cuda._TensorMap writes it).
struct __align__(64) FoldMap {
    unsigned long long words[16];
};

// Clusters of two blocks, on the targets that have them.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FOLD_CLUSTER_DIMS __cluster_dims__(2, 1, 1)
#else
#define FOLD_CLUSTER_DIMS
#endif

// The packed weight: row (co, k) of 16 per output channel, channels_padded
// input channels (zeros past in_channels and past the kernel's taps), made
// by tiles of one output channel x PACK_FOLD_CI input channels transposed
// through shared memory: the weight's (ci, co) runs of `taps` elements are
// read by consecutive threads, the packed rows written so.  (One thread an
// output element, reading elements out_channels x taps apart, took 21 us a
// call on X2's 4 MB weight, 3% of its forward pass: perf notes v39.)
constexpr int PACK_FOLD_CI = 128;
template <typename T>
__global__ void __launch_bounds__(256) pack_fold_weight(const T* __restrict__ weight, T* __restrict__ packed, int in_channels,
                                                        int out_channels, int taps, int channels_padded, long long total) {
    __shared__ T tile[16][PACK_FOLD_CI + 2];
    const int ci_tiles = (channels_padded + PACK_FOLD_CI - 1) / PACK_FOLD_CI;
    const long long tiles = total / (16LL * channels_padded) * ci_tiles;  // (output channel, input-channel tile) pairs
    for (long long t = blockIdx.x; t < tiles; t += gridDim.x) {
        const long long co = t / ci_tiles;
        const int ci0 = static_cast<int>(t % ci_tiles) * PACK_FOLD_CI;
        __syncthreads();  // (the previous tile's reads of `tile`)
        for (int e = threadIdx.x; e < 16 * PACK_FOLD_CI; e += blockDim.x) {
            const int c = e / 16, k = e % 16, ci = ci0 + c;
            T v{};
            if (ci < in_channels && co < out_channels && k < taps) v = weight[(ci * static_cast<long long>(out_channels) + co) * taps + k];
            tile[k][c] = v;
        }
        __syncthreads();
        for (int e = threadIdx.x; e < 16 * PACK_FOLD_CI; e += blockDim.x) {
            const int k = e / PACK_FOLD_CI, c = e % PACK_FOLD_CI, ci = ci0 + c;
            if (ci < channels_padded) packed[(co * 16 + k) * channels_padded + ci] = tile[k][c];
        }
    }
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// One box of the tensor map at `map` (3D: positions, channels, images) into
// the same shared offset of both blocks of the cluster, counted by the
// barrier at the same offset in each.
__device__ __forceinline__ void fold_load_box(unsigned dst, const void* map, int position, int channel, int image, unsigned barrier) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3, %4}], [%5], %6;\n"
                 ::"r"(dst), "l"(map), "r"(position), "r"(channel), "r"(image), "r"(barrier), "h"(static_cast<unsigned short>(3))
                 : "memory");
}
__device__ __forceinline__ void fold_consumers_sync() { asm volatile("bar.sync 1, %0;\n" ::"n"(FOLD_THREADS) : "memory"); }

// An 8 x 8 matrix of 16-bit elements across 8 lanes (lanes 8i..8i+7, lane
// j holding row j in w[0..3], elements 2k and 2k + 1 in w[k]) transposed in
// place: lane j ends with column j.  Three butterfly steps, each swapping
// the off-diagonal blocks of the blocks before: 4 x 4 (words 2-3 against
// 0-1 of the lane 4 away), 2 x 2 (words 1 and 3 against 0 and 2 of the lane
// 2 away), then single elements (halves of the lane 1 away).
__device__ __forceinline__ void transpose8x8_b16(unsigned (&w)[4], int j) {
    {
        const bool hi = j & 4;
        const unsigned r0 = __shfl_xor_sync(0xffffffffu, hi ? w[0] : w[2], 4), r1 = __shfl_xor_sync(0xffffffffu, hi ? w[1] : w[3], 4);
        if (hi) w[0] = r0, w[1] = r1;
        else w[2] = r0, w[3] = r1;
    }
    {
        const bool hi = j & 2;
        const unsigned r0 = __shfl_xor_sync(0xffffffffu, hi ? w[0] : w[1], 2), r1 = __shfl_xor_sync(0xffffffffu, hi ? w[2] : w[3], 2);
        if (hi) w[0] = r0, w[2] = r1;
        else w[1] = r0, w[3] = r1;
    }
    const bool hi = j & 1;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const unsigned r = __shfl_xor_sync(0xffffffffu, w[k], 1);
        w[k] = hi ? __byte_perm(r, w[k], 0x7632) : __byte_perm(w[k], r, 0x5410);
    }
}

// Part P of a tile's epilogue for this thread: columns 32P.. (j = 4P..4P+3
// of its accumulators' 8-column groups), folded, with the bias, rounded, and
// stored transposed by one stmatrix.x4 so that the warp's staging row holds
// outputs 8c + g (c the column, g the phase) in order.  `carry` is, on lanes
// 4i, the second tap of the column before this part's first.
template <typename T, int P>
__device__ __forceinline__ void fold_part(const float (&d)[64], float& carry, float bias, unsigned char* staging, int lane, bool zero) {
    const int source = (lane & 3) ? lane - 1 : lane + 3;
    unsigned packed[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int j = 4 * P + i;
        // d[4j], d[4j + 1]: tap g at columns c, c + 1; d[4j + 2], d[4j + 3]: tap g + 8 (zeros for a tile past the input)
        const float d0 = zero ? 0.0f : d[4 * j], d1 = zero ? 0.0f : d[4 * j + 1], d2 = zero ? 0.0f : d[4 * j + 2], d3 = zero ? 0.0f : d[4 * j + 3];
        const float got = __shfl_sync(0xffffffffu, d3, source);
        const float before = (lane & 3) ? got : carry;  // tap g + 8 at column c - 1
        carry = got;
        packed[i] = pack2<T>(d0 + before + bias, d1 + d2 + bias);
    }
    stmatrix_x4_trans(staging + 16 * (32 * P + lane), packed);
}

// A chain of tiles of one row tile that one consumer warpgroup folds in
// order: tiles r0.. r1 - 1 (numbered n * tiles_per_row + q within the row
// tile), after a lead-in tile r0 - 1 when r0 starts inside a row (its MMAs
// and fold give the carry; nothing of it is stored).
struct FoldChain {
    int n, q, count;  // the next tile, and the tiles left (the lead-in counted)
    bool lead;        // the next tile is the lead-in
    __device__ __forceinline__ void advance(int tiles_per_row) {
        if (++q == tiles_per_row) q = 0, ++n;
        lead = false;
        --count;
    }
};
__device__ __forceinline__ FoldChain fold_chain(int r0, int r1, int tiles_per_row) {
    FoldChain c{0, 0, 0, false};
    if (r0 >= r1) return c;
    c.n = r0 / tiles_per_row;
    c.q = r0 - c.n * tiles_per_row;
    c.lead = c.q > 0;
    if (c.lead) --c.q;
    c.count = r1 - r0 + (c.lead ? 1 : 0);
    return c;
}
// Where tiles [r0, r1) split into the two chains: the middle, or the row
// start nearest to it where that is within an eighth of the tiles of it (no
// lead-in for the second chain).
__device__ __forceinline__ int fold_split(int r0, int r1, int tiles_per_row) {
    const int count = r1 - r0, mid = r0 + (count + 1) / 2;
    const int row = (mid + tiles_per_row / 2) / tiles_per_row * tiles_per_row;
    return (row > r0 && row < r1 && 8 * abs(row - mid) <= count) ? row : mid;
}
// The consumer warpgroups' turns at the tensor cores: warpgroup g hands the
// turn on by arriving at named barrier 2 + g, the other waits on it.
__device__ __forceinline__ void fold_turn_wait(int g) {
    if (g == 0) asm volatile("bar.sync 3, %0;\n" ::"n"(FOLD_THREADS) : "memory");
    else asm volatile("bar.sync 2, %0;\n" ::"n"(FOLD_THREADS) : "memory");
}
__device__ __forceinline__ void fold_turn_hand(int g) {
    if (g == 0) asm volatile("bar.arrive 2, %0;\n" ::"n"(FOLD_THREADS) : "memory");
    else asm volatile("bar.arrive 3, %0;\n" ::"n"(FOLD_THREADS) : "memory");
}

// A block's state: the problem, its shared memory, and the tiles it loads and
// folds (each a (row tile, image, column tile) triple, walked in order).
template <typename T, typename IndexT>
struct FoldBlock {
    const void* map;  // the input's tensor map
    const T* __restrict__ packed;
    const T* __restrict__ bias;
    T* __restrict__ out;
    int channels_padded, out_channels, out_w, padding, tiles_per_row, kblocks;
    int full_tiles;  // column tiles of a row with input positions (from tile full_tiles on: no MMAs, D is zero)
    int in_channels;
    bool raw;  // `packed` is the weight as given ((ci, co, 16 taps), 16-byte aligned), not pack_fold_weight's
    unsigned char* weight_tile;  // FOLD_ROWS x channels_padded, K-major core matrices
    unsigned char* stages;
    unsigned char* staging;  // this warp's
    int warp, lane;
    unsigned rank, barriers;  // the block's rank in its cluster; the buffers' full barriers (empty: FOLD_STAGES on)
    // the descriptors' low words (16-byte units) at k-block 0 and buffer 0
    unsigned a_low, b_low, a_half;  // a_half: from rows 0.. to rows 64.. of the weight tile
    // the producer: `loads` k-blocks of the run issued.  `base`: the block's
    // k-blocks of earlier runs (the buffers and barrier phases continue
    // across runs)
    int loads, base;
    // the staged row's whole 16-byte vectors, stored a chunk of 512 bytes at
    // a time (store_chunk), each chunk's loads before its stores: store_bytes
    // (0: nothing to store) from store_src in this warp's staging row to
    // store_dst, in units of store_unit bytes (16, 8 or 4: the largest that
    // both addresses are aligned to; 2: an odd staged offset, read as words
    // and shifted by 16 bits)
    unsigned char* store_dst;
    const unsigned char* store_src;
    int store_bytes, store_unit;

    // The producer's next k-block (kb of tile (n, q)), once both blocks'
    // consumers are done with its buffer's last: this block's half of it
    // (positions 64 rank..) into both blocks.
    __device__ __forceinline__ void load(int n, int q, int kb) {
        const int seq = base + loads++, s = seq % FOLD_STAGES;
        const unsigned full = barriers + 8 * s;
        if (seq >= FOLD_STAGES) mbarrier_wait(full + 8 * FOLD_STAGES, (seq / FOLD_STAGES - 1) & 1);
        mbarrier_expect_tx(full, FOLD_STAGE_BYTES);  // both halves land here
        mbarrier_arrive(full);
        const int half = static_cast<int>(rank);
        fold_load_box(shared_address(stages) + s * FOLD_STAGE_BYTES + half * (FOLD_STAGE_BYTES / 2), map, q * FOLD_BN + 64 * half,
                      kb * FOLD_BK, n, full);
    }
    // The k-blocks of `count` tiles from column tile q on: kblocks each,
    // none for a tile past the input (q >= full_tiles).
    __device__ __forceinline__ int kblocks_of(int q, int count) const {
        int tiles = 0;
        for (int t = 0; t < count; ++t) {
            tiles += q < full_tiles ? 1 : 0;
            if (++q == tiles_per_row) q = 0;
        }
        return tiles * kblocks;
    }

    // The epilogue of one output channel of tile (n, q) from its accumulators
    // `d` (this warp's 16 rows of one m64 half): its four parts into this
    // warp's staging row, then the row's stores (none for a lead-in tile,
    // whose carry alone is wanted): the single elements at its two ends and
    // its 16-byte vectors, while the other consumer warpgroup's MMAs run.
    __device__ __forceinline__ void fold_channel(const float (&d)[64], float& carry, float bias_value, int co, int n, int q, bool stores, bool zero) {
        __syncwarp();  // the previous channel's stores have read the staging row
        if (q == 0) carry = 0.0f;
        fold_part<T, 0>(d, carry, bias_value, staging, lane, zero);
        fold_part<T, 1>(d, carry, bias_value, staging, lane, zero);
        fold_part<T, 2>(d, carry, bias_value, staging, lane, zero);
        fold_part<T, 3>(d, carry, bias_value, staging, lane, zero);
        __syncwarp();
        store_bytes = 0;
        if (stores && co < out_channels)
            begin_stores(out + (static_cast<IndexT>(n) * out_channels + co) * out_w, q * FOLD_BN * FOLD_STRIDE - padding);
#pragma unroll
        for (int c = 0; c < 4; ++c) store_chunk(c);
    }

    // The staged outputs (positions first .. first + 8 FOLD_BN of `row`,
    // clipped to [0, out_w)): the single elements at the two ends now, and
    // the whole 16-byte vectors of the row between them set up for
    // store_chunk.
    __device__ __forceinline__ void begin_stores(T* row, int first) {
        const int lo = max(first, 0), hi = min(first + FOLD_STRIDE * FOLD_BN, out_w);
        if (lo >= hi) return;
        const int skew = static_cast<int>((reinterpret_cast<size_t>(row) >> 1) & 7);  // where the row starts in its 16-byte unit (elements)
        const int a0 = lo + ((8 - ((skew + lo) & 7)) & 7), a1 = hi - ((skew + hi) & 7);  // aligned ends
        const unsigned short* s16 = reinterpret_cast<const unsigned short*>(staging);
        unsigned short* r16 = reinterpret_cast<unsigned short*>(row);
        if (a0 >= a1) {  // no whole vector (fewer than 16 elements): every element single
            if (lo + lane < hi) r16[lo + lane] = s16[lo + lane - first];
            return;
        }
        if (lane < 8 && lo + lane < a0) r16[lo + lane] = s16[lo + lane - first];
        if (lane >= 8 && lane < 16 && a1 + lane - 8 < hi) r16[a1 + lane - 8] = s16[a1 + lane - 8 - first];
        const int e0 = a0 - first;  // the staged element of the first vector
        store_dst = reinterpret_cast<unsigned char*>(row + a0);
        store_src = staging + 2 * e0;
        store_bytes = 2 * (a1 - a0);
        store_unit = (e0 & 7) == 0 ? 16 : (e0 & 3) == 0 ? 8 : (e0 & 1) == 0 ? 4 : 2;
    }

    // Chunk c of the staged row's vectors, bytes 512 c.. of them: each unit
    // read and written by consecutive lanes, so the reads have no bank
    // conflicts (the 4-byte reads of whole vectors that stood here before
    // were 4-way conflicted, perf notes v36).
    __device__ __forceinline__ void store_chunk(int c) {
        const int base = 512 * c;
        if (base >= store_bytes) return;
        if (store_unit == 16) {
            const int o = base + 16 * lane;
            if (o < store_bytes) store_global16(store_dst + o, *reinterpret_cast<const uint4*>(store_src + o));
        } else if (store_unit == 8) {
            uint2 v[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const int o = base + 256 * i + 8 * lane;
                if (o < store_bytes) v[i] = *reinterpret_cast<const uint2*>(store_src + o);
            }
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const int o = base + 256 * i + 8 * lane;
                if (o < store_bytes) *reinterpret_cast<uint2*>(store_dst + o) = v[i];
            }
        } else if (store_unit == 4) {
            unsigned v[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int o = base + 128 * i + 4 * lane;
                if (o < store_bytes) v[i] = *reinterpret_cast<const unsigned*>(store_src + o);
            }
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int o = base + 128 * i + 4 * lane;
                if (o < store_bytes) *reinterpret_cast<unsigned*>(store_dst + o) = v[i];
            }
        } else {  // odd: vector lane + 32 c from the five words around it
            const int o = base + 16 * lane;
            if (o < store_bytes) {
                const unsigned* w = reinterpret_cast<const unsigned*>(store_src + o - 2);
                const unsigned w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4];
                store_global16(store_dst + o, make_uint4(__funnelshift_r(w0, w1, 16), __funnelshift_r(w1, w2, 16),
                                                         __funnelshift_r(w2, w3, 16), __funnelshift_r(w3, w4, 16)));
            }
        }
    }

    // The MMAs of one tile into `lo` (rows 0-63 of the weight tile: channels
    // 0-3) and `hi` (rows 64-127: channels 4-7), its k-blocks the buffers
    // from sequence number `seq` on: each k-block waits for its buffer,
    // releases the one two k-blocks back (its MMAs are done), and issues
    // 2 x 4 wgmma.m64n128k16.  The caller releases the last two buffers,
    // each once its MMAs are done.
    template <bool FIRST>
    __device__ __forceinline__ void mma_kblock(float (&lo)[64], float (&hi)[64], int kb, int& stage, unsigned& parity) {
        mbarrier_wait(barriers + 8 * stage, parity);
        wgmma_fence();
        // A: K-major core matrices, leading offset 128 (the next 8 channels),
        // stride offset channels_padded * 16 (the next 8 rows).  B: leading
        // offset 8192 (the next 64 positions: the other box), stride offset
        // 1024 (the next 8 channels); a k-step is 16 channels, 2048 bytes.
        const unsigned a = a_low + kb * (FOLD_BK / 8 * 128 / 16), b = b_low + stage * (FOLD_STAGE_BYTES / 16);
#pragma unroll
        for (int s = 0; s < FOLD_BK / 16; ++s) {
            const int accumulate = (!FIRST || s > 0) ? 1 : 0;
            wgmma_m64n128k16_mn_b<T>(lo, a_descriptor(a + s * (256 / 16)), b_descriptor(b + s * (2048 / 16)), accumulate);
            wgmma_m64n128k16_mn_b<T>(hi, a_descriptor(a + a_half + s * (256 / 16)), b_descriptor(b + s * (2048 / 16)), accumulate);
        }
        wgmma_commit();
        cp_async_commit();  // an empty group: without it ptxas serializes every wgmma (C7514)
        if (++stage == FOLD_STAGES) stage = 0, parity ^= 1u;
    }
    __device__ __forceinline__ void mma_tile(float (&lo)[64], float (&hi)[64], int seq) {
        int stage = seq % FOLD_STAGES;
        unsigned parity = (seq / FOLD_STAGES) & 1;
        mma_kblock<true>(lo, hi, 0, stage, parity);
#pragma unroll
        for (int kb = 1; kb < FOLD_INFLIGHT; ++kb)
            if (kb < kblocks) mma_kblock<false>(lo, hi, kb, stage, parity);
        for (int kb = FOLD_INFLIGHT; kb < kblocks; ++kb) {
            wgmma_wait<FOLD_INFLIGHT - 1>();  // k-block kb - FOLD_INFLIGHT's MMAs are done
            release_stage(stage >= FOLD_INFLIGHT ? stage - FOLD_INFLIGHT : stage + FOLD_STAGES - FOLD_INFLIGHT);
            mma_kblock<false>(lo, hi, kb, stage, parity);
        }
    }
    // This warp is done with the k-block in buffer `stage` (lane 0 arrives for it, in both blocks).
    __device__ __forceinline__ void release_stage(int stage) {
        cluster_release(barriers + 8 * (FOLD_STAGES + stage), rank ^ 1, lane == 0);
    }
    // The descriptors from their start address in 16-byte units (under 2^14:
    // the block's shared memory offsets stay below 256 KB, so adding offsets
    // there never carries into the other fields; a_low and b_low are masked to
    // the offset, as a cluster's second block's shared addresses have higher
    // bits set).
    __device__ __forceinline__ unsigned long long a_descriptor(unsigned low) const {
        return wgmma_descriptor_fields(128, channels_padded * 16) | low;
    }
    __device__ __forceinline__ unsigned long long b_descriptor(unsigned low) const {
        return wgmma_descriptor_fields(FOLD_STAGE_BYTES / 2, 1024, true) | low;
    }

    // The producer's run: every k-block of the two chains of tiles [first,
    // end) of row tile `rt` (fold_chain: each with its lead-in tile), in the
    // order the consumer warpgroups multiply them: chain 0's tile i, chain
    // 1's tile i, chain 0's tile i + 1, ...
    __device__ __forceinline__ void produce(int rt, int first, int end, int per_row_tile) {
        const int r0 = first - rt * per_row_tile, r1 = end - rt * per_row_tile, mid = fold_split(r0, r1, tiles_per_row);
        FoldChain c[2] = {fold_chain(r0, mid, tiles_per_row), fold_chain(mid, r1, tiles_per_row)};
        loads = 0;
        while (c[0].count > 0 || c[1].count > 0) {
#pragma unroll
            for (int g = 0; g < 2; ++g) {
                if (c[g].count == 0) continue;
                if (c[g].q < full_tiles)
                    for (int kb = 0; kb < kblocks; ++kb) load(c[g].n, c[g].q, kb);
                c[g].advance(tiles_per_row);
            }
        }
        base += loads;
    }

    // Row tile rt's weight tile from the weight as given, W[ci, co, k] with
    // 16 taps: core matrix (2 co' + h, chunk) holds rows (co', 8h + j) x
    // channels 8 chunk.., so its 8 rows are the transpose of W[8 chunk + j,
    // co, 8h..8h + 7] (j = 0..7).  Eight lanes make one: lane j loads that
    // channel's 16 bytes, the eight transpose them by shuffles, and lane j
    // stores row j (a whole 128-byte core matrix per eight lanes: no bank
    // conflicts).  A warp's four matrices are (co', h) of neighbours of one
    // chunk, 64 consecutive bytes of W per channel; UNROLL of them a lane
    // (all of X2's 512 channels) are loaded before any is stored: with 4 the
    // loads' latency cost 4-18 us a call, with 32 about 2 (perf notes v45).
    // Zeros past the channels.
    __device__ __forceinline__ void raw_weight(int rt, int chunks) {
        constexpr int UNROLL = 32, STEP = FOLD_THREADS / 8;  // matrices a step of the consumers
        const int j = lane & 7, matrices = 16 * chunks, mine = warp * 4 + (lane >> 3);  // (chunk, co', h): 2 * 8 * chunks
        for (int m0 = 0; m0 < matrices; m0 += STEP * UNROLL) {  // warp-uniform (the shuffles take every lane)
            uint4 v[UNROLL];
#pragma unroll
            for (int i = 0; i < UNROLL; ++i) {
                const int m = m0 + i * STEP + mine, chunk = m / 16, co = rt * (FOLD_ROWS / 16) + (m % 16) / 2, ci = 8 * chunk + j;
                v[i] = make_uint4(0, 0, 0, 0);
                if (m < matrices && ci < in_channels && co < out_channels)
                    v[i] = __ldg(reinterpret_cast<const uint4*>(packed + (static_cast<IndexT>(ci) * out_channels + co) * 16 + 8 * (m % 2)));
            }
#pragma unroll
            for (int i = 0; i < UNROLL; ++i) {
                const int m = m0 + i * STEP + mine;
                unsigned w[4] = {v[i].x, v[i].y, v[i].z, v[i].w};
                transpose8x8_b16(w, j);
                if (m < matrices)
                    *reinterpret_cast<uint4*>(weight_tile + (m % 16) * (chunks * 128) + (m / 16) * 128 + j * 16) = make_uint4(w[0], w[1], w[2], w[3]);
            }
        }
    }

    // The consumers' run over tiles [first, end) of row tile `rt` (linear
    // tile numbers): split into two chains (fold_split), consumer warpgroup
    // h folding chain h.  The warpgroups take turns at the tensor cores
    // (chain 0's tile i, then chain 1's tile i, ...): each issues a tile's
    // MMAs on its turn, hands the turn on (named barriers 2 and 3) and folds
    // and stores the tile while the other's MMAs run.  A warp folds two
    // output channels of each of its tiles: w (from `lo`) and 4 + w (`hi`).
    __device__ __forceinline__ void run(int rt, int first, int end, int per_row_tile) {
        fold_consumers_sync();  // the weight tile is free (the previous run's last MMAs are done)
        // the row tile's weight: FOLD_ROWS rows of channels_padded, as (row / 8, chunk, row % 8) core matrices
        const int chunks = channels_padded / 8;
        if (raw) {
            raw_weight(rt, chunks);
        } else {
            const T* src = packed + static_cast<IndexT>(rt) * FOLD_ROWS * channels_padded;
            for (int c = threadIdx.x; c < FOLD_ROWS * chunks; c += FOLD_THREADS) {
                const int row = c / chunks, chunk = c - row * chunks;
                cp_async16(weight_tile + (row / 8) * (chunks * 128) + chunk * 128 + (row % 8) * 16, src + row * channels_padded + chunk * 8, true);
            }
            cp_async_commit();
            cp_async_wait_all();
        }
        fence_proxy_async();  // the weight, for the MMAs
        fold_consumers_sync();
        const int h = warp / 4, w = warp % 4;
        const int co_lo = rt * (FOLD_ROWS / 16) + w, co_hi = co_lo + 4;
        const float bias_lo = (bias != nullptr && co_lo < out_channels) ? ValueTraits<T>::to_acc(bias[co_lo]) : 0.0f;
        const float bias_hi = (bias != nullptr && co_hi < out_channels) ? ValueTraits<T>::to_acc(bias[co_hi]) : 0.0f;
        float carry_lo = 0.0f, carry_hi = 0.0f;
        const int r0 = first - rt * per_row_tile, r1 = end - rt * per_row_tile, mid = fold_split(r0, r1, tiles_per_row);
        const FoldChain c0 = fold_chain(r0, mid, tiles_per_row), c1 = fold_chain(mid, r1, tiles_per_row);
        const int counts0 = c0.count, counts1 = c1.count;
        const int total = kblocks_of(c0.q, c0.count) + kblocks_of(c1.q, c1.count);
        FoldChain mine = h == 0 ? c0 : c1, other = h == 0 ? c1 : c0;
        float lo[64], hi[64];  // the accumulators: channels w (rows 16w..) and 4 + w (rows 64 + 16w..)
        int seq = base;  // the buffers' sequence number of the next tile's first k-block
        for (int i = 0, mine_count = mine.count; i < mine_count; ++i) {
            if (h == 1 && i < counts0) {  // chain 0's tile i comes first
                seq += other.q < full_tiles ? kblocks : 0;
                other.advance(tiles_per_row);
            }
            // the turn: chain 0's tile i follows chain 1's tile i - 1, chain 1's tile i follows chain 0's tile i
            const bool wait = h == 0 ? (i >= 1 && i - 1 < counts1) : (i < counts0);
            const bool hand = h == 0 ? (i < counts1) : (i + 1 < counts0);
            const bool empty = mine.q >= full_tiles;
            if (wait) fold_turn_wait(h);
            if (!empty) mma_tile(lo, hi, seq);
            if (hand) fold_turn_hand(h);
            if (!empty && kblocks >= 2) {  // the next-to-last k-block's buffer as soon as its MMAs are done
                wgmma_wait<1>();
                release_stage((seq + kblocks - 2) % FOLD_STAGES);
            }
            wgmma_wait<0>();
            if (!empty) release_stage((seq + kblocks - 1) % FOLD_STAGES);
            pin(lo);
            pin(hi);
            fold_channel(lo, carry_lo, bias_lo, co_lo, mine.n, mine.q, !mine.lead, empty);
            fold_channel(hi, carry_hi, bias_hi, co_hi, mine.n, mine.q, !mine.lead, empty);
            seq += empty ? 0 : kblocks;
            mine.advance(tiles_per_row);
            if (h == 0 && i < counts1) {  // chain 1's tile i comes next
                seq += other.q < full_tiles ? kblocks : 0;
                other.advance(tiles_per_row);
            }
        }
        base += total;
    }
};
#endif

// Grid: clusters of two blocks (FOLD_THREADS + 128 threads each), the
// block of rank r in cluster c taking row tile 2p + r of pair p (the row
// tiles padded to an even count).  With `parts` > 0, `parts` clusters for
// each pair split its images x tiles_per_row tiles evenly: the blocks of
// every row tile are at the same input tiles at about the same time, so each
// input tile comes from DRAM once and from L2 for the other pairs (an even
// split of all tiles spread them over the whole input: 60% L2 hits on X2,
// perf notes v23).  With `parts` 0 (more pairs than clusters), the clusters
// split all `work` = pairs x images x tiles_per_row tiles evenly, in that
// order.  `x` is the input the map describes (the launch rewrites the map for
// it; the kernel reads it through the map).  Shared memory: FOLD_ROWS *
// channels_padded * 2 (the weight) + FOLD_STAGES * FOLD_STAGE_BYTES + 8 *
// FOLD_OUT_BYTES + 8 * FOLD_BARRIERS.
template <typename T, typename IndexT>
__global__ void FOLD_CLUSTER_DIMS __launch_bounds__(FOLD_THREADS + 128, 1)
    conv_fold(const T* __restrict__ x, const T* __restrict__ packed, const T* __restrict__ bias, T* __restrict__ out,
              const __grid_constant__ FoldMap map, int batch, int channels_padded, int out_channels, int out_w, int padding, int tiles_per_row,
              int full_tiles, int in_channels, int raw, int work, int parts) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(1024) unsigned char smem[];  // the swizzled buffers' atoms are 1024-byte aligned
    FoldBlock<T, IndexT> b;
    b.map = &map, b.packed = packed, b.bias = bias, b.out = out;
    b.channels_padded = channels_padded, b.out_channels = out_channels;
    b.out_w = out_w, b.padding = padding, b.tiles_per_row = tiles_per_row, b.full_tiles = full_tiles;
    b.in_channels = in_channels, b.raw = raw != 0;
    b.kblocks = channels_padded / FOLD_BK;
    b.warp = threadIdx.x / 32, b.lane = threadIdx.x % 32;
    b.weight_tile = smem;
    b.stages = smem + FOLD_ROWS * channels_padded * 2;
    b.staging = b.stages + FOLD_STAGES * FOLD_STAGE_BYTES + b.warp * FOLD_OUT_BYTES;
    b.barriers = shared_address(b.stages + FOLD_STAGES * FOLD_STAGE_BYTES + (FOLD_THREADS / 32) * FOLD_OUT_BYTES);
    b.rank = blockIdx.x & 1;  // 1D clusters of two consecutive blocks
    b.base = 0;
    b.a_low = (shared_address(b.weight_tile) >> 4) & 0x3FFF;
    b.a_half = 8 * (channels_padded * 16) / 16;
    b.b_low = (shared_address(b.stages) >> 4) & 0x3FFF;
    if (threadIdx.x == 0) {
        for (int i = 0; i < FOLD_STAGES; ++i) {
            mbarrier_init(b.barriers + 8 * i, 1);                                          // full: the producer's arrival and the bytes
            mbarrier_init(b.barriers + 8 * (FOLD_STAGES + i), 2 * 4);  // empty: the consumer warps of one warpgroup of each block
        }
        fence_mbarrier_init();
    }
    cluster_sync();  // both blocks' barriers are made before either block copies or arrives
    const int per_row_tile = batch * tiles_per_row, clusters = gridDim.x / 2, cluster = blockIdx.x / 2;
    int u, u_end;  // the cluster's (pair, image, column tile) units
    if (parts > 0) {  // `parts` clusters a pair, each the same share of it
        const int pair = cluster / parts, part = cluster - pair * parts;
        u = pair * per_row_tile + static_cast<int>(static_cast<long long>(part) * per_row_tile / parts);
        u_end = pair * per_row_tile + static_cast<int>(static_cast<long long>(part + 1) * per_row_tile / parts);
    } else {  // fewer clusters than pairs: an even split of all units
        u = static_cast<int>(static_cast<long long>(cluster) * work / clusters);
        u_end = static_cast<int>(static_cast<long long>(cluster + 1) * work / clusters);
    }
    if (threadIdx.x >= FOLD_THREADS) {  // the producer warpgroup: one thread issues the copies
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (threadIdx.x == FOLD_THREADS) {
            while (u < u_end) {  // a run per pair
                const int pair = u / per_row_tile, run_end = min(u_end, (pair + 1) * per_row_tile), rt = 2 * pair + static_cast<int>(b.rank);
                const int first = rt * per_row_tile + (u - pair * per_row_tile);
                b.produce(rt, first, first + (run_end - u), per_row_tile);
                u = run_end;
            }
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
        while (u < u_end) {
            const int pair = u / per_row_tile, run_end = min(u_end, (pair + 1) * per_row_tile), rt = 2 * pair + static_cast<int>(b.rank);
            const int first = rt * per_row_tile + (u - pair * per_row_tile);
            b.run(rt, first, first + (run_end - u), per_row_tile);
            u = run_end;
        }
    }
    cluster_sync();  // the other block's copies into and arrivals on this block's shared memory are done
#endif
}
