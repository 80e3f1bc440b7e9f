"""PolyBench/C 4.2.1 linear-algebra/kernels: 2mm, 3mm, atax, bicg, doitgen, mvt."""
import numpy as np

from ..spec import Bench, f64, grid, prange, sizes

# ---------------------------------------------------------------- 2mm

MM2_HYB = """
def kernel_2mm(alpha, beta, A, B, C, D):
    ni = A.shape[0]
    nk = A.shape[1]
    nj = B.shape[1]
    nl = C.shape[1]
    tmp = allocate((ni, nj), A.dtype)
    for i in range(ni):
        for j in range(nj):
            tmp[i, j] = 0.0
            for k in range(nk):
                tmp[i, j] += alpha * A[i, k] * B[k, j]
    for i in range(ni):
        for j in range(nl):
            D[i, j] *= beta
            for k in range(nj):
                D[i, j] += tmp[i, k] * C[k, j]
    return D
"""


def mm2_loops(alpha, beta, tmp, A, B, C, D):
    ni, nk = A.shape
    nj = B.shape[1]
    nl = C.shape[1]
    for i in prange(ni):
        for j in range(nj):
            tmp[i, j] = 0.0
            for k in range(nk):
                tmp[i, j] += alpha * A[i, k] * B[k, j]
    for i in prange(ni):
        for j in range(nl):
            D[i, j] *= beta
            for k in range(nj):
                D[i, j] += tmp[i, k] * C[k, j]


def mm2_numpy(alpha, beta, tmp, A, B, C, D):
    tmp[:] = alpha * (A @ B)
    D *= beta
    D += tmp @ C


MM2_C = """
void kernel(long ni, long nj, long nk, long nl, double alpha, double beta,
            double tmp[restrict ni][nj], double A[restrict ni][nk], double B[restrict nk][nj],
            double C[restrict nj][nl], double D[restrict ni][nl])
{
  for (int i = 0; i < ni; i++)
    for (int j = 0; j < nj; j++) {
      tmp[i][j] = 0.0;
      for (int k = 0; k < nk; ++k)
        tmp[i][j] += alpha * A[i][k] * B[k][j];
    }
  for (int i = 0; i < ni; i++)
    for (int j = 0; j < nl; j++) {
      D[i][j] *= beta;
      for (int k = 0; k < nj; ++k)
        D[i][j] += tmp[i][k] * C[k][j];
    }
}
"""


def mm2_init(d):
    ni, nj, nk, nl = d["NI"], d["NJ"], d["NK"], d["NL"]
    i, j = grid(ni, nk)
    A = ((i * j + 1) % ni) / ni
    i, j = grid(nk, nj)
    B = (i * (j + 1) % nj) / nj
    i, j = grid(nj, nl)
    C = ((i * (j + 3) + 1) % nl) / nl
    i, j = grid(ni, nl)
    D = (i * (j + 2) % nk) / nk
    return dict(alpha=1.5, beta=1.2, tmp=np.zeros((ni, nj)), A=f64(A), B=f64(B), C=f64(C), D=f64(D))


MM2 = Bench(
    name="2mm", group="polybench",
    sizes=sizes((16, 18, 22, 24), (40, 50, 70, 80), (180, 190, 210, 220), (800, 900, 1100, 1200),
                ("NI", "NJ", "NK", "NL")),
    init=mm2_init, params=("alpha", "beta", "tmp", "A", "B", "C", "D"),
    hyb=MM2_HYB, hyb_params=("alpha", "beta", "A", "B", "C", "D"), outputs=("D",),
    loops=mm2_loops, numpy=mm2_numpy, c=MM2_C, c_dims=("NI", "NJ", "NK", "NL"),
    flops=lambda d: 2.0 * d["NI"] * d["NJ"] * (d["NK"] + d["NL"]),
)

# ---------------------------------------------------------------- 3mm

MM3_HYB = """
def kernel_3mm(A, B, C, D):
    ni = A.shape[0]
    nk = A.shape[1]
    nj = B.shape[1]
    nm = C.shape[1]
    nl = D.shape[1]
    E = allocate((ni, nj), A.dtype)
    F = allocate((nj, nl), A.dtype)
    G = output_tensor((ni, nl), A.dtype)
    for i in range(ni):
        for j in range(nj):
            E[i, j] = 0.0
            for k in range(nk):
                E[i, j] += A[i, k] * B[k, j]
    for i in range(nj):
        for j in range(nl):
            F[i, j] = 0.0
            for k in range(nm):
                F[i, j] += C[i, k] * D[k, j]
    for i in range(ni):
        for j in range(nl):
            G[i, j] = 0.0
            for k in range(nj):
                G[i, j] += E[i, k] * F[k, j]
    return G
"""


def mm3_loops(E, A, B, F, C, D, G):
    ni, nk = A.shape
    nj = B.shape[1]
    nm = C.shape[1]
    nl = D.shape[1]
    for i in prange(ni):
        for j in range(nj):
            E[i, j] = 0.0
            for k in range(nk):
                E[i, j] += A[i, k] * B[k, j]
    for i in prange(nj):
        for j in range(nl):
            F[i, j] = 0.0
            for k in range(nm):
                F[i, j] += C[i, k] * D[k, j]
    for i in prange(ni):
        for j in range(nl):
            G[i, j] = 0.0
            for k in range(nj):
                G[i, j] += E[i, k] * F[k, j]


def mm3_numpy(E, A, B, F, C, D, G):
    E[:] = A @ B
    F[:] = C @ D
    G[:] = E @ F


MM3_C = """
void kernel(long ni, long nj, long nk, long nl, long nm,
            double E[restrict ni][nj], double A[restrict ni][nk], double B[restrict nk][nj],
            double F[restrict nj][nl], double C[restrict nj][nm], double D[restrict nm][nl],
            double G[restrict ni][nl])
{
  for (int i = 0; i < ni; i++)
    for (int j = 0; j < nj; j++) {
      E[i][j] = 0.0;
      for (int k = 0; k < nk; ++k)
        E[i][j] += A[i][k] * B[k][j];
    }
  for (int i = 0; i < nj; i++)
    for (int j = 0; j < nl; j++) {
      F[i][j] = 0.0;
      for (int k = 0; k < nm; ++k)
        F[i][j] += C[i][k] * D[k][j];
    }
  for (int i = 0; i < ni; i++)
    for (int j = 0; j < nl; j++) {
      G[i][j] = 0.0;
      for (int k = 0; k < nj; ++k)
        G[i][j] += E[i][k] * F[k][j];
    }
}
"""


def mm3_init(d):
    ni, nj, nk, nl, nm = d["NI"], d["NJ"], d["NK"], d["NL"], d["NM"]
    i, j = grid(ni, nk)
    A = ((i * j + 1) % ni) / (5 * ni)
    i, j = grid(nk, nj)
    B = ((i * (j + 1) + 2) % nj) / (5 * nj)
    i, j = grid(nj, nm)
    C = (i * (j + 3) % nl) / (5 * nl)
    i, j = grid(nm, nl)
    D = ((i * (j + 2) + 2) % nk) / (5 * nk)
    return dict(E=np.zeros((ni, nj)), A=f64(A), B=f64(B), F=np.zeros((nj, nl)), C=f64(C), D=f64(D),
                G=np.zeros((ni, nl)))


MM3 = Bench(
    name="3mm", group="polybench",
    sizes=sizes((16, 18, 20, 22, 24), (40, 50, 60, 70, 80), (180, 190, 200, 210, 220),
                (800, 900, 1000, 1100, 1200), ("NI", "NJ", "NK", "NL", "NM")),
    init=mm3_init, params=("E", "A", "B", "F", "C", "D", "G"),
    hyb=MM3_HYB, hyb_params=("A", "B", "C", "D"), outputs=("G",),
    loops=mm3_loops, numpy=mm3_numpy, c=MM3_C, c_dims=("NI", "NJ", "NK", "NL", "NM"),
    flops=lambda d: 2.0 * (d["NI"] * d["NJ"] * d["NK"] + d["NJ"] * d["NL"] * d["NM"]
                           + d["NI"] * d["NL"] * d["NJ"]),
)

# ---------------------------------------------------------------- atax

ATAX_HYB = """
def kernel_atax(A, x):
    m = A.shape[0]
    n = A.shape[1]
    y = output_tensor((n,), A.dtype)
    tmp = allocate((m,), A.dtype)
    for i in range(n):
        y[i] = 0.0
    for i in range(m):
        tmp[i] = 0.0
        for j in range(n):
            tmp[i] = tmp[i] + A[i, j] * x[j]
        for j in range(n):
            y[j] = y[j] + A[i, j] * tmp[i]
    return y
"""


def atax_loops(A, x, y, tmp):
    m, n = A.shape
    for i in range(n):
        y[i] = 0.0
    for i in range(m):  # every i updates all of y: no parallel loop as written
        tmp[i] = 0.0
        for j in range(n):
            tmp[i] = tmp[i] + A[i, j] * x[j]
        for j in range(n):
            y[j] = y[j] + A[i, j] * tmp[i]


def atax_numpy(A, x, y, tmp):
    tmp[:] = A @ x
    y[:] = A.T @ tmp


ATAX_C = """
void kernel(long m, long n, double A[restrict m][n], double x[restrict n], double y[restrict n],
            double tmp[restrict m])
{
  for (int i = 0; i < n; i++)
    y[i] = 0;
  for (int i = 0; i < m; i++) {
    tmp[i] = 0.0;
    for (int j = 0; j < n; j++)
      tmp[i] = tmp[i] + A[i][j] * x[j];
    for (int j = 0; j < n; j++)
      y[j] = y[j] + A[i][j] * tmp[i];
  }
}
"""


def atax_init(d):
    m, n = d["M"], d["N"]
    fn = float(n)
    i, j = grid(m, n)
    return dict(A=f64(((i + j) % n) / (5 * m)), x=f64(1 + np.arange(n) / fn), y=np.zeros(n), tmp=np.zeros(m))


ATAX = Bench(
    name="atax", group="polybench",
    sizes=sizes((38, 42), (116, 124), (390, 410), (1900, 2100), ("M", "N")),
    init=atax_init, params=("A", "x", "y", "tmp"),
    hyb=ATAX_HYB, hyb_params=("A", "x"), outputs=("y",),
    loops=atax_loops, numpy=atax_numpy, c=ATAX_C, c_dims=("M", "N"), parallel=False,
    flops=lambda d: 4.0 * d["M"] * d["N"],
)

# ---------------------------------------------------------------- bicg

BICG_HYB = """
def kernel_bicg(A, p, r):
    n = A.shape[0]
    m = A.shape[1]
    s = output_tensor((m,), A.dtype)
    q = output_tensor((n,), A.dtype)
    for i in range(m):
        s[i] = 0.0
    for i in range(n):
        q[i] = 0.0
        for j in range(m):
            s[j] = s[j] + r[i] * A[i, j]
            q[i] = q[i] + A[i, j] * p[j]
    return s, q
"""


def bicg_loops(A, s, q, p, r):
    n, m = A.shape
    for i in range(m):
        s[i] = 0.0
    for i in range(n):  # every i updates all of s: no parallel loop as written
        q[i] = 0.0
        for j in range(m):
            s[j] = s[j] + r[i] * A[i, j]
            q[i] = q[i] + A[i, j] * p[j]


def bicg_numpy(A, s, q, p, r):
    s[:] = r @ A
    q[:] = A @ p


BICG_C = """
void kernel(long m, long n, double A[restrict n][m], double s[restrict m], double q[restrict n],
            double p[restrict m], double r[restrict n])
{
  for (int i = 0; i < m; i++)
    s[i] = 0;
  for (int i = 0; i < n; i++) {
    q[i] = 0.0;
    for (int j = 0; j < m; j++) {
      s[j] = s[j] + r[i] * A[i][j];
      q[i] = q[i] + A[i][j] * p[j];
    }
  }
}
"""


def bicg_init(d):
    m, n = d["M"], d["N"]
    i, j = grid(n, m)
    return dict(A=f64((i * (j + 1) % n) / n), s=np.zeros(m), q=np.zeros(n),
                p=f64((np.arange(m) % m) / m), r=f64((np.arange(n) % n) / n))


BICG = Bench(
    name="bicg", group="polybench",
    sizes=sizes((38, 42), (116, 124), (390, 410), (1900, 2100), ("M", "N")),
    init=bicg_init, params=("A", "s", "q", "p", "r"),
    hyb=BICG_HYB, hyb_params=("A", "p", "r"), outputs=("s", "q"),
    loops=bicg_loops, numpy=bicg_numpy, c=BICG_C, c_dims=("M", "N"), parallel=False,
    flops=lambda d: 4.0 * d["M"] * d["N"],
)

# ---------------------------------------------------------------- doitgen

DOITGEN_HYB = """
def kernel_doitgen(A, C4):
    nr = A.shape[0]
    nq = A.shape[1]
    np = A.shape[2]
    sum = allocate((np,), A.dtype)
    for r in range(nr):
        for q in range(nq):
            for p in range(np):
                sum[p] = 0.0
                for s in range(np):
                    sum[p] += A[r, q, s] * C4[s, p]
            for p in range(np):
                A[r, q, p] = sum[p]
    return A
"""


def doitgen_loops(A, C4, sum_):
    nr, nq, np_ = A.shape
    for r in prange(nr):
        acc = np.empty(np_, dtype=A.dtype)  # PolyBench's `sum`, private to each r so r may run in parallel
        for q in range(nq):
            for p in range(np_):
                acc[p] = 0.0
                for s in range(np_):
                    acc[p] += A[r, q, s] * C4[s, p]
            for p in range(np_):
                A[r, q, p] = acc[p]


def doitgen_numpy(A, C4, sum_):
    A[:] = A @ C4


DOITGEN_C = """
void kernel(long nr, long nq, long np, double A[restrict nr][nq][np], double C4[restrict np][np],
            double sum[restrict np])
{
  for (int r = 0; r < nr; r++)
    for (int q = 0; q < nq; q++) {
      for (int p = 0; p < np; p++) {
        sum[p] = 0.0;
        for (int s = 0; s < np; s++)
          sum[p] += A[r][q][s] * C4[s][p];
      }
      for (int p = 0; p < np; p++)
        A[r][q][p] = sum[p];
    }
}
"""


def doitgen_init(d):
    nr, nq, np_ = d["NR"], d["NQ"], d["NP"]
    i, j, k = grid(nr, nq, np_)
    A = ((i * j + k) % np_) / np_
    i, j = grid(np_, np_)
    return dict(A=f64(A), C4=f64((i * j % np_) / np_), sum_=np.zeros(np_))


DOITGEN = Bench(
    name="doitgen", group="polybench",
    sizes=sizes((8, 10, 12), (20, 25, 30), (40, 50, 60), (140, 150, 160), ("NQ", "NR", "NP")),
    init=doitgen_init, params=("A", "C4", "sum_"),
    hyb=DOITGEN_HYB, hyb_params=("A", "C4"), outputs=("A",),
    loops=doitgen_loops, numpy=doitgen_numpy, c=DOITGEN_C, c_dims=("NR", "NQ", "NP"),
    flops=lambda d: 2.0 * d["NR"] * d["NQ"] * d["NP"] ** 2,
)

# ---------------------------------------------------------------- mvt

MVT_HYB = """
def kernel_mvt(x1, x2, y_1, y_2, A):
    n = A.shape[0]
    for i in range(n):
        for j in range(n):
            x1[i] = x1[i] + A[i, j] * y_1[j]
    for i in range(n):
        for j in range(n):
            x2[i] = x2[i] + A[j, i] * y_2[j]
    return x1, x2
"""


def mvt_loops(x1, x2, y_1, y_2, A):
    n = A.shape[0]
    for i in prange(n):
        for j in range(n):
            x1[i] = x1[i] + A[i, j] * y_1[j]
    for i in prange(n):
        for j in range(n):
            x2[i] = x2[i] + A[j, i] * y_2[j]


def mvt_numpy(x1, x2, y_1, y_2, A):
    x1 += A @ y_1
    x2 += A.T @ y_2


MVT_C = """
void kernel(long n, double x1[restrict n], double x2[restrict n], double y_1[restrict n],
            double y_2[restrict n], double A[restrict n][n])
{
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      x1[i] = x1[i] + A[i][j] * y_1[j];
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      x2[i] = x2[i] + A[j][i] * y_2[j];
}
"""


def mvt_init(d):
    n = d["N"]
    i = np.arange(n, dtype=np.int64)
    ii, jj = grid(n, n)
    return dict(x1=f64((i % n) / n), x2=f64(((i + 1) % n) / n), y_1=f64(((i + 3) % n) / n),
                y_2=f64(((i + 4) % n) / n), A=f64((ii * jj % n) / n))


MVT = Bench(
    name="mvt", group="polybench",
    sizes=sizes((40,), (120,), (400,), (2000,), ("N",)),
    init=mvt_init, params=("x1", "x2", "y_1", "y_2", "A"),
    hyb=MVT_HYB, hyb_params=("x1", "x2", "y_1", "y_2", "A"), outputs=("x1", "x2"),
    loops=mvt_loops, numpy=mvt_numpy, c=MVT_C, c_dims=("N",),
    flops=lambda d: 4.0 * d["N"] ** 2,
)

BENCHES = [MM2, MM3, ATAX, BICG, DOITGEN, MVT]
