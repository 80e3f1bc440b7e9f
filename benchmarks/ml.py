"""ML kernels in float32: row-wise softmax, layernorm, conv2d (NCHW, direct loops), batched matmul,
a chain of elementwise ops, attention and a 2x2 max pool with its argmax, written the way a user
would write them first (textbook loop order; reordering them is the scheduler's job)."""
import itertools

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .spec import Bench, f32, grid, prange

F32 = dict(rtol=1e-4, atol=1e-5)


def _sizes(table, names):
    return {s: dict(zip(names, v)) for s, v in table.items()}


# ---------------------------------------------------------------- softmax

SOFTMAX_HYB = """
def kernel_softmax(x):
    n = x.shape[0]
    d = x.shape[1]
    out = output_tensor((n, d), x.dtype)
    for i in range(n):
        m = x[i, 0]
        for j in range(1, d):
            m = max(m, x[i, j])
        s = float32(0.0)
        for j in range(d):
            e = exp(x[i, j] - m)
            out[i, j] = e
            s += e
        for j in range(d):
            out[i, j] = out[i, j] / s
    return out
"""


def softmax_loops(x, out):
    n, d = x.shape
    for i in prange(n):
        m = x[i, 0]
        for j in range(1, d):
            m = max(m, x[i, j])
        s = np.float32(0.0)
        for j in range(d):
            e = np.exp(x[i, j] - m)
            out[i, j] = e
            s += e
        for j in range(d):
            out[i, j] = out[i, j] / s


def softmax_numpy(x, out):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    out[:] = e / e.sum(axis=1, keepdims=True)


SOFTMAX_C = """
void kernel(long n, long d, float x[restrict n][d], float out[restrict n][d])
{
  for (int i = 0; i < n; i++) {
    float m = x[i][0];
    for (int j = 1; j < d; j++)
      m = x[i][j] > m ? x[i][j] : m;
    float s = 0.0f;
    for (int j = 0; j < d; j++) {
      float e = expf(x[i][j] - m);
      out[i][j] = e;
      s += e;
    }
    for (int j = 0; j < d; j++)
      out[i][j] = out[i][j] / s;
  }
}
"""


def softmax_init(d):
    i, j = grid(d["N"], d["D"])
    return dict(x=f32(((i * 31 + j * 17) % 97) / 97.0 * 8.0 - 4.0), out=np.zeros((d["N"], d["D"]), np.float32))


# medium is the size the elementwise and row kernels are reported at (ml_rows.py: 2048 rows of 1024)
ROWS = {"mini": (16, 32), "small": (128, 256), "medium": (2048, 1024), "large": (4096, 4096)}

SOFTMAX = Bench(
    name="softmax", group="ml", sizes=_sizes(ROWS, ("N", "D")), init=softmax_init, params=("x", "out"),
    hyb=SOFTMAX_HYB, hyb_params=("x",), outputs=("out",), loops=softmax_loops, numpy=softmax_numpy,
    c=SOFTMAX_C, c_dims=("N", "D"), flops=lambda d: 4.0 * d["N"] * d["D"], hyb_modes=True, **F32,
)

# ---------------------------------------------------------------- layernorm

LAYERNORM_HYB = """
def kernel_layernorm(x, gamma, beta, eps):
    n = x.shape[0]
    d = x.shape[1]
    out = output_tensor((n, d), x.dtype)
    for i in range(n):
        mean = float32(0.0)
        for j in range(d):
            mean += x[i, j]
        mean = mean / d
        var = float32(0.0)
        for j in range(d):
            t = x[i, j] - mean
            var += t * t
        var = var / d
        r = 1.0 / sqrt(var + eps)
        for j in range(d):
            out[i, j] = (x[i, j] - mean) * r * gamma[j] + beta[j]
    return out
"""


def layernorm_loops(x, gamma, beta, eps, out):
    n, d = x.shape
    fd = np.float32(d)
    for i in prange(n):
        mean = np.float32(0.0)
        for j in range(d):
            mean += x[i, j]
        mean = mean / fd
        var = np.float32(0.0)
        for j in range(d):
            t = x[i, j] - mean
            var += t * t
        var = var / fd
        r = np.float32(1.0) / np.sqrt(var + eps)
        for j in range(d):
            out[i, j] = (x[i, j] - mean) * r * gamma[j] + beta[j]


def layernorm_numpy(x, gamma, beta, eps, out):
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    out[:] = (x - mean) / np.sqrt(var + eps) * gamma + beta


LAYERNORM_C = """
void kernel(long n, long d, float x[restrict n][d], float gamma[restrict d], float beta[restrict d],
            float eps, float out[restrict n][d])
{
  for (int i = 0; i < n; i++) {
    float mean = 0.0f;
    for (int j = 0; j < d; j++)
      mean += x[i][j];
    mean = mean / (float)d;
    float var = 0.0f;
    for (int j = 0; j < d; j++) {
      float t = x[i][j] - mean;
      var += t * t;
    }
    var = var / (float)d;
    float r = 1.0f / sqrtf(var + eps);
    for (int j = 0; j < d; j++)
      out[i][j] = (x[i][j] - mean) * r * gamma[j] + beta[j];
  }
}
"""


def layernorm_init(d):
    n, dd = d["N"], d["D"]
    i, j = grid(n, dd)
    jj = np.arange(dd)
    return dict(x=f32(((i * 13 + j * 7) % 61) / 61.0 * 4.0 - 2.0 + i % 3), gamma=f32(1.0 + (jj % 5) / 10.0),
                beta=f32((jj % 7) / 7.0 - 0.5), eps=np.float32(1e-5), out=np.zeros((n, dd), np.float32))


LAYERNORM = Bench(
    name="layernorm", group="ml", sizes=_sizes(ROWS, ("N", "D")), init=layernorm_init,
    params=("x", "gamma", "beta", "eps", "out"), hyb=LAYERNORM_HYB, hyb_params=("x", "gamma", "beta", "eps"),
    outputs=("out",), loops=layernorm_loops, numpy=layernorm_numpy, c=LAYERNORM_C, c_dims=("N", "D"),
    flops=lambda d: 8.0 * d["N"] * d["D"], hyb_modes=True, **F32,
)

# ---------------------------------------------------------------- conv2d

CONV2D_HYB = """
def kernel_conv2d(x, w):
    nb = x.shape[0]
    c = x.shape[1]
    h = x.shape[2]
    wd = x.shape[3]
    k = w.shape[0]
    r = w.shape[2]
    s = w.shape[3]
    p = h - r + 1
    q = wd - s + 1
    out = output_tensor((nb, k, p, q), x.dtype)
    for n in range(nb):
        for kk in range(k):
            for pp in range(p):
                for qq in range(q):
                    for cc in range(c):
                        for rr in range(r):
                            for ss in range(s):
                                out[n, kk, pp, qq] += x[n, cc, pp + rr, qq + ss] * w[kk, cc, rr, ss]
    return out
"""


def conv2d_loops(x, w, out):
    nb, c, h, wd = x.shape
    k, _, r, s = w.shape
    p = h - r + 1
    q = wd - s + 1
    for n in range(nb):
        for kk in prange(k):
            for pp in range(p):
                for qq in range(q):
                    for cc in range(c):
                        for rr in range(r):
                            for ss in range(s):
                                out[n, kk, pp, qq] += x[n, cc, pp + rr, qq + ss] * w[kk, cc, rr, ss]


def conv2d_numpy(x, w, out):
    r, s = w.shape[2], w.shape[3]
    win = sliding_window_view(x, (r, s), axis=(2, 3))          # n c p q r s
    out[:] = np.tensordot(win, w, axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2)


CONV2D_C = """
void kernel(long nb, long c, long k, long h, long wd, long r, long s,
            float x[restrict nb][c][h][wd], float w[restrict k][c][r][s],
            float out[restrict nb][k][h - r + 1][wd - s + 1])
{
  long p = h - r + 1, q = wd - s + 1;
  for (int n = 0; n < nb; n++)
    for (int kk = 0; kk < k; kk++)
      for (int pp = 0; pp < p; pp++)
        for (int qq = 0; qq < q; qq++)
          for (int cc = 0; cc < c; cc++)
            for (int rr = 0; rr < r; rr++)
              for (int ss = 0; ss < s; ss++)
                out[n][kk][pp][qq] += x[n][cc][pp + rr][qq + ss] * w[kk][cc][rr][ss];
}
"""


def conv2d_init(d):
    nb, c, k, h, wd, r, s = (d[n] for n in ("NB", "C", "K", "H", "W", "R", "S"))
    n_, c_, h_, w_ = grid(nb, c, h, wd)
    x = ((n_ * 7 + c_ * 5 + h_ * 3 + w_) % 11) / 11.0 - 0.5
    k_, c_, r_, s_ = grid(k, c, r, s)
    w = ((k_ * 3 + c_ * 2 + r_ + s_ * 5) % 7) / 7.0 - 0.5
    return dict(x=f32(x), w=f32(w), out=np.zeros((nb, k, h - r + 1, wd - s + 1), np.float32))


CONV2D = Bench(
    name="conv2d", group="ml",
    sizes=_sizes({"mini": (1, 3, 4, 10, 10, 3, 3), "small": (2, 16, 16, 18, 18, 3, 3),
                  "medium": (4, 32, 64, 34, 34, 3, 3), "large": (8, 64, 128, 66, 66, 3, 3)},
                 ("NB", "C", "K", "H", "W", "R", "S")),
    init=conv2d_init, params=("x", "w", "out"), hyb=CONV2D_HYB, hyb_params=("x", "w"), outputs=("out",),
    loops=conv2d_loops, numpy=conv2d_numpy, c=CONV2D_C, c_dims=("NB", "C", "K", "H", "W", "R", "S"),
    flops=lambda d: 2.0 * d["NB"] * d["K"] * (d["H"] - d["R"] + 1) * (d["W"] - d["S"] + 1) * d["C"] * d["R"] * d["S"],
    **F32,
)

# ---------------------------------------------------------------- batched matmul

BMM_HYB = """
def kernel_batched_matmul(a, b):
    nb = a.shape[0]
    m = a.shape[1]
    kd = a.shape[2]
    n = b.shape[2]
    c = output_tensor((nb, m, n), a.dtype)
    for bb in range(nb):
        for i in range(m):
            for j in range(n):
                for k in range(kd):
                    c[bb, i, j] += a[bb, i, k] * b[bb, k, j]
    return c
"""


def bmm_loops(a, b, c):
    nb, m, kd = a.shape
    n = b.shape[2]
    for bb in prange(nb):
        for i in range(m):
            for j in range(n):
                for k in range(kd):
                    c[bb, i, j] += a[bb, i, k] * b[bb, k, j]


def bmm_numpy(a, b, c):
    np.matmul(a, b, out=c)


BMM_C = """
void kernel(long nb, long m, long kd, long n, float a[restrict nb][m][kd], float b[restrict nb][kd][n],
            float c[restrict nb][m][n])
{
  for (int bb = 0; bb < nb; bb++)
    for (int i = 0; i < m; i++)
      for (int j = 0; j < n; j++)
        for (int k = 0; k < kd; k++)
          c[bb][i][j] += a[bb][i][k] * b[bb][k][j];
}
"""


def bmm_init(d):
    nb, m, kd, n = d["NB"], d["M"], d["K"], d["N"]
    b_, i_, k_ = grid(nb, m, kd)
    a = ((b_ + i_ * 3 + k_ * 5) % 13) / 13.0 - 0.5
    b_, k_, j_ = grid(nb, kd, n)
    b = ((b_ * 2 + k_ * 7 + j_) % 17) / 17.0 - 0.5
    return dict(a=f32(a), b=f32(b), c=np.zeros((nb, m, n), np.float32))


BMM = Bench(
    name="batched-matmul", group="ml",
    sizes=_sizes({"mini": (2, 8, 12, 10), "small": (4, 64, 64, 64), "medium": (8, 256, 256, 256),
                  "large": (16, 512, 512, 512)}, ("NB", "M", "K", "N")),
    init=bmm_init, params=("a", "b", "c"), hyb=BMM_HYB, hyb_params=("a", "b"), outputs=("c",),
    loops=bmm_loops, numpy=bmm_numpy, c=BMM_C, c_dims=("NB", "M", "K", "N"),
    flops=lambda d: 2.0 * d["NB"] * d["M"] * d["K"] * d["N"], **F32,
)

# ---------------------------------------------------------------- elementwise chain

ELEMWISE_HYB = """
def kernel_elementwise_chain(a, b, c):
    n = a.shape[0]
    m = a.shape[1]
    t1 = allocate((n, m), a.dtype)
    t2 = allocate((n, m), a.dtype)
    t3 = allocate((n, m), a.dtype)
    out = output_tensor((n, m), a.dtype)
    for i in range(n):
        for j in range(m):
            t1[i, j] = a[i, j] * b[i, j] + c[i, j]
    for i in range(n):
        for j in range(m):
            t2[i, j] = max(t1[i, j], 0.0)
    for i in range(n):
        for j in range(m):
            t3[i, j] = t2[i, j] * sigmoid(t2[i, j])
    for i in range(n):
        for j in range(m):
            out[i, j] = t3[i, j] + 0.5 * sqrt(abs(a[i, j])) - tanh(b[i, j])
    return out
"""


def elemwise_loops(a, b, c, t1, t2, t3, out):
    n, m = a.shape
    one = np.float32(1.0)
    for i in prange(n):
        for j in range(m):
            t1[i, j] = a[i, j] * b[i, j] + c[i, j]
    for i in prange(n):
        for j in range(m):
            t2[i, j] = max(t1[i, j], np.float32(0.0))
    for i in prange(n):
        for j in range(m):
            t3[i, j] = t2[i, j] * (one / (one + np.exp(-t2[i, j])))
    for i in prange(n):
        for j in range(m):
            out[i, j] = t3[i, j] + np.float32(0.5) * np.sqrt(np.abs(a[i, j])) - np.tanh(b[i, j])


def elemwise_numpy(a, b, c, t1, t2, t3, out):
    np.multiply(a, b, out=t1)
    t1 += c
    np.maximum(t1, 0.0, out=t2)
    np.multiply(t2, 1.0 / (1.0 + np.exp(-t2)), out=t3)
    out[:] = t3 + 0.5 * np.sqrt(np.abs(a)) - np.tanh(b)


ELEMWISE_C = """
void kernel(long n, long m, float a[restrict n][m], float b[restrict n][m], float c[restrict n][m],
            float t1[restrict n][m], float t2[restrict n][m], float t3[restrict n][m], float out[restrict n][m])
{
  for (int i = 0; i < n; i++)
    for (int j = 0; j < m; j++)
      t1[i][j] = a[i][j] * b[i][j] + c[i][j];
  for (int i = 0; i < n; i++)
    for (int j = 0; j < m; j++)
      t2[i][j] = t1[i][j] > 0.0f ? t1[i][j] : 0.0f;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < m; j++)
      t3[i][j] = t2[i][j] * (1.0f / (1.0f + expf(-t2[i][j])));
  for (int i = 0; i < n; i++)
    for (int j = 0; j < m; j++)
      out[i][j] = t3[i][j] + 0.5f * sqrtf(fabsf(a[i][j])) - tanhf(b[i][j]);
}
"""


def elemwise_init(d):
    n, m = d["N"], d["M"]
    i, j = grid(n, m)
    z = lambda: np.zeros((n, m), np.float32)  # noqa: E731
    return dict(a=f32(((i * 5 + j * 3) % 29) / 29.0 * 4.0 - 2.0), b=f32(((i * 7 + j) % 31) / 31.0 * 2.0 - 1.0),
                c=f32(((i + j * 11) % 19) / 19.0 - 0.5), t1=z(), t2=z(), t3=z(), out=z())


ELEMWISE = Bench(
    name="elementwise-chain", group="ml",
    sizes=_sizes({"mini": (16, 24), "small": (256, 256), "medium": (2048, 1024), "large": (4096, 4096)},
                 ("N", "M")),
    init=elemwise_init, params=("a", "b", "c", "t1", "t2", "t3", "out"), hyb=ELEMWISE_HYB,
    hyb_params=("a", "b", "c"), outputs=("out",), loops=elemwise_loops, numpy=elemwise_numpy, c=ELEMWISE_C,
    c_dims=("N", "M"), flops=lambda d: 12.0 * d["N"] * d["M"], hyb_modes=True, **F32,
)

# ---------------------------------------------------------------- attention

ATTENTION_HYB = """
def kernel_attention(q, k, v):
    h = q.shape[0]
    n = q.shape[1]
    d = q.shape[2]
    p = allocate((h, n, n), q.dtype)
    out = output_tensor((h, n, d), q.dtype)
    for b in range(h):
        for i in range(n):
            for j in range(n):
                p[b, i, j] = 0.0
                for c in range(d):
                    p[b, i, j] += q[b, i, c] * k[b, j, c]
    for b in range(h):
        for i in range(n):
            m = p[b, i, 0]
            for j in range(1, n):
                m = max(m, p[b, i, j])
            s = float32(0.0)
            for j in range(n):
                e = exp((p[b, i, j] - m) * 0.125)
                p[b, i, j] = e
                s += e
            for j in range(n):
                p[b, i, j] = p[b, i, j] / s
    for b in range(h):
        for i in range(n):
            for c in range(d):
                out[b, i, c] = 0.0
            for j in range(n):
                for c in range(d):
                    out[b, i, c] += p[b, i, j] * v[b, j, c]
    return out
"""


def attention_loops(q, k, v, p, out):
    h, n, d = q.shape
    for b in prange(h):
        for i in range(n):
            for j in range(n):
                acc = np.float32(0.0)
                for c in range(d):
                    acc += q[b, i, c] * k[b, j, c]
                p[b, i, j] = acc
            m = p[b, i, 0]
            for j in range(1, n):
                m = max(m, p[b, i, j])
            s = np.float32(0.0)
            for j in range(n):
                e = np.exp((p[b, i, j] - m) * np.float32(0.125))
                p[b, i, j] = e
                s += e
            for j in range(n):
                p[b, i, j] = p[b, i, j] / s
            for c in range(d):
                out[b, i, c] = 0.0
            for j in range(n):
                for c in range(d):
                    out[b, i, c] += p[b, i, j] * v[b, j, c]


def attention_numpy(q, k, v, p, out):
    np.matmul(q, k.transpose(0, 2, 1), out=p)
    p -= p.max(axis=2, keepdims=True)
    p *= np.float32(0.125)
    np.exp(p, out=p)
    p /= p.sum(axis=2, keepdims=True)
    np.matmul(p, v, out=out)


ATTENTION_C = """
void kernel(long h, long n, long d, float q[restrict h][n][d], float k[restrict h][n][d],
            float v[restrict h][n][d], float p[restrict h][n][n], float out[restrict h][n][d])
{
  for (int b = 0; b < h; b++)
    for (int i = 0; i < n; i++) {
      for (int j = 0; j < n; j++) {
        float acc = 0.0f;
        for (int c = 0; c < d; c++)
          acc += q[b][i][c] * k[b][j][c];
        p[b][i][j] = acc;
      }
      float m = p[b][i][0];
      for (int j = 1; j < n; j++)
        m = p[b][i][j] > m ? p[b][i][j] : m;
      float s = 0.0f;
      for (int j = 0; j < n; j++) {
        float e = expf((p[b][i][j] - m) * 0.125f);
        p[b][i][j] = e;
        s += e;
      }
      for (int j = 0; j < n; j++)
        p[b][i][j] = p[b][i][j] / s;
      for (int c = 0; c < d; c++)
        out[b][i][c] = 0.0f;
      for (int j = 0; j < n; j++)
        for (int c = 0; c < d; c++)
          out[b][i][c] += p[b][i][j] * v[b][j][c];
    }
}
"""


def attention_init(d):
    h, n, dd = d["H"], d["N"], d["D"]
    b_, i_, c_ = grid(h, n, dd)
    q = ((b_ + i_ * 3 + c_ * 5) % 13) / 13.0 - 0.5
    k = ((b_ * 2 + i_ * 7 + c_) % 17) / 17.0 - 0.5
    v = ((b_ * 3 + i_ + c_ * 11) % 19) / 19.0 - 0.5
    return dict(q=f32(q), k=f32(k), v=f32(v), p=np.zeros((h, n, n), np.float32),
                out=np.zeros((h, n, dd), np.float32))


ATTENTION = Bench(
    name="attention", group="ml",
    sizes=_sizes({"mini": (2, 12, 8), "small": (4, 64, 32), "medium": (8, 512, 64), "large": (16, 1024, 64)},
                 ("H", "N", "D")),
    init=attention_init, params=("q", "k", "v", "p", "out"), hyb=ATTENTION_HYB, hyb_params=("q", "k", "v"),
    outputs=("out",), loops=attention_loops, numpy=attention_numpy, c=ATTENTION_C, c_dims=("H", "N", "D"),
    flops=lambda d: 4.0 * d["H"] * d["N"] * d["N"] * d["D"], **F32,
)

# ---------------------------------------------------------------- max pool with argmax
# 2x2 windows, stride 2, over an NCHW tensor (a trailing odd row or column is left out, as
# PyTorch's max_pool2d does). The running maximum keeps the first of equal values; the index is
# the flat position in the input plane, row * W + column (PyTorch's `return_indices`).

MAX_POOL_HYB = """
def kernel_max_pool(x):
    nb = x.shape[0]
    c = x.shape[1]
    h = x.shape[2]
    w = x.shape[3]
    ph = h // 2
    pw = w // 2
    out = output_tensor((nb, c, ph, pw), x.dtype)
    arg = output_tensor((nb, c, ph, pw), "int32")
    for n in range(nb):
        for k in range(c):
            for p in range(ph):
                for q in range(pw):
                    best = x[n, k, 2 * p, 2 * q]
                    idx = 2 * p * w + 2 * q
                    for dr in range(2):
                        for ds in range(2):
                            v = x[n, k, 2 * p + dr, 2 * q + ds]
                            if v > best:
                                best = v
                                idx = (2 * p + dr) * w + 2 * q + ds
                    out[n, k, p, q] = best
                    arg[n, k, p, q] = idx
    return out, arg
"""


def max_pool_loops(x, out, arg):
    nb, c, h, w = x.shape
    ph = h // 2
    pw = w // 2
    for n in range(nb):
        for k in prange(c):
            for p in range(ph):
                for q in range(pw):
                    best = x[n, k, 2 * p, 2 * q]
                    idx = 2 * p * w + 2 * q
                    for dr in range(2):
                        for ds in range(2):
                            v = x[n, k, 2 * p + dr, 2 * q + ds]
                            if v > best:
                                best = v
                                idx = (2 * p + dr) * w + 2 * q + ds
                    out[n, k, p, q] = best
                    arg[n, k, p, q] = idx


def max_pool_numpy(x, out, arg):
    nb, c, h, w = x.shape
    ph, pw = h // 2, w // 2
    win = x[:, :, :2 * ph, :2 * pw].reshape(nb, c, ph, 2, pw, 2).transpose(0, 1, 2, 4, 3, 5).reshape(nb, c, ph, pw, 4)
    j = win.argmax(axis=-1)                       # the first maximum, as the loops keep it
    out[:] = np.take_along_axis(win, j[..., None], axis=-1)[..., 0]
    rows = 2 * np.arange(ph)[:, None] + j // 2
    cols = 2 * np.arange(pw) + j % 2
    arg[:] = rows * w + cols


MAX_POOL_C = """
void kernel(long nb, long c, long h, long w, float x[restrict nb][c][h][w],
            float out[restrict nb][c][h / 2][w / 2], int arg[restrict nb][c][h / 2][w / 2])
{
  long ph = h / 2, pw = w / 2;
  for (int n = 0; n < nb; n++)
    for (int k = 0; k < c; k++)
      for (int p = 0; p < ph; p++)
        for (int q = 0; q < pw; q++) {
          float best = x[n][k][2 * p][2 * q];
          int idx = 2 * p * w + 2 * q;
          for (int dr = 0; dr < 2; dr++)
            for (int ds = 0; ds < 2; ds++) {
              float v = x[n][k][2 * p + dr][2 * q + ds];
              if (v > best) {
                best = v;
                idx = (2 * p + dr) * w + 2 * q + ds;
              }
            }
          out[n][k][p][q] = best;
          arg[n][k][p][q] = idx;
        }
}
"""

_PERMS = np.array(list(itertools.permutations(range(4))))


def max_pool_init(d):
    """Each 2x2 window holds a base value plus 0, 1/16, 2/16 and 3/16 in an order that changes from
    window to window: no two values of a window are equal, so the maximum and its gradient have no
    ties to break, and the argmax moves around the window."""
    nb, c, h, w = d["NB"], d["C"], d["H"], d["W"]
    n_, k_, r_, s_ = grid(nb, c, h, w)
    p, q = r_ // 2, s_ // 2
    base = ((n_ * 7 + k_ * 5 + p * 3 + q * 11) % 13) / 13.0 - 0.5
    rank = _PERMS[(n_ * 5 + k_ * 3 + p * 7 + q) % 24, (r_ % 2) * 2 + s_ % 2]
    shape = (nb, c, h // 2, w // 2)
    return dict(x=f32(base + 0.0625 * rank), out=np.zeros(shape, np.float32), arg=np.zeros(shape, np.int32))


MAX_POOL = Bench(
    name="max-pool", group="ml",
    sizes=_sizes({"mini": (2, 3, 8, 7), "small": (4, 16, 32, 30), "medium": (8, 64, 64, 64),
                  "large": (16, 64, 128, 128)}, ("NB", "C", "H", "W")),
    init=max_pool_init, params=("x", "out", "arg"), hyb=MAX_POOL_HYB, hyb_params=("x",), outputs=("out", "arg"),
    loops=max_pool_loops, numpy=max_pool_numpy, c=MAX_POOL_C, c_dims=("NB", "C", "H", "W"),
    flops=lambda d: 3.0 * d["NB"] * d["C"] * (d["H"] // 2) * (d["W"] // 2), **F32,
)

BENCHES = [SOFTMAX, LAYERNORM, CONV2D, BMM, ELEMWISE, ATTENTION, MAX_POOL]
