"""Load two .hyb files, run their kernels on random data and compare with NumPy.

    python examples/quickstart.py
"""
from pathlib import Path

import numpy as np

import hyb

HERE = Path(__file__).resolve().parent


def main():
    rng = np.random.default_rng(0)

    add = hyb.load(HERE / "add.hyb").add
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((3, 4)).astype(np.float32)
    got, want = add(a, b), a + b
    print("add:\n", got, "\nnumpy:\n", want)
    print("max difference:", np.abs(got - want).max())

    matmul = hyb.load(HERE / "matmul.hyb").matmul
    a = rng.standard_normal((4, 5))
    b = rng.standard_normal((5, 3))
    got, want = matmul(a, b), a @ b
    print("matmul:\n", got, "\nnumpy:\n", want)
    print("max difference:", np.abs(got - want).max())


if __name__ == "__main__":
    main()
