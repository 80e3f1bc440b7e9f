"""The dependence analysis runs under a budget of isl operations: a kernel whose exact analysis
would take longer (running values updated under data-dependent conditions in a deep nest took
13-60 s) gets over-approximated dependences and the original order, and says so."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import hyb
from hyb.errors import HybridArgumentError
from hyb.schedule import deps, extract

MAXPOOL = '''
def maxpool(x):
    out = output_tensor((x.shape[0], x.shape[1], x.shape[2] // 2, x.shape[3] // 2), x.dtype)
    arg = output_tensor((x.shape[0], x.shape[1], x.shape[2] // 2, x.shape[3] // 2), "int64")
    for b in range(x.shape[0]):
        for c in range(x.shape[1]):
            for p in range(x.shape[2] // 2):
                for q in range(x.shape[3] // 2):
                    best = x[b, c, 2 * p, 2 * q]
                    bi = 0
                    for dr in range(2):
                        for ds in range(2):
                            v = x[b, c, 2 * p + dr, 2 * q + ds]
                            if v > best:
                                best = v
                                bi = dr * 2 + ds
                    out[b, c, p, q] = best
                    arg[b, c, p, q] = bi
    return out, arg
'''

MATMUL = '''
def mm(a, b):
    c = output_tensor((a.shape[0], b.shape[1]), a.dtype)
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            for k in range(a.shape[1]):
                c[i, j] += a[i, k] * b[k, j]
    return c
'''


def maxpool_ref(x):
    n, c, h, w = x.shape
    win = x.reshape(n, c, h // 2, 2, w // 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(n, c, h // 2, w // 2, 4)
    return win.max(axis=-1), win.argmax(axis=-1)


def test_the_argmax_pool_falls_back_and_says_so():
    k = hyb.compile_source(MAXPOOL).maxpool
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 6)).astype(np.float32)
    out, arg = k(x)
    want_out, want_arg = maxpool_ref(x)
    np.testing.assert_array_equal(out, want_out)
    np.testing.assert_array_equal(arg, want_arg)
    text = k.compile(x).inspect("schedule")
    assert text.startswith("dependence analysis stopped at its budget of 1,000,000 isl operations")
    assert "original order" in text


def test_a_small_budget_over_approximates_and_stays_correct():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((7, 5)), rng.standard_normal((5, 3))
    exact = hyb.compile_source(MATMUL).mm
    tight = hyb.compile_source(MATMUL, schedule={"analysis_operations": 10}).mm
    assert "budget" not in exact.compile(a, b).inspect("schedule")
    assert "budget of 10 isl operations" in tight.compile(a, b).inspect("schedule")
    np.testing.assert_allclose(tight(a, b), a @ b, rtol=1e-12)
    np.testing.assert_array_equal(tight(a, b), exact(a, b))  # each cell's sum in the same order


def test_over_approximated_dependences_contain_the_exact_ones():
    a, b = np.zeros((4, 3)), np.zeros((3, 5))
    p = extract.extract(hyb.compile_source(MATMUL).mm.typed(a, b))
    exact = deps.compute(p)
    rough = deps.compute(p, budget=10)
    assert exact.exact and not rough.exact
    for field in ("flow", "anti", "output"):
        assert getattr(exact, field).is_subset(getattr(rough, field)), field


def test_the_option_is_checked():
    with pytest.raises(HybridArgumentError) as info:
        hyb.compile_source(MATMUL, schedule={"analysis_operations": -1}).mm(np.zeros((2, 2)), np.zeros((2, 2)))
    assert "analysis_operations=-1 must be a count >= 0" in info.value.message


def test_hyb_check_notes_the_fallback(tmp_path):
    f = tmp_path / "pool.hyb"
    f.write_text(MAXPOOL)
    r = subprocess.run([sys.executable, "-m", "hyb.cli", "check", str(f), "--args", "x=float32[2,3,8,8]"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "note: kernel `maxpool`: dependence analysis stopped at its budget" in r.stdout
