"""The PolyBench/C 4.2.1 kernels as hybrid kernels, with their Numba, NumPy and C peers."""
from . import blas, datamining, kernels, medley, solvers, stencils

_ORDER = ("gemm", "2mm", "3mm", "atax", "bicg", "mvt", "gemver", "gesummv", "syrk", "syr2k", "trmm",
          "doitgen", "jacobi-1d", "jacobi-2d", "heat-3d", "seidel-2d", "fdtd-2d", "covariance",
          "correlation", "lu", "cholesky", "trisolv", "floyd-warshall")

_ALL = {b.name: b for m in (blas, kernels, solvers, stencils, datamining, medley) for b in m.BENCHES}
BENCHES = [_ALL[n] for n in _ORDER] + [b for n, b in _ALL.items() if n not in _ORDER]
