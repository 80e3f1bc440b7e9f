"""Loop nests that isl keeps apart although they share their outer parallel loop and read the same
rows (a statistic of every row first, then its use in a nest of its own): fused after isl along
that loop (hyb.schedule.fuse), where every dependence between them stays within one iteration;
left apart where one does not or where they share nothing."""
import numpy as np
import pytest

import hyb

SRC = '''
def rms_own_nest(x, gamma, eps):
    n = x.shape[0]
    d = x.shape[1]
    out = output_tensor((n, d), x.dtype)
    r = allocate((n,), x.dtype)
    for i in range(n):
        q = float32(0.0)
        for j in range(d):
            q += x[i, j] * x[i, j]
        r[i] = 1.0 / sqrt(q / d + eps)
    for i in range(n):
        for j in range(d):
            out[i, j] = x[i, j] * r[i] * gamma[j]
    return out

def softmax_in_stages(x):
    n = x.shape[0]
    d = x.shape[1]
    out = output_tensor((n, d), x.dtype)
    m = allocate((n,), x.dtype)
    s = allocate((n,), x.dtype)
    for i in range(n):
        m[i] = x[i, 0]
        for j in range(1, d):
            m[i] = max(m[i], x[i, j])
    for i in range(n):
        for j in range(d):
            out[i, j] = exp(x[i, j] - m[i])
            s[i] += out[i, j]
    for i in range(n):
        for j in range(d):
            out[i, j] = out[i, j] / s[i]
    return out

def neighbours(x):
    n = x.shape[0]
    d = x.shape[1]
    out = output_tensor((n, d), x.dtype)
    r = allocate((n,), x.dtype)
    for i in range(n):
        for j in range(d):
            r[i] += x[i, j]
    for i in range(1, n - 1):
        for j in range(d):
            out[i, j] = x[i, j] * (r[i - 1] + r[i + 1])
    return out

def nothing_shared(x, y):
    n = x.shape[0]
    d = x.shape[1]
    a = output_tensor((n,), x.dtype)
    b = output_tensor((n, d), x.dtype)
    for i in range(n):
        for j in range(d):
            a[i] += x[i, j]
    for i in range(n):
        for j in range(d):
            b[i, j] = y[i, j] * 2.0
    return a, b

def other_rows(x):
    n = x.shape[0]
    d = x.shape[1]
    out = output_tensor((n, d), x.dtype)
    r = allocate((n,), x.dtype)
    for i in range(n):
        for j in range(d):
            r[i] += x[i, j]
    for i in range(n - 1):
        for j in range(d):
            out[i, j] = x[i, j] * r[i]
    return out
'''
FUSED = "loop nests fused along their outer loop"


@pytest.fixture(scope="module")
def mod():
    return hyb.compile_source(SRC, "rows.hyb", threads=1)


def rnd(shape, seed=0):
    return np.random.default_rng(seed).uniform(-2, 2, shape).astype(np.float32)


def rms_ref(x, gamma, eps):
    x64 = x.astype(np.float64)
    return x64 / np.sqrt((x64 * x64).mean(axis=1, keepdims=True) + eps) * gamma


def schedule(kernel, *args) -> str:
    return kernel.compile(*args).inspect("schedule")


@pytest.mark.parametrize("shape", [(0, 5), (1, 1), (3, 17), (7, 64), (33, 1000)])
def test_a_statistic_of_every_row_then_its_use_runs_in_one_loop(mod, shape):
    x, gamma = rnd(shape), rnd(shape[1], 1)
    eps = np.float32(1e-5)
    k = mod.rms_own_nest
    got = k(x, gamma, eps)
    if shape[0]:
        np.testing.assert_allclose(got, rms_ref(x, gamma, eps), rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(got, k.emulate(x, gamma, eps), rtol=2e-5, atol=2e-5)
    else:
        assert got.shape == shape
    if shape[0] >= 3:
        text = schedule(k, x, gamma, eps)
        assert FUSED in text and "original order" not in text, text
        # one parallel loop over the rows, and `r` one value per row: a scalar
        assert "temporary `r` contracted to a scalar" in text, text
        assert k.compile(x, gamma, eps).inspect("loops").count("for (c0") == 1


def test_three_nests_fuse_and_every_form_agrees(mod):
    x = rnd((37, 129), 3)
    k = mod.softmax_in_stages
    text = schedule(k, x)
    assert FUSED in text and "original order" not in text, text
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(k(x), want, rtol=1e-5, atol=1e-6)
    for options in ({"threads": 2}, {"shapes": "generic"}, {"schedule": {"fuse": False}}):
        other = hyb.compile_source(SRC, "rows.hyb", **options).softmax_in_stages
        np.testing.assert_allclose(other(x), want, rtol=1e-5, atol=1e-6)
        if options.get("schedule") == {"fuse": False}:
            assert FUSED not in schedule(other, x)


def test_nests_stay_apart_where_a_dependence_crosses_rows_or_nothing_is_shared_and_ranges_may_differ(mod):
    x, y = rnd((9, 40), 4), rnd((9, 40), 5)
    # out[i] reads r[i - 1] and r[i + 1]: fused, row i would read a row not yet summed
    assert FUSED not in schedule(mod.neighbours, x)
    r = x.astype(np.float64).sum(axis=1)
    want = np.zeros_like(x, dtype=np.float64)
    want[1:-1] = x[1:-1] * (r[:-2] + r[2:])[:, None]
    np.testing.assert_allclose(mod.neighbours(x), want, rtol=1e-5, atol=1e-5)
    # no element read by both: nothing to reuse
    assert FUSED not in schedule(mod.nothing_shared, x, y)
    a, b = mod.nothing_shared(x, y)
    np.testing.assert_allclose(a, x.sum(axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(b, y * 2)
    # the second nest runs over one row fewer: fused all the same, its last row left out
    assert FUSED in schedule(mod.other_rows, x)
    want = np.zeros_like(x)
    want[:-1] = x[:-1] * x[:-1].sum(axis=1, keepdims=True)
    for k in (mod.other_rows, hyb.compile_source(SRC, "rows.hyb", shapes="generic").other_rows):
        for rows in (9, 1, 0):
            np.testing.assert_allclose(k(x[:rows]), want[:rows] if rows != 1 else np.zeros_like(x[:1]),
                                       rtol=1e-5, atol=1e-5)
