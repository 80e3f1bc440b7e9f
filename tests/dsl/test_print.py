"""print(...) inside kernels, for debugging: compiled CPU code prints exactly what emulate() prints,
as Python prints the same values, in program order."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import hyb
from hyb.errors import HybridTypeError, HybridUnsupportedError

SRC = '''
def running(a, n):
    c = output_tensor(a.shape, a.dtype)
    s = 0.0
    for i in range(a.shape[0]):
        s += a[i]
        print("i =", i, "a[i] =", a[i], "s =", s, n, a[i] > 0)
        c[i] = s
    return c

def rows(a):
    c = output_tensor(a.shape, a.dtype)
    for i in parallel(a.shape[0]):
        for j in range(a.shape[1]):
            c[i, j] = a[i, j] * 2
            if j == a.shape[1] - 1:
                print("row", i, "done:", c[i, j])
    return c

def two_loops(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        print("first", i)
    for i in range(a.shape[0]):
        c[i] = a[i]
        print("second", i)
    return c
'''


@pytest.fixture(scope="module")
def mod():
    return hyb.compile_source(SRC, "prints.hyb", threads=2)


def both(capsys, kernel, *args):
    got = kernel(*args)
    compiled = capsys.readouterr().out
    want = kernel.emulate(*args)
    emulated = capsys.readouterr().out
    np.testing.assert_array_equal(got, want)
    return compiled, emulated


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16", "int8", "uint64", "int32"])
def test_compiled_prints_what_emulate_prints(mod, capsys, dtype):
    a = np.array([1, 2, 250 if dtype in ("uint64", "int32") else 3], dtype=dtype)
    if "float" in dtype:
        a = a / np.array(3, dtype=dtype)
    compiled, emulated = both(capsys, mod.running, a, np.uint64(2**63 + 5))
    assert compiled == emulated
    lines = compiled.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("i = 0 a[i] = ") and lines[0].endswith(f" {2**63 + 5} True")


def test_values_as_python_prints_them(mod, capsys):
    mod.running(np.array([0.1, -2.5], dtype=np.float32), 7)
    out = capsys.readouterr().out.splitlines()
    # (`s = 0.0` is a weak Python float: `s += a[i]` makes it a float32, printed as NumPy prints one)
    assert out == ["i = 0 a[i] = 0.1 s = 0.1 7 True",
                   "i = 1 a[i] = -2.5 s = -2.4 7 False"]


def test_prints_keep_their_order_and_stay_off_the_threads(mod, capsys):
    a = np.arange(12.0).reshape(6, 2)
    with pytest.warns(hyb.HybridWarning, match="loop `i` is written `parallel` but its iterations depend on each other"):
        compiled, emulated = both(capsys, mod.rows, a)
    assert compiled == emulated
    assert compiled.splitlines()[0] == "row 0 done: 2.0" and len(compiled.splitlines()) == 6
    compiled, emulated = both(capsys, mod.two_loops, np.arange(3.0))
    assert compiled == emulated == "first 0\nfirst 1\nfirst 2\nsecond 0\nsecond 1\nsecond 2\n"


def test_prints_survive_the_disk_cache(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HYB_CACHE_DIR", str(tmp_path))
    a = np.arange(2.0)
    hyb.compile_source(SRC, "prints.hyb").two_loops(a)
    first = capsys.readouterr().out
    hyb.compile_source(SRC, "prints.hyb").two_loops(a)  # loaded from the cache
    assert capsys.readouterr().out == first == "first 0\nfirst 1\nsecond 0\nsecond 1\n"


def test_print_mistakes():
    head = "def k(a):\n    c = output_tensor(a.shape, a.dtype)\n"
    with pytest.raises(HybridUnsupportedError) as info:
        hyb.compile_source(head + "    print(a[0], sep=',')\n    return c\n", "p.hyb").k(np.zeros(2))
    assert info.value.message == "print() with `sep=` is not supported" and info.value.line == 3
    with pytest.raises(HybridTypeError) as info:
        hyb.compile_source(head + "    print(a)\n    return c\n", "p.hyb").k(np.zeros(2))
    assert info.value.message == "print() takes numbers and strings" and (info.value.line, info.value.col) == (3, 11)


def test_not_on_the_gpu_nor_in_aot_libraries(mod, tmp_path):
    a = np.arange(3.0)
    with pytest.raises(HybridUnsupportedError) as info:
        mod.two_loops.compile(a, target="cuda").inspect("cuda")
    assert "print() in a kernel that runs on the GPU" in info.value.message
    from hyb.codegen.aot import build_library
    with pytest.raises(HybridUnsupportedError) as info:
        build_library(mod.two_loops.compile(a), tmp_path / "lib.so")
    assert "print() in a kernel built into an aot library" in info.value.message


def test_the_gradient_leaves_prints_out(mod, capsys):
    g = mod.running.grad()
    assert "print(" not in g.source
    g(np.arange(3.0), 1, np.ones(3))
    assert capsys.readouterr().out == ""


def test_hyb_check_notes_prints(tmp_path):
    f = tmp_path / "p.hyb"
    f.write_text(SRC)
    r = subprocess.run([sys.executable, "-m", "hyb.cli", "check", str(f)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert f"{f}:7:9: note: kernel `running` prints" in r.stdout


FSTRINGS = '''
def fmt(a, n):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] * 2
        print(f"c[{i}] = {c[i]:.3f}", "n:", f"{n + 1:>5d}|{a[i]!r:>8}|{a[i] > 0}", rf"{i}\\n", f'{{{i}}}')
    print(f"{a.shape[0]} rows")
    return c
'''


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_f_strings(capsys, dtype):
    k = hyb.compile_source(FSTRINGS, "f.hyb").fmt
    a = np.array([1.5, -2.25], dtype=dtype)
    compiled, emulated = both(capsys, k, a, 7)
    assert compiled == emulated
    assert compiled.splitlines() == ["c[0] = 3.000 n:     8|     1.5|True 0\\n {0}",
                                     "c[1] = -4.500 n:     8|   -2.25|False 1\\n {1}", "2 rows"]


@pytest.mark.parametrize("line,cls,message,col", [
    ('print(f"{a[0]:d}")', HybridTypeError,
     "format spec `d` does not fit a float64 value: Unknown format code 'd' for object of type 'float'", 14),
    ('print(f"{a}")', HybridTypeError, "print() takes numbers and strings", 14),
    ('x = f"{a[0]}"', HybridUnsupportedError, "an f-string outside print()", 9),
    ('print(f"{a[0]:{a[1]}}")', HybridUnsupportedError, "a field inside an f-string's format spec", 11),
    ('print(f"{a[0] +}")', hyb.HybridSyntaxError, "malformed f-string: f-string: invalid syntax", 11),
    ('print(f"{b[0]}")', hyb.HybridNameError, "unknown name `b`", 14),
])
def test_f_string_mistakes(line, cls, message, col):
    src = f"def k(a):\n    c = output_tensor(a.shape, a.dtype)\n    {line}\n    return c\n"
    with pytest.raises(cls) as info:
        hyb.compile_source(src, "p.hyb").k(np.zeros(2))
    assert info.value.message == message and (info.value.line, info.value.col) == (3, col)
