"""A scalar local's type is the promotion of every value assigned to it, as NumPy 2 (NEP 50) gives
when the same lines run in Python: Python numbers are weak.

Compiled code, ``emulate()`` and NumPy agree on each kernel, at sizes 0, 1 and odd, in every
dtype the kernel type-checks for.
"""
from __future__ import annotations

import numpy as np
import pytest

import hyb
from hyb.dsl import tir
from hyb.dsl.check import arg_specs, check_kernel, widened_type
from hyb.dsl.parser import parse_string

SRC = '''
def total(a):
    c = output_tensor((1,), "float64")
    acc = 0
    for i in range(a.shape[0]):
        acc += a[i]
    c[0] = acc
    return c

def running_max(a):
    c = output_tensor((1,), "float64")
    best = 0
    for i in range(a.shape[0]):
        if a[i] > best:
            best = a[i]
    c[0] = best
    return c

def later_float(a):
    c = output_tensor(a.shape, "float64")
    for i in range(a.shape[0]):
        x = i
        x = x + 0.5
        c[i] = x
    return c

def chained(a):
    c = output_tensor((1,), "float64")
    s = 0
    t = 0
    for i in range(a.shape[0]):
        t = s
        s = t + a[i] * 0.5
    c[0] = s
    return c

def stays_int(a):
    c = output_tensor((1,), "int64")
    n = 0
    for i in range(a.shape[0]):
        if a[i] > 0:
            n += 1
    c[0] = n
    return c
'''


@pytest.fixture(scope="module")
def mod():
    return hyb.compile_source(SRC)


def scalar_dtype(src_kernel: str, name: str, *args) -> str:
    module = parse_string(SRC, "k.hyb")
    k = check_kernel(module.kernels[src_kernel], module, arg_specs(list(args)))
    (t,) = [t for t in k.tensors.values() if t.kind == "scalar" and t.source_name == name]
    return t.dtype


def test_the_users_example_sums_without_truncating(mod):
    a = np.array([.5, .6, .7, 1.2], dtype=np.float32)
    assert mod.total(a)[0] == pytest.approx(3.0, rel=1e-6)
    assert mod.total.emulate(a)[0] == pytest.approx(3.0, rel=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32", "uint8", "int64"])
@pytest.mark.parametrize("n", [0, 1, 7])
def test_sum_compiled_emulated_numpy(mod, dtype, n):
    rng = np.random.default_rng(n)
    a = (rng.random(n) * 4).astype(dtype)
    want = float(np.sum(a.astype(np.float64)))
    got, emu = mod.total(a), mod.total.emulate(a)
    np.testing.assert_allclose(got, [want], rtol=1e-3 if dtype == "float16" else 1e-6)
    np.testing.assert_array_equal(got, emu)


@pytest.mark.parametrize("n", [0, 1, 9])
def test_a_value_assigned_under_a_branch_widens_too(mod, n):
    a = np.random.default_rng(3).standard_normal(n) + 0.25
    want = max([0.0] + list(a))
    np.testing.assert_allclose(mod.running_max(a), [want])
    np.testing.assert_array_equal(mod.running_max(a), mod.running_max.emulate(a))


def test_types_of_the_scalars():
    f32 = np.zeros(3, np.float32)
    assert scalar_dtype("total", "acc", f32) == "float32"  # a Python 0 meets float32: float32 (NEP 50)
    assert scalar_dtype("total", "acc", np.zeros(3, np.int32)) == "int32"
    assert scalar_dtype("total", "acc", np.zeros(3, np.int64)) == "int64"
    assert scalar_dtype("running_max", "best", f32) == "float32"
    assert scalar_dtype("running_max", "best", np.zeros(3)) == "float64"
    # only Python numbers (a loop variable, then + 0.5): a weak Python float
    assert scalar_dtype("later_float", "x", f32) == "float"
    # t = s and s = t + ...: each widens the other, until both settle
    assert scalar_dtype("chained", "s", f32) == "float32"
    assert scalar_dtype("chained", "t", f32) == "float32"
    assert scalar_dtype("stays_int", "n", f32) == "int"


def test_later_float_and_chained_values(mod):
    a = np.arange(5, dtype=np.float32)
    np.testing.assert_array_equal(mod.later_float(a), np.arange(5) + 0.5)
    np.testing.assert_array_equal(mod.later_float.emulate(a), np.arange(5) + 0.5)
    np.testing.assert_allclose(mod.chained(a), [a.sum() * 0.5])
    np.testing.assert_array_equal(mod.stays_int(np.array([1.0, -1.0, 2.0])), [2])


def test_widening_rule():
    assert widened_type("int64", "float32") == "float64"
    assert widened_type("float32", "float64") == "float64"
    assert widened_type("float32", "int8") == "float32"
    assert widened_type("bool", "int32") == "int32"
    assert widened_type("int32", "int64") == "int64"
    # two integer types that meet only in a float keep the scalar's type (the value is cast)
    assert widened_type("int64", "uint64") == "int64"
    assert widened_type("int64", "int") == "int64"
    # Python numbers are weak: they take the type they meet, and stay weak among themselves
    assert widened_type("float", "float32") == "float32"
    assert widened_type("int", "float16") == "float16"
    assert widened_type("int", "float") == "float"
    assert widened_type("float", "int64") == "float64"
    assert widened_type("int64", "float") == "float64"


def test_a_store_into_an_int_tensor_still_narrows():
    src = '''def k(a):
    c = output_tensor(a.shape, "int32")
    for i in range(a.shape[0]):
        c[i] = a[i] * 2.5
    return c
'''
    k = hyb.compile_source(src).k
    a = np.array([1.0, -1.0, 3.0])
    np.testing.assert_array_equal(k(a), (a * 2.5).astype(np.int32))


def test_the_gradient_follows_the_widened_type(mod):
    a = np.array([0.5, 1.5, -2.0])
    (g,) = (mod.total.grad()(a, np.ones(1)),)
    np.testing.assert_array_equal(np.asarray(g), np.ones(3))


def test_a_widened_scalar_used_as_an_index_is_a_clear_error():
    src = '''def k(a):
    c = output_tensor(a.shape, a.dtype)
    j = 0
    for i in range(a.shape[0]):
        c[j] = a[i]
        j = a[i]
    return c
'''
    with pytest.raises(hyb.HybridTypeError) as info:
        hyb.compile_source(src, filename="w.hyb").k(np.zeros(3))
    assert "an index must be an integer, this is float64" in str(info.value)
    assert info.value.span.line == 5 and info.value.span.col == 11
    assert info.value.hint.startswith("`j` is a float64 because line 6 assigns it a float64 value")
