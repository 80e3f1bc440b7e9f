"""Kernel calls as TVM's hybrid script writes them: numbers among the arguments, calls that
write their tensor arguments, tuple results of captured kernels in the decorated form, and
captured constants that are nested tuples or lists."""
import numpy as np
import pytest

import hyb

CALLS = '''
def outer_product(n, m, a, b):
    c = output_tensor((n, m), a.dtype)
    for i in range(n):
        for j in range(m):
            c[i, j] = a[i] * b[j]
    return c

def fill(c, v):
    for i in range(c.shape[0]):
        c[i] = v
    return c

def scaled(a, s):
    b = output_tensor(a.shape, a.dtype)
    s = s * 2.0
    for i in range(a.shape[0]):
        b[i] = a[i] * s
    return b

def main(a, b, s):
    c = outer_product(4, 3, a, b)
    d = output_tensor(a.shape, a.dtype)
    fill(d, s)
    e = scaled(a, s + 1.0)
    return c, d, e
'''


def test_numbers_and_written_tensors_in_kernel_calls():
    k = hyb.compile_source(CALLS, "calls.hyb").main
    a, b = np.arange(4, dtype=np.float32), np.arange(3, dtype=np.float32) + 1
    for f in (k, k.emulate):
        c, d, e = f(a, b, np.float32(1.5))
        np.testing.assert_array_equal(c, np.outer(a, b))
        np.testing.assert_array_equal(d, np.full(4, 1.5, np.float32))
        np.testing.assert_array_equal(e, a * np.float32(5.0))  # the callee's copy of s doubled, not the caller's


def test_a_kernel_call_argument_that_is_none_of_these_is_named():
    src = CALLS + "\ndef bad(a):\n    c = fill(a, a.shape)\n    return c\n"
    with pytest.raises(hyb.HybridTypeError):
        hyb.compile_source(src, "calls.hyb").bad(np.zeros(3))


@hyb.hybrid
def _helper(x):
    a = output_tensor(x.shape, x.dtype)
    b = output_tensor(x.shape, x.dtype)
    for i in range(x.shape[0]):
        a[i] = x[i] + 1.0
        b[i] = x[i] * 2.0
    return a, b


@hyb.hybrid
def _outer(n, m, a, b):
    c = output_tensor((n, m), a.dtype)
    for i in range(n):
        for j in range(m):
            c[i, j] = a[i] * b[j]
    return c


TABLE = ((1, 2), (3, 4))
ROWS = [[0.5, 1.5], [2.5, 3.5]]


@hyb.hybrid
def _main(x):
    y0, y1 = _helper(x)
    c = _outer(3, 3, y0, y1)
    d = output_tensor((2, 2), x.dtype)
    for j in range(2):
        d[0, j] = TABLE[1][0] + ROWS[0][1]
        d[1, j] = len(TABLE[0]) + ROWS[1][0]
    return c, d


def test_the_decorated_form_calls_captured_kernels_as_a_file_does():
    x = np.arange(3, dtype=np.float32)
    for f in (_main, _main.emulate):
        c, d = f(x)
        np.testing.assert_array_equal(c, np.outer(x + 1, x * 2))
        np.testing.assert_array_equal(d, [[4.5, 4.5], [4.5, 4.5]])
