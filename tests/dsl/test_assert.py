"""`assert cond, "message"` in kernels: decided at compile time where the condition is about shapes
and constants, checked when the kernel runs otherwise, by compiled code and emulate() alike."""
from __future__ import annotations

import numpy as np
import pytest

import hyb
from hyb.dsl import tir
from hyb.dsl.check import arg_specs, check_kernel
from hyb.dsl.parser import parse_string
from hyb.errors import HybridAssertionError, HybridTypeError

SRC = '''
def scale(x, w):
    assert x.shape[0] == w.shape[0], "x and w must have the same length"
    assert x.ndim == 1
    c = output_tensor(x.shape, x.dtype)
    for i in range(x.shape[0]):
        assert w[i] >= 0, "weights must be non-negative"
        c[i] = x[i] * w[i]
    return c

def rows(a):
    c = output_tensor(a.shape, a.dtype)
    for i in parallel(a.shape[0]):
        for j in range(a.shape[1]):
            assert not isnan(a[i, j])
            c[i, j] = a[i, j] + 1
    return c
'''


@pytest.fixture(scope="module")
def mod():
    return hyb.compile_source(SRC, "checks.hyb")


def test_holding_assertions_change_nothing(mod):
    x = np.arange(5.0)
    for f in (mod.scale, mod.scale.emulate):
        np.testing.assert_array_equal(f(x, np.ones(5)), x)


def test_an_assertion_about_shapes_fails_at_compile_time(mod):
    with pytest.raises(HybridAssertionError) as info:
        mod.scale(np.zeros(3), np.zeros(4))
    e = info.value
    assert e.message == "assertion failed: x and w must have the same length"
    assert (e.filename, e.line, e.col) == ("checks.hyb", 3, 12)
    assert "compile time" in e.hint
    assert isinstance(e, AssertionError) and isinstance(e, hyb.HybridError)


def test_an_assertion_decided_at_compile_time_leaves_no_statement():
    module = parse_string(SRC, "k.hyb")
    k = check_kernel(module.kernels["scale"], module, arg_specs([np.zeros(3), np.zeros(3)]))
    asserts = []

    def walk(body):
        for s in body:
            if isinstance(s, tir.Assert):
                asserts.append(s)
            for sub in (getattr(s, "body", None), getattr(s, "orelse", None)):
                if sub:
                    walk(sub)
    walk(k.body)
    assert [a.message for a in asserts] == ["weights must be non-negative"]


@pytest.mark.parametrize("run", ["compiled", "emulate"])
def test_a_run_time_assertion_names_kernel_line_and_message(mod, run):
    f = mod.scale if run == "compiled" else mod.scale.emulate
    with pytest.raises(HybridAssertionError) as info:
        f(np.arange(4.0), np.array([1.0, 2.0, -1.0, 0.0]))
    e = info.value
    assert e.message == "kernel `scale`: assertion failed: weights must be non-negative"
    assert (e.line, e.col) == (7, 9)
    assert "when the kernel ran" in e.hint


@pytest.mark.parametrize("threads", [1, 2])
def test_an_assertion_in_a_parallel_loop(threads):
    k = hyb.compile_source(SRC, "checks.hyb", threads=threads).rows
    a = np.ones((8, 3))
    np.testing.assert_array_equal(k(a), a + 1)
    a[5, 1] = np.nan
    with pytest.raises(HybridAssertionError) as info:
        k(a)
    assert info.value.message == "kernel `rows`: assertion failed"
    with pytest.raises(HybridAssertionError):
        k.emulate(a)


def test_an_assertion_survives_the_disk_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HYB_CACHE_DIR", str(tmp_path))
    x, bad = np.arange(3.0), np.array([1.0, -1.0, 1.0])
    first = hyb.compile_source(SRC, "checks.hyb").scale
    with pytest.raises(HybridAssertionError):
        first(x, bad)
    again = hyb.compile_source(SRC, "checks.hyb").scale  # loaded from the cache this time
    with pytest.raises(HybridAssertionError) as info:
        again(x, bad)
    assert info.value.message == "kernel `scale`: assertion failed: weights must be non-negative"
    assert info.value.line == 7


def test_the_message_must_be_a_string():
    src = "def k(a):\n    c = output_tensor(a.shape, a.dtype)\n    assert a.ndim == 1, a\n    return c\n"
    with pytest.raises(HybridTypeError) as info:
        hyb.compile_source(src, "m.hyb").k(np.zeros(2))
    assert info.value.message == "the message of an `assert` is a string"
    assert (info.value.line, info.value.col) == (3, 25)


def test_the_condition_must_be_a_condition():
    src = "def k(a):\n    c = output_tensor(a.shape, a.dtype)\n    assert a.shape[0] + 1\n    return c\n"
    with pytest.raises(HybridTypeError) as info:
        hyb.compile_source(src, "m.hyb").k(np.zeros(2))
    assert "a condition must be a comparison or a bool" in info.value.message


def test_the_gradient_leaves_assertions_out(mod):
    g = mod.scale.grad()
    assert "assert" not in g.source
    dx, dw = g(np.arange(3.0), np.ones(3), np.ones(3))
    np.testing.assert_array_equal(dx, np.ones(3))
    np.testing.assert_array_equal(dw, np.arange(3.0))


BRANCHES = '''
def pick(a, mode):
    b = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        if mode == 1:
            b[i] = a[i]
        elif mode == 2:
            b[i] = -a[i]
        else:
            assert False, "bad mode"
    return b

def rows(a, n):
    b = output_tensor(a.shape, a.dtype)
    for i in range(n):
        assert a.shape[0] == 3, "three rows"
    for i in range(a.shape[0]):
        b[i] = a[i]
    return b

def known(a):
    b = output_tensor(a.shape, a.dtype)
    if a.shape[0] > 2:
        assert False, "too long"
    else:
        b[0] = a[0]
    return b
'''


@pytest.mark.parametrize("run", ["compiled", "emulate"])
def test_an_assertion_fires_only_when_it_is_reached(run):
    mod = hyb.compile_source(BRANCHES, "modes.hyb")
    a = np.arange(4, dtype=np.float32)

    def call(k, *args):
        return (k if run == "compiled" else k.emulate)(*args)

    np.testing.assert_array_equal(call(mod.pick, a, 1), a)
    np.testing.assert_array_equal(call(mod.pick, a, 2), -a)
    with pytest.raises(HybridAssertionError) as info:
        call(mod.pick, a, 3)
    e = info.value
    assert e.message == "kernel `pick`: assertion failed: bad mode"
    assert (e.filename, e.line, e.col) == ("modes.hyb", 10, 13)
    assert "reached" in e.hint
    # a loop that runs no iteration reaches nothing in it; one that runs reaches its assert
    np.testing.assert_array_equal(call(mod.rows, a, 0), a)
    with pytest.raises(HybridAssertionError) as info:
        call(mod.rows, a, 2)
    assert info.value.message == "kernel `rows`: assertion failed: three rows"
    assert (info.value.line, info.value.col) == (16, 9)


def test_an_assertion_in_a_branch_known_to_run_is_decided_at_compile_time():
    mod = hyb.compile_source(BRANCHES, "modes.hyb")
    np.testing.assert_array_equal(mod.known(np.arange(2.0)), [0.0, 0.0])
    for f in (mod.known, mod.known.emulate):
        with pytest.raises(HybridAssertionError) as info:
            f(np.arange(4.0))
        assert info.value.message == "assertion failed: too long"
        assert "compile time" in info.value.hint and info.value.line == 24


MESSAGES = '''
N = 3
def k(x, y):
    out = output_tensor((1,), "int64")
    assert x[0] == y[0], "mismatch %s and %d (%.1f%%) n=%d" % (x[0], y[0], 2.5, N)
    assert x.shape[0] > 1, f"too short: {x.shape[0]:>3} (y starts {y[0]})"
    out[0] = x[0]
    return out
'''


def test_messages_formatted_as_tvm_evaluates_them():
    k = hyb.compile_source(MESSAGES, "msg.hyb").k
    for f in (k, k.emulate):
        with pytest.raises(HybridAssertionError) as info:
            f(np.array([1, 1]), np.array([2, 2]))
        assert info.value.message == "kernel `k`: assertion failed: mismatch `x[0]` and `y[0]` (2.5%) n=3"
    with pytest.raises(HybridAssertionError) as info:  # decided at compile time: the shape is known
        k(np.array([1]), np.array([1]))
    assert info.value.message == "assertion failed: too short:   1 (y starts `y[0]`)"
    np.testing.assert_array_equal(k(np.array([4, 0]), np.array([4, 1])), [4])


@pytest.mark.parametrize("args,message", [("(x[0],)", "the assert message has more `%` fields than values"),
                                          ("(x[0], y[0], 1, 2, 3)", "the assert message has fewer `%` fields than values")])
def test_message_fields_and_values_must_pair(args, message):
    src = MESSAGES.replace("(x[0], y[0], 2.5, N)", args)
    with pytest.raises(HybridTypeError) as info:
        hyb.compile_source(src, "msg.hyb").k(np.array([1, 1]), np.array([1, 1]))
    assert info.value.message == message and (info.value.line, info.value.col) == (5, 26)
