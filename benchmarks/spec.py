"""What one benchmark is: a hybrid kernel and its peers, sizes, data and tolerances.

Every benchmark follows PolyBench's conventions: ``init`` builds the arrays and scalars of
``init_array`` for a size (deterministic), the peers (plain loops for Numba, NumPy, C) take
``params`` in order and write their results into those arrays, and the hybrid kernel takes
``hyb_params`` and returns ``outputs`` (arrays that PolyBench only uses as scratch become
``allocate`` temporaries, arrays it only writes become ``output_tensor``; arrays it updates
stay inputs, written in place and returned).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

try:  # the loop functions are plain Python; Numba compiles them when it is installed
    from numba import prange
except ImportError:  # pragma: no cover - exercised where numba is missing
    prange = range

SIZES = ("mini", "small", "medium", "large")


@dataclass
class Bench:
    name: str                      # PolyBench's name: "gemm", "jacobi-2d", ...
    group: str                     # "polybench" or "ml"
    sizes: dict                    # size name -> {dimension name: int}
    init: Callable                 # dims -> {name: array or scalar}, PolyBench's init_array
    params: tuple                  # argument order of the peers (loops, numpy, C after the C dims)
    hyb: str                       # hybrid kernel text, a `def` named `entry`
    hyb_params: tuple              # argument order of the hybrid kernel
    outputs: tuple                 # arrays compared; the hybrid kernel returns them in this order
    loops: Callable                # the same loops in Python (`prange` where legal) for Numba
    numpy: Callable | None = None  # a NumPy version (vectorised where natural), same params
    c: str | None = None           # C99 `void kernel(long <c_dims>..., <params>)`, PolyBench's loops
    c_dims: tuple = ()             # dimensions passed first to the C function (as long)
    hyb_consts: tuple = ()         # dimensions given to the hybrid kernel as module constants
    parallel: bool = True          # `loops` has a prange on a loop that may run in parallel
    rtol: float = 1e-6
    atol: float = 1e-9             # absolute tolerance, relative to the reference's largest |value|
    flops: Callable | None = None  # dims -> floating-point operations (for GFLOP/s), optional
    notes: list = field(default_factory=list)
    entry_name: str = ""           # the hybrid kernel's name, if not kernel_<name>
    hyb_modes: bool = False        # an elementwise or row kernel: hyb is also timed with sums in program
                                   # order and in its default mode (peers.MODE_VARIANTS), and it has row-kernel targets

    @property
    def entry(self) -> str:
        return self.entry_name or "kernel_" + self.name.replace("-", "_")

    def dims(self, size: str) -> dict:
        return dict(self.sizes[size])

    def hyb_text(self, dims: dict) -> str:
        """The kernel text with this size's module-level constants in front."""
        head = "".join(f"{k} = {int(dims[k])}\n" for k in self.hyb_consts)
        return head + "\n" + self.hyb.strip("\n") + "\n"


def grid(*shape):
    """Integer index arrays broadcasting over ``shape`` (like C loop counters)."""
    return np.ix_(*[np.arange(n, dtype=np.int64) for n in shape])


def f64(x):
    return np.ascontiguousarray(x, dtype=np.float64)


def f32(x):
    return np.ascontiguousarray(x, dtype=np.float32)


def sizes(mini, small, medium, large, names):
    """Size table from PolyBench's four dataset tuples, in the order of ``names``."""
    return {s: dict(zip(names, v)) for s, v in zip(SIZES, (mini, small, medium, large))}
