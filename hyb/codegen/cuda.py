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
memory and in registers, every operation computed in float and rounded back; bfloat16 is
``__nv_bfloat16``, converted to and from float by the integer operations on its bits that
:mod:`hyb.codegen.legalise` made (as on the CPU, not by CUDA's conversions); integer
arithmetic wraps; ``//`` and ``%`` follow NumPy (division by zero gives 0); NaN-propagating
max/min; ``round`` is ``rint``; float → int casts truncate as x86 does (out of range: the
minimum of the int32/int64 it goes through).  Compile with ``-fmad=false`` (no contraction
of ``a * b + c``, as LLVM without fast-math) unless fast-math was asked for.

Run-time bounds checks write ``index, axis, site`` into ``err``, the runtime block's slots
``RT_INDEX``, ``RT_AXIS`` and ``RT_CODE`` (:mod:`hyb.codegen.abi`; the first failure wins), and
return; every kernel starts by returning if ``err[RT_CODE]`` is set, and the host raises the
same :class:`~hyb.errors.HybridIndexError` as the CPU path.
"""
from __future__ import annotations

import re
from importlib import resources
from dataclasses import dataclass, field

from ..dsl import tir
from ..dsl import types
from ..errors import HybridInternalError, HybridUnsupportedError
from ..schedule import loops
from .cuda_expr import CTYPES, CudaExpressions
from .abi import RT_CODE, buffer_order
from .walker import LoopWalker

BLOCK_1D = 256
BLOCK_2D = (32, 8)
GRID_STRIDE_BLOCKS = 1024  # blocks of a grid whose trip count the host cannot compute


# No contraction of a * b + c into fma (LLVM without fast-math contracts nothing); no remarks on the
# user's own comparisons of unsigned values with 0 (nvcc's diagnostic 186).
NVCC_OPTIONS = ["-fmad=false", "-diag-suppress=186"]
NVCC_FASTMATH_OPTIONS = ["--use_fast_math", "-diag-suppress=186"]

PRELUDE = (resources.files(__package__) / "cuda_prelude.cuh").read_text().split("\n", 1)[1]
"""The helpers every generated file starts with (hyb/codegen/cuda_prelude.cuh, its comment line left out)."""


# ----------------------------------------------------------------------------- launch plan
@dataclass
class Launch:
    """One kernel launch: ``kernel`` over the grid of ``loop`` (None: one thread), with the
    host counters ``counters`` (names of enclosing host loops) passed as arguments."""

    kernel: str
    counters: list
    loop: object = None  # loops.For mapped to x (1-D) or y (2-D)
    inner: object = None  # loops.For mapped to x in a 2-D launch

    @property
    def dims(self) -> int:
        return 0 if self.loop is None else (2 if self.inner is not None else 1)


@dataclass
class HostFor:
    loop: object  # loops.For
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


def trip_count(loop: loops.For, env: dict) -> int | None:
    """Iterations of ``loop`` with the counters of ``env``; None when its condition is not a
    plain upper bound (the kernel then strides over a fixed grid while the condition holds)."""
    b = loops.upper_bound(loop)
    if b is None:
        return None
    op, ub = b
    init = eval_lexpr(loop.init, env)
    last = eval_lexpr(ub, env) - (1 if op == "lt" else 0)
    return max(0, (last - init) // loop.step + 1)


def eval_lexpr(e, env: dict):
    """A loop-IR expression evaluated on the host (Python ints; comparisons give bools)."""
    if isinstance(e, loops.LInt):
        return e.value
    if isinstance(e, loops.LVar):
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
        if isinstance(s, loops.For):
            if s.parallel or _contains_parallel(s.body):
                return True
        elif isinstance(s, loops.If):
            if _contains_parallel(s.then) or _contains_parallel(s.orelse):
                return True
    return False


def _vars_used(nodes) -> set:
    """Names of the typed-IR loop variables that statements or expressions read."""
    out = set()
    stack = list(nodes)
    while stack:
        n = stack.pop()
        if isinstance(n, tir.Store):
            stack += list(n.indices) + [n.value]
        elif isinstance(n, tir.Loop):
            stack += [n.start, n.stop] + list(n.body)
        elif isinstance(n, tir.If):
            stack += [n.cond] + list(n.body) + list(n.orelse)
        elif isinstance(n, tir.Assert):
            stack.append(n.cond)
        elif isinstance(n, tir.Print):
            stack += [x for x in n.items if not isinstance(x, str)]
        elif isinstance(n, tir.TExpr):
            out |= {e.name for e in tir.walk_expr(n) if isinstance(e, tir.Var)}
    return out


# ----------------------------------------------------------------------------- code generation
def _ident(name: str) -> str:
    return re.sub(r"[^0-9A-Za-z_]", "_", name)


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


class _Generator(LoopWalker, CudaExpressions):
    """The CUDA back end's hooks on the shared walk (:class:`~hyb.codegen.walker.LoopWalker`): C
    loops and ``if``s written as text, statements in blocks of their own, subscripts checked by
    ``hyb_fail``; and the split of the nest into launches (:meth:`split`)."""

    def __init__(self, nest: loops.LoopNest, fastmath: bool = False):
        super().__init__(nest)
        self.fastmath = fastmath
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
        self.kernels: list = []  # source text of each __global__ function
        self.w = _Writer()
        self.host_counters: list = []

    # ------------------------------------------------------------- plan
    def run(self) -> GeneratedCuda:
        plan = self.split(self.nest.body, [])
        src = [PRELUDE, self.describe_plan(plan)] + self.kernels
        return GeneratedCuda("\n".join(src), plan, self.sites, self.buffers, self.params,
                             [(n, types.concrete(self.k.tensors[n].dtype)) for n in self.scalars], self.fastmath)

    def split(self, stmts: list, counters: list) -> list:
        out = []
        serial: list = []

        def flush():
            if serial:
                out.append(self.serial_kernel(list(serial), counters))
                serial.clear()

        for s in stmts:
            if isinstance(s, loops.For) and s.parallel:
                flush()
                out.append(self.grid_kernel(s, counters))
            elif isinstance(s, loops.For) and _contains_parallel(s.body):
                flush()
                out.append(HostFor(s, self.split(s.body, counters + [s.var])))
            elif isinstance(s, loops.If) and (_contains_parallel(s.then) or _contains_parallel(s.orelse)):
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
                    lines.append(f"{pad}for ({s.var} = {loops.fmt_expr(s.init)}; {loops.fmt_expr(s.cond)}; "
                                 f"{s.var} += {s.step})")
                    walk(it.body, depth + 1)
                else:
                    lines.append(f"{pad}if {loops.fmt_expr(it.cond)}")
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
            args.append(f"{qual}{CTYPES[types.concrete(t.dtype)]} *__restrict__ {self.names[n]}")
        for n in self.params:
            args.append(f"{CTYPES[types.concrete(self.k.tensors[n].dtype)]} {self.names[n]}")
        args.append("unsigned char *__restrict__ hyb_sc")
        args.append("long long *hyb_err")
        args += [f"long long l_{_ident(c)}" for c in counters] + extra
        return f'extern "C" __global__ void {name}(' + ", ".join(args) + ")"

    def _begin(self, name, counters, extra):
        self.w = _Writer()
        self.w.open(self.signature(name, counters, extra))
        self.w.line(f"if (*(volatile long long *)&hyb_err[{RT_CODE}] != 0) return;")
        for n in self.scalars:
            ct = CTYPES[types.concrete(self.k.tensors[n].dtype)]
            self.w.line(f"{ct} {self.names[n]} = *({ct} *)(hyb_sc + {8 * self.slot[n]});")

    def _end(self, write_back: bool):
        if write_back:
            self.write_back_scalars()
        self.w.close()
        self.kernels.append("\n".join(self.w.lines) + "\n")

    def write_back_scalars(self):
        for n in self.scalars:
            ct = CTYPES[types.concrete(self.k.tensors[n].dtype)]
            self.w.line(f"*({ct} *)(hyb_sc + {8 * self.slot[n]}) = {self.names[n]};")

    def serial_kernel(self, stmts: list, counters: list) -> Launch:
        name = self.kernel_name()
        self.serial = True
        self._begin(name, counters, [])
        self.block(stmts)
        self._end(write_back=True)
        return Launch(name, list(counters))

    def grid_kernel(self, s: loops.For, counters: list) -> Launch:
        name = self.kernel_name()
        inner = None
        if len(s.body) == 1 and isinstance(s.body[0], loops.For) and s.body[0].parallel:
            g = s.body[0]
            if (loops.upper_bound(s) is not None and loops.upper_bound(g) is not None
                    and not loops.uses(g.init, s.var) and not loops.uses(loops.upper_bound(g)[1], s.var)):
                inner = g
        self.serial = False
        w_extra = ["long long hyb_trips_y", "long long hyb_trips_x"] if inner is not None else ["long long hyb_trips"]
        self._begin(name, counters, w_extra)
        w = self.w
        if inner is None:
            w.open("for (long long _it = (long long)blockIdx.x * blockDim.x + threadIdx.x; "
                   "_it < hyb_trips; _it += (long long)gridDim.x * blockDim.x)")
            w.line(f"long long l_{_ident(s.var)} = {self.lexpr(s.init)} + _it * {s.step};")
            if loops.upper_bound(s) is None:  # a grid over an unknown count: stop where the condition fails
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
    def for_loop(self, s: loops.For):
        v = f"l_{_ident(s.var)}"
        self.w.open(f"for (long long {v} = {self.lexpr(s.init)}; {self.lexpr(s.cond)}; {v} += {s.step})")
        self.block(s.body)
        self.w.close()

    def branch(self, cond: str, then, orelse=None):
        self.w.open(f"if ({cond})")
        then()
        if orelse is not None:
            self.w.close("} else {")
            self.w.depth += 1
            orelse()
        self.w.close()

    def loop_int(self, value: int) -> str:
        return f"{value}ll"

    def loop_var(self, name: str) -> str:
        return f"l_{_ident(name)}"

    def loop_op(self, op: str, a: list) -> str:
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
    def bind_statement(self, st, call: loops.StmtCall, body):
        """The statement in a C block of its own, its loop variables bound to constants (only the
        ones it reads)."""
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
        body()
        self.env = saved
        w.close()

    def tir_loop_emit(self, s: tir.Loop, start: str, stop: str, body):
        w = self.w
        w.open("")
        hi = w.fresh("stop")
        w.line(f"const long long {hi} = {stop};")
        v = w.fresh("v_" + _ident(s.var))
        saved = dict(self.env)
        w.open(f"for (long long {v} = {start}; {v} {'<' if s.step > 0 else '>'} {hi}; {v} += {s.step})")
        self.env[s.var] = v
        body()
        self.env = saved
        w.close()
        w.close()

    def memory_value(self, t: tir.Tensor, value: str) -> str:
        return f"(unsigned char)({value} ? 1 : 0)" if self.is_bool(t) else value

    def store_value(self, address: str, value: str):
        self.w.line(f"{address} = {value};")

    # ------------------------------------------------------------- addresses (lvalues)
    def scalar_ref(self, tensor: str) -> str:
        return self.names[tensor]

    def check_index(self, v: str, dim: int, axis: int, site: int) -> str:
        name = self.w.fresh("ix")
        self.w.line(f"const long long {name} = {v};")
        self.w.line(f"if ((unsigned long long){name} >= {dim}ull) "
                    f"{{ hyb_fail(hyb_err, {name}, {axis}, {site}); return; }}")
        return name

    def emit_print(self, site: int, values: list, dtypes: list):
        raise HybridUnsupportedError("print() in a kernel that runs on the GPU is not supported", self.sites[-1].span,
                                     "run it on the CPU (target=\"cpu\") or with emulate() to see its prints")

    def fail_unless(self, cond: str, site: int):
        self.w.line(f"if (!({cond})) {{ hyb_fail(hyb_err, 0, 0, {site}); return; }}")

    def scale_index(self, v: str, stride: int) -> str:
        return f"{v} * {stride}ll"

    def add_index(self, flat: str, term: str) -> str:
        return f"{term} + {flat}"

    def element(self, tensor: str, flat) -> str:
        return f"{self.names[tensor]}[{flat if flat is not None else '0'}]"

    def to_index(self, v: str, dtype: str) -> str:
        return f"((long long)({v}))"


def generate(nest: loops.LoopNest, fastmath: bool = False) -> GeneratedCuda:
    """CUDA C source of the kernel and the launch plan the host runs."""
    return _Generator(nest, fastmath).run()
