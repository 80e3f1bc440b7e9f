"""The compile-time oracle: no program the fuzzers make may take longer than a limit to compile.

A compile is what a program's first call does before it runs: parse, check, the middle end and
LLVM (and, for a gradient, the derivation of its kernel).  :func:`measure` times one with
:func:`time.perf_counter`, the disk cache off (a fresh parse bypasses the in-memory caches), and
names its longest stage from the compiled kernel's ``timings`` record where it has one.  A compile
over the limit is compiled again from its source; only one over the limit both times is a
:class:`CompileTimeError`, so a busy machine does not raise false alarms.

A compile that runs far past the limit is stopped (:func:`stop_after`): :func:`time_limit`'s
SIGALRM reaches the main thread even while it waits for a compile that :mod:`hyb.dsl.deep` runs on
a thread with a large stack (the wait for a thread is interruptible), and the threads the compile
started are then stopped by an exception raised in them (``PyThreadState_SetAsyncExc``).  Python
delivers such an exception, like a signal handler's, only when the thread runs Python code again:
a compile stuck inside one native call (isl, LLVM) stops when that call returns.  On the main
thread the case's own limit may then be due as well; the compile is still what ran past its stop,
so it is a compile-time failure, compiled only once (the case has no time left).  A thread still
running :data:`GRACE` seconds after the stop is reported (``CompileTimeError.runaway``, and
:func:`runaway`): the campaign ends there, because what it would compile next waits on what that
thread holds.

Every compile is counted in :data:`TALLY` (how many, the slowest and its program, those over the
limit once and twice), which the campaign's summary shows.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field

import hyb

DEFAULT_SECONDS = 2.0
# A compile is stopped after STOP_FACTOR times the limit, and never before STOP_AT_LEAST seconds
STOP_FACTOR = 5.0
STOP_AT_LEAST = 10.0
GRACE = 5.0  # seconds the threads of a stopped compile have to end

_limit = [DEFAULT_SECONDS]


def seconds() -> float:
    """The limit in force."""
    return _limit[0]


@contextlib.contextmanager
def limit(value: float):
    """The compile-time limit is ``value`` seconds inside the block."""
    if not value > 0:
        raise ValueError(f"a compile-time limit must be a positive number of seconds, not {value!r}")
    old = _limit[0]
    _limit[0] = float(value)
    try:
        yield
    finally:
        _limit[0] = old


def stop_after(limit_seconds: float) -> float:
    """When a compile is stopped, for a limit of ``limit_seconds``."""
    return max(STOP_FACTOR * limit_seconds, STOP_AT_LEAST)


# ------------------------------------------------------------------ time limits (SIGALRM)
class Hang(Exception):
    """A :func:`time_limit` ran out; ``limit`` is the one (what its block yielded)."""

    def __init__(self, message: str, limit=None):
        super().__init__(message)
        self.limit = limit


# A block whose Hang was caught inside it (code that catches every Exception) gets it again this
# many seconds later, until the block ends
REPEAT = 1.0


@dataclass(eq=False)
class _Limit:
    deadline: float
    seconds: float
    handler: object = None  # the SIGALRM handler before the outermost block


_limits: list = []  # the time_limit blocks in force, outermost first
_quiet = [0]  # > 0: a Hang now would break off stopping a compile's threads; it waits


def _arm(delay: float | None = None):
    if not _limits:
        signal.setitimer(signal.ITIMER_REAL, 0)
        return
    if delay is None:
        delay = min(lim.deadline for lim in _limits) - time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, max(delay, 1e-4))


def _on_alarm(signum, frame):
    now = time.monotonic()
    due = [lim for lim in _limits if lim.deadline <= now + 1e-4]
    if not due or _quiet[0]:  # (an early tick, or not now: wait)
        _arm(None if not due else 0.05)
        return
    for lim in due:
        lim.deadline = now + REPEAT
    _arm()
    # the outermost limit due: the blocks inside it end with it
    raise Hang(f"no answer within {due[0].seconds:g} s", due[0])


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise :class:`Hang` in the main thread after ``seconds`` (SIGALRM); no limit elsewhere.
    Blocks nest: each keeps its own deadline, and the Hang names the block whose deadline passed
    (``Hang.limit`` is what that block yielded)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield None
        return
    mine = _Limit(time.monotonic() + seconds, seconds)
    if not _limits:
        mine.handler = signal.signal(signal.SIGALRM, _on_alarm)
    _limits.append(mine)
    _arm()
    try:
        yield mine
    finally:
        _limits.remove(mine)
        if _limits:
            _arm()
        else:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, mine.handler)


# ------------------------------------------------------------------ stopping a compile's threads
class CompileStopped(BaseException):
    """Raised inside a thread of a compile that ran past its stop (not an Exception: code that
    catches every Exception does not keep the thread running)."""


_runaway: list = []  # threads of stopped compiles that did not end


def running(t: threading.Thread) -> bool:
    """Whether ``t`` still runs.  Not ``t.is_alive()``: a join interrupted by a signal handler's
    exception (the SIGALRM of a time limit) marks the thread it waited for as ended, though it
    runs on; the interpreter's own list of threads knows better."""
    return t.ident is not None and t.ident in sys._current_frames()


def runaway() -> list:
    """Threads of stopped compiles still running (stuck in a native call)."""
    _runaway[:] = [t for t in _runaway if running(t)]
    return list(_runaway)


def where(frame_or_tb, frames: int = 3) -> str:
    """The innermost ``frames`` frames in hyb of a stack (a frame, or a traceback), innermost first."""
    if frame_or_tb is None:
        return ""
    stack = (traceback.extract_tb(frame_or_tb) if hasattr(frame_or_tb, "tb_frame")
             else traceback.extract_stack(frame_or_tb))
    root = os.path.dirname(hyb.__file__)
    own = [f for f in stack if f.filename.startswith(root) and not f.filename.endswith(os.sep + "deep.py")]
    return " < ".join(f"{f.name} ({os.path.relpath(f.filename, os.path.dirname(root))}:{f.lineno})"
                      for f in reversed(own[-frames:]))


def _stop(threads: list) -> tuple:
    """Stop ``threads``: (where each was, the ones still running after GRACE seconds)."""
    frames = sys._current_frames()
    places = [where(frames.get(t.ident)) for t in threads]
    _quiet[0] += 1
    try:
        for t in threads:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(t.ident), ctypes.py_object(CompileStopped))
        deadline = time.monotonic() + GRACE
        while any(running(t) for t in threads) and time.monotonic() < deadline:
            time.sleep(0.005)
    finally:
        _quiet[0] -= 1
    alive = [t for t in threads if running(t)]
    _runaway.extend(alive)
    return [p for p in places if p], alive


# ------------------------------------------------------------------ one compile, timed
@dataclass(frozen=True)
class Try:
    """One compile: its seconds, its stages (name, seconds), what it gave or raised, and, for a
    compile stopped at its limit, where it was and the threads that would not stop."""

    seconds: float
    stages: tuple = ()
    value: object = None
    error: BaseException | None = None
    stopped: str = ""
    runaway: tuple = ()
    notes: tuple = ()  # what the compile said about itself (how it chose code for shapes)
    cut: bool = False  # stopped by an enclosing limit (its own could not land inside a native call)

    @property
    def longest(self):
        """The stage that took longest (stages of one name added up), or None."""
        total: dict = {}
        for name, s in self.stages:
            total[name] = total.get(name, 0.0) + s
        return max(total.items(), key=lambda kv: kv[1]) if total else None

    def describe(self) -> str:
        if isinstance(self.error, Hang):
            return (f"stopped after {self.seconds:.2f} s"
                    + (f" in {self.stopped}" if self.stopped else "")
                    + (" (by the case's limit: one native call outlasted the compile's own)" if self.cut else "")
                    + (f"; {len(self.runaway)} compile thread(s) did not stop within {GRACE:g} s (in a native call)"
                       if self.runaway else ""))
        text = f"{self.seconds:.2f} s"
        if self.longest:
            text += f" (longest stage: {self.longest[0]}, {self.longest[1]:.2f} s)"
        return text


@dataclass
class Tally:
    """What the oracle saw: compiles timed, the slowest, those over the limit once only (noise)
    and twice (reported)."""

    compiles: int = 0
    retried: int = 0
    over: int = 0
    slowest: float = 0.0
    slowest_source: str = field(default="", repr=False)

    def describe(self, limit_seconds: float) -> str:
        return (f"compile-time: {self.compiles} compiles timed (limit {limit_seconds:g} s), slowest "
                f"{self.slowest:.2f} s; over the limit once and under it when compiled again: {self.retried}; "
                f"over it twice (failures): {self.over}")


TALLY = Tally()


def reset_tally() -> Tally:
    global TALLY
    TALLY = Tally()
    return TALLY


class CompileTimeError(AssertionError):
    """A program compiled over the limit twice (each time fresh, without caches)."""

    def __init__(self, source: str, tries: tuple, limit_seconds: float):
        self.source = source
        self.tries = tries
        self.limit_seconds = limit_seconds
        self.runaway = tuple(t for tr in tries for t in tr.runaway)
        slow = max(tries, key=lambda tr: tr.seconds)
        stages = sorted(slow.stages, key=lambda kv: -kv[1])[:6]
        why = "its thread would not stop" if self.runaway else "the case's time ran out"
        lines = [f"compile over the limit of {limit_seconds:g} s"
                 + (" twice: " if len(tries) > 1 else f" (not compiled again: {why}): ")
                 + ", then ".join(tr.describe() for tr in tries)]
        if stages:
            lines.append("slowest stages of the slower try: " + ", ".join(f"{n} {s:.3f} s" for n, s in stages))
        lines += list(dict.fromkeys(n for tr in tries for n in tr.notes))
        if slow.error is not None and not isinstance(slow.error, Hang):
            lines.append(f"(the compile ended with {type(slow.error).__name__}: "
                         f"{str(slow.error).strip().splitlines()[0] if str(slow.error).strip() else ''})")
        lines += ["--- program ---", source.rstrip("\n")]
        super().__init__("\n".join(lines))


@contextlib.contextmanager
def _disk_cache_off():
    old = os.environ.get("HYB_CACHE")
    os.environ["HYB_CACHE"] = "0"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("HYB_CACHE", None)
        else:
            os.environ["HYB_CACHE"] = old


class Stages(list):
    """The (stage, seconds) pairs a compile adds, and its ``notes``."""

    def __init__(self):
        super().__init__()
        self.notes = []


def _attempt(make, stop: float) -> Try:
    stages = Stages()
    before = set(threading.enumerate())
    mine = None
    start = time.perf_counter()
    try:
        with _disk_cache_off(), time_limit(stop) as mine:
            value = make(stages)
    except Hang as e:
        elapsed = time.perf_counter() - start
        started = [t for t in threading.enumerate() if t not in before and running(t)]
        places, alive = _stop(started) if started else ([], [])
        own = mine is not None and e.limit is mine
        if not own and elapsed < stop:  # another block's limit, before this one's: it handles its Hang
            raise
        # (past this compile's stop, whichever alarm landed first: a native call delays them all)
        return Try(elapsed, tuple(stages), error=e, stopped=(places[0] if places else where(e.__traceback__)),
                   runaway=tuple(alive), notes=tuple(stages.notes), cut=not own)
    except hyb.HybridError as e:  # a refusal takes time too
        return Try(time.perf_counter() - start, tuple(stages), error=e, notes=tuple(stages.notes))
    except BaseException:
        started = [t for t in threading.enumerate() if t not in before and running(t)]
        if started:
            _stop(started)
        raise
    return Try(time.perf_counter() - start, tuple(stages), value=value, notes=tuple(stages.notes))


def measure(make, source: str, limit_seconds: float | None = None, stop: float | None = None):
    """``make(stages)``, a compile from ``source`` (fresh each call: parse included), timed; it may
    add (stage, seconds) pairs to ``stages``.  Returns what it returns or raises the HybridError it
    raises; a compile over ``limit_seconds`` (default: :func:`seconds`) is made again, and raises
    :class:`CompileTimeError` if over the limit again.  A try is stopped after ``stop`` seconds
    (default: :func:`stop_after`)."""
    limit_seconds = limit_seconds or seconds()
    stop = stop or stop_after(limit_seconds)
    tries = [_attempt(make, stop)]
    tally = TALLY
    tally.compiles += 1
    if tries[0].seconds > limit_seconds and not (tries[0].runaway or tries[0].cut):
        tries.append(_attempt(make, stop))
        if tries[1].seconds <= limit_seconds:
            tally.retried += 1
    last = tries[-1]
    if min(tr.seconds for tr in tries) > tally.slowest:
        tally.slowest, tally.slowest_source = min(tr.seconds for tr in tries), source
    if last.seconds > limit_seconds:
        tally.over += 1
        raise CompileTimeError(source, tuple(tries), limit_seconds) from last.error
    if last.error is not None:
        raise last.error
    return last.value


# ------------------------------------------------------------------ the compiles the oracles time
def stages_of(ck) -> tuple:
    """The (stage, seconds) pairs of a compiled kernel's ``timings`` record, if it keeps one (code
    for all shapes bound to one: the shared code's compile, then the binding)."""
    shared = getattr(getattr(getattr(ck, "ck", None), "timings", None), "stages", ())
    return tuple(shared or ()) + tuple(getattr(getattr(ck, "timings", None), "stages", ()) or ())


def compiled(ck, stages: list):
    """``ck``, a compiled kernel, its stages added to ``stages`` (and to their notes, how it chose
    code for shapes: why there is no shape-generic code, say)."""
    stages.extend(stages_of(ck))
    note = getattr(ck, "shape_note", "")
    if note and hasattr(stages, "notes"):
        stages.notes.append(note)
    return ck


def parse(source: str, filename: str, options: dict, stages: list):
    """``hyb.compile_source``, its time added to ``stages`` as "parse"."""
    start = time.perf_counter()
    mod = hyb.compile_source(source, filename, **options)
    stages.append(("parse", time.perf_counter() - start))
    return mod


def program(source: str, args, options: dict | None, what: str = "") -> str:
    """The text a report shows of a compile: the source, then the kernel options and the
    signature it was compiled for."""
    sig = ", ".join(f"{a.dtype}{list(a.shape)}" if hasattr(a, "shape") and hasattr(a, "dtype") else repr(a)
                    for a in args)
    return (source.rstrip("\n") + "\n" + (f"# {what}\n" if what else "")
            + f"# options: {options or {}!r}\n# compiled for: ({sig})\n")


def kernel(source: str, args, options: dict | None = None, filename: str = "generated.hyb", name: str = "k"):
    """Kernel ``name`` of ``source`` (with kernel ``options``), parsed and compiled for the signature
    of ``args``, timed by :func:`measure`; a call with ``args`` then only runs it."""
    def make(stages):
        k = parse(source, filename, options or {}, stages).kernels[name]
        compiled(k.compile(*args), stages)
        return k
    return measure(make, program(source, args, options))


def gradient(source: str, args, options: dict | None = None, filename: str = "generated.hyb", name: str = "k"):
    """The gradient kernel of kernel ``name`` of ``source``, derived and compiled for ``args`` (its
    forward inputs, then one gradient per output), timed by :func:`measure`."""
    def make(stages):
        k = parse(source, filename, options or {}, stages).kernels[name]
        start = time.perf_counter()
        g = k.grad()
        stages.append(("derive the gradient", time.perf_counter() - start))
        compiled(g.compile(*args), stages)
        return g
    return measure(make, program(source, args, options, "its gradient kernel"))


def warm_up():
    """Compile a small kernel untimed: what only a process's first compile does (imports, the
    parser's tables) is then not counted against the programs."""
    import numpy as np
    with _disk_cache_off():
        hyb.compile_source(WARM_UP, "warm-up.hyb").k.compile(np.zeros(2))


WARM_UP = """
def k(x):
    y = output_tensor(x.shape, x.dtype)
    for i in range(x.shape[0]):
        y[i] = x[i] + 1.0
    return y
"""

