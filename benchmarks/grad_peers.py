"""Peers of the gradient kernels (`--grad`): the forward and backward pass of each kernel of
grad.GRAD_KERNELS as an ML user writes it in PyTorch and in JAX, timed in the same benchmark run
as hyb's gradient kernel.

- ``torch``: eager autograd, ``outs = f(*inputs); torch.autograd.grad(outs, inputs, douts)``;
- ``torch-compile``: the same with ``f`` wrapped in ``torch.compile`` (Inductor); its first call,
  which compiles the forward and the backward graphs, is timed apart as its compile time;
- ``jax``: ``jax.jit`` of a function that runs ``jax.vjp`` of ``f`` and applies it to the douts,
  returning the gradients (as hyb's gradient kernel returns only the gradients); its first call
  (trace and XLA compile) is likewise its compile time.

Each ``f`` computes what the hybrid kernel computes, in the kernel's dtype (float32; gemm and
jacobi-2d are PolyBench's float64 kernels): the library call where there is one (softmax,
log-softmax, layer and RMS norm, tanh-form GELU, SiLU, conv2d, max pool with indices) and the
formula otherwise, with the kernel's constants (the hybrid GELU's 0.7978845608 is sqrt(2/pi)
rounded; in float32 the two are the same number). Every peer's gradients are checked against the
NumPy reference of grad.py before it is timed; one that disagrees is reported as MISMATCH and
not timed.

Each framework runs in a child process of its own (``python -m benchmarks.grad_peers``), so
that its thread settings are in place before it is imported: the peers run on as many threads
as hyb's gradient kernel (``--hyb-threads``, one by default). PyTorch gets
``torch.set_num_threads`` (and OMP_NUM_THREADS/MKL_NUM_THREADS); Inductor sizes its OpenMP
loops from that when it compiles. XLA's CPU client sizes its thread pools from the CPUs the
process may run on, so the JAX child is also confined to that many CPUs (``sched_setaffinity``,
before jax is imported), besides ``--xla_cpu_multi_thread_eigen=false`` in XLA_FLAGS for one
thread. Each child measures the CPU time its process used over the wall time of a stretch of
calls of each peer (about 1.0 on one thread) and reports it with the threads it set.
Inductor compiles into a fresh cache directory, so its compile time is a cold one.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PEERS = ("torch", "torch-compile", "jax")
LABELS = {"torch": "torch eager", "torch-compile": "torch.compile", "jax": "JAX"}
FRAMEWORK = {"torch": "torch", "torch-compile": "torch", "jax": "jax"}
INSTALL = {"torch": "pip install torch --index-url https://download.pytorch.org/whl/cpu (or the `bench` extra)",
           "jax": "pip install jax (or the `bench` extra)"}
TIMEOUT_S = 1800  # one framework's child process for one kernel: imports, compiles, checks and timing
REPO = Path(__file__).resolve().parent.parent

# The whole 100-step jacobi-2d loop under torch.compile became one C++ kernel that gcc 12 stopped
# on with an internal compiler error after four minutes; the loop calls a compiled time step instead.
COMPILE_PER_STEP = {"jacobi-2d": "torch.compile of one time step (both sweeps), called TSTEPS times: compiling "
                                 "the whole unrolled loop made Inductor emit one C++ kernel that gcc 12 failed on "
                                 "(internal compiler error after 4 min)"}


def new_peer(status: str = "ok", **kw) -> dict:
    d = {"status": status, "time": None, "samples": 0, "compile_s": None, "check": None, "error": None,
         "threads": None, "thread_setting": None, "cpu_per_wall": None, "os_threads": None, "version": None,
         "note": None}
    d.update(kw)
    return d


def wanted(spec: str | None) -> list:
    """The peers named by --grad-peers (`none`: none)."""
    if spec is None:
        return list(PEERS)
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if names == ["none"]:
        return []
    bad = [n for n in names if n not in PEERS]
    if bad:
        raise ValueError(f"unknown gradient peer(s) {', '.join(bad)}; choose from {', '.join(PEERS)} or none")
    return [p for p in PEERS if p in names]


def installed(framework: str) -> bool:
    return importlib.util.find_spec(framework) is not None


def versions() -> dict:
    """torch's and jax's versions as installed (read without importing them)."""
    from importlib import metadata

    out = {}
    for name in ("torch", "jax", "jaxlib"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


# ------------------------------------------------------------------ the parent's side

def inputs_of(bench, dims: dict, pristine: dict) -> tuple:
    """(arrays that get gradients, by name, in the kernel's order; scalar constants; float outputs'
    positions among the kernel's outputs)."""
    arrays = {p: pristine[p] for p in bench.hyb_params
              if isinstance(pristine[p], np.ndarray) and pristine[p].dtype.kind == "f"}
    consts = {p: float(pristine[p]) for p in bench.hyb_params if p not in arrays}
    for k, v in dims.items():  # the sizes, for a loop count such as jacobi-2d's TSTEPS
        consts.setdefault(k.lower(), int(v))
    float_outs = [k for k, o in enumerate(bench.outputs) if pristine[o].dtype.kind == "f"]
    return arrays, consts, float_outs


def run(bench, opts, dims: dict, pristine: dict, threads: int, peers=None, log=None) -> dict:
    """Every peer of `peers` for one kernel at this size: {peer: result} (see new_peer)."""
    from . import grad as gradbench

    peers = list(PEERS) if peers is None else list(peers)
    results = {}
    if not peers:
        return results
    arrays, consts, float_outs = inputs_of(bench, dims, pristine)
    douts = gradbench.make_douts([pristine[o] for o in bench.outputs])
    ref = gradbench.reference_grads(bench, {p: pristine[p] for p in bench.hyb_params}, douts, dims)
    ref = [r for p, r in zip(bench.hyb_params, ref) if p in arrays]
    rtol, atol = gradbench.grad_tolerance(bench)
    workdir = Path(tempfile.mkdtemp(prefix="hyb-grad-peers-"))
    try:
        data = {f"in_{k}": a for k, a in enumerate(arrays.values())}
        data.update({f"dout_{k}": douts[i] for k, i in enumerate(float_outs)})
        data.update({f"ref_{k}": r for k, r in enumerate(ref)})
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
                    "n_inputs": len(arrays), "n_douts": len(float_outs), "rtol": rtol, "atol": atol,
                    "repeat": opts.repeat, "min_time": opts.min_time, "budget": opts.budget}
            results.update(run_child(fw, spec, workdir, threads, log))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return results


def child_env(framework: str, threads: int, workdir: Path, environ=None) -> dict:
    """The environment of a peer's child process: its threads, a fresh Inductor cache, CPU-only JAX."""
    env = dict(os.environ if environ is None else environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = str(threads)
    if framework == "torch":
        env["TORCHINDUCTOR_CACHE_DIR"] = str(workdir / "inductor")
    else:
        env["JAX_PLATFORMS"] = "cpu"
        flags = env.get("XLA_FLAGS", "")
        if threads == 1 and "xla_cpu_multi_thread_eigen" not in flags:
            env["XLA_FLAGS"] = (flags + " --xla_cpu_multi_thread_eigen=false").strip()
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_child(framework: str, spec: dict, workdir: Path, threads: int, log=None,
              module: str = "benchmarks.grad_peers") -> dict:
    """One framework's peers in a child process (`python -m <module>`), as {peer: result}."""
    out = workdir / f"{framework}.json"
    (workdir / f"{framework}-spec.json").write_text(json.dumps(spec))
    cmd = [sys.executable, "-m", module, "--framework", framework,
           "--spec", str(workdir / f"{framework}-spec.json"), "--data", str(workdir / "data.npz"), "--out", str(out)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=child_env(framework, threads, workdir), capture_output=True,
                              text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {p: new_peer("ERROR", error=f"the {framework} process ran past {TIMEOUT_S} s") for p in spec["peers"]}
    if proc.returncode == 0 and out.exists():
        res = json.loads(out.read_text())
        if log:
            log(f"    {framework} peers of {spec['kernel']}: " + ", ".join(
                f"{LABELS[p]} " + (f"{r['time'] * 1e3:.3g} ms" if r.get("time") else r["status"])
                for p, r in res.items()) + f" ({time.perf_counter() - t0:.1f} s)")
        return res
    tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-3:]
    why = f"the {framework} process failed (exit status {proc.returncode})" + (": " + " | ".join(tail) if tail else "")
    return {p: new_peer("ERROR", error=why) for p in spec["peers"]}


# ------------------------------------------------------------------ the functions, as a user writes them

def torch_functions() -> dict:
    """kernel name -> f(consts, *arrays) -> tuple of the kernel's float outputs, in PyTorch."""
    import torch
    import torch.nn.functional as F

    def layernorm(c, x, gamma, beta):
        return (F.layer_norm(x, (x.shape[1],), gamma, beta, c["eps"]),)

    def rmsnorm(c, x, gamma):
        if hasattr(F, "rms_norm"):
            return (F.rms_norm(x, (x.shape[1],), gamma, c["eps"]),)
        return (x * torch.rsqrt((x * x).mean(dim=1, keepdim=True) + c["eps"]) * gamma,)

    def silu_chain(c, a, b, cc):
        return (F.silu(a * b + cc) + torch.exp(-a.abs()),)

    def attention(c, q, k, v):
        return (torch.softmax((q @ k.transpose(1, 2)) * 0.125, dim=-1) @ v,)

    def max_pool(c, x):
        y, _ = F.max_pool2d(x, 2, 2, return_indices=True)  # the indices carry no gradient
        return (y,)

    def jacobi_step(A, B):
        B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1])
        A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1])
        return A, B

    def jacobi_2d(c, A, B):
        A, B = A.clone(), B.clone()
        for _ in range(c["tsteps"]):
            A, B = jacobi_step(A, B)
        return A, B

    def jacobi_2d_stepwise(step):
        def f(c, A, B):
            for _ in range(c["tsteps"]):
                A, B = step(A, B)
            return A, B
        return f

    def fresh_step(A, B):  # the compiled unit: one time step on copies of its arguments
        return jacobi_step(A.clone(), B.clone())

    fns = {
        "softmax": lambda c, x: (torch.softmax(x, dim=1),),
        "log-softmax": lambda c, x: (torch.log_softmax(x, dim=1),),
        "layernorm": layernorm,
        "rmsnorm": rmsnorm,
        "gelu": lambda c, x: (F.gelu(x, approximate="tanh"),),
        "silu-chain": silu_chain,
        "conv2d": lambda c, x, w: (F.conv2d(x, w),),
        "gemm": lambda c, C, A, B: (c["beta"] * C + c["alpha"] * (A @ B),),
        "attention": attention,
        "max-pool": max_pool,
        "jacobi-2d": jacobi_2d,
    }
    # how torch.compile is applied: to f itself, unless a kernel compiles a part of it
    compiled = {"jacobi-2d": lambda: jacobi_2d_stepwise(torch.compile(fresh_step))}
    return fns, compiled


def jax_functions() -> dict:
    """kernel name -> f(consts, *arrays) -> (tuple of the kernel's float outputs, aux), in JAX."""
    import jax
    import jax.numpy as jnp

    def layernorm(c, x, gamma, beta):
        mean = x.mean(axis=1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
        return ((x - mean) / jnp.sqrt(var + c["eps"]) * gamma + beta,), None

    def rmsnorm(c, x, gamma):
        return (x * jax.lax.rsqrt((x * x).mean(axis=1, keepdims=True) + c["eps"]) * gamma,), None

    def silu_chain(c, a, b, cc):
        return (jax.nn.silu(a * b + cc) + jnp.exp(-jnp.abs(a)),), None

    def conv2d(c, x, w):
        return (jax.lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW")),), None

    def attention(c, q, k, v):
        return (jax.nn.softmax((q @ k.transpose(0, 2, 1)) * 0.125, axis=-1) @ v,), None

    def max_pool(c, x):
        nb, ch, h, w = x.shape
        ph, pw = h // 2, w // 2
        win = x[:, :, :2 * ph, :2 * pw].reshape(nb, ch, ph, 2, pw, 2).transpose(0, 1, 2, 4, 3, 5)
        win = win.reshape(nb, ch, ph, pw, 4)
        j = jnp.argmax(win, axis=-1)
        idx = (2 * jnp.arange(ph)[:, None] + j // 2) * w + 2 * jnp.arange(pw) + j % 2
        return (win.max(axis=-1),), idx.astype(jnp.int32)

    def jacobi_2d(c, A, B):
        for _ in range(c["tsteps"]):
            B = B.at[1:-1, 1:-1].set(0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1]))
            A = A.at[1:-1, 1:-1].set(0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1]))
        return (A, B), None

    return {
        "softmax": lambda c, x: ((jax.nn.softmax(x, axis=1),), None),
        "log-softmax": lambda c, x: ((jax.nn.log_softmax(x, axis=1),), None),
        "layernorm": layernorm,
        "rmsnorm": rmsnorm,
        "gelu": lambda c, x: ((jax.nn.gelu(x, approximate=True),), None),
        "silu-chain": silu_chain,
        "conv2d": conv2d,
        "gemm": lambda c, C, A, B: ((c["beta"] * C + c["alpha"] * (A @ B),), None),
        "attention": attention,
        "max-pool": max_pool,
        "jacobi-2d": jacobi_2d,
    }


# ------------------------------------------------------------------ the child process

class _Timed:
    """A peer seen by harness.time_runners: nothing to reset, one call is one forward and backward."""

    def __init__(self, call):
        self.call = call

    def reset(self, _pristine):
        pass


def _os_threads() -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def cpu_per_wall(call, seconds: float = 0.3, least: int = 3) -> float:
    """CPU time of this process over wall time across repeated calls (about the cores it kept busy)."""
    n = 0
    c0, t0 = time.process_time(), time.perf_counter()
    while n < least or time.perf_counter() - t0 < seconds:
        call()
        n += 1
    wall = time.perf_counter() - t0
    return (time.process_time() - c0) / wall if wall > 0 else None


def confine(threads: int) -> str:
    """Keep this process to `threads` CPUs when it may run on more; returns what was done."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return "CPU affinity not available"
    if threads >= len(cpus):
        return f"all {len(cpus)} CPUs it may run on"
    keep = cpus[-threads:]
    os.sched_setaffinity(0, keep)
    return f"CPU affinity {','.join(map(str, keep))}"


def agree(got, want, rtol, atol) -> tuple:
    from .report import agrees

    return agrees([np.asarray(g) for g in got], want, rtol, atol)


def child_setup(ap: argparse.ArgumentParser, argv) -> tuple:
    """A peer child's arguments, read with ``ap``: ``(args, spec, threads, thread setting so
    far)``; a JAX child is confined to its CPUs here, before jax is imported (XLA sizes its pools
    from the CPUs allowed)."""
    ap.add_argument("--framework", choices=("torch", "jax"), required=True)
    ap.add_argument("--spec", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    spec = json.loads(Path(a.spec).read_text())
    threads = int(spec["threads"])
    setting = ""
    if a.framework == "jax":
        setting = f"{confine(threads)}; XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}"
    return a, spec, threads, setting


def time_peers(runners: dict, results: dict, spec: dict):
    """Time the peers that passed their check (``runners``: peer -> call) and record it in
    ``results``."""
    if not runners:
        return
    from .harness import time_runners

    opts = argparse.Namespace(min_time=spec["min_time"], budget=spec["budget"])
    times, samples = time_runners({p: _Timed(c) for p, c in runners.items()}, {}, opts, spec["repeat"])
    for p in runners:
        results[p]["time"] = times.get(p)
        results[p]["samples"] = samples.get(p, 0)
        results[p]["cpu_per_wall"] = cpu_per_wall(runners[p])
        results[p]["os_threads"] = _os_threads()


def child(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.grad_peers",
                                 description="One framework's gradient peers for one kernel (started by the "
                                             "benchmark harness with --grad).")
    a, spec, threads, setting = child_setup(ap, argv)
    with np.load(a.data) as z:
        arrays = [z[f"in_{k}"] for k in range(spec["n_inputs"])]
        douts = [z[f"dout_{k}"] for k in range(spec["n_douts"])]
        refs = [z[f"ref_{k}"] for k in range(spec["n_inputs"])]
    consts = spec["consts"]
    name = spec["kernel"]
    results, runners = {}, {}
    if a.framework == "torch":
        import torch

        torch.set_num_threads(threads)
        version = torch.__version__
        setting = f"torch.set_num_threads({threads}), OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}"
        fns, compiled = torch_functions()
        leaves = [torch.from_numpy(x).requires_grad_() for x in arrays]
        touts = [torch.from_numpy(d) for d in douts]
        for peer in spec["peers"]:
            r = results[peer] = new_peer(threads=threads, thread_setting=setting, version=version)
            try:
                if peer == "torch":
                    f = fns[name]
                else:
                    f = compiled[name]() if name in compiled else torch.compile(fns[name])
                    r["note"] = COMPILE_PER_STEP.get(name)

                def call(f=f):
                    return torch.autograd.grad(f(consts, *leaves), leaves, touts)

                t0 = time.perf_counter()
                got = call()
                r["compile_s"] = time.perf_counter() - t0
                for _ in range(2):
                    got = call()
                ok, r["check"] = agree([g.detach().numpy() for g in got], refs, spec["rtol"], spec["atol"])
                if not ok:
                    r["status"] = "MISMATCH"
                    r["error"] = f"gradients differ from the NumPy reference (error {r['check']:.3g})"
                    continue
                runners[peer] = call
            except Exception as e:  # noqa: BLE001 - a peer that fails is a result to report
                r["status"] = "ERROR"
                r["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
    else:
        import jax

        jax.config.update("jax_enable_x64", True)  # for the float64 kernels; float32 arrays stay float32
        version = f"{jax.__version__} (jaxlib {versions()['jaxlib']})"
        setting = f"{setting}; {threads} thread{'s' if threads != 1 else ''}"
        fns = jax_functions()
        jarrays = tuple(jax.numpy.asarray(x) for x in arrays)
        jdouts = tuple(jax.numpy.asarray(d) for d in douts)
        r = results["jax"] = new_peer(threads=threads, thread_setting=setting, version=version)
        try:
            f = fns[name]

            def grads(xs, ds):
                _, back, _ = jax.vjp(lambda *x: f(consts, *x), *xs, has_aux=True)
                return back(ds)

            g = jax.jit(grads)

            def call():
                return jax.block_until_ready(g(jarrays, jdouts))

            t0 = time.perf_counter()
            got = call()
            r["compile_s"] = time.perf_counter() - t0
            got = call()
            ok, r["check"] = agree([np.asarray(x) for x in got], refs, spec["rtol"], spec["atol"])
            if not ok:
                r["status"] = "MISMATCH"
                r["error"] = f"gradients differ from the NumPy reference (error {r['check']:.3g})"
            else:
                runners["jax"] = call
        except Exception as e:  # noqa: BLE001
            r["status"] = "ERROR"
            r["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
    time_peers(runners, results, spec)
    Path(a.out).write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(child())
