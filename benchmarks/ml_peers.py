"""Peers of the forward ML kernels (the `ml` group): each kernel as an ML user writes it in PyTorch
and in JAX, timed in the same benchmark run as hyb's kernel.

- ``torch``: eager PyTorch, ``outs = f(*inputs)``;
- ``torch-compile``: the same ``f`` under ``torch.compile`` (Inductor); its first call, which
  compiles, is timed apart as its compile time (into a fresh Inductor cache: a cold compile);
- ``jax``: ``jax.jit(f)``; its first call (trace and XLA compile) is likewise its compile time.

Each ``f`` is the library call where there is one (``torch.softmax``, ``F.log_softmax``,
``F.layer_norm``, ``F.rms_norm``, ``F.gelu(approximate="tanh")``, ``F.silu``, ``F.conv2d``,
``torch.bmm``, ``F.scaled_dot_product_attention``, ``F.max_pool2d(..., return_indices=True)``,
``torch.argmax``, ``torch.topk``; in JAX ``jax.nn.softmax``, ``jax.nn.standardize``, ``jax.nn.gelu``,
``jax.nn.silu``, ``jax.lax.conv_general_dilated``, ``jax.nn.dot_product_attention``,
``jnp.argmax``, ``jax.lax.top_k``) and the formula otherwise, in float32 with the kernel's constants. A peer returns
every output the benchmark checks (``Bench.outputs``), in that order:

- softmax, log-softmax, layernorm, rmsnorm, gelu, silu-chain, elementwise-chain, attention,
  conv2d, batched-matmul, bias-silu-t, bmm-small-t, add-rmsnorm: the one float output (the hybrid
  kernels' temporaries, such as attention's probabilities or the chains' t1..t3, are ``allocate``
  scratch and not outputs);
- max-pool: the pooled values and the flat argmax of each window (``h * W + w``, PyTorch's
  ``return_indices``; int64 in PyTorch, int32 in JAX, compared by value with hyb's int32);
- lstm-cell: the new cell and hidden states (the gates are ``z.chunk(4, dim=1)``: i, f, g, o);
- quantize-int8: the int8 codes (round half to even, clipped to ±127) and their dequantised floats;
- argmax-rows: the first index of each row's maximum (int64 in PyTorch, int32 in JAX);
- topk-rows: the 8 largest values of each row and their indices, largest first (``torch.topk``,
  ``jax.lax.top_k``; the rows have no ties);
- bias-silu-t: ``silu(x + b)`` stored transposed, (D, N): PyTorch makes it contiguous (a
  transposed view would skip the transposition hyb's kernel does), XLA lays its result out so.

Every peer's outputs are checked before it is timed, with the kernel's tolerance, against the
reference outputs every version of the run is checked against (NumPy's, else C's, ...); one that
disagrees is reported as MISMATCH and not timed. Each framework runs in a child process of its
own, on hyb's threads, with the thread settings, CPU confinement and CPU-per-wall measurement of
the gradient peers (benchmarks/grad_peers.py, whose helpers this module uses).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .grad_peers import (FRAMEWORK, INSTALL, LABELS, PEERS, agree, child_setup, installed, new_peer, run_child,
                         time_peers, versions)

MODULE = "benchmarks.ml_peers"
# the kernels of the `ml` group, each with a PyTorch and a JAX function below
KERNELS = ("softmax", "log-softmax", "layernorm", "rmsnorm", "gelu", "silu-chain", "elementwise-chain", "conv2d",
           "batched-matmul", "attention", "max-pool", "lstm-cell", "quantize-int8", "argmax-rows", "bias-silu-t",
           "bmm-small-t", "add-rmsnorm", "topk-rows")
ATTENTION_SCALE = 0.125  # the hybrid attention's scale, 1/sqrt(64)


# ------------------------------------------------------------------ the parent's side

def inputs_of(bench, pristine: dict) -> tuple:
    """(the kernel's array arguments in its order, its scalar arguments by name as floats)."""
    arrays = [pristine[p] for p in bench.hyb_params if isinstance(pristine[p], np.ndarray)]
    consts = {p: float(pristine[p]) for p in bench.hyb_params if not isinstance(pristine[p], np.ndarray)}
    return arrays, consts


def reference(bench, pristine: dict) -> list:
    """The NumPy version's outputs on fresh copies of the data."""
    bufs = {n: (v.copy() if isinstance(v, np.ndarray) else v) for n, v in pristine.items()}
    bench.numpy(*[bufs[p] for p in bench.params])
    return [bufs[o] for o in bench.outputs]


def run(bench, opts, dims: dict, pristine: dict, threads: int, peers=None, ref=None, log=None) -> dict:
    """Every peer of `peers` for one kernel at this size: {peer: result} (see grad_peers.new_peer).
    `ref`: the outputs the peers are checked against (default: the NumPy version's)."""
    peers = list(PEERS) if peers is None else [p for p in PEERS if p in peers]
    results = {}
    if not peers:
        return results
    if bench.name not in KERNELS:
        return {p: new_peer("n/a", error=f"no PyTorch or JAX version of {bench.name} (benchmarks/ml_peers.py)")
                for p in peers}
    arrays, consts = inputs_of(bench, pristine)
    ref = reference(bench, pristine) if ref is None else ref
    workdir = Path(tempfile.mkdtemp(prefix="hyb-ml-peers-"))
    try:
        data = {f"in_{k}": a for k, a in enumerate(arrays)}
        data.update({f"ref_{k}": np.asarray(r) for k, r in enumerate(ref)})
        np.savez(workdir / "data.npz", **data)
        for fw in ("torch", "jax"):
            mine = [p for p in peers if FRAMEWORK[p] == fw]
            if not mine:
                continue
            if not installed(fw):
                for p in mine:
                    results[p] = new_peer("n/a", error=f"{fw} is not installed ({INSTALL[fw]})")
                continue
            spec = {"kernel": bench.name, "peers": mine, "threads": threads, "consts": consts,
                    "n_inputs": len(arrays), "n_outputs": len(ref), "rtol": bench.rtol, "atol": bench.atol,
                    "repeat": opts.repeat, "min_time": opts.min_time, "budget": opts.budget}
            results.update(run_child(fw, spec, workdir, threads, log, module=MODULE))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return results


def record(row: dict, results: dict):
    """Put the peers' results into a benchmark row: times beside the other versions', a peer that
    disagrees with the reference among the mismatches, one that failed among the errors, one whose
    framework is missing among the versions not available; the details in row["ml_peers"]."""
    row["ml_peers"] = results
    for p, r in results.items():
        if r.get("check") is not None:
            row["check"][p] = r["check"]
        if r["status"] == "ok" and r.get("time"):
            row["time"][p] = r["time"]
            row["samples"][p] = r.get("samples", 0)
            if r.get("compile_s") is not None:
                row["first_call_s"][p] = r["compile_s"]
        elif r["status"] == "n/a":
            row["na"][p] = r["error"]
        elif r["status"] == "MISMATCH":
            row["mismatch"].append(p)
        else:
            row["errors"][p] = r.get("error") or r["status"]


# ------------------------------------------------------------------ the functions, as a user writes them

def torch_functions() -> dict:
    """kernel name -> f(consts, *arrays) -> tuple of the kernel's outputs, in PyTorch."""
    import torch
    import torch.nn.functional as F

    def rms_norm(x, gamma, eps):
        if hasattr(F, "rms_norm"):
            return F.rms_norm(x, (x.shape[-1],), gamma, eps)
        return x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + eps) * gamma

    def elementwise_chain(k, a, b, c):
        return (F.silu(F.relu(a * b + c)) + 0.5 * torch.sqrt(a.abs()) - torch.tanh(b),)

    def lstm_cell(k, z, c):
        i, f, g, o = z.chunk(4, dim=1)
        c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return c_new, torch.sigmoid(o) * torch.tanh(c_new)

    def quantize(k, x, scale):
        s = scale[:, None]
        q = torch.clamp(torch.round(x / s), -127, 127).to(torch.int8)
        return q, q.to(x.dtype) * s

    return {
        "softmax": lambda k, x: (torch.softmax(x, dim=1),),
        "log-softmax": lambda k, x: (F.log_softmax(x, dim=1),),
        "layernorm": lambda k, x, gamma, beta: (F.layer_norm(x, (x.shape[1],), gamma, beta, k["eps"]),),
        "rmsnorm": lambda k, x, gamma: (rms_norm(x, gamma, k["eps"]),),
        "gelu": lambda k, x: (F.gelu(x, approximate="tanh"),),
        "silu-chain": lambda k, a, b, c: (F.silu(a * b + c) + torch.exp(-a.abs()),),
        "elementwise-chain": elementwise_chain,
        "conv2d": lambda k, x, w: (F.conv2d(x, w),),
        "batched-matmul": lambda k, a, b: (torch.bmm(a, b),),
        "attention": lambda k, q, kk, v: (F.scaled_dot_product_attention(q, kk, v, scale=ATTENTION_SCALE),),
        "max-pool": lambda k, x: F.max_pool2d(x, 2, 2, return_indices=True),
        "lstm-cell": lstm_cell,
        "quantize-int8": quantize,
        "argmax-rows": lambda k, x: (torch.argmax(x, dim=1),),
        "bias-silu-t": lambda k, x, b: (F.silu(x + b).t().contiguous(),),
        "bmm-small-t": lambda k, a, b: (torch.bmm(a, b.transpose(1, 2)),),
        "add-rmsnorm": lambda k, x, r, gamma: (rms_norm(x + r, gamma, k["eps"]),),
        "topk-rows": lambda k, x: tuple(torch.topk(x, 8, dim=1)),
    }


def jax_functions() -> dict:
    """kernel name -> f(consts, *arrays) -> tuple of the kernel's outputs, in JAX."""
    import jax
    import jax.numpy as jnp

    def rms_norm(x, gamma, eps):
        return x * jax.lax.rsqrt((x * x).mean(axis=-1, keepdims=True) + eps) * gamma

    def conv2d(k, x, w):
        return (jax.lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW")),)

    def attention(k, q, kk, v):
        # (batch, length, heads, dim): each of the kernel's heads as a batch of one head
        out = jax.nn.dot_product_attention(q[:, :, None], kk[:, :, None], v[:, :, None], scale=ATTENTION_SCALE)
        return (out[:, :, 0],)

    def max_pool(k, x):
        nb, ch, h, w = x.shape
        ph, pw = h // 2, w // 2
        win = x[:, :, :2 * ph, :2 * pw].reshape(nb, ch, ph, 2, pw, 2).transpose(0, 1, 2, 4, 3, 5)
        win = win.reshape(nb, ch, ph, pw, 4)
        j = jnp.argmax(win, axis=-1)
        idx = (2 * jnp.arange(ph)[:, None] + j // 2) * w + 2 * jnp.arange(pw) + j % 2
        return win.max(axis=-1), idx.astype(jnp.int32)

    def elementwise_chain(k, a, b, c):
        return (jax.nn.silu(jax.nn.relu(a * b + c)) + 0.5 * jnp.sqrt(jnp.abs(a)) - jnp.tanh(b),)

    def lstm_cell(k, z, c):
        i, f, g, o = jnp.split(z, 4, axis=1)
        c_new = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        return c_new, jax.nn.sigmoid(o) * jnp.tanh(c_new)

    def quantize(k, x, scale):
        s = scale[:, None]
        q = jnp.clip(jnp.round(x / s), -127, 127).astype(jnp.int8)
        return q, q.astype(x.dtype) * s

    return {
        "softmax": lambda k, x: (jax.nn.softmax(x, axis=1),),
        "log-softmax": lambda k, x: (jax.nn.log_softmax(x, axis=1),),
        "layernorm": lambda k, x, gamma, beta: (jax.nn.standardize(x, axis=1, epsilon=k["eps"]) * gamma + beta,),
        "rmsnorm": lambda k, x, gamma: (rms_norm(x, gamma, k["eps"]),),
        "gelu": lambda k, x: (jax.nn.gelu(x, approximate=True),),
        "silu-chain": lambda k, a, b, c: (jax.nn.silu(a * b + c) + jnp.exp(-jnp.abs(a)),),
        "elementwise-chain": elementwise_chain,
        "conv2d": conv2d,
        "batched-matmul": lambda k, a, b: (jnp.matmul(a, b),),
        "attention": attention,
        "max-pool": max_pool,
        "lstm-cell": lstm_cell,
        "quantize-int8": quantize,
        "argmax-rows": lambda k, x: (jnp.argmax(x, axis=1),),
        "bias-silu-t": lambda k, x, b: (jax.nn.silu(x + b).T,),
        "bmm-small-t": lambda k, a, b: (jnp.matmul(a, b.transpose(0, 2, 1)),),
        "add-rmsnorm": lambda k, x, r, gamma: (rms_norm(x + r, gamma, k["eps"]),),
        "topk-rows": lambda k, x: tuple(jax.lax.top_k(x, 8)),
    }


# ------------------------------------------------------------------ the child process

def first_calls(call, to_numpy, refs: list, spec: dict, r: dict):
    """The first call (timed as the compile time), two more, then the check: the call if the
    outputs agree with the reference, else None with the peer marked MISMATCH or ERROR."""
    try:
        t0 = time.perf_counter()
        got = call()
        r["compile_s"] = time.perf_counter() - t0
        for _ in range(2):
            got = call()
        ok, r["check"] = agree(to_numpy(got), refs, spec["rtol"], spec["atol"])
    except Exception as e:  # noqa: BLE001 - a peer that fails is a result to report
        text = str(e).strip()
        r["status"] = "ERROR"
        r["error"] = f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"
        return None
    if not ok:
        r["status"] = "MISMATCH"
        r["error"] = f"outputs differ from the reference (error {r['check']:.3g})"
        return None
    return call


def child(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {MODULE}",
                                 description="One framework's forward peers for one ML kernel (started by the "
                                             "benchmark harness for the torch, torch-compile and jax variants).")
    a, spec, threads, setting = child_setup(ap, argv)
    with np.load(a.data) as z:
        arrays = [z[f"in_{k}"] for k in range(spec["n_inputs"])]
        refs = [z[f"ref_{k}"] for k in range(spec["n_outputs"])]
    consts, name = spec["consts"], spec["kernel"]
    results, runners = {}, {}
    if a.framework == "torch":
        import torch

        torch.set_num_threads(threads)
        setting = f"torch.set_num_threads({threads}), OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}"
        f = torch_functions()[name]
        xs = [torch.from_numpy(x) for x in arrays]

        def forward(*args):
            return f(consts, *args)

        def to_numpy(outs):
            return [o.detach().numpy() for o in outs]

        for peer in spec["peers"]:
            r = results[peer] = new_peer(threads=threads, thread_setting=setting, version=torch.__version__)
            g = torch.compile(forward) if peer == "torch-compile" else forward
            call = first_calls(lambda g=g: g(*xs), to_numpy, refs, spec, r)
            if call:
                runners[peer] = call
    else:
        import jax

        version = f"{jax.__version__} (jaxlib {versions()['jaxlib']})"
        setting = f"{setting}; {threads} thread{'s' if threads != 1 else ''}"
        f = jax_functions()[name]
        jarrays = tuple(jax.numpy.asarray(x) for x in arrays)
        r = results["jax"] = new_peer(threads=threads, thread_setting=setting, version=version)
        g = jax.jit(lambda *args: f(consts, *args))
        call = first_calls(lambda: jax.block_until_ready(g(*jarrays)), lambda outs: [np.asarray(o) for o in outs],
                           refs, spec, r)
        if call:
            runners["jax"] = call
    time_peers(runners, results, spec)
    Path(a.out).write_text(json.dumps(results))
    return 0


# ------------------------------------------------------------------ the report's section

TARGET_EVERY = 1.0           # default mode, one thread: every ML kernel at least this times torch.compile
GEOMEAN_TARGETS = (("torch-compile", 1.3), ("jax", 1.0))  # default mode, one thread: geometric means
FASTMATH_GEOMEAN = 1.5       # fast-math, one thread: geometric mean over torch.compile


def ratio(row: dict, peer: str):
    """Peer time / hyb time (> 1: hyb is faster), for a row whose checks passed."""
    t = row["time"]
    return t[peer] / t["hyb"] if row["status"] == "ok" and t.get("hyb") and t.get(peer) else None


def judged_rows(rows: list) -> list:
    return [r for r in rows if r["group"] == "ml" and "ml_peers" in r]


def conditions(meta: dict) -> tuple:
    """(the run's mode: "default" or "fast-math", why its targets are not judged or None)."""
    mode = "fast-math" if meta.get("fastmath", True) else "default"
    threads = meta.get("hyb_threads", 1)
    return mode, (f"hyb and its peers on {threads} threads" if threads != 1 else None)


def targets(rows: list, meta: dict) -> list:
    """The targets against the forward peers, as report.targets lists them: (what, measured, met)."""
    from .report import fmt_vs, geomean

    mine = judged_rows(rows)
    if not mine:
        return []
    mode, off = conditions(meta)
    res = []

    def judge(what, wanted_mode, measure):
        if wanted_mode != mode:
            res.append((what, f"not judged (a {mode} run)", None))
        elif off:
            res.append((what, f"not judged ({off})", None))
        else:
            res.append((what, *measure()))

    def every():
        vals = sorted((ratio(r, "torch-compile"), r["name"]) for r in mine if ratio(r, "torch-compile"))
        if not vals:
            return "not measured", None
        bad = [f"{n} {fmt_vs(v, TARGET_EVERY)}" for v, n in vals if v < TARGET_EVERY]
        failed = [r["name"] for r in mine if r["status"] != "ok"]
        text = f"lowest {vals[0][1]} {fmt_vs(vals[0][0], TARGET_EVERY)}" + (f"; missed by {', '.join(bad)}" if bad
                                                                             else "")
        text += f"; not counted: {', '.join(failed)}" if failed else ""
        return text, not bad and not failed

    def mean(peer, least):
        vals = [v for v in (ratio(r, peer) for r in mine) if v]
        g = geomean(vals)
        return (f"{fmt_vs(g, least)} (n={len(vals)})", g >= least) if g else ("not measured", None)

    judge(f"every ML kernel, one thread, default mode: hyb ≥ {TARGET_EVERY:g}× torch.compile", "default", every)
    for peer, least in GEOMEAN_TARGETS:
        judge(f"ML geomean, one thread, default mode: hyb ≥ {least:g}× {LABELS[peer]}", "default",
              lambda p=peer, x=least: mean(p, x))
    judge(f"ML geomean, one thread, fast-math: hyb ≥ {FASTMATH_GEOMEAN:g}× torch.compile", "fast-math",
          lambda: mean("torch-compile", FASTMATH_GEOMEAN))
    return res


def markdown(meta: dict, rows: list) -> list:
    """The forward peers' table: hyb beside PyTorch eager, torch.compile and JAX, with the peers'
    compile times, errors and CPU use, and how they were run."""
    from .report import _s, fmt_ms, fmt_x, geomean

    mine = judged_rows(rows)
    if not mine:
        return []
    mode, _ = conditions(meta)
    threads = meta.get("hyb_threads", 1)

    def cell(r, p):
        pr = r["ml_peers"].get(p)
        if not pr:
            return "—"
        if pr["status"] == "ok" and pr.get("time"):
            return fmt_ms(pr["time"])
        return {"n/a": "n/a", "MISMATCH": "**MISMATCH**"}.get(pr["status"], "error")

    out = ["## ML kernels against PyTorch and JAX", "",
           f"The forward kernels of the `ml` group beside PyTorch eager, `torch.compile` (Inductor) and `jax.jit` "
           f"(XLA), each written with the library call where there is one (benchmarks/ml_peers.py), hyb in "
           f"{mode} mode; the peers run in child processes of their own on {threads} thread"
           f"{'s' if threads != 1 else ''}, as hyb does, and their outputs were checked against the reference "
           "before timing (MISMATCH: not timed). vs = peer time / hyb time (> 1: hyb is faster); compile s: the "
           "first call (a cold Inductor cache; jax: trace and XLA compile).", "",
           "| kernel | dims | check | hyb ms | torch eager ms | torch.compile ms | JAX ms | vs torch eager "
           "| vs torch.compile | vs JAX | torch.compile compile s | JAX compile s | CPU time / wall: eager, "
           "compile, JAX |", "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|"]
    for r in mine:
        check = r["status"] if r["status"] == "ok" else f"**{r['status']}**"
        pr = r["ml_peers"]
        cpu = ", ".join(_s((pr.get(p) or {}).get("cpu_per_wall")) for p in PEERS)
        out.append(f"| {r['name']} | {r['dims']} | {check} | {fmt_ms(r['time'].get('hyb'))} | "
                   + " | ".join(cell(r, p) for p in PEERS) + " | "
                   + " | ".join(fmt_x(ratio(r, p)) for p in PEERS) + " | "
                   + " | ".join(_s((pr.get(p) or {}).get("compile_s")) for p in ("torch-compile", "jax"))
                   + f" | {cpu} |")
    out.append("")
    means = {p: [v for v in (ratio(r, p) for r in mine) if v] for p in PEERS}
    if any(means.values()):
        out.append(f"**Geometric mean of hyb's speedup over PyTorch and JAX** ({mode} mode, {threads} thread"
                   f"{'s' if threads != 1 else ''}, kernels whose checks passed): "
                   + ", ".join(f"vs {LABELS[p]} {fmt_x(geomean(v))} (n={len(v)})" for p, v in means.items() if v)
                   + f". Targets, one thread: default mode every kernel ≥ {TARGET_EVERY:g}× torch.compile, geomean "
                   + " and ".join(f"≥ {least:g}× {LABELS[p]}" for p, least in GEOMEAN_TARGETS)
                   + f"; fast-math geomean ≥ {FASTMATH_GEOMEAN:g}× torch.compile.")
        out.append("")
    lines = []
    fw = meta.get("frameworks") or {}
    if fw:
        lines.append("versions: " + ", ".join(f"{k} {v}" for k, v in fw.items()))
    seen = {}
    for r in mine:
        for p, pr in r["ml_peers"].items():
            if pr.get("thread_setting"):
                seen.setdefault(f"{LABELS[p]}: {pr['thread_setting']}", None)
            if pr["status"] == "n/a":
                seen.setdefault(f"{LABELS[p]} not run: {pr['error']}", None)
            elif pr["status"] != "ok":
                seen.setdefault(f"{r['name']}, {LABELS[p]}: {pr['status']}: {pr.get('error')}", None)
    lines += list(seen)
    if lines:
        out.append("Peers:")
        out += [f"- {line}" for line in lines]
        out.append("")
    return out


if __name__ == "__main__":
    sys.exit(child())
