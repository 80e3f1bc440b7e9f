"""The gradients of the benchmark suite's gradient kernels (``benchmarks/grad.py``), as a user
gets them from ``kernel.grad()``, against the float64 NumPy references the benchmark checks
them with, at sizes the benchmark does not run: one element, odd sizes, no rows.  Where torch
is installed, the references themselves are checked against torch's autograd in
``tests/test_benchmarks.py``."""
import numpy as np
import pytest

from benchmarks import grad as gradbench
from benchmarks.harness import all_benches
from benchmarks.peers import hyb_module

ROWS = [dict(N=1, D=1), dict(N=3, D=5), dict(N=0, D=4)]
# a normalisation over one element has a gradient that cancels to about eps: float32 cannot say
NORMS = [dict(N=1, D=3), dict(N=3, D=5), dict(N=0, D=4)]
SIZES = {
    "softmax": ROWS, "log-softmax": ROWS, "layernorm": NORMS, "rmsnorm": NORMS, "gelu": ROWS,
    "silu-chain": ROWS,
    "conv2d": [dict(NB=1, C=1, K=1, H=3, W=4, R=3, S=2), dict(NB=2, C=3, K=2, H=5, W=7, R=2, S=3)],
    "gemm": [dict(NI=1, NJ=1, NK=1), dict(NI=3, NJ=5, NK=7)],
    "attention": [dict(H=1, N=1, D=1), dict(H=2, N=5, D=3)],
    "max-pool": [dict(NB=1, C=1, H=2, W=3), dict(NB=2, C=3, H=5, W=7)],
    "jacobi-2d": [dict(TSTEPS=1, N=3), dict(TSTEPS=3, N=7)],
}


def test_every_gradient_kernel_is_covered():
    assert set(SIZES) == set(gradbench.GRAD_KERNELS)


@pytest.mark.parametrize("name", sorted(SIZES))
def test_gradient_matches_the_reference_at_edge_sizes(name):
    bench = all_benches()[name]
    for dims in SIZES[name]:
        mod, entry = hyb_module(bench, dims, {"threads": 1})
        kernel = mod.kernels[entry]
        ok, err, _, why = gradbench.check(bench, kernel, kernel.grad(), bench.init(dims), dims)
        assert ok, f"{name} at {dims}: {why} (error {err:.3g})"
