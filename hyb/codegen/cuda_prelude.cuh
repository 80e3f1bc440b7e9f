// Helpers every generated CUDA C file starts with (hyb's CUDA back end, hyb/codegen/cuda.py).
#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef long long hyb_i64;

__device__ __forceinline__ float hyb_h2f(__half x) { return __half2float(x); }
__device__ __forceinline__ __half hyb_f2h(float x) { return __float2half_rn(x); }
__device__ __forceinline__ __half hyb_hbits(unsigned short b) { return __ushort_as_half(b); }

/* bfloat16 and its bits (hyb.codegen.legalise converts it with integer operations on them). */
__device__ __forceinline__ unsigned short hyb_bf2bits(__nv_bfloat16 x) { return __bfloat16_as_ushort(x); }
__device__ __forceinline__ __nv_bfloat16 hyb_bits2bf(unsigned short b) { return __ushort_as_bfloat16(b); }

/* float64 -> float32 rounding to odd, then to float16: one rounding in all (as the CPU path). */
__device__ __forceinline__ __half hyb_d2h(double v) {
    float f = (float)v;
    bool inexact = ((double)f != v) && (fabsf(f) < __int_as_float(0x7f800000));
    return __float2half_rn(__int_as_float(__float_as_int(f) | (inexact ? 1 : 0)));
}

/* a ** n wrapping, n >= 0 (hyb.codegen.legalise's ipow; it lowers negative exponents around it). */
template <typename T, typename U> __device__ __forceinline__ T hyb_ipow(T a, T n) {
    U acc = 1, base = (U)a, rest = (U)n;
    while (rest != 0) {
        if (rest & 1) acc = (U)(acc * base);
        base = (U)(base * base);
        rest >>= 1;
    }
    return (T)acc;
}

/* cvttsd2si: truncation toward zero, or the minimum of the type where the value does not fit. */
template <typename F> __device__ __forceinline__ int hyb_f2i32(F v) {
    return (v >= (F)-2147483648.0 && v < (F)2147483648.0) ? (int)v : (int)0x80000000u;
}
template <typename F> __device__ __forceinline__ long long hyb_f2i64(F v) {
    return (v >= (F)-9223372036854775808.0 && v < (F)9223372036854775808.0) ? (long long)v
                                                                             : (long long)0x8000000000000000ull;
}
template <typename F> __device__ __forceinline__ unsigned long long hyb_f2u64(F v) {
    if (v >= (F)9223372036854775808.0)
        return v < (F)18446744073709551616.0 ? (unsigned long long)v : 0ull;
    return (unsigned long long)hyb_f2i64(v);
}

template <typename F> __device__ __forceinline__ F hyb_sign(F x) {
    return x > (F)0 ? (F)1 : (x < (F)0 ? (F)-1 : (x == (F)0 ? (F)0 : x));
}

/* The first failing bounds check records index, axis and its site number. */
__device__ __forceinline__ void hyb_fail(volatile long long *err, long long v, long long axis, long long site) {
    if (atomicCAS((unsigned long long *)&err[2], 0ull, (unsigned long long)site) == 0ull) {
        err[0] = v;
        err[1] = axis;
    }
}

/* Loop-IR arithmetic (isl's operations on counters). */
__device__ __forceinline__ long long hyb_floord(long long a, long long b) {
    long long q = a / b, r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
}
__device__ __forceinline__ long long hyb_min(long long a, long long b) { return a < b ? a : b; }
__device__ __forceinline__ long long hyb_max(long long a, long long b) { return a > b ? a : b; }
