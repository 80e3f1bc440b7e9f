"""PolyBench/C 4.2.1 linear-algebra/solvers: lu, cholesky, trisolv."""
import numpy as np

from ..spec import Bench, f64, grid, sizes


def spd_init(d):
    """lu's and cholesky's init_array: a lower-triangular L, then A = L L^T (positive semi-definite)."""
    n = d["N"]
    i, j = grid(n, n)
    # C's (-j % n) is -j for 0 <= j < n (remainder truncates toward zero)
    L = np.where(j <= i, -j / n + 1.0, 0.0)
    L[np.arange(n), np.arange(n)] = 1.0
    return dict(A=f64(L @ L.T))


# ---------------------------------------------------------------- lu

LU_HYB = """
def kernel_lu(A):
    n = A.shape[0]
    for i in range(n):
        for j in range(i):
            for k in range(j):
                A[i, j] -= A[i, k] * A[k, j]
            A[i, j] /= A[j, j]
        for j in range(i, n):
            for k in range(i):
                A[i, j] -= A[i, k] * A[k, j]
    return A
"""


def lu_loops(A):
    n = A.shape[0]
    for i in range(n):  # row i needs every row above it: no parallel loop as written
        for j in range(i):
            for k in range(j):
                A[i, j] -= A[i, k] * A[k, j]
            A[i, j] /= A[j, j]
        for j in range(i, n):
            for k in range(i):
                A[i, j] -= A[i, k] * A[k, j]


def lu_numpy(A):
    # right-looking Doolittle without pivoting: the same factors, updated a column at a time
    n = A.shape[0]
    for k in range(n - 1):
        A[k + 1:, k] /= A[k, k]
        A[k + 1:, k + 1:] -= np.outer(A[k + 1:, k], A[k, k + 1:])


LU_C = """
void kernel(long n, double A[restrict n][n])
{
  for (int i = 0; i < n; i++) {
    for (int j = 0; j < i; j++) {
      for (int k = 0; k < j; k++)
        A[i][j] -= A[i][k] * A[k][j];
      A[i][j] /= A[j][j];
    }
    for (int j = i; j < n; j++)
      for (int k = 0; k < i; k++)
        A[i][j] -= A[i][k] * A[k][j];
  }
}
"""

LU = Bench(
    name="lu", group="polybench",
    sizes=sizes((40,), (120,), (400,), (2000,), ("N",)),
    init=spd_init, params=("A",), hyb=LU_HYB, hyb_params=("A",), outputs=("A",),
    loops=lu_loops, numpy=lu_numpy, c=LU_C, c_dims=("N",), parallel=False,
    flops=lambda d: 2.0 * d["N"] ** 3 / 3,
)

# ---------------------------------------------------------------- cholesky

CHOLESKY_HYB = """
def kernel_cholesky(A):
    n = A.shape[0]
    for i in range(n):
        for j in range(i):
            for k in range(j):
                A[i, j] -= A[i, k] * A[j, k]
            A[i, j] /= A[j, j]
        for k in range(i):
            A[i, i] -= A[i, k] * A[i, k]
        A[i, i] = sqrt(A[i, i])
    return A
"""


def cholesky_loops(A):
    n = A.shape[0]
    for i in range(n):  # row i needs every row above it: no parallel loop as written
        for j in range(i):
            for k in range(j):
                A[i, j] -= A[i, k] * A[j, k]
            A[i, j] /= A[j, j]
        for k in range(i):
            A[i, i] -= A[i, k] * A[i, k]
        A[i, i] = np.sqrt(A[i, i])


def cholesky_numpy(A):
    low = np.tril(np.ones(A.shape, dtype=bool))
    A[low] = np.linalg.cholesky(A)[low]  # the kernel leaves the strict upper triangle as it was


CHOLESKY_C = """
void kernel(long n, double A[restrict n][n])
{
  for (int i = 0; i < n; i++) {
    for (int j = 0; j < i; j++) {
      for (int k = 0; k < j; k++)
        A[i][j] -= A[i][k] * A[j][k];
      A[i][j] /= A[j][j];
    }
    for (int k = 0; k < i; k++)
      A[i][i] -= A[i][k] * A[i][k];
    A[i][i] = sqrt(A[i][i]);
  }
}
"""

CHOLESKY = Bench(
    name="cholesky", group="polybench",
    sizes=sizes((40,), (120,), (400,), (2000,), ("N",)),
    init=spd_init, params=("A",), hyb=CHOLESKY_HYB, hyb_params=("A",), outputs=("A",),
    loops=cholesky_loops, numpy=cholesky_numpy, c=CHOLESKY_C, c_dims=("N",), parallel=False,
    flops=lambda d: 1.0 * d["N"] ** 3 / 3,
)

# ---------------------------------------------------------------- trisolv

TRISOLV_HYB = """
def kernel_trisolv(L, b):
    n = L.shape[0]
    x = output_tensor((n,), L.dtype)
    for i in range(n):
        x[i] = b[i]
        for j in range(i):
            x[i] -= L[i, j] * x[j]
        x[i] = x[i] / L[i, i]
    return x
"""


def trisolv_loops(L, x, b):
    n = L.shape[0]
    for i in range(n):  # x[i] needs every x[j], j < i: no parallel loop as written
        x[i] = b[i]
        for j in range(i):
            x[i] -= L[i, j] * x[j]
        x[i] = x[i] / L[i, i]


def trisolv_numpy(L, x, b):
    n = L.shape[0]
    for i in range(n):
        x[i] = (b[i] - L[i, :i] @ x[:i]) / L[i, i]


TRISOLV_C = """
void kernel(long n, double L[restrict n][n], double x[restrict n], double b[restrict n])
{
  for (int i = 0; i < n; i++) {
    x[i] = b[i];
    for (int j = 0; j < i; j++)
      x[i] -= L[i][j] * x[j];
    x[i] = x[i] / L[i][i];
  }
}
"""


def trisolv_init(d):
    n = d["N"]
    i, j = grid(n, n)
    L = np.where(j <= i, (i + n - j + 1) * 2.0 / n, 0.0)
    return dict(L=f64(L), x=np.full(n, -999.0), b=f64(np.arange(n)))


TRISOLV = Bench(
    name="trisolv", group="polybench",
    sizes=sizes((40,), (120,), (400,), (2000,), ("N",)),
    init=trisolv_init, params=("L", "x", "b"), hyb=TRISOLV_HYB, hyb_params=("L", "b"), outputs=("x",),
    loops=trisolv_loops, numpy=trisolv_numpy, c=TRISOLV_C, c_dims=("N",), parallel=False,
    flops=lambda d: 1.0 * d["N"] ** 2,
)

BENCHES = [LU, CHOLESKY, TRISOLV]
