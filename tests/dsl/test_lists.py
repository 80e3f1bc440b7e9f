"""Lists of tensors, nested lists of numbers and tuples passed as arguments, and sub-arrays
(`b[i][j]`, `len(b[i])`, `b[i].shape`), as TVM's hybrid script and its users write them."""
import warnings

import numpy as np
import pytest

import hyb
from hyb import HybridArgumentError, HybridTypeError, HybridUnsupportedError

SRC = '''
def sum_array(inputs):
    out = output_tensor((inputs[0].shape[0],), inputs[0].dtype)
    n = len(inputs)
    for i in range(out.shape[0]):
        for j in const_range(n):
            out[i] += inputs[j][i]
    return out

def sum_runtime(inputs):
    out = output_tensor(inputs[0].shape, inputs[0].dtype)
    for i in range(len(inputs[0])):
        for j in range(len(inputs)):
            out[i] += inputs[j][i]
    return out

def concat_shape(inputs, axis):
    ndim = inputs[0].shape[0]
    out = output_tensor((ndim,), "int64")
    for i in const_range(ndim):
        if i != axis:
            out[i] = inputs[0][i]
            for j in const_range(1, len(inputs)):
                assert out[i] == inputs[j][i], "Dims mismatch in the inputs of concatenate."
        else:
            out[i] = int64(0)
            for j in const_range(len(inputs)):
                out[i] += inputs[j][i]
    return out

def table(b, x):
    out = output_tensor((len(b), len(b[0])), x.dtype)
    for i in range(len(b)):
        for j in range(len(b[0])):
            out[i][j] = x[i, j] * b[i][j]
    return out

def planes(b):
    out = output_tensor(b[0].shape, b.dtype)
    for i in range(len(b[0])):
        for j in range(b[1].shape[1]):
            out[i, j] = b[1][i][j] + b[0, i][j] * b[0].ndim
    return out

def fill(output_shape, v):
    out = output_tensor(output_shape, "int32")
    for i in range(output_shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = v + output_shape[1]
    return out

def tail(s, x):
    out = output_tensor(s[1:], x.dtype)
    for idx in grid(out.shape):
        out[idx] = x[0] + s[0]
    return out

def rows(s, x):
    out = output_tensor((s[0], x.shape[0]), x.dtype)
    for i in range(s[0]):
        for j in range(x.shape[0]):
            out[i, j] = x[j] + s[1]
    return out
'''


@pytest.fixture(scope="module")
def m():
    return hyb.compile_source(SRC, "lists.hyb")


def both(k, *args):
    got = k(*args)
    np.testing.assert_array_equal(got, k.emulate(*args))
    return got


@pytest.mark.parametrize("n,size,dtype", [(5, 10, np.float32), (1, 1, np.float64), (3, 0, np.int32), (4, 37, np.int8)])
def test_a_list_of_tensors(m, n, size, dtype):
    rng = np.random.default_rng(n + size)
    xs = [rng.integers(-5, 5, size).astype(dtype) for _ in range(n)]
    want = np.sum(xs, axis=0, dtype=dtype)
    for k in (m.sum_array, m.sum_runtime):
        got = both(k, xs)
        assert got.dtype == dtype and got.shape == (size,)
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(m.sum_runtime(tuple(xs)), want)  # a tuple as well


def test_relay_concatenate_shape_function(m):
    shapes = [np.array([2, 3, 4]), np.array([2, 5, 4]), np.array([2, 1, 4])]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # `out[i]` is read after the same `if` wrote it: no warning
        np.testing.assert_array_equal(both(m.concat_shape, shapes, 1), [2, 9, 4])
    with pytest.raises(hyb.HybridAssertionError, match="Dims mismatch in the inputs of concatenate") as info:
        m.concat_shape(shapes, 0)
    assert (info.value.line, info.value.col) == (24, 17)


@pytest.mark.parametrize("b", [[[1, 2, 3], [4, 5, 6]], np.arange(6.0).reshape(2, 3), ((1.5, 2.0, -1.0), (0.0, 3.0, 4.0))])
def test_nested_numbers_and_rows(m, b):
    x = np.arange(6, dtype=np.float32).reshape(2, 3) + 1
    np.testing.assert_array_equal(both(m.table, b, x), x * np.asarray(b))


def test_sub_arrays_of_three_dimensions(m):
    b = np.arange(24.0).reshape(2, 3, 4)
    np.testing.assert_array_equal(both(m.planes, b), b[1] + b[0] * 2)


@pytest.mark.parametrize("shape", [(2, 3), [3, 2], np.array([1, 4]), (0, 5), (4, 1)])
def test_a_tuple_argument_as_a_shape(m, shape):
    got = both(m.fill, shape, 7)
    assert got.shape == tuple(int(d) for d in shape) and got.dtype == np.int32
    assert (got == 7 + int(shape[1])).all()


def test_a_shape_argument_sliced(m):
    np.testing.assert_array_equal(both(m.tail, (7, 2, 2), np.ones(1)), np.full((2, 2), 8.0))
    assert both(m.tail, [1, 3], np.ones(1)).shape == (3,)


def test_each_shape_value_compiles_once_and_is_never_mixed_up(m):
    for _ in range(2):
        for s in [(1, 2), (2, 2), (3, 2)]:
            assert m.fill(np.array(s), 1).shape == s  # the same array signature, three values
            assert m.fill(list(s), 1).shape == s
    assert str(m.fill.compile((2, 3), 7)) == "<CompiledKernel fill(int64[2] = (2, 3), Python int)>"
    np.testing.assert_array_equal(both(m.rows, (3, 10), np.arange(4.0)), np.tile(np.arange(4.0) + 10, (3, 1)))


BAD = '''
def written(s):
    out = output_tensor(s, "float32")
    s[0] = 1
    return out

def floats(s):
    out = output_tensor(s, "float32")
    return out

def as_number(b):
    out = output_tensor((2,), "float32")
    out[0] = b[1]
    return out

def helper(r):
    out = output_tensor((1,), "float32")
    out[0] = r[0]
    return out

def calls(b):
    out = helper(b[0])
    return out

def too_far(b):
    out = output_tensor((1,), "int64")
    out[0] = len(b[5])
    return out
'''


@pytest.fixture(scope="module")
def bad():
    return hyb.compile_source(BAD, "bad.hyb")


@pytest.mark.parametrize("name,args,cls,message,place,hint", [
    ("written", ((2, 3),), HybridTypeError,
     "argument `s` is written, but the kernel is compiled for its values (it gives a shape)", (4, 5), "write a tensor"),
    ("floats", (np.array([2.0, 3.0]),), HybridTypeError, "expected a shape, but `s` holds float64", (8, 25),
     "pass a tuple or list of integers"),
    ("floats", (tuple(range(40)),), HybridTypeError, "a shape must be an integer known at compile time", (8, 25),
     "at most 32 integers"),
    ("as_number", (np.ones((2, 2), np.float32),), HybridTypeError,
     "argument `b` has 2 dimensions (shape (2, 2)), but `b` is indexed with 1 subscript here", (13, 14),
     "index it with 2 subscripts"),
    ("too_far", (np.ones((2, 2)),), hyb.HybridIndexError, "index 5 is out of bounds for axis 0 of `b` with size 2",
     (27, 20), None),
    ("sum_runtime", ([np.ones(2), np.ones(3)],), HybridArgumentError,
     "argument `inputs` is a list of arrays of different shapes (2,), (3,); a kernel takes a list of arrays as one "
     "array with one more dimension", (10, 17), "pass arrays of one shape and dtype"),
    ("sum_runtime", ([np.ones(2, np.float32), np.ones(2)],), HybridArgumentError,
     "argument `inputs` is a list of arrays of different dtypes float32, float64; a kernel takes a list of arrays as "
     "one array with one more dimension", (10, 17), "or pass them as separate arguments"),
    ("table", ([[1, 2], [3]], np.ones((2, 2))), HybridArgumentError,
     "argument `b` is a nested list whose rows have different lengths", (31, 11), "rows of one length"),
])
def test_errors(m, bad, name, args, cls, message, place, hint):
    k = getattr(bad, name, None) or getattr(m, name)
    for f in (k, k.emulate):
        with pytest.raises(cls) as info:
            f(*args)
        assert info.value.message == message
        assert (info.value.line, info.value.col) == place
        if hint:
            assert hint in info.value.hint


def test_a_row_as_the_argument_of_a_kernel_call(bad):
    b = np.arange(4.0, dtype=np.float32).reshape(2, 2) + 1
    for f in (bad.calls, bad.calls.emulate):
        np.testing.assert_array_equal(f(b), [1.0])


def test_a_written_list_is_refused(m):
    src = '''
def bump(xs):
    for j in range(len(xs)):
        xs[j][0] = 1.0
'''
    k = hyb.compile_source(src, "w.hyb").bump
    with pytest.raises(HybridArgumentError, match="is written by the kernel, but a list was passed"):
        k([np.zeros(2), np.zeros(2)])
    a = np.zeros((2, 2))
    k(a)
    np.testing.assert_array_equal(a[:, 0], [1, 1])


def test_the_decorated_form():
    @hyb.hybrid
    def total(inputs):
        out = output_tensor((1,), inputs[0].dtype)  # noqa: F821
        for j in range(len(inputs)):
            for i in range(len(inputs[j])):
                out[0] += inputs[j][i]
        return out

    xs = [np.arange(3.0), np.arange(3.0) * 2]
    np.testing.assert_array_equal(total(xs), [9.0])


TABLE = (1.0, 2.0, 4.0, 8.0)


def test_a_captured_table_indexed_when_running_is_refused_by_name():
    @hyb.hybrid
    def scale(a):
        c = output_tensor(a.shape, a.dtype)  # noqa: F821
        for i in range(a.shape[0]):
            c[i] = a[i] * TABLE[i % 4] + TABLE[3]
        return c

    with pytest.raises(HybridUnsupportedError) as info:
        scale(np.ones(4))
    assert info.value.message == "a tuple or list constant indexed by a value known only when the kernel runs"
    assert info.value.col == 33 and "pass the table as an array argument" in info.value.hint
