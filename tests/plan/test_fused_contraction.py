"""A contraction whose loop nest isl would fuse with the nests around it (the nest that
initialises its cells, the epilogue that reads them: bias, activation, scale, residual, cast):
the plan keeps the nests apart where the fused schedule leaves the contraction without the register
block that tiling gives it apart (its reduction loop alone innermost, striding through one
operand), and every spelling computes what NumPy and the interpreter compute."""
import numpy as np
import pytest

import hyb
from hyb.schedule import blocking, deps, extract, plan
from hyb.schedule.options import parse_options
from hyb.target import host_cpu

SRC = '''
def linear_relu(x, w, b):
    t = allocate((x.shape[0], w.shape[1]), x.dtype)
    y = output_tensor((x.shape[0], w.shape[1]), x.dtype)
    for i in range(x.shape[0]):
        for j in range(w.shape[1]):
            for k in range(x.shape[1]):
                t[i, j] += x[i, k] * w[k, j]
    for i in range(x.shape[0]):
        for j in range(w.shape[1]):
            y[i, j] = max(t[i, j] + b[j], 0.0)
    return y

def in_place(x, w, b):
    y = output_tensor((x.shape[0], w.shape[1]), x.dtype)
    for i in range(x.shape[0]):
        for j in range(w.shape[1]):
            for k in range(x.shape[1]):
                y[i, j] += x[i, k] * w[k, j]
    for i in range(x.shape[0]):
        for j in range(w.shape[1]):
            y[i, j] = max(y[i, j] + b[j], 0.0)
    return y

def bias_first(x, w, b):
    t = allocate((x.shape[0], w.shape[1]), x.dtype)
    y = output_tensor((x.shape[0], w.shape[1]), x.dtype)
    for i in range(x.shape[0]):
        for j in range(w.shape[1]):
            t[i, j] = b[j]
            for k in range(x.shape[1]):
                t[i, j] += x[i, k] * w[k, j]
    for i in range(x.shape[0]):
        for j in range(w.shape[1]):
            y[i, j] = max(t[i, j], 0.0)
    return y

def scalar_sum(x, w, b):
    y = output_tensor((x.shape[0], w.shape[1]), x.dtype)
    for i in range(x.shape[0]):
        for j in range(w.shape[1]):
            acc = b[j]
            for k in range(x.shape[1]):
                acc += x[i, k] * w[k, j]
            y[i, j] = max(acc, 0.0)
    return y

def same_nest(x, w, b):
    y = output_tensor((x.shape[0], w.shape[1]), x.dtype)
    for i in range(x.shape[0]):
        for j in range(w.shape[1]):
            for k in range(x.shape[1]):
                y[i, j] = y[i, j] + x[i, k] * w[k, j]
            y[i, j] = max(y[i, j] + b[j], 0.0)
    return y

def scaled_residual(x, w, b):
    t = allocate((x.shape[0], w.shape[1]), x.dtype)
    y = output_tensor((x.shape[0], w.shape[1]), "float64")
    for i in range(x.shape[0]):
        for j in range(w.shape[1]):
            for k in range(x.shape[1]):
                t[i, j] += x[i, k] * w[k, j]
    for i in range(x.shape[0]):
        for j in range(w.shape[1]):
            y[i, j] = float64(0.5 * t[i, j] + x[i, j % x.shape[1]] + b[j])
    return y

def matmul(x, w, b):
    y = output_tensor((x.shape[0], w.shape[1]), x.dtype)
    for i in range(x.shape[0]):
        for j in range(w.shape[1]):
            for k in range(x.shape[1]):
                y[i, j] += x[i, k] * w[k, j]
    return y

def two_elementwise(x, w, b):
    t = allocate((x.shape[0], x.shape[1]), x.dtype)
    y = output_tensor((x.shape[0], x.shape[1]), x.dtype)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            t[i, j] = x[i, j] * 2.0
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            y[i, j] = max(t[i, j] + b[j % b.shape[0]], 0.0)
    return y
'''

EPILOGUES = ["linear_relu", "in_place", "bias_first", "scalar_sum", "same_nest", "scaled_residual"]

# (m, k, n): one element, one row, shorter than a vector, not multiples of any block or tile
# (primes), and enough for the blocks the machine model makes (MIN_BLOCK_WORK instances)
SIZES = [(1, 1, 1), (1, 17, 33), (7, 3, 70), (13, 29, 131), (37, 101, 67), (64, 80, 96)]


def reference(name, x, w, b):
    t = x.astype(np.float64) @ w.astype(np.float64)
    if name == "matmul":
        return t
    if name == "scaled_residual":
        return 0.5 * t + x[:, np.arange(w.shape[1]) % x.shape[1]] + b
    return np.maximum(t + b, 0.0)


def data(m, k, n, dtype="float32", seed=0):
    g = np.random.default_rng(seed + m * 1000 + k * 10 + n)
    return (g.standard_normal((m, k)).astype(dtype), g.standard_normal((k, n)).astype(dtype),
            g.standard_normal(n).astype(dtype))


@pytest.fixture(scope="module")
def mod():
    return hyb.compile_source(SRC, "fused_contraction.hyb", threads=1)


@pytest.fixture(scope="module")
def blocked():
    # blocks of the user's shape are made at any size: the small sizes run blocked code too
    return hyb.compile_source(SRC, "fused_contraction.hyb", threads=1, schedule={"register": (4, 16)})


@pytest.mark.parametrize("name", EPILOGUES + ["matmul"])
def test_each_spelling_is_right(mod, blocked, name):
    for m, k, n in SIZES:
        x, w, b = data(m, k, n)
        want = reference(name, x, w, b)
        tol = dict(rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max(initial=0.0))))
        for kernels in (mod, blocked):
            got = kernels.kernels[name](x, w, b)
            assert got.shape == (m, n)
            np.testing.assert_allclose(got, want, **tol)
        if m * k * n <= 13 * 29 * 131:
            np.testing.assert_allclose(mod.kernels[name].emulate(x, w, b), want, **tol)


@pytest.mark.parametrize("name", EPILOGUES)
def test_the_contraction_keeps_its_register_block(name):
    # (a kernel's first shape: code for that shape alone, where isl fuses the nests around the
    # reduction loop)
    # isl's fused schedule has the reduction loop alone in a band below the rows and columns: it
    # is merged into their band (blocking.merge_reduction), the statements before and after it
    # run inside the register tile, and the whole kernel is one loop nest
    x, w, b = data(64, 80, 96)
    kernel = hyb.compile_source(SRC, "fused_contraction.hyb", threads=1).kernels[name]
    ck = kernel.compile(x, w, b)
    text = ck.inspect("schedule")
    assert "its reduction loop merged into the band around it" in text and "kept apart" not in text, text
    assert 'mark: "register block ' in text and "accumulated in registers" in text, text
    assert ck.inspect("loops").count("\nparallel for") == 0, ck.inspect("loops")
    # with the merge off, the plan keeps the nests apart instead: blocked either way
    real = blocking.merge_reduction
    try:
        blocking.merge_reduction = lambda shaper, node: node
        apart = hyb.compile_source(SRC.replace(f"def {name}(", f"def {name}_apart("), "fused_contraction.hyb",
                                   threads=1).kernels[f"{name}_apart"].compile(x, w, b).inspect("schedule")
    finally:
        blocking.merge_reduction = real
    assert "loop nests kept apart: fused, contraction(s)" in apart and "would have no register block" in apart, apart
    assert 'mark: "register block ' in apart and "accumulated in registers" in apart, apart


@pytest.mark.parametrize("name", ["linear_relu", "bias_first", "scalar_sum", "scaled_residual"])
def test_the_statements_around_the_reduction_run_once_across_reduction_tiles(name):
    # the reduction in tiles of 16 steps (its last one short): the statements before it run at
    # its first step, those after it at its last, whatever the tiles
    kernels = hyb.compile_source(SRC, "fused_contraction.hyb", threads=1,
                                 schedule={"register": (4, 16), "cache_tile": (8, 32, 16)}).kernels
    for m, k, n in [(9, 37, 33), (13, 16, 64), (4, 1, 16), (1, 100, 5)]:
        x, w, b = data(m, k, n, "float64")
        got = kernels[name](x, w, b)
        np.testing.assert_allclose(got, reference(name, x, w, b), rtol=1e-12, atol=1e-12)
    text = kernels[name].compile(*data(9, 37, 33, "float64")).inspect("schedule")
    assert "merged into the band" in text and "register block 4x16" in text, text


@pytest.mark.parametrize("name", ["linear_relu", "bias_first"])
def test_shape_generic_code_keeps_the_block_too(name):
    # (with the sizes unknown, isl may fuse the epilogue into the contraction's band, after its
    # reduction loop: blocked either way)
    x, w, b = data(64, 80, 96)
    kernel = hyb.compile_source(SRC, "fused_contraction.hyb", threads=1, shapes="generic").kernels[name]
    text = kernel.compile(x, w, b).inspect("schedule")
    assert 'mark: "register block ' in text and "accumulated in registers" in text, text


@pytest.mark.parametrize("name", ["linear_relu", "bias_first"])
def test_blocks_of_the_users_shape_at_a_small_size(name):
    x, w, b = data(7, 3, 70)
    kernel = hyb.compile_source(SRC, "fused_contraction.hyb", threads=1, schedule={"register": (4, 16)}).kernels[name]
    text = kernel.compile(x, w, b).inspect("schedule")
    # (kept apart, or with a reduction this short, fused into the contraction's band after its
    # reduction loop: blocked either way)
    assert 'mark: "register block 4x16' in text and "accumulated in registers" in text, text


def test_float64_and_a_size_of_one_along_each_loop(mod):
    for m, k, n in [(1, 64, 64), (64, 1, 64), (64, 64, 1), (40, 50, 70)]:
        x, w, b = data(m, k, n, "float64")
        got = mod.kernels["linear_relu"](x, w, b)
        np.testing.assert_allclose(got, reference("linear_relu", x, w, b), rtol=1e-12, atol=1e-12)


def test_shape_generic_code():
    kernel = hyb.compile_source(SRC, "fused_contraction.hyb", threads=1, shapes="generic").kernels["bias_first"]
    for m, k, n in [(37, 101, 67), (1, 17, 33), (64, 80, 96)]:
        x, w, b = data(m, k, n)
        want = reference("bias_first", x, w, b)
        np.testing.assert_allclose(kernel(x, w, b), want, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(want).max()))


def test_nothing_to_keep_apart():
    # a lone contraction, and nests with no contraction, are planned as before
    x, w, b = data(64, 80, 96)
    mod = hyb.compile_source(SRC, "fused_contraction.hyb", threads=1)
    for name in ("matmul", "two_elementwise"):
        text = mod.kernels[name].compile(x, w, b).inspect("schedule")
        assert "kept apart" not in text, text
    # the user's fuse=False keeps them apart without the comparison
    apart = hyb.compile_source(SRC, "fused_contraction.hyb", threads=1, schedule={"fuse": False})
    text = apart.kernels["linear_relu"].compile(x, w, b).inspect("schedule")
    assert "kept apart" not in text and "accumulated in registers" in text, text


def test_the_plan_records_the_decision_and_the_block():
    x, w, b = data(64, 80, 96)
    typed = hyb.compile_source(SRC).kernels["linear_relu"].typed(x, w, b)
    p = extract.extract(typed)
    made = plan.plan(p, deps.compute(p), parse_options(None).resolve(host_cpu(1)))
    assert any(d.startswith("contraction S0: its reduction loop merged into the band around it")
               for d in made.decisions), made.decisions
    assert made.blocks and not any("kept apart" in d for d in made.decisions), made.decisions
    fused = plan.plan(p, deps.compute(p), parse_options({"register": False}).resolve(host_cpu(1)))
    assert not fused.blocks and not any("kept apart" in d for d in fused.decisions), fused.decisions
