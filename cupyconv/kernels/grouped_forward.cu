// The forward pass of 1D problems with few channels per group (P3: 16 input
// and 8 output channels a group, 5 taps, stride 2) on CUDA cores (FFMA), for
// float, half and bfloat16 in every precision mode.  Such problems are bound
// by their bytes: their GEMMs (8 or 16 rows, 40 columns) fill a tensor-core
// tile poorly, and each output sums only C * K / s products.  With C input and
// MG output channels a group, stride S, padding p, dilation d and K taps,
//
//   y[n, g*MG + m, o] = bias[g*MG + m] + sum_{c, k} x[n, g*C + c, i] * weight[g*C + c, m, k]
//
// over the taps with o + p = i*S + k*d.  Write q = o + p = S*j + r: tap k
// reaches phase r = (k*d) % S, from input i = j - a with a = (k*d) / S.
//
// Block b takes one (image n, group g) and TILE consecutive steps j0 + [0,
// TILE), so outputs q in [S*j0, S*(j0 + TILE)): every output in exactly one
// block.  It stages in shared memory, as float, the weight of its group as
// [k][c][m] (four output channels one 16-byte read, the same address across
// the warp) and x's C rows over steps [j0 - halo, j0 + TILE), halo the largest
// a.  Lane l of warp w takes steps w*32*J + l + 32*t (t < J: consecutive lanes
// read consecutive words) and all S phases and MG output channels of each:
// per tap and channel J reads of x and MG/4 of the weight for MG*J FMAs.  The
// sums go through shared memory (over x's staging area) so that each output
// row is written by consecutive threads, bias added, converted once.
//
// Requirements checked by the host (_kernels.grouped_forward_applies): MG a
// multiple of 4, the tap table of S + 1 phase starts then (k, a) per entry,
// and the staging within the dynamic shared memory it is given.
#include "common.cuh"

constexpr int GROUPED_FORWARD_THREADS = 128;
constexpr int GROUPED_FORWARD_WARPS = GROUPED_FORWARD_THREADS / 32;
constexpr int GROUPED_FORWARD_ACC = 64;  // accumulators a thread keeps: MG * S * J
constexpr int GROUPED_FORWARD_MAX_J = 4;

template <int MG, int S>
struct GroupedForwardTile {
    static constexpr int J0 = GROUPED_FORWARD_ACC / (MG * S);
    static constexpr int J = J0 < 1 ? 1 : (J0 > GROUPED_FORWARD_MAX_J ? GROUPED_FORWARD_MAX_J : J0);
    static constexpr int TILE = 32 * J * GROUPED_FORWARD_WARPS;  // input steps a block takes
};

template <typename T, typename Index, int MG, int S>
__global__ void __launch_bounds__(GROUPED_FORWARD_THREADS) grouped_forward(
    const T* __restrict__ x,            // (batch, groups * channels, in_w)
    const T* __restrict__ weight,       // (groups * channels, MG, taps)
    const T* __restrict__ bias,         // (groups * MG,) or null
    T* __restrict__ y,                  // (batch, groups * MG, out_w)
    const int* __restrict__ tap_table,  // S + 1 phase starts into the entries, then (k, a) per entry
    int groups, int channels, int taps, int in_w, int out_w, int padding,
    int halo,   // the largest a: steps staged before j0
    int x_row,  // floats per staged x row: TILE + halo, rounded up to 4
    int tiles)  // blocks per (image, group): ceil(ceil((out_w + p) / S) / TILE)
{
    static_assert(MG % 4 == 0, "four output channels per 16-byte weight read");
    constexpr int J = GroupedForwardTile<MG, S>::J, TILE = GroupedForwardTile<MG, S>::TILE;
    constexpr int SPAN = S * TILE;  // outputs of a block per output channel
    typedef typename ValueTraits<T>::acc Acc;
    static_assert(sizeof(Acc) == 4, "float, half and bfloat16");
    extern __shared__ __align__(16) float smem[];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int entries = taps;  // every tap lands on exactly one phase
    float* const ws = smem;                                                   // [k][c][m]
    int* const table = reinterpret_cast<int*>(ws + taps * channels * MG);     // S + 1 + 2 * entries ints
    float* const xs = ws + (taps * channels * MG + S + 1 + 2 * entries + 3) / 4 * 4;  // [c][x_row], then [m][SPAN]

    const int tile = static_cast<int>(blockIdx.x % tiles);
    const int image_group = static_cast<int>(blockIdx.x / tiles);
    const int group = image_group % groups, n = image_group / groups;
    const int j0 = tile * TILE;

    for (int e = tid; e < taps * channels * MG; e += GROUPED_FORWARD_THREADS) {
        const int m = e % MG, kc = e / MG, c = kc % channels, k = kc / channels;
        ws[e] = ValueTraits<T>::to_acc(weight[((static_cast<Index>(group) * channels + c) * MG + m) * taps + k]);
    }
    for (int e = tid; e < S + 1 + 2 * entries; e += GROUPED_FORWARD_THREADS) table[e] = tap_table[e];
    const T* const x_rows = x + (static_cast<Index>(n) * groups + group) * channels * static_cast<Index>(in_w);
    stage_rows<GROUPED_FORWARD_THREADS, T>(channels, TILE + halo, [&](int c, int i, T& v) {
        const int at = j0 - halo + i;
        if (static_cast<unsigned>(at) < static_cast<unsigned>(in_w)) v = x_rows[static_cast<Index>(c) * in_w + at];
    }, [&](int c, int i, float v) { xs[c * x_row + i] = v; });
    __syncthreads();

    float acc[MG][S][J];
#pragma unroll
    for (int m = 0; m < MG; ++m)
#pragma unroll
        for (int r = 0; r < S; ++r)
#pragma unroll
            for (int t = 0; t < J; ++t) acc[m][r][t] = 0.0f;
    const int step = warp * 32 * J + lane;  // the thread's first step in the block
#pragma unroll
    for (int r = 0; r < S; ++r) {
        for (int e = table[r]; e < table[r + 1]; ++e) {
            const int k = table[S + 1 + 2 * e], a = table[S + 2 + 2 * e];
            const float* const xp = xs + halo - a + step;
            const float* const wp = ws + k * channels * MG;
#pragma unroll 4
            for (int c = 0; c < channels; ++c) {
                float xv[J];
#pragma unroll
                for (int t = 0; t < J; ++t) xv[t] = xp[c * x_row + 32 * t];
#pragma unroll
                for (int m4 = 0; m4 < MG / 4; ++m4) {
                    const float4 w = *reinterpret_cast<const float4*>(wp + c * MG + 4 * m4);
#pragma unroll
                    for (int t = 0; t < J; ++t) {
                        acc[4 * m4 + 0][r][t] = fmaf(w.x, xv[t], acc[4 * m4 + 0][r][t]);
                        acc[4 * m4 + 1][r][t] = fmaf(w.y, xv[t], acc[4 * m4 + 1][r][t]);
                        acc[4 * m4 + 2][r][t] = fmaf(w.z, xv[t], acc[4 * m4 + 2][r][t]);
                        acc[4 * m4 + 3][r][t] = fmaf(w.w, xv[t], acc[4 * m4 + 3][r][t]);
                    }
                }
            }
        }
    }
    __syncthreads();  // every read of the staged x is done: its area takes the sums

    float* const os = xs;  // [m][SPAN], output q - S * j0
#pragma unroll
    for (int m = 0; m < MG; ++m)
#pragma unroll
        for (int r = 0; r < S; ++r)
#pragma unroll
            for (int t = 0; t < J; ++t) os[m * SPAN + S * (step + 32 * t) + r] = acc[m][r][t];
    __syncthreads();

    const int o_first = S * j0 - padding;
    T* const y_rows = y + (static_cast<Index>(n) * groups + group) * MG * static_cast<Index>(out_w);
    for (int m = 0; m < MG; ++m) {
        const float b = bias != nullptr ? ValueTraits<T>::to_acc(bias[group * MG + m]) : 0.0f;
        T* const row = y_rows + static_cast<Index>(m) * out_w;
        for (int q = tid; q < SPAN; q += GROUPED_FORWARD_THREADS) {
            const int o = o_first + q;
            if (static_cast<unsigned>(o) < static_cast<unsigned>(out_w)) row[o] = ValueTraits<T>::from_acc(os[m * SPAN + q] + b);
        }
    }
}
