"""Gradients of kernels that call kernels: the calls are inlined first (hyb.autodiff.inline)."""
from __future__ import annotations

import numpy as np
import pytest

import hyb
from tests.autodiff.test_readable import finite_differences

SRC = '''
def sq(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        s = a[i] * a[i]
        c[i] = s
    return c

def two(a, b):
    p = output_tensor(a.shape, a.dtype)
    q = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        p[i] = a[i] * b[i]
        q[i] = exp(a[i]) - b[i]
    return p, q

def k(a, b):
    t = sq(a)
    u = sq(t)
    p, q = two(u, b)
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = p[i] + q[i] * t[i]
    return c
'''


@pytest.fixture(scope="module")
def mod():
    return hyb.compile_source(SRC, "calls.hyb")


def forward(a, b):
    t = a * a
    u = t * t
    return u * b + (np.exp(u) - b) * t


def test_the_forward_kernel(mod):
    a, b = np.linspace(-0.8, 0.9, 5), np.linspace(0.3, 1.2, 5)
    np.testing.assert_allclose(mod.k(a, b), forward(a, b), rtol=1e-12)


def test_the_gradient_inlines_the_calls(mod):
    g = mod.k.grad()
    code = "\n".join(ln for ln in g.source.splitlines() if not ln.strip().startswith("#"))
    assert "sq(" not in code and "two(" not in code
    a, b = np.linspace(-0.8, 0.9, 5), np.linspace(0.3, 1.2, 5)
    dout = np.random.default_rng(0).standard_normal(5)
    da, db = g(a, b, dout)
    np.testing.assert_allclose(da, finite_differences(lambda x: forward(x, b), a, dout), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(db, finite_differences(lambda y: forward(a, y), b, dout), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(g.emulate(a, b, dout)[0], da, rtol=1e-12)
