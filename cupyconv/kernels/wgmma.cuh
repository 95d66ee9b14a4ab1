// Hopper warpgroup MMA (wgmma, sm_90a) helpers shared by conv_wgmma.cu,
// conv_fold.cu and the overlap kernels: shared-memory matrix descriptors, the fences and group
// waits, and the MMA shapes the kernels issue.
#pragma once
#include "common.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// A shared-memory matrix descriptor's fields other than the start address:
// byte offsets in 16-byte units (14 bits each), base offset 0, no swizzle or
// (swizzle128) 128-byte swizzling, layout type 1 in bits 62-63: 16-byte chunk
// c of each 128-byte row r of a 1024-byte-aligned atom lies at chunk c ^ (r % 8).
__device__ __forceinline__ unsigned long long wgmma_descriptor_fields(unsigned leading, unsigned stride, bool swizzle128 = false) {
    return static_cast<unsigned long long>((leading >> 4) & 0x3FFF) << 16 | static_cast<unsigned long long>((stride >> 4) & 0x3FFF) << 32 |
           (swizzle128 ? 1ull << 62 : 0ull);
}
// The descriptor of a matrix at shared `address`, unswizzled.
__device__ __forceinline__ unsigned long long wgmma_descriptor(unsigned address, unsigned leading, unsigned stride) {
    return static_cast<unsigned long long>((address >> 4) & 0x3FFF) | wgmma_descriptor_fields(leading, stride);
}
// The descriptor of a K-major matrix at shared `address` in 64-byte swizzled
// atoms (layout type 2): 8 rows of 64 bytes, 512-byte aligned, 16-byte chunk c
// of row r at chunk c ^ (r / 2 % 4); `stride` bytes from one atom to the next
// along M or N.  A k-step inside the atom moves the start address.
__device__ __forceinline__ unsigned long long wgmma_descriptor_swizzle64(unsigned address, unsigned stride) {
    return wgmma_descriptor(address, 16, stride) | 2ull << 62;
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Ordinary shared-memory stores, made visible to the tensor cores' reads.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Starts the copy of a 16-bit x tile into K-major atoms, 128-byte swizzled:
// rows ci0 .. ci0 + ROWS - 1 of `image` (an image's channel 0 at position 0,
// rows in_w elements apart) at positions l0 .. l0 + 64 ATOMS - 1, atom h's
// channel row r holding 64 positions in 128 bytes at dst + (h ROWS + r) * 128
// (16-byte chunk c at chunk c ^ r % 8).  A warp copies 4 rows x 8 chunks, each
// row into one 128-byte line.  Zeros for channels past `channels` and
// positions past in_w (a multiple of 8: a chunk is all or nothing); `any` is
// a valid address for the copies that read nothing.  The caller commits.
template <typename T, typename Index, int ROWS, int ATOMS, int THREADS>
__device__ __forceinline__ void copy_x_atoms(unsigned char* dst, const T* image, const T* any, int ci0, int channels, int l0, int in_w) {
    static_assert(sizeof(T) == 2 && ROWS * 64 * ATOMS / 8 % THREADS == 0, "16-bit rows of 64 positions, whole tasks a thread");
#pragma unroll
    for (int i = 0; i < ROWS * 64 * ATOMS / 8 / THREADS; ++i) {
        const int task = threadIdx.x + i * THREADS;
        const int c = task % 8, row = task / 8 % ROWS, h = task / (8 * ROWS);
        const int ci = ci0 + row, l = l0 + 64 * h + 8 * c;
        const bool valid = ci < channels && l < in_w;
        cp_async16(dst + (h * ROWS + row) * 128 + (c ^ (row % 8)) * 16, valid ? image + static_cast<Index>(ci) * in_w + l : any, valid);
    }
}
// Keeps the compiler from moving accumulator accesses across the asynchronous MMAs.
template <int N>
__device__ __forceinline__ void pin(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// D (64 x 128 floats, this thread's 64) = A (64 x K) * B (K x 128) + (D if
// accumulate), both operands from shared memory, K 16 (16-bit) or 8 (TF32).
template <typename T>
__device__ __forceinline__ void wgmma_m64n128(float (&d)[64], unsigned long long a, unsigned long long b, int accumulate = 1);
// One specialization per operand type: the PTX shape and type suffix, and
// the trailing immediates (scale-a, scale-b, and for 16-bit the transpose
// flags: both operands K-major).
#define CUPYCONV_WGMMA_M64N128(TYPE, SHAPE_TYPES, IMMEDIATES)                                                    \
    template <>                                                                                                  \
    __device__ __forceinline__ void wgmma_m64n128<TYPE>(float (&d)[64], unsigned long long a, unsigned long long b, \
                                                        int accumulate) {                                        \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                               \
                     "wgmma.mma_async.sync.aligned." SHAPE_TYPES " "                                              \
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, " IMMEDIATES ";\n}\n"                                                    \
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])                                                                                       \
                     : "l"(a), "l"(b), "r"(accumulate));                                                         \
    }
CUPYCONV_WGMMA_M64N128(half_t, "m64n128k16.f32.f16.f16", "1, 1, 0, 0")
CUPYCONV_WGMMA_M64N128(bfloat16_t, "m64n128k16.f32.bf16.bf16", "1, 1, 0, 0")
CUPYCONV_WGMMA_M64N128(float, "m64n128k8.f32.tf32.tf32", "1, 1")
#undef CUPYCONV_WGMMA_M64N128
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// D (64 x 64 floats, this thread's 32) = A (64 x 8) * B (8 x 64) + (D if
// accumulate), TF32, A from registers and B K-major from shared memory.  A's
// fragment: warp w of the warpgroup holds rows 16 w.., lane (g = lane / 4,
// t4 = lane % 4) a[0] = (g, t4), a[1] = (g + 8, t4), a[2] = (g, t4 + 4),
// a[3] = (g + 8, t4 + 4), as mma.sync's m16n8k8 A.
__device__ __forceinline__ void wgmma_m64n64k8_tf32_rs(float (&d)[32], const unsigned (&a)[4], unsigned long long b, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
}
// D (64 x 128 floats, this thread's 64) = A (64 x 8) * B (8 x 128) + (D if
// accumulate), TF32, A from registers (as wgmma_m64n64k8_tf32_rs) and B
// K-major from shared memory.
__device__ __forceinline__ void wgmma_m64n128k8_tf32_rs(float (&d)[64], const unsigned (&a)[4], unsigned long long b, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
}
// D (64 x 256 floats, this thread's 128) = A (64 x 8) * B (8 x 256) + (D if
// accumulate), TF32, A from registers (as wgmma_m64n64k8_tf32_rs) and B
// K-major from shared memory.
__device__ __forceinline__ void wgmma_m64n256k8_tf32_rs(float (&d)[128], const unsigned (&a)[4], unsigned long long b, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
}
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// D (64 x N floats, this thread's N / 2) += A (64 x 16) * B (16 x N), N 32,
// 64, 128 or 256, A read M-major (imm-trans-a 1: 16-byte rows along M, one per k)
// and B K-major, both from shared memory; 16-bit operands (transposes exist
// for those only).
template <typename T, int N>
__device__ __forceinline__ void wgmma_m64k16_mn_a(float (&d)[N / 2], unsigned long long a, unsigned long long b);
// One specialization per operand type and N (the PTX type suffix; imm-trans-a 1).
#define CUPYCONV_WGMMA_M64N32K16_MN_A(TYPE, OPERAND)                                                                     \
    template <>                                                                                                          \
    __device__ __forceinline__ void wgmma_m64k16_mn_a<TYPE, 32>(float (&d)[16], unsigned long long a, unsigned long long b) { \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"                                                        \
                     "wgmma.mma_async.sync.aligned.m64n32k16.f32." OPERAND "." OPERAND " "                               \
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 1, 0;\n}\n" \
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]) \
                     : "l"(a), "l"(b), "r"(1));                                                                          \
    }
#define CUPYCONV_WGMMA_M64N64K16_MN_A(TYPE, OPERAND)                                                                     \
    template <>                                                                                                          \
    __device__ __forceinline__ void wgmma_m64k16_mn_a<TYPE, 64>(float (&d)[32], unsigned long long a, unsigned long long b) { \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                        \
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32." OPERAND "." OPERAND " "                               \
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 1, 0;\n}\n" \
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]) \
                     : "l"(a), "l"(b), "r"(1));                                                                          \
    }
#define CUPYCONV_WGMMA_M64N128K16_MN_A(TYPE, OPERAND)                                                                    \
    template <>                                                                                                          \
    __device__ __forceinline__ void wgmma_m64k16_mn_a<TYPE, 128>(float (&d)[64], unsigned long long a, unsigned long long b) { \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                        \
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32." OPERAND "." OPERAND " "                              \
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 1, 0;\n}\n" \
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) \
                     : "l"(a), "l"(b), "r"(1));                                                                          \
    }
#define CUPYCONV_WGMMA_M64N256K16_MN_A(TYPE, OPERAND)                                                                    \
    template <>                                                                                                          \
    __device__ __forceinline__ void wgmma_m64k16_mn_a<TYPE, 256>(float (&d)[128], unsigned long long a, unsigned long long b) { \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                                       \
                     "wgmma.mma_async.sync.aligned.m64n256k16.f32." OPERAND "." OPERAND " "                              \
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 1, 0;\n}\n" \
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127]) \
                     : "l"(a), "l"(b), "r"(1));                                                                          \
    }
CUPYCONV_WGMMA_M64N32K16_MN_A(half_t, "f16")
CUPYCONV_WGMMA_M64N32K16_MN_A(bfloat16_t, "bf16")
CUPYCONV_WGMMA_M64N64K16_MN_A(half_t, "f16")
CUPYCONV_WGMMA_M64N64K16_MN_A(bfloat16_t, "bf16")
CUPYCONV_WGMMA_M64N128K16_MN_A(half_t, "f16")
CUPYCONV_WGMMA_M64N128K16_MN_A(bfloat16_t, "bf16")
CUPYCONV_WGMMA_M64N256K16_MN_A(half_t, "f16")
CUPYCONV_WGMMA_M64N256K16_MN_A(bfloat16_t, "bf16")
#undef CUPYCONV_WGMMA_M64N128K16_MN_A
#undef CUPYCONV_WGMMA_M64N256K16_MN_A
#undef CUPYCONV_WGMMA_M64N32K16_MN_A
#undef CUPYCONV_WGMMA_M64N64K16_MN_A
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// D (64 x 128 floats, this thread's 64) = A (64 x 16) * B (16 x 128) + (D if
// accumulate), A K-major and B MN-major (imm-trans-b 1: 16-byte rows of 8
// consecutive columns, one per k), both from shared memory; 16-bit operands.
template <typename T>
__device__ __forceinline__ void wgmma_m64n128k16_mn_b(float (&d)[64], unsigned long long a, unsigned long long b, int accumulate);
#define CUPYCONV_WGMMA_M64N128K16_MN_B(TYPE, OPERAND)                                                                    \
    template <>                                                                                                          \
    __device__ __forceinline__ void wgmma_m64n128k16_mn_b<TYPE>(float (&d)[64], unsigned long long a, unsigned long long b, \
                                                                int accumulate) {                                        \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                        \
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32." OPERAND "." OPERAND " "                              \
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 1;\n}\n" \
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) \
                     : "l"(a), "l"(b), "r"(accumulate));                                                                 \
    }
CUPYCONV_WGMMA_M64N128K16_MN_B(half_t, "f16")
CUPYCONV_WGMMA_M64N128K16_MN_B(bfloat16_t, "bf16")
#undef CUPYCONV_WGMMA_M64N128K16_MN_B
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Transaction barriers (mbarrier) and bulk copies (sm_90).  An mbarrier's
// phase completes when its expected arrivals have arrived and the bytes it
// was told to expect (expect_tx) have landed; `address` is a shared_address.
__device__ __forceinline__ void mbarrier_init(unsigned address, unsigned arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(address), "r"(arrivals) : "memory");
}
// Makes the initialized barriers visible to the bulk copies (the async proxy).
__device__ __forceinline__ void fence_mbarrier_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// Tells the barrier's current phase to expect `bytes` more (no arrival).
__device__ __forceinline__ void mbarrier_expect_tx(unsigned address, unsigned bytes) {
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(address), "r"(bytes) : "memory");
}
// One arrival, ordered after this thread's earlier memory accesses.
__device__ __forceinline__ void mbarrier_arrive(unsigned address) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(address) : "memory");
}
// Waits until the phase of the given parity (0 for the first phase) has completed.
__device__ __forceinline__ void mbarrier_wait(unsigned address, unsigned parity) {
    asm volatile(
        "{\n.reg .pred done;\n"
        "WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT;\n}\n" ::"r"(address),
        "r"(parity)
        : "memory");
}
// One arrival on the barrier at `address` and on its twin in the other block
// of the cluster (rank `other`); where `go` (predicated inside the asm: conv_fold's
// consumers make it between their MMAs' issue and wait, where a branch
// around it makes ptxas serialize every wgmma, C7514).
__device__ __forceinline__ void cluster_release(unsigned address, unsigned other, bool go) {
    asm volatile("{\n.reg .pred p;\n.reg .b32 r;\nsetp.ne.b32 p, %2, 0;\n"
                 "@p mbarrier.arrive.shared::cta.b64 _, [%0];\n"
                 "mapa.shared::cluster.u32 r, %0, %1;\n"
                 "@p mbarrier.arrive.shared::cluster.b64 _, [r];\n}\n" ::"r"(address), "r"(other), "r"(go ? 1 : 0)
                 : "memory");
}
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// `bytes` (a multiple of 16, both addresses 16-byte aligned) global -> this
// block's shared memory; the barrier at `barrier` counts them.
__device__ __forceinline__ void bulk_copy(unsigned dst, const void* src, unsigned bytes, unsigned barrier) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst), "l"(src),
                 "r"(bytes), "r"(barrier)
                 : "memory");
}
#endif

// TMA (cp.async.bulk.tensor, sm_90) for the cluster kernels (conv_tf32_multicast,
// grad_input_multicast): a tensor map passed by value (__grid_constant__,
// written by the host's _TensorMap), clusters of two blocks, and box loads
// counted by an mbarrier's bytes.
struct __align__(64) CmMap {
    unsigned long long words[16];
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define CM_CLUSTER_DIMS __cluster_dims__(2, 1, 1)
#else
#define CM_CLUSTER_DIMS
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The `full` (one arrival, the producer's, besides the stage's bytes) and
// `empty` (every consumer warp of both blocks) mbarriers of `stages` buffers,
// 8 bytes each from `barriers`: made by thread 0 before either block of the
// cluster copies into or arrives on the other's.
__device__ __forceinline__ void cm_make_barriers(unsigned barriers, int stages, unsigned consumer_warps) {
    if (threadIdx.x == 0) {
        for (int s = 0; s < stages; ++s) {
            mbarrier_init(barriers + 8 * s, 1);
            mbarrier_init(barriers + 8 * (stages + s), 2 * consumer_warps);
        }
        fence_mbarrier_init();
    }
    cluster_sync();
}
// A box of the 4D tensor map at `map` into this block's shared memory.
__device__ __forceinline__ void cm_load_4d(unsigned dst, const void* map, int c0, int c1, int c2, int c3, unsigned barrier) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
                 "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(barrier)
                 : "memory");
}
// A box of the 4D tensor map at `map` into the same shared offset of both
// blocks of the cluster, counted by the barrier at the same offset in each.
__device__ __forceinline__ void cm_load_4d_multicast(unsigned dst, const void* map, int c0, int c1, int c2, int c3, unsigned barrier) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6], %7;\n" ::"r"(dst),
                 "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(barrier), "h"(static_cast<unsigned short>(3))
                 : "memory");
}
// A box of the 3D tensor map at `map` into the same shared offset of both
// blocks of the cluster, counted by the barrier at the same offset in each.
__device__ __forceinline__ void cm_load_3d_multicast(unsigned dst, const void* map, int c0, int c1, int c2, unsigned barrier) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3, %4}], [%5], %6;\n" ::"r"(dst),
                 "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(barrier), "h"(static_cast<unsigned short>(3))
                 : "memory");
}
// A box of the 3D tensor map at `map` into this block's shared memory.
__device__ __forceinline__ void cm_load_3d(unsigned dst, const void* map, int c0, int c1, int c2, unsigned barrier) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
                 "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(barrier)
                 : "memory");
}
#endif
