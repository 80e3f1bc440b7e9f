"""Gradients through loops whose bounds are read from an integer tensor the kernel never writes
(CSR sparse matrix-vector products): the bounds read the same in reverse."""
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
