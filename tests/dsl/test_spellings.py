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
    ("99999999999999999999int64", "unknown dtype '99999999999999999999int64'", "float32"),  # NumPy: ValueError
    ("i4,i4", "unknown dtype 'i4,i4'", "float32"),
    ("3i", "unknown dtype '3i'", "float32"),
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


SIZES = '''
n = 4
ct = (n, 2)

def upsample(a, scale):
    input_h = a.shape[0]
    output_h = input_h * scale
    b = output_tensor((output_h,), a.dtype)
    for i in range(output_h):
        b[i] = a[i // scale]
    return b

def pairs(a):
    output_shape = (a.shape[0], 2)
    dims = a.shape
    b = output_tensor(output_shape, "int32")
    c = output_tensor(ct, "float32")
    for i in range(dims[0]):
        b[i, 0] = int32(a[i])
        b[i, 1] = output_shape[1]
    for i in range(n):
        c[i, 0] = a[i]
    return b, c
'''


def test_sizes_as_users_compute_them():
    mod = hyb.compile_source(SIZES, "sizes.hyb")
    a = np.arange(4, dtype=np.float32)
    for f in (mod.upsample, mod.upsample.emulate):
        np.testing.assert_array_equal(f(a, 2), np.repeat(a, 2))
        np.testing.assert_array_equal(f(a, 3), np.repeat(a, 3))
    for f in (mod.pairs, mod.pairs.emulate):
        b, c = f(a)
        np.testing.assert_array_equal(b, np.stack([a.astype(np.int32), np.full(4, 2, np.int32)], 1))
        np.testing.assert_array_equal(c, np.stack([a, np.zeros(4, np.float32)], 1))


def test_a_module_constant_defined_by_itself_is_named():
    src = "n = n + 1\n\ndef f(a):\n    b = output_tensor((n,), a.dtype)\n    return b\n"
    with pytest.raises(hyb.HybridNameError) as info:
        hyb.compile_source(src, "c.hyb").f(np.zeros(3))
    assert "module constant `n` is defined in terms of itself" in info.value.message


def test_a_float_parameter_is_no_size():
    src = ("def f(a, s):\n    m = a.shape[0] * s\n    b = output_tensor((m,), a.dtype)\n    return b\n")
    with pytest.raises(HybridTypeError) as info:
        hyb.compile_source(src, "s.hyb").f(np.zeros(3), 2.5)
    assert (info.value.line, info.value.col) == (3, 24)


NUMPY_RULES = '''
def dropout(x, m, scale):
    y = output_tensor(x.shape, x.dtype)
    for i in range(x.shape[0]):
        y[i] = x[i] * m[i] * scale
    return y

def count(x):
    c = output_tensor((1,), "int64")
    for i in range(x.shape[0]):
        c[0] += (x[i] > 0) + 1
    return c

def inner(a):
    b = output_tensor((len(a), len(a[0])), a.dtype)
    for i in range(len(a)):
        for j in range(len(a[i])):
            b[i, j] = a[i, j]
    return b
'''


def test_a_bool_takes_the_other_operands_type_as_in_numpy():
    mod = hyb.compile_source(NUMPY_RULES, "n.hyb")
    x = np.arange(-2, 3, dtype=np.float32)
    m = np.array([True, False, True, True, False])
    for f in (mod.dropout, mod.dropout.emulate):
        got = f(x, m, np.float32(2))
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, x * m * np.float32(2))
    for f in (mod.count, mod.count.emulate):
        np.testing.assert_array_equal(f(x), [np.sum((x > 0) + 1)])
    dx, dm, ds = mod.dropout.grad()(x, m, np.float32(2), np.ones(5, np.float32))
    np.testing.assert_array_equal(dx, m * np.float32(2))
    assert dm is None


def test_len_of_a_sub_array():
    mod = hyb.compile_source(NUMPY_RULES, "n.hyb")
    a = np.arange(6.0).reshape(2, 3)
    for f in (mod.inner, mod.inner.emulate):
        np.testing.assert_array_equal(f(a), a)
    src = "def f(a):\n    b = output_tensor((len(a[2]),), a.dtype)\n    return b\n"
    with pytest.raises(hyb.HybridIndexError) as info:
        hyb.compile_source(src, "l.hyb").f(a)
    assert info.value.message == "index 2 is out of bounds for axis 0 of `a` with size 2"
    assert (info.value.line, info.value.col) == (2, 30)


BIND = '''
def add(a, b):
    n = a.shape[0]
    c = output_tensor(a.shape, a.dtype)
    nt = max_num_threads(True)
    for bx in bind("blockIdx.x", (n + nt - 1) // nt):
        for tx in bind("threadIdx.x", nt):
            idx = bx * nt + tx
            if idx < n:
                c[idx] = a[idx] + b[idx]
    return c
'''


def test_tvm_gpu_bindings_run_as_parallel_loops():
    k = hyb.compile_source(BIND, "b.hyb").add
    for n in (1, 1000, 3000):
        a = np.arange(n, dtype=np.float32)
        for f in (k, k.emulate):
            np.testing.assert_array_equal(f(a, a), a * 2)
    assert "parallel" in k.compile(a, a).inspect("schedule")


@pytest.mark.parametrize("line,message", [
    ('    for tx in bind("threadIdx.w", 4):', "bind() to 'threadIdx.w': not a GPU index"),
    ('    for tx in bind(4):', "bind() takes the name of a GPU index and an extent"),
    ('    tx = bind("threadIdx.x", 4)', "bind(...) is only allowed as the iterable of a `for` loop"),
])
def test_bad_bindings(line, message):
    src = f"def f(a):\n    c = output_tensor(a.shape, a.dtype)\n{line}\n        c[0] = 1.0\n    return c\n"
    if "=" in line:
        src = f"def f(a):\n    c = output_tensor(a.shape, a.dtype)\n{line}\n    return c\n"
    with pytest.raises(HybridTypeError) as info:
        hyb.compile_source(src, "b.hyb").f(np.zeros(3, np.float32))
    assert info.value.message == message and info.value.line == 3


def test_a_long_float16_accumulation_warns():
    src = '''
def rowsum(x):
    y = output_tensor((x.shape[0],), x.dtype)
    for i in range(x.shape[0]):
        s = float16(0)
        for j in range(x.shape[1]):
            s += x[i, j]
        y[i] = s
    return y
'''
    k = hyb.compile_source(src, "r.hyb").rowsum
    with pytest.warns(hyb.HybridWarning) as record:
        k(np.ones((2, 4096), np.float16))
    (w,) = [r.message for r in record if "adds up" in str(r.message)]
    assert w.message == ("`s` adds up 4096 terms in float16: once it is large, each small term rounds away "
                         "(a float16 count stops at 2048)")
    assert (w.span.line, w.span.col) == (7, 13) and "float32" in w.hint
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        k(np.ones((2, 100), np.float16))  # a short row: no warning


@pytest.mark.parametrize("line,message,col", [
    ("    b[0] = sum(a[j] for j in range(a.shape[0]))",
     "generator expressions and comprehensions are not supported", 21),
])
def test_python_spellings_with_no_kernel_form_are_named(line, message, col):
    src = f"def f(a):\n    b = output_tensor((1,), a.dtype)\n{line}\n    return b\n"
    with pytest.raises(hyb.HybridSyntaxError) as info:
        hyb.compile_source(src, "p.hyb")
    assert info.value.message == message and (info.value.line, info.value.col) == (3, col)
