"""Shape-generic kernels: one compile serving every shape of a rank and dtype signature, with
the same results and the same errors as code compiled for each shape."""
import numpy as np
import pytest

import hyb
from hyb.runtime import pipeline
from hyb.runtime.compiler import CompiledKernel
from hyb.runtime.generic import BoundKernel

from benchmarks.many_shapes import RMSNORM

SRC = RMSNORM + '''

def shifted(a, b):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] + b[i + 1]
    return c


def halves(a):
    n = a.shape[0] // 2
    c = output_tensor((n, a.shape[1] + 1), a.dtype)
    for i in range(n):
        for j in range(a.shape[1]):
            c[i, j] = a[2 * i, j] + a[2 * i + 1, j]
        c[i, a.shape[1]] = float(a.shape[1])
    return c


def same_length(a, b):
    assert a.shape[0] == b.shape[0], "a and b differ in length"
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] * b[i]
    return c


def gather(a, idx):
    c = output_tensor(idx.shape, a.dtype)
    for i in range(idx.shape[0]):
        c[i] = a[idx[i]]
    return c


def matmul(a, b):
    c = output_tensor((a.shape[0], b.shape[1]), a.dtype)
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            for k in range(a.shape[1]):
                c[i, j] += a[i, k] * b[k, j]
    return c
'''


def kernels(**options):
    return hyb.compile_source(SRC, "generic.hyb", **options)


def rmsnorm_ref(x, w):
    return (x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-6) * w).astype(x.dtype)


def counting(monkeypatch) -> list:
    """A list that grows by one for every kernel the back end compiles."""
    made = []
    real = pipeline.generate_code

    def counted(*args, **kwargs):
        made.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline, "generate_code", counted)
    return made


def test_forty_batch_sizes_compile_twice(monkeypatch):
    made = counting(monkeypatch)
    k = kernels().rmsnorm
    rng = np.random.default_rng(0)
    w = rng.standard_normal(64).astype(np.float32)
    for rows in list(range(0, 38)) + [97, 256]:
        x = rng.standard_normal((rows, 64)).astype(np.float32)
        np.testing.assert_allclose(k(x, w), rmsnorm_ref(x, w), rtol=2e-5, atol=2e-5)
    # the first shape's own code, then one shape-generic compile for the other 39
    assert len(made) == 2
    assert sum(isinstance(v, CompiledKernel) for v in k._generic.values()) == 1


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_one_generic_compile_serves_every_shape(monkeypatch, dtype):
    made = counting(monkeypatch)
    k = kernels(shapes="generic").matmul
    rng = np.random.default_rng(1)
    for n, m, p in [(0, 3, 4), (1, 1, 1), (7, 5, 3), (13, 17, 9), (3, 0, 4), (31, 37, 41), (64, 130, 70)]:
        a = rng.integers(-5, 5, (n, m)).astype(dtype)
        b = rng.integers(-5, 5, (m, p)).astype(dtype)
        got = k(a, b)
        assert got.shape == (n, p) and got.dtype == a.dtype
        np.testing.assert_allclose(got, a @ b, rtol=1e-5)
        np.testing.assert_array_equal(got, k.emulate(a, b))
    assert len(made) == 1


def test_shape_expressions_of_made_tensors_are_evaluated_per_shape():
    k = kernels(shapes="generic").halves
    for n, m in [(0, 3), (1, 2), (5, 4), (8, 1), (13, 7)]:
        a = np.arange(n * m, dtype=np.float64).reshape(n, m)
        got = k(a)
        want = np.concatenate([a[0:2 * (n // 2):2] + a[1:2 * (n // 2):2], np.full((n // 2, 1), float(m))], axis=1)
        np.testing.assert_array_equal(got, want)
    assert isinstance(k.compile(a), BoundKernel)


def error_of(kernel, *args):
    with pytest.raises(hyb.HybridError) as e:
        kernel(*args)
    return type(e.value), str(e.value)


def test_a_bounds_proof_that_fails_for_a_shape_gives_the_error_of_that_shapes_compile():
    generic, specialised = kernels(shapes="generic").shifted, kernels(shapes="specialise").shifted
    a, good, short = np.ones(5), np.ones(6), np.ones(5)
    np.testing.assert_array_equal(generic(a, good), a + 1)
    got = error_of(generic, a, short)
    assert got == error_of(specialised, a, short)
    assert got[0] is hyb.HybridIndexError and "`b` (shape (5,)) is indexed out of bounds" in got[1]
    assert got[1].startswith("generic.hyb:17:23:")  # the access `b[i + 1]`
    np.testing.assert_array_equal(generic(np.ones(2), np.ones(4)), np.full(2, 2.0))  # and it still runs


def test_a_shape_assertion_fails_as_in_a_compile_for_the_shape():
    generic, specialised = kernels(shapes="generic").same_length, kernels(shapes="specialise").same_length
    np.testing.assert_array_equal(generic(np.ones(3), np.ones(3)), np.ones(3))
    got = error_of(generic, np.ones(3), np.ones(4))
    assert got == error_of(specialised, np.ones(3), np.ones(4))
    assert got[0] is hyb.HybridAssertionError and "a and b differ in length" in got[1]


def test_a_run_time_check_names_the_shape_of_the_call():
    k = kernels(shapes="generic").gather
    a = np.arange(4.0)
    np.testing.assert_array_equal(k(a, np.array([3, 0, 2])), [3.0, 0.0, 2.0])
    kind, text = error_of(k, np.arange(6.0), np.array([1, 6]))
    assert kind is hyb.HybridIndexError
    assert "shape (6,)" in text and "index 6" in text, text
    assert (kind, text) == error_of(kernels(shapes="specialise").gather, np.arange(6.0), np.array([1, 6]))


def test_inspect_says_which_code_runs():
    k = kernels().rmsnorm
    w = np.ones(8, np.float32)
    first = k.compile(np.ones((3, 8), np.float32), w)
    assert "\nshapes: compiled for this shape (the first of its ranks" in first.inspect("schedule")
    k(np.ones((4, 8), np.float32), w)
    other = k.compile(np.ones((5, 8), np.float32), w)
    text = other.inspect("schedule")
    assert "\nshapes: shape-generic code" in text, text
    assert "small sizes kept constant: x.shape[1] = 8, w.shape[0] = 8), run here with hs_0_0 = 5" in text, text
    assert "[hs_0_0] ->" in other.inspect("isl")


def test_small_sizes_shared_by_the_shapes_stay_constant_until_a_shape_differs(monkeypatch):
    made = counting(monkeypatch)
    k = kernels().matmul
    rng = np.random.default_rng(4)
    shapes = [(5, 3, 40), (9, 3, 33), (2, 3, 17), (30, 3, 1), (4, 7, 5), (6, 20, 8), (1, 1, 1)]
    for n, m, p in shapes:
        a, b = rng.standard_normal((n, m)), rng.standard_normal((m, p))
        np.testing.assert_allclose(k(a, b), a @ b, rtol=1e-12, atol=1e-12)
        if (n, m, p) == (2, 3, 17):
            assert "[hs_0_0, hs_1_1] ->" in k.compile(a, b).inspect("isl")  # m = 3 kept
    # the first shape, shape-generic code with m = 3, then code for every shape once m is 7
    assert len(made) == 3
    assert "[hs_0_0, hs_0_1, hs_1_0, hs_1_1] ->" in k.compile(a, b).inspect("isl")


def test_a_kernel_the_generic_compile_refuses_compiles_each_shape():
    src = '''
def table(a):
    c = output_tensor((a.shape[0] * a.shape[0],), a.dtype)
    for i in range(a.shape[0]):
        for j in range(a.shape[0]):
            c[i * a.shape[0] + j] = a[i] * a[j]
    return c
'''
    k = hyb.compile_source(src, shapes="generic").table
    for n in (1, 3, 4):
        a = np.arange(1.0, n + 1)
        np.testing.assert_array_equal(k(a), np.outer(a, a).ravel())
    (reason,) = k._generic.values()
    assert isinstance(reason, str) and reason.startswith("no shape-generic code")
    assert "\nshapes: compiled for this shape (no shape-generic" in k.compile(np.ones(2)).inspect("schedule")


def test_the_options_are_checked():
    with pytest.raises(hyb.HybridArgumentError, match="unknown shapes='sometimes'"):
        hyb.compile_source(SRC, shapes="sometimes")


def test_gradients_are_shape_generic_too(monkeypatch):
    k = kernels().rmsnorm
    g = k.grad()
    rng = np.random.default_rng(3)
    w = rng.standard_normal(16)
    made = counting(monkeypatch)
    for rows in (1, 2, 5, 9, 12):
        x = rng.standard_normal((rows, 16))
        dy = rng.standard_normal((rows, 16))
        dx, dw = g(x, w, dy)
        ex, ew = g.emulate(x, w, dy)
        np.testing.assert_allclose(dx, ex, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(dw, ew, rtol=1e-10, atol=1e-12)
    assert len(made) == 2


CACHED = '''
import numpy as np, hyb
from hyb.runtime import cache, pipeline
cache.code_fingerprint = lambda: "fixed"
made = []
real = pipeline.generate_code
pipeline.generate_code = lambda *a, **k: (made.append(1), real(*a, **k))[1]
k = hyb.compile_source({src!r}, "generic.hyb").rmsnorm
w = np.ones(24)
for rows in (3, 5, 8):
    x = np.full((rows, 24), 2.0)
    assert np.allclose(k(x, w), 1.0, atol=1e-5)
print(len(made))
'''


def test_the_disk_cache_keeps_the_shape_generic_code(tmp_path):
    import os
    import subprocess
    import sys

    env = dict(os.environ, HYB_CACHE_DIR=str(tmp_path))
    script = CACHED.format(src=SRC)

    def compiles():
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == 0, r.stderr
        return int(r.stdout.strip())

    assert compiles() == 2  # the first shape's code and the shape-generic code
    assert compiles() == 0  # both from the disk: the generic entry serves shapes 5 and 8


THREADED = '''
def scale(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            c[i, j] = a[i, j] * 2.0
    return c


def sweeps(a, steps):
    b = output_tensor(a.shape, a.dtype)
    for t in range(steps.shape[0]):
        for i in range(1, a.shape[0] - 1):
            b[i] = (a[i - 1] + a[i] + a[i + 1]) / 3.0
        for i in range(1, a.shape[0] - 1):
            a[i] = b[i]
    return a, b
'''


def test_threads_only_where_a_shapes_work_per_start_repays_them():
    mod = hyb.compile_source(THREADED, shapes="generic", threads=2, schedule={"min_parallel_work": 4096})
    small, large = np.ones((8, 8)), np.ones((256, 256))
    np.testing.assert_array_equal(mod.scale(small), small * 2)
    np.testing.assert_array_equal(mod.scale(large), large * 2)
    assert mod.scale.compile(small).binding.threads == 1
    assert mod.scale.compile(large).binding.threads == 2
    # a loop inside a time loop is weighed by its work each time it starts, not by all its steps
    a = np.arange(3000.0)
    many_steps = np.zeros(400)
    assert "parallel" in mod.sweeps.compile(a, many_steps).inspect("loops")
    assert mod.sweeps.compile(a, many_steps).binding.threads == 1
    got = mod.sweeps(a.copy(), many_steps)
    want = mod.sweeps.emulate(a.copy(), many_steps)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    assert mod.sweeps.compile(np.arange(40000.0), np.zeros(2)).binding.threads == 2


def test_zeros_are_skipped_at_the_sizes_where_no_one_sees_them():
    src = '''
def fill(a, b):
    c = output_tensor(b.shape, b.dtype)
    for r in range(a.shape[0]):
        for i in range(b.shape[0]):
            c[i] = b[i] * 2.0
    return c
'''
    k = hyb.compile_source(src, shapes="generic").fill
    b = np.arange(1.0, 6.0)
    np.testing.assert_array_equal(k(np.ones(3), b), b * 2)
    assert [a.__name__ for a in k.compile(np.ones(3), b).binding.allocators] == ["empty"]
    # no row: nothing writes `c`, which must come back as zeros
    for _ in range(3):
        np.testing.assert_array_equal(k(np.ones(0), b), np.zeros(5))
    assert [a.__name__ for a in k.compile(np.ones(0), b).binding.allocators] == ["zeros"]


def test_loops_too_costly_to_check_for_all_sizes_are_checked_at_sample_sizes(monkeypatch):
    from hyb.schedule import loops, verify

    monkeypatch.setattr(verify, "PARAMETRIC_OPERATIONS", 1)  # every check of all sizes goes past it
    src = '''
def prefix(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i]
    for i in range(1, a.shape[0]):
        c[i] = c[i - 1] + a[i]
    return c
'''
    k = hyb.compile_source(src, shapes="generic").prefix
    for n in (0, 1, 2, 9, 100):
        a = np.arange(float(n))
        np.testing.assert_array_equal(k(a), np.cumsum(a))
    middle = k.compile(np.ones(4)).middle
    # every loop on threads: the one that carries c[i - 1] -> c[i] must not be
    wrong = loops.with_flags(middle.nest, {id(x): {"parallel": True} for x in loops.loops(middle.nest.body)})
    broken = verify.violations(wrong, middle.deps.all, None, middle.poly.context())
    assert broken is not None and not broken.is_empty()
    assert verify.violations(middle.nest, middle.deps.all, None, middle.poly.context()).is_empty()


def test_a_strided_parallel_loop_that_runs_no_iteration_at_a_shape():
    """range(2, n - 2, 2) at n = 4 runs nothing; the threads' share of it was once counted as one
    iteration (-1 // 2 rounded towards zero), which wrote y[2] (found by the fuzzer)."""
    src = '''
def k(x):
    y = output_tensor(x.shape, "float64")
    for i in range(2, x.shape[0] - 2, 2):
        y[i] = 1.0
    return y
'''
    k = hyb.compile_source(src, shapes="generic", threads=2).k
    for n in (4, 9, 3, 5, 4, 0):
        x = np.zeros(n, np.float32)
        np.testing.assert_array_equal(k(x), k.emulate(x))


def test_compile_generic_says_why_a_kernel_has_no_shape_generic_code():
    src = '''
def table(a):
    c = output_tensor((a.shape[0] * a.shape[0],), a.dtype)
    for i in range(a.shape[0]):
        for j in range(a.shape[0]):
            c[i * a.shape[0] + j] = a[i] * a[j]
    return c
'''
    k = hyb.compile_source(src, "table.hyb").table
    with pytest.raises(hyb.HybridUnsupportedError) as e:
        k.compile_generic(np.ones(20))  # (a size over 16: run-time)
    assert str(e.value).startswith("table.hyb:2:5: error: `table`: no shape-generic code")
    np.testing.assert_array_equal(k(np.ones(20)), np.ones(400))  # calls still compile the shape
