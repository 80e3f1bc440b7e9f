"""Every file in examples/ runs: its kernels compiled == emulated == NumPy, the quickstart
script exits cleanly, and a kernel gives the same result from a .hyb file and as an
@hyb.hybrid function.  Also: every inspect() stage gives meaningful text."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import hyb

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
DTYPES = ["float32", "float64", "int32", "int64"]


def rand(rng, shape, dtype):
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(-9, 10, size=shape).astype(dtype)


def check_three_ways(kernel, args, want):
    got = kernel(*[a.copy() for a in args])
    emu = kernel.emulate(*[a.copy() for a in args])
    want = np.asarray(want)
    for what, r in (("compiled", got), ("emulated", emu)):
        assert r.dtype == want.dtype and r.shape == want.shape, what
        if want.dtype.kind == "f":
            tol = 2e-5 if want.dtype == np.float32 else 1e-12
            np.testing.assert_allclose(r, want, rtol=tol, atol=tol * max(1.0, float(np.abs(want).max(initial=0))),
                                       err_msg=what)
        else:
            np.testing.assert_array_equal(r, want, err_msg=what)
    # the compiled kernel reassociates sums: within what a different order of additions explains
    tol = 2e-6 if want.dtype == np.float32 else 1e-14
    scale = max(1.0, float(np.abs(want).max(initial=0))) if want.dtype.kind == "f" else 0.0
    np.testing.assert_allclose(got, emu, rtol=tol, atol=tol * scale)
    return got


# ------------------------------------------------------------------ the example files
def test_every_example_file_is_covered():
    hyb_files = {p.name: sorted(hyb.load(p).kernels) for p in EXAMPLES.glob("*.hyb")}
    assert hyb_files == {"add.hyb": ["add"], "matmul.hyb": ["matmul"],
                         "seeds.hyb": ["add", "square", "square_grad"]}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (7, 13), (0, 4), (33, 17)])
def test_add_example(shape, dtype):
    add = hyb.load(EXAMPLES / "add.hyb").add
    rng = np.random.default_rng(0)
    a, b = rand(rng, shape, dtype), rand(rng, shape, dtype)
    check_three_ways(add, [a, b], a + b)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("nmp", [(1, 1, 1), (4, 5, 3), (7, 13, 9), (17, 33, 5), (2, 0, 3)])
def test_matmul_example(nmp, dtype):
    matmul = hyb.load(EXAMPLES / "matmul.hyb").matmul
    n, m, p = nmp
    rng = np.random.default_rng(1)
    a, b = rand(rng, (n, m), dtype), rand(rng, (m, p), dtype)
    check_three_ways(matmul, [a, b], a @ b)


SEEDS = hyb.load(EXAMPLES / "seeds.hyb")


def test_seed_add_doc_values():
    x0 = np.array([[0.0, 0.0], [1.0, 1.0]]).astype(np.float32)
    x1 = np.array([[2.0, 2.0], [3.0, 3.0]]).astype(np.float32)
    out = check_three_ways(SEEDS.add, [x0, x1], np.array([[2.0, 2.0], [4.0, 4.0]], np.float32))
    assert out.dtype == np.float32


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 3, 33])
def test_seed_square_gives_zeros(n, dtype):
    # The documented kernel squares the output's own (zero) initial values, not x.
    x = rand(np.random.default_rng(n), (n,), dtype) + 1
    square = hyb.load(EXAMPLES / "seeds.hyb").square  # a new signature: it warns when compiled
    with pytest.warns(hyb.HybridWarning, match="`y` is read before anything writes it"):
        out = check_three_ways(square, [x], np.zeros(n, dtype))
    assert not out.any()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [0, 1, 3, 33])
def test_seed_square_grad(n, dtype):
    rng = np.random.default_rng(n)
    x, dout = rand(rng, (n,), dtype), rand(rng, (n,), dtype)
    check_three_ways(SEEDS.square_grad, [x, dout], 2 * x * dout)


def test_seed_square_grad_doc_values():
    x = np.array([1.0, 4.0, 9.0]).astype(np.float32)
    sens = np.array([1.0, 1.0, 1.0]).astype(np.float32)
    check_three_ways(SEEDS.square_grad, [x, sens], np.array([2.0, 8.0, 18.0], np.float32))


def test_quickstart_script_runs():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, str(EXAMPLES / "quickstart.py")], cwd=str(ROOT), env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("max difference:") == 2
    for line in r.stdout.splitlines():
        if line.startswith("max difference:"):
            assert float(line.split(":")[1]) < 1e-5


def test_gradients_script_runs():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, str(EXAMPLES / "gradients.py")], cwd=str(ROOT), env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "def matmul_grad(a, b, dout):" in r.stdout and "# tape: " in r.stdout
    assert r.stdout.rstrip().endswith("gradients match NumPy")


# ------------------------------------------------------------------ .hyb file == @hyb.hybrid
@hyb.hybrid
def add(a, b):
    c = output_tensor(a.shape, a.dtype)  # noqa: F821
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            c[i, j] = a[i, j] + b[i, j]
    return c


@hyb.hybrid
def matmul(a, b):
    c = output_tensor((a.shape[0], b.shape[1]), a.dtype)  # noqa: F821
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            for k in range(a.shape[1]):
                c[i, j] += a[i, k] * b[k, j]
    return c


@hyb.hybrid
def square_grad(x, dout):
    dx = output_tensor(x.shape, x.dtype)  # noqa: F821
    for i0 in range(x.shape[0]):
        dx[i0] = 2.0 * x[i0]
    for i0 in range(x.shape[0]):
        dx[i0] = dx[i0] * dout[i0]
    return dx


def matmul_args(rng, dtype):
    return [rand(rng, (7, 13), dtype), rand(rng, (13, 5), dtype)]


PAIRS = [
    ("add", add, hyb.load(EXAMPLES / "add.hyb").add, lambda rng, dt: [rand(rng, (5, 9), dt) for _ in range(2)]),
    ("matmul", matmul, hyb.load(EXAMPLES / "matmul.hyb").matmul, matmul_args),
    ("square_grad", square_grad, SEEDS.square_grad, lambda rng, dt: [rand(rng, (11,), dt) for _ in range(2)]),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name,fn_kernel,file_kernel,make", PAIRS, ids=[p[0] for p in PAIRS])
def test_file_and_decorator_kernels_agree(name, fn_kernel, file_kernel, make, dtype):
    args = make(np.random.default_rng(7), dtype)
    assert fn_kernel.name == file_kernel.name == name
    assert fn_kernel.params == file_kernel.params
    for run_fn, run_file in ((fn_kernel, file_kernel), (fn_kernel.emulate, file_kernel.emulate)):
        a, b = run_fn(*args), run_file(*args)
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    # the code each compiles for this shape (the kernels' own calls may have moved them on to
    # shape-generic code, each at its own time)
    fn_code, file_code = (type(k)(k.kdef, k.module, shapes="specialise") for k in (fn_kernel, file_kernel))
    assert fn_code.compile(*args).inspect("llvm-opt").split("define", 1)[1] == \
        file_code.compile(*args).inspect("llvm-opt").split("define", 1)[1]


# ------------------------------------------------------------------ inspect
@pytest.fixture(scope="module")
def compiled_matmul():
    a = np.ones((3, 4), np.float32)
    b = np.ones((4, 5), np.float32)
    return hyb.load(EXAMPLES / "matmul.hyb").matmul.compile(a, b)


@pytest.fixture(scope="module")
def compiled_square_grad():
    x = np.ones(6)
    return hyb.load(EXAMPLES / "seeds.hyb").square_grad.compile(x, x)


def test_inspect_ast(compiled_matmul):
    text = compiled_matmul.inspect("ast")
    assert "def matmul" in text and "for " in text and "float32" in text
    assert "c[i, j]" in text


def test_inspect_isl(compiled_matmul):
    text = compiled_matmul.inspect("isl")
    assert "domain" in text and "S0[" in text
    for tensor in ("a[", "b[", "c["):
        assert tensor in text
    assert "h_k <= 3" in text  # the k loop's bound, from a.shape[1] = 4


def test_inspect_deps(compiled_matmul, compiled_square_grad):
    text = compiled_matmul.inspect("deps")
    assert "flow" in text and "anti" in text and "output" in text
    assert "S0[" in text
    text = compiled_square_grad.inspect("deps")
    flow = text.split("anti")[0]
    assert "S0[" in flow and "S1[" in flow  # dx written by the first loop, read by the second


def test_inspect_schedule(compiled_matmul):
    assert "S0[" in compiled_matmul.inspect("schedule")


def test_inspect_loops(compiled_matmul, compiled_square_grad):
    text = compiled_matmul.inspect("loops")
    assert text.count("for (") >= 3 and "S0(" in text
    # the scheduler fuses square_grad's two loops into one (too little work for threads)
    text = compiled_square_grad.inspect("loops")
    assert text.count("for (") == 1 and text.startswith("for (")
    assert "too little work" in compiled_square_grad.inspect("schedule")
    assert text.index("S0(") < text.index("S1(")
    original = hyb.load(EXAMPLES / "seeds.hyb", schedule="original").square_grad
    x = np.arange(6, dtype=np.float32)
    text = original.compile(x, x).inspect("loops")
    assert text.count("for (") == 2 and "parallel" not in text


def test_inspect_llvm(compiled_matmul):
    text = compiled_matmul.inspect("llvm")
    assert "define i32 @" in text and "hyb_matmul" in text
    # (a contraction's update: reassociable, and its product may fuse into the addition)
    assert re.search(r"fmul (reassoc )?(contract )?float", text) and "noalias" in text


def test_inspect_llvm_opt(compiled_matmul):
    text = compiled_matmul.inspect("llvm-opt")
    assert "define" in text and "hyb_matmul" in text


def test_inspect_asm(compiled_matmul):
    text = compiled_matmul.inspect("asm")
    assert "hyb_matmul" in text and "ret" in text


def test_inspect_unknown_stage(compiled_matmul):
    with pytest.raises(hyb.HybridError):
        compiled_matmul.inspect("nonsense")
