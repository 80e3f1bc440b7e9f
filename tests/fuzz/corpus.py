"""Hand-written seed kernels for the front-end fuzzer: between them they use most of the language.
Each is (source, arguments of its kernel `k`)."""
from __future__ import annotations

import numpy as np

MATMUL = '''"""Matrix product."""
N = 4


def k(a, b):
    c = output_tensor((a.shape[0], b.shape[1]), a.dtype)
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            for kk in reduce(a.shape[1]):
                c[i, j] += a[i, kk] * b[kk, j]
    return c
'''

SOFTMAX = '''
def k(x):
    out = output_tensor(x.shape, x.dtype)
    for i in range(x.shape[0]):
        m = x[i, 0]
        for j in range(1, x.shape[1]):
            m = max(m, x[i, j])
        s = 0.0
        for j in range(x.shape[1]):
            out[i, j] = exp(x[i, j] - m)
            s += out[i, j]
        for j in range(x.shape[1]):
            out[i, j] = out[i, j] / s
    return out
'''

STENCIL = '''
C1 = 3
F1 = 0.5


def h(x0):
    y0 = output_tensor(x0.shape, "float64")
    for i in range(1, x0.shape[0] - 1):
        y0[i] = F1 * (x0[i - 1] + x0[i + 1]) if i % 2 == 0 else x0[i]
    return y0


def k(a, idx, alpha):
    """A stencil, a histogram and a triangular loop."""
    n = a.shape[0]
    b = output_tensor((n,), a.dtype)
    hist = output_tensor((C1 + 1,), "int32")
    t = h(a)
    tmp = allocate((n,), "float32")
    for i in serial(n - 1, -1, -1):
        if i >= 1 and i < n - 1:
            b[i] = alpha * (t[i - 1] - 2.0 * a[i] + a[i + 1])
        elif i == 0:
            b[i] = sqrt(abs(a[i])) + float64(idx[i] % 2)
        else:
            b[i] = -a[i] ** 2
        hist[idx[i] % (C1 + 1)] += 1
        for j in range(i + 1):
            tmp[j] += float32(a[j]) / (1 + j)
    for g in grid(b.shape):
        b[g] += tmp[g[0]] if not isnan(b[g]) else 0.0
    return b, hist
'''

SCALARS = '''
def k(x, y):
    z = output_tensor((), "float64")
    w = output_tensor(x.shape, "int64")
    acc = 0.0
    for i in parallel(len(x)):
        q = int64(x[i]) // 3
        w[i] = q % 7 if q > 0 else ceil_div(q, 2)
        w[i] -= popcount(uint8(i))
    for i in range(x.shape[0]):
        acc += x[i] * y[i] if 0 <= i < y.shape[0] else 0.0
        y[i] = round(y[i] * 0.5)
    z[()] = acc + float64(x.ndim)
    return z, w, y
'''


def cases():
    rng = np.random.default_rng(11)
    return [
        (MATMUL, [rng.standard_normal((3, 4)), rng.standard_normal((4, 2))]),
        (SOFTMAX, [rng.standard_normal((3, 5)).astype(np.float32)]),
        (STENCIL, [rng.standard_normal(7), rng.integers(0, 9, 7), 0.5]),
        (SCALARS, [rng.standard_normal(6) * 10, rng.standard_normal(6)]),
    ]
