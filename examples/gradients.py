"""Gradients derived by hyb: a matrix product and a row softmax, checked against NumPy.

Run from the repository root: python examples/gradients.py
"""
from pathlib import Path

import numpy as np

import hyb

HERE = Path(__file__).resolve().parent

matmul = hyb.load(HERE / "matmul.hyb").matmul


@hyb.hybrid
def softmax(x):
    out = output_tensor(x.shape, x.dtype)  # noqa: F821 - a name of the kernel language
    for i in range(x.shape[0]):
        m = x[i, 0]
        for j in range(1, x.shape[1]):
            m = max(m, x[i, j])
        s = x.dtype(0)
        for j in range(x.shape[1]):
            s += exp(x[i, j] - m)  # noqa: F821
        for j in range(x.shape[1]):
            out[i, j] = exp(x[i, j] - m) / s  # noqa: F821
    return out


rng = np.random.default_rng(0)
a, b = rng.standard_normal((4, 3)), rng.standard_normal((3, 5))
dout = rng.standard_normal((4, 5))
da, db = matmul.grad()(a, b, dout)
assert np.allclose(da, dout @ b.T) and np.allclose(db, a.T @ dout)
print(matmul.grad().source)

x = rng.standard_normal((3, 6))
dy = rng.standard_normal((3, 6))
y = softmax(x)
dx = softmax.grad()(x, dy)
assert np.allclose(dx, y * (dy - (dy * y).sum(axis=1, keepdims=True)))
print(softmax.compile(x).inspect("grad"))
print("gradients match NumPy")
