"""hyb beside a busy neighbour (`--load`): for each kernel, hyb's warm calls timed one by one on an
idle machine and then while neighbour processes keep every CPU busy, reporting the idle median,
the loaded median and the loaded 95th percentile.

A neighbour is a Python process spinning in a pure-Python loop, one per CPU this process may run
on. The neighbours are killed when the measurement ends, on an error too; each also stops by
itself once its parent has gone (a crashed benchmark process) or after NEIGHBOUR_LIFETIME_S.
"""
from __future__ import annotations

import gc
import os
import statistics
import subprocess
import sys
import time

TARGET = 3.0                 # loaded p95 at most this many times the idle median
NEIGHBOUR_LIFETIME_S = 600   # a neighbour that is never killed stops by itself after this long
SETTLE_S = 0.3               # the neighbours' start-up, before the loaded samples
LEAST_SAMPLES = 50
MOST_SAMPLES = 100_000

SPIN = """
import os, sys, time
parent, end = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
while os.getppid() == parent and time.monotonic() < end:
    for _ in range(20000):
        pass
"""


def cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class Neighbours:
    """`with Neighbours(n):` n spinning processes while the block runs; all killed when it ends."""

    def __init__(self, n: int | None = None):
        self.n = cpus() if n is None else n
        self.procs = []

    def __enter__(self):
        try:
            for _ in range(self.n):
                self.procs.append(subprocess.Popen(
                    [sys.executable, "-c", SPIN, str(os.getpid()), str(NEIGHBOUR_LIFETIME_S)],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            time.sleep(SETTLE_S)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def running(self) -> int:
        return sum(p.poll() is None for p in self.procs)

    def stop(self):
        for p in self.procs:
            try:
                p.kill()
            except OSError:
                pass
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except (OSError, subprocess.SubprocessError):
                pass


def sample(runner, pristine: dict, seconds: float) -> list:
    """Seconds of each warm call of `runner` (arrays reset outside the timed region) for about
    `seconds`, at least LEAST_SAMPLES calls and at most MOST_SAMPLES."""
    perf = time.perf_counter
    runner.reset(pristine)
    runner.call()  # warm
    out = []
    gc.collect()
    gc.disable()
    try:
        start = perf()
        while len(out) < MOST_SAMPLES and (len(out) < LEAST_SAMPLES or perf() - start < seconds):
            runner.reset(pristine)
            t0 = perf()
            runner.call()
            out.append(perf() - t0)
    finally:
        gc.enable()
    return out


def p95(samples: list) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(round(0.95 * (len(s) - 1))))]


def measure(runner, pristine: dict, seconds: float = 1.0, neighbours: int | None = None) -> dict:
    """hyb's calls idle, then beside busy neighbours: medians, 95th percentiles, their ratio."""
    idle = sample(runner, pristine, seconds)
    with Neighbours(neighbours) as nb:
        loaded = sample(runner, pristine, seconds)
        alive = nb.running()
    res = {"neighbours": nb.n, "neighbours_alive": alive, "idle_median": statistics.median(idle),
           "idle_p95": p95(idle), "idle_samples": len(idle), "loaded_median": statistics.median(loaded),
           "loaded_p95": p95(loaded), "loaded_samples": len(loaded), "error": None}
    res["ratio"] = res["loaded_p95"] / res["idle_median"]
    return res


# ------------------------------------------------------------------ the report's section

def measured(rows: list) -> list:
    return [r for r in rows if r.get("load")]


def markdown(meta: dict, rows: list) -> list:
    from .report import fmt_ms, fmt_x

    mine = measured(rows)
    if not mine:
        return []
    threads = meta.get("hyb_threads", 1)
    n = next((r["load"].get("neighbours") for r in mine if r["load"].get("neighbours")), "?")
    out = ["## hyb beside a busy neighbour", "",
           f"hyb's warm calls (on {threads} thread{'s' if threads != 1 else ''}) timed one by one for about "
           f"{meta.get('load_seconds', 1.0):g} s on the otherwise idle machine, then for as long while {n} "
           "neighbour processes (one per CPU, each spinning in a pure-Python loop) keep every CPU busy. "
           f"Target: the loaded 95th percentile at most {TARGET:g}× the idle median.", "",
           "| kernel | dims | hyb idle median ms | hyb loaded median ms | hyb loaded p95 ms | p95 / idle median "
           "| samples idle, loaded | target |", "|---|---|--:|--:|--:|--:|--:|---|"]
    for r in mine:
        d = r["load"]
        if d.get("error"):
            out.append(f"| {r['name']} | {r['dims']} | — | — | — | — | — | **error**: {d['error']} |")
            continue
        met = "met" if d["ratio"] <= TARGET else "**missed**"
        out.append(f"| {r['name']} | {r['dims']} | {fmt_ms(d['idle_median'])} | {fmt_ms(d['loaded_median'])} | "
                   f"{fmt_ms(d['loaded_p95'])} | {fmt_x(d['ratio'])} | {d['idle_samples']}, {d['loaded_samples']} "
                   f"| {met} |")
    out.append("")
    short = [r["name"] for r in mine if r["load"].get("neighbours_alive", 0) < r["load"].get("neighbours", 0)]
    if short:
        out += [f"Some neighbours had stopped before the loaded calls ended: {', '.join(short)}.", ""]
    return out


def targets(rows: list) -> list:
    """(what, measured, met) of the busy-neighbour target, as report.targets lists them."""
    from .report import fmt_vs

    mine = measured(rows)
    if not mine:
        return []
    vals = sorted(((r["load"]["ratio"], r["name"]) for r in mine if r["load"].get("ratio")), reverse=True)
    failed = [r["name"] for r in mine if r["load"].get("error")]
    what = f"busy neighbour on every CPU: hyb's p95 ≤ {TARGET:g}× its idle median, every kernel"
    if not vals:
        return [(what, "not measured" + (f" (failed: {', '.join(failed)})" if failed else ""), None)]
    bad = [f"{n} {fmt_vs(v, TARGET)}" for v, n in vals if v > TARGET]
    text = f"highest {vals[0][1]} {fmt_vs(vals[0][0], TARGET)}" + (f"; missed by {', '.join(bad)}" if bad else "")
    text += f"; failed: {', '.join(failed)}" if failed else ""
    return [(what, text, not bad and not failed)]
