// Tensor-core math on staged slices (mma.sync, sm_80 and later), shared by
// conv_gemm.cu (forward and grad_input), conv_window.cu, grad_weight.cu and
// grad_weight_window.cu.
#pragma once
#include "common.cuh"

// Shared-memory staging: cp.async copies and ldmatrix loads (sm_80 and later).
__device__ __forceinline__ unsigned shared_address(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// 16 bytes global -> shared (a shared_address), asynchronously; zeros where
// !valid (src-size 0).
__device__ __forceinline__ void cp_async16_to(unsigned dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) { cp_async16_to(shared_address(dst), src, valid); }
// 16 bytes global -> shared through L1 (cp.async.ca); zeros where !valid.
// Where the lanes of one copy split a 32-byte sector between shared-memory
// destinations that are not contiguous (grad_input_overlap's float planes),
// .cg fetched the sector from L2 once per lane (50% more L2 -> SM bytes,
// perf notes v40); through L1 the second lane's read hits the line.
__device__ __forceinline__ void cp_async16_l1(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
// The same where the source is known to be inside its array (no src-size operand).
__device__ __forceinline__ void cp_async16_l1_inside(void* dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n" ::"r"(shared_address(dst)), "l"(src) : "memory");
}
// 8 or 4 bytes global -> shared (cp.async.ca: .cg takes only 16-byte copies).
template <int BYTES>
__device__ __forceinline__ void cp_async_small(void* dst, const void* src, bool valid) {
    static_assert(BYTES == 8 || BYTES == 4, "cp.async.ca copies 4, 8 or 16 bytes");
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(shared_address(dst)), "l"(src), "n"(BYTES),
                 "r"(valid ? BYTES : 0)
                 : "memory");
}
// 16, 8 or 4 bytes global -> shared where the source is known to be inside
// its array: no src-size operand, so no predicate per copy in the SASS.
template <int BYTES>
__device__ __forceinline__ void cp_async_inside(void* dst, const void* src) {
    static_assert(BYTES == 16 || BYTES == 8 || BYTES == 4, "cp.async copies 4, 8 or 16 bytes");
    if constexpr (BYTES == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared_address(dst)), "l"(src) : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(shared_address(dst)), "l"(src), "n"(BYTES) : "memory");
}
// An arrival on the mbarrier at shared_address `barrier` once every cp.async
// this thread has issued so far has landed (.noinc: the barrier's count
// includes it).  The consumer fences (fence.proxy.async) after its wait
// before the tensor cores read the data.
__device__ __forceinline__ void cp_async_arrive_noinc(unsigned barrier) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(barrier) : "memory");
}
// Wait until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(p)));
}
// The transposed form: each lane's registers hold a column of the 8x8
// matrices, so rows of k (one per address) with 8 consecutive n values give
// mma's B fragment.
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(p)));
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// ldmatrix's counterpart (sm_90): lane 8i + j gives the address of row j of
// matrix i, which gets the 16 bytes the lanes' registers r[i] hold in
// ldmatrix's layout (lane t: row t / 4, elements 2 (t % 4) and + 1).  After
// ldmatrix_x4_trans from other rows it stores the four 8x8 blocks transposed.
__device__ __forceinline__ void stmatrix_x4(void* p, const unsigned (&r)[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(shared_address(p)), "r"(r[0]), "r"(r[1]), "r"(r[2]),
                 "r"(r[3])
                 : "memory");
}
// The transposed form: lane t's register r[i] holds elements (t / 4, 2 (t %
// 4)) and (t / 4, 2 (t % 4) + 1) of matrix i; row j of the stored matrix
// (at the address lane 8i + j gives) gets its column j.
__device__ __forceinline__ void stmatrix_x4_trans(void* p, const unsigned (&r)[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(shared_address(p)), "r"(r[0]), "r"(r[1]),
                 "r"(r[2]), "r"(r[3])
                 : "memory");
}
#endif

// 4 or 16 bytes global -> shared (a shared_address); zeros where !valid.
template <int BYTES>
__device__ __forceinline__ void cp_async_to(unsigned dst, const void* src, bool valid) {
    if constexpr (BYTES == 16) {
        cp_async16_to(dst, src, valid);
    } else {
        static_assert(BYTES == 4, "4 or 16 bytes");
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0) : "memory");
    }
}

// ROWS rows of one column of a staged window: row r from src + r * src_row
// (global, elements) to dst + r * dst_row (shared, bytes), BYTES each; zeros
// where !inside.  FULL: all ROWS rows exist; otherwise rows r >= rows are
// zeros (and their addresses are not formed).  The caller passes a src that
// is a valid address for every existing row even where !inside.  A copy is
// the copy and two pointer steps: a list of (row, position) tasks with the
// bounds and 64-bit address worked out per copy cost about 40 instructions a
// copy (grad_input_phase's SASS).
template <int BYTES, int ROWS, bool FULL, typename T, typename Index>
__device__ __forceinline__ void copy_window_column(unsigned dst, int dst_row, const T* src, Index src_row, bool inside, int rows) {
    const T* at = src;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        if (FULL || r < rows) {
            cp_async_to<BYTES>(dst, at, inside);
        } else {
            cp_async_to<BYTES>(dst, src, false);  // row 0's address, nothing read
        }
        dst += dst_row;
        at += src_row;
    }
}

// VB bytes global -> shared: 16 through L2 only (.cg), 8 through L1 (.ca).
template <int VB>
__device__ __forceinline__ void cp_async_vector(void* dst, const void* src, bool valid) {
    if constexpr (VB == 16) {
        cp_async16(dst, src, valid);
    } else {
        cp_async_small<VB>(dst, src, valid);
    }
}
// Byte offset of byte `b` of row `row` in shared rows of ROW bytes: the low
// three bits of the 16-byte chunk index are XOR-ed with row % 8, so the 8
// rows one ldmatrix phase reads (same logical chunk) fall in 8 distinct bank
// groups.  Scalar TF32 B reads of a [k][n] tile (rows k0 + lane % 4, columns
// n0 + lane / 4) need 2 * (row % 4) instead (SCALAR_B): then their 4 rows x 2
// chunks are 8 bank groups.
template <int ROW, bool SCALAR_B = false>
__device__ __forceinline__ int swizzled_offset(int row, int b) {
    const int chunk = b >> 4;
    const int key = SCALAR_B ? (row & 3) << 1 : row & 7;
    if constexpr (ROW == 128) {  // 8 chunks: no high chunk bits to keep
        return row * ROW + (((chunk ^ key) & 7) << 4) + (b & 15);
    } else {
        return row * ROW + (((chunk ^ key) & 7) | (chunk & ~7)) * 16 + (b & 15);
    }
}

// Tensor-core operand registers from float values (which hold exact T values).
// A float rounded to TF32 (to nearest; the low 13 bits of the result are 0).
// sm_90 has an instruction for it (cvt.rn, ties to even: F2FP.TF32); on
// sm_80 cvt.rna (ties away) is emulated with 3 instructions (a NaN/Inf test,
// an add of half a TF32 ulp, a mask), in every operand of every k-step.
__device__ __forceinline__ unsigned to_tf32(float v) {
    unsigned r;
#if __CUDA_ARCH__ >= 900
    asm("cvt.rn.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
#else
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
#endif
    return r;
}
// Four floats in shared memory (16 bytes) rounded to TF32 in place, for an
// operand the tensor cores read from there (they truncate a float's low bits).
__device__ __forceinline__ void round_tf32_in_place(void* p) {
    uint4* const q = reinterpret_cast<uint4*>(p);
    uint4 v = *q;
    v.x = to_tf32(__uint_as_float(v.x));
    v.y = to_tf32(__uint_as_float(v.y));
    v.z = to_tf32(__uint_as_float(v.z));
    v.w = to_tf32(__uint_as_float(v.w));
    *q = v;
}
// Two values in one register, `first` in the low half (the lower k index).
template <typename T>
__device__ __forceinline__ unsigned pack2(float first, float second);
template <>
__device__ __forceinline__ unsigned pack2<half_t>(float first, float second) {
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(second), "f"(first));
    return r;
}
template <>
__device__ __forceinline__ unsigned pack2<bfloat16_t>(float first, float second) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(second), "f"(first));
    return r;
}

__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <typename T>
__device__ __forceinline__ void mma_16bit(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]);
template <>
__device__ __forceinline__ void mma_16bit<half_t>(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <>
__device__ __forceinline__ void mma_16bit<bfloat16_t>(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// One mma.sync per type on 32 bytes of k (m16n8k8 TF32, m16n8k16 FP16/BF16),
// over operands made once per k-step from the raw registers ldmatrix (or a
// load) gives: make(A&, raw[4]) and make(B&, raw[2]), then mma(d, a, b) for
// each fragment pair.
template <typename T, int PASSES = 1>
struct MmaOp {  // one product per pair: FP16/BF16 m16n8k16 on the values as they are, or TF32
                // m16n8k8 on floats rounded to nearest (not the hardware's truncation)
    static_assert(PASSES == 1, "one pass, except MmaOp<float, 3>");
    static constexpr bool TF32 = sizeof(T) == 4;
    struct A {
        unsigned r[4];
    };
    struct B {
        unsigned r[2];
    };
    static __device__ __forceinline__ unsigned operand(unsigned raw) { return TF32 ? to_tf32(__uint_as_float(raw)) : raw; }
    static __device__ __forceinline__ void make(A& a, const unsigned (&raw)[4]) {
#pragma unroll
        for (int e = 0; e < 4; ++e) a.r[e] = operand(raw[e]);
    }
    static __device__ __forceinline__ void make(B& b, const unsigned (&raw)[2]) {
#pragma unroll
        for (int e = 0; e < 2; ++e) b.r[e] = operand(raw[e]);
    }
    static __device__ __forceinline__ void mma(float (&d)[4], const A& a, const B& b) {
        if constexpr (TF32) {
            mma_tf32(d, a.r, b.r);
        } else {
            mma_16bit<T>(d, a.r, b.r);
        }
    }
};
// float32-accurate products on TF32 tensor cores (3xTF32): each float is
// split into a TF32 high part and the TF32-rounded remainder (what is left
// is at most 2^-22 of it), and a*b is taken as lo_a*hi_b + hi_a*lo_b +
// hi_a*hi_b (lo_a*lo_b is at most 2^-22 of the product).
// The tensor core adds into its accumulator with truncation, which biases a
// long running sum toward zero (error growing with the reduction length:
// 3e-5 at 4096 terms, 5e-4 at 65536, scripts/tf32x3_probe.py on an H100).
// So each k-step's three products go into a fresh accumulator, which is
// then added to the running sum with an ordinary (round-to-nearest) FADD:
// the error then grows like in-order FFMA's (1.4e-7 at 64 terms, 4e-7 at
// 4096, against cuBLAS SGEMM's 1.1e-7 and 2e-7).
template <>
struct MmaOp<float, 3> {
    struct A {
        unsigned hi[4], lo[4];
    };
    struct B {
        unsigned hi[2], lo[2];
    };
    static __device__ __forceinline__ void split(unsigned raw, unsigned& hi, unsigned& lo) {
        const float v = __uint_as_float(raw);
        hi = to_tf32(v);
        lo = to_tf32(v - __uint_as_float(hi));
    }
    static __device__ __forceinline__ void make(A& a, const unsigned (&raw)[4]) {
#pragma unroll
        for (int e = 0; e < 4; ++e) split(raw[e], a.hi[e], a.lo[e]);
    }
    static __device__ __forceinline__ void make(B& b, const unsigned (&raw)[2]) {
#pragma unroll
        for (int e = 0; e < 2; ++e) split(raw[e], b.hi[e], b.lo[e]);
    }
    static __device__ __forceinline__ void mma(float (&d)[4], const A& a, const B& b) {
        float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        mma_tf32(part, a.lo, b.hi);
        mma_tf32(part, a.hi, b.lo);
        mma_tf32(part, a.hi, b.hi);
#pragma unroll
        for (int e = 0; e < 4; ++e) d[e] += part[e];
    }
};

// A multi-stage cp.async pipeline over `count` stages of a reduction:
// load(stage) issues the copies of the next stage into buffer `stage` (calls
// come in reduction order), compute(stage) consumes buffer `stage`.  Each
// iteration waits for its own stage, syncs (which also frees the buffer the
// previous iteration read), and only then refills that buffer.
template <int STAGES, typename Load, typename Compute>
__device__ __forceinline__ void cp_async_pipeline(int count, Load&& load, Compute&& compute) {
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < count) load(s);
        cp_async_commit();
    }
    for (int kt = 0; kt < count; ++kt) {
        cp_async_wait_group<STAGES - 2>();
        __syncthreads();
        if (kt + STAGES - 1 < count) load((kt + STAGES - 1) % STAGES);
        cp_async_commit();
        compute(kt % STAGES);
    }
    cp_async_wait_group<0>();
}

// A fragments of MI m16 row blocks from `rows`, ROW-byte shared rows holding
// k contiguous (swizzled_offset), for k-step `ks` (32 bytes): one ldmatrix.x4
// each, made into Op's operands.
template <typename Op, int ROW, int MI>
__device__ __forceinline__ void load_a_fragments(typename Op::A (&af)[MI], const unsigned char* rows, int first_row, int ks,
                                                 int lane) {
#pragma unroll
    for (int i = 0; i < MI; ++i) {
        const int row = first_row + i * 16 + (lane & 15);
        unsigned raw[4];
        ldmatrix_x4(raw, rows + swizzled_offset<ROW>(row, (2 * ks + (lane >> 4)) * 16));
        Op::make(af[i], raw);
    }
}

// Warp tiles of m16n8 fragments.  Fragment layouts (PTX ISA, mma.m16n8k8 /
// m16n8k16; g = lane / 4, t = lane % 4):
//   A (row-major 16 x K):  rows g and g + 8; k = t and t + 4 (tf32), or the
//                          pairs 2t, 2t + 1 and 2t + 8, 2t + 9 (16-bit)
//   B (col-major K x 8):   column g; k as for A's columns
//   C (16 x 8, float):     rows g and g + 8, columns 2t and 2t + 1
// Rows of the staged slices are padded by 4 floats, so that the 32 lanes'
// fragment reads (row stride 4 words apart in banks) never conflict.
template <typename T, int BM_, int BN_, int BK_, int WARPS_M, int WARPS_N, int PASSES>
struct MmaMath {
    typedef float Acc;
    static constexpr int BM = BM_, BN = BN_, BK = BK_, PAD = 4;
    static constexpr int THREADS = 32 * WARPS_M * WARPS_N;
    static constexpr bool TF32 = sizeof(T) == 4;
    static constexpr int KSTEP = TF32 ? 8 : 16;
    static constexpr int WARP_M = BM / WARPS_M, WARP_N = BN / WARPS_N;
    static constexpr int MI = WARP_M / 16, NI = WARP_N / 8;
    static_assert(sizeof(T) == 4 || sizeof(T) == 2, "tensor cores here take float, half or bfloat16");
    static_assert(TF32 || PASSES == 1, "3xTF32 is for float");
    typedef MmaOp<T, PASSES> Op;  // PASSES 3: 3xTF32
    static_assert(BK % KSTEP == 0 && WARP_M % 16 == 0 && WARP_N % 8 == 0, "tile must split into mma shapes");
    struct Frag {
        float v[MI][NI][4];
    };
    static __device__ __forceinline__ void zero(Frag& f) {
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) f.v[i][j][e] = 0.0f;
    }
    static __device__ __forceinline__ void slice(const float (&a)[BK][BM + PAD], const float (&b)[BK][BN + PAD], Frag& f,
                                                 int tid) {
        const int warp = tid / 32, lane = tid % 32;
        const int m0 = (warp / WARPS_N) * WARP_M + lane / 4;
        const int n0 = (warp % WARPS_N) * WARP_N + lane / 4;
        const int t = lane % 4;
#pragma unroll
        for (int k0 = 0; k0 < BK; k0 += KSTEP) {
            // Raw operand registers (float bits, or two 16-bit values), made
            // into MmaOp's operands once per k-step.
            typename Op::A af[MI];
            typename Op::B bf[NI];
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                const int m = m0 + i * 16;
                unsigned raw[4];
                if constexpr (TF32) {
                    const float v[4] = {a[k0 + t][m], a[k0 + t][m + 8], a[k0 + t + 4][m], a[k0 + t + 4][m + 8]};
#pragma unroll
                    for (int e = 0; e < 4; ++e) raw[e] = __float_as_uint(v[e]);
                } else {
                    raw[0] = pack2<T>(a[k0 + 2 * t][m], a[k0 + 2 * t + 1][m]);
                    raw[1] = pack2<T>(a[k0 + 2 * t][m + 8], a[k0 + 2 * t + 1][m + 8]);
                    raw[2] = pack2<T>(a[k0 + 2 * t + 8][m], a[k0 + 2 * t + 9][m]);
                    raw[3] = pack2<T>(a[k0 + 2 * t + 8][m + 8], a[k0 + 2 * t + 9][m + 8]);
                }
                Op::make(af[i], raw);
            }
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                const int n = n0 + j * 8;
                unsigned raw[2];
                if constexpr (TF32) {
                    raw[0] = __float_as_uint(b[k0 + t][n]);
                    raw[1] = __float_as_uint(b[k0 + t + 4][n]);
                } else {
                    raw[0] = pack2<T>(b[k0 + 2 * t][n], b[k0 + 2 * t + 1][n]);
                    raw[1] = pack2<T>(b[k0 + 2 * t + 8][n], b[k0 + 2 * t + 9][n]);
                }
                Op::make(bf[j], raw);
            }
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j) Op::mma(f.v[i][j], af[i], bf[j]);
        }
    }
    // f(row, column, value) for each accumulator of the thread, in the tile's coordinates.
    template <typename F>
    static __device__ __forceinline__ void each(const Frag& frag, int tid, F f) {
        const int warp = tid / 32, lane = tid % 32;
        const int m0 = (warp / WARPS_N) * WARP_M + lane / 4;
        const int n0 = (warp % WARPS_N) * WARP_N + 2 * (lane % 4);
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) f(m0 + i * 16 + (e / 2) * 8, n0 + j * 8 + e % 2, frag.v[i][j][e]);
    }
    template <int STAGE_ROWS>
    static __device__ __forceinline__ void stage(const Frag& f, float (&out)[STAGE_ROWS][BN + PAD], int r0, int tid) {
        const int warp = tid / 32, lane = tid % 32;
        const int m0 = (warp / WARPS_N) * WARP_M + lane / 4;
        const int n0 = (warp % WARPS_N) * WARP_N + 2 * (lane % 4);
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int row = m0 + i * 16 + half * 8 - r0;
                if (row >= 0 && row < STAGE_ROWS) {
#pragma unroll
                    for (int j = 0; j < NI; ++j) {
                        out[row][n0 + j * 8] = f.v[i][j][2 * half];
                        out[row][n0 + j * 8 + 1] = f.v[i][j][2 * half + 1];
                    }
                }
            }
    }
};
