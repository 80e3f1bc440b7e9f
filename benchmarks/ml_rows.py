"""Elementwise and row-wise ML kernels in float32: GELU (tanh form), a SiLU chain through two
``allocate`` temporaries, RMSNorm, log-softmax, an LSTM cell on precomputed gate pre-activations
and an int8 quantise/dequantise pair.

They are written as a user writes them first: plain loops, one loop nest per step. Their Numba
peers are the same loops (float32 constants, so that Numba computes in float32 as hyb does),
the C peers the same loops for gcc -O3, and the NumPy peers the natural array expressions.
The figures reported are the medium size, 2048 rows of 1024 (the LSTM cell: a batch of 2048,
1024 hidden units). Each benchmark has ``hyb_modes`` set: the harness also times hyb in IEEE
mode with sums in program order and in its default mode (see ``peers.MODE_VARIANTS``).
"""
import numpy as np

from .spec import Bench, f32, grid, prange

F32 = dict(rtol=1e-4, atol=1e-5)
DIMS = ("N", "D")
# mini and small have rows whose length is no multiple of a vector, so remainders are checked
ROWS = {"mini": (12, 37), "small": (128, 300), "medium": (2048, 1024), "large": (4096, 4096)}


def _sizes(table, names=DIMS):
    return {s: dict(zip(names, v)) for s, v in table.items()}


def _zeros(d, dtype=np.float32):
    return np.zeros((d["N"], d["D"]), dtype)


def _wave(d, a, b, mod, lo, hi):
    """Deterministic values in [lo, hi) over an N x D grid."""
    i, j = grid(d["N"], d["D"])
    return f32(((i * a + j * b) % mod) / float(mod) * (hi - lo) + lo)


# ---------------------------------------------------------------- GELU (tanh form)

GELU_HYB = """
def kernel_gelu(x):
    n = x.shape[0]
    d = x.shape[1]
    out = output_tensor((n, d), x.dtype)
    for i in range(n):
        for j in range(d):
            v = x[i, j]
            out[i, j] = 0.5 * v * (1.0 + tanh(0.7978845608 * (v + 0.044715 * v**3)))
    return out
"""


def gelu_loops(x, out):
    n, d = x.shape
    half = np.float32(0.5)
    one = np.float32(1.0)
    k0 = np.float32(0.7978845608)
    k1 = np.float32(0.044715)
    for i in prange(n):
        for j in range(d):
            v = x[i, j]
            out[i, j] = half * v * (one + np.tanh(k0 * (v + k1 * v**3)))


def gelu_numpy(x, out):
    # x * x * x: NumPy's float32 `x**3` goes through its general power, about 40 times slower
    out[:] = 0.5 * x * (1.0 + np.tanh(0.7978845608 * (x + 0.044715 * (x * x * x))))


GELU_C = """
void kernel(long n, long d, float x[restrict n][d], float out[restrict n][d])
{
  for (int i = 0; i < n; i++)
    for (int j = 0; j < d; j++) {
      float v = x[i][j];
      out[i][j] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
    }
}
"""


def gelu_init(d):
    return dict(x=_wave(d, 31, 17, 97, -4.0, 4.0), out=_zeros(d))


GELU = Bench(
    name="gelu", group="ml", sizes=_sizes(ROWS), init=gelu_init, params=("x", "out"), hyb=GELU_HYB,
    hyb_params=("x",), outputs=("out",), loops=gelu_loops, numpy=gelu_numpy, c=GELU_C, c_dims=DIMS,
    flops=lambda d: 10.0 * d["N"] * d["D"], hyb_modes=True,
    notes=["numpy: `x * x * x` for `x**3` (NumPy's float32 power is about 40x slower than the products)"], **F32,
)

# ---------------------------------------------------------------- SiLU chain through two temporaries

SILU_CHAIN_HYB = """
def kernel_silu_chain(a, b, c):
    n = a.shape[0]
    d = a.shape[1]
    t1 = allocate((n, d), a.dtype)
    t2 = allocate((n, d), a.dtype)
    out = output_tensor((n, d), a.dtype)
    for i in range(n):
        for j in range(d):
            t1[i, j] = a[i, j] * b[i, j] + c[i, j]
    for i in range(n):
        for j in range(d):
            t2[i, j] = t1[i, j] * sigmoid(t1[i, j])
    for i in range(n):
        for j in range(d):
            out[i, j] = t2[i, j] + exp(-abs(a[i, j]))
    return out
"""


def silu_chain_loops(a, b, c, t1, t2, out):
    n, d = a.shape
    one = np.float32(1.0)
    for i in prange(n):
        for j in range(d):
            t1[i, j] = a[i, j] * b[i, j] + c[i, j]
    for i in prange(n):
        for j in range(d):
            t2[i, j] = t1[i, j] * (one / (one + np.exp(-t1[i, j])))
    for i in prange(n):
        for j in range(d):
            out[i, j] = t2[i, j] + np.exp(-np.abs(a[i, j]))


def silu_chain_numpy(a, b, c, t1, t2, out):
    np.multiply(a, b, out=t1)
    t1 += c
    np.multiply(t1, 1.0 / (1.0 + np.exp(-t1)), out=t2)
    np.add(t2, np.exp(-np.abs(a)), out=out)


SILU_CHAIN_C = """
void kernel(long n, long d, float a[restrict n][d], float b[restrict n][d], float c[restrict n][d],
            float t1[restrict n][d], float t2[restrict n][d], float out[restrict n][d])
{
  for (int i = 0; i < n; i++)
    for (int j = 0; j < d; j++)
      t1[i][j] = a[i][j] * b[i][j] + c[i][j];
  for (int i = 0; i < n; i++)
    for (int j = 0; j < d; j++)
      t2[i][j] = t1[i][j] * (1.0f / (1.0f + expf(-t1[i][j])));
  for (int i = 0; i < n; i++)
    for (int j = 0; j < d; j++)
      out[i][j] = t2[i][j] + expf(-fabsf(a[i][j]));
}
"""


def silu_chain_init(d):
    return dict(a=_wave(d, 5, 3, 29, -2.0, 2.0), b=_wave(d, 7, 1, 31, -1.0, 1.0), c=_wave(d, 1, 11, 19, -0.5, 0.5),
                t1=_zeros(d), t2=_zeros(d), out=_zeros(d))


SILU_CHAIN = Bench(
    name="silu-chain", group="ml", sizes=_sizes(ROWS), init=silu_chain_init,
    params=("a", "b", "c", "t1", "t2", "out"), hyb=SILU_CHAIN_HYB, hyb_params=("a", "b", "c"), outputs=("out",),
    loops=silu_chain_loops, numpy=silu_chain_numpy, c=SILU_CHAIN_C, c_dims=DIMS,
    flops=lambda d: 9.0 * d["N"] * d["D"], hyb_modes=True, **F32,
)

# ---------------------------------------------------------------- RMSNorm

RMSNORM_HYB = """
def kernel_rmsnorm(x, gamma, eps):
    n = x.shape[0]
    d = x.shape[1]
    out = output_tensor((n, d), x.dtype)
    for i in range(n):
        ss = float32(0.0)
        for j in range(d):
            ss += x[i, j] * x[i, j]
        r = 1.0 / sqrt(ss / d + eps)
        for j in range(d):
            out[i, j] = x[i, j] * r * gamma[j]
    return out
"""


def rmsnorm_loops(x, gamma, eps, out):
    n, d = x.shape
    fd = np.float32(d)
    one = np.float32(1.0)
    for i in prange(n):
        ss = np.float32(0.0)
        for j in range(d):
            ss += x[i, j] * x[i, j]
        r = one / np.sqrt(ss / fd + eps)
        for j in range(d):
            out[i, j] = x[i, j] * r * gamma[j]


def rmsnorm_numpy(x, gamma, eps, out):
    ms = np.mean(x * x, axis=1, keepdims=True)
    np.multiply(x / np.sqrt(ms + eps), gamma, out=out)


RMSNORM_C = """
void kernel(long n, long d, float x[restrict n][d], float gamma[restrict d], float eps, float out[restrict n][d])
{
  for (int i = 0; i < n; i++) {
    float ss = 0.0f;
    for (int j = 0; j < d; j++)
      ss += x[i][j] * x[i][j];
    float r = 1.0f / sqrtf(ss / (float)d + eps);
    for (int j = 0; j < d; j++)
      out[i][j] = x[i][j] * r * gamma[j];
  }
}
"""


def rmsnorm_init(d):
    i, j = grid(d["N"], d["D"])
    jj = np.arange(d["D"])
    return dict(x=f32(((i * 13 + j * 7) % 61) / 61.0 * 4.0 - 2.0 + i % 3), gamma=f32(1.0 + (jj % 5) / 10.0),
                eps=np.float32(1e-5), out=_zeros(d))


RMSNORM = Bench(
    name="rmsnorm", group="ml", sizes=_sizes(ROWS), init=rmsnorm_init, params=("x", "gamma", "eps", "out"),
    hyb=RMSNORM_HYB, hyb_params=("x", "gamma", "eps"), outputs=("out",), loops=rmsnorm_loops,
    numpy=rmsnorm_numpy, c=RMSNORM_C, c_dims=DIMS, flops=lambda d: 4.0 * d["N"] * d["D"], hyb_modes=True, **F32,
)

# ---------------------------------------------------------------- log-softmax

LOG_SOFTMAX_HYB = """
def kernel_log_softmax(x):
    n = x.shape[0]
    d = x.shape[1]
    out = output_tensor((n, d), x.dtype)
    for i in range(n):
        m = x[i, 0]
        for j in range(1, d):
            m = max(m, x[i, j])
        s = float32(0.0)
        for j in range(d):
            s += exp(x[i, j] - m)
        lse = m + log(s)
        for j in range(d):
            out[i, j] = x[i, j] - lse
    return out
"""


def log_softmax_loops(x, out):
    n, d = x.shape
    for i in prange(n):
        m = x[i, 0]
        for j in range(1, d):
            m = max(m, x[i, j])
        s = np.float32(0.0)
        for j in range(d):
            s += np.exp(x[i, j] - m)
        lse = m + np.log(s)
        for j in range(d):
            out[i, j] = x[i, j] - lse


def log_softmax_numpy(x, out):
    m = x.max(axis=1, keepdims=True)
    lse = m + np.log(np.exp(x - m).sum(axis=1, keepdims=True))
    np.subtract(x, lse, out=out)


LOG_SOFTMAX_C = """
void kernel(long n, long d, float x[restrict n][d], float out[restrict n][d])
{
  for (int i = 0; i < n; i++) {
    float m = x[i][0];
    for (int j = 1; j < d; j++)
      m = x[i][j] > m ? x[i][j] : m;
    float s = 0.0f;
    for (int j = 0; j < d; j++)
      s += expf(x[i][j] - m);
    float lse = m + logf(s);
    for (int j = 0; j < d; j++)
      out[i][j] = x[i][j] - lse;
  }
}
"""


def log_softmax_init(d):
    i, _ = grid(d["N"], d["D"])
    return dict(x=f32(_wave(d, 31, 17, 97, -4.0, 4.0) + (i % 5)), out=_zeros(d))


LOG_SOFTMAX = Bench(
    name="log-softmax", group="ml", sizes=_sizes(ROWS), init=log_softmax_init, params=("x", "out"),
    hyb=LOG_SOFTMAX_HYB, hyb_params=("x",), outputs=("out",), loops=log_softmax_loops, numpy=log_softmax_numpy,
    c=LOG_SOFTMAX_C, c_dims=DIMS, flops=lambda d: 4.0 * d["N"] * d["D"], hyb_modes=True, **F32,
)

# ---------------------------------------------------------------- LSTM cell

LSTM_HYB = """
def kernel_lstm_cell(z, c):
    n = c.shape[0]
    hd = c.shape[1]
    c_new = output_tensor((n, hd), c.dtype)
    h_new = output_tensor((n, hd), c.dtype)
    for b in range(n):
        for k in range(hd):
            ig = sigmoid(z[b, k])
            fg = sigmoid(z[b, hd + k])
            gg = tanh(z[b, 2 * hd + k])
            og = sigmoid(z[b, 3 * hd + k])
            cn = fg * c[b, k] + ig * gg
            c_new[b, k] = cn
            h_new[b, k] = og * tanh(cn)
    return c_new, h_new
"""


def lstm_loops(z, c, c_new, h_new):
    n, hd = c.shape
    one = np.float32(1.0)
    for b in prange(n):
        for k in range(hd):
            ig = one / (one + np.exp(-z[b, k]))
            fg = one / (one + np.exp(-z[b, hd + k]))
            gg = np.tanh(z[b, 2 * hd + k])
            og = one / (one + np.exp(-z[b, 3 * hd + k]))
            cn = fg * c[b, k] + ig * gg
            c_new[b, k] = cn
            h_new[b, k] = og * np.tanh(cn)


def lstm_numpy(z, c, c_new, h_new):
    hd = c.shape[1]
    s = 1.0 / (1.0 + np.exp(-z))
    np.multiply(s[:, hd:2 * hd], c, out=c_new)
    c_new += s[:, :hd] * np.tanh(z[:, 2 * hd:3 * hd])
    np.multiply(s[:, 3 * hd:], np.tanh(c_new), out=h_new)


LSTM_C = """
void kernel(long n, long hd, float z[restrict n][4 * hd], float c[restrict n][hd], float c_new[restrict n][hd],
            float h_new[restrict n][hd])
{
  for (int b = 0; b < n; b++)
    for (int k = 0; k < hd; k++) {
      float ig = 1.0f / (1.0f + expf(-z[b][k]));
      float fg = 1.0f / (1.0f + expf(-z[b][hd + k]));
      float gg = tanhf(z[b][2 * hd + k]);
      float og = 1.0f / (1.0f + expf(-z[b][3 * hd + k]));
      float cn = fg * c[b][k] + ig * gg;
      c_new[b][k] = cn;
      h_new[b][k] = og * tanhf(cn);
    }
}
"""


def lstm_init(d):
    n, hd = d["N"], d["H"]
    i, j = grid(n, 4 * hd)
    z = ((i * 7 + j * 3) % 41) / 41.0 * 6.0 - 3.0
    i, j = grid(n, hd)
    c = ((i * 5 + j * 11) % 23) / 23.0 * 2.0 - 1.0
    return dict(z=f32(z), c=f32(c), c_new=np.zeros((n, hd), np.float32), h_new=np.zeros((n, hd), np.float32))


LSTM = Bench(
    name="lstm-cell", group="ml", sizes=_sizes(ROWS, ("N", "H")), init=lstm_init,
    params=("z", "c", "c_new", "h_new"), hyb=LSTM_HYB, hyb_params=("z", "c"), outputs=("c_new", "h_new"),
    loops=lstm_loops, numpy=lstm_numpy, c=LSTM_C, c_dims=("N", "H"),
    flops=lambda d: 20.0 * d["N"] * d["H"], hyb_modes=True, **F32,
)

# ---------------------------------------------------------------- int8 quantise / dequantise

QUANT_HYB = """
def kernel_quantize(x, scale):
    n = x.shape[0]
    d = x.shape[1]
    q = output_tensor((n, d), "int8")
    y = output_tensor((n, d), x.dtype)
    for i in range(n):
        for j in range(d):
            v = round(x[i, j] / scale[i])
            q[i, j] = int8(min(max(v, -127.0), 127.0))
    for i in range(n):
        for j in range(d):
            y[i, j] = float32(q[i, j]) * scale[i]
    return q, y
"""


def quant_loops(x, scale, q, y):
    n, d = x.shape
    lo = np.float32(-127.0)
    hi = np.float32(127.0)
    for i in prange(n):
        for j in range(d):
            v = np.rint(x[i, j] / scale[i])
            q[i, j] = np.int8(min(max(v, lo), hi))
    for i in prange(n):
        for j in range(d):
            y[i, j] = np.float32(q[i, j]) * scale[i]


def quant_numpy(x, scale, q, y):
    s = scale[:, None]
    q[:] = np.clip(np.rint(x / s), -127.0, 127.0)
    np.multiply(q, s, out=y)


QUANT_C = """
void kernel(long n, long d, float x[restrict n][d], float scale[restrict n], signed char q[restrict n][d],
            float y[restrict n][d])
{
  for (int i = 0; i < n; i++)
    for (int j = 0; j < d; j++) {
      float v = rintf(x[i][j] / scale[i]);
      v = v < -127.0f ? -127.0f : (v > 127.0f ? 127.0f : v);
      q[i][j] = (signed char)v;
    }
  for (int i = 0; i < n; i++)
    for (int j = 0; j < d; j++)
      y[i][j] = (float)q[i][j] * scale[i];
}
"""


def quant_init(d):
    """Per-row scales that are powers of two and values a fraction 0.1 or 0.3 away from a whole
    multiple of their scale, some past ±127 of it: every version rounds and clips alike (no value
    is near a tie), also where fast-math divides by multiplying with a reciprocal."""
    n, dd = d["N"], d["D"]
    i, j = grid(n, dd)
    k = (i * 37 + j * 11) % 301 - 150                          # whole multiples, -150 .. 150
    frac = np.array([-0.3, -0.1, 0.1, 0.3])[(i + j * 3) % 4]
    scale = 2.0 ** -(3 + np.arange(n) % 4)
    return dict(x=f32((k + frac) * scale[:, None]), scale=f32(scale), q=np.zeros((n, dd), np.int8),
                y=np.zeros((n, dd), np.float32))


QUANT = Bench(
    name="quantize-int8", group="ml", sizes=_sizes(ROWS), init=quant_init, params=("x", "scale", "q", "y"),
    hyb=QUANT_HYB, hyb_params=("x", "scale"), outputs=("q", "y"), loops=quant_loops, numpy=quant_numpy,
    c=QUANT_C, c_dims=DIMS, flops=lambda d: 5.0 * d["N"] * d["D"], hyb_modes=True, entry_name="kernel_quantize",
    **F32,
)

BENCHES = [GELU, SILU_CHAIN, RMSNORM, LOG_SOFTMAX, LSTM, QUANT]
