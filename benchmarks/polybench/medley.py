"""PolyBench/C 4.2.1 medley: floyd-warshall (int, as PolyBench declares it)."""
import numpy as np

from ..spec import Bench, grid, prange, sizes


FLOYD_HYB = """
def kernel_floyd_warshall(path):
    n = path.shape[0]
    for k in range(n):
        for i in range(n):
            for j in range(n):
                path[i, j] = path[i, j] if path[i, j] < path[i, k] + path[k, j] else path[i, k] + path[k, j]
    return path
"""


def floyd_loops(path):
    n = path.shape[0]
    for k in range(n):
        # row k and column k do not change during step k (the diagonal is positive): i may run in parallel
        for i in prange(n):
            for j in range(n):
                path[i, j] = path[i, j] if path[i, j] < path[i, k] + path[k, j] else path[i, k] + path[k, j]


def floyd_numpy(path):
    for k in range(path.shape[0]):
        np.minimum(path, path[:, k, None] + path[None, k, :], out=path)


FLOYD_C = """
void kernel(long n, int path[restrict n][n])
{
  for (int k = 0; k < n; k++)
    for (int i = 0; i < n; i++)
      for (int j = 0; j < n; j++)
        path[i][j] = path[i][j] < path[i][k] + path[k][j] ? path[i][j] : path[i][k] + path[k][j];
}
"""


def floyd_init(d):
    n = d["N"]
    i, j = grid(n, n)
    path = i * j % 7 + 1
    s = i + j
    path = np.where((s % 13 == 0) | (s % 7 == 0) | (s % 11 == 0), 999, path)
    return dict(path=np.ascontiguousarray(path, dtype=np.int32))


FLOYD = Bench(
    name="floyd-warshall", group="polybench",
    sizes=sizes((60,), (180,), (500,), (2800,), ("N",)),
    init=floyd_init, params=("path",), hyb=FLOYD_HYB, hyb_params=("path",), outputs=("path",),
    loops=floyd_loops, numpy=floyd_numpy, c=FLOYD_C, c_dims=("N",), rtol=0.0, atol=0.0,
    flops=lambda d: 2.0 * d["N"] ** 3,
)

BENCHES = [FLOYD]
