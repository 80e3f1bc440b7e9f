"""bfloat16: compiled == emulate == NumPy with ml_dtypes, bit for bit where the arithmetic is exact.

bfloat16 is computed in float32 and rounded to nearest even after every operation, as float16
is; its conversions are integer operations on its bits (hyb.codegen.legalise).  These tests
cover what is particular to it: rounding ties, overflow to inf, NaN, subnormals, conversions
from and to every dtype, the promotion rules where NumPy has none, reductions, intrinsics,
gradients, arguments, and the error without ml_dtypes.  (tests/dsl/test_dtypes.py and
test_intrinsics.py run their every-dtype suites on it too.)
"""
from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest

import hyb
from hyb.dsl import types
from hyb.errors import HybridDependencyError, HybridNameError, HybridTypeError
from tests.dsl.test_intrinsics import numpy

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = np.dtype(ml_dtypes.bfloat16)
SIZES = (0, 1, 7, 33)
OTHERS = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
          "float64"]


def same(got, want, what=""):
    """Equal in dtype and value (NaN equal to NaN, the sign of zero compared too)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}"
    g = got.astype(np.float64) if got.dtype == BF16 else got
    w = want.astype(np.float64) if want.dtype == BF16 else want
    np.testing.assert_array_equal(g, w, err_msg=what)
    if types.is_float_dtype(got.dtype):
        zero = w == 0
        np.testing.assert_array_equal(np.signbit(g[zero]), np.signbit(w[zero]), err_msg=what + " (sign of zero)")


def same_bits(got, want, what=""):
    """The same 16-bit patterns (NaNs included: their sign and payload too)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype == BF16, what
    bad = got.view(np.uint16) != want.view(np.uint16)
    assert not bad.any(), f"{what}: {[hex(x) for x in got.view(np.uint16)[bad][:5]]} != " \
                          f"{[hex(x) for x in want.view(np.uint16)[bad][:5]]}"


def within_ulp(got, want, ulps, what=""):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, what
    finite = np.isfinite(want)
    g, w = got.astype(np.float64), want.astype(np.float64)
    np.testing.assert_array_equal(g[~finite], w[~finite], err_msg=what)
    tol = ulps * np.spacing(np.abs(want[finite])).astype(np.float64)
    bad = np.abs(g[finite] - w[finite]) > tol
    assert not bad.any(), f"{what}: {g[finite][bad][:5]} != {w[finite][bad][:5]} (more than {ulps} ulp)"


def both(kernel, *args):
    """Compiled and emulated results, each a tuple."""
    as_tuple = (lambda r: r if isinstance(r, tuple) else (r,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = as_tuple(kernel(*[np.copy(a) if isinstance(a, np.ndarray) else a for a in args]))
        emu = as_tuple(kernel.emulate(*[np.copy(a) if isinstance(a, np.ndarray) else a for a in args]))
    return got, emu


def f32_bits(*words):
    return np.array(words, np.uint32).view(np.float32)


# ------------------------------------------------------------------ storing float32 into bfloat16
STORE = hyb.compile_source('''
def store(x):
    c = output_tensor(x.shape, "bfloat16")
    for i in range(x.shape[0]):
        c[i] = x[i]
    return c
''').store


def test_rounding_ties_go_to_even():
    # float32 values exactly halfway between two neighbouring bfloat16 values
    x = np.array([1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, -(1 + 2.0 ** -8), 256 + 1, 256 + 3, 2.0 ** -126 * (1 + 2.0 ** -8),
                  3 * 2.0 ** -135, 2.0 ** -134], np.float32)
    want = np.array([1.0, 1 + 2.0 ** -6, -1.0, 256, 260, 2.0 ** -126, 2.0 ** -133, 0.0], np.float64)
    got, emu = both(STORE, x)
    for r in got + emu:
        assert r.dtype == BF16
        np.testing.assert_array_equal(r.astype(np.float64), want)
    # just above and below the halfway point round away from it
    x = np.nextafter(np.float32(1 + 2.0 ** -8), np.float32([2, 0]))
    got, emu = both(STORE, x)
    for r in got + emu:
        np.testing.assert_array_equal(r.astype(np.float64), [1 + 2.0 ** -7, 1.0])


def test_overflow_inf_and_nan():
    big = np.finfo(np.float32).max
    bf_max = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    x = np.array([big, -big, bf_max, np.float32(bf_max) * np.float32(1.00390625), np.inf, -np.inf, np.nan, -np.nan],
                 np.float32)
    got, emu = both(STORE, x)
    for r in got + emu:
        same_bits(r, numpy(x.astype, BF16), "float32 -> bfloat16")
    np.testing.assert_array_equal(got[0].astype(np.float64)[:6], [np.inf, -np.inf, bf_max, np.inf, np.inf, -np.inf])
    # every NaN stays NaN: quiet, its sign kept (ml_dtypes' 0x7fc0 / 0xffc0), whatever its payload
    nans = f32_bits(0x7F800001, 0xFF800001, 0x7FC00000, 0x7FFFFFFF, 0xFFFFFFFF, 0x7F812345, 0x7FBFFFFF)
    got, emu = both(STORE, nans)
    for r in got + emu:
        assert np.isnan(r.astype(np.float32)).all()
        same_bits(r, numpy(nans.astype, BF16), "NaN")
    assert [hex(b) for b in got[0].view(np.uint16)] == ["0x7fc0", "0xffc0", "0x7fc0", "0x7fc0", "0xffc0", "0x7fc0",
                                                         "0x7fc0"]


def test_subnormals_are_kept():
    tiny = float(ml_dtypes.finfo(ml_dtypes.bfloat16).smallest_subnormal)
    x = np.array([tiny, -tiny, tiny * 3, tiny / 2, tiny * 0.75, 2.0 ** -127, 1e-40, -1e-39], np.float32)
    got, emu = both(STORE, x)
    for r in got + emu:
        same_bits(r, x.astype(BF16), "subnormal")
    k = hyb.compile_source('''
def halve(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] * 0.5 + a[i] / 4
    return c
''').halve
    a = (np.arange(1, 40) * tiny).astype(BF16)
    got, emu = both(k, a)
    want = numpy(lambda: a * BF16.type(0.5) + a / BF16.type(4))
    for r in got + emu:
        same_bits(r, want, "subnormal arithmetic")
    assert (got[0] != 0).any()


def test_every_float32_bit_pattern_class_rounds_as_ml_dtypes():
    rng = np.random.default_rng(11)
    x = rng.integers(0, 2 ** 32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    (got,), (emu,) = both(STORE, x)
    same_bits(got, numpy(x.astype, BF16), "compiled")
    same_bits(emu, numpy(x.astype, BF16), "emulate")


WIDEN = hyb.compile_source('''
def widen(a):
    f = output_tensor(a.shape, "float32")
    d = output_tensor(a.shape, "float64")
    h = output_tensor(a.shape, "float16")
    back = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        f[i] = a[i]
        d[i] = a[i]
        h[i] = a[i]
        back[i] = f[i]
    return f, d, h, back
''').widen


def test_every_bfloat16_converts_exactly_to_float32_and_back():
    a = np.arange(1 << 16, dtype=np.uint16).view(BF16)
    got, emu = both(WIDEN, a)
    want = numpy(lambda: (a.astype(np.float32), a.astype(np.float64), a.astype(np.float16)))
    for r in (got, emu):
        np.testing.assert_array_equal(r[0].view(np.uint32), want[0].view(np.uint32))  # NaN payloads too
        np.testing.assert_array_equal(r[1], want[1])
        same(r[2], want[2])
        np.testing.assert_array_equal(r[3].view(np.uint16)[~np.isnan(want[0])], a.view(np.uint16)[~np.isnan(want[0])])


# ------------------------------------------------------------------ conversions with every dtype
def sources(dt):
    if dt == "bool":
        return np.array([True, False, True])
    if dt.startswith(("int", "uint")):
        info = np.iinfo(dt)
        vals = [0, 1, -1, 2, 127, -128, 255, 256, 257, 259, 1000, 65535, (1 << 24) + (1 << 16) + 1,
                int(info.max), int(info.min), 300, -300]
        bits = np.dtype(dt).itemsize * 8
        return np.array([v % (1 << bits) for v in vals], dtype=f"uint{bits}").view(dt)
    return numpy(lambda: np.array([0.0, -0.0, 1.5, -2.5, 1 + 2.0 ** -8, 1 + 2.0 ** -8 + 2.0 ** -30, 3.4e38, 1e300,
                                   -1e300, 65504, 1e-40, 1e-45, np.inf, -np.inf, np.nan, 1.0 / 3, 257.0],
                                  np.float64).astype(dt))


@pytest.mark.parametrize("dt", OTHERS)
def test_conversions_into_bfloat16(dt):
    """Implicit (a store) and explicit (``bfloat16(x)``), as ml_dtypes' astype: through float32."""
    k = hyb.compile_source('''
def into(x):
    c = output_tensor(x.shape, "bfloat16")
    d = output_tensor(x.shape, "bfloat16")
    for i in range(x.shape[0]):
        c[i] = x[i]
        d[i] = bfloat16(x[i]) * 1
    return c, d
''').into
    x = sources(dt)
    want = numpy(x.astype, BF16)
    got, emu = both(k, x)
    for r in got + emu:
        same(r, want, f"{dt} -> bfloat16")


@pytest.mark.parametrize("dt", OTHERS)
def test_conversions_from_bfloat16(dt):
    src = f'''
def out(a):
    c = output_tensor(a.shape, "{dt}")
    d = output_tensor(a.shape, "{dt}")
    for i in range(a.shape[0]):
        c[i] = a[i]
        d[i] = {dt}(a[i])
    return c, d
'''
    k = hyb.compile_source(src).out
    a = np.array([0.0, -0.0, 1.5, -2.5, 3.75, 100.5, 127, 255, 1e4, -3e3, 0.3, 65536], np.float32).astype(BF16)
    if dt in ("float16", "float32", "float64", "bool"):  # (out of range is unspecified for integers, as in NumPy)
        a = np.concatenate([a, np.array([np.inf, -np.inf, np.nan, 3e38, 1e-40], np.float32).astype(BF16)])
    want = numpy(a.astype, dt)
    got, emu = both(k, a)
    for r in got + emu:
        same(r, want, f"bfloat16 -> {dt}")


def test_float64_converts_through_float32_as_ml_dtypes():
    # 1 + 2**-8 + 2**-30 is above the halfway point between 1 and its successor, but float32
    # rounds it to that point first: ml_dtypes (and PyTorch) give 1.0, and so does hyb
    x = np.array([1 + 2.0 ** -8 + 2.0 ** -30], np.float64)
    got, emu = both(STORE, x)
    for r in got + emu:
        assert float(r[0]) == 1.0 == float(x.astype(BF16)[0])


# ------------------------------------------------------------------ promotion
def test_promotion_table():
    """Where ml_dtypes gives NumPy a rule, hyb's is NumPy's; elsewhere the smallest float holding both."""
    want = {"bool": "bfloat16", "int8": "bfloat16", "uint8": "bfloat16", "int16": "float32", "uint16": "float32",
            "float16": "float32", "float32": "float32", "int32": "float64", "uint32": "float64", "int64": "float64",
            "uint64": "float64", "float64": "float64", "bfloat16": "bfloat16", "int": "bfloat16", "float": "bfloat16"}
    for other, result in want.items():
        assert types.promote("bfloat16", other) == result == types.promote(other, "bfloat16"), other
        try:
            numpy_says = np.result_type(BF16, np.dtype(types.concrete(other))).name
        except TypeError:  # no rule in NumPy (DTypePromotionError)
            continue
        if not types.is_weak(other):
            assert numpy_says == result, other
    assert types.float_math_type("bfloat16") == "bfloat16"
    assert types.float_math_type("int8") == "float16"  # small integers still compute in float16


@pytest.mark.parametrize("other", ["int16", "uint16", "float16", "int32", "int64", "float32", "int8"])
def test_mixed_arithmetic_promotes_by_the_table(other):
    k = hyb.compile_source('''
def mixed(a, b):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] * b[i] - a[i]
    return c
''').mixed
    a = np.array([1.5, -2.25, 3.0, 0.0078125, 100.0], np.float32).astype(BF16)
    b = np.array([3, -7, 100, 9, 1], np.float64).astype(other)
    t = types.promote("bfloat16", other)
    store = k.typed(a, b).body[0].body[0]
    assert store.value.dtype == "bfloat16"  # the store's cast
    assert store.value.a.dtype == t
    want = numpy(lambda: (a.astype(t) * b.astype(t) - a.astype(t)).astype(BF16))
    got, emu = both(k, a, b)
    for r in got + emu:
        same(r, want, other)


def test_python_numbers_stay_weak():
    k = hyb.compile_source('''
def weak(a, s):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] * 0.1 + s + 3
    return c
''').weak
    a = np.array([1, 2, 3], np.float32).astype(BF16)
    typed = k.typed(a, 2.5)
    assert typed.body[0].body[0].value.dtype == "bfloat16"
    got, emu = both(k, a, 2.5)
    one = BF16.type
    want = np.array([one(x) * one(0.1) + one(2.5) + one(3) for x in a], BF16)
    for r in got + emu:
        same(r, want)


# ------------------------------------------------------------------ elementwise, reductions, intrinsics
ELEMENTWISE = hyb.compile_source('''
def ew(a, b):
    c = output_tensor(a.shape, a.dtype)
    d = output_tensor(a.shape, "bool")
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            c[i, j] = (a[i, j] + b[i, j]) * a[i, j] - b[i, j] / 3 + -a[i, j] * b[i, j] ** 2
            d[i, j] = a[i, j] < b[i, j] or a[i, j] != a[i, j]
    return c, d
''').ew


@pytest.mark.parametrize("n", SIZES)
def test_elementwise_every_size(n):
    rng = np.random.default_rng(n)
    a = (rng.standard_normal((n, 5)) * 10).astype(BF16)
    b = (rng.standard_normal((n, 5)) * 10).astype(BF16)
    if n:
        a[0, 0], b[0, 1] = np.nan, np.inf
    three = BF16.type(3)
    want = numpy(lambda: ((a + b) * a - b / three + -a * b ** BF16.type(2), (a < b) | np.isnan(a)))
    got, emu = both(ELEMENTWISE, a, b)
    for g, e, w in zip(got, emu, want):
        same(g, w, f"compiled n={n}")
        same(e, w, f"emulate n={n}")


SUMS = hyb.compile_source('''
def sums(a):
    s = output_tensor((1,), "bfloat16")
    t = output_tensor((1,), "float32")
    for i in range(a.shape[0]):
        s[0] += a[i]
        t[0] += a[i]
    return s, t
''').sums


@pytest.mark.parametrize("n", SIZES + (3000,))
def test_sum_into_a_bfloat16_or_a_float32_accumulator(n):
    a = np.full(n, 1.0, np.float32).astype(BF16)
    if n > 1:
        a[1] = 0.3
    s, t = BF16.type(0), np.float32(0)
    for x in a:  # in order, rounding every step
        s, t = s + x, t + np.float32(x)
    got, emu = both(SUMS, a)
    for r in (got, emu):
        same(r[0], np.array([s], BF16), f"bfloat16 accumulator n={n}")
        same(r[1], np.array([t], np.float32), f"float32 accumulator n={n}")
    if n == 3000:
        assert float(got[0][0]) == 256.0  # 256 + 1 rounds back to 256
        assert float(got[1][0]) == 2999.30078125  # 2998 ones and 0.30078125 (0.3 in bfloat16)


INTRINSICS = hyb.compile_source('''
def intr(a, b):
    e = output_tensor(a.shape, a.dtype)
    r = output_tensor(a.shape, a.dtype)
    t = output_tensor(a.shape, a.dtype)
    hi = output_tensor(a.shape, a.dtype)
    lo = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        e[i] = exp(a[i])
        r[i] = sqrt(b[i])
        t[i] = tanh(a[i])
        hi[i] = max(a[i], b[i])
        lo[i] = min(a[i], b[i], 0.5)
    return e, r, t, hi, lo
''').intr


def test_intrinsics():
    a = np.array([0.0, -0.0, 1.0, -1.5, 2.5, 88.5, 89.0, -100.0, np.nan, 0.5, 3.0, np.inf, -np.inf, 1e-3, 7.0, -0.0],
                 np.float32).astype(BF16)
    b = np.array([4.0, 0.0, np.nan, 2.0, 2.5, 1e30, -1.0, 9.0, 3.0, 0.25, np.inf, 1.0, 2.0, 0.0, 6.9921875, 0.0],
                 np.float32).astype(BF16)
    half = BF16.type(0.5)
    want = numpy(lambda: (np.exp(a), np.sqrt(b), np.tanh(a), np.maximum(a, b), np.minimum(np.minimum(a, b), half)))
    got, emu = both(INTRINSICS, a, b)
    for name, g, e, w in zip(("exp", "sqrt", "tanh", "max", "min"), got, emu, want):
        if name in ("exp", "tanh"):  # the C library's float32 functions, rounded
            within_ulp(g, w, 1, f"{name} compiled")
            within_ulp(e, w, 1, f"{name} emulate")
        else:
            same(g, w, f"{name} compiled")
            same(e, w, f"{name} emulate")
    # max/min: NaN wins from either side; of two equal zeros the second argument, as ml_dtypes
    hi, lo = got[3], got[4]
    assert np.isnan(hi[[2, 8]].astype(np.float32)).all() and np.isnan(lo[[2, 8]].astype(np.float32)).all()
    assert np.signbit(hi[[1, 15]].astype(np.float32)).tolist() == [False, False]


# ------------------------------------------------------------------ arguments, tensors, gradients
def test_scalar_arguments_and_zero_sized_arrays():
    k = hyb.compile_source('''
def axpy(alpha, x, y):
    z = output_tensor(x.shape, x.dtype)
    for i in range(x.shape[0]):
        z[i] = alpha * x[i] + y[i]
    return z
''').axpy
    x = np.array([1.0, -2.0, 0.3], np.float32).astype(BF16)
    y = np.array([0.5, 0.25, 100.0], np.float32).astype(BF16)
    alpha = BF16.type(1.5)
    want = numpy(lambda: alpha * x + y)
    got, emu = both(k, alpha, x, y)
    for r in got + emu:
        same(r, want)
    got, emu = both(k, alpha, x[:0], y[:0])
    assert got[0].shape == (0,) and got[0].dtype == BF16


def test_gradient_of_a_bfloat16_kernel():
    k = hyb.compile_source('''
def f(x, w):
    y = output_tensor(x.shape, x.dtype)
    for i in range(x.shape[0]):
        y[i] = tanh(x[i] * w[i]) + x[i] * x[i]
    return y
''').f
    rng = np.random.default_rng(2)
    x = rng.standard_normal(17).astype(BF16)
    w = rng.standard_normal(17).astype(BF16)
    dout = np.ones(17, BF16)
    g = k.grad()
    got = g(x, w, dout)
    emu = g.emulate(x, w, dout)
    want = g(x.astype(np.float64), w.astype(np.float64), dout.astype(np.float64))
    # y = tanh(x w) + x^2: dx = dout (w (1 - tanh(x w)^2) + 2 x), dw = dout x (1 - tanh(x w)^2)
    xf, wf, df = (v.astype(np.float64) for v in (x, w, dout))
    sech2 = 1 - np.tanh(xf * wf) ** 2
    exact = (df * (wf * sech2 + 2 * xf), df * xf * sech2)
    for r, e, w64, z in zip(got, emu, want, exact):
        assert r.dtype == BF16
        within_ulp(r, e, 1, "compiled vs emulate")
        np.testing.assert_allclose(r.astype(np.float64), w64, rtol=3e-2, atol=3e-2)
        np.testing.assert_allclose(r.astype(np.float64), z, rtol=3e-2, atol=3e-2)


def test_hyb_dtype_names_and_tensors():
    assert hyb.bfloat16 == hyb.dtype.bfloat16 == BF16
    t = hyb.Tensor([1.0, 2.5, 1 + 2.0 ** -8], hyb.bfloat16)
    assert t.dtype == BF16 and repr(t).startswith("Tensor(shape=[3], dtype=BFloat16")
    np.testing.assert_array_equal((t * 2).asnumpy().astype(np.float32), [2.0, 5.0, 2.0])
    assert hyb.Tensor([1.0], "bfloat16").dtype == BF16
    x = hyb.Parameter(hyb.Tensor([1.0, -3.0], hyb.bfloat16))
    g = hyb.grad(lambda x: (x * x).sum())(x)
    assert g.dtype == BF16
    np.testing.assert_array_equal(np.asarray(g).astype(np.float32), [2.0, -6.0])
    assert hyb.ops.DataType.BF16_Default == ("bfloat16", "DefaultFormat")


def test_print_shows_bfloat16_values(capsys):
    k = hyb.compile_source('''
def show(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] / 3
        print(c[i], a[i])
    return c
''').show
    a = np.array([1.0, -2.0, np.inf, np.nan], np.float32).astype(BF16)
    k(a)
    compiled = capsys.readouterr().out
    k.emulate(a)
    assert compiled == capsys.readouterr().out
    assert compiled.splitlines()[0] == f"{str(BF16.type(1) / BF16.type(3))} 1" == "0.333984 1"


def test_cuda_source_converts_on_bits():
    k = hyb.compile_source('''
def k(a):
    c = output_tensor(a.shape, "float32")
    for i in range(a.shape[0]):
        c[i] = a[i] * 2
    return c
''').k
    src = k.compile(np.ones(4, BF16), target="cuda").inspect("cuda")
    assert "#include <cuda_bf16.h>" in src and "const __nv_bfloat16 *__restrict__ t_a" in src
    assert "__float2bfloat16" not in src.split("hyb_bits2bf(unsigned short b)")[1]  # conversions are bit operations


# ------------------------------------------------------------------ errors
@pytest.fixture
def no_ml_dtypes(monkeypatch):
    """ml_dtypes as if it were not installed (hyb imports it only when bfloat16 is asked for)."""
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)


def test_without_ml_dtypes_bfloat16_asks_for_it(no_ml_dtypes):
    x = np.ones(3, np.float32)
    src = '''
def k(a):
    c = output_tensor(a.shape, "bfloat16")
    for i in range(a.shape[0]):
        c[i] = a[i]
    return c

def cast(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = bfloat16(a[i])
    return c
'''
    mod = hyb.compile_source(src, "bf.hyb")
    with pytest.raises(HybridDependencyError) as e:
        mod.k(x)
    assert isinstance(e.value, hyb.HybridError) and isinstance(e.value, ImportError)
    assert "bfloat16 needs the ml_dtypes package" in e.value.message and "pip install ml_dtypes" in e.value.hint
    assert (e.value.line, e.value.source_line.strip()) == (3, 'c = output_tensor(a.shape, "bfloat16")')
    with pytest.raises(HybridDependencyError, match="pip install ml_dtypes") as e:
        mod.cast(x)
    assert e.value.line == 11
    with pytest.raises(HybridDependencyError, match="pip install ml_dtypes"):
        mod.k.emulate(x)
    for get in (lambda: hyb.bfloat16, lambda: hyb.dtype.bfloat16, lambda: hyb.Tensor([1.0], "bfloat16")):
        with pytest.raises(HybridDependencyError, match="pip install ml_dtypes"):
            get()
    # everything else works without it
    np.testing.assert_array_equal(hyb.compile_source(src.replace('"bfloat16"', '"float16"')).k(x), x)


def test_float16s_errors_name_bfloat16():
    def err(src, *args, cls=HybridTypeError):
        with pytest.raises(cls) as e:
            hyb.compile_source(src, "e.hyb").k(*args)
        return e.value

    a = np.ones(3, BF16)
    body = "def k(a):\n    c = output_tensor(a.shape, a.dtype)\n    for i in range(a.shape[0]):\n        c[i] = {}\n" \
           "    return c\n"
    assert "ceil_div() takes integers, this is bfloat16" in err(body.format("ceil_div(a[i], a[i])"), a).message
    assert "popcount() takes integers, this is bfloat16" in err(body.format("popcount(a[i])"), a).message
    assert "an index must be an integer, this is bfloat16" in err(body.format("a[a[i]]"), a).message
    assert "bfloat16() takes 1 argument, got 2" in err(body.format("bfloat16(a[i], 1)"), a).message
    e = err(body.format('a[i].astype("bfloat16")'), a)
    assert e.hint == "write `bfloat16(x)`"
    e = err(body.format("np.bfloat16(a[i])"), a, cls=HybridNameError)
    assert "write `bfloat16(x)`" in e.hint
    e = err('def k(a):\n    c = output_tensor(a.shape, "bfloat")\n    return c\n', a)
    assert "unknown dtype 'bfloat'" in e.message and e.hint == "did you mean 'bfloat16'?"
