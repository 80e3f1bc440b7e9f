"""Spellings: one kernel written several ways, each timed, beside torch.compile, JAX and NumPy.

    python -m benchmarks spellings                     # (or python -m benchmarks --kernels spellings)
    python -m benchmarks spellings --kernels softmax,matmul --repeat 3 --budget 1

The kernels: softmax (rows of 2048×1024 float32), RMSNorm (2048×1024), matmul (512³), linear with
its epilogue (``relu(x Wᵀ + b)``, x 512×1024, W 1024×1024), an Adam step (float32[4M], in place)
and the cross-entropy of each row (2048×8192 logits, int64 labels).  linear's W is stored
(out, in) as ``F.linear`` takes it; two of its spellings take it stored (in, out) instead.  Their spellings vary what a
user may write for the same loops: a scalar or a tensor accumulator; the epilogue fused into the
loop nest or in a nest of its own; a Python-float scalar (``s = 0.0``) or a float32 one
(``s = float32(0.0)``); a running maximum started from the first element (``m = x[i, 0]``), from
``-math.inf``, from ``-1e30``, or updated by ``if x[i, j] > m: m = x[i, j]``; matmul's loop orders
ijk, ikj and kij; the Adam step's hyper-parameters passed as Python floats or as float32 scalars
(:data:`SKIPPED` names any spelling left out, and why).

hyb runs in this process on one thread, in its default mode (no fast-math, sums reassociated;
``--fastmath`` for fast-math).  Every spelling's result is checked against a NumPy reference
(float64) before it is timed; a time is the least of up to ``--repeat`` runs, the spellings of a
kernel interleaved, each spelling's runs stopped once they would pass ``--budget`` seconds (a
spelling whose checked first run already took that long is timed by that run alone), so that a
spelling that takes seconds per call does not hold the group up.  torch.compile, JAX (``jax.jit``)
and NumPy run each kernel as an ML user writes it, each framework in a child process of its own on
one thread (benchmarks/grad_peers.py's settings), checked against the same reference; NumPy's
process runs without OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE and records which BLAS kernel ran
(threadpoolctl), as the benchmark harness's child processes do.  The table is printed as markdown
and written, with the run's details as JSON, to ``--out`` (default benchmarks/results/spellings).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

REPO = Path(__file__).resolve().parent.parent
OUT = Path(__file__).resolve().parent / "results" / "spellings"
PEERS = ("torch-compile", "jax", "numpy")
LABELS = {"torch-compile": "torch.compile", "jax": "JAX", "numpy": "NumPy"}
FRAMEWORK = {"torch-compile": "torch", "jax": "jax", "numpy": "numpy"}
CHILD_TIMEOUT_S = 1800


# ------------------------------------------------------------------ the kernels and their spellings

@dataclass
class Spelling:
    name: str
    source: str                  # a kernel `k`
    float32_scalars: bool = False  # the kernel's Python-float arguments passed as np.float32
    params: tuple = ()           # the kernel's arguments, where they are not the Kernel's


@dataclass
class Kernel:
    name: str
    sizes: dict                  # "bench" / "tiny" -> {dimension: int}
    data: Callable               # (dims, rng) -> {name: array or float}
    params: tuple                # the kernel's arguments, in order
    reference: Callable          # data -> [outputs], NumPy in float64
    spellings: list
    rtol: float = 1e-5
    atol: float = 1e-6           # relative to the reference's largest |value|
    inplace: tuple = ()          # arrays a call writes (reset before each run)

    def dims_text(self, size="bench") -> str:
        return "×".join(str(v) for v in self.sizes[size].values())


SKIPPED: dict = {}  # kernel -> a spelling left out, and why


def _f32(a):
    return np.ascontiguousarray(a, dtype=np.float32)


# softmax -----------------------------------------------------------------------------------------

def _rows(first_max, sum_init="float32(0.0)", tensor_sum=False, recompute=False):
    """A softmax kernel: the running maximum `first_max` ("first", "-1e30", "-math.inf", "if"), the sum's
    initial value, a tensor accumulator or a scalar, exp stored then divided or recomputed."""
    if first_max == "first":
        mx = ["m = x[i, 0]", "for j in range(1, d):", "    m = max(m, x[i, j])"]
    elif first_max in ("-1e30", "-math.inf"):
        mx = [f"m = {first_max}", "for j in range(d):", "    m = max(m, x[i, j])"]
    else:
        mx = ["m = x[i, 0]", "for j in range(1, d):", "    if x[i, j] > m:", "        m = x[i, j]"]
    acc = "s[i]" if tensor_sum else "s"
    body = mx + ([f"s[i] = {sum_init}"] if tensor_sum else [f"s = {sum_init}"])
    if recompute:
        body += ["for j in range(d):", f"    {acc} += exp(x[i, j] - m)",
                 "for j in range(d):", f"    out[i, j] = exp(x[i, j] - m) / {acc}"]
    else:
        body += ["for j in range(d):", "    e = exp(x[i, j] - m)", "    out[i, j] = e", f"    {acc} += e",
                 "for j in range(d):", f"    out[i, j] = out[i, j] / {acc}"]
    head = ["n = x.shape[0]", "d = x.shape[1]", "out = output_tensor((n, d), x.dtype)"]
    if tensor_sum:
        head.append("s = allocate((n,), x.dtype)")
    return _kernel("x", head, ["for i in range(n):"] + ["    " + ln for ln in body], "out")


def _kernel(params, head, body, ret):
    lines = head + body + [f"return {ret}"]
    return f"def k({params}):\n" + "".join(f"    {ln}\n" for ln in lines)


def _softmax_ref(d):
    x = d["x"].astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return [e / e.sum(axis=1, keepdims=True)]


SOFTMAX = Kernel(
    "softmax", {"bench": {"n": 2048, "d": 1024}, "tiny": {"n": 3, "d": 17}},
    lambda s, rng: {"x": _f32(rng.uniform(-4, 4, (s["n"], s["d"])))}, ("x",), _softmax_ref,
    [Spelling("m = x[i, 0], max(); s = float32(0.0)", _rows("first")),
     Spelling("m = -1e30, max()", _rows("-1e30")),
     Spelling("m = -math.inf, max()", _rows("-math.inf")),
     Spelling("if x[i, j] > m: m = x[i, j]", _rows("if")),
     Spelling("s = 0.0 (Python float)", _rows("first", "0.0")),
     Spelling("tensor accumulator s[i]", _rows("first", tensor_sum=True)),
     Spelling("exp recomputed in the output loop", _rows("first", recompute=True))])


# RMSNorm -----------------------------------------------------------------------------------------

def _rmsnorm(acc="float32(0.0)", tensor=False, own_nest=False, rsqrt=False):
    r = "rsqrt(q / d + eps)" if rsqrt else "1.0 / sqrt(q / d + eps)"
    head = ["n = x.shape[0]", "d = x.shape[1]", "out = output_tensor((n, d), x.dtype)"]
    if own_nest:  # the scale of every row first, then the output in a nest of its own
        head.append("r = allocate((n,), x.dtype)")
        body = ["for i in range(n):", f"    q = {acc}", "    for j in range(d):", "        q += x[i, j] * x[i, j]",
                f"    r[i] = {r}", "for i in range(n):", "    for j in range(d):",
                "        out[i, j] = x[i, j] * r[i] * gamma[j]"]
        return _kernel("x, gamma, eps", head, body, "out")
    if tensor:
        head.append("q = allocate((n,), x.dtype)")
        body = ["for i in range(n):", f"    q[i] = {acc}", "    for j in range(d):", "        q[i] += x[i, j] * x[i, j]",
                f"    r = {r.replace('q /', 'q[i] /')}"]
    else:
        body = ["for i in range(n):", f"    q = {acc}", "    for j in range(d):", "        q += x[i, j] * x[i, j]",
                f"    r = {r}"]
    body += ["    for j in range(d):", "        out[i, j] = x[i, j] * r * gamma[j]"]
    return _kernel("x, gamma, eps", head, body, "out")


def _rmsnorm_ref(d):
    x = d["x"].astype(np.float64)
    return [x / np.sqrt((x * x).mean(axis=1, keepdims=True) + d["eps"]) * d["gamma"].astype(np.float64)]


RMSNORM = Kernel(
    "rmsnorm", {"bench": {"n": 2048, "d": 1024}, "tiny": {"n": 3, "d": 17}},
    lambda s, rng: {"x": _f32(rng.uniform(-2, 2, (s["n"], s["d"]))), "gamma": _f32(rng.uniform(0.5, 1.5, s["d"])),
                    "eps": 1e-5},
    ("x", "gamma", "eps"), _rmsnorm_ref,
    [Spelling("scalar q = float32(0.0)", _rmsnorm()),
     Spelling("scalar q = 0.0 (Python float)", _rmsnorm("0.0")),
     Spelling("tensor accumulator q[i]", _rmsnorm(tensor=True)),
     Spelling("rsqrt()", _rmsnorm(rsqrt=True)),
     Spelling("scale r[i] first, output in its own nest", _rmsnorm(own_nest=True))])


# matmul ------------------------------------------------------------------------------------------

def _matmul(order, acc="float32(0.0)"):
    head = ["m = a.shape[0]", "kk = a.shape[1]", "n = b.shape[1]", "c = output_tensor((m, n), a.dtype)"]
    if order == "ijk-scalar":
        body = ["for i in range(m):", "    for j in range(n):", f"        s = {acc}", "        for k in range(kk):",
                "            s += a[i, k] * b[k, j]", "        c[i, j] = s"]
    else:
        loops = {"ijk": ("i", "j", "k"), "ikj": ("i", "k", "j"), "kij": ("k", "i", "j")}[order]
        rng = {"i": "m", "j": "n", "k": "kk"}
        body = [f"{'    ' * p}for {v} in range({rng[v]}):" for p, v in enumerate(loops)]
        body.append("    " * 3 + "c[i, j] += a[i, k] * b[k, j]")
    return _kernel("a, b", head, body, "c")


MATMUL = Kernel(
    "matmul", {"bench": {"m": 512, "k": 512, "n": 512}, "tiny": {"m": 5, "k": 7, "n": 9}},
    lambda s, rng: {"a": _f32(rng.uniform(-1, 1, (s["m"], s["k"]))), "b": _f32(rng.uniform(-1, 1, (s["k"], s["n"])))},
    ("a", "b"), lambda d: [d["a"].astype(np.float64) @ d["b"].astype(np.float64)],
    [Spelling("ijk, scalar s = float32(0.0)", _matmul("ijk-scalar")),
     Spelling("ijk, scalar s = 0.0 (Python float)", _matmul("ijk-scalar", "0.0")),
     Spelling("ijk, tensor accumulator c[i, j] +=", _matmul("ijk")),
     Spelling("ikj, c[i, j] +=", _matmul("ikj")),
     Spelling("kij, c[i, j] +=", _matmul("kij"))], rtol=1e-4, atol=1e-5)


# linear + epilogue -------------------------------------------------------------------------------

def _linear(acc="scalar", fused=True, init="float32(0.0)"):
    head = ["n = x.shape[0]", "kk = x.shape[1]", "o = w.shape[0]", "y = output_tensor((n, o), x.dtype)"]
    epi = "max(y[i, j] + b[j], 0.0)"
    if acc == "scalar":
        body = ["for i in range(n):", "    for j in range(o):", f"        s = {init}", "        for k in range(kk):",
                "            s += x[i, k] * w[j, k]",
                "        y[i, j] = max(s + b[j], 0.0)" if fused else "        y[i, j] = s"]
    else:
        body = ["for i in range(n):", "    for j in range(o):", "        for k in range(kk):",
                "            y[i, j] += x[i, k] * w[j, k]"] + ([f"        y[i, j] = {epi}"] if fused else [])
    if not fused:
        body += ["for i in range(n):", "    for j in range(o):", f"        y[i, j] = {epi}"]
    return _kernel("x, w, b", head, body, "y")


def _linear_wt(fused=True):
    """linear with W stored (in, out), ``wt = W.T``: a scalar accumulator over a strided column of
    wt, the epilogue fused; or ikj into the output, the epilogue in its own nest."""
    head = ["n = x.shape[0]", "kk = x.shape[1]", "o = wt.shape[1]", "y = output_tensor((n, o), x.dtype)"]
    if fused:
        body = ["for i in range(n):", "    for j in range(o):", "        s = float32(0.0)", "        for k in range(kk):",
                "            s += x[i, k] * wt[k, j]", "        y[i, j] = max(s + b[j], 0.0)"]
    else:
        body = ["for i in range(n):", "    for k in range(kk):", "        for j in range(o):",
                "            y[i, j] += x[i, k] * wt[k, j]",
                "for i in range(n):", "    for j in range(o):", "        y[i, j] = max(y[i, j] + b[j], 0.0)"]
    return _kernel("x, wt, b", head, body, "y")


def _with_wt(d):
    d["wt"] = np.ascontiguousarray(d["w"].T)
    return d


def _linear_ref(d):
    y = d["x"].astype(np.float64) @ d["w"].astype(np.float64).T + d["b"].astype(np.float64)
    return [np.maximum(y, 0.0)]


LINEAR = Kernel(
    "linear+relu", {"bench": {"n": 512, "k": 1024, "o": 1024}, "tiny": {"n": 5, "k": 11, "o": 13}},
    lambda s, rng: _with_wt({"x": _f32(rng.uniform(-1, 1, (s["n"], s["k"]))),
                             "w": _f32(rng.uniform(-1, 1, (s["o"], s["k"]))), "b": _f32(rng.uniform(-1, 1, s["o"]))}),
    ("x", "w", "b"), _linear_ref,
    [Spelling("scalar s = float32(0.0), epilogue fused", _linear()),
     Spelling("scalar s = float32(0.0), epilogue in its own nest", _linear(fused=False)),
     Spelling("scalar s = 0.0 (Python float), epilogue fused", _linear(init="0.0")),
     Spelling("tensor accumulator y[i, j] +=, epilogue fused", _linear("tensor")),
     Spelling("tensor accumulator y[i, j] +=, epilogue in its own nest", _linear("tensor", fused=False)),
     Spelling("W stored (in, out): scalar s, epilogue fused", _linear_wt(), params=("x", "wt", "b")),
     Spelling("W stored (in, out): ikj y[i, j] +=, epilogue in its own nest", _linear_wt(False),
              params=("x", "wt", "b"))],
    rtol=1e-4, atol=1e-5)


# Adam step ---------------------------------------------------------------------------------------

def _adam(casts=False):
    c = (lambda name: f"float32({name})") if casts else (lambda name: name)
    lr, b1, b2, eps, c1, c2 = (c(n) for n in ("lr", "beta1", "beta2", "eps", "c1", "c2"))
    body = ["for i in range(p.shape[0]):",
            f"    m[i] = {b1} * m[i] + (1.0 - {b1}) * g[i]",
            f"    v[i] = {b2} * v[i] + (1.0 - {b2}) * g[i] * g[i]",
            f"    p[i] = p[i] - {lr} * (m[i] * {c1}) / (sqrt(v[i] * {c2}) + {eps})"]
    return _kernel("p, g, m, v, lr, beta1, beta2, eps, c1, c2", [], body, "p, m, v")


ADAM_HYPER = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "c1": 1.0 / (1.0 - 0.9 ** 10),
              "c2": 1.0 / (1.0 - 0.999 ** 10)}


def _adam_data(s, rng):
    n = s["n"]
    return {"p": _f32(rng.uniform(-1, 1, n)), "g": _f32(rng.uniform(-1, 1, n)), "m": _f32(rng.uniform(-0.1, 0.1, n)),
            "v": _f32(rng.uniform(0, 0.01, n)), **ADAM_HYPER}


def _adam_ref(d):
    h = {k: float(d[k]) for k in ADAM_HYPER}
    p, g, m, v = (d[k].astype(np.float64) for k in ("p", "g", "m", "v"))
    m = h["beta1"] * m + (1 - h["beta1"]) * g
    v = h["beta2"] * v + (1 - h["beta2"]) * g * g
    return [p - h["lr"] * (m * h["c1"]) / (np.sqrt(v * h["c2"]) + h["eps"]), m, v]


ADAM = Kernel(
    "adam", {"bench": {"n": 4 * 1024 * 1024}, "tiny": {"n": 37}}, _adam_data,
    ("p", "g", "m", "v", "lr", "beta1", "beta2", "eps", "c1", "c2"), _adam_ref,
    [Spelling("hyper-parameters Python floats", _adam()),
     Spelling("hyper-parameters np.float32 arguments", _adam(), float32_scalars=True),
     Spelling("Python floats, float32() in the kernel", _adam(casts=True))],
    rtol=1e-5, atol=1e-6, inplace=("p", "m", "v"))


# cross-entropy -----------------------------------------------------------------------------------

def _xent(first_max="first", sum_init="float32(0.0)", tensor_sum=False):
    if first_max == "first":
        mx = ["m = x[i, 0]", "for j in range(1, c):", "    m = max(m, x[i, j])"]
    elif first_max in ("-1e30", "-math.inf"):
        mx = [f"m = {first_max}", "for j in range(c):", "    m = max(m, x[i, j])"]
    else:
        mx = ["m = x[i, 0]", "for j in range(1, c):", "    if x[i, j] > m:", "        m = x[i, j]"]
    acc = "s[i]" if tensor_sum else "s"
    body = mx + [f"{acc} = {sum_init}", "for j in range(c):", f"    {acc} += exp(x[i, j] - m)",
                 f"loss[i] = log({acc}) + m - x[i, labels[i]]"]
    head = ["n = x.shape[0]", "c = x.shape[1]", "loss = output_tensor((n,), x.dtype)"]
    if tensor_sum:
        head.append("s = allocate((n,), x.dtype)")
    return _kernel("x, labels", head, ["for i in range(n):"] + ["    " + ln for ln in body], "loss")


def _xent_ref(d):
    x = d["x"].astype(np.float64)
    m = x.max(axis=1)
    lse = np.log(np.exp(x - m[:, None]).sum(axis=1)) + m
    return [lse - x[np.arange(x.shape[0]), d["labels"]]]


XENT = Kernel(
    "cross-entropy", {"bench": {"n": 2048, "c": 8192}, "tiny": {"n": 3, "c": 29}},
    lambda s, rng: {"x": _f32(rng.normal(0, 2, (s["n"], s["c"]))),
                    "labels": rng.integers(0, s["c"], s["n"]).astype(np.int64)},
    ("x", "labels"), _xent_ref,
    [Spelling("m = x[i, 0], max(); s = float32(0.0)", _xent()),
     Spelling("m = -1e30, max()", _xent("-1e30")),
     Spelling("m = -math.inf, max()", _xent("-math.inf")),
     Spelling("if x[i, j] > m: m = x[i, j]", _xent("if")),
     Spelling("s = 0.0 (Python float)", _xent("first", "0.0")),
     Spelling("tensor accumulator s[i]", _xent("first", tensor_sum=True))], rtol=1e-4, atol=1e-5)

KERNELS = {k.name: k for k in (SOFTMAX, RMSNORM, MATMUL, LINEAR, ADAM, XENT)}


def make_data(kernel: Kernel, size: str = "bench", seed: int = 0) -> dict:
    return kernel.data(kernel.sizes[size], np.random.default_rng(seed))


def hyb_args(kernel: Kernel, spelling: Spelling, data: dict) -> list:
    """The kernel's arguments: arrays as they are (fresh copies), floats as Python floats or np.float32."""
    out = []
    for p in spelling.params or kernel.params:
        v = data[p]
        if isinstance(v, np.ndarray):
            out.append(v.copy())
        else:
            out.append(np.float32(v) if spelling.float32_scalars else float(v))
    return out


def compile_spelling(kernel: Kernel, spelling: Spelling, args: list, fastmath: bool = False):
    """The spelling's kernel, compiled for ``args`` on one thread."""
    import hyb

    k = hyb.compile_source(spelling.source, f"<spellings {kernel.name}: {spelling.name}>", threads=1,
                           fastmath=fastmath).k
    k.compile(*args)
    return k


def outputs(ret) -> list:
    return [np.asarray(r) for r in (ret if isinstance(ret, tuple) else (ret,))]


def check(kernel: Kernel, got: list, ref: list) -> tuple:
    from .report import agrees

    return agrees(got, ref, kernel.rtol, kernel.atol)


# ------------------------------------------------------------------ timing

class Timed:
    """One version: a call on its own arguments, reset before each run outside the timing."""

    def __init__(self, call, args: list, pristine: list, inplace: list):
        self.call, self.args, self.pristine, self.inplace = call, args, pristine, inplace
        self.samples = []
        self.spent = 0.0

    def reset(self):
        for k in self.inplace:
            np.copyto(self.args[k], self.pristine[k])

    def run(self):
        self.reset()
        t0 = time.perf_counter()
        ret = self.call(*self.args)
        return ret, time.perf_counter() - t0


def time_versions(versions: dict, repeat: int, budget: float):
    """Up to ``repeat`` runs of each version in turn (``versions``: name -> Timed), a version's runs
    stopped once the next would pass ``budget`` seconds in all; sets each one's ``samples``."""
    for r in range(repeat):
        names = list(versions)
        for name in names[r % len(names):] + names[:r % len(names)]:
            t = versions[name]
            est = min(t.samples) if t.samples else 0.0
            if t.samples and t.spent + est > budget:
                continue
            _, dt = t.run()
            t.samples.append(dt)
            t.spent += dt


# ------------------------------------------------------------------ hyb's side

def run_hyb(kernel: Kernel, opts, log) -> list:
    """Each spelling of ``kernel``: {"spelling", "status", "time", "runs", "compile_s", "error", "check"}."""
    data = make_data(kernel, opts.size)
    ref = kernel.reference(data)
    rows, timed = [], {}
    for sp in kernel.spellings:
        row = {"kernel": kernel.name, "spelling": sp.name, "status": "ok", "time": None, "runs": 0,
               "compile_s": None, "check": None, "error": None}
        rows.append(row)
        try:
            args = hyb_args(kernel, sp, data)
            t0 = time.perf_counter()
            k = compile_spelling(kernel, sp, args, opts.fastmath)
            row["compile_s"] = time.perf_counter() - t0
            inplace = [n for n, p in enumerate(sp.params or kernel.params) if p in kernel.inplace]
            t = Timed(k, args, hyb_args(kernel, sp, data), inplace)
            ret, first = t.run()
            ok, row["check"] = check(kernel, outputs(ret), ref)
        except Exception as e:  # noqa: BLE001 - a spelling that does not compile or run is a result
            row.update(status="ERROR", error=f"{type(e).__name__}: {str(e).strip().splitlines()[0]}")
            log(f"  {kernel.name}: {sp.name}: {row['error']}")
            continue
        if not ok:
            row.update(status="MISMATCH", error=f"differs from NumPy (error {row['check']:.3g})")
            log(f"  !!! {kernel.name}: {sp.name}: {row['error']}")
            continue
        if first >= opts.budget:  # one run already past the budget: that run is its time
            t.samples, t.spent = [first], first
        timed[sp.name] = t
    time_versions(timed, opts.repeat, opts.budget)
    for row in rows:
        t = timed.get(row["spelling"])
        if t is not None and t.samples:
            row["time"], row["runs"] = min(t.samples), len(t.samples)
    best = min((r["time"] for r in rows if r["time"]), default=None)
    for row in rows:
        row["vs_fastest"] = row["time"] / best if row["time"] and best else None
        log(f"  {kernel.name}: {row['spelling']}: " + (f"{row['time'] * 1e3:.3f} ms ({row['runs']} runs, compile "
                                                       f"{row['compile_s']:.2f} s)" if row["time"] else row["status"]))
    return rows


# ------------------------------------------------------------------ the peers

def torch_functions() -> dict:
    import torch
    import torch.nn.functional as F

    def rmsnorm(x, gamma, eps):
        if hasattr(F, "rms_norm"):
            return F.rms_norm(x, (x.shape[-1],), gamma, eps)
        return x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + eps) * gamma

    def adam(p, g, m, v, lr, beta1, beta2, eps, c1, c2):
        m = beta1 * m + (1.0 - beta1) * g
        v = beta2 * v + (1.0 - beta2) * g * g
        return p - lr * (m * c1) / (torch.sqrt(v * c2) + eps), m, v

    return {"softmax": lambda x: torch.softmax(x, dim=1), "rmsnorm": rmsnorm, "matmul": lambda a, b: a @ b,
            "linear+relu": lambda x, w, b: F.relu(F.linear(x, w, b)), "adam": adam,
            "cross-entropy": lambda x, labels: F.cross_entropy(x, labels, reduction="none")}


def jax_functions() -> dict:
    import jax
    import jax.numpy as jnp

    def adam(p, g, m, v, lr, beta1, beta2, eps, c1, c2):
        m = beta1 * m + (1.0 - beta1) * g
        v = beta2 * v + (1.0 - beta2) * g * g
        return p - lr * (m * c1) / (jnp.sqrt(v * c2) + eps), m, v

    def xent(x, labels):
        return jax.nn.logsumexp(x, axis=1) - jnp.take_along_axis(x, labels[:, None], axis=1)[:, 0]

    return {"softmax": lambda x: jax.nn.softmax(x, axis=1),
            "rmsnorm": lambda x, gamma, eps: x * jax.lax.rsqrt((x * x).mean(axis=-1, keepdims=True) + eps) * gamma,
            "matmul": lambda a, b: a @ b, "linear+relu": lambda x, w, b: jax.nn.relu(x @ w.T + b), "adam": adam,
            "cross-entropy": xent}


def numpy_functions() -> dict:
    def softmax(x):
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    def rmsnorm(x, gamma, eps):
        return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + np.float32(eps)) * gamma

    def adam(p, g, m, v, lr, beta1, beta2, eps, c1, c2):
        m = beta1 * m + (1.0 - beta1) * g
        v = beta2 * v + (1.0 - beta2) * g * g
        return p - lr * (m * c1) / (np.sqrt(v * c2) + eps), m, v

    def xent(x, labels):
        m = x.max(axis=1)
        return np.log(np.exp(x - m[:, None]).sum(axis=1)) + m - x[np.arange(x.shape[0]), labels]

    return {"softmax": softmax, "rmsnorm": rmsnorm, "matmul": lambda a, b: a @ b,
            "linear+relu": lambda x, w, b: np.maximum(x @ w.T + b, 0.0), "adam": adam, "cross-entropy": xent}


def run_peers(names: list, opts, log) -> dict:
    """{kernel: {peer: result}} for the kernels ``names``, each framework in a child process."""
    from .grad_peers import child_env as framework_env
    from .grad_peers import installed
    from .harness import child_env as blas_env

    results = {n: {} for n in names}
    peers = [p for p in PEERS if p in opts.peers]
    workdir = Path(tempfile.mkdtemp(prefix="hyb-spellings-"))
    try:
        for peer in peers:
            fw = FRAMEWORK[peer]
            if fw != "numpy" and not installed(fw):
                for n in names:
                    results[n][peer] = {"status": "n/a", "error": f"{fw} is not installed"}
                continue
            spec = {"peer": peer, "kernels": names, "size": opts.size, "repeat": opts.repeat, "budget": opts.budget}
            spec_path, out = workdir / f"{peer}-spec.json", workdir / f"{peer}.json"
            spec_path.write_text(json.dumps(spec))
            if fw == "numpy":
                env = blas_env(argparse.Namespace(blas_threads="1"))
                env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
                env["OMP_NUM_THREADS"] = "1"
            else:
                env = framework_env(fw, 1, workdir)
            t0 = time.perf_counter()
            cmd = [sys.executable, "-m", "benchmarks.spellings", "--child", str(spec_path), "--child-out", str(out)]
            try:
                proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
                failed = proc.returncode != 0 or not out.exists()
                why = (proc.stderr or proc.stdout or "").strip().splitlines()[-1:] if failed else []
            except subprocess.TimeoutExpired:
                failed, why = True, [f"ran past {CHILD_TIMEOUT_S} s"]
            if failed:
                for n in names:
                    results[n][peer] = {"status": "ERROR", "error": f"the {peer} process failed: {' '.join(why)}"}
                log(f"  !!! {LABELS[peer]}: the child process failed: {' '.join(why)}")
                continue
            doc = json.loads(out.read_text())
            for n in names:
                results[n][peer] = doc["kernels"][n]
            results.setdefault("_meta", {})[peer] = doc["meta"]
            log(f"  {LABELS[peer]}: " + ", ".join(
                f"{n} " + (f"{r['time'] * 1e3:.3g} ms" if r.get("time") else r["status"])
                for n, r in doc["kernels"].items()) + f" ({time.perf_counter() - t0:.0f} s)")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return results


def child(spec_path: str, out_path: str) -> int:
    """One peer's process: each kernel of the spec, checked against the reference, then timed."""
    spec = json.loads(Path(spec_path).read_text())
    peer = spec["peer"]
    meta = {}
    if peer == "jax":
        from .grad_peers import confine
        meta["threads"] = confine(1) + f"; XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}"
    results = {}
    if peer == "torch-compile":
        import torch

        torch.set_num_threads(1)
        meta["version"] = torch.__version__
        meta["threads"] = "torch.set_num_threads(1)"
        fns = torch_functions()
    elif peer == "jax":
        import jax

        from .grad_peers import versions
        meta["version"] = f"{jax.__version__} (jaxlib {versions()['jaxlib']})"
        fns = jax_functions()
    else:
        from .harness import blas_kernel
        meta["version"] = np.__version__
        meta["blas"] = blas_kernel()
        meta["threads"] = f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}"
        fns = numpy_functions()
    for name in spec["kernels"]:
        kernel = KERNELS[name]
        data = make_data(kernel, spec["size"])
        ref = kernel.reference(data)
        r = results[name] = {"status": "ok", "time": None, "runs": 0, "compile_s": None, "check": None, "error": None}
        arrays = [data[p] for p in kernel.params]
        try:
            if peer == "torch-compile":
                import torch

                f = torch.compile(fns[name])
                args = [torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in arrays]

                def call(*_, f=f, args=args):
                    return f(*args)
                to_np = lambda ret: [o.detach().numpy() for o in (ret if isinstance(ret, tuple) else (ret,))]  # noqa: E731
            elif peer == "jax":
                import jax

                floats = {p: float(data[p]) for p in kernel.params if not isinstance(data[p], np.ndarray)}
                arr_names = [p for p in kernel.params if isinstance(data[p], np.ndarray)]
                g = jax.jit(lambda *xs, fn=fns[name], fl=floats, an=arr_names:
                            fn(**dict(zip(an, xs)), **fl))
                jargs = [jax.numpy.asarray(data[p]) for p in arr_names]

                def call(*_, g=g, jargs=jargs):
                    return jax.block_until_ready(g(*jargs))
                to_np = lambda ret: [np.asarray(o) for o in (ret if isinstance(ret, tuple) else (ret,))]  # noqa: E731
            else:
                def call(*_, f=fns[name], arrays=arrays):
                    return f(*arrays)
                to_np = outputs
            t0 = time.perf_counter()
            got = call()
            r["compile_s"] = time.perf_counter() - t0
            ok, r["check"] = check(kernel, to_np(got), ref)
        except Exception as e:  # noqa: BLE001 - a peer that fails is a result to report
            r.update(status="ERROR", error=f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}")
            continue
        if not ok:
            r.update(status="MISMATCH", error=f"differs from the reference (error {r['check']:.3g})")
            continue
        t = Timed(call, [], [], [])
        time_versions({name: t}, spec["repeat"], spec["budget"])
        r["time"], r["runs"] = min(t.samples), len(t.samples)
    Path(out_path).write_text(json.dumps({"kernels": results, "meta": meta}))
    return 0


# ------------------------------------------------------------------ the table

def fmt_ms(t):
    return f"{t * 1e3:.3g}" if t else "—"


def markdown(meta: dict, rows: list, peers: dict) -> str:
    out = ["## Spellings", "",
           f"Measured {meta['date']} on {meta['cpu']} ({meta['cores']} cores), hyb at {meta['commit']}"
           f"{' (hyb/ changed since)' if meta.get('dirty') else ''}, one thread, "
           f"{'fast-math' if meta['fastmath'] else 'default mode (no fast-math, sums reassociated)'}; a time is the "
           f"least of up to {meta['repeat']} runs within {meta['budget']:g} s per version. × fastest: this "
           "spelling's time over the kernel's fastest spelling's; vs faster peer: the faster of torch.compile "
           "and JAX over hyb (> 1: hyb is faster).", "",
           "| kernel | spelling | hyb ms | × fastest spelling | torch.compile ms | JAX ms | NumPy ms | vs faster peer |",
           "|---|---|--:|--:|--:|--:|--:|--:|"]
    last = None
    for r in rows:
        pr = peers.get(r["kernel"], {})
        pt = {p: (pr.get(p) or {}).get("time") for p in PEERS}
        faster = min((pt[p] for p in ("torch-compile", "jax") if pt[p]), default=None)
        hyb_ms = fmt_ms(r["time"]) if r["time"] else f"**{r['status']}**"
        kernel = f"{r['kernel']} ({KERNELS[r['kernel']].dims_text(meta['size'])})" if r["kernel"] != last else ""
        last = r["kernel"]
        out.append(f"| {kernel} | {r['spelling']} | {hyb_ms} | "
                   + (f"{r['vs_fastest']:.2f}×" if r.get("vs_fastest") else "—") + " | "
                   + " | ".join(fmt_ms(pt[p]) if pt[p] else (pr.get(p) or {}).get("status", "—") for p in PEERS)
                   + " | " + (f"{faster / r['time']:.2f}×" if faster and r["time"] else "—") + " |")
    out.append("")
    for name, why in SKIPPED.items():
        if name in {r["kernel"] for r in rows}:
            out.append(f"- {name}: not timed: {why}.")
    for r in rows:
        if r["status"] != "ok":
            out.append(f"- {r['kernel']}, {r['spelling']}: {r['status']}: {r['error']}")
    pm = peers.get("_meta", {})
    if pm:
        out.append("- peers: " + "; ".join(f"{LABELS[p]} {m.get('version')}" + (f" ({m['threads']})" if m.get("threads")
                                                                                   else "") for p, m in pm.items()))
        if pm.get("numpy", {}).get("blas"):
            out.append(f"- NumPy's BLAS: {pm['numpy']['blas']}")
    out.append("")
    return "\n".join(out)


def metadata(opts) -> dict:
    from .harness import _run, cpu_model

    commit = _run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO) or "unknown"
    dirty = bool(_run(["git", "status", "--porcelain", "--", "hyb"], cwd=REPO))
    return {"date": datetime.date.today().isoformat(), "cpu": cpu_model(), "cores": os.cpu_count(), "commit": commit,
            "dirty": dirty, "size": opts.size, "repeat": opts.repeat, "budget": opts.budget, "fastmath": opts.fastmath,
            "peers": opts.peers}


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="python -m benchmarks spellings", description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", default=",".join(KERNELS), help=f"comma-separated, of {', '.join(KERNELS)}")
    ap.add_argument("--repeat", type=int, default=7, help="timed runs of each version at most (default 7)")
    ap.add_argument("--budget", type=float, default=2.0,
                    help="seconds of timed runs of one version, after which its runs stop (default 2)")
    ap.add_argument("--peers", default=",".join(PEERS), help=f"of {', '.join(PEERS)}, or none")
    ap.add_argument("--fastmath", action="store_true", help="compile hyb with fast-math")
    ap.add_argument("--size", choices=("bench", "tiny"), default="bench", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(OUT), help=f"output directory (default {OUT})")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child-out", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    a.kernels = [k.strip() for k in a.kernels.split(",") if k.strip()]
    bad = [k for k in a.kernels if k not in KERNELS]
    if bad:
        ap.error(f"unknown kernel {bad[0]!r}; kernels: {', '.join(KERNELS)}")
    a.peers = [] if a.peers.strip() == "none" else [p.strip() for p in a.peers.split(",") if p.strip()]
    bad = [p for p in a.peers if p not in PEERS]
    if bad:
        ap.error(f"unknown peer {bad[0]!r}; peers: {', '.join(PEERS)} or none")
    return a


def main(argv=None) -> int:
    opts = parse_args(argv)
    if opts.child:
        return child(opts.child, opts.child_out)

    def log(msg=""):
        print(msg, file=sys.stderr, flush=True)

    meta = metadata(opts)
    log(f"spellings: {', '.join(opts.kernels)}; {meta['cpu']}; hyb {meta['commit']}")
    t_all = time.perf_counter()
    rows = []
    for name in opts.kernels:
        t0 = time.perf_counter()
        log(f"[{name}] {len(KERNELS[name].spellings)} spellings")
        rows += run_hyb(KERNELS[name], opts, log)
        log(f"[{name}] done in {time.perf_counter() - t0:.0f} s")
    peers = run_peers(opts.kernels, opts, log) if opts.peers else {}
    text = markdown(meta, rows, peers)
    print(text)
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "spellings.md").write_text(text)
    (out / "spellings.json").write_text(json.dumps({"meta": meta, "rows": rows, "peers": peers}, indent=1, default=str))
    log(f"wrote {out}/spellings.md, spellings.json ({time.perf_counter() - t_all:.0f} s)")
    bad = [r for r in rows if r["status"] != "ok"]
    bad += [f"{k} {p}" for k, pr in peers.items() if k != "_meta" for p, r in pr.items()
            if r.get("status") not in ("ok", "n/a")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
