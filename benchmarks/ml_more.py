"""More ML kernels in float32: the first index of each row's maximum (int32), bias plus SiLU
stored transposed, a batch of small products with a transposed operand, and a residual add
feeding RMSNorm through an ``allocate`` temporary.

They are written as a user writes them first: plain loops, one loop nest per step, the
textbook loop order. Their Numba peers are the same loops (float32 constants, so that Numba
computes in float32 as hyb does), the C peers the same loops for gcc -O3, and the NumPy peers
the natural array expressions. The row kernels (argmax-rows, bias-silu-t, add-rmsnorm) have
``hyb_modes`` set, as those of ``ml_rows.py`` do.
"""
import numpy as np

from .spec import Bench, f32, grid, prange

F32 = dict(rtol=1e-4, atol=1e-5)
DIMS = ("N", "D")
# mini and small have rows whose length is no multiple of a vector, so remainders are checked
ROWS = {"mini": (12, 37), "small": (128, 300), "medium": (2048, 1024), "large": (4096, 4096)}


def _sizes(table, names=DIMS):
    return {s: dict(zip(names, v)) for s, v in table.items()}


def _wave(d, a, b, mod, lo, hi):
    """Deterministic values in [lo, hi) over an N x D grid."""
    i, j = grid(d["N"], d["D"])
    return f32(((i * a + j * b) % mod) / float(mod) * (hi - lo) + lo)


# ---------------------------------------------------------------- argmax over rows
# The first index of the maximum, as np.argmax(x, axis=1): a later equal value does not
# replace the running best (strict `>`).

ARGMAX_HYB = """
def kernel_argmax_rows(x):
    n = x.shape[0]
    d = x.shape[1]
    idx = output_tensor((n,), "int32")
    for i in range(n):
        best = x[i, 0]
        k = 0
        for j in range(1, d):
            if x[i, j] > best:
                best = x[i, j]
                k = j
        idx[i] = k
    return idx
"""


def argmax_loops(x, idx):
    n, d = x.shape
    for i in prange(n):
        best = x[i, 0]
        k = 0
        for j in range(1, d):
            if x[i, j] > best:
                best = x[i, j]
                k = j
        idx[i] = k


def argmax_numpy(x, idx):
    idx[:] = np.argmax(x, axis=1)


ARGMAX_C = """
void kernel(long n, long d, float x[restrict n][d], int idx[restrict n])
{
  for (int i = 0; i < n; i++) {
    float best = x[i][0];
    int k = 0;
    for (int j = 1; j < d; j++)
      if (x[i][j] > best) {
        best = x[i][j];
        k = j;
      }
    idx[i] = k;
  }
}
"""


def argmax_init(d):
    """Whole numbers on a few levels, so that every row's maximum occurs many times: the top
    level repeats every 11 columns, and from a column that moves with the row on, everything
    is raised by 6 (so the answer is the first top value at or after that column, not always
    near the front). Every fourth row also starts with the maximum, tying with later ones, so
    the answer there is 0."""
    n, dd = d["N"], d["D"]
    i, j = grid(n, dd)
    lvl = ((i * 3 + j * 5) % 11) // 2                          # 0 .. 5; 5 once in 11 columns
    x = lvl + 6.0 * (j >= (i * 13) % dd) - 4.0
    top = x.max(axis=1)
    x[:, 0] = np.where(np.arange(n) % 4 == 0, top, x[:, 0])
    return dict(x=f32(x), idx=np.zeros(n, np.int32))


ARGMAX = Bench(
    name="argmax-rows", group="ml",
    sizes=_sizes({"mini": (12, 37), "small": (128, 300), "medium": (4096, 512), "large": (8192, 1024)}),
    init=argmax_init, params=("x", "idx"), hyb=ARGMAX_HYB, hyb_params=("x",), outputs=("idx",),
    loops=argmax_loops, numpy=argmax_numpy, c=ARGMAX_C, c_dims=DIMS,
    flops=lambda d: 1.0 * d["N"] * d["D"], hyb_modes=True, rtol=0.0, atol=0.0,
    notes=["flops: one comparison per element"],
)

# ---------------------------------------------------------------- bias + SiLU, stored transposed

BIAS_SILU_T_HYB = """
def kernel_bias_silu_t(x, b):
    n = x.shape[0]
    d = x.shape[1]
    y = output_tensor((d, n), x.dtype)
    for i in range(n):
        for j in range(d):
            t = x[i, j] + b[j]
            y[j, i] = t / (1.0 + exp(-t))
    return y
"""


def bias_silu_t_loops(x, b, y):
    n, d = x.shape
    one = np.float32(1.0)
    for i in prange(n):
        for j in range(d):
            t = x[i, j] + b[j]
            y[j, i] = t / (one + np.exp(-t))


def bias_silu_t_numpy(x, b, y):
    t = x + b
    np.divide(t, 1.0 + np.exp(-t), out=y.T)


BIAS_SILU_T_C = """
void kernel(long n, long d, float x[restrict n][d], float b[restrict d], float y[restrict d][n])
{
  for (int i = 0; i < n; i++)
    for (int j = 0; j < d; j++) {
      float t = x[i][j] + b[j];
      y[j][i] = t / (1.0f + expf(-t));
    }
}
"""


def bias_silu_t_init(d):
    jj = np.arange(d["D"])
    return dict(x=_wave(d, 31, 17, 97, -4.0, 4.0), b=f32((jj % 9) / 9.0 - 0.5),
                y=np.zeros((d["D"], d["N"]), np.float32))


BIAS_SILU_T = Bench(
    name="bias-silu-t", group="ml", sizes=_sizes(ROWS), init=bias_silu_t_init, params=("x", "b", "y"),
    hyb=BIAS_SILU_T_HYB, hyb_params=("x", "b"), outputs=("y",), loops=bias_silu_t_loops,
    numpy=bias_silu_t_numpy, c=BIAS_SILU_T_C, c_dims=DIMS, flops=lambda d: 5.0 * d["N"] * d["D"],
    hyb_modes=True, **F32,
)

# ---------------------------------------------------------------- many small products, b transposed
# c[z] = a[z] @ b[z].T for a batch of small matrices (attention-score sized): b is stored row by
# row along k, as a key matrix is.

BMM_T_HYB = """
def kernel_bmm_small_t(a, b):
    nz = a.shape[0]
    m = a.shape[1]
    kd = a.shape[2]
    n = b.shape[1]
    c = output_tensor((nz, m, n), a.dtype)
    for z in range(nz):
        for i in range(m):
            for j in range(n):
                for k in range(kd):
                    c[z, i, j] += a[z, i, k] * b[z, j, k]
    return c
"""


def bmm_t_loops(a, b, c):
    nz, m, kd = a.shape
    n = b.shape[1]
    for z in prange(nz):
        for i in range(m):
            for j in range(n):
                for k in range(kd):
                    c[z, i, j] += a[z, i, k] * b[z, j, k]


def bmm_t_numpy(a, b, c):
    np.matmul(a, b.transpose(0, 2, 1), out=c)


BMM_T_C = """
void kernel(long nz, long m, long n, long kd, float a[restrict nz][m][kd], float b[restrict nz][n][kd],
            float c[restrict nz][m][n])
{
  for (int z = 0; z < nz; z++)
    for (int i = 0; i < m; i++)
      for (int j = 0; j < n; j++)
        for (int k = 0; k < kd; k++)
          c[z][i][j] += a[z][i][k] * b[z][j][k];
}
"""


def bmm_t_init(d):
    nz, m, n, kd = d["Z"], d["M"], d["N"], d["K"]
    z_, i_, k_ = grid(nz, m, kd)
    a = ((z_ + i_ * 3 + k_ * 5) % 13) / 13.0 - 0.5
    z_, j_, k_ = grid(nz, n, kd)
    b = ((z_ * 2 + k_ * 7 + j_) % 17) / 17.0 - 0.5
    return dict(a=f32(a), b=f32(b), c=np.zeros((nz, m, n), np.float32))


BMM_T = Bench(
    name="bmm-small-t", group="ml",
    sizes=_sizes({"mini": (3, 5, 6, 7), "small": (16, 16, 20, 24), "medium": (64, 32, 40, 48),
                  "large": (256, 64, 80, 96)}, ("Z", "M", "N", "K")),
    init=bmm_t_init, params=("a", "b", "c"), hyb=BMM_T_HYB, hyb_params=("a", "b"), outputs=("c",),
    loops=bmm_t_loops, numpy=bmm_t_numpy, c=BMM_T_C, c_dims=("Z", "M", "N", "K"),
    flops=lambda d: 2.0 * d["Z"] * d["M"] * d["N"] * d["K"], **F32,
)

# ---------------------------------------------------------------- residual add + RMSNorm
# The sum lands in a temporary of its own nest, which a row reduction and then an elementwise
# nest read; only the normalised rows are returned.

ADD_RMSNORM_HYB = """
def kernel_add_rmsnorm(x, r, gamma, eps):
    n = x.shape[0]
    d = x.shape[1]
    t = allocate((n, d), x.dtype)
    y = output_tensor((n, d), x.dtype)
    for i in range(n):
        for j in range(d):
            t[i, j] = x[i, j] + r[i, j]
    for i in range(n):
        s = float32(0.0)
        for j in range(d):
            s += t[i, j] * t[i, j]
        inv = 1.0 / sqrt(s / d + eps)
        for j in range(d):
            y[i, j] = t[i, j] * inv * gamma[j]
    return y
"""


def add_rmsnorm_loops(x, r, gamma, eps, t, y):
    n, d = x.shape
    fd = np.float32(d)
    one = np.float32(1.0)
    for i in prange(n):
        for j in range(d):
            t[i, j] = x[i, j] + r[i, j]
    for i in prange(n):
        s = np.float32(0.0)
        for j in range(d):
            s += t[i, j] * t[i, j]
        inv = one / np.sqrt(s / fd + eps)
        for j in range(d):
            y[i, j] = t[i, j] * inv * gamma[j]


def add_rmsnorm_numpy(x, r, gamma, eps, t, y):
    np.add(x, r, out=t)
    ms = np.mean(t * t, axis=1, keepdims=True)
    np.multiply(t / np.sqrt(ms + eps), gamma, out=y)


ADD_RMSNORM_C = """
void kernel(long n, long d, float x[restrict n][d], float r[restrict n][d], float gamma[restrict d], float eps,
            float t[restrict n][d], float y[restrict n][d])
{
  for (int i = 0; i < n; i++)
    for (int j = 0; j < d; j++)
      t[i][j] = x[i][j] + r[i][j];
  for (int i = 0; i < n; i++) {
    float s = 0.0f;
    for (int j = 0; j < d; j++)
      s += t[i][j] * t[i][j];
    float inv = 1.0f / sqrtf(s / (float)d + eps);
    for (int j = 0; j < d; j++)
      y[i][j] = t[i][j] * inv * gamma[j];
  }
}
"""


def add_rmsnorm_init(d):
    i, j = grid(d["N"], d["D"])
    jj = np.arange(d["D"])
    z = lambda: np.zeros((d["N"], d["D"]), np.float32)  # noqa: E731
    return dict(x=f32(((i * 13 + j * 7) % 61) / 61.0 * 4.0 - 2.0 + i % 3), r=_wave(d, 5, 3, 29, -1.0, 1.0),
                gamma=f32(1.0 + (jj % 5) / 10.0), eps=np.float32(1e-5), t=z(), y=z())


ADD_RMSNORM = Bench(
    name="add-rmsnorm", group="ml", sizes=_sizes(ROWS), init=add_rmsnorm_init,
    params=("x", "r", "gamma", "eps", "t", "y"), hyb=ADD_RMSNORM_HYB, hyb_params=("x", "r", "gamma", "eps"),
    outputs=("y",), loops=add_rmsnorm_loops, numpy=add_rmsnorm_numpy, c=ADD_RMSNORM_C, c_dims=DIMS,
    flops=lambda d: 5.0 * d["N"] * d["D"], hyb_modes=True, **F32,
)

# ---------------------------------------------------------------- top-k along rows
# The 8 largest values of each row with their indices, largest first, as a user writes it: each
# element passed down the sorted list, swapping where it is larger (torch.topk, jax.lax.top_k).

TOPK = 8
TOPK_HYB = """
def kernel_topk_rows(x):
    n = x.shape[0]
    d = x.shape[1]
    vals = output_tensor((n, 8), x.dtype)
    idx = output_tensor((n, 8), "int32")
    for i in range(n):
        for t in range(8):
            vals[i, t] = -3.0e38
            idx[i, t] = -1
        for j in range(d):
            v = x[i, j]
            c = j
            for t in range(8):
                if v > vals[i, t]:
                    tv = vals[i, t]
                    vals[i, t] = v
                    v = tv
                    tc = idx[i, t]
                    idx[i, t] = c
                    c = tc
    return vals, idx
"""


def topk_loops(x, vals, idx):
    n, d = x.shape
    for i in prange(n):
        for t in range(TOPK):
            vals[i, t] = np.float32(-3.0e38)
            idx[i, t] = -1
        for j in range(d):
            v = x[i, j]
            c = j
            for t in range(TOPK):
                if v > vals[i, t]:
                    tv = vals[i, t]
                    vals[i, t] = v
                    v = tv
                    tc = idx[i, t]
                    idx[i, t] = c
                    c = tc


def topk_numpy(x, vals, idx):
    part = np.argpartition(-x, TOPK - 1, axis=1)[:, :TOPK]
    order = np.argsort(-np.take_along_axis(x, part, 1), axis=1, kind="stable")
    idx[:] = np.take_along_axis(part, order, 1)
    vals[:] = np.take_along_axis(x, idx, 1)


TOPK_C = """
void kernel(long n, long d, float x[restrict n][d], float vals[restrict n][8], int idx[restrict n][8])
{
  for (int i = 0; i < n; i++) {
    for (int t = 0; t < 8; t++) {
      vals[i][t] = -3.0e38f;
      idx[i][t] = -1;
    }
    for (int j = 0; j < d; j++) {
      float v = x[i][j];
      int c = j;
      for (int t = 0; t < 8; t++)
        if (v > vals[i][t]) {
          float tv = vals[i][t]; vals[i][t] = v; v = tv;
          int tc = idx[i][t]; idx[i][t] = c; c = tc;
        }
    }
  }
}
"""


def topk_init(d):
    """Each row a shuffle of distinct whole numbers (no ties, so every peer's indices agree),
    scaled into [-2, 2)."""
    n, dd = d["N"], d["D"]
    rows = np.random.default_rng(7).permuted(np.tile(np.arange(dd), (n, 1)), axis=1)
    return dict(x=f32(rows / dd * 4.0 - 2.0), vals=np.zeros((n, TOPK), np.float32), idx=np.zeros((n, TOPK), np.int32))


TOPK_ROWS = Bench(
    name="topk-rows", group="ml",
    sizes=_sizes({"mini": (12, 37), "small": (128, 300), "medium": (4096, 512), "large": (8192, 1024)}),
    init=topk_init, params=("x", "vals", "idx"), hyb=TOPK_HYB, hyb_params=("x",), outputs=("vals", "idx"),
    loops=topk_loops, numpy=topk_numpy, c=TOPK_C, c_dims=DIMS,
    flops=lambda d: 1.0 * d["N"] * d["D"], hyb_modes=True, rtol=0.0, atol=0.0,
    notes=["flops: one comparison per element",
           "rows in random order: about k * ln(D / k) elements each enter the top k"],
)

BENCHES = [ARGMAX, BIAS_SILU_T, BMM_T, ADD_RMSNORM, TOPK_ROWS]
