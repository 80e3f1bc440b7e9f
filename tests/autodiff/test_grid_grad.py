"""Gradients of kernels with `grid` loops: derived for the ranks of the arguments (one `range` loop
per dimension), checked against finite differences and NumPy over ranks 1-3 and sizes 0, 1 and odd."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import hyb
from tests.autodiff import gradcases as G

SRC = '''
def scale(a, b):
    c = output_tensor(a.shape, a.dtype)
    for idx in grid(c.shape):
        c[idx] = a[idx] * b[idx] + sin(a[idx])
    return c


def weighted(a):
    c = output_tensor(a.shape, a.dtype)
    for idx in grid(a.shape):
        i, j = idx
        c[idx] = a[i, j] * (i + 1) + a[idx] * a[idx]
    return c


def rowsum(a):
    s = output_tensor((a.shape[0],), a.dtype)
    for idx in grid(a.shape):
        s[idx[0]] += exp(a[idx])
    return s


def square(x):
    y = output_tensor(x.shape, x.dtype)
    for idx in grid(x.shape):
        y[idx] = x[idx] * x[idx]
    return y


def twice(a, b):
    s = square(a)
    t = square(b)
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = s[i] + t[i, 0]
    return c


def lastdim(a):
    c = output_tensor((a.shape[0], a.shape[1]), a.dtype)
    for idx in grid(c.shape):
        c[idx] = a[idx[0], idx[-1], 0] * a[idx[0], idx[1], 1]
    return c
'''

MODULE = hyb.compile_source(SRC, "grid_grad.hyb")
SHAPES = [(5,), (3, 4), (2, 3, 5), (1,), (1, 1), (0,), (0, 3), (7, 1, 2)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_elementwise_grid_gradient_matches_numpy(shape):
    rng = np.random.default_rng(len(shape) * 10 + sum(shape))
    a, b, d = (rng.standard_normal(shape) for _ in range(3))
    da, db = MODULE.scale.grad()(a, b, d)
    np.testing.assert_allclose(da, d * (b + np.cos(a)), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(db, d * a, rtol=1e-12, atol=1e-14)
    ea, eb = MODULE.scale.grad().emulate(a, b, d)
    np.testing.assert_allclose(ea, da, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(eb, db, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("shape", [(3, 4), (1, 5), (4, 1), (0, 2)], ids=lambda s: "x".join(map(str, s)))
def test_grid_index_components_and_whole_index(shape):
    rng = np.random.default_rng(sum(shape))
    a, d = rng.standard_normal(shape), rng.standard_normal(shape)
    got = MODULE.weighted.grad()(a, d)
    i = np.arange(shape[0])[:, None]
    np.testing.assert_allclose(got, d * (i + 1) + 2 * a * d, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 2), (5,)], ids=lambda s: "x".join(map(str, s)))
def test_grid_reduction_gradient_matches_finite_differences(shape):
    rng = np.random.default_rng(7 + len(shape))
    a = rng.uniform(-1, 1, shape)
    outs = G.forward(MODULE.rowsum, [a])
    douts = G.random_douts(rng, outs)
    got = MODULE.rowsum.grad()(a, *douts)
    G.assert_grads_close([got], G.fd_grads(MODULE.rowsum, [a], douts), rtol=1e-6, atol=1e-9, what="rowsum")
    np.testing.assert_allclose(got, np.exp(a) * douts[0].reshape((shape[0],) + (1,) * (len(shape) - 1)), rtol=1e-12)


def test_float32_grid_gradient():
    rng = np.random.default_rng(3)
    a, b, d = (rng.standard_normal((6, 5)).astype(np.float32) for _ in range(3))
    da, db = MODULE.scale.grad()(a, b, d)
    assert da.dtype == np.float32 and db.dtype == np.float32
    np.testing.assert_allclose(da, d * (b + np.cos(a)), rtol=1e-5, atol=1e-6)


def test_one_gradient_kernel_per_rank():
    g = MODULE.square.grad()
    for shape in [(4,), (2, 3), (4,), (2, 2, 2), (5, 6)]:
        x, d = np.ones(shape), np.full(shape, 2.0)
        np.testing.assert_array_equal(g(x, d), 2 * x * d)
    ranks = {tuple(sorted(r for _, r in key[1])) for key in g._variants}
    assert {(1,), (2,), (3,)} <= ranks


def test_source_for_shows_one_range_loop_per_dimension():
    g = MODULE.scale.grad()
    a = np.zeros((2, 3), np.float32)
    text = g.source_for(a, a)
    code = [line for line in text.splitlines() if not line.strip().startswith("#")]
    assert not any("grid(" in line for line in code)
    assert text.count("# line 4: for idx in grid(c.shape):") == 1
    # (the reverse loops carry no order, so they run forwards)
    assert "for idx_0 in range(a.shape[0]):" in text
    assert "for idx_1 in range(a.shape[1]):" in text
    assert "d_a[idx_0, idx_1] = g * b[idx_0, idx_1]" in text  # (its first contribution: assigned)
    one = g.source_for(np.zeros(4), np.zeros(4))
    assert "idx_1" not in one and "for idx_0 in range(a.shape[0]):" in one
    # what it writes is a kernel hyb compiles, and computes the gradient
    gm = hyb.compile_source(text, "scale_grad.hyb")
    rng = np.random.default_rng(0)
    x, y, d = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(3))
    np.testing.assert_allclose(gm.scale_grad(x, y, d)[1], d * x, rtol=1e-6)


def test_source_for_takes_the_inputs():
    with pytest.raises(hyb.HybridArgumentError, match=r"source_for\(\) takes the 2 input\(s\) of `scale` \(a, b\), got 1"):
        MODULE.scale.grad().source_for(np.zeros(3))


def test_source_without_a_signature_says_what_to_do():
    with pytest.raises(hyb.HybridUnsupportedError) as info:
        MODULE.scale.grad().source
    e = info.value
    assert e.message == "the gradient of `scale` depends on the rank of its `grid` loop"
    assert (e.span.line, e.span.col) == (4, 5)
    assert "source_for(*inputs)" in e.hint and "hyb grad --args" in e.hint


def test_inlined_grid_loop_of_two_ranks_is_refused_where_it_is():
    src = SRC.replace("c[i] = s[i] + t[i, 0]", "c[i] = s[i] + t[i]")
    k = hyb.compile_source(src, "grid_grad.hyb").twice
    rng = np.random.default_rng(5)
    a, b, d = (rng.standard_normal(4) for _ in range(3))
    da, db = k.grad()(a, b, d)  # both calls of `square` at one rank: its grid loop has that rank
    np.testing.assert_allclose(da, 2 * a * d, rtol=1e-12)
    np.testing.assert_allclose(db, 2 * b * d, rtol=1e-12)
    bad = SRC  # `square` is called on a 1-D and a 2-D tensor
    k = hyb.compile_source(bad, "grid_grad.hyb").twice
    with pytest.raises(hyb.HybridUnsupportedError) as info:
        k.grad()(np.ones(3), np.ones((3, 2)), np.ones(3))
    e = info.value
    assert "a `grid` loop whose rank differs between two calls of its kernel is not built yet" in e.message
    assert (e.span.line, e.span.col) == (26, 5)


def test_range_bound_read_from_an_output_shape():
    """A loop bound written as an output's shape: the gradient, which has no such output, reads the
    shape the output was declared with."""
    src = ("def f(a, b):\n    c = output_tensor(a.shape, a.dtype)\n    t = allocate((b.shape[0], 2), b.dtype)\n"
           "    for i in range(c.shape[0]):\n        for j in range(len(t)):\n            c[i] += a[i] * b[j] + t.ndim\n"
           "    return c\n")
    k = hyb.compile_source(src, "shape.hyb").f
    text = k.grad().source
    assert "range(0, a.shape[0])" in text and "range(0, b.shape[0])" in text
    code = "\n".join(line for line in text.splitlines() if not line.strip().startswith("#"))
    assert "c.shape" not in code and "len(t)" not in code
    rng = np.random.default_rng(1)
    a, b, d = rng.standard_normal(4), rng.standard_normal(3), rng.standard_normal(4)
    da, db = k.grad()(a, b, d)
    np.testing.assert_allclose(da, d * b.sum(), rtol=1e-12)
    np.testing.assert_allclose(db, np.full(3, (d * a).sum()), rtol=1e-12)


def test_hyb_grad_with_args(tmp_path):
    f = tmp_path / "g.hyb"
    f.write_text("def scale(x):\n    y = output_tensor(x.shape, x.dtype)\n    for idx in grid(x.shape):\n"
                 "        y[idx] = x[idx] * x[idx]\n    return y\n")
    run = [sys.executable, "-m", "hyb.cli", "grad", str(f), "--color", "never"]
    r = subprocess.run(run, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert f"{f}:3:5: error: the gradient of `scale` depends on the rank of its `grid` loop" in r.stderr
    r = subprocess.run(run + ["--args", "x=float32[4,4]"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "for idx_1 in range(x.shape[1]):" in r.stdout
    hyb.compile_source(r.stdout, "out.hyb")  # it parses and checks


def test_negative_component_of_a_grid_index():
    rng = np.random.default_rng(9)
    a, d = rng.standard_normal((3, 4, 2)), rng.standard_normal((3, 4))
    got = MODULE.lastdim.grad()(a, d)
    want = np.stack([d * a[:, :, 1], d * a[:, :, 0]], axis=-1)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert "a[idx_0, idx_1, 0]" in MODULE.lastdim.grad().source_for(a)
