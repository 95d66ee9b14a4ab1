// Shared pieces of cupyconv's kernels: storage types, conversions to the
// accumulator type, and the per-axis phase descriptor.
//
// No CUDA toolkit header is included, so NVRTC compiles these sources with no
// include path at all (the tests compile them on machines without a GPU).
#pragma once

// IEEE binary16 and bfloat16, stored as their 16 raw bits.  Loads widen to
// float; stores round to nearest even.
struct half_t {
    unsigned short bits;
};
struct bfloat16_t {
    unsigned short bits;
};

// ValueTraits<T>::acc is the type products are accumulated in (float for the
// 16- and 32-bit types, double for double).
template <typename T>
struct ValueTraits;

template <>
struct ValueTraits<float> {
    typedef float acc;
    static __device__ __forceinline__ float to_acc(float v) { return v; }
    static __device__ __forceinline__ float from_acc(float v) { return v; }
};

template <>
struct ValueTraits<double> {
    typedef double acc;
    static __device__ __forceinline__ double to_acc(double v) { return v; }
    static __device__ __forceinline__ double from_acc(double v) { return v; }
};

template <>
struct ValueTraits<half_t> {
    typedef float acc;
    static __device__ __forceinline__ float to_acc(half_t v) {
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
        return f;
    }
    static __device__ __forceinline__ half_t from_acc(float f) {
        half_t h;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
        return h;
    }
};

template <>
struct ValueTraits<bfloat16_t> {
    typedef float acc;
    static __device__ __forceinline__ float to_acc(bfloat16_t v) {
        return __uint_as_float(static_cast<unsigned>(v.bits) << 16);
    }
    static __device__ __forceinline__ bfloat16_t from_acc(float f) {
        bfloat16_t b;
#if __CUDA_ARCH__ >= 800
        // One instruction (round to nearest even; NaN stays NaN).
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b.bits) : "f"(f));
#else
        // Round to nearest even on the raw bits; NaN stays a quiet NaN.
        unsigned u = __float_as_uint(f);
        if ((u & 0x7fffffffu) > 0x7f800000u) {
            b.bits = static_cast<unsigned short>((u >> 16) | 0x0040u);
        } else {
            u += 0x7fffu + ((u >> 16) & 1u);
            b.bits = static_cast<unsigned short>(u >> 16);
        }
#endif
        return b;
    }
};

// How one output phase along one spatial axis maps onto a unit-step
// correlation (see DESIGN.md, "Polyphase decomposition").  Column `col`
// (0 <= col < count) of the phase writes output position
//     out_base + col * out_step
// and its tap t (0 <= t < tap_count) uses kernel index
//     tap_first + t * tap_step
// and reads input position
//     in_base + col * in_step + t * tap_in_step        (skipped outside the input).
// The forward pass has one descriptor per phase r < stride (out_step = stride,
// in_step = 1); grad_input has a single one (out_step = 1, in_step = stride).
// The host writes these as 9 consecutive int32 values in this order.
struct AxisPhase {
    int count;
    int out_base;
    int out_step;
    int in_base;
    int in_step;
    int tap_first;
    int tap_step;
    int tap_count;
    int tap_in_step;
};

// One 16-byte store to global memory (p 16-byte aligned).  Written as a
// plain uint4 store of a union or of words just loaded from shared memory,
// NVRTC emitted four 4-byte stores in some kernels (perf notes v22).  No
// memory clobber: the kernels that use it never read back what it writes.
__device__ __forceinline__ void store_global16(void* p, const uint4& v) {
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}

__device__ __forceinline__ int floor_div(int a, int b) {  // floor(a / b), b > 0
    const int q = a / b;
    return q - ((a % b != 0) && ((a < 0) != (b < 0)));
}

__device__ __forceinline__ AxisPhase load_axis_phase(const int* __restrict__ table, int index) {
    const int* p = table + 9 * index;
    AxisPhase a;
    a.count = p[0];
    a.out_base = p[1];
    a.out_step = p[2];
    a.in_base = p[3];
    a.in_step = p[4];
    a.tap_first = p[5];
    a.tap_step = p[6];
    a.tap_count = p[7];
    a.tap_in_step = p[8];
    return a;
}

// Index of a thread's i-th fragment row/column inside a tile of TILE entries
// when each thread owns FRAG of them: groups of 4 consecutive entries (one
// 16-byte shared-memory read in float) spread across the tile, so a warp's
// global stores in an epilogue stay close together.
template <int TILE, int FRAG>
__device__ __forceinline__ int fragment_index(int thread, int i) {
    if constexpr (FRAG % 4 == 0) {
        return (i / 4) * (TILE / FRAG) * 4 + thread * 4 + (i % 4);
    } else {
        return thread * FRAG + i;
    }
}

// Multiply-accumulate into the sum types the kernels use.  float x float is
// exact in double, so a double sum of float products only rounds the adds.
__device__ __forceinline__ float mac(float a, float b, float sum) { return fmaf(a, b, sum); }
__device__ __forceinline__ double mac(double a, double b, double sum) { return fma(a, b, sum); }
__device__ __forceinline__ double mac(float a, float b, double sum) {
    return fma(static_cast<double>(a), static_cast<double>(b), sum);
}

// A compensated double sum hi + lo (Ogita, Rump and Oishi's Dot2): the
// rounding error of every product (recovered by FMA) and of every addition
// (TwoSum) is carried in lo, so a float64 reduction ends about as accurate as
// if it had been computed in twice the precision and rounded once.
struct compensated {
    double hi;
    double lo;
};
__device__ __forceinline__ void two_sum(double a, double b, double& s, double& e) {
    s = a + b;
    const double bb = s - a;
    e = (a - (s - bb)) + (b - bb);
}
__device__ __forceinline__ compensated mac(double a, double b, compensated sum) {
    const double p = a * b;
    const double p_err = fma(a, b, -p);
    double s, s_err;
    two_sum(sum.hi, p, s, s_err);
    return compensated{s, sum.lo + (p_err + s_err)};
}
// Sums of terms (grad_bias): plain in double, compensated (error-free
// additions, the errors carried in lo) in compensated.
__device__ __forceinline__ double add_term(double sum, double v) { return sum + v; }
__device__ __forceinline__ compensated add_term(compensated sum, double v) {
    double s, e;
    two_sum(sum.hi, v, s, e);
    return compensated{s, sum.lo + e};
}
__device__ __forceinline__ double add_sums(double a, double b) { return a + b; }
__device__ __forceinline__ compensated add_sums(compensated a, compensated b) {
    double s, e;
    two_sum(a.hi, b.hi, s, e);
    return compensated{s, (a.lo + b.lo) + e};
}
__device__ __forceinline__ float add(float a, float b) { return a + b; }
__device__ __forceinline__ double add(double a, double b) { return a + b; }
__device__ __forceinline__ double to_double(float v) { return v; }
__device__ __forceinline__ double to_double(double v) { return v; }
__device__ __forceinline__ double to_double(compensated v) { return v.hi + v.lo; }

// The sum type of the long reductions (grad_weight): double for the 16- and
// 32-bit types, compensated double for double.
template <typename T>
struct ReductionTraits {
    typedef double sum;
};
template <>
struct ReductionTraits<double> {
    typedef compensated sum;
};

// acc[i][j] += sum_k a[k][row(i)] * b[k][col(j)] over one BK-deep slice held
// in shared memory; (ty, tx) picks the thread's TM x TN block of the tile.
template <typename Acc, typename Sum, int BM, int BN, int BK, int TM, int TN>
__device__ __forceinline__ void accumulate_slice(const Acc (&a)[BK][BM], const Acc (&b)[BK][BN], Sum (&acc)[TM][TN],
                                                 int ty, int tx) {
#pragma unroll
    for (int k = 0; k < BK; ++k) {
        Acc a_frag[TM];
        Acc b_frag[TN];
#pragma unroll
        for (int i = 0; i < TM; ++i) a_frag[i] = a[k][fragment_index<BM, TM>(ty, i)];
#pragma unroll
        for (int j = 0; j < TN; ++j) b_frag[j] = b[k][fragment_index<BN, TN>(tx, j)];
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] = mac(a_frag[i], b_frag[j], acc[i][j]);
    }
}

// accumulate_slice into a fresh partial, then one add into acc: the running
// sum takes one rounding per slice instead of one per product.
template <typename Acc, int BM, int BN, int BK, int TM, int TN>
__device__ __forceinline__ void accumulate_slice_blocked(const Acc (&a)[BK][BM], const Acc (&b)[BK][BN],
                                                         Acc (&acc)[TM][TN], int ty, int tx) {
    Acc part[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) part[i][j] = Acc(0);
    accumulate_slice<Acc, Acc, BM, BN, BK, TM, TN>(a, b, part, ty, tx);
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = add(acc[i][j], part[i][j]);
}

// Stages rows x len values with THREADS threads: load(row, j, value) for
// every pair (raw T, left zero where it loads nothing), then store(row, j,
// value converted to its accumulator type); each thread issues STAGE_BATCH
// loads before it converts or stores any, so that their latencies overlap.
constexpr int STAGE_BATCH = 8;
template <int THREADS, typename T, typename Load, typename Store>
__device__ __forceinline__ void stage_rows(int rows, int len, Load load, Store store) {
    const int total = rows * len;
    int row = threadIdx.x / len, j = threadIdx.x % len;
    for (int e = threadIdx.x; e < total; e += STAGE_BATCH * THREADS) {
        T v[STAGE_BATCH];
        int at_row[STAGE_BATCH], at_j[STAGE_BATCH];
#pragma unroll
        for (int b = 0; b < STAGE_BATCH; ++b) {
            at_row[b] = row, at_j[b] = j;
            v[b] = T{};
            if (e + b * THREADS < total) load(row, j, v[b]);
            for (j += THREADS; j >= len; j -= len) ++row;
        }
#pragma unroll
        for (int b = 0; b < STAGE_BATCH; ++b) {
            if (e + b * THREADS < total) store(at_row[b], at_j[b], ValueTraits<T>::to_acc(v[b]));
        }
    }
}
