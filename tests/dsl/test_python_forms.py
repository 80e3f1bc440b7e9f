"""Python spellings users write: tuple assignment and Python's casts (hyb.dsl.desugar).

Each kernel runs compiled and under ``emulate()`` and is compared with NumPy, at sizes 0, 1,
odd and even; the rewritten syntax tree is checked on its own too.
"""
from __future__ import annotations

import numpy as np
import pytest

import hyb
from hyb.dsl import ast as syntax
from hyb.dsl.parser import parse_string

SRC = '''
def reverse(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i]
    n, = a.shape
    for i in range(n // 2):
        c[i], c[n - 1 - i] = c[n - 1 - i], c[i]
    return c

def sorted_pairs(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        lo = a[i, 0]
        hi = a[i, 1]
        if lo > hi:
            lo, hi = hi, lo
        c[i, 0], c[i, 1] = lo, hi
    return c

def transpose(a):
    n, m = a.shape
    c = output_tensor((m, n), a.dtype)
    for idx in grid(a.shape):
        i, j = idx
        c[j, i] = a[i, j]
    return c

def fib(a):
    c = output_tensor(a.shape, "int64")
    x, y = 0, 1
    for i in range(a.shape[0]):
        c[i] = x
        x, y = y, x + y
    return c

def casts(a):
    c = output_tensor(a.shape, "float64")
    d = output_tensor(a.shape, "int64")
    e = output_tensor(a.shape, "bool")
    for i in range(a.shape[0]):
        c[i] = float(a[i]) / 2
        d[i] = int(a[i])
        e[i] = bool(a[i])
    return c, d, e
'''


@pytest.fixture(scope="module")
def mod():
    return hyb.compile_source(SRC)


def both(kernel, *args):
    got = kernel(*args)
    emu = kernel.emulate(*args)
    return got, emu


@pytest.mark.parametrize("n", [0, 1, 2, 7, 8])
def test_element_swap_reverses(mod, n):
    a = np.arange(n, dtype=np.float32) * 1.5
    got, emu = both(mod.reverse, a)
    np.testing.assert_array_equal(got, a[::-1])
    np.testing.assert_array_equal(emu, a[::-1])


@pytest.mark.parametrize("n", [0, 1, 5])
@pytest.mark.parametrize("dtype", ["float64", "int32", "uint8"])
def test_scalar_swap_sorts_each_pair(mod, n, dtype):
    a = (np.random.default_rng(n).random((n, 2)) * 50).astype(dtype)
    got, emu = both(mod.sorted_pairs, a)
    np.testing.assert_array_equal(got, np.sort(a, axis=1))
    np.testing.assert_array_equal(emu, np.sort(a, axis=1))


@pytest.mark.parametrize("shape", [(0, 3), (1, 1), (3, 5)])
def test_unpacking_a_shape_and_a_grid_index(mod, shape):
    a = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
    got, emu = both(mod.transpose, a)
    np.testing.assert_array_equal(got, a.T)
    np.testing.assert_array_equal(emu, a.T)


def test_right_side_first(mod):
    got, emu = both(mod.fib, np.zeros(10))
    want = [0, 1, 1, 2, 3, 5, 8, 13, 21, 34]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(emu, want)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int16", "uint32"])
def test_python_casts_are_int64_float64_bool(mod, dtype):
    a = np.array([0, 1, 2.7, -3.5, 100], dtype=np.float64)
    if dtype.startswith("u"):
        a = np.abs(a)
    a = a.astype(dtype)
    (c, d, e), (ce, de, ee) = both(mod.casts, a)
    np.testing.assert_array_equal(c, a.astype(np.float64) / 2)
    np.testing.assert_array_equal(d, a.astype(np.int64))
    np.testing.assert_array_equal(e, a.astype(bool))
    for x, y in ((c, ce), (d, de), (e, ee)):
        np.testing.assert_array_equal(x, y)
    assert d.dtype == np.int64 and c.dtype == np.float64


def test_the_rewritten_tree():
    body = parse_string(SRC).kernels["sorted_pairs"].body
    branch = body[1].body[2]  # if lo > hi:
    text = [(s.target.id, s.value.id) for s in branch.body]
    # `lo, hi = hi, lo`: the second value reads `lo`, which the first target assigns: copied first
    assert text == [("lo_old", "lo"), ("lo", "hi"), ("hi", "lo_old")]
    (shape_n, shape_m) = parse_string(SRC).kernels["transpose"].body[:2]
    assert isinstance(shape_n.value, syntax.Subscript) and shape_n.value.unpack == 2
    assert shape_m.value.indices[0].value == 1
    casts = parse_string(SRC).kernels["casts"].body[3].body
    assert [s.value.func.id if isinstance(s.value, syntax.Call) else s.value.left.func.id for s in casts] == \
        ["float64", "int64", "bool"]


def test_independent_values_need_no_copies():
    body = parse_string("def k(a):\n    c = output_tensor(a.shape, a.dtype)\n"
                        "    x, y = a[0], a[1]\n    c[0] = x + y\n    return c\n").kernels["k"].body
    assert [s.target.id for s in body[1:3]] == ["x", "y"]


def test_gradient_through_a_swap(mod):
    a = np.array([[3.0, 1.0], [1.0, 2.0]])
    dout = np.array([[10.0, 20.0], [30.0, 40.0]])
    g = mod.sorted_pairs.grad()(a, dout)
    # row 0 was swapped: d a[0,0] comes from c[0,1]
    np.testing.assert_array_equal(g, [[20.0, 10.0], [30.0, 40.0]])


def test_a_kernel_call_keeps_its_tuple_targets():
    src = '''
def two(a):
    c = output_tensor(a.shape, a.dtype)
    d = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] + 1
        d[i] = a[i] * 2
    return c, d

def k(a):
    c, d = two(a)
    return c, d
'''
    c, d = hyb.compile_source(src).k(np.arange(3.0))
    np.testing.assert_array_equal(c, [1, 2, 3])
    np.testing.assert_array_equal(d, [0, 2, 4])


@pytest.mark.parametrize("body,cls,col,message", [
    ("c[i] = float(a[i], 2)", hyb.HybridTypeError, 16, "float() takes 1 argument, got 2"),
    ("c[i] = int(a)", hyb.HybridTypeError, 20, "tensor `a` is used as a number"),
    ("c[i] = int(a[i], base=2)", hyb.HybridTypeError, 31, "int() takes no keyword arguments"),
])
def test_python_cast_mistakes_name_what_the_user_wrote(body, cls, col, message):
    src = ("def k(a):\n    c = output_tensor(a.shape, a.dtype)\n    for i in range(a.shape[0]):\n"
           f"        {body}\n    return c\n")
    with pytest.raises(cls) as info:
        hyb.compile_source(src, "c.hyb").k(np.zeros(3))
    assert info.value.message == message
    assert (info.value.line, info.value.col) == (4, col)
