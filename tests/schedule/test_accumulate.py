"""Scalar accumulators summed in the tensor cell they are stored to (hyb.schedule.accumulate):
which spellings are rewritten, which are kept and why, results bit for bit those of the program,
and the contraction stages seeing the scalar spelling of a matmul as they see the tensor one."""
from __future__ import annotations

import re

import numpy as np
import pytest

import hyb
from hyb.schedule import accumulate

# every kernel takes (a, w, b, r): out[i, o] = f(init + sum_k a[i, k] * w[o, k])
SPELLINGS = '''
def tensor(a, w, b, r):
    out = output_tensor((a.shape[0], w.shape[0]), a.dtype)
    for i in range(a.shape[0]):
        for o in range(w.shape[0]):
            out[i, o] = 0.0
            for k in range(a.shape[1]):
                out[i, o] += a[i, k] * w[o, k]
    return out

def zero(a, w, b, r):
    out = output_tensor((a.shape[0], w.shape[0]), a.dtype)
    for i in range(a.shape[0]):
        for o in range(w.shape[0]):
            val = a.dtype(0)
            for k in range(a.shape[1]):
                val += a[i, k] * w[o, k]
            out[i, o] = val
    return out

def python_float(a, w, b, r):
    out = output_tensor((a.shape[0], w.shape[0]), a.dtype)
    for i in range(a.shape[0]):
        for o in range(w.shape[0]):
            val = 0.0
            for k in range(a.shape[1]):
                val += a[i, k] * w[o, k]
            out[i, o] = val
    return out

def written_sum(a, w, b, r):
    out = output_tensor((a.shape[0], w.shape[0]), a.dtype)
    for i in range(a.shape[0]):
        for o in range(w.shape[0]):
            val = a.dtype(0)
            for k in range(a.shape[1]):
                val = val + a[i, k] * w[o, k]
            out[i, o] = val
    return out

def bias(a, w, b, r):
    out = output_tensor((a.shape[0], w.shape[0]), a.dtype)
    for i in range(a.shape[0]):
        for o in range(w.shape[0]):
            val = b[o]
            for k in range(a.shape[1]):
                val += a[i, k] * w[o, k]
            out[i, o] = val
    return out

def relu(a, w, b, r):
    out = output_tensor((a.shape[0], w.shape[0]), a.dtype)
    for i in range(a.shape[0]):
        for o in range(w.shape[0]):
            val = b[o]
            for k in range(a.shape[1]):
                val += a[i, k] * w[o, k]
            out[i, o] = max(val, 0.0)
    return out

def scaled(a, w, b, r):
    out = output_tensor((a.shape[0], w.shape[0]), a.dtype)
    for i in range(a.shape[0]):
        for o in range(w.shape[0]):
            val = a.dtype(0)
            for k in range(a.shape[1]):
                val += a[i, k] * w[o, k]
            out[i, o] = val * 0.125
    return out

def residual(a, w, b, r):
    out = output_tensor((a.shape[0], w.shape[0]), a.dtype)
    for i in range(a.shape[0]):
        for o in range(w.shape[0]):
            val = a.dtype(0)
            for k in range(a.shape[1]):
                val += a[i, k] * w[o, k]
            out[i, o] = val + r[i, o]
    return out

def difference(a, w, b, r):
    out = output_tensor((a.shape[0], w.shape[0]), a.dtype)
    for i in range(a.shape[0]):
        for o in range(w.shape[0]):
            val = b[o]
            for k in range(a.shape[1]):
                val -= a[i, k] * w[o, k]
            out[i, o] = val
    return out

def float32_init(a, w, b, r):
    out = output_tensor((a.shape[0], w.shape[0]), a.dtype)
    for i in range(a.shape[0]):
        for o in range(w.shape[0]):
            val = float32(0.0)
            for k in range(a.shape[1]):
                val += a[i, k] * w[o, k]
            out[i, o] = val
    return out
'''

EPILOGUE = {"relu": lambda v, b, r: np.maximum(v, 0), "scaled": lambda v, b, r: v * 0.125,
            "residual": lambda v, b, r: v + r}
IN_ORDER = {"reassociate": False}
# (m, n, k): empty, one, fewer than a vector, not multiples of any block, a few blocks
SIZES = [(0, 5, 7), (3, 0, 4), (2, 3, 0), (1, 1, 1), (7, 7, 7), (33, 33, 33), (37, 67, 101)]
NAMES = ["zero", "python_float", "written_sum", "bias", "relu", "scaled", "residual", "difference", "float32_init"]


@pytest.fixture(scope="module")
def in_order():
    return hyb.compile_source(SPELLINGS, "spellings.hyb", schedule=IN_ORDER, threads=1)


@pytest.fixture(scope="module")
def default():
    return hyb.compile_source(SPELLINGS, "spellings.hyb", threads=1)


def args(m, n, k, dtype, seed=0):
    rng = np.random.default_rng(seed + 7 * m + 11 * n + 13 * k)
    return (rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((n, k)).astype(dtype),
            rng.standard_normal(n).astype(dtype), rng.standard_normal((m, n)).astype(dtype))


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}"))


def numpy_result(name, a, w, b, r):
    init = b if name in ("bias", "relu", "difference") else np.zeros_like(b)
    if name == "difference":
        return init - a @ w.T
    v = init + a @ w.T
    return EPILOGUE[name](v, b, r) if name in EPILOGUE else v


def accumulator_dtype(kernel, *xs) -> str:
    return next(t.dtype for t in kernel.typed(*xs).tensors.values() if t.source_name == "val")


def line_of(src: str, kernel: str, text: str) -> int:
    lines = src.splitlines()
    start = next(n for n, s in enumerate(lines) if s.startswith(f"def {kernel}("))
    return next(n for n in range(start, len(lines)) if text in lines[n]) + 1


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", NAMES)
def test_every_spelling_is_the_program_bit_for_bit(in_order, name, dtype):
    if name == "float32_init" and dtype == "float64":
        pytest.skip("a float32 accumulator of float64 values is the dtype refusal's test")
    kernel = in_order.kernels[name]
    for m, n, k in SIZES:
        xs = args(m, n, k, dtype)
        ck = kernel.compile(*xs)
        got = ck(*xs)
        same_bits(got, kernel.emulate(*xs))
        np.testing.assert_allclose(got, numpy_result(name, *xs), rtol=1e-4, atol=1e-4)
        # rewritten exactly where the accumulator has the output's dtype (a Python float's dtype
        # is the type checker's to decide)
        text = ck.inspect("schedule")
        rewritten = "accumulator `val` (line" in text and "replaced by `out[i, o]`" in text
        assert rewritten == (accumulator_dtype(kernel, *xs) == dtype), text


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_decision_names_the_lines_and_the_cell(in_order, dtype):
    xs = args(5, 6, 7, dtype)
    text = in_order.kernels["relu"].compile(*xs).inspect("schedule")
    init, store = line_of(SPELLINGS, "relu", "val = b[o]"), line_of(SPELLINGS, "relu", "out[i, o] = max")
    assert (f"accumulator `val` (line {init}) replaced by `out[i, o]` (line {store}): the sum accumulates in "
            "the stored tensor") in text


def test_the_scalar_spelling_compiles_to_the_tensor_spelling(default):
    xs = args(33, 70, 45, "float32")
    scalar, tensor = default.kernels["zero"].compile(*xs), default.kernels["tensor"].compile(*xs)
    assert (scalar.inspect("llvm").replace("zero", "K") == tensor.inspect("llvm").replace("tensor", "K"))
    same_bits(scalar(*xs), tensor(*xs))


def test_the_scalar_spelling_gets_register_blocks():
    xs = args(64, 96, 128, "float32")
    mod = hyb.compile_source(SPELLINGS, "spellings.hyb", threads=1)
    for name in ("zero", "bias", "relu", "residual"):
        ck = mod.kernels[name].compile(*xs)
        text = ck.inspect("schedule")
        assert "replaced by `out[i, o]`" in text, text
        assert re.search(r"register block \d+x\d+ of S\d+: `out` accumulated in registers", text), text
        assert "in the block" in ck.inspect("loops")
        np.testing.assert_allclose(ck(*xs), numpy_result(name, *xs), rtol=1e-4, atol=1e-4)


def test_not_in_the_original_order():
    kernel = hyb.compile_source(SPELLINGS, schedule="original").kernels["bias"]
    xs = args(7, 7, 7, "float32")
    ck = kernel.compile(*xs)
    assert "accumulator" not in ck.inspect("schedule")
    # (the products fuse into the sum's additions, FMA, in the default mode: to the last bits)
    np.testing.assert_allclose(ck(*xs), kernel.emulate(*xs), rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------------------ kept, and why
KEPT = '''
def wider(a, w):
    out = output_tensor((a.shape[0], w.shape[0]), a.dtype)
    for i in range(a.shape[0]):
        for o in range(w.shape[0]):
            val = float64(0.0)
            for k in range(a.shape[1]):
                val += a[i, k] * w[o, k]
            out[i, o] = val
    return out

def read_after(a, w):
    out = output_tensor((a.shape[0], w.shape[0]), a.dtype)
    twice = output_tensor((a.shape[0], w.shape[0]), a.dtype)
    for i in range(a.shape[0]):
        for o in range(w.shape[0]):
            val = a.dtype(0)
            for k in range(a.shape[1]):
                val += a[i, k] * w[o, k]
            out[i, o] = val
            twice[i, o] = val * 2.0
    return out, twice

def reads_target(a, w):
    out = output_tensor((a.shape[0], w.shape[0]), a.dtype)
    for i in range(a.shape[0]):
        for o in range(w.shape[0]):
            out[i, o] = a[i, 0]
    for i in range(a.shape[0]):
        for o in range(w.shape[0]):
            val = a.dtype(0)
            for k in range(a.shape[1]):
                val += a[i, k] * w[o, k] + out[i, 0]
            out[i, o] = val
    return out

def writes_target(a, w):
    out = output_tensor((a.shape[0], w.shape[0]), a.dtype)
    for i in range(a.shape[0]):
        for o in range(w.shape[0]):
            val = a.dtype(0)
            for k in range(a.shape[1]):
                val += a[i, k] * w[o, k]
                out[i, 0] = a[i, k]
            out[i, o] = val
    return out

def store_reads_target(a, w):
    out = output_tensor((a.shape[0], w.shape[0]), a.dtype)
    for i in range(a.shape[0]):
        for o in range(w.shape[0]):
            out[i, o] = a[i, 0]
            val = a.dtype(0)
            for k in range(a.shape[1]):
                val += a[i, k] * w[o, k]
            out[i, o] = val + out[i, o]
    return out

def running_sum(a, w):
    out = output_tensor((a.shape[0], a.shape[1]), a.dtype)
    for i in range(a.shape[0]):
        val = a.dtype(0)
        for k in range(a.shape[1]):
            val += a[i, k]
            out[i, k] = val
    return out

def gathered(a, w):
    out = output_tensor((a.shape[0], w.shape[0]), a.dtype)
    for i in range(a.shape[0]):
        for o in range(w.shape[0]):
            val = a.dtype(0)
            for k in range(a.shape[1]):
                val += a[i, k] * w[o, k]
            out[(i + 1) % a.shape[0], o] = val
    return out

def row_max(a, w):
    out = output_tensor((a.shape[0],), a.dtype)
    for i in range(a.shape[0]):
        m = a[i, 0]
        for k in range(a.shape[1]):
            m = max(m, a[i, k])
        out[i] = m
    return out

def row_sum(a, w):
    out = output_tensor((a.shape[0],), a.dtype)
    for i in range(a.shape[0]):
        s = a.dtype(0)
        for k in range(a.shape[1]):
            s += a[i, k] * a[i, k]
        out[i] = s
    return out

def product(a, w):
    out = output_tensor((a.shape[0],), a.dtype)
    for i in range(a.shape[0]):
        p = a.dtype(1)
        for k in range(a.shape[1]):
            p = p * a[i, k]
        out[i] = p
    return out
'''
KEPT_WHY = {
    "wider": "accumulator `val` (line {val}) kept: its dtype float64 differs from `out`'s float32",
    "read_after": "accumulator `val` (line {val}) kept: `val` is read elsewhere too (line {twice})",
    "reads_target": "accumulator `val` (line {val}) kept: the loop reads `out`",
    "writes_target": "accumulator `val` (line {val}) kept: the loop writes `out`",
    "store_reads_target": "accumulator `val` (line {val}) kept: its store reads `out` too",
    "running_sum": "accumulator `val` (line {val}) kept: it is stored into `out` inside the loop that updates it "
                   "(line {stored})",
    "row_max": "accumulator `m` (line {m}) kept: a running maximum along a row (line {loop}), each row read for "
               "this cell alone: it stays in a scalar",
    "row_sum": "accumulator `s` (line {s}) kept: a sum along a row (line {loop}), each row read for this cell alone",
    "product": None,  # no sum, maximum or minimum: not an accumulator of this stage's
}


@pytest.mark.parametrize("name", list(KEPT_WHY))
def test_kept_with_the_reason(name):
    kernel = hyb.compile_source(KEPT, "kept.hyb", schedule=IN_ORDER, threads=1).kernels[name]
    xs = args(6, 5, 9, "float32")[:2]
    typed = kernel.typed(*xs)
    new, decisions = accumulate.rewrite(typed)
    assert new is typed
    why = KEPT_WHY[name]
    if why is None:
        assert decisions == ()
    else:
        lines = {"val": "val = ", "twice": "twice[i, o] = val", "stored": "out[i, k] = val", "m": "m = a[i, 0]",
                 "s": "s = a.dtype(0)", "loop": "for k in range(a.shape[1]):"}
        at = {key: line_of(KEPT, name, text) for key, text in lines.items() if text in _source(KEPT, name)}
        assert len(decisions) == 1 and decisions[0].startswith(why.format(**at)), decisions
    ck = kernel.compile(*xs)
    assert (why is None) or why.format(**at)[:40] in ck.inspect("schedule")
    got, want = ck(*xs), kernel.emulate(*xs)
    for g, e in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        same_bits(g, e)


def _source(src: str, kernel: str) -> str:
    start = src.index(f"def {kernel}(")
    end = src.find("\ndef ", start + 1)
    return src[start:end if end >= 0 else len(src)]


# ---------------------------------------------------------------- maxima, minima, nests, copies
MORE = '''
def column_max(a):
    out = output_tensor((a.shape[1],), a.dtype)
    for j in range(a.shape[1]):
        m = a[0, j]
        for i in range(a.shape[0]):
            m = max(m, a[i, j])
        out[j] = m
    return out

def min_plus(a, w):
    out = output_tensor((a.shape[0], w.shape[0]), a.dtype)
    for i in range(a.shape[0]):
        for o in range(w.shape[0]):
            m = a[i, 0] + w[o, 0]
            for k in range(a.shape[1]):
                m = min(m, a[i, k] + w[o, k])
            out[i, o] = m
    return out

def two_sums(a, w):
    out = output_tensor((a.shape[0], w.shape[0]), a.dtype)
    norms = output_tensor((a.shape[0],), a.dtype)
    for i in range(a.shape[0]):
        s = a.dtype(0)
        for o in range(w.shape[0]):
            val = a.dtype(0)
            for k in range(a.shape[1]):
                val += a[i, k] * w[o, k]
            out[i, o] = val
            s += w[o, 0]
        norms[i] = s
    return out, norms

def reused(a, w):
    x = output_tensor((a.shape[0],), a.dtype)
    y = output_tensor((a.shape[0],), a.dtype)
    for i in range(a.shape[0]):
        val = a.dtype(0)
        for k in range(a.shape[1]):
            val += a[i, k] * w[0, k]
        x[i] = val
        val = a.dtype(0)
        for k in range(a.shape[1]):
            val += a[i, k] * a[i, k] * w[0, k]
        y[i] = val
    return x, y

def copied(a, w):
    t = allocate((a.shape[0], w.shape[0]), a.dtype)
    y = output_tensor((a.shape[0], w.shape[0]), a.dtype)
    for i in range(a.shape[0]):
        for o in range(w.shape[0]):
            for k in range(a.shape[1]):
                t[i, o] += a[i, k] * w[o, k]
    for i in range(a.shape[0]):
        for o in range(w.shape[0]):
            y[i, o] = t[i, o]
    return y

def copied_late(a, w):
    t = allocate((a.shape[0], w.shape[0]), a.dtype)
    y = output_tensor((a.shape[0], w.shape[0]), a.dtype)
    for i in range(a.shape[0]):
        y[i, 0] = a[i, 0]
    for i in range(a.shape[0]):
        for o in range(w.shape[0]):
            for k in range(a.shape[1]):
                t[i, o] += a[i, k] * w[o, k]
    for i in range(a.shape[0]):
        for o in range(w.shape[0]):
            y[i, o] = t[i, o]
    return y

def shared_loop(a, w):
    c = output_tensor((a.shape[0], 2), a.dtype)
    for i in range(a.shape[0]):
        acc = a.dtype(0)
        n = a.dtype(0)
        for k in range(a.shape[1]):
            acc += a[i, k]
            n += w[0, k]
        c[i, 0] = acc
        c[i, 1] = acc / n
    return c

def one_store(a, w):
    c = output_tensor((a.shape[0],), a.dtype)
    for i in range(a.shape[0]):
        acc = a.dtype(0)
        n = a.dtype(0)
        for k in range(a.shape[1]):
            acc += a[i, k]
            n += w[0, k]
        c[i] = acc + n
    return c

def masked(a, w):
    out = output_tensor((a.shape[0], w.shape[0]), a.dtype)
    seen = output_tensor((a.shape[0], w.shape[0]), a.dtype)
    for i in range(a.shape[0]):
        for o in range(w.shape[0]):
            val = a.dtype(0)
            seen[i, o] = 1.0
            for k in range(a.shape[1]):
                if a[i, k] > 0.0:
                    val += a[i, k] * w[o, k]
            seen[i, o] += 1.0
            out[i, o] = val
    return out, seen
'''
MORE_DECISIONS = {
    "column_max": ["accumulator `m` (line 5) replaced by `out[j]` (line 8): the maximum accumulates"],
    "min_plus": ["accumulator `m` (line 15) replaced by `out[i, o]` (line 18): the minimum accumulates"],
    "two_sums": ["accumulator `val` (line 27) replaced by `out[i, o]` (line 30)",
                 "accumulator `s` (line 25) replaced by `norms[i]` (line 32)"],
    "reused": ["accumulator `val` (line 39) replaced by `x[i]` (line 42)",
               "accumulator `val` (line 43) replaced by `y[i]` (line 46)"],
    "copied": ["temporary `t` computed in `y` directly: its copy (line 58) is gone"],
    "copied_late": ["temporary `t` kept: `y` is used before the copy"],
    # (`acc` is read by the store that ends `n`'s segment: not its own, so `acc` stays)
    "shared_loop": ["accumulator `acc` (line 78) kept: `acc` is read elsewhere too (line 84)",
                    "accumulator `n` (line 79) kept: a statement before the store (line 83) writes `c`"],
    # (one store ends two segments: only the first is moved into the cell)
    "one_store": ["accumulator `acc` (line 90) replaced by `c[i]` (line 95)",
                  "accumulator `n` (line 91) kept: its store (line 95) also ends another accumulator's"],
    "masked": ["accumulator `val` (line 103) replaced by `out[i, o]` (line 109)"],
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", list(MORE_DECISIONS))
def test_more_forms_bit_for_bit(name, dtype):
    kernel = hyb.compile_source(MORE, "more.hyb", schedule=IN_ORDER, threads=1).kernels[name]
    for m, n, k in [(0, 3, 4), (1, 1, 1), (7, 7, 7), (33, 40, 70)]:
        a, w = args(m, n, k, dtype)[:2]
        xs = (a,) if name == "column_max" else (a, w)
        if (name == "column_max" and m == 0) or (name == "min_plus" and k == 0):
            continue  # (they read a[0, j], a[i, 0])
        ck = kernel.compile(*xs)
        text = ck.inspect("schedule")
        for d in MORE_DECISIONS[name]:
            assert d in text, text
        got, want = ck(*xs), kernel.emulate(*xs)
        for g, e in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            same_bits(g, e)
    if name == "copied":
        assert '%"t_t"' not in ck.inspect("llvm")


def test_a_min_plus_product_gets_register_blocks():
    kernel = hyb.compile_source(MORE, "more.hyb", threads=1).kernels["min_plus"]
    a, w = args(64, 96, 128, "float32")[:2]
    ck = kernel.compile(a, w)
    assert re.search(r"register block \d+x\d+ of S\d+: `out` accumulated in registers", ck.inspect("schedule"))
    np.testing.assert_array_equal(ck(a, w), (a[:, None, :] + w[None, :, :]).min(axis=2))


def test_shape_generic_code():
    kernel = hyb.compile_source(SPELLINGS, "spellings.hyb", schedule=IN_ORDER, shapes="generic",
                                threads=1).kernels["relu"]
    for m, n, k in [(5, 6, 7), (33, 17, 40), (1, 1, 1), (0, 2, 3)]:
        xs = args(m, n, k, "float32")
        same_bits(kernel(*xs), kernel.emulate(*xs))
