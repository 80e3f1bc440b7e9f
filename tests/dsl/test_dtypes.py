"""Every dtype of the language, compiled == emulate == NumPy (with ml_dtypes for bfloat16).

Arithmetic wraps for integers, float16 and bfloat16 round after every operation, stores cast to the
element dtype, bool tensors are one byte, and `**`, `//`, `%` follow NumPy for every dtype
(special values and negative operands included).
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import hyb
from hyb.dsl import tir as T
from hyb.errors import HybridTypeError

INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
FLOATS = ["float16", "bfloat16", "float32", "float64"]
NUMBERS = INTS + FLOATS
ALL = ["bool"] + NUMBERS
SIZES = (33, 7, 1, 0)


def same(got, want, what=""):
    """Equal element for element and in dtype; for floats also in the sign of zeros (NaN == NaN)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}"
    if got.dtype.name == "bfloat16":  # exactly as float32 (NumPy's testing sees NaN only in its own floats)
        got, want = got.astype(np.float32), want.astype(np.float32)
    np.testing.assert_array_equal(got, want, err_msg=what)
    if got.dtype.kind == "f":
        zero = want == 0
        np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want[zero]), err_msg=what + " (sign of zero)")


def close(got, want, ulps, what=""):
    """Within ``ulps`` units in the last place of ``want``; NaN and infinities exactly where ``want`` has them."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}"
    finite = np.isfinite(want)
    spacing = np.spacing(np.abs(want[finite])).astype(np.float64)  # in want's dtype
    if got.dtype.name == "bfloat16":  # (NumPy's testing sees NaN only in its own floats)
        got, want = got.astype(np.float32), want.astype(np.float32)
    np.testing.assert_array_equal(got[~finite], want[~finite], err_msg=what)
    g, w = got[finite].astype(np.float64), want[finite].astype(np.float64)
    tol = ulps * spacing
    bad = np.abs(g - w) > tol
    assert not bad.any(), f"{what}: {g[bad][:5]} != {w[bad][:5]} (more than {ulps} ulp)"


def run3(kernel, *args):
    """Compiled and emulated results, each a tuple."""
    got = kernel(*[a.copy() for a in args])
    emu = kernel.emulate(*[a.copy() for a in args])
    as_tuple = (lambda r: r if isinstance(r, tuple) else (r,))
    return as_tuple(got), as_tuple(emu)


def ints(dt, values):
    """Python ints wrapped into ``dt`` as C would (so -1 is 255 for uint8)."""
    bits = np.dtype(dt).itemsize * 8
    return np.array([v % (1 << bits) for v in values], dtype=f"uint{bits}").view(dt)


def int_operands(dt):
    info = np.iinfo(dt)
    lo, hi = int(info.min), int(info.max)
    a = [0, 1, -1, 2, -2, 7, -7, 7, -7, hi, lo, lo, hi, 100, -100, 5, 3, -3, 9, 0, lo, hi, 12, -12, 1, 64, -64,
         6, -6, 13, 2, 11, -11]
    b = [3, 3, 3, -3, -3, 2, 2, -2, -2, 1, 1, -1, -1, 0, 0, 0, 7, 7, -7, -5, 2, 2, 5, 5, lo, 3, 3, 6, -6, -4, hi,
         -11, 11]
    return ints(dt, a), ints(dt, b)


FLOAT_SPECIALS = [0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 7.0, -7.0, np.inf, -np.inf, np.nan, 0.3, 1e-30, 0.5, 1.5,
                  -0.5, 3.0, 65504.0, 1e-7, 100.0, -100.0, 1e4, 6.0, -6.0, 1e30, 0.1, 2.0, -2.0, 5.5, -5.5, 9.0,
                  0.25, -3.75]


def float_operands(dt):
    a = numpy(np.array, FLOAT_SPECIALS, dt)  # 1e30 is inf in float16
    b = np.roll(a[::-1], 5)
    return a, b


def operands(dt):
    return int_operands(dt) if dt in INTS else float_operands(dt)


def numpy(f, *args):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return f(*args)


ARITH = hyb.compile_source('''
def arith(a, b):
    add = output_tensor(a.shape, a.dtype)
    sub = output_tensor(a.shape, a.dtype)
    mul = output_tensor(a.shape, a.dtype)
    fdiv = output_tensor(a.shape, a.dtype)
    mod = output_tensor(a.shape, a.dtype)
    quo = output_tensor(a.shape, "float64")
    neg = output_tensor(a.shape, a.dtype)
    weak = output_tensor(a.shape, a.dtype)
    lt = output_tensor(a.shape, "bool")
    ne = output_tensor(a.shape, "bool")
    for i in range(a.shape[0]):
        add[i] = a[i] + b[i]
        sub[i] = a[i] - b[i]
        mul[i] = a[i] * b[i]
        fdiv[i] = a[i] // b[i]
        mod[i] = a[i] % b[i]
        quo[i] = a[i] / b[i]
        neg[i] = -a[i]
        weak[i] = a[i] * 3 + 1 - a[i] // 2
        lt[i] = a[i] < b[i]
        ne[i] = a[i] != b[i]
    return add, sub, mul, fdiv, mod, quo, neg, weak, lt, ne
''').arith

ARITH_NAMES = ("add", "sub", "mul", "fdiv", "mod", "quo", "neg", "weak", "lt", "ne")


def arith_reference(a, b):
    return numpy(lambda: (a + b, a - b, a * b, a // b, a % b, (a / b).astype(np.float64), -a, a * 3 + 1 - a // 2,
                          a < b, a != b))


@pytest.mark.parametrize("dt", NUMBERS)
def test_arithmetic_every_dtype_and_size(dt):
    a, b = operands(dt)
    for n in SIZES:
        got, emu = run3(ARITH, a[:n], b[:n])
        want = arith_reference(a[:n], b[:n])
        for name, g, e, w in zip(ARITH_NAMES, got, emu, want):
            same(g, w, f"{dt} {name} compiled, n={n}")
            same(e, w, f"{dt} {name} emulate, n={n}")


DIVMOD = hyb.compile_source('''
def divmod_(a, b):
    q = output_tensor(a.shape, a.dtype)
    r = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        q[i] = a[i] // b[i]
        r[i] = a[i] % b[i]
    return q, r
''').divmod_


@pytest.mark.parametrize("dt", FLOATS)
def test_float_floor_divide_and_remainder_special_values(dt):
    # every pair of special values: signs of zeros, inf and nan operands, division by zero
    v = np.array([0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 7.0, -7.0, np.inf, -np.inf, np.nan, 1e-30, 0.3, 3.0], dtype=dt)
    a, b = np.repeat(v, len(v)), np.tile(v, len(v))
    got, emu = run3(DIVMOD, a, b)
    want = numpy(lambda: (np.floor_divide(a, b), np.remainder(a, b)))
    for name, g, e, w in zip(("//", "%"), got, emu, want):
        same(g, w, f"{dt} {name} compiled")
        same(e, w, f"{dt} {name} emulate")


@pytest.mark.parametrize("dt", FLOATS)
def test_float_floor_divide_and_remainder_random(dt):
    rng = np.random.default_rng(3)
    a = (rng.standard_normal(500) * 100).astype(dt)
    b = (rng.standard_normal(500) * 7).astype(dt)
    got, emu = run3(DIVMOD, a, b)
    want = numpy(lambda: (np.floor_divide(a, b), np.remainder(a, b)))
    for g, e, w in zip(got, emu, want):
        same(g, w, dt)
        same(e, w, dt)


POWER = hyb.compile_source('''
def power_var(a, b):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] ** b[i]
    return c

def power_const(a):
    c = output_tensor(a.shape, a.dtype)
    d = output_tensor(a.shape, a.dtype)
    e = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] ** 2
        d[i] = a[i] ** 7
        e[i] = power(a[i], 0) + a[i] ** 1
    return c, d, e
''')


@pytest.mark.parametrize("dt", INTS)
def test_integer_power_wraps_like_numpy(dt):
    a = ints(dt, [0, 1, -1, 2, -2, 3, -3, 5, 7, -7, 10, 100, 2, 3, 0, 1, -1])
    b = ints(dt, [0, 0, 3, 7, 8, 5, 6, 9, 0, 1, 2, 3, 63, 40, 5, 100, 101])
    (got,), (emu,) = run3(POWER.power_var, a, b)
    want = numpy(np.power, a, b)
    same(got, want, f"{dt} compiled")
    same(emu, want, f"{dt} emulate")
    got, emu = run3(POWER.power_const, a)
    want = numpy(lambda: (a ** 2, a ** 7, a ** 0 + a))
    for g, e, w in zip(got, emu, want):
        same(g, w, dt)
        same(e, w, dt)


@pytest.mark.parametrize("dt", [d for d in INTS if d.startswith("int")])
def test_integer_to_a_negative_power_at_run_time(dt):
    # NumPy raises; compiled code cannot, so 1 / a**-b truncated toward zero: 1, ±1 for -1, else 0.
    a = ints(dt, [1, 1, -1, -1, -1, 2, -2, 0, 5, 7])
    b = ints(dt, [-1, -4, -1, -2, -3, -1, -1, -1, -2, -100])
    (got,), (emu,) = run3(POWER.power_var, a, b)
    want = ints(dt, [1, 1, -1, 1, -1, 0, 0, 0, 0, 0])
    same(got, want, "compiled")
    same(emu, want, "emulate")


@pytest.mark.parametrize("dt", FLOATS)
def test_float_power(dt):
    v = np.array([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, 2.5, -8.0, np.inf, -np.inf, np.nan, 1.0 / 3, 3.0], dtype=dt)
    a, b = np.repeat(v, len(v)), np.tile(v, len(v))
    (got,), (emu,) = run3(POWER.power_var, a, b)
    want = numpy(np.power, a, b)
    if dt in ("float32", "float64"):  # vector lanes call libmvec's pow (within 4 ulp), emulate the C library's
        close(got, emu, 4, f"{dt} compiled vs emulate")
        zero = emu == 0
        np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(emu[zero]), err_msg=f"{dt} (sign of zero)")
    else:
        same(got, emu, f"{dt} compiled vs emulate")  # both call the C library's pow
    close(got, want, 1 if dt == "float16" else 2, f"{dt} vs NumPy")  # NumPy's array pow may be SIMD code
    got, emu = run3(POWER.power_const, v)
    want = numpy(lambda: (v ** 2, v ** 7, v ** 0 + v))
    for g, e, w in zip(got, emu, want):
        same(e, w, f"{dt} emulate")
        close(g, w, 1, f"{dt} compiled")


def test_negative_constant_exponent_of_integers_is_rejected():
    src = "def k(a):\n    c = output_tensor(a.shape, a.dtype)\n    for i in range(a.shape[0]):\n" \
          "        c[i] = a[i] ** -2\n    return c\n"
    with pytest.raises(HybridTypeError) as info:
        hyb.compile_source(src, "pow.hyb").k(np.arange(3, dtype=np.int32))
    assert (info.value.line, info.value.col) == (4, 24)
    assert "integers to negative integer powers are not allowed" in info.value.message
    assert "x ** -2.0" in info.value.hint
    # the same with a float base is fine, and follows NumPy
    x = np.arange(1, 4, dtype=np.float32)
    np.testing.assert_array_equal(hyb.compile_source(src).k(x), x ** -2)


def test_power_of_python_numbers_is_folded_with_numpy_semantics():
    src = '''
def k(a):
    c = output_tensor(a.shape, "float64")
    n = output_tensor((2 ** 3,), "int64")
    for i in range(a.shape[0]):
        c[i] = a[i] * (2.0 ** -1) + (-8.0) ** 0.5 * 0
    return c, n
'''
    c, n = hyb.compile_source(src).k(np.ones(2))
    assert n.shape == (8,)
    assert np.isnan(c).all()  # (-8.0) ** 0.5 is nan as in NumPy, not a complex number


CAST_TARGETS = ALL


def cast_kernel():
    outs = "\n".join(f"    o_{d} = output_tensor(a.shape, \"{d}\")" for d in CAST_TARGETS)
    # float -> int reads `s`: values every integer dtype holds (out of range is unspecified, as in NumPy)
    body = "\n".join(f"        o_{d}[i] = {'s' if d not in FLOATS + ['bool'] else 'a'}[i]" for d in CAST_TARGETS)
    return hyb.compile_source(f"def casts(a, s):\n{outs}\n    for i in range(a.shape[0]):\n{body}\n"
                              f"    return {', '.join('o_' + d for d in CAST_TARGETS)}\n").casts


CASTS = cast_kernel()
EXPLICIT = hyb.compile_source('''
def explicit(a):
    c = output_tensor(a.shape, "float64")
    for i in range(a.shape[0]):
        c[i] = float64(int8(a[i])) + float64(uint16(a[i])) * 1000 + float64(bool(a[i])) * 1e6 + float16(a[i])
    return c
''').explicit


def cast_sources(dt):
    if dt == "bool":
        a = np.array([True, False, True], dtype=bool)
        return a, a
    if dt in INTS:
        info = np.iinfo(dt)
        a = ints(dt, [0, 1, -1, 2, 127, 128, 255, 256, -129, 2049, 2051, 65504, 65519, 65520, 1 << 24 | 1,
                      (1 << 53) + 1, int(info.max), int(info.min), 300, -300])
        return a, a
    a = np.array([0.0, -0.0, 1.5, -2.5, 0.5, np.inf, -np.inf, np.nan, 65504, 65519.99, 65520, 1e-8, 2.0 ** -25,
                  2.0 ** -25 + 2.0 ** -40, 1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 1 + 2.0 ** -11 + 2.0 ** -30, 1e300,
                  3.4e38, 1.0 / 3], dtype=np.float64)
    a = numpy(a.astype, dt)
    s = np.array([0.0, -0.0, 0.5, 1.5, 2.5, 3.7, 100.9, 127.0, 99.5, 1.0, 0.99, 7.25, 64.5, 126.9, 12.0, 3.0,
                  0.0, 1.0, 2.0, 5.0], dtype=dt)
    return a, s


@pytest.mark.parametrize("src", ALL)
def test_store_casts_between_every_pair_of_dtypes(src):
    a, s = cast_sources(src)
    got, emu = run3(CASTS, a, s)
    for d, g, e in zip(CAST_TARGETS, got, emu):
        want = numpy(lambda: (a if d in FLOATS + ["bool"] else s).astype(d))
        same(g, want, f"{src} -> {d} compiled")
        same(e, want, f"{src} -> {d} emulate")


@pytest.mark.parametrize("src", ["float32", "int64", "uint8", "bool"])
def test_explicit_casts(src):
    a = cast_sources(src)[1]
    (got,), (emu,) = run3(EXPLICIT, a)
    want = numpy(lambda: a.astype(np.int8).astype(np.float64) + a.astype(np.uint16).astype(np.float64) * 1000
                 + a.astype(bool).astype(np.float64) * 1e6 + a.astype(np.float16))
    same(got, want, "compiled")
    same(emu, want, "emulate")


def test_float16_rounds_after_every_operation():
    k = hyb.compile_source('''
def chain(a, b):
    c = output_tensor(a.shape, a.dtype)
    s = output_tensor((1,), a.dtype)
    acc = 0.0
    for i in range(a.shape[0]):
        c[i] = (a[i] + b[i]) * a[i] - b[i] / 3 + a[i] * 0.1
        acc = acc + a[i] * b[i]
    s[0] = acc
    return c, s
''').chain
    rng = np.random.default_rng(5)
    a = (rng.standard_normal(33) * 30).astype(np.float16)
    b = (rng.standard_normal(33) * 30).astype(np.float16)
    got, emu = run3(k, a, b)
    acc = 0.0  # a Python float, weak (NEP 50): it takes float16 from the first value it meets
    for x, y in zip(a, b):
        acc = acc + x * y
    want = ((a + b) * a - b / 3 + a * 0.1, np.array([acc], np.float16))
    for g, e, w in zip(got, emu, want):
        same(g, w, "compiled")
        same(e, w, "emulate")


def test_float16_accumulator_rounds_each_step():
    k = hyb.compile_source('''
def total(a):
    s = output_tensor((1,), a.dtype)
    for i in range(a.shape[0]):
        s[0] += a[i]
    return s
''', schedule={"reassociate": False}).total
    a = np.full(3000, 1.0, np.float16)  # past 2048, 1 + 2048 rounds back to 2048 (in program order)
    (got,), (emu,) = run3(k, a)
    same(got, np.array([2048], np.float16))
    same(emu, got)


def test_bool_tensors():
    k = hyb.compile_source('''
def logic(p, q, a):
    r = output_tensor(p.shape, "bool")
    s = output_tensor(p.shape, "bool")
    n = output_tensor(p.shape, "int32")
    f = output_tensor(p.shape, "float16")
    b = output_tensor(p.shape, "bool")
    m = output_tensor(p.shape, "bool")
    for i in range(p.shape[0]):
        r[i] = p[i] and not q[i]
        s[i] = p[i] != q[i] or a[i] > 2
        n[i] = int32(p[i]) * 2 + int32(q[i])
        f[i] = q[i]
        b[i] = a[i]
        m[i] = max(p[i], q[i]) == min(p[i], q[i])
    return r, s, n, f, b, m
''').logic
    p = np.array([True, True, False, False, True, False, True], dtype=bool)
    q = np.array([True, False, True, False, False, True, True], dtype=bool)
    a = np.array([0.0, -0.0, np.nan, 3.0, 1.0, -5.0, np.inf], dtype=np.float32)
    got, emu = run3(k, p, q, a)
    want = (p & ~q, (p != q) | (a > 2), p.astype(np.int32) * 2 + q, q.astype(np.float16), a.astype(bool), p == q)
    for g, e, w in zip(got, emu, want):
        same(g, w, "compiled")
        same(e, w, "emulate")
    assert got[0].itemsize == 1


MIXED = [("int8", "uint8"), ("uint64", "int64"), ("float16", "int16"), ("int32", "float32"), ("uint32", "int8"),
         ("float16", "uint8"), ("uint16", "float16"), ("int64", "float16"), ("uint8", "uint64"), ("bool", "int8"),
         # the pairs ml_dtypes gives NumPy a rule for (tests/dsl/test_bfloat16.py has the others)
         ("bfloat16", "int8"), ("uint8", "bfloat16"), ("bfloat16", "float32"), ("float64", "bfloat16"),
         ("bool", "bfloat16")]


@pytest.mark.parametrize("da,db", MIXED)
def test_mixed_dtypes_promote_as_numpy(da, db):
    t = np.result_type(np.dtype(da), np.dtype(db)).name
    op = "max(a[i], b[i])" if "bool" in (da, db) else "a[i] * b[i] - a[i]"
    k = hyb.compile_source(f'''
def mixed(a, b):
    c = output_tensor(a.shape, "{t}")
    for i in range(a.shape[0]):
        c[i] = {op}
    return c
''').mixed
    a = cast_sources(da)[1][:3].copy() if da != "bool" else np.array([True, False, True])
    b = cast_sources(db)[1][:3].copy() if db != "bool" else np.array([True, False, True])
    if da == "int8" and db == "uint8":
        a, b = ints("int8", [-128, 100, -3]), ints("uint8", [255, 200, 7])
    store = k.typed(a, b).body[0].body[0]
    assert isinstance(store, T.Store) and store.value.dtype == t
    (got,), (emu,) = run3(k, a, b)
    want = numpy(lambda: np.maximum(a, b) if "bool" in (da, db) else a * b - a)
    same(got, want, "compiled")
    same(emu, want, "emulate")


def test_unsigned_wraps_around():
    k = hyb.compile_source('''
def wrap(a, b):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = (a[i] - b[i]) * 3 + -a[i] - 1
    return c
''').wrap
    for dt in ["uint8", "uint16", "uint32", "uint64"]:
        a, b = ints(dt, [0, 1, 5, -1]), ints(dt, [1, 2, 250, 7])
        (got,), (emu,) = run3(k, a, b)
        want = numpy(lambda: (a - b) * 3 + -a - 1)
        same(got, want, dt)
        same(emu, want, dt)


def test_loop_variable_wraps_into_small_dtypes():
    k = hyb.compile_source('''
def ramp(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] + i
    return c
''').ramp
    a = np.zeros(300, np.int8)
    (got,), (emu,) = run3(k, a)
    want = np.arange(300).astype(np.int8)
    same(got, want)
    same(emu, want)


def test_float16_literal_out_of_range_is_inf():
    k = hyb.compile_source('''
def big(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] + 70000 - 1e-8
    return c
''').big
    a = np.array([1.0, -1.0], np.float16)
    (got,), (emu,) = run3(k, a)
    same(got, np.array([np.inf, np.inf], np.float16))
    same(emu, got)


def test_folded_infinities_and_nan():
    k = hyb.compile_source('''
def k(a):
    c = output_tensor(a.shape, a.dtype)
    d = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] + 1.0 / 0.0 - 1e999
        d[i] = a[i] * (-1.0 // 0.0) + 7 // 0
    return c, d
''').k
    a = np.array([1.0, -2.0], np.float32)
    got, emu = run3(k, a)
    for g, e, w in zip(got, emu, (np.full(2, np.nan, np.float32), np.array([-np.inf, np.inf], np.float32))):
        same(g, w)
        same(e, w)


def test_float_to_int_out_of_range_as_numpy_on_x86():
    # C leaves these undefined; NumPy's casts give what the x86 conversion gives, and so does hyb
    # (through int32 for the narrow types, int64 for the others), rather than LLVM's undefined value.
    a = np.array([np.nan, np.inf, -np.inf, 1e20, -1e20, 3e9, -3e9, 70000.0, -40000.0, 2.0 ** 63, 1.5e19,
                  -1.5, 300.7], dtype=np.float64)
    got, emu = run3(CASTS, a, a)
    for d, g, e in zip(CAST_TARGETS, got, emu):
        same(g, e, f"float64 -> {d}: compiled vs emulate")
        if d in ("int8", "int16", "int32", "int64", "uint8", "uint16"):
            same(g, numpy(a.astype, d), f"float64 -> {d}: compiled vs NumPy")


def test_constants_convert_as_numpy():
    k = hyb.compile_source('''
def k(a):
    c = output_tensor(a.shape, "uint16")
    d = output_tensor(a.shape, "uint8")
    for i in range(a.shape[0]):
        c[i] = a[i] + uint16(int64(-1)) + uint16(float32(-1.5))
        d[i] = -uint8(popcount(1))
    return c, d
''').k
    a = np.array([1, 2], np.uint16)
    got, emu = run3(k, a)
    for g, e in zip(got, emu):
        same(g, e)
    same(got[0], np.array([65535 + 1, 65535 + 2], np.int64).astype(np.uint16) + np.uint16(65535))
    same(got[1], np.array([255, 255], np.uint8))


@pytest.mark.parametrize("stmt,col,words", [
    ("c[i] = -1.0", 16, "Python float -1.0 is out of bounds for uint8"),
    ("c[i] = 2.0 // 0", 16, "Python float inf cannot be converted to uint8"),
    ("c[i] = uint8(300.5)", 22, "Python float 300.5 is out of bounds for uint8"),
    ("c[i] = ceil_div(uint64(a[i]), b[i])", 16, "ceil_div() of uint64 and int64 would compute in float64"),
])
def test_python_numbers_that_do_not_fit_are_rejected(stmt, col, words):
    src = "def k(a, b):\n    c = output_tensor(a.shape, a.dtype)\n    for i in range(a.shape[0]):\n" \
          f"        {stmt}\n    return c\n"
    with pytest.raises(HybridTypeError) as info:
        hyb.compile_source(src, "bad.hyb").k(np.ones(2, np.uint8), np.ones(2, np.int64))
    assert (info.value.line, info.value.col) == (4, col), info.value.render()
    assert words in info.value.message
