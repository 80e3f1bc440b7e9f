"""Running extrema with their index (argmax, argmin, first and last index): rewritten into a
vector extremum pass and a vector index pass (hyb.schedule.argext), bit for bit the loop as written,
NaNs, ties and zeros of both signs included."""
import numpy as np
import pytest

import hyb

TEMPLATE = '''
def arg(x, start):
    n = x.shape[0]
    d = x.shape[1]
    idx = output_tensor((n,), "int32")
    val = output_tensor((n,), x.dtype)
    for i in range(n):
        best = start[i]
        k = -1
        for j in range(d):
            if COND:
                best = x[i, j]
                k = j
        idx[i] = k
        val[i] = best
    return idx, val
'''
FORMS = {"first max": "x[i, j] > best", "last max": "x[i, j] >= best", "first min": "x[i, j] < best",
         "last min": "x[i, j] <= best", "first max, flipped": "best < x[i, j]"}
KERNELS = {form: hyb.compile_source(TEMPLATE.replace("COND", cond), threads=1).arg for form, cond in FORMS.items()}
WIDTHS = [0, 1, 5, 63, 64, 65, 130, 511]


def data(n, d, dtype, seed):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        x = rng.integers(-4, 5, (n, d)).astype(dtype)  # few levels: ties in every row
        x[x == 0] = np.where(rng.random(int((x == 0).sum())) < 0.5, -0.0, 0.0)
        start = rng.integers(-5, 6, n).astype(dtype)
        if n > 2:
            start[0] = np.nan                           # an initial NaN: nothing is ever taken
            x[1, rng.integers(0, d) if d else 0:] = np.nan if d else 0   # NaNs in a row: never taken
            start[2] = -0.0
    else:
        x = rng.integers(-4, 5, (n, d)).astype(dtype)
        start = rng.integers(-5, 6, n).astype(dtype)
    return x, start


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    if a.dtype.kind == "f":
        np.testing.assert_array_equal(a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}"))
    else:
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
@pytest.mark.parametrize("form", list(FORMS))
def test_rewritten_loops_are_the_written_loops_bit_for_bit(form, dtype):
    k = KERNELS[form]
    for seed, d in enumerate(WIDTHS):
        x, start = data(7, d, dtype, seed)
        got, want = k(x, start), k.emulate(x, start)
        for g, w in zip(got, want):
            same_bits(g, w)
    x, start = data(5, 130, dtype, 99)
    assert "with its" in k.compile(x, start).inspect("schedule")


def test_numpy_argmax_as_written():
    src = '''
def argmax_rows(x):
    idx = output_tensor((x.shape[0],), "int32")
    for i in range(x.shape[0]):
        best = x[i, 0]
        k = 0
        for j in range(1, x.shape[1]):
            if x[i, j] > best:
                best = x[i, j]
                k = j
        idx[i] = k
    return idx
'''
    k = hyb.compile_source(src).argmax_rows
    rng = np.random.default_rng(3)
    for d in (1, 2, 37, 512, 1000):
        x = rng.integers(0, 7, (9, d)).astype(np.float32)
        np.testing.assert_array_equal(k(x), np.argmax(x, axis=1))
    text = k.compile(x).inspect("schedule")
    assert "running maximum of `best` with its first index `k` (line 7)" in text, text


def test_program_order_and_other_bodies_are_left_as_written():
    x, start = data(4, 70, "float32", 5)
    ordered = hyb.compile_source(TEMPLATE.replace("COND", FORMS["first max"]),
                                 schedule={"reassociate": False}).arg
    assert "with its" not in ordered.compile(x, start).inspect("schedule")
    # a value that a vector and a scalar pass might round differently, and a third statement
    for body in ("best = exp(x[i, j])", "best = x[i, j]\n                k = j\n                idx[i] = j"):
        src = (TEMPLATE.replace("COND", "exp(x[i, j]) > best" if "exp" in body else FORMS["first max"])
               .replace("best = x[i, j]\n                k = j", body + ("\n                k = j" if "exp" in body else "")))
        kernel = hyb.compile_source(src).arg
        assert "with its" not in kernel.compile(x, start).inspect("schedule"), src
        for g, w in zip(kernel(x, start), kernel.emulate(x, start)):
            if "exp" in body and g.dtype.kind == "f":  # hyb's exp and NumPy's may be an ulp apart
                np.testing.assert_allclose(g, w, rtol=2.4e-7)
            else:
                same_bits(g, w)


def test_a_running_maximum_runs_in_whole_chunks_and_an_overlapping_last_one():
    src = '''
def row_max(x):
    out = output_tensor((x.shape[0],), x.dtype)
    for i in range(x.shape[0]):
        m = x[i, 0]
        for j in range(1, x.shape[1]):
            m = max(m, x[i, j])
        out[i] = m
    return out
'''
    rng = np.random.default_rng(0)
    for d in (2, 64, 65, 66, 129, 1024):
        k = hyb.compile_source(src).row_max
        x = rng.standard_normal((5, d)).astype(np.float32)
        x[1, d // 2] = np.nan
        x[2] = -0.0
        got = k(x)
        same_bits(got[[0, 1, 3, 4]], x.max(axis=1)[[0, 1, 3, 4]])
        assert got[2] == 0.0
        chunked = "running max of `m` (line 6): whole chunks of 64" in k.compile(x).inspect("schedule")
        assert chunked == (d - 1 > 64 and (d - 1) % 64 != 0), d
