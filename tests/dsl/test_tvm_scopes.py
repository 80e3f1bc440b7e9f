"""TVM's hybrid-script rules that differ from a plain loop language: `const_range` unrolled with its
variable a constant, a scalar that every branch of an `if` assigns visible after it, and no false
alarm about unwritten elements of a tensor written at run-time positions."""
import warnings

import numpy as np
import pytest

import hyb

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


def both(k, *args):
    got = k(*args)
    np.testing.assert_array_equal(got, k.emulate(*args))
    return got


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
