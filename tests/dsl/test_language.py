"""Language features beyond the core subset: grid loops, captured constants, kernel calls."""
import numpy as np
import pytest

import hyb
from hyb.errors import HybridNameError, HybridTypeError


def check(kernel, *args, expected):
    got = kernel(*[a.copy() for a in args])
    emu = kernel.emulate(*[a.copy() for a in args])
    got = got if isinstance(got, tuple) else (got,)
    emu = emu if isinstance(emu, tuple) else (emu,)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for g, e, x in zip(got, emu, expected):
        assert g.dtype == x.dtype and e.dtype == x.dtype
        np.testing.assert_allclose(g, x, rtol=1e-6)
        np.testing.assert_allclose(e, x, rtol=1e-6)


SCALE = 3
SHAPE = (2, 3)
DT = "float64"


@hyb.hybrid
def scale(a):
    c = output_tensor(a.shape, a.dtype)
    for idx in grid(a.shape):
        c[idx] = a[idx] * SCALE + idx[len(idx) - 1]
    return c


@pytest.mark.parametrize("shape", [(1,), (7,), (2, 3), (3, 1, 5), (0, 4)])
def test_grid_loop(shape):
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    last = np.indices(shape)[-1].astype(np.float32) if shape else 0
    check(scale, x, expected=(x * 3 + last).astype(np.float32))


@hyb.hybrid
def uses_captured(a):
    e = output_tensor(SHAPE, DT)
    for i in range(SHAPE[0]):
        for j in range(SHAPE[1]):
            e[i, j] = a[i, j] + SCALE
    return e


def test_captured_constants():
    x = np.ones((2, 3), dtype=np.float32)
    check(uses_captured, x, expected=np.full((2, 3), 4.0))


@hyb.hybrid
def calls_other(a):
    d = scale(a)
    e = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        e[i] = d[i] + 1
    return d, e


def test_hybrid_function_calls_hybrid_kernel():
    x = np.arange(5, dtype=np.float32)
    d = x * 3 + np.arange(5, dtype=np.float32)
    check(calls_other, x, expected=(d, d + 1))


MODULE_SRC = '''
N = 3
OFFSET = -1.5

def inner(a):
    b = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        b[i] = a[i] * 2
    return b

def two(a):
    p = output_tensor(a.shape, a.dtype)
    q = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        p[i] = a[i] + 1
        q[i] = a[i] - 1
    return p, q

def outer(a):
    c = output_tensor(a.shape, a.dtype)
    for j in range(N):
        t = inner(a)
        for i in range(a.shape[0]):
            c[i] += t[i] + j + OFFSET
    return c

def pair(a):
    p, q = two(a)
    r = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        r[i] = p[i] * q[i]
    return r

def bump(a):
    for i in range(a.shape[0]):
        a[i] += 1
    return a

def calls_in_place(a):
    bump(a)
    return a

def rec(a):
    b = rec(a)
    return b
'''
MODULE = hyb.compile_source(MODULE_SRC, "mod.hyb")


def test_inlined_call_inside_loop_starts_from_zero_each_time():
    x = np.arange(4.0)
    check(MODULE.outer, x, expected=2 * x * 3 + (0 + 1 + 2) + 3 * -1.5)


def test_inlined_call_with_two_outputs():
    x = np.arange(5.0)
    check(MODULE.pair, x, expected=(x + 1) * (x - 1))


def test_inlined_in_place_call():
    x = np.arange(3.0)
    y = x.copy()
    out = MODULE.calls_in_place(y)
    assert out is y
    np.testing.assert_array_equal(y, x + 1)


def test_recursive_call_is_an_error():
    with pytest.raises(HybridTypeError) as info:
        MODULE.rec(np.ones(2))
    assert "recursive kernel call (rec -> rec)" in info.value.message
    line = MODULE_SRC.split("\n").index("    b = rec(a)") + 1
    assert (info.value.line, info.value.col) == (line, 9)


HELPERS = """
def fill(b, v):
    for i in range(b.shape[0]):
        b[i] = v

def scale_row(out, x, i, s):
    for j in range(x.shape[1]):
        out[i, j] = x[i, j] * s

def uses_fill(a):
    c = output_tensor(a.shape, a.dtype)
    t = allocate(a.shape, a.dtype)
    fill(t, 2.0)
    for i in range(a.shape[0]):
        c[i] = a[i] * t[i]
    return c

def uses_rows(x, w):
    out = output_tensor(x.shape, x.dtype)
    for i in range(x.shape[0]):
        scale_row(out, x, i, w[i] * w[i] + 1.0)
    return out

def assigns_nothing(a):
    c = output_tensor(a.shape, a.dtype)
    t = fill(c, 1.0)
    return c

def does_nothing(b):
    for i in range(b.shape[0]):
        s = b[i]

def calls_nothing(a):
    does_nothing(a)
    return a
"""


def test_helpers_that_write_their_arguments_run_emulate_and_differentiate():
    m = hyb.compile_source(HELPERS, "helpers.hyb")
    a = np.arange(1.0, 5.0)
    for run in (m.uses_fill, m.uses_fill.emulate):
        np.testing.assert_array_equal(run(a), 2 * a)
    np.testing.assert_array_equal(m.uses_fill.grad()(a, np.ones(4)), np.full(4, 2.0))
    # a row index and an element expression passed as numbers (copied into the helper's own scalars)
    x, w = np.random.default_rng(3).standard_normal((3, 4)), np.array([0.5, -1.0, 2.0])
    want = x * (w * w + 1.0)[:, None]
    for run in (m.uses_rows, m.uses_rows.emulate):
        np.testing.assert_allclose(run(x, w), want, rtol=1e-12)
    dout = np.random.default_rng(4).standard_normal((3, 4))
    dx, dw = m.uses_rows.grad()(x, w, dout)
    np.testing.assert_allclose(dx, dout * (w * w + 1.0)[:, None], rtol=1e-12)
    np.testing.assert_allclose(dw, (dout * x).sum(axis=1) * 2 * w, rtol=1e-12)


def test_a_helper_that_returns_nothing_is_refused_where_nothing_could_use_it():
    m = hyb.compile_source(HELPERS, "helpers.hyb")
    lines = HELPERS.split("\n")
    with pytest.raises(HybridTypeError) as info:
        m.assigns_nothing(np.ones(2))
    assert info.value.message == "kernel `fill` returns nothing, so its result cannot be assigned"
    assert (info.value.line, info.value.col) == (lines.index("    t = fill(c, 1.0)") + 1, 9)
    assert info.value.hint == "call it as a statement: `fill(c, 1.0)`"
    with pytest.raises(HybridTypeError) as info:
        m.calls_nothing(np.ones(2))
    assert info.value.message == "kernel `does_nothing` returns nothing and writes none of its arguments"
    assert (info.value.line, info.value.col) == (lines.index("def does_nothing(b):") + 1, 5)


def test_a_called_kernel_sizes_its_output_from_its_own_locals():
    m = hyb.compile_source("""
def doubled(x):
    B = x.shape[0]
    shape = (B, 2)
    y = output_tensor(shape, x.dtype)
    for i in range(B):
        for j in range(2):
            y[i, j] = x[i] * (j + 1)
    return y

def caller(a, b):
    p = doubled(a)
    q = doubled(b)
    out = output_tensor((a.shape[0] + b.shape[0],), a.dtype)
    for i in range(a.shape[0]):
        out[i] = p[i, 1]
    for i in range(b.shape[0]):
        out[a.shape[0] + i] = q[i, 0]
    return out
""", "sizes.hyb")
    a, b = np.arange(3.0), np.arange(5.0) + 10
    want = np.concatenate([2 * a, b])
    for run in (m.caller, m.caller.emulate):
        np.testing.assert_array_equal(run(a, b), want)
    np.testing.assert_array_equal(m.caller.grad()(a, b, np.ones(8))[0], np.full(3, 2.0))


ROWS = """
def rotate(cam, X, out):
    for d in range(len(X)):
        out[d] = cam[d] * X[d] + cam[d + 3] * cam.shape[0]

def project(cams, pts, idx, out):
    for n in range(idx.shape[0]):
        rotate(cams[idx[n]], pts[n], out[n])
    return out

def whole(row):
    s = output_tensor((1,), row.dtype)
    s[0] = row[0]
    return s

def passes_on(cams):
    out = output_tensor((cams.shape[0],), cams.dtype)
    for c in range(cams.shape[0]):
        t = whole(cams[c])
        out[c] = t[0]
    return out
"""


def test_rows_as_arguments_run_emulate_and_differentiate():
    m = hyb.compile_source(ROWS, "rows.hyb")
    rng = np.random.default_rng(5)
    cams, pts, idx = rng.standard_normal((4, 6)), rng.standard_normal((5, 3)), np.array([0, 2, 1, 3, 2])
    want = cams[idx, :3] * pts + cams[idx, 3:6] * 6
    for run in (m.project, m.project.emulate):
        np.testing.assert_allclose(run(cams, pts, idx, np.zeros((5, 3))), want, rtol=1e-12)
    dout = rng.standard_normal((5, 3))
    dcams, dpts, didx, dout0 = m.project.grad()(cams, pts, idx, np.zeros((5, 3)), dout)
    want_cams = np.zeros_like(cams)
    for n, c in enumerate(idx):
        want_cams[c, :3] += dout[n] * pts[n]
        want_cams[c, 3:6] += dout[n] * 6
    np.testing.assert_allclose(dcams, want_cams, rtol=1e-12)
    np.testing.assert_allclose(dpts, dout * cams[idx, :3], rtol=1e-12)
    assert didx is None and not dout0.any()  # out is overwritten whole
    np.testing.assert_allclose(m.passes_on(cams), cams[:, 0])
    np.testing.assert_allclose(m.passes_on.grad()(cams, np.ones(4))[:, 0], np.ones(4))


def test_a_row_passed_on_whole_has_no_gradient_yet_and_says_where():
    src = """
def first(r):
    s = output_tensor((1,), r.dtype)
    s[0] = r[0]
    return s

def middle(row):
    t = first(row)
    s = output_tensor((1,), row.dtype)
    s[0] = t[0] * row[1]
    return s

def outer(cams):
    out = output_tensor((cams.shape[0],), cams.dtype)
    for c in range(cams.shape[0]):
        t = middle(cams[c])
        out[c] = t[0]
    return out
"""
    m = hyb.compile_source(src, "whole.hyb")
    cams = np.arange(8.0).reshape(4, 2)
    np.testing.assert_array_equal(m.outer(cams), cams[:, 0] * cams[:, 1])  # the forward runs it
    with pytest.raises(hyb.HybridUnsupportedError) as info:
        m.outer.grad()
    assert info.value.message == ("the gradient of a kernel with a row of a tensor passed to a kernel that uses it "
                                  "whole is not built yet")
    assert (info.value.line, info.value.col) == (src.split("\n").index("        t = middle(cams[c])") + 1, 13)
    assert info.value.hint == "index the row in the called kernel, or pass the whole tensor and the row's index"


def test_call_argument_count():
    m = hyb.compile_source("def f(a):\n    return a\n\ndef g(a):\n    b = f(a, a)\n    return b\n")
    with pytest.raises(HybridTypeError, match=r"kernel `f` takes 1 argument\(s\), got 2") as info:
        m.g(np.ones(2))
    assert (info.value.line, info.value.col) == (5, 9)


def test_grid_index_rank_mismatch():
    m = hyb.compile_source("def k(a):\n    c = output_tensor((2,), a.dtype)\n    for ix in grid(a.shape):\n"
                           "        c[ix] = a[ix]\n    return c\n")
    with pytest.raises(HybridTypeError, match="grid index `ix` has 2") as info:
        m.k(np.ones((2, 2)))
    assert (info.value.line, info.value.col) == (4, 9)


def test_grid_name_in_use():
    m = hyb.compile_source("def k(a):\n    c = output_tensor(a.shape, a.dtype)\n    for c in grid(a.shape):\n"
                           "        pass\n    return c\n")
    with pytest.raises(HybridNameError, match="`c` is already in use") as info:
        m.k(np.ones((2, 2)))
    assert (info.value.line, info.value.col) == (3, 9)


def test_two_in_place_outputs_sharing_memory_are_rejected():
    m = hyb.compile_source("def two(a, b):\n    for i in range(a.shape[0]):\n        a[i] = a[i] + 1\n"
                           "        b[i] = b[i] + 10\n    return a, b\n")
    x = np.zeros(3)
    for run in (m.two, m.two.emulate):
        with pytest.raises(hyb.HybridArgumentError, match="`a` and `b` are both written in place"):
            run(x, x)
    np.testing.assert_array_equal(x, 0)


def test_zero_dim_output():
    m = hyb.compile_source("def total(a):\n    c = output_tensor((), a.dtype)\n"
                           "    for i in range(a.shape[0]):\n        c[()] += a[i]\n    return c\n")
    x = np.arange(5.0)
    check(m.total, x, expected=np.array(10.0))


def test_local_constant_sizes_output_and_bounds():
    m = hyb.compile_source("def rev(a):\n    n = a.shape[0]\n    c = output_tensor((n,), a.dtype)\n"
                           "    for i in range(n):\n        c[i] = a[n - 1 - i]\n    return c\n")
    x = np.arange(6.0)
    check(m.rev, x, expected=x[::-1].copy())
    assert "n" not in m.rev.compile(x).typed.tensors  # folded, not a runtime scalar


def test_out_of_range_literal():
    m = hyb.compile_source("def f(a):\n    c = output_tensor(a.shape, a.dtype)\n    for i in range(a.shape[0]):\n"
                           "        c[i] = a[i] + 3000000000\n    return c\n")
    with pytest.raises(HybridTypeError, match="Python integer 3000000000 is out of bounds for int32") as info:
        m.f(np.arange(3, dtype=np.int32))
    assert (info.value.line, info.value.col) == (4, 23)


def test_warning_for_read_of_never_written_output():
    m = hyb.load(__file__.replace("tests/dsl/test_language.py", "examples/seeds.hyb"))
    x = np.array([1.0, 4.0, 9.0], dtype=np.float32)
    with pytest.warns(hyb.HybridWarning) as rec:
        out = m.square(x)
    np.testing.assert_array_equal(out, 0)
    assert len(rec) == 1
    w = rec[0].message
    assert "`y` is read before anything writes it (e.g. when i0 = 0); the value read is 0" in w.message
    assert w.span.source_line.strip() == "y[i0] = y[i0] * y[i0]"
    assert w.span.col == w.span.source_line.index("y[i0] *") + 1
    assert str(w).startswith(f"{w.span.filename}:{w.span.line}:{w.span.col}: warning: ")
    assert rec[0].filename == __file__  # points at the caller


def test_no_warning_for_accumulation_or_written_reads():
    import warnings
    m = hyb.compile_source("def k(a):\n    c = output_tensor(a.shape, a.dtype)\n    t = allocate(a.shape, a.dtype)\n"
                           "    for i in range(a.shape[0]):\n        c[i] += a[i]\n        t[i] = a[i] * 2\n"
                           "        c[i] = c[i] - t[i]\n    return c\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(m.k(np.arange(3.0)), -np.arange(3.0))


def test_big_endian_and_unaligned_arrays():
    m = hyb.compile_source("def inc(a, b):\n    for i in range(a.shape[0]):\n        a[i] += b[i]\n    return a\n")
    for _ in range(2):  # the second call takes the warm path
        a = np.arange(5, dtype=">f8")
        b = np.ones(5, dtype=">f8")
        out = m.inc(a, b)
        assert out is a
        np.testing.assert_array_equal(a, np.arange(5) + 1.0)
    raw = np.zeros(5 * 8 + 1, dtype=np.uint8)
    unaligned = raw[1:].view(np.float64)
    assert not unaligned.flags.aligned
    unaligned[:] = np.arange(5.0)
    for _ in range(2):
        m.inc(unaligned, np.ones(5))
    np.testing.assert_array_equal(unaligned, np.arange(5.0) + 2)
