"""PolyBench/C 4.2.1 linear-algebra/blas: gemm, gemver, gesummv, syrk, syr2k, trmm."""
import numpy as np

from ..spec import Bench, f64, grid, prange, sizes

# ---------------------------------------------------------------- gemm

GEMM_HYB = """
def kernel_gemm(alpha, beta, C, A, B):
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
"""


def gemm_loops(alpha, beta, C, A, B):
    ni, nj = C.shape
    nk = A.shape[1]
    for i in prange(ni):
        for j in range(nj):
            C[i, j] *= beta
        for k in range(nk):
            for j in range(nj):
                C[i, j] += alpha * A[i, k] * B[k, j]


def gemm_numpy(alpha, beta, C, A, B):
    C *= beta
    C += alpha * (A @ B)


GEMM_C = """
void kernel(long ni, long nj, long nk, double alpha, double beta,
            double C[restrict ni][nj], double A[restrict ni][nk], double B[restrict nk][nj])
{
  for (int i = 0; i < ni; i++) {
    for (int j = 0; j < nj; j++)
      C[i][j] *= beta;
    for (int k = 0; k < nk; k++)
      for (int j = 0; j < nj; j++)
        C[i][j] += alpha * A[i][k] * B[k][j];
  }
}
"""


def gemm_init(d, dtype=np.float64):
    ni, nj, nk = d["NI"], d["NJ"], d["NK"]
    i, j = grid(ni, nj)
    C = ((i * j + 1) % ni) / ni
    i, j = grid(ni, nk)
    A = (i * (j + 1) % nk) / nk
    i, j = grid(nk, nj)
    B = (i * (j + 2) % nj) / nj
    cast = (lambda x: np.ascontiguousarray(x, dtype=dtype))
    scalar = (float if dtype == np.float64 else np.dtype(dtype).type)
    return dict(alpha=scalar(1.5), beta=scalar(1.2), C=cast(C), A=cast(A), B=cast(B))


GEMM = Bench(
    name="gemm", group="polybench",
    sizes=sizes((20, 25, 30), (60, 70, 80), (200, 220, 240), (1000, 1100, 1200), ("NI", "NJ", "NK")),
    init=gemm_init, params=("alpha", "beta", "C", "A", "B"),
    hyb=GEMM_HYB, hyb_params=("alpha", "beta", "C", "A", "B"), outputs=("C",),
    loops=gemm_loops, numpy=gemm_numpy, c=GEMM_C, c_dims=("NI", "NJ", "NK"),
    flops=lambda d: 2.0 * d["NI"] * d["NJ"] * d["NK"],
)

# ---------------------------------------------------------------- gemver

GEMVER_HYB = """
def kernel_gemver(alpha, beta, A, u1, v1, u2, v2, w, x, y, z):
    n = A.shape[0]
    for i in range(n):
        for j in range(n):
            A[i, j] = A[i, j] + u1[i] * v1[j] + u2[i] * v2[j]
    for i in range(n):
        for j in range(n):
            x[i] = x[i] + beta * A[j, i] * y[j]
    for i in range(n):
        x[i] = x[i] + z[i]
    for i in range(n):
        for j in range(n):
            w[i] = w[i] + alpha * A[i, j] * x[j]
    return A, w, x
"""


def gemver_loops(alpha, beta, A, u1, v1, u2, v2, w, x, y, z):
    n = A.shape[0]
    for i in prange(n):
        for j in range(n):
            A[i, j] = A[i, j] + u1[i] * v1[j] + u2[i] * v2[j]
    for i in prange(n):
        for j in range(n):
            x[i] = x[i] + beta * A[j, i] * y[j]
    for i in prange(n):
        x[i] = x[i] + z[i]
    for i in prange(n):
        for j in range(n):
            w[i] = w[i] + alpha * A[i, j] * x[j]


def gemver_numpy(alpha, beta, A, u1, v1, u2, v2, w, x, y, z):
    A += np.outer(u1, v1) + np.outer(u2, v2)
    x += beta * (A.T @ y)
    x += z
    w += alpha * (A @ x)


GEMVER_C = """
void kernel(long n, double alpha, double beta, double A[restrict n][n],
            double u1[restrict n], double v1[restrict n], double u2[restrict n], double v2[restrict n],
            double w[restrict n], double x[restrict n], double y[restrict n], double z[restrict n])
{
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      A[i][j] = A[i][j] + u1[i] * v1[j] + u2[i] * v2[j];
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      x[i] = x[i] + beta * A[j][i] * y[j];
  for (int i = 0; i < n; i++)
    x[i] = x[i] + z[i];
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      w[i] = w[i] + alpha * A[i][j] * x[j];
}
"""


def gemver_init(d):
    n = d["N"]
    fn = float(n)
    i = np.arange(n, dtype=np.int64)
    ii, jj = grid(n, n)
    return dict(alpha=1.5, beta=1.2, A=f64((ii * jj % n) / n), u1=f64(i), v1=f64(((i + 1) / fn) / 4.0),
                u2=f64(((i + 1) / fn) / 2.0), v2=f64(((i + 1) / fn) / 6.0), w=np.zeros(n), x=np.zeros(n),
                y=f64(((i + 1) / fn) / 8.0), z=f64(((i + 1) / fn) / 9.0))


GEMVER = Bench(
    name="gemver", group="polybench",
    sizes=sizes((40,), (120,), (400,), (2000,), ("N",)),
    init=gemver_init, params=("alpha", "beta", "A", "u1", "v1", "u2", "v2", "w", "x", "y", "z"),
    hyb=GEMVER_HYB, hyb_params=("alpha", "beta", "A", "u1", "v1", "u2", "v2", "w", "x", "y", "z"),
    outputs=("A", "w", "x"), loops=gemver_loops, numpy=gemver_numpy, c=GEMVER_C, c_dims=("N",),
    flops=lambda d: 10.0 * d["N"] ** 2,
)

# ---------------------------------------------------------------- gesummv

GESUMMV_HYB = """
def kernel_gesummv(alpha, beta, A, B, x):
    n = A.shape[0]
    tmp = allocate((n,), A.dtype)
    y = output_tensor((n,), A.dtype)
    for i in range(n):
        tmp[i] = 0.0
        y[i] = 0.0
        for j in range(n):
            tmp[i] = A[i, j] * x[j] + tmp[i]
            y[i] = B[i, j] * x[j] + y[i]
        y[i] = alpha * tmp[i] + beta * y[i]
    return y
"""


def gesummv_loops(alpha, beta, A, B, tmp, x, y):
    n = A.shape[0]
    for i in prange(n):
        tmp[i] = 0.0
        y[i] = 0.0
        for j in range(n):
            tmp[i] = A[i, j] * x[j] + tmp[i]
            y[i] = B[i, j] * x[j] + y[i]
        y[i] = alpha * tmp[i] + beta * y[i]


def gesummv_numpy(alpha, beta, A, B, tmp, x, y):
    tmp[:] = A @ x
    y[:] = alpha * tmp + beta * (B @ x)


GESUMMV_C = """
void kernel(long n, double alpha, double beta, double A[restrict n][n], double B[restrict n][n],
            double tmp[restrict n], double x[restrict n], double y[restrict n])
{
  for (int i = 0; i < n; i++) {
    tmp[i] = 0.0;
    y[i] = 0.0;
    for (int j = 0; j < n; j++) {
      tmp[i] = A[i][j] * x[j] + tmp[i];
      y[i] = B[i][j] * x[j] + y[i];
    }
    y[i] = alpha * tmp[i] + beta * y[i];
  }
}
"""


def gesummv_init(d):
    n = d["N"]
    i, j = grid(n, n)
    return dict(alpha=1.5, beta=1.2, A=f64(((i * j + 1) % n) / n), B=f64(((i * j + 2) % n) / n),
                tmp=np.zeros(n), x=f64((np.arange(n) % n) / n), y=np.zeros(n))


GESUMMV = Bench(
    name="gesummv", group="polybench",
    sizes=sizes((30,), (90,), (250,), (1300,), ("N",)),
    init=gesummv_init, params=("alpha", "beta", "A", "B", "tmp", "x", "y"),
    hyb=GESUMMV_HYB, hyb_params=("alpha", "beta", "A", "B", "x"), outputs=("y",),
    loops=gesummv_loops, numpy=gesummv_numpy, c=GESUMMV_C, c_dims=("N",),
    flops=lambda d: 4.0 * d["N"] ** 2,
)

# ---------------------------------------------------------------- syrk

SYRK_HYB = """
def kernel_syrk(alpha, beta, C, A):
    n = A.shape[0]
    m = A.shape[1]
    for i in range(n):
        for j in range(i + 1):
            C[i, j] *= beta
        for k in range(m):
            for j in range(i + 1):
                C[i, j] += alpha * A[i, k] * A[j, k]
    return C
"""


def syrk_loops(alpha, beta, C, A):
    n, m = A.shape
    for i in prange(n):
        for j in range(i + 1):
            C[i, j] *= beta
        for k in range(m):
            for j in range(i + 1):
                C[i, j] += alpha * A[i, k] * A[j, k]


def syrk_numpy(alpha, beta, C, A):
    low = np.tril(np.ones(C.shape, dtype=bool))
    C[low] = (beta * C + alpha * (A @ A.T))[low]


SYRK_C = """
void kernel(long n, long m, double alpha, double beta, double C[restrict n][n], double A[restrict n][m])
{
  for (int i = 0; i < n; i++) {
    for (int j = 0; j <= i; j++)
      C[i][j] *= beta;
    for (int k = 0; k < m; k++)
      for (int j = 0; j <= i; j++)
        C[i][j] += alpha * A[i][k] * A[j][k];
  }
}
"""


def syrk_init(d):
    n, m = d["N"], d["M"]
    i, j = grid(n, m)
    A = ((i * j + 1) % n) / n
    i, j = grid(n, n)
    C = ((i * j + 2) % m) / m
    return dict(alpha=1.5, beta=1.2, C=f64(C), A=f64(A))


SYRK = Bench(
    name="syrk", group="polybench",
    sizes=sizes((20, 30), (60, 80), (200, 240), (1000, 1200), ("M", "N")),
    init=syrk_init, params=("alpha", "beta", "C", "A"),
    hyb=SYRK_HYB, hyb_params=("alpha", "beta", "C", "A"), outputs=("C",),
    loops=syrk_loops, numpy=syrk_numpy, c=SYRK_C, c_dims=("N", "M"),
    flops=lambda d: 1.0 * d["N"] * (d["N"] + 1) * d["M"] * 3 / 2,
)

# ---------------------------------------------------------------- syr2k

SYR2K_HYB = """
def kernel_syr2k(alpha, beta, C, A, B):
    n = A.shape[0]
    m = A.shape[1]
    for i in range(n):
        for j in range(i + 1):
            C[i, j] *= beta
        for k in range(m):
            for j in range(i + 1):
                C[i, j] += A[j, k] * alpha * B[i, k] + B[j, k] * alpha * A[i, k]
    return C
"""


def syr2k_loops(alpha, beta, C, A, B):
    n, m = A.shape
    for i in prange(n):
        for j in range(i + 1):
            C[i, j] *= beta
        for k in range(m):
            for j in range(i + 1):
                C[i, j] += A[j, k] * alpha * B[i, k] + B[j, k] * alpha * A[i, k]


def syr2k_numpy(alpha, beta, C, A, B):
    low = np.tril(np.ones(C.shape, dtype=bool))
    C[low] = (beta * C + alpha * (B @ A.T) + alpha * (A @ B.T))[low]


SYR2K_C = """
void kernel(long n, long m, double alpha, double beta, double C[restrict n][n],
            double A[restrict n][m], double B[restrict n][m])
{
  for (int i = 0; i < n; i++) {
    for (int j = 0; j <= i; j++)
      C[i][j] *= beta;
    for (int k = 0; k < m; k++)
      for (int j = 0; j <= i; j++)
        C[i][j] += A[j][k] * alpha * B[i][k] + B[j][k] * alpha * A[i][k];
  }
}
"""


def syr2k_init(d):
    n, m = d["N"], d["M"]
    i, j = grid(n, m)
    A = ((i * j + 1) % n) / n
    B = ((i * j + 2) % m) / m
    i, j = grid(n, n)
    C = ((i * j + 3) % n) / m
    return dict(alpha=1.5, beta=1.2, C=f64(C), A=f64(A), B=f64(B))


SYR2K = Bench(
    name="syr2k", group="polybench",
    sizes=sizes((20, 30), (60, 80), (200, 240), (1000, 1200), ("M", "N")),
    init=syr2k_init, params=("alpha", "beta", "C", "A", "B"),
    hyb=SYR2K_HYB, hyb_params=("alpha", "beta", "C", "A", "B"), outputs=("C",),
    loops=syr2k_loops, numpy=syr2k_numpy, c=SYR2K_C, c_dims=("N", "M"),
    flops=lambda d: 1.0 * d["N"] * (d["N"] + 1) * d["M"] * 6 / 2,
)

# ---------------------------------------------------------------- trmm

TRMM_HYB = """
def kernel_trmm(alpha, A, B):
    m = B.shape[0]
    n = B.shape[1]
    for i in range(m):
        for j in range(n):
            for k in range(i + 1, m):
                B[i, j] += A[k, i] * B[k, j]
            B[i, j] = alpha * B[i, j]
    return B
"""


def trmm_loops(alpha, A, B):
    m, n = B.shape
    for i in range(m):  # rows below i are read while row i is written: j is the parallel loop
        for j in prange(n):
            for k in range(i + 1, m):
                B[i, j] += A[k, i] * B[k, j]
            B[i, j] = alpha * B[i, j]


def trmm_numpy(alpha, A, B):
    # B := alpha * (I + strictly-lower(A))^T B, row i using the rows below it as they were
    L = np.tril(A, -1)
    B[:] = alpha * (B + L.T @ B)


TRMM_C = """
void kernel(long m, long n, double alpha, double A[restrict m][m], double B[restrict m][n])
{
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      for (int k = i + 1; k < m; k++)
        B[i][j] += A[k][i] * B[k][j];
      B[i][j] = alpha * B[i][j];
    }
}
"""


def trmm_init(d):
    m, n = d["M"], d["N"]
    i, j = grid(m, m)
    A = np.where(j < i, ((i + j) % m) / m, 0.0)
    A[np.arange(m), np.arange(m)] = 1.0
    i, j = grid(m, n)
    B = ((n + (i - j)) % n) / n
    return dict(alpha=1.5, A=f64(A), B=f64(B))


TRMM = Bench(
    name="trmm", group="polybench",
    sizes=sizes((20, 30), (60, 80), (200, 240), (1000, 1200), ("M", "N")),
    init=trmm_init, params=("alpha", "A", "B"),
    hyb=TRMM_HYB, hyb_params=("alpha", "A", "B"), outputs=("B",),
    loops=trmm_loops, numpy=trmm_numpy, c=TRMM_C, c_dims=("M", "N"),
    flops=lambda d: 1.0 * d["M"] * (d["M"] - 1) * d["N"],
)

BENCHES = [GEMM, GEMVER, GESUMMV, SYRK, SYR2K, TRMM]
