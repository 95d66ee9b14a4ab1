// grad_weight of a 1D transposed convolution on tensor cores (half and
// bfloat16), with grad_output staged once per reduction slice and shared by
// every tap of the block:
//
//   grad_weight[g*C + ci, j, k] = sum_{n, l} x[n, g*C + ci, l] * gy[n, g*M + j, l*s - p + k*d]
//
// GEMM per (group, chunk of TAPS taps): rows ci, columns (j, tap), reduction
// over (n, l), cut into slices of BL positions of one image (64 bytes of x).
// Each block takes a BM x BJ tile of (ci, j), the taps k0 .. k0 + taps - 1,
// and a contiguous range of slices (its split); it writes its partial tile to
// workspace[split] and sum_splits adds the splits in order (no atomics: the
// same bits on every run).
//
// Per slice:
//   * A: x[n, ci, l0 .. l0 + BL) for the block's BM channels, cp.async in
//     16-byte chunks into rows of 80 bytes (conflict-free ldmatrix); a slice's
//     A fragments are loaded once and reused by every tap.
//   * the window: gy[n, j, o0 + row] for rows 0 .. window_rows, o0 = l0*s +
//     k0*d - p, that is every grad_output position a (l, tap) of the slice
//     reads (row = (l - l0)*s + t*d + head), stored transposed: one 128-byte
//     row per position holding the block's 64 channels j.  Tap t's B fragment
//     for positions l .. l + 15 is then rows (l - l0)*s + t*d + head of the
//     window, which ldmatrix.trans reads at any row: the taps' shifts and the
//     stride cost nothing.  Loaded with 16-byte vectors: where grad_output's
//     rows are whole vectors, two channels' vectors become one 32-bit word per
//     position; otherwise each row's aligned vectors are scattered element by
//     element.
//   * The 16-byte chunks of a window row are XOR-swizzled by (row >> log2 s),
//     which differs for the 8 consecutive positions a fragment load reads: no
//     bank conflicts for any power-of-two stride.
//   * Two buffers: where a thread's share of the window is at most HELD
//     vectors, the next slice's vectors are loaded into registers before this
//     slice's products and stored after them; otherwise the window is loaded
//     and stored in turn (each block then relies on the other block of its
//     multiprocessor to overlap).
//
// Requirements checked by the host: sm_80 or later, a power-of-two stride,
// in_w a multiple of 16 bytes' worth of elements, 16-byte-aligned x and
// grad_output, window_rows a multiple of 16 bytes' worth of elements and at
// least (BL - 1) * s + (taps - 1) * d + 1 + head.
#include "common.cuh"
#include "mma.cuh"

template <typename T, typename Index, int BM, int TAPS, int WARPS_M>
__global__ void __launch_bounds__(32 * WARPS_M * 4, 2) grad_weight_window(
    const T* __restrict__ x,         // (batch, groups * channels, in_w)
    const T* __restrict__ gy,        // (batch, groups * out_channels, out_w)
    double* __restrict__ workspace,  // (splits, groups * channels, out_channels, kernel_w)
    int batch, int groups, int channels, int out_channels, int in_w, int out_w, int kernel_w,
    int stride_shift, int padding, int dilation, int window_rows,
    int slices_per_split, int m_tiles, int j_tiles, int tap_chunks, int splits) {
    static_assert(sizeof(T) == 2, "half or bfloat16");
    constexpr int VEC = 8;               // elements per 16 bytes
    constexpr int BL = 32;               // reduction positions per slice: 64 bytes of x
    constexpr int KSTEP = 16;            // reduction depth of one mma
    constexpr int KSTEPS = BL / KSTEP;
    constexpr int BJ = 64;               // columns j per block: one 128-byte window row
    constexpr int WORDS = BJ / 2;        // 32-bit words per window row
    constexpr int WARPS_N = BJ / 16;     // warp tiles of 16 columns (two n8 fragments)
    constexpr int THREADS = 32 * WARPS_M * WARPS_N;
    constexpr int WM = BM / WARPS_M, MI = WM / 16;
    constexpr int AROW = BL + VEC;       // A row: 64 bytes + 16 of padding
    constexpr int A_TASKS = (BM * 4 + THREADS - 1) / THREADS;
    constexpr int HELD = 2;              // 16-byte vectors a thread may hold across a slice's products
                                         // (one aligned task, or two element tasks)
    static_assert(WM % 16 == 0, "warp rows must split into m16 fragments");

    extern __shared__ __align__(16) unsigned char smem[];
    const int a_bytes = BM * AROW * 2;
    const int stage_bytes = a_bytes + window_rows * 128;
    auto a_tile = [&](int buf) { return reinterpret_cast<T*>(smem + buf * stage_bytes); };  // [BM][AROW]
    auto window = [&](int buf) { return smem + buf * stage_bytes + a_bytes; };            // [window_rows][128 bytes]

    // Block -> (m tile, j tile, tap chunk) fastest, then split, then group:
    // the tiles of one split read the same slices, side by side.
    unsigned block = blockIdx.x;
    const int m_tile = block % m_tiles;
    block /= m_tiles;
    const int j_tile = block % j_tiles;
    block /= j_tiles;
    const int chunk = block % tap_chunks;
    block /= tap_chunks;
    const int split = block % splits;
    const int group = block / splits;

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int g = lane / 4, t4 = lane % 4;
    const int k0 = chunk * TAPS;
    const int taps = min(TAPS, kernel_w - k0);
    const int slices_per_image = (in_w + BL - 1) / BL;
    const int first_slice = split * slices_per_split;  // (the host keeps batch * slices_per_image an int)
    const int end_slice = min(batch * slices_per_image, first_slice + slices_per_split);
    const int m0 = m_tile * BM, j0 = j_tile * BJ;
    // Window row 0 is the block's first read position aligned down to a
    // multiple of VEC (l0 * s is one), and tap t of position l reads row
    // (l - l0) * s + t * d + head.
    const int head = ((k0 * dilation - padding) % VEC + VEC) % VEC;
    const bool aligned = out_w % VEC == 0;
    // Window tasks: (32-bit word of a row, vector) where aligned, else
    // (column, vector) with one more vector for the rows' misalignment.
    const int tasks = aligned ? WORDS * (window_rows / VEC) : BJ * (window_rows / VEC + 1);
    const int per_task = aligned ? 2 : 1;  // vectors a task loads
    const bool pipelined = tasks * per_task <= HELD * THREADS;

    // A: x[n, g*C + m0 + row, l0 + col], zeros past the channels or in_w.
    auto fetch_a = [&](int slice, int buf) {
        const int n = slice / slices_per_image;
        const int l0 = (slice - n * slices_per_image) * BL;
        const Index x_image = (static_cast<Index>(n) * groups + group) * channels;
#pragma unroll
        for (int i = 0; i < A_TASKS; ++i) {
            const int task = tid + i * THREADS;
            if (task < BM * 4) {
                const int row = task / 4, col = (task % 4) * VEC;
                const int ci = m0 + row, l = l0 + col;
                const bool valid = ci < channels && l < in_w;
                const T* src = valid ? x + (x_image + ci) * in_w + l : x;
                cp_async16(a_tile(buf) + row * AROW + col, src, valid);
            }
        }
        cp_async_commit();
    };
    // The window of a slice, one task at a time: load (16 bytes, or two
    // vectors of channels 2w and 2w + 1 where aligned) and store, transposed.
    // Zeros outside grad_output and past the channels.
    struct Slice {
        Index gy_image;
        int o0;
    };
    auto slice_of = [&](int slice) {
        const int n = slice / slices_per_image;
        const int l0 = (slice - n * slices_per_image) * BL;
        return Slice{(static_cast<Index>(n) * groups + group) * out_channels, (l0 << stride_shift) + k0 * dilation - padding - head};
    };
    auto load_task = [&](const Slice& sl, int task, uint4* v) {  // v: per_task vectors
        v[0] = make_uint4(0, 0, 0, 0);
        if (aligned) v[1] = v[0];
        if (task >= tasks) return;
        if (aligned) {
            const int word = task % WORDS, o = sl.o0 + task / WORDS * VEC;
            const int j = j0 + 2 * word;
            if (o >= 0 && o < out_w) {  // the whole vector: out_w % VEC == 0
                const T* src = gy + (sl.gy_image + j) * out_w + o;
                if (j < out_channels) v[0] = *reinterpret_cast<const uint4*>(src);
                if (j + 1 < out_channels) v[1] = *reinterpret_cast<const uint4*>(src + out_w);
            }
        } else {
            const int jl = task % BJ, vi = task / BJ;
            const int j = j0 + jl;
            const Index row_base = (sl.gy_image + j) * static_cast<Index>(out_w);
            const Index origin = row_base + sl.o0;  // absolute index of window row 0
            const Index at = (origin >= 0 ? origin / VEC : -((-origin + VEC - 1) / VEC)) * VEC + static_cast<Index>(vi) * VEC;
            if (j < out_channels && at + VEC > row_base && at < row_base + out_w) v[0] = *reinterpret_cast<const uint4*>(gy + at);
        }
    };
    auto store_task = [&](const Slice& sl, int task, const uint4* v, unsigned char* win) {
        if (task >= tasks) return;
        if (aligned) {
            const int word = task % WORDS, row0 = task / WORDS * VEC;
            const unsigned ev[4] = {v[0].x, v[0].y, v[0].z, v[0].w}, od[4] = {v[1].x, v[1].y, v[1].z, v[1].w};
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
                const int row = row0 + e;
                const int chunk16 = (word >> 2) ^ ((row >> stride_shift) & 7);
                *reinterpret_cast<unsigned*>(win + row * 128 + chunk16 * 16 + (word & 3) * 4) =
                    __byte_perm(ev[e / 2], od[e / 2], (e & 1) ? 0x7632 : 0x5410);
            }
        } else {
            const int jl = task % BJ, vi = task / BJ;
            const int j = j0 + jl;
            const Index row_base = (sl.gy_image + j) * static_cast<Index>(out_w);
            const Index origin = row_base + sl.o0;
            const Index at = (origin >= 0 ? origin / VEC : -((-origin + VEC - 1) / VEC)) * VEC + static_cast<Index>(vi) * VEC;
            const int row0 = static_cast<int>(at - origin);  // window row of element 0 (may be negative)
            const int o_first = static_cast<int>(at - row_base);
            union {
                uint4 whole;
                T value[VEC];
            } data;
            data.whole = v[0];
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
                const int row = row0 + e, o = o_first + e;
                if (row < 0 || row >= window_rows) continue;
                const T value = (o >= 0 && o < out_w) ? data.value[e] : T{};  // (v is zero past the channels)
                const int chunk16 = (jl >> 3) ^ ((row >> stride_shift) & 7);
                *reinterpret_cast<T*>(win + row * 128 + chunk16 * 16 + (jl & 7) * 2) = value;
            }
        }
    };

    float acc[TAPS][MI][2][4];
#pragma unroll
    for (int t = 0; t < TAPS; ++t)
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int jn = 0; jn < 2; ++jn)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[t][i][jn][e] = 0.0f;

    const int warp_m = (warp / WARPS_N) * WM, warp_n = (warp % WARPS_N) * 16;
    const int a_lane = (warp_m + (lane & 15)) * AROW + (lane >> 4) * VEC;
    // B: lane -> row (lane & 7) + 8 * bit 3 of the lane within the k16 x n16
    // block, 16-byte chunk warp_n / 8 + bit 4 (ldmatrix.x4.trans).
    const int b_row = (lane & 7) + ((lane >> 3) & 1) * 8;
    const int b_chunk = (warp_n >> 3) + (lane >> 4);

    auto compute = [&](int buf) {
        const unsigned char* win = window(buf);
#pragma unroll
        for (int ks = 0; ks < KSTEPS; ++ks) {
            unsigned af[MI][4];  // this k-step's A fragments, for every tap
#pragma unroll
            for (int i = 0; i < MI; ++i) ldmatrix_x4(af[i], a_tile(buf) + a_lane + i * 16 * AROW + ks * KSTEP);
#pragma unroll
            for (int t = 0; t < TAPS; ++t) {
                if (t >= taps) break;
                const int row = ((ks * KSTEP + b_row) << stride_shift) + t * dilation + head;
                unsigned r[4];
                ldmatrix_x4_trans(r, win + row * 128 + ((b_chunk ^ ((row >> stride_shift) & 7)) << 4));
                const unsigned bf[2][2] = {{r[0], r[1]}, {r[2], r[3]}};
#pragma unroll
                for (int i = 0; i < MI; ++i)
#pragma unroll
                    for (int jn = 0; jn < 2; ++jn) mma_16bit<T>(acc[t][i][jn], af[i], bf[jn]);
            }
        }
    };

    if (pipelined) {
        // One task (aligned) or two (tid and tid + THREADS) per thread.
        uint4 held[HELD];
        auto load = [&](const Slice& sl) {
            if (aligned) {
                load_task(sl, tid, held);
            } else {
                load_task(sl, tid, held);
                load_task(sl, tid + THREADS, held + 1);
            }
        };
        auto store = [&](const Slice& sl, unsigned char* win) {
            if (aligned) {
                store_task(sl, tid, held, win);
            } else {
                store_task(sl, tid, held, win);
                store_task(sl, tid + THREADS, held + 1, win);
            }
        };
        if (first_slice < end_slice) {
            const Slice sl = slice_of(first_slice);
            fetch_a(first_slice, 0);
            load(sl);
            store(sl, window(0));
        }
        cp_async_wait_all();
        __syncthreads();
        for (int slice = first_slice; slice < end_slice; ++slice) {
            const int buf = (slice - first_slice) & 1;
            const bool next = slice + 1 < end_slice;
            Slice sl{};
            if (next) {
                sl = slice_of(slice + 1);
                fetch_a(slice + 1, buf ^ 1);
                load(sl);
            }
            compute(buf);
            if (next) store(sl, window(buf ^ 1));
            cp_async_wait_all();
            __syncthreads();
        }
    } else {
        for (int slice = first_slice; slice < end_slice; ++slice) {
            const Slice sl = slice_of(slice);
            fetch_a(slice, 0);
            for (int task = tid; task < tasks; task += THREADS) {
                uint4 v[2];
                load_task(sl, task, v);
                store_task(sl, task, v, window(0));
            }
            cp_async_wait_all();
            __syncthreads();
            compute(0);
            __syncthreads();  // the next slice overwrites A and the window
        }
    }

    // Every (ci, j, tap) of the block's tile is written, zeros included.
    const Index slab = (static_cast<Index>(split) * groups + group) * channels;
#pragma unroll
    for (int t = 0; t < TAPS; ++t) {
        if (t >= taps) break;
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int jn = 0; jn < 2; ++jn)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int ci = m0 + warp_m + i * 16 + g + (e >> 1) * 8;
                    const int j = j0 + warp_n + jn * 8 + 2 * t4 + (e & 1);
                    if (ci < channels && j < out_channels)
                        workspace[((slab + ci) * out_channels + j) * kernel_w + k0 + t] = static_cast<double>(acc[t][i][jn][e]);
                }
    }
}
