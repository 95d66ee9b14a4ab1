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
// A block is two warpgroups (256 threads), one per multiprocessor, and owns
// FOLD_ROWS = 128 GEMM rows (8 output channels): warpgroup h issues
// wgmma.m64n128k16 on rows 64h.. and all 128 columns of a tile.  Row 16w + 8e
// + g of warpgroup h (w its warp, g = lane / 4) is output channel 4h + w, tap
// 8e + g, so each thread holds both taps a phase needs, and for its columns
// 2(lane % 4) and + 1 of every 8 the one missing value (the second tap of the
// column before) is one shuffle away (lane - 1, or lane + 3 for the 8
// columns before).
//
// Work: tiles (row tile of 8 output channels, image, 128 columns) in that
// order, split over the blocks (see the kernel).  A block keeps its row
// tile's weight (128 rows x all input channels, K-major core matrices) in
// shared memory while it walks its tiles in order, so the second tap of a
// tile's first column comes from the tile before (the carry).  A block whose
// first tile starts inside a row first computes the tile before it without
// storing it.
//
// Pipeline: the input is streamed in k-blocks of 64 channels x 128 positions
// (16 KB, FOLD_STAGES buffers, loaded FOLD_AHEAD ahead by cp.async, one
// barrier per k-block; 4 buffers measured 10% slower on X2, the copies
// waited, and so did 5 buffers loaded 2 ahead, perf notes v36).  A
// k-block's MMAs are issued right after the barrier, its copies after them.
// The accumulators come in two sets, alternating by tile: a tile's epilogue
// runs after the next tile's first two k-blocks' MMAs are issued, so the
// tensor cores keep working while the previous tile is folded, converted and
// staged (stmatrix, transposed into output order: positions 8q + r
// consecutive); the staged row goes out in four chunks, one after each of
// the next tile's k-blocks 2 to 5.
//
// Requirements checked by the host: compute capability 9.0 (other targets
// compile an empty body), a 16-byte-aligned input whose rows are multiples of
// 8 elements, and the packed weight of pack_fold_weight (input channels
// padded with zeros to a multiple of FOLD_BK).
#include "common.cuh"
#include "mma.cuh"
#include "wgmma.cuh"

constexpr int FOLD_THREADS = 256;  // two warpgroups
constexpr int FOLD_STRIDE = 8;
constexpr int FOLD_ROWS = 128;     // GEMM rows a block: 8 output channels x 16 taps
constexpr int FOLD_BN = 128;       // input positions a tile
constexpr int FOLD_BK = 64;        // input channels a k-block
constexpr int FOLD_STAGES = 5;     // k-block buffers
constexpr int FOLD_AHEAD = 3;      // k-blocks loaded ahead of the one multiplied
constexpr int FOLD_INFLIGHT = FOLD_STAGES - FOLD_AHEAD;  // k-blocks of MMAs in flight a warpgroup (a buffer is refilled once its k-block's are done)
// A k-block buffer: the MN-major layout with 128-byte swizzling, in atoms of
// 8 channels x 64 positions (1024 bytes: row r = channel % 8 holds the
// positions' 16-byte vector v at v ^ r), atom (channel / 8, position / 64) at
// (channel / 8) * FOLD_KC_STRIDE + (position / 64) * 1024.  Eight lanes copy
// a channel row's 128 bytes into one 128-byte line of shared memory, so each
// copy instruction makes 4 whole-line L2 requests; the first version's
// unswizzled core matrices spread them over 8 lines and the copies went to
// L2 as one request per lane (L2 tag throughput 92%, perf notes v23).
constexpr int FOLD_KC_STRIDE = FOLD_BN / 64 * 1024;
constexpr int FOLD_STAGE_BYTES = FOLD_BK / 8 * FOLD_KC_STRIDE;
constexpr int FOLD_OUT_BYTES = FOLD_STRIDE * FOLD_BN * 2 + 32;  // a warp's staged outputs, and room for unaligned reads
static_assert(FOLD_STRIDE * FOLD_BN * 2 <= 4 * 512, "a staged row is at most four chunks of 512 bytes (store_chunk)");

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
// Part P of a tile's epilogue for this thread: columns 32P.. (j = 4P..4P+3
// of its accumulators' 8-column groups), folded, with the bias, rounded, and
// stored transposed by one stmatrix.x4 so that the warp's staging row holds
// outputs 8c + g (c the column, g the phase) in order.  `carry` is, on lanes
// 4i, the second tap of the column before this part's first.
template <typename T, int P>
__device__ __forceinline__ void fold_part(const float (&d)[64], float& carry, float bias, unsigned char* staging, int lane) {
    const int source = (lane & 3) ? lane - 1 : lane + 3;
    unsigned packed[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int j = 4 * P + i;
        // d[4j], d[4j + 1]: tap g at columns c, c + 1; d[4j + 2], d[4j + 3]: tap g + 8
        const float got = __shfl_sync(0xffffffffu, d[4 * j + 3], source);
        const float before = (lane & 3) ? got : carry;  // tap g + 8 at column c - 1
        carry = got;
        packed[i] = pack2<T>(d[4 * j] + before + bias, d[4 * j + 1] + d[4 * j + 2] + bias);
    }
    stmatrix_x4_trans(staging + 16 * (32 * P + lane), packed);
}

// A block's state: the problem, its shared memory, and the tiles it loads and
// folds (each a (row tile, image, column tile) triple, walked in order).
template <typename T, typename IndexT>
struct FoldBlock {
    const T* __restrict__ x;
    const T* __restrict__ packed;
    const T* __restrict__ bias;
    T* __restrict__ out;
    int in_channels, channels_padded, out_channels, in_w, out_w, padding, tiles_per_row, kblocks;
    unsigned char* weight_tile;  // FOLD_ROWS x channels_padded, K-major core matrices
    unsigned char* stages;
    unsigned char* staging;  // this warp's
    int warp, lane;
    // this thread's copies, k-block relative: source element offsets (copy
    // 0; copy 1 is 64 positions on, copies 2 and 3 four rows on) and shared
    // byte offsets in a buffer of copies 0 and 2 (1 and 3: the next atom)
    int src_offset, dst_offset0, dst_offset2;
    // the descriptors' low words (16-byte units) at k-block 0 and buffer 0
    unsigned a_low, b_low;
    // the loads: k-block load_kb of tile (load_n, load_q) is next, `loads` of
    // `total` issued; `mmas` k-blocks multiplied
    int load_n, load_q, load_kb, loads, total, mmas;
    // the epilogue: tile (fold_n, fold_q) of row tile `row_tile`; stored unless a lead-in
    int row_tile, fold_n, fold_q;
    bool fold_stores;
    float carry, bias_value;
    // the staged row's whole 16-byte vectors, stored a chunk of 512 bytes at
    // a time (store_chunk) between the next tile's k-blocks: store_bytes
    // (0: nothing to store) from store_src in this warp's staging row to
    // store_dst, in units of store_unit bytes (16, 8 or 4: the largest that
    // both addresses are aligned to; 2: an odd staged offset, read as words
    // and shifted by 16 bits)
    unsigned char* store_dst;
    const unsigned char* store_src;
    int store_bytes, store_unit;

    // Warp w copies channels 8w.. of the k-block: per instruction 4 channel
    // rows (lane / 8) x 8 consecutive vectors (lane % 8) of 8 positions.
    __device__ __forceinline__ void set_copies() {
        const int row = lane >> 3, vector = lane & 7;
        src_offset = (8 * warp + row) * in_w + 8 * vector;
        dst_offset0 = warp * FOLD_KC_STRIDE + row * 128 + ((vector ^ row) << 4);
        dst_offset2 = warp * FOLD_KC_STRIDE + (row + 4) * 128 + ((vector ^ (row + 4)) << 4);
    }
    __device__ __forceinline__ void load_next() {
        const unsigned stage = shared_address(stages) + (loads % FOLD_STAGES) * FOLD_STAGE_BYTES;
        const int c0 = load_kb * FOLD_BK, q0 = load_q * FOLD_BN;
        const T* base = x + (static_cast<IndexT>(load_n) * in_channels + c0) * in_w + q0 + src_offset;
        const T* src[4] = {base, base + 64, base + 4 * in_w, base + 4 * in_w + 64};
        const unsigned dst[4] = {stage + dst_offset0, stage + dst_offset0 + 1024, stage + dst_offset2, stage + dst_offset2 + 1024};
        if (c0 + FOLD_BK <= in_channels && q0 + FOLD_BN <= in_w) {  // the whole k-block is inside the input
#pragma unroll
            for (int i = 0; i < 4; ++i) cp_async16_to(dst[i], src[i], true);
        } else {
            const int row = 8 * warp + (lane >> 3), q = q0 + 8 * (lane & 7);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const bool valid = c0 + row + 4 * (i >> 1) < in_channels && q + 64 * (i & 1) < in_w;
                cp_async16_to(dst[i], valid ? src[i] : x, valid);
            }
        }
        ++loads;
        if (++load_kb == kblocks) {
            load_kb = 0;
            if (++load_q == tiles_per_row) load_q = 0, ++load_n;
        }
    }

    // The epilogue of tile (fold_n, fold_q) from its accumulators `d`: its
    // four parts into this warp's staging row, then the row's stores
    // (skipped for a lead-in tile, whose carry alone is wanted): the single
    // elements at its two ends here, its 16-byte vectors by store_chunk, a
    // quarter after each of the next tile's k-blocks 2 to 5 (after its last
    // where it has fewer, and at the end of a run), while the tensor cores
    // work (perf notes v36).
    __device__ __forceinline__ void fold_tile(const float (&d)[64]) {
        __syncwarp();  // the previous tile's stores have read the staging row
        if (fold_q == 0) carry = 0.0f;
        fold_part<T, 0>(d, carry, bias_value, staging, lane);
        fold_part<T, 1>(d, carry, bias_value, staging, lane);
        fold_part<T, 2>(d, carry, bias_value, staging, lane);
        fold_part<T, 3>(d, carry, bias_value, staging, lane);
        __syncwarp();
        const int co = row_tile * (FOLD_ROWS / 16) + warp;  // warp 4h + w: channel 4h + w
        store_bytes = 0;
        if (fold_stores && co < out_channels)
            begin_stores(out + (static_cast<IndexT>(fold_n) * out_channels + co) * out_w, fold_q * FOLD_BN * FOLD_STRIDE - padding);
        if (++fold_q == tiles_per_row) fold_q = 0, ++fold_n;
        fold_stores = true;
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
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const int o = base + 256 * i + 8 * lane;
                if (o < store_bytes) *reinterpret_cast<uint2*>(store_dst + o) = *reinterpret_cast<const uint2*>(store_src + o);
            }
        } else if (store_unit == 4) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int o = base + 128 * i + 4 * lane;
                if (o < store_bytes) *reinterpret_cast<unsigned*>(store_dst + o) = *reinterpret_cast<const unsigned*>(store_src + o);
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

    // K-block kb of the tile in `d`: wait for its buffer, load ahead, issue
    // its MMAs and commit them.  The first k-block of a tile first waits for
    // every MMA in flight (the previous tile's last, into the other set):
    // ptxas then knows the other set is retired while this tile's MMAs run,
    // and leaves them asynchronous (with wait_group 1 alone it serializes
    // every wgmma, C7514).
    template <bool FIRST>
    __device__ __forceinline__ void kblock(float (&d)[64], int kb) {
        const int stage = mmas++ % FOLD_STAGES;    // this k-block's
        cp_async_wait_group<FOLD_AHEAD - 1>();  // this k-block is here
        fence_proxy_async();
        __syncthreads();  // ... for every thread; every warpgroup is done with k-block - 2, whose buffer is refilled below
        if constexpr (FIRST) wgmma_wait<0>();
        wgmma_fence();
        // A: K-major core matrices, leading offset 128 (the next 8 channels),
        // stride offset channels_padded * 16 (the next 8 rows).  B: leading
        // offset 1024 (the next 64 positions), stride offset FOLD_KC_STRIDE
        // (the next 8 channels).
        const unsigned a = a_low + kb * (FOLD_BK / 8 * 128 / 16), b = b_low + stage * (FOLD_STAGE_BYTES / 16);
#pragma unroll
        for (int s = 0; s < FOLD_BK / 16; ++s)
            wgmma_m64n128k16_mn_b<T>(d, a_descriptor(a + s * (256 / 16)), b_descriptor(b + s * (2 * FOLD_KC_STRIDE / 16)), (!FIRST || s > 0) ? 1 : 0);
        wgmma_commit();
        if (loads < total) load_next();
        cp_async_commit();
    }
    // The descriptors from their start address in 16-byte units (under 2^14:
    // shared memory addresses stay below 256 KB, so adding offsets there
    // never carries into the other fields).
    __device__ __forceinline__ unsigned long long a_descriptor(unsigned low) const {
        return wgmma_descriptor_fields(128, channels_padded * 16) | low;
    }
    __device__ __forceinline__ unsigned long long b_descriptor(unsigned low) const {
        return wgmma_descriptor_fields(1024, FOLD_KC_STRIDE, true) | low;
    }

    // One tile: its k-blocks' MMAs into `d`, and the previous tile's
    // epilogue (from `before`, when there is one) while the first two
    // k-blocks' MMAs run; the previous tile's 16-byte stores follow in four
    // chunks after k-blocks 2 to 5.  (Epilogue parts that read `before`
    // after later waits in the k-block loop made ptxas serialize every
    // wgmma, C7514; the stores read only shared memory.)
    __device__ __forceinline__ void tile(float (&d)[64], float (&before)[64], bool previous) {
        kblock<true>(d, 0);
#pragma unroll
        for (int kb = 1; kb < FOLD_INFLIGHT; ++kb)  // their buffers held the previous tile's k-blocks, all done
            if (kb < kblocks) kblock<false>(d, kb);
        if (previous) {
            pin(before);
            fold_tile(before);
        }
        for (int kb = FOLD_INFLIGHT; kb < kblocks; ++kb) {
            wgmma_wait<FOLD_INFLIGHT - 1>();  // k-block kb - FOLD_INFLIGHT's MMAs are done: its buffer is refilled at this k-block
            kblock<false>(d, kb);
            if (kb - FOLD_INFLIGHT < 4) store_chunk(kb - FOLD_INFLIGHT);
        }
        for (int c = max(kblocks - FOLD_INFLIGHT, 0); c < 4; ++c) store_chunk(c);  // few k-blocks
        wgmma_wait<FOLD_INFLIGHT - 1>();
    }

    // Tiles [first, end) of row tile `rt` (linear tile numbers); `lead` when
    // tile first - 1 is computed first for its carry.
    __device__ __forceinline__ void run(int rt, int first, int end, int per_row_tile, float (&acc0)[64], float (&acc1)[64]) {
        __syncthreads();  // shared memory is free (the previous run's last MMAs and stores are done)
        const int rest = first - rt * per_row_tile;
        const int n = rest / tiles_per_row, q = rest - n * tiles_per_row;
        const bool lead = q > 0;
        row_tile = rt;
        load_n = fold_n = n;
        load_q = fold_q = q - (lead ? 1 : 0);
        load_kb = 0;
        loads = mmas = 0;
        const int count = end - first + (lead ? 1 : 0);
        total = count * kblocks;
        fold_stores = !lead;
        carry = 0.0f;
        store_bytes = 0;
        const int co = rt * (FOLD_ROWS / 16) + warp;
        bias_value = (bias != nullptr && co < out_channels) ? ValueTraits<T>::to_acc(bias[co]) : 0.0f;
        // the row tile's weight: FOLD_ROWS rows of channels_padded, as (row / 8, chunk, row % 8) core matrices
        const int chunks = channels_padded / 8;
        const T* src = packed + static_cast<IndexT>(rt) * FOLD_ROWS * channels_padded;
        for (int c = threadIdx.x; c < FOLD_ROWS * chunks; c += FOLD_THREADS) {
            const int row = c / chunks, chunk = c - row * chunks;
            cp_async16(weight_tile + (row / 8) * (chunks * 128) + chunk * 128 + (row % 8) * 16, src + row * channels_padded + chunk * 8, true);
        }
        cp_async_commit();  // with k-block 0's group below: the wait for k-block 0 covers it
        for (int s = 0; s < FOLD_AHEAD; ++s) {
            if (loads < total) load_next();
            cp_async_commit();
        }
        for (int t = 0; t < count; t += 2) {
            tile(acc0, acc1, t > 0);
            if (t + 1 < count) tile(acc1, acc0, true);
        }
        wgmma_wait<0>();
        if ((count - 1) % 2 == 0) {
            pin(acc0);
            fold_tile(acc0);
        } else {
            pin(acc1);
            fold_tile(acc1);
        }
#pragma unroll
        for (int c = 0; c < 4; ++c) store_chunk(c);
        cp_async_wait_all();
    }
};
#endif

// Grid: `parts` blocks for each row tile, which split its images x
// tiles_per_row tiles evenly: the blocks of every row tile are at the same
// input tiles at about the same time, so each input tile comes from DRAM once
// and from L2 for the other row tiles (an even split of all tiles spread them
// over the whole input: 60% L2 hits on X2, perf notes v23).  With `parts` 0
// (more row tiles than blocks), the blocks split all `work` = row tiles x
// images x tiles_per_row tiles evenly, in that order.  Shared memory: FOLD_ROWS *
// channels_padded * 2 (the weight) + FOLD_STAGES * FOLD_STAGE_BYTES + 8 *
// FOLD_OUT_BYTES.
template <typename T, typename IndexT>
__global__ void __launch_bounds__(FOLD_THREADS, 1)
    conv_fold(const T* __restrict__ x, const T* __restrict__ packed, const T* __restrict__ bias, T* __restrict__ out, int batch,
              int in_channels, int channels_padded, int out_channels, int in_w, int out_w, int padding, int tiles_per_row, int work,
              int parts) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(1024) unsigned char smem[];  // the swizzled buffers' atoms are 1024-byte aligned
    FoldBlock<T, IndexT> b;
    b.x = x, b.packed = packed, b.bias = bias, b.out = out;
    b.in_channels = in_channels, b.channels_padded = channels_padded, b.out_channels = out_channels;
    b.in_w = in_w, b.out_w = out_w, b.padding = padding, b.tiles_per_row = tiles_per_row;
    b.kblocks = channels_padded / FOLD_BK;
    b.warp = threadIdx.x / 32, b.lane = threadIdx.x % 32;
    b.weight_tile = smem;
    b.stages = smem + FOLD_ROWS * channels_padded * 2;
    b.staging = b.stages + FOLD_STAGES * FOLD_STAGE_BYTES + b.warp * FOLD_OUT_BYTES;
    b.set_copies();
    b.a_low = (shared_address(b.weight_tile) + (b.warp / 4) * 8 * (channels_padded * 16)) >> 4;  // warpgroup h: rows 64h..
    b.b_low = shared_address(b.stages) >> 4;
    float acc0[64], acc1[64];
    const int per_row_tile = batch * tiles_per_row;
    int w, end;
    if (parts > 0) {  // `parts` blocks a row tile, each the same share of it
        const int rt = blockIdx.x / parts, part = blockIdx.x - rt * parts;
        w = rt * per_row_tile + static_cast<int>(static_cast<long long>(part) * per_row_tile / parts);
        end = rt * per_row_tile + static_cast<int>(static_cast<long long>(part + 1) * per_row_tile / parts);
    } else {  // fewer blocks than row tiles: an even split of all tiles
        w = static_cast<int>(static_cast<long long>(blockIdx.x) * work / gridDim.x);
        end = static_cast<int>(static_cast<long long>(blockIdx.x + 1) * work / gridDim.x);
    }
    while (w < end) {  // a run per row tile
        const int rt = w / per_row_tile;
        const int run_end = min(end, (rt + 1) * per_row_tile);
        b.run(rt, w, run_end, per_row_tile, acc0, acc1);
        w = run_end;
    }
#endif
}
