"""Spellings kernels from TVM's hybrid script, MindSpore and akg use: keyword arguments of
output_tensor and allocate, NumPy's dtype strings, and MindSpore's `with` scopes that change
nothing."""
import numpy as np
import pytest

import hyb
from hyb.errors import HybridTypeError, HybridUnsupportedError

KEYWORDS = '''
def copy(a):
    b = output_tensor(a.shape, dtype=a.dtype)
    t = allocate(a.shape, dtype="float64", scope="local")
    u = allocate(shape=(a.shape[0],), dtype="int32")
    for i in range(a.shape[0]):
        t[i] = a[i] * 2.0
        u[i] = i
        b[i] = t[i] + u[i]
    return b
'''


def test_output_tensor_and_allocate_take_keywords():
    k = hyb.compile_source(KEYWORDS, "k.hyb").copy
    a = np.arange(5, dtype=np.float32)
    for f in (k, k.emulate):
        got = f(a)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, a * 3)


@pytest.mark.parametrize("call,message,at", [
    ("output_tensor(a.shape, dtyp=a.dtype)", "output_tensor() got an unexpected keyword argument `dtyp`", "=a.dtype"),
    ("output_tensor(a.shape, a.dtype, dtype=a.dtype)", "output_tensor() got two values for `dtype`", "=a.dtype"),
    ("allocate(a.shape, a.dtype, scope=3)", "an allocate() scope is a string", "=3"),
    ("output_tensor(dtype=a.dtype)", "output_tensor() takes a shape and a dtype: the shape is missing", "output_tensor"),
    ("allocate(a.shape, a.dtype, \"local\", 4)", "allocate() takes a shape and a dtype, got 4 argument(s)",
     "allocate"),
])
def test_bad_keywords_are_named(call, message, at):
    line = f"    b = {call}"
    src = f"def f(a):\n{line}\n    return b\n"
    with pytest.raises(HybridTypeError) as info:
        hyb.compile_source(src, "k.hyb").f(np.zeros(3, np.float32))
    assert message in info.value.message
    col = line.index(at) + 1 + (1 if at.startswith("=") else 0)  # (a keyword's value)
    assert (info.value.line, info.value.col) == (2, col)


@pytest.mark.parametrize("spelling,dtype", [("f4", "float32"), ("<f4", "float32"), ("=f8", "float64"),
                                            ("i8", "int64"), ("u1", "uint8"), ("f2", "float16"),
                                            ("d", "float64"), ("?", "bool"), ("int16", "int16")])
def test_numpy_dtype_strings(spelling, dtype):
    src = f'def f(a):\n    b = output_tensor(a.shape, "{spelling}")\n    for i in range(a.shape[0]):\n' \
          '        b[i] = a[i]\n    return b\n'
    k = hyb.compile_source(src, "k.hyb").f
    a = np.arange(4, dtype=np.int32)
    for f in (k, k.emulate):
        got = f(a)
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got, a.astype(dtype))


@pytest.mark.parametrize("spelling,message,hint", [
    (">f4", "dtype '>f4' is big-endian", "write '<f4' or 'float32'"),
    ("f3", "unknown dtype 'f3'", "NumPy's spelling of one ('f4'"),
    ("U8", "unknown dtype 'U8'", "float32"),
])
def test_bad_dtype_strings(spelling, message, hint):
    src = f'def f(a):\n    b = output_tensor(a.shape, "{spelling}")\n    return b\n'
    with pytest.raises(HybridTypeError) as info:
        hyb.compile_source(src, "k.hyb").f(np.zeros(3, np.float32))
    assert info.value.message == message and hint in info.value.hint
    assert (info.value.line, info.value.col) == (2, 32)  # the string


SCOPES = '''
def add(a, b):
    c = output_tensor(a.shape, a.dtype)
    with block_realize(c):
        for i in range(a.shape[0]):
            with attr("pragma", "unroll"):
                t = a[i] + b[i]
            c[i] = t
    return c
'''


def test_mindspore_scopes_that_change_nothing_hold_their_blocks():
    k = hyb.compile_source(SCOPES, "s.hyb").add
    a, b = np.arange(4.0), np.ones(4)
    for f in (k, k.emulate):
        np.testing.assert_array_equal(f(a, b), a + b)


def test_other_with_statements_are_rejected_with_the_accepted_ones_named():
    src = "def f(a):\n    with open(a) as g:\n        b = output_tensor(a.shape, a.dtype)\n    return b\n"
    with pytest.raises(HybridUnsupportedError) as info:
        hyb.compile_source(src, "w.hyb")
    assert info.value.message == "`with` is not supported"
    assert "block_realize" in info.value.hint and (info.value.line, info.value.col) == (2, 5)
