"""Memory a process keeps of what it compiled: each scenario runs in a fresh child process with
the disk cache off (``HYB_CACHE=0``) and reports the growth of its anonymous resident memory
(``RssAnon`` of ``/proc/self/status``: the shared libraries' code, paged in as LLVM and isl run,
is file-backed and not counted).

    python -m benchmarks.memory                   # every scenario
    python -m benchmarks.memory --cycles 300      # fewer compile-and-drop cycles

Scenarios (the counts as given by the options):

* ``drop-small``: distinct small kernels (``c[i] = a[i] * n + b[i]``), each compiled, called once
  and dropped; the growth after the first 100, per 1,000 cycles.
* ``drop-rows``: the log-softmax of the ``ml`` group, a kernel made anew each cycle for a new shape,
  called once and dropped; the growth per cycle after the first 10.
* ``variants``: one kernel compiled for many shapes (``shapes="specialise"``), kept; the growth per
  signature with the default bound on a kernel's signatures (``max_variants``) and without one.

The results are printed as a markdown table and written to ``<out>/memory.md`` and
``<out>/memory.json`` (default out: benchmarks/results/memory).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "results" / "memory"

CHILD = r'''
import gc, json, os, sys
import numpy as np
import hyb
sys.path.insert(0, {root!r})
from benchmarks import ml_rows

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024.0

SMALL = "def k{{n}}(a, b):\n    c = output_tensor(a.shape, a.dtype)\n" \
        "    for i in range(a.shape[0]):\n        c[i] = a[i] * {{n}}.0 + b[i]\n    return c\n"
scenario, count = sys.argv[1], int(sys.argv[2])
marks = []
if scenario == "drop-small":
    a = np.ones(16, np.float32)
    for n in range(count):
        getattr(hyb.compile_source(SMALL.format(n=n)), "k%d" % n)(a, a)
        if n + 1 in (100, count):
            gc.collect(); marks.append(rss())
    out = {{"growth_mib_per_1000": (marks[-1] - marks[0]) * 1000.0 / (count - 100)}}
elif scenario == "drop-rows":
    for n in range(count):
        hyb.compile_source(ml_rows.LOG_SOFTMAX_HYB).kernel_log_softmax(np.ones((8, 40 + n), np.float32))
        if n + 1 in (10, count):
            gc.collect(); marks.append(rss())
    out = {{"growth_kib_per_cycle": (marks[-1] - marks[0]) * 1024.0 / (count - 10)}}
else:
    bound = None if scenario == "variants" else 1_000_000
    k = hyb.compile_source(ml_rows.LOG_SOFTMAX_HYB, shapes="specialise", max_variants=bound).kernel_log_softmax
    k(np.ones((8, 39), np.float32)); gc.collect(); start = rss()
    for n in range(count):
        k(np.ones((8, 40 + n), np.float32))
    gc.collect()
    out = {{"growth_kib_per_signature": (rss() - start) * 1024.0 / count, "kept": len(k._cache)}}
print(json.dumps(out))
'''


def run(scenario: str, count: int) -> dict:
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, HYB_CACHE="0")
    env.pop("HYB_MAX_VARIANTS", None)
    r = subprocess.run([sys.executable, "-c", CHILD.format(root=root), scenario, str(count)],
                       capture_output=True, text=True, env=env, timeout=3600)
    if r.returncode != 0:
        raise SystemExit(f"{scenario}: the child process failed\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=1000, help="compile-and-drop cycles of small kernels (default 1000)")
    ap.add_argument("--rows", type=int, default=110, help="compile-and-drop cycles of log-softmax (default 110)")
    ap.add_argument("--signatures", type=int, default=200, help="signatures of one kernel (default 200)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    if args.cycles <= 100 or args.rows <= 10 or args.signatures < 1:
        ap.error("--cycles must be over 100, --rows over 10, --signatures at least 1")
    import hyb
    rows = []
    print(f"memory: drop-small ({args.cycles} cycles)", file=sys.stderr, flush=True)
    small = run("drop-small", args.cycles)
    rows.append(("distinct small kernels compiled, called once, dropped", f"{small['growth_mib_per_1000']:.1f} MiB per 1,000"))
    print(f"memory: drop-rows ({args.rows} cycles)", file=sys.stderr, flush=True)
    logs = run("drop-rows", args.rows)
    rows.append(("log-softmax (2 nests, a row reduction) compiled for a new shape, called once, dropped",
                 f"{logs['growth_kib_per_cycle']:.0f} KiB per cycle"))
    for scenario, label in (("variants", "default bound (`max_variants`)"), ("variants-unbounded", "no bound")):
        print(f"memory: {scenario} ({args.signatures} signatures)", file=sys.stderr, flush=True)
        v = run(scenario, args.signatures)
        rows.append((f"one log-softmax kernel, {args.signatures} shapes (`shapes=\"specialise\"`), {label}",
                     f"{v['growth_kib_per_signature']:.0f} KiB per signature ({v['kept']} kept)"))
    head = (f"Measured {datetime.date.today()} on {platform.machine()} ({os.cpu_count()} CPUs), hyb "
            f"{hyb.__version__}, Python {platform.python_version()}; growth of RssAnon, HYB_CACHE=0.")
    table = "| scenario | growth |\n|---|--:|\n" + "".join(f"| {a} | {b} |\n" for a, b in rows)
    print(head + "\n\n" + table)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "memory.md").write_text(head + "\n\n" + table)
    (args.out / "memory.json").write_text(json.dumps({"small": small, "rows": logs, "table": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
