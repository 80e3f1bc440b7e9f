"""Cross-checks and the written results: markdown table, CSV, JSON and a PNG bar chart."""
from __future__ import annotations

import csv
import json
import math

import numpy as np

from .grad_peers import INSTALL as GRAD_INSTALL
from .grad_peers import LABELS as GRAD_LABELS
from .grad_peers import PEERS as GRAD_PEERS
from .peers import LABELS, ML_PEERS, MODE_VARIANTS, VARIANTS

# speedup of hyb = t_peer / t_hyb; torch.compile and JAX run for the ML kernels only
RATIO_PEERS = ("numba", "numba-par", "c", "numpy", "torch-compile", "jax")


# ------------------------------------------------------------------ checking

def max_rel_error(got, ref) -> float:
    """Largest |got - ref|, relative to the largest |ref| (inf if shapes or NaN patterns differ)."""
    got = np.asarray(got)
    ref = np.asarray(ref)
    if got.shape != ref.shape:
        return math.inf
    g = got.astype(np.float64)
    r = ref.astype(np.float64)
    if not np.array_equal(np.isnan(g), np.isnan(r)):
        return math.inf
    mask = ~np.isnan(r)
    if not mask.any():
        return 0.0
    scale = float(np.max(np.abs(r[mask]))) or 1.0
    if np.isinf(scale):
        return 0.0 if np.array_equal(g, r) else math.inf
    return float(np.max(np.abs(g[mask] - r[mask]))) / scale


def agrees(got: list, ref: list, rtol: float, atol: float) -> tuple:
    """(ok, largest relative error) of one version's outputs against the reference's."""
    worst = 0.0
    ok = len(got) == len(ref)
    for g, r in zip(got, ref):
        g = np.asarray(g)
        r = np.asarray(r)
        err = max_rel_error(g, r)
        worst = max(worst, err)
        if g.shape != r.shape:
            ok = False
            continue
        scale = float(np.max(np.abs(r))) if r.size else 0.0
        if not np.allclose(g, r, rtol=rtol, atol=atol * (scale if np.isfinite(scale) else 1.0), equal_nan=True):
            ok = False
    return ok, worst


# ------------------------------------------------------------------ numbers

def speedup(row: dict, peer: str, mine: str = "hyb"):
    """t_peer / t_mine: how many times faster hyb (or `mine`) is."""
    t = row["time"]
    if t.get(mine) and t.get(peer):
        return t[peer] / t[mine]
    return None


def geomean(values) -> float | None:
    vals = [v for v in values if v and v > 0 and math.isfinite(v)]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def summary(rows: list, group: str) -> dict:
    """Geometric means of hyb's speedups over the rows of a group whose checks passed."""
    ok = [r for r in rows if r["group"] == group and r["status"] == "ok"]
    out = {"kernels": len(ok)}
    for p in RATIO_PEERS:
        vals = [speedup(r, p) for r in ok]
        vals = [v for v in vals if v]
        out[p] = geomean(vals)
        out[p + "_n"] = len(vals)
    # shape-generic code against the code compiled for the shape: t_hyb / t_generic (1: as fast)
    generic = [speedup(r, "hyb", "hyb-generic") for r in ok]
    out["generic"] = geomean(generic)
    out["generic_n"] = len([v for v in generic if v])
    comp = [r["compile_s"] for r in ok if r.get("compile_s")]
    out["compile_max_s"] = max(comp) if comp else None
    out["compile_median_s"] = float(np.median(comp)) if comp else None
    out["compile_over_0.5s"] = [r["name"] for r in ok if r.get("compile_s") and r["compile_s"] > 0.5]
    # the same kernel compiled for a second shape: the shape-generic code and its binding
    second = [r["second_compile_s"] for r in ok if r.get("second_compile_s")]
    out["second_compile_max_s"] = max(second) if second else None
    out["second_compile_median_s"] = float(np.median(second)) if second else None
    out["second_compile_n"] = len(second)
    return out


def fmt_s(t) -> str:
    return "—" if t is None else f"{t:.3f}"


def second_cell(row: dict) -> str:
    """The second-shape compile time; † where the kernel got no shape-generic code (it compiled that shape)."""
    return fmt_s(row.get("second_compile_s")) + (" †" if row.get("second_generic") is False else "")


def fmt_ms(t) -> str:
    if t is None:
        return "—"
    ms = t * 1e3
    if ms >= 100:
        return f"{ms:.0f}"
    if ms >= 10:
        return f"{ms:.1f}"
    if ms >= 1:
        return f"{ms:.2f}"
    return f"{ms:.3f}"


def fmt_x(v) -> str:
    return "—" if v is None else f"{v:.2f}×"


def cell(row: dict, variant: str) -> str:
    if variant in row["time"] and row["time"][variant] is not None:
        s = fmt_ms(row["time"][variant])
        return f"**{s}** ✗" if variant in row["mismatch"] else s
    if variant in row["errors"]:
        return "error"
    if variant in row["mismatch"]:  # a peer found to differ before it was timed
        return "**MISMATCH**"
    if variant in ML_PEERS and row.get("group") != "ml":
        return "—"
    return "—" if row["status"] == "CRASH" else "n/a"


# ------------------------------------------------------------------ writing

def markdown(meta: dict, rows: list, gemm: dict | None) -> str:
    out = [f"# hyb benchmark results ({meta['size']})", ""]
    out.append(f"- date: {meta['date']}")
    out.append(f"- machine: {meta['cpu']}, {meta['cores']} cores; load average {meta.get('load_start', '?')} "
               f"at the start, {meta.get('load_end', '?')} at the end (the machine is shared)")
    out.append(f"- hyb: commit {meta['commit']}{' (hyb/ has uncommitted changes)' if meta.get('dirty') else ''}")
    out.append(f"- versions: Python {meta['python']}, NumPy {meta['numpy']}, Numba {meta['numba']}, "
               f"llvmlite {meta['llvmlite']}, {meta['cc_version']}"
               + "".join(f", {k} {v}" for k, v in (meta.get("frameworks") or {}).items()))
    out.append(f"- hyb options: fastmath={meta['fastmath']}, schedule={meta['schedule']!r}, "
               f"HYB_NUM_THREADS={meta['hyb_threads']}")
    out.append(f"- Numba: @njit(fastmath={meta['fastmath']}); parallel=True with prange on {meta['threads']} threads")
    out.append(f"- C: `{meta['cc']} {meta['cflags']}`, PolyBench's loops with `restrict`, called through ctypes")
    if meta.get("ml_peers"):
        threads = meta.get("ml_peer_threads", meta["hyb_threads"])
        out.append(f"- PyTorch and JAX (ML kernels only): {', '.join(LABELS[p] for p in meta['ml_peers'])}, each "
                   f"framework in a child process on {threads} thread{'s' if threads != 1 else ''} "
                   "(benchmarks/ml_peers.py)")
    out.append(f"- NumPy: vectorised where natural; BLAS threads: {meta.get('blas_threads', 'as configured')}; "
               f"BLAS: {meta.get('blas', 'not recorded')}")
    out.append(f"- times: median of per-call samples after warm-up ({meta['repeat']} rounds, versions "
               "interleaved; the arrays a call writes reset before each call outside the timed region); cold compile: "
               f"median of {meta['compile_repeat']} fresh `hyb.compile_source` + first `.compile(*args)`; "
               "second shape: then `.compile(*args)` of the same kernel on the arrays of another size (the next "
               "smaller, else larger), which compiles the shape-generic code and binds it to that shape "
               "(† no shape-generic code: that shape compiled on its own)")
    out.append("- speedup = peer time / hyb time (> 1: hyb is faster); every version's results were checked "
               "against the reference (NumPy, else C) before timing; ✗ marks a version whose results differ")
    out.append("")
    shown = [v for v in VARIANTS if v in meta["variants"] and v not in MODE_VARIANTS]  # modes: rows_markdown
    peers = [p for p in RATIO_PEERS if p in shown]
    par = "hyb-par" in shown and "numba-par" in shown
    out.append("| kernel | dims | check | hyb compile s | hyb 2nd shape compile s | "
               + " | ".join(f"{LABELS[v]} ms" for v in shown) + " | "
               + " | ".join(f"vs {LABELS[p]}" for p in peers) + (" | hyb par vs Numba par |" if par else " |"))
    out.append("|---|---|---|--:|--:|" + "--:|" * (len(shown) + len(peers) + par))
    for group in ("polybench", "ml", "dense"):
        for r in (r for r in rows if r["group"] == group):
            check = r["status"] if r["status"] == "ok" else f"**{r['status']}**"
            out.append(f"| {r['name']} | {r['dims']} | {check} | {fmt_s(r.get('compile_s'))} | {second_cell(r)} | "
                       + " | ".join(cell(r, v) for v in shown) + " | "
                       + " | ".join(fmt_x(speedup(r, p)) for p in peers)
                       + (f" | {fmt_x(speedup(r, 'numba-par', 'hyb-par'))} |" if par else " |"))
    out.append("")
    for group, title in (("polybench", "PolyBench kernels"), ("ml", "ML kernels"), ("dense", "dense algebra")):
        s = summary(rows, group)
        if not s["kernels"]:
            continue
        out.append(f"**Geometric mean of hyb's speedup, {title}** ({s['kernels']} kernels whose checks passed): "
                   + ", ".join(f"vs {LABELS[p]} {fmt_x(s[p])} (n={s[p + '_n']})" for p in RATIO_PEERS if s[p + "_n"])
                   + f"; cold compile median {fmt_s(s['compile_median_s'])} s, max {fmt_s(s['compile_max_s'])} s"
                   + (f"; second-shape compile median {s['second_compile_median_s']:.3f} s, max "
                      f"{s['second_compile_max_s']:.3f} s (n={s['second_compile_n']})" if s["second_compile_n"] else "")
                   + "."
                   + (f" Shape-generic code runs at {fmt_x(s['generic'])} the speed of the code compiled for the "
                      f"shape (geometric mean, n={s['generic_n']})." if s["generic_n"] else ""))
        out.append("")
    bad = [r for r in rows if r["status"] != "ok"]
    if bad:
        out.append("**Rows not counted:** " + "; ".join(f"{r['name']}: {r['status']} ({'; '.join(r['problems'])})"
                                                       for r in bad))
        out.append("")
    na = {}
    for r in rows:
        for v, why in r["na"].items():
            na.setdefault((v, why), []).append(r["name"])
    if na:
        out.append("Not available (n/a): " + "; ".join(
            f"{LABELS[v]} for {', '.join(names) if len(names) < len(rows) else 'every kernel'}: {why}"
            for (v, why), names in na.items()) + ".")
        out.append("")
    notes = [f"{r['name']}: {n}" for r in rows for n in r["notes"]]
    if notes:
        out.append("Notes:")
        out.extend(f"- {n}" for n in notes)
        out.append("")
    out.extend(rows_markdown(meta, rows))
    from . import load as loadbench
    from . import ml_peers

    out.extend(ml_peers.markdown(meta, rows))
    out.extend(loadbench.markdown(meta, rows))
    if any(r.get("grad") for r in rows):
        out.extend(grad_markdown(rows, meta))
    if gemm:
        out.extend(gemm_markdown(gemm))
    out.extend(targets_markdown(rows, gemm, meta))
    return "\n".join(out) + "\n"


# Elementwise and row kernels, one thread with fast-math on both sides: (row name, least speedup over
# Numba running the same loops, least speedup over NumPy).
ROW_TARGETS = (("gelu", 1.5, 1.0), ("silu-chain", 1.5, 2.0), ("softmax", 1.5, 1.0), ("log-softmax", 1.5, 1.0),
               ("layernorm", 1.5, 1.0), ("rmsnorm", 1.5, 1.0))


def row_conditions(meta: dict | None) -> str | None:
    """None when the run is the one the row targets are stated for (one hyb thread, fast-math on
    hyb and Numba), else what differs."""
    if meta is None:
        return None
    why = []
    if not meta.get("fastmath", True):
        why.append("run without fast-math")
    if meta.get("hyb_threads", 1) != 1:
        why.append(f"hyb on {meta['hyb_threads']} threads")
    return ", ".join(why) or None


def row_verdict(row: dict, meta: dict | None) -> tuple:
    """(text, met: True/False/None) of one elementwise or row kernel against its targets."""
    goal = {name: (nb, npy) for name, nb, npy in ROW_TARGETS}.get(row["name"])
    if goal is None:
        return "no target", None
    off = row_conditions(meta)
    if off:
        return f"not judged ({off})", None
    if row["status"] != "ok":
        return f"not judged ({row['status']})", None
    vs_numba, vs_numpy = speedup(row, "numba"), speedup(row, "numpy")
    if vs_numba is None or vs_numpy is None:
        return "not measured", None
    missed = [f"{LABELS[p]} {fmt_x(v)} < {least:g}×" for p, v, least in
              (("numba", vs_numba, goal[0]), ("numpy", vs_numpy, goal[1])) if v < least]
    return ("**missed**: " + ", ".join(missed), False) if missed else ("met", True)


def rows_markdown(meta: dict, rows: list) -> list:
    """The table of the elementwise and row kernels: hyb in its three modes beside Numba and NumPy,
    one thread, and whether each kernel meets its targets."""
    mine = [r for r in rows if r.get("modes")]
    if not mine:
        return []
    fm = "fast-math" if meta.get("fastmath", True) else "IEEE"
    threads = meta.get("hyb_threads", 1)
    goals = "; ".join(f"{n} ≥ {a:g}× Numba and ≥ {b:g}× NumPy" for n, a, b in ROW_TARGETS)
    out = ["## Elementwise and row kernels", "",
           f"hyb on {threads} thread{'s' if threads != 1 else ''} in three modes: with the run's options "
           f"({fm}), in IEEE mode with every sum in the program's order (`fastmath=False, "
           "schedule={\"reassociate\": False}`), and in the default mode (`fastmath=False`: IEEE arithmetic, "
           "sums reassociated so that reductions vectorise). Numba runs the same "
           f"loops, `@njit(fastmath={meta.get('fastmath', True)})`, one thread; NumPy one thread. Speedups are of "
           f"the hyb ({fm}) column. Targets, one thread, fast-math on both sides: {goals}.", "",
           f"| kernel | dims | check | hyb {fm} ms | hyb in order ms | hyb default ms | Numba ms | NumPy ms "
           "| C (gcc -O3) ms | vs Numba | vs NumPy | in order vs Numba | default vs Numba | targets |",
           "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|"]
    for r in mine:
        check = r["status"] if r["status"] == "ok" else f"**{r['status']}**"
        verdict, _ = row_verdict(r, meta)
        out.append(f"| {r['name']} | {r['dims']} | {check} | "
                   + " | ".join(cell(r, v) for v in ("hyb", "hyb-ieee", "hyb-reassoc", "numba", "numpy", "c"))
                   + f" | {fmt_x(speedup(r, 'numba'))} | {fmt_x(speedup(r, 'numpy'))} "
                   f"| {fmt_x(speedup(r, 'numba', 'hyb-ieee'))} | {fmt_x(speedup(r, 'numba', 'hyb-reassoc'))} "
                   f"| {verdict} |")
    out.append("")
    judged = [row_verdict(r, meta)[1] for r in mine]
    judged = [m for m in judged if m is not None]
    if judged:
        out.append(f"Row targets met: {sum(judged)} of {len(judged)} kernels.")
        out.append("")
    return out


GRAD_TARGET = 2.5  # a gradient kernel should take at most 2.5x the forward kernel's time
# hyb's gradient against its peers (peer time / hyb time): every kernel at least GRAD_VS_EAGER times
# torch eager and GRAD_VS_BEST times the faster of torch.compile and JAX; geometric means over the
# kernels at least these times each compiled peer
GRAD_VS_EAGER = 1.0
GRAD_VS_BEST = 0.8
GRAD_GEOMEAN_TARGETS = (("torch-compile", 1.2), ("jax", 1.0))
GRAD_COMPILED = ("torch-compile", "jax")


def grad_ok(row: dict) -> bool:
    g = row.get("grad") or {}
    return g.get("status") == "ok" and bool(g.get("time"))


def grad_peer_time(row: dict, peer: str):
    r = ((row.get("grad") or {}).get("peers") or {}).get(peer) or {}
    return r.get("time") if r.get("status") == "ok" else None


def grad_speedup(row: dict, peer: str):
    """Peer time / hyb gradient time (> 1: hyb's gradient is faster)."""
    t, pt = (row.get("grad") or {}).get("time"), grad_peer_time(row, peer)
    return pt / t if t and pt and grad_ok(row) else None


def grad_best_compiled(row: dict):
    """hyb's gradient against the faster of torch.compile and JAX, or None if neither ran."""
    vals = [v for v in (grad_speedup(row, p) for p in GRAD_COMPILED) if v]
    return min(vals) if vals else None


def grad_summary(rows: list) -> dict:
    """Geometric means over the gradient kernels whose hyb gradient and peer both passed their checks."""
    graded = [r for r in rows if r.get("grad")]
    out = {"kernels": len(graded), "ok": sum(grad_ok(r) for r in graded)}
    for p in GRAD_PEERS:
        vals = [v for v in (grad_speedup(r, p) for r in graded) if v]
        out[p], out[p + "_n"] = geomean(vals), len(vals)
    vals = [v for v in (grad_best_compiled(r) for r in graded) if v]
    out["best-compiled"], out["best-compiled_n"] = geomean(vals), len(vals)
    ratios = [r["grad"]["ratio"] for r in graded if grad_ok(r) and r["grad"].get("ratio")]
    out["ratio"], out["ratio_n"], out["ratio_max"] = geomean(ratios), len(ratios), (max(ratios) if ratios else None)
    return out


def fmt_vs(v: float, bound: float) -> str:
    """A ratio beside the bound it is judged by: more decimals where two would print the bound itself."""
    for digits in range(2, 7):
        text = f"{v:.{digits}f}"
        if float(text) != bound or v == bound:
            break
    return text + "×"


def grad_verdict(row: dict) -> tuple:
    """(text, met: True/False/None) of one gradient kernel against its targets."""
    g = row.get("grad") or {}
    if not grad_ok(row):
        return f"not judged (gradient {g.get('status', '?')})", None
    missed, judged = [], 0
    if g.get("ratio"):
        judged += 1
        if g["ratio"] > GRAD_TARGET:
            missed.append(f"gradient/forward {fmt_vs(g['ratio'], GRAD_TARGET)} > {GRAD_TARGET:g}×")
    eager = grad_speedup(row, "torch")
    if eager:
        judged += 1
        if eager < GRAD_VS_EAGER:
            missed.append(f"eager {fmt_vs(eager, GRAD_VS_EAGER)} < {GRAD_VS_EAGER:g}×")
    best = grad_best_compiled(row)
    if best:
        judged += 1
        if best < GRAD_VS_BEST:
            missed.append(f"best compiled {fmt_vs(best, GRAD_VS_BEST)} < {GRAD_VS_BEST:g}×")
    if not judged:
        return "not measured", None
    return ("**missed**: " + ", ".join(missed), False) if missed else ("met", True)


def _peer_cell(row: dict, peer: str) -> str:
    r = ((row.get("grad") or {}).get("peers") or {}).get(peer)
    if not r:
        return "—"
    if r.get("status") == "ok" and r.get("time"):
        return fmt_ms(r["time"])
    return {"n/a": "n/a", "MISMATCH": "**MISMATCH**"}.get(r.get("status"), "error")


def _s(v) -> str:
    return "—" if v is None else f"{v:.2f}"


def grad_markdown(rows: list, meta: dict | None = None) -> list:
    """The `--grad` tables: hyb's gradient kernels beside their forward kernels and beside PyTorch and JAX."""
    meta = meta or {}
    graded = [r for r in rows if r.get("grad")]
    threads = meta.get("grad_peer_threads") or meta.get("hyb_threads", 1)
    fw = meta.get("frameworks") or {}
    out = ["## Gradient kernels", "",
           "hyb's gradient kernel (`kernel.grad()`, called with the forward inputs and one dout per output) timed "
           "in the same interleaved rounds as the forward kernel; before timing, its gradients were checked against "
           "NumPy reference gradients on the mini size and on this size (largest error relative to the largest "
           "|gradient|). Its peers compute the same forward and backward pass in the kernel's dtype: PyTorch eager "
           "autograd (`torch.autograd.grad(f(*x), x, douts)`), the same with `f` under `torch.compile` (Inductor), "
           "and `jax.jit` of `jax.vjp(f, *x)` applied to the douts; each peer's gradients were checked against the "
           "same reference before it was timed (MISMATCH: not timed). Peers run in child processes of their own, "
           f"on {threads} thread{'s' if threads != 1 else ''} as hyb's gradient; vs = peer time / hyb gradient "
           "time (> 1: hyb is faster). Targets: gradient ≤ "
           f"{GRAD_TARGET:g}× its forward, ≥ {GRAD_VS_EAGER:g}× torch eager and ≥ {GRAD_VS_BEST:g}× the faster of "
           "torch.compile and JAX on every kernel; geometric means ≥ "
           + " and ≥ ".join(f"{least:g}× {GRAD_LABELS[p]}" for p, least in GRAD_GEOMEAN_TARGETS) + ".", "",
           "| kernel | dims | check | hyb forward ms | hyb gradient ms | gradient / forward | torch eager ms "
           "| torch.compile ms | JAX ms | vs torch eager | vs torch.compile | vs JAX | targets |",
           "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|"]
    for r in graded:
        g = r["grad"]
        check = "ok" if g["status"] == "ok" else f"**{g['status']}**"
        verdict, _ = grad_verdict(r)
        out.append(f"| {r['name']} | {r['dims']} | {check} | {fmt_ms(g.get('forward'))} | "
                   f"{fmt_ms(g.get('time') if grad_ok(r) else None)} | {fmt_x(g.get('ratio'))} | "
                   + " | ".join(_peer_cell(r, p) for p in GRAD_PEERS) + " | "
                   + " | ".join(fmt_x(grad_speedup(r, p)) for p in GRAD_PEERS) + f" | {verdict} |")
    out.append("")
    s = grad_summary(rows)
    if s["ratio_n"] or any(s[p + "_n"] for p in GRAD_PEERS):
        out.append("**Geometric means** (kernels whose gradients passed their checks): "
                   f"gradient / forward {fmt_x(s['ratio'])}, worst {fmt_x(s['ratio_max'])} (n={s['ratio_n']}); "
                   + "; ".join(f"vs {GRAD_LABELS[p]} {fmt_x(s[p])} (n={s[p + '_n']})" for p in GRAD_PEERS)
                   + f"; vs the faster of torch.compile and JAX {fmt_x(s['best-compiled'])} "
                   f"(n={s['best-compiled_n']}).")
        out.append("")
    judged = [m for m in (grad_verdict(r)[1] for r in graded) if m is not None]
    if judged:
        out.append(f"Gradient targets met: {sum(judged)} of {len(judged)} kernels.")
        out.append("")
    out += ["| kernel | hyb error mini / this size | tape bytes | hyb gradient compile s | torch.compile compile s "
            "| JAX compile s | peer errors: eager, compile, JAX | CPU time / wall: eager, compile, JAX |",
            "|---|--:|--:|--:|--:|--:|---|---|"]
    for r in graded:
        g = r["grad"]
        peers = g.get("peers") or {}
        errs = " / ".join("—" if e is None else f"{e:.1e}" for e in (g.get("check_mini"), g.get("check")))
        tape = "—" if g.get("tape_bytes") is None else f"{g['tape_bytes']:,}"
        comp = "—" if g.get("grad_compile_s") is None else f"{g['grad_compile_s']:.3f}"
        pc = [_s((peers.get(p) or {}).get("compile_s")) for p in GRAD_COMPILED]
        perr = ", ".join("—" if (peers.get(p) or {}).get("check") is None else f"{peers[p]['check']:.1e}"
                         for p in GRAD_PEERS)
        cpu = ", ".join(_s((peers.get(p) or {}).get("cpu_per_wall")) for p in GRAD_PEERS)
        out.append(f"| {r['name']} | {errs} | {tape} | {comp} | {pc[0]} | {pc[1]} | {perr} | {cpu} |")
    out.append("")
    settings = {}
    for r in graded:
        for p, pr in ((r["grad"].get("peers") or {}).items()):
            if pr.get("thread_setting"):
                settings.setdefault(p, pr["thread_setting"])
    lines = []
    if fw:
        lines.append("versions: " + ", ".join(f"{k} {v}" for k, v in fw.items()))
    lines += [f"{GRAD_LABELS[p]}: {how}" for p, how in settings.items()]
    missing = {}
    for r in graded:
        for p, pr in ((r["grad"].get("peers") or {}).items()):
            if pr.get("status") == "n/a":
                missing.setdefault(p, pr.get("error"))
    lines += [f"{GRAD_LABELS[p]} not run: {why}" for p, why in missing.items()]
    for p in GRAD_PEERS:  # a framework the run did not find at all
        name = "jax" if p == "jax" else "torch"
        if p in (meta.get("grad_peers") or []) and fw.get(name) == "not installed" and p not in missing:
            lines.append(f"{GRAD_LABELS[p]} not run: {name} is not installed ({GRAD_INSTALL[name]})")
    if meta.get("grad_peers") == []:
        lines.append("no PyTorch or JAX peers were asked for (--grad-peers none)")
    notes = {}
    for r in graded:
        for p, pr in ((r["grad"].get("peers") or {}).items()):
            if pr.get("note"):
                notes.setdefault(f"{r['name']}, {GRAD_LABELS[p]}: {pr['note']}", None)
    lines += list(notes)
    if lines:
        out.append("Peers:")
        out += [f"- {line}" for line in lines]
        out.append("")
    problems = [f"{r['name']}: {r['grad']['error']}" for r in graded if r["grad"].get("error")]
    problems += [f"{r['name']}, {GRAD_LABELS[p]}: {pr['status']}: {pr['error']}" for r in graded
                 for p, pr in ((r["grad"].get("peers") or {}).items()) if pr.get("status") not in ("ok", "n/a")]
    if problems:
        out.append("**Gradient problems:** " + "; ".join(problems))
        out.append("")
    return out


def grad_targets(rows: list) -> list:
    """The gradient targets, as targets() lists them: (what, measured text, met)."""
    graded = [r for r in rows if r.get("grad")]
    if not graded:
        return []
    res = []
    failed = [r["name"] for r in graded if not grad_ok(r)]

    def every(what, values, least, above=True):
        vals = [(v, n) for n, v in values if v is not None]
        if not vals:
            res.append((what, "not measured" + (f" (failed: {', '.join(failed)})" if failed else ""),
                        False if failed else None))
            return
        bad = sorted((v, n) for v, n in vals if (v < least if above else v > least))
        worst = (min if above else max)(vals)
        text = f"{'lowest' if above else 'highest'} {worst[1]} {fmt_vs(worst[0], least)}"
        if bad:
            text += "; missed by " + ", ".join(f"{n} {fmt_vs(v, least)}" for v, n in bad)
        if failed:
            text += f"; gradient failed: {', '.join(failed)}"
        res.append((what, text, not bad and not failed))

    every(f"gradient ≤ {GRAD_TARGET:g}× its forward, every gradient kernel",
          [(r["name"], r["grad"].get("ratio") if grad_ok(r) else None) for r in graded], GRAD_TARGET, above=False)
    every(f"gradient ≥ {GRAD_VS_EAGER:g}× torch eager autograd, every gradient kernel",
          [(r["name"], grad_speedup(r, "torch")) for r in graded], GRAD_VS_EAGER)
    every(f"gradient ≥ {GRAD_VS_BEST:g}× the faster of torch.compile and JAX, every gradient kernel",
          [(r["name"], grad_best_compiled(r)) for r in graded], GRAD_VS_BEST)
    s = grad_summary(rows)
    for p, least in GRAD_GEOMEAN_TARGETS:
        v = s[p]
        res.append((f"gradient geomean ≥ {least:g}× {GRAD_LABELS[p]}",
                    f"{fmt_vs(v, least)} (n={s[p + '_n']})" if v else "not measured", (v >= least) if v else None))
    return res


def gemm_markdown(g: dict) -> list:
    out = ["## float32 gemm 1024×1024×1024", "",
           "PolyBench's gemm loops (i, k, j; C = alpha·A·B + beta·C) on float32 arrays.", "",
           "| version | threads | median ms | GFLOP/s | speedup vs Numba (1 thread) | check |",
           "|---|--:|--:|--:|--:|---|"]
    base = g["rows"].get("numba", {}).get("time")
    for key, r in g["rows"].items():
        t = r.get("time")
        if t is None:
            out.append(f"| {r['label']} | {r['threads']} | {r.get('reason', 'n/a')} | | | |")
            continue
        gf = g["flops"] / t / 1e9
        sp = fmt_x(base / t) if base else "—"
        out.append(f"| {r['label']} | {r['threads']} | {fmt_ms(t)} | {gf:.2f} | {sp} | {r.get('check', '')} |")
    out.append("")
    return out


# Dense kernels that should run near BLAS, one thread: (row name, least speedup over NumPy's BLAS).
BLAS_TARGETS = (("dgemm-1024", 0.80), ("sgemm-1000x1100x900", 0.80), ("2mm", 0.80), ("3mm", 0.80),
                ("batched-matmul", 0.80), ("conv2d", 0.80))


def targets(rows: list, gemm: dict | None, meta: dict | None = None) -> list:
    """The speed targets of the suite, as (what, measured text, met: True/False/None); `meta` tells
    whether the run is one the row targets are stated for."""
    res = []

    def ratio(what, value, least):
        res.append((what, fmt_x(value) if value else "not measured", (value >= least) if value else None))

    if gemm:
        r = gemm["rows"]
        h1, b1, hn = (r.get("hyb", {}).get("time"), r.get("numpy", {}).get("time"), r.get("hyb-par", {}).get("time"))
        ratio("float32 gemm 1024³, one thread: hyb ≥ 0.85× OpenBLAS", b1 / h1 if h1 and b1 else None, 0.85)
        res.append(("float32 gemm 1024³, all cores: hyb ≥ 1.8× hyb on one thread",
                    fmt_x(h1 / hn) if h1 and hn else r.get("hyb-par", {}).get("reason", "not measured"),
                    (h1 / hn >= 1.8) if h1 and hn else None))
    by_name = {r["name"]: r for r in rows if r["status"] == "ok"}
    for name, least in BLAS_TARGETS:
        if name in by_name:
            ratio(f"{name}, one thread: hyb ≥ {least:.2f}× NumPy/BLAS", speedup(by_name[name], "numpy"), least)
    s = summary(rows, "polybench")
    if s["kernels"]:
        ratio("PolyBench geomean, one thread: hyb ≥ 3× Numba", s["numba"], 3.0)
        ratio("PolyBench geomean, one thread: hyb ≥ 2.5× gcc -O3", s["c"], 2.5)
        ratio("PolyBench geomean, one thread: hyb ≥ 2× NumPy", s["numpy"], 2.0)
        slow = sorted((speedup(r, "numba"), r["name"]) for r in rows
                      if r["group"] == "polybench" and r["status"] == "ok" and speedup(r, "numba"))
        below = [f"{n} {v:.2f}×" for v, n in slow if v < 0.9]
        res.append(("no PolyBench kernel below 0.9× Numba", ", ".join(below) if below else
                    (f"slowest {slow[0][1]} {slow[0][0]:.2f}×" if slow else "not measured"),
                    (not below) if slow else None))
    off = row_conditions(meta)
    for name, least_numba, least_numpy in ROW_TARGETS:
        if name not in by_name:
            continue
        for peer, least in (("numba", least_numba), ("numpy", least_numpy)):
            what = f"{name}, one thread, fast-math: hyb ≥ {least:g}× {LABELS[peer]}"
            if off:
                res.append((what, f"not judged ({off})", None))
            else:
                ratio(what, speedup(by_name[name], peer), least)
    comp = [r["compile_s"] for r in rows if r["status"] == "ok" and r.get("compile_s")]
    if comp:
        over = [r["name"] for r in rows if r["status"] == "ok" and r.get("compile_s") and r["compile_s"] > 0.8]
        med = float(np.median(comp))
        res.append(("cold compile per benchmark kernel: median ≤ 0.3 s, max ≤ 0.8 s",
                    f"median {med:.3f} s, max {max(comp):.3f} s" + (f"; over 0.8 s: {', '.join(over)}" if over else ""),
                    med <= 0.3 and max(comp) <= 0.8))
    res += grad_targets(rows)
    from . import load as loadbench
    from . import ml_peers

    res += ml_peers.targets(rows, meta or {})
    res += loadbench.targets(rows)
    return res


def targets_markdown(rows: list, gemm: dict | None, meta: dict | None = None) -> list:
    t = targets(rows, gemm, meta)
    if not t:
        return []
    out = ["## Speed targets", "", "| target | measured | |", "|---|---|---|"]
    for what, measured, met in t:
        out.append(f"| {what} | {measured} | {'met' if met else ('**missed**' if met is False else '—')} |")
    out.append("")
    return out


def write_csv(path, rows: list):
    cols = (["kernel", "group", "size", "dims", "status", "hyb_compile_s", "hyb_second_shape_compile_s"]
            + [f"{v}_s" for v in VARIANTS]
            + [f"speedup_vs_{p}" for p in RATIO_PEERS] + [f"max_rel_err_{v}" for v in VARIANTS]
            + ["hyb_grad_s", "grad_over_forward"] + [f"grad_{p}_s" for p in GRAD_PEERS]
            + [f"grad_speedup_vs_{p}" for p in GRAD_PEERS]
            + ["hyb_idle_median_s", "hyb_loaded_median_s", "hyb_loaded_p95_s", "loaded_p95_over_idle_median"]
            + ["problems"])
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow([c.replace("-", "_") for c in cols])
        for r in rows:
            w.writerow([r["name"], r["group"], r["size"], r["dims"], r["status"], _num(r.get("compile_s")),
                        _num(r.get("second_compile_s"))]
                       + [_num(r["time"].get(v)) for v in VARIANTS]
                       + [_num(speedup(r, p)) for p in RATIO_PEERS]
                       + [_num(r["check"].get(v)) for v in VARIANTS]
                       + [_num((r.get("grad") or {}).get("time")), _num((r.get("grad") or {}).get("ratio"))]
                       + [_num(grad_peer_time(r, p)) for p in GRAD_PEERS]
                       + [_num(grad_speedup(r, p)) for p in GRAD_PEERS]
                       + [_num((r.get("load") or {}).get(k)) for k in ("idle_median", "loaded_median", "loaded_p95",
                                                                       "ratio")]
                       + ["; ".join(r["problems"])])


def _num(v):
    return "" if v is None else f"{v:.6g}"


def write_json(path, meta: dict, rows: list, gemm: dict | None):
    doc = {"meta": meta, "kernels": rows, "gemm_f32_1024": gemm,
           "geomean": {g: summary(rows, g) for g in ("polybench", "ml")},
           **({"grad": grad_summary(rows)} if any(r.get("grad") for r in rows) else {}),
           "targets": [{"target": a, "measured": b, "met": c} for a, b, c in targets(rows, gemm, meta)]}
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, default=str)


def write_png(path, meta: dict, rows: list) -> str | None:
    """Bar chart of hyb's speedups (log scale); returns why not if matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no chart (pip install matplotlib, or .[bench])"
    shown = [r for r in rows if r["time"].get("hyb")]
    if not shown:
        return "no hyb times to plot"
    peers = ("numba", "c", "numpy")
    colors = {"numba": "#4c72b0", "c": "#55a868", "numpy": "#c44e52"}
    width = 0.26
    fig, ax = plt.subplots(figsize=(max(8.0, 0.42 * len(shown) + 2), 5.0))
    xs = np.arange(len(shown))
    for k, p in enumerate(peers):
        vals = [speedup(r, p) or np.nan for r in shown]
        ax.bar(xs + (k - 1) * width, vals, width, label=f"vs {LABELS[p]}", color=colors[p])
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(xs)
    ax.set_xticklabels([r["name"] + ("" if r["status"] == "ok" else " (!)") for r in shown], rotation=60,
                       ha="right", fontsize=8)
    ax.set_ylabel("hyb speedup (peer time / hyb time)")
    ax.set_title(f"hyb vs peers, {meta['size']} size, {meta['date']} ({meta['cpu']}, {meta['cores']} cores)",
                 fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None
