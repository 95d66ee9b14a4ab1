// conv_wgmma_tf32: a float32 stride-1 1D correlation in TF32 on Hopper's
// wgmma, with the window as register operands (the forward pass of a stride-1
// problem, and grad_input of one).
//
// One phase record (common.cuh's AxisPhase with out_step, in_step and
// tap_step 1, tap_first 0): column c (0 <= c < count) writes
//     out[n, group * out_channels + co, out_base + c] = bias[group * out_channels + co] +
//         sum over t < TAPS, ci < channels of
//             weight_t[co][ci] * source[n, group * channels + ci, in_base + c + t * tap_in_step]
// (source positions outside the row read 0).  As a GEMM per tap: rows the
// columns c (M), columns the output channels co (N), the reduction the
// source channels ci (K).
//
// conv_wgmma_resident reads the window as B, K-major: a [channel][position]
// slice transposed into [position][channel] rows in shared memory, every
// slice, with barriers between; and for TF32 a tap's window moves by 4 bytes,
// which no core matrix can (grad_weight_tf32.cu).  Here the window is A from
// registers (wgmma.m64n128k8 with a register fragment, mma.sync's m16n8k8
// A layout: element (m, k) is window row k at column m): each thread loads
// its fragment elements from the slice as it arrived, at any shift, so a
// tap is an offset and there is no transpose.  The weight is B, K-major as
// the packed weight already is ([co][ci], channels contiguous), kept in
// shared memory for the whole block.
//
// Block: two warpgroups, CT_POSITIONS = 128 columns (64 each) x CT_ROWS =
// 128 output channels; persistent over its share of the (image, column
// tile) items of one (group, co tile) combination.  Shared memory:
//   * the weight tile, every tap and channel: (tap, 32-channel block) atoms of
//     128 rows (co) x 128 bytes (32 ci), 128-byte swizzled (16-byte chunk c of
//     row r at chunk c ^ r % 8), 16 KB each; zeros past the channels;
//   * CT_BUFFERS raw window buffers: CT_SLICE channel rows of raw_row floats
//     (raw_row % 32 == 8: a fragment load's 4 rows x 8 columns fall in 32
//     distinct banks where the rows share their alignment); row k holds the
//     source row from its 16-byte-aligned vector at or below position lo
//     (the item's first source position: in_base + c0 + min(0, (TAPS - 1) *
//     tap_in_step)), so that its element j is position lo - mis_k + j, mis_k
//     = (row start + lo) % 4 floats; window_vectors 16-byte vectors a row,
//     by cp.async, CT_AHEAD stages ahead; once they are here, each thread
//     zeros the previous row's floats in its copies that straddle a row's
//     start;
//   * the bias of the tile's channels (zeros without one).
// A stage is one CT_SLICE-channel slice of an item: per warpgroup, 2 k-steps
// x TAPS wgmma.m64n128k8 (A: 4 LDS.32 a k-step, from column 64 warpgroup +
// 16 warp + g (+ 8) + mis + tap offset, rows t4 (+ 4), each rounded to TF32
// as cvt.rn.tf32.f32 rounds); the first of an
// item's MMAs does not add (scale-d 0).  Two fragment register sets alternate
// over the stages (wait_group 1), so one stage's MMAs run while the next
// stage's fragments load.  After an item's last stage its accumulators, plus
// the bias, are stored straight to global memory (float per element: 8
// consecutive columns a row per 4 lanes, whole 32-byte sectors).
//
// FOLD builds take window_records' folded record (a forward pass whose
// stride s divides the kernel, dilation 1: X3, s = 256, 4 taps): GEMM column
// m is the pair (output channel co = m >> fold_shift, sub-phase r = m %
// fold), whose tap t is kernel tap k = tap_first + r + t * tap_step of the
// packed weight (groups, kernel_w, out_channels, channels_padded), and
// column c writes out[n, group * out_channels + co, out_base + c * out_step
// + r].  Consecutive columns of a fragment are consecutive outputs: a pair
// goes out as one 8-byte store where aligned (4 lanes: 32 contiguous bytes).
// Where the fold has at least CT_ROWS rows a channel, a block's tile is one
// channel's sub-phases r0 .. r0 + 127, and its items cover only the
// columns where one of them writes inside the output (as window.cuh's
// window_block): X3's 513 columns are 512 a tile, 4 items of 128.  The
// weight is read once per block from the packed weight as it is: nothing
// else changes.
//
// Requirements checked by the host: compute capability 9.0 (sm_90a), a
// 16-byte-aligned source, the weight packed by pack_window_weight rounded to
// TF32 (its channels padded to channels_padded, a multiple of 4), and the
// shared memory conv_tf32_layout counts; FOLD: a fold of at least 2.
#include "common.cuh"
#include "mma.cuh"
#include "wgmma.cuh"

constexpr int CT_THREADS = 256;    // two warpgroups
constexpr int CT_POSITIONS = 128;  // GEMM rows (columns c) per item, 64 a warpgroup
constexpr int CT_ROWS = 128;       // output channels per block (wgmma N)
constexpr int CT_SLICE = 16;       // reduction channels per stage
constexpr int CT_KSTEPS = CT_SLICE / 8;  // its k-steps
constexpr int CT_AHEAD = 3;        // stages whose window is loaded ahead of the one in use
constexpr int CT_BUFFERS = CT_AHEAD + 1;
constexpr int CT_MAX_TASKS = 4;    // window vectors a thread copies per stage (window_vectors <= 64)
constexpr int CT_ATOM = CT_ROWS * 128;  // one (tap, 32-channel block) of the weight

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// 16 bytes global -> shared, of which the first `bytes` are read and the rest
// zeroed (cp.async's src-size).
__device__ __forceinline__ void cp_async16_partial(void* dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)), "l"(src), "r"(bytes) : "memory");
}

// Where a stage is: item (n, first column c0) of the block's share, and its
// slice of channels.  advance() steps to the next stage without a division
// but where an item ends.
struct ConvTf32Stage {
    int item, slice, n, c0;
    __device__ __forceinline__ void start(int first_item, int col_tiles, int q_first) {
        item = first_item, slice = 0;
        n = item / col_tiles, c0 = q_first + item % col_tiles * CT_POSITIONS;
    }
    __device__ __forceinline__ void advance(int slices, int stride, int col_tiles, int q_first) {
        if (++slice == slices) start(item + stride, col_tiles, q_first);
    }
};

// (row start + lo) % 4 for source row `row` (global row index n * groups *
// channels + ...): the misalignment of the row's first window position, in
// floats, from arithmetic modulo 4 (lo may be negative).
__device__ __forceinline__ int ct_misalignment(int row, int src_w, int lo) { return ((row & 3) * (src_w & 3) + lo) & 3; }

// One thread's window copies, the same every stage: vector u of slice row k,
// u * 4 + k * src_w floats from the slice's first row's window start (the
// host keeps CT_SLICE * src_w in 32 bits).
struct CtWindowCopies {
    int row[CT_MAX_TASKS], vector[CT_MAX_TASKS], offset[CT_MAX_TASKS];
    __device__ __forceinline__ CtWindowCopies(int tid, int window_vectors, int src_w) {
#pragma unroll
        for (int i = 0; i < CT_MAX_TASKS; ++i) {
            const int task = tid + i * CT_THREADS;
            row[i] = task < CT_SLICE * window_vectors ? task / window_vectors : -1;
            vector[i] = task % window_vectors;
            offset[i] = row[i] * src_w + 4 * vector[i];
        }
    }
    // The window of channels ci0 .. ci0 + CT_SLICE - 1 of source row group `image_group` (n * groups +
    // group) from position lo into `raw` (the caller commits).  Row k's window starts at global float
    // row * src_w + lo, misaligned by mis = that % 4: its vectors are read from there - mis.
    template <typename Index>
    __device__ __forceinline__ void load(unsigned char* raw, const float* source, int image_group, int channels, int ci0, int lo,
                                         int src_w, int window_vectors, int raw_row) const {
        const Index base = (static_cast<Index>(image_group) * channels + ci0) * src_w + lo;
        // every vector of every row inside its row (p0 >= lo - 3 >= 0, p0 + 4 <= lo + 4 window_vectors)
        const bool inside = lo >= 3 && lo + 4 * window_vectors <= src_w && ci0 + CT_SLICE <= channels;
#pragma unroll
        for (int i = 0; i < CT_MAX_TASKS; ++i) {
            if (row[i] < 0) continue;
            const Index at_vector = base + offset[i];
            const int mis = static_cast<int>(at_vector) & 3;
            const float* const src = source + (at_vector - mis);
            unsigned char* const dst = raw + row[i] * raw_row * 4 + vector[i] * 16;
            if (inside) {
                cp_async16(dst, src, true);
            } else {
                // floats of the row read: none outside it; a vector past its end reads what is inside and
                // zeros the rest; one over its start reads the previous row's floats, zeroed by prepare
                const int p0 = lo - mis + 4 * vector[i];  // the vector's first position in its row
                const int inside_floats = ci0 + row[i] < channels ? max(0, min(4, src_w - p0)) : 0;
                const int bytes = p0 + 4 > 0 ? 4 * inside_floats : 0;
                cp_async16_partial(dst, bytes ? src : source, bytes);
            }
        }
    }
    // Once this thread's copies are here: the floats before the row's start zeroed (a vector that
    // straddles it read the previous row's; one wholly before it read nothing, zeros).  row0: the global
    // row index of the slice's first channel.  The kernels round to TF32 as the fragments load: rounding
    // here, in place, put a shared load, 4 conversions and a store before each stage's barrier, and
    // took 9-11% longer (perf notes v39).
    __device__ __forceinline__ void prepare(unsigned char* raw, int row0, int lo, int src_w, int raw_row) const {
        if (lo >= 3) return;  // every vector starts inside its row
#pragma unroll
        for (int i = 0; i < CT_MAX_TASKS; ++i) {
            if (row[i] < 0) continue;
            float4* const dst = reinterpret_cast<float4*>(raw + row[i] * raw_row * 4 + vector[i] * 16);
            const int p0 = lo - ct_misalignment(row0 + row[i], src_w, lo) + 4 * vector[i];  // the vector's first position
            if (p0 >= 0) continue;
            float4 v = *dst;
            v.x = 0.0f;
            v.y = p0 + 1 >= 0 ? v.y : 0.0f;
            v.z = p0 + 2 >= 0 ? v.z : 0.0f;
            *dst = v;
        }
    }
};

// An item's sums (plus the bias) where the fold is below the tile's N
// columns (CT_ROWS, or conv_tf32_stream's): GEMM columns m and m + 1 (m
// even) are sub-phases r and r + 1 of one channel,
// outputs o and o + 1 of column c, one 8-byte store where both lie inside the
// output and are aligned.  c_first: this thread's first column (and c_first +
// 8); out_row0: the item's (image, group) first output row.
template <typename Index, int N = CT_ROWS>
__device__ __forceinline__ void ct_store_fold_pairs(const float (&acc)[N / 2], const float* bias_tile, float* out, Index out_row0, int co_tile,
                                                    int rows, int fold_shift, int c_first, int q_end, int out_base, int out_step, int out_w,
                                                    int t4) {
#pragma unroll
    for (int j = 0; j < N / 8; ++j) {
        const int co = 8 * j + 2 * t4, m = co_tile * N + co;
        if (m >= rows) continue;
        const int r = m & ((1 << fold_shift) - 1);
        const float b = bias_tile[co];
        float* const channel = out + (out_row0 + (m >> fold_shift)) * static_cast<Index>(out_w);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int c = c_first + 8 * h;
            const int o = out_base + c * out_step + r;
            if (c >= q_end || o + 1 < 0 || o >= out_w) continue;
            const float v0 = acc[4 * j + 2 * h] + b, v1 = acc[4 * j + 2 * h + 1] + b;
            if (o >= 0 && o + 1 < out_w && (reinterpret_cast<unsigned long long>(channel + o) & 7) == 0) {
                *reinterpret_cast<float2*>(channel + o) = make_float2(v0, v1);
            } else {
                if (o >= 0) channel[o] = v0;
                if (o + 1 < out_w) channel[o + 1] = v1;
            }
        }
    }
}
#endif

template <typename Index, int TAPS, bool FOLD = false>
__global__ void __launch_bounds__(CT_THREADS, 1) conv_wgmma_tf32(
    const float* __restrict__ source,   // (batch, groups * channels, src_w)
    const float* __restrict__ weight,   // (groups, TAPS or FOLD's kernel_w, out_channels, channels_padded), TF32-rounded
    const float* __restrict__ bias,     // (groups * out_channels) or null
    float* __restrict__ out,            // (batch, groups * out_channels, out_w)
    int batch, int groups, int channels, int channels_padded, int out_channels, int src_w, int out_w,
    int count, int out_base, int in_base, int tap_in_step,
    int window_vectors, int raw_row, int weight_blocks, int co_tiles, int per_combo,
    int fold_shift, int kernel_w, int tap_first, int tap_step, int out_step) {  // FOLD builds only (others: 0, TAPS, 0, 1, 1)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(1024) unsigned char smem[];  // the weight atoms first: 1024-byte aligned
    const int tid = threadIdx.x;
    const int warpgroup = tid / 128;
    const int lane = tid % 32, w = (tid / 32) % 4;
    const int g = lane / 4, t4 = lane % 4;

    const int combo = blockIdx.x / per_combo, share = blockIdx.x % per_combo;
    const int co_tile = combo % co_tiles, group = combo / co_tiles;
    // FOLD: GEMM columns (co, r) and the columns their tile writes (all, but where a tile is one channel's sub-phases)
    const int rows = FOLD ? out_channels << fold_shift : out_channels;
    int q_first = 0, q_end = count;
    if constexpr (FOLD) {
        if ((1 << fold_shift) >= CT_ROWS) {
            const int r0 = (co_tile * CT_ROWS) & ((1 << fold_shift) - 1);
            q_first = max(0, -floor_div(out_base + r0 + CT_ROWS - 1, out_step));
            q_end = min(count, floor_div(out_w - 1 - out_base - r0, out_step) + 1);
        }
    }
    const int col_tiles = max(1, (q_end - q_first + CT_POSITIONS - 1) / CT_POSITIONS);
    const int items = q_end > q_first ? batch * col_tiles : 0;
    const int slices = (channels + CT_SLICE - 1) / CT_SLICE;
    const int my_items = share < items ? (items - share + per_combo - 1) / per_combo : 0;
    const int stages = my_items * slices;
    const int reach = (TAPS - 1) * tap_in_step;
    const int lo_offset = min(0, reach);  // lo = in_base + c0 + lo_offset

    unsigned char* const weight_base = smem;
    const int weight_bytes = TAPS * weight_blocks * CT_ATOM;
    float* const bias_tile = reinterpret_cast<float*>(smem + weight_bytes);
    unsigned char* const raw_base = smem + weight_bytes + CT_ROWS * 4;
    const int raw_bytes = CT_SLICE * raw_row * 4;

    // The weight tile, once: chunk task i -> (tap, block, co, chunk) in its swizzled place.
    {
        const int tasks = TAPS * weight_blocks * CT_ROWS * 8;
        for (int task = tid; task < tasks; task += CT_THREADS) {
            const int chunk = task % 8, co = task / 8 % CT_ROWS, tb = task / (8 * CT_ROWS);
            const int t = tb / weight_blocks, block = tb % weight_blocks;
            const int ci = block * 32 + chunk * 4, m = co_tile * CT_ROWS + co;
            int co_global = m, k = t, taps_stored = TAPS;  // GEMM column m's channel; tap t's row of the packed weight
            if constexpr (FOLD) {
                co_global = m >> fold_shift;
                k = tap_first + (m & ((1 << fold_shift) - 1)) + t * tap_step;
                taps_stored = kernel_w;
            }
            const bool valid = ci < channels_padded && m < rows && k < taps_stored;
            const float* src = weight + ((static_cast<Index>(group) * taps_stored + k) * out_channels + co_global) * static_cast<Index>(channels_padded) + ci;
            cp_async16(weight_base + tb * CT_ATOM + co * 128 + ((chunk ^ (co % 8)) * 16), valid ? src : weight, valid);
        }
        for (int co = tid; co < CT_ROWS; co += CT_THREADS) {
            const int m = co_tile * CT_ROWS + co, co_global = FOLD ? m >> fold_shift : m;
            bias_tile[co] = bias != nullptr && m < rows ? bias[group * out_channels + co_global] : 0.0f;
        }
        cp_async_commit();
    }

    const CtWindowCopies copies(tid, window_vectors, src_w);
    // Stage s's window into raw buffer s % CT_BUFFERS (the caller commits).
    auto load = [&](const ConvTf32Stage& at, int s) {
        copies.load<Index>(raw_base + (s % CT_BUFFERS) * raw_bytes, source, at.n * groups + group, channels, at.slice * CT_SLICE,
                           in_base + at.c0 + lo_offset, src_w, window_vectors, raw_row);
    };
    // Once this thread's copies of stage s are here: the floats before the row's start zeroed (TF32 rounding:
    // as the fragments load, off the path to the barrier).
    auto prepare = [&](const ConvTf32Stage& at, int s) {
        copies.prepare(raw_base + (s % CT_BUFFERS) * raw_bytes, (at.n * groups + group) * channels + at.slice * CT_SLICE,
                       in_base + at.c0 + lo_offset, src_w, raw_row);
    };

    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
    unsigned frag[2][TAPS][CT_KSTEPS][4];

    ConvTf32Stage produce, consume;
    produce.start(share, col_tiles, q_first);
    consume = produce;
#pragma unroll
    for (int s = 0; s < CT_AHEAD; ++s) {
        if (s < stages) load(produce, s);
        cp_async_commit();
        produce.advance(slices, per_combo, col_tiles, q_first);
    }
    cp_async_wait_group<CT_AHEAD>();  // the weight
    fence_proxy_async();              // (cp.async writes, read by the tensor cores)

    const unsigned weight_address = shared_address(weight_base);
    const int fragment_column = 64 * warpgroup + 16 * w + g;
    int mis = 0;  // this thread's fragment rows' misalignment in the item (slices start at multiples of 4 channels)
    // Stage s, whose fragments go to register set a, frag[s % 2] (named by the caller: registers, not local memory).
    auto stage = [&](unsigned (&a)[TAPS][CT_KSTEPS][4], int s) {
        cp_async_wait_group<CT_AHEAD - 1>();  // stage s's window (later ones may not be here)
        prepare(consume, s);
        // stage s's window ready for every thread; buffer (s + CT_AHEAD) % CT_BUFFERS (stage s - 1's) free
        __syncthreads();
        if (s + CT_AHEAD < stages) load(produce, s + CT_AHEAD);
        cp_async_commit();
        produce.advance(slices, per_combo, col_tiles, q_first);

        const int lo = in_base + consume.c0 + lo_offset;
        if (consume.slice == 0) mis = ct_misalignment((consume.n * groups + group) * channels + t4, src_w, lo);
        const float* const window = reinterpret_cast<const float*>(raw_base + (s % CT_BUFFERS) * raw_bytes) + t4 * raw_row + fragment_column + mis;
        wgmma_wait<1>();  // stage s - 2's MMAs are done: its fragment registers are free
#pragma unroll
        for (int t = 0; t < TAPS; ++t) {
            const float* const tap = window + t * tap_in_step - lo_offset;
#pragma unroll
            for (int k = 0; k < CT_KSTEPS; ++k) {
                const float* const src = tap + 8 * k * raw_row;
                a[t][k][0] = to_tf32(src[0]);
                a[t][k][1] = to_tf32(src[8]);
                a[t][k][2] = to_tf32(src[4 * raw_row]);
                a[t][k][3] = to_tf32(src[4 * raw_row + 8]);
            }
        }
        wgmma_fence();
#pragma unroll
        for (int t = 0; t < TAPS; ++t)
#pragma unroll
            for (int k = 0; k < CT_KSTEPS; ++k) {
                const int ci = consume.slice * CT_SLICE + 8 * k;
                const unsigned address = weight_address + (t * weight_blocks + ci / 32) * CT_ATOM + (ci % 32) * 4;
                const unsigned long long b = wgmma_descriptor_fields(16, 1024, true) | ((address >> 4) & 0x3FFF);
                wgmma_m64n128k8_tf32_rs(acc, a[t][k], b, consume.slice > 0 || t > 0 || k > 0);
            }
        wgmma_commit();

        if (consume.slice == slices - 1) {  // the item's sums: store them
            wgmma_wait<0>();
            pin(acc);
            // (float per element: 8 consecutive columns of a row per 4 lanes, whole 32-byte sectors.  A
            // version without the checks for whole tiles measured 4-7% slower on P2's forward pass.)  The
            // addresses come from one pointer an item, stepped or offset by constants, and no check is
            // repeated per element (perf notes v34: the per-store index arithmetic was half the kernel's
            // instructions on X3).
            const Index out_row0 = (static_cast<Index>(consume.n) * groups + group) * out_channels;
            const int c_first = consume.c0 + fragment_column;  // this thread's columns: c_first and c_first + 8
            if constexpr (FOLD) {
                if ((1 << fold_shift) >= CT_ROWS) {
                    // the tile is one channel's sub-phases r0 .. r0 + 127: row pair j (sub-phases r0 + 8 j + 2 t4
                    // and + 1) of column c is outputs o and o + 1, o = out_base + c * out_step + r0 + 2 t4 + 8 j
                    const int r0 = (co_tile * CT_ROWS) & ((1 << fold_shift) - 1);
                    float* const channel = out + (out_row0 + ((co_tile * CT_ROWS) >> fold_shift)) * static_cast<Index>(out_w);
                    const float b = bias_tile[0];
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int c = c_first + 8 * h;
                        if (c >= q_end) continue;
                        const int o0 = out_base + c * out_step + r0 + 2 * t4;
                        float* const at = channel + o0;
                        if ((reinterpret_cast<unsigned long long>(at) & 7) == 0 && o0 >= 0 && o0 + 8 * 15 + 1 < out_w) {
                            // every pair inside the output and aligned: 16 8-byte stores at constant offsets
#pragma unroll
                            for (int j = 0; j < 16; ++j)
                                *reinterpret_cast<float2*>(at + 8 * j) = make_float2(acc[4 * j + 2 * h] + b, acc[4 * j + 2 * h + 1] + b);
                        } else {
#pragma unroll
                            for (int j = 0; j < 16; ++j) {
                                const unsigned o = static_cast<unsigned>(o0 + 8 * j);  // o < out_w: 0 <= o < out_w
                                if (o < static_cast<unsigned>(out_w)) at[8 * j] = acc[4 * j + 2 * h] + b;
                                if (o + 1 < static_cast<unsigned>(out_w)) at[8 * j + 1] = acc[4 * j + 2 * h + 1] + b;
                            }
                        }
                    }
                } else {
                    ct_store_fold_pairs<Index>(acc, bias_tile, out, out_row0, co_tile, rows, fold_shift, c_first, q_end, out_base, out_step, out_w, t4);
                }
            } else {
                // output channel co_tile * CT_ROWS + 8 j + 2 t4 + e, column c: rows 8 apart a step of j
                const int limit = out_channels - co_tile * CT_ROWS - 2 * t4;  // its rows 8 j + e < limit exist
                const bool in0 = c_first < count, in1 = c_first + 8 < count;
                const Index step = out_w;
                float* row = out + (out_row0 + co_tile * CT_ROWS + 2 * t4) * step + out_base + c_first;
#pragma unroll
                for (int j = 0; j < 16; ++j) {
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        if (8 * j + e >= limit) continue;
                        const float b = bias_tile[8 * j + 2 * t4 + e];
                        float* const at = row + e * step;
                        if (in0) at[0] = acc[4 * j + e] + b;
                        if (in1) at[8] = acc[4 * j + 2 + e] + b;
                    }
                    row += 8 * step;
                }
            }
        }
        consume.advance(slices, per_combo, col_tiles, q_first);
    };
    // In pairs, so that every path into a stage leaves only the other register set's MMAs in flight
    // (with the odd stage inside the loop, ptxas serialized every wgmma).
    int s = 0;
    for (; s + 1 < stages; s += 2) {
        stage(frag[0], s);
        stage(frag[1], s + 1);
    }
    if (s < stages) stage(frag[0], s);
    wgmma_wait<0>();  // (the last stage's epilogue waited: this tells ptxas no MMA is left in flight)
    cp_async_wait_all();
#endif
}

// conv_tf32_stream: conv_wgmma_tf32's FOLD GEMM with the weight streamed
// through shared memory beside the window, for folds whose weight tile does
// not fit (X2: 512 channels x 2 taps x 128 columns would be 512 KB), in TF32
// (PASSES 1) or float32-accurate 3xTF32 (PASSES 3).
//
// The GEMM is conv_wgmma_tf32's for a fold below its tile: rows the columns c
// of the folded record (CT_POSITIONS an item, 64 a warpgroup), columns the
// (output channel, sub-phase) pairs (COLS = cs_cols<PASSES>() a block;
// fold_shift: a fold of 2 to 64, a power of two), the reduction TAPS taps x
// the source channels.  A stage is one CT_SLICE-channel slice of an item: its
// window (as conv_wgmma_tf32's raw buffers) and its weight, (PASSES 3: 2) x
// TAPS tiles of COLS rows x CT_SLICE channels (a 64-byte line), K-major in
// 64-byte swizzled atoms of 8 rows (wgmma_descriptor_swizzle64), by
// cp.async, CS_AHEAD stages ahead in CS_BUFFERS buffers.  Unswizzled (core
// matrices of 8 rows x 16 bytes) the same kernel took 2.80 ms on X2 "tf32"
// against 1.98 and 5.07 against 3.44 in 3xTF32: the tensor cores' reads of
// it conflict (perf notes v39).  The weight comes from the packed weight
// (PASSES 3: hi, then lo at split_offset floats, pack_window_weight's
// SPLIT), whose offsets are 32-bit (the host declines a larger one).
//
// Per stage and warpgroup: TAPS x 2 k-steps of wgmma.m64nCOLSk8 with the
// window fragments as A (conv_wgmma_tf32's loads, rounded to TF32; PASSES 3
// splits each element into hi and lo as it loads).  PASSES 1 adds into the item's sum
// (scale-d 0 on its first MMA), stage after stage: a stage's MMAs are waited
// for (wait_group 1) only after the next stage's issue.  PASSES 3 takes each
// stage's lo_a hi_b + hi_a lo_b + hi_a hi_b into a fresh accumulator and adds
// it to the sum with FADDs once its MMAs are done (the tensor core truncates
// as it adds: MmaOp<float, 3>), while the next stage's fragments load.  The
// order of a stage s:
//   MMAs(s); [PASSES 1: wait for MMAs(s - 1)]; wait for stage s + 1's copies,
//   prepare them, fence.proxy.async, barrier; copies of stage s + 1 +
//   CS_AHEAD into the buffer of stage s - 1; fragments of stage s + 1;
//   [PASSES 3: wait for MMAs(s), add them]; at an item's end its stores.
// After the barrier every warpgroup is done with stage s - 1's MMAs, so its
// buffer is free; stage s's buffer (its MMAs) and stage s + 1's (its
// fragments) are the two besides the CS_AHEAD in flight.
//
// The epilogue is conv_wgmma_tf32's for folds below the tile
// (ct_store_fold_pairs).  Requirements checked by the host: compute
// capability 9.0, a 16-byte-aligned source, conv_tf32_stream_layout's shared
// memory, a fold of 2 to 64 (a power of two), TAPS taps a sub-phase.
constexpr int CS_AHEAD = 2;
constexpr int CS_BUFFERS = CS_AHEAD + 2;
constexpr int CS_LINE = CT_SLICE * 4;  // a weight row of a stage: 64 bytes
// GEMM columns a block: 256 in TF32 (half the fragment loads, window copies and
// barriers per MMA of 128), 128 in 3xTF32 (its fresh accumulator beside the sum).
template <int PASSES>
__host__ __device__ constexpr int cs_cols() { return PASSES == 1 ? 256 : 128; }

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// D (64 x N) = A (registers) B + (D if accumulate), TF32, N 128 or 256.
template <int N>
__device__ __forceinline__ void cs_wgmma(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long b, int accumulate) {
    if constexpr (N == 256) {
        wgmma_m64n256k8_tf32_rs(d, a, b, accumulate);
    } else {
        wgmma_m64n128k8_tf32_rs(d, a, b, accumulate);
    }
}

template <int TAPS, int PASSES>
struct CsFragments {
    unsigned hi[TAPS][CT_KSTEPS][4];
    unsigned lo[TAPS][CT_KSTEPS][PASSES == 3 ? 4 : 1];
};
#endif

template <typename Index, int TAPS, int PASSES>
__global__ void __launch_bounds__(CT_THREADS, 1) conv_tf32_stream(
    const float* __restrict__ source,   // (batch, groups * channels, src_w)
    const float* __restrict__ weight,   // (PASSES, groups, kernel_w, out_channels, channels_padded), TF32-rounded
    const float* __restrict__ bias,     // (groups * out_channels) or null
    float* __restrict__ out,            // (batch, groups * out_channels, out_w)
    int batch, int groups, int channels, int channels_padded, int out_channels, int src_w, int out_w,
    int count, int out_base, int in_base, int tap_in_step,
    int window_vectors, int raw_row, int co_tiles, int per_combo,
    int fold_shift, int kernel_w, int tap_first, int tap_step, int out_step, int split_offset) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(PASSES == 1 || PASSES == 3, "TF32 or 3xTF32");
    constexpr int COLS = cs_cols<PASSES>(), TILE = COLS * CS_LINE, H = COLS / 64;
    extern __shared__ __align__(1024) unsigned char smem[];
    const int tid = threadIdx.x;
    const int warpgroup = tid / 128;
    const int lane = tid % 32, w = (tid / 32) % 4;
    const int g = lane / 4, t4 = lane % 4;

    const int combo = blockIdx.x / per_combo, share = blockIdx.x % per_combo;
    const int co_tile = combo % co_tiles, group = combo / co_tiles;
    const int rows = out_channels << fold_shift;
    const int col_tiles = max(1, (count + CT_POSITIONS - 1) / CT_POSITIONS);
    const int items = count > 0 ? batch * col_tiles : 0;
    const int slices = (channels + CT_SLICE - 1) / CT_SLICE;
    const int my_items = share < items ? (items - share + per_combo - 1) / per_combo : 0;
    const int stages = my_items * slices;
    const int lo_offset = min(0, (TAPS - 1) * tap_in_step);  // lo = in_base + c0 + lo_offset

    float* const bias_tile = reinterpret_cast<float*>(smem);
    unsigned char* const buffers = smem + COLS * 4;
    const int weight_bytes = (PASSES == 3 ? 2 : 1) * TAPS * TILE;  // a buffer's weight (hi, PASSES 3 lo), then its window
    const int buffer_bytes = weight_bytes + CT_SLICE * raw_row * 4;

    for (int co = tid; co < COLS; co += CT_THREADS) {
        const int m = co_tile * COLS + co;
        bias_tile[co] = bias != nullptr && m < rows ? bias[group * out_channels + (m >> fold_shift)] : 0.0f;
    }

    // This thread's weight copies: chunk kc = tid % 4 of rows tid / 4 + 64 h (h < H) of every (pass, tap)
    // tile.  Rows 64 apart are 64 >> fold_shift channels apart with the same sub-phase, so every copy is
    // one offset plus multiples of constants; `valid` bit H t + h: the row exists and its tap is inside
    // the kernel.
    const int kc = tid % 4, row_a = tid / 4;
    int weight_offset;  // (the host keeps PASSES x the packed weight in 32 bits)
    unsigned valid = 0;
    {
        const int m = co_tile * COLS + row_a;
        const int r = m & ((1 << fold_shift) - 1);
        weight_offset = ((group * kernel_w + tap_first + r) * out_channels + (m >> fold_shift)) * channels_padded + kc * 4;
#pragma unroll
        for (int t = 0; t < TAPS; ++t)
#pragma unroll
            for (int h = 0; h < H; ++h)
                if (m + 64 * h < rows && tap_first + r + t * tap_step < kernel_w) valid |= 1u << (H * t + h);
    }
    const int tap_stride = tap_step * out_channels * channels_padded;
    const int half_stride = (64 >> fold_shift) * channels_padded;
    const unsigned weight_dst = row_a / 8 * 512 + row_a % 8 * 64 + ((kc ^ (row_a >> 1 & 3)) * 16);  // its line in its atom, chunk kc swizzled

    const CtWindowCopies copies(tid, window_vectors, src_w);
    // Stage s's window and weight into buffer s % CS_BUFFERS (the caller commits).
    auto load = [&](const ConvTf32Stage& at, int s) {
        unsigned char* const buffer = buffers + (s % CS_BUFFERS) * buffer_bytes;
        const int ci0 = at.slice * CT_SLICE;
        const bool chunk_in = ci0 + kc * 4 < channels_padded;
#pragma unroll
        for (int p = 0; p < PASSES; p += 2)  // passes 0 and (PASSES 3) 2: hi and lo
#pragma unroll
            for (int t = 0; t < TAPS; ++t)
#pragma unroll
                for (int h = 0; h < H; ++h) {
                    const bool in = chunk_in && (valid >> (H * t + h) & 1);
                    const float* const src = weight + (weight_offset + (p ? split_offset : 0) + t * tap_stride + h * half_stride + ci0);
                    cp_async16(buffer + ((p / 2) * TAPS + t) * TILE + h * 64 * CS_LINE + weight_dst, in ? src : weight, in);
                }
        copies.load<Index>(buffer + weight_bytes, source, at.n * groups + group, channels, ci0, in_base + at.c0 + lo_offset, src_w,
                           window_vectors, raw_row);
    };
    auto prepare = [&](const ConvTf32Stage& at, int s) {
        copies.prepare(buffers + (s % CS_BUFFERS) * buffer_bytes + weight_bytes, (at.n * groups + group) * channels + at.slice * CT_SLICE,
                       in_base + at.c0 + lo_offset, src_w, raw_row);
    };
    const int fragment_column = 64 * warpgroup + 16 * w + g;
    int mis = 0;  // this thread's fragment rows' misalignment in the item (slices start at multiples of 4 channels)
    // Stage `at` (number s)'s fragments into `f`.
    auto fragments = [&](CsFragments<TAPS, PASSES>& f, const ConvTf32Stage& at, int s) {
        const int lo = in_base + at.c0 + lo_offset;
        if (at.slice == 0) mis = ct_misalignment((at.n * groups + group) * channels + t4, src_w, lo);
        const float* const window =
            reinterpret_cast<const float*>(buffers + (s % CS_BUFFERS) * buffer_bytes + weight_bytes) + t4 * raw_row + fragment_column + mis;
#pragma unroll
        for (int t = 0; t < TAPS; ++t) {
            const float* const tap = window + t * tap_in_step - lo_offset;
#pragma unroll
            for (int k = 0; k < CT_KSTEPS; ++k) {
                const float* const src = tap + 8 * k * raw_row;
                const float v[4] = {src[0], src[8], src[4 * raw_row], src[4 * raw_row + 8]};
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    f.hi[t][k][e] = to_tf32(v[e]);
                    if constexpr (PASSES == 3) f.lo[t][k][e] = to_tf32(v[e] - __uint_as_float(f.hi[t][k][e]));
                }
            }
        }
    };

    float acc[COLS / 2];
#pragma unroll
    for (int i = 0; i < COLS / 2; ++i) acc[i] = 0.0f;
    float part[PASSES == 3 ? COLS / 2 : 1];
    CsFragments<TAPS, PASSES> frag[2];

    ConvTf32Stage produce, consume;
    produce.start(share, col_tiles, 0);
    consume = produce;
#pragma unroll
    for (int s = 0; s < CS_AHEAD; ++s) {
        if (s < stages) load(produce, s);
        cp_async_commit();
        produce.advance(slices, per_combo, col_tiles, 0);
    }
    const unsigned buffer_address = shared_address(buffers);
    // Stage 0's copies, its fragments.
    cp_async_wait_group<CS_AHEAD - 1>();
    if (stages > 0) prepare(consume, 0);
    fence_proxy_async();
    __syncthreads();  // (and the bias tile)
    if (CS_AHEAD < stages) load(produce, CS_AHEAD);
    cp_async_commit();
    produce.advance(slices, per_combo, col_tiles, 0);
    if (stages > 0) fragments(frag[0], consume, 0);

    // Stage s, whose fragments are in `f` and the next stage's go to `next` (named by the caller: registers).
    auto stage = [&](CsFragments<TAPS, PASSES>& f, CsFragments<TAPS, PASSES>& next, int s) {
        const unsigned weight_address = buffer_address + (s % CS_BUFFERS) * buffer_bytes;
        wgmma_fence();
#pragma unroll
        for (int t = 0; t < TAPS; ++t)
#pragma unroll
            for (int k = 0; k < CT_KSTEPS; ++k) {
                const unsigned long long hi_b = wgmma_descriptor_swizzle64(weight_address + t * TILE + k * 32, 512);
                if constexpr (PASSES == 1) {
                    cs_wgmma<COLS>(acc, f.hi[t][k], hi_b, consume.slice > 0 || t > 0 || k > 0);
                } else {
                    const unsigned long long lo_b = wgmma_descriptor_swizzle64(weight_address + (TAPS + t) * TILE + k * 32, 512);
                    cs_wgmma<COLS>(part, f.lo[t][k], hi_b, t > 0 || k > 0);
                    cs_wgmma<COLS>(part, f.hi[t][k], lo_b, 1);
                    cs_wgmma<COLS>(part, f.hi[t][k], hi_b, 1);
                }
            }
        wgmma_commit();
        if constexpr (PASSES == 1) wgmma_wait<1>();  // stage s - 1's MMAs (its buffer, `next`'s registers)

        ConvTf32Stage upcoming = consume;
        upcoming.advance(slices, per_combo, col_tiles, 0);
        if (s + 1 < stages) {
            cp_async_wait_group<CS_AHEAD - 1>();  // stage s + 1's copies (later ones may not be here)
            prepare(upcoming, s + 1);
            fence_proxy_async();  // (its weight, written by cp.async, read by the tensor cores)
        }
        __syncthreads();  // stage s + 1 ready for every thread; stage s - 1's buffer free
        if (s + 1 + CS_AHEAD < stages) load(produce, s + 1 + CS_AHEAD);
        cp_async_commit();
        produce.advance(slices, per_combo, col_tiles, 0);
        if (s + 1 < stages) fragments(next, upcoming, s + 1);

        const bool item_end = consume.slice == slices - 1;
        if constexpr (PASSES == 3) {
            wgmma_wait<0>();
            pin(part);
#pragma unroll
            for (int i = 0; i < COLS / 2; ++i) acc[i] += part[i];
        }
        if (item_end) {
            if constexpr (PASSES == 1) {
                wgmma_wait<0>();
                pin(acc);
            }
            const Index out_row0 = (static_cast<Index>(consume.n) * groups + group) * out_channels;
            ct_store_fold_pairs<Index, COLS>(acc, bias_tile, out, out_row0, co_tile, rows, fold_shift, consume.c0 + fragment_column, count,
                                             out_base, out_step, out_w, t4);
            if constexpr (PASSES == 3) {
#pragma unroll
                for (int i = 0; i < COLS / 2; ++i) acc[i] = 0.0f;
            }
        }
        consume = upcoming;
    };
    // In pairs, so that each stage's fragment registers are fixed (registers, not local memory).
    int s = 0;
    for (; s + 1 < stages; s += 2) {
        stage(frag[0], frag[1], s);
        stage(frag[1], frag[0], s + 1);
    }
    if (s < stages) stage(frag[0], frag[1], s);
    wgmma_wait<0>();
    cp_async_wait_all();
#endif
}

// conv_tf32_multicast: conv_tf32_stream's TF32 GEMM (PASSES 1, 2 taps a
// sub-phase) for folds of 4 to 32, in clusters of two blocks that share the
// weight, its copies by TMA from a producer warpgroup (X2 "tf32": perf notes
// v47).  conv_tf32_stream's blocks each copied a stage's window and its 32 KB
// of weight by cp.async (about 300 instructions a warp a stage beside 8 MMAs,
// v39) and read the weight from L2 once per item and block.
//
// Work: units (pair of items, combo), pair-major, dealt to the clusters in
// turn (cluster c takes units c, c + clusters, ...); block `rank` of a
// cluster takes item 2 pair + rank (a pair's second item past the last: the
// block runs the first's window and stores nothing), both blocks the same
// combo (group, co_tile) and the same slices in the same order, so each
// stage's weight serves both: each block's producer loads half of each tap's
// tile and multicasts it into both.  At any time the clusters work on a few
// neighbouring pairs, each pair's window read from DRAM once and from L2 by
// the clusters of its other combos (ranges of consecutive units a cluster
// read each window 16 times over 16 units, from DRAM mostly: X2's DRAM
// reads 1.07 GB against 216 MB dealt, perf notes v47); every other step
// walks the slices backwards, so the slices read last are read again first.
//
// A stage (CM_STAGES buffers, 1024-byte aligned): per tap a weight tile of
// CM_COLS rows x 16 channels (64-byte rows, 64-byte swizzle: TMA's
// SWIZZLE_64B is wgmma_descriptor_swizzle64's atom), then the window,
// 16 channel rows of raw_row floats from position lo rounded down to a
// multiple of 4 (TMA, no swizzle; zeros outside the source).  A box's first
// position must be 16-byte aligned: -1, X2's, raised an illegal instruction
// (perf notes v47); the fragment loads skip the (lo % 4) floats before.
// The weight's tensor map is 4D over the packed weight (channels_padded,
// out_channels, kernel_w, groups), box (16, CO_PER, FOLD / 2, 1): half h is
// sub-phases FOLD / 2 h.. of the tile's CO_PER channels, so tile row n is
// (sub-phase n / CO_PER, channel n % CO_PER) -- the order the stores want:
// each thread's accumulators hold all FOLD sub-phases of its (channel,
// column), consecutive outputs.  Channels and taps past the weight's load
// as zeros.  After the buffers: the barriers, then (at 128) each consumer
// warp's 4 staging rows of CM_ROW floats (a fold of 8's stores).
//
// Barriers: `full` (the producer's arrival and the stage's bytes: both
// halves of the weight, the window) and `empty` (every consumer warp of both
// blocks: the other block's producer writes into this block's buffers too).
// A consumer warpgroup per stage: wait for `full`, its window fragments
// (conv_tf32_stream's loads, rounded to TF32), 2 taps x 2 k-steps of
// wgmma.m64n256k8, commit, wait for the previous stage's MMAs and release
// its buffer.  At an item's last slice the sums plus the bias go out: a
// fold of 8 through the warp's staging rows, 512 contiguous bytes a store;
// other folds by each thread's 16-byte stores.
//
// Requirements checked by the host: compute capability 9.0, a source whose
// rows are whole 16-byte vectors (the tensor map's strides), one group or
// channels a multiple of 16 (the window box reads no other group's
// channels), the packed weight of pack_window_weight rounded to TF32.
constexpr int CM_STAGES = 5;
constexpr int CM_COLS = 256;
constexpr int CM_TAPS = 2;
constexpr int CM_TILE = CM_COLS * CS_LINE;  // a tap's weight tile, 16 KB
constexpr int CM_CONSUMERS = CT_THREADS;    // two consumer warpgroups; a block: CM_CONSUMERS + 128 with the producer
constexpr int CM_ROW = 132;                 // a consumer warp's staged output row (fold 8: 16 columns x 8 floats, and 4 apart)

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Four outputs from row[o] on, where `ok`: one 16-byte store where aligned and
// inside the row, single ones (inside it) otherwise.
__device__ __forceinline__ void cm_store4(float* row, int o, const float (&v)[4], bool ok, int out_w) {
    if (!ok) return;
    if (o >= 0 && o + 3 < out_w && (reinterpret_cast<size_t>(row + o) & 15) == 0) {
        *reinterpret_cast<float4*>(row + o) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
#pragma unroll
        for (int i = 0; i < 4; ++i)
            if (o + i >= 0 && o + i < out_w) row[o + i] = v[i];
    }
}

// Where the cluster's work is: unit u = (pair, combo), and this block's item.
struct CmUnit {
    int group, co_tile, n, c0;
    bool stores;  // the item exists (a pair's second past the last does not)
    __device__ __forceinline__ void at(int u, int combos, int co_tiles, int items, int col_tiles, int rank) {
        const int pair = u / combos, combo = u - pair * combos;
        group = combo / co_tiles, co_tile = combo - group * co_tiles;
        const int item = 2 * pair + rank;
        stores = item < items;
        const int it = stores ? item : item - 1;
        n = it / col_tiles, c0 = (it - n * col_tiles) * CT_POSITIONS;
    }
};
#endif

template <typename Index, int FOLD>
__global__ void CM_CLUSTER_DIMS __launch_bounds__(CM_CONSUMERS + 128, 1) conv_tf32_multicast(
    const float* __restrict__ source,  // (batch, groups * channels, src_w): read through source_map
    const float* __restrict__ weight,  // (groups, kernel_w, out_channels, channels_padded), TF32-rounded: read through weight_map
    const float* __restrict__ bias,    // (groups * out_channels) or null
    float* __restrict__ out,           // (batch, groups * out_channels, out_w)
    const __grid_constant__ CmMap source_map, const __grid_constant__ CmMap weight_map,
    int batch, int groups, int channels, int out_channels, int out_w, int count, int out_base, int in_base, int tap_in_step,
    int raw_row, int co_tiles, int tap_first, int tap_step, int out_step) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(FOLD >= 4 && FOLD <= 32 && (FOLD & (FOLD - 1)) == 0, "a fold of 4 to 32");
    constexpr int CO_PER = CM_COLS / FOLD;  // output channels a tile
    constexpr int J = CO_PER / 8;           // 8-column groups of one sub-phase
    extern __shared__ __align__(1024) unsigned char smem[];
    const int window_bytes = CT_SLICE * raw_row * 4;
    const int stage_bytes = (CM_TAPS * CM_TILE + window_bytes + 1023) & ~1023;
    const unsigned base = shared_address(smem);
    const unsigned barriers = base + CM_STAGES * stage_bytes;  // full, then empty, a stage
    const int rank = static_cast<int>(blockIdx.x & 1);
    const int tid = threadIdx.x;
    const int col_tiles = max(1, (count + CT_POSITIONS - 1) / CT_POSITIONS);
    const int items = count > 0 ? batch * col_tiles : 0;
    const int combos = groups * co_tiles;
    const int units = (items + 1) / 2 * combos;
    const int slices = (channels + CT_SLICE - 1) / CT_SLICE;
    const int clusters = gridDim.x / 2, cluster = blockIdx.x / 2;
    const int lo_offset = min(0, (CM_TAPS - 1) * tap_in_step);  // an item's window starts at in_base + c0 + lo_offset

    cm_make_barriers(barriers, CM_STAGES, CM_CONSUMERS / 32);

    CmUnit unit;
    if (tid >= CM_CONSUMERS) {  // the producer warpgroup: one thread issues the copies
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (tid == CM_CONSUMERS) {
            int seq = 0;
            for (int u = cluster; u < units; u += clusters) {
                unit.at(u, combos, co_tiles, items, col_tiles, rank);
                const int lo = (in_base + unit.c0 + lo_offset) & ~3;  // (a box's first position is 16-byte aligned)
                for (int i = 0; i < slices; ++i, ++seq) {
                    // every other step backwards: the slices read last are read again first, while they are in L2
                    const int slice = ((u / clusters) & 1) ? slices - 1 - i : i;
                    const int s = seq % CM_STAGES;
                    const unsigned full = barriers + 8 * s, stage = base + s * stage_bytes;
                    if (seq >= CM_STAGES) mbarrier_wait(full + 8 * CM_STAGES, (seq / CM_STAGES - 1) & 1);
                    mbarrier_expect_tx(full, CM_TAPS * CM_TILE + window_bytes);  // both halves of the weight land here
                    mbarrier_arrive(full);
#pragma unroll
                    for (int t = 0; t < CM_TAPS; ++t)
                        cm_load_4d_multicast(stage + t * CM_TILE + rank * (CM_TILE / 2), &weight_map, slice * CT_SLICE, unit.co_tile * CO_PER,
                                             tap_first + t * tap_step + rank * (FOLD / 2), unit.group, full);
                    cm_load_3d(stage + CM_TAPS * CM_TILE, &source_map, lo, unit.group * channels + slice * CT_SLICE, unit.n, full);
                }
            }
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
        const int warpgroup = tid / 128, lane = tid % 32, w = (tid / 32) % 4;
        const int g = lane / 4, t4 = lane % 4;
        const int fragment_column = 64 * warpgroup + 16 * w + g + ((in_base + lo_offset) & 3);  // (every item's window: c0 is a multiple of 4)
        float acc[CM_COLS / 2];
        unsigned frag[2][CM_TAPS][CT_KSTEPS][4];
        int seq = 0;
        // Stage `seq` (slice `slice` of the unit) with fragment registers `f`.
        auto stage = [&](unsigned (&f)[CM_TAPS][CT_KSTEPS][4], int slice) {
            const int s = seq % CM_STAGES;
            const unsigned stage_address = base + s * stage_bytes;
            mbarrier_wait(barriers + 8 * s, (seq / CM_STAGES) & 1);
            const float* const window = reinterpret_cast<const float*>(smem + s * stage_bytes + CM_TAPS * CM_TILE) + t4 * raw_row + fragment_column;
#pragma unroll
            for (int t = 0; t < CM_TAPS; ++t) {
                const float* const tap = window + t * tap_in_step - lo_offset;
#pragma unroll
                for (int k = 0; k < CT_KSTEPS; ++k) {
                    const float* const src = tap + 8 * k * raw_row;
                    f[t][k][0] = to_tf32(src[0]);
                    f[t][k][1] = to_tf32(src[8]);
                    f[t][k][2] = to_tf32(src[4 * raw_row]);
                    f[t][k][3] = to_tf32(src[4 * raw_row + 8]);
                }
            }
            wgmma_fence();
#pragma unroll
            for (int t = 0; t < CM_TAPS; ++t)
#pragma unroll
                for (int k = 0; k < CT_KSTEPS; ++k)
                    wgmma_m64n256k8_tf32_rs(acc, f[t][k], wgmma_descriptor_swizzle64(stage_address + t * CM_TILE + k * 32, 512),
                                            slice > 0 || t > 0 || k > 0);
            wgmma_commit();
            wgmma_wait<1>();  // stage seq - 1's MMAs: its buffer is free
            if (seq > 0) cluster_release(barriers + 8 * (CM_STAGES + (seq - 1) % CM_STAGES), rank ^ 1, lane == 0);
            ++seq;
        };
        for (int u = cluster; u < units; u += clusters) {
            unit.at(u, combos, co_tiles, items, col_tiles, rank);
            int slice = 0;
            for (; slice + 1 < slices; slice += 2) {
                stage(frag[0], slice);
                stage(frag[1], slice + 1);
            }
            if (slice < slices) stage(frag[0], slice);
            wgmma_wait<0>();
            pin(acc);
            if (!unit.stores) continue;
            // Accumulator 4 (jj + J r) + 2 h + e: column c0 + 64 warpgroup + 16 w + g + 8 h, channel 8 jj + 2 t4 + e of the tile,
            // sub-phase r: a thread holds a column's FOLD consecutive outputs of a channel.
            const Index out_row0 = (static_cast<Index>(unit.n) * groups + unit.group) * out_channels;
            if constexpr (FOLD == 8) {
                // Through this warp's staging rows: its 16 columns' 128 outputs of a channel are contiguous in the
                // output, so lane L stores floats 4 L.. of a row: 512 contiguous bytes a store, whole sectors (a
                // thread's own 16-byte stores covered half sectors: X2's padding puts a column's 8 outputs across two).
                float* const staged = reinterpret_cast<float*>(smem + CM_STAGES * stage_bytes + 128) + (tid / 32) * 4 * CM_ROW;
                const int c_first = unit.c0 + 64 * warpgroup + 16 * w, c_lane = c_first + lane / 2;
#pragma unroll
                for (int jj = 0; jj < J; ++jj)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int co_mine = unit.co_tile * CO_PER + 8 * jj + 2 * t4 + e;
                        const float b = bias != nullptr && co_mine < out_channels ? bias[unit.group * out_channels + co_mine] : 0.0f;
#pragma unroll
                        for (int h = 0; h < 2; ++h)
#pragma unroll
                            for (int q = 0; q < 2; ++q)
                                *reinterpret_cast<float4*>(staged + t4 * CM_ROW + (g + 8 * h) * 8 + 4 * q) =
                                    make_float4(acc[4 * (jj + J * (4 * q)) + 2 * h + e] + b, acc[4 * (jj + J * (4 * q + 1)) + 2 * h + e] + b,
                                                acc[4 * (jj + J * (4 * q + 2)) + 2 * h + e] + b, acc[4 * (jj + J * (4 * q + 3)) + 2 * h + e] + b);
                        __syncwarp();
#pragma unroll
                        for (int i = 0; i < 4; ++i) {  // row i: channel 8 jj + 2 i + e
                            const int co = unit.co_tile * CO_PER + 8 * jj + 2 * i + e;
                            const float4 f = *reinterpret_cast<const float4*>(staged + i * CM_ROW + 4 * lane);
                            const float v[4] = {f.x, f.y, f.z, f.w};
                            cm_store4(out + (out_row0 + (co < out_channels ? co : 0)) * static_cast<Index>(out_w),
                                      out_base + c_lane * out_step + 4 * (lane & 1), v, co < out_channels && c_lane < count, out_w);
                        }
                        __syncwarp();
                    }
                continue;
            }
#pragma unroll
            for (int jj = 0; jj < J; ++jj)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int co = unit.co_tile * CO_PER + 8 * jj + 2 * t4 + e;
                    if (co >= out_channels) continue;
                    const float b = bias != nullptr ? bias[unit.group * out_channels + co] : 0.0f;
                    float* const row = out + (out_row0 + co) * static_cast<Index>(out_w);
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int c = unit.c0 + 64 * warpgroup + 16 * w + g + 8 * h;
#pragma unroll
                        for (int r4 = 0; r4 < FOLD; r4 += 4) {
                            float v[4];
#pragma unroll
                            for (int i = 0; i < 4; ++i) v[i] = acc[4 * (jj + J * (r4 + i)) + 2 * h + e] + b;
                            cm_store4(row, out_base + c * out_step + r4, v, c < count, out_w);
                        }
                    }
                }
        }
    }
    cluster_sync();  // the other block's copies into and arrivals on this block's shared memory are done
#endif
}
