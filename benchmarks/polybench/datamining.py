"""PolyBench/C 4.2.1 datamining: covariance, correlation."""
import numpy as np

from ..spec import Bench, f64, grid, prange, sizes

# ---------------------------------------------------------------- covariance

COVARIANCE_HYB = """
def kernel_covariance(float_n, data):
    n = data.shape[0]
    m = data.shape[1]
    mean = allocate((m,), data.dtype)
    cov = output_tensor((m, m), data.dtype)
    for j in range(m):
        mean[j] = 0.0
        for i in range(n):
            mean[j] += data[i, j]
        mean[j] /= float_n
    for i in range(n):
        for j in range(m):
            data[i, j] -= mean[j]
    for i in range(m):
        for j in range(i, m):
            cov[i, j] = 0.0
            for k in range(n):
                cov[i, j] += data[k, i] * data[k, j]
            cov[i, j] /= float_n - 1.0
            cov[j, i] = cov[i, j]
    return cov, data
"""


def covariance_loops(float_n, data, cov, mean):
    n, m = data.shape
    for j in prange(m):
        mean[j] = 0.0
        for i in range(n):
            mean[j] += data[i, j]
        mean[j] /= float_n
    for i in prange(n):
        for j in range(m):
            data[i, j] -= mean[j]
    for i in prange(m):
        for j in range(i, m):
            cov[i, j] = 0.0
            for k in range(n):
                cov[i, j] += data[k, i] * data[k, j]
            cov[i, j] /= float_n - 1.0
            cov[j, i] = cov[i, j]


def covariance_numpy(float_n, data, cov, mean):
    mean[:] = data.sum(axis=0) / float_n
    data -= mean
    cov[:] = (data.T @ data) / (float_n - 1.0)


COVARIANCE_C = """
void kernel(long m, long n, double float_n, double data[restrict n][m], double cov[restrict m][m],
            double mean[restrict m])
{
  for (int j = 0; j < m; j++) {
    mean[j] = 0.0;
    for (int i = 0; i < n; i++)
      mean[j] += data[i][j];
    mean[j] /= float_n;
  }
  for (int i = 0; i < n; i++)
    for (int j = 0; j < m; j++)
      data[i][j] -= mean[j];
  for (int i = 0; i < m; i++)
    for (int j = i; j < m; j++) {
      cov[i][j] = 0.0;
      for (int k = 0; k < n; k++)
        cov[i][j] += data[k][i] * data[k][j];
      cov[i][j] /= (float_n - 1.0);
      cov[j][i] = cov[i][j];
    }
}
"""


def covariance_init(d):
    m, n = d["M"], d["N"]
    i, j = grid(n, m)
    return dict(float_n=float(n), data=f64(i * j / m), cov=np.zeros((m, m)), mean=np.zeros(m))


COVARIANCE = Bench(
    name="covariance", group="polybench",
    sizes=sizes((28, 32), (80, 100), (240, 260), (1200, 1400), ("M", "N")),
    init=covariance_init, params=("float_n", "data", "cov", "mean"), hyb=COVARIANCE_HYB,
    hyb_params=("float_n", "data"), outputs=("cov", "data"), loops=covariance_loops,
    numpy=covariance_numpy, c=COVARIANCE_C, c_dims=("M", "N"),
    flops=lambda d: 1.0 * d["M"] * (d["M"] + 1) * d["N"],
)

# ---------------------------------------------------------------- correlation

CORRELATION_HYB = """
def kernel_correlation(float_n, data):
    n = data.shape[0]
    m = data.shape[1]
    mean = allocate((m,), data.dtype)
    stddev = allocate((m,), data.dtype)
    corr = output_tensor((m, m), data.dtype)
    eps = 0.1
    for j in range(m):
        mean[j] = 0.0
        for i in range(n):
            mean[j] += data[i, j]
        mean[j] /= float_n
    for j in range(m):
        stddev[j] = 0.0
        for i in range(n):
            stddev[j] += (data[i, j] - mean[j]) * (data[i, j] - mean[j])
        stddev[j] /= float_n
        stddev[j] = sqrt(stddev[j])
        stddev[j] = 1.0 if stddev[j] <= eps else stddev[j]
    for i in range(n):
        for j in range(m):
            data[i, j] -= mean[j]
            data[i, j] /= sqrt(float_n) * stddev[j]
    for i in range(m - 1):
        corr[i, i] = 1.0
        for j in range(i + 1, m):
            corr[i, j] = 0.0
            for k in range(n):
                corr[i, j] += data[k, i] * data[k, j]
            corr[j, i] = corr[i, j]
    corr[m - 1, m - 1] = 1.0
    return corr, data
"""


def correlation_loops(float_n, data, corr, mean, stddev):
    n, m = data.shape
    eps = 0.1
    for j in prange(m):
        mean[j] = 0.0
        for i in range(n):
            mean[j] += data[i, j]
        mean[j] /= float_n
    for j in prange(m):
        stddev[j] = 0.0
        for i in range(n):
            stddev[j] += (data[i, j] - mean[j]) * (data[i, j] - mean[j])
        stddev[j] /= float_n
        stddev[j] = np.sqrt(stddev[j])
        stddev[j] = 1.0 if stddev[j] <= eps else stddev[j]
    for i in prange(n):
        for j in range(m):
            data[i, j] -= mean[j]
            data[i, j] /= np.sqrt(float_n) * stddev[j]
    for i in prange(m - 1):
        corr[i, i] = 1.0
        for j in range(i + 1, m):
            corr[i, j] = 0.0
            for k in range(n):
                corr[i, j] += data[k, i] * data[k, j]
            corr[j, i] = corr[i, j]
    corr[m - 1, m - 1] = 1.0


def correlation_numpy(float_n, data, corr, mean, stddev):
    mean[:] = data.sum(axis=0) / float_n
    sd = np.sqrt(((data - mean) ** 2).sum(axis=0) / float_n)
    stddev[:] = np.where(sd <= 0.1, 1.0, sd)
    data -= mean
    data /= np.sqrt(float_n) * stddev
    corr[:] = data.T @ data
    np.fill_diagonal(corr, 1.0)


CORRELATION_C = """
void kernel(long m, long n, double float_n, double data[restrict n][m], double corr[restrict m][m],
            double mean[restrict m], double stddev[restrict m])
{
  double eps = 0.1;
  for (int j = 0; j < m; j++) {
    mean[j] = 0.0;
    for (int i = 0; i < n; i++)
      mean[j] += data[i][j];
    mean[j] /= float_n;
  }
  for (int j = 0; j < m; j++) {
    stddev[j] = 0.0;
    for (int i = 0; i < n; i++)
      stddev[j] += (data[i][j] - mean[j]) * (data[i][j] - mean[j]);
    stddev[j] /= float_n;
    stddev[j] = sqrt(stddev[j]);
    stddev[j] = stddev[j] <= eps ? 1.0 : stddev[j];
  }
  for (int i = 0; i < n; i++)
    for (int j = 0; j < m; j++) {
      data[i][j] -= mean[j];
      data[i][j] /= sqrt(float_n) * stddev[j];
    }
  for (int i = 0; i < m - 1; i++) {
    corr[i][i] = 1.0;
    for (int j = i + 1; j < m; j++) {
      corr[i][j] = 0.0;
      for (int k = 0; k < n; k++)
        corr[i][j] += (data[k][i] * data[k][j]);
      corr[j][i] = corr[i][j];
    }
  }
  corr[m - 1][m - 1] = 1.0;
}
"""


def correlation_init(d):
    m, n = d["M"], d["N"]
    i, j = grid(n, m)
    return dict(float_n=float(n), data=f64(i * j / m + i), corr=np.zeros((m, m)), mean=np.zeros(m),
                stddev=np.zeros(m))


CORRELATION = Bench(
    name="correlation", group="polybench",
    sizes=sizes((28, 32), (80, 100), (240, 260), (1200, 1400), ("M", "N")),
    init=correlation_init, params=("float_n", "data", "corr", "mean", "stddev"), hyb=CORRELATION_HYB,
    hyb_params=("float_n", "data"), outputs=("corr", "data"), loops=correlation_loops,
    numpy=correlation_numpy, c=CORRELATION_C, c_dims=("M", "N"),
    flops=lambda d: 1.0 * d["M"] * (d["M"] - 1) * d["N"],
)

BENCHES = [COVARIANCE, CORRELATION]
