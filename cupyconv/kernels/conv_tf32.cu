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
//     rounds its own copies to TF32 in place (and zeros the previous row's
//     floats in a vector that straddles the row start);
//   * the bias of the tile's channels (zeros without one).
// A stage is one CT_SLICE-channel slice of an item: per warpgroup, 2 k-steps
// x TAPS wgmma.m64n128k8 (A: 4 LDS.32 a k-step, from column 64 warpgroup +
// 16 warp + g (+ 8) + mis + tap offset, rows t4 (+ 4)); the first of an
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

    // This thread's window copy tasks, the same every stage: vector u of slice row k, u * 4 + k * src_w
    // floats from the slice's first row's window start (the host keeps CT_SLICE * src_w in 32 bits).
    int task_row[CT_MAX_TASKS], task_vector[CT_MAX_TASKS], task_offset[CT_MAX_TASKS];
#pragma unroll
    for (int i = 0; i < CT_MAX_TASKS; ++i) {
        const int task = tid + i * CT_THREADS;
        task_row[i] = task < CT_SLICE * window_vectors ? task / window_vectors : -1;
        task_vector[i] = task % window_vectors;
        task_offset[i] = task_row[i] * src_w + 4 * task_vector[i];
    }

    // Stage s's window into raw buffer s % CT_BUFFERS (the caller commits).  Row k's window starts at
    // global float row * src_w + lo, misaligned by mis = that % 4: its vectors are read from there - mis.
    auto load = [&](const ConvTf32Stage& at, int s) {
        unsigned char* const raw = raw_base + (s % CT_BUFFERS) * raw_bytes;
        const int lo = in_base + at.c0 + lo_offset;
        const int ci0 = at.slice * CT_SLICE;
        const Index base = (static_cast<Index>(at.n * groups + group) * channels + ci0) * src_w + lo;
        // every vector of every row inside its row (p0 >= lo - 3 >= 0, p0 + 4 <= lo + 4 window_vectors)
        const bool inside = lo >= 3 && lo + 4 * window_vectors <= src_w && ci0 + CT_SLICE <= channels;
#pragma unroll
        for (int i = 0; i < CT_MAX_TASKS; ++i) {
            if (task_row[i] < 0) continue;
            const Index at_vector = base + task_offset[i];
            const int mis = static_cast<int>(at_vector) & 3;
            const float* const src = source + (at_vector - mis);
            unsigned char* const dst = raw + task_row[i] * raw_row * 4 + task_vector[i] * 16;
            if (inside) {
                cp_async16(dst, src, true);
            } else {
                // floats of the row read: none outside it; a vector past its end reads what is inside and
                // zeros the rest; one over its start reads the previous row's floats, zeroed by prepare
                const int p0 = lo - mis + 4 * task_vector[i];  // the vector's first position in its row
                const int inside_floats = ci0 + task_row[i] < channels ? max(0, min(4, src_w - p0)) : 0;
                const int bytes = p0 + 4 > 0 ? 4 * inside_floats : 0;
                cp_async16_partial(dst, bytes ? src : source, bytes);
            }
        }
    };
    // Once this thread's copies of stage s are here: rounded to TF32 in place, the floats before the row's start zeroed.
    auto prepare = [&](const ConvTf32Stage& at, int s) {
        unsigned char* const raw = raw_base + (s % CT_BUFFERS) * raw_bytes;
        const int lo = in_base + at.c0 + lo_offset;
        const int row0 = (at.n * groups + group) * channels + at.slice * CT_SLICE;
#pragma unroll
        for (int i = 0; i < CT_MAX_TASKS; ++i) {
            if (task_row[i] < 0) continue;
            float4* const dst = reinterpret_cast<float4*>(raw + task_row[i] * raw_row * 4 + task_vector[i] * 16);
            float4 v = *dst;
            // the vector's first position (lo >= 3: none before the row's start)
            const int p0 = lo >= 3 ? 0 : lo - ct_misalignment(row0 + task_row[i], src_w, lo) + 4 * task_vector[i];
            v.x = p0 >= 0 ? __uint_as_float(to_tf32(v.x)) : 0.0f;
            v.y = p0 + 1 >= 0 ? __uint_as_float(to_tf32(v.y)) : 0.0f;
            v.z = p0 + 2 >= 0 ? __uint_as_float(to_tf32(v.z)) : 0.0f;
            v.w = __uint_as_float(to_tf32(v.w));  // p0 + 3 >= 0: a vector wholly before the row was not read (zeros)
            *dst = v;
        }
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
                a[t][k][0] = __float_as_uint(src[0]);
                a[t][k][1] = __float_as_uint(src[8]);
                a[t][k][2] = __float_as_uint(src[4 * raw_row]);
                a[t][k][3] = __float_as_uint(src[4 * raw_row + 8]);
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
                    // columns m and m + 1 (m even) are sub-phases r and r + 1 of one channel: outputs o and o + 1
#pragma unroll
                    for (int j = 0; j < 16; ++j) {
                        const int co = 8 * j + 2 * t4, m = co_tile * CT_ROWS + co;
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
