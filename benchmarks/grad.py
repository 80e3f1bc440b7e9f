"""The gradient column (`--grad`): hyb's gradient kernel (``kernel.grad()``, called with the
forward inputs and one dout per output) timed beside the forward kernel, for the kernels of
GRAD_KERNELS. Before it is timed, each gradient is checked against a NumPy reference gradient, on
the mini size and on the size being run; benchmarks/grad_peers.py times PyTorch and JAX computing
the same gradients.

The references differentiate the hybrid kernels as written (gemm's C = beta*C + alpha*A*B, the
in-place jacobi-2d over TSTEPS steps, layernorm's population variance with eps inside the root,
RMSNorm's eps added to the mean square, GELU's tanh form with its two constants, attention's
scale of 0.125 applied after the row maximum is subtracted, the max pool's first maximum of each
window); they are computed in float64 from the same inputs.
"""
from __future__ import annotations

import re
import time

import numpy as np

from .peers import Runner, hyb_module, hyb_options, hyb_threads_env
from .report import GRAD_TARGET as TARGET_RATIO  # noqa: F401 - the target: at most 2.5x the forward time
from .report import agrees

GRAD_KERNELS = ("softmax", "log-softmax", "layernorm", "rmsnorm", "gelu", "silu-chain", "conv2d", "gemm",
                "attention", "max-pool", "jacobi-2d")


# ------------------------------------------------------------------ NumPy reference gradients
# Each takes the kernel's arguments (a dict by parameter name, as float64) and the douts (a list, one
# per output, float64) and returns one gradient per hybrid parameter (None for scalar parameters).

def _gemm(a, douts):
    (g,) = douts
    alpha, beta, A, B = float(a["alpha"]), float(a["beta"]), a["A"], a["B"]
    return [None, None, beta * g, alpha * g @ B.T, alpha * A.T @ g]


def _conv2d(a, douts):
    (g,) = douts                                        # n k p q
    x, w = a["x"], a["w"]
    r, s = w.shape[2], w.shape[3]
    p, q = g.shape[2], g.shape[3]
    dx = np.zeros_like(x)
    dw = np.zeros_like(w)
    for rr in range(r):
        for ss in range(s):
            win = x[:, :, rr:rr + p, ss:ss + q]         # n c p q
            dw[:, :, rr, ss] = np.einsum("nkpq,ncpq->kc", g, win)
            dx[:, :, rr:rr + p, ss:ss + q] += np.einsum("nkpq,kc->ncpq", g, w[:, :, rr, ss])
    return [dx, dw]


def _softmax(a, douts):
    (g,) = douts
    x = a["x"]
    e = np.exp(x - x.max(axis=1, keepdims=True))
    y = e / e.sum(axis=1, keepdims=True)
    return [y * (g - (g * y).sum(axis=1, keepdims=True))]


def _layernorm(a, douts):
    (g,) = douts
    x, gamma, eps = a["x"], a["gamma"], float(a["eps"])
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    r = 1.0 / np.sqrt(var + eps)
    xhat = (x - mean) * r
    dxhat = g * gamma
    dx = r * (dxhat - dxhat.mean(axis=1, keepdims=True) - xhat * (dxhat * xhat).mean(axis=1, keepdims=True))
    return [dx, (g * xhat).sum(axis=0), g.sum(axis=0), None]


def _log_softmax(a, douts):
    (g,) = douts
    x = a["x"]
    e = np.exp(x - x.max(axis=1, keepdims=True))
    y = e / e.sum(axis=1, keepdims=True)
    return [g - y * g.sum(axis=1, keepdims=True)]


def _rmsnorm(a, douts):
    (g,) = douts
    x, gamma, eps = a["x"], a["gamma"], float(a["eps"])
    d = x.shape[1]
    r = 1.0 / np.sqrt((x * x).sum(axis=1, keepdims=True) / d + eps)
    # out = x * r * gamma with dr/dx_j = -r^3 x_j / d
    dx = g * gamma * r - (r ** 3 / d) * x * (g * gamma * x).sum(axis=1, keepdims=True)
    return [dx, (g * x * r).sum(axis=0), None]


GELU_C0, GELU_C1 = 0.7978845608, 0.044715  # the constants of the hybrid kernel's tanh form


def _gelu(a, douts):
    (g,) = douts
    v = a["x"]
    t = np.tanh(GELU_C0 * (v + GELU_C1 * v ** 3))
    return [g * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * GELU_C0 * (1.0 + 3.0 * GELU_C1 * v * v))]


def _silu_chain(a, douts):
    (g,) = douts
    x, y, z = a["a"], a["b"], a["c"]
    t1 = x * y + z
    sig = 1.0 / (1.0 + np.exp(-t1))
    dt1 = g * (sig + t1 * sig * (1.0 - sig))
    # out += exp(-|a|): abs'(0) = 0
    return [dt1 * y - g * np.sign(x) * np.exp(-np.abs(x)), dt1 * x, dt1]


def _attention(a, douts):
    (g,) = douts                                        # h n d
    q, k, v = a["q"], a["k"], a["v"]
    s = q @ k.transpose(0, 2, 1)
    e = np.exp((s - s.max(axis=2, keepdims=True)) * 0.125)
    p = e / e.sum(axis=2, keepdims=True)
    dp = g @ v.transpose(0, 2, 1)
    ds = 0.125 * p * (dp - (dp * p).sum(axis=2, keepdims=True))
    return [ds @ k, ds.transpose(0, 2, 1) @ q, p.transpose(0, 2, 1) @ g]


def _max_pool(a, douts):
    g = douts[0]                                        # the argmax output carries no gradient
    x = a["x"]
    nb, c, h, w = x.shape
    ph, pw = h // 2, w // 2
    win = x[:, :, :2 * ph, :2 * pw].reshape(nb, c, ph, 2, pw, 2).transpose(0, 1, 2, 4, 3, 5).reshape(nb, c, ph, pw, 4)
    first = win.argmax(axis=-1)                         # the running maximum keeps the first of equal values
    sel = (np.arange(4) == first[..., None]) * g[..., None]
    dx = np.zeros_like(x)
    dx[:, :, :2 * ph, :2 * pw] = sel.reshape(nb, c, ph, pw, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(nb, c, 2 * ph, 2 * pw)
    return [dx]


def _stencil_adjoint(g, out):
    """Adds the transpose of `dst[1:-1, 1:-1] = 0.2 * (5-point sum of src)` applied to g (interior) into out."""
    gi = 0.2 * g[1:-1, 1:-1]
    out[1:-1, 1:-1] += gi
    out[1:-1, :-2] += gi
    out[1:-1, 2:] += gi
    out[2:, 1:-1] += gi
    out[:-2, 1:-1] += gi


def _jacobi2d(a, douts, tsteps):
    gA, gB = (d.copy() for d in douts)
    for _ in range(tsteps):
        # A[interior] = S(B): the adjoint of the old interior of A is gone, B's gains S^T gA
        _stencil_adjoint(gA, gB)
        gA[1:-1, 1:-1] = 0.0
        # B[interior] = S(A)
        _stencil_adjoint(gB, gA)
        gB[1:-1, 1:-1] = 0.0
    return [gA, gB]


REFERENCES = {
    "softmax": lambda a, d, dims: _softmax(a, d),
    "log-softmax": lambda a, d, dims: _log_softmax(a, d),
    "layernorm": lambda a, d, dims: _layernorm(a, d),
    "rmsnorm": lambda a, d, dims: _rmsnorm(a, d),
    "gelu": lambda a, d, dims: _gelu(a, d),
    "silu-chain": lambda a, d, dims: _silu_chain(a, d),
    "conv2d": lambda a, d, dims: _conv2d(a, d),
    "gemm": lambda a, d, dims: _gemm(a, d),
    "attention": lambda a, d, dims: _attention(a, d),
    "max-pool": lambda a, d, dims: _max_pool(a, d),
    "jacobi-2d": lambda a, d, dims: _jacobi2d(a, d, dims["TSTEPS"]),
}


def reference_grads(bench, args: dict, douts: list, dims: dict) -> list:
    a64 = {k: (v.astype(np.float64) if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    return REFERENCES[bench.name](a64, [np.asarray(d, np.float64) for d in douts], dims)


# ------------------------------------------------------------------ running the gradient kernel

def make_douts(outputs) -> list:
    """One deterministic random dout per forward output, shaped and typed like it."""
    rng = np.random.default_rng(20261121)
    return [rng.standard_normal(o.shape).astype(o.dtype) for o in outputs]


def _tuple(x):
    return x if isinstance(x, tuple) else (x,)


def _copies(args):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def grad_tolerance(bench) -> tuple:
    """(rtol, atol relative to the largest |reference|): ten times the forward check's."""
    return bench.rtol * 10, bench.atol * 10


def check(bench, kernel, grad_kernel, pristine: dict, dims: dict) -> tuple:
    """Run the gradient kernel once on `pristine` and compare with the NumPy reference:
    (ok, largest relative error, douts, what differs or None)."""
    args = [pristine[p] for p in bench.hyb_params]
    outs = [np.asarray(o) for o in _tuple(kernel(*_copies(args)))]
    douts = make_douts(outs)
    got = list(_tuple(grad_kernel(*_copies(args), *douts)))
    want = reference_grads(bench, dict(zip(bench.hyb_params, args)), douts, dims)
    if len(got) != len(want):
        return False, float("inf"), douts, f"{len(got)} gradients for {len(want)} inputs"
    rtol, atol = grad_tolerance(bench)
    worst, bad = 0.0, []
    for name, g, w in zip(bench.hyb_params, got, want):
        if w is None:
            if g is not None:
                bad.append(f"`{name}` (a scalar) got a gradient")
            continue
        if g is None:
            bad.append(f"no gradient for `{name}`")
            continue
        ok, err = agrees([g], [w], rtol, atol)
        worst = max(worst, err)
        if not ok:
            bad.append(f"d{name} differs (error {err:.3g})")
    return not bad, worst, douts, "; ".join(bad) or None


def tape_bytes(kernel, args) -> int | None:
    try:
        m = re.search(r"tape: (\d+) bytes", kernel.compile(*args).inspect("grad"))
    except Exception:  # noqa: BLE001 - the tape size is informative only
        return None
    return int(m.group(1)) if m else None


def new_grad_row() -> dict:
    return {"status": "ok", "check_mini": None, "check": None, "time": None, "forward": None, "ratio": None,
            "grad_compile_s": None, "tape_bytes": None, "samples": 0, "error": None}


def build(bench, opts, kernel, pristine: dict, dims: dict, mini_dims: dict, mini_pristine: dict, info: dict):
    """Check the gradient (mini size, then this size) and return a Runner for timing it; fills `info`
    (a row's "grad" entry). Raises on a failure to build or run; returns None if a check fails."""
    options = hyb_options(opts.fastmath, opts.schedule, opts.hyb_threads)
    # 1. mini size, a kernel of its own (the module constants differ between sizes)
    mod, entry = hyb_module(bench, mini_dims, options, entry_suffix="_gradcheck")
    mini_kernel = mod.kernels[entry]
    with hyb_threads_env(opts.hyb_threads):
        ok, err, _, why = check(bench, mini_kernel, mini_kernel.grad(), mini_pristine, mini_dims)
    info["check_mini"] = err
    if not ok:
        info["status"] = "MISMATCH"
        info["error"] = f"mini size: {why}"
        return None
    # 2. this size: the gradient of the kernel that is timed
    args = [pristine[p] for p in bench.hyb_params]
    with hyb_threads_env(opts.hyb_threads):
        douts = make_douts([np.asarray(o) for o in _tuple(kernel(*_copies(args)))])
        t0 = time.perf_counter()
        g = kernel.grad()
        g.compile(*args, *douts)
        info["grad_compile_s"] = time.perf_counter() - t0
        ok, err, douts, why = check(bench, kernel, g, pristine, dims)
    info["check"] = err
    info["tape_bytes"] = tape_bytes(kernel, args)
    if not ok:
        info["status"] = "MISMATCH"
        info["error"] = why
        return None
    names = list(bench.hyb_params) + [f"__dout{k}" for k in range(len(douts))]
    data = {**pristine, **{f"__dout{k}": d for k, d in enumerate(douts)}}

    def make_call(bufs):
        call_args = [bufs[n] for n in names]
        return lambda: g(*call_args)

    runner = Runner(names, data, make_call, lambda bufs, ret: list(_tuple(ret)))
    runner.pristine = data
    return runner


class GradRunner:
    """The gradient's Runner seen by the timing loop: it resets from its own data (inputs and douts)."""

    def __init__(self, runner):
        self.runner = runner
        self.call = runner.call

    def reset(self, _pristine):
        self.runner.reset(self.runner.pristine)
