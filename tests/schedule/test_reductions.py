"""Row reductions: in the default mode (and under fast-math) LLVM vectorises sums as partial sums
and running max/min as IEEE maximum/minimum; with ``schedule={"reassociate": False}`` each sum
keeps the program's order of additions (the compiled result is bit for bit the interpreter's)."""
import re

import numpy as np
import pytest

import hyb

SRC = '''
def row_stats(x):
    n = x.shape[0]
    d = x.shape[1]
    total = output_tensor((n,), x.dtype)
    squares = output_tensor((n,), x.dtype)
    hi = output_tensor((n,), x.dtype)
    lo = output_tensor((n,), x.dtype)
    for i in range(n):
        s = 0.0
        m = -1.0e30
        k = 1.0e30
        for j in range(d):
            s += x[i, j]
            squares[i] += x[i, j] * x[i, j]
            m = max(m, x[i, j])
            k = min(k, x[i, j])
        total[i] = s
        hi[i] = m
        lo[i] = k
    return total, squares, hi, lo
'''

MODES = {"ordered": {"schedule": {"reassociate": False}}, "default": {}, "fastmath": {"fastmath": True}}
KERNELS = {mode: hyb.compile_source(SRC, threads=1, **opts).row_stats for mode, opts in MODES.items()}
SHAPES = [(1, 1), (3, 0), (2, 7), (3, 17), (2, 1000)]


def data(shape, dtype, seed=0):
    rng = np.random.default_rng(seed + shape[0] * 1009 + shape[1])
    return rng.uniform(-3, 3, shape).astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("mode", list(MODES))
def test_row_reductions_against_numpy_and_the_interpreter(mode, shape, dtype):
    x = data(shape, dtype)
    kernel = KERNELS[mode]
    got = kernel(x)
    emulated = kernel.emulate(x)
    with np.errstate(invalid="ignore"):
        want = (x.sum(axis=1), (x * x).sum(axis=1),
                x.max(axis=1, initial=-1e30), x.min(axis=1, initial=1e30))
    rtol = 1e-5 if dtype == "float32" else 1e-13
    for g, e, w in zip(got, emulated, want):
        assert g.dtype == np.dtype(dtype)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * max(1, shape[1]))
        if mode == "ordered":  # the program's order of additions, exactly
            np.testing.assert_array_equal(g, e)
    # max and min are exact in every mode
    np.testing.assert_array_equal(got[2], want[2])
    np.testing.assert_array_equal(got[3], want[3])


def reassociated_reductions(ir: str) -> int:
    """Vector reductions that may add in any order (an in-order `llvm.vector.reduce.fadd`, with no
    fast-math flag, adds the lanes in program order and is not counted)."""
    return len(re.findall(r"call (?:reassoc|fast)[a-z ]* @llvm\.vector\.reduce\.fadd|"
                          r"@llvm\.vector\.reduce\.(?:fmaximum|fminimum|fmax|fmin)", ir))


def test_ordered_mode_keeps_sums_in_order_and_the_default_vectorises_them():
    x = data((4, 1000), "float32")
    ordered = KERNELS["ordered"].compile(x).inspect("llvm-opt")
    assert reassociated_reductions(ordered) == 0
    assert "llvm.maximum" not in ordered
    for mode in ("default", "fastmath"):
        ir = KERNELS[mode].compile(x).inspect("llvm-opt")
        assert reassociated_reductions(ir) > 0, mode
        assert re.search(r"fadd (reassoc|fast) <\d+ x float>", ir), mode
        assert re.search(r"llvm\.vector\.reduce\.fmaximum|llvm\.maximum\.v\d+f32", ir), mode
        assert re.search(r"llvm\.vector\.reduce\.fminimum|llvm\.minimum\.v\d+f32", ir), mode


@pytest.mark.parametrize("mode", list(MODES))
def test_a_nan_in_a_row_reaches_its_max_and_min(mode):
    x = data((3, 41), "float32")
    x[1, 17] = np.nan
    x[2, 40] = np.nan
    total, _, hi, lo = KERNELS[mode](x)
    assert np.isnan(hi[1:]).all() and np.isnan(lo[1:]).all()
    if mode != "fastmath":  # (fast-math lets LLVM assume there is no NaN in arithmetic)
        assert np.isnan(total[1:]).all()
    assert not np.isnan(hi[0]) and hi[0] == x[0].max() and lo[0] == x[0].min()


def test_zeros_of_both_signs():
    """NumPy's max of two equal zeros is the second; IEEE's maximum takes -0.0 below 0.0.  The
    ordered mode follows NumPy; the reassociating modes may give either zero (never another value)."""
    x = np.zeros((2, 33), np.float32)
    x[0, ::2] = -0.0
    x[1, :] = -0.0
    ordered = KERNELS["ordered"](x)
    emulated = KERNELS["ordered"].emulate(x)
    np.testing.assert_array_equal(np.signbit(ordered[2]), np.signbit(emulated[2]))
    np.testing.assert_array_equal(np.signbit(ordered[3]), np.signbit(emulated[3]))
    for mode in ("default", "fastmath"):
        _, _, hi, lo = KERNELS[mode](x)
        assert (hi == 0).all() and (lo == 0).all()
        assert np.signbit(hi[1]) and np.signbit(lo[1])  # all -0.0: -0.0 either way


def test_reassociate_must_be_a_bool():
    with pytest.raises(hyb.HybridArgumentError, match="reassociate"):
        hyb.compile_source(SRC, schedule={"reassociate": "yes"}).row_stats(np.ones((2, 2), np.float32))


def test_only_a_running_max_is_relaxed_by_default():
    """The default mode reassociates sums, and a running max/min (stored into the cell it reads)
    with them; a max/min that accumulates nothing keeps NumPy's answer for two zeros, bit for bit."""
    src = '''
def both(a, b):
    c = output_tensor(a.shape, a.dtype)
    m = output_tensor((1,), a.dtype)
    m[0] = -1.0e30
    for i in range(a.shape[0]):
        c[i] = max(a[i], b[i])
        m[0] = max(m[0], a[i])
    return c, m
'''
    a = np.array([-0.0, 0.0, np.nan, 1.0] * 9, np.float32)
    b = np.array([0.0, -0.0, 1.0, np.nan] * 9, np.float32)
    for opts, relaxed_elementwise in (({}, False), ({"fastmath": True}, True)):
        k = hyb.compile_source(src, **opts).both
        ir = k.compile(a, b).inspect("llvm")
        assert len(re.findall(r'call float @"?llvm\.maximum\.f32', ir)) == (2 if relaxed_elementwise else 1), opts
        c, m = k(a, b)
        if not relaxed_elementwise:
            np.testing.assert_array_equal(np.signbit(c), np.signbit(np.maximum(a, b)))
            np.testing.assert_array_equal(c, np.maximum(a, b))
            assert np.isnan(m[0])
    ordered = hyb.compile_source(src, schedule={"reassociate": False}).both
    assert "llvm.maximum" not in ordered.compile(a, b).inspect("llvm")


def test_row_kernels_with_scalars_run_their_rows_on_threads():
    """A row's sum and the loop that reads it share a scalar: the schedule keeps them in one
    iteration of the row loop, which still runs on threads (each thread its own scalar)."""
    src = '''
def rmsnorm(x, gamma, eps):
    out = output_tensor(x.shape, x.dtype)
    for i in range(x.shape[0]):
        ss = float32(0.0)
        for j in range(x.shape[1]):
            ss += x[i, j] * x[i, j]
        r = 1.0 / sqrt(ss / x.shape[1] + eps)
        for j in range(x.shape[1]):
            out[i, j] = x[i, j] * r * gamma[j]
    return out
'''
    rng = np.random.default_rng(1)
    for shape in ((1, 1), (3, 5), (67, 33), (300, 130)):
        k = hyb.compile_source(src, threads=2, schedule={"min_parallel_work": 0, "reassociate": False}).rmsnorm
        x = rng.standard_normal(shape).astype(np.float32)
        g = rng.standard_normal(shape[1]).astype(np.float32)
        np.testing.assert_array_equal(k(x, g, 1e-5), k.emulate(x, g, 1e-5))
    ck = k.compile(x, g, 1e-5)
    loops = ck.inspect("loops")
    assert loops.startswith("parallel for") and loops.count("\nparallel for") == 0, loops
    # (isl puts the rows' sums and their use in nests of their own, the scalar expanded; the two
    # nests are then fused along the rows, schedule.fuse, which keeps each scalar in its row)
    assert "scalar locals privatised" in ck.inspect("schedule")
