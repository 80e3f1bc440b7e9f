"""Math functions in vectorised loops (hyb.codegen.vecmath): libmvec's variants where this machine
has them, checked element by element against NumPy and against a reference of higher precision
(float32: the float64 result, rounded; float64: the long double result), special values included.

One kernel computes every one-argument function and one the two-argument ones, so that each
dtype and mode compiles two kernels."""
from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest

import hyb
from hyb.codegen import jit, vecmath
from hyb.target import CpuTarget
from benchmarks.vecmath_accuracy import BINARY, EDGES, SRC, UNARY, evaluate, special_mismatch, ulps

ULP = 4  # libmvec's documented bound, against the reference of higher precision
NUMPY_ULP = 8  # against NumPy's result, itself up to 4 ulp off (its float32 log, in the other direction)

vector_host = pytest.mark.skipif(not vecmath.variants("exp", "float32"), reason="no libmvec variants on this machine")


def arguments(dt, n, rng):
    """Special values, the neighbourhoods of the overflow and underflow boundaries, random bit
    patterns (the whole range, subnormals included) and uniform samples of several scales."""
    f32 = dt == np.float32
    it, ut = (np.int32, np.uint32) if f32 else (np.int64, np.uint64)
    fi = np.finfo(dt)
    special = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, fi.smallest_subnormal, -fi.smallest_subnormal,
               fi.tiny, -fi.tiny, fi.max, -fi.max, 1.0, -1.0, 0.5, -0.5, 2.0, np.pi, -np.pi]
    edges = EDGES[np.float32 if f32 else np.float64]
    near = [(np.array(e, dt).view(it) + np.arange(-64, 65, dtype=it)).view(dt) for e in edges]
    bits = rng.integers(0, np.iinfo(ut).max, n, dtype=ut, endpoint=True).view(dt)
    scales = [rng.uniform(-s, s, n // 4).astype(dt) for s in (1.0, 30.0, 1e4 if f32 else 1e6)]
    tiny = (rng.uniform(-1, 1, n // 8) * np.exp2(rng.uniform(-40, 0, n // 8))).astype(dt)
    return np.concatenate([np.array(special, dt), *near, bits, *scales, tiny])


def pairs(dt, n, rng):
    fi = np.finfo(dt)
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, 3.0, -3.0,
                        fi.smallest_subnormal, fi.max], dt)
    gx, gy = np.meshgrid(special, special)
    ut = np.uint32 if dt == np.float32 else np.uint64
    a = [gx.ravel(), rng.integers(0, np.iinfo(ut).max, n, dtype=ut).view(dt), rng.uniform(-100, 100, n).astype(dt)]
    b = [gy.ravel(), rng.integers(0, np.iinfo(ut).max, n, dtype=ut).view(dt), rng.uniform(-100, 100, n).astype(dt)]
    base = np.exp2(rng.uniform(0.5, 4, n)).astype(dt)  # powers around the largest finite value
    a.append(base)
    b.append((np.log(float(fi.max)) / np.log(base.astype(np.float64)) * rng.uniform(0.99, 1.01, n)).astype(dt))
    a.append(-np.exp2(rng.uniform(-5, 5, n)).astype(dt))  # negative bases, whole exponents
    b.append(np.round(rng.uniform(-40, 40, n)).astype(dt))
    return np.concatenate(a), np.concatenate(b)


def results(module, dt, n, rng):
    """{name: (arguments, compiled result)} for every function."""
    x = arguments(dt, n, rng)
    a, b = pairs(dt, n, rng)
    out = dict(zip(UNARY, (((x,), r) for r in module.unary(x))))
    out.update(zip(BINARY, (((a, b), r) for r in module.binary(a, b))))
    return out


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["float32", "float64"])
def test_every_function_within_4_ulp_with_special_values_as_numpy(dt):
    rng = np.random.default_rng(7)
    module = hyb.compile_source(SRC)
    with np.errstate(all="ignore"):
        for name, (xs, got) in results(module, dt, 8192, rng).items():
            numpy = evaluate(name, dt, xs, precise=False)
            bad = special_mismatch(got, numpy)
            assert not bad.any(), (name, [tuple(x[bad][:3]) for x in xs], got[bad][:3], numpy[bad][:3])
            precise = evaluate(name, dt, xs, precise=True)
            if name == "sigmoid":  # the formula's exp(-x) overflows to inf first (NumPy's too): 0, not tiny
                keep = ~(np.isinf(np.exp(-xs[0])))
                got, precise, numpy = got[keep], precise[keep], numpy[keep]
            worst = ulps(got, precise, dt)
            assert worst.max() <= ULP, (name, xs[0][np.argmax(worst)], worst.max())
            assert ulps(got, numpy, dt).max() <= NUMPY_ULP, name


@pytest.mark.parametrize("size", [0, 1, 7, 17, 1000])
@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["float32", "float64"])
def test_sizes_around_the_vector_width(size, dt):
    rng = np.random.default_rng(size)
    module = hyb.compile_source(SRC)
    x = rng.uniform(-20, 20, size).astype(dt)
    a, b = rng.uniform(0.1, 10, size).astype(dt), rng.uniform(-10, 10, size).astype(dt)
    got = dict(zip(UNARY, module.unary(x)))
    got.update(zip(BINARY, module.binary(a, b)))
    with np.errstate(all="ignore"):
        for name, r in got.items():
            assert r.shape == (size,)
            want = evaluate(name, dt, (a, b) if name in BINARY else (x,), precise=False)
            assert ulps(r, want, dt).max(initial=0) <= NUMPY_ULP, name


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["float32", "float64"])
def test_fast_math(dt):
    rng = np.random.default_rng(3)
    module = hyb.compile_source(SRC, fastmath=True)
    n = 2000
    x = np.concatenate([rng.uniform(-30, 30, n), rng.uniform(0.01, 100, n)]).astype(dt)  # results finite and normal
    a, b = rng.uniform(0.1, 10, n).astype(dt), rng.uniform(-10, 10, n).astype(dt)
    got = dict(zip(UNARY, module.unary(x)))
    got.update(zip(BINARY, module.binary(a, b)))
    with np.errstate(all="ignore"):
        for name, r in got.items():
            xs = (a, b) if name in BINARY else (x,)
            want = evaluate(name, dt, xs, precise=False)
            ok = np.isfinite(want)
            assert ulps(r[ok], want[ok], dt).max() <= NUMPY_ULP, name


@vector_host
def test_vector_calls_by_default_and_none_without_vector_math():
    x = np.linspace(0.5, 2.0, 1000, dtype=np.float32)
    vector = hyb.compile_source(SRC).kernels["binary"].compile(x, x)
    scalar = hyb.compile_source(SRC, schedule={"vector_math": False}).kernels["binary"].compile(x, x)
    opt = vector.inspect("llvm-opt")
    assert vecmath.calls_variants(opt) and "vv_atan2f(" in opt and "vv_powf(" in opt
    assert "_ZGV" not in scalar.inspect("llvm-opt") and "hybm_" not in scalar.inspect("llvm")
    if vector.target_machine.avx512:  # calls with a vector variant keep the 512-bit preference
        assert '"prefer-vector-width"="512"' in vector.inspect("llvm")
        assert "prefer-vector-width" not in scalar.inspect("llvm")
    np.testing.assert_allclose(vector(x, x)[1], scalar(x, x)[1], rtol=1e-6)


def test_variants_follow_the_target_features():
    if not vecmath.load():
        assert vecmath.variants("exp", "float32") == ()
        return
    host = vecmath.variants("exp", "float64")
    assert len({v.lanes for v in host}) == len(host)  # one per vector width
    avx2 = vecmath.variants("exp", "float32", frozenset({"avx2", "avx", "sse2"}))
    assert all(v.isa != "e" for v in avx2)
    assert vecmath.variants("pow", "float64", frozenset({"neon"})) == ()
    assert vecmath.variants("floor", "float32") == ()  # not a libmvec function
    for v in vecmath.variants("atan2", "float32", frozenset({"avx512f"})):
        assert v.name == f"_ZGV{v.isa}N{v.lanes}vv_atan2f"


def test_constant_and_simple_exponent_calls_stay_llvm_intrinsics():
    src = '''def k(x):
    y = output_tensor(x.shape, x.dtype)
    for i in range(x.shape[0]):
        y[i] = x[i] ** 2.0 + exp(1.5) + x[i] ** 0.5
    return y
'''
    ck = hyb.compile_source(src).kernels["k"].compile(np.ones(100, np.float32))
    assert "hybm_" not in ck.inspect("llvm")
    np.testing.assert_allclose(ck(np.full(100, 4.0, np.float32)), 16 + np.exp(np.float32(1.5)) + 2, rtol=1e-6)


def test_annotated_ir_names_the_variants():
    found = (vecmath.Variant("e", 16, "_ZGVeN16vv_powf"),)
    text = 'declare float @"hybm_powf"(float %".1", float %".2")\n'
    out = vecmath.annotate(text, {"hybm_powf": ("float32", 2, found)})
    assert '"vector-function-abi-variant"="_ZGV_LLVM_N16vv_hybm_powf(_ZGVeN16vv_powf)"' in out
    assert "declare <16 x float> @_ZGVeN16vv_powf(<16 x float>, <16 x float>)" in out
    assert "@llvm.compiler.used = appending global [1 x ptr] [ptr @_ZGVeN16vv_powf]" in out
    assert "vector-function-abi-variant" not in vecmath.without_variants(out)
    assert "float hybm_powf(float a0, float a1) { return powf(a0, a1); }" in vecmath.c_definitions(out)


@vector_host
@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_an_aot_library_calls_the_vector_functions(tmp_path):
    from hyb.codegen import aot
    x = np.linspace(-3, 3, 1001, dtype=np.float32)
    ck = hyb.compile_source(SRC).kernels["binary"].compile(x, x)
    aot.build_library(ck, tmp_path / "lib.so", "binary")
    lib = ctypes.CDLL(str(tmp_path / "lib.so"))
    p, q = np.zeros_like(x), np.zeros_like(x)
    params = (ctypes.c_void_p * 4)(x.ctypes.data, x.ctypes.data, p.ctypes.data, q.ctypes.data)
    shape = (ctypes.c_int64 * 1)(x.size)
    rc = lib.binary(4, params, (ctypes.c_int * 4)(1, 1, 1, 1), (ctypes.POINTER(ctypes.c_int64) * 4)(*[shape] * 4),
                    (ctypes.c_char_p * 4)(*[b"float32"] * 4), None, None)
    assert rc == 0
    want_p, want_q = ck(x, x)
    np.testing.assert_array_equal(p, want_p)
    np.testing.assert_array_equal(q, want_q)
    # another CPU: the same kernel with libm's calls
    generic = jit.optimize(vecmath.without_variants(ck.inspect("llvm")))
    assert vecmath.calls_variants(ck.inspect("llvm-opt")) and not vecmath.calls_variants(str(generic))
