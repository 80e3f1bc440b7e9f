"""LLVM back end: loop IR → LLVM IR (llvmlite) → optimised machine code (MCJIT).

One function per specialised kernel::

    void hyb_<name>(ptr noalias %t0, ptr noalias %t1, ...)

with one pointer per non-scalar tensor (inputs in parameter order, then outputs and
temporaries in order of declaration; see :func:`buffer_order`).  Scalar locals live in
``alloca`` slots that ``mem2reg`` promotes to registers.  Shapes are constants, so every
address is ``base + Σ index_k · stride_k`` with constant strides.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import llvmlite.binding as llvm
from llvmlite import ir

from ..dsl import tir as T
from ..dsl import types as ty
from ..errors import HybridCompileError, HybridUnsupportedError
from ..schedule import loops as L

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I64 = ir.IntType(64)
PTR = ir.PointerType()

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


@dataclass
class Options:
    fastmath: bool = False


class _FunctionBuilder:
    def __init__(self, nest: L.LoopNest, options: Options, module: ir.Module, fname: str):
        self.nest = nest
        self.k: T.TypedKernel = nest.poly.kernel
        self.opt = options
        self.module = module
        order = buffer_order(self.k)
        fnty = ir.FunctionType(ir.VoidType(), [PTR] * len(order))
        self.fn = ir.Function(module, fnty, fname)
        self.ptrs = {}
        for arg, name in zip(self.fn.args, order):
            arg.name = "t_" + name
            arg.add_attribute("noalias")
            self.ptrs[name] = arg
        entry = self.fn.append_basic_block("entry")
        self.b = ir.IRBuilder(entry)
        self.slots = {}
        for t in self.k.tensors.values():
            if t.kind == "scalar":
                slot = self.b.alloca(memory_type(t.dtype), name="s_" + t.name)
                self.b.store(ir.Constant(memory_type(t.dtype), 0), slot)
                self.slots[t.name] = slot
        self.loopvars = {}
        self.flags = ("fast",) if options.fastmath else ()

    def build(self):
        self.block(self.nest.body)
        self.b.ret_void()
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
                raise HybridCompileError(f"internal: loop IR node {type(s).__name__}")

    def for_loop(self, s: L.For):
        b = self.b
        init = self.lexpr(s.init)
        pre = b.block
        header = self.fn.append_basic_block(f"for.{s.var}")
        body = self.fn.append_basic_block(f"body.{s.var}")
        exit_ = self.fn.append_basic_block(f"end.{s.var}")
        b.branch(header)
        b.position_at_end(header)
        phi = b.phi(I64, name=s.var)
        phi.add_incoming(init, pre)
        self.loopvars[s.var] = phi
        cond = self.lexpr(s.cond)
        b.cbranch(cond, body, exit_)
        b.position_at_end(body)
        self.block(s.body)
        nxt = b.add(phi, ir.Constant(I64, s.step), name=s.var + ".next", flags=("nsw",))
        phi.add_incoming(nxt, b.block)
        b.branch(header)
        b.position_at_end(exit_)
        del self.loopvars[s.var]

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
        raise HybridCompileError(f"internal: loop expression {op}")

    # ---------------------------------------------------------- statements
    def stmt_call(self, call: L.StmtCall):
        st = self.nest.statements[call.stmt]
        env = {v: self.lexpr(a) for v, a in zip(st.iters, call.args)}
        self.env = env
        if st.guards:
            cond = self.expr(st.guards[0])
            for g in st.guards[1:]:
                cond = self.b.and_(cond, self.expr(g))
            self._branch(cond, lambda: self.store(st.store))
        else:
            self.store(st.store)

    def store(self, s: T.Store):
        value = self.expr(s.value)
        t = self.k.tensors[s.tensor]
        if t.dtype == "bool":
            value = self.b.zext(value, I8)
        self.b.store(value, self.address(s.tensor, s.indices))

    def address(self, tensor: str, indices: list):
        if tensor in self.slots:
            return self.slots[tensor]
        t = self.k.tensors[tensor]
        flat = None
        stride = 1
        for dim, idx in reversed(list(zip(t.shape, indices))):
            v = self.index(idx)
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
        return ir.Constant(t, float(e.value))

    def e_Var(self, e: T.Var):
        return self.env[e.name]

    def e_Load(self, e: T.Load):
        t = self.k.tensors[e.tensor]
        v = self.b.load(self.address(e.tensor, e.indices), typ=memory_type(t.dtype))
        if t.dtype == "bool":
            return self.b.icmp_unsigned("!=", v, ir.Constant(I8, 0))
        return v

    def e_Bin(self, e: T.Bin):
        a, b_ = self.expr(e.a), self.expr(e.b)
        b = self.b
        if ty.is_float(e.dtype):
            f = {"+": b.fadd, "-": b.fsub, "*": b.fmul, "/": b.fdiv}.get(e.op)
            if f is None:
                raise HybridUnsupportedError(f"`{e.op}` on {e.dtype}", e.span, None)
            return f(a, b_, flags=self.flags)
        unsigned = _unsigned(e.dtype)
        if e.op == "+":
            return b.add(a, b_)
        if e.op == "-":
            return b.sub(a, b_)
        if e.op == "*":
            return b.mul(a, b_)
        if e.op in ("//", "%"):
            # Division by zero gives 0, as NumPy does, instead of trapping; so does MIN // -1
            # (it wraps to MIN), which x86 would also trap on: -1 is handled apart as well.
            zero = ir.Constant(a.type, 0)
            one = ir.Constant(a.type, 1)
            is_zero = b.icmp_unsigned("==", b_, zero)
            if unsigned:
                safe = b.select(is_zero, one, b_)
                r = b.udiv(a, safe) if e.op == "//" else b.urem(a, safe)
                return b.select(is_zero, zero, r)
            is_m1 = b.icmp_signed("==", b_, ir.Constant(a.type, -1))
            safe = b.select(b.or_(is_zero, is_m1), one, b_)
            if e.op == "//":
                r = b.select(is_m1, b.sub(zero, a), self._floordiv_int(a, safe, signed=True))
            else:
                r = b.select(is_m1, zero, self._floormod_int(a, safe))
            return b.select(is_zero, zero, r)
        raise HybridUnsupportedError(f"`{e.op}` on {e.dtype}", e.span, None)

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
            return b.fpext(v, dt_) if _fbits(d) > _fbits(s) else b.fptrunc(v, dt_)
        if s in ty.FLOATS:
            return b.fptoui(v, dt_) if d in ty.UNSIGNED else b.fptosi(v, dt_)
        if d in ty.FLOATS:
            return b.uitofp(v, dt_) if s in ty.UNSIGNED else b.sitofp(v, dt_)
        if dt_.width > st.width:
            return b.zext(v, dt_) if s in ty.UNSIGNED else b.sext(v, dt_)
        if dt_.width < st.width:
            return b.trunc(v, dt_)
        return v

    def e_Intrinsic(self, e: T.Intrinsic):
        raise HybridUnsupportedError(f"the intrinsic `{e.name}` is not supported by the LLVM back end yet", e.span)


def _fbits(dt: str) -> int:
    return {"float16": 16, "float32": 32, "float64": 64}[dt]


def function_name(k: T.TypedKernel) -> str:
    return "hyb_" + k.name


def generate_ir(nest: L.LoopNest, options: Options) -> str:
    """Unoptimised LLVM IR text of the kernel."""
    k = nest.poly.kernel
    for t in k.tensors.values():
        if ty.concrete(t.dtype) not in ty.COMPILED_DTYPES:
            raise HybridUnsupportedError(
                f"dtype {t.dtype} (tensor `{t.source_name}`) is not supported by the LLVM back end yet", t.span,
                "supported: " + ", ".join(ty.COMPILED_DTYPES) + "; emulate() runs every dtype")
    module = ir.Module(name=k.name)
    tm = target_machine()
    module.triple = tm.triple
    module.data_layout = str(tm.target_data)
    _FunctionBuilder(nest, options, module, function_name(k)).build()
    return str(module)


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
    """Machine code for one kernel, kept alive with its execution engine."""

    def __init__(self, mod: llvm.ModuleRef, name: str):
        self.engine = llvm.create_mcjit_compiler(mod, new_target_machine())
        self.engine.finalize_object()
        self.address = self.engine.get_function_address(name)
        if not self.address:
            raise HybridCompileError(f"internal: function {name} not found after JIT compilation")


def assembly(mod: llvm.ModuleRef) -> str:
    return target_machine().emit_assembly(mod)
