"""Reliability: the front end on hostile text, memory safety of calls with wrong
arguments, concurrency, and a disk cache that cannot be corrupted.

* Front end: edge-case texts (deep nesting, huge literals and shapes, odd characters) give a HybridError
  or a kernel, never another exception (the random mutants are in test_fuzz.py).
* Memory safety: calls with wrong shapes, ranks, dtypes and argument counts, non-contiguous, read-only,
  unaligned, byte-swapped and zero-size arrays, and data-dependent indices out of range run in a child
  process on arrays that end (or start) at a PROT_NONE guard page: a stray access kills the child with
  SIGSEGV.  Each call must either give NumPy's answer or raise a HybridError.
* Concurrency: one kernel (its first compile included) from 8 threads at once; the first compile of one
  kernel from 4 processes sharing HYB_CACHE_DIR.
* Cache: entries truncated, garbled, emptied, replaced by a directory or by junk of the right length,
  a read-only cache directory: a warning at most, the right answer always.
"""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest

import hyb

ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------ front end: edge cases
BODY = "def k(a):\n    c = output_tensor(a.shape, a.dtype)\n    for i in range(a.shape[0]):\n        c[i] = {}\n    return c\n"


def front_end_outcome(src, inputs=(np.arange(3.0),)):
    """What becomes of ``src``: ``("error", the HybridError)`` where parsing, type-checking or a call raises
    one; ``("parsed", None)`` where it defines no kernel ``k``; else ``("ran", [(compiled, emulated) output
    for each input])``.  Any other exception propagates."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            k = hyb.compile_source(src, "edge.hyb").kernels.get("k")
            if k is None:
                return "parsed", None
            k.typed(inputs[0])
            with np.errstate(all="ignore"):
                return "ran", [(k(x.copy()), k.emulate(x.copy())) for x in inputs]
        except hyb.HybridError as e:
            return "error", e


def _nested_ifs(a):
    c = np.zeros_like(a)
    if all(a[0] > d for d in range(60)):
        c[0] = 1
    return c


# name: (source, what becomes of it: "parsed", the HybridError class raised, or the NumPy function the
# kernel computes, and for those the inputs when not just np.arange(3.0))
EDGE_CASES = {
    "empty": ("", "parsed"),
    "comment_only": ("# nothing here\n", "parsed"),
    "nul_byte": (BODY.format("a[i]\x00"), hyb.HybridSyntaxError),
    "byte_order_mark": ("\ufeff" + BODY.format("a[i]"), hyb.HybridSyntaxError),
    "crlf_lines": (BODY.format("a[i]").replace("\n", "\r\n"), lambda a: a),
    "tab_indents": (BODY.format("a[i]").replace("    ", "\t"), lambda a: a),
    "mixed_indents": (BODY.format("a[i]").replace("        c[i]", "\t    c[i]"), lambda a: a),
    "unicode_name": (BODY.format("a[i] + é"), hyb.HybridSyntaxError),
    "emoji": (BODY.format("a[i] 😀"), hyb.HybridSyntaxError),
    "huge_int_literal": (BODY.format("a[i] + 99999999999999999999999999"),
                         lambda a: a + float(99999999999999999999999999)),
    "huge_float_literal": (BODY.format("a[i] + 1e400"), lambda a: a + float("inf")),
    "huge_exponent": (BODY.format("a[i] ** 99999999999"), lambda a: a ** 99999999999.0),
    "index_2_63": (BODY.format("a[i + 2**63]"), hyb.HybridIndexError),  # type-checks; the call raises
    "negative_shape": ("def k(a):\n    c = output_tensor((-5,), a.dtype)\n    return c\n", hyb.HybridTypeError),
    "zero_step": ("def k(a):\n    c = output_tensor(a.shape, a.dtype)\n    for i in range(0, 3, 0):\n"
                  "        c[0] += 1\n    return c\n", hyb.HybridTypeError),
    "self_call": ("def k(a):\n    return k(a)\n", hyb.HybridTypeError),
    "mutual_calls": ("def h(a):\n    return k(a)\n\n\ndef k(a):\n    return h(a)\n", hyb.HybridTypeError),
    "nesting_100": (BODY.format("(" * 100 + "a[i]" + ")" * 100), lambda a: a),
    "sum_of_150": (BODY.format(" + ".join(["a[i]"] * 150)), lambda a: sum([a] * 150)),
    "if_nesting_60": ("def k(a):\n    c = output_tensor(a.shape, a.dtype)\n"
                      + "".join("    " * (d + 1) + f"if a[0] > {d}:\n" for d in range(60))
                      + "    " * 61 + "c[0] = 1\n    return c\n", _nested_ifs,
                      [np.arange(3.0), np.array([59.0, 1.0, 2.0]), np.array([59.5, 1.0, 2.0])]),
}


@pytest.mark.parametrize("name", sorted(EDGE_CASES))
def test_front_end_edge_cases(name):
    src, want, *inputs = EDGE_CASES[name]
    inputs = inputs[0] if inputs else [np.arange(3.0)]
    got, detail = front_end_outcome(src, inputs)
    if want == "parsed":
        assert got == "parsed", (got, detail)
    elif isinstance(want, type):
        assert got == "error" and type(detail) is want, (got, detail)
    else:
        assert got == "ran", (got, detail)
        for x, (compiled, emulated) in zip(inputs, detail):
            with np.errstate(all="ignore"):
                ref = np.asarray(want(x.copy()))
            for what, out in (("compiled", compiled), ("emulated", emulated)):
                assert out.dtype == ref.dtype and out.shape == ref.shape, (what, out, ref)
                np.testing.assert_array_equal(out, ref, err_msg=f"{name} {what}, input {x}")


DEEP = {
    "parentheses_600": BODY.format("(" * 600 + "a[i]" + ")" * 600),
    "unary_minus_600": BODY.format("-" * 600 + "a[i]"),
    "subscripts_600": BODY.format("a[" * 600 + "i" + "]" * 600),
}


@pytest.mark.parametrize("name", sorted(DEEP))
def test_regression_deep_nesting_is_a_hybrid_error(name):
    # the parser refuses each (a flat sum of any length is accepted: tests/dsl/test_long_programs.py)
    got, detail = front_end_outcome(DEEP[name])
    assert got == "error" and type(detail) is hyb.HybridSyntaxError, (got, detail)
    assert "nested too deeply to parse" in str(detail)


def test_regression_emulate_long_sum():
    k = hyb.compile_source(BODY.format(" + ".join(["a[i]"] * 200))).k
    np.testing.assert_array_equal(k.emulate(np.arange(3.0)), np.arange(3.0) * 200)


@pytest.mark.parametrize("shape", ["(10**30,)", "(2**62, 2**62)", "(2**40,)"])
def test_regression_huge_output_is_a_hybrid_error(shape):
    k = hyb.compile_source(f"def k(a):\n    c = output_tensor({shape}, 'float64')\n    return c\n").k
    with pytest.raises(hyb.HybridError):
        k(np.arange(3.0))


# ------------------------------------------------------------------ memory safety (in a child process)
MEMORY_SCRIPT = r'''
import ctypes, json, mmap, sys, warnings
import numpy as np
import hyb

warnings.simplefilter("ignore")
libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
PAGE = mmap.PAGESIZE
KEEP = []


def guarded(values, dtype=None, at="end"):
    """A copy of `values` in memory that ends (at="end") or starts (at="start") at a PROT_NONE page."""
    v = np.asarray(values, dtype=dtype)
    n = v.size * v.dtype.itemsize
    pages = max(1, -(-n // PAGE))
    mm = mmap.mmap(-1, (pages + 2) * PAGE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
    for p in (0, pages + 1):
        assert libc.mprotect(base + p * PAGE, PAGE, 0) == 0
    off = PAGE + (pages * PAGE - n if at == "end" else 0)
    a = np.frombuffer(mm, dtype=v.dtype, count=v.size, offset=off).reshape(v.shape)
    a[...] = v
    KEEP.append(mm)
    return a


def ro(a):
    a.flags.writeable = False
    return a


M = hyb.compile_source("""
def add(a, b):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] + b[i]
    return c


def tr(a):
    c = output_tensor((a.shape[1], a.shape[0]), a.dtype)
    for i in range(a.shape[1]):
        for j in range(a.shape[0]):
            c[i, j] = a[j, i] * 2
    return c


def hist(idx, w):
    h = output_tensor((4,), "float64")
    for i in range(idx.shape[0]):
        h[idx[i]] += w[i]
    return h


def gather(a, idx):
    c = output_tensor(idx.shape, a.dtype)
    for i in range(idx.shape[0]):
        c[i] = a[idx[i]]
    return c


def ragged(lens, a):
    c = output_tensor((a.shape[0],), a.dtype)
    for i in range(lens.shape[0]):
        for j in range(lens[i]):
            c[i] += a[i, j]
    return c


def scale(a, s):
    for i in range(a.shape[0]):
        a[i] = a[i] * s
    return a


def both(a, b):
    for i in range(a.shape[0]):
        a[i] += 1.0
        b[i] += 2.0
    return a, b


def at(a, p):
    c = output_tensor((1,), a.dtype)
    c[0] = a[p]
    return c
""", "mem.hyb", threads=4, schedule={"min_parallel_work": 0})

x = np.arange(1.0, 9.0)
CASES = {
    "shape_b_shorter": lambda: M.add(guarded(x), guarded(x[:5])),
    "shape_b_longer": lambda: (M.add(guarded(x[:5]), guarded(x)), x[:5] + x[:5])[1],
    "rank_mismatch": lambda: M.add(guarded(x.reshape(2, 4)), guarded(x)),
    "rank_too_low": lambda: M.tr(guarded(x)),
    "dtype_complex": lambda: M.add(x.astype(complex), x.astype(complex)),
    "dtype_object": lambda: M.add(x.astype(object), x.astype(object)),
    "dtype_str": lambda: M.add(x.astype(str), x.astype(str)),
    "dtype_datetime": lambda: M.add(x.astype("datetime64[s]"), x.astype("datetime64[s]")),
    "float_subscript": lambda: M.hist(guarded(x[:4]), guarded(x[:4])),
    "too_few_args": lambda: M.add(guarded(x)),
    "too_many_args": lambda: M.add(guarded(x), guarded(x), guarded(x)),
    "not_an_array": lambda: M.add("abc", guarded(x)),
    "none_arg": lambda: M.add(None, guarded(x)),
    "strided": lambda: (M.add(guarded(x)[::2], guarded(x)[1::2]), x[::2] + x[1::2])[1],
    "reversed": lambda: (M.add(guarded(x)[::-1], guarded(x, at="start")), x[::-1] + x)[1],
    "transposed": lambda: (M.tr(guarded(x.reshape(2, 4)).T), 2 * x.reshape(2, 4))[1],
    "fortran_order": lambda: (M.tr(np.asfortranarray(x.reshape(2, 4))), 2 * x.reshape(2, 4).T)[1],
    "byte_swapped": lambda: (M.add(x.astype(">f8"), x.astype(">f8")), 2 * x)[1],
    "unaligned": lambda: (M.add(np.frombuffer(b"\0" + x.tobytes(), np.float64, 8, 1), x), 2 * x)[1],
    "read_only_inputs": lambda: (M.add(ro(guarded(x)), ro(guarded(x))), 2 * x)[1],
    "read_only_in_place": lambda: M.scale(ro(guarded(x)), 2.0),
    "strided_in_place": lambda: (lambda a: (M.scale(a[::2], 3.0), a)[1])(guarded(x)),
    "aliased_in_place": lambda: (lambda a: M.both(a, a))(guarded(x)),
    "overlapping_in_place": lambda: (lambda a: M.both(a[:6], a[2:]))(guarded(x)),
    "zero_size": lambda: (M.add(guarded(x[:0]), guarded(x[:0])), x[:0])[1],
    "zero_size_2d": lambda: (M.tr(guarded(np.zeros((0, 3)))), np.zeros((3, 0)))[1],
    "zero_size_gather": lambda: (M.gather(guarded(x[:0]), guarded(np.zeros(0, np.int64))), x[:0])[1],
    "zero_size_in_place": lambda: (M.scale(guarded(x[:0]), 2.0), x[:0])[1],
    "gather_from_empty": lambda: M.gather(guarded(x[:0]), guarded([0], np.int64)),
    "hist_ok": lambda: (M.hist(guarded([0, 3, 3, 1], np.int32), guarded(x[:4])), np.array([1., 4., 0., 5.]))[1],
    "hist_index_4": lambda: M.hist(guarded([0, 4], np.int32), guarded(x[:2])),
    "hist_index_minus_1": lambda: M.hist(guarded([0, -1], np.int64), guarded(x[:2])),
    "hist_index_2_62": lambda: M.hist(guarded([2 ** 62], np.int64), guarded(x[:1])),
    "hist_index_min_int64": lambda: M.hist(guarded([-2 ** 63], np.int64), guarded(x[:1])),
    "hist_index_max_uint64": lambda: M.hist(guarded([2 ** 64 - 1], np.uint64), guarded(x[:1])),
    "hist_index_int8": lambda: M.hist(guarded([-128], np.int8), guarded(x[:1])),
    "gather_index_8": lambda: M.gather(guarded(x), guarded([1, 8], np.int64)),
    "gather_index_minus_9": lambda: M.gather(guarded(x), guarded([-9], np.int64)),
    "ragged_ok": lambda: (M.ragged(guarded([1, 0], np.int64), guarded(x.reshape(2, 4))), np.array([1., 0.]))[1],
    "ragged_too_long": lambda: M.ragged(guarded([2, 5], np.int64), guarded(x.reshape(2, 4))),
    "ragged_more_rows": lambda: M.ragged(guarded([1, 1, 1], np.int64), guarded(x.reshape(2, 4))),
    "param_index_8": lambda: M.at(guarded(x), 8),
    "param_index_minus_1": lambda: M.at(guarded(x), -1),
    "param_index_2_70": lambda: M.at(guarded(x), 2 ** 70),
    "param_index_float": lambda: M.at(guarded(x), 1.5),
    "param_index_ok": lambda: (M.at(guarded(x), 7), x[7:])[1],
    "param_longdouble": lambda: M.at(guarded(x), np.longdouble(1)),
    "param_complex": lambda: M.at(guarded(x), 1j),
    "param_array": lambda: M.at(guarded(x), guarded([1], np.int64)),
    "dtype_longdouble": lambda: M.add(x.astype(np.longdouble), x.astype(np.longdouble)),
    "masked_array": lambda: (M.add(np.ma.masked_array(x, x > 4), x), 2 * x)[1],
    "list_arguments": lambda: (M.add(list(x), tuple(x)), 2 * x)[1],
}


results = {}
for name in sys.argv[1:] or CASES:
    fn = CASES[name]
    try:
        fn()
    except hyb.HybridError:
        results[name] = "HybridError"
        continue
    except Exception as e:
        results[name] = type(e).__name__ + ": " + str(e)[:200]
        continue
    results[name] = "ok"

# the values of the calls that succeed: (result, NumPy's answer)
CHECKS = {
    "shape_b_longer": lambda: (M.add(guarded(x[:5]), guarded(x)), x[:5] + x[:5]),
    "strided": lambda: (M.add(guarded(x)[::2], guarded(x)[1::2]), x[::2] + x[1::2]),
    "reversed": lambda: (M.add(guarded(x)[::-1], guarded(x, at="start")), x[::-1] + x),
    "transposed": lambda: (M.tr(guarded(x.reshape(2, 4)).T), 2 * x.reshape(2, 4)),
    "fortran_order": lambda: (M.tr(np.asfortranarray(x.reshape(2, 4))), 2 * x.reshape(2, 4).T),
    "byte_swapped": lambda: (M.add(x.astype(">f8"), x.astype(">f8")), 2 * x),
    "unaligned": lambda: (M.add(np.frombuffer(b"\0" + x.tobytes(), np.float64, 8, 1), x), 2 * x),
    "read_only_inputs": lambda: (M.add(ro(guarded(x)), ro(guarded(x))), 2 * x),
    "strided_in_place": lambda: (lambda a: (M.scale(a[::2], 3.0), a))(guarded(x)),
    "zero_size": lambda: (M.add(guarded(x[:0]), guarded(x[:0])), x[:0]),
    "zero_size_2d": lambda: (M.tr(guarded(np.zeros((0, 3)))), np.zeros((3, 0))),
    "hist_ok": lambda: (M.hist(guarded([0, 3, 3, 1], np.int32), guarded(x[:4])), np.array([1., 4., 0., 5.])),
    "ragged_ok": lambda: (M.ragged(guarded([1, 0], np.int64), guarded(x.reshape(2, 4))), np.array([1., 0.])),
    "param_index_ok": lambda: (M.at(guarded(x), 7), x[7:]),
    "masked_array": lambda: (M.add(np.ma.masked_array(x, x > 4), x), 2 * x),
    "list_arguments": lambda: (M.add(list(x), tuple(x)), 2 * x),
}
for name, fn in CHECKS.items():
    if results.get(name) != "ok":
        continue
    got, want = fn()
    if name == "strided_in_place":
        got = want  # the whole array, every other element scaled in place through the view
        want = x.copy(); want[::2] *= 3
    got = np.asarray(got)
    if got.shape != np.shape(want) or not np.array_equal(got, want):
        results[name] = f"WRONG: {got!r} != {want!r}"
print(json.dumps(results))
'''

MEMORY_EXPECTED = {
    "shape_b_longer": "ok", "strided": "ok", "reversed": "ok", "transposed": "ok", "fortran_order": "ok",
    "byte_swapped": "ok", "unaligned": "ok", "read_only_inputs": "ok", "strided_in_place": "ok",
    "zero_size": "ok", "zero_size_2d": "ok", "zero_size_gather": "ok", "zero_size_in_place": "ok",
    "hist_ok": "ok", "ragged_ok": "ok", "param_index_ok": "ok", "masked_array": "ok", "list_arguments": "ok",
}


def run_child(script, *args, env=None, timeout=180):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=timeout,
                          env=e, cwd=str(ROOT))


def test_memory_safety_in_a_guarded_child_process():
    r = run_child(MEMORY_SCRIPT)
    assert r.returncode == 0, f"child died with {r.returncode} (negative: a signal, -11 is SIGSEGV)\n{r.stderr[-3000:]}"
    results = json.loads(r.stdout.strip().splitlines()[-1])
    bad = {n: v for n, v in results.items() if v != MEMORY_EXPECTED.get(n, "HybridError")}
    assert not bad, bad


def test_guard_pages_do_catch_a_stray_read():
    """The harness itself: reading one element past a guarded array kills the child."""
    script = MEMORY_SCRIPT.split("M = hyb.compile_source")[0] + textwrap.dedent('''
        a = guarded(np.arange(4.0))
        p = ctypes.cast(a.ctypes.data, ctypes.POINTER(ctypes.c_double))
        print(p[3], flush=True)
        print(p[4], flush=True)
    ''')
    r = run_child(script)
    assert r.returncode == -11 and r.stdout.strip() == "3.0", (r.returncode, r.stdout, r.stderr[-500:])


# ------------------------------------------------------------------ concurrency
THREADED = '''
def k(a, b):
    c = output_tensor((a.shape[0], b.shape[1]), a.dtype)
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            for kk in range(a.shape[1]):
                c[i, j] += a[i, kk] * b[kk, j]
    s = 0.0
    for i in range(a.shape[0]):
        s += a[i, 0]
    c[0, 0] += s
    return c
'''


@pytest.mark.parametrize("threads", [1, 3])
def test_one_kernel_from_8_threads(threads):
    """8 threads call one kernel at once, from its very first (compiling) call, with their own data and with
    two signatures; every result is NumPy's."""
    k = hyb.compile_source(THREADED, "threads.hyb", threads=threads, schedule={"min_parallel_work": 0}).k
    barrier = threading.Barrier(8)
    errors = []

    def work(t):
        rng = np.random.default_rng(t)
        try:
            barrier.wait()
            for it in range(25):
                n = 12 if (t + it) % 2 else 7
                a, b = rng.standard_normal((n, 9)), rng.standard_normal((9, 5))
                want = a @ b
                want[0, 0] += a[:, 0].sum()
                np.testing.assert_allclose(k(a, b), want, rtol=1e-12, atol=1e-12)
        except BaseException as e:  # noqa: BLE001
            errors.append(f"thread {t}: {type(e).__name__}: {e}")

    ts = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errors, errors
    assert len(k._cache) == 2  # one compile per signature, not one per thread


PROCESS_SCRIPT = '''
import sys, time, numpy as np, hyb
from hyb.runtime import cache
cache.code_fingerprint = lambda: "fixed"   # others may edit hyb/ while the test runs
start = float(sys.argv[1])
while time.time() < start:
    time.sleep(0.005)
k = hyb.compile_source({src!r}, "shared.hyb").k
a = np.arange(12.0).reshape(3, 4) + float(sys.argv[2])
b = np.ones((4, 2))
want = a @ b
want[0, 0] += a[:, 0].sum()
assert np.allclose(k(a, b), want)
assert np.allclose(k(a, b), want)
print("ok")
'''.format(src=THREADED)


def cache_entries(d: Path):
    # (the parser's tables, which hyb keeps in the same folder, are no kernel's entry)
    return [p for p in d.rglob("*") if p.is_file() and not p.name.startswith(".tmp") and p.suffix != ".tables"]


def test_first_compile_from_4_processes_sharing_a_cache(tmp_path):
    import time
    env = dict(os.environ, HYB_CACHE_DIR=str(tmp_path))
    start = time.time() + 3.0  # all four start compiling at the same moment
    procs = [subprocess.Popen([sys.executable, "-c", PROCESS_SCRIPT, str(start), str(n)], env=env, cwd=str(ROOT),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in range(4)]
    outs = [p.communicate(timeout=180) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and out.strip() == "ok", err[-2000:]
        assert "Warning" not in err and "Traceback" not in err, err[-2000:]
    assert len(cache_entries(tmp_path)) == 1
    # and the entry they raced to write is whole: a fifth process uses it
    r = run_child(PROCESS_SCRIPT, "0", "9", env={"HYB_CACHE_DIR": str(tmp_path)})
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


# ------------------------------------------------------------------ cache robustness
CACHE_SCRIPT = '''
import sys, warnings, numpy as np, hyb
from hyb.runtime import cache
cache.code_fingerprint = lambda: "fixed"
loaded = []
real = cache.load
cache.load = lambda key: (lambda e: (loaded.append(e is not None), e)[1])(real(key))
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    k = hyb.compile_source({src!r}, "cached.hyb").k
    a = np.arange(12.0).reshape(3, 4)
    b = np.ones((4, 2))
    want = a @ b
    want[0, 0] += a[:, 0].sum()
    assert np.allclose(k(a, b), want)
print("hit" if loaded and loaded[0] else "miss", len(w))
'''.format(src=THREADED)


def cached_run(d):
    r = run_child(CACHE_SCRIPT, env={"HYB_CACHE_DIR": str(d)})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    hit, n_warnings = r.stdout.split()
    assert int(n_warnings) <= 1, r.stderr
    return hit


def damage(entry: Path, how: str, rng):
    data = entry.read_bytes()
    if how == "truncate_header":
        entry.write_bytes(data[:40])
    elif how == "truncate_tail":
        entry.write_bytes(data[:-1])
    elif how == "flip_one_bit":
        pos = int(rng.integers(0, len(data)))
        entry.write_bytes(data[:pos] + bytes([data[pos] ^ 1]) + data[pos + 1:])
    elif how == "random_bytes_same_length":
        entry.write_bytes(rng.integers(0, 256, len(data), dtype=np.uint8).tobytes())
    elif how == "appended_junk":
        entry.write_bytes(data + b"junk")
    elif how == "header_length_lies":
        entry.write_bytes(data.replace(b"\n" + data.split(b"\n")[1][:16], b"\n9999999999999999", 1))
    elif how == "directory":
        entry.unlink()
        entry.mkdir()
    elif how == "unreadable":
        entry.chmod(0)
    elif how == "dangling_symlink":
        entry.unlink()
        entry.symlink_to(entry.parent / "nowhere")


DAMAGES = ["truncate_header", "truncate_tail", "flip_one_bit", "random_bytes_same_length", "appended_junk",
           "header_length_lies", "dangling_symlink", "directory"]


def test_damaged_cache_entry_is_not_trusted(tmp_path):
    """Each kind of damage in turn: the next process gets the right answer (checked in the child) with a
    warning at most, without trusting the entry; after most kinds it writes the entry again."""
    assert cached_run(tmp_path) == "miss"
    (entry,) = cache_entries(tmp_path)
    good = entry.read_bytes()
    rng = np.random.default_rng(11)
    for how in DAMAGES:
        if entry.is_dir():
            entry.rmdir()
        if entry.is_symlink() or entry.exists():
            entry.unlink()
        entry.write_bytes(good)
        damage(entry, how, rng)
        assert cached_run(tmp_path) == "miss", how
    entry.rmdir()
    assert cached_run(tmp_path) == "miss"  # an entry that is a directory is skipped, and then written again
    assert cached_run(tmp_path) == "hit"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads and writes whatever the permissions say")
def test_read_only_cache_directory_and_entry(tmp_path):
    assert cached_run(tmp_path) == "miss"
    for p in [tmp_path, *tmp_path.rglob("*")]:
        p.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        assert cached_run(tmp_path) == "hit"  # read, not written
        (entry,) = cache_entries(tmp_path)
        entry.chmod(0)  # and an entry that cannot be read is a miss, compiled in memory
        assert cached_run(tmp_path) == "miss"
    finally:
        for p in [tmp_path, *tmp_path.rglob("*")]:
            p.chmod(stat.S_IRWXU)


def test_read_only_cache_directory_compiles_in_memory(tmp_path):
    """A cache directory that cannot be written (here: read-only through a file in its way, which holds for
    root too) only means compiling in memory, without a traceback."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert cached_run(blocker / "cache") == "miss"
    assert cached_run(blocker / "cache") == "miss"
    if Path("/proc/self").is_dir():  # a directory nobody can create files in, root included
        assert cached_run(Path("/proc/hyb-cache")) == "miss"


# ------------------------------------------------------------------ regressions found here
PARSE_SRC = '''
C1 = 3


def k(a, idx, alpha):
    n = a.shape[0]
    b = output_tensor((n,), a.dtype)
    hist = output_tensor((C1 + 1,), "int32")
    for i in serial(n - 1, -1, -1):
        if i >= 1 and i < n - 1:
            b[i] = alpha * (a[i - 1] - 2.0 * a[i] + a[(i + 1)])
        elif i == 0:
            b[i] = sqrt(abs(a[i])) + float64(idx[i] % 2)
        else:
            b[i] = -a[i] ** 2
        hist[idx[i] % (C1 + 1)] += 1
    return b, hist
'''


def test_regression_parsing_from_8_threads():
    # e.g. "k7.hyb:32:5: error: unexpected 'return'", "unexpected indentation", and
    # AssertionError (lark/indenter.py: assert self.paren_level >= 0) — so also compile_source, Kernel.grad().
    barrier = threading.Barrier(8)
    errors = []

    def work(t):
        barrier.wait()
        for _ in range(60):
            if errors:
                return
            try:
                mod = hyb.compile_source(PARSE_SRC, f"k{t}.hyb")
                assert list(mod.kernels) == ["k"]
            except BaseException as e:  # noqa: BLE001
                errors.append(f"{type(e).__name__}: {e}")

    ts = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errors, errors[:3]
