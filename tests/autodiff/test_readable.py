"""Gradient source stays readable: a call the derivative repeats is computed once, into a name."""
from __future__ import annotations

import numpy as np

import hyb

POOL = '''
def pool(x):
    out = output_tensor((x.shape[0], x.shape[1] // 2), x.dtype)
    for i in range(x.shape[0]):
        for j in range(x.shape[1] // 2):
            out[i, j] = max(max(x[i, 2 * j], x[i, 2 * j + 1]), max(x[i, 2 * j], x[i, 2 * j + 1]) * 0.5)
    return out
'''

GUARDED = '''
def k(x):
    y = output_tensor(x.shape, x.dtype)
    for i in range(x.shape[0]):
        y[i] = exp(x[i + 1]) * exp(x[i + 1]) if i < x.shape[0] - 1 else x[i]
    return y
'''


def finite_differences(f, x, dout, h=1e-6):
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[idx] += h
        xm[idx] -= h
        g[idx] = np.sum((f(xp) - f(xm)) * dout) / (2 * h)
    return g


def test_a_repeated_max_is_named_once():
    k = hyb.compile_source(POOL).pool
    src = k.grad().source
    code = "\n".join(ln for ln in src.splitlines() if not ln.strip().startswith("#"))
    assert code.count("max(") == 1 and "max_v = max(x[i, 2 * j], x[i, 2 * j + 1])" in code
    x = np.random.default_rng(0).standard_normal((3, 6))
    dout = np.random.default_rng(1).standard_normal((3, 3))
    np.testing.assert_allclose(k.grad()(x, dout), finite_differences(k, x, dout), rtol=1e-5, atol=1e-6)


def test_a_call_under_a_condition_is_not_hoisted_out_of_it():
    # exp(x[i + 1]) is only evaluated where i < n - 1: naming it before the condition would read
    # x out of bounds, so it stays where it is.
    k = hyb.compile_source(GUARDED).k
    src = k.grad().source
    assert "exp_v" not in src
    x = np.random.default_rng(2).standard_normal(5) * 0.3
    dout = np.ones(5)
    np.testing.assert_allclose(k.grad()(x, dout), finite_differences(k, x, dout), rtol=1e-5, atol=1e-6)
