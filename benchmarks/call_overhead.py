"""Call overhead: the time of one warm call of a small elementwise add ``c = a + b`` (float32), for
hyb, Numba and NumPy, at 4, 1 000 and 1 000 000 elements.  At 4 elements the time is almost all
the cost of the call itself (argument checks, output allocation, dispatch); at 1 000 000 it is
the loop.

    python -m benchmarks.call_overhead            # or: python -m benchmarks --kernels calls
    python -m benchmarks.call_overhead --repeat 21 --out /tmp/calls

Every version runs on one thread and allocates its output inside the call, as hyb does (``output_tensor``): Numba's
``@njit`` function makes it with ``np.empty_like``, NumPy's is ``np.add(a, b)``.  hyb is timed
twice: with the dispatcher it uses (the C one where it was built) and with the Python
dispatcher (what ``HYB_FASTCALL=0`` selects).  A time is the median over ``--repeat`` timeit
repeats of the mean of a repeat's calls.  The results are printed as a markdown table and
written to ``<out>/calls.md`` and ``<out>/calls.json`` (default out: benchmarks/results/calls).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import platform
import statistics
import sys
import timeit
from pathlib import Path

import numpy as np

import hyb
from hyb.runtime import fastcall

SIZES = (4, 1_000, 1_000_000)
VERSIONS = ("hyb", "hyb-python", "numba", "numpy")
LABELS = {"hyb": "hyb", "hyb-python": "hyb, Python dispatcher", "numba": "Numba", "numpy": "NumPy"}
OUT = Path(__file__).resolve().parent / "results" / "calls"


@hyb.hybrid(threads=1)  # one thread, like the Numba (no parallel=True) and NumPy versions
def add(a, b):
    c = output_tensor(a.shape, a.dtype)  # noqa: F821 - a name of the kernel language
    for i in range(a.shape[0]):
        c[i] = a[i] + b[i]
    return c


class PythonDispatcher:
    """While active, kernels dispatch warm calls through the Python path."""

    def __enter__(self):
        self.saved = fastcall.call
        fastcall.call = fastcall.python_call

    def __exit__(self, *exc):
        fastcall.call = self.saved


def numba_add():
    """The Numba version, or the reason there is none."""
    try:
        import numba
    except ImportError:
        return "numba is not installed (pip install numba, or .[bench])"

    @numba.njit(cache=False)
    def nb_add(a, b):
        c = np.empty_like(a)
        for i in range(a.shape[0]):
            c[i] = a[i] + b[i]
        return c

    return nb_add


def versions() -> dict:
    """name -> a function of (a, b), or a string saying why that version is not available
    (``hyb-python`` is the hyb kernel, timed under :class:`PythonDispatcher`)."""
    return {"hyb": add, "hyb-python": add, "numba": numba_add(), "numpy": np.add}


def median_call(fn, a, b, repeat: int, target: float = 2e-3) -> float:
    """Seconds per call: the median over `repeat` timeit repeats, each as many calls as fill about
    `target` seconds."""
    fn(a, b)
    t0 = timeit.default_timer()
    fn(a, b)
    one = max(timeit.default_timer() - t0, 1e-7)
    number = max(1, int(target / one))
    times = timeit.repeat(lambda: fn(a, b), number=number, repeat=repeat)
    return statistics.median(t / number for t in times)


def measure(repeat: int = 51, sizes=SIZES) -> dict:
    """{"sizes", "times": {version: [seconds per call, one per size]}, "na": {version: why}}, after
    checking every version's result against NumPy's."""
    found = versions()
    na = {v: f for v, f in found.items() if isinstance(f, str)}
    times = {v: [] for v in found if v not in na}
    for n in sizes:
        a = np.arange(n, dtype=np.float32)
        b = np.full(n, 0.5, np.float32)
        want = a + b
        for v in times:
            fn = found[v]
            with PythonDispatcher() if v == "hyb-python" else contextlib.nullcontext():
                np.testing.assert_array_equal(fn(a, b), want)
                times[v].append(median_call(fn, a, b, repeat))
    return {"sizes": list(sizes), "times": times, "na": na}


def fmt_us(t: float) -> str:
    us = t * 1e6
    return f"{us:.3g}" if us < 1000 else f"{us:,.0f}"


def markdown(result: dict, meta: dict) -> str:
    shown = [v for v in VERSIONS if v in result["times"]]
    out = ["## Call overhead: warm call of `c = a + b` (float32)", "",
           f"- {meta['date']}, hyb {meta['commit'] or '?'}; {meta['cpu']} (load average {meta['load']}); "
           f"Python {meta['python']}, NumPy {meta['numpy']}, Numba {meta['numba']}; hyb's dispatcher: {meta['dispatcher']}",
           f"- µs per call: median of {meta['repeat']} timeit repeats; every version allocates its output",
           ""]
    out.append("| elements | " + " | ".join(f"{LABELS[v]} µs" for v in shown) + " |")
    out.append("|--:|" + "--:|" * len(shown))
    for k, n in enumerate(result["sizes"]):
        out.append(f"| {n:,} | " + " | ".join(fmt_us(result["times"][v][k]) for v in shown) + " |")
    for v, why in result["na"].items():
        out.append(f"\n{LABELS[v]}: not run ({why})")
    return "\n".join(out) + "\n"


def metadata(repeat: int) -> dict:
    from .harness import REPO, _load, _run, cpu_model

    try:
        import numba
        numba_version = numba.__version__
    except ImportError:
        numba_version = "not installed"
    return {"date": datetime.date.today().isoformat(), "commit": _run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO),
            "cpu": cpu_model(), "load": _load(), "python": platform.python_version(), "numpy": np.__version__,
            "numba": numba_version, "repeat": repeat,
            "dispatcher": "C extension" if fastcall.NATIVE else "Python (no C extension, or HYB_FASTCALL=0)"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.call_overhead", description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=51, help="timeit repeats per version and size (default: 51)")
    ap.add_argument("--sizes", default=",".join(str(n) for n in SIZES),
                    help="comma-separated element counts (default: 4,1000,1000000)")
    ap.add_argument("--out", default=str(OUT), help=f"output directory (default: {OUT})")
    opts = ap.parse_args(argv)
    sizes = [int(s) for s in opts.sizes.split(",") if s.strip()]
    result = measure(max(1, opts.repeat), sizes)
    meta = metadata(opts.repeat)
    text = markdown(result, meta)
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "calls.md").write_text(text)
    (out / "calls.json").write_text(json.dumps({"meta": meta, **result}, indent=1))
    print(text)
    print(f"wrote {out}/calls.md, calls.json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
