"""A math function computed in one loop and again in a later one, stored once in the cell the later
loop writes (hyb.schedule.reuse): which pairs of loops qualify, the decision that says so, and
results bit for bit those of the program."""
from __future__ import annotations

import numpy as np
import pytest

import hyb
from hyb.schedule import reuse

SOFTMAX = '''def k(x):
    n = x.shape[0]
    d = x.shape[1]
    out = output_tensor((n, d), x.dtype)
    for i in range(n):
        m = x[i, 0]
        for j in range(1, d):
            m = max(m, x[i, j])
        s = float32(0.0)
        for j in range(d):
            s += exp(x[i, j] - m)
        for j in range(d):
            out[i, j] = exp(x[i, j] - m) / s
    return out
'''

DECISION = "`exp(...)` (line 11) computed once: stored in `out` by the first loop, read back by the loop that writes it"


def rewritten(src, *args):
    typed = hyb.compile_source(src).kernels["k"].typed(*args)
    return reuse.rewrite(typed)


def rows(n, d, dt=np.float32):
    return np.random.default_rng(n * 100 + d).uniform(-4, 4, (n, d)).astype(dt)


@pytest.mark.parametrize("n,d", [(0, 5), (1, 1), (1, 17), (7, 33), (64, 100)])
@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("generic", [False, True])
def test_softmax_with_its_exp_recomputed_computes_it_once(n, d, dt, generic, monkeypatch):
    x = rows(n, d, dt)
    src = SOFTMAX if dt == np.float32 else SOFTMAX.replace("float32(0.0)", "0.0")
    kernel = hyb.compile_source(src, schedule={"reassociate": False}).kernels["k"]
    if generic:
        kernel.compile(rows(n + 1, d + 2, dt))  # a second shape: code for every shape
    ck = kernel.compile(x)
    got = ck(x)
    # the same values as without the rewrite, bit for bit (NumPy's exp, which the interpreter
    # calls, may differ from the compiled one in the last bit)
    np.testing.assert_allclose(got, kernel.emulate(x), rtol=2e-6, atol=1e-7)
    monkeypatch.setattr(reuse, "_pair", lambda *a: None)
    plain = hyb.compile_source(src + "# without the rewrite\n", schedule={"reassociate": False}).kernels["k"]
    assert "reuse: nothing found" in plain.compile(x).inspect("rewrites")
    if dt == np.float32:
        np.testing.assert_array_equal(got, plain(x))
    else:  # libmvec's vector exp and libm's may differ in the last bit, and the loops' vector
        # iterations need not end at the same element
        np.testing.assert_allclose(got, plain(x), rtol=1e-15, atol=0)
    if n and d:
        assert DECISION in ck.inspect("schedule")
        assert ck.inspect("llvm").count("@llvm.exp") + ck.inspect("llvm").count("exp") >= 1
        assert ck.inspect("rewrites").count("computed once") == 1


def test_the_stored_value_replaces_both_calls():
    x = rows(4, 9)
    typed, decisions = rewritten(SOFTMAX, x)
    assert decisions == [DECISION]
    text = repr(typed.body)
    assert text.count("name='exp'") == 1  # one exp left, stored in `out` by the first loop


REFUSED = {
    # the second loop runs over another range
    "range": SOFTMAX.replace("for j in range(d):\n            out", "for j in range(1, d):\n            out"),
    # the cell is not one of its own at each step (every j writes out[i, 0])
    "cell": SOFTMAX.replace("out[i, j] = exp", "out[i, 0] = exp"),
    # what the function reads is written between the loops
    "between": SOFTMAX.replace("        for j in range(d):\n            out",
                               "        m = m + 1.0\n        for j in range(d):\n            out"),
    # the first loop computes it only where a condition holds (a read it guards may be out of bounds)
    "guarded": SOFTMAX.replace("s += exp(x[i, j] - m)", "s += exp(x[i, j] - m) if x[i, j] > 0.0 else 0.0"),
    # a cheap function is not worth a store and a load
    "cheap": SOFTMAX.replace("exp(", "sqrt(abs(").replace("- m)", "- m))"),
    # the output is read by the first loop
    "read": SOFTMAX.replace("s += exp(x[i, j] - m)", "s += exp(x[i, j] - m) + out[i, j]"),
}


@pytest.mark.filterwarnings("ignore::hyb.HybridWarning")  # ("read": `out` read before it is written)
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_is_left_as_written(name):
    src = REFUSED[name]
    x = rows(5, 12)
    _, decisions = rewritten(src, x)
    assert decisions == []
    kernel = hyb.compile_source(src).kernels["k"]
    np.testing.assert_allclose(kernel(x), kernel.emulate(x), rtol=1e-5, atol=1e-6)


def test_a_temporary_of_another_dtype_is_left_as_written():
    # the stored value would be rounded to float16: not the value computed
    src = SOFTMAX.replace("out = output_tensor((n, d), x.dtype)", "out = output_tensor((n, d), \"float16\")").replace(
        "out[i, j] = exp(x[i, j] - m) / s", "out[i, j] = float16(exp(x[i, j] - m) / s)")
    x = rows(5, 12)
    _, decisions = rewritten(src, x)
    assert decisions == []


def test_original_order_runs_no_rewrite():
    x = rows(5, 12)
    ck = hyb.compile_source(SOFTMAX, schedule="original").kernels["k"].compile(x)
    assert "reuse: not run" in ck.inspect("rewrites")
