"""Temporaries allocated inside a `parallel` loop get a copy per iteration (hyb.schedule.privatise):
the loop keeps its threads, no false warning, the same results as emulate()."""
import warnings

import numpy as np
import pytest

import hyb

SRC = '''
def scratch(x):
    out = output_tensor((x.shape[0],), x.dtype)
    for i in parallel(x.shape[0]):
        o = allocate((2,), x.dtype)
        o[0] = x[i] * 2.0
        o[1] += o[0] + 1.0
        out[i] = o[0] + o[1]
    return out

def helper(v):
    r = output_tensor((1,), v.dtype)
    r[0] = v[0] * 3.0
    return r

def strided(x):
    out = output_tensor((x.shape[0],), x.dtype)
    for i in parallel(2, x.shape[0], 3):
        w = allocate((1,), x.dtype)
        w[0] = x[i]
        h = helper(w)
        out[i] = h[0]
    return out

def grid2(x):
    out = output_tensor(x.shape, x.dtype)
    for i in parallel(x.shape[0]):
        for j in parallel(x.shape[1]):
            t = allocate((3,), x.dtype)
            t[0] = x[i, j]
            t[1] = t[0] * t[0]
            t[2] = t[1] - t[0]
            out[i, j] = t[2]
    return out

def huge(x):
    out = output_tensor((x.shape[0],), x.dtype)
    for i in parallel(x.shape[0]):
        big = allocate((600000,), "float64")
        big[i] = x[i]
        out[i] = big[i] * 2.0
    return out
'''


@pytest.fixture(scope="module")
def m():
    return hyb.compile_source(SRC, "priv.hyb", threads=2)


def quiet(k, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = k(*args)
    np.testing.assert_array_equal(got, k.emulate(*args))
    return got


@pytest.mark.parametrize("n", [0, 1, 7, 33, 20000])
def test_a_scratch_buffer_per_iteration(m, n):
    x = np.arange(n, dtype=np.float64)
    np.testing.assert_array_equal(quiet(m.scratch, x), 4 * x + 1)
    np.testing.assert_array_equal(quiet(m.strided, x), np.where(np.arange(n) % 3 == 2, 3 * x, 0)
                                  if n else np.zeros(0))


def test_the_decision_and_the_threads():
    x = np.arange(20000.0)
    ck = hyb.compile_source(SRC, "priv.hyb", threads=2, shapes="specialise").scratch.compile(x)
    assert ("privatise: `o` (allocated inside the parallel loop `i`) has a copy per iteration: 20000 copies"
            in ck.plan.decisions)
    assert "parallel for" in ck.inspect("loops")


@pytest.mark.parametrize("shape", [(1, 1), (5, 7), (64, 3)])
def test_nested_parallel_loops_get_a_copy_per_pair(m, shape):
    x = np.random.default_rng(1).standard_normal(shape)
    np.testing.assert_allclose(quiet(m.grid2, x), x * x - x)
    ck = m.grid2.compile(x)
    assert any("`t` (allocated inside the parallel loops `i`, `j`)" in d for d in ck.plan.decisions)


def test_shape_generic_code_privatises_too():
    k = hyb.compile_source(SRC, "priv.hyb", shapes="generic").scratch
    for n in (3, 40):
        x = np.arange(n, dtype=np.float32)
        np.testing.assert_array_equal(quiet(k, x), 4 * x + 1)
    assert any("as many copies as the loop has iterations" in d for d in k.compile(np.ones(5, np.float32)).plan.decisions)


def test_copies_past_the_limit_keep_one_buffer_and_the_warning(m):
    x = np.arange(64.0)
    with pytest.warns(hyb.HybridWarning, match="loop `i` is written `parallel` but its iterations depend"):
        got = m.huge(x)
    np.testing.assert_array_equal(got, 2 * x)
    assert not any("privatise" in d for d in m.huge.compile(x).plan.decisions)


def test_a_subscript_known_only_when_running_keeps_the_copy_exact():
    # `t[m - j]`: the row's copy is still known exactly, so the parallel loop keeps its threads
    src = '''
def mirror(a, m):
    out = output_tensor(a.shape, a.dtype)
    for b in parallel(a.shape[0]):
        t = allocate((a.shape[1],), a.dtype)
        for j in range(a.shape[1]):
            t[j] = a[b, j]
        for j in range(a.shape[1]):
            out[b, j] = t[m - j]
    return out

def reverse(a):
    out = output_tensor(a.shape, a.dtype)
    m = int32(a.shape[0] - 1)
    for j in range(a.shape[0]):
        out[j] = a[m - j]
    return out
'''
    mod = hyb.compile_source(src, "mirror.hyb", threads=2, shapes="specialise")
    a = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(quiet(mod.mirror, a, np.int32(3)), a[:, ::-1])
    with pytest.raises(hyb.HybridIndexError):
        mod.mirror(a, np.int32(4))  # t[4] is past the row: the run-time check still stands
    np.testing.assert_array_equal(quiet(mod.reverse, np.arange(5.0)), np.arange(5.0)[::-1])
    assert "m" not in mod.reverse.typed(np.arange(5.0)).tensors  # int32(a constant): a constant, not a scalar


def test_an_aot_library_allocates_the_copies(tmp_path):
    import ctypes
    import shutil
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("needs a C compiler")
    from hyb.codegen import aot
    x = np.arange(5000.0)
    ck = hyb.compile_source(SRC, "priv.hyb", threads=2, shapes="specialise").scratch.compile(x)
    assert any("privatise" in d for d in ck.plan.decisions)
    aot.build_library(ck, tmp_path / "lib.so", "scratch")
    lib = ctypes.CDLL(str(tmp_path / "lib.so"))
    out = np.zeros_like(x)
    params = (ctypes.c_void_p * 2)(x.ctypes.data, out.ctypes.data)
    shape = (ctypes.c_int64 * 1)(x.size)
    rc = lib.scratch(2, params, (ctypes.c_int * 2)(1, 1), (ctypes.POINTER(ctypes.c_int64) * 2)(shape, shape),
                     (ctypes.c_char_p * 2)(b"float64", b"float64"), None, None)
    assert rc == 0
    np.testing.assert_array_equal(out, 4 * x + 1)
