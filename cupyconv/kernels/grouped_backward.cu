// The backward pass of 1D problems with few channels per group (P3: 16 input
// and 8 output channels a group, 5 taps, stride 2): grad_input and
// grad_weight in one read of grad_output and x, on CUDA cores (FFMA), for
// float, half and bfloat16 in every precision mode.  Such problems are bound
// by their bytes, and their GEMMs (16 or fewer rows, 40 columns) fill a
// tensor-core tile poorly.  With C input and M output channels a group,
// stride s, padding p, dilation d and K taps,
//
//   grad_input[n, g*C + c, i]  = sum_{m, k} weight[g*C + c, m, k] * gy[n, g*M + m, i*s - p + k*d]
//   grad_weight[g*C + c, m, k] = sum_{n, i} x[n, g*C + c, i]    * gy[n, g*M + m, i*s - p + k*d]
//
// (gy = grad_output, zero outside its row).  Block (group, split) works
// through the split's items, an item being TILE consecutive input positions of
// one image.  Per item it stages in shared memory, as float:
//   * gy: the M rows over every position the item's taps read (its span),
//     split by phase (position o_first + j * s + r at [m][r][j]), so that
//     consecutive input positions read consecutive words for any stride;
//   * x (for grad_weight): transposed, [position][c], rows of C + 4 floats, so
//     that four channels are one 16-byte read.
// grad_input: thread u takes every channel of positions u and u + TILE / 2,
// the weight (staged once per block as [m][k][c]) read four channels at a
// time: 2 * C products per 16-byte weight read and per grad_output read.
// grad_weight: lane (q, m) of every warp owns channels 4q..4q+3 of output
// channel m, all K taps (so C / 4 * M <= 32); warp w sums positions
// [w * TILE / 8, (w + 1) * TILE / 8) of every item of the split in float (the
// host bounds a split's items so that a lane sums at most
// GROUPED_MAX_SPLIT_SUM products).  At the end the warps' sums are added in
// double in warp order into workspace[split], which sum_splits adds in split
// order: no atomics, the same bits on every run.
//
// PIPE (float only, C in {8, 16}): the staging is two buffers of cp.async
// copies, item i + 1 copied while item i is computed, so that no thread waits
// for DRAM between items; the host halves the item to keep two blocks a
// multiprocessor, and grad_input then takes 2 positions x C / 2 channels a
// thread (PARTS = 2: threads t and t + 128 share the positions).  x is
// staged untransposed (rows of positions, 16-byte copies) and grad_weight
// reads four positions of a channel at a time.  The copies' index arithmetic
// is stepped, not divided: it was 40% of the instructions of the first
// pipelined version (ncu, P3).
//
// Requirements checked by the host: C in {4, 8, 16} (the template's CG), M
// such that C / 4 * M <= 32, K = TAPS <= GROUPED_MAX_TAPS (a template
// argument, so that the taps' loops unroll with no branches and their
// offsets stay in registers), TILE a multiple of 64.
#include "mma.cuh"

constexpr int GROUPED_THREADS = 256;
constexpr int GROUPED_WARPS = GROUPED_THREADS / 32;
constexpr int GROUPED_MAX_TAPS = 8;
constexpr int GROUPED_X_PAD = 4;  // floats past C in a staged x row
constexpr int GROUPED_MAX_SPLIT_SUM = 256;  // products a lane sums in float (the host sizes splits)

template <typename T, typename Index, int CG, int TAPS, bool PIPE = false>
__global__ void __launch_bounds__(GROUPED_THREADS, 2) grouped_backward(
    const T* __restrict__ grad_output,  // (batch, groups * out_channels, out_w)
    const T* __restrict__ x,            // (batch, groups * CG, in_w)
    const T* __restrict__ weight,       // (groups * CG, out_channels, taps)
    T* __restrict__ grad_input,         // like x, or null when not wanted
    double* __restrict__ workspace,     // (splits, groups * CG, out_channels, TAPS), or null when not wanted
    int groups, int out_channels, int in_w, int out_w, int stride, int padding, int dilation,
    int tile,         // input positions per item: a multiple of 64
    int span,         // grad_output positions an item reads: (tile - 1) * s + (K - 1) * d + 1 (< 2**20)
    int phase_row,    // floats per staged phase: ceil(span / s)
    int m_row,        // floats per staged output channel: s * phase_row, padded to 1 more than a multiple of 32
    int tiles,        // items per image: ceil(in_w / tile)
    long long items,  // batch * tiles
    int per_split)    // items per split
{
    static_assert(CG % 4 == 0 && CG <= 16, "four channels per 16-byte read");
    static_assert(TAPS >= 1 && TAPS <= GROUPED_MAX_TAPS, "taps");
    static_assert(!PIPE || (sizeof(T) == 4 && CG >= 8), "cp.async copies floats; PARTS = 2 needs four channels a part");
    constexpr int taps = TAPS;
    constexpr int PARTS = PIPE ? 2 : 1, CPART = CG / PARTS, LANES = GROUPED_THREADS / PARTS;
    typedef typename ValueTraits<T>::acc Acc;
    static_assert(sizeof(Acc) == 4, "float, half and bfloat16");
    constexpr int QUADS = CG / 4;
    constexpr int XROW = CG + GROUPED_X_PAD;
    extern __shared__ __align__(16) float smem[];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int group = static_cast<int>(blockIdx.x % groups);
    const int split = static_cast<int>(blockIdx.x / groups);
    const bool want_input = grad_input != nullptr, want_weight = workspace != nullptr;
    const int M = out_channels;
    float* const ws = smem;                                   // [m][k][c]
    // Staging buffers (two under PIPE): gy as [m][r][j], m_row and
    // phase_row apart, then x as [position][c] in rows of XROW, or under PIPE
    // as rows of x_len = tile + 4 positions, channel c = 4 q + cc in row
    // cc * QUADS + q (a lane's four channels QUADS rows apart; the warp's
    // QUADS quads in adjacent rows, 4 banks apart).
    float* const stage0 = ws + (want_input ? M * taps * CG : 0);
    const int gs_floats = (M * m_row + 3) / 4 * 4;
    const int x_len = tile + GROUPED_X_PAD;
    const int stage_floats = gs_floats + (want_weight ? (PIPE ? CG * x_len : tile * XROW) : 0);

    if (want_input) {
        for (int e = tid; e < M * taps * CG; e += GROUPED_THREADS) {
            const int c = e % CG, mk = e / CG;
            ws[e] = ValueTraits<T>::to_acc(weight[(static_cast<Index>(group) * CG + c) * (M * taps) + mk]);
        }
    }
    // Tap k of position i reads staged phase (k * d) % s at i + (k * d) / s.
    int tap_offset[TAPS];
#pragma unroll
    for (int k = 0; k < TAPS; ++k) tap_offset[k] = (k * dilation) % stride * phase_row + (k * dilation) / stride;

    // grad_weight: this lane's channels 4q.. of output channel m.
    const int q = lane % QUADS, m_own = lane / QUADS;
    const bool owns = want_weight && m_own < M;
    float part[4][TAPS];
#pragma unroll
    for (int c = 0; c < 4; ++c)
#pragma unroll
        for (int k = 0; k < TAPS; ++k) part[c][k] = 0.0f;

    const int half = tile / 2, per_warp = tile / GROUPED_WARPS;
    const float inv_stride = 1.0f / static_cast<float>(stride);
    const long long first = static_cast<long long>(split) * per_split;
    const long long last = min(items, first + per_split);
    const auto item_place = [&](long long item, int& n, int& i0) {
        n = static_cast<int>(item / tiles);
        i0 = static_cast<int>(item - static_cast<long long>(n) * tiles) * tile;
    };
    const auto gy_rows_of = [&](int n) {
        return grad_output + (static_cast<Index>(n) * groups + group) * M * static_cast<Index>(out_w);
    };
    const auto x_rows_of = [&](int n) { return (static_cast<Index>(n) * groups + group) * CG; };
    // Position o_first + j of grad_output goes to phase j % s at j / s.
    const auto gy_slot = [&](int m, int j) {
        const int jj = __float2int_rz((static_cast<float>(j) + 0.5f) * inv_stride);  // j / s: exact for j < 2**20
        return m * m_row + (j - jj * stride) * phase_row + jj;
    };
    // PIPE: every copy of an item into buffer `stage`, zeros outside the rows.
    // gy: warp w copies rows w, w + 8, ..., lane l positions l, l + 32, ...:
    // 128 bytes of a row per copy instruction; the phase slot of l + 32 t
    // stepped from l's with no division.  x: 16-byte copies where its rows
    // are whole vectors (in_w % 4 == 0 and x 16-byte aligned), else 4 bytes.
    const int lane_phase = lane % stride;
    const int lane_slot = lane_phase * phase_row + lane / stride;
    const int step_phase = 32 % stride, step_slot = step_phase * phase_row + 32 / stride;
    const int wrap_slot = 1 - stride * phase_row;  // phase s -> phase 0 of the next slot
    const bool x_vectors = in_w % 4 == 0 && reinterpret_cast<unsigned long long>(x) % 16 == 0;
    const auto copy_item = [&](long long item, float* stage) {
        int n, i0;
        item_place(item, n, i0);
        const int o_first = i0 * stride - padding;
        const float* const gy_rows = reinterpret_cast<const float*>(gy_rows_of(n));
        for (int m = warp; m < M; m += GROUPED_WARPS) {
            const float* src = gy_rows + static_cast<Index>(m) * out_w + o_first + lane;  // dereferenced inside the row only
            float* dst = stage + m * m_row + lane_slot;
            int r = lane_phase;
            unsigned o = static_cast<unsigned>(o_first + lane);
#pragma unroll 4
            for (int j = lane; j < span; j += 32) {
                const bool inside = o < static_cast<unsigned>(out_w);
                cp_async_small<4>(dst, inside ? src : gy_rows, inside);
                src += 32, o += 32, r += step_phase, dst += step_slot;
                if (r >= stride) r -= stride, dst += wrap_slot;
            }
        }
        if (want_weight) {
            float* const xs = stage + gs_floats;
            const float* const x_rows = reinterpret_cast<const float*>(x) + x_rows_of(n) * in_w + i0;
            for (int c = warp; c < CG; c += GROUPED_WARPS) {
                float* const dst = xs + (c % 4 * QUADS + c / 4) * x_len;
                const float* const src = x_rows + static_cast<Index>(c) * in_w;
                if (x_vectors) {
                    for (int i = 4 * lane; i < tile; i += 128) {
                        const bool inside = i0 + i < in_w;
                        cp_async16(dst + i, inside ? src + i : src - i0, inside);
                    }
                } else {
                    for (int i = lane; i < tile; i += 32) {
                        const bool inside = i0 + i < in_w;
                        cp_async_small<4>(dst + i, inside ? src + i : src - i0, inside);
                    }
                }
            }
        }
    };
    if (PIPE && first < last) copy_item(first, stage0);
    if (PIPE) cp_async_commit();

    int buffer = 0;
    for (long long item = first; item < last; ++item, buffer ^= PIPE ? 1 : 0) {
        int n, i0;
        item_place(item, n, i0);
        float* const gs = stage0 + buffer * stage_floats;
        float* const xs = gs + gs_floats;
        const Index x_rows = x_rows_of(n);
        if constexpr (PIPE) {
            // The next item goes into the other buffer, which the previous
            // item's reads left (the barrier at the end of the loop).
            if (item + 1 < last) copy_item(item + 1, stage0 + (buffer ^ 1) * stage_floats);
            cp_async_commit();
            cp_async_wait_group<1>();
        } else {
            const int o_first = i0 * stride - padding;
            __syncthreads();  // the previous item's reads are done
            // gy's M rows over the item's span of positions, read along the rows.
            const T* const gy_rows = gy_rows_of(n);
            stage_rows<GROUPED_THREADS, T>(M, span, [&](int m, int j, T& v) {
                const int o = o_first + j;
                if (static_cast<unsigned>(o) < static_cast<unsigned>(out_w)) v = gy_rows[static_cast<Index>(m) * out_w + o];
            }, [&](int m, int j, float v) { gs[gy_slot(m, j)] = v; });
            if (want_weight) {
                stage_rows<GROUPED_THREADS, T>(CG, tile, [&](int c, int i, T& v) {
                    if (i0 + i < in_w) v = x[(x_rows + c) * in_w + i0 + i];
                }, [&](int c, int i, float v) { xs[i * XROW + c] = v; });
            }
        }
        __syncthreads();

        if (want_input) {
            // Positions i and i + half (tile / 2 <= 2 * LANES: a loop for
            // longer tiles), channels piece * CPART ..
            const int piece = tid / LANES;
            for (int i = tid % LANES; i < half; i += LANES) {
                float acc[2][CPART];
#pragma unroll
                for (int h = 0; h < 2; ++h)
#pragma unroll
                    for (int c = 0; c < CPART; ++c) acc[h][c] = 0.0f;
                for (int m = 0; m < M; ++m) {
                    const float* const g_row = gs + m * m_row + i;
                    const float* const w_row = ws + m * taps * CG + piece * CPART;
#pragma unroll
                    for (int k = 0; k < TAPS; ++k) {
                        const float g0 = g_row[tap_offset[k]], g1 = g_row[tap_offset[k] + half];
#pragma unroll
                        for (int c4 = 0; c4 < CPART / 4; ++c4) {
                            const float4 w = *reinterpret_cast<const float4*>(w_row + k * CG + 4 * c4);
                            acc[0][4 * c4 + 0] = fmaf(w.x, g0, acc[0][4 * c4 + 0]);
                            acc[0][4 * c4 + 1] = fmaf(w.y, g0, acc[0][4 * c4 + 1]);
                            acc[0][4 * c4 + 2] = fmaf(w.z, g0, acc[0][4 * c4 + 2]);
                            acc[0][4 * c4 + 3] = fmaf(w.w, g0, acc[0][4 * c4 + 3]);
                            acc[1][4 * c4 + 0] = fmaf(w.x, g1, acc[1][4 * c4 + 0]);
                            acc[1][4 * c4 + 1] = fmaf(w.y, g1, acc[1][4 * c4 + 1]);
                            acc[1][4 * c4 + 2] = fmaf(w.z, g1, acc[1][4 * c4 + 2]);
                            acc[1][4 * c4 + 3] = fmaf(w.w, g1, acc[1][4 * c4 + 3]);
                        }
                    }
                }
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int position = i0 + i + h * half;
                    if (position < in_w) {
#pragma unroll
                        for (int c = 0; c < CPART; ++c)
                            grad_input[(x_rows + piece * CPART + c) * in_w + position] = ValueTraits<T>::from_acc(acc[h][c]);
                    }
                }
            }
        }

        if (PIPE && owns) {
            // Four positions a step: x as one 16-byte read per channel.
            const float* const g_row = gs + m_own * m_row;
            const float* const x_row = xs + q * x_len;
#pragma unroll 2
            for (int i = warp * per_warp; i < (warp + 1) * per_warp; i += 4) {
                float4 xv[4];
#pragma unroll
                for (int cc = 0; cc < 4; ++cc) xv[cc] = *reinterpret_cast<const float4*>(x_row + cc * QUADS * x_len + i);
#pragma unroll
                for (int p = 0; p < 4; ++p) {
#pragma unroll
                    for (int k = 0; k < TAPS; ++k) {
                        const float g = g_row[tap_offset[k] + i + p];
#pragma unroll
                        for (int cc = 0; cc < 4; ++cc) {
                            const float v = p == 0 ? xv[cc].x : p == 1 ? xv[cc].y : p == 2 ? xv[cc].z : xv[cc].w;
                            part[cc][k] = fmaf(v, g, part[cc][k]);
                        }
                    }
                }
            }
        } else if (owns) {
            const float* const g_row = gs + m_own * m_row;  // lanes' channels in distinct banks
#pragma unroll 4
            for (int i = warp * per_warp; i < (warp + 1) * per_warp; ++i) {
                const float4 xv = *reinterpret_cast<const float4*>(xs + i * XROW + 4 * q);
#pragma unroll
                for (int k = 0; k < TAPS; ++k) {
                    const float g = g_row[tap_offset[k] + i];
                    part[0][k] = fmaf(xv.x, g, part[0][k]);
                    part[1][k] = fmaf(xv.y, g, part[1][k]);
                    part[2][k] = fmaf(xv.z, g, part[2][k]);
                    part[3][k] = fmaf(xv.w, g, part[3][k]);
                }
            }
        }
        if (PIPE) __syncthreads();  // this buffer's reads are done before the next item copies into it
    }
    if (!want_weight) return;

    // The warps' sums in warp order, through shared memory (the staging area,
    // free after the barrier): warp 0 stores, warps 1.. add in turn, the last
    // writes the split's partial.
    double* const red = reinterpret_cast<double*>(smem);  // [lane][c][k]
    for (int w = 0; w < GROUPED_WARPS; ++w) {
        __syncthreads();
        if (warp == w && owns) {
            double* const mine = red + lane * 4 * TAPS;
#pragma unroll
            for (int c = 0; c < 4; ++c) {
#pragma unroll
                for (int k = 0; k < TAPS; ++k) {
                    const double v = w == 0 ? static_cast<double>(part[c][k]) : mine[c * TAPS + k] + part[c][k];
                    if (w + 1 < GROUPED_WARPS) {
                        mine[c * TAPS + k] = v;
                    } else {
                        const Index ci = static_cast<Index>(group) * CG + 4 * q + c;
                        workspace[((static_cast<Index>(split) * groups * CG + ci) * M + m_own) * TAPS + k] = v;
                    }
                }
            }
        }
    }
}
