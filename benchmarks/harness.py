"""The benchmark run: for each kernel, hyb's cold compile time, a cross-check of every version's
results, then interleaved timing; and the float32 gemm 1024³ targets.

``python -m benchmarks --help`` lists the options; :func:`main` is what ``hyb bench`` calls.
"""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from . import grad as gradbench
from . import grad_peers
from . import load as loadbench
from . import ml, ml_more, ml_peers, ml_rows, polybench
from .gemm1024 import DIMS as GEMM_DIMS
from .gemm1024 import DENSE, GEMM_F32
from .peers import (DEFAULT_CFLAGS, DEFAULT_VARIANTS, LABELS, ML_PEERS, MODE_VARIANTS, VARIANTS, CCompiler,
                    NotAvailable, build, hyb_module, hyb_options, hyb_threads_env)
from .report import RATIO_PEERS, agrees, markdown, speedup, summary, write_csv, write_json, write_png
from .spec import SIZES

REPO = Path(__file__).resolve().parent.parent
GEMM_NAME = GEMM_F32.name
REFERENCE_ORDER = ("numpy", "c", "numba", "numba-par", "hyb")


def all_benches() -> dict:
    return {b.name: b for b in polybench.BENCHES + ml.BENCHES + ml_rows.BENCHES + ml_more.BENCHES + DENSE}


def log(msg: str = ""):
    print(msg, file=sys.stderr, flush=True)


_STAGE_FILE = None  # in a child process: where the current step is written, for the parent if we crash


def stage(variant: str, what: str, row: dict):
    if _STAGE_FILE is not None:
        Path(_STAGE_FILE).write_text(json.dumps({"variant": variant, "what": what, "row": row}, default=str))


# ------------------------------------------------------------------ options

def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="PolyBench/C 4.2.1 and ML kernels as hybrid kernels, timed against Numba, NumPy and C.")
    ap.add_argument("--size", choices=SIZES, default="medium", help="PolyBench dataset size (default: medium)")
    ap.add_argument("--kernels", default=None,
                    help="comma-separated kernel names, or the groups `polybench`, `ml`, `dense` (dgemm 1024³, "
                         "sgemm 1000×1100×900), `rows` (the elementwise and row kernels of `ml`), `calls` (the "
                         "warm-call overhead of a small add: benchmarks/call_overhead.py); "
                         f"`{GEMM_NAME}` is the float32 gemm of the targets (default: all of them)")
    ap.add_argument("--repeat", type=int, default=10, help="timing rounds per kernel (default: 10)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="threads of the parallel versions (Numba parallel, hyb's all-threads gemm)")
    ap.add_argument("--hyb-threads", type=int, default=1,
                    help="HYB_NUM_THREADS for the hyb column of the table (default: 1, one thread); the PyTorch "
                         "and JAX peers run on as many threads")
    ap.add_argument("--out", default=None, help="output directory (default: benchmarks/results/<size>)")
    ap.add_argument("--schedule", default=None,
                    help='hyb schedule option as JSON, passed through: \'"original"\', \'{"tile": [32, 64, 256]}\'')
    ap.add_argument("--no-fastmath", action="store_true", help="compile hyb and Numba without fast-math")
    ap.add_argument("--compile-repeat", type=int, default=3, help="cold compiles of each hyb kernel (median)")
    ap.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                    help=f"versions to run, of {','.join(VARIANTS)} (default: {','.join(DEFAULT_VARIANTS)}; "
                         "hyb-par is hyb with parallel loops on --threads threads; hyb-ieee and hyb-reassoc, "
                         "run for the elementwise and row kernels only, are hyb without fast-math with sums in program "
                         "order (schedule reassociate=False), and hyb's default mode (no fast-math, sums "
                         "reassociated); torch, torch-compile and jax, run for the "
                         "`ml` kernels only, are PyTorch eager, torch.compile and jax.jit computing the same forward "
                         "kernel, each framework in a child process on --hyb-threads threads, checked against the "
                         "reference before timing, n/a where the framework is not installed)")
    ap.add_argument("--cc", default=None, help="C compiler (default: $CC or gcc)")
    ap.add_argument("--cflags", default=DEFAULT_CFLAGS, help=f"C flags (default: {DEFAULT_CFLAGS})")
    ap.add_argument("--min-time", type=float, default=0.02,
                    help="a fast version is called until this many seconds per round (default: 0.02)")
    ap.add_argument("--budget", type=float, default=20.0,
                    help="seconds of timing per version and kernel before rounds are cut (default: 20)")
    ap.add_argument("--blas-threads", default="1",
                    help="threads of NumPy's BLAS (OPENBLAS/MKL/BLIS_NUM_THREADS of the child processes; default 1, "
                         "a one-thread comparison; `default` leaves them as configured)")
    ap.add_argument("--no-isolate", action="store_true",
                    help="run every kernel in this process (default: each in a child process, so that a crash "
                         "is reported as that kernel's result instead of ending the run)")
    ap.add_argument("--grad", action="store_true",
                    help="also time hyb's gradient kernel (kernel.grad(), called with the inputs and one dout per "
                         f"output) of {', '.join(gradbench.GRAD_KERNELS)}, as a ratio to the forward kernel's time "
                         f"(target: at most {gradbench.TARGET_RATIO:g}x), and beside the same forward and backward "
                         "pass in PyTorch (eager autograd and torch.compile) and JAX (jax.jit of jax.vjp), each in "
                         "a child process on --hyb-threads threads; every gradient is checked against a NumPy "
                         "reference gradient before it is timed (hyb's on the mini size too), and the results get "
                         "a `Gradient kernels` table. PyTorch and JAX are in the `bench` extra; for the CPU build "
                         "of PyTorch: pip install torch --index-url https://download.pytorch.org/whl/cpu")
    ap.add_argument("--grad-peers", default=",".join(grad_peers.PEERS),
                    help=f"the gradient peers --grad runs, of {','.join(grad_peers.PEERS)}, or `none` "
                         f"(default: {','.join(grad_peers.PEERS)}); one whose framework is not installed is "
                         "reported as not available")
    ap.add_argument("--load", action="store_true",
                    help="also time hyb's warm calls one by one idle and while a neighbour process per CPU spins "
                         "(every CPU busy): idle median, loaded median and 95th percentile (target: p95 at most "
                         f"{loadbench.TARGET:g}x the idle median)")
    ap.add_argument("--load-seconds", type=float, default=1.0,
                    help="seconds of calls per kernel for --load, idle and again loaded (default: 1)")
    ap.add_argument("--list", action="store_true", help="list the kernels and exit")
    ap.add_argument("--child-json", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    a.schedule = json.loads(a.schedule) if a.schedule else None
    a.fastmath = not a.no_fastmath
    a.variants = [v.strip() for v in a.variants.split(",") if v.strip()]
    bad = [v for v in a.variants if v not in VARIANTS]
    if bad:
        ap.error(f"unknown variant(s) {', '.join(bad)}; choose from {', '.join(VARIANTS)}")
    if "hyb" not in a.variants:
        ap.error("the hyb variant is what is measured: keep it in --variants")
    try:
        a.grad_peers = grad_peers.wanted(a.grad_peers)
    except ValueError as e:
        ap.error(str(e))
    a.out = Path(a.out) if a.out else Path(__file__).resolve().parent / "results" / a.size
    return a


def select(spec: str | None):
    """(benchmarks, run the gemm 1024 targets?) for --kernels."""
    benches = all_benches()
    if not spec:
        return list(benches.values()), True
    chosen, gemm = [], False
    for name in (n.strip() for n in spec.split(",")):
        if not name:
            continue
        if name == GEMM_NAME:
            gemm = True
        elif name in ("polybench", "ml", "dense"):
            chosen += [b for b in benches.values() if b.group == name]
        elif name == "rows":
            chosen += [b for b in benches.values() if b.hyb_modes]
        elif name in ("calls", "spellings"):
            continue  # not kernels of the suite: main() runs benchmarks.call_overhead, benchmarks.spellings
        elif name in benches:
            chosen.append(benches[name])
        else:
            raise SystemExit(f"unknown kernel `{name}`; known: {', '.join(benches)}, {GEMM_NAME}, "
                             "polybench, ml, dense, rows, calls, spellings")
    seen = set()
    return [b for b in chosen if not (b.name in seen or seen.add(b.name))], gemm


# ------------------------------------------------------------------ one kernel

def cold_compile(bench, dims, pristine, opts, n) -> tuple:
    """Seconds from kernel text to a compiled kernel, each time under a new kernel name (so no cache
    of any kind can serve it); also the last kernel compiled and its compile's (stage, seconds)
    pairs (``inspect("timings")``). A compile slower than 30 s is not repeated."""
    args = [pristine[p] for p in bench.hyb_params]
    options = hyb_options(opts.fastmath, opts.schedule, opts.hyb_threads)
    times, kernel = [], None
    for r in range(n):
        suffix = f"_cold{os.getpid()}x{time.time_ns()}x{r}"
        with hyb_threads_env(opts.hyb_threads):
            t0 = time.perf_counter()
            mod, entry = hyb_module(bench, dims, options, entry_suffix=suffix)
            compiled = mod.kernels[entry].compile(*args)
            times.append(time.perf_counter() - t0)
        kernel = mod.kernels[entry]
        if times[-1] > 30.0:
            break
    return times, kernel, [list(pair) for pair in compiled.timings.stages]


def second_shape(bench, size: str, dims: dict, pristine: dict):
    """(size, dims, data) of another size whose arrays have other shapes than this size's data
    ``pristine`` (the kernel text's constants kept), the nearest below first; None if every size
    has the same shapes."""
    k = SIZES.index(size)
    shapes = _shapes(bench, pristine)
    for other in list(reversed(SIZES[:k])) + list(SIZES[k + 1:]):
        if other not in bench.sizes:
            continue
        dims2 = dict(bench.dims(other), **{c: dims[c] for c in bench.hyb_consts})
        data = bench.init(dims2)
        if _shapes(bench, data) != shapes:
            return other, dims2, data
    return None


def _shapes(bench, data: dict) -> tuple:
    return tuple(np.shape(data[p]) for p in bench.hyb_params)


def second_shape_compile(bench, kernel, size: str, dims: dict, pristine: dict, opts, row: dict) -> None:
    """Seconds to compile ``kernel``, just compiled for this size, for the shapes of another size in
    the same process (row["second_compile_s"]): a second shape compiles the shape-generic code and
    binds it to that shape, or, for a kernel that has none, compiles that shape."""
    other = second_shape(bench, size, dims, pristine)
    if other is None:
        row["second_shape"] = "no other size has other shapes"
        return
    name, dims2, data = other
    with hyb_threads_env(opts.hyb_threads):
        t0 = time.perf_counter()
        compiled = kernel.compile(*[data[p] for p in bench.hyb_params])
        row["second_compile_s"] = time.perf_counter() - t0
    generic = bool(getattr(compiled, "generic", False))
    row["second_shape"] = (f"{name}: " + " ".join(f"{k}={v}" for k, v in dims2.items())
                           + ("; shape-generic code" if generic else "; compiled for that shape (no shape-generic code)"))
    row["second_generic"] = generic


def time_runners(runners: dict, pristine: dict, opts, rounds: int) -> tuple:
    """Median seconds per call of each runner: warm-up, then `rounds` rounds that visit every runner in
    turn (rotating the order), each taking enough samples to fill --min-time; slow runners get fewer
    rounds once --budget would be exceeded. The arrays a call writes are reset before each call,
    outside the timing; those it only reads are left as they are, as the frameworks' peers leave theirs."""
    est = {}
    for v, r in runners.items():
        r.reset(pristine)
        t0 = time.perf_counter()
        r.call()
        est[v] = max(time.perf_counter() - t0, 1e-7)
        if hasattr(r, "learn_written"):
            r.learn_written(pristine)  # only what a call writes is reset before each timed call
    per_round = {v: max(1, min(50, int(opts.min_time / est[v]))) for v in runners}
    n_rounds = {v: min(rounds, max(3, math.ceil(opts.budget / (est[v] * per_round[v])))) for v in runners}
    samples = {v: [] for v in runners}
    order = list(runners)
    perf = time.perf_counter
    gc.collect()
    gc.disable()
    try:
        for k in range(max(n_rounds.values(), default=0)):
            for v in order[k % len(order):] + order[:k % len(order)]:
                if k >= n_rounds[v]:
                    continue
                r = runners[v]
                for _ in range(per_round[v]):
                    r.reset(pristine)
                    t0 = perf()
                    r.call()
                    samples[v].append(perf() - t0)
    finally:
        gc.enable()
    return {v: statistics.median(s) for v, s in samples.items() if s}, {v: len(s) for v, s in samples.items()}


def run_bench(bench, opts, cc: CCompiler, size: str, rounds: int | None = None, variants=None) -> dict:
    import hyb

    dims = bench.dims(size)
    row = new_row(bench, size)
    pristine = bench.init(dims)
    # hyb's IEEE and reassociated modes only for the elementwise and row kernels
    variants = [v for v in (variants or opts.variants) if bench.hyb_modes or v not in MODE_VARIANTS]
    # PyTorch and JAX only for the ML kernels, in child processes after hyb's timing
    peer_variants = [v for v in variants if v in ML_PEERS] if bench.group == "ml" else []
    variants = [v for v in variants if v not in ML_PEERS]
    seen_warnings = []
    kernel = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # 1. cold compile (parse to callable)
        stage("hyb", "cold compile", row)
        try:
            row["compile_samples"], kernel, row["compile_stages"] = cold_compile(
                bench, dims, pristine, opts, max(1, opts.compile_repeat))
            row["compile_s"] = statistics.median(row["compile_samples"])
        except hyb.HybridUnsupportedError as e:
            row["errors"]["hyb"] = f"not available: {type(e).__name__}: {str(e).splitlines()[0]}"
        except Exception as e:  # noqa: BLE001 - a kernel that does not compile is a result to report
            row["errors"]["hyb"] = f"{type(e).__name__}: {e}"
        if kernel is not None:  # 1b. the same kernel compiled for a second shape
            stage("hyb", "compiling it for a second shape", row)
            try:
                second_shape_compile(bench, kernel, size, dims, pristine, opts, row)
            except Exception as e:  # noqa: BLE001 - reported in the row's notes, the row still runs
                row["notes"].append(f"second-shape compile failed: {type(e).__name__}: {str(e).splitlines()[0]}")
        # 2. the versions
        runners = {}
        for v in variants:
            if v.startswith("hyb") and "hyb" in row["errors"]:
                continue
            stage(v, "building (compiling) it", row)
            try:
                runners[v] = build(v, bench, dims, pristine, opts=opts, cc=cc, kernel=kernel)
            except NotAvailable as e:
                row["na"][v] = str(e)
            except Exception as e:  # noqa: BLE001
                row["errors"][v] = f"{type(e).__name__}: {e}"
        # 3. cross-check, before any timing: one run each on fresh data
        results = {}
        for v, r in list(runners.items()):
            stage(v, "its first run (the cross-check)", row)
            try:
                t0 = time.perf_counter()
                r.run()
                row["first_call_s"][v] = time.perf_counter() - t0
                results[v] = r.outputs()
            except Exception as e:  # noqa: BLE001
                row["errors"][v] = f"{type(e).__name__}: {e}"
                del runners[v]
        grad_runner = None
        if getattr(opts, "grad", False) and bench.name in gradbench.GRAD_KERNELS:
            grad_runner = prepare_grad(bench, opts, kernel, runners, pristine, dims, row)
        for w in caught:
            text = str(w.message).splitlines()[0]
            if text not in seen_warnings:
                seen_warnings.append(text)
    row["notes"] += [f"warning: {w}" for w in seen_warnings]
    ref = next((v for v in REFERENCE_ORDER if v in results), None)
    row["reference"] = ref
    for v, out in results.items():
        if v == ref:
            row["check"][v] = 0.0
            continue
        ok, err = agrees(out, results[ref], bench.rtol, bench.atol)
        row["check"][v] = err
        if not ok:
            row["mismatch"].append(v)
            log(f"!!! MISMATCH {bench.name}: {LABELS[v]} differs from {LABELS[ref]} "
                f"(largest error {err:.3g} of the largest |value|; tolerance rtol={bench.rtol:g}, "
                f"atol={bench.atol:g}×max)")
    # 4. timing
    stage("", "timing", row)
    timed = dict(runners, **({"hyb-grad": grad_runner} if grad_runner else {}))
    row["time"], row["samples"] = time_runners(timed, pristine, opts, rounds or opts.repeat)
    if grad_runner:
        g = row["grad"]
        g["time"] = row["time"].pop("hyb-grad", None)
        g["samples"] = row["samples"].pop("hyb-grad", 0)
        g["forward"] = row["time"].get("hyb")
        if g["time"] and g["forward"]:
            g["ratio"] = g["time"] / g["forward"]
    if getattr(opts, "grad", False) and bench.name in gradbench.GRAD_KERNELS:
        run_grad_peers(bench, opts, dims, pristine, row)
    # --load: every kernel of the table (the float32 gemm of the targets has no row there)
    if getattr(opts, "load", False) and "hyb" in runners and bench.name != GEMM_NAME:
        stage("hyb", "timing it beside busy neighbours (--load)", row)
        try:
            row["load"] = loadbench.measure(runners["hyb"], pristine, opts.load_seconds)
        except Exception as e:  # noqa: BLE001 - a measurement that fails is a result to report
            row["load"] = {"error": f"{type(e).__name__}: {e}"}
    if peer_variants:
        run_ml_peers(bench, opts, dims, pristine, row, results.get(ref))
    for v in row["mismatch"]:
        row["problems"].append(f"{v} results differ (error {row['check'][v]:.3g})")
    for v, e in row["errors"].items():
        row["problems"].append(f"{v}: {e.splitlines()[0]}")
    if "hyb" in row["errors"]:
        row["status"] = "ERROR"
    elif row["mismatch"]:
        row["status"] = "MISMATCH"
    elif row["errors"]:
        row["status"] = "PEER ERROR"
    if row["errors"]:
        for v, e in row["errors"].items():
            log(f"!!! {bench.name}: {LABELS[v]} failed: {e}")
    return row


def prepare_grad(bench, opts, kernel, runners: dict, pristine: dict, dims: dict, row: dict):
    """--grad: check hyb's gradient kernel (mini size, then this size) and return a runner that times it
    beside the forward kernel, or None; the outcome is row["grad"]."""
    import hyb

    info = row["grad"] = gradbench.new_grad_row()
    if kernel is None or "hyb" not in runners:
        info["status"] = "ERROR"
        info["error"] = "the forward kernel did not run"
        return None
    stage("hyb-grad", "building and checking the gradient kernel", row)
    try:
        mini = bench.dims("mini")
        runner = gradbench.build(bench, opts, kernel, pristine, dims, mini, bench.init(mini), info)
    except hyb.HybridUnsupportedError as e:
        info["status"] = "ERROR"
        info["error"] = f"not available: {type(e).__name__}: {str(e).splitlines()[0]}"
        runner = None
    except Exception as e:  # noqa: BLE001 - a gradient that does not build or run is a result to report
        info["status"] = "ERROR"
        info["error"] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
        runner = None
    if info["status"] != "ok":
        log(f"!!! {bench.name}: gradient {info['status']}: {info['error']}")
    return gradbench.GradRunner(runner) if runner is not None else None


def run_grad_peers(bench, opts, dims: dict, pristine: dict, row: dict):
    """--grad: PyTorch and JAX computing the same gradients (benchmarks/grad_peers.py), after hyb's
    timing; the results go to row["grad"]["peers"], hyb's speed ratios to row["grad"]["vs"]."""
    g = row.setdefault("grad", gradbench.new_grad_row())
    g["peer_threads"] = opts.hyb_threads
    stage("hyb-grad", "running the gradient's PyTorch and JAX peers", row)
    try:
        g["peers"] = grad_peers.run(bench, opts, dims, pristine, opts.hyb_threads, opts.grad_peers, log=log)
    except Exception as e:  # noqa: BLE001 - peers that cannot run are a result to report
        g["peers"] = {p: grad_peers.new_peer("ERROR", error=f"{type(e).__name__}: {e}") for p in opts.grad_peers}
    for p, r in g["peers"].items():
        if r["status"] not in ("ok", "n/a"):
            log(f"!!! {bench.name}: gradient peer {grad_peers.LABELS[p]} {r['status']}: {r['error']}")
    g["vs"] = {p: r["time"] / g["time"] for p, r in g["peers"].items() if r.get("time") and g.get("time")}


def run_ml_peers(bench, opts, dims: dict, pristine: dict, row: dict, ref):
    """PyTorch and JAX computing the forward kernel (benchmarks/ml_peers.py), on --hyb-threads
    threads, checked against `ref` (the reference outputs of the cross-check) before timing."""
    peers = [p for p in ML_PEERS if p in opts.variants]
    stage(peers[0], "running the PyTorch and JAX peers", row)
    try:
        results = ml_peers.run(bench, opts, dims, pristine, opts.hyb_threads, peers, ref=ref, log=log)
    except Exception as e:  # noqa: BLE001 - peers that cannot run are a result to report
        results = {p: grad_peers.new_peer("ERROR", error=f"{type(e).__name__}: {e}") for p in peers}
    ml_peers.record(row, results)
    for p, r in results.items():
        if r["status"] == "MISMATCH":
            log(f"!!! MISMATCH {bench.name}: {LABELS[p]} differs from the reference (largest error "
                f"{r['check']:.3g}; tolerance rtol={bench.rtol:g}, atol={bench.atol:g}×max)")


def progress(k: int, n: int, row: dict, seconds: float):
    parts = []
    for v in (v for v in VARIANTS if v in row["time"] or v in row["errors"] or v in row["na"]):
        t = row["time"].get(v)
        parts.append(f"{LABELS[v]} {t * 1e3:.3g} ms" if t else f"{LABELS[v]} {'error' if v in row['errors'] else 'n/a'}")
    comp = f"compile {row['compile_s']:.2f} s" if row["compile_s"] else "compile —"
    if row.get("second_compile_s"):
        comp += f", second shape {row['second_compile_s']:.2f} s"
    sp = speedup(row, "numba")
    vs = f"  hyb {sp:.2f}x Numba" if sp else ""
    vs += "".join(f", {speedup(row, p):.2f}x {LABELS[p]}" for p in ("torch-compile", "jax") if speedup(row, p))
    if row.get("load") and row["load"].get("ratio"):
        vs += f"  busy neighbour: p95 {row['load']['ratio']:.2f}x idle median"
    g = row.get("grad")
    if g:
        vs += (f"  gradient {g['time'] * 1e3:.3g} ms = {g['ratio']:.2f}x forward" if g.get("ratio")
               else f"  gradient {g['status']}")
        for p, r in g.get("peers", {}).items():
            if r.get("time") and g.get("time"):
                vs += f", {r['time'] / g['time']:.2f}x {grad_peers.LABELS[p]}"
            else:
                vs += f", {grad_peers.LABELS[p]} " + (f"{r['time'] * 1e3:.3g} ms" if r.get("time") else r["status"])
    log(f"[{k:2d}/{n}] {row['name']:<18} {row['status']:<8} {comp} | " + " | ".join(parts) + vs
        + f"  ({seconds:.1f} s)")


# ------------------------------------------------------------------ gemm 1024 targets

def run_gemm1024(opts, cc: CCompiler) -> dict:
    log(f"[gemm] float32 gemm {GEMM_DIMS['NI']}³: hyb on {opts.hyb_threads} thread(s) and with parallel loops "
        f"on {opts.threads}, Numba serial and parallel, C, NumPy")
    t0 = time.perf_counter()
    rounds = max(1, min(opts.repeat, 5))
    wanted = [v for v in VARIANTS if v in opts.variants or v == "hyb-par"]
    row = run_bench(GEMM_F32, opts, cc, "medium", rounds=rounds, variants=wanted)
    rows = {}

    def entry(v, label, threads):
        d = {"label": label, "threads": threads, "time": row["time"].get(v)}
        if d["time"] is None:
            d["reason"] = row["errors"].get(v) or row["na"].get(v) or "not run"
        else:
            d["check"] = "✗ differs" if v in row["mismatch"] else "ok"
        return d

    rows["hyb"] = entry("hyb", "hyb", opts.hyb_threads)
    rows["hyb-par"] = entry("hyb-par", "hyb, schedule parallel=True", opts.threads)
    rows["numba"] = entry("numba", "Numba", 1)
    rows["numba-par"] = entry("numba-par", "Numba parallel (prange i)", opts.threads)
    rows["c"] = entry("c", "C (gcc -O3 -march=native)", 1)
    blas = os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("MKL_NUM_THREADS") or "BLAS default"
    rows["numpy"] = entry("numpy", "NumPy (BLAS sgemm)", blas)
    log("[gemm] " + " | ".join(f"{r['label']}: {r['time'] * 1e3:.1f} ms" if r.get("time") else
                               f"{r['label']}: {r.get('reason', 'n/a')}" for r in rows.values())
        + f"  ({time.perf_counter() - t0:.1f} s)")
    return {"flops": GEMM_F32.flops(GEMM_DIMS), "dims": GEMM_DIMS, "rows": rows, "status": row["status"],
            "compile_s": row["compile_s"], "bench_row": row}


# ------------------------------------------------------------------ metadata

def _run(cmd, cwd=None) -> str:
    try:
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def cpu_model() -> str:
    for line in _run(["lscpu"]).splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def metadata(opts, cc: CCompiler) -> dict:
    import llvmlite

    try:
        import numba
        numba_version = numba.__version__
    except ImportError:
        numba_version = "not installed"
    commit = _run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO) or "unknown"
    dirty = bool(_run(["git", "status", "--porcelain", "--", "hyb"], cwd=REPO))
    return {"date": datetime.date.today().isoformat(), "cpu": cpu_model(), "cores": os.cpu_count(),
            "commit": commit, "dirty": dirty, "python": platform.python_version(), "numpy": np.__version__,
            "numba": numba_version, "llvmlite": llvmlite.__version__, "cc": cc.cc, "cc_version": cc.version(),
            "cflags": opts.cflags, "size": opts.size, "repeat": opts.repeat, "compile_repeat": opts.compile_repeat,
            "threads": opts.threads, "hyb_threads": opts.hyb_threads, "fastmath": opts.fastmath,
            "grad": opts.grad, "grad_peers": opts.grad_peers if opts.grad else [],
            "grad_peer_threads": opts.hyb_threads if opts.grad else None,
            **({"frameworks": grad_peers.versions()} if opts.grad or set(ML_PEERS) & set(opts.variants) else {}),
            "ml_peers": [p for p in ML_PEERS if p in opts.variants], "ml_peer_threads": opts.hyb_threads,
            "busy_neighbours": loadbench.cpus() if opts.load else None, "load_seconds": opts.load_seconds,
            "schedule": opts.schedule, "variants": opts.variants, "load_start": _load(),
            "blas_threads": "as configured" if opts.no_isolate or opts.blas_threads == "default" else opts.blas_threads}


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


# ------------------------------------------------------------------ main

def new_row(bench, size: str) -> dict:
    dims = bench.dims(size)
    return {"name": bench.name, "group": bench.group, "size": size,
            "dims": " ".join(f"{k}={v}" for k, v in dims.items()), "status": "ok", "compile_s": None,
            "compile_samples": [], "compile_stages": [], "second_compile_s": None, "second_shape": None,
            "second_generic": None, "time": {}, "samples": {}, "first_call_s": {}, "errors": {}, "na": {},
            "check": {}, "mismatch": [], "problems": [], "notes": list(bench.notes), "reference": None,
            "modes": bench.hyb_modes}


def child_args(opts, name: str, json_path: Path) -> list:
    a = [f"--size={opts.size}", f"--kernels={name}", f"--repeat={opts.repeat}", f"--threads={opts.threads}",
         f"--hyb-threads={opts.hyb_threads}", f"--compile-repeat={opts.compile_repeat}",
         f"--variants={','.join(opts.variants)}", f"--cflags={opts.cflags}", f"--min-time={opts.min_time}",
         f"--budget={opts.budget}", f"--out={opts.out}", f"--child-json={json_path}"]
    if opts.schedule is not None:
        a.append(f"--schedule={json.dumps(opts.schedule)}")
    if opts.grad:
        a.append("--grad")
        a.append(f"--grad-peers={','.join(opts.grad_peers) or 'none'}")
    if not opts.fastmath:
        a.append("--no-fastmath")
    if opts.load:
        a += ["--load", f"--load-seconds={opts.load_seconds}"]
    if opts.cc:
        a.append(f"--cc={opts.cc}")
    return a


# Settings some machines make for old OpenBLAS builds, which put OpenBLAS on an older, slower kernel
# (OPENBLAS_CORETYPE=Haswell runs AVX2 code on an AVX-512 CPU).  The benchmarks' child processes
# run without them, so that NumPy's BLAS is measured at its real speed; tests and CI keep them.
BLAS_GUARDS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def child_env(opts, environ=None) -> dict:
    """The environment of a benchmark child process: BLAS threads as asked, without BLAS_GUARDS."""
    env = dict(os.environ if environ is None else environ)
    for var in BLAS_GUARDS:
        env.pop(var, None)
    if opts.blas_threads != "default":
        for var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
            env[var] = str(opts.blas_threads)
    return env


def blas_kernel() -> str:
    """Which BLAS NumPy runs, and which of its kernels, as threadpoolctl reports it."""
    try:
        import threadpoolctl
    except ImportError:
        return "unknown (pip install threadpoolctl to record it)"
    libs = [i for i in threadpoolctl.threadpool_info() if i.get("user_api") == "blas"]
    if not libs:
        return "none found"
    return "; ".join(f"{i.get('internal_api', '?')} {i.get('version') or '?'} ({i.get('prefix', '?')}), "
                     f"{i.get('architecture') or '?'} kernel, threads: {i.get('num_threads', '?')}" for i in libs)


def run_isolated(name: str, opts, workdir: Path) -> dict:
    """One kernel (or the gemm) in a child process; a crash becomes that kernel's result."""
    import signal

    path = workdir / f"{name}.json"
    stage_path = Path(str(path) + ".stage")
    proc = subprocess.run([sys.executable, "-m", "benchmarks", *child_args(opts, name, path)], cwd=REPO,
                          env=child_env(opts))
    if proc.returncode == 0 and path.exists():
        return json.loads(path.read_text())
    try:
        where = json.loads(stage_path.read_text())
    except (OSError, ValueError):
        where = {"variant": "", "what": "starting"}
    how = (f"killed by {signal.Signals(-proc.returncode).name}" if proc.returncode < 0
           else f"exit status {proc.returncode}")
    what = f"the benchmark process died ({how}) during {where['variant'] or 'the run'}: {where['what']}"
    log(f"!!! CRASH {name}: {what}")
    variant = where["variant"] or "hyb"
    if where.get("row"):
        row = where["row"]
    elif name == GEMM_NAME:
        row = new_row(GEMM_F32, "medium")
    else:
        row = new_row(all_benches()[name], opts.size)
    row["status"] = "CRASH"
    row["time"] = {}  # nothing was timed: the crash came first, or during timing
    row["errors"][variant] = what
    row["problems"].append(what)
    if name == GEMM_NAME:
        return {"gemm": {"flops": GEMM_F32.flops(GEMM_DIMS), "dims": GEMM_DIMS, "status": "CRASH",
                         "compile_s": None, "bench_row": row,
                         "rows": {"hyb": {"label": "hyb", "threads": opts.hyb_threads, "time": None,
                                          "reason": what}}}}
    return {"row": row}


def child_main(opts) -> int:
    """--child-json: run the one kernel named by --kernels here and write its result as JSON."""
    global _STAGE_FILE
    _STAGE_FILE = opts.child_json + ".stage"
    benches, gemm_wanted = select(opts.kernels)
    workdir = Path(tempfile.mkdtemp(prefix="hyb-bench-"))
    cc = CCompiler(workdir, opts.cc, opts.cflags)
    try:
        doc = {"gemm": run_gemm1024(opts, cc)} if gemm_wanted else {"row": run_bench(benches[0], opts, cc, opts.size)}
        doc["blas"] = blas_kernel()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    Path(opts.child_json).write_text(json.dumps(doc, default=str))
    return 0


def write_results(opts, meta, rows, gemm, final: bool):
    meta["load_end"] = _load()
    opts.out.mkdir(parents=True, exist_ok=True)
    text = markdown(meta, rows, gemm)
    (opts.out / "results.md").write_text(text)
    write_csv(opts.out / "results.csv", rows)
    write_json(opts.out / "results.json", meta, rows, gemm)
    why = write_png(opts.out / "speedups.png", meta, rows) if final else None
    return text, why


def main(argv=None) -> int:
    """Run the suite; returns 0 when every version of every kernel ran and agreed, else 1."""
    opts = parse_args(argv)
    if opts.list:
        for b in all_benches().values():
            print(f"{b.name:<18} {b.group:<10} " + ", ".join(f"{s}: {b.sizes[s]}" for s in ("medium",)))
        print(f"{GEMM_NAME:<18} target     float32, NI=NJ=NK=1024")
        return 0
    try:
        import numba
        numba.set_num_threads(max(1, min(opts.threads, numba.config.NUMBA_NUM_THREADS)))
    except ImportError:
        if not opts.child_json:
            log("note: numba is not installed; the Numba versions are skipped (pip install numba, or .[bench])")
    if opts.child_json:
        return child_main(opts)
    names = [n.strip() for n in (opts.kernels or "").split(",") if n.strip()]
    if "spellings" in names:
        from . import spellings
        spellings.main(["--repeat", str(min(opts.repeat, 7)), "--out", str(opts.out / "spellings")])
        names.remove("spellings")
        if not names:
            return 0
        opts.kernels = ",".join(names)
    if "calls" in names:
        from . import call_overhead
        call_overhead.main(["--out", str(opts.out)])
        names.remove("calls")
        if not names:
            return 0
        opts.kernels = ",".join(names)
    benches, gemm_wanted = select(opts.kernels)
    if opts.grad and not any(b.name in gradbench.GRAD_KERNELS for b in benches):
        log(f"note: --grad times the gradients of {', '.join(gradbench.GRAD_KERNELS)}; none of them is selected")
    workdir = Path(tempfile.mkdtemp(prefix="hyb-bench-"))
    cc = CCompiler(workdir, opts.cc, opts.cflags)
    if "c" in opts.variants and cc.why_not():
        log(f"note: {cc.why_not()}")
    meta = metadata(opts, cc)
    guards = [f"{v}={os.environ[v]}" for v in BLAS_GUARDS if v in os.environ]
    if opts.no_isolate:
        meta["blas"] = blas_kernel() + (f" (with {', '.join(guards)} set: --no-isolate keeps this process's "
                                        "BLAS settings)" if guards else "")
    else:
        meta["blas"] = "as the child processes report it"
        if guards:
            log(f"note: the NumPy peer runs without {', '.join(guards)} (set here for old OpenBLAS builds; they "
                "put OpenBLAS on a slower kernel), in the benchmark's child processes only")
    log(f"hyb benchmarks: {len(benches)} kernels{' + gemm 1024' if gemm_wanted else ''}, size {opts.size}, "
        f"{opts.repeat} rounds; {meta['cpu']}, {meta['cores']} cores; hyb {meta['commit']}"
        f"{' (dirty)' if meta['dirty'] else ''}; results in {opts.out}")
    rows = []
    gemm = None
    try:
        for k, b in enumerate(benches, 1):
            t0 = time.perf_counter()
            if opts.no_isolate:
                row = run_bench(b, opts, cc, opts.size)
            else:
                doc = run_isolated(b.name, opts, workdir)
                row = doc["row"]
                meta["blas"] = doc.get("blas", meta["blas"])
            rows.append(row)
            progress(k, len(benches), row, time.perf_counter() - t0)
            write_results(opts, meta, rows, gemm, final=False)
        if gemm_wanted:
            if opts.no_isolate:
                gemm = run_gemm1024(opts, cc)
            else:
                doc = run_isolated(GEMM_NAME, opts, workdir)
                gemm = doc["gemm"]
                meta["blas"] = doc.get("blas", meta["blas"])
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    text, why = write_results(opts, meta, rows, gemm, final=True)
    print(text)
    if why:
        log(f"note: {why}")
    log(f"wrote {opts.out}/results.md, results.csv, results.json" + ("" if why else ", speedups.png"))
    for g in ("polybench", "ml", "dense"):
        s = summary(rows, g)
        if s["kernels"]:
            log(f"geomean hyb speedup ({g}, {s['kernels']} kernels): "
                + ", ".join(f"vs {LABELS[p]} {s[p]:.2f}x" for p in RATIO_PEERS if s[p]))
    bad = [r["name"] for r in rows if r["status"] != "ok"]
    bad += [f"{r['name']} (gradient)" for r in rows if r.get("grad") and r["grad"]["status"] != "ok"]
    bad += [f"{r['name']} (gradient peer {grad_peers.LABELS[p]}: {pr['status']})" for r in rows if r.get("grad")
            for p, pr in (r["grad"].get("peers") or {}).items() if pr["status"] not in ("ok", "n/a")]
    if gemm and gemm["status"] != "ok":
        bad.append(GEMM_NAME)
    if bad:
        log(f"!!! not ok: {', '.join(bad)}")
    return 1 if bad else 0
