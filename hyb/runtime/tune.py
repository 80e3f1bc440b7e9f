"""``schedule="tune"``: the first call of a signature measures a few schedules around the model's
choice on the call's own arguments and keeps the fastest.

The candidates are the schedule hyb chooses by itself (``"auto"``), the same without register
blocks, and, for a kernel with a blocked contraction, its register block and cache tiles with one
size halved or doubled at a time; for other kernels a few tile sizes.  Each candidate is compiled,
run once to warm up and then timed on fresh copies of the arguments; its results must equal the
first candidate's (a candidate that differs is dropped with a warning, which would be a bug in
hyb).  The winner's code is what the disk cache keeps for the signature and the CPU, with the
schedule option that made it, so a later process loads it without tuning again.
"""
from __future__ import annotations

import sys
import time
import warnings
from dataclasses import replace

import numpy as np

from ..errors import HybridWarning
from .compiler import CompiledKernel

REPEATS = 3  # timed runs of each candidate (the fastest counts)
BUDGET_S = 20.0  # past this much measuring, the remaining candidates are skipped


def candidates(auto: CompiledKernel) -> list:
    """Schedule options to measure, the model's own first (None)."""
    out = [None, {"register": False}]
    blocks = auto.plan.blocks
    if blocks:
        (mr, nr), sizes = blocks[0]
        sizes = tuple(sizes)
        n = len(sizes)
        # the last three cache sizes are I, J and the innermost reduction member's
        variants = []
        for pos, factor in ((n - 1, 2), (n - 1, 0.5), (n - 2, 2), (n - 2, 0.5), (n - 3, 0.5)):
            if pos < 0:
                continue
            size = max(1, int(sizes[pos] * factor))
            if size != sizes[pos]:
                variants.append({"register": (mr, nr), "cache_tile": sizes[:pos] + (size,) + sizes[pos + 1:]})
        if mr > 2:
            variants.append({"register": (mr - 2, nr), "cache_tile": sizes})
        if nr % 2 == 0 and nr >= 32:
            variants.append({"register": (mr, nr // 2), "cache_tile": sizes})
        variants.append({"register": (mr, nr), "cache_tile": sizes, "pack": True})
        out += variants
    else:
        out += [{"tile": False}, {"tile": (16, 16, 64)}, {"tile": (64, 128, 512)}]
    return out


def _copies(arrays: list) -> list:
    return [a.copy() if isinstance(a, np.ndarray) else a for a in arrays]


def _outputs(result) -> list:
    return list(result) if isinstance(result, tuple) else [result]


def _same(got: list, want: list) -> bool:
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape:
            return False
        if g.dtype.kind in "fc":
            if not np.allclose(g, w, rtol=1e-4, atol=1e-5 * max(1.0, float(np.nanmax(np.abs(w), initial=0))),
                               equal_nan=True):
                return False
        elif not np.array_equal(g, w):
            return False
    return True


def tune(typed, specs: list, options, arrays: list) -> CompiledKernel:
    """The fastest candidate's compiled kernel for this signature (its code records the schedule
    option that made it)."""
    sig = ", ".join(str(s) for s in specs)
    started = time.perf_counter()
    auto = CompiledKernel.build(typed, specs, options.with_schedule(None))
    found = candidates(auto)
    print(f"hyb: tuning `{typed.name}` for ({sig}): {len(found)} schedules", file=sys.stderr, flush=True)
    best, best_time, want = None, None, None
    for n, sched in enumerate(found, 1):
        if n > 1 and time.perf_counter() - started > BUDGET_S:
            print(f"hyb:   time budget of {BUDGET_S:g} s spent: {len(found) - n + 1} schedule(s) not measured",
                  file=sys.stderr, flush=True)
            break
        ck = auto if sched is None else CompiledKernel.build(typed, specs, options.with_schedule(sched))
        got = _outputs(ck.run(_copies(arrays)))  # warm-up, and the results to compare
        if want is None:
            want = got
        elif not _same(got, want):
            warnings.warn(HybridWarning(f"tuning `{typed.name}`: schedule={sched!r} gave other results than "
                                        "hyb's own schedule and was dropped (please report this)"))
            continue
        times = []
        for _ in range(REPEATS):
            fresh = _copies(arrays)
            t0 = time.perf_counter()
            ck.run(fresh)
            times.append(time.perf_counter() - t0)
        t = min(times)
        print(f"hyb:   {n}/{len(found)} schedule={sched if sched is not None else 'auto'!r}: {t * 1e3:.3f} ms",
              file=sys.stderr, flush=True)
        if best_time is None or t < best_time:
            best, best_time = (ck, sched), t
    ck, sched = best
    print(f"hyb:   chose schedule={sched if sched is not None else 'auto'!r} "
          f"({time.perf_counter() - started:.1f} s of tuning)", file=sys.stderr, flush=True)
    ck.code = replace(ck.code, tuned=sched if sched is not None else "auto")
    ck.options = options.with_schedule(sched)
    return ck
