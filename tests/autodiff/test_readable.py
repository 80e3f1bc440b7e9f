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


# ------------------------------------------------------------------ no dead assignments

MAXPOOL = '''
def maxpool(x):
    n, c, h, w = x.shape
    out = output_tensor((n, c, h // 2, w // 2), x.dtype)
    arg = output_tensor((n, c, h // 2, w // 2), "int64")
    for b in range(n):
        for ch in range(c):
            for i in range(h // 2):
                for j in range(w // 2):
                    best = x[b, ch, 2 * i, 2 * j]
                    bi = 0
                    for di in range(2):
                        for dj in range(2):
                            v = x[b, ch, 2 * i + di, 2 * j + dj]
                            if v > best:
                                best = v
                                bi = di * 2 + dj
                    out[b, ch, i, j] = best
                    arg[b, ch, i, j] = bi
    return out, arg
'''


def _unused(src: str) -> list:
    """Scalars assigned and temporaries allocated in ``src`` whose values nothing reads."""
    from hyb.autodiff.tree import walk
    from hyb.dsl import ast as syntax
    from hyb.dsl.parser import parse_string
    kd = next(iter(parse_string(src, "g.hyb").kernels.values()))
    read, assigned, allocated = set(), set(), set()
    for s in kd.body:
        for x in walk(s):
            if isinstance(x, (syntax.Assign, syntax.AugAssign)):
                if isinstance(x.target, syntax.Name):
                    assigned.add(x.target.id)
                    if isinstance(x.value, syntax.Call) and getattr(x.value.func, "id", "") == "allocate":
                        allocated.add(x.target.id)
                    if isinstance(x, syntax.AugAssign):
                        read.add(x.target.id)
                else:
                    for i in x.target.indices:
                        read |= {y.id for y in walk(i) if isinstance(y, syntax.Name)}
                read |= {y.id for y in walk(x.value) if isinstance(y, syntax.Name)}
            elif isinstance(x, syntax.For):
                read |= {y.id for y in walk(x.iter) if isinstance(y, syntax.Name)}
            elif isinstance(x, syntax.If):
                read |= {y.id for y in walk(x.cond) if isinstance(y, syntax.Name)}
            elif isinstance(x, syntax.Return):
                read |= {v.id for v in x.values}
    return sorted((assigned | allocated) - read)


def test_the_max_pool_gradient_keeps_only_what_the_adjoints_read():
    k = hyb.compile_source(MAXPOOL).maxpool
    src = k.grad().source
    for gone in ("best_at_di", "best_at_dj", "best_old", "best_before_if", "bi"):
        assert gone not in src, gone
    assert _unused(src) == []
    rng = np.random.default_rng(4)
    x = rng.permutation(2 * 3 * 4 * 6).reshape(2, 3, 4, 6).astype(np.float64)  # no ties
    dout = rng.standard_normal((2, 3, 2, 3))
    got = k.grad()(x, dout, np.zeros((2, 3, 2, 3), np.int64))
    want = np.zeros_like(x)
    for b, c, i, j in np.ndindex(2, 3, 2, 3):
        win = x[b, c, 2 * i:2 * i + 2, 2 * j:2 * j + 2]
        di, dj = np.unravel_index(np.argmax(win), (2, 2))
        want[b, c, 2 * i + di, 2 * j + dj] += dout[b, c, i, j]
    np.testing.assert_array_equal(got, want)


def test_no_gradient_of_the_cases_assigns_what_nothing_reads():
    import warnings
    from tests.autodiff import gradcases as G
    checked = 0
    for c in G.CASES:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", hyb.HybridWarning)
            try:
                src = G.kernel_of(c.name).grad().source
            except hyb.HybridUnsupportedError:
                continue
        assert _unused(src) == [], (c.name, src)
        checked += 1
    assert checked > 100


def test_prune_removes_dead_code_and_keeps_declarations():
    from hyb.autodiff.prune import prune
    from hyb.autodiff.tree import Gradient
    from hyb.dsl import unparse
    from hyb.dsl.parser import parse_string
    src = '''
def k(a, d):
    out = output_tensor(a.shape, a.dtype)
    t = allocate(a.shape, a.dtype)
    for i in range(a.shape[0]):
        s = a[i]
        t[i] = s
        u = s * 2.0
        u = a[i]
        w = 0.0
        for j in range(3):
            w = w + a[i]
        out[i] = u * d[i] + s.dtype(1)
    return out
'''
    kd = parse_string(src, "k.hyb").kernels["k"]
    g = prune(Gradient(kd, [True], ["out"], [("t", None, None, "a tape")], ["a", "d"]))
    text = unparse.kernel(g.kdef)
    assert "allocate" not in text and " t[i] = " not in text  # a temporary nothing reads
    assert "u = s * 2.0" not in text and "u = a[i]" in text  # overwritten before any read
    assert "w" not in text.replace("def k", "")  # a running value nothing reads, and its loop
    assert "s = a[i]" in text  # declares `s` for `s.dtype(1)`
    assert g.tapes == []
    k = hyb.compile_source(text, "pruned.hyb").k
    a, d = np.arange(4.0), np.full(4, 2.0)
    np.testing.assert_array_equal(k(a, d), a * d + 1)
