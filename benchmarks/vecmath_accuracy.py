"""Accuracy of hyb's math functions in vectorised loops (libmvec's variants, hyb.codegen.vecmath).

For every function and dtype: the largest error in ulp against a reference of higher precision
(float32: the float64 result rounded to float32; float64: the long double result) and against
NumPy's own result, over a sweep of float32 bit patterns (every ``--stride``-th), random bit
patterns of the whole range (subnormals, huge values), uniform samples, the neighbourhoods of
the overflow and underflow boundaries, and the special values (NaN, ±inf, ±0), whose results
must be NumPy's exactly.  Prints a Markdown table.

    python -m benchmarks.vecmath_accuracy [--stride 256] [--samples 4000000] [--fastmath] [--scalar]

``--scalar`` measures the same kernels with ``schedule={"vector_math": False}`` (libm's calls).
Under ``--fastmath`` only finite arguments with finite, normal results are counted.
"""
from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import math
import time

import numpy as np

import hyb

UNARY = ("exp", "expm1", "log", "log1p", "sin", "cos", "tan", "tanh", "erf", "atan", "sqrt", "rsqrt", "sigmoid")
BINARY = ("atan2", "pow")

SRC = "def unary(x):\n" + "".join(f"    o_{f} = output_tensor(x.shape, x.dtype)\n" for f in UNARY) + \
    "    for i in range(x.shape[0]):\n" + "".join(f"        o_{f}[i] = {f}(x[i])\n" for f in UNARY) + \
    "    return " + ", ".join(f"o_{f}" for f in UNARY) + "\n" + '''
def binary(a, b):
    p = output_tensor(a.shape, a.dtype)
    q = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        p[i] = atan2(a[i], b[i])
        q[i] = a[i] ** b[i]
    return p, q
'''

_libm = ctypes.CDLL(ctypes.util.find_library("m"))
_libm.erfl.restype, _libm.erfl.argtypes = ctypes.c_longdouble, [ctypes.c_longdouble]
_ERF64 = np.frompyfunc(math.erf, 1, 1)
_ERFL = np.frompyfunc(lambda v: np.longdouble(_libm.erfl(v)), 1, 1)

# float32 arguments whose results cross a boundary: exp and expm1 overflow, exp's results turn
# subnormal and then zero, sigmoid's exp(-x) overflows; float64 the same.
EDGES = {np.float32: (88.72283, -87.33655, -103.97208, -88.72283),
         np.float64: (709.782712893384, -708.3964185322641, -745.1332191019412, -709.782712893384)}


def evaluate(name, dt, xs, precise):
    hi = (np.float64 if dt == np.float32 else np.longdouble) if precise else dt
    xs = [x.astype(hi) for x in xs]
    one = hi(1)
    with np.errstate(all="ignore"):
        if name == "erf":
            return (_ERFL(xs[0]) if hi == np.longdouble else _ERF64(xs[0].astype(np.float64))).astype(hi)
        if name == "rsqrt":
            return one / np.sqrt(xs[0])
        if name == "sigmoid":
            return one / (one + np.exp(-xs[0]))
        return {"atan": np.arctan, "atan2": np.arctan2}.get(name, getattr(np, name, None))(*xs)


def ulps(got, want, dt):
    it = np.int32 if dt == np.float32 else np.int64
    with np.errstate(all="ignore"):
        want = want.astype(dt)

    def ordinal(v):
        bits = v.view(it).astype(np.int64)
        return np.where(bits < 0, -(bits & np.int64(np.iinfo(it).max)), bits)

    d = np.abs(ordinal(got) - ordinal(want)).astype(np.float64)
    d[np.isnan(got) & np.isnan(want)] = 0
    d[np.isnan(got) != np.isnan(want)] = np.inf
    return d


def special_mismatch(got, want):
    return ((np.isnan(got) != np.isnan(want)) | (np.isinf(got) != np.isinf(want))
            | (np.isinf(got) & np.isinf(want) & (np.sign(got) != np.sign(want)))
            | ((got == 0) & (want == 0) & (np.signbit(got) != np.signbit(want))))


def unary_arguments(dt, n, stride, rng):
    f32 = dt == np.float32
    it, ut = (np.int32, np.uint32) if f32 else (np.int64, np.uint64)
    fi = np.finfo(dt)
    special = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, fi.smallest_subnormal, -fi.smallest_subnormal,
                        fi.tiny, -fi.tiny, fi.max, -fi.max, 1.0, -1.0, 0.5, -0.5, 2.0, np.pi, -np.pi], dt)
    parts = [special]
    parts += [(np.array(e, dt).view(it) + np.arange(-4096, 4097, dtype=it)).view(dt) for e in EDGES[dt]]
    if f32:  # every stride-th bit pattern, offset so that the sweep is not all round numbers
        parts.append(np.arange(12345, 1 << 32, stride, dtype=np.uint64).astype(np.uint32).view(dt))
    parts.append(rng.integers(0, np.iinfo(ut).max, n, dtype=ut, endpoint=True).view(dt))
    parts += [rng.uniform(-s, s, n // 4).astype(dt) for s in (1.0, 30.0, 1e4, 1e6)]
    parts.append((rng.uniform(-1, 1, n // 4) * np.exp2(rng.uniform(-60, 0, n // 4))).astype(dt))
    return np.concatenate(parts)


def binary_arguments(dt, n, rng):
    fi = np.finfo(dt)
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, 3.0, -3.0,
                        fi.smallest_subnormal, -fi.smallest_subnormal, fi.max, -fi.max], dt)
    gx, gy = np.meshgrid(special, special)
    ut = np.uint32 if dt == np.float32 else np.uint64
    a = [gx.ravel(), rng.integers(0, np.iinfo(ut).max, n, dtype=ut).view(dt), rng.uniform(-100, 100, n).astype(dt),
         np.exp2(rng.uniform(-20, 20, n)).astype(dt)]
    b = [gy.ravel(), rng.integers(0, np.iinfo(ut).max, n, dtype=ut).view(dt), rng.uniform(-100, 100, n).astype(dt),
         rng.uniform(-60, 60, n).astype(dt)]
    base = np.exp2(rng.uniform(0.5, 4, n)).astype(dt)  # powers near the overflow and underflow boundaries
    top = np.log(float(fi.max)) / np.log(base.astype(np.float64))
    a += [base, base]
    b += [(top * rng.uniform(0.99, 1.01, n)).astype(dt), (-top * rng.uniform(1.0, 1.2, n)).astype(dt)]
    a.append(-np.exp2(rng.uniform(-5, 5, n)).astype(dt))  # negative bases, whole exponents
    b.append(np.round(rng.uniform(-40, 40, n)).astype(dt))
    return np.concatenate(a), np.concatenate(b)


def measure(name, dt, xs, got, fastmath):
    """(max ulp vs the reference, max ulp vs NumPy, where special values differ from NumPy's)."""
    numpy = evaluate(name, dt, xs, precise=False)
    precise = evaluate(name, dt, xs, precise=True)
    keep = np.ones(got.shape, bool)
    with np.errstate(all="ignore"):
        if name == "sigmoid":  # the formula's exp(-x) overflows first (NumPy's too): 0, not the tiny true value
            keep &= ~np.isinf(np.exp(-xs[0]))
        if fastmath:  # fast-math promises nothing for NaN, infinities and subnormals
            for v in (*xs, numpy):
                keep &= np.isfinite(v) & ((v == 0) | (np.abs(v) >= np.finfo(dt).tiny))
    bad = special_mismatch(got, numpy) if not fastmath else np.zeros(got.shape, bool)
    differ = [(tuple(float(x[k]) for x in xs), float(got[k]), float(numpy[k])) for k in np.nonzero(bad)[0][:3]]
    vs_ref = ulps(got[keep], precise[keep], dt)
    vs_numpy = ulps(got[keep], numpy[keep], dt)
    return vs_ref.max(initial=0), vs_numpy.max(initial=0), differ


def chunks(arrays, size=1 << 22):
    n = arrays[0].size
    for k in range(0, n, size):
        yield [a[k:k + size] for a in arrays]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stride", type=int, default=256, help="float32 bit patterns: every STRIDE-th")
    ap.add_argument("--samples", type=int, default=1 << 21, help="random samples of each kind")
    ap.add_argument("--fastmath", action="store_true")
    ap.add_argument("--scalar", action="store_true", help="schedule={'vector_math': False}")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(2026)
    m = hyb.compile_source(SRC, fastmath=args.fastmath, schedule={"vector_math": not args.scalar})
    rows = {}
    started = time.time()
    for dt in (np.float32, np.float64):
        n = args.samples if dt == np.float32 else args.samples // 4
        x = unary_arguments(dt, n, args.stride, rng)
        worst = {f: (0.0, 0.0, []) for f in UNARY + BINARY}
        for (part,) in chunks([x]):
            for f, got in zip(UNARY, m.unary(part)):
                r = measure(f, dt, (part,), got, args.fastmath)
                w = worst[f]
                worst[f] = (max(w[0], r[0]), max(w[1], r[1]), w[2] + r[2])
        a, b = binary_arguments(dt, n, rng)
        for pa, pb in chunks([a, b]):
            for f, got in zip(BINARY, m.binary(pa, pb)):
                r = measure(f, dt, (pa, pb), got, args.fastmath)
                w = worst[f]
                worst[f] = (max(w[0], r[0]), max(w[1], r[1]), w[2] + r[2])
        for f, w in worst.items():
            rows[f, dt.__name__] = w
    mode = ("fast-math" if args.fastmath else "default") + (", vector_math off" if args.scalar else "")
    print(f"max error in ulp ({mode}; float32 vs float64 rounded, float64 vs long double; "
          f"{time.time() - started:.0f} s)\n")
    print("| function | float32 vs reference | float32 vs NumPy | float64 vs reference | float64 vs NumPy |")
    print("| --- | --- | --- | --- | --- |")
    for f in UNARY + BINARY:
        cells = []
        for dt in ("float32", "float64"):
            ref, npy, _ = rows[f, dt]
            cells += [f"{ref:g}", f"{npy:g}"]
        print(f"| {f} | " + " | ".join(cells) + " |")
    differ = {k: v[2] for k, v in rows.items() if v[2]}
    if args.fastmath:
        print("\nspecial values: not compared (fast-math assumes none)")
    else:
        print("\nspecial values (NaN, ±inf, ±0) as NumPy's: " + ("all" if not differ else f"NOT for {differ}"))


if __name__ == "__main__":
    main()
