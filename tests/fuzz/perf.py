"""The performance oracle: a kernel's chosen schedule may not be slower than the program's own loop
order (``schedule="original"``) by more than :data:`LIMIT`.

One case compiles a generated program twice in this process, with its drawn kernel options (the
schedule hyb chooses, or hyb's choice with some of its switches turned off) and with the same
options but ``schedule="original"``, both on one thread, and runs both on the same inputs.  The
inputs are the program's own, scaled up: every shape dimension of size ``v`` becomes ``N + v``
(dimensions that were equal stay equal, so every tensor keeps the shape the program expects),
their values tiled from the drawn ones (a gradient idiom's are drawn afresh), with ``N`` chosen from
one timed run of the original order at a small ``N`` so that a run takes about
:data:`TARGET_SECONDS`.  A program whose original order still runs in under
:data:`FASTEST_SECONDS` at the largest size allowed is skipped (too fast to time).

A time is the least of several runs, the two kernels' runs interleaved (the order alternating), the
arguments reset from their pristine copies before each run, outside the timing.  A ratio over
:data:`LIMIT` is timed again with more runs; only one still over it, the least times of both
timings together, is a :class:`PerfError`, whose message gives both times, the ratio, the sizes
run and the program.  Every timing goes through :func:`time_pair`, whose clock can be replaced
(the tests give it a fake one).
"""
from __future__ import annotations

import hashlib
import math
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

import hyb

from . import compile_time, programs

LIMIT = 1.25  # chosen / original, above which a schedule is a failure
TARGET_SECONDS = 0.005  # the original order's run time the sizes are chosen for
FASTEST_SECONDS = 0.0005  # an original order faster than this at the largest size: skipped
MAX_ELEMENTS = 1 << 21  # the most elements of one tensor
START = {1: 4096, 2: 48, 3: 12, 4: 6}  # N of the calibration run, by the program's rank
ROUNDS = 5  # timed runs of each kernel
RETIME_ROUNDS = 9  # runs of each when a ratio over the limit is timed again
BUDGET_SECONDS = 8.0  # the most seconds of runs of one timing (a slow kernel gets fewer runs, 2 at least)
CALIBRATE_SECONDS = 0.02  # the calibration calls the original order for this long
# what a program may raise for its scaled inputs, which makes it a skipped case, not a failure
REFUSED = (hyb.HybridTypeError, hyb.HybridArgumentError, hyb.HybridUnsupportedError, hyb.HybridNameError,
           hyb.HybridSyntaxError)


class PerfError(AssertionError):
    """A chosen schedule slower than the original order by more than the limit, timed twice."""


# ------------------------------------------------------------------ timing
@dataclass
class Timing:
    """The least seconds of each kernel's runs, and how many runs each had."""

    best: dict
    runs: dict

    def ratio(self, a="chosen", b="original"):
        return self.best[a] / self.best[b]

    def merged(self, other: "Timing") -> "Timing":
        return Timing({k: min(v, other.best[k]) for k, v in self.best.items()},
                      {k: v + other.runs[k] for k, v in self.runs.items()})


def time_pair(calls: dict, rounds: int = ROUNDS, budget: float = BUDGET_SECONDS, clock=time.perf_counter,
              resets: dict | None = None) -> Timing:
    """The least of ``rounds`` runs of each zero-argument call of ``calls`` (name -> call), the
    kernels' runs interleaved, the first in turn alternating; ``resets`` (name -> call) run before
    each run, outside the timing.  A kernel whose runs would take longer than ``budget`` seconds in
    all gets fewer runs (two at least)."""
    names = list(calls)
    resets = resets or {}
    best = {n: math.inf for n in names}
    runs = {n: 0 for n in names}
    spent = {n: 0.0 for n in names}
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        for n in order:
            if runs[n] >= 2 and spent[n] + best[n] > budget:
                continue
            if n in resets:
                resets[n]()
            t0 = clock()
            calls[n]()
            dt = clock() - t0
            best[n] = min(best[n], dt)
            spent[n] += dt
            runs[n] += 1
    return Timing(best, runs)


def judge(calls: dict, resets: dict | None = None, clock=time.perf_counter, limit: float = LIMIT):
    """(timing, retimed or None) of ``calls`` {"chosen": ..., "original": ...}: timed once, and a
    ratio over ``limit`` timed again (its least times merged with the first timing's).  Raises
    nothing: :func:`verdict` says whether it fails."""
    first = time_pair(calls, ROUNDS, clock=clock, resets=resets)
    if first.ratio() <= limit:
        return first, None
    again = time_pair(calls, RETIME_ROUNDS, clock=clock, resets=resets)
    return first, first.merged(again)


def verdict(first: Timing, merged: Timing | None, limit: float = LIMIT) -> bool:
    """Whether a timing pair (from :func:`judge`) is a failure."""
    return merged is not None and merged.ratio() > limit


def describe(first: Timing, merged: Timing | None) -> str:
    ms = lambda s: f"{s * 1e3:.3f} ms"  # noqa: E731
    text = (f"chosen {ms(first.best['chosen'])}, original {ms(first.best['original'])} "
            f"({first.ratio():.2f}x; {first.runs['chosen']} and {first.runs['original']} runs)")
    if merged is not None:
        text += (f"; timed again, the least of all runs: chosen {ms(merged.best['chosen'])}, original "
                 f"{ms(merged.best['original'])} ({merged.ratio():.2f}x; {merged.runs['chosen']} and "
                 f"{merged.runs['original']} runs)")
    return text


# ------------------------------------------------------------------ what the campaign saw
@dataclass
class Tally:
    timed: int = 0
    retimed: int = 0  # over the limit once, under it when timed again
    failures: int = 0
    worst: float = 0.0
    worst_source: str = field(default="", repr=False)

    def describe(self) -> str:
        return (f"perf: {self.timed} programs timed (chosen schedule vs original order, limit {LIMIT:g}x), worst "
                f"ratio {self.worst:.2f}x; over the limit once and under it when timed again: {self.retimed}; "
                f"over it twice (failures): {self.failures}")


TALLY = Tally()


def reset_tally() -> Tally:
    global TALLY
    TALLY = Tally()
    return TALLY


def count(first: Timing, merged: Timing | None, source: str):
    tally = TALLY
    tally.timed += 1
    ratio = (merged or first).ratio()
    if ratio > tally.worst:
        tally.worst, tally.worst_source = ratio, source
    if merged is not None:
        if merged.ratio() > LIMIT:
            tally.failures += 1
        else:
            tally.retimed += 1


# ------------------------------------------------------------------ inputs, scaled
def grow(a, n: int, rng=None):
    """An argument of a drawn program for the shapes ``n + v`` of each dimension ``v``: an array
    with its dimensions mapped so, its values tiled from its own (a float array's drawn in
    ±[0.3, 1.5] with ``rng`` where ``rng`` is given; zeros where it had none); anything else as
    it is."""
    if not isinstance(a, np.ndarray) or a.ndim == 0:
        return a.copy() if isinstance(a, np.ndarray) else a
    new = tuple(n + v for v in a.shape)
    size = int(np.prod(new))
    if rng is not None and a.dtype.kind == "f" or a.size == 0:
        if a.dtype.kind == "f":
            vals = rng.uniform(0.3, 1.5, size) * rng.choice([-1.0, 1.0], size) if rng is not None else np.zeros(size)
            return np.asarray(vals, dtype=a.dtype).reshape(new)
        return np.zeros(new, a.dtype)
    return np.resize(a.reshape(-1), size).reshape(new).astype(a.dtype, copy=False)


def largest_n(prog) -> int:
    """The largest N for which no tensor of the program has more than MAX_ELEMENTS elements."""
    arrays = [a for a in prog.args if isinstance(a, np.ndarray) and a.ndim > 0]
    n = 1
    while all(np.prod([n * 2 + v for v in a.shape]) <= MAX_ELEMENTS for a in arrays) and n < 1 << 22:
        n *= 2
    lo, hi = n, n * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if all(np.prod([mid + v for v in a.shape]) <= MAX_ELEMENTS for a in arrays):
            lo = mid
        else:
            hi = mid
    return lo


def rank_of(prog) -> int:
    return max([a.ndim for a in prog.args if isinstance(a, np.ndarray)] + [len(getattr(prog, "shape", ()) or ())] + [1])


# ------------------------------------------------------------------ one case
def options_of(prog) -> tuple:
    """(chosen options, original options): the drawn options on one thread, and the same with
    ``schedule="original"``."""
    chosen = {**(prog.options or {}), "threads": 1}
    return chosen, {**chosen, "schedule": "original"}


class Bound:
    """A compiled kernel and its own copies of the arguments, reset from ``pristine`` before a run."""

    def __init__(self, kernel, pristine):
        self.kernel = kernel
        self.pristine = pristine
        self.args = [a.copy() if isinstance(a, np.ndarray) else a for a in pristine]

    def reset(self):
        for a, p in zip(self.args, self.pristine):
            if isinstance(a, np.ndarray):
                np.copyto(a, p)

    def __call__(self):
        return self.kernel(*self.args)


def compiled(prog, args, options):
    return Bound(compile_time.kernel(prog.source, args, options), args)


def per_call(bound: Bound, seconds: float) -> float:
    """The least seconds of one run of ``bound`` (its arguments reset before each, outside the
    timing), from runs for about ``seconds`` (one run at least)."""
    best, t_end = math.inf, time.perf_counter() + seconds
    while True:
        bound.reset()
        t0 = time.perf_counter()
        bound()
        t1 = time.perf_counter()
        best = min(best, t1 - t0)
        if t1 >= t_end:
            return best


def sizes_for(prog, rng) -> tuple:
    """(N, the original order's seconds per run at N, its arguments there): N from one timed
    calibration at START[rank]."""
    r = rank_of(prog)
    top = largest_n(prog)
    n0 = min(START.get(r, 6), top)
    args0 = [grow(a, n0, rng) for a in prog.args]
    _, original = options_of(prog)
    t0 = per_call(compiled(prog, args0, original), CALIBRATE_SECONDS)
    n = int(n0 * (TARGET_SECONDS / max(t0, 1e-9)) ** (1.0 / r))
    return max(1, min(n, top)), t0, n0


def tag(source: str) -> str:
    """Eight letters naming ``source``."""
    digest = hashlib.sha1(source.encode()).digest()[:8]
    return "".join(chr(ord("a") + b % 26) for b in digest)


def check_perf(prog, seed: int = 0, clock=time.perf_counter, timings=None) -> str:
    """The performance oracle for one program (see the module's text): "ok ..." or "skipped: ...";
    raises PerfError.  ``timings`` (a function of (the two Bound kernels, their resets) returning
    what :func:`judge` returns) replaces the timing, for tests."""
    chosen_opts, original_opts = options_of(prog)
    if (prog.options or {}).get("schedule") == "original":
        return "skipped: original order drawn"
    # a gradient idiom's arguments are placeholders: its values are drawn
    rng = np.random.default_rng(seed) if isinstance(prog, programs.GradProgram) else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hyb.HybridWarning)
        try:
            n, _, _ = sizes_for(prog, rng)
            args = [grow(a, n, rng) for a in prog.args]
            original = compiled(prog, args, original_opts)
            chosen = compiled(prog, args, chosen_opts)
            for b in (original, chosen):  # (a first run each, untimed)
                b.reset()
                b()
            if timings is None and per_call(original, CALIBRATE_SECONDS) < FASTEST_SECONDS:
                return "skipped: too fast to time"
        except REFUSED as e:
            return f"skipped: refused ({type(e).__name__})"
        except hyb.HybridIndexError:
            return "skipped: index error"
        calls = {"chosen": chosen, "original": original}
        resets = {k: b.reset for k, b in calls.items()}
        first, merged = (timings or (lambda c, r: judge(c, r, clock=clock)))(calls, resets)
    shapes = ", ".join(f"{a.dtype}{list(a.shape)}" for a in args if isinstance(a, np.ndarray))
    source = compile_time.program(prog.source, args, chosen_opts)
    count(first, merged, source)
    if verdict(first, merged):
        # (the first line names the options, the idiom family and the program, in letters: failures of
        # one program, timed at other speeds, go to one report; other programs to reports of their own)
        what = f"{chosen_opts!r}" + (f", {prog.family}" if getattr(prog, "family", "") else "") + f", program {tag(prog.source)}"
        raise PerfError(f"chosen schedule slower than the original order by over {LIMIT:g}x ({what}): "
                        f"{merged.ratio():.2f}x\n{describe(first, merged)}\nrun on: ({shapes})\noptions: "
                        f"{chosen_opts!r}, against "
                        f"{original_opts!r}\n--- program ---\n{prog.source.rstrip()}")
    ratio = (merged or first).ratio()
    return "ok, chosen faster" if ratio < 1 / LIMIT else "ok, within the limit"
