"""LLVM back end: loop IR → LLVM IR (llvmlite) → optimised machine code (MCJIT).

One function per specialised kernel::

    i32 hyb_<name>(ptr noalias %t0, ptr noalias %t1, ..., ptr %rt)

with one pointer per non-scalar tensor (inputs in parameter order, then outputs and
temporaries in order of declaration; see :func:`buffer_order`) and ``rt``, the runtime block
(its slots are :mod:`hyb.codegen.abi`'s ``RT_*``): the number of threads to use, and a
shape-generic kernel's run-time sizes.  It returns 0, or, when a subscript checked at run time
is out of bounds, the number of that check site (1-based, see :class:`CheckSite`) after writing
the offending index and axis to ``rt[RT_INDEX]`` and ``rt[RT_AXIS]``: no memory outside the
tensors is ever touched.

A loop marked parallel is outlined into ``void hyb_<name>.par<k>(ptr %ctx)`` and run by
libgomp's ``GOMP_parallel``; each thread takes a contiguous block of the iterations (or
every n-th one when the loop's upper bound is not a simple expression) with private copies
of the scalar locals.  Without libgomp, parallel loops run serially.  Scalar locals live in
``alloca`` slots that ``mem2reg`` promotes to registers.  Shapes are constants, so every
address is ``base + Σ index_k · stride_k`` with constant strides (products of sizes read from
``rt`` in a shape-generic kernel).
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace

import llvmlite.binding as llvm
from llvmlite import ir

from ..dsl import tir
from ..dsl import types
from ..target import host_cpu
from ..errors import HybridInternalError, HybridUnsupportedError
from ..schedule import loops
from ..schedule.argext import Extremum, FirstIndex
from ..schedule.guarded import Guarded
from ..schedule.transpose import Transposed
from .abi import PRINT_FUNCTION, RT_AXIS, RT_CODE, RT_INDEX, RT_SIZES, buffer_order, function_name
from .jit import openmp_available, target_machine
from .llvm_expr import LlvmExpressions
from .llvm_extremum import ExtremumLoops
from .llvm_transpose import TransposedCopies
from .llvm_parallel import ParallelOutlining
from .walker import LoopWalker
from . import vecmath
from .llvm_types import F64, I8, I32, I64, PTR, is_unsigned, memory_type

# A vector loop of more constant trips than this is unrolled UNROLL_LONG times at most after
# vectorisation (a register block's row of 64 float32 is unrolled whole)
MAX_FULL_UNROLL = 128
UNROLL_LONG = 4


@dataclass(frozen=True)
class Options:
    fastmath: bool = False
    target: object = None  # hyb.target.CpuTarget; None: the host
    vector_math: bool = True  # math functions with a vector variant are vectorised (codegen.vecmath)
    reassociate: bool = False  # floating-point sums and products may be reassociated (ScheduleOptions.resolve)


def accumulates_product(s: tir.Store) -> bool:
    """Whether ``s`` adds a product to the float cell it stores to (``c = c + a * b``, ``c = c - a
    * b``, in either order): the update of a sum of products."""
    v = s.value
    if not (isinstance(v, tir.Bin) and v.op in ("+", "-") and types.is_float(v.dtype)):
        return False
    sides = (v.a, v.b) if v.op == "+" else (v.a,)
    cell = [x for x in sides if isinstance(x, tir.Load) and x.tensor == s.tensor and x.indices == s.indices]
    other = v.b if cell and cell[0] is v.a else v.a
    return bool(cell) and isinstance(other, tir.Bin) and other.op == "*"


@dataclass
class Generated:
    ir: str
    sites: list  # CheckSite, numbered from 1


# the emitter of each loop form this back end has code for, by the form's class (tir.Loop.form)
FORM_EMITTERS = {
    Extremum: ExtremumLoops.extremum_loop,
    FirstIndex: ExtremumLoops.first_index_loop,
    Guarded: ExtremumLoops.guarded_loop,
    Transposed: TransposedCopies.transposed_copy,
}


class _FunctionBuilder(ExtremumLoops, TransposedCopies, LoopWalker, ParallelOutlining, LlvmExpressions):
    """The LLVM back end's hooks on the shared walk (:class:`~hyb.codegen.walker.LoopWalker`):
    loops with phi counters, branches between basic blocks, ``gep`` addresses, and checks that
    leave the function with the site's code."""

    def __init__(self, nest: loops.LoopNest, options: Options, module: ir.Module, fname: str):
        super().__init__(nest)
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
        self.scalar_calls = False  # calls a math function that has no vector instruction or variant
        self.vector_calls = {}  # callee -> (dtype, arguments, variants): calls libmvec vectorises (vecmath)
        self.vector_call_count = 0  # such calls emitted so far
        self.n_parallel = 0
        entry = self.fn.append_basic_block("entry")
        start = self.fn.append_basic_block("start")
        # Stack slots live in the entry block, which only branches to `start`: an alloca made
        # later (inside loops) must not grow the stack on every iteration.
        self.allocas = ir.IRBuilder(entry)
        self.allocas.position_before(self.allocas.branch(start))
        self.b = ir.IRBuilder(entry)
        self.b.position_before(entry.terminator)
        self.slots = {}
        self.blocks = {}  # register blocks: arrays on this function's stack
        self.make_blocks()
        for t in self.k.tensors.values():
            if t.kind == "param":
                self.slots[t.name] = self.ptrs[t.name]  # read-only: LLVM hoists its loads
            elif t.kind == "scalar":
                slot = self.b.alloca(memory_type(t.dtype), name="s_" + t.name)
                self.b.store(ir.Constant(memory_type(t.dtype), 0), slot)
                self.slots[t.name] = slot
        self.loopvars = {}
        # a shape-generic kernel's sizes: their places in the runtime block
        self.size_slots = {name: RT_SIZES + k for k, name in enumerate(tir.size_symbols(self.k))}
        self.flags = ("fast",) if options.fastmath else ()
        # sums, differences and products: reassociable where the kernel allows it, so that LLVM
        # vectorises a reduction into one cell or scalar as partial sums (another order of additions)
        self.sum_flags = self.flags or (("reassoc",) if options.reassociate else ())
        # the flags of an accumulation's update (`c[i, j] += a[i, k] * b[k, j]`): where sums are
        # reassociated, its product may also fuse into the addition (an FMA, one rounding for two),
        # as BLAS computes; a statement of any other form keeps each operation's own rounding
        self.update_flags = self.flags or (("reassoc", "contract") if options.reassociate else ())
        self.updating = False  # emitting the value of such an update
        self.b.position_at_end(start)

    def store(self, s: tir.Store):
        if self.update_flags != self.sum_flags and accumulates_product(s):
            self.updating = True
            try:
                return super().store(s)
            finally:
                self.updating = False
        return super().store(s)

    def make_blocks(self):
        """A stack array for each register block, in the entry block of the function being built."""
        for t in self.k.tensors.values():
            if t.kind == "register":
                slot = self.b.alloca(memory_type(t.dtype), size=ir.Constant(I64, t.size), name="r_" + t.name)
                slot.align = 64
                self.blocks[t.name] = slot

    def build(self):
        self.block(self.nest.body)
        self.b.ret(ir.Constant(I32, 0))
        return self.fn

    # ---------------------------------------------------------- loop IR
    def for_loop(self, s: loops.For):
        if s.parallel and not self.outlined and openmp_available():
            return self.parallel_loop(s)
        if s.square:
            self.square_copy(s, lambda: self.for_loop(replace(s, square=0)))
            return
        self.emit_loop(s.var, self.lexpr(s.init), ir.Constant(I64, s.step), lambda phi: self.lexpr(s.cond),
                       lambda: self.block(s.body), self.loopvars, ("nsw",), vector=s.vector,
                       trips=loops.constant_trips(s))

    def emit_loop(self, var: str, start, stride, cond, body, scope: dict, flags=(), vector=False, trips=None):
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
        calls = self.vector_call_count
        body()
        phi.add_incoming(b.add(phi, stride, name=var + ".next", flags=flags), b.block)
        latch = b.branch(header)
        # (in shape-generic code a loop of vector math calls whose trips are not known counts as
        # long: LLVM leaves the vectorised body of a loop with calls as it is, where the body of a
        # long constant loop is unrolled, and calls interleaved run faster)
        long = trips > MAX_FULL_UNROLL if trips is not None else bool(
            self.size_slots and self.vector_call_count > calls)
        if vector or long:
            latch.set_metadata("llvm.loop", self.vector_loop_id(long, before=vector))
        b.position_at_end(exit_)
        del scope[var]

    def vector_loop_id(self, long=False, before=True):
        """Loop metadata: no unrolling ``before`` vectorisation (a ``vector`` loop); the loops the
        vectoriser makes of it (vector body, remainder) carry only `isvectorized`, so LLVM's usual
        unrolling applies to them, except that those of a ``long`` loop (a constant trip count over
        MAX_FULL_UNROLL) are unrolled UNROLL_LONG times at most: LLVM unrolls a constant-trip loop
        whole where its body is small, which for a vector loop of hundreds of steps multiplied the
        code, and its compile time, many times over (mvt: 185 lines of IR became 11 800)."""
        m = self.module
        follow = [m.add_metadata([ir.MetaDataString(m, "llvm.loop.isvectorized"), ir.Constant(I32, 1)])]
        if long:
            follow.append(m.add_metadata([ir.MetaDataString(m, "llvm.loop.unroll.count"),
                                          ir.Constant(I32, UNROLL_LONG)]))
        hints = ([m.add_metadata([ir.MetaDataString(m, "llvm.loop.unroll.disable")])] if before else []) + [
            m.add_metadata([ir.MetaDataString(m, "llvm.loop.vectorize.followup_all"), *follow])]
        # a loop ID names itself first; the placeholder makes the node one of its own (llvmlite
        # hands out one node for equal operands)
        loop_id = m.add_metadata([ir.MetaDataString(m, f"loop{len(m.metadata)}")] + hints)
        loop_id.operands = (loop_id, *hints)
        return loop_id

    def counted_loop(self, s: loops.For, start, stop, stride):
        """``s`` from ``start`` by ``stride``, up to ``stop`` (or while its own condition holds if None)."""
        def cond(phi):
            return self.lexpr(s.cond) if stop is None else self.b.icmp_signed("<", phi, stop)

        self.emit_loop(s.var, start, stride, cond, lambda: self.block(s.body), self.loopvars, ("nsw",))

    def branch(self, cond, then_fn, else_fn=None):
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

    def loop_int(self, value: int):
        return ir.Constant(I64, value)

    def loop_var(self, name: str):
        if name in self.loopvars:
            return self.loopvars[name]
        return self.size(name)  # a run-time size (an isl parameter in the loops' bounds)

    def size(self, name: str):
        """A run-time size, read from the runtime block (LLVM keeps one load of each)."""
        b = self.b
        v = b.load(self.rt_slot(self.size_slots[name]), typ=I64)
        v.set_metadata("invariant.load", self.module.add_metadata([]))
        return v

    def rt_slot(self, slot: int):
        """The address of one slot of the runtime block (``abi.RT_*``; the first is ``rt`` itself)."""
        if slot == 0:
            return self.err
        return self.b.gep(self.err, [ir.Constant(I64, slot)], source_etype=I64)

    def e_Size(self, e: tir.Size):
        return self.size(e.name)

    def loop_op(self, op: str, args: list):
        b = self.b
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

    def loop_form(self, s: tir.Loop):
        """A loop with a form: that form's emitter (:data:`FORM_EMITTERS`), or the loop as written."""
        emit = FORM_EMITTERS.get(type(s.form))
        if emit is None:
            self.written_loop(s)
        else:
            emit(self, s)

    # ---------------------------------------------------------- statements
    def bind_statement(self, st, call: loops.StmtCall, body):
        self.env = {v: self.lexpr(a) for v, a in zip(st.iters, call.args)}
        body()

    def tir_loop_emit(self, s: tir.Loop, start, stop, body):
        op = "<" if s.step > 0 else ">"
        self.emit_loop(s.var, start, ir.Constant(I64, s.step), lambda phi: self.b.icmp_signed(op, phi, stop),
                       body, self.env)

    def memory_value(self, t: tir.Tensor, value):
        return self.b.zext(value, I8) if self.is_bool(t) else value

    def store_value(self, address, value):
        self.b.store(value, address)

    # ---------------------------------------------------------- addresses
    def scalar_ref(self, tensor: str):
        return self.slots[tensor]

    def check_index(self, v, dim, axis: int, site: int):
        """Leave the function with code ``site`` unless ``0 <= v < dim`` (a constant or a value)."""
        bound = ir.Constant(I64, dim) if isinstance(dim, int) else dim
        self.fail_unless(self.b.icmp_unsigned("<", v, bound), site, v, axis)
        return v

    def fail_unless(self, ok, site: int, v=None, axis: int = 0):
        """Leave the function with code ``site`` (after writing ``v`` and ``axis`` for the error
        message) unless ``ok``."""
        b = self.b
        v = ir.Constant(I64, 0) if v is None else v
        fail = self.fn.append_basic_block("oob")
        cont = self.fn.append_basic_block("inbounds")
        b.cbranch(ok, cont, fail)
        b.position_at_end(fail)
        b.store(v, self.rt_slot(RT_INDEX))
        b.store(ir.Constant(I64, axis), self.rt_slot(RT_AXIS))
        if self.outlined:
            # A thread stops its share; the caller reads the code after the region.
            b.store(ir.Constant(I64, site), self.rt_slot(RT_CODE))
            b.ret_void()
        else:
            b.ret(ir.Constant(I32, site))
        b.position_at_end(cont)

    def emit_print(self, site: int, values: list, dtypes: list):
        """``hyb_print(rt, site, slots)`` with each value in an 8-byte slot: an int64, or a double."""
        b = self.b
        raw = self.allocas.alloca(ir.ArrayType(I64, max(1, len(values))), name="print.values")
        slots = b.inttoptr(b.ptrtoint(raw, I64), PTR)
        for k, (v, dt) in enumerate(zip(values, dtypes)):
            if dt == "bfloat16":  # its 16 bits (i16), zero-extended
                v = b.zext(v, I64)
            elif dt in types.FLOATS:
                v = b.bitcast(v if v.type == F64 else b.fpext(v, F64), I64)
            elif v.type.width < 64:
                v = b.zext(v, I64) if dt in types.UNSIGNED or dt == "bool" else b.sext(v, I64)
            b.store(v, b.gep(slots, [ir.Constant(I64, k)], source_etype=I64))
        fn = self.declare(PRINT_FUNCTION, ir.VoidType(), [PTR, I64, PTR])
        b.call(fn, [self.err, ir.Constant(I64, site), slots])

    def scale_index(self, v, stride):
        return self.b.mul(v, ir.Constant(I64, stride) if isinstance(stride, int) else stride, flags=("nsw",))

    def add_index(self, flat, term):
        return self.b.add(flat, term, flags=("nsw",))

    def element(self, tensor: str, flat):
        if flat is None:
            flat = ir.Constant(I64, 0)
        t = self.k.tensors[tensor]
        base = self.blocks[tensor] if t.kind == "register" else self.ptrs[tensor]
        return self.b.gep(base, [flat], inbounds=True, source_etype=memory_type(t.dtype))

    def to_index(self, v, dtype: str):
        w = v.type.width
        if w < 64:
            return self.b.zext(v, I64) if is_unsigned(dtype) else self.b.sext(v, I64)
        return v


def generate_ir(nest: loops.LoopNest, options: Options) -> Generated:
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
    text = vecmath.annotate(str(module), fb.vector_calls)
    width = vector_width(fb.scalar_calls, options.target or host_cpu())
    if width:
        text = re.sub(r"(?m)^(define [^\n]*\))$", rf'\1 "prefer-vector-width"="{width}"', text)
    return Generated(text, fb.sites)


def vector_width(scalar_calls: bool, target) -> int | None:
    """The vector width LLVM should prefer (its "prefer-vector-width" function attribute), or None for
    its own default.  On AVX-512 machines LLVM keeps to 256 bits unless told otherwise; hyb's loops
    run faster with 512 (covariance 2.5x, gemm 1.3x on the benchmark machine), except where the
    loop calls a math function that has neither a vector instruction nor a libmvec variant
    (:mod:`hyb.codegen.vecmath`; `exp` in softmax with ``vector_math`` off): those calls are made
    one lane at a time, and wider vectors only add the moving of lanes around them."""
    return None if scalar_calls or not target.avx512 else 512


@functools.lru_cache(maxsize=None)
def half_in_hardware() -> bool:
    """Whether float16 compiles without helper functions: on x86 without F16C, LLVM would call
    compiler-rt's __extendhfsf2/__truncsfhf2, which a Python process does not have."""
    if not llvm.get_process_triple().startswith(("x86_64", "i386", "i686")):
        return True
    return bool(llvm.get_host_cpu_features().get("f16c", False))


def _first_float16(k: tir.TypedKernel):
    """The span of the first float16 tensor or value of the kernel, False if there is none."""
    for t in k.tensors.values():
        if types.concrete(t.dtype) == "float16":
            return t.span
    stack = list(k.body)
    while stack:
        s = stack.pop()
        if isinstance(s, (tir.Loop, tir.If)):
            stack.extend(s.body + getattr(s, "orelse", []))
            continue
        for e in ((s.cond,) if isinstance(s, tir.Assert) else (s.value, *s.indices)):
            for sub in tir.walk_expr(e):
                if sub.dtype == "float16":
                    return sub.span
    return False
