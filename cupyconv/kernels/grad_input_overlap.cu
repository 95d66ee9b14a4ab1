// grad_input_overlap: grad_input of a 1D transposed convolution of stride 8
// whose kernel has 9 to 16 taps, dilation 1 and one group, in half or
// bfloat16, on Hopper's warpgroup tensor cores (wgmma, sm_90a): the backward
// pass of a vocoder's upsampling layer (benchmark X2); perf notes v32.
//
// GEMM per image n: D[ci, l] = sum over (co, k) of W[ci, co, k] *
// gy[n, co, 8 l + k - padding], taps k = 0..15 (zeros past the kernel).
// Rows are input channels, columns input positions, the reduction the
// output channels with all 16 of their taps: one wgmma k-step (K = 16) per
// output channel.
//
// B without a copy per tap: column l of output channel co is the 16
// consecutive elements gy[co][8 l - padding ..], and the next column's run
// starts 8 elements (16 bytes) on.  With that stretch of grad_output's row
// copied into shared memory as it lies (element 8 l0 - padding at a 16-byte
// boundary), the K-major core matrix of columns l..l+7 and taps 8h..8h+7 is
// the 128 bytes at 16 (l - l0) + 16 h: the descriptor's stride offset
// (between 8-column groups) is 128 bytes and its leading offset (between the
// two 8-tap halves) 16 bytes, so neighbouring core matrices overlap.  (Probed
// on an H100 by scripts/wgmma_overlap_probe.py: bitwise the reference.)
//
// A block owns 128 input channels x GI_BN = 256 positions of one image and
// is three warpgroups, specialized (perf notes v37):
// - two consumers: warpgroup h issues wgmma.m64n256k16 on channels 64h..
//   and nothing else in its k-block loop (wait for the buffer, 4 MMAs,
//   release the buffer of the k-block before once those MMAs retired);
// - one producer, which fills GI_STAGES buffers of GI_CB output channels:
//   A, the packed weight (pack_overlap_weight: per output channel and tile
//   of 128 input channels, the 4 KB of the shared-memory layout), by one
//   bulk copy an output channel; B, the grad_output stretch (8 * GI_BN + 8
//   elements an output channel), by 8-byte cp.async (the stretch starts 8
//   bytes past a 16-byte boundary when padding is 4 mod 8, which bulk
//   copies cannot take).
// Each buffer has two mbarriers.  "full" completes when A's bytes have
// landed and the B copies of every producer thread have (each thread's
// cp.async.mbarrier.arrive; the consumers fence the data for the tensor
// cores after their wait); "empty" when every consumer warp has arrived,
// once its MMAs of the buffer's k-block have retired.  No block-wide
// barrier in the loop: the consumers only wait for data, the producer only
// for free buffers.
//
// Requirements checked by the host: compute capability 9.0 (other targets
// compile an empty body), stride 8, padding a multiple of 4, grad_output rows
// a multiple of 4 elements and 8-byte aligned, grad_input rows of even
// length, and the packed weight of pack_overlap_weight (output channels
// padded with zeros to a multiple of GI_CB).
#include "common.cuh"
#include "mma.cuh"
#include "wgmma.cuh"

constexpr int GI_THREADS = 384;  // two consumer warpgroups, then the producer
constexpr int GI_BM = 128;       // input channels a block
constexpr int GI_BN = 256;       // input positions a block
constexpr int GI_CB = 4;         // output channels a k-block
constexpr int GI_STAGES = 4;
constexpr int GI_A_BYTES = GI_BM * 32;                   // one output channel's A: 128 rows x 16 taps
constexpr int GI_B_BYTES = (8 * GI_BN + 8) * 2 + 16;     // one output channel's grad_output stretch, padded to 16 bytes
constexpr int GI_STAGE_BYTES = GI_CB * (GI_A_BYTES + GI_B_BYTES);
constexpr int GI_SHARED = GI_STAGES * GI_STAGE_BYTES + GI_STAGES * 16;  // the buffers, then their mbarriers (full, empty)
constexpr int GI_ROW = GI_BN * 2 + 16;  // a staged output row in the epilogue (16 bytes of padding: no bank conflicts)
static_assert(GI_A_BYTES == 4096 && GI_STAGE_BYTES % 16 == 0, "4 KB of A an output channel; 16-byte aligned buffers");
static_assert(GI_BM * GI_ROW <= GI_STAGES * GI_STAGE_BYTES, "the staged tile fits in the buffers");

// The packed weight: [co][ci tile][half h][row m][8 taps], output channels
// padded to co_padded, input channels tiled by GI_BM: tap 8 h + j of input
// channel GI_BM tile + m, zeros past the kernel's taps, in_channels and
// out_channels.  One (co, tile) is the 4 KB of A in shared memory (half h's
// 16-byte rows at h * GI_BM * 16 + m * 16: K-major core matrices).
// A thread a row (co, ci): its taps read in a run from the weight, written
// as the two 16-byte halves.  Consecutive threads take consecutive input
// channels, whose rows lie out_channels x taps elements apart: a row of 16
// taps on a 16-byte boundary (X2's, always) is read as two 16-byte vectors,
// whole 32-byte sectors, not 16 scalar loads (14 us a call on X2's 4 MB
// weight, perf notes v39).
template <typename T>
__global__ void pack_overlap_weight(const T* __restrict__ weight, T* __restrict__ packed, int in_channels, int out_channels, int taps,
                                    int m_tiles, long long total) {
    for (long long row = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; row < total / 16;
         row += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int m = static_cast<int>(row % GI_BM);
        const long long tile_co = row / GI_BM;
        const int ci = static_cast<int>(tile_co % m_tiles) * GI_BM + m;
        const long long co = tile_co / m_tiles;
        alignas(16) T v[16];
        const bool inside = ci < in_channels && co < out_channels;
        const T* const src = weight + (ci * static_cast<long long>(out_channels) + co) * taps;
        if (inside && taps == 16 && (reinterpret_cast<unsigned long long>(src) & 15) == 0) {
            *reinterpret_cast<uint4*>(v) = *reinterpret_cast<const uint4*>(src);
            *reinterpret_cast<uint4*>(v + 8) = *reinterpret_cast<const uint4*>(src + 8);
        } else {
#pragma unroll
            for (int k = 0; k < 16; ++k) v[k] = inside && k < taps ? src[k] : T{};
        }
        T* const dst = packed + tile_co * 2048 + m * 8;
        *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(v);
        *reinterpret_cast<uint4*>(dst + GI_BM * 8) = *reinterpret_cast<const uint4*>(v + 8);
    }
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// D (64 x 256 floats, this thread's 128) = A (64 x 16) * B (16 x 256) + (D if
// accumulate), both operands K-major from shared memory; 16-bit operands.
template <typename T>
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], unsigned long long a, unsigned long long b, int accumulate);
#define CUPYCONV_WGMMA_M64N256K16(TYPE, OPERAND)                                                                   \
    template <>                                                                                                  \
    __device__ __forceinline__ void wgmma_m64n256k16<TYPE>(float (&d)[128], unsigned long long a, unsigned long long b, int accumulate) { \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                                \
                     "wgmma.mma_async.sync.aligned.m64n256k16.f32." OPERAND "." OPERAND " "                              \
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 0;\n}\n"                                                        \
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])                                                                                     \
                     : "l"(a), "l"(b), "r"(accumulate));                                                         \
    }
CUPYCONV_WGMMA_M64N256K16(half_t, "f16")
CUPYCONV_WGMMA_M64N256K16(bfloat16_t, "bf16")
#undef CUPYCONV_WGMMA_M64N256K16
#endif

template <typename T, typename Index>
__global__ void __launch_bounds__(GI_THREADS, 1) grad_input_overlap(
    const T* __restrict__ gy,      // (batch, out_channels, out_w)
    const T* __restrict__ packed,  // (co_padded, m_tiles, 2, GI_BM, 8)
    T* __restrict__ grad_input,    // (batch, in_channels, in_w)
    int in_channels, int out_channels, int in_w, int out_w, int padding, int m_tiles, int n_tiles) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(1024) unsigned char smem[];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, wg = warp / 4;
    int b = blockIdx.x;
    const int m_tile = b % m_tiles;
    b /= m_tiles;
    const int n_tile = b % n_tiles, n = b / n_tiles;
    const int ci0 = m_tile * GI_BM, l0 = n_tile * GI_BN;
    const int kblocks = (out_channels + GI_CB - 1) / GI_CB;
    const unsigned base = shared_address(smem), full = base + GI_STAGES * GI_STAGE_BYTES, empty = full + GI_STAGES * 8;

    if (tid == 0) {
        for (int s = 0; s < GI_STAGES; ++s) {
            mbarrier_init(full + 8 * s, 128);  // the producer's threads (A's bytes counted besides)
            mbarrier_init(empty + 8 * s, 8);   // the consumers' warps
        }
        fence_mbarrier_init();
    }
    __syncthreads();

    // The epilogue stages the tile in the (then free) buffers, rows of GI_BN positions GI_ROW bytes apart, and
    // all three warpgroups store it in 16-byte pieces, consecutive threads along a row, where grad_input's rows
    // are whole 16-byte pieces (in_w a multiple of 8, the array 16-byte aligned); elsewhere the consumers store
    // their accumulators directly, two outputs a 4-byte store.
    const bool staged = in_w % 8 == 0 && reinterpret_cast<unsigned long long>(grad_input) % 16 == 0;
    auto store_staged = [&]() {
        for (int q = tid; q < GI_BM * GI_BN / 8; q += GI_THREADS) {
            const int r = q / (GI_BN / 8), piece = q % (GI_BN / 8), l = l0 + 8 * piece;
            const uint4 v = *reinterpret_cast<const uint4*>(smem + r * GI_ROW + 16 * piece);
            if (ci0 + r < in_channels && l < in_w)
                *reinterpret_cast<uint4*>(grad_input + (static_cast<Index>(n) * in_channels + ci0 + r) * in_w + l) = v;
        }
    };

    if (wg == 2) {
        // The producer.  Its thread p copies the stretch's 8-byte pieces v = p + 128 i of each output
        // channel: their offsets in the row and whether they lie in it are the same for every channel.
        const int p = tid - 256;
        constexpr int PIECES = 2 * GI_BN + 2, PER_THREAD = (PIECES + 127) / 128;
        int offset[PER_THREAD];
        bool inside[PER_THREAD];
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) {
            const int e = 8 * l0 - padding + 4 * (p + 128 * i);  // the piece's first grad_output element
            inside[i] = p + 128 * i < PIECES && e >= 0 && e < out_w;
            offset[i] = inside[i] ? e : 0;
        }
        const T* image = gy + static_cast<Index>(n) * out_channels * out_w;
        const bool interior = 8 * l0 - padding >= 0 && 8 * l0 - padding + 4 * PIECES <= out_w;  // the whole stretch in the row
#pragma unroll 1
        for (int kb = 0; kb < kblocks; ++kb) {
            const int s = kb % GI_STAGES;
            if (kb >= GI_STAGES) mbarrier_wait(empty + 8 * s, (kb / GI_STAGES - 1) & 1);  // k-block kb - GI_STAGES is done with it
            const unsigned stage = base + s * GI_STAGE_BYTES;
            if (p == 0) {
                mbarrier_expect_tx(full + 8 * s, GI_CB * GI_A_BYTES);
#pragma unroll
                for (int c = 0; c < GI_CB; ++c)
                    bulk_copy(stage + c * GI_A_BYTES, packed + (static_cast<Index>(kb * GI_CB + c) * m_tiles + m_tile) * (GI_A_BYTES / 2),
                              GI_A_BYTES, full + 8 * s);
            }
            unsigned char* const b_stage = smem + s * GI_STAGE_BYTES + GI_CB * GI_A_BYTES + 8 * p;
            if (interior && kb * GI_CB + GI_CB <= out_channels) {
                // every piece inside its row (all but the tiles at a row's ends): no bounds, no predicates
                const T* const rows = image + static_cast<Index>(kb * GI_CB) * out_w;
#pragma unroll
                for (int c = 0; c < GI_CB; ++c)
#pragma unroll
                    for (int i = 0; i < PER_THREAD; ++i)
                        if (PIECES % 128 == 0 || i < PER_THREAD - 1 || p < PIECES % 128)
                            cp_async_inside<8>(b_stage + c * GI_B_BYTES + 1024 * i, rows + c * out_w + offset[i]);
            } else {
#pragma unroll
                for (int c = 0; c < GI_CB; ++c) {
                    // B: the stretch gy[n][co][8 l0 - padding .. + 8 GI_BN + 8), zeros outside the row and past out_channels
                    const int co = kb * GI_CB + c;
                    const bool have = co < out_channels;
                    const T* row = image + static_cast<Index>(have ? co : 0) * out_w;
#pragma unroll
                    for (int i = 0; i < PER_THREAD; ++i)
                        if (PIECES % 128 == 0 || i < PER_THREAD - 1 || p < PIECES % 128)
                            cp_async_small<8>(b_stage + c * GI_B_BYTES + 1024 * i, row + offset[i], have && inside[i]);
                }
            }
            cp_async_arrive_noinc(full + 8 * s);  // once this k-block's copies have landed
        }
        cp_async_wait_all();
        if (staged) {
            __syncthreads();  // the consumers' MMAs have retired: the buffers are free
            __syncthreads();  // the tile is staged
            store_staged();
        }
        return;
    }

    // The consumers.
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) d[i] = 0.0f;
#pragma unroll 1
    for (int kb = 0; kb < kblocks; ++kb) {
        const int s = kb % GI_STAGES;
        mbarrier_wait(full + 8 * s, (kb / GI_STAGES) & 1);
        fence_proxy_async();  // the producer's cp.async writes, for the tensor cores' reads
        const unsigned stage = base + s * GI_STAGE_BYTES;
        wgmma_fence();
#pragma unroll
        for (int c = 0; c < GI_CB; ++c) {
            const unsigned long long a = wgmma_descriptor(stage + c * GI_A_BYTES + wg * 64 * 16, GI_BM * 16, 128);
            const unsigned long long bd = wgmma_descriptor(stage + GI_CB * GI_A_BYTES + c * GI_B_BYTES, 16, 128);
            wgmma_m64n256k16<T>(d, a, bd, 1);
        }
        wgmma_commit();
        wgmma_wait<1>();
        if (kb > 0 && lane == 0) mbarrier_arrive(empty + 8 * ((kb - 1) % GI_STAGES));  // this warp's MMAs of k-block kb - 1 retired
    }
    wgmma_wait<0>();
    pin(d);  // the epilogue reads the accumulators after the wait

    // Epilogue: rows 64 wg + 16 (warp % 4) + g (+ 8), columns 8 j + 2 t4 (+ 1), two outputs a 4-byte value.
    const int g = lane / 4, t4 = lane % 4;
    if (staged) {
        __syncthreads();  // every warpgroup's MMAs have retired and every copy has landed: the buffers are free
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            unsigned char* const row = smem + (64 * wg + 16 * (warp % 4) + g + 8 * half) * GI_ROW + 4 * t4;
#pragma unroll
            for (int j = 0; j < 32; ++j)
                *reinterpret_cast<unsigned*>(row + 16 * j) = pack2<T>(d[4 * j + 2 * half], d[4 * j + 2 * half + 1]);
        }
        __syncthreads();
        store_staged();
        return;
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int ci = ci0 + 64 * wg + 16 * (warp % 4) + g + 8 * half;
        if (ci >= in_channels) continue;
        T* out = grad_input + (static_cast<Index>(n) * in_channels + ci) * in_w;
#pragma unroll
        for (int j = 0; j < 32; ++j) {
            const int l = l0 + 8 * j + 2 * t4;
            if (l < in_w)  // in_w even: l + 1 too
                *reinterpret_cast<unsigned*>(out + l) = pack2<T>(d[4 * j + 2 * half], d[4 * j + 2 * half + 1]);
        }
    }
#endif
}
