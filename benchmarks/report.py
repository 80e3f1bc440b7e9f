"""Cross-checks and the written results: markdown table, CSV, JSON and a PNG bar chart."""
from __future__ import annotations

import csv
import json
import math

import numpy as np

from .peers import LABELS, MODE_VARIANTS, VARIANTS

RATIO_PEERS = ("numba", "numba-par", "c", "numpy")  # speedup of hyb = t_peer / t_hyb


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
    return out


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
    return "—" if row["status"] == "CRASH" else "n/a"


# ------------------------------------------------------------------ writing

def markdown(meta: dict, rows: list, gemm: dict | None) -> str:
    out = [f"# hyb benchmark results ({meta['size']})", ""]
    out.append(f"- date: {meta['date']}")
    out.append(f"- machine: {meta['cpu']}, {meta['cores']} cores; load average {meta.get('load_start', '?')} "
               f"at the start, {meta.get('load_end', '?')} at the end (the machine is shared)")
    out.append(f"- hyb: commit {meta['commit']}{' (hyb/ has uncommitted changes)' if meta.get('dirty') else ''}")
    out.append(f"- versions: Python {meta['python']}, NumPy {meta['numpy']}, Numba {meta['numba']}, "
               f"llvmlite {meta['llvmlite']}, {meta['cc_version']}")
    out.append(f"- hyb options: fastmath={meta['fastmath']}, schedule={meta['schedule']!r}, "
               f"HYB_NUM_THREADS={meta['hyb_threads']}")
    out.append(f"- Numba: @njit(fastmath={meta['fastmath']}); parallel=True with prange on {meta['threads']} threads")
    out.append(f"- C: `{meta['cc']} {meta['cflags']}`, PolyBench's loops with `restrict`, called through ctypes")
    out.append(f"- NumPy: vectorised where natural; BLAS threads: {meta.get('blas_threads', 'as configured')}; "
               f"BLAS: {meta.get('blas', 'not recorded')}")
    out.append(f"- times: median of per-call samples after warm-up ({meta['repeat']} rounds, versions "
               "interleaved, arrays reset before each call outside the timed region); cold compile: "
               f"median of {meta['compile_repeat']} fresh `hyb.compile_source` + first `.compile(*args)`")
    out.append("- speedup = peer time / hyb time (> 1: hyb is faster); every version's results were checked "
               "against the reference (NumPy, else C) before timing; ✗ marks a version whose results differ")
    out.append("")
    shown = [v for v in VARIANTS if v in meta["variants"] and v not in MODE_VARIANTS]  # modes: rows_markdown
    peers = [p for p in RATIO_PEERS if p in shown]
    par = "hyb-par" in shown and "numba-par" in shown
    out.append("| kernel | dims | check | hyb compile s | " + " | ".join(f"{LABELS[v]} ms" for v in shown) + " | "
               + " | ".join(f"vs {LABELS[p]}" for p in peers) + (" | hyb par vs Numba par |" if par else " |"))
    out.append("|---|---|---|--:|" + "--:|" * (len(shown) + len(peers) + par))
    for group in ("polybench", "ml", "dense"):
        for r in (r for r in rows if r["group"] == group):
            check = r["status"] if r["status"] == "ok" else f"**{r['status']}**"
            comp = "—" if r.get("compile_s") is None else f"{r['compile_s']:.3f}"
            out.append(f"| {r['name']} | {r['dims']} | {check} | {comp} | "
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
                   + f"; cold compile median {s['compile_median_s']:.3f} s, max {s['compile_max_s']:.3f} s."
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
    if any(r.get("grad") for r in rows):
        out.extend(grad_markdown(rows))
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
           f"({fm}), in IEEE mode (`fastmath=False`), and in IEEE mode with `schedule={{\"reassociate\": True}}` "
           "(sums may be reassociated so that reductions vectorise; fast-math implies it). Numba runs the same "
           f"loops, `@njit(fastmath={meta.get('fastmath', True)})`, one thread; NumPy one thread. Speedups are of "
           f"the hyb ({fm}) column. Targets, one thread, fast-math on both sides: {goals}.", "",
           f"| kernel | dims | check | hyb {fm} ms | hyb IEEE ms | hyb IEEE+reassociate ms | Numba ms | NumPy ms "
           "| C (gcc -O3) ms | vs Numba | vs NumPy | IEEE vs Numba | IEEE+reassociate vs Numba | targets |",
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


GRAD_TARGET = 3.0  # a gradient kernel should take at most 3x the forward kernel's time


def grad_markdown(rows: list) -> list:
    """The `--grad` table: hyb's gradient kernels beside their forward kernels."""
    out = ["## Gradient kernels", "",
           "hyb's gradient kernel (`kernel.grad()`, called with the forward inputs and one dout per output) timed "
           "in the same interleaved rounds as the forward kernel; before timing, its gradients were checked against "
           "NumPy reference gradients on the mini size and on this size (largest error relative to the largest "
           f"|gradient|). Target: gradient ≤ {GRAD_TARGET:g}× the forward time.", "",
           "| kernel | dims | check | error mini / this size | forward ms | gradient ms | gradient / forward "
           f"| ≤ {GRAD_TARGET:g}× | tape bytes | gradient compile s |",
           "|---|---|---|--:|--:|--:|--:|---|--:|--:|"]
    graded = [r for r in rows if r.get("grad")]
    for r in graded:
        g = r["grad"]
        check = "ok" if g["status"] == "ok" else f"**{g['status']}**"
        errs = " / ".join("—" if e is None else f"{e:.1e}" for e in (g.get("check_mini"), g.get("check")))
        ratio = g.get("ratio")
        met = "—" if ratio is None else ("met" if ratio <= GRAD_TARGET else "**missed**")
        tape = "—" if g.get("tape_bytes") is None else f"{g['tape_bytes']:,}"
        comp = "—" if g.get("grad_compile_s") is None else f"{g['grad_compile_s']:.3f}"
        out.append(f"| {r['name']} | {r['dims']} | {check} | {errs} | {fmt_ms(g.get('forward'))} | "
                   f"{fmt_ms(g.get('time'))} | {fmt_x(ratio)} | {met} | {tape} | {comp} |")
    out.append("")
    ratios = [r["grad"]["ratio"] for r in graded if r["grad"].get("ratio")]
    if ratios:
        out.append(f"Gradient / forward: geometric mean {fmt_x(geomean(ratios))}, worst {fmt_x(max(ratios))} "
                   f"({len(ratios)} kernels).")
        out.append("")
    problems = [f"{r['name']}: {r['grad']['error']}" for r in graded if r["grad"].get("error")]
    if problems:
        out.append("**Gradient problems:** " + "; ".join(problems))
        out.append("")
    return out


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
    cols = (["kernel", "group", "size", "dims", "status", "hyb_compile_s"] + [f"{v}_s" for v in VARIANTS]
            + [f"speedup_vs_{p}" for p in RATIO_PEERS] + [f"max_rel_err_{v}" for v in VARIANTS]
            + ["hyb_grad_s", "grad_over_forward", "problems"])
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow([c.replace("-", "_") for c in cols])
        for r in rows:
            w.writerow([r["name"], r["group"], r["size"], r["dims"], r["status"], _num(r.get("compile_s"))]
                       + [_num(r["time"].get(v)) for v in VARIANTS]
                       + [_num(speedup(r, p)) for p in RATIO_PEERS]
                       + [_num(r["check"].get(v)) for v in VARIANTS]
                       + [_num((r.get("grad") or {}).get("time")), _num((r.get("grad") or {}).get("ratio"))]
                       + ["; ".join(r["problems"])])


def _num(v):
    return "" if v is None else f"{v:.6g}"


def write_json(path, meta: dict, rows: list, gemm: dict | None):
    doc = {"meta": meta, "kernels": rows, "gemm_f32_1024": gemm,
           "geomean": {g: summary(rows, g) for g in ("polybench", "ml")},
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
