"""Every intrinsic on every dtype it takes: compiled == emulate == NumPy, and bad calls.

Functions that are exact in IEEE arithmetic (sqrt, floor, round, max, ...) must agree bit for
bit, signed zeros included.  Transcendentals call the C library in compiled code and NumPy's
own (often SIMD) code in emulate and the reference, so they are compared within a few ulp.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import hyb
from hyb.dsl import tir as T
from hyb.errors import HybridError, HybridNameError, HybridTypeError

INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
FLOATS = ["float16", "bfloat16", "float32", "float64"]
SIZES = (33, 7, 1, 0)

FLOAT_MATH = ["sqrt", "rsqrt", "exp", "expm1", "log", "log1p", "sin", "cos", "tan", "tanh", "sigmoid", "erf", "atan"]
EXACT = ["abs", "sign", "floor", "ceil", "trunc", "round", "isnan", "isinf", "isfinite"]
_erf = np.vectorize(math.erf, otypes=[np.float64])


def _float_of(x):
    """x in the float type NumPy's sqrt would compute it in (int8 -> float16, int32 -> float64, ...)."""
    return x.astype(np.sqrt(np.zeros(1, x.dtype)).dtype)


def _rsqrt(x):
    r = np.sqrt(x)
    return r.dtype.type(1) / r


def _sigmoid(x):
    x = _float_of(x)
    one = x.dtype.type(1)
    return one / (one + np.exp(-x))


REFERENCE = {
    "sqrt": np.sqrt, "rsqrt": _rsqrt, "exp": np.exp, "expm1": np.expm1, "log": np.log, "log1p": np.log1p,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "tanh": np.tanh, "sigmoid": _sigmoid,
    "erf": lambda x: _erf(x.astype(np.float64)).astype(_float_of(x[:0]).dtype), "atan": np.arctan,
    "abs": np.absolute, "sign": np.sign, "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "round": np.round,
    "isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite, "popcount": np.bitwise_count,
}


def numpy(f, *args):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return f(*args)


def same(got, want, what=""):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}"
    if got.dtype.name == "bfloat16":  # exactly as float32 (NumPy's testing sees NaN only in its own floats)
        got, want = got.astype(np.float32), want.astype(np.float32)
    np.testing.assert_array_equal(got, want, err_msg=what)
    if got.dtype.kind == "f":
        zero = want == 0
        np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want[zero]), err_msg=what + " (sign of zero)")


def close(got, want, what=""):
    """Within a few ulp (one for float16 and bfloat16, whose functions are float32 ones rounded), NaN
    and inf exact."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}"
    finite = np.isfinite(want)
    ulps = 1 if want.dtype.name in ("float16", "bfloat16") else 4
    spacing = np.spacing(np.abs(want[finite])).astype(np.float64)  # in want's dtype
    if got.dtype.name == "bfloat16":
        got, want = got.astype(np.float32), want.astype(np.float32)
    np.testing.assert_array_equal(got[~finite], want[~finite], err_msg=what)
    g, w = got[finite].astype(np.float64), want[finite].astype(np.float64)
    bad = np.abs(g - w) > ulps * spacing
    assert not bad.any(), f"{what}: {g[bad][:5]} != {w[bad][:5]} (more than {ulps} ulp)"


def check(name, got, emu, want, what):
    if name in FLOAT_MATH[2:]:
        close(got, want, f"{what} compiled")
        close(emu, want, f"{what} emulate")
        close(got, emu, f"{what} compiled vs emulate")
    else:
        same(got, want, f"{what} compiled")
        same(emu, want, f"{what} emulate")


def as_tuple(r):
    return r if isinstance(r, tuple) else (r,)


def run3(kernel, *args):
    return as_tuple(kernel(*[a.copy() for a in args])), as_tuple(kernel.emulate(*[a.copy() for a in args]))


def ints(dt, values):
    bits = np.dtype(dt).itemsize * 8
    return np.array([v % (1 << bits) for v in values], dtype=f"uint{bits}").view(dt)


FLOAT_INPUTS = [0.0, -0.0, np.inf, -np.inf, np.nan, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 1.0, -1.0, 3.0, 1e-5, -1e-5,
                0.1, 10.0, -10.0, 30.0, -30.0, 100.0, -100.0, 3.5, -3.5, 0.49999997, 88.5, 700.0, -0.0001,
                2.0 ** -20, 1e4, -1e4, 4.5]


def inputs(dt):
    if dt in FLOATS:
        return np.array(FLOAT_INPUTS, dtype=dt)
    info = np.iinfo(dt)
    return ints(dt, [0, 1, -1, 2, -2, 3, -3, 4, 7, -7, 9, 10, 16, 25, 100, -100, 127, -128, 255, 1000, -1000,
                     12345, -12345, int(info.max), int(info.min), 5, 6, 8, 11, 64, 63, 31, 30])


def unary_names(dt):
    return FLOAT_MATH + EXACT + ([] if dt in FLOATS else ["popcount"])


def unary_kernel(dt):
    names = unary_names(dt)
    zero = np.zeros(1, dt)
    decl = "\n".join(f'    o_{n} = output_tensor(a.shape, "{numpy(REFERENCE[n], zero).dtype}")' for n in names)
    body = "\n".join(f"        o_{n}[i] = {n}(a[i])" for n in names)
    src = f"def unary(a):\n{decl}\n    for i in range(a.shape[0]):\n{body}\n" \
          f"    return {', '.join('o_' + n for n in names)}\n"
    return hyb.compile_source(src).unary


@pytest.mark.parametrize("dt", FLOATS + INTS)
def test_unary_intrinsics(dt):
    k = unary_kernel(dt)
    a = inputs(dt)
    for n in SIZES if dt in ("float16", "bfloat16", "float32", "int32") else SIZES[:1]:
        got, emu = run3(k, a[:n])
        for name, g, e in zip(unary_names(dt), got, emu):
            check(name, g, e, numpy(REFERENCE[name], a[:n]), f"{name}({dt}) n={n}")


def test_round_is_half_to_even_and_sign_of_zero_is_zero():
    k = hyb.compile_source('''
def k(a):
    r = output_tensor(a.shape, a.dtype)
    s = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        r[i] = round(a[i])
        s[i] = sign(a[i])
    return r, s
''').k
    a = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, -0.0, 0.0, np.nan, -np.inf], np.float32)
    got, emu = run3(k, a)
    for g in (got, emu):
        same(g[0], np.array([0, 2, 2, -0.0, -2, -2, 0, -0.0, 0, np.nan, -np.inf], np.float32))
        same(g[1], np.array([1, 1, 1, -1, -1, -1, 1, 0, 0, np.nan, -1], np.float32))


BINARY = hyb.compile_source('''
def binary(a, b):
    hi = output_tensor(a.shape, a.dtype)
    lo = output_tensor(a.shape, a.dtype)
    hi3 = output_tensor(a.shape, a.dtype)
    lo3 = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        hi[i] = max(a[i], b[i])
        lo[i] = min(a[i], b[i])
        hi3[i] = max(a[i], b[i], a[i] * 2)
        lo3[i] = min(b[i], a[i], a[i] - 1)
    return hi, lo, hi3, lo3

def bounded(a):
    z = output_tensor((6,) + a.shape, a.dtype)
    for i in range(a.shape[0]):
        z[0, i] = max(a[i], 0.0)
        z[1, i] = min(a[i], -0.0)
        z[2, i] = min(max(a[i], -1.0), 2.5)
        z[3, i] = max(-0.0, a[i])
        z[4, i] = min(a[i], 1000.0)
        z[5, i] = max(a[i], -1000.0)
    return z

def angle(y, x, like):
    c = output_tensor(y.shape, like.dtype)
    for i in range(y.shape[0]):
        c[i] = atan2(y[i], x[i])
    return c

def cdiv(a, b):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = ceil_div(a[i], b[i])
    return c
''')


def pairs(dt):
    if dt in FLOATS:
        v = np.array([0.0, -0.0, 1.0, -1.0, 2.5, np.inf, -np.inf, np.nan], dtype=dt)
    else:
        info = np.iinfo(dt)
        v = ints(dt, [0, 1, -1, 7, -7, 3, int(info.max), int(info.min)])
    return np.repeat(v, len(v)), np.tile(v, len(v))


@pytest.mark.parametrize("dt", FLOATS + INTS)
def test_max_and_min_follow_numpy_maximum_and_minimum(dt):
    # NaN wins from either side; for equal values (-0.0 and 0.0) the later argument is the result
    a, b = pairs(dt)
    got, emu = run3(BINARY.binary, a, b)
    want = numpy(lambda: (np.maximum(a, b), np.minimum(a, b), np.maximum(np.maximum(a, b), a * 2),
                          np.minimum(np.minimum(b, a), a - 1)))
    for name, g, e, w in zip(("max", "min", "max3", "min3"), got, emu, want):
        same(g, w, f"{name} {dt} compiled")
        same(e, w, f"{name} {dt} emulate")


@pytest.mark.parametrize("dt", FLOATS)
def test_max_and_min_of_a_constant_follow_numpy(dt):
    # a constant bound cannot be nan, which the compiled code uses (one maxps/minps); nan and the
    # signed zeros still come out as NumPy's
    a, _ = pairs(dt)
    got, emu = run3(BINARY.bounded, a)
    c = lambda v: np.array(v, dtype=dt)
    want = numpy(lambda: np.stack([np.maximum(a, c(0.0)), np.minimum(a, c(-0.0)),
                                   np.minimum(np.maximum(a, c(-1.0)), c(2.5)), np.maximum(c(-0.0), a),
                                   np.minimum(a, c(1000.0)), np.maximum(a, c(-1000.0))]))
    same(got[0], want, f"{dt} compiled")
    same(emu[0], want, f"{dt} emulate")


@pytest.mark.parametrize("dt", FLOATS + ["int16", "uint64"])
def test_atan2(dt):
    y, x = pairs(dt) if dt in FLOATS else (ints(dt, [3, -3, 0, 1, 0]), ints(dt, [0, 4, -5, 1, 0]))
    want = numpy(np.arctan2, y, x)
    (got,), (emu,) = run3(BINARY.angle, y, x, want)
    close(got, want, f"atan2 {dt} compiled")
    close(emu, want, f"atan2 {dt} emulate")
    zeros = want == 0  # atan2 of signed zeros and infinities is exact in C99 and in NumPy
    np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]))


@pytest.mark.parametrize("dt", INTS)
def test_ceil_div(dt):
    a, b = pairs(dt)
    got, emu = run3(BINARY.cdiv, a, b)
    want = numpy(lambda: a // b + (a % b != 0).astype(dt))  # a zero divisor gives 0, as `//` does
    same(got[0], want, "compiled")
    same(emu[0], want, "emulate")
    exact = [-(-int(x) // int(y)) if y else 0 for x, y in zip(a, b)]
    fits = [np.iinfo(dt).min <= v <= np.iinfo(dt).max for v in exact]
    assert [int(v) for v, f in zip(got[0], fits) if f] == [v for v, f in zip(exact, fits) if f]


def test_sizes_of_binary_intrinsics():
    a, b = pairs("float32")
    for n in SIZES:
        got, emu = run3(BINARY.binary, a[:n], b[:n])
        for g, e in zip(got, emu):
            same(g, e, f"n={n}")
            assert g.shape == (n,)


def test_power_intrinsic_is_the_operator():
    k = hyb.compile_source('''
def k(a, b):
    c = output_tensor(a.shape, a.dtype)
    d = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = power(a[i], b[i])
        d[i] = power(a[i], 3) - a[i] ** 3
    return c, d
''').k
    a = np.array([2.0, -1.5, 0.0, 4.0], np.float32)
    b = np.array([0.5, 2.0, -1.0, -0.5], np.float32)
    got, emu = run3(k, a, b)
    same(got[0], emu[0])
    close(got[0], numpy(np.power, a, b))
    same(got[1], np.zeros(4, np.float32))


def test_python_numbers_stay_weak():
    # An intrinsic of Python numbers and loop variables is a Python number: it takes the other operand's dtype.
    src = '''
N = 10

def k(a):
    c = output_tensor(a.shape, a.dtype)
    t = allocate((ceil_div(N, 4), max(N, 3, 2), popcount(7) + abs(-2)), "int8")
    for i in range(a.shape[0]):
        c[i] = a[i] * sqrt(2.0) + max(i, 2) + float32(isnan(a[i])) + sign(-3) * round(a[i])
    return c
'''
    k = hyb.compile_source(src).k
    a = np.array([1.0, 2.5, -3.0, np.nan], np.float32)
    typed = k.typed(a)
    assert next(t for t in typed.tensors.values() if t.source_name == "t").shape == (3, 10, 5)
    (got,), (emu,) = run3(k, a)
    want = numpy(lambda: a * math.sqrt(2.0) + np.maximum(np.arange(4), 2) + np.isnan(a) + -1 * np.round(a))
    same(got, want.astype(np.float32))
    same(emu, got)
    store = typed.body[-1].body[0]
    assert isinstance(store, T.Store) and store.value.dtype == "float32"


def test_integer_rounding_and_predicates_keep_the_value():
    k = hyb.compile_source('''
def k(a):
    c = output_tensor(a.shape, a.dtype)
    d = output_tensor(a.shape, "bool")
    for i in range(a.shape[0]):
        c[i] = floor(a[i]) + ceil(a[i]) - trunc(a[i]) - round(a[i])
        d[i] = isfinite(a[i]) and not isnan(a[i]) and not isinf(a[i])
    return c, d
''').k
    a = ints("int64", [5, -5, 2 ** 62, 0])
    got, emu = run3(k, a)
    for g in (got, emu):
        same(g[0], np.zeros(4, np.int64))
        same(g[1], np.ones(4, bool))


HEAD = "def k(a, b):\n    c = output_tensor(a.shape, a.dtype)\n    for i in range(a.shape[0]):\n"

# (name, statement in the loop, error class, column, words in the message, words in the hint)
BAD = [
    ("no argument", "c[i] = sqrt()", HybridTypeError, 16, "sqrt() takes 1 argument, got 0", "sqrt(x)"),
    ("two arguments", "c[i] = exp(a[i], b[i])", HybridTypeError, 16, "exp() takes 1 argument, got 2", "exp(x)"),
    ("atan2 of one", "c[i] = atan2(a[i])", HybridTypeError, 16, "atan2() takes 2 arguments, got 1", "atan2(y, x)"),
    ("max of one", "c[i] = max(a[i])", HybridTypeError, 16, "max() takes at least 2 arguments, got 1",
     "max(a, b, ...)"),
    ("min of none", "c[i] = min()", HybridTypeError, 16, "min() takes at least 2 arguments, got 0", "min(a, b, ...)"),
    ("ceil_div of three", "c[i] = ceil_div(a[i], 2, 3)", HybridTypeError, 16, "ceil_div() takes 2 arguments, got 3",
     "ceil_div(a, b)"),
    ("power of one", "c[i] = power(a[i])", HybridTypeError, 16, "power() takes 2 arguments, got 1", "power(x, y)"),
    ("popcount of a float", "c[i] = popcount(a[i])", HybridTypeError, 25, "popcount() takes integers, this is float32",
     "int32(x)"),
    ("ceil_div of a float", "c[i] = ceil_div(7, b[i])", HybridTypeError, 28, "ceil_div() takes integers, this is float32",
     "ceil(a / b)"),
    ("sqrt of a bool", "c[i] = sqrt(a[i] > 0)", HybridTypeError, 21, "sqrt() of a bool value", "float32(c)"),
    ("keyword", "c[i] = max(a[i], b=b[i])", HybridTypeError, 28, "max() takes no keyword arguments", None),
    ("misspelt", "c[i] = maximum(a[i], b[i])", HybridNameError, 16, "unknown function `maximum`", "`max`"),
    ("not called", "c[i] = a[i] + sqrt", HybridTypeError, 23, "`sqrt` is a function; call it", None),
    ("tensor argument", "c[i] = min(a, 1)", HybridTypeError, 20, "tensor `a` is used as a number", "a[i]"),
    ("weak negative power", "c[i] = a[i] * 2 ** -1", HybridTypeError, 28,
     "integers to negative integer powers are not allowed", "x ** -2.0"),
]


@pytest.mark.parametrize("name,stmt,cls,col,words,hint", BAD, ids=[b[0] for b in BAD])
def test_bad_intrinsic_calls(name, stmt, cls, col, words, hint):
    src = HEAD + "        " + stmt + "\n    return c\n"
    x = np.arange(4, dtype=np.float32)
    with pytest.raises(cls) as info:
        hyb.compile_source(src, "bad.hyb").k(x, x)
    e = info.value
    assert isinstance(e, HybridError)
    assert (e.filename, e.line, e.col) == ("bad.hyb", 4, col), e.render()
    assert words in e.message, e.render()
    if hint:
        assert hint in (e.hint or ""), e.render()


def test_a_local_may_take_an_intrinsic_name_and_then_hides_it():
    # as in Python (akg's kernels name a local `len`): the local is fine, calling the name is not
    k = hyb.compile_source(HEAD + "        sqrt = a[i] * 2.0\n        c[i] = sqrt\n    return c\n", "ok.hyb").k
    np.testing.assert_array_equal(k(np.ones(2), np.ones(2)), [2.0, 2.0])
    with pytest.raises(HybridTypeError) as info:
        hyb.compile_source(HEAD + "        sqrt = a[i]\n        c[i] = sqrt(b[i])\n    return c\n",
                           "bad.hyb").k(np.ones(2), np.ones(2))
    assert (info.value.line, info.value.col) == (5, 16) and info.value.message == "`sqrt` is not a function"
    assert "a local named `sqrt` hides the built-in" in info.value.hint
    with pytest.raises(HybridNameError) as info:  # the language's own words stay reserved
        hyb.compile_source(HEAD + "        range = a[i]\n    return c\n", "bad.hyb").k(np.ones(2), np.ones(2))
    assert "`range` is a built-in name" in info.value.message
