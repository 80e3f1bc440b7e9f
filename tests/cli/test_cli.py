"""The `hyb` command, driven as a user would: subprocesses, exit codes, messages, files."""
import ctypes
import io
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import hyb
from hyb.dsl import highlight
from hyb.cli.progress import Progress

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

AXPY = '''\
def axpy(alpha, x, y):
    """alpha * x + y"""
    c = output_tensor(x.shape, x.dtype)
    for i in range(x.shape[0]):
        c[i] = alpha * x[i] + y[i]
    return c
'''

# A scalar parameter, a temporary, a subscript read from a tensor (checked at run time) and an
# input written in place and returned.
MIX = '''\
def mix(alpha, x, idx, acc):
    t = allocate(x.shape, x.dtype)
    for i in range(x.shape[0]):
        t[x.shape[0] - 1 - i] = alpha * x[x.shape[0] - 1 - i]
    for i in range(x.shape[0]):
        acc[idx[i]] += t[i]
    out = output_tensor(x.shape, x.dtype)
    for i in range(x.shape[0]):
        out[i] = t[i] + 1.0
    return out, acc
'''

TWO = '''\
SCALE = 2.0


def double(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] * SCALE
    return c


def cube(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] * a[i] * a[i] * SCALE
    return c


def whole(a):
    c = output_tensor(a.shape, a.dtype)
    for idx in grid(a.shape):
        c[idx] = exp(a[idx])
    return c
'''


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """Environment of the subprocesses: a cache directory of this module's own, no colour hints."""
    e = dict(os.environ)
    e["HYB_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    e.pop("NO_COLOR", None)
    return e


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("kernels")
    for name, text in (("axpy", AXPY), ("mix", MIX), ("two", TWO)):
        (d / f"{name}.hyb").write_text(text)
    return d


def hyb_cmd(*args, env=None, cwd=None, console=False):
    cmd = ["hyb"] if console else [sys.executable, "-m", "hyb.cli"]
    return subprocess.run([*cmd, *map(str, args)], capture_output=True, text=True, cwd=cwd, env=env, timeout=120)


def run(*args, cwd=None):
    return hyb_cmd(*args, cwd=cwd)


@pytest.fixture
def cli(capsys, monkeypatch, env):
    """The command run in this process: the same code as `hyb ...` without the start-up time of a
    new Python (a second or so here), for the many small cases of mistakes on the command line."""
    from hyb.cli import main

    monkeypatch.setenv("HYB_CACHE_DIR", env["HYB_CACHE_DIR"])

    def call(*args):
        try:
            code = main([str(a) for a in args])
        except SystemExit as e:
            code = e.code
        out = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, out.out, out.err)
    return call


# ------------------------------------------------------------------ demo, check, help, bench

def test_demo():
    r = run("demo")
    assert r.returncode == 0, r.stderr
    assert "hyb result" in r.stdout and "NumPy a @ b" in r.stdout
    assert r.stdout.rstrip().endswith("OK")
    assert "\x1b[" not in r.stdout  # piped: no colour


def test_check_good_and_bad(tmp_path):
    good = tmp_path / "good.hyb"
    good.write_text("def add(a, b):\n    c = output_tensor(a.shape, a.dtype)\n"
                    "    for i in range(a.shape[0]):\n        c[i] = a[i] + b[i]\n    return c\n")
    r = run("check", good)
    assert r.returncode == 0
    assert "1 kernel(s) checked without a signature: add" in r.stdout
    bad = tmp_path / "bad.hyb"
    bad.write_text("def k(a):\n    while True:\n        pass\n")
    r = run("check", bad)
    assert r.returncode == 1
    assert f"{bad}:2:5: error: `while` loops are not supported" in r.stderr
    assert "^^^^^" in r.stderr
    r = run("check", tmp_path / "missing.hyb")
    assert r.returncode == 1 and "cannot read" in r.stderr
    r = run("check", good, bad)  # one bad file among good ones: still status 1, the good one reported
    assert r.returncode == 1 and "add" in r.stdout and "`while`" in r.stderr


def test_check_syntax_error_has_a_caret(tmp_path):
    bad = tmp_path / "syntax.hyb"
    bad.write_text("def k(a):\n    c = output_tensor(a.shape, a.dtype\n    return c\n")
    r = run("check", bad)
    assert r.returncode == 1
    first = r.stderr.splitlines()[0]
    assert first.startswith(f"{bad}:") and ": error: " in first
    assert "|" in r.stderr and "^" in r.stderr


def test_check_with_args_compiles_and_reports_bounds(env, tmp_path):
    r = hyb_cmd("check", EXAMPLES / "matmul.hyb", "--args", "a=float32[8,4] b=float32[4,6]", env=env)
    assert r.returncode == 0, r.stderr
    assert "kernel `matmul` checked and compiled for a=float32[8,4] b=float32[4,6]" in r.stdout
    r = hyb_cmd("check", EXAMPLES / "matmul.hyb", "--args", "a=float32[8,4] b=float32[3,6]", env=env)
    assert r.returncode == 1
    assert "matmul.hyb:9:38: error: `b` (shape (3, 6)) is indexed out of bounds" in r.stderr
    assert "^^^^^^^" in r.stderr
    # A warning is shown in compiler format; --werror makes it fail.
    warn = tmp_path / "warn.hyb"
    warn.write_text("def w(a):\n    c = output_tensor(a.shape, a.dtype)\n    for i in range(a.shape[0]):\n"
                    "        c[i] = c[i] * a[i]\n    return c\n")
    r = hyb_cmd("check", warn, "-a", "float32[4]", env=env)
    assert r.returncode == 0 and f"{warn}:4:16: warning: `c` is read before anything writes it" in r.stderr
    r = hyb_cmd("check", warn, "-a", "float32[4]", "--werror", env=env)
    assert r.returncode == 1 and "--werror" in r.stderr


def test_no_command_prints_help():
    r = run()
    assert r.returncode == 2
    assert "demo" in r.stdout and "compile" in r.stdout and "aot" in r.stdout


def test_every_command_has_help_with_an_example(cli):
    for command in ("check", "compile", "run", "grad", "aot", "demo"):
        r = cli(command, "--help")
        assert r.returncode == 0
        assert "example:" in r.stdout and f"hyb {command}" in r.stdout.split("example:")[1], command
    r = run("aot", "--help")
    assert r.returncode == 0 and "7 index out of bounds at run time" in r.stdout


def test_bench_lists_the_suite():
    r = hyb_cmd("bench", "--list", console=True)
    assert r.returncode == 0, r.stderr
    assert "gemm" in r.stdout and "floyd-warshall" in r.stdout
    r = hyb_cmd("bench", "--help", console=True)
    assert r.returncode == 0 and "--kernels" in r.stdout and "example:\n  hyb bench" in r.stdout


def test_unknown_argument_is_rejected():
    r = run("demo", "--bogus")
    assert r.returncode == 2 and "unrecognized arguments: --bogus" in r.stderr


# ------------------------------------------------------------------ compile

def test_compile_one_stage_to_stdout(env):
    r = hyb_cmd("compile", EXAMPLES / "matmul.hyb", "--args", "a=float32[64,32] b=float32[32,48]",
                "--emit", "loops", env=env, console=True)
    assert r.returncode == 0, r.stderr
    assert "parallel for (c0 = 0;" in r.stdout and "c[i, j] += a[i, k] * b[k, j]" in r.stdout
    assert "==>" not in r.stdout and "\x1b[" not in r.stdout


def test_compile_several_stages_to_files(env, tmp_path):
    out = tmp_path / "mm.ll"
    r = hyb_cmd("compile", EXAMPLES / "matmul.hyb", "-a", "float32[16,8], float32[8,4]",
                "--emit", "llvm-opt,asm", "--emit", "ast", "--emit", "grad", "-o", out, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""
    assert "define " in (tmp_path / "mm.opt.ll").read_text()
    assert "hyb_matmul" in (tmp_path / "mm.s").read_text()
    assert (tmp_path / "mm.ast").read_text().startswith("def matmul(a: float32[16, 8], b: float32[8, 4]):")
    grad = (tmp_path / "mm.grad.hyb").read_text()
    assert grad.startswith("# tape: 0 bytes") and "def matmul_grad(a, b, dout):" in grad
    # A folder gets KERNEL.<suffix> files; several stages on stdout get headers.
    r = hyb_cmd("compile", EXAMPLES / "matmul.hyb", "-a", "float32[16,8] float32[8,4]", "-e", "isl,deps",
                "-o", f"{tmp_path / 'dir'}/", env=env)
    assert r.returncode == 0, r.stderr
    assert "domain:" in (tmp_path / "dir" / "matmul.isl").read_text()
    assert "flow (read after write)" in (tmp_path / "dir" / "matmul.deps").read_text()
    r = hyb_cmd("compile", EXAMPLES / "matmul.hyb", "-a", "float32[16,8] float32[8,4]", "-e", "schedule,loops",
                env=env)
    assert "==> matmul: schedule <==" in r.stdout and "==> matmul: loops <==" in r.stdout


def test_compile_colours_only_when_asked(env):
    args = ("compile", EXAMPLES / "matmul.hyb", "-a", "float32[8,4] float32[4,8]", "-e", "llvm")
    assert "\x1b[" not in hyb_cmd(*args, env=env).stdout
    coloured = hyb_cmd(*args, "--color=always", env=env).stdout
    assert "\x1b[35mdefine\x1b[0m" in coloured
    assert "\x1b[" not in hyb_cmd(*args, "--color=never", env=env).stdout


def test_compile_emits_cuda(env):
    r = hyb_cmd("compile", EXAMPLES / "add.hyb", "-a", "float32[4,4] float32[4,4]", "--emit", "cuda", env=env)
    assert r.returncode == 0, r.stderr
    assert '__global__ void hyb_add_k0(' in r.stdout
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("spec, message, caret", [
    ("a=flaot32[64,32] b=float32[32,48]", "unknown dtype `flaot32`", "           ^^^^^^^\nhint: did you mean `float32`?"),
    ("a=float32[64,x] b=float32[32,48]", "dimension `x` is not a non-negative integer", "                    ^\n"),
    ("a=float32[64,-2] b=float32[32,48]", "dimension `-2` is not a non-negative integer", "                   ^^\n"),
    ("a=float32[64,32] c=float32[32,48]", "kernel matmul(a, b) has no parameter `c`", "^^^^^^^^^^^^^^^^\n"),
    ("a=float32[64,32]", "missing --args for `b` of kernel matmul(a, b)", None),
    ("a=float32[64,32] a=float32[32,48]", "parameter `a` is given twice", None),
    ("float32[4,4] float32[4,4] float32[4]", "too many arguments: kernel matmul(a, b) takes 2", None),
    ("a=float32[64,32 b=float32[32,48]", "unbalanced brackets in `a=float32[64,32`", "^^^^^^^^^^^^^^^\n"),
    ("a=float[4] b=float32[4,4]", "`float` is a Python number, not a tensor dtype", None),
    ("a=float32 b=float32[32,48]", "`a` is a tensor in kernel `matmul`", "^^^^^^^^^\nhint: give it a shape"),
    ("b=float32[4,4] float32[4,4]", "an argument without a name follows a named one", None),
])
def test_compile_bad_args(cli, spec, message, caret):
    r = cli("compile", EXAMPLES / "matmul.hyb", "--args", spec)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("hyb: error: " + message), r.stderr
    assert f"  --args {spec}\n" in r.stderr or caret is None
    if caret:
        assert caret in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_compile_scalar_given_a_shape(env, files):
    r = hyb_cmd("compile", files / "axpy.hyb", "--args", "alpha=float32[4] x=float32[4] y=float32[4]", env=env)
    assert r.returncode == 2
    assert "`alpha` is used as a number in kernel `axpy` (line 5: `c[i] = alpha * x[i] + y[i]`)" in r.stderr
    r = hyb_cmd("compile", files / "axpy.hyb", "--args", "alpha=float x=float32[4] y=float32[4]", "-e", "ast",
                env=env)
    assert r.returncode == 0, r.stderr
    assert "def axpy(alpha: " in r.stdout


def test_compile_usage_errors(cli, env, files, tmp_path):
    spec = ("-a", "float32[4,4] float32[4,4]")
    r = hyb_cmd("compile", EXAMPLES / "add.hyb", *spec, "--emit", "llvm-op", env=env)
    assert r.returncode == 2 and "unknown stage `llvm-op` for --emit" in r.stderr and "`llvm-opt`" in r.stderr
    r = cli("compile", EXAMPLES / "seeds.hyb", *spec)
    assert r.returncode == 2
    assert "defines 3 kernels (add, square, square_grad): choose one with --kernel" in r.stderr
    r = cli("compile", EXAMPLES / "seeds.hyb", *spec, "--kernel", "ad")
    assert r.returncode == 2 and "has no kernel `ad`" in r.stderr and "did you mean `add`?" in r.stderr
    r = cli("compile", EXAMPLES / "seeds.hyb", *spec, "--kernel", "add")
    assert r.returncode == 0, r.stderr
    r = cli("compile", EXAMPLES / "add.hyb")
    assert r.returncode == 2 and "needs the types of its arguments: pass --args" in r.stderr
    r = cli("compile", EXAMPLES / "add.hyb", *spec, "--schedule", "{tile: 3}")
    assert r.returncode == 2 and "--schedule is not valid JSON" in r.stderr
    r = cli("compile", EXAMPLES / "add.hyb", *spec, "--schedule", '{"tiles": [4]}')
    assert r.returncode == 2 and "unknown schedule option `tiles`" in r.stderr
    r = cli("compile", EXAMPLES / "add.hyb", *spec, "--schedule", "original", "-e", "schedule")
    assert r.returncode == 0 and "original" in r.stdout
    bad = tmp_path / "bad.hyb"
    bad.write_text("def k(a):\n    for i in range(4):\n        break\n")
    r = cli("compile", bad, "-a", "float32[4]")
    assert r.returncode == 1 and f"{bad}:3:9: error:" in r.stderr and "^" in r.stderr


# ------------------------------------------------------------------ run

def test_run_npy_inputs(env, tmp_path):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.full((2, 3), 0.5, dtype=np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    r = hyb_cmd("run", EXAMPLES / "add.hyb", "a.npy", "b.npy", env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "c = array([[0.5, 1.5, 2.5],\n           [3.5, 4.5, 5.5]], dtype=float32)\n"
    # By name, in any order, saved to a .npy file, with times.
    r = hyb_cmd("run", EXAMPLES / "add.hyb", "b=b.npy", "-i", "a=a.npy", "-o", "c.npy", "--time", "--repeat", "3",
                env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), a + b)
    assert "add: compiled in " in r.stderr and "(best of 3, median" in r.stderr
    # The interpreter gives the same.
    r = hyb_cmd("run", EXAMPLES / "add.hyb", "a.npy", "b.npy", "--emulate", env=env, cwd=tmp_path)
    assert r.returncode == 0 and "[3.5, 4.5, 5.5]" in r.stdout
    # numpy.save keeps no dtype for bfloat16 (ml_dtypes) arrays: raw 2-byte records come back
    np.save(tmp_path / "raw.npy", np.zeros(6, dtype="V2"))
    r = hyb_cmd("run", EXAMPLES / "add.hyb", "raw.npy", "b.npy", env=env, cwd=tmp_path)
    assert r.returncode == 2
    assert "input `a`: raw.npy holds raw 2-byte records (dtype |V2), not numbers" in r.stderr
    assert "a bfloat16 array saved with numpy.save" in r.stderr


def test_run_scalars_random_and_npz(env, files, tmp_path):
    x = np.arange(4, dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    r = hyb_cmd("run", files / "axpy.hyb", "float32:3", "x.npy", "--random", "-a", "y=float32[4]", "--seed", "5",
                "-o", "out.npz", env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    y = np.random.default_rng(5).standard_normal(4).astype(np.float32)
    got = np.load(tmp_path / "out.npz")
    assert list(got) == ["c"]
    np.testing.assert_allclose(got["c"], 3 * x + y, rtol=1e-6)
    r = hyb_cmd("run", files / "mix.hyb", "2", "--random", "-a", "x=float32[5] idx=int32[5] acc=float32[10]",
                "-o", "mix.npz", env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert sorted(np.load(tmp_path / "mix.npz")) == ["acc", "out"]
    r = hyb_cmd("run", files / "mix.hyb", "2", "--random", "-a", "x=float32[5] idx=int32[5] acc=float32[10]",
                "-o", "mix.npy", env=env, cwd=tmp_path)
    assert r.returncode == 2 and "returns 2 outputs (out, acc); a .npy file holds one" in r.stderr


def test_run_errors(cli, env, files, tmp_path, monkeypatch):
    np.save(tmp_path / "a.npy", np.zeros((2, 3), np.float32))
    np.savez(tmp_path / "ab.npz", a=np.zeros(2))
    r = hyb_cmd("run", EXAMPLES / "add.hyb", "a.npy", env=env, cwd=tmp_path)
    assert r.returncode == 2 and "hyb: error: no input for `b` of kernel add(a, b)" in r.stderr
    monkeypatch.chdir(tmp_path)
    cases = [
        (("a.npy", "nope.npy"), "input `b`: `nope.npy` is not a file, nor a number"),
        (("a.npy", "2.5"), "`b` is a tensor in kernel `add`"),
        (("a.npy", "a.npy", "a.npy"), "too many inputs: kernel add(a, b) takes 2"),
        (("a.npy", "c=a.npy"), "kernel add(a, b) has no parameter `c`"),
        (("a.npy", "a=a.npy"), "input `a` is given twice"),
        (("ab.npz", "a.npy"), "holds several arrays"),
        (("a.npy", "b=flt:1"), "unknown dtype `flt`"),
        (("a.npy", "b=int8:300"), "`300` is not a int8"),
        (("a.npy", "--random"), "kernel `add` needs the types of `b`: pass --args"),
        (("a.npy", "a.npy", "-o", "c.csv"), "write outputs to a .npy file"),
    ]
    for extra, message in cases:
        r = cli("run", EXAMPLES / "add.hyb", *extra)
        assert r.returncode == 2, (extra, r.stderr)
        assert message in r.stderr, (extra, r.stderr)
    # A run-time index error is an error in the kernel: status 1, in compiler format.
    np.save(tmp_path / "idx.npy", np.array([0, 1, 7], np.int32))
    np.save(tmp_path / "x.npy", np.ones(3, np.float32))
    r = hyb_cmd("run", files / "mix.hyb", "1.0", "x.npy", "idx.npy", "--random", "-a", "acc=float32[4]",
                env=env, cwd=tmp_path)
    assert r.returncode == 1
    assert "mix.hyb:6:9: error: kernel `mix`: index 7 is out of bounds for axis 0 of `acc`" in r.stderr


def test_run_takes_options_and_inputs_in_any_order(cli, tmp_path, monkeypatch):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", a * 0 + 1)
    monkeypatch.chdir(tmp_path)
    want = "c = array([[1., 2., 3.],\n           [4., 5., 6.]], dtype=float32)\n"
    orders = [
        ("run", EXAMPLES / "add.hyb", "a.npy", "b.npy"),
        ("run", EXAMPLES / "add.hyb", "-k", "add", "a.npy", "b.npy"),
        ("run", EXAMPLES / "add.hyb", "a.npy", "-k", "add", "--fastmath", "b.npy"),
        ("run", "-k", "add", "a.npy", EXAMPLES / "add.hyb", "b.npy"),
        ("run", "a.npy", "b.npy", EXAMPLES / "add.hyb", "--threads", "1"),
    ]
    for argv in orders:
        r = cli(*argv)
        assert r.returncode == 0, (argv, r.stderr)
        assert r.stdout == want, argv


def test_version_and_exit_statuses(cli, tmp_path, monkeypatch):
    from hyb.version import __version__
    r = cli("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"hyb {__version__}"
    np.save(tmp_path / "a.npy", np.zeros(3, np.float32))
    (tmp_path / "bad.hyb").write_text("def k(a):\n    c = output_tensor(a.shape, a.dtype\n    return c\n")
    (tmp_path / "binary.hyb").write_bytes(np.zeros(3).tobytes() + b"\x93\xff")
    monkeypatch.chdir(tmp_path)
    usage = [(("run", "a.npy"), "a.npy is an input, not a kernel file"),
             (("run", EXAMPLES / "add.hyb", "a.npy", "--bogus"), "unrecognized arguments: --bogus"),
             (("compile",), "the following arguments are required"),
             (("run", EXAMPLES / "add.hyb", "--threads", "0", "a.npy", "a.npy"), "give a positive number")]
    for argv, message in usage:
        r = cli(*argv)
        assert r.returncode == 2, (argv, r.stderr)
        assert message in r.stderr, (argv, r.stderr)
    kernel_errors = [(("check", "bad.hyb"), "bad.hyb:2:22: error: `(` is never closed"),
                     (("check", "binary.hyb"), "cannot read binary.hyb: it is not a text file"),
                     (("check", "missing.hyb"), "cannot read missing.hyb")]
    for argv, message in kernel_errors:
        r = cli(*argv)
        assert r.returncode == 1, (argv, r.stderr)
        assert message in r.stderr, (argv, r.stderr)


# ------------------------------------------------------------------ grad

def test_grad_writes_a_kernel_that_runs(env, tmp_path):
    out = tmp_path / "mm_grad.hyb"
    r = hyb_cmd("grad", EXAMPLES / "matmul.hyb", "-o", out, env=env)
    assert r.returncode == 0, r.stderr
    mod = hyb.load(out)
    a, b = np.random.rand(5, 3), np.random.rand(3, 4)
    dout = np.random.rand(5, 4)
    da, db = mod.matmul_grad(a, b, dout)
    np.testing.assert_allclose(da, dout @ b.T)
    np.testing.assert_allclose(db, a.T @ dout)
    r = hyb_cmd("grad", EXAMPLES / "matmul.hyb", env=env)
    assert r.stdout == out.read_text() + ("" if out.read_text().endswith("\n") else "\n")


def test_grad_of_every_kernel_and_unsupported_ones(env, files, tmp_path):
    out = tmp_path / "two_grad.hyb"
    r = hyb_cmd("grad", files / "two.hyb", "-o", out, env=env)
    assert r.returncode == 1
    assert "two.hyb:20:5: error: the gradient of `whole` depends on the rank of its `grid` loop" in r.stderr
    assert "no gradient for 1 of 3 kernel(s): whole; the others were written" in r.stderr
    text = out.read_text()
    assert text.count("SCALE = 2.0") == 1  # module constants once
    mod = hyb.load(out)
    assert set(mod.kernels) == {"double_grad", "cube_grad"}
    a, dout = np.random.rand(6), np.random.rand(6)
    np.testing.assert_allclose(mod.cube_grad(a, dout), 6 * a * a * dout)
    r = hyb_cmd("grad", files / "two.hyb", "--kernel", "double", env=env)
    assert r.returncode == 0 and "def double_grad(a, dout):" in r.stdout and "cube" not in r.stdout
    r = hyb_cmd("grad", files / "two.hyb", "--kernel", "whole", "-o", tmp_path / "none.hyb", env=env)
    assert r.returncode == 1 and not (tmp_path / "none.hyb").exists()
    r = hyb_cmd("grad", files / "two.hyb", "--kernel", "whole", "--args", "a=float64[3,4]", "-o", out, env=env)
    assert r.returncode == 0, r.stderr
    whole = hyb.load(out).whole_grad
    a, dout = np.random.rand(3, 4), np.random.rand(3, 4)
    np.testing.assert_allclose(whole(a, dout), np.exp(a) * dout)
    r = hyb_cmd("grad", files / "two.hyb", "--args", "a=float64[3,4]", env=env)
    assert r.returncode == 2 and "defines 3 kernels" in r.stderr
    r = hyb_cmd("grad", files / "two.hyb", "--kernel", "triple", env=env)
    assert r.returncode == 2 and "has no kernel `triple`" in r.stderr


# ------------------------------------------------------------------ aot

_P = ctypes.POINTER


def aot_function(path, symbol):
    lib = ctypes.CDLL(str(path))
    fn = getattr(lib, symbol)
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_int, _P(ctypes.c_void_p), _P(ctypes.c_int), _P(_P(ctypes.c_int64)),
                   _P(ctypes.c_char_p), ctypes.c_void_p, ctypes.c_void_p]
    err = getattr(lib, symbol + "_last_error")
    err.restype = ctypes.c_char_p
    sig = getattr(lib, symbol + "_signature")
    sig.restype = ctypes.c_char_p
    return lib, fn, lambda: err().decode(), sig().decode()


def aot_call(fn, arrays, dtypes=None, nparam=None):
    """Call an aot function the way MindSpore does: one pointer, rank, shape and dtype per array."""
    n = len(arrays)
    params = (ctypes.c_void_p * n)(*[a.ctypes.data for a in arrays])
    ndims = (ctypes.c_int * n)(*[a.ndim for a in arrays])
    dims = [(ctypes.c_int64 * max(1, a.ndim))(*a.shape) for a in arrays]
    shapes = (_P(ctypes.c_int64) * n)(*[ctypes.cast(d, _P(ctypes.c_int64)) for d in dims])
    names = dtypes or [a.dtype.name for a in arrays]
    dts = (ctypes.c_char_p * n)(*[d.encode() for d in names])
    return fn(n if nparam is None else nparam, params, ndims, shapes, dts, None, None)


def test_aot_add_library(env, tmp_path):
    lib_path = tmp_path / "libadd.so"
    r = hyb_cmd("aot", EXAMPLES / "add.hyb", "--args", "a=float32[4,8] b=float32[4,8]", "-o", lib_path,
                env=env, console=True)
    assert r.returncode == 0, r.stderr
    assert "wrote" in r.stdout and "add(a: float32[4, 8], b: float32[4, 8]) -> c: float32[4, 8]" in r.stdout
    exported = subprocess.run(["nm", "-D", "--defined-only", str(lib_path)], capture_output=True, text=True).stdout
    assert {line.split()[-1] for line in exported.splitlines()} == {"add", "add_last_error", "add_signature"}
    _, add, last_error, signature = aot_function(lib_path, "add")
    assert signature == "add(a: float32[4, 8], b: float32[4, 8]) -> c: float32[4, 8]"
    a = np.random.rand(4, 8).astype(np.float32)
    b = np.random.rand(4, 8).astype(np.float32)
    c = np.full((4, 8), 99.0, np.float32)  # outputs start at zero whatever the caller's buffer holds
    assert aot_call(add, [a, b, c]) == 0
    np.testing.assert_array_equal(c, a + b)
    assert aot_call(add, [a, b, c], dtypes=["float", "float", "float"]) == 0  # MindSpore's short name
    assert aot_call(add, [a, b]) == 1 and "2 parameters, expected 3 (2 inputs, then 1 output)" in last_error()
    assert aot_call(add, [a, b.astype(np.float64), c]) == 2
    assert last_error() == "parameter 1 (`b`): dtype float64, expected float32"
    assert aot_call(add, [a, b.reshape(32), c]) == 3
    assert aot_call(add, [a, b, np.zeros((4, 9), np.float32)]) == 4
    assert last_error() == "parameter 2 (`c`): shape [4, 9], expected [4, 8]"
    assert aot_call(add, [a, b, c], nparam=3) == 0 and last_error() == ""


def test_aot_scalars_temporaries_in_place_and_run_time_checks(env, files, tmp_path):
    lib_path = tmp_path / "libmix.so"
    r = hyb_cmd("aot", files / "mix.hyb", "--args", "alpha=float32 x=float32[5] idx=int32[5] acc=float32[3]",
                "-o", lib_path, "--symbol", "MixOp", "--keep", tmp_path / "keep", env=env)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "keep" / "MixOp_wrapper.c").read_text().count("calloc") == 1  # the temporary
    _, mix, last_error, signature = aot_function(lib_path, "MixOp")
    assert signature == "mix(alpha: float32, x: float32[5], idx: int32[5], acc: float32[3]) -> out: float32[5], " \
                        "acc: float32[3]"
    alpha = np.array(2.0, np.float32)
    x = np.arange(5, dtype=np.float32)
    idx = np.array([0, 1, 1, 2, 2], np.int32)
    acc = np.ones(3, np.float32)
    out, acc_out = np.zeros(5, np.float32), np.zeros(3, np.float32)
    for _ in range(2):  # the same result twice: the in-place input is not modified
        assert aot_call(mix, [alpha, x, idx, acc, out, acc_out]) == 0, last_error()
        np.testing.assert_array_equal(out, 2 * x + 1)
        np.testing.assert_array_equal(acc_out, [1, 7, 15])
        np.testing.assert_array_equal(acc, [1, 1, 1])
    assert aot_call(mix, [alpha.reshape(1), x, idx, acc, out, acc_out]) == 0  # a scalar as shape [1]
    assert aot_call(mix, [np.zeros(2, np.float32), x, idx, acc, out, acc_out]) == 3
    idx[3] = 3
    assert aot_call(mix, [alpha, x, idx, acc, out, acc_out]) == 7
    assert last_error().startswith("MixOp: index 3 is out of bounds for axis 0 of `acc` (shape (3,)) at ")
    assert "mix.hyb:6:9" in last_error()


def test_aot_parallel_kernel_links_openmp(env, tmp_path):
    lib_path = tmp_path / "libmm.so"
    r = hyb_cmd("aot", EXAMPLES / "matmul.hyb", "-a", "a=float32[128,64] b=float32[64,96]", "-o", lib_path,
                env=env)
    assert r.returncode == 0, r.stderr
    _, mm, last_error, _ = aot_function(lib_path, "matmul")
    a = np.random.rand(128, 64).astype(np.float32)
    b = np.random.rand(64, 96).astype(np.float32)
    c = np.empty((128, 96), np.float32)
    assert aot_call(mm, [a, b, c]) == 0, last_error()
    np.testing.assert_allclose(c, a @ b, rtol=1e-4)


def test_aot_usage_errors(cli, tmp_path):
    r = cli("aot", EXAMPLES / "add.hyb", "-o", tmp_path / "x.so")
    assert r.returncode == 2 and "pass --args" in r.stderr
    r = cli("aot", EXAMPLES / "add.hyb", "-a", "float32[2,2] float32[2,2]", "--symbol", "9lives", "-o", tmp_path / "x.so")
    assert r.returncode == 2 and "--symbol 9lives: not a C identifier" in r.stderr
    assert not (tmp_path / "x.so").exists()


# ------------------------------------------------------------------ colour, progress, notebooks

def test_highlight_keeps_the_text():
    src = (EXAMPLES / "matmul.hyb").read_text()
    coloured = highlight.ansi(src, "hyb")
    assert "\x1b[35mfor\x1b[0m" in coloured and "\x1b[90m" not in coloured.split("def")[1].split("\n")[0]
    import re
    assert re.sub(r"\x1b\[[0-9;]*m", "", coloured) == src
    ir = "define i32 @f(ptr %a) {\nentry:\n  ret i32 0 ; done\n}\n"
    assert re.sub(r"\x1b\[[0-9;]*m", "", highlight.ansi(ir, "llvm")) == ir
    assert '<span class="hyb-variable">@f</span>' in highlight.html(ir, "llvm")
    assert highlight.html("a < b & c", "hyb") == "a &lt; b &amp; c"


def test_progress_line_only_for_slow_work_on_a_terminal():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    quick = Terminal()
    with Progress("quick", stream=quick, delay=0.5):
        pass
    assert quick.getvalue() == ""
    slow = Terminal()
    with Progress("compiling k", stream=slow, delay=0.05, interval=0.01) as p:
        p.step("llvm")
        time.sleep(0.2)
    assert "hyb: compiling k: llvm (" in slow.getvalue() and slow.getvalue().endswith("\r\x1b[K")
    piped = io.StringIO()
    with Progress("compiling k", stream=piped, delay=0.0, interval=0.01):
        time.sleep(0.05)
    assert piped.getvalue() == ""


def test_notebook_html_shows_every_stage_escaped():
    mod = hyb.compile_source("def neg(a):\n    c = output_tensor(a.shape, a.dtype)\n"
                             "    for i in range(a.shape[0]):\n        c[i] = 0.0 - a[i] if a[i] < 0 else a[i]\n"
                             "    return c\n", "<neg & co>")
    ck = mod.neg.compile(np.zeros(8, np.float32))
    page = ck._repr_html_()
    for stage in ("loops", "ast", "schedule", "isl", "deps", "llvm", "llvm-opt", "asm", "grad", "rewrites"):
        assert f">{stage}</label>" in page
    assert "&lt;" in page and "a[i] < 0" not in page
    assert page.count("<pre") == 10 and page.count("</pre>") == 10
    listing = mod.neg._repr_html_()
    assert "float32[8]" in listing and "&lt;" in listing
    grid_kernel = hyb.compile_source("def g(a):\n    c = output_tensor(a.shape, a.dtype)\n"
                                     "    for idx in grid(a.shape):\n        c[idx] = a[idx]\n    return c\n")
    page = grid_kernel.g.compile(np.zeros((2, 2)))._repr_html_()
    assert "d_a[idx_0, idx_1] = g" in page  # the gradient for this signature's rank
    refused = hyb.compile_source("def k(a):\n    c = output_tensor(a.shape, a.dtype)\n    n = allocate((1,), 'int64')\n"
                                 "    n[0] = 2\n    for i in range(a.shape[0]):\n        for j in range(n[0]):\n"
                                 "            c[i] += a[i]\n        n[0] = 3\n    return c\n")
    page = refused.k.compile(np.zeros(3))._repr_html_()
    assert "the gradient of a kernel with a loop bound that the kernel changes while it runs is not built yet" in page
