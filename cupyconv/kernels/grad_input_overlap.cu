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
//   and nothing else in its k-block loop (wait for the buffer, GI_CB MMAs,
//   release the buffer of the k-block before once those MMAs retired);
// - one producer, which fills GI_STAGES buffers of GI_CB output channels
//   with B, the grad_output stretch (8 * GI_BN + 8 elements an output
//   channel), by 8-byte cp.async (the stretch starts 8 bytes past a 16-byte
//   boundary when padding is 4 mod 8, which neither bulk copies nor TMA
//   can take: perf notes v43).
// A, the packed weight (pack_overlap_weight: per output channel and tile of
// 128 input channels, the 4 KB of the shared-memory layout), is the MMAs'
// register operand in the 16-bit builds (wgmma with A in registers, perf
// notes v43): each consumer thread loads its fragment of an output channel,
// four words, from the packed weight in L2 (not allocated in L1) a k-block
// ahead, into the register set the MMAs of the k-block before have
// released.  The float build still has the producer copy A into the
// buffers, one bulk copy an output channel (A from registers is untried
// there).  The consumers' 128 accumulators and two sets
// of fragments pass the 168 registers a thread of a 384-thread block gets,
// so the 16-bit builds move registers from the producer (setmaxnreg: 40)
// to the consumers (232).
// Each buffer has two mbarriers.  "full" completes when the B copies of
// every producer thread have landed (each thread's
// cp.async.mbarrier.arrive; the consumers fence the data for the tensor
// cores after their wait), and for float A's bytes; "empty" when every
// consumer warp has arrived, once its MMAs of the buffer's k-block have
// retired.  No block-wide barrier in the loop: the consumers only wait for
// data, the producer only for free buffers.
//
// float in TF32 (perf notes v40): the same GEMM with two wgmma.m64n256k8
// k-steps an output channel (taps 0-7, 8-15), GI_TF32_CB output channels a
// k-block (an output channel's operands take twice the bytes).  A TF32 core
// matrix row is 16 bytes, 4 taps, but a column's run starts 8 elements (32
// bytes) after the one before: the producer copies the stretch in 16-byte
// chunks (4 elements, chunk c at stretch element 4 c) into two planes, the
// even chunks in one and the odd in the other, chunk c at plane c % 2, row
// c / 2.  Then k-step h's core matrix of columns l..l+7 and taps 8 h + 4 q..
// is plane q's 128 bytes at 16 (l - l0 + h): the descriptor's leading offset
// is the distance between the planes, its stride offset 128 bytes.  The
// tensor cores read a float operand's top 19 bits (truncation); TF32 rounds
// to nearest, so pack_overlap_weight rounds the weight as it packs, and
// each producer thread rounds its own chunks of a buffer in place once they
// have landed (GI_TF32_LAG k-blocks after issuing them, so that the wait
// finds them there), fences them for the tensor cores and then arrives on
// "full".  The pieces are copied through L1 (cp.async.ca): a 32-byte sector's
// two pieces go to the two planes, and .cg fetched it from L2 once per piece.
// The results match grad_input_taps' TF32 (the same products of rounded
// operands, summed in another order).
//
// Requirements checked by the host: compute capability 9.0 (other targets
// compile an empty body), stride 8, padding a multiple of 4, grad_output rows
// a multiple of 4 elements and 8-byte aligned (16-byte for float),
// grad_input rows of even length, and the packed weight of
// pack_overlap_weight (output channels padded with zeros to a multiple of
// the k-block's).
#include "common.cuh"
#include "mma.cuh"
#include "wgmma.cuh"

constexpr int GI_THREADS = 384;  // two consumer warpgroups, then the producer
constexpr int GI_BM = 128;       // input channels a block
constexpr int GI_BN = 256;       // input positions a block
constexpr int GI_CB = 6;         // output channels a k-block (16-bit; 4 took 3% longer on X2, perf notes v43)
constexpr int GI_STAGES = 8;       // 16-bit: the buffers hold B only
constexpr int GI_TF32_CB = 2;    // output channels a k-block (float)
constexpr int GI_TF32_STAGES = 6;
constexpr int GI_TF32_LAG = 2;   // k-blocks between a float buffer's copies and its rounding
constexpr int GI_PIECES = 2 * GI_BN + 2;  // 4-element pieces of an output channel's stretch
constexpr int GI_PLANE = (GI_BN + 1) * 16;  // float: one plane of the stretch's 16-byte chunks
constexpr int GI_PRODUCER_REGS = 40;    // 16-bit: setmaxnreg's registers a producer thread,
constexpr int GI_CONSUMER_REGS = 232;   // and a consumer thread
static_assert(GI_TF32_LAG + 2 <= GI_TF32_STAGES, "the producer's wait for a free buffer needs the consumers to have the k-block it rounds last");

// The shared-memory layout of the element type's build: one output channel's
// A (GI_BM rows x 16 taps) and B (the grad_output stretch: 16-bit as it
// lies, padded to 16 bytes; float as two planes), the k-block's buffers,
// their mbarriers (full, empty), and the epilogue's staged rows.
template <typename T>
struct GiLayout {
    static constexpr bool TF32 = sizeof(T) == 4;
    static constexpr int CB = TF32 ? GI_TF32_CB : GI_CB;
    static constexpr int STAGES = TF32 ? GI_TF32_STAGES : GI_STAGES;
    static constexpr int A_BYTES = TF32 ? GI_BM * 16 * static_cast<int>(sizeof(T)) : 0;  // 16-bit: A from registers
    static constexpr int B_BYTES = TF32 ? 2 * GI_PLANE : (8 * GI_BN + 8) * 2 + 16;
    static constexpr int STAGE_BYTES = CB * (A_BYTES + B_BYTES);
    // The MMAs read B's overlapping core matrices within B_BYTES, but an operand's extent as a tool sees it
    // (compute-sanitizer) is N x K elements from its descriptor: the last buffer's B gets that much room.
    static constexpr int B_EXTENT = TF32 ? 16 + GI_BN * 8 * 4 : GI_BN * 16 * 2;
    static constexpr int BARRIERS = STAGES * STAGE_BYTES + (B_EXTENT > B_BYTES ? B_EXTENT - B_BYTES : 0);
    static constexpr int SHARED = BARRIERS + STAGES * 16;
    static constexpr int ROW = GI_BN * static_cast<int>(sizeof(T)) + (TF32 ? 32 : 16);  // padded: no bank conflicts
    static_assert(STAGE_BYTES % 16 == 0 && BARRIERS % 8 == 0 && GI_BM * ROW <= STAGES * STAGE_BYTES, "aligned buffers and barriers; the staged tile fits");
};
static_assert(GiLayout<half_t>::A_BYTES == 0 && GiLayout<float>::A_BYTES == 8192, "16-bit A from registers; 8 KB of float A an output channel");
static_assert(128 * GI_PRODUCER_REGS + 256 * GI_CONSUMER_REGS <= 65536, "setmaxnreg within the register file");

// The packed weight: [co][ci tile][chunk q][row m][V taps], V = 16 bytes of
// T (8 taps 16-bit, 4 float), output channels padded to co_padded, input
// channels tiled by GI_BM: tap V q + j of input channel GI_BM tile + m, zeros
// past the kernel's taps, in_channels and out_channels; float rounded to TF32
// (to nearest).  One (co, tile) is the 4 or 8 KB of A in shared memory (chunk
// q's 16-byte rows at q * GI_BM * 16 + m * 16: K-major core matrices).
// A thread a row (co, ci): its taps read in a run from the weight, written
// as the 16-byte chunks.  Consecutive threads take consecutive input
// channels, whose rows lie out_channels x taps elements apart: a row of 16
// taps on a 16-byte boundary (X2's, always) is read as 16-byte vectors,
// whole 32-byte sectors, not 16 scalar loads (14 us a call on X2's 4 MB
// 16-bit weight, perf notes v39).
template <typename T>
__global__ void pack_overlap_weight(const T* __restrict__ weight, T* __restrict__ packed, int in_channels, int out_channels, int taps,
                                    int m_tiles, long long total) {
    constexpr int V = 16 / sizeof(T), CHUNKS = 16 / V;
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
#pragma unroll
            for (int q = 0; q < CHUNKS; ++q) reinterpret_cast<uint4*>(v)[q] = reinterpret_cast<const uint4*>(src)[q];
        } else {
#pragma unroll
            for (int k = 0; k < 16; ++k) v[k] = inside && k < taps ? src[k] : T{};
        }
        if constexpr (sizeof(T) == 4) {
#pragma unroll
            for (int k = 0; k < 16; ++k) v[k] = __uint_as_float(to_tf32(v[k]));
        }
        T* const dst = packed + tile_co * (GI_BM * 16) + m * V;
#pragma unroll
        for (int q = 0; q < CHUNKS; ++q) *reinterpret_cast<uint4*>(dst + q * GI_BM * V) = reinterpret_cast<const uint4*>(v)[q];
    }
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// D (64 x 256 floats, this thread's 128) = A (64 x K) * B (K x 256) + (D if
// accumulate), both operands K-major from shared memory; K 16 (16-bit) or 8
// (TF32).
template <typename T>
__device__ __forceinline__ void wgmma_m64n256(float (&d)[128], unsigned long long a, unsigned long long b, int accumulate);
#define CUPYCONV_WGMMA_M64N256(TYPE, SHAPE_TYPES, IMMEDIATES)                                                                   \
    template <>                                                                                                  \
    __device__ __forceinline__ void wgmma_m64n256<TYPE>(float (&d)[128], unsigned long long a, unsigned long long b, int accumulate) { \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                                \
                     "wgmma.mma_async.sync.aligned." SHAPE_TYPES " "                              \
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, " IMMEDIATES ";\n}\n"                                                        \
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])                                                                                     \
                     : "l"(a), "l"(b), "r"(accumulate));                                                         \
    }
CUPYCONV_WGMMA_M64N256(half_t, "m64n256k16.f32.f16.f16", "1, 1, 0, 0")
CUPYCONV_WGMMA_M64N256(bfloat16_t, "m64n256k16.f32.bf16.bf16", "1, 1, 0, 0")
CUPYCONV_WGMMA_M64N256(float, "m64n256k8.f32.tf32.tf32", "1, 1")
#undef CUPYCONV_WGMMA_M64N256
// The same with A (64 x 16, 16-bit) from registers: warp w of the warpgroup holds rows 16 w.., lane (g, t4)
// a[0] = row g taps 2 t4, 2 t4 + 1; a[1] = row g + 8; a[2] = row g taps 2 t4 + 8, + 9; a[3] = row g + 8 (mma.sync's A).
template <typename T>
__device__ __forceinline__ void wgmma_m64n256_rs(float (&d)[128], const unsigned (&a)[4], unsigned long long b);
#define CUPYCONV_WGMMA_M64N256_RS(TYPE, SHAPE_TYPES)                                                                   \
    template <>                                                                                                  \
    __device__ __forceinline__ void wgmma_m64n256_rs<TYPE>(float (&d)[128], const unsigned (&a)[4], unsigned long long b) { \
        asm volatile("wgmma.mma_async.sync.aligned." SHAPE_TYPES " "                              \
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, 1, 1, 1, 0;\n" \
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127]) \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));                                                         \
    }
CUPYCONV_WGMMA_M64N256_RS(half_t, "m64n256k16.f32.f16.f16")
CUPYCONV_WGMMA_M64N256_RS(bfloat16_t, "m64n256k16.f32.bf16.bf16")
#undef CUPYCONV_WGMMA_M64N256_RS
// A word of the packed weight from global memory, not allocated in L1.
__device__ __forceinline__ unsigned load_word_no_l1(const unsigned* p) {
    unsigned v;
    asm volatile("ld.global.nc.L1::no_allocate.b32 %0, [%1];\n" : "=r"(v) : "l"(p));
    return v;
}
#endif

// The epilogue's block-wide barrier, met by each role in its own branch: counted (__syncthreads must be one
// instruction for the whole block), not warp-aligned (a warp may leave its mbarrier waits diverged).
__device__ __forceinline__ void roles_sync() { asm volatile("barrier.sync 1, %0;\n" ::"n"(GI_THREADS) : "memory"); }

template <typename T, typename Index>
__global__ void __launch_bounds__(GI_THREADS, 1) grad_input_overlap(
    const T* __restrict__ gy,      // (batch, out_channels, out_w)
    const T* __restrict__ packed,  // (co_padded, m_tiles, chunks, GI_BM, 16 bytes)
    T* __restrict__ grad_input,    // (batch, in_channels, in_w)
    int in_channels, int out_channels, int in_w, int out_w, int padding, int m_tiles, int n_tiles) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef GiLayout<T> L;
    constexpr bool TF32 = L::TF32;
    constexpr int CB = L::CB, STAGES = L::STAGES, STAGE_BYTES = L::STAGE_BYTES, A_BYTES = L::A_BYTES, B_BYTES = L::B_BYTES;
    extern __shared__ __align__(1024) unsigned char smem[];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, wg = warp / 4;
    int b = blockIdx.x;
    const int m_tile = b % m_tiles;
    b /= m_tiles;
    const int n_tile = b % n_tiles, n = b / n_tiles;
    const int ci0 = m_tile * GI_BM, l0 = n_tile * GI_BN;
    const int kblocks = (out_channels + CB - 1) / CB;
    const unsigned base = shared_address(smem), full = base + L::BARRIERS, empty = full + STAGES * 8;

    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbarrier_init(full + 8 * s, 128);  // the producer's threads (A's bytes counted besides)
            mbarrier_init(empty + 8 * s, 8);   // the consumers' warps
        }
        fence_mbarrier_init();
    }
    __syncthreads();

    // The epilogue stages the tile in the (then free) buffers, rows of GI_BN positions L::ROW bytes apart, and
    // all three warpgroups store it in 16-byte pieces, consecutive threads along a row, where grad_input's rows
    // are whole 16-byte pieces (in_w a multiple of 16 bytes, the array 16-byte aligned); elsewhere the consumers
    // store their accumulators directly, two outputs a store.
    constexpr int PER_PIECE = 16 / sizeof(T);
    const bool staged = in_w % PER_PIECE == 0 && reinterpret_cast<unsigned long long>(grad_input) % 16 == 0;
    auto store_staged = [&]() {
        for (int q = tid; q < GI_BM * GI_BN / PER_PIECE; q += GI_THREADS) {
            const int r = q / (GI_BN / PER_PIECE), piece = q % (GI_BN / PER_PIECE), l = l0 + PER_PIECE * piece;
            const uint4 v = *reinterpret_cast<const uint4*>(smem + r * L::ROW + 16 * piece);
            if (ci0 + r < in_channels && l < in_w)
                *reinterpret_cast<uint4*>(grad_input + (static_cast<Index>(n) * in_channels + ci0 + r) * in_w + l) = v;
        }
    };

    if (wg == 2) {
        // The producer.  Its thread p copies the stretch's 4-element pieces v = p + 128 i of each output
        // channel (8 bytes 16-bit, 16 float): their offsets in the row and whether they lie in it are the same
        // for every channel, and so is where they go (16-bit: 8 v bytes on; float: plane v % 2 = p % 2, its
        // row v / 2 = p / 2 + 64 i).
        if constexpr (!TF32) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(GI_PRODUCER_REGS) : "memory");
        const int p = tid - 256;
        constexpr int PIECE = 4 * sizeof(T), PER_THREAD = (GI_PIECES + 127) / 128;
        int offset[PER_THREAD];
        bool inside[PER_THREAD];
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) {
            const int e = 8 * l0 - padding + 4 * (p + 128 * i);  // the piece's first grad_output element
            inside[i] = p + 128 * i < GI_PIECES && e >= 0 && e < out_w;
            offset[i] = inside[i] ? e : 0;
        }
        const int mine = TF32 ? (p % 2) * GI_PLANE + (p / 2) * 16 : 8 * p;  // piece i at mine + 1024 i
        auto has = [&](int i) { return GI_PIECES % 128 == 0 || i < PER_THREAD - 1 || p < GI_PIECES % 128; };
        const T* image = gy + static_cast<Index>(n) * out_channels * out_w;
        const bool interior = 8 * l0 - padding >= 0 && 8 * l0 - padding + 4 * GI_PIECES <= out_w;  // the whole stretch in the row
        // float: round this thread's pieces of k-block kb's buffer in place (they have landed), make them
        // visible to the tensor cores, and count this thread in on "full".
        auto round_pieces = [&](int kb) {
            const int s = kb % STAGES;
            unsigned char* const b_stage = smem + s * STAGE_BYTES + CB * A_BYTES + mine;
#pragma unroll
            for (int c = 0; c < CB; ++c)
#pragma unroll
                for (int i = 0; i < PER_THREAD; ++i)
                    if (has(i)) round_tf32_in_place(b_stage + c * B_BYTES + 1024 * i);
            fence_proxy_async();
            mbarrier_arrive(full + 8 * s);
        };
#pragma unroll 1
        for (int kb = 0; kb < kblocks; ++kb) {
            const int s = kb % STAGES;
            if (kb >= STAGES) mbarrier_wait(empty + 8 * s, (kb / STAGES - 1) & 1);  // k-block kb - STAGES is done with it
            const unsigned stage = base + s * STAGE_BYTES;
            if (TF32 && p == 0) {  // float's A (16-bit: the consumers load theirs)
                mbarrier_expect_tx(full + 8 * s, CB * A_BYTES);
#pragma unroll
                for (int c = 0; c < CB; ++c)
                    bulk_copy(stage + c * A_BYTES, packed + (static_cast<Index>(kb * CB + c) * m_tiles + m_tile) * (GI_BM * 16), A_BYTES,
                              full + 8 * s);
            }
            unsigned char* const b_stage = smem + s * STAGE_BYTES + CB * A_BYTES + mine;
            if (interior && kb * CB + CB <= out_channels) {
                // every piece inside its row (all but the tiles at a row's ends): no bounds, no predicates
                const T* const rows = image + static_cast<Index>(kb * CB) * out_w;
#pragma unroll
                for (int c = 0; c < CB; ++c)
#pragma unroll
                    for (int i = 0; i < PER_THREAD; ++i)
                        if (has(i)) {
                            if constexpr (TF32)  // through L1: a 32-byte sector's two pieces go to two planes
                                cp_async16_l1_inside(b_stage + c * B_BYTES + 1024 * i, rows + c * out_w + offset[i]);
                            else
                                cp_async_inside<PIECE>(b_stage + c * B_BYTES + 1024 * i, rows + c * out_w + offset[i]);
                        }
            } else {
#pragma unroll
                for (int c = 0; c < CB; ++c) {
                    // B: the stretch gy[n][co][8 l0 - padding .. + 8 GI_BN + 8), zeros outside the row and past out_channels
                    const int co = kb * CB + c;
                    const bool have = co < out_channels;
                    const T* row = image + static_cast<Index>(have ? co : 0) * out_w;
#pragma unroll
                    for (int i = 0; i < PER_THREAD; ++i)
                        if (has(i)) {
                            if constexpr (TF32)
                                cp_async16_l1(b_stage + c * B_BYTES + 1024 * i, row + offset[i], have && inside[i]);
                            else
                                cp_async_small<8>(b_stage + c * B_BYTES + 1024 * i, row + offset[i], have && inside[i]);
                        }
                }
            }
            if constexpr (TF32) {
                cp_async_commit();
                if (kb >= GI_TF32_LAG) {
                    cp_async_wait_group<GI_TF32_LAG>();  // k-block kb - LAG's copies have landed
                    round_pieces(kb - GI_TF32_LAG);
                }
            } else {
                cp_async_arrive_noinc(full + 8 * s);  // once this k-block's copies have landed
            }
        }
        cp_async_wait_all();
        if constexpr (TF32)
            for (int kb = max(kblocks - GI_TF32_LAG, 0); kb < kblocks; ++kb) round_pieces(kb);
        if (staged) {
            roles_sync();  // the consumers' MMAs have retired: the buffers are free
            roles_sync();  // the tile is staged
            store_staged();
        }
        return;
    }

    // The consumers.
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) d[i] = 0.0f;
    if constexpr (!TF32) {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(GI_CONSUMER_REGS) : "memory");
        // A's fragment of this thread (row r = 64 wg + 16 (warp % 4) + g and r + 8, taps 2 t4, 2 t4 + 1 and
        // + 8) of each output channel: four words of the packed weight, whose (co, m tile) blocks are GI_BM x
        // 16 elements, chunk q (taps 8 q..) at q GI_BM x 8, row m at 8 m.
        const int r = 64 * wg + 16 * (warp % 4) + lane / 4;
        const unsigned* const a_words = reinterpret_cast<const unsigned*>(packed + static_cast<Index>(m_tile) * (GI_BM * 16)) + r * 4 + lane % 4;
        const Index co_words = static_cast<Index>(m_tiles) * (GI_BM * 8);
        auto load_a = [&](unsigned (&a)[CB][4], int kb) {
#pragma unroll
            for (int c = 0; c < CB; ++c) {
                const unsigned* const q = a_words + (kb * CB + c) * co_words;
                a[c][0] = load_word_no_l1(q);
                a[c][1] = load_word_no_l1(q + 8 * 4);
                a[c][2] = load_word_no_l1(q + GI_BM * 4);
                a[c][3] = load_word_no_l1(q + GI_BM * 4 + 8 * 4);
            }
        };
        // k-block kb: wait for its B, its MMAs from `now`, release the buffer of kb - 1 once those MMAs retired,
        // then load kb + 1's fragments into `next` (the set kb - 1's MMAs read).
        auto step = [&](int kb, unsigned (&now)[CB][4], unsigned (&next)[CB][4]) {
            const int s = kb % STAGES;
            mbarrier_wait(full + 8 * s, (kb / STAGES) & 1);
            fence_proxy_async();  // the producer's cp.async writes, for the tensor cores' reads
            wgmma_fence();        // and the fragments' loads
            const unsigned stage = base + s * STAGE_BYTES;
#pragma unroll
            for (int c = 0; c < CB; ++c) wgmma_m64n256_rs<T>(d, now[c], wgmma_descriptor(stage + c * B_BYTES, 16, 128));
            wgmma_commit();
            wgmma_wait<1>();
            if (kb > 0 && lane == 0) mbarrier_arrive(empty + 8 * ((kb - 1) % STAGES));  // this warp's MMAs of k-block kb - 1 retired
            if (kb + 1 < kblocks) load_a(next, kb + 1);
        };
        unsigned even[CB][4], odd[CB][4];  // the sets of even and odd k-blocks
        load_a(even, 0);
#pragma unroll 1
        for (int kb = 0; kb < kblocks; kb += 2) {
            step(kb, even, odd);
            if (kb + 1 < kblocks) step(kb + 1, odd, even);
        }
    }
#pragma unroll 1
    for (int kb = 0; kb < (TF32 ? kblocks : 0); ++kb) {  // float: A and B from the buffers
        const int s = kb % STAGES;
        mbarrier_wait(full + 8 * s, (kb / STAGES) & 1);
        fence_proxy_async();  // the producer's cp.async writes, for the tensor cores' reads
        const unsigned stage = base + s * STAGE_BYTES;
        wgmma_fence();
#pragma unroll
        for (int c = 0; c < CB; ++c) {
            if constexpr (TF32) {
#pragma unroll
                for (int h = 0; h < 2; ++h) {  // taps 8 h .. 8 h + 7: A's chunks 2 h, 2 h + 1; B's planes from row h
                    const unsigned long long a = wgmma_descriptor(stage + c * A_BYTES + 2 * h * GI_BM * 16 + wg * 64 * 16, GI_BM * 16, 128);
                    const unsigned long long bd = wgmma_descriptor(stage + CB * A_BYTES + c * B_BYTES + 16 * h, GI_PLANE, 128);
                    wgmma_m64n256<T>(d, a, bd, 1);
                }
            }
        }
        wgmma_commit();
        wgmma_wait<1>();
        if (kb > 0 && lane == 0) mbarrier_arrive(empty + 8 * ((kb - 1) % STAGES));  // this warp's MMAs of k-block kb - 1 retired
    }
    wgmma_wait<0>();
    pin(d);  // the epilogue reads the accumulators after the wait

    // Epilogue: rows 64 wg + 16 (warp % 4) + g (+ 8), columns 8 j + 2 t4 (+ 1), two outputs a store (4 bytes
    // 16-bit, 8 float).
    const int g = lane / 4, t4 = lane % 4;
    auto store2 = [&](void* to, float first, float second) {
        if constexpr (TF32)
            *reinterpret_cast<float2*>(to) = make_float2(first, second);
        else
            *reinterpret_cast<unsigned*>(to) = pack2<T>(first, second);
    };
    if (staged) {
        roles_sync();  // every warpgroup's MMAs have retired and every copy has landed: the buffers are free
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            unsigned char* const row = smem + (64 * wg + 16 * (warp % 4) + g + 8 * half) * L::ROW + 2 * sizeof(T) * t4;
#pragma unroll
            for (int j = 0; j < 32; ++j) store2(row + 8 * sizeof(T) * j, d[4 * j + 2 * half], d[4 * j + 2 * half + 1]);
        }
        roles_sync();
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
            if (l < in_w) store2(out + l, d[4 * j + 2 * half], d[4 * j + 2 * half + 1]);  // in_w even: l + 1 too
        }
    }
#endif
}

// grad_input_multicast: the float32 "tf32" grad_input of grad_input_overlap's
// problems (X2 backward), conv_tf32_multicast's design turned to the
// correlation (perf notes v48).  grad_input_overlap's float build had its
// producer's 128 threads copy the stretch by cp.async into two planes and
// round them in place: its copies alone took 1.06 ms of its 1.49 (ncu, v47).
//
// GEMM per item (image n, input positions l0 .. l0 + 127): D[l, ci] = sum
// over (co, k) of A[l, (co, k)] B[(co, k), ci], M the positions (64 a
// consumer warpgroup), N GM_COLS input channels, the reduction GM_CO output
// channels a stage with their 16 taps (two k-steps of 8 each).
// - A[l, (co, k)] = gy[n][co][8 l + k - padding] is wgmma's register
//   operand, loaded from the stretch as it lies and rounded to TF32 as it
//   loads.  The item's stretch of a stage's output channels, gy[n][co0 ..
//   co0 + 1][8 l0 - padding ..] (8 x 128 + 8 floats a channel), comes as
//   GM_SPANS boxes of GM_SPAN floats x GM_CO channels of a 3D tensor map
//   over grad_output: zeros outside the row and past out_channels.  A
//   padding of 4 m puts each box's start on 16 bytes (a box's first position
//   must be, v47).  Stretch element e of channel c lies at float (e /
//   GM_SPAN) GM_CO GM_SPAN + c GM_SPAN + e % GM_SPAN of the stage's window.
//   (A 4D map of 16-byte quads, one box a warpgroup, took 1.01 ms on X2: v48.)
//   Lane (g, t4)'s k-step kk of row r: a[0], a[2] = the float2 at stretch
//   element 8 r + 8 kk + 2 t4, a[1], a[3] the one 8 rows on.  So the
//   k-step's column t4 is tap 8 kk + 2 t4 and column t4 + 4 tap 8 kk + 2 t4
//   + 1.  (A half warp's 16 lanes read 32 consecutive elements: conflict-free
//   but where they cross a box.)
// - B is the weight packed by pack_multicast_weight: (co, ci) rows of 16
//   taps in that order (64 bytes), rounded to TF32, zeros past the kernel.
//   A stage's tile of an output channel (GM_COLS rows, 64-byte swizzle) comes
//   through a 4D tensor map over it, half of its rows from each block of a
//   cluster of two, multicast into both.
//
// Work: units (pair of items, ci tile), pair-major, dealt to the clusters in
// turn, as conv_tf32_multicast's (block `rank` takes item 2 pair + rank; a
// pair's second past the last runs the first's and stores nothing); every
// other step walks the output channels backwards.  The pipeline is
// conv_tf32_multicast's: GM_STAGES buffers, a producer warpgroup whose one
// thread issues the copies, `full` (the producer's arrival and the stage's
// bytes) and `empty` (every consumer warp of both blocks).  The stores: a
// thread's accumulators of a (k-step column, half) are 8 consecutive
// positions of a warp's 4 rows, whole 32-byte sectors a store.
//
// Requirements checked by the host: compute capability 9.0, stride 8, 9 to
// 16 taps, dilation 1, one group, padding a multiple of 4, grad_output rows
// of whole 16-byte quads in a 16-byte-aligned array (the tensor map).
constexpr int GM_STAGES = 5;
constexpr int GM_COLS = 256;                        // input channels a tile
constexpr int GM_POSITIONS = 128;                   // input positions an item
constexpr int GM_CO = 2;                            // output channels a stage
constexpr int GM_TILE = GM_COLS * 64;               // an output channel's weight tile, 16 KB
constexpr int GM_SPAN = 176;                        // floats of a window box's rows (704 bytes, a multiple of 16)
constexpr int GM_SPANS = 6;                         // boxes an item's stretch: 8 x 128 + 8 floats a channel
constexpr int GM_BOX = GM_CO * GM_SPAN * 4;         // a window box, 1408 bytes
constexpr int GM_WINDOW = GM_SPANS * GM_BOX;
static_assert(GM_SPANS * GM_SPAN >= 8 * GM_POSITIONS + 8 && GM_BOX % 128 == 0, "the stretch; each box 128-byte aligned");
constexpr int GM_STAGE = (GM_CO * GM_TILE + GM_WINDOW + 1023) & ~1023;
constexpr int GM_SHARED = GM_STAGES * GM_STAGE + 2 * GM_STAGES * 8;
constexpr int GM_THREADS = 384;                     // two consumer warpgroups, then the producer

// The tap that column j of an output channel's 16 sits at in the packed
// weight: columns 8 kk + t4 and 8 kk + t4 + 4 are taps 8 kk + 2 t4, + 1.
__host__ __device__ constexpr int gm_tap(int j) { return (j & 8) + ((j & 7) < 4 ? 2 * (j & 3) : 2 * (j & 3) + 1); }

// The weight (in_channels, out_channels, taps) as (out_channels, in_channels)
// rows of 16 taps in gm_tap's order, rounded to TF32, zeros past the taps.  A
// thread a row; consecutive threads take consecutive input channels.  (A
// template, float only: compiled where named, as the file's other kernels.)
template <typename T>
__global__ void pack_multicast_weight(const T* __restrict__ weight, T* __restrict__ packed, int in_channels, int out_channels, int taps,
                                      long long rows) {
    static_assert(sizeof(T) == 4, "float");
    for (long long row = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; row < rows;
         row += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long co = row / in_channels, ci = row - co * in_channels;
        const T* const src = weight + (ci * out_channels + co) * taps;
        alignas(16) float v[16];
        if (taps == 16 && (reinterpret_cast<unsigned long long>(src) & 15) == 0) {
#pragma unroll
            for (int q = 0; q < 4; ++q) reinterpret_cast<float4*>(v)[q] = reinterpret_cast<const float4*>(src)[q];
        } else {
#pragma unroll
            for (int k = 0; k < 16; ++k) v[k] = k < taps ? src[k] : 0.0f;
        }
        alignas(16) float o[16];
#pragma unroll
        for (int j = 0; j < 16; ++j) o[j] = __uint_as_float(to_tf32(v[gm_tap(j)]));
#pragma unroll
        for (int q = 0; q < 4; ++q) reinterpret_cast<float4*>(packed + row * 16)[q] = reinterpret_cast<const float4*>(o)[q];
    }
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Where the cluster's work is: unit u = (pair, ci tile), and this block's item.
struct GmUnit {
    int ci_tile, n, l0;
    bool stores;  // the item exists (a pair's second past the last does not)
    __device__ __forceinline__ void at(int u, int ci_tiles, int items, int l_tiles, int rank) {
        const int pair = u / ci_tiles;
        ci_tile = u - pair * ci_tiles;
        const int item = 2 * pair + rank;
        stores = item < items;
        const int it = stores ? item : item - 1;
        n = it / l_tiles, l0 = (it - n * l_tiles) * GM_POSITIONS;
    }
};
#endif

template <typename Index>
__global__ void CM_CLUSTER_DIMS __launch_bounds__(GM_THREADS, 1) grad_input_multicast(
    const float* __restrict__ gy,      // (batch, out_channels, out_w): read through gy_map
    const float* __restrict__ packed,  // (out_channels, in_channels, 16), pack_multicast_weight's: read through weight_map
    float* __restrict__ grad_input,    // (batch, in_channels, in_w)
    const __grid_constant__ CmMap gy_map, const __grid_constant__ CmMap weight_map,
    int batch, int in_channels, int out_channels, int in_w, int padding, int ci_tiles) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(1024) unsigned char smem[];
    const unsigned base = shared_address(smem);
    const unsigned barriers = base + GM_STAGES * GM_STAGE;  // full, then empty, a stage
    const int rank = static_cast<int>(blockIdx.x & 1);
    const int tid = threadIdx.x;
    const int l_tiles = (in_w + GM_POSITIONS - 1) / GM_POSITIONS;
    const int items = batch * l_tiles;
    const int units = (items + 1) / 2 * ci_tiles;
    const int steps = (out_channels + GM_CO - 1) / GM_CO;
    const int clusters = gridDim.x / 2, cluster = blockIdx.x / 2;

    cm_make_barriers(barriers, GM_STAGES, 256 / 32);

    GmUnit unit;
    if (tid >= 256) {  // the producer warpgroup: one thread issues the copies
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (tid == 256) {
            int seq = 0;
            for (int u = cluster; u < units; u += clusters) {
                unit.at(u, ci_tiles, items, l_tiles, rank);
                const int lo = 8 * unit.l0 - padding;  // the stretch's first element
                for (int i = 0; i < steps; ++i, ++seq) {
                    const int step = ((u / clusters) & 1) ? steps - 1 - i : i;
                    const int s = seq % GM_STAGES;
                    const unsigned full = barriers + 8 * s, stage = base + s * GM_STAGE;
                    if (seq >= GM_STAGES) mbarrier_wait(full + 8 * GM_STAGES, (seq / GM_STAGES - 1) & 1);
                    mbarrier_expect_tx(full, GM_CO * GM_TILE + GM_WINDOW);  // both halves of the weight land here
                    mbarrier_arrive(full);
#pragma unroll
                    for (int c = 0; c < GM_CO; ++c)
                        cm_load_4d_multicast(stage + c * GM_TILE + rank * (GM_TILE / 2), &weight_map, 0, unit.ci_tile * GM_COLS + rank * (GM_COLS / 2),
                                             step * GM_CO + c, 0, full);
#pragma unroll
                    for (int b = 0; b < GM_SPANS; ++b)
                        cm_load_3d(stage + GM_CO * GM_TILE + b * GM_BOX, &gy_map, lo + b * GM_SPAN, step * GM_CO, unit.n, full);
                }
            }
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
        const int warpgroup = tid / 128, lane = tid % 32, w = (tid / 32) % 4;
        const int g = lane / 4, t4 = lane % 4;
        // this thread's float2s of channel 0 (channel 1's GM_SPAN floats on), k-step kk and half h: stretch
        // element 8 (64 warpgroup + 16 w + g + 8 h) + 8 kk + 2 t4, at its place in the boxes (bytes)
        int fragment[2][2];
#pragma unroll
        for (int kk = 0; kk < 2; ++kk)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int e = 8 * (64 * warpgroup + 16 * w + g + 8 * h) + 8 * kk + 2 * t4;
                fragment[kk][h] = GM_CO * GM_TILE + 4 * ((e / GM_SPAN) * GM_CO * GM_SPAN + e % GM_SPAN);
            }
        float acc[GM_COLS / 2];
        unsigned frag[2][GM_CO][2][4];
        int seq = 0;
        // Step i of the unit (stage `seq`) with fragment registers `f`.
        auto stage = [&](unsigned (&f)[GM_CO][2][4], int i) {
            const int s = seq % GM_STAGES;
            const unsigned stage_address = base + s * GM_STAGE;
            mbarrier_wait(barriers + 8 * s, (seq / GM_STAGES) & 1);
            const unsigned char* const window = smem + s * GM_STAGE;
#pragma unroll
            for (int c = 0; c < GM_CO; ++c)
#pragma unroll
                for (int kk = 0; kk < 2; ++kk) {
                    const float2 v0 = *reinterpret_cast<const float2*>(window + fragment[kk][0] + 4 * GM_SPAN * c);
                    const float2 v1 = *reinterpret_cast<const float2*>(window + fragment[kk][1] + 4 * GM_SPAN * c);
                    f[c][kk][0] = to_tf32(v0.x);
                    f[c][kk][1] = to_tf32(v1.x);
                    f[c][kk][2] = to_tf32(v0.y);
                    f[c][kk][3] = to_tf32(v1.y);
                }
            wgmma_fence();
#pragma unroll
            for (int c = 0; c < GM_CO; ++c)
#pragma unroll
                for (int kk = 0; kk < 2; ++kk)
                    wgmma_m64n256k8_tf32_rs(acc, f[c][kk], wgmma_descriptor_swizzle64(stage_address + c * GM_TILE + kk * 32, 512),
                                            i > 0 || c > 0 || kk > 0);
            wgmma_commit();
            wgmma_wait<1>();  // stage seq - 1's MMAs: its buffer is free
            if (seq > 0) cluster_release(barriers + 8 * (GM_STAGES + (seq - 1) % GM_STAGES), rank ^ 1, lane == 0);
            ++seq;
        };
        for (int u = cluster; u < units; u += clusters) {
            unit.at(u, ci_tiles, items, l_tiles, rank);
            int i = 0;
            for (; i + 1 < steps; i += 2) {
                stage(frag[0], i);
                stage(frag[1], i + 1);
            }
            if (i < steps) stage(frag[0], i);
            wgmma_wait<0>();
            pin(acc);
            if (!unit.stores) continue;
            // Accumulator 4 j + 2 h + e: position l0 + 64 warpgroup + 16 w + g + 8 h, input channel 8 j + 2 t4 + e
            // of the tile; a store of the warp covers 8 consecutive positions (a sector) of 4 channels.
            const int l = unit.l0 + 64 * warpgroup + 16 * w + g;
            float* const image = grad_input + static_cast<Index>(unit.n) * in_channels * in_w;
#pragma unroll
            for (int j = 0; j < GM_COLS / 8; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int ci = unit.ci_tile * GM_COLS + 8 * j + 2 * t4 + e;
                    if (ci >= in_channels) continue;
                    float* const row = image + static_cast<Index>(ci) * in_w;
#pragma unroll
                    for (int h = 0; h < 2; ++h)
                        if (l + 8 * h < in_w) row[l + 8 * h] = acc[4 * j + 2 * h + e];
                }
        }
    }
    cluster_sync();  // the other block's copies into and arrivals on this block's shared memory are done
#endif
}
