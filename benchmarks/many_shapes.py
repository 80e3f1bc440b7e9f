"""One kernel called with many shapes: RMSNorm over 512 columns at 40 batch sizes.

Each version starts cold (hyb with an empty disk cache, Numba with a new dispatcher) and runs the
40 batch sizes once each, in a shuffled order; the row reports how many times it compiled and the
whole time, compiles included.  Versions: hyb as it comes (``shapes="auto"``: code for the first
shape, then one shape-generic compile), hyb compiling every shape (``shapes="specialise"``), and
Numba (``@njit(fastmath=True)``, one compile per dtype and rank).

    python -m benchmarks.many_shapes [--sizes 40] [--cols 512] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

RMSNORM = '''
def rmsnorm(x, w):
    y = output_tensor(x.shape, x.dtype)
    for i in range(x.shape[0]):
        s = 0.0
        for j in range(x.shape[1]):
            s += x[i, j] * x[i, j]
        r = 1.0 / sqrt(s / x.shape[1] + 1e-6)
        for j in range(x.shape[1]):
            y[i, j] = x[i, j] * r * w[j]
    return y
'''


def batch_sizes(n: int, seed: int = 0) -> list:
    """``n`` distinct batch sizes between 1 and 4096, in a random order (as a stream of requests)."""
    rng = np.random.default_rng(seed)
    return [int(v) for v in rng.choice(np.arange(1, 4097), size=n, replace=False)]


def run_hyb(sizes: list, cols: int, shapes: str) -> dict:
    import hyb
    from hyb.runtime import pipeline

    made = []
    real = pipeline.generate_code

    def counted(*args, **kwargs):
        made.append(1)
        return real(*args, **kwargs)

    pipeline.generate_code = counted
    try:
        with tempfile.TemporaryDirectory() as d:
            os.environ["HYB_CACHE_DIR"] = d
            k = hyb.compile_source(RMSNORM, "rmsnorm.hyb", fastmath=True, shapes=shapes, threads=1).rmsnorm
            w = np.ones(cols, np.float32)
            t0 = time.perf_counter()
            for rows in sizes:
                k(np.ones((rows, cols), np.float32), w)
            total = time.perf_counter() - t0
    finally:
        pipeline.generate_code = real
    return {"compiles": len(made), "total_s": total}


def run_numba(sizes: list, cols: int) -> dict:
    try:
        import numba
    except ImportError:
        return {"compiles": None, "total_s": None, "why": "numba is not installed"}

    def rmsnorm(x, w):
        y = np.empty_like(x)
        for i in range(x.shape[0]):
            s = np.float32(0.0)
            for j in range(x.shape[1]):
                s += x[i, j] * x[i, j]
            r = np.float32(1.0) / np.sqrt(s / x.shape[1] + np.float32(1e-6))
            for j in range(x.shape[1]):
                y[i, j] = x[i, j] * r * w[j]
        return y

    f = numba.njit(fastmath=True)(rmsnorm)
    w = np.ones(cols, np.float32)
    t0 = time.perf_counter()
    for rows in sizes:
        f(np.ones((rows, cols), np.float32), w)
    return {"compiles": len(f.signatures), "total_s": time.perf_counter() - t0}


def markdown(result: dict) -> str:
    lines = [f"RMSNorm, {result['cols']} columns, {len(result['sizes'])} batch sizes (1 to 4096, each once, "
             "cold start):", "",
             "| version | compiles | total time (s) |", "| --- | --: | --: |"]
    for name, label in (("hyb", "hyb (shapes=\"auto\")"), ("hyb-specialise", "hyb, shapes=\"specialise\""),
                        ("numba", "Numba")):
        r = result[name]
        total = "—" if r["total_s"] is None else f"{r['total_s']:.2f}"
        lines.append(f"| {label} | {r['compiles'] if r['compiles'] is not None else '—'} | {total} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, default=40, help="distinct batch sizes (default: 40)")
    ap.add_argument("--cols", type=int, default=512, help="columns (default: 512)")
    ap.add_argument("--out", default=None, help="directory for many_shapes.json/.md (default: benchmarks/results)")
    opts = ap.parse_args(argv)
    sizes = batch_sizes(opts.sizes)
    result = {"cols": opts.cols, "sizes": sizes,
              "hyb": run_hyb(sizes, opts.cols, "auto"),
              "hyb-specialise": run_hyb(sizes, opts.cols, "specialise"),
              "numba": run_numba(sizes, opts.cols)}
    text = markdown(result)
    print(text)
    out = Path(opts.out) if opts.out else Path(__file__).resolve().parent / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "many_shapes.json").write_text(json.dumps(result, indent=1))
    (out / "many_shapes.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
