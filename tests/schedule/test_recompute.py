"""Cheap elementwise temporaries computed where they are read (hyb.schedule.recompute): which
temporaries qualify, the decision that says so, and results bit for bit those of the program."""
from __future__ import annotations

import numpy as np
import pytest

import hyb
from hyb.schedule import recompute

ADD_RMSNORM = '''def k(x, r, gamma):
    n = x.shape[0]
    d = x.shape[1]
    t = allocate((n, d), x.dtype)
    y = output_tensor((n, d), x.dtype)
    for i in range(n):
        for j in range(d):
            t[i, j] = x[i, j] + r[i, j]
    for i in range(n):
        s = float32(0.0)
        for j in range(d):
            s += t[i, j] * t[i, j]
        inv = 1.0 / sqrt(s / d + 1e-5)
        for j in range(d):
            y[i, j] = t[i, j] * inv * gamma[j]
    return y
'''

IN_ORDER = {"reassociate": False}


def typed_of(src, *args):
    return hyb.compile_source(src).kernels["k"].typed(*args)


def rewritten(src, *args):
    typed = typed_of(src, *args)
    new, decisions = recompute.rewrite(typed)
    return typed, new, decisions


def args2(n=6, d=10, dt=np.float32):
    rng = np.random.default_rng(n * 100 + d)
    return (rng.standard_normal((n, d)).astype(dt), rng.standard_normal((n, d)).astype(dt),
            rng.standard_normal(d).astype(dt))


@pytest.mark.parametrize("n,d", [(0, 5), (1, 1), (1, 17), (7, 33), (64, 100)])
@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["float32", "float64"])
def test_a_residual_add_is_computed_in_the_row_loop_bit_for_bit(n, d, dt):
    args = args2(n, d, dt)
    kernel = hyb.compile_source(ADD_RMSNORM, schedule=IN_ORDER).kernels["k"]
    ck = kernel.compile(*args)
    got = ck(*args)
    np.testing.assert_array_equal(got, kernel.emulate(*args))
    if n and d:
        text = ck.inspect("schedule")
        assert "temporary `t` computed where it is read (2 statement(s)): its nest (line 8) is gone" in text
        assert '%"t_t"' not in ck.inspect("llvm") and '%"t_y"' in ck.inspect("llvm")


def test_the_default_mode_agrees_within_reassociation():
    args = args2(33, 257)
    got = hyb.compile_source(ADD_RMSNORM).k(*args)
    np.testing.assert_allclose(got, hyb.compile_source(ADD_RMSNORM).kernels["k"].emulate(*args), rtol=2e-6, atol=1e-6)


def test_fuse_off_or_the_original_order_keeps_the_buffer():
    args = args2()
    for schedule in ({"fuse": False}, "original"):
        ck = hyb.compile_source(ADD_RMSNORM, schedule=schedule).kernels["k"].compile(*args)
        assert "computed where it is read" not in ck.inspect("schedule")
        # (the sum of squares' products fuse into its additions, FMA: to the last bits)
        np.testing.assert_allclose(ck(*args), hyb.compile_source(ADD_RMSNORM).kernels["k"].emulate(*args),
                                   rtol=1e-6, atol=1e-6)


def _variant(producer=None, reader=None, extra=""):
    src = ADD_RMSNORM
    if producer:
        src = src.replace("            t[i, j] = x[i, j] + r[i, j]\n", producer)
    if reader:
        src = src.replace("            y[i, j] = t[i, j] * inv * gamma[j]\n", reader)
    return src.replace("    return y\n", extra + "    return y\n")


KEPT = {
    "written twice": _variant(extra="    t[0, 0] = 1.0\n"),
    "written under a condition": _variant(producer="            if x[i, j] > 0.0:\n"
                                                   "                t[i, j] = x[i, j] + r[i, j]\n"),
    "a partial nest": ADD_RMSNORM.replace("        for j in range(d):\n            t[i, j]",
                                          "        for j in range(d - 1):\n            t[i, j]"),
    "subscripts not the nest's variables": _variant(producer="            t[i, j] = x[i, j] + r[i, 0]\n"
                                                             "            t[i, 0] = 2.0\n"),
    "a shifted read": _variant(reader="            y[i, j] = t[i, (j + 1) % d] * inv\n"),
    "a read repeated along a loop": _variant(reader="            for q in range(2):\n"
                                                    "                y[i, j] += t[i, j] * inv\n"),
    "a producer reading a written tensor": _variant(producer="            t[i, j] = x[i, j] + y[i, j]\n"),
    "a costly producer read by three statements":
        _variant(producer="            t[i, j] = exp(x[i, j]) + r[i, j]\n",
                 reader="            y[i, j] = t[i, j] * inv\n            y[i, j] += t[i, j]\n"),
    "a read in a loop bound": _variant(extra="    for q in range(int32(t[0, 0])):\n        y[0, 0] = 1.0\n"),
}


@pytest.mark.parametrize("why", sorted(KEPT))
@pytest.mark.filterwarnings("ignore::hyb.HybridWarning")
def test_temporaries_that_do_not_qualify_keep_their_buffer(why):
    args = args2()
    _, new, decisions = rewritten(KEPT[why], *args)
    assert decisions == () and "t" in new.tensors, why
    kernel = hyb.compile_source(KEPT[why], schedule=IN_ORDER).kernels["k"]
    if "exp" in KEPT[why]:  # hyb's exp and NumPy's may be an ulp apart
        np.testing.assert_allclose(kernel(*args), kernel.emulate(*args), rtol=2e-6)
    else:
        np.testing.assert_array_equal(kernel(*args), kernel.emulate(*args))


def test_a_read_before_the_producer_keeps_the_buffer():
    src = ADD_RMSNORM.replace("    for i in range(n):\n        for j in range(d):\n            t[i, j]",
                              "    y[0, 0] = t[0, 0]\n    for i in range(n):\n        for j in range(d):\n            t[i, j]")
    args = args2()
    _, new, decisions = rewritten(src, *args)
    assert decisions == () and "t" in new.tensors


def test_a_chain_of_temporaries_and_a_transposed_read():
    src = '''def k(a, b):
    n = a.shape[0]
    t1 = allocate((n, n), a.dtype)
    t2 = allocate((n, n), a.dtype)
    out = output_tensor((n, n), a.dtype)
    for i in range(n):
        for j in range(n):
            t1[i, j] = a[i, j] * b[j, i]
    for i in range(n):
        for j in range(n):
            t2[i, j] = t1[i, j] * sqrt(abs(t1[i, j]))
    for i in range(n):
        for j in range(n):
            out[i, j] = t2[j, i] + 1.0
    return out
'''
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 37, 37)).astype(np.float32)
    _, new, decisions = rewritten(src, a, b)
    assert len(decisions) == 2 and "t1" not in new.tensors and "t2" not in new.tensors
    kernel = hyb.compile_source(src, schedule=IN_ORDER).kernels["k"]
    np.testing.assert_array_equal(kernel(a, b), kernel.emulate(a, b))
