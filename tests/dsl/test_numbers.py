"""Infinity, NaN and π in the spellings people port: `-math.inf`, `float("-inf")`, `np.inf`,
`numpy.nan`, `math.pi`. Each is a Python float (weak), computed the same by the compiled code,
``emulate`` and NumPy, and written back into a derived gradient's text as `float("inf")`."""
from __future__ import annotations

import numpy as np
import pytest

import hyb
from hyb.errors import HybridTypeError

SRC = '''
def running_max(x, start):
    y = output_tensor((x.shape[0],), x.dtype)
    for i in range(x.shape[0]):
        m = start
        for j in range(x.shape[1]):
            m = max(m, x[i, j])
        y[i] = m
    return y
'''

SPELLINGS = ["-math.inf", 'float("-inf")', "-np.inf", "-numpy.inf", 'float("-Infinity")', "-jnp.inf"]


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_a_running_maximum_from_minus_infinity(spelling, dtype):
    k = hyb.compile_source(SRC.replace("start", spelling).replace("def running_max(x, " + spelling + ")",
                                                                   "def running_max(x)"), "numbers.hyb").running_max
    x = np.random.default_rng(3).standard_normal((5, 7)).astype(dtype)
    x[2] = -np.inf
    want = x.max(axis=1)
    for got in (k(x), k.emulate(x)):
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got, want)
    # no row: the maximum stays minus infinity, in the array's dtype
    empty = np.zeros((3, 0), dtype)
    np.testing.assert_array_equal(k(empty), np.full(3, -np.inf, dtype))


CONSTANTS = '''
def consts(x):
    y = output_tensor((x.shape[0], 5), x.dtype)
    for i in range(x.shape[0]):
        y[i, 0] = x[i] * math.pi
        y[i, 1] = x[i] + np.e
        y[i, 2] = numpy.nan
        y[i, 3] = float("inf")
        y[i, 4] = min(x[i], np.inf)
    return y
'''


def test_constants_are_weak_python_floats():
    k = hyb.compile_source(CONSTANTS, "c.hyb").consts
    x = np.linspace(-1, 1, 4).astype(np.float32)
    want = np.stack([x * np.pi, x + np.e, np.full(4, np.nan, np.float32), np.full(4, np.inf, np.float32),
                     np.minimum(x, np.inf)], axis=1)
    for got in (k(x), k.emulate(x)):
        assert got.dtype == np.float32  # weak: float32 beside a float32 x, as in NumPy 2
        np.testing.assert_array_equal(got, want)


def test_a_name_of_the_kernels_own_hides_the_module():
    src = '''
def f(x):
    y = output_tensor(x.shape, x.dtype)
    for math in range(x.shape[0]):
        y[math] = x[math] + 1.0
    return y
'''
    k = hyb.compile_source(src, "hide.hyb").f
    np.testing.assert_array_equal(k(np.zeros(3, np.float32)), np.ones(3, np.float32))
    src2 = src.replace("x[math] + 1.0", "x[math] + math.inf")
    with pytest.raises(hyb.HybridError) as e:
        hyb.compile_source(src2, "hide.hyb").f(np.zeros(3, np.float32))
    assert (e.value.span.line, e.value.span.col) == (5, 29)
    assert "only defined on tensors" in e.value.message


def test_float_of_a_string_that_is_no_number():
    src = '''
def f(x):
    y = output_tensor(x.shape, x.dtype)
    for i in range(x.shape[0]):
        y[i] = x[i] + float("infinite")
    return y
'''
    with pytest.raises(HybridTypeError) as e:
        hyb.compile_source(src, "bad.hyb").f(np.zeros(3, np.float32))
    err = e.value
    assert err.message == "float() of 'infinite', which is not a number"
    assert (err.span.line, err.span.col) == (5, 29)
    assert "inf" in err.hint


def test_the_gradient_text_writes_infinity_back():
    src = '''
def softmax(x):
    y = output_tensor(x.shape, x.dtype)
    for i in range(x.shape[0]):
        m = -math.inf
        for j in range(x.shape[1]):
            m = max(m, x[i, j])
        s = 0.0
        for j in range(x.shape[1]):
            y[i, j] = exp(x[i, j] - m)
            s += y[i, j]
        for j in range(x.shape[1]):
            y[i, j] = y[i, j] / s
    return y
'''
    k = hyb.compile_source(src, "sm.hyb").softmax
    x = np.random.default_rng(0).standard_normal((3, 6))
    g = np.random.default_rng(1).standard_normal((3, 6))
    text = k.compile(x).inspect("grad")
    assert 'float("inf")' in text
    y = k(x)
    want = y * (g - (g * y).sum(axis=1, keepdims=True))  # the softmax's vector-Jacobian product
    np.testing.assert_allclose(k.grad()(x, g), want, rtol=1e-10, atol=1e-12)
