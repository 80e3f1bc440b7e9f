"""Mistakes in a call blame the argument, and run-time index errors say what made the index go out of
bounds; keyword arguments bind by parameter name as in Python."""
from __future__ import annotations

import numpy as np
import pytest

import hyb
from hyb.errors import HybridArgumentError, HybridIndexError, HybridTypeError

SRC = '''
def axpy(alpha, x, y):
    c = output_tensor(x.shape, x.dtype)
    for i in range(x.shape[0]):
        c[i] = alpha * x[i] + y[i]
    return c

def gather(a, idx):
    c = output_tensor(idx.shape, a.dtype)
    for i in range(idx.shape[0]):
        c[i] = a[idx[i]]
    return c

def ragged(lens, a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        for j in range(lens[i]):
            c[i, j] = a[i, j]
    return c

def squares(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i * i] = a[i]
    return c
'''


@pytest.fixture(scope="module")
def mod():
    return hyb.compile_source(SRC, "calls.hyb")


def test_keywords_bind_by_name(mod):
    x, y = np.arange(3.0), np.ones(3)
    want = 2 * x + y
    for call in (lambda f: f(2.0, x, y), lambda f: f(2.0, y=y, x=x), lambda f: f(alpha=2.0, x=x, y=y)):
        np.testing.assert_array_equal(call(mod.axpy), want)
        np.testing.assert_array_equal(call(mod.axpy.emulate), want)
    assert mod.axpy.compile(2.0, y=y, x=x) is mod.axpy.compile(2.0, x, y)
    dx = mod.axpy.grad()(2.0, x, y=y, dout=np.ones(3))[1]
    np.testing.assert_array_equal(dx, [2.0, 2.0, 2.0])


@pytest.mark.parametrize("kwargs,message,hint", [
    ({"z": 1}, "kernel axpy(alpha, x, y) has no parameter `z`", "its parameters: alpha, x, y"),
    ({"yy": 1}, "kernel axpy(alpha, x, y) has no parameter `yy`", "did you mean `y`?"),
    ({"x": 1, "y": 1}, "kernel axpy(alpha, x, y) got two values for `x`", "pass it by position or by name, not both"),
])
def test_keyword_mistakes_are_argument_errors(mod, kwargs, message, hint):
    with pytest.raises(HybridArgumentError) as info:
        mod.axpy(2.0, np.ones(3), **kwargs)
    assert info.value.message == message and info.value.hint == hint


def test_a_missing_keyword_argument(mod):
    with pytest.raises(HybridArgumentError) as info:
        mod.axpy(2.0, x=np.ones(3))
    assert info.value.message == "kernel axpy(alpha, x, y) is missing `y`"


def test_an_array_of_the_wrong_rank_blames_the_argument(mod):
    with pytest.raises(HybridTypeError) as info:
        mod.axpy(2.0, np.ones((3, 2)), np.ones(3))
    e = info.value
    assert e.message == "argument `x` has 2 dimensions (shape (3, 2)), but `x` is indexed with 1 subscript here"
    assert (e.line, e.col) == (5, 24)
    assert e.hint == "pass an array of 1 dimension for `x`, or index it with 2 subscripts"


@pytest.mark.parametrize("run", ["compiled", "emulate"])
def test_run_time_index_hints_name_the_cause(mod, run):
    def call(k, *args):
        return k(*args) if run == "compiled" else k.emulate(*args)

    with pytest.raises(HybridIndexError) as info:
        call(mod.gather, np.arange(4.0), np.array([0, 9]))
    assert info.value.hint == "the index was computed at run time; check the values it is read from"
    with pytest.raises(HybridIndexError) as info:
        call(mod.ragged, np.array([2, 5]), np.ones((2, 3)))
    assert info.value.hint.startswith("the loop bounds or the condition around this access depend on values read")
    assert (info.value.line, info.value.col) == (18, 23)  # the read, evaluated before the store
    with pytest.raises(HybridIndexError) as info:
        call(mod.squares, np.ones(3))
    assert info.value.hint.startswith("the index is not an affine function of the loop variables")
