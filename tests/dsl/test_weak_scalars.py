"""Python numbers are weak, as in NumPy 2 (NEP 50): the same lines run in Python over NumPy arrays
give the dtypes and the bits that the compiled kernel and ``emulate`` give.

Each kernel here is also plain Python: run with ``output_tensor`` as ``np.zeros`` and the
intrinsics as NumPy's ufuncs, NumPy 2 decides every scalar's type step by step (a Python float
becomes a float32 the first time it meets one). The compiled code keeps sums in order
(``reassociate`` off), so the results must agree bit for bit (the compiled `exp` within its ulps).
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import hyb
from hyb.dsl.check import arg_specs, check_kernel
from hyb.dsl.parser import parse_string

SRC = '''
def softmax(x):
    y = output_tensor(x.shape, x.dtype)
    for i in range(x.shape[0]):
        m = x[i, 0]
        for j in range(x.shape[1]):
            m = max(m, x[i, j])
        s = 0.0
        for j in range(x.shape[1]):
            y[i, j] = exp(x[i, j] - m)
            s += y[i, j]
        for j in range(x.shape[1]):
            y[i, j] = y[i, j] / s
    return y

def adam(p, g, m, v, lr, beta1, beta2, eps, step):
    bc1 = 1.0 - beta1 ** step
    bc2 = 1.0 - beta2 ** step
    for i in range(p.shape[0]):
        m[i] = beta1 * m[i] + (1.0 - beta1) * g[i]
        v[i] = beta2 * v[i] + (1.0 - beta2) * g[i] * g[i]
        p[i] = p[i] - lr * (m[i] / bc1) / (sqrt(v[i] / bc2) + eps)
    return p, m, v

def total(a):
    c = output_tensor((2,), a.dtype)
    acc = 0
    n = 0
    for i in range(a.shape[0]):
        acc += a[i]
        n += 1
    c[0] = acc
    c[1] = acc / n
    return c

def scaled(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        k = i * 0.5
        c[i] = a[i] / 1.0 + k
    return c
'''

NAMESPACE = {"output_tensor": lambda shape, dtype: np.zeros(shape, dtype), "exp": np.exp, "sqrt": np.sqrt,
             "max": np.maximum}


@pytest.fixture(scope="module")
def kernels():
    return hyb.compile_source(SRC, "weak.hyb", schedule={"reassociate": False})


def in_numpy(name, *args):
    """The kernel's own lines run by Python over NumPy arrays: NumPy 2's promotion, step by step."""
    ns = dict(NAMESPACE)
    exec(compile(SRC, "weak.hyb", "exec"), ns)
    with np.errstate(over="ignore"):
        return ns[name](*args)


def same(got, want):
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (2, 33)])
def test_softmax_sum_is_in_the_arrays_dtype(kernels, dtype, shape):
    x = np.random.default_rng(shape[1]).standard_normal(shape).astype(dtype)
    want = in_numpy("softmax", x.copy())
    same(kernels.softmax.emulate(x), want)
    got = kernels.softmax(x)  # (compiled exp is within an ulp or two of NumPy's, not bit for bit)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol={"float16": 2e-3, "float32": 1e-6, "float64": 1e-14}[dtype])


def test_python_float_hyper_parameters_keep_float32(kernels):
    rng = np.random.default_rng(1)
    p, g, m, v = (rng.standard_normal(37).astype(np.float32) for _ in range(4))
    v = np.abs(v)
    args = (0.001, 0.9, 0.999, 1e-8, 3)
    want = in_numpy("adam", p.copy(), g, m.copy(), v.copy(), *args)
    same(kernels.adam(p.copy(), g, m.copy(), v.copy(), *args), want)
    same(kernels.adam.emulate(p.copy(), g, m.copy(), v.copy(), *args), want)


@pytest.mark.parametrize("dtype", ["float32", "int32", "int8", "uint8", "float64"])
def test_a_python_zero_takes_the_elements_dtype(kernels, dtype):
    # int8 and uint8 wrap, as they do in NumPy 2 (a Python 0 plus an int8 is an int8)
    a = (np.arange(40) * 7 % 50).astype(dtype)
    want = in_numpy("total", a)
    same(kernels.total(a), want)
    same(kernels.total.emulate(a), want)


def test_literals_and_loop_variables_are_weak(kernels):
    a = np.linspace(-1, 1, 9).astype(np.float32)
    want = in_numpy("scaled", a)
    same(kernels.scaled(a), want)
    same(kernels.scaled.emulate(a), want)


def scalar_types(name, *args):
    module = parse_string(SRC, "weak.hyb")
    k = check_kernel(module.kernels[name], module, arg_specs(list(args)))
    return {t.source_name: t.dtype for t in k.tensors.values() if t.kind == "scalar"}


def test_the_scalars_types():
    f32 = np.zeros((2, 2), np.float32)
    assert scalar_types("softmax", f32) == {"m": "float32", "s": "float32"}
    v = np.zeros(3, np.float32)
    # only Python numbers: weak Python floats, which take float32 where they meet the arrays
    assert scalar_types("adam", v, v, v, v, 0.001, 0.9, 0.999, 1e-8, 3) == {"bc1": "float", "bc2": "float"}
    assert scalar_types("total", np.zeros(3, np.int16)) == {"acc": "int16", "n": "int"}


def compile_warnings(src, *args):
    k = hyb.compile_source(src, "w.hyb").f
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        k(*args)
    return [w.message for w in caught if isinstance(w.message, hyb.HybridWarning)]


MIXED = '''
def f(x, n):
    y = output_tensor(x.shape, x.dtype)
    for i in range(x.shape[0]):
        y[i] = x[i] * n[i]
    return y
'''


def test_float64_from_an_int64_beside_float32_arrays_warns():
    (w,) = compile_warnings(MIXED, np.ones(3, np.float32), np.arange(3))
    assert isinstance(w, hyb.HybridFloat64Warning)
    assert (w.span.line, w.span.col) == (5, 16)
    assert w.message == "this computes in float64 (float32 and int64 meet in float64) beside float32 arrays"
    assert "float32(x)" in w.hint and "float64(...)" in w.hint


def test_a_numpy_float64_argument_warns_and_names_it():
    src = MIXED.replace("def f(x, n)", "def f(x, beta)").replace("x[i] * n[i]", "beta * x[i] + 1.0")
    (w,) = compile_warnings(src, np.ones(3, np.float32), np.float64(0.5))
    assert w.message == ("this computes in float64 (the float64 argument `beta` makes it float64) beside float32 "
                         "arrays")
    assert (w.span.line, w.span.col) == (5, 16)
    assert "float32(beta)" in w.hint
    assert compile_warnings(src, np.ones(3, np.float32), 0.5) == []  # a Python float: weak, no float64


def test_float64_written_out_or_in_the_arrays_gives_no_warning():
    explicit = MIXED.replace("x[i] * n[i]", "float64(x[i]) * float64(n[i])")
    assert compile_warnings(explicit, np.ones(3, np.float32), np.arange(3)) == []
    assert compile_warnings(MIXED, np.ones(3, np.float64), np.arange(3)) == []
    assert compile_warnings(MIXED, np.ones(3, np.float32), np.arange(3, dtype=np.int16)) == []  # float32 there
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", hyb.HybridFloat64Warning)
        hyb.compile_source(MIXED, "w.hyb").f(np.ones(3, np.float32), np.arange(3))
