"""CUDA back end: loop IR → CUDA C source (compiled by nvcc through pycuda, or by hand).

The kernel's loop IR is split at its loops marked ``parallel``:

* a loop marked parallel becomes one ``__global__`` function launched over a 1-D grid of its
  iterations (blocks of :data:`BLOCK_1D` threads; a thread runs one iteration, the loops
  inside it run serially in that thread), or over a 2-D grid when the loop's body is exactly
  one more loop that carries no dependence either (blocks of :data:`BLOCK_2D`: x over the
  inner loop, y over the outer one).  Partial tiles are guarded by the trip counts, which the
  host computes (shapes are constants, so every bound is known before the launch);
* a run of statements and loops with no parallel loop inside becomes a ``__global__``
  function launched as one block of one thread;
* loops and conditions *around* a parallel loop are walked by the host (:class:`HostFor`,
  :class:`HostIf`), which launches the kernels inside with the current counters as
  arguments.  Launches on one stream run in order, which is the barrier between them.

Tensors are global-memory pointers (``__restrict__``: no two alias, as the CPU path's
``noalias``), inputs in parameter order, then outputs and temporaries (``allocate``) in order
of declaration (:func:`hyb.codegen.llvm.buffer_order` without the scalar parameters), then the
scalar parameters by value in parameter order.  Scalar locals live in a global block of 8-byte slots (``sc``): every
kernel copies the ones it uses into registers; a one-thread kernel writes them back, a grid
kernel does not (each thread's copies are private, as the CPU path's threads' copies are).
A reduction into one element over a loop inside a thread (``c[i, j] += ...`` over ``k``)
is kept in that thread, and ``__restrict__`` lets nvcc keep the accumulator in a register.

Numerics mirror :mod:`hyb.codegen.llvm` operation for operation: float16 is ``__half`` in
memory and in registers, every operation computed in float and rounded back; integer
arithmetic wraps; ``//`` and ``%`` follow NumPy (division by zero gives 0); NaN-propagating
max/min; ``round`` is ``rint``; float → int casts truncate as x86 does (out of range: the
minimum of the int32/int64 it goes through).  Compile with ``-fmad=false`` (no contraction
of ``a * b + c``, as LLVM without fast-math) unless fast-math was asked for.

Run-time bounds checks write ``index, axis, site`` into ``err`` (the first failure wins) and
return; every kernel starts by returning if ``err[2]`` is set, and the host raises the same
:class:`~hyb.errors.HybridIndexError` as the CPU path.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field

import numpy as np

from ..dsl import tir as T
from ..dsl import types as ty
from ..errors import HybridInternalError, HybridUnsupportedError
from ..schedule import loops as L
from .llvm import CheckSite, buffer_order

BLOCK_1D = 256
BLOCK_2D = (32, 8)
GRID_STRIDE_BLOCKS = 1024  # blocks of a grid whose trip count the host cannot compute

CTYPES = {
    "bool": "unsigned char", "int8": "signed char", "uint8": "unsigned char", "int16": "short",
    "uint16": "unsigned short", "int32": "int", "uint32": "unsigned int", "int64": "long long",
    "uint64": "unsigned long long", "float16": "__half", "float32": "float", "float64": "double",
}
# The unsigned type integer arithmetic of a dtype is done in (wrapping, never undefined).
_UNSIGNED_OF = {"int8": "unsigned int", "uint8": "unsigned int", "int16": "unsigned int", "uint16": "unsigned int",
                "int32": "unsigned int", "uint32": "unsigned int", "int64": "unsigned long long",
                "uint64": "unsigned long long"}
_INT_BITS = {"int8": 8, "uint8": 8, "int16": 16, "uint16": 16, "int32": 32, "uint32": 32, "int64": 64, "uint64": 64}

# No contraction of a * b + c into fma (LLVM without fast-math contracts nothing); no remarks on the
# user's own comparisons of unsigned values with 0 (#186).
NVCC_OPTIONS = ["-fmad=false", "-diag-suppress=186"]
NVCC_FASTMATH_OPTIONS = ["--use_fast_math", "-diag-suppress=186"]

PRELUDE = r"""#include <cuda_fp16.h>

typedef long long hyb_i64;

__device__ __forceinline__ float hyb_h2f(__half x) { return __half2float(x); }
__device__ __forceinline__ __half hyb_f2h(float x) { return __float2half_rn(x); }
__device__ __forceinline__ __half hyb_hbits(unsigned short b) { return __ushort_as_half(b); }

/* float64 -> float32 rounding to odd, then to float16: one rounding in all (as the CPU path). */
__device__ __forceinline__ __half hyb_d2h(double v) {
    float f = (float)v;
    bool inexact = ((double)f != v) && (fabsf(f) < __int_as_float(0x7f800000));
    return __float2half_rn(__int_as_float(__float_as_int(f) | (inexact ? 1 : 0)));
}

/* NumPy's floor_divide and remainder for integers; a zero divisor gives 0, MIN // -1 wraps. */
template <typename T, typename U> __device__ __forceinline__ T hyb_sfloordiv(T a, T b) {
    if (b == 0) return (T)0;
    if (b == (T)-1) return (T)((U)0 - (U)a);
    T q = (T)(a / b);
    T r = (T)(a % b);
    if (r != 0 && ((r < 0) != (b < 0))) q = (T)((U)q - (U)1);
    return q;
}
template <typename T, typename U> __device__ __forceinline__ T hyb_sfloormod(T a, T b) {
    if (b == 0 || b == (T)-1) return (T)0;
    T r = (T)(a % b);
    if (r != 0 && ((r < 0) != (b < 0))) r = (T)((U)r + (U)b);
    return r;
}
template <typename T> __device__ __forceinline__ T hyb_ufloordiv(T a, T b) { return b == 0 ? (T)0 : (T)(a / b); }
template <typename T> __device__ __forceinline__ T hyb_ufloormod(T a, T b) { return b == 0 ? (T)0 : (T)(a % b); }

/* a ** n wrapping; a negative n gives 1 / a**-n truncated toward zero. */
template <typename T, typename U> __device__ __forceinline__ T hyb_ipow(T a, T n, bool is_unsigned) {
    U acc = 1, base = (U)a, rest = (!is_unsigned && n < 0) ? (U)0 : (U)n;
    while (rest != 0) {
        if (rest & 1) acc = (U)(acc * base);
        base = (U)(base * base);
        rest >>= 1;
    }
    if (is_unsigned || !(n < 0)) return (T)acc;
    if (a == (T)1) return (T)1;
    if (a == (T)-1) return (n & 1) ? (T)-1 : (T)1;
    return (T)0;
}

/* NumPy's floor_divide / remainder for floats (npy_divmod). */
template <typename F> __device__ __forceinline__ F hyb_fremainder(F a, F b) {
    F mod = fmod(a, b);
    if (b == (F)0) return mod;
    bool nonzero = !(mod == (F)0);
    bool fix = nonzero && ((b < (F)0) != (mod < (F)0));
    F m = fix ? mod + b : mod;
    return nonzero ? m : copysign((F)0, b);
}
template <typename F> __device__ __forceinline__ F hyb_ffloordiv(F a, F b) {
    F mod = fmod(a, b);
    F quotient = a / b;
    if (b == (F)0) return quotient;
    bool nonzero = !(mod == (F)0);
    bool fix = nonzero && ((b < (F)0) != (mod < (F)0));
    F div = (a - mod) / b;
    if (fix) div = div - (F)1;
    F fl = floor(div);
    if (div - fl > (F)0.5) fl = fl + (F)1;
    return (div != (F)0) ? fl : copysign((F)0, quotient);
}

/* cvttsd2si: truncation toward zero, or the minimum of the type where the value does not fit. */
template <typename F> __device__ __forceinline__ int hyb_f2i32(F v) {
    return (v >= (F)-2147483648.0 && v < (F)2147483648.0) ? (int)v : (int)0x80000000u;
}
template <typename F> __device__ __forceinline__ long long hyb_f2i64(F v) {
    return (v >= (F)-9223372036854775808.0 && v < (F)9223372036854775808.0) ? (long long)v
                                                                             : (long long)0x8000000000000000ull;
}
template <typename F> __device__ __forceinline__ unsigned long long hyb_f2u64(F v) {
    if (v >= (F)9223372036854775808.0)
        return v < (F)18446744073709551616.0 ? (unsigned long long)v : 0ull;
    return (unsigned long long)hyb_f2i64(v);
}

template <typename F> __device__ __forceinline__ F hyb_sign(F x) {
    return x > (F)0 ? (F)1 : (x < (F)0 ? (F)-1 : (x == (F)0 ? (F)0 : x));
}
template <typename F> __device__ __forceinline__ F hyb_fmax(F x, F y, bool ge) {
    bool beats = ge ? (x >= y) : (x > y);
    return (beats || x != x) ? x : y;
}
template <typename F> __device__ __forceinline__ F hyb_fmin(F x, F y, bool le) {
    bool beats = le ? (x <= y) : (x < y);
    return (beats || x != x) ? x : y;
}

/* The first failing bounds check records index, axis and its site number. */
__device__ __forceinline__ void hyb_fail(volatile long long *err, long long v, long long axis, long long site) {
    if (atomicCAS((unsigned long long *)&err[2], 0ull, (unsigned long long)site) == 0ull) {
        err[0] = v;
        err[1] = axis;
    }
}

/* Loop-IR arithmetic (isl's operations on counters). */
__device__ __forceinline__ long long hyb_floord(long long a, long long b) {
    long long q = a / b, r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
}
__device__ __forceinline__ long long hyb_min(long long a, long long b) { return a < b ? a : b; }
__device__ __forceinline__ long long hyb_max(long long a, long long b) { return a > b ? a : b; }
"""


# ----------------------------------------------------------------------------- launch plan
@dataclass
class Launch:
    """One kernel launch: ``kernel`` over the grid of ``loop`` (None: one thread), with the
    host counters ``counters`` (names of enclosing host loops) passed as arguments."""

    kernel: str
    counters: list
    loop: object = None  # L.For mapped to x (1-D) or y (2-D)
    inner: object = None  # L.For mapped to x in a 2-D launch

    @property
    def dims(self) -> int:
        return 0 if self.loop is None else (2 if self.inner is not None else 1)


@dataclass
class HostFor:
    loop: object  # L.For
    body: list


@dataclass
class HostIf:
    cond: object
    then: list
    orelse: list = field(default_factory=list)


@dataclass
class GeneratedCuda:
    source: str
    plan: list  # Launch / HostFor / HostIf
    sites: list  # CheckSite, numbered from 1
    buffers: list  # tensor names passed as pointers, in order
    params: list  # scalar parameter tensor names, in order
    scalars: list  # (name, dtype) of scalar locals: slot k at byte 8*k of the scalar block
    fastmath: bool = False

    @property
    def nvcc_options(self) -> list:
        return list(NVCC_FASTMATH_OPTIONS if self.fastmath else NVCC_OPTIONS)


def trip_count(loop: L.For, env: dict) -> int | None:
    """Iterations of ``loop`` with the counters of ``env``; None when its condition is not a
    plain upper bound (the kernel then strides over a fixed grid while the condition holds)."""
    b = L.upper_bound(loop)
    if b is None:
        return None
    op, ub = b
    init = eval_lexpr(loop.init, env)
    last = eval_lexpr(ub, env) - (1 if op == "lt" else 0)
    return max(0, (last - init) // loop.step + 1)


def eval_lexpr(e, env: dict):
    """A loop-IR expression evaluated on the host (Python ints; comparisons give bools)."""
    if isinstance(e, L.LInt):
        return e.value
    if isinstance(e, L.LVar):
        return env[e.name]
    a = [eval_lexpr(x, env) for x in e.args]
    op = e.op
    if op == "add":
        return a[0] + a[1]
    if op == "sub":
        return a[0] - a[1]
    if op == "mul":
        return a[0] * a[1]
    if op == "neg":
        return -a[0]
    if op == "min":
        return min(a)
    if op == "max":
        return max(a)
    if op == "fdiv_q":
        return a[0] // a[1]
    if op in ("pdiv_q", "div"):
        q = abs(a[0]) // abs(a[1])
        return q if (a[0] >= 0) == (a[1] > 0) else -q
    if op in ("pdiv_r", "zdiv_r"):
        r = abs(a[0]) % abs(a[1])
        return r if a[0] >= 0 else -r
    if op == "select":
        return a[1] if a[0] else a[2]
    if op == "eq":
        return a[0] == a[1]
    if op == "le":
        return a[0] <= a[1]
    if op == "lt":
        return a[0] < a[1]
    if op == "ge":
        return a[0] >= a[1]
    if op == "gt":
        return a[0] > a[1]
    if op == "and":
        return a[0] and a[1]
    if op == "or":
        return a[0] or a[1]
    raise HybridInternalError(f"loop expression {op}", "codegen")


def _contains_parallel(stmts) -> bool:
    for s in stmts:
        if isinstance(s, L.For):
            if s.parallel or _contains_parallel(s.body):
                return True
        elif isinstance(s, L.If):
            if _contains_parallel(s.then) or _contains_parallel(s.orelse):
                return True
    return False


def _vars_used(nodes) -> set:
    """Names of the typed-IR loop variables that statements or expressions read."""
    out = set()
    stack = list(nodes)
    while stack:
        n = stack.pop()
        if isinstance(n, T.Store):
            stack += list(n.indices) + [n.value]
        elif isinstance(n, T.Loop):
            stack += [n.start, n.stop] + list(n.body)
        elif isinstance(n, T.If):
            stack += [n.cond] + list(n.body) + list(n.orelse)
        elif isinstance(n, T.TExpr):
            out |= {e.name for e in T.walk_expr(n) if isinstance(e, T.Var)}
    return out


# ----------------------------------------------------------------------------- code generation
def _ident(name: str) -> str:
    return re.sub(r"[^0-9A-Za-z_]", "_", name)


def _float_literal(value: float, dt: str) -> str:
    if dt == "float16":
        bits = struct.unpack("<H", struct.pack("<e", value))[0]
        return f"hyb_hbits(0x{bits:04x})"
    if dt == "float32":
        if np.isfinite(value):
            return f"{float(np.float32(value))!r}f".replace("inf", "INF")
        bits = struct.unpack("<I", struct.pack("<f", value))[0]
        return f"__int_as_float(0x{bits:08x})"
    if np.isfinite(value):
        return f"{float(value)!r}"
    bits = struct.unpack("<Q", struct.pack("<d", value))[0]
    return f"__longlong_as_double(0x{bits:016x}ll)"


def _int_literal(value: int, dt: str) -> str:
    bits = _INT_BITS[dt]
    value &= (1 << bits) - 1
    if dt in ty.UNSIGNED:
        return f"(({CTYPES[dt]}){value}ull)"
    if value >= 1 << (bits - 1):
        value -= 1 << bits
    if bits == 64:
        return f"((long long)0x{value & ((1 << 64) - 1):016x}ull)"
    return f"(({CTYPES[dt]}){value})"


class _Writer:
    def __init__(self):
        self.lines: list = []
        self.depth = 0
        self.tmp = 0

    def line(self, text: str):
        self.lines.append("    " * self.depth + text)

    def open(self, text: str):
        self.line(f"{text} {{" if text else "{")
        self.depth += 1

    def close(self, text: str = "}"):
        self.depth -= 1
        self.line(text)

    def fresh(self, base: str = "t") -> str:
        self.tmp += 1
        return f"_{base}{self.tmp}"


class _Generator:
    def __init__(self, nest: L.LoopNest, fastmath: bool = False):
        self.nest = nest
        self.k: T.TypedKernel = nest.kernel
        self.fastmath = fastmath
        self.checked = nest.runtime_checked
        self.params = [n for n in self.k.inputs if self.k.tensors[n].kind == "param"]
        self.buffers = [n for n in buffer_order(self.k) if n not in self.params]
        self.scalars = [t.name for t in self.k.tensors.values() if t.kind == "scalar"]
        self.slot = {n: i for i, n in enumerate(self.scalars)}
        self.names: dict = {}
        used = set()
        for t in self.k.tensors.values():
            base = {"scalar": "s_", "param": "p_"}.get(t.kind, "t_") + _ident(t.name)
            name = base
            n = 1
            while name in used:
                name = f"{base}_{n}"
                n += 1
            used.add(name)
            self.names[t.name] = name
        self.sites: list = []
        self.kernels: list = []  # source text of each __global__ function
        self.w = _Writer()
        self.env: dict = {}  # typed-IR loop variable -> C name
        self.host_counters: list = []

    # ------------------------------------------------------------- plan
    def run(self) -> GeneratedCuda:
        plan = self.split(self.nest.body, [])
        src = [PRELUDE, self.describe_plan(plan)] + self.kernels
        return GeneratedCuda("\n".join(src), plan, self.sites, self.buffers, self.params,
                             [(n, ty.concrete(self.k.tensors[n].dtype)) for n in self.scalars], self.fastmath)

    def split(self, stmts: list, counters: list) -> list:
        out = []
        serial: list = []

        def flush():
            if serial:
                out.append(self.serial_kernel(list(serial), counters))
                serial.clear()

        for s in stmts:
            if isinstance(s, L.For) and s.parallel:
                flush()
                out.append(self.grid_kernel(s, counters))
            elif isinstance(s, L.For) and _contains_parallel(s.body):
                flush()
                out.append(HostFor(s, self.split(s.body, counters + [s.var])))
            elif isinstance(s, L.If) and (_contains_parallel(s.then) or _contains_parallel(s.orelse)):
                flush()
                out.append(HostIf(s.cond, self.split(s.then, counters), self.split(s.orelse, counters)))
            else:
                serial.append(s)
        flush()
        return out

    def describe_plan(self, plan) -> str:
        lines = ["/* launch plan (run by the host, in order on one stream):"]

        def walk(items, depth):
            pad = "     " + "  " * depth
            for it in items:
                if isinstance(it, Launch):
                    if it.dims == 0:
                        grid = "<<<1, 1>>> (serial)"
                    elif it.dims == 1:
                        grid = f"<<<ceil(trips({it.loop.var}) / {BLOCK_1D}), {BLOCK_1D}>>>"
                    else:
                        grid = (f"<<<(ceil(trips({it.inner.var}) / {BLOCK_2D[0]}), "
                                f"ceil(trips({it.loop.var}) / {BLOCK_2D[1]})), {BLOCK_2D}>>>")
                    lines.append(f"{pad}{it.kernel}{grid}")
                elif isinstance(it, HostFor):
                    s = it.loop
                    lines.append(f"{pad}for ({s.var} = {L.fmt_expr(s.init)}; {L.fmt_expr(s.cond)}; "
                                 f"{s.var} += {s.step})")
                    walk(it.body, depth + 1)
                else:
                    lines.append(f"{pad}if {L.fmt_expr(it.cond)}")
                    walk(it.then, depth + 1)
                    if it.orelse:
                        lines.append(f"{pad}else")
                        walk(it.orelse, depth + 1)

        walk(plan, 0)
        lines.append(" */")
        return "\n".join(lines) + "\n"

    def kernel_name(self) -> str:
        return f"hyb_{_ident(self.k.name)}_k{len(self.kernels)}"

    def signature(self, name: str, counters: list, extra: list) -> str:
        args = []
        for n in self.buffers:
            t = self.k.tensors[n]
            qual = "" if n in self.k.written else "const "
            args.append(f"{qual}{CTYPES[ty.concrete(t.dtype)]} *__restrict__ {self.names[n]}")
        for n in self.params:
            args.append(f"{CTYPES[ty.concrete(self.k.tensors[n].dtype)]} {self.names[n]}")
        args.append("unsigned char *__restrict__ hyb_sc")
        args.append("long long *hyb_err")
        args += [f"long long l_{_ident(c)}" for c in counters] + extra
        return f'extern "C" __global__ void {name}(' + ", ".join(args) + ")"

    def _begin(self, name, counters, extra):
        self.w = _Writer()
        self.w.open(self.signature(name, counters, extra))
        self.w.line("if (*(volatile long long *)&hyb_err[2] != 0) return;")
        for n in self.scalars:
            ct = CTYPES[ty.concrete(self.k.tensors[n].dtype)]
            self.w.line(f"{ct} {self.names[n]} = *({ct} *)(hyb_sc + {8 * self.slot[n]});")

    def _end(self, write_back: bool):
        if write_back:
            self.write_back_scalars()
        self.w.close()
        self.kernels.append("\n".join(self.w.lines) + "\n")

    def write_back_scalars(self):
        for n in self.scalars:
            ct = CTYPES[ty.concrete(self.k.tensors[n].dtype)]
            self.w.line(f"*({ct} *)(hyb_sc + {8 * self.slot[n]}) = {self.names[n]};")

    def serial_kernel(self, stmts: list, counters: list) -> Launch:
        name = self.kernel_name()
        self.serial = True
        self._begin(name, counters, [])
        self.block(stmts)
        self._end(write_back=True)
        return Launch(name, list(counters))

    def grid_kernel(self, s: L.For, counters: list) -> Launch:
        name = self.kernel_name()
        inner = None
        if len(s.body) == 1 and isinstance(s.body[0], L.For) and s.body[0].parallel:
            g = s.body[0]
            if (L.upper_bound(s) is not None and L.upper_bound(g) is not None
                    and not L.uses(g.init, s.var) and not L.uses(L.upper_bound(g)[1], s.var)):
                inner = g
        self.serial = False
        w_extra = ["long long hyb_trips_y", "long long hyb_trips_x"] if inner is not None else ["long long hyb_trips"]
        self._begin(name, counters, w_extra)
        w = self.w
        if inner is None:
            w.open("for (long long _it = (long long)blockIdx.x * blockDim.x + threadIdx.x; "
                   "_it < hyb_trips; _it += (long long)gridDim.x * blockDim.x)")
            w.line(f"long long l_{_ident(s.var)} = {self.lexpr(s.init)} + _it * {s.step};")
            if L.upper_bound(s) is None:  # a grid over an unknown count: stop where the condition fails
                w.line(f"if (!({self.lexpr(s.cond)})) break;")
            self.block(s.body)
            w.close()
        else:
            w.open("for (long long _iy = (long long)blockIdx.y * blockDim.y + threadIdx.y; "
                   "_iy < hyb_trips_y; _iy += (long long)gridDim.y * blockDim.y)")
            w.line(f"long long l_{_ident(s.var)} = {self.lexpr(s.init)} + _iy * {s.step};")
            w.open("for (long long _ix = (long long)blockIdx.x * blockDim.x + threadIdx.x; "
                   "_ix < hyb_trips_x; _ix += (long long)gridDim.x * blockDim.x)")
            w.line(f"long long l_{_ident(inner.var)} = {self.lexpr(inner.init)} + _ix * {inner.step};")
            self.block(inner.body)
            w.close()
            w.close()
        self._end(write_back=False)
        return Launch(name, list(counters), s, inner)

    # ------------------------------------------------------------- loop IR
    def block(self, stmts):
        for s in stmts:
            if isinstance(s, L.For):
                v = f"l_{_ident(s.var)}"
                self.w.open(f"for (long long {v} = {self.lexpr(s.init)}; {self.lexpr(s.cond)}; {v} += {s.step})")
                self.block(s.body)
                self.w.close()
            elif isinstance(s, L.If):
                self.w.open(f"if ({self.lexpr(s.cond)})")
                self.block(s.then)
                if s.orelse:
                    self.w.close("} else {")
                    self.w.depth += 1
                    self.block(s.orelse)
                self.w.close()
            elif isinstance(s, L.StmtCall):
                self.stmt_call(s)
            else:
                raise HybridInternalError(f"loop IR node {type(s).__name__}", "codegen")

    def lexpr(self, e) -> str:
        if isinstance(e, L.LInt):
            return f"{e.value}ll"
        if isinstance(e, L.LVar):
            return f"l_{_ident(e.name)}"
        a = [self.lexpr(x) for x in e.args]
        op = e.op
        infix = {"add": "+", "sub": "-", "mul": "*", "eq": "==", "le": "<=", "lt": "<", "ge": ">=", "gt": ">",
                 "and": "&&", "or": "||", "pdiv_q": "/", "div": "/", "pdiv_r": "%", "zdiv_r": "%"}
        if op in infix:
            return f"({a[0]} {infix[op]} {a[1]})"
        if op == "neg":
            return f"(-{a[0]})"
        if op in ("min", "max"):
            r = a[0]
            for x in a[1:]:
                r = f"hyb_{op}({r}, {x})"
            return r
        if op == "fdiv_q":
            return f"hyb_floord({a[0]}, {a[1]})"
        if op == "select":
            return f"({a[0]} ? {a[1]} : {a[2]})"
        raise HybridInternalError(f"loop expression {op}", "codegen")

    # ------------------------------------------------------------- statements
    def stmt_call(self, call: L.StmtCall):
        st = self.nest.statements[call.stmt]
        w = self.w
        w.open("")
        saved = dict(self.env)
        used = _vars_used([st.stmt] + list(st.guards))
        for v, a in zip(st.iters, call.args):
            if v not in used:
                continue
            cname = w.fresh("v_" + _ident(v))
            w.line(f"const long long {cname} = {self.lexpr(a)};")
            self.env[v] = cname
        self.guarded(st.guards, [st.stmt])
        self.env = saved
        w.close()

    def guarded(self, guards, stmts):
        if not guards:
            self.tir_block(stmts)
            return
        self.w.open(f"if ({self.expr(guards[0])})")
        self.guarded(guards[1:], stmts)
        self.w.close()

    def tir_block(self, stmts):
        for s in stmts:
            if isinstance(s, T.Store):
                self.store(s)
            elif isinstance(s, T.If):
                self.w.open(f"if ({self.expr(s.cond)})")
                self.tir_block(s.body)
                if s.orelse:
                    self.w.close("} else {")
                    self.w.depth += 1
                    self.tir_block(s.orelse)
                self.w.close()
            else:
                self.tir_loop(s)

    def tir_loop(self, s: T.Loop):
        w = self.w
        start, stop = self.index(s.start), self.index(s.stop)
        w.open("")
        hi = w.fresh("stop")
        w.line(f"const long long {hi} = {stop};")
        v = w.fresh("v_" + _ident(s.var))
        saved = dict(self.env)
        w.open(f"for (long long {v} = {start}; {v} {'<' if s.step > 0 else '>'} {hi}; {v} += {s.step})")
        self.env[s.var] = v
        self.tir_block(s.body)
        self.env = saved
        w.close()
        w.close()

    def store(self, s: T.Store):
        t = self.k.tensors[s.tensor]
        value = self.expr(s.value)
        if ty.concrete(t.dtype) == "bool":
            value = f"(unsigned char)({value} ? 1 : 0)"
        self.w.line(f"{self.address(s.tensor, s.indices, s)} = {value};")

    def address(self, tensor: str, indices: list, node=None) -> str:
        """An lvalue for the element (bounds-checked first where the access needs it)."""
        t = self.k.tensors[tensor]
        if t.kind in ("scalar", "param"):
            return self.names[tensor]
        site = 0
        if node is not None and id(node) in self.checked:
            self.sites.append(CheckSite(t.source_name, t.shape, node.span))
            site = len(self.sites)
        terms = []
        stride = 1
        axis = t.ndim
        for dim, idx in reversed(list(zip(t.shape, indices))):
            axis -= 1
            v = self.index(idx)
            if site:
                name = self.w.fresh("ix")
                self.w.line(f"const long long {name} = {v};")
                self.w.line(f"if ((unsigned long long){name} >= {dim}ull) "
                            f"{{ hyb_fail(hyb_err, {name}, {axis}, {site}); return; }}")
                v = name
            terms.append(v if stride == 1 else f"{v} * {stride}ll")
            stride *= dim
        flat = " + ".join(reversed(terms)) if terms else "0"
        return f"{self.names[tensor]}[{flat}]"

    def index(self, e: T.TExpr) -> str:
        return f"((long long)({self.expr(e)}))"

    # ------------------------------------------------------------- expressions
    def expr(self, e: T.TExpr) -> str:
        return getattr(self, "e_" + type(e).__name__)(e)

    def e_Const(self, e: T.Const) -> str:
        dt = ty.concrete(e.dtype)
        if dt == "bool":
            return "true" if bool(e.value) else "false"
        if dt in ty.FLOATS:
            with np.errstate(over="ignore"):
                return _float_literal(float(np.dtype(dt).type(e.value)), dt)
        return _int_literal(int(e.value), dt)

    def e_Var(self, e: T.Var) -> str:
        return self.env[e.name]

    def e_Load(self, e: T.Load) -> str:
        t = self.k.tensors[e.tensor]
        a = self.address(e.tensor, e.indices, e)
        if ty.concrete(t.dtype) == "bool" and t.kind not in ("scalar",):
            return f"({a} != 0)"
        if ty.concrete(t.dtype) == "bool":
            return f"({a} != 0)"
        # A value read once, so that an expression using it twice does not read memory twice.
        name = self.w.fresh("ld")
        self.w.line(f"const {CTYPES[ty.concrete(t.dtype)]} {name} = {a};")
        return name

    def value(self, text: str, dt: str) -> str:
        """Bind an expression to a fresh constant (so that helpers see it once)."""
        name = self.w.fresh()
        ct = "bool" if dt == "bool" else CTYPES[dt]
        self.w.line(f"const {ct} {name} = {text};")
        return name

    def e_Bin(self, e: T.Bin) -> str:
        dt = ty.concrete(e.dtype)
        a = self.expr(e.a)
        b = self.expr(e.b)
        if dt in ty.FLOATS:
            if dt == "float16":
                fa, fb = f"hyb_h2f({a})", f"hyb_h2f({b})"
                return f"hyb_f2h({self._float_bin(e.op, fa, fb, 'float32')})"
            return self._float_bin(e.op, a, b, dt)
        if dt == "bool":  # i1 arithmetic, as LLVM does it: + and - are xor, * is and
            if e.op in ("+", "-"):
                return f"({a} != {b})"
            if e.op == "*":
                return f"({a} && {b})"
            raise HybridUnsupportedError(f"`{e.op}` on bool", e.span, "cast to an integer type first")
        ct, ut = CTYPES[dt], _UNSIGNED_OF[dt]
        if e.op in ("+", "-", "*"):
            return f"(({ct})(({ut}){a} {e.op} ({ut}){b}))"
        if e.op in ("//", "%"):
            return self._int_divmod(e.op, a, b, dt)
        if e.op == "**":
            if isinstance(e.b, T.Const):
                return self._power_const(a, int(e.b.value), dt)
            uns = "true" if dt in ty.UNSIGNED else "false"
            return f"hyb_ipow<{ct}, {ut}>({a}, {b}, {uns})"
        raise HybridUnsupportedError(f"`{e.op}` on {e.dtype}", e.span, None)

    def _float_bin(self, op: str, a: str, b: str, dt: str) -> str:
        if op in ("+", "-", "*", "/"):
            return f"({a} {op} {b})"
        if op == "//":
            return f"hyb_ffloordiv<{CTYPES[dt]}>({a}, {b})"
        if op == "%":
            return f"hyb_fremainder<{CTYPES[dt]}>({a}, {b})"
        if op == "**":
            return f"pow(({CTYPES[dt]})({a}), ({CTYPES[dt]})({b}))"
        raise HybridUnsupportedError(f"`{op}` on {dt}", None, None)

    def _int_divmod(self, op: str, a: str, b: str, dt: str) -> str:
        ct, ut = CTYPES[dt], _UNSIGNED_OF[dt]
        if dt in ty.UNSIGNED:
            return f"hyb_ufloor{'div' if op == '//' else 'mod'}<{ct}>({a}, {b})"
        return f"hyb_sfloor{'div' if op == '//' else 'mod'}<{ct}, {ut}>({a}, {b})"

    def _power_const(self, a: str, n: int, dt: str) -> str:
        ct, ut = CTYPES[dt], _UNSIGNED_OF[dt]
        if n < 0:
            return f"hyb_ipow<{ct}, {ut}>({a}, ({ct})({n}), {'true' if dt in ty.UNSIGNED else 'false'})"
        base = self.value(a, dt)
        result = None
        while n:
            if n & 1:
                result = base if result is None else self.value(f"(({ct})(({ut}){result} * ({ut}){base}))", dt)
            n >>= 1
            if n:
                base = self.value(f"(({ct})(({ut}){base} * ({ut}){base}))", dt)
        return result if result is not None else f"(({ct})1)"

    def e_Unary(self, e: T.Unary) -> str:
        a = self.expr(e.a)
        if e.op == "not":
            return f"(!{a})"
        dt = ty.concrete(e.dtype)
        if dt == "float16":
            return f"hyb_f2h(-hyb_h2f({a}))"
        if dt in ty.FLOATS:
            return f"(-{a})"
        return f"(({CTYPES[dt]})(({_UNSIGNED_OF[dt]})0 - ({_UNSIGNED_OF[dt]}){a}))"

    def e_Cmp(self, e: T.Cmp) -> str:
        a, b = self.expr(e.a), self.expr(e.b)
        dt = ty.concrete(e.a.dtype)
        if dt == "float16":
            a, b = f"hyb_h2f({a})", f"hyb_h2f({b})"
        return f"({a} {e.op} {b})"  # C's != is unordered, the others ordered: as the CPU path

    def e_Logic(self, e: T.Logic) -> str:
        # Short-circuit: the right side's statements (loads) must only run where the left allows.
        a = self.expr(e.a)
        r = self.w.fresh("lg")
        self.w.line(f"bool {r} = {a};")
        self.w.open(f"if ({'' if e.op == 'and' else '!'}{r})")
        b = self.expr(e.b)
        self.w.line(f"{r} = {b};")
        self.w.close()
        return r

    def e_Select(self, e: T.Select) -> str:
        c = self.expr(e.cond)
        dt = ty.concrete(e.dtype)
        ct = "bool" if dt == "bool" else CTYPES[dt]
        r = self.w.fresh("sel")
        self.w.line(f"{ct} {r};")
        self.w.open(f"if ({c})")
        self.w.line(f"{r} = {self.expr(e.a)};")
        self.w.close("} else {")
        self.w.depth += 1
        self.w.line(f"{r} = {self.expr(e.b)};")
        self.w.close()
        return r

    def e_Cast(self, e: T.Cast) -> str:
        return self.convert(self.expr(e.a), ty.concrete(e.a.dtype), ty.concrete(e.dtype))

    def convert(self, v: str, s: str, d: str) -> str:
        if s == d:
            return v
        if d == "bool":
            if s == "float16":
                return f"(hyb_h2f({v}) != 0.0f)"
            return f"({v} != 0)"
        if s == "bool":
            if d == "float16":
                return f"hyb_f2h({v} ? 1.0f : 0.0f)"
            return f"(({CTYPES[d]})({v} ? 1 : 0))"
        if s in ty.FLOATS and d in ty.FLOATS:
            if s == "float16":
                f = f"hyb_h2f({v})"
                return f if d == "float32" else f"((double){f})"
            if d == "float16":
                return f"hyb_f2h({v})" if s == "float32" else f"hyb_d2h({v})"
            return f"(({CTYPES[d]}){v})"
        if s in ty.FLOATS:
            x = f"hyb_h2f({v})" if s == "float16" else v
            ft = "float" if s == "float16" else CTYPES[s]
            if d == "uint64":
                return f"hyb_f2u64<{ft}>({x})"
            if d in ("int8", "int16", "int32", "uint8", "uint16"):
                return f"(({CTYPES[d]})hyb_f2i32<{ft}>({x}))"
            return f"(({CTYPES[d]})hyb_f2i64<{ft}>({x}))"
        if d == "float16":
            return f"hyb_f2h((float)({v}))"
        return f"(({CTYPES[d]})({v}))"

    # ------------------------------------------------------------- intrinsics
    _MATH = {"sqrt": "sqrt", "exp": "exp", "log": "log", "sin": "sin", "cos": "cos", "floor": "floor",
             "ceil": "ceil", "trunc": "trunc", "round": "rint", "expm1": "expm1", "log1p": "log1p", "tan": "tan",
             "tanh": "tanh", "atan": "atan", "atan2": "atan2", "erf": "erf"}

    def math(self, fn: str, dt: str, args: list) -> str:
        """A math function through CUDA's library: float16 computed in float and rounded back."""
        if dt == "float16":
            return f"hyb_f2h({self.math(fn, 'float32', [f'hyb_h2f({a})' for a in args])})"
        name = fn + ("f" if dt == "float32" else "")
        return f"{name}({', '.join(args)})"

    def e_Intrinsic(self, e: T.Intrinsic) -> str:
        args = [self.value(self.expr(a), ty.concrete(a.dtype)) for a in e.args]
        dt = ty.concrete(e.args[0].dtype)
        if e.name in self._MATH:
            return self.math(self._MATH[e.name], dt, args)
        r = getattr(self, "i_" + e.name)(dt, *args)
        want = ty.concrete(e.dtype)
        if e.name == "popcount":
            return f"(({CTYPES[want]})({r}))"
        return r

    def _f(self, dt, x):
        """(value as float/double, C type, wrap back to dt)."""
        if dt == "float16":
            return f"hyb_h2f({x})", "float", lambda r: f"hyb_f2h({r})"
        return x, CTYPES[dt], lambda r: r

    def i_rsqrt(self, dt, x):
        if dt == "float16":
            s = self.math("sqrt", dt, [x])
            return f"hyb_f2h(1.0f / hyb_h2f({s}))"
        return f"(({CTYPES[dt]})1 / {self.math('sqrt', dt, [x])})"

    def i_sigmoid(self, dt, x):
        if dt == "float16":
            ex = self.math("exp", dt, [f"hyb_f2h(-hyb_h2f({x}))"])
            return f"hyb_f2h(1.0f / hyb_h2f(hyb_f2h(1.0f + hyb_h2f({ex}))))"
        one = f"(({CTYPES[dt]})1)"
        return f"({one} / ({one} + {self.math('exp', dt, [f'(-{x})'])}))"

    def i_abs(self, dt, x):
        if dt in ty.FLOATS:
            return self.math("fabs", dt, [x])
        if dt in ty.UNSIGNED or dt == "bool":
            return x
        ct, ut = CTYPES[dt], _UNSIGNED_OF[dt]
        return f"({x} < 0 ? ({ct})(({ut})0 - ({ut}){x}) : {x})"

    def i_sign(self, dt, x):
        if dt in ty.FLOATS:
            v, ft, back = self._f(dt, x)
            return back(f"hyb_sign<{ft}>({v})")
        ct = CTYPES[dt]
        if dt in ty.UNSIGNED:
            return f"(({ct})({x} != 0))"
        return f"(({ct})(({x} > 0) - ({x} < 0)))"

    def i_isnan(self, dt, x):
        v, _, _ = self._f(dt, x)
        return f"({v} != {v})"

    def i_isinf(self, dt, x):
        v, ft, _ = self._f(dt, x)
        inf = "__int_as_float(0x7f800000)" if ft == "float" else "__longlong_as_double(0x7ff0000000000000ll)"
        return f"({v} == {inf} || {v} == -{inf})"

    def i_isfinite(self, dt, x):
        v, ft, _ = self._f(dt, x)
        inf = "__int_as_float(0x7f800000)" if ft == "float" else "__longlong_as_double(0x7ff0000000000000ll)"
        return f"({v} == {v} && {v} != {inf} && {v} != -{inf})"

    def i_max(self, dt, x, y):
        return self._extremum("max", dt, x, y)

    def i_min(self, dt, x, y):
        return self._extremum("min", dt, x, y)

    def _extremum(self, which, dt, x, y):
        if dt in ty.FLOATS:
            vx, ft, back = self._f(dt, x)
            vy = self._f(dt, y)[0]
            eq = "true" if dt == "float16" else "false"
            return back(f"hyb_f{which}<{ft}>({vx}, {vy}, {eq})")
        op = ">" if which == "max" else "<"
        return f"({x} {op} {y} ? {x} : {y})"

    def i_ceil_div(self, dt, x, y):
        q = self._int_divmod("//", x, y, dt)
        r = self._int_divmod("%", x, y, dt)
        ct, ut = CTYPES[dt], _UNSIGNED_OF[dt]
        return f"(({ct})(({ut}){q} + ({ut})({r} != 0)))"

    def i_popcount(self, dt, x):
        mag = self.value(self.i_abs(dt, x), dt)
        bits = _INT_BITS.get(dt, 8)
        if bits == 64:
            return f"__popcll((unsigned long long){mag})"
        mask = (1 << bits) - 1
        return f"__popc(((unsigned int){mag}) & 0x{mask:x}u)"


def generate(nest: L.LoopNest, fastmath: bool = False) -> GeneratedCuda:
    """CUDA C source of the kernel and the launch plan the host runs."""
    return _Generator(nest, fastmath).run()
