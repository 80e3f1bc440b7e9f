"""LLVM back end: loop IR → LLVM IR (llvmlite) → optimised machine code (MCJIT).

One function per specialised kernel::

    i32 hyb_<name>(ptr noalias %t0, ptr noalias %t1, ..., ptr %rt)

with one pointer per non-scalar tensor (inputs in parameter order, then outputs and
temporaries in order of declaration; see :func:`buffer_order`) and ``rt``, an ``int64[4]``
runtime block: ``rt[3]`` is the number of threads to use.  It returns 0, or, when a
subscript checked at run time is out of bounds, the number of that check site (1-based,
see :class:`CheckSite`) after writing the offending index and axis to ``rt[0:2]``: no
memory outside the tensors is ever touched.

A loop marked parallel is outlined into ``void hyb_<name>.par<k>(ptr %ctx)`` and run by
libgomp's ``GOMP_parallel``; each thread takes a contiguous block of the iterations (or
every n-th one when the loop's upper bound is not a simple expression) with private copies
of the scalar locals.  Without libgomp, parallel loops run serially.  Scalar locals live in
``alloca`` slots that ``mem2reg`` promotes to registers.  Shapes are constants, so every
address is ``base + Σ index_k · stride_k`` with constant strides.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir

from ..dsl import tir as T
from ..dsl import types as ty
from ..target import host_cpu
from ..errors import HybridInternalError, HybridUnsupportedError
from ..schedule import loops as L

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F16 = ir.HalfType()
F32 = ir.FloatType()
PTR = ir.PointerType()

# Intrinsics computed by one math function: LLVM intrinsics (llvm.<name>.f32/.f64) or, for those in
# _LIBM, calls to the C library (resolved from the process by MCJIT; Python has libm loaded).
_MATH = {"sqrt": "sqrt", "exp": "exp", "log": "log", "sin": "sin", "cos": "cos", "floor": "floor", "ceil": "ceil",
         "trunc": "trunc", "round": "roundeven", "expm1": "expm1", "log1p": "log1p", "tan": "tan", "tanh": "tanh",
         "atan": "atan", "atan2": "atan2", "erf": "erf"}
_LIBM = ("expm1", "log1p", "tan", "tanh", "atan", "atan2", "erf")
# Math functions that are single instructions on x86 (the rest become calls, one per vector lane).
_NATIVE_MATH = ("sqrt", "floor", "ceil", "trunc", "roundeven", "fabs", "copysign")

_LLTYPES = {
    "bool": ir.IntType(8), "int8": ir.IntType(8), "uint8": ir.IntType(8),
    "int16": ir.IntType(16), "uint16": ir.IntType(16), "int32": ir.IntType(32), "uint32": ir.IntType(32),
    "int64": ir.IntType(64), "uint64": ir.IntType(64),
    "float16": ir.HalfType(), "float32": ir.FloatType(), "float64": ir.DoubleType(),
}


def value_type(dtype: str) -> ir.Type:
    """LLVM type of a value in registers (bool is i1 there, i8 in memory)."""
    dt = ty.concrete(dtype)
    return I1 if dt == "bool" else _LLTYPES[dt]


def memory_type(dtype: str) -> ir.Type:
    return _LLTYPES[ty.concrete(dtype)]


def _unsigned(dtype: str) -> bool:
    return ty.concrete(dtype) in ty.UNSIGNED


def buffer_order(k: T.TypedKernel) -> list:
    """Names of the tensors passed as pointers, in argument order."""
    rest = [t.name for t in k.tensors.values() if t.kind != "scalar" and t.name not in k.inputs]
    return list(k.inputs) + rest


@dataclass(frozen=True)
class Options:
    fastmath: bool = False
    target: object = None  # hyb.target.CpuTarget; None: the host


@dataclass
class CheckSite:
    """A subscript bounds-checked at run time."""

    tensor: str
    shape: tuple
    span: object


@dataclass
class Generated:
    ir: str
    sites: list  # CheckSite, numbered from 1


class _FunctionBuilder:
    def __init__(self, nest: L.LoopNest, options: Options, module: ir.Module, fname: str):
        self.nest = nest
        self.k: T.TypedKernel = nest.kernel
        self.opt = options
        self.module = module
        order = buffer_order(self.k)
        fnty = ir.FunctionType(I32, [PTR] * (len(order) + 1))
        self.fn = ir.Function(module, fnty, fname)
        self.ptrs = {}
        for arg, name in zip(self.fn.args, order):
            arg.name = "t_" + name
            arg.add_attribute("noalias")
            self.ptrs[name] = arg
        self.err = self.fn.args[-1]
        self.err.name = "rt"
        self.err.add_attribute("noalias")
        self.outlined = False  # building an outlined parallel loop body
        self.scalar_calls = False  # calls a math function that has no vector instruction
        self.n_parallel = 0
        self.sites: list = []
        self.checked = nest.runtime_checked
        entry = self.fn.append_basic_block("entry")
        start = self.fn.append_basic_block("start")
        # Stack slots live in the entry block, which only branches to `start`: an alloca made
        # later (inside loops) must not grow the stack on every iteration.
        self.allocas = ir.IRBuilder(entry)
        self.allocas.position_before(self.allocas.branch(start))
        self.b = ir.IRBuilder(entry)
        self.b.position_before(entry.terminator)
        self.slots = {}
        for t in self.k.tensors.values():
            if t.kind == "param":
                self.slots[t.name] = self.ptrs[t.name]  # read-only: LLVM hoists its loads
            elif t.kind == "scalar":
                slot = self.b.alloca(memory_type(t.dtype), name="s_" + t.name)
                self.b.store(ir.Constant(memory_type(t.dtype), 0), slot)
                self.slots[t.name] = slot
        self.loopvars = {}
        self.flags = ("fast",) if options.fastmath else ()
        self.b.position_at_end(start)

    def build(self):
        self.block(self.nest.body)
        self.b.ret(ir.Constant(I32, 0))
        return self.fn

    # ---------------------------------------------------------- loop IR
    def block(self, stmts):
        for s in stmts:
            if isinstance(s, L.For):
                self.for_loop(s)
            elif isinstance(s, L.If):
                self.if_node(s)
            elif isinstance(s, L.StmtCall):
                self.stmt_call(s)
            else:
                raise HybridInternalError(f"loop IR node {type(s).__name__}", "codegen")

    def for_loop(self, s: L.For):
        if s.parallel and not self.outlined and openmp_available():
            return self.parallel_loop(s)
        self.emit_loop(s.var, self.lexpr(s.init), ir.Constant(I64, s.step), lambda phi: self.lexpr(s.cond),
                       lambda: self.block(s.body), self.loopvars, ("nsw",), vector=s.vector)

    def emit_loop(self, var: str, start, stride, cond, body, scope: dict, flags=(), vector=False):
        """A loop whose counter starts at ``start`` and advances by ``stride`` while ``cond(counter)``
        holds.  ``body()`` emits the body with the counter bound to ``var`` in ``scope`` (the loop IR's
        counters, or a statement's typed-IR environment).  A ``vector`` loop is not unrolled before
        LLVM's loop vectoriser sees it (:mod:`hyb.schedule.vector`)."""
        b = self.b
        pre = b.block
        header = self.fn.append_basic_block(f"for.{var}")
        body_bb = self.fn.append_basic_block(f"body.{var}")
        exit_ = self.fn.append_basic_block(f"end.{var}")
        b.branch(header)
        b.position_at_end(header)
        phi = b.phi(I64, name=var)
        phi.add_incoming(start, pre)
        scope[var] = phi
        b.cbranch(cond(phi), body_bb, exit_)
        b.position_at_end(body_bb)
        body()
        phi.add_incoming(b.add(phi, stride, name=var + ".next", flags=flags), b.block)
        latch = b.branch(header)
        if vector:
            latch.set_metadata("llvm.loop", self.vector_loop_id())
        b.position_at_end(exit_)
        del scope[var]

    def vector_loop_id(self):
        """Loop metadata: no unrolling before vectorisation; the loops the vectoriser makes of it
        (vector body, remainder) carry only `isvectorized`, so LLVM's usual unrolling applies to them."""
        m = self.module
        done = m.add_metadata([ir.MetaDataString(m, "llvm.loop.isvectorized"), ir.Constant(I32, 1)])
        hints = [m.add_metadata([ir.MetaDataString(m, "llvm.loop.unroll.disable")]),
                 m.add_metadata([ir.MetaDataString(m, "llvm.loop.vectorize.followup_all"), done])]
        # a loop ID names itself first; the placeholder makes the node one of its own (llvmlite
        # hands out one node for equal operands)
        loop_id = m.add_metadata([ir.MetaDataString(m, f"loop{len(m.metadata)}")] + hints)
        loop_id.operands = (loop_id, *hints)
        return loop_id

    # ---------------------------------------------------------- threads
    def parallel_loop(self, s: L.For):
        """Outline the loop into a function run by every thread of a GOMP_parallel region.

        ``<fn>.par<k>(ptr ctx)`` unpacks the captured values from ``ctx`` and calls
        ``<fn>.par<k>.body``, whose tensor pointers are ``noalias`` arguments again.
        """
        b = self.b
        tensors = list(self.ptrs.items())
        shared = [(n, v) for n, v in self.slots.items() if n not in self.ptrs]
        counters = list(self.loopvars.items())
        values = [v for _, v in tensors] + [self.err] + [v for _, v in shared] + [v for _, v in counters]
        kinds = [PTR] * (len(tensors) + 1 + len(shared)) + [I64] * len(counters)
        name = f"{self.fn.name}.par{self.n_parallel}"
        self.n_parallel += 1
        body_fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), kinds), name + ".body")
        for a, (n, _) in zip(body_fn.args, tensors):
            a.add_attribute("noalias")
        tramp = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR]), name)
        # the context: one 8-byte slot per captured value
        raw = self.allocas.alloca(ir.ArrayType(I64, max(1, len(values))), name="par.ctx")
        ctx = b.inttoptr(b.ptrtoint(raw, I64), PTR)
        for i, v in enumerate(values):
            b.store(v, b.gep(ctx, [ir.Constant(I64, 8 * i)], source_etype=I8))
        tb = ir.IRBuilder(tramp.append_basic_block("entry"))
        args = [tb.load(tb.gep(tramp.args[0], [ir.Constant(I64, 8 * i)], source_etype=I8), typ=t)
                for i, t in enumerate(kinds)]
        tb.call(body_fn, args)
        tb.ret_void()
        # the body, built with this builder's state pointed at the new function
        saved = (self.fn, self.b, self.ptrs, self.err, self.slots, self.loopvars, self.outlined)
        self.fn, self.b, self.outlined = body_fn, ir.IRBuilder(body_fn.append_basic_block("entry")), True
        fargs = list(body_fn.args)
        self.ptrs = {n: a for (n, _), a in zip(tensors, fargs)}
        self.err = fargs[len(tensors)]
        self.slots = {}
        for n, _ in saved[4].items():
            if n in self.ptrs:
                self.slots[n] = self.ptrs[n]
        for (n, _), a in zip(shared, fargs[len(tensors) + 1:]):
            t = self.k.tensors[n]
            private = self.b.alloca(memory_type(t.dtype), name="s_" + n)  # each thread its own copy
            self.b.store(self.b.load(a, typ=memory_type(t.dtype)), private)
            self.slots[n] = private
        self.loopvars = {n: a for (n, _), a in zip(counters, fargs[len(tensors) + 1 + len(shared):])}
        self.thread_loop(s)
        self.b.ret_void()
        self.fn, self.b, self.ptrs, self.err, self.slots, self.loopvars, self.outlined = saved
        b = self.b
        nthreads = b.trunc(b.load(b.gep(self.err, [ir.Constant(I64, 3)], source_etype=I64), typ=I64), I32)
        gomp = self.declare("GOMP_parallel", ir.VoidType(), [PTR, PTR, I32, I32])
        # With one thread, call the body directly: it sees thread 0 of 1 and takes every iteration.
        one = b.icmp_signed("<=", nthreads, ir.Constant(I32, 1))
        direct_bb = self.fn.append_basic_block("par.direct")
        gomp_bb = self.fn.append_basic_block("par.gomp")
        joined_bb = self.fn.append_basic_block("par.joined")
        b.cbranch(one, direct_bb, gomp_bb)
        b.position_at_end(direct_bb)
        b.call(tramp, [ctx])
        b.branch(joined_bb)
        b.position_at_end(gomp_bb)
        b.call(gomp, [tramp, ctx, nthreads, ir.Constant(I32, 0)])
        b.branch(joined_bb)
        b.position_at_end(joined_bb)
        code = b.load(b.gep(self.err, [ir.Constant(I64, 2)], source_etype=I64), typ=I64)
        failed = b.icmp_signed("!=", code, ir.Constant(I64, 0))
        fail_bb = self.fn.append_basic_block("par.failed")
        cont_bb = self.fn.append_basic_block("par.done")
        b.cbranch(failed, fail_bb, cont_bb)
        b.position_at_end(fail_bb)
        b.ret(b.trunc(code, I32))
        b.position_at_end(cont_bb)

    def thread_loop(self, s: L.For):
        """This thread's share of the iterations of ``s``."""
        b = self.b
        tid = b.sext(b.call(self.declare("omp_get_thread_num", I32, []), []), I64)
        nth = b.sext(b.call(self.declare("omp_get_num_threads", I32, []), []), I64)
        init = self.lexpr(s.init)
        step = ir.Constant(I64, s.step)
        bound = L.upper_bound(s)
        if bound is not None:
            # Contiguous blocks: iterations [tid*chunk, (tid+1)*chunk) of the trip count.
            op, ub_expr = bound
            ub = self.lexpr(ub_expr)
            last = ub if op == "le" else b.sub(ub, ir.Constant(I64, 1))
            trips = b.add(b.sdiv(b.sub(last, init), step), ir.Constant(I64, 1))
            trips = b.select(b.icmp_signed("<", trips, ir.Constant(I64, 0)), ir.Constant(I64, 0), trips)
            chunk = b.sdiv(b.add(trips, b.sub(nth, ir.Constant(I64, 1))), nth)
            first = b.mul(tid, chunk)
            end = b.add(first, chunk)
            end = b.select(b.icmp_signed("<", end, trips), end, trips)
            start = b.add(init, b.mul(first, step))
            stop = b.add(init, b.mul(end, step))
            self.counted_loop(s, start, stop, step)
        else:
            # Every nth iteration, starting at this thread's number.
            start = b.add(init, b.mul(tid, step))
            self.counted_loop(s, start, None, b.mul(nth, step))

    def counted_loop(self, s: L.For, start, stop, stride):
        """``s`` from ``start`` by ``stride``, up to ``stop`` (or while its own condition holds if None)."""
        def cond(phi):
            return self.lexpr(s.cond) if stop is None else self.b.icmp_signed("<", phi, stop)

        self.emit_loop(s.var, start, stride, cond, lambda: self.block(s.body), self.loopvars, ("nsw",))

    def if_node(self, s: L.If):
        cond = self.lexpr(s.cond)
        self._branch(cond, lambda: self.block(s.then), (lambda: self.block(s.orelse)) if s.orelse else None)

    def _branch(self, cond, then_fn, else_fn=None):
        b = self.b
        then_bb = self.fn.append_basic_block("then")
        end_bb = self.fn.append_basic_block("endif")
        else_bb = self.fn.append_basic_block("else") if else_fn else end_bb
        b.cbranch(cond, then_bb, else_bb)
        b.position_at_end(then_bb)
        then_fn()
        b.branch(end_bb)
        if else_fn:
            b.position_at_end(else_bb)
            else_fn()
            b.branch(end_bb)
        b.position_at_end(end_bb)

    def lexpr(self, e):
        b = self.b
        if isinstance(e, L.LInt):
            return ir.Constant(I64, e.value)
        if isinstance(e, L.LVar):
            return self.loopvars[e.name]
        args = [self.lexpr(a) for a in e.args]
        op = e.op
        if op == "add":
            return b.add(args[0], args[1], flags=("nsw",))
        if op == "sub":
            return b.sub(args[0], args[1], flags=("nsw",))
        if op == "mul":
            return b.mul(args[0], args[1], flags=("nsw",))
        if op == "neg":
            return b.neg(args[0])
        if op == "min":
            r = args[0]
            for a in args[1:]:
                r = b.select(b.icmp_signed("<", a, r), a, r)
            return r
        if op == "max":
            r = args[0]
            for a in args[1:]:
                r = b.select(b.icmp_signed(">", a, r), a, r)
            return r
        if op in ("pdiv_q", "div"):
            return b.sdiv(args[0], args[1])
        if op == "fdiv_q":
            return self._floordiv_int(args[0], args[1], signed=True)
        if op in ("pdiv_r", "zdiv_r"):
            return b.srem(args[0], args[1])
        if op == "select":
            return b.select(args[0], args[1], args[2])
        if op in ("eq", "le", "lt", "ge", "gt"):
            return b.icmp_signed({"eq": "==", "le": "<=", "lt": "<", "ge": ">=", "gt": ">"}[op], args[0], args[1])
        if op == "and":
            return b.and_(args[0], args[1])
        if op == "or":
            return b.or_(args[0], args[1])
        raise HybridInternalError(f"loop expression {op}", "codegen")

    # ---------------------------------------------------------- statements
    def stmt_call(self, call: L.StmtCall):
        st = self.nest.statements[call.stmt]
        env = {v: self.lexpr(a) for v, a in zip(st.iters, call.args)}
        self.env = env
        self.guarded(st.guards, [st.stmt])

    def guarded(self, guards: list, stmts: list):
        """``stmts`` under conditions evaluated outermost first, each only where the previous held."""
        if not guards:
            self.tir_block(stmts)
            return
        self._branch(self.expr(guards[0]), lambda: self.guarded(guards[1:], stmts))

    def tir_block(self, stmts: list):
        """Typed-IR statements run as written (a store, or an opaque statement's loops)."""
        for s in stmts:
            if isinstance(s, T.Store):
                self.store(s)
            elif isinstance(s, T.If):
                cond = self.expr(s.cond)
                self._branch(cond, lambda: self.tir_block(s.body),
                             (lambda: self.tir_block(s.orelse)) if s.orelse else None)
            else:
                self.tir_loop(s)

    def tir_loop(self, s: T.Loop):
        start, stop = self.index(s.start), self.index(s.stop)
        op = "<" if s.step > 0 else ">"
        self.emit_loop(s.var, start, ir.Constant(I64, s.step), lambda phi: self.b.icmp_signed(op, phi, stop),
                       lambda: self.tir_block(s.body), self.env)

    def store(self, s: T.Store):
        value = self.expr(s.value)
        t = self.k.tensors[s.tensor]
        if t.dtype == "bool":
            value = self.b.zext(value, I8)
        self.b.store(value, self.address(s.tensor, s.indices, s))

    def check_index(self, v, dim: int, axis: int, site: int):
        """Leave the function with code ``site`` unless ``0 <= v < dim``."""
        b = self.b
        ok = b.icmp_unsigned("<", v, ir.Constant(I64, dim))
        fail = self.fn.append_basic_block("oob")
        cont = self.fn.append_basic_block("inbounds")
        b.cbranch(ok, cont, fail)
        b.position_at_end(fail)
        b.store(v, self.err)
        b.store(ir.Constant(I64, axis), b.gep(self.err, [ir.Constant(I64, 1)], source_etype=I64))
        if self.outlined:
            # A thread stops its share; the caller reads the code after the region.
            b.store(ir.Constant(I64, site), b.gep(self.err, [ir.Constant(I64, 2)], source_etype=I64))
            b.ret_void()
        else:
            b.ret(ir.Constant(I32, site))
        b.position_at_end(cont)

    def address(self, tensor: str, indices: list, node=None):
        if tensor in self.slots:
            return self.slots[tensor]
        t = self.k.tensors[tensor]
        site = 0
        if node is not None and id(node) in self.checked:
            self.sites.append(CheckSite(t.source_name, t.shape, node.span))
            site = len(self.sites)
        flat = None
        stride = 1
        axis = t.ndim
        for dim, idx in reversed(list(zip(t.shape, indices))):
            axis -= 1
            v = self.index(idx)
            if site:
                self.check_index(v, dim, axis, site)
            term = v if stride == 1 else self.b.mul(v, ir.Constant(I64, stride), flags=("nsw",))
            flat = term if flat is None else self.b.add(flat, term, flags=("nsw",))
            stride *= dim
        if flat is None:
            flat = ir.Constant(I64, 0)
        return self.b.gep(self.ptrs[tensor], [flat], inbounds=True, source_etype=memory_type(t.dtype))

    def index(self, e: T.TExpr):
        v = self.expr(e)
        w = v.type.width
        if w < 64:
            return self.b.zext(v, I64) if _unsigned(e.dtype) else self.b.sext(v, I64)
        return v

    # ---------------------------------------------------------- expressions
    def expr(self, e: T.TExpr):
        m = getattr(self, "e_" + type(e).__name__)
        return m(e)

    def e_Const(self, e: T.Const):
        t = value_type(e.dtype)
        if t is I1:
            return ir.Constant(I1, int(bool(e.value)))
        if isinstance(t, ir.IntType):
            return ir.Constant(t, int(e.value) & ((1 << t.width) - 1))
        with np.errstate(over="ignore"):
            return ir.Constant(t, float(np.dtype(ty.concrete(e.dtype)).type(e.value)))  # rounded (or inf) first

    def e_Var(self, e: T.Var):
        return self.env[e.name]

    def e_Load(self, e: T.Load):
        t = self.k.tensors[e.tensor]
        v = self.b.load(self.address(e.tensor, e.indices, e), typ=memory_type(t.dtype))
        if t.dtype == "bool":
            return self.b.icmp_unsigned("!=", v, ir.Constant(I8, 0))
        return v

    def e_Bin(self, e: T.Bin):
        a, b_ = self.expr(e.a), self.expr(e.b)
        if ty.is_float(e.dtype):
            if e.op in ("//", "%"):
                return self.float_divmod(e.op, e.dtype, a, b_)
            if e.op == "**":
                return self.math("pow", e.dtype, [a, b_])
            return self.farith(e.op, a, b_)
        if e.op == "+":
            return self.b.add(a, b_)
        if e.op == "-":
            return self.b.sub(a, b_)
        if e.op == "*":
            return self.b.mul(a, b_)
        if e.op in ("//", "%"):
            return self.int_divmod(e.op, a, b_, _unsigned(e.dtype))
        if e.op == "**":
            return self.int_power(a, b_, e.b, _unsigned(e.dtype))
        raise HybridUnsupportedError(f"`{e.op}` on {e.dtype}", e.span, None)

    def farith(self, op: str, a, b_):
        f = {"+": self.b.fadd, "-": self.b.fsub, "*": self.b.fmul, "/": self.b.fdiv}[op]
        return f(a, b_, flags=self.flags)

    def int_divmod(self, op: str, a, b_, unsigned: bool):
        # Division by zero gives 0, as NumPy does, instead of trapping; so does MIN // -1
        # (it wraps to MIN), which x86 would also trap on: -1 is handled apart as well.
        b = self.b
        zero = ir.Constant(a.type, 0)
        one = ir.Constant(a.type, 1)
        is_zero = b.icmp_unsigned("==", b_, zero)
        if unsigned:
            safe = b.select(is_zero, one, b_)
            r = b.udiv(a, safe) if op == "//" else b.urem(a, safe)
            return b.select(is_zero, zero, r)
        is_m1 = b.icmp_signed("==", b_, ir.Constant(a.type, -1))
        safe = b.select(b.or_(is_zero, is_m1), one, b_)
        if op == "//":
            r = b.select(is_m1, b.sub(zero, a), self._floordiv_int(a, safe, signed=True))
        else:
            r = b.select(is_m1, zero, self._floormod_int(a, safe))
        return b.select(is_zero, zero, r)

    def float_divmod(self, op: str, dtype: str, a, b_):
        """NumPy's floor_divide / remainder (npy_divmod): the remainder has the divisor's sign, the
        quotient is snapped to an integer; a zero divisor gives a / b and fmod's nan."""
        if ty.concrete(dtype) == "float16":
            r = self.float_divmod(op, "float32", self.b.fpext(a, F32), self.b.fpext(b_, F32))
            return self.b.fptrunc(r, F16)
        b = self.b
        t = a.type
        zero, one, half = (ir.Constant(t, v) for v in (0.0, 1.0, 0.5))
        mod = b.frem(a, b_, flags=self.flags)
        b_zero = b.fcmp_ordered("==", b_, zero)
        mod_nonzero = b.fcmp_unordered("!=", mod, zero)
        fix = b.and_(mod_nonzero, b.xor(b.fcmp_ordered("<", b_, zero), b.fcmp_ordered("<", mod, zero)))
        if op == "%":
            m = b.select(fix, self.farith("+", mod, b_), mod)
            m = b.select(mod_nonzero, m, self.math("copysign", dtype, [zero, b_]))
            return b.select(b_zero, mod, m)
        div = self.farith("/", self.farith("-", a, mod), b_)
        div = b.select(fix, self.farith("-", div, one), div)
        fl = self.math("floor", dtype, [div])
        fl = b.select(b.fcmp_ordered(">", self.farith("-", div, fl), half), self.farith("+", fl, one), fl)
        quotient = self.farith("/", a, b_)
        q = b.select(b.fcmp_unordered("!=", div, zero), fl, self.math("copysign", dtype, [zero, quotient]))
        return b.select(b_zero, quotient, q)

    def int_power(self, a, n, n_expr: T.TExpr, unsigned: bool):
        """a ** n by repeated squaring, wrapping; a negative n gives 1 / a**-n truncated toward zero
        (1 for a == 1, ±1 for a == -1, else 0), where NumPy raises."""
        if isinstance(n_expr, T.Const):
            return self._power_const(a, int(n_expr.value))
        b = self.b
        t = a.type
        zero, one = ir.Constant(t, 0), ir.Constant(t, 1)
        negative = None if unsigned else b.icmp_signed("<", n, zero)
        start = n if unsigned else b.select(negative, zero, n)
        pre = b.block
        header = self.fn.append_basic_block("pow.loop")
        body = self.fn.append_basic_block("pow.body")
        done = self.fn.append_basic_block("pow.end")
        b.branch(header)
        b.position_at_end(header)
        acc, base, rest = b.phi(t), b.phi(t), b.phi(t)
        for phi, v in ((acc, one), (base, a), (rest, start)):
            phi.add_incoming(v, pre)
        b.cbranch(b.icmp_unsigned("!=", rest, zero), body, done)
        b.position_at_end(body)
        acc.add_incoming(b.select(b.trunc(rest, I1), b.mul(acc, base), acc), body)
        base.add_incoming(b.mul(base, base), body)
        rest.add_incoming(b.lshr(rest, one), body)
        b.branch(header)
        b.position_at_end(done)
        if unsigned:
            return acc
        minus_one = ir.Constant(t, -1)
        odd = b.trunc(n, I1)
        inverse = b.select(b.icmp_signed("==", a, one), one,
                           b.select(b.icmp_signed("==", a, minus_one), b.select(odd, minus_one, one), zero))
        return b.select(negative, inverse, acc)

    def _power_const(self, a, n: int):
        result, base = None, a
        while n:
            if n & 1:
                result = base if result is None else self.b.mul(result, base)
            n >>= 1
            if n:
                base = self.b.mul(base, base)
        return result if result is not None else ir.Constant(a.type, 1)

    def _floordiv_int(self, a, d, signed=True):
        b = self.b
        q = b.sdiv(a, d)
        r = b.srem(a, d)
        zero = ir.Constant(a.type, 0)
        adjust = b.and_(b.icmp_signed("!=", r, zero),
                        b.icmp_signed("!=", b.icmp_signed("<", r, zero), b.icmp_signed("<", d, zero)))
        return b.sub(q, b.zext(adjust, a.type))

    def _floormod_int(self, a, d):
        b = self.b
        r = b.srem(a, d)
        zero = ir.Constant(a.type, 0)
        adjust = b.and_(b.icmp_signed("!=", r, zero),
                        b.icmp_signed("!=", b.icmp_signed("<", r, zero), b.icmp_signed("<", d, zero)))
        return b.select(adjust, b.add(r, d), r)

    def e_Unary(self, e: T.Unary):
        a = self.expr(e.a)
        if e.op == "not":
            return self.b.not_(a)
        if ty.is_float(e.dtype):
            return self.b.fneg(a, flags=self.flags)
        return self.b.neg(a)

    def e_Cmp(self, e: T.Cmp):
        a, b_ = self.expr(e.a), self.expr(e.b)
        dt = e.a.dtype
        if ty.is_float(dt):
            if e.op == "!=":
                return self.b.fcmp_unordered("!=", a, b_)
            return self.b.fcmp_ordered(e.op, a, b_)
        if _unsigned(dt) or ty.is_bool(dt):
            return self.b.icmp_unsigned(e.op, a, b_)
        return self.b.icmp_signed(e.op, a, b_)

    def e_Logic(self, e: T.Logic):
        # Short-circuit, as Python: the right side may only be safe where the left allows it.
        b = self.b
        a = self.expr(e.a)
        start = b.block
        rhs_bb = self.fn.append_basic_block("logic.rhs")
        end_bb = self.fn.append_basic_block("logic.end")
        if e.op == "and":
            b.cbranch(a, rhs_bb, end_bb)
        else:
            b.cbranch(a, end_bb, rhs_bb)
        b.position_at_end(rhs_bb)
        r = self.expr(e.b)
        rhs_end = b.block
        b.branch(end_bb)
        b.position_at_end(end_bb)
        phi = b.phi(I1)
        phi.add_incoming(ir.Constant(I1, 0 if e.op == "and" else 1), start)
        phi.add_incoming(r, rhs_end)
        return phi

    def e_Select(self, e: T.Select):
        # Only the taken side is evaluated (it may read memory the other side must not).
        b = self.b
        c = self.expr(e.cond)
        then_bb = self.fn.append_basic_block("sel.then")
        else_bb = self.fn.append_basic_block("sel.else")
        end_bb = self.fn.append_basic_block("sel.end")
        b.cbranch(c, then_bb, else_bb)
        b.position_at_end(then_bb)
        va = self.expr(e.a)
        a_end = b.block
        b.branch(end_bb)
        b.position_at_end(else_bb)
        vb = self.expr(e.b)
        b_end = b.block
        b.branch(end_bb)
        b.position_at_end(end_bb)
        phi = b.phi(va.type)
        phi.add_incoming(va, a_end)
        phi.add_incoming(vb, b_end)
        return phi

    def e_Cast(self, e: T.Cast):
        return self.convert(self.expr(e.a), e.a.dtype, e.dtype)

    def convert(self, v, src: str, dst: str):
        b = self.b
        s, d = ty.concrete(src), ty.concrete(dst)
        if s == d:
            return v
        st, dt_ = value_type(s), value_type(d)
        if d == "bool":
            if s in ty.FLOATS:
                return b.fcmp_unordered("!=", v, ir.Constant(st, 0.0))
            return b.icmp_unsigned("!=", v, ir.Constant(st, 0))
        if s == "bool":
            return b.uitofp(v, dt_) if d in ty.FLOATS else b.zext(v, dt_)
        if s in ty.FLOATS and d in ty.FLOATS:
            if _fbits(d) > _fbits(s):
                return b.fpext(v, dt_)
            if (s, d) == ("float64", "float16"):
                return b.fptrunc(self._to_float32_odd(v), dt_)
            return b.fptrunc(v, dt_)
        if s in ty.FLOATS:
            return self._float_to_int(v, d)
        if d == "float16":
            # Through float32, which holds every integer below float16's overflow threshold exactly.
            return b.fptrunc(self.convert(v, s, "float32"), dt_)
        if d in ty.FLOATS:
            return b.uitofp(v, dt_) if s in ty.UNSIGNED else b.sitofp(v, dt_)
        if dt_.width > st.width:
            return b.zext(v, dt_) if s in ty.UNSIGNED else b.sext(v, dt_)
        if dt_.width < st.width:
            return b.trunc(v, dt_)
        return v

    def _float_to_int(self, v, d: str):
        """NumPy's cast as C compilers build it on x86: truncation to int32 for the types that fit
        in it, to int64 for the others (uint64 above 2**63 unsigned), then wrapping to ``d``.
        Where the hardware answers for values out of range (nan and inf too) the answer is
        spelt out, since LLVM's fptosi would leave it undefined."""
        b = self.b
        dt_ = value_type(d)
        if v.type == F16:
            v = b.fpext(v, F32)
        if d == "uint64":
            big = b.fcmp_ordered(">=", v, ir.Constant(v.type, 2.0 ** 63))
            fits = b.fcmp_ordered("<", v, ir.Constant(v.type, 2.0 ** 64))
            high = b.select(fits, b.fptoui(v, I64), ir.Constant(I64, 0))
            return b.select(big, high, self._truncate(v, I64))
        r = self._truncate(v, I32 if d in ("int8", "int16", "int32", "uint8", "uint16") else I64)
        return r if r.type == dt_ else b.trunc(r, dt_)

    def _truncate(self, v, t: ir.IntType):
        """cvttsd2si: the value truncated toward zero, or the minimum of ``t`` where it does not fit."""
        b = self.b
        low = 1 << (t.width - 1)
        fits = b.and_(b.fcmp_ordered(">=", v, ir.Constant(v.type, float(-low))),
                      b.fcmp_ordered("<", v, ir.Constant(v.type, float(low))))
        return b.select(fits, b.fptosi(v, t), ir.Constant(t, -low))

    def _to_float32_odd(self, v):
        """float64 -> float32 rounding to odd, so that a further rounding to float16 is exact
        (no double rounding) without a libgcc/compiler-rt call."""
        b = self.b
        f = b.fptrunc(v, F32)
        inexact = b.and_(b.fcmp_ordered("!=", b.fpext(f, v.type), v), self.i_isfinite("float32", f))
        bits = b.bitcast(f, ir.IntType(32))
        return b.bitcast(b.or_(bits, b.zext(inexact, ir.IntType(32))), F32)

    # ---------------------------------------------------------- intrinsics
    def declare(self, name: str, ret: ir.Type, params: list):
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, params), name)
        return fn

    def math(self, name: str, dtype: str, args: list):
        """A math function of float values: an LLVM intrinsic or a libm call.  float16 is computed
        in float32 and rounded back, as NumPy does."""
        dt = ty.concrete(dtype)
        if dt == "float16":
            r = self.math(name, "float32", [self.b.fpext(a, F32) for a in args])
            return self.b.fptrunc(r, F16)
        t = value_type(dt)
        if name not in _NATIVE_MATH:
            self.scalar_calls = True
        if name in _LIBM:
            fname = name + ("f" if dt == "float32" else "")
        else:
            fname = f"llvm.{name}.f{_fbits(dt)}"
        return self.b.call(self.declare(fname, t, [t] * len(args)), args, fastmath=self.flags)

    def e_Intrinsic(self, e: T.Intrinsic):
        args = [self.expr(a) for a in e.args]
        dt = ty.concrete(e.args[0].dtype)
        if e.name in _MATH:
            return self.math(_MATH[e.name], dt, args)
        r = getattr(self, "i_" + e.name)(dt, *args)
        want = value_type(e.dtype)
        if r.type != want:  # popcount: the count is uint8 (int64 for a weak argument)
            r = self.b.trunc(r, want) if r.type.width > want.width else self.b.zext(r, want)
        return r

    def i_rsqrt(self, dt, x):
        return self.farith("/", ir.Constant(x.type, 1.0), self.math("sqrt", dt, [x]))

    def i_sigmoid(self, dt, x):
        one = ir.Constant(x.type, 1.0)
        ex = self.math("exp", dt, [self.b.fneg(x, flags=self.flags)])
        return self.farith("/", one, self.farith("+", one, ex))

    def i_abs(self, dt, x):
        if dt in ty.FLOATS:
            return self.math("fabs", dt, [x])
        if dt in ty.UNSIGNED:
            return x
        return self.b.select(self.b.icmp_signed("<", x, ir.Constant(x.type, 0)), self.b.neg(x), x)

    def i_sign(self, dt, x):
        b = self.b
        t = x.type
        if dt in ty.FLOATS:
            zero, one, minus_one = (ir.Constant(t, v) for v in (0.0, 1.0, -1.0))
            rest = b.select(b.fcmp_ordered("==", x, zero), zero, x)  # nan stays nan
            return b.select(b.fcmp_ordered(">", x, zero), one, b.select(b.fcmp_ordered("<", x, zero), minus_one, rest))
        zero = ir.Constant(t, 0)
        if dt in ty.UNSIGNED:
            return b.zext(b.icmp_unsigned("!=", x, zero), t)
        return b.sub(b.zext(b.icmp_signed(">", x, zero), t), b.zext(b.icmp_signed("<", x, zero), t))

    def i_isnan(self, dt, x):
        return self.b.fcmp_unordered("uno", x, x)

    def i_isinf(self, dt, x):
        inf, minus_inf = ir.Constant(x.type, float("inf")), ir.Constant(x.type, float("-inf"))
        return self.b.or_(self.b.fcmp_ordered("==", x, inf), self.b.fcmp_ordered("==", x, minus_inf))

    def i_isfinite(self, dt, x):
        inf, minus_inf = ir.Constant(x.type, float("inf")), ir.Constant(x.type, float("-inf"))
        return self.b.and_(self.b.fcmp_ordered("!=", x, inf), self.b.fcmp_ordered("!=", x, minus_inf))

    def i_max(self, dt, x, y):
        return self._extremum(">", dt, x, y)

    def i_min(self, dt, x, y):
        return self._extremum("<", dt, x, y)

    def _extremum(self, op, dt, x, y):
        # NumPy's maximum/minimum: x if x beats y or x is nan, else y (so a nan y wins too).  Of two
        # equal values (-0.0 and 0.0) NumPy returns y, but x for float16, whose loop compares with >=.
        b = self.b
        if dt in ty.FLOATS:
            beats = b.fcmp_ordered(op + "=" if dt == "float16" else op, x, y)
            return b.select(b.or_(beats, b.fcmp_unordered("uno", x, x)), x, y)
        cmp = b.icmp_unsigned if dt in ty.UNSIGNED or dt == "bool" else b.icmp_signed
        return b.select(cmp(op, x, y), x, y)

    def i_ceil_div(self, dt, x, y):
        unsigned = dt in ty.UNSIGNED
        q = self.int_divmod("//", x, y, unsigned)
        r = self.int_divmod("%", x, y, unsigned)
        return self.b.add(q, self.b.zext(self.b.icmp_unsigned("!=", r, ir.Constant(x.type, 0)), x.type))

    def i_popcount(self, dt, x):
        # NumPy's bitwise_count: the bits of |x|.
        magnitude = self.i_abs(dt, x)
        return self.b.call(self.declare(f"llvm.ctpop.i{x.type.width}", x.type, [x.type]), [magnitude])


@functools.lru_cache(maxsize=None)
def openmp_available() -> bool:
    """Load libgomp into the process so that JIT code can call GOMP_parallel."""
    import ctypes.util
    name = ctypes.util.find_library("gomp")
    if not name:
        return False
    try:
        llvm.load_library_permanently(name)
    except RuntimeError:
        return False
    return True


def _fbits(dt: str) -> int:
    return {"float16": 16, "float32": 32, "float64": 64}[dt]


def function_name(k: T.TypedKernel) -> str:
    return "hyb_" + k.name


def generate_ir(nest: L.LoopNest, options: Options) -> Generated:
    """Unoptimised LLVM IR text of the kernel, with its run-time check sites."""
    k = nest.kernel
    if not half_in_hardware():
        span = _first_float16(k)
        if span is not False:
            raise HybridUnsupportedError("float16 needs a CPU that converts it in hardware (x86: F16C); "
                                         "this one does not", span, "use float32, or run the kernel with emulate()")
    module = ir.Module(name=k.name)
    tm = target_machine()
    module.triple = tm.triple
    module.data_layout = str(tm.target_data)
    fb = _FunctionBuilder(nest, options, module, function_name(k))
    fb.build()
    text = str(module)
    width = vector_width(fb.scalar_calls, options.target or host_cpu())
    if width:
        text = re.sub(r"(?m)^(define [^\n]*\))$", rf'\1 "prefer-vector-width"="{width}"', text)
    return Generated(text, fb.sites)


def vector_width(scalar_calls: bool, target) -> int | None:
    """The vector width LLVM should prefer (its "prefer-vector-width" function attribute), or None for
    its own default.  On AVX-512 machines LLVM keeps to 256 bits unless told otherwise; hyb's loops
    run faster with 512 (covariance 2.5x, gemm 1.3x on the benchmark machine), except where the
    loop calls a math function that has no vector instruction (`exp` in softmax): those calls are
    made one lane at a time, and wider vectors only add the moving of lanes around them."""
    return None if scalar_calls or not target.avx512 else 512


@functools.lru_cache(maxsize=None)
def half_in_hardware() -> bool:
    """Whether float16 compiles without helper functions: on x86 without F16C, LLVM would call
    compiler-rt's __extendhfsf2/__truncsfhf2, which a Python process does not have."""
    if not llvm.get_process_triple().startswith(("x86_64", "i386", "i686")):
        return True
    return bool(llvm.get_host_cpu_features().get("f16c", False))


def _first_float16(k: T.TypedKernel):
    """The span of the first float16 tensor or value of the kernel, False if there is none."""
    for t in k.tensors.values():
        if ty.concrete(t.dtype) == "float16":
            return t.span
    stack = list(k.body)
    while stack:
        s = stack.pop()
        if isinstance(s, (T.Loop, T.If)):
            stack.extend(s.body + getattr(s, "orelse", []))
            continue
        for e in (s.value, *s.indices):
            for sub in T.walk_expr(e):
                if sub.dtype == "float16":
                    return sub.span
    return False


@functools.lru_cache(maxsize=None)
def target_machine():
    return new_target_machine()


def new_target_machine():
    """A host target machine of one's own (an MCJIT engine takes ownership of the one it gets)."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                        features=llvm.get_host_cpu_features().flatten(),
                                        opt=3, reloc="default", codemodel="jitdefault")


def optimize(ir_text: str) -> llvm.ModuleRef:
    """Parse, verify and run the O3 pipeline (loop and SLP vectorisers on)."""
    mod = llvm.parse_assembly(ir_text)
    mod.verify()
    tm = target_machine()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod


class JitFunction:
    """Machine code for one kernel, kept alive with its execution engine.

    ``object_code`` is the object file MCJIT produced; :meth:`from_object` builds the same
    function from it (the disk cache) without generating code again."""

    def __init__(self, mod: llvm.ModuleRef, name: str, object_code: bytes | None = None):
        openmp_available()  # JIT code of parallel loops calls libgomp
        self.object_code = object_code
        self.engine = llvm.create_mcjit_compiler(mod, new_target_machine())
        self.engine.set_object_cache(self._compiled, self._lookup)
        self.engine.finalize_object()
        self.address = self.engine.get_function_address(name)
        if not self.address:
            raise HybridInternalError(f"function {name} not found after JIT compilation", "codegen")

    def _compiled(self, module, buffer: bytes):
        self.object_code = bytes(buffer)

    def _lookup(self, module):
        return self.object_code

    @classmethod
    def from_object(cls, ir_text: str, object_code: bytes, name: str) -> "JitFunction":
        return cls(llvm.parse_assembly(ir_text), name, object_code)


def assembly(mod: llvm.ModuleRef) -> str:
    return target_machine().emit_assembly(mod)
