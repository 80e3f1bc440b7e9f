"""Inputs a kernel writes are written in place, returned or not (as under Numba and TVM's
emulation), and a kernel with no `return` that writes its inputs runs; a write that would be lost
(a list passed) or cannot be made (a read-only array) is an error."""
import numpy as np
import pytest

import hyb

SRC = '''
def scale_into(a, c):
    for i in range(a.shape[0]):
        c[i] = a[i] * 2.0

def both(a, c):
    b = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] + 1.0
        b[i] = a[i] - 1.0
    return b

def nothing(a):
    s = 0.0
    for i in range(a.shape[0]):
        s += a[i]
'''


@pytest.fixture(scope="module")
def mod():
    return hyb.compile_source(SRC, "w.hyb")


@pytest.mark.parametrize("run", ["compiled", "emulate", "generic"])
def test_written_inputs_change_the_callers_arrays(mod, run):
    a = np.arange(5.0)
    for _ in range(2):  # the second call takes the warm path
        c = np.zeros(5)
        if run == "generic":
            out = mod.scale_into.compile_generic(a, c).run([a, c])
        else:
            out = (mod.scale_into if run == "compiled" else mod.scale_into.emulate)(a, c)
        assert out is None
        np.testing.assert_array_equal(c, a * 2)
    c = np.zeros(5)
    f = mod.both if run != "emulate" else mod.both.emulate
    np.testing.assert_array_equal(f(a, c), a - 1)
    np.testing.assert_array_equal(c, a + 1)


def test_strided_and_byte_swapped_inputs_are_written_back(mod):
    a = np.arange(5.0)
    c = np.zeros(10)[::2]
    mod.scale_into(a, c)
    np.testing.assert_array_equal(c, a * 2)
    d = np.zeros(5, dtype=">f8")
    mod.scale_into(a, d)
    np.testing.assert_array_equal(d, a * 2)


def test_a_lost_or_impossible_write_is_an_error(mod):
    a = np.arange(3.0)
    for f in (mod.scale_into, mod.scale_into.emulate):
        for _ in range(2):
            with pytest.raises(hyb.HybridArgumentError) as info:
                f(a, [0.0, 0.0, 0.0])
            assert info.value.message == ("argument `c` is written by the kernel, but a list was passed: "
                                          "the writes would be lost")
            assert (info.value.line, info.value.col) == (2, 19)
    ro = np.zeros(3)
    ro.flags.writeable = False
    with pytest.raises(hyb.HybridArgumentError, match="written in place but is read-only"):
        mod.scale_into(a, ro)


def test_a_kernel_that_returns_nothing_must_write_an_input(mod):
    with pytest.raises(hyb.HybridTypeError) as info:
        mod.nothing(np.zeros(3))
    assert info.value.message == "kernel `nothing` returns nothing and writes none of its inputs"
    assert (info.value.line, info.value.col) == (13, 5)


SCALE = '''
def scale(a, s):
    b = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        b[i] = a[i] * s
    return b
'''


@pytest.mark.parametrize("run", ["compiled", "emulate"])
def test_a_python_integer_out_of_its_dtypes_range_is_an_error(run):
    k = hyb.compile_source(SCALE, "s.hyb").scale
    f = k if run == "compiled" else k.emulate
    a = np.ones(3, np.int8)
    for _ in range(2):  # the warm path checks too
        np.testing.assert_array_equal(f(a, 100), np.full(3, 100, np.int8))
        np.testing.assert_array_equal(f(a, -128), np.full(3, -128, np.int8))
        with pytest.raises(hyb.HybridArgumentError) as info:
            f(a, 1000)
        assert info.value.message == "argument `s` = 1000 is out of bounds for int8, the type it is used at here"
        assert (info.value.line, info.value.col) == (5, 23) and "OverflowError" in info.value.hint
    np.testing.assert_array_equal(f(np.ones(3, np.int64), 1000), np.full(3, 1000))  # int64: no bound


def test_a_python_integer_known_when_running_is_compared_exactly():
    src = '''
def f(x, p):
    c = output_tensor(x.shape, "int32")
    for i in range(x.shape[0]):
        if x[i] < p:
            c[i] = 1
        if x[i] < i:
            c[i] += 2
    return c
'''
    k = hyb.compile_source(src, "c.hyb").f
    x = np.array([100, -100, 127, 5] * 100, np.int8)
    want = (x < 1000).astype(np.int32) + 2 * (x < np.arange(400))
    for f in (k, k.emulate):
        np.testing.assert_array_equal(f(x, 1000), want)
        np.testing.assert_array_equal(f(x, -1000), 2 * (x < np.arange(400)))
