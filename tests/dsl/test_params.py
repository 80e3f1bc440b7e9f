"""Scalar kernel parameters: Python and NumPy scalars, typed as NumPy 2 types them (NEP 50)."""
import numpy as np
import pytest

import hyb
from hyb.errors import HybridIndexError, HybridTypeError

SRC = '''
def axpy(alpha, x, y):
    c = output_tensor(x.shape, x.dtype)
    for i in range(x.shape[0]):
        c[i] = alpha * x[i] + y[i]
    return c

def scaled(x, s):
    c = output_tensor(x.shape, "float64")
    for i in range(x.shape[0]):
        c[i] = x[i] * s
    return c

def first_n(x, n):
    c = output_tensor(x.shape, x.dtype)
    for i in range(n):
        c[i] = x[i]
    return c

def rotate(x, k, flag):
    c = output_tensor(x.shape, x.dtype)
    for i in range(x.shape[0]):
        if flag:
            c[i] = x[(i + k) % x.shape[0]]
        else:
            c[i] = -x[i]
    return c

def clamp(x, lo, hi):
    c = output_tensor(x.shape, x.dtype)
    for i in range(x.shape[0]):
        c[i] = max(min(x[i], hi), lo)
    return c

def bad(x, n):
    n = 3
    return x
'''
MOD = hyb.compile_source(SRC, "params.hyb")


def both(kernel, *args):
    got = kernel(*args)
    emu = kernel.emulate(*args)
    assert got.dtype == emu.dtype
    np.testing.assert_array_equal(got, emu)
    return got


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("alpha", [2, -3, 0.5, np.float32(1.5), np.float64(-0.25), np.int8(3)])
def test_axpy_follows_numpy_promotion(dtype, alpha):
    x = np.arange(7).astype(dtype)
    y = np.ones(7, dtype=dtype)
    ref = alpha * x + y  # NumPy 2: Python scalars are weak, NumPy scalars are not
    if ref.dtype.kind == "f" and np.dtype(dtype).kind in "iu":
        with np.errstate(invalid="ignore"):
            ref = ref.astype(dtype)
    got = both(MOD.axpy, alpha, x, y)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, ref.astype(dtype))


def test_weak_python_float_keeps_float32_arithmetic():
    x = np.array([1 / 3], dtype=np.float32)
    # float32 product rounded to float32 first, then widened: not the float64 product.
    assert both(MOD.scaled, x, 3.0)[0] == np.float64(x[0] * np.float32(3.0))
    assert both(MOD.scaled, x, np.float64(3.0))[0] == np.float64(x[0]) * 3.0


def test_one_compile_per_scalar_type_not_per_value():
    k = hyb.compile_source(SRC).axpy
    x = np.ones(4)
    for v in (1.0, 2.0, 3.5):
        k(v, x, x)
    k(2, x, x)
    assert len(k._cache) == 2


@pytest.mark.parametrize("n", [0, 1, 5])
def test_scalar_loop_bound(n):
    x = np.arange(1.0, 6.0)
    expected = np.where(np.arange(5) < n, x, 0)
    np.testing.assert_array_equal(both(MOD.first_n, x, n), expected)


def test_scalar_loop_bound_out_of_range_is_checked():
    x = np.arange(5.0)
    for run in (MOD.first_n, MOD.first_n.emulate):
        with pytest.raises(HybridIndexError, match="index 5 is out of bounds for axis 0 of `x`"):
            run(x, 6)


@pytest.mark.parametrize("k", [-7, -1, 0, 2, 12])
def test_scalar_in_subscript_and_condition(k):
    x = np.arange(5.0)
    np.testing.assert_array_equal(both(MOD.rotate, x, k, True), np.roll(x, -k))
    np.testing.assert_array_equal(both(MOD.rotate, x, k, False), -x)


def test_scalar_in_intrinsics():
    x = np.linspace(-2, 2, 9).astype(np.float32)
    np.testing.assert_array_equal(both(MOD.clamp, x, -1.0, 0.5), np.clip(x, -1.0, 0.5))


def test_assigning_a_parameter_is_an_error():
    with pytest.raises(HybridTypeError) as info:
        MOD.bad(np.ones(2), 4)
    assert info.value.message == "cannot assign to `n`, a scalar parameter"
    line = SRC.split("\n").index("    n = 3") + 1
    assert (info.value.line, info.value.col) == (line, 5)


def test_scalar_that_does_not_fit():
    with pytest.raises(hyb.HybridArgumentError, match="does not fit int64"):
        MOD.first_n(np.ones(2), 2 ** 70)


def test_complex_scalar_rejected():
    with pytest.raises(hyb.HybridArgumentError, match="complex"):
        MOD.first_n(np.ones(2), 1j)
