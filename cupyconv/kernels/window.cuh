// Shared by the 1D window kernels (conv_window.cu, conv_wgmma.cu): the
// window's alignment and the epilogue, where a BM x BN tile of float sums,
// staged in shared memory, goes out with the bias added.
#pragma once
#include "common.cuh"

__device__ __forceinline__ int floor_to(int v, int step) {  // largest multiple of step <= v (step > 0)
    return v >= 0 ? v / step * step : -((-v + step - 1) / step) * step;
}

// A window kernel's block: its phase record, row tile, image, group and
// first column q0, decoded from blockIdx.x (phase fastest, then row tile,
// column tile, image, group), and its window: the first input position any
// column and tap reads, aligned down to `vec` elements (16 bytes), and the
// offset of that position in it.  The block has no work where q0 >= q_end
// (a phase with fewer columns than the largest; a row tile that needs fewer
// columns than others).
//
// Columns of a row tile: where the fold has at least `bm` rows per output
// channel, a row tile is the sub-phases r0 .. r0 + bm - 1 of one channel,
// and column q of sub-phase r writes o = out_base + q * out_step + r.  Its
// column tiles then start at the first column any of those rows writes
// inside the output and stop after the last (_kernels.window_column_range,
// which sizes the grid): X3's 513 columns are 512 for each of its row tiles,
// 4 tiles of 128, not 5.
struct WindowBlock {
    AxisPhase p;
    int m_tile, n, group, q0, q_end, window_first, head;
};
__device__ __forceinline__ WindowBlock window_block(const int* __restrict__ phases, int num_phases, int m_tiles, int col_tiles,
                                                    int batch, int bm, int bn, int vec, int fold_shift, int out_w) {
    WindowBlock b;
    unsigned block = blockIdx.x;
    const int phase = block % num_phases;
    block /= num_phases;
    b.m_tile = block % m_tiles;
    block /= m_tiles;
    const int col_tile = block % col_tiles;
    block /= col_tiles;
    b.n = block % batch;
    b.group = block / batch;
    b.p = load_axis_phase(phases, phase);
    int q_first = 0;
    b.q_end = b.p.count;
    if (fold_shift > 0 && bm <= (1 << fold_shift)) {
        const int r0 = (b.m_tile * bm) & ((1 << fold_shift) - 1);
        q_first = max(0, -floor_div(b.p.out_base + r0 + bm - 1, b.p.out_step));  // ceil((-out_base - r_last) / out_step)
        b.q_end = min(b.q_end, floor_div(out_w - 1 - b.p.out_base - r0, b.p.out_step) + 1);
    }
    b.q0 = q_first + col_tile * bn;
    const int taps = b.p.tap_count;
    const int tap_span = taps > 0 ? (taps - 1) * abs(b.p.tap_in_step) : 0;
    const int lo = b.p.in_base + b.q0 - (b.p.tap_in_step < 0 ? tap_span : 0);  // in_step is 1 (host)
    b.window_first = floor_to(lo, vec);
    b.head = lo - b.window_first;
    return b;
}

// Rows of the staged tile: BN + 8 floats (float2 fragment writes of 8 rows x
// 4 pairs per wavefront hit distinct banks).
template <int BN>
__host__ __device__ constexpr int window_stage_row() { return BN + 8; }

// The staged tile is row-major; where the fold has 32 rows or more per output
// channel (X3: 256), its columns are XOR-swizzled by bits 2-4 of the row, so
// that store_window_tile's warps, reading 32 consecutive rows of VEC columns
// (one run of VEC consecutive outputs a lane, 128 contiguous bytes a column
// in float), hit distinct banks.  Float pairs at even columns stay pairs.
// Writers and store_window_tile take the same mask from the fold.
__device__ __forceinline__ int stage_swizzle(int fold_shift) { return fold_shift >= 5 ? 28 : 0; }
__device__ __forceinline__ int stage_at(int row, int col, int row_stride, int swizzle) {
    return row * row_stride + (col ^ (row & swizzle));
}

// From the staged tile (rows of BN + 8 floats) to the output: runs of
// VEC consecutive outputs per thread: along q for one row when the tile
// does not fold (out_step 1), along the sub-phases r of one output channel
// when it folds by VEC or more, along o (VEC / fold columns of every
// sub-phase) when it folds by less and FOLD_RUNS; one 16- or 8-byte store
// where the run is whole and aligned, else element by element.  Consecutive
// threads take consecutive runs of one row (fold 1, fold below VEC) or
// consecutive columns (fold VEC or more; with a fold of 32 or more and
// DEEP_RUNS, a warp takes 32 rows of VEC columns from the swizzled stage,
// stage_at; conv_wgmma_resident, which no deep fold is routed to, keeps the
// columns: the deep runs made its two-block builds spill).
// FILL (conv_window's fill builds; conv_wgmma.cu's fill describes the
// problem): the tile's rows are output channels, its column q the outputs 2q
// and 2q + 1, of which p.out_base holds the sum and the other the bias; they
// go out as the fold-by-2 runs below.
template <typename T, typename Index, int BM, int BN, int THREADS, bool FOLD_RUNS = true, bool FILL = false, bool DEEP_RUNS = true>
__device__ __forceinline__ void store_window_tile(
    const float* __restrict__ stage, const AxisPhase& p, const T* __restrict__ bias, T* __restrict__ out,
    int n, int groups, int group, int out_channels, int out_w, int m_tile, int q0, int fold_shift) {
    constexpr int VEC = 16 / sizeof(T);
    constexpr int SROW = window_stage_row<BN>();
    const int tid = threadIdx.x;
    const int fold = 1 << fold_shift;
    const int rows = out_channels << fold_shift;
    const Index out_image = (static_cast<Index>(n) * groups + group) * out_channels;
    if constexpr (FILL) {
        // Runs of VEC consecutive outputs aligned to 16 bytes in memory, as
        // for a fold below VEC: output first + j is column j / 2; an output
        // inside the row exists as a sum only where its column does.
        constexpr int SPAN = 2 * BN;
        constexpr int RUNS = SPAN / VEC + 1;
        const int first = 2 * q0;
        for (int idx = tid; idx < BM * RUNS; idx += THREADS) {
            const int co_l = idx / RUNS, run = idx % RUNS;
            const int co = m_tile * BM + co_l;
            if (co >= out_channels) continue;
            T* const row_first = out + (out_image + co) * out_w + first;
            const int lead = static_cast<int>(reinterpret_cast<unsigned long long>(row_first) / sizeof(T) % VEC);
            const int j0 = run * VEC - lead;  // the run's first element, as a tile output (may be < 0)
            const float b = bias != nullptr ? ValueTraits<T>::to_acc(bias[group * out_channels + co]) : 0.0f;
            const bool whole = j0 >= 0 && j0 + VEC <= SPAN && first + j0 + VEC <= out_w;
            union {
                T value[VEC];
                uint4 whole;
            } packed;
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
                const int j = j0 + e;
                const bool inside = j >= 0 && j < SPAN;
                packed.value[e] = ValueTraits<T>::from_acc((inside && (j & 1) == p.out_base ? stage[co_l * SROW + (j >> 1)] : 0.0f) + b);
                if (!whole && inside && first + j < out_w) row_first[j] = packed.value[e];
            }
            if (whole) store_global16(row_first + j0, packed.whole);
        }
        return;
    }
    const bool along_r = fold >= VEC;
    if (FOLD_RUNS && fold > 1 && !along_r) {
        // A fold below VEC: an output channel's tile outputs are the
        // consecutive o = first + j, first = out_base + q0 * fold (tile
        // column j / fold, sub-phase j % fold, j < BN * fold).  Runs of VEC
        // of them aligned to 16 bytes in memory (BN * fold / VEC + 1 per
        // channel, the first and last cut by the tile's edges where `first`
        // is not aligned): one 16-byte store where whole, else element by
        // element.  Consecutive threads take consecutive runs.
        const int span = BN << fold_shift;
        const int runs = span / VEC + 1;
        const int first = p.out_base + q0 * fold;
        for (int idx = tid; idx < (BM >> fold_shift) * runs; idx += THREADS) {
            const int co_l = idx / runs, run = idx % runs;
            const int co = (m_tile * BM >> fold_shift) + co_l;
            if (co >= out_channels) continue;
            T* const row_first = out + (out_image + co) * out_w + first;
            const int lead = static_cast<int>(reinterpret_cast<unsigned long long>(row_first) / sizeof(T) % VEC);
            const int j0 = run * VEC - lead;  // the run's first element, as a tile output (may be < 0)
            const int o0 = first + j0;
            const float b = bias != nullptr ? ValueTraits<T>::to_acc(bias[group * out_channels + co]) : 0.0f;
            const bool whole = j0 >= 0 && j0 + VEC <= span && o0 >= 0 && o0 + VEC <= out_w && q0 + ((j0 + VEC - 1) >> fold_shift) < p.count;
            union {
                T value[VEC];
                uint4 whole;
            } packed;
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
                const int j = j0 + e, col = j >> fold_shift, r = j & (fold - 1);
                const bool inside = j >= 0 && j < span;
                packed.value[e] = ValueTraits<T>::from_acc((inside ? stage[((co_l << fold_shift) + r) * SROW + col] : 0.0f) + b);
                if (!whole && inside && q0 + col < p.count && o0 + e >= 0 && o0 + e < out_w) row_first[j] = packed.value[e];
            }
            if (whole) store_global16(row_first + j0, packed.whole);
        }
        return;
    }
    if (!along_r && !(fold == 1 && p.out_step == 1)) {
        // No runs (a phase of stride s; a fold below VEC without FOLD_RUNS):
        // one element per thread, consecutive threads on consecutive columns
        // of a row.
        for (int idx = tid; idx < BM * BN; idx += THREADS) {
            const int row = idx / BN, col = idx % BN;
            const int m = m_tile * BM + row, q = q0 + col;
            if (m >= rows || q >= p.count) continue;
            const int co = m >> fold_shift, r = m & (fold - 1);
            const int o = p.out_base + q * p.out_step + r;
            if (o < 0 || o >= out_w) continue;
            const float b = bias != nullptr ? ValueTraits<T>::to_acc(bias[group * out_channels + co]) : 0.0f;
            out[(out_image + co) * out_w + o] = ValueTraits<T>::from_acc(stage[row * SROW + col] + b);
        }
        return;
    }
    // Runs along r: with a fold of 32 rows or more (the swizzled stage), a
    // warp takes 32 consecutive rows (one output channel's sub-phases) of VEC
    // columns, its lanes down the rows first, so that each column's 32
    // outputs go out as one contiguous piece (128 bytes in float); below, a
    // warp's lanes take consecutive columns (the outputs of a fold under 32
    // interleave more closely along q).
    const int swizzle = DEEP_RUNS ? stage_swizzle(fold_shift) : 0;
    static_assert(BM % 32 == 0, "a deep fold's warps take 32 rows");
    for (int run = tid; run < BM * BN / VEC; run += THREADS) {
        int row, col;  // the run's first element in the tile
        if (along_r && swizzle) {
            constexpr int DOWN = 32 / VEC;  // lanes down the rows of a column
            const int lane = run % 32, unit = run / 32;
            row = unit / (BN / VEC) * 32 + lane % DOWN * VEC;
            col = unit % (BN / VEC) * VEC + lane / DOWN;
        } else if (along_r) {
            col = run % BN;
            row = run / BN * VEC;
        } else {
            col = run % (BN / VEC) * VEC;
            row = run / (BN / VEC);
        }
        float v[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) v[e] = along_r ? stage[stage_at(row + e, col, SROW, swizzle)] : stage[row * SROW + col + e];
        const int m = m_tile * BM + row;
        if (m >= rows) continue;
        const int co = m >> fold_shift, r = m & (fold - 1);
        const int q = q0 + col;
        const int o = p.out_base + q * p.out_step + r;
        const float b = bias != nullptr ? ValueTraits<T>::to_acc(bias[group * out_channels + co]) : 0.0f;
        T* dst = out + (out_image + co) * out_w + o;
        const bool whole = o >= 0 && o + VEC <= out_w && (along_r ? q < p.count : q + VEC <= p.count);
        const unsigned long long address = reinterpret_cast<unsigned long long>(dst);
        if (whole && address % 8 == 0) {
            union {
                T value[VEC];
                uint4 whole;
                uint2 half[2];
            } packed;
#pragma unroll
            for (int e = 0; e < VEC; ++e) packed.value[e] = ValueTraits<T>::from_acc(v[e] + b);
            if (address % 16 == 0) {
                store_global16(dst, packed.whole);
            } else {
                reinterpret_cast<uint2*>(dst)[0] = packed.half[0];
                reinterpret_cast<uint2*>(dst)[1] = packed.half[1];
            }
        } else {
            // A run cut by an edge or misaligned: element e is (row + e, col)
            // along r, (row, col + e) along q; same channel throughout.
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
                const int qe = along_r ? q : q + e;
                const int oe = o + (along_r ? e : e * p.out_step);
                if (qe < p.count && oe >= 0 && oe < out_w) out[(out_image + co) * out_w + oe] = ValueTraits<T>::from_acc(v[e] + b);
            }
        }
    }
}
