"""Loops that act only where a comparison holds (top-k and its kin): searched a vector at a time
(hyb.schedule.guarded, the LLVM back end's scan), bit for bit the loop as written."""
import numpy as np
import pytest

import hyb

# top-k as a user writes it: each element passed down a sorted list, swapping where it is larger
TOPK = '''
def topk(x):
    n = x.shape[0]
    d = x.shape[1]
    vals = output_tensor((n, K), x.dtype)
    idx = output_tensor((n, K), "int32")
    for i in range(n):
        for t in range(K):
            vals[i, t] = LOW
            idx[i, t] = -1
        for j in range(d):
            v = x[i, j]
            c = j
            for t in range(K):
                if v OP vals[i, t]:
                    tv = vals[i, t]
                    vals[i, t] = v
                    v = tv
                    tc = idx[i, t]
                    idx[i, t] = c
                    c = tc
    return vals, idx
'''
# the same, testing the last kept value first
TOPK_FIRST = '''
def topk(x):
    n = x.shape[0]
    d = x.shape[1]
    vals = output_tensor((n, K), x.dtype)
    idx = output_tensor((n, K), "int32")
    for i in range(n):
        for t in range(K):
            vals[i, t] = LOW
            idx[i, t] = -1
        for j in range(d):
            if x[i, j] OP vals[i, K - 1]:
                v = x[i, j]
                c = j
                for t in range(K):
                    if v OP vals[i, t]:
                        tv = vals[i, t]
                        vals[i, t] = v
                        v = tv
                        tc = idx[i, t]
                        idx[i, t] = c
                        c = tc
    return vals, idx
'''
LOWS = {"float32": "-3.0e38", "float64": "-1.0e300", "int32": "-2147483648", "int8": "-128", "uint8": "0"}
WIDTHS = [0, 1, 7, 16, 127, 128, 129, 300, 1000]
DECISION = "a vector search for the next such iteration"


def topk_kernel(src=TOPK, k=8, dtype="float32", op=">", **options):
    low = LOWS[dtype] if op in (">", ">=") else LOWS[dtype].lstrip("-")
    if op in ("<", "<="):
        low = {"float32": "3.0e38", "float64": "1.0e300", "int32": "2147483647", "int8": "127", "uint8": "255"}[dtype]
    text = src.replace("K", str(k)).replace("LOW", low).replace("OP", op)
    return hyb.compile_source(text, **options).topk


def data(n, d, dtype, seed):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        x = rng.standard_normal((n, d)).astype(dtype)
        if n > 3 and d:
            x[1] = np.round(x[1])                      # ties
            x[2, rng.integers(0, d):] = np.nan         # NaNs: never taken
            x[3] = np.arange(d)                        # every element beats the kept ones
        return x
    info = np.iinfo(dtype)
    x = rng.integers(max(info.min, -100), min(info.max, 100), (n, d)).astype(dtype)
    if n > 3 and d:
        x[3] = np.arange(d) % 90
    return x


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    if a.dtype.kind == "f":
        np.testing.assert_array_equal(a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}"))
    else:
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", list(LOWS))
@pytest.mark.parametrize("src", [TOPK, TOPK_FIRST], ids=["swaps", "last kept first"])
def test_top_k_is_the_written_loop_bit_for_bit(src, dtype):
    k = topk_kernel(src, 5, dtype)
    for seed, d in enumerate(WIDTHS):
        x = data(6, d, dtype, seed)
        for g, w in zip(k(x), k.emulate(x)):
            same_bits(g, w)
    assert DECISION in k.compile(data(2, 300, dtype, 0)).inspect("schedule")


@pytest.mark.parametrize("op", [">", ">=", "<", "<="])
@pytest.mark.parametrize("kk", [1, 3, 16])
def test_every_comparison_and_k(op, kk):
    k = topk_kernel(TOPK, kk, "float32", op)
    for seed, d in enumerate((129, 400)):
        x = data(5, d, "float32", seed + 10)
        x[0] = np.round(x[0] * 2)  # many equal values: `>=` and `<=` take the later ones
        for g, w in zip(k(x), k.emulate(x)):
            same_bits(g, w)


def test_top_k_matches_numpy():
    k = topk_kernel(TOPK, 8, "float32")
    x = np.random.default_rng(3).standard_normal((50, 1000)).astype(np.float32)
    vals, idx = k(x)
    order = np.argsort(-x, axis=1, kind="stable")[:, :8]
    np.testing.assert_array_equal(idx, order)
    np.testing.assert_array_equal(vals, np.take_along_axis(x, order, 1))


def test_a_running_count_of_records():
    src = '''
def records(x):
    n = x.shape[0]
    count = output_tensor((n,), "int32")
    for i in range(n):
        best = x[i, 0]
        m = 0
        for j in range(x.shape[1]):
            if x[i, j] * 2.0 > best:
                best = x[i, j] * 2.0
                m = m + 1
        count[i] = m
    return count
'''
    k = hyb.compile_source(src).records
    for d in (1, 140, 999):
        x = np.random.default_rng(d).standard_normal((9, d)) * 10
        x[0] = np.arange(d)
        np.testing.assert_array_equal(k(x), k.emulate(x))
    assert DECISION in k.compile(np.zeros((2, 200))).inspect("schedule")


def test_on_threads_and_for_every_shape():
    for options in ({"threads": 2}, {"shapes": "generic"}):
        k = topk_kernel(TOPK, 4, "float64", **options)
        for n, d in ((300, 500), (7, 129), (3, 5), (0, 9), (4, 0)):
            x = data(n, d, "float64", n + d)
            for g, w in zip(k(x), k.emulate(x)):
                same_bits(g, w)


NOT_GUARDED = {
    # the compared value reads what the loop writes
    "value written": ("v = x[i, j] + vals[i, 0]", "v > vals[i, t]"),
    # the compared value reads the inner loop's variable
    "value along t": ("v = x[i, j]", "v + t > vals[i, t]"),
    # the bound moves with the loop
    "bound along j": ("v = x[i, j]", "v > vals[i, j % 8]"),
    # the prelude computes something that could fail
    "prelude divides": ("v = x[i, j] // 3", "v > vals[i, t]"),
    # strided values
    "strided": ("v = x[j % n, i]", "v > vals[i, t]"),
    # a bound the loop never writes (as in a conditional sum): values may pass all along
    "bound never written": ("v = x[i, j]", "v > x[i, t]"),
}


@pytest.mark.parametrize("case", list(NOT_GUARDED))
def test_other_loops_run_as_written(case):
    prelude, cond = NOT_GUARDED[case]
    src = TOPK.replace("v = x[i, j]", prelude).replace("v OP vals[i, t]", cond)
    k = topk_kernel(src, 8, "int32")
    x = data(6, 200, "int32", 1)
    assert DECISION not in k.compile(x).inspect("schedule")
    for g, w in zip(k(x), k.emulate(x)):
        same_bits(g, w)


def test_a_scalar_from_outside_the_loop_is_no_prelude():
    src = '''
def f(x):
    n = x.shape[0]
    out = output_tensor((n,), x.dtype)
    for i in range(n):
        best = x[i, 0]
        v = x[i, 0]
        for j in range(x.shape[1]):
            v = x[i, j]
            if v > best:
                best = v
        out[i] = best + v
    return out
'''
    k = hyb.compile_source(src).f
    x = data(4, 200, "float32", 2)
    assert DECISION not in k.compile(x).inspect("schedule")
    np.testing.assert_array_equal(k(x), k.emulate(x))


def test_program_order_keeps_the_loop():
    k = topk_kernel(TOPK, 4, "float32", schedule="original")
    x = data(4, 300, "float32", 5)
    assert DECISION not in k.compile(x).inspect("schedule")
    for g, w in zip(k(x), k.emulate(x)):
        same_bits(g, w)


@pytest.mark.parametrize("change", [("v = x[i, j]", "v = x[i, j + 1]"), ("vals[i, t]:", "vals[i, t + 1]:")],
                         ids=["value past the end", "bound past the end"])
def test_a_subscript_past_the_end_is_reported_as_the_loop_reports_it(change):
    k = topk_kernel(TOPK.replace(*change), 8, "float32")
    x = data(3, 300, "float32", 7)
    with pytest.raises(hyb.HybridIndexError) as got:
        k(x)
    with pytest.raises(hyb.HybridIndexError) as want:
        k.emulate(x)
    assert str(got.value) == str(want.value)
