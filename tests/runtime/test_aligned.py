"""Large outputs and temporaries start on a 64-byte boundary (hyb.runtime.aligned), so that a
vector store of a whole cache line writes one line."""
import numpy as np
import pytest

import hyb
from hyb.runtime import aligned

SRC = '''
def scale(x):
    y = output_tensor(x.shape, x.dtype)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            y[i, j] = x[i, j] * 2.0
    return y
'''


def address(a) -> int:
    return a.__array_interface__["data"][0]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "bool"])
@pytest.mark.parametrize("shape", [(0,), (1,), (3, 5), (1000, 33)])
def test_carved_arrays_are_aligned_ordinary_arrays(shape, dtype):
    for make, zero in ((aligned.empty, False), (aligned.zeros, True)):
        a = make(shape, dtype)
        assert a.shape == shape and a.dtype == np.dtype(dtype)
        assert a.flags.c_contiguous and a.flags.writeable
        assert address(a) % aligned.ALIGN == 0 or a.size == 0  # (an empty view keeps its base's address)
        if zero:
            assert not a.any()
        a[...] = 1
        assert a.all() if a.size else True


def test_only_large_buffers_known_now_are_carved():
    big = (aligned.LARGE // 4,)
    assert aligned.allocator(False, big, np.float32) is aligned.empty
    assert aligned.allocator(True, big, np.float32) is aligned.zeros
    assert aligned.allocator(False, (big[0] - 1,), np.float32) is np.empty
    assert aligned.allocator(True, (3, 4), np.float64) is np.zeros
    assert aligned.zeroes(np.zeros) and aligned.zeroes(aligned.zeros)
    assert not aligned.zeroes(np.empty) and not aligned.zeroes(aligned.empty)


@pytest.mark.parametrize("shapes", ["auto", "generic"])
def test_a_kernels_large_outputs_are_aligned(shapes):
    k = hyb.compile_source(SRC, shapes=shapes).scale
    for n in (300, 301, 513):
        x = np.ones((n, 100), np.float32)
        y = k(x)
        assert address(y) % aligned.ALIGN == 0, n
        np.testing.assert_array_equal(y, 2 * x)
    small = k(np.ones((3, 4), np.float32))
    np.testing.assert_array_equal(small, np.full((3, 4), 2, np.float32))
