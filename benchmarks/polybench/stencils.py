"""PolyBench/C 4.2.1 stencils: jacobi-1d, jacobi-2d, heat-3d, seidel-2d, fdtd-2d.

The time-step count is a module constant of the hybrid kernel (``TSTEPS``/``TMAX``) and an
argument of the peers.
"""
import numpy as np

from ..spec import Bench, f64, grid, prange, sizes

# ---------------------------------------------------------------- jacobi-1d

JACOBI1D_HYB = """
def kernel_jacobi_1d(A, B):
    n = A.shape[0]
    for t in range(TSTEPS):
        for i in range(1, n - 1):
            B[i] = 0.33333 * (A[i - 1] + A[i] + A[i + 1])
        for i in range(1, n - 1):
            A[i] = 0.33333 * (B[i - 1] + B[i] + B[i + 1])
    return A, B
"""


def jacobi1d_loops(tsteps, A, B):
    n = A.shape[0]
    for t in range(tsteps):
        for i in prange(1, n - 1):
            B[i] = 0.33333 * (A[i - 1] + A[i] + A[i + 1])
        for i in prange(1, n - 1):
            A[i] = 0.33333 * (B[i - 1] + B[i] + B[i + 1])


def jacobi1d_numpy(tsteps, A, B):
    for t in range(tsteps):
        B[1:-1] = 0.33333 * (A[:-2] + A[1:-1] + A[2:])
        A[1:-1] = 0.33333 * (B[:-2] + B[1:-1] + B[2:])


JACOBI1D_C = """
void kernel(long n, long tsteps, double A[restrict n], double B[restrict n])
{
  for (int t = 0; t < tsteps; t++) {
    for (int i = 1; i < n - 1; i++)
      B[i] = 0.33333 * (A[i-1] + A[i] + A[i + 1]);
    for (int i = 1; i < n - 1; i++)
      A[i] = 0.33333 * (B[i-1] + B[i] + B[i + 1]);
  }
}
"""


def jacobi1d_init(d):
    n = d["N"]
    i = np.arange(n, dtype=np.float64)
    return dict(tsteps=d["TSTEPS"], A=f64((i + 2) / n), B=f64((i + 3) / n))


JACOBI1D = Bench(
    name="jacobi-1d", group="polybench",
    sizes=sizes((20, 30), (40, 120), (100, 400), (500, 2000), ("TSTEPS", "N")),
    init=jacobi1d_init, params=("tsteps", "A", "B"), hyb=JACOBI1D_HYB, hyb_params=("A", "B"),
    outputs=("A", "B"), loops=jacobi1d_loops, numpy=jacobi1d_numpy, c=JACOBI1D_C, c_dims=("N",),
    hyb_consts=("TSTEPS",), flops=lambda d: 6.0 * d["TSTEPS"] * (d["N"] - 2),
)

# ---------------------------------------------------------------- jacobi-2d

JACOBI2D_HYB = """
def kernel_jacobi_2d(A, B):
    n = A.shape[0]
    for t in range(TSTEPS):
        for i in range(1, n - 1):
            for j in range(1, n - 1):
                B[i, j] = 0.2 * (A[i, j] + A[i, j - 1] + A[i, 1 + j] + A[1 + i, j] + A[i - 1, j])
        for i in range(1, n - 1):
            for j in range(1, n - 1):
                A[i, j] = 0.2 * (B[i, j] + B[i, j - 1] + B[i, 1 + j] + B[1 + i, j] + B[i - 1, j])
    return A, B
"""


def jacobi2d_loops(tsteps, A, B):
    n = A.shape[0]
    for t in range(tsteps):
        for i in prange(1, n - 1):
            for j in range(1, n - 1):
                B[i, j] = 0.2 * (A[i, j] + A[i, j - 1] + A[i, 1 + j] + A[1 + i, j] + A[i - 1, j])
        for i in prange(1, n - 1):
            for j in range(1, n - 1):
                A[i, j] = 0.2 * (B[i, j] + B[i, j - 1] + B[i, 1 + j] + B[1 + i, j] + B[i - 1, j])


def jacobi2d_numpy(tsteps, A, B):
    for t in range(tsteps):
        B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1])
        A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1])


JACOBI2D_C = """
void kernel(long n, long tsteps, double A[restrict n][n], double B[restrict n][n])
{
  for (int t = 0; t < tsteps; t++) {
    for (int i = 1; i < n - 1; i++)
      for (int j = 1; j < n - 1; j++)
        B[i][j] = 0.2 * (A[i][j] + A[i][j-1] + A[i][1+j] + A[1+i][j] + A[i-1][j]);
    for (int i = 1; i < n - 1; i++)
      for (int j = 1; j < n - 1; j++)
        A[i][j] = 0.2 * (B[i][j] + B[i][j-1] + B[i][1+j] + B[1+i][j] + B[i-1][j]);
  }
}
"""


def jacobi2d_init(d):
    n = d["N"]
    i, j = grid(n, n)
    return dict(tsteps=d["TSTEPS"], A=f64((i * (j + 2) + 2) / n), B=f64((i * (j + 3) + 3) / n))


JACOBI2D = Bench(
    name="jacobi-2d", group="polybench",
    sizes=sizes((20, 30), (40, 90), (100, 250), (500, 1300), ("TSTEPS", "N")),
    init=jacobi2d_init, params=("tsteps", "A", "B"), hyb=JACOBI2D_HYB, hyb_params=("A", "B"),
    outputs=("A", "B"), loops=jacobi2d_loops, numpy=jacobi2d_numpy, c=JACOBI2D_C, c_dims=("N",),
    hyb_consts=("TSTEPS",), flops=lambda d: 10.0 * d["TSTEPS"] * (d["N"] - 2) ** 2,
)

# ---------------------------------------------------------------- heat-3d

HEAT3D_HYB = """
def kernel_heat_3d(A, B):
    n = A.shape[0]
    for t in range(1, TSTEPS + 1):
        for i in range(1, n - 1):
            for j in range(1, n - 1):
                for k in range(1, n - 1):
                    B[i, j, k] = (0.125 * (A[i + 1, j, k] - 2.0 * A[i, j, k] + A[i - 1, j, k])
                                  + 0.125 * (A[i, j + 1, k] - 2.0 * A[i, j, k] + A[i, j - 1, k])
                                  + 0.125 * (A[i, j, k + 1] - 2.0 * A[i, j, k] + A[i, j, k - 1])
                                  + A[i, j, k])
        for i in range(1, n - 1):
            for j in range(1, n - 1):
                for k in range(1, n - 1):
                    A[i, j, k] = (0.125 * (B[i + 1, j, k] - 2.0 * B[i, j, k] + B[i - 1, j, k])
                                  + 0.125 * (B[i, j + 1, k] - 2.0 * B[i, j, k] + B[i, j - 1, k])
                                  + 0.125 * (B[i, j, k + 1] - 2.0 * B[i, j, k] + B[i, j, k - 1])
                                  + B[i, j, k])
    return A, B
"""


def heat3d_loops(tsteps, A, B):
    n = A.shape[0]
    for t in range(1, tsteps + 1):
        for i in prange(1, n - 1):
            for j in range(1, n - 1):
                for k in range(1, n - 1):
                    B[i, j, k] = (0.125 * (A[i + 1, j, k] - 2.0 * A[i, j, k] + A[i - 1, j, k])
                                  + 0.125 * (A[i, j + 1, k] - 2.0 * A[i, j, k] + A[i, j - 1, k])
                                  + 0.125 * (A[i, j, k + 1] - 2.0 * A[i, j, k] + A[i, j, k - 1])
                                  + A[i, j, k])
        for i in prange(1, n - 1):
            for j in range(1, n - 1):
                for k in range(1, n - 1):
                    A[i, j, k] = (0.125 * (B[i + 1, j, k] - 2.0 * B[i, j, k] + B[i - 1, j, k])
                                  + 0.125 * (B[i, j + 1, k] - 2.0 * B[i, j, k] + B[i, j - 1, k])
                                  + 0.125 * (B[i, j, k + 1] - 2.0 * B[i, j, k] + B[i, j, k - 1])
                                  + B[i, j, k])


def _heat_step(dst, src):
    c = src[1:-1, 1:-1, 1:-1]
    dst[1:-1, 1:-1, 1:-1] = (0.125 * (src[2:, 1:-1, 1:-1] - 2.0 * c + src[:-2, 1:-1, 1:-1])
                             + 0.125 * (src[1:-1, 2:, 1:-1] - 2.0 * c + src[1:-1, :-2, 1:-1])
                             + 0.125 * (src[1:-1, 1:-1, 2:] - 2.0 * c + src[1:-1, 1:-1, :-2])
                             + c)


def heat3d_numpy(tsteps, A, B):
    for t in range(1, tsteps + 1):
        _heat_step(B, A)
        _heat_step(A, B)


HEAT3D_C = """
void kernel(long n, long tsteps, double A[restrict n][n][n], double B[restrict n][n][n])
{
  for (int t = 1; t <= tsteps; t++) {
    for (int i = 1; i < n-1; i++)
      for (int j = 1; j < n-1; j++)
        for (int k = 1; k < n-1; k++)
          B[i][j][k] = 0.125 * (A[i+1][j][k] - 2.0 * A[i][j][k] + A[i-1][j][k])
                     + 0.125 * (A[i][j+1][k] - 2.0 * A[i][j][k] + A[i][j-1][k])
                     + 0.125 * (A[i][j][k+1] - 2.0 * A[i][j][k] + A[i][j][k-1])
                     + A[i][j][k];
    for (int i = 1; i < n-1; i++)
      for (int j = 1; j < n-1; j++)
        for (int k = 1; k < n-1; k++)
          A[i][j][k] = 0.125 * (B[i+1][j][k] - 2.0 * B[i][j][k] + B[i-1][j][k])
                     + 0.125 * (B[i][j+1][k] - 2.0 * B[i][j][k] + B[i][j-1][k])
                     + 0.125 * (B[i][j][k+1] - 2.0 * B[i][j][k] + B[i][j][k-1])
                     + B[i][j][k];
  }
}
"""


def heat3d_init(d):
    n = d["N"]
    i, j, k = grid(n, n, n)
    A = (i + j + (n - k)) * 10.0 / n
    return dict(tsteps=d["TSTEPS"], A=f64(A), B=f64(A))


HEAT3D = Bench(
    name="heat-3d", group="polybench",
    sizes=sizes((20, 10), (40, 20), (100, 40), (500, 120), ("TSTEPS", "N")),
    init=heat3d_init, params=("tsteps", "A", "B"), hyb=HEAT3D_HYB, hyb_params=("A", "B"),
    outputs=("A", "B"), loops=heat3d_loops, numpy=heat3d_numpy, c=HEAT3D_C, c_dims=("N",),
    hyb_consts=("TSTEPS",), flops=lambda d: 30.0 * d["TSTEPS"] * (d["N"] - 2) ** 3,
)

# ---------------------------------------------------------------- seidel-2d

SEIDEL2D_HYB = """
def kernel_seidel_2d(A):
    n = A.shape[0]
    for t in range(TSTEPS):
        for i in range(1, n - 1):
            for j in range(1, n - 1):
                A[i, j] = (A[i - 1, j - 1] + A[i - 1, j] + A[i - 1, j + 1]
                           + A[i, j - 1] + A[i, j] + A[i, j + 1]
                           + A[i + 1, j - 1] + A[i + 1, j] + A[i + 1, j + 1]) / 9.0
    return A
"""


def seidel2d_loops(tsteps, A):
    n = A.shape[0]
    for t in range(tsteps):  # Gauss-Seidel: every point needs its new left and upper neighbours
        for i in range(1, n - 1):
            for j in range(1, n - 1):
                A[i, j] = (A[i - 1, j - 1] + A[i - 1, j] + A[i - 1, j + 1]
                           + A[i, j - 1] + A[i, j] + A[i, j + 1]
                           + A[i + 1, j - 1] + A[i + 1, j] + A[i + 1, j + 1]) / 9.0


def _seidel_fronts(n):
    """Interior points grouped by 2*i + j: a point only needs points of smaller fronts (new values)
    and of larger fronts (old values), so each front is one vector operation."""
    i, j = np.meshgrid(np.arange(1, n - 1), np.arange(1, n - 1), indexing="ij")
    w = (2 * i + j).ravel()
    order = np.argsort(w, kind="stable")
    i, j, w = i.ravel()[order], j.ravel()[order], w[order]
    cuts = np.flatnonzero(np.diff(w)) + 1
    return list(zip(np.split(i, cuts), np.split(j, cuts)))


def seidel2d_numpy(tsteps, A):
    fronts = _seidel_fronts(A.shape[0])
    for t in range(tsteps):
        for i, j in fronts:
            A[i, j] = (A[i - 1, j - 1] + A[i - 1, j] + A[i - 1, j + 1]
                       + A[i, j - 1] + A[i, j] + A[i, j + 1]
                       + A[i + 1, j - 1] + A[i + 1, j] + A[i + 1, j + 1]) / 9.0


SEIDEL2D_C = """
void kernel(long n, long tsteps, double A[restrict n][n])
{
  for (int t = 0; t <= tsteps - 1; t++)
    for (int i = 1; i <= n - 2; i++)
      for (int j = 1; j <= n - 2; j++)
        A[i][j] = (A[i-1][j-1] + A[i-1][j] + A[i-1][j+1]
                   + A[i][j-1] + A[i][j] + A[i][j+1]
                   + A[i+1][j-1] + A[i+1][j] + A[i+1][j+1]) / 9.0;
}
"""


def seidel2d_init(d):
    n = d["N"]
    i, j = grid(n, n)
    return dict(tsteps=d["TSTEPS"], A=f64((i * (j + 2) + 2) / n))


SEIDEL2D = Bench(
    name="seidel-2d", group="polybench",
    sizes=sizes((20, 40), (40, 120), (100, 400), (500, 2000), ("TSTEPS", "N")),
    init=seidel2d_init, params=("tsteps", "A"), hyb=SEIDEL2D_HYB, hyb_params=("A",), outputs=("A",),
    loops=seidel2d_loops, numpy=seidel2d_numpy, c=SEIDEL2D_C, c_dims=("N",), hyb_consts=("TSTEPS",),
    parallel=False, flops=lambda d: 9.0 * d["TSTEPS"] * (d["N"] - 2) ** 2,
    notes=["numpy: wavefronts 2i+j (Gauss-Seidel has no natural vector form)"],
)

# ---------------------------------------------------------------- fdtd-2d

FDTD2D_HYB = """
def kernel_fdtd_2d(ex, ey, hz, fict):
    nx = ex.shape[0]
    ny = ex.shape[1]
    for t in range(TMAX):
        for j in range(ny):
            ey[0, j] = fict[t]
        for i in range(1, nx):
            for j in range(ny):
                ey[i, j] = ey[i, j] - 0.5 * (hz[i, j] - hz[i - 1, j])
        for i in range(nx):
            for j in range(1, ny):
                ex[i, j] = ex[i, j] - 0.5 * (hz[i, j] - hz[i, j - 1])
        for i in range(nx - 1):
            for j in range(ny - 1):
                hz[i, j] = hz[i, j] - 0.7 * (ex[i, j + 1] - ex[i, j] + ey[i + 1, j] - ey[i, j])
    return ex, ey, hz
"""


def fdtd2d_loops(tmax, ex, ey, hz, fict):
    nx, ny = ex.shape
    for t in range(tmax):
        for j in prange(ny):
            ey[0, j] = fict[t]
        for i in prange(1, nx):
            for j in range(ny):
                ey[i, j] = ey[i, j] - 0.5 * (hz[i, j] - hz[i - 1, j])
        for i in prange(nx):
            for j in range(1, ny):
                ex[i, j] = ex[i, j] - 0.5 * (hz[i, j] - hz[i, j - 1])
        for i in prange(nx - 1):
            for j in range(ny - 1):
                hz[i, j] = hz[i, j] - 0.7 * (ex[i, j + 1] - ex[i, j] + ey[i + 1, j] - ey[i, j])


def fdtd2d_numpy(tmax, ex, ey, hz, fict):
    for t in range(tmax):
        ey[0, :] = fict[t]
        ey[1:, :] -= 0.5 * (hz[1:, :] - hz[:-1, :])
        ex[:, 1:] -= 0.5 * (hz[:, 1:] - hz[:, :-1])
        hz[:-1, :-1] -= 0.7 * (ex[:-1, 1:] - ex[:-1, :-1] + ey[1:, :-1] - ey[:-1, :-1])


FDTD2D_C = """
void kernel(long nx, long ny, long tmax, double ex[restrict nx][ny], double ey[restrict nx][ny],
            double hz[restrict nx][ny], double fict[restrict tmax])
{
  for (int t = 0; t < tmax; t++) {
    for (int j = 0; j < ny; j++)
      ey[0][j] = fict[t];
    for (int i = 1; i < nx; i++)
      for (int j = 0; j < ny; j++)
        ey[i][j] = ey[i][j] - 0.5 * (hz[i][j] - hz[i-1][j]);
    for (int i = 0; i < nx; i++)
      for (int j = 1; j < ny; j++)
        ex[i][j] = ex[i][j] - 0.5 * (hz[i][j] - hz[i][j-1]);
    for (int i = 0; i < nx - 1; i++)
      for (int j = 0; j < ny - 1; j++)
        hz[i][j] = hz[i][j] - 0.7 * (ex[i][j+1] - ex[i][j] + ey[i+1][j] - ey[i][j]);
  }
}
"""


def fdtd2d_init(d):
    nx, ny, tmax = d["NX"], d["NY"], d["TMAX"]
    i, j = grid(nx, ny)
    return dict(tmax=tmax, ex=f64(i * (j + 1) / nx), ey=f64(i * (j + 2) / ny), hz=f64(i * (j + 3) / nx),
                fict=f64(np.arange(tmax)))


FDTD2D = Bench(
    name="fdtd-2d", group="polybench",
    sizes=sizes((20, 20, 30), (40, 60, 80), (100, 200, 240), (500, 1000, 1200), ("TMAX", "NX", "NY")),
    init=fdtd2d_init, params=("tmax", "ex", "ey", "hz", "fict"), hyb=FDTD2D_HYB,
    hyb_params=("ex", "ey", "hz", "fict"), outputs=("ex", "ey", "hz"), loops=fdtd2d_loops,
    numpy=fdtd2d_numpy, c=FDTD2D_C, c_dims=("NX", "NY"), hyb_consts=("TMAX",),
    flops=lambda d: 11.0 * d["TMAX"] * d["NX"] * d["NY"],
)

BENCHES = [JACOBI1D, JACOBI2D, HEAT3D, SEIDEL2D, FDTD2D]
