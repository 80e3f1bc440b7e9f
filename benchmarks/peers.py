"""Runnable versions of a benchmark: hyb, Numba (serial and parallel), NumPy and C (gcc, ctypes).

Each is a :class:`Runner`: its own copies of the benchmark's arrays (reset from the pristine
data before every run, outside the timed region), a zero-argument ``call`` that runs it once,
and ``outputs`` that reads its results after a call.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import numpy as np

from .spec import Bench

VARIANTS = ("hyb", "hyb-generic", "hyb-par", "numba", "numba-par", "numpy", "c", "hyb-ieee", "hyb-reassoc", "torch",
            "torch-compile", "jax")
# hyb's code-generation modes, timed only for the elementwise and row kernels (Bench.hyb_modes), on
# --hyb-threads threads like the hyb column: IEEE arithmetic with every sum in the program's order
# (fastmath=False, schedule={"reassociate": False}), and hyb's default mode, IEEE arithmetic with
# reassociated sums (fastmath=False), which the hyb column is when the run says --no-fastmath
MODE_VARIANTS = ("hyb-ieee", "hyb-reassoc")
# PyTorch eager, torch.compile and jax.jit computing the forward kernels of the `ml` group, timed only
# for those, each framework in a child process of its own on --hyb-threads threads like the hyb column
# (benchmarks/ml_peers.py); a framework that is not installed is reported as not available
ML_PEERS = ("torch", "torch-compile", "jax")
DEFAULT_VARIANTS = ("hyb", "hyb-generic", "numba", "numba-par", "numpy", "c", "hyb-ieee", "hyb-reassoc") + ML_PEERS
LABELS = {"hyb": "hyb", "hyb-generic": "hyb shape-generic", "hyb-par": "hyb parallel", "numba": "Numba", "numba-par": "Numba parallel",
          "numpy": "NumPy", "c": "C (gcc -O3)", "hyb-ieee": "hyb in order", "hyb-reassoc": "hyb default",
          "torch": "torch eager", "torch-compile": "torch.compile", "jax": "JAX"}
DEFAULT_CFLAGS = "-O3 -march=native -shared -fPIC -std=gnu11"


class NotAvailable(Exception):
    """This version of the benchmark cannot run here (missing tool, no legal parallel loop, ...)."""


class Runner:
    def __init__(self, names, pristine: dict, make_call, collect):
        self.bufs = {n: (pristine[n].copy() if isinstance(pristine[n], np.ndarray) else pristine[n])
                     for n in names}
        self.call = make_call(self.bufs)
        self._collect = collect
        self.last = None
        self.written = None  # the buffers a call changes, once learned (None: reset them all)

    def reset(self, pristine: dict):
        for n, b in self.bufs.items():
            if isinstance(b, np.ndarray) and (self.written is None or n in self.written):
                np.copyto(b, pristine[n])

    def learn_written(self, pristine: dict):
        """After a call: the buffers it changed are the ones reset from now on, so that inputs a
        version only reads stay as the frameworks' peers (never reset) have theirs."""
        self.written = {n for n, b in self.bufs.items()
                        if isinstance(b, np.ndarray) and not np.array_equal(b, pristine[n], equal_nan=b.dtype.kind in "fc")}

    def run(self):
        self.last = self.call()
        return self.last

    def outputs(self) -> list:
        return [np.array(o, copy=True) for o in self._collect(self.bufs, self.last)]


def _from_bufs(bench: Bench):
    return lambda bufs, ret: [bufs[n] for n in bench.outputs]


# ------------------------------------------------------------------ hyb

def hyb_module(bench: Bench, dims: dict, options: dict, entry_suffix: str = ""):
    """Parse the benchmark's kernel text; returns (module, entry name)."""
    import hyb

    text = bench.hyb_text(dims)
    entry = bench.entry
    if entry_suffix:
        text = text.replace(f"def {entry}(", f"def {entry}{entry_suffix}(")
        entry += entry_suffix
    mod = hyb.compile_source(text, filename=f"<benchmarks {bench.name}>", **options)
    return mod, entry


@contextlib.contextmanager
def hyb_threads_env(threads):
    """HYB_NUM_THREADS set while a kernel compiles (hyb reads it when it compiles a signature)."""
    old = os.environ.get("HYB_NUM_THREADS")
    if threads is not None:
        os.environ["HYB_NUM_THREADS"] = str(threads)
    try:
        yield
    finally:
        if threads is not None:
            if old is None:
                os.environ.pop("HYB_NUM_THREADS", None)
            else:
                os.environ["HYB_NUM_THREADS"] = old


_THREADS_OPTION = None


def hyb_has_threads_option() -> bool:
    """Whether this hyb accepts the `threads=` kernel option."""
    global _THREADS_OPTION
    if _THREADS_OPTION is None:
        import hyb
        try:
            hyb.compile_source("def k(a):\n    return a\n", threads=1)
            _THREADS_OPTION = True
        except hyb.HybridError:
            _THREADS_OPTION = False
    return _THREADS_OPTION


def hyb_options(fastmath: bool, schedule, threads) -> dict:
    """Kernel options for hyb: fast-math, the schedule if one was given, threads if hyb has the option."""
    options = {"fastmath": fastmath}
    if schedule is not None:
        options["schedule"] = schedule
    if threads is not None and hyb_has_threads_option():
        options["threads"] = threads
    return options


def schedule_with(schedule, key: str, value: bool = True):
    """The user's schedule option with the switch ``key`` set to ``value``; NotAvailable if that
    cannot be said."""
    if schedule in (None, "auto"):
        return {key: value}
    if isinstance(schedule, dict):
        return {**schedule, key: value}
    raise NotAvailable(f"schedule={schedule!r} cannot be combined with {key}={value}")


def hyb_runner_or_unavailable(bench: Bench, dims: dict, pristine: dict, options: dict, threads) -> Runner:
    """:func:`hyb_runner`, with an option hyb does not support reported as NotAvailable."""
    import hyb

    try:
        return hyb_runner(bench, dims, pristine, options, threads=threads)
    except hyb.HybridUnsupportedError as e:
        raise NotAvailable(f"{type(e).__name__}: {str(e).splitlines()[0]}") from None


def hyb_mode_runner(variant: str, bench: Bench, dims: dict, pristine: dict, schedule, threads) -> Runner:
    """hyb in IEEE mode with sums in program order (`hyb-ieee`), or in its default mode, IEEE
    arithmetic with reassociated sums (`hyb-reassoc`)."""
    sched = schedule_with(schedule, "reassociate", False) if variant == "hyb-ieee" else schedule
    return hyb_runner_or_unavailable(bench, dims, pristine, hyb_options(False, sched, threads), threads)


def hyb_runner(bench: Bench, dims: dict, pristine: dict, options: dict, threads=None, kernel=None) -> Runner:
    """hyb's version, compiled now (with HYB_NUM_THREADS=threads); `kernel` reuses a parsed one."""
    if kernel is None:
        mod, entry = hyb_module(bench, dims, options)
        kernel = mod.kernels[entry]
    with hyb_threads_env(threads):
        kernel.compile(*[pristine[n] for n in bench.hyb_params])

    def make_call(bufs):
        args = [bufs[n] for n in bench.hyb_params]
        return lambda: kernel(*args)

    def collect(bufs, ret):
        return list(ret) if isinstance(ret, tuple) else [ret]

    return Runner(bench.hyb_params, pristine, make_call, collect)


def hyb_parallel_runner(bench: Bench, dims: dict, pristine: dict, fastmath: bool, schedule, threads: int):
    """hyb with parallel loops on `threads` threads (schedule option parallel=True)."""
    sched = schedule_with(schedule, "parallel")
    return hyb_runner_or_unavailable(bench, dims, pristine, hyb_options(fastmath, sched, threads), threads)


# ------------------------------------------------------------------ numba

_NUMBA_CACHE: dict = {}


def numba_available() -> str | None:
    """None if Numba can be used, else why not."""
    try:
        import numba  # noqa: F401
    except ImportError:
        return "numba is not installed (pip install numba, or .[bench])"
    return None


def numba_runner(bench: Bench, pristine: dict, parallel: bool, fastmath: bool) -> Runner:
    why = numba_available()
    if why:
        raise NotAvailable(why)
    if parallel and not bench.parallel:
        raise NotAvailable("no loop is legal to run in parallel as written")
    import numba

    key = (bench.loops, parallel, fastmath)
    fn = _NUMBA_CACHE.get(key)
    if fn is None:
        fn = numba.njit(fastmath=fastmath, parallel=parallel)(bench.loops)
        _NUMBA_CACHE[key] = fn

    def make_call(bufs):
        args = [bufs[n] for n in bench.params]
        return lambda: fn(*args)

    return Runner(bench.params, pristine, make_call, _from_bufs(bench))


# ------------------------------------------------------------------ numpy

def numpy_runner(bench: Bench, pristine: dict) -> Runner:
    if bench.numpy is None:
        raise NotAvailable("no NumPy version")

    def make_call(bufs):
        args = [bufs[n] for n in bench.params]
        return lambda: bench.numpy(*args)

    return Runner(bench.params, pristine, make_call, _from_bufs(bench))


# ------------------------------------------------------------------ C

class CCompiler:
    """gcc (or $CC) building one shared library per benchmark into a temporary directory."""

    def __init__(self, workdir: Path, cc: str | None = None, cflags: str = DEFAULT_CFLAGS):
        self.cc = cc or os.environ.get("CC") or "gcc"
        self.cflags = cflags
        self.workdir = Path(workdir)
        self.path = shutil.which(self.cc)
        self._libs = []

    def why_not(self) -> str | None:
        if self.path is None:
            return f"no C compiler: `{self.cc}` is not on PATH (C versions skipped)"
        return None

    def version(self) -> str:
        if self.path is None:
            return "none"
        try:
            out = subprocess.run([self.path, "--version"], capture_output=True, text=True, timeout=30)
            return out.stdout.splitlines()[0].strip() if out.stdout else "unknown"
        except (OSError, subprocess.SubprocessError):
            return "unknown"

    def build(self, name: str, source: str):
        why = self.why_not()
        if why:
            raise NotAvailable(why)
        stem = "".join(ch if ch.isalnum() else "_" for ch in name)
        src = self.workdir / f"{stem}.c"
        lib = self.workdir / f"{stem}.so"
        src.write_text("#include <math.h>\n" + source)
        cmd = [self.path, *shlex.split(self.cflags), "-o", str(lib), str(src), "-lm"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"C compile failed ({' '.join(cmd)}):\n{proc.stderr.strip()}")
        handle = ctypes.CDLL(str(lib))
        self._libs.append(handle)
        fn = handle.kernel
        fn.restype = None
        return fn


def _c_arg(value):
    if isinstance(value, np.ndarray):
        return ctypes.c_void_p(value.ctypes.data)
    if isinstance(value, np.float32):
        return ctypes.c_float(value)
    if isinstance(value, (float, np.float64)):
        return ctypes.c_double(value)
    if isinstance(value, np.int32):
        return ctypes.c_int(value)
    if isinstance(value, (int, np.integer)):
        return ctypes.c_long(int(value))
    raise TypeError(f"cannot pass {type(value).__name__} to C")


def c_runner(bench: Bench, dims: dict, pristine: dict, cc: CCompiler) -> Runner:
    if bench.c is None:
        raise NotAvailable("no C version")
    fn = cc.build(bench.name, bench.c)

    def make_call(bufs):
        args = [ctypes.c_long(int(dims[d])) for d in bench.c_dims] + [_c_arg(bufs[n]) for n in bench.params]
        for n in bench.params:  # ctypes holds raw pointers: the arrays must stay C-contiguous in place
            if isinstance(bufs[n], np.ndarray) and not bufs[n].flags.c_contiguous:
                raise ValueError(f"{bench.name}: `{n}` is not C-contiguous")
        return lambda: fn(*args)

    return Runner(bench.params, pristine, make_call, _from_bufs(bench))


def build(variant: str, bench: Bench, dims: dict, pristine: dict, *, opts, cc: CCompiler, kernel=None) -> Runner:
    """The runner of one version; `opts` are the harness's options (fastmath, schedule, threads)."""
    if variant == "hyb":
        options = hyb_options(opts.fastmath, opts.schedule, opts.hyb_threads)
        return hyb_runner(bench, dims, pristine, options, threads=opts.hyb_threads, kernel=kernel)
    if variant == "hyb-generic":  # the shape-generic code a second shape of the kernel compiles
        import hyb

        options = hyb_options(opts.fastmath, opts.schedule, opts.hyb_threads)
        mod, entry = hyb_module(bench, dims, options)
        generic = mod.kernels[entry]
        try:
            with hyb_threads_env(opts.hyb_threads):
                generic.compile_generic(*[pristine[n] for n in bench.hyb_params])
        except hyb.HybridUnsupportedError as e:
            raise NotAvailable(str(e).splitlines()[0]) from None
        return hyb_runner(bench, dims, pristine, options, threads=opts.hyb_threads, kernel=generic)
    if variant == "hyb-par":
        return hyb_parallel_runner(bench, dims, pristine, opts.fastmath, opts.schedule, opts.threads)
    if variant in MODE_VARIANTS:
        return hyb_mode_runner(variant, bench, dims, pristine, opts.schedule, opts.hyb_threads)
    if variant == "numba":
        return numba_runner(bench, pristine, parallel=False, fastmath=opts.fastmath)
    if variant == "numba-par":
        return numba_runner(bench, pristine, parallel=True, fastmath=opts.fastmath)
    if variant == "numpy":
        return numpy_runner(bench, pristine)
    if variant == "c":
        return c_runner(bench, dims, pristine, cc)
    if variant in ML_PEERS:
        raise ValueError(f"{variant} runs in a child process of its own (benchmarks/ml_peers.py), not as a runner")
    raise ValueError(f"unknown variant {variant!r}")
