"""Data-dependent subscripts and loop bounds: compiled conservatively, checked at run time."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import hyb
from hyb.errors import HybridIndexError

SRC = '''
def hist(idx, w):
    h = output_tensor((8,), w.dtype)
    for i in range(idx.shape[0]):
        h[idx[i]] += w[i]
    return h

def gather(a, idx):
    c = output_tensor(idx.shape, a.dtype)
    for i in range(idx.shape[0]):
        c[i] = a[idx[i]]
    return c

def ragged(lens, a):
    c = output_tensor((lens.shape[0],), a.dtype)
    for i in range(lens.shape[0]):
        s = 0.0
        for j in range(lens[i]):
            s += a[i, j]
        c[i] = s
    return c

def ragged_start(starts, a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        for j in range(starts[i], a.shape[1]):
            c[i, j] = a[i, j] * 2
            for k in range(j, a.shape[1]):
                c[i, j] += 1
    return c

def quadratic(a):
    c = output_tensor((a.shape[0] * a.shape[0],), a.dtype)
    for i in range(a.shape[0]):
        for j in range(a.shape[0]):
            c[i * a.shape[0] + j] = a[i] * a[j]
        c[i * i] += 1
    return c

def guarded(a, f):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        if f[i] > 0:
            c[i] = a[i - 1]
        else:
            c[i] = a[i] if f[i] == 0 else a[i + 1]
    return c
'''
MOD = hyb.compile_source(SRC, "dd.hyb")
LINES = SRC.split("\n")


def line_of(text):
    return next(n for n, ln in enumerate(LINES, 1) if text in ln)


def both(kernel, *args):
    got = kernel(*[a.copy() for a in args])
    emu = kernel.emulate(*[a.copy() for a in args])
    np.testing.assert_array_equal(got, emu)
    return got


@pytest.mark.parametrize("n", [0, 1, 7, 100])
@pytest.mark.parametrize("itype", ["int32", "int64", "uint8"])
def test_histogram(n, itype):
    rng = np.random.default_rng(n)
    idx = rng.integers(0, 8, n).astype(itype)
    w = rng.standard_normal(n)
    expected = np.zeros(8)
    np.add.at(expected, idx, w)
    np.testing.assert_allclose(both(MOD.hist, idx, w), expected)


@pytest.mark.parametrize("n", [1, 5, 33])
def test_gather(n):
    rng = np.random.default_rng(n)
    a = rng.standard_normal(n).astype(np.float32)
    idx = rng.integers(0, n, 2 * n)
    np.testing.assert_array_equal(both(MOD.gather, a, idx), a[idx])


@pytest.mark.parametrize("rows,cols", [(1, 1), (4, 5), (9, 3)])
def test_ragged_rows(rows, cols):
    rng = np.random.default_rng(rows)
    a = rng.standard_normal((rows, cols))
    lens = rng.integers(0, cols + 1, rows)
    expected = np.array([a[i, :lens[i]].sum() for i in range(rows)])
    np.testing.assert_allclose(both(MOD.ragged, lens, a), expected)


def test_ragged_start_nested_loops():
    a = np.arange(20.0).reshape(4, 5)
    starts = np.array([0, 2, 5, 4])
    expected = np.zeros_like(a)
    for i in range(4):
        for j in range(starts[i], 5):
            expected[i, j] = a[i, j] * 2 + (5 - j)
    np.testing.assert_array_equal(both(MOD.ragged_start, starts, a), expected)


def test_product_of_loop_variables():
    a = np.arange(1.0, 4.0)
    expected = np.outer(a, a).ravel()
    expected[[0, 1, 4]] += 1
    np.testing.assert_array_equal(both(MOD.quadratic, a), expected)


def test_guarded_shifted_reads_are_checked_only_when_they_run():
    a = np.arange(1.0, 5.0)
    f = np.array([0.0, 1.0, -1.0, 0.0])
    np.testing.assert_array_equal(both(MOD.guarded, a, f), [1.0, 1.0, 4.0, 4.0])


@pytest.mark.parametrize("bad,index", [(8, 8), (-1, -1), (1000, 1000)])
def test_scatter_out_of_bounds(bad, index):
    idx = np.array([0, bad, 1], dtype=np.int64)
    for run in (MOD.hist, MOD.hist.emulate):
        with pytest.raises(HybridIndexError) as info:
            run(idx, np.ones(3))
        e = info.value
        assert e.message == f"kernel `hist`: index {index} is out of bounds for axis 0 of `h` (shape (8,))"
        assert (e.line, e.col) == (line_of("h[idx[i]] +="), 9)


def test_data_dependent_bound_out_of_bounds():
    for run in (MOD.ragged, MOD.ragged.emulate):
        with pytest.raises(HybridIndexError) as info:
            run(np.array([2, 6]), np.ones((2, 5)))
        assert "index 5 is out of bounds for axis 1 of `a` (shape (2, 5))" in info.value.message
        assert info.value.line == line_of("s += a[i, j]")


def test_guarded_access_out_of_bounds_when_taken():
    for run in (MOD.guarded, MOD.guarded.emulate):
        with pytest.raises(HybridIndexError) as info:
            run(np.ones(3), np.array([1.0, 0.0, 0.0]))
        assert "index -1 is out of bounds for axis 0 of `a`" in info.value.message
        assert (info.value.line, info.value.col) == (line_of("c[i] = a[i - 1]"), 20)


def test_opaque_statement_is_shown_in_isl_stage():
    text = MOD.ragged.compile(np.array([1]), np.ones((1, 2))).inspect("isl")
    assert "(opaque: runs as written)" in text
    assert "may read" in text and "may write" in text


def test_out_of_bounds_never_touches_memory_in_a_subprocess():
    code = textwrap.dedent(f'''
        import numpy as np, hyb
        mod = hyb.compile_source({SRC!r})
        idx = np.array([0, 10**9, -10**9], dtype=np.int64)
        raised = {{"hist": 0, "gather": 0}}
        for i in range(200):
            try:
                mod.hist(idx, np.ones(3))
            except hyb.HybridIndexError as e:
                raised["hist"] += "index 1000000000 is out of bounds for axis 0 of `h`" in e.message
            try:
                mod.gather(np.ones(2), idx)
            except hyb.HybridIndexError as e:
                raised["gather"] += "index 1000000000 is out of bounds for axis 0 of `a`" in e.message
        print("clean", raised["hist"], raised["gather"])
    ''')
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    # every call raised HybridIndexError for the first index out of bounds, and the process lived on
    assert r.stdout.strip() == "clean 200 200", r.stdout
