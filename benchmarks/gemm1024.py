"""The float32 gemm 1024x1024x1024 with speed targets of its own.

The loops are PolyBench's gemm (i, k, j order; C = alpha*A*B + beta*C) on float32 arrays.
"""
from __future__ import annotations

import numpy as np

from .polybench.blas import GEMM, GEMM_C, gemm_init
from .spec import Bench

N = 1024
DIMS = {"NI": N, "NJ": N, "NK": N}

GEMM_F32 = Bench(
    name="gemm-f32-1024", group="target",
    sizes={s: dict(DIMS) for s in ("mini", "small", "medium", "large")},
    init=lambda d: gemm_init(d, dtype=np.float32), params=GEMM.params, hyb=GEMM.hyb,
    hyb_params=GEMM.hyb_params, outputs=GEMM.outputs, loops=GEMM.loops, numpy=GEMM.numpy,
    c=GEMM_C.replace("double", "float"), c_dims=GEMM.c_dims, rtol=1e-4, atol=1e-5,
    flops=GEMM.flops, entry_name="kernel_gemm",
)


def _gemm(name: str, dims: dict, dtype, rtol: float, atol: float, c_type: str) -> Bench:
    """PolyBench's gemm loops at ``dims`` in ``dtype``, against BLAS in NumPy (group ``dense``)."""
    return Bench(
        name=name, group="dense",
        sizes={s: dict(dims) for s in ("mini", "small", "medium", "large")},
        init=lambda d: gemm_init(d, dtype=dtype), params=GEMM.params, hyb=GEMM.hyb,
        hyb_params=GEMM.hyb_params, outputs=GEMM.outputs, loops=GEMM.loops, numpy=GEMM.numpy,
        c=GEMM_C.replace("double", c_type), c_dims=GEMM.c_dims, rtol=rtol, atol=atol,
        flops=GEMM.flops, entry_name="kernel_gemm",
    )


# Dense algebra at sizes where the memory hierarchy matters: double precision, and float32 at
# extents that no block size divides.
DENSE = [
    _gemm("dgemm-1024", DIMS, np.float64, 1e-10, 1e-10, "double"),
    _gemm("sgemm-1000x1100x900", {"NI": 1000, "NJ": 1100, "NK": 900}, np.float32, 1e-4, 1e-5, "float"),
]
