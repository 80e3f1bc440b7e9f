"""The `hyb` command, driven as a user would."""
import subprocess
import sys


def run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "hyb.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


def test_demo():
    r = run("demo")
    assert r.returncode == 0, r.stderr
    assert "hyb result" in r.stdout and "NumPy a @ b" in r.stdout
    assert r.stdout.rstrip().endswith("OK")


def test_check_good_and_bad(tmp_path):
    good = tmp_path / "good.hyb"
    good.write_text("def add(a, b):\n    c = output_tensor(a.shape, a.dtype)\n"
                    "    for i in range(a.shape[0]):\n        c[i] = a[i] + b[i]\n    return c\n")
    r = run("check", str(good))
    assert r.returncode == 0
    assert "1 kernel(s) parsed: add" in r.stdout
    bad = tmp_path / "bad.hyb"
    bad.write_text("def k(a):\n    while True:\n        pass\n")
    r = run("check", str(bad))
    assert r.returncode == 1
    assert f"{bad}:2:5: error: `while` loops are not supported" in r.stderr
    assert "^^^^^" in r.stderr
    r = run("check", str(tmp_path / "missing.hyb"))
    assert r.returncode == 1 and "cannot read" in r.stderr


def test_no_command_prints_help():
    r = run()
    assert r.returncode == 2
    assert "demo" in r.stdout


def test_bench_lists_the_suite():
    r = subprocess.run(["hyb", "bench", "--list"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "gemm" in r.stdout and "floyd-warshall" in r.stdout


def test_unknown_argument_is_rejected():
    r = run("demo", "--bogus")
    assert r.returncode == 2 and "unrecognized arguments: --bogus" in r.stderr
