"""Gradients through loops whose bounds are read from an integer tensor: one the kernel never
writes (CSR sparse matrix-vector products) or one it computes before the loops read it; the
bounds read the same in reverse."""
from __future__ import annotations

import numpy as np
import pytest

import hyb

SPMV = '''
def spmv(indptr, cols, vals, x):
    y = output_tensor((indptr.shape[0] - 1,), x.dtype)
    for i in range(indptr.shape[0] - 1):
        for j in range(indptr[i], indptr[i + 1]):
            y[i] += vals[j] * x[cols[j]]
    return y
'''


def csr(dense):
    indptr = np.concatenate([[0], np.cumsum((dense != 0).sum(1))]).astype(np.int64)
    rows, cols = np.nonzero(dense)
    return indptr, cols.astype(np.int64), dense[rows, cols], rows


@pytest.mark.parametrize("n,density", [(1, 1.0), (6, 0.5), (9, 0.2), (4, 0.0)])
def test_csr_spmv_gradient(n, density):
    rng = np.random.default_rng(n)
    dense = rng.standard_normal((n, n)) * (rng.random((n, n)) < density)
    indptr, cols, vals, rows = csr(dense)
    x, dout = rng.standard_normal(n), rng.standard_normal(n)
    k = hyb.compile_source(SPMV, "spmv.hyb").spmv
    np.testing.assert_allclose(k(indptr, cols, vals, x), dense @ x, atol=1e-12)
    d_indptr, d_cols, d_vals, d_x = k.grad()(indptr, cols, vals, x, dout)
    assert d_indptr is None and d_cols is None
    np.testing.assert_allclose(d_x, dense.T @ dout, atol=1e-12)
    np.testing.assert_allclose(d_vals, dout[rows] * x[cols], atol=1e-12)
    e_vals, e_x = k.grad().emulate(indptr, cols, vals, x, dout)[2:]
    np.testing.assert_allclose(e_x, d_x, atol=1e-12)
    np.testing.assert_allclose(e_vals, d_vals, atol=1e-12)


COMPUTED = '''
def triangle(a):
    c = output_tensor(a.shape, a.dtype)
    n = allocate(a.shape, 'int64')
    for i in range(a.shape[0]):
        n[i] = i
        for j in range(n[i]):
            c[i] += a[i] * a[j]
    return c


def counted(a, m):
    cnt = allocate((a.shape[0],), 'int64')
    for i in range(a.shape[0]):
        cnt[i] = m[i] % 3 + 1
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        for j in range(cnt[i]):
            c[i] += a[i] * (j + 1.0)
    return c


def moving(a):
    n = allocate((1,), 'int64')
    n[0] = 2
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        for j in range(n[0]):
            c[i] += a[i]
        n[0] = 3
    return c
'''


@pytest.mark.parametrize("size", [0, 1, 5, 8])
def test_bounds_the_kernel_computes_before_reading_them(size):
    """Bounds read from a tensor the kernel writes: fine where no store changes the cell after a
    loop reads it (the gradient recomputes the tensor first and reads the same bounds)."""
    m = hyb.compile_source(COMPUTED, "computed.hyb")
    rng = np.random.default_rng(size)
    a, dout = rng.standard_normal(size), rng.standard_normal(size)
    want = np.zeros(size)
    for i in range(size):
        for j in range(i):
            want[i] += dout[i] * a[j]
            want[j] += a[i] * dout[i]
    np.testing.assert_allclose(m.triangle.grad()(a, dout), want, atol=1e-12)
    np.testing.assert_allclose(m.triangle.grad().emulate(a, dout), want, atol=1e-12)
    counts = rng.integers(0, 10, size)
    d_a, d_m = m.counted.grad()(a, counts, dout)
    assert d_m is None
    np.testing.assert_allclose(d_a, dout * np.array([sum(range(1, c % 3 + 2)) for c in counts], float), atol=1e-12)


def test_a_bound_the_kernel_changes_after_reading_it_is_refused():
    k = hyb.compile_source(COMPUTED, "computed.hyb").moving
    with pytest.raises(hyb.HybridUnsupportedError) as info:
        k.grad()(np.ones(3), np.ones(3))
    e = info.value
    assert e.message == "the gradient of a kernel with a loop bound that the kernel changes while it runs is not built yet"
    assert (e.span.line, e.span.col) == (28, 9)
