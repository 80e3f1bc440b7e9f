"""TVM's and akg's hybrid-script rules that differ from a plain loop language: `const_range` unrolled
with its variable a constant, branches decided at compile time folded, a scalar that every branch of
an `if` assigns visible after it, tuples joined and sliced, `likely`, locals named like built-in
functions, NumPy integer scalars as sizes, and no false alarm about unwritten elements of a tensor
written at run-time positions."""
import warnings

import numpy as np
import pytest

import hyb
from tests.dsl.test_lists import both  # compiled, checked against emulate()

SRC = '''
def dims(a):
    out = output_tensor((len(a.shape),), "int64")
    for i in const_range(len(a.shape)):
        out[i] = a.shape[i] * (i < len(a.shape))
    return out

def pick(s, pairs):
    out = output_tensor((2,), "int64")
    out[0] = s[0]
    for i in const_range(len(pairs)):
        out[pairs[i][0]] = s[pairs[i][1]]
    return out

def fresh(a):
    out = output_tensor((3,), a.dtype)
    for i in const_range(3):
        t = allocate((1,), a.dtype)
        t[0] += a[i]
        out[i] = t[0] + a.shape[i % a.ndim]
    return out

def long(a):
    out = output_tensor((100,), "int64")
    for i in const_range(100):
        out[i] = i * a[0]
    return out

def branches(a):
    out = output_tensor((a.shape[0],), "float64")
    for i in range(a.shape[0]):
        if a[i] < 0:
            r = -a[i]
        elif a[i] > 5:
            r = 5
        else:
            r = a[i] * 2.5
        out[i] = r
    return out

def one_branch(a):
    out = output_tensor((a.shape[0],), a.dtype)
    for i in range(a.shape[0]):
        if a[i] < 0:
            r = -a[i]
        out[i] = r
    return out

def counter(a):
    out = output_tensor((a.shape[0],), "int64")
    k = 0
    for i in range(a.shape[0]):
        if a[i] > 0:
            out[k] = a[i]
            k += 1
    s = int64(0)
    for i in range(a.shape[0]):
        s += out[i]
    out[0] = s
    return out
'''


@pytest.fixture(scope="module")
def m():
    return hyb.compile_source(SRC, "tvm.hyb")



@pytest.mark.parametrize("shape", [(2, 3, 4), (5,), (1, 1)])
def test_const_range_is_unrolled(m, shape):
    np.testing.assert_array_equal(both(m.dims, np.zeros(shape)), shape)


def test_a_const_range_over_an_empty_list_runs_nothing(m):
    s = np.array([3, 4])
    np.testing.assert_array_equal(both(m.pick, s, []), [3, 0])
    np.testing.assert_array_equal(both(m.pick, s, [(1, 0)]), [3, 3])
    np.testing.assert_array_equal(both(m.pick, s, [(1, 0), (0, 1)]), [4, 3])


def test_each_unrolled_iteration_has_its_own_allocation(m):
    a = np.array([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(both(m.fresh, a), a + 3)


def test_a_long_const_range_stays_a_loop(m):
    np.testing.assert_array_equal(both(m.long, np.array([2])), np.arange(100) * 2)
    assert "for " in m.long.compile(np.array([2])).inspect("loops")


def test_a_name_every_branch_assigns_is_visible_after_the_if(m):
    a = np.array([-3.0, 1.0, 7.0, 2.0])
    np.testing.assert_array_equal(both(m.branches, a), [3.0, 2.5, 5.0, 5.0])


def test_a_name_one_branch_assigns_is_not(m):
    with pytest.raises(hyb.HybridNameError) as info:
        m.one_branch(np.array([1.0]))
    assert info.value.message == "`r` is not visible here" and (info.value.line, info.value.col) == (46, 18)


def test_no_false_alarm_for_writes_at_run_time_positions(m):
    a = np.array([3, -1, 4, 0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(both(m.counter, a), [7, 4, 0, 0])


def test_an_element_indexed_further_names_the_rank():
    src = "def k(s, lst):\n    out = output_tensor((1,), 'int64')\n    for i in range(len(lst)):\n" \
          "        out[0] = s[lst[i][1]]\n    return out\n"
    k = hyb.compile_source(src, "e.hyb").k
    with pytest.raises(hyb.HybridTypeError) as info:
        k(np.array([1]), [])  # an empty list is an int64 array of one dimension
    assert info.value.message == "an element of `lst` is indexed: `lst` has 1 dimension (shape (0,))"
    assert (info.value.line, info.value.col) == (4, 20) and "np.zeros((0, k), dtype)" in info.value.hint
    np.testing.assert_array_equal(k(np.array([5, 6]), np.zeros((0, 2), np.int64)), [0])


AKG = '''
def up(a, s):
    out = output_tensor((a.shape[0] * s,), a.dtype)
    n = s
    for i in range(a.shape[0]):
        for j in range(n):
            out[i * s + j] = a[i]
    return out

def dead(a):
    c = output_tensor(a.shape, a.dtype)
    for i in const_range(3):
        if i > 0:
            c[i - 1] = a[i - 1]
    return c

def early(a):
    if a.shape[0] > 2:
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            c[i] = a[i] * 2
        return c
    else:
        d = output_tensor(a.shape, a.dtype)
        return d

def last(a):
    c = output_tensor((1,), a.dtype)
    if a.shape[0] > 0:
        c[0] = a[a.shape[0] - 1]
    return c

def stack(a, b):
    out = output_tensor((b.shape[0],) + a.shape, a.dtype)
    for i in range(b.shape[0]):
        for idx in grid(a.shape):
            out[(i,) + idx] = a[idx] * b[i]
    return out

def tail_sum(k):
    out = output_tensor(k.shape[1:], k.dtype)
    for idx in grid(k.shape[1:]):
        s = 0.0
        for b in range(k.shape[0]):
            s += k[(b,) + idx[:]]
        out[idx] = s
    return out

def shadow(a):
    c = output_tensor(a.shape, a.dtype)
    len = a.shape[0]
    max = 0.0
    for i in range(len):
        if likely(i < len):
            max = a[i] if a[i] > max else max
            c[i] = max
    return c

def nested(a):
    out = output_tensor((20, 20), "int64")
    for i in const_range(20):
        for j in const_range(20):
            out[i, j] = i * j + a[0]
    return out

def row_plus(a, b):
    c = output_tensor(a.shape, a.dtype)
    for arg in grid(a.shape):
        c[arg] = a[arg] + b[arg[1:]]
    return c

def sliced_by(a, n):
    c = output_tensor(a.shape[n:], a.dtype)
    return c
'''

AKG_BAD = '''
def tensor_slice(a):
    c = output_tensor(a.shape, a.dtype)
    c[0] = a[0:2]
    return c

def hidden(a):
    c = output_tensor(a.shape, a.dtype)
    len = 3
    c[0] = len(a)
    return c

def hint(a):
    c = output_tensor(a.shape, a.dtype)
    if likely(a.shape[0] > 1, True):
        c[0] = 1.0
    return c

def variable_slice(a):
    c = output_tensor((1,), a.dtype)
    for i in range(2):
        c[0] = a.shape[i:][0]
    return c
'''


@pytest.fixture(scope="module")
def akg():
    return hyb.compile_source(AKG, "akg.hyb")


@pytest.mark.parametrize("s", [2, np.int32(2), np.int64(3), np.uint8(2), np.int16(1)])
def test_a_numpy_integer_sizes_through_arithmetic(akg, s):
    a = np.arange(3.0)
    np.testing.assert_array_equal(both(akg.up, a, s), np.repeat(a, int(s)))


def test_branches_decided_now_are_folded(akg):
    a = np.arange(4.0)
    np.testing.assert_array_equal(both(akg.dead, a), [0, 1, 0, 0])  # `c[i - 1]` for i = 0 is never checked
    np.testing.assert_array_equal(both(akg.early, a), 2 * a)  # `return` inside an `if` decided now
    np.testing.assert_array_equal(both(akg.early, a[:2]), [0, 0])
    np.testing.assert_array_equal(both(akg.last, a), [3])
    np.testing.assert_array_equal(both(akg.last, a[:0]), [0])  # a[-1] only where it runs


def test_tuples_joined_and_sliced(akg):
    a, b = np.arange(6.0).reshape(2, 3), np.array([1.0, 2.0])
    np.testing.assert_array_equal(both(akg.stack, a, b), b[:, None, None] * a)
    k = np.arange(24.0).reshape(2, 3, 4)
    np.testing.assert_array_equal(both(akg.tail_sum, k), k.sum(0))
    assert both(akg.sliced_by, np.ones((2, 3, 4)), 1).shape == (3, 4)  # compiled for the value of `n`
    a2 = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(both(akg.row_plus, a2, np.array([10.0, 20.0, 30.0])), a2 + [10, 20, 30])


def test_likely_and_locals_named_like_built_in_functions(akg):
    np.testing.assert_array_equal(both(akg.shadow, np.array([1.0, 3.0, 2.0])), [1, 3, 3])


def test_nested_const_range_unrolls_at_most_64_copies(akg):
    np.testing.assert_array_equal(both(akg.nested, np.array([1])), np.outer(np.arange(20), np.arange(20)) + 1)
    assert "for " in akg.nested.compile(np.array([1])).inspect("loops")  # 400 copies: loops kept


@pytest.mark.parametrize("name,cls,message,place,hint", [
    ("tensor_slice", hyb.HybridUnsupportedError, "slices are not supported; index one element at a time", (4, 14),
     "tuples and shapes may be sliced"),
    ("hidden", hyb.HybridTypeError, "`len` is not a function", (10, 12), "a local named `len` hides the built-in"),
    ("hint", hyb.HybridTypeError, "likely() takes one argument, a condition", (15, 8), "if likely(i < n):"),
    ("variable_slice", hyb.HybridTypeError,
     "the bounds of a slice of a tuple or a shape must be integers known at compile time", (22, 24), "x.shape[1:]"),
])
def test_akg_spellings_refused_by_name(name, cls, message, place, hint):
    k = getattr(hyb.compile_source(AKG_BAD, "bad.hyb"), name)
    with pytest.raises(cls) as info:
        k(np.ones(3))
    assert info.value.message == message and (info.value.line, info.value.col) == place
    assert hint in info.value.hint


def test_a_conditional_expression_decided_now_checks_the_arm_that_runs():
    src = "def k(x):\n    y = output_tensor(x.shape, x.dtype)\n    for i in const_range(x.shape[0]):\n" \
          "        y[i] = x[i - 1] if i >= 1 else 100\n    return y\n"
    k = hyb.compile_source(src, "ifexp.hyb").k
    x = np.array([5, 6, 7], np.int8)
    got = both(k, x)
    np.testing.assert_array_equal(got, [100, 5, 6])
    assert got.dtype == np.int8
