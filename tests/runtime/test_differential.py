"""Differential tests: compiled kernel == reference interpreter == plain NumPy.

Every case is a kernel (``.hyb`` text through ``hyb.compile_source``, an ``@hyb.hybrid``
function, or an example file), an argument maker, a NumPy reference and the shapes and
dtypes to run it on.  Each (case, shape, dtype) runs the kernel compiled and emulated on
copies of the same arguments and compares both with the reference.
"""
from __future__ import annotations

import re
import os
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import hyb
from hyb.runtime.compiler import CompiledKernel

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

FLOATS = ["float32", "float64"]
INTS = ["int32", "int64"]
ALL = FLOATS + INTS

SOURCE = '''
SCALE = 3
SHIFT = 2
HALF = 0.5

def ew1(a, b):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] * b[i] - a[i]
    return c


def ew3(a, b):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            for k in range(a.shape[2]):
                c[i, j, k] = a[i, j, k] * b[i, j, k] + a[i, j, k]
    return c


def transpose(a):
    c = output_tensor((a.shape[1], a.shape[0]), a.dtype)
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            c[j, i] = a[i, j]
    return c


def row_sum(a):
    c = output_tensor((a.shape[0],), a.dtype)
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            c[i] += a[i, j]
    return c


def tril_matvec(m, x):
    y = output_tensor((m.shape[0],), m.dtype)
    for i in range(m.shape[0]):
        for j in range(i + 1):
            y[i] += m[i, j] * x[j]
    return y


def strict_upper_matvec(m, x):
    y = output_tensor((m.shape[0],), m.dtype)
    for i in range(m.shape[0]):
        for j in range(i + 1, m.shape[1]):
            y[i] = y[i] + m[i, j] * x[j]
    return y


def stencil1d(a):
    b = output_tensor(a.shape, a.dtype)
    for i in range(1, a.shape[0] - 1):
        b[i] = (a[i - 1] + a[i] + a[i + 1]) / 3
    return b


def jacobi2d(a):
    b = output_tensor(a.shape, a.dtype)
    for i in range(1, a.shape[0] - 1):
        for j in range(1, a.shape[1] - 1):
            b[i, j] = 0.2 * (a[i, j] + a[i - 1, j] + a[i + 1, j] + a[i, j - 1] + a[i, j + 1])
    return b


def prefix_sum(a):
    c = output_tensor(a.shape, a.dtype)
    s = 0.0
    for i in range(a.shape[0]):
        s += a[i]
        c[i] = s
    return c


def row_sum_local(a):
    c = output_tensor((a.shape[0],), a.dtype)
    for i in range(a.shape[0]):
        s = 0.0
        for j in range(a.shape[1]):
            s += a[i, j]
        c[i] = s
    return c


def row_scratch(a):
    c = output_tensor(a.shape, a.dtype)
    for i in parallel(a.shape[0]):
        t = allocate((2,), a.dtype)
        for j in range(a.shape[1]):
            t[0] += a[i, j]
            t[1] = max(t[1], a[i, j])
        for j in range(a.shape[1]):
            c[i, j] = a[i, j] * 2 - t[0] + t[1]
    return c


def branches(a, b):
    c = output_tensor(a.shape, a.dtype)
    d = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        if a[i] > 2:
            c[i] = a[i]
        elif a[i] < -2 or b[i] == 0:
            c[i] = -1
        else:
            c[i] = a[i] * 2
        d[i] = a[i] if i % 2 == 0 else b[i]
        if 0 <= b[i] < 3 and not a[i] >= b[i]:
            d[i] += 100
    return c, d


def guard_affine(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            if i == j:
                c[i, j] = 1
            elif i < j and j < a.shape[0]:
                c[i, j] = a[i, j]
            else:
                c[i, j] = a[i, j] if j > 0 else -a[i, j]
    return c


def suffix_sum_reverse(a):
    c = output_tensor(a.shape, a.dtype)
    s = 0.0
    for i in range(a.shape[0] - 1, -1, -1):
        s += a[i]
        c[i] = s
    return c


def reverse_step2(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(len(a) - 1, -1, -2):
        c[len(a) - 1 - i] = a[i]
    return c


def int_divmod(a, b):
    q = output_tensor(a.shape, a.dtype)
    r = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        q[i] = a[i] // b[i]
        r[i] = a[i] % b[i]
    return q, r


def int_divmod_const(a):
    q = output_tensor(a.shape, a.dtype)
    r = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        q[i] = a[i] // 3 + a[i] // -4
        r[i] = a[i] % 3 + a[i] % -4
    return q, r


def index_divmod(a):
    c = output_tensor((a.shape[0] * 2,), a.dtype)
    for i in range(a.shape[0] * 2):
        c[i] = a[i // 2] * (i % 2 + 1)
    return c


def temp_outside(a):
    t = allocate(a.shape, a.dtype)
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        t[i] = a[i] * 2
    for i in range(a.shape[0]):
        c[i] = t[a.shape[0] - 1 - i] + t[i]
    return c


def temp_inside(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        t = allocate((a.shape[1],), a.dtype)
        acc = allocate((1,), a.dtype)
        for j in range(a.shape[1]):
            t[j] = a[i, j] * a[i, j]
            acc[0] += a[i, j]
        for j in range(a.shape[1]):
            c[i, j] = t[a.shape[1] - 1 - j] + acc[0]
    return c


def int_times_half(a):
    c = output_tensor(a.shape, "float32")
    for i in range(a.shape[0]):
        c[i] = a[i] * 0.5
    return c


def mixed_float(a, b):
    c = output_tensor(a.shape, "float64")
    d = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] + b[i]
        d[i] = a[i] + b[i]
    return c, d


def mixed_int(a, b):
    c = output_tensor(a.shape, "int64")
    for i in range(a.shape[0]):
        c[i] = a[i] + b[i] * 3
    return c


def casts(a):
    c = output_tensor(a.shape, "float32")
    d = output_tensor(a.shape, "int32")
    for i in range(a.shape[0]):
        c[i] = float32(a[i]) / 4
        d[i] = int32(a[i]) * 2
    return c, d


def guarded_shift(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i - 1] if i > 0 else a[i]
        if i > 0 and a[i - 1] > 0:
            c[i] += 1
    return c


def rotate(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[(i + 3) % a.shape[0]]
    return c


def strided(a):
    c = output_tensor((a.shape[0] // 2,), a.dtype)
    for i in range(a.shape[0] // 2):
        c[i] = a[2 * i] - a[i * 2 + 1] * 3 + a[-1 * i + a.shape[0] - 1]
    return c


def recur_fwd(a):
    c = output_tensor(a.shape, a.dtype)
    c[0] = a[0]
    for i in range(1, a.shape[0]):
        c[i] = c[i - 1] * 0.5 + a[i]
    return c


def recur_bwd(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0] - 1, -1, -1):
        c[i] = a[i]
    for i in range(a.shape[0] - 2, -1, -1):
        c[i] = c[i + 1] * 0.5 + c[i]
    return c


def seidel(a):
    for i in range(1, a.shape[0] - 1):
        a[i] = (a[i - 1] + a[i] + a[i + 1]) / 3
    return a


def elif_affine(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        if i < 3:
            c[i] = a[i]
        elif i < 5:
            c[i] = a[i] * 2
        elif 7 <= i < 9 or i == 11:
            c[i] = a[i] * 3
        else:
            c[i] = -a[i]
    return c


def checkerboard(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            if (i + j) % 2 == 0:
                c[i, j] = a[i, j]
            elif (i - 5) % 3 == 1 or (j - 7) // 2 == -2:
                c[i, j] = 2 * a[i, j]
    return c


def tri_bounds(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        for j in range(i, a.shape[1]):
            c[i, j] = a[i, j] + i - j
        for j in range(2 * i, a.shape[1], 3):
            c[i, j] += 1
    return c


def neg_step3(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0] - 1, 0, -3):
        c[i] = a[i] + a[i - 1]
    return c


def scalar_branch(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        s = 0.0
        if a[i] > 0:
            s = a[i]
        else:
            s = -a[i]
        c[i] = s
    return c


def counter(a):
    c = output_tensor(a.shape, "int64")
    k = 0
    for i in range(a.shape[0]):
        if a[i] > 0:
            k += 1
        c[i] = k
    return c


def true_div_int(a, b):
    c = output_tensor(a.shape, "float64")
    for i in range(a.shape[0]):
        c[i] = a[i] / b[i]
    return c


def int_wrap(a, b):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] * b[i] + 1
    return c


def weak_literals(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] * 0.1 + 0.3
    return c


def mixed_cmp(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] if a[i] > 0.5 else -a[i] * 2
    return c


def nan_compare(a):
    c = output_tensor(a.shape, "int32")
    for i in range(a.shape[0]):
        c[i] = ((1 if a[i] != a[i] else 0) + (2 if not (a[i] < 0) else 0) + (4 if a[i] == a[i] else 0)
                + (8 if a[i] >= 1 or a[i] <= -1 else 0))
    return c


def shifted_readback(a):
    c = output_tensor(a.shape, a.dtype)
    d = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] * a[i]
    for i in range(a.shape[0] - 1):
        d[i] = c[i + 1] - c[i]
    return d


def empty_range_and_attrs(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(5, 2):
        c[i] = a[i]
    for i in range(a.shape[0]):
        c[i] = a[i] + a.ndim + len(a)
    return c


def band_guard(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            if j >= i - 2 and j <= i + 2 and (i + 2 * j) % 3 != 1:
                c[i, j] = a[i, j] + 1
            if j > 3:
                c[i, j] += 10
    return c


def bool_values(a):
    c = output_tensor(a.shape, "int32")
    d = output_tensor(a.shape, "float32")
    for i in range(a.shape[0]):
        c[i] = a[i] > 0
        d[i] = float32(a[i] > 0) + int32(a[i] < 0) * 2 + (a[i] if i > 2 else 0.5)
    return c, d


def no_loops(a):
    c = output_tensor((2,), a.dtype)
    c[0] = a[0] + a[a.shape[0] - 1]
    c[1] = a[0] * a[a.shape[0] - 1]
    return c


def ew4(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            for k in range(a.shape[2]):
                for m in range(a.shape[3]):
                    c[i, j, k, m] = a[i, j, k, m] * (i + 2 * j + 3 * k + 4 * m)
    return c


def module_constants(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0] - SHIFT):
        c[i] = a[i + SHIFT] * SCALE + a[i] * HALF
    return c
'''

MOD = hyb.compile_source(SOURCE, "differential.hyb")


@hyb.hybrid
def ew2(a, b):
    c = output_tensor(a.shape, a.dtype)  # noqa: F821
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            c[i, j] = a[i, j] - b[i, j] * 3
    return c


@hyb.hybrid
def broadcast_row(a, b):
    c = output_tensor(a.shape, a.dtype)  # noqa: F821
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            c[i, j] = a[i, j] + b[j]
    return c


@hyb.hybrid
def matmul_fn(a, b):
    c = output_tensor((a.shape[0], b.shape[1]), a.dtype)  # noqa: F821
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            for k in range(a.shape[1]):
                c[i, j] += a[i, k] * b[k, j]
    return c


@hyb.hybrid
def two_outputs(a, b):
    c = output_tensor(a.shape, a.dtype)  # noqa: F821
    d = output_tensor(a.shape, a.dtype)  # noqa: F821
    for i in range(a.shape[0]):
        c[i] = a[i] + b[i]
        d[i] = a[i] - b[i]
    return c, d


@hyb.hybrid
def inplace(a, b):
    for i in range(a.shape[0]):
        a[i] = a[i] * 2 + b[i]
    return a


@hyb.hybrid
def inplace_and_output(a, b):
    c = output_tensor(a.shape, a.dtype)  # noqa: F821
    for i in range(len(a)):
        c[i] = a[i]
        a[i] = a[i] + b[i]
    return c, a


@hyb.hybrid
def step2(a):
    c = output_tensor(a.shape, a.dtype)  # noqa: F821
    for i in range(0, a.shape[0], 2):
        c[i] = a[i]
    for i in range(1, a.shape[0], 2):
        c[i] = -a[i]
    return c


@hyb.hybrid
def step3_offset(a):
    c = output_tensor(a.shape, a.dtype)  # noqa: F821
    for i in range(2, a.shape[0], 3):
        c[i] = a[i] + a[i - 2]
    return c


# ------------------------------------------------------------------ arguments and references
def rand(rng, shape, dtype, lo=-1.0, hi=1.0):
    if np.dtype(dtype).kind == "f":
        return rng.uniform(lo, hi, size=shape).astype(dtype)
    return rng.integers(int(lo) if lo <= -2 else -9, int(hi) if hi >= 2 else 10, size=shape).astype(dtype)


def same(k):
    """k arguments of the case's shape and dtype."""
    return lambda rng, shape, dtype: [rand(rng, shape, dtype) for _ in range(k)]


def positive(rng, shape, dtype):
    if np.dtype(dtype).kind == "f":
        return [rng.uniform(0.5, 1.5, size=shape).astype(dtype)]
    return [rng.integers(0, 10, size=shape).astype(dtype)]


def stencil1d_ref(a):
    b = np.zeros_like(a)
    if a.shape[0] > 2:
        b[1:-1] = (a[:-2] + a[1:-1] + a[2:]) / a.dtype.type(3)
    return b


def jacobi2d_ref(a):
    b = np.zeros_like(a)
    b[1:-1, 1:-1] = a.dtype.type(0.2) * (a[1:-1, 1:-1] + a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:])
    return b


def branches_ref(a, b):
    c = np.where(a > 2, a, np.where((a < -2) | (b == 0), -1, a * 2)).astype(a.dtype)
    i = np.arange(a.shape[0])
    d = np.where(i % 2 == 0, a, b).astype(a.dtype)
    d = d + np.where((0 <= b) & (b < 3) & ~(a >= b), 100, 0).astype(a.dtype)
    return c, d


def guard_affine_ref(a):
    n, m = a.shape
    i, j = np.meshgrid(np.arange(n), np.arange(m), indexing="ij")
    other = np.where(j > 0, a, -a)
    return np.where(i == j, 1, np.where((i < j) & (j < n), a, other)).astype(a.dtype)


def reverse_step2_ref(a):
    n = a.shape[0]
    c = np.zeros_like(a)
    i = np.arange(n - 1, -1, -2)
    c[n - 1 - i] = a[i]
    return c


def step3_ref(a):
    c = np.zeros_like(a)
    c[2::3] = a[2::3] + a[0:-2:3][:len(a[2::3])]
    return c


def divmod_args(rng, shape, dtype):
    a = rng.integers(-50, 50, size=shape).astype(dtype)
    b = rng.integers(-7, 8, size=shape).astype(dtype)
    if b.size:
        b.flat[0] = 0
    return [a, b]


def divmod_extreme_args(rng, shape, dtype):
    info = np.iinfo(dtype)
    a = np.array([info.min, info.min, info.max, info.min, 7, -7, 0, info.max, info.min + 1], dtype)
    b = np.array([-1, 1, -1, 0, -1, -1, -1, info.min, info.max], dtype)
    return [np.resize(a, shape), np.resize(b, shape)]


def divmod_ref(a, b):
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.floor_divide(a, b), np.mod(a, b)


def divmod_const_ref(a):
    t = a.dtype.type
    return (np.floor_divide(a, t(3)) + np.floor_divide(a, t(-4)), np.mod(a, t(3)) + np.mod(a, t(-4)))


def temp_inside_ref(a):
    return (a * a)[:, ::-1] + a.sum(axis=1, keepdims=True, dtype=a.dtype)


def cumsum64(a):
    return np.cumsum(a.astype(np.float64)).astype(a.dtype)


def mixed_float_args(rng, shape, dtype):
    return [rand(rng, shape, "float32"), rand(rng, shape, "float64")]


def mixed_int_args(rng, shape, dtype):
    return [rand(rng, shape, "int64", -1000, 1000), rand(rng, shape, "int32", -1000, 1000)]


def matmul_args(rng, shape, dtype):
    n, m, p = shape
    return [rand(rng, (n, m), dtype), rand(rng, (m, p), dtype)]


def matvec_args(rng, shape, dtype):
    return [rand(rng, shape, dtype), rand(rng, shape[:1], dtype)]


def broadcast_args(rng, shape, dtype):
    return [rand(rng, shape, dtype), rand(rng, shape[1:], dtype)]


def guarded_shift_ref(a):
    c = a.copy()
    c[1:] = a[:-1] + (a[:-1] > 0).astype(a.dtype)
    return c


def strided_ref(a):
    h = a.shape[0] // 2
    i = np.arange(h)
    return a[2 * i] - a[2 * i + 1] * a.dtype.type(3) + a[a.shape[0] - 1 - i]


def recur_fwd_ref(a):
    c = np.zeros_like(a)
    c[0] = a[0]
    for i in range(1, a.shape[0]):
        c[i] = c[i - 1] * 0.5 + a[i]
    return c


def recur_bwd_ref(a):
    c = a.copy()
    for i in range(a.shape[0] - 2, -1, -1):
        c[i] = c[i + 1] * 0.5 + c[i]
    return c


def seidel_ref(a):
    a = a.copy()
    for i in range(1, a.shape[0] - 1):
        a[i] = (a[i - 1] + a[i] + a[i + 1]) / 3
    return a


def elif_affine_ref(a):
    i = np.arange(a.shape[0])
    return np.select([i < 3, i < 5, ((7 <= i) & (i < 9)) | (i == 11)], [a, a * 2, a * 3], -a).astype(a.dtype)


def checkerboard_ref(a):
    i, j = np.meshgrid(np.arange(a.shape[0]), np.arange(a.shape[1]), indexing="ij")
    second = ((i - 5) % 3 == 1) | ((j - 7) // 2 == -2)
    return np.where((i + j) % 2 == 0, a, np.where(second, 2 * a, 0)).astype(a.dtype)


def tri_bounds_ref(a):
    c = np.zeros_like(a)
    for i in range(a.shape[0]):
        for j in range(i, a.shape[1]):
            c[i, j] = a[i, j] + i - j
        for j in range(2 * i, a.shape[1], 3):
            c[i, j] += 1
    return c


def neg_step3_ref(a):
    c = np.zeros_like(a)
    for i in range(a.shape[0] - 1, 0, -3):
        c[i] = a[i] + a[i - 1]
    return c


def true_div_args(rng, shape, dtype):
    a, b = rng.integers(-9, 10, size=shape).astype(dtype), rng.integers(-3, 4, size=shape).astype(dtype)
    if a.size:
        a.flat[0] = b.flat[0] = 0
    return [a, b]


def true_div_ref(a, b):
    with np.errstate(divide="ignore", invalid="ignore"):
        return a / b


def wrap_args(rng, shape, dtype):
    info = np.iinfo(dtype)
    return [rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True),
            rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)]


def special_floats(rng, shape, dtype):
    a = np.array([np.nan, -1.0, 0.0, -0.0, 1.0, np.inf, -np.inf, 0.5, -2.5], dtype)
    return [np.resize(a, shape)]


def nan_compare_ref(a):
    with np.errstate(invalid="ignore"):
        r = ((a != a) * 1 + (~(a < 0)) * 2 + (a == a) * 4 + ((a >= 1) | (a <= -1)) * 8)
    return r.astype(np.int32)


def shifted_readback_ref(a):
    c = a * a
    d = np.zeros_like(a)
    d[:-1] = c[1:] - c[:-1]
    return d


def band_guard_ref(a):
    i, j = np.meshgrid(np.arange(a.shape[0]), np.arange(a.shape[1]), indexing="ij")
    band = (j >= i - 2) & (j <= i + 2) & ((i + 2 * j) % 3 != 1)
    return (np.where(band, a + 1, 0) + np.where(j > 3, 10, 0)).astype(a.dtype)


def bool_values_ref(a):
    i = np.arange(a.shape[0])
    d = (a > 0).astype(np.float32) + (a < 0).astype(np.int32) * 2 + np.where(i > 2, a, 0.5)
    return (a > 0).astype(np.int32), d.astype(np.float32)


def ew4_ref(a):
    i, j, k, m = np.meshgrid(*[np.arange(n) for n in a.shape], indexing="ij")
    return (a * (i + 2 * j + 3 * k + 4 * m)).astype(a.dtype)


def module_constants_ref(a):
    c = np.zeros_like(a)
    c[:-2] = a[2:] * 3 + a[:-2] * 0.5
    return c


@dataclass
class Case:
    name: str
    kernel: object
    args: object  # (rng, shape, dtype) -> list of arrays
    ref: object  # (*args) -> array or tuple of arrays
    shapes: list
    dtypes: list
    inplace: tuple = ()  # positions of inputs the kernel updates in place
    warns: str | None = None  # the HybridWarning the kernel is expected to give (any other fails the test)


SEEDS = hyb.load(EXAMPLES / "seeds.hyb")

CASES = [
    Case("example_add", hyb.load(EXAMPLES / "add.hyb").add, same(2), np.add,
         [(1, 1), (0, 3), (7, 13), (5, 33)], ALL),
    Case("example_matmul", hyb.load(EXAMPLES / "matmul.hyb").matmul, matmul_args, np.matmul,
         [(1, 1, 1), (7, 5, 3), (13, 17, 9), (3, 0, 4)], ALL),
    Case("seed_add", SEEDS.add, same(2), np.add, [(2, 2), (7, 13)], ALL),
    # the seed documents' `square` reads its output (`y[i0] * y[i0]`): zeros, and a warning saying so
    Case("seed_square", SEEDS.square, same(1), np.zeros_like, [(1,), (3,), (33,)], ALL,
         warns="`y` is read before anything writes it"),
    Case("seed_square_grad", SEEDS.square_grad, same(2), lambda x, d: 2 * x * d, [(0,), (3,), (33,)], ALL),
    Case("ew1", MOD.ew1, same(2), lambda a, b: a * b - a, [(0,), (1,), (7,), (67,), (1001,)], ALL),
    Case("ew2", ew2, same(2), lambda a, b: a - b * a.dtype.type(3), [(1, 1), (0, 5), (7, 13), (17, 33)], ALL),
    Case("ew3", MOD.ew3, same(2), lambda a, b: a * b + a, [(1, 1, 1), (2, 3, 5), (3, 7, 13), (2, 0, 3)], ALL),
    Case("broadcast_row", broadcast_row, broadcast_args, lambda a, b: a + b[None, :],
         [(1, 1), (7, 13), (5, 33)], ALL),
    Case("transpose", MOD.transpose, same(1), lambda a: a.T.copy(), [(1, 1), (1, 7), (7, 13), (33, 5)], ALL),
    Case("row_sum", MOD.row_sum, same(1), lambda a: a.sum(axis=1, dtype=a.dtype),
         [(1, 1), (7, 13), (3, 33), (4, 0)], ALL),
    Case("matmul_fn", matmul_fn, matmul_args, np.matmul, [(1, 1, 1), (7, 5, 3), (9, 13, 33)], ALL),
    Case("tril_matvec", MOD.tril_matvec, matvec_args, lambda m, x: np.tril(m) @ x,
         [(1, 1), (7, 7), (13, 13), (0, 0)], ALL),
    Case("strict_upper_matvec", MOD.strict_upper_matvec, matvec_args, lambda m, x: np.triu(m, 1) @ x,
         [(1, 1), (7, 7), (13, 13), (0, 0)], ALL),
    Case("stencil1d", MOD.stencil1d, same(1), stencil1d_ref, [(0,), (1,), (2,), (3,), (7,), (33,)], FLOATS),
    Case("jacobi2d", MOD.jacobi2d, same(1), jacobi2d_ref, [(1, 5), (3, 3), (7, 13), (13, 7)], FLOATS),
    Case("two_outputs", two_outputs, same(2), lambda a, b: (a + b, a - b), [(0,), (1,), (13,)], ALL),
    Case("inplace", inplace, same(2), lambda a, b: a * a.dtype.type(2) + b, [(1,), (7,), (33,)], ALL,
         inplace=(0,)),
    Case("inplace_and_output", inplace_and_output, same(2), lambda a, b: (a.copy(), a + b), [(1,), (13,)], ALL,
         inplace=(0,)),
    Case("prefix_sum", MOD.prefix_sum, same(1), cumsum64, [(0,), (1,), (7,), (33,)], ALL),
    # a scratch row per iteration of a `parallel` loop: a copy each (schedule.privatise), on threads
    Case("row_scratch", MOD.row_scratch, same(1),
         lambda a: (a * a.dtype.type(2) - a.sum(axis=1, keepdims=True, dtype=a.dtype)
                    + np.max(a, axis=1, keepdims=True, initial=0)),
         [(1, 1), (7, 13), (3, 33), (4, 0), (0, 3)], ALL),
    Case("row_sum_local", MOD.row_sum_local, positive, lambda a: a.astype(np.float64).sum(axis=1).astype(a.dtype),
         [(1, 1), (7, 13), (3, 0)], ALL),
    Case("branches", MOD.branches, lambda rng, s, d: [rand(rng, s, d, -4, 4), rand(rng, s, d, -4, 4)],
         branches_ref, [(1,), (8,), (33,)], ALL),
    Case("guard_affine", MOD.guard_affine, same(1), guard_affine_ref, [(1, 1), (5, 7), (7, 5)], ALL),
    Case("suffix_sum_reverse", MOD.suffix_sum_reverse, same(1), lambda a: cumsum64(a[::-1])[::-1],
         [(0,), (1,), (7,), (33,)], ALL),
    Case("reverse_step2", MOD.reverse_step2, same(1), reverse_step2_ref, [(0,), (1,), (2,), (7,), (12,)], ALL),
    Case("step2", step2, same(1), lambda a: np.where(np.arange(a.shape[0]) % 2 == 0, a, -a),
         [(0,), (1,), (2,), (7,), (33,)], ALL),
    Case("step3_offset", step3_offset, same(1), step3_ref, [(1,), (2,), (3,), (7,), (13,)], ALL),
    Case("int_divmod", MOD.int_divmod, divmod_args, divmod_ref, [(1,), (7,), (101,)], INTS),
    Case("int_divmod_extremes", MOD.int_divmod, divmod_extreme_args, divmod_ref, [(9,), (40,)], INTS),
    Case("int_divmod_const", MOD.int_divmod_const, lambda rng, s, d: [rand(rng, s, d, -50, 50)],
         divmod_const_ref, [(1,), (101,)], INTS),
    Case("index_divmod", MOD.index_divmod, same(1),
         lambda a: np.repeat(a, 2) * np.tile(np.array([1, 2], a.dtype), a.shape[0]), [(0,), (1,), (7,)], ALL),
    Case("temp_outside", MOD.temp_outside, same(1), lambda a: a * a.dtype.type(2) + a[::-1] * a.dtype.type(2),
         [(1,), (7,), (33,)], ALL),
    Case("temp_inside", MOD.temp_inside, same(1), temp_inside_ref, [(1, 1), (3, 7), (5, 13)], ALL),
    Case("int_times_half", MOD.int_times_half, same(1), lambda a: (a * 0.5).astype(np.float32),
         [(1,), (7,), (33,)], INTS),
    Case("mixed_float", MOD.mixed_float, mixed_float_args, lambda a, b: (a + b, (a + b).astype(a.dtype)),
         [(1,), (13,)], ["float32"]),
    Case("mixed_int", MOD.mixed_int, mixed_int_args, lambda a, b: a + b.astype(np.int64) * 3,
         [(1,), (13,)], ["int64"]),
    Case("casts", MOD.casts, lambda rng, s, d: [rand(rng, s, d, -20, 20)],
         lambda a: (a.astype(np.float32) / np.float32(4), a.astype(np.int32) * np.int32(2)),
         [(1,), (13,)], ALL),
    Case("guarded_shift", MOD.guarded_shift, same(1), guarded_shift_ref, [(1,), (7,), (33,)], ALL),
    Case("rotate", MOD.rotate, same(1), lambda a: np.roll(a, -3), [(1,), (2,), (7,), (33,)], ALL),
    Case("strided", MOD.strided, same(1), strided_ref, [(2,), (3,), (8,), (15,)], ALL),
    Case("recur_fwd", MOD.recur_fwd, same(1), recur_fwd_ref, [(1,), (7,), (33,)], ALL),
    Case("recur_bwd", MOD.recur_bwd, same(1), recur_bwd_ref, [(0,), (1,), (7,), (33,)], ALL),
    Case("seidel", MOD.seidel, same(1), seidel_ref, [(0,), (1,), (3,), (13,)], FLOATS, inplace=(0,)),
    Case("elif_affine", MOD.elif_affine, same(1), elif_affine_ref, [(0,), (4,), (13,)], ALL),
    Case("checkerboard", MOD.checkerboard, same(1), checkerboard_ref, [(1, 1), (8, 9), (13, 3)], ALL),
    Case("tri_bounds", MOD.tri_bounds, same(1), tri_bounds_ref, [(1, 1), (7, 13), (13, 7)], ALL),
    Case("neg_step3", MOD.neg_step3, same(1), neg_step3_ref, [(0,), (1,), (2,), (8,), (13,)], ALL),
    Case("scalar_branch", MOD.scalar_branch, same(1), np.abs, [(1,), (13,)], ALL),
    Case("counter", MOD.counter, same(1), lambda a: np.cumsum(a > 0).astype(np.int64), [(0,), (1,), (13,)], ALL),
    Case("true_div_int", MOD.true_div_int, true_div_args, true_div_ref, [(1,), (13,)], INTS),
    Case("int_wrap", MOD.int_wrap, wrap_args, lambda a, b: a * b + a.dtype.type(1), [(1,), (33,)], INTS),
    Case("weak_literals", MOD.weak_literals, lambda rng, s, d: [rand(rng, s, d, -20, 20)],
         lambda a: np.asarray(a * 0.1 + 0.3).astype(a.dtype), [(1,), (13,)], ALL),
    Case("mixed_cmp", MOD.mixed_cmp, same(1), lambda a: np.where(a > 0.5, a, -a * 2).astype(a.dtype),
         [(1,), (13,)], ALL),
    Case("nan_compare", MOD.nan_compare, special_floats, nan_compare_ref, [(9,), (20,)], FLOATS),
    Case("shifted_readback", MOD.shifted_readback, same(1), shifted_readback_ref, [(1,), (2,), (13,)], ALL),
    Case("empty_range_and_attrs", MOD.empty_range_and_attrs, same(1),
         lambda a: a + a.dtype.type(a.ndim + len(a)), [(1,), (6,)], ALL),
    Case("band_guard", MOD.band_guard, same(1), band_guard_ref, [(1, 1), (7, 8), (13, 5)], ALL),
    # float32(...) + int32(...) is a float64, as in NumPy: where the arrays hold no float64, a warning
    Case("bool_values", MOD.bool_values, same(1), bool_values_ref, [(1,), (13,)], ALL,
         warns="this computes in float64 (float32 and int32 meet in float64)"),
    Case("no_loops", MOD.no_loops, same(1), lambda a: np.array([a[0] + a[-1], a[0] * a[-1]], a.dtype),
         [(1,), (5,)], ALL),
    Case("ew4", MOD.ew4, same(1), ew4_ref, [(1, 1, 1, 1), (2, 3, 4, 5), (1, 0, 2, 3)], ALL),
    Case("module_constants", MOD.module_constants, same(1), module_constants_ref, [(2,), (3,), (13,)], ALL),
]


def params():
    for case in CASES:
        for shape in case.shapes:
            for dtype in case.dtypes:
                sid = "x".join(map(str, shape))
                yield pytest.param(case, shape, dtype, id=f"{case.name}-{sid}-{dtype}")


# The same cases with loop fusion (and array contraction) and vector math functions switched off,
# and with reassociated sums: each case at its largest shape, in float32 and in its last dtype.
OFF = {"fuse": False, "vector_math": False}
REASSOCIATED = {"reassociate": True}


def variant_params():
    for case in CASES:
        shape = max(case.shapes, key=lambda s: (int(np.prod(s)), s))
        for dtype in dict.fromkeys([d for d in case.dtypes if d == "float32"] + [case.dtypes[-1]]):
            for name, schedule in (("off", OFF), ("reassociated", REASSOCIATED)):
                sid = "x".join(map(str, shape))
                yield pytest.param(case, shape, dtype, schedule, id=f"{case.name}-{sid}-{dtype}-{name}")


def generic_params():
    for case in CASES:
        dtype = "float32" if "float32" in case.dtypes else case.dtypes[-1]
        yield pytest.param(case, dtype, id=f"{case.name}-{dtype}")


# cases whose kernels cannot be compiled for run-time sizes (each shape is compiled instead), and why
NOT_GENERIC = {}


@pytest.mark.parametrize("case,dtype", list(generic_params()))
def test_differential_shape_generic(case, dtype):
    """Each case compiled once, shape-generic, and run on all its shapes (0, 1, odd, prime, larger)."""
    k = case.kernel
    options = {key: value for key, value in k.options.items() if value is not None and key != "shapes"}
    kernel = type(k)(k.kdef, k.module, shapes="generic", **options)
    for shape in case.shapes:
        check_case(case, kernel, shape, dtype)
    made = list(kernel._generic.values())
    assert len(made) == 1
    if case.name in NOT_GENERIC:
        assert isinstance(made[0], str) and NOT_GENERIC[case.name] in made[0], made[0]
    else:
        assert isinstance(made[0], CompiledKernel), made[0]


RTOL = {"float32": 2e-5, "float64": 1e-12}


def assert_close(got, want, what):
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    if want.dtype.kind == "f":
        rtol = RTOL[want.dtype.name]
        scale = max(1.0, float(np.abs(want).max())) if want.size else 1.0
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def as_tuple(r):
    return r if isinstance(r, tuple) else (r,)


@pytest.mark.parametrize("case,shape,dtype", list(params()))
def test_differential(case, shape, dtype):
    check_case(case, case.kernel, shape, dtype)


@pytest.mark.parametrize("case,shape,dtype,schedule", list(variant_params()))
def test_differential_with_schedule_switches(case, shape, dtype, schedule):
    k = case.kernel
    options = {key: value for key, value in k.options.items() if key != "schedule" and value is not None}
    check_case(case, type(k)(k.kdef, k.module, schedule=schedule, **options), shape, dtype)


def check_case(case, kernel, shape, dtype):
    rng = np.random.default_rng(zlib.crc32(f"{case.name}{shape}{dtype}".encode()))
    args = case.args(rng, shape, dtype)
    want = as_tuple(case.ref(*[a.copy() for a in args]))
    want = tuple(np.asarray(w) for w in want)

    compiled_args = [a.copy() for a in args]
    emulated_args = [a.copy() for a in args]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", hyb.HybridWarning)
        got = as_tuple(kernel(*compiled_args))
    given = [str(w.message) for w in caught if issubclass(w.category, hyb.HybridWarning)]
    # a signature warns when it is first compiled: what it says must be what the case expects
    assert all(case.warns is not None and case.warns in m for m in given), given
    emu = as_tuple(kernel.emulate(*emulated_args))

    assert len(got) == len(emu) == len(want)
    for k, (g, e, w) in enumerate(zip(got, emu, want)):
        assert_close(g, w, f"compiled output {k} vs numpy")
        assert_close(e, w, f"emulated output {k} vs numpy")
        assert_close(g, e, f"compiled output {k} vs emulated")

    for pos, (orig, c, e) in enumerate(zip(args, compiled_args, emulated_args)):
        if pos in case.inplace:
            continue
        np.testing.assert_array_equal(c, orig, err_msg=f"compiled kernel changed input {pos}")
        np.testing.assert_array_equal(e, orig, err_msg=f"emulate changed input {pos}")
    for pos in case.inplace:
        returned = [g for g in got if g is compiled_args[pos]]
        assert returned, f"compiled kernel did not return the caller's array {pos} itself"
        assert [e for e in emu if e is emulated_args[pos]], f"emulate did not return the caller's array {pos}"
        assert_close(compiled_args[pos], emulated_args[pos], f"in-place input {pos}: compiled vs emulated")


# The example matmul again with register blocks small enough to fill at these shapes, and packing
# (by default the model blocks only bands of at least 32768 instances).
BLOCKED_MATMUL = hyb.load(EXAMPLES / "matmul.hyb", schedule={"register": (2, 4), "pack": True}).matmul


@pytest.mark.parametrize("shape", [(1, 1, 1), (7, 5, 3), (13, 17, 9), (3, 0, 4), (6, 33, 8)])
@pytest.mark.parametrize("dtype", ALL)
def test_differential_with_register_blocks(shape, dtype):
    case = next(c for c in CASES if c.name == "example_matmul")
    rng = np.random.default_rng(zlib.crc32(f"blocked{shape}{dtype}".encode()))
    args = case.args(rng, shape, dtype)
    got = BLOCKED_MATMUL(*[a.copy() for a in args])
    assert_close(got, np.asarray(case.ref(*args)), "blocked matmul vs numpy")
    assert_close(got, BLOCKED_MATMUL.emulate(*[a.copy() for a in args]), "blocked matmul vs emulated")
    if shape in ((13, 17, 9), (6, 33, 8)) and dtype in ("float32", "int64"):
        text = BLOCKED_MATMUL.compile(*args).inspect("schedule")
        assert "register block 2x4" in text and "panel of `b` packed" in text, text  # (k >= 16 steps)


def test_inplace_updates_callers_array():
    a = np.arange(5, dtype=np.float64)
    b = np.ones(5)
    out = inplace(a, b)
    assert out is a
    np.testing.assert_array_equal(a, np.arange(5) * 2 + 1)
    out = inplace(a, b)
    np.testing.assert_array_equal(a, (np.arange(5) * 2 + 1) * 2 + 1)


def test_inplace_non_contiguous_input_is_written_back():
    base = np.arange(10, dtype=np.float64)
    a = base[::2]
    out = inplace(a, np.ones(5))
    np.testing.assert_array_equal(base[::2], np.arange(0, 10, 2) * 2 + 1)
    np.testing.assert_array_equal(base[1::2], np.arange(1, 10, 2))
    np.testing.assert_array_equal(out, base[::2])


def test_non_contiguous_inputs():
    a = np.arange(42, dtype=np.float32).reshape(6, 7)
    got = MOD.transpose(a[::2, 1:])
    np.testing.assert_array_equal(got, a[::2, 1:].T)
    got = MOD.transpose(a.T)
    np.testing.assert_array_equal(got, a)


def test_kernels_compiled_and_freed_repeatedly():
    import gc
    x = np.ones(4)
    for _ in range(3):
        mod = hyb.compile_source(SOURCE.split("\n\n\ndef ew3")[0])
        np.testing.assert_array_equal(mod.ew1(x, x), x * x - x)
        del mod
        gc.collect()


SHIFT_INTO = hyb.compile_source('''
def shift_into(a, b):
    for i in range(1, a.shape[0]):
        a[i] = b[i - 1] + 1
    return a
''').shift_into


@pytest.mark.parametrize("views", ["same", "overlap"])
def test_input_aliasing_a_written_input_reads_the_values_at_call(views):
    results = []
    for run in (SHIFT_INTO, SHIFT_INTO.emulate):
        x = np.zeros(6)
        a, b = (x[1:], x[1:]) if views == "same" else (x[1:], x[:-1])
        out = run(a, b)
        assert out is a
        results.append(x.copy())
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0][2:], np.ones(4))


def test_inplace_with_the_same_array_twice():
    a = np.arange(7, dtype=np.float32)
    e = a.copy()
    inplace(a, a)
    inplace.emulate(e, e)
    np.testing.assert_array_equal(a, np.arange(7, dtype=np.float32) * 3)
    np.testing.assert_array_equal(e, a)


# ------------------------------------------------------------------ regressions (front end)
SHAPE_LOCAL = '''
def rev(a):
    n = a.shape[0]
    c = output_tensor((n,), a.dtype)
    for i in range(n):
        c[i] = a[n - 1 - i]
    return c
'''


def test_shape_bound_to_a_local():
    a = np.arange(5.0)
    k = hyb.compile_source(SHAPE_LOCAL).rev
    np.testing.assert_array_equal(k(a), a[::-1])
    np.testing.assert_array_equal(k.emulate(a), a[::-1])


def test_out_of_range_literal_is_a_compile_error():
    k = hyb.compile_source('''
def f(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] + 3000000000
    return c
''').f
    a = np.arange(3, dtype=np.int32)
    with pytest.raises(hyb.HybridError):
        k(a)
    with pytest.raises(hyb.HybridError):
        k.emulate(a)


def test_the_expected_warnings_are_given():
    for case in CASES:
        if case.warns is None:
            continue
        path = case.kernel.module.filename
        fresh = (hyb.load(path) if os.path.exists(path) else hyb.compile_source(SOURCE, path)).kernels[case.kernel.name]
        args = case.args(np.random.default_rng(0), case.shapes[-1], case.dtypes[0])
        with pytest.warns(hyb.HybridWarning, match=re.escape(case.warns)):
            fresh(*args)
