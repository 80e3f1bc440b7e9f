"""The performance oracle on the benchmark kernels: each kernel of benchmarks/ (PolyBench and the ML
groups) compiled as the benchmarks compile it (fast-math, one thread) in the schedule hyb chooses
and with ``schedule="original"``, checked against each other, then timed by the oracle of
tests/fuzz/perf.py (the least of interleaved runs, a ratio over the limit timed again); the
kernels whose chosen schedule is slower than the original order by more than the limit are listed.

    python -m tests.fuzz.perf_bench                        # every kernel, MEDIUM size
    python -m tests.fuzz.perf_bench --kernels gemm,softmax --size small --no-fastmath

Exit status 1 when a kernel is over the limit (or fails to compile, run or agree).
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # benchmarks/ sits beside hyb/
    sys.path.insert(0, str(REPO))

from . import perf  # noqa: E402


def benches(names=None) -> list:
    from benchmarks import ml, ml_more, ml_rows, polybench

    every = polybench.BENCHES + ml.BENCHES + ml_rows.BENCHES + ml_more.BENCHES
    if not names:
        return every
    known = {b.name: b for b in every}
    bad = [n for n in names if n not in known]
    if bad:
        raise SystemExit(f"unknown kernel {bad[0]!r}; known: {', '.join(known)}")
    return [known[n] for n in names]


def runners(bench, size: str, fastmath: bool) -> tuple:
    """(pristine data, {"chosen": runner, "original": runner}), both on one thread."""
    from benchmarks.peers import hyb_options, hyb_runner

    dims = bench.dims(size)
    pristine = bench.init(dims)
    out = {}
    for name, schedule in (("chosen", None), ("original", "original")):
        out[name] = hyb_runner(bench, dims, pristine, hyb_options(fastmath, schedule, 1), threads=1)
    return pristine, out


def measure(bench, size: str, fastmath: bool, limit: float) -> dict:
    """One kernel: {"name", "status" (ok, SLOW, MISMATCH, ERROR), "chosen", "original", "ratio", "note"}."""
    from benchmarks.report import agrees

    row = {"name": bench.name, "status": "ok", "chosen": None, "original": None, "ratio": None, "note": ""}
    try:
        pristine, rs = runners(bench, size, fastmath)
        outs = {}
        for name, r in rs.items():
            r.reset(pristine)
            r.run()
            outs[name] = r.outputs()
        ok, err = agrees(outs["chosen"], outs["original"], bench.rtol, bench.atol)
        if not ok:
            row.update(status="MISMATCH", note=f"chosen and original differ (error {err:.3g})")
            return row
        first, merged = perf.judge({n: r.call for n, r in rs.items()},
                                   {n: (lambda r=r: r.reset(pristine)) for n, r in rs.items()}, limit=limit)
    except Exception as e:  # noqa: BLE001 - a kernel that does not compile or run is a result to report
        row.update(status="ERROR", note=f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}")
        return row
    final = merged or first
    row.update(chosen=final.best["chosen"], original=final.best["original"], ratio=final.ratio(),
               note=perf.describe(first, merged))
    if perf.verdict(first, merged, limit):
        row["status"] = "SLOW"
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz.perf_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="medium", help="the benchmarks' dataset size (default: medium)")
    ap.add_argument("--kernels", default="", help="comma-separated kernel names (default: every one)")
    ap.add_argument("--no-fastmath", action="store_true", help="compile without fast-math (hyb's default mode)")
    ap.add_argument("--limit", type=float, default=perf.LIMIT,
                    help=f"chosen / original ratio above which a kernel is listed (default {perf.LIMIT:g})")
    a = ap.parse_args(argv)
    chosen = benches([n.strip() for n in a.kernels.split(",") if n.strip()])
    print(f"chosen schedule vs schedule=\"original\", {a.size} size, "
          f"{'no fast-math' if a.no_fastmath else 'fast-math'}, one thread; limit {a.limit:g}x", flush=True)
    rows = []
    t_all = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for b in chosen:
            if a.size not in b.sizes:
                continue
            t0 = time.perf_counter()
            r = measure(b, a.size, not a.no_fastmath, a.limit)
            rows.append(r)
            times = (f"chosen {r['chosen'] * 1e3:9.3f} ms  original {r['original'] * 1e3:9.3f} ms  {r['ratio']:5.2f}x"
                     if r["ratio"] is not None else r["note"])
            print(f"{r['name']:<20} {r['status']:<8} {times}  ({time.perf_counter() - t0:.1f} s)", flush=True)
    bad = [r for r in rows if r["status"] != "ok"]
    print(f"\n{len(rows)} kernels in {time.perf_counter() - t_all:.0f} s; "
          f"over {a.limit:g}x or failing: {len(bad)}")
    for r in bad:
        print(f"  {r['name']}: {r['status']}: {r['note']}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
