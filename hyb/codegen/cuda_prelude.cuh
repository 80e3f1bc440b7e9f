// Helpers every generated CUDA C file starts with (hyb's CUDA back end, hyb/codegen/cuda.py).
#include <cuda_fp16.h>

typedef long long hyb_i64;

__device__ __forceinline__ float hyb_h2f(__half x) { return __half2float(x); }
__device__ __forceinline__ __half hyb_f2h(float x) { return __float2half_rn(x); }
__device__ __forceinline__ __half hyb_hbits(unsigned short b) { return __ushort_as_half(b); }

/* float64 -> float32 rounding to odd, then to float16: one rounding in all (as the CPU path). */
__device__ __forceinline__ __half hyb_d2h(double v) {
    float f = (float)v;
    bool inexact = ((double)f != v) && (fabsf(f) < __int_as_float(0x7f800000));
    return __float2half_rn(__int_as_float(__float_as_int(f) | (inexact ? 1 : 0)));
}

/* NumPy's floor_divide and remainder for integers; a zero divisor gives 0, MIN // -1 wraps. */
template <typename T, typename U> __device__ __forceinline__ T hyb_sfloordiv(T a, T b) {
    if (b == 0) return (T)0;
    if (b == (T)-1) return (T)((U)0 - (U)a);
    T q = (T)(a / b);
    T r = (T)(a % b);
    if (r != 0 && ((r < 0) != (b < 0))) q = (T)((U)q - (U)1);
    return q;
}
template <typename T, typename U> __device__ __forceinline__ T hyb_sfloormod(T a, T b) {
    if (b == 0 || b == (T)-1) return (T)0;
    T r = (T)(a % b);
    if (r != 0 && ((r < 0) != (b < 0))) r = (T)((U)r + (U)b);
    return r;
}
template <typename T> __device__ __forceinline__ T hyb_ufloordiv(T a, T b) { return b == 0 ? (T)0 : (T)(a / b); }
template <typename T> __device__ __forceinline__ T hyb_ufloormod(T a, T b) { return b == 0 ? (T)0 : (T)(a % b); }

/* a ** n wrapping; a negative n gives 1 / a**-n truncated toward zero. */
template <typename T, typename U> __device__ __forceinline__ T hyb_ipow(T a, T n, bool is_unsigned) {
    U acc = 1, base = (U)a, rest = (!is_unsigned && n < 0) ? (U)0 : (U)n;
    while (rest != 0) {
        if (rest & 1) acc = (U)(acc * base);
        base = (U)(base * base);
        rest >>= 1;
    }
    if (is_unsigned || !(n < 0)) return (T)acc;
    if (a == (T)1) return (T)1;
    if (a == (T)-1) return (n & 1) ? (T)-1 : (T)1;
    return (T)0;
}

/* NumPy's floor_divide / remainder for floats (npy_divmod). */
template <typename F> __device__ __forceinline__ F hyb_fremainder(F a, F b) {
    F mod = fmod(a, b);
    if (b == (F)0) return mod;
    bool nonzero = !(mod == (F)0);
    bool fix = nonzero && ((b < (F)0) != (mod < (F)0));
    F m = fix ? mod + b : mod;
    return nonzero ? m : copysign((F)0, b);
}
template <typename F> __device__ __forceinline__ F hyb_ffloordiv(F a, F b) {
    F mod = fmod(a, b);
    F quotient = a / b;
    if (b == (F)0) return quotient;
    bool nonzero = !(mod == (F)0);
    bool fix = nonzero && ((b < (F)0) != (mod < (F)0));
    F div = (a - mod) / b;
    if (fix) div = div - (F)1;
    F fl = floor(div);
    if (div - fl > (F)0.5) fl = fl + (F)1;
    return (div != (F)0) ? fl : copysign((F)0, quotient);
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
template <typename F> __device__ __forceinline__ F hyb_fmax(F x, F y, bool ge) {
    bool beats = ge ? (x >= y) : (x > y);
    return (beats || x != x) ? x : y;
}
template <typename F> __device__ __forceinline__ F hyb_fmin(F x, F y, bool le) {
    bool beats = le ? (x <= y) : (x < y);
    return (beats || x != x) ? x : y;
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
