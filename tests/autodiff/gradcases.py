"""Kernels and helpers for the gradient tests (tests/autodiff/test_grad.py).

A :class:`Case` is a small hybrid kernel, a maker of random float64 inputs that keeps away from
the kernel's kinks (branch thresholds, zeros of abs/sqrt, integers for floor/round), and the
shapes it runs on.  :func:`fd_grads` is the oracle: central finite differences of
``sum(dout * forward(x))`` over every element of every float input, using the compiled forward
kernel on fresh copies (so kernels that write an input in place see the original values each time).
"""
from __future__ import annotations

import functools
import re
import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

import hyb

EPS = 1e-6


# ------------------------------------------------------------------ input makers

def normal(rng, shape, scale=1.0):
    return rng.standard_normal(shape) * scale


def uniform(rng, shape, lo, hi):
    return rng.uniform(lo, hi, shape)


def positive(rng, shape, lo=0.5, hi=2.0):
    return rng.uniform(lo, hi, shape)


def away(rng, shape, lo=0.2, hi=1.5):
    """Values of either sign with |x| in [lo, hi]: away from zero."""
    return rng.uniform(lo, hi, shape) * rng.choice([-1.0, 1.0], shape)


def off_grid(rng, shape):
    """Values away from integers and half-integers (floor, ceil, round, trunc are smooth there)."""
    whole = rng.integers(-3, 3, shape).astype(np.float64)
    frac = rng.choice([0.15, 0.35, 0.65, 0.85], shape) + rng.uniform(-0.05, 0.05, shape)
    return whole + frac


def avoid(x, points, margin=0.05):
    """x with every value closer than `margin` to one of `points` pushed away from it."""
    x = np.array(x, dtype=np.float64)
    for p in points:
        near = np.abs(x - p) < margin
        x[near] = p + np.where(x[near] >= p, 2 * margin, -2 * margin)
    return x


def indices(rng, shape, n):
    return rng.integers(0, n, shape).astype(np.int64)


# ------------------------------------------------------------------ cases

@dataclass
class Case:
    name: str
    src: str                        # hybrid source text; may hold module constants and several defs
    make: Callable                  # (rng, dims) -> list of arguments
    dims: list                      # shapes to run on, each a tuple given to `make`
    entry: str | None = None        # kernel to differentiate (default: the first def)
    rtol: float = 1e-5
    atol: float = 1e-7
    tags: tuple = field(default_factory=tuple)

    @property
    def kernel_name(self) -> str:
        return self.entry or re.search(r"^def (\w+)\(", self.src, re.M).group(1)

    def __repr__(self):
        return self.name


def K(text: str) -> str:
    """Kernel text with its common indentation removed."""
    import textwrap
    return textwrap.dedent(text).strip("\n") + "\n"


CASES: list[Case] = []


def case(name, src, make, dims, **kw):
    c = Case(name, K(src), make, list(dims), **kw)
    CASES.append(c)
    return c


# ---------------------------------------------------------------- elementwise

case("add", """
    def add(a, b):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            for j in range(a.shape[1]):
                c[i, j] = a[i, j] + b[i, j]
        return c
    """, lambda r, d: [normal(r, d), normal(r, d)], [(3, 4), (1, 1), (5, 2)])

case("sub_neg", """
    def sub_neg(a, b):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            c[i] = -a[i] - b[i] * 2.0 + (-(a[i] * b[i]))
        return c
    """, lambda r, d: [normal(r, d), normal(r, d)], [(5,), (1,)])

case("mul", """
    def mul(a, b):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            for j in range(a.shape[1]):
                c[i, j] = a[i, j] * b[i, j]
        return c
    """, lambda r, d: [normal(r, d), normal(r, d)], [(3, 4), (1, 1)])

case("square_same_input", """
    def square(x):
        y = output_tensor(x.shape, x.dtype)
        for i in range(x.shape[0]):
            y[i] = x[i] * x[i]
        return y
    """, lambda r, d: [normal(r, d)], [(6,), (1,)])

case("div", """
    def div(a, b):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            c[i] = a[i] / b[i] + 1.0 / b[i] - b[i] / 3.0
        return c
    """, lambda r, d: [normal(r, d), away(r, d, 0.5, 2.0)], [(7,), (1,)])

case("pow_const", """
    def pow_const(a, b):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            c[i] = a[i] ** 3 + b[i] ** 2 - a[i] ** -2
        return c
    """, lambda r, d: [away(r, d, 0.5, 1.5), normal(r, d)], [(6,), (1,)])

case("pow_float_exponent", """
    def pow_float(a):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            c[i] = a[i] ** 0.5 + a[i] ** 1.5 - a[i] ** 2.0
        return c
    """, lambda r, d: [positive(r, d)], [(6,), (1,)])

case("pow_tensor", """
    def pow_tensor(x, y):
        c = output_tensor(x.shape, x.dtype)
        for i in range(x.shape[0]):
            c[i] = x[i] ** y[i]
        return c
    """, lambda r, d: [positive(r, d), normal(r, d)], [(6,), (1,)])

case("chain", """
    def chain(a, b):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            for j in range(a.shape[1]):
                c[i, j] = (a[i, j] * b[i, j] + a[i, j]) / (b[i, j] * b[i, j] + 1.0) - a[i, j] * a[i, j] * a[i, j]
        return c
    """, lambda r, d: [normal(r, d), normal(r, d)], [(2, 3), (1, 4)])

# ---------------------------------------------------------------- broadcast reads

case("broadcast_add", """
    def broadcast_add(a, b):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            for j in range(a.shape[1]):
                c[i, j] = a[i, j] + b[j]
        return c
    """, lambda r, d: [normal(r, d), normal(r, d[1:])], [(3, 4), (1, 1), (5, 1), (1, 3)])

case("broadcast_mul", """
    def broadcast_mul(a, b, x):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            for j in range(a.shape[1]):
                c[i, j] = a[i, j] * b[j] - x[i] * b[j] * b[j]
        return c
    """, lambda r, d: [normal(r, d), normal(r, d[1:]), normal(r, d[:1])], [(3, 4), (1, 2)])

case("outer", """
    def outer(u, v):
        c = output_tensor((u.shape[0], v.shape[0]), u.dtype)
        for i in range(u.shape[0]):
            for j in range(v.shape[0]):
                c[i, j] = u[i] * v[j]
        return c
    """, lambda r, d: [normal(r, d[:1]), normal(r, d[1:])], [(3, 5), (1, 1)])

# ---------------------------------------------------------------- reductions, accumulations

case("row_sum", """
    def row_sum(a):
        c = output_tensor((a.shape[0],), a.dtype)
        for i in range(a.shape[0]):
            for j in range(a.shape[1]):
                c[i] += a[i, j]
        return c
    """, lambda r, d: [normal(r, d)], [(3, 4), (1, 1), (4, 1)])

case("col_sum", """
    def col_sum(a):
        c = output_tensor((a.shape[1],), a.dtype)
        for i in range(a.shape[0]):
            for j in range(a.shape[1]):
                c[j] += a[i, j]
        return c
    """, lambda r, d: [normal(r, d)], [(3, 4), (1, 1), (1, 5)])

case("sum_squares_0d", """
    def sum_squares(a):
        s = output_tensor((), a.dtype)
        for i in range(a.shape[0]):
            for j in range(a.shape[1]):
                s[()] += a[i, j] * a[i, j]
        return s
    """, lambda r, d: [normal(r, d)], [(3, 4), (1, 1)])

case("minus_accumulate", """
    def minus_acc(a, b):
        c = output_tensor((a.shape[0],), a.dtype)
        for i in range(a.shape[0]):
            for j in range(a.shape[1]):
                c[i] -= a[i, j] * b[i, j] * a[i, j]
        return c
    """, lambda r, d: [normal(r, d), normal(r, d)], [(3, 4)])

MATMUL = case("matmul", """
    def matmul(a, b):
        c = output_tensor((a.shape[0], b.shape[1]), a.dtype)
        for i in range(a.shape[0]):
            for j in range(b.shape[1]):
                for k in range(a.shape[1]):
                    c[i, j] += a[i, k] * b[k, j]
        return c
    """, lambda r, d: [normal(r, d[:2]), normal(r, d[1:])], [(3, 4, 5), (1, 1, 1), (2, 3, 1), (1, 4, 2)])

case("matvec_nonlinear", """
    def matvec(a, x):
        c = output_tensor((a.shape[0],), a.dtype)
        for i in range(a.shape[0]):
            for j in range(a.shape[1]):
                c[i] += a[i, j] * sin(x[j])
        return c
    """, lambda r, d: [normal(r, d), normal(r, d[1:])], [(3, 4), (1, 1)])

CONV2D = case("conv2d", """
    def conv2d(x, w):
        nb = x.shape[0]
        c = x.shape[1]
        h = x.shape[2]
        wd = x.shape[3]
        k = w.shape[0]
        r = w.shape[2]
        s = w.shape[3]
        p = h - r + 1
        q = wd - s + 1
        out = output_tensor((nb, k, p, q), x.dtype)
        for n in range(nb):
            for kk in range(k):
                for pp in range(p):
                    for qq in range(q):
                        for cc in range(c):
                            for rr in range(r):
                                for ss in range(s):
                                    out[n, kk, pp, qq] += x[n, cc, pp + rr, qq + ss] * w[kk, cc, rr, ss]
        return out
    """, lambda r, d: [normal(r, d[:4]), normal(r, d[4:])],
    [(1, 2, 5, 4, 3, 2, 3, 2), (2, 1, 3, 3, 1, 1, 1, 1), (1, 1, 4, 4, 2, 1, 4, 4)])

case("conv1d_offsets", """
    def conv1d(x, w):
        n = x.shape[0]
        r = w.shape[0]
        out = output_tensor((n - r - 1,), x.dtype)
        for p in range(1, n - r - 1):
            for rr in range(r):
                out[p] += x[p + rr + 1] * w[rr]
        return out
    """, lambda r, d: [normal(r, d[:1]), normal(r, d[1:])], [(9, 3), (4, 1), (6, 4)])

case("conv1d_window_that_can_be_empty", """
    def conv1d_short(x, w, y):
        n = x.shape[0]
        r = w.shape[0]
        out = output_tensor((n - r + 1,), x.dtype)
        for p in range(2, n - r):
            for rr in range(r):
                out[p] += sin(x[p + rr + 1]) * w[rr] * y[p]
        return out
    """, lambda r, d: [normal(r, d[:1]), normal(r, d[1:]), normal(r, (d[0] - d[1] + 1,))], [(8, 3), (5, 3), (4, 3)])

case("conv1d_times_own_factor", """
    def conv1d_scaled(x, w, y):
        n = x.shape[0]
        r = w.shape[0]
        out = output_tensor((n - r + 1,), x.dtype)
        for p in range(n - r + 1):
            for rr in range(r):
                out[p] += x[p + rr] * w[rr] * y[p]
        return out
    """, lambda r, d: [normal(r, d[:1]), normal(r, d[1:]), normal(r, (d[0] - d[1] + 1,))], [(7, 3), (3, 3)])

case("conv1d_in_time_loop", """
    def conv_steps(x, w):
        n = x.shape[0]
        r = w.shape[0]
        out = output_tensor((2, n - r + 1), x.dtype)
        for t in range(2):
            for p in range(n - r + 1):
                for rr in range(r):
                    out[t, p] += x[p + rr] * w[rr] * (t + 1.0)
        return out
    """, lambda r, d: [normal(r, d[:1]), normal(r, d[1:])], [(6, 2), (2, 2)])

case("conv2d_channels_last_window", """
    def conv2d_hwc(x, w):
        h = x.shape[0]
        wd = x.shape[1]
        c = x.shape[2]
        r = w.shape[0]
        s = w.shape[1]
        out = output_tensor((h - r + 1, wd - s + 1), x.dtype)
        for pp in range(h - r + 1):
            for qq in range(wd - s + 1):
                for rr in range(r):
                    for ss in range(s):
                        for cc in range(c):
                            out[pp, qq] += x[pp + rr, qq + ss, cc] * w[rr, ss, cc]
        return out
    """, lambda r, d: [normal(r, d[:3]), normal(r, (d[3], d[4], d[2]))], [(5, 6, 2, 2, 3), (2, 2, 1, 2, 2)])

# ---------------------------------------------------------------- values overwritten and needed again

case("seed_square_grad", """
    def square_grad(x, dout):
        dx = output_tensor(x.shape, x.dtype)
        for i0 in range(x.shape[0]):
            dx[i0] = 2.0 * x[i0]
        for i0 in range(x.shape[0]):
            dx[i0] = dx[i0] * dout[i0]
        return dx
    """, lambda r, d: [normal(r, d), normal(r, d)], [(5,), (1,)])

case("overwrite_same_loop", """
    def overwrite(a, b):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            c[i] = a[i] * b[i]
            c[i] = c[i] * c[i] + sin(c[i])
        return c
    """, lambda r, d: [normal(r, d), normal(r, d)], [(5,), (1,)])

case("overwrite_three_loops", """
    def overwrite3(a, b):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            c[i] = a[i] * b[i]
        for i in range(a.shape[0]):
            c[i] = sin(c[i]) + c[i] * c[i]
        for i in range(a.shape[0]):
            c[i] = c[i] * a[i]
        return c
    """, lambda r, d: [normal(r, d), normal(r, d)], [(5,), (1,)])

case("augmented_assign", """
    def augassign(a, b):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            c[i] = a[i]
            c[i] *= b[i]
            c[i] *= c[i]
            c[i] /= b[i]
            c[i] -= a[i] * a[i]
            c[i] += b[i]
        return c
    """, lambda r, d: [normal(r, d), away(r, d, 0.5, 2.0)], [(5,), (1,)])

# ---------------------------------------------------------------- allocate

case("allocate_outside", """
    def alloc_outside(a, b):
        n = a.shape[0]
        t = allocate((n,), a.dtype)
        c = output_tensor((n,), a.dtype)
        for i in range(n):
            t[i] = a[i] * b[i]
        for i in range(n):
            c[i] = t[i] * t[i] + a[i]
        return c
    """, lambda r, d: [normal(r, d), normal(r, d)], [(5,), (1,)])

case("allocate_inside_loop", """
    def alloc_inside(a):
        n = a.shape[0]
        m = a.shape[1]
        c = output_tensor((n,), a.dtype)
        for i in range(n):
            t = allocate((m,), a.dtype)
            for j in range(m):
                t[j] = a[i, j] * a[i, j]
            for j in range(m):
                c[i] += t[j] * a[i, j]
        return c
    """, lambda r, d: [normal(r, d)], [(3, 4), (1, 1), (4, 1)])

case("allocate_inside_accumulate", """
    def alloc_acc(a):
        n = a.shape[0]
        m = a.shape[1]
        c = output_tensor((n,), a.dtype)
        for i in range(n):
            t = allocate((1,), a.dtype)
            for j in range(m):
                t[0] += a[i, j]
            c[i] = t[0] * t[0]
        return c
    """, lambda r, d: [normal(r, d)], [(3, 4), (1, 1)])

case("allocate_two_matmuls", """
    def two_mm(a, b, d):
        n = a.shape[0]
        m = b.shape[1]
        t = allocate((n, m), a.dtype)
        c = output_tensor((n, d.shape[1]), a.dtype)
        for i in range(n):
            for j in range(m):
                for k in range(a.shape[1]):
                    t[i, j] += a[i, k] * b[k, j]
        for i in range(n):
            for j in range(d.shape[1]):
                for k in range(m):
                    c[i, j] += t[i, k] * d[k, j]
        return c
    """, lambda r, d: [normal(r, d[0:2]), normal(r, d[1:3]), normal(r, d[2:4])], [(2, 3, 4, 2), (1, 1, 1, 1)])

# ---------------------------------------------------------------- scalar locals

case("scalar_dot", """
    def scalar_dot(a, b):
        c = output_tensor((a.shape[0],), a.dtype)
        for i in range(a.shape[0]):
            s = 0.0
            for k in range(a.shape[1]):
                s += a[i, k] * b[k]
            c[i] = s
        return c
    """, lambda r, d: [normal(r, d), normal(r, d[1:])], [(3, 4), (1, 1)])

case("scalar_nonlinear_use", """
    def scalar_nl(a):
        c = output_tensor((a.shape[0],), a.dtype)
        for i in range(a.shape[0]):
            s = 0.0
            for k in range(a.shape[1]):
                s += a[i, k]
            c[i] = s * s + s
        return c
    """, lambda r, d: [normal(r, d)], [(3, 4), (1, 1)])

case("scalar_reassigned", """
    def scalar_re(a):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            s = a[i]
            s = s * s
            c[i] = s
        return c
    """, lambda r, d: [normal(r, d)], [(5,), (1,)])

case("scalar_reassigned_chain", """
    def scalar_chain(a, b):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            s = a[i]
            s = sin(s) * b[i]
            s = s * s + a[i]
            s *= b[i]
            s -= a[i]
            c[i] = s
        return c
    """, lambda r, d: [normal(r, d), normal(r, d)], [(5,), (1,)])

case("scalar_product_recurrence", """
    def prod(a):
        c = output_tensor((a.shape[0],), a.dtype)
        for i in range(a.shape[0]):
            s = 1.0
            for j in range(a.shape[1]):
                s = s * a[i, j]
            c[i] = s
        return c
    """, lambda r, d: [away(r, d, 0.5, 1.5)], [(3, 4), (1, 1), (2, 6)])

case("scalar_horner", """
    def horner(x, coef):
        c = output_tensor(x.shape, x.dtype)
        for i in range(x.shape[0]):
            s = 0.0
            for j in range(coef.shape[0]):
                s = s * x[i] + coef[j]
            c[i] = s
        return c
    """, lambda r, d: [normal(r, d[:1]), normal(r, d[1:])], [(4, 5), (1, 1)])

# ---------------------------------------------------------------- control flow

case("if_else_data", """
    def if_else(a, b):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            if a[i] > 0.0:
                c[i] = a[i] * b[i]
            else:
                c[i] = b[i] - a[i] * a[i]
        return c
    """, lambda r, d: [away(r, d), normal(r, d)], [(8,), (1,)])

case("if_elif_else", """
    def if_elif(a, b):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            if a[i] > 0.5:
                c[i] = a[i] * b[i]
            elif a[i] > -0.5:
                c[i] = sin(a[i]) + b[i]
            else:
                c[i] = a[i] * a[i] * b[i]
        return c
    """, lambda r, d: [avoid(uniform(r, d, -1.5, 1.5), (-0.5, 0.5)), normal(r, d)], [(9,)])

case("if_two_inputs_and", """
    def if_and(a, b):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            if a[i] > b[i] and b[i] > 0.0:
                c[i] = a[i] * a[i]
            else:
                c[i] = b[i] * 3.0 + a[i]
        return c
    """, lambda r, d: [away(r, d), away(r, d)], [(10,)])

case("if_affine", """
    def if_affine(a):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            if i > 0:
                c[i] = a[i] * a[i - 1]
            else:
                c[i] = 2.0 * a[i]
        return c
    """, lambda r, d: [normal(r, d)], [(5,), (1,)])

case("if_scalar_assigned", """
    def if_scalar(a, b):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            s = 0.0
            if a[i] > 0.0:
                s = a[i] * a[i]
            else:
                s = -a[i]
            c[i] = s * b[i]
        return c
    """, lambda r, d: [away(r, d), normal(r, d)], [(8,)])

case("if_scalar_first_assigned_in_both_branches", """
    def if_both(a, b):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            if i == 0:
                v = a[i]
            else:
                v = b[i]
            c[i] = v * v
        return c
    """, lambda r, d: [normal(r, d), normal(r, d)], [(4,), (1,)])

case("if_scalar_in_both_branches_data", """
    def if_both_data(a, b):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            if a[i] > b[i]:
                v = a[i] * b[i]
                t = sin(v)
                w = t + a[i]
            else:
                v = b[i] - a[i]
                w = v * v
            c[i] = v * w + exp(w)
        return c
    """, lambda r, d: [away(r, d), away(r, d)], [(7,), (1,)])

case("if_scalar_in_both_branches_top_level", """
    def if_both_top(a, b):
        c = output_tensor(a.shape, a.dtype)
        if a.shape[0] > 2:
            v = a[0] * b[1]
        else:
            v = b[0]
        for i in range(a.shape[0]):
            if a[i] > 0.0:
                if i > 1:
                    u = v * a[i]
                else:
                    u = a[i]
            else:
                u = b[i] * v
            c[i] = u * a[i] + v
        return c
    """, lambda r, d: [away(r, d), normal(r, d)], [(5,), (2,), (1,)])

case("if_guarded_accumulation", """
    def if_acc(a):
        c = output_tensor((a.shape[0],), a.dtype)
        for i in range(a.shape[0]):
            for j in range(a.shape[1]):
                if a[i, j] > 0.0:
                    c[i] += a[i, j] * a[i, j]
        return c
    """, lambda r, d: [away(r, d)], [(3, 5)])

case("ifexp", """
    def ifexp(a, b):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            c[i] = a[i] * b[i] if a[i] > b[i] else a[i] - b[i]
        return c
    """, lambda r, d: [normal(r, d), normal(r, d)], [(8,), (1,)])

case("ifexp_relu", """
    def ifexp_relu(a, b):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            c[i] = (a[i] if a[i] > 0.0 else 0.0) * b[i]
        return c
    """, lambda r, d: [away(r, d), normal(r, d)], [(8,)])

# ---------------------------------------------------------------- intrinsics (away from kinks)

UNARY = {
    "sqrt": positive, "rsqrt": positive, "exp": normal, "expm1": normal, "log": positive,
    "log1p": lambda r, d: uniform(r, d, -0.5, 2.0), "sin": normal, "cos": normal,
    "tan": lambda r, d: uniform(r, d, -1.0, 1.0), "tanh": normal, "sigmoid": normal, "erf": normal,
    "atan": normal, "abs": away,
}
ZERO_GRAD = ("floor", "ceil", "round", "trunc", "sign")


def _unary_src(f):
    return f"""
    def {f}_k(a):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            for j in range(a.shape[1]):
                c[i, j] = {f}(a[i, j])
        return c
    """


for _f, _mk in UNARY.items():
    case(f"intrinsic_{_f}", _unary_src(_f), (lambda mk: lambda r, d: [mk(r, d)])(_mk), [(3, 4)],
         tags=("intrinsic",))

for _f in ZERO_GRAD:
    case(f"intrinsic_{_f}", _unary_src(_f).replace(f"= {_f}(a[i, j])", f"= {_f}(a[i, j]) * a[i, j]"),
         lambda r, d: [off_grid(r, d)], [(3, 4)], tags=("intrinsic", "zero"))

case("intrinsic_atan2", """
    def atan2_k(y, x):
        c = output_tensor(y.shape, y.dtype)
        for i in range(y.shape[0]):
            c[i] = atan2(y[i], x[i])
        return c
    """, lambda r, d: [normal(r, d), away(r, d)], [(7,)], tags=("intrinsic",))

case("intrinsic_power", """
    def power_k(x, y):
        c = output_tensor(x.shape, x.dtype)
        for i in range(x.shape[0]):
            c[i] = power(x[i], y[i]) + power(x[i], 3.0)
        return c
    """, lambda r, d: [positive(r, d), normal(r, d)], [(7,)], tags=("intrinsic",))

case("intrinsic_max_min", """
    def maxmin(a, b):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            c[i] = max(a[i], b[i]) * 2.0 + min(a[i], b[i]) * 3.0
        return c
    """, lambda r, d: [normal(r, d), normal(r, d)], [(9,)], tags=("intrinsic",))

case("intrinsic_max3_min_const", """
    def max3(a, b, c):
        out = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            out[i] = max(a[i], b[i], c[i]) + min(a[i], 0.25) * b[i]
        return out
    """, lambda r, d: [avoid(normal(r, d), (0.25,)), normal(r, d), normal(r, d)], [(9,)], tags=("intrinsic",))

case("intrinsic_composite", """
    def composite(a, b):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            c[i] = exp(sin(a[i]) * b[i]) + log(1.0 + a[i] * a[i]) * tanh(b[i]) + sqrt(abs(a[i]) + 1.0)
        return c
    """, lambda r, d: [away(r, d), normal(r, d)], [(6,)], tags=("intrinsic",))

# ---------------------------------------------------------------- stencils (shifted reads)

case("stencil_1d", """
    def stencil1(a):
        n = a.shape[0]
        b = output_tensor((n,), a.dtype)
        for i in range(1, n - 1):
            b[i] = 0.5 * a[i - 1] + a[i] * a[i] - 2.0 * a[i + 1]
        return b
    """, lambda r, d: [normal(r, d)], [(7,), (3,), (2,), (1,)])

case("stencil_1d_plain", """
    def stencil1p(a):
        n = a.shape[0]
        b = output_tensor((n,), a.dtype)
        for i in range(1, n - 1):
            b[i] = a[i - 1] + a[i] + a[i + 1]
        return b
    """, lambda r, d: [normal(r, d)], [(6,), (3,)])

case("stencil_2d", """
    def stencil2(a):
        n = a.shape[0]
        m = a.shape[1]
        b = output_tensor((n, m), a.dtype)
        for i in range(1, n - 1):
            for j in range(1, m - 1):
                b[i, j] = a[i, j] * a[i, j] + 0.5 * (a[i - 1, j] + a[i + 1, j]) - 0.25 * (a[i, j - 1] - a[i, j + 1])
        return b
    """, lambda r, d: [normal(r, d)], [(5, 6), (3, 3), (4, 3)])

case("stencil_offset_2", """
    def offset2(a):
        n = a.shape[0]
        c = output_tensor((n - 2,), a.dtype)
        for i in range(n - 2):
            c[i] = a[i + 2] * a[i] - a[i + 1]
        return c
    """, lambda r, d: [normal(r, d)], [(7,), (3,)])

case("reversed_read", """
    def rev(a, b):
        n = a.shape[0]
        c = output_tensor((n,), a.dtype)
        for i in range(n):
            c[i] = a[n - 1 - i] * b[i]
        return c
    """, lambda r, d: [normal(r, d), normal(r, d)], [(6,), (1,)])

case("strided_read", """
    def strided(a):
        m = a.shape[0] // 2
        c = output_tensor((m,), a.dtype)
        for i in range(m):
            c[i] = a[2 * i] * a[2 * i + 1]
        return c
    """, lambda r, d: [normal(r, d)], [(8,), (3,)])

# ---------------------------------------------------------------- triangular loops

case("triangular_lower", """
    def tri_lower(a, b):
        n = a.shape[0]
        c = output_tensor((n,), a.dtype)
        for i in range(n):
            for j in range(i + 1):
                c[i] += a[i, j] * b[j]
        return c
    """, lambda r, d: [normal(r, (d[0], d[0])), normal(r, d)], [(5,), (1,)])

case("triangular_upper", """
    def tri_upper(a):
        n = a.shape[0]
        c = output_tensor((n,), a.dtype)
        for i in range(n):
            for j in range(i, n):
                c[i] += a[i, j] * a[j, i]
        return c
    """, lambda r, d: [normal(r, (d[0], d[0]))], [(4,), (1,)])


def _lower(r, d):
    n = d[0]
    L = np.tril(normal(r, (n, n), 0.3))
    L[np.arange(n), np.arange(n)] = positive(r, (n,), 1.5, 2.5)
    return [L, normal(r, (n,))]


case("trisolv", """
    def trisolv(L, b):
        n = b.shape[0]
        x = output_tensor((n,), b.dtype)
        for i in range(n):
            s = b[i]
            for j in range(i):
                s -= L[i, j] * x[j]
            x[i] = s / L[i, i]
        return x
    """, _lower, [(5,), (1,)])

# ---------------------------------------------------------------- loop-carried recurrences

case("prefix_sum", """
    def prefix(a):
        n = a.shape[0]
        c = output_tensor((n,), a.dtype)
        c[0] = a[0]
        for i in range(1, n):
            c[i] = c[i - 1] + a[i]
        return c
    """, lambda r, d: [normal(r, d)], [(6,), (1,)])

case("prefix_nonlinear", """
    def prefix_nl(a):
        n = a.shape[0]
        c = output_tensor((n,), a.dtype)
        c[0] = a[0]
        for i in range(1, n):
            c[i] = c[i - 1] * a[i] + a[i]
        return c
    """, lambda r, d: [normal(r, d, 0.8)], [(6,), (2,)])

case("prefix_in_place", """
    def cumsum_inplace(a):
        for i in range(1, a.shape[0]):
            a[i] = a[i] + a[i - 1] * a[i - 1] * 0.5
        return a
    """, lambda r, d: [normal(r, d, 0.5)], [(6,), (1,)])

case("reverse_recurrence", """
    def rev_rec(a):
        n = a.shape[0]
        c = output_tensor((n,), a.dtype)
        c[n - 1] = a[n - 1]
        for i in range(n - 2, -1, -1):
            c[i] = c[i + 1] * a[i] + sin(a[i])
        return c
    """, lambda r, d: [normal(r, d)], [(6,), (1,)])

case("time_loop_in_place_nonlinear", """
    def timeloop(a):
        n = a.shape[0]
        for t in range(3):
            for i in range(1, n):
                a[i] = sin(a[i - 1]) + a[i] * 0.5
        return a
    """, lambda r, d: [normal(r, d)], [(5,), (1,)], tags=("tape",))

JACOBI1D = case("jacobi_1d", """
    TSTEPS = 3

    def jacobi_1d(A, B):
        n = A.shape[0]
        for t in range(TSTEPS):
            for i in range(1, n - 1):
                B[i] = 0.33333 * (A[i - 1] + A[i] + A[i + 1])
            for i in range(1, n - 1):
                A[i] = 0.33333 * (B[i - 1] + B[i] + B[i + 1])
        return A, B
    """, lambda r, d: [normal(r, d), normal(r, d)], [(7,), (3,)])

case("jacobi_1d_nonlinear", """
    TSTEPS = 2

    def jacobi_nl(A, B):
        n = A.shape[0]
        for t in range(TSTEPS):
            for i in range(1, n - 1):
                B[i] = 0.5 * (A[i - 1] * A[i] + A[i + 1])
            for i in range(1, n - 1):
                A[i] = 0.5 * (B[i - 1] + B[i] * B[i + 1])
        return A, B
    """, lambda r, d: [normal(r, d, 0.7), normal(r, d, 0.7)], [(6,), (3,)], tags=("tape",))

JACOBI2D = case("jacobi_2d", """
    TSTEPS = 2

    def jacobi_2d(A, B):
        n = A.shape[0]
        for t in range(TSTEPS):
            for i in range(1, n - 1):
                for j in range(1, n - 1):
                    B[i, j] = 0.2 * (A[i, j] + A[i, j - 1] + A[i, 1 + j] + A[1 + i, j] + A[i - 1, j])
            for i in range(1, n - 1):
                for j in range(1, n - 1):
                    A[i, j] = 0.2 * (B[i, j] + B[i, j - 1] + B[i, 1 + j] + B[1 + i, j] + B[i - 1, j])
        return A, B
    """, lambda r, d: [normal(r, d), normal(r, d)], [(5, 5), (3, 3)])

case("seidel_2d", """
    TSTEPS = 2

    def seidel_2d(A):
        n = A.shape[0]
        for t in range(TSTEPS):
            for i in range(1, n - 1):
                for j in range(1, n - 1):
                    A[i, j] = (A[i - 1, j - 1] + A[i - 1, j] + A[i - 1, j + 1]
                               + A[i, j - 1] + A[i, j] + A[i, j + 1]
                               + A[i + 1, j - 1] + A[i + 1, j] + A[i + 1, j + 1]) / 9.0
        return A
    """, lambda r, d: [normal(r, d)], [(5, 5), (3, 3)])

case("seidel_2d_nonlinear", """
    def seidel_nl(A):
        n = A.shape[0]
        m = A.shape[1]
        for t in range(2):
            for i in range(1, n - 1):
                for j in range(1, m - 1):
                    A[i, j] = 0.3 * (A[i - 1, j] * A[i, j - 1] + A[i, j] + sin(A[i + 1, j]) + A[i, j + 1])
        return A
    """, lambda r, d: [normal(r, d, 0.7)], [(5, 4)], tags=("tape",))

# ---------------------------------------------------------------- several outputs

case("two_outputs", """
    def two_out(a, b):
        c = output_tensor(a.shape, a.dtype)
        d = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            c[i] = a[i] + b[i]
            d[i] = a[i] * b[i]
        return c, d
    """, lambda r, d: [normal(r, d), normal(r, d)], [(5,), (1,)])

case("output_reads_output", """
    def out_reads_out(a, b):
        c = output_tensor(a.shape, a.dtype)
        d = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            c[i] = a[i] * a[i]
        for i in range(a.shape[0]):
            d[i] = c[i] * b[i]
        return d, c
    """, lambda r, d: [normal(r, d), normal(r, d)], [(5,), (1,)])

case("outputs_of_different_shapes", """
    def row_col(a):
        r = output_tensor((a.shape[0],), a.dtype)
        s = output_tensor((a.shape[1],), a.dtype)
        t = output_tensor((), a.dtype)
        for i in range(a.shape[0]):
            for j in range(a.shape[1]):
                r[i] += a[i, j]
                s[j] += a[i, j] * a[i, j]
                t[()] += a[i, j] * r[i]
        return r, s, t
    """, lambda r, d: [normal(r, d)], [(3, 4), (1, 1)])

# ---------------------------------------------------------------- in-place outputs

case("in_place_scale", """
    def scale_inplace(a):
        for i in range(a.shape[0]):
            a[i] = a[i] * 2.0
        return a
    """, lambda r, d: [normal(r, d)], [(5,), (1,)])

case("in_place_mul", """
    def mul_inplace(a, b):
        for i in range(a.shape[0]):
            a[i] = a[i] * b[i]
        return a
    """, lambda r, d: [normal(r, d), normal(r, d)], [(5,)])

case("in_place_and_output", """
    def inplace_out(a, b):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            a[i] = a[i] * b[i]
            c[i] = a[i] + sin(b[i])
        return a, c
    """, lambda r, d: [normal(r, d), normal(r, d)], [(5,)])

case("in_place_gemm_scalars", """
    def gemm(alpha, beta, C, A, B):
        ni = C.shape[0]
        nj = C.shape[1]
        nk = A.shape[1]
        for i in range(ni):
            for j in range(nj):
                C[i, j] *= beta
            for k in range(nk):
                for j in range(nj):
                    C[i, j] += alpha * A[i, k] * B[k, j]
        return C
    """, lambda r, d: [1.5, 1.2, normal(r, d[:2]), normal(r, (d[0], d[2])), normal(r, (d[2], d[1]))],
    [(3, 4, 2), (1, 1, 1)])

# ---------------------------------------------------------------- scalar parameters, integer inputs

case("axpy_scalar", """
    def axpy(alpha, x, y):
        c = output_tensor(x.shape, x.dtype)
        for i in range(x.shape[0]):
            c[i] = alpha * x[i] + y[i]
        return c
    """, lambda r, d: [2.5, normal(r, d), normal(r, d)], [(5,), (1,)])

case("axpy_in_place_numpy_scalar", """
    def axpy_inplace(alpha, x, y):
        for i in range(x.shape[0]):
            y[i] += alpha * x[i] * x[i]
        return y
    """, lambda r, d: [np.float64(-0.75), normal(r, d), normal(r, d)], [(5,)])

case("accumulate_reading_its_own_target", """
    def acc_own(a, b):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            c[i] = a[i]
        for i in range(1, a.shape[0]):
            c[i] += c[i - 1] * b[i] + a[i] * b[i]
        return c
    """, lambda r, d: [normal(r, d), normal(r, d)], [(6,), (1,), (2,)])

case("gather_int_index", """
    def gather(a, idx, b):
        c = output_tensor(b.shape, a.dtype)
        for i in range(b.shape[0]):
            c[i] = a[idx[i]] * b[i]
        return c
    """, lambda r, d: [normal(r, d[:1]), indices(r, d[1:], d[0]), normal(r, d[1:])], [(4, 7), (1, 3)])

case("int_input_as_value", """
    def int_value(a, k):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            c[i] = a[i] * k[i] + float64(k[i]) * 0.5
        return c
    """, lambda r, d: [normal(r, d), indices(r, d, 5)], [(5,)])

# ---------------------------------------------------------------- ML kernels (benchmarks/ml.py, in float64)

SOFTMAX = case("softmax", """
    def softmax(x):
        n = x.shape[0]
        d = x.shape[1]
        out = output_tensor((n, d), x.dtype)
        for i in range(n):
            m = x[i, 0]
            for j in range(1, d):
                m = max(m, x[i, j])
            s = 0.0
            for j in range(d):
                e = exp(x[i, j] - m)
                out[i, j] = e
                s += e
            for j in range(d):
                out[i, j] = out[i, j] / s
        return out
    """, lambda r, d: [normal(r, d)], [(3, 5), (1, 1), (2, 1), (1, 4)])

LAYERNORM = case("layernorm", """
    def layernorm(x, gamma, beta, eps):
        n = x.shape[0]
        d = x.shape[1]
        out = output_tensor((n, d), x.dtype)
        for i in range(n):
            mean = 0.0
            for j in range(d):
                mean += x[i, j]
            mean = mean / d
            var = 0.0
            for j in range(d):
                t = x[i, j] - mean
                var += t * t
            var = var / d
            r = 1.0 / sqrt(var + eps)
            for j in range(d):
                out[i, j] = (x[i, j] - mean) * r * gamma[j] + beta[j]
        return out
    """, lambda r, d: [normal(r, d), positive(r, d[1:]), normal(r, d[1:]), 1e-5], [(3, 5), (2, 1), (1, 6)])

case("logsumexp", """
    def logsumexp(x):
        c = output_tensor((x.shape[0],), x.dtype)
        for i in range(x.shape[0]):
            m = x[i, 0]
            for j in range(1, x.shape[1]):
                m = max(m, x[i, j])
            s = 0.0
            for j in range(x.shape[1]):
                s += exp(x[i, j] - m)
            c[i] = m + log(s)
        return c
    """, lambda r, d: [normal(r, d)], [(3, 4), (1, 1)])

case("elementwise_chain", """
    def elementwise_chain(a, b, c):
        n = a.shape[0]
        m = a.shape[1]
        t1 = allocate((n, m), a.dtype)
        t2 = allocate((n, m), a.dtype)
        t3 = allocate((n, m), a.dtype)
        out = output_tensor((n, m), a.dtype)
        for i in range(n):
            for j in range(m):
                t1[i, j] = a[i, j] * b[i, j] + c[i, j]
        for i in range(n):
            for j in range(m):
                t2[i, j] = max(t1[i, j], 0.0)
        for i in range(n):
            for j in range(m):
                t3[i, j] = t2[i, j] * sigmoid(t2[i, j])
        for i in range(n):
            for j in range(m):
                out[i, j] = t3[i, j] + 0.5 * sqrt(abs(a[i, j])) - tanh(b[i, j])
        return out
    """, lambda r, d: [away(r, d), normal(r, d), away(r, d)], [(3, 4)])

# ---------------------------------------------------------------- more of the language

case("loop_hints", """
    def hints(a, b):
        c = output_tensor((a.shape[0],), a.dtype)
        for i in parallel(a.shape[0]):
            for j in serial(a.shape[1]):
                c[i] += a[i, j] * b[j]
        for i in unroll(a.shape[0]):
            c[i] = c[i] * c[i]
        return c
    """, lambda r, d: [normal(r, d), normal(r, d[1:])], [(3, 4)], tags=("language",))

case("negative_step", """
    def negstep(a):
        n = a.shape[0]
        c = output_tensor((n,), a.dtype)
        for i in range(n - 1, -1, -1):
            c[i] = a[i] * a[n - 1 - i]
        return c
    """, lambda r, d: [normal(r, d)], [(5,)], tags=("language",))

case("module_constant_and_cast", """
    SCALE = 0.5
    N = 3

    def const_cast(a):
        c = output_tensor((N,), a.dtype)
        for i in range(N):
            c[i] = float64(a[i] * SCALE) * a[i] + float64(i) * a[i]
        return c
    """, lambda r, d: [normal(r, d)], [(3,)], tags=("language",))

# ---------------------------------------------------------------- harder patterns

case("in_place_three_loops", """
    def inplace3(a, b):
        n = a.shape[0]
        for i in range(n):
            b[i] = a[i] * a[i]
        for i in range(n):
            a[i] = sin(b[i]) * a[i]
        for i in range(n):
            b[i] = b[i] * a[i] + cos(a[i])
        return a, b
    """, lambda r, d: [normal(r, d), normal(r, d)], [(5,), (1,)])

case("top_level_scalar_across_loops", """
    def scalar_top(a):
        n = a.shape[0]
        c = output_tensor((n,), a.dtype)
        s = 0.0
        for i in range(n):
            s = s * 0.5 + a[i] * a[i]
        for i in range(n):
            c[i] = s * a[i]
        return c
    """, lambda r, d: [normal(r, d)], [(5,), (1,)])

case("running_max_by_if", """
    def argmax_val(a):
        c = output_tensor((a.shape[0],), a.dtype)
        for i in range(a.shape[0]):
            m = a[i, 0]
            for j in range(1, a.shape[1]):
                if a[i, j] > m:
                    m = a[i, j]
            c[i] = m * m
        return c
    """, lambda r, d: [normal(r, d)], [(3, 5), (2, 1)])

case("row_max_intrinsic", """
    def row_max(a):
        c = output_tensor((a.shape[0],), a.dtype)
        for i in range(a.shape[0]):
            m = a[i, 0]
            for j in range(1, a.shape[1]):
                m = max(m, a[i, j])
            c[i] = m
        return c
    """, lambda r, d: [normal(r, d)], [(3, 5), (1, 1)])

case("step_two_loop", """
    def step2(a):
        n = a.shape[0]
        c = output_tensor((n,), a.dtype)
        for i in range(0, n, 2):
            c[i] = a[i] * a[i]
        for i in range(1, n, 2):
            c[i] = a[i] * a[i - 1]
        return c
    """, lambda r, d: [normal(r, d)], [(7,), (2,), (1,)])

case("three_d", """
    def three_d(a, w):
        c = output_tensor((a.shape[0], a.shape[2]), a.dtype)
        for i in range(a.shape[0]):
            for j in range(a.shape[1]):
                for k in range(a.shape[2]):
                    c[i, k] += a[i, j, k] * w[j] * a[i, j, k]
        return c
    """, lambda r, d: [normal(r, d), normal(r, d[1:2])], [(2, 3, 4), (1, 1, 1)])

case("pow_negative_base", """
    def pow_neg(a):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            c[i] = a[i] ** 2.0 + a[i] ** 3.0 + power(a[i], 2.0) + a[i] ** 2
        return c
    """, lambda r, d: [away(r, d)], [(8,)])

case("unused_input", """
    def unused(a, b):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            c[i] = a[i] * 2.0
        return c
    """, lambda r, d: [normal(r, d), normal(r, d)], [(4,)])

case("affine_guard_triangle", """
    def guard_tri(a):
        n = a.shape[0]
        c = output_tensor((n,), a.dtype)
        for i in range(n):
            for j in range(n):
                if j < i:
                    c[i] += a[i, j] * a[j, i]
                elif j == i:
                    c[i] += a[i, i] * a[i, i] * a[i, i]
        return c
    """, lambda r, d: [normal(r, (d[0], d[0]))], [(4,), (1,)])

case("boundary_elif", """
    def clamp_stencil(a):
        n = a.shape[0]
        c = output_tensor((n,), a.dtype)
        for i in range(n):
            if i == 0:
                c[i] = a[i] * a[i + 1]
            elif i == n - 1:
                c[i] = a[i] * a[i - 1]
            else:
                c[i] = a[i - 1] * a[i + 1] + a[i]
        return c
    """, lambda r, d: [normal(r, d)], [(6,), (2,)])

case("time_loop_local_temp", """
    def diffuse(a):
        n = a.shape[0]
        for t in range(3):
            tmp = allocate((n,), a.dtype)
            for i in range(1, n - 1):
                tmp[i] = a[i - 1] * a[i + 1]
            for i in range(1, n - 1):
                a[i] = a[i] + 0.1 * tmp[i] + 0.2 * tmp[i] * tmp[i]
        return a
    """, lambda r, d: [normal(r, d)], [(6,), (3,)], tags=("tape",))

case("accumulate_then_overwrite", """
    def acc_over(a):
        c = output_tensor((a.shape[0],), a.dtype)
        for i in range(a.shape[0]):
            for j in range(a.shape[1]):
                c[i] += a[i, j]
        for i in range(a.shape[0]):
            c[i] = c[i] * c[i] + sin(c[i])
        return c
    """, lambda r, d: [normal(r, d)], [(3, 4), (1, 1)])

case("temp_squared_in_place", """
    def temp_inplace(a, b):
        n = a.shape[0]
        t = allocate((n,), a.dtype)
        c = output_tensor((n,), a.dtype)
        for i in range(n):
            t[i] = a[i] + b[i]
        for i in range(n):
            t[i] = t[i] * t[i]
        for i in range(n):
            t[i] = exp(t[i] * 0.1) * a[i]
        for i in range(n):
            c[i] = t[i] * b[i]
        return c
    """, lambda r, d: [normal(r, d), normal(r, d)], [(5,), (1,)])

case("mixed_shift_and_broadcast", """
    def mixed(a, w):
        n = a.shape[0]
        m = a.shape[1]
        c = output_tensor((n, m - 1), a.dtype)
        for i in range(n):
            for j in range(m - 1):
                c[i, j] = (a[i, j + 1] - a[i, j]) * w[j] + a[i, j] * a[i, j + 1] * w[0]
        return c
    """, lambda r, d: [normal(r, d), normal(r, (d[1],))], [(3, 5), (1, 2)])

case("scalar_reduction_then_second_pass", """
    def normalize(a):
        n = a.shape[0]
        c = output_tensor((n,), a.dtype)
        s = 0.0
        for i in range(n):
            s += a[i] * a[i]
        r = rsqrt(s + 1.0)
        for i in range(n):
            c[i] = a[i] * r
        return c
    """, lambda r, d: [normal(r, d)], [(5,), (1,)])


# ---------------------------------------------------------------- found by fuzzing (kernelgen vs finite differences)

case("overwrite_boundary_with_constant", """
    def zero_boundary(a):
        n = a.shape[0]
        c = output_tensor((n,), a.dtype)
        for i in range(n):
            c[i] = a[i] * a[i]
        c[0] = 0.0
        return c
    """, lambda r, d: [normal(r, d)], [(5,), (1,)])

case("overwrite_in_later_loop_with_constant", """
    def overwritten(a, b):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            c[i] = a[i] * b[i]
        for i in range(1, a.shape[0]):
            c[i] = 3.0
        return c
    """, lambda r, d: [normal(r, d), normal(r, d)], [(5,)])

case("last_write_wins", """
    def last_write(a):
        c = output_tensor((1,), a.dtype)
        for i in range(a.shape[0]):
            c[0] = a[i] * a[i]
        return c
    """, lambda r, d: [normal(r, d)], [(5,), (1,)])

case("non_injective_write", """
    def halve(a):
        n = a.shape[0]
        c = output_tensor(((n + 1) // 2,), a.dtype)
        for i in range(n):
            c[i // 2] = a[i] * a[i]
        return c
    """, lambda r, d: [normal(r, d)], [(5,), (4,)])

case("guarded_shift_ifexp_right", """
    def right_neighbour(a):
        n = a.shape[0]
        c = output_tensor((n,), a.dtype)
        for i in range(n):
            c[i] = a[i] * (a[i + 1] if i < n - 1 else 1.0)
        return c
    """, lambda r, d: [normal(r, d)], [(5,), (1,)])

case("guarded_shift_ifexp_left", """
    def left_neighbour(a, b):
        n = a.shape[0]
        c = output_tensor((n,), a.dtype)
        for i in range(n):
            c[i] = (a[i - 1] if i >= 1 else 0.0) * b[i] + a[i]
        return c
    """, lambda r, d: [normal(r, d), normal(r, d)], [(5,), (1,)])

case("allocate_shape_from_alias", """
    def alias_shape(a):
        m = a.shape[1]
        c = output_tensor((a.shape[0],), a.dtype)
        for i in range(a.shape[0]):
            t = allocate((m,), a.dtype)
            for j in range(a.shape[1]):
                t[j] = a[i, j] * a[i, j]
            for j in range(a.shape[1]):
                c[i] += t[j] * a[i, j]
        return c
    """, lambda r, d: [normal(r, d)], [(3, 4)])


case("accumulation_overwritten_next_iteration", """
    def acc_killed(a):
        n = a.shape[0]
        c = output_tensor((n,), a.dtype)
        for i in range(n - 1):
            c[n - 1 - i] = 0.5
            c[n - 2 - i] += a[i] * a[i]
        return c
    """, lambda r, d: [normal(r, d)], [(5,), (2,)])

case("output_read_then_overwritten_twice", """
    def read_then_overwrite(a):
        c = output_tensor(a.shape, a.dtype)
        c[0] = a[0]
        c[1] = a[1] * a[0]
        for i in range(2, a.shape[0]):
            s = c[i - 2] * 0.5
            c[i] = s + c[i - 1]
            c[i] = a[i] * a[i]
        return c
    """, lambda r, d: [normal(r, d)], [(6,)])

case("dead_copy_of_scalar_set_in_if", """
    def dead_copy(a, b):
        c = output_tensor((), a.dtype)
        s2 = 0.5
        for i in range(a.shape[0]):
            s3 = s2
            if b[i] > 0.0:
                s2 = a[i] * a[i]
                c[()] += b[i] * a[i]
        return c
    """, lambda r, d: [normal(r, d), away(r, d)], [(6,)])


case("in_place_overwritten_by_other_input", """
    def replace_inplace(a, b):
        for i in range(0, a.shape[0], 2):
            a[i] = b[i] * 2.0
        return a
    """, lambda r, d: [normal(r, d), normal(r, d)], [(5,), (1,)])

case("in_place_set_to_constant", """
    def clear_inplace(a, b):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            c[i] = a[i] * b[i]
            a[i] = 0.0
        return a, c
    """, lambda r, d: [normal(r, d), normal(r, d)], [(4,)])


case("elif_on_overwritten_value", """
    def clamp_sum(a):
        c = output_tensor((1,), a.dtype)
        for i in range(a.shape[0]):
            c[0] += a[i]
        if c[0] > 5.0:
            c[0] = c[0] * 3.0
        elif c[0] > 0.0:
            c[0] = c[0] * c[0]
        return c
    """, lambda r, d: [positive(r, d, 0.3, 1.2)], [(3,), (6,)])


case("in_place_reads_output_before_it_is_written", """
    def early_read(a):
        n = a.shape[0]
        c = output_tensor(a.shape, a.dtype)
        for i in range(n - 2):
            a[i] = a[i] + c[i + 2]
        for i in range(n):
            c[i] = a[i] * a[i]
        return c, a
    """, lambda r, d: [normal(r, d)], [(5,)])


case("in_place_through_scalar", """
    def square_inplace(a):
        for i in range(a.shape[0]):
            s = a[i] * 2.0
            a[i] = s * s
        return a
    """, lambda r, d: [normal(r, d)], [(5,), (1,)])

case("time_loop_scalar_then_in_place", """
    def coupled(a, b):
        for t in range(2):
            for i in range(1, a.shape[0] - 1):
                s = a[i - 1] * a[i + 1]
                b[i] = s * b[i]
                a[i] = sin(s)
        return a, b
    """, lambda r, d: [normal(r, d), normal(r, d)], [(5,)], tags=("tape",))

case("in_place_pairwise_recurrence", """
    def pairwise(a):
        for i in range(1, a.shape[0]):
            t = a[i - 1]
            a[i - 1] = a[i] * t
            a[i] = t + a[i]
        return a
    """, lambda r, d: [normal(r, d, 0.8)], [(5,), (2,)])


case("replayed_scalar_reads_a_cell_a_later_iteration_overwrites", """
    def mirror(x0):
        y0 = output_tensor((x0.shape[0] + 1,), "float64")
        for i in range(x0.shape[0]):
            y0[x0.shape[0] - 1 - i] = x0[i] * x0[i]
            s2 = (y0[i + 1] if i < x0.shape[0] - 1 else 0.0)
            s2 *= x0[i]
            y0[i] = s2
        return y0
    """, lambda r, d: [normal(r, d)], [(3,), (5,), (1,)])


case("branch_local_scalar_and_running_value", """
    def running(a, b):
        c = output_tensor((1,), a.dtype)
        for i in range(a.shape[0]):
            if b[i] > 0.0:
                s = a[i] * a[i]
                c[0] = s
            else:
                c[0] = c[0] * a[i] + 1.0
        return c
    """, lambda r, d: [away(r, d), away(r, d)], [(6,), (1,)])


BY_NAME = {c.name: c for c in CASES}
assert len(BY_NAME) == len(CASES), "duplicate case names"


# ------------------------------------------------------------------ running and the oracle

@functools.lru_cache(maxsize=None)
def kernel_of(name: str) -> hyb.Kernel:
    c = BY_NAME[name]
    return hyb.compile_source(c.src, filename=f"<grad case {name}>").kernels[c.kernel_name]


@functools.lru_cache(maxsize=None)
def grad_of(name: str, with_outputs: bool = False) -> hyb.Kernel:
    k = kernel_of(name)
    return k.grad(with_outputs=True) if with_outputs else k.grad()


def copies(args):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def forward(kernel, args) -> tuple:
    """The forward outputs on copies of the arguments (an input written in place stays as it was).
    Warnings about the forward kernel (a read of an output before it is written) are not what is tested."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hyb.HybridWarning)
        return tuple(np.asarray(o) for o in as_tuple(kernel(*copies(args))))


def is_float_array(a) -> bool:
    return isinstance(a, np.ndarray) and a.dtype.kind == "f"


def loss(kernel, args, douts) -> float:
    return float(sum(np.sum(d * o) for d, o in zip(douts, forward(kernel, args))))


def fd_grads(kernel, args, douts, eps=EPS) -> list:
    """Central differences of sum(dout * forward(args)) for every float array argument; None for the others."""
    grads = []
    for p, a in enumerate(args):
        if not is_float_array(a):
            grads.append(None)
            continue
        g = np.zeros(a.shape, np.float64)
        for idx in np.ndindex(*a.shape):
            plus, minus = copies(args), copies(args)
            plus[p][idx] += eps
            minus[p][idx] -= eps
            g[idx] = (loss(kernel, plus, douts) - loss(kernel, minus, douts)) / (2 * eps)
        grads.append(g)
    return grads


def random_douts(rng, outs) -> list:
    return [rng.standard_normal(o.shape).astype(o.dtype) if o.ndim else np.asarray(rng.standard_normal(), o.dtype)
            for o in outs]


def loss_scale(outs, douts) -> float:
    return float(sum(np.sum(np.abs(d * o)) for d, o in zip(douts, outs)))


def assert_grads_close(got, want, *, rtol, atol, what=""):
    """got/want: lists of per-input gradients (None where an input has none)."""
    assert len(got) == len(want), f"{what}: {len(got)} gradients for {len(want)} inputs"
    for p, (g, w) in enumerate(zip(got, want)):
        if w is None:
            assert g is None, f"{what}: input {p} has no gradient (integer or scalar) but got {type(g).__name__}"
            continue
        assert g is not None, f"{what}: input {p}: no gradient returned"
        g = np.asarray(g)
        assert g.shape == w.shape, f"{what}: input {p}: gradient shape {g.shape}, expected {w.shape}"
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"{what}: gradient of input {p}")
