"""Typed-IR expressions emitted as LLVM IR for :mod:`hyb.codegen.llvm`.

The expressions are legalised (:mod:`hyb.codegen.legalise`): NumPy's ``//``, ``%``, max/min,
integer ``**`` and float16 arithmetic arrive as primitives (``Let``, ``Pick``, ``Bits``,
``Prim``), each one instruction, a libm call or (``ipow``) one small loop.  float16 values
are only loaded, stored, converted and selected here; bfloat16 values (i16) are only loaded,
stored, selected and reinterpreted (``Prim("bitcast")``), their conversions being integer
operations on their bits."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..dsl import tir
from ..dsl import types
from ..errors import HybridInternalError, HybridUnsupportedError
from .llvm_types import F16, F32, F64, I1, I8, I32, I64, float_bits, is_unsigned, memory_type, value_type
from . import inline_math, vecmath
from .walker import bound
from ..target import host_cpu

# Intrinsics computed by one math function: LLVM intrinsics (llvm.<name>.f32/.f64) or, for those in
# _LIBM, calls to the C library (resolved from the process by MCJIT; Python has libm loaded).
_MATH = {"sqrt": "sqrt", "exp": "exp", "log": "log", "sin": "sin", "cos": "cos", "floor": "floor", "ceil": "ceil",
         "trunc": "trunc", "round": "roundeven", "expm1": "expm1", "log1p": "log1p", "tan": "tan", "tanh": "tanh",
         "atan": "atan", "atan2": "atan2", "erf": "erf"}
_LIBM = ("expm1", "log1p", "tan", "tanh", "atan", "atan2", "erf")
# Math functions that are single instructions on x86 (the rest become calls, one per vector lane).
_NATIVE_MATH = ("sqrt", "floor", "ceil", "trunc", "roundeven", "fabs", "copysign")


def _simple_exponent(y: float, fast: bool) -> bool:
    """Whether LLVM rewrites ``pow(x, y)`` without a call: y in (0, ±1, 2, 0.5) always, any
    whole or half-whole y of at most 32 under fast-math."""
    if y in (0.0, 1.0, -1.0, 2.0, 0.5):
        return True
    return fast and abs(y) <= 32 and float(2 * y).is_integer()


def _small_power(y, dt: str, fast: bool) -> int | None:
    """The whole exponent ``k`` of ``x ** y`` computed by multiplications rather than ``pow``, or
    None: float32 for 3 <= |k| <= 8 (in float64, which holds every such power of a float32 exactly
    or within an ulp of float64, then rounded once: within an ulp of the exact result, where a
    vector ``powf`` takes a slow path for every negative base), float64 for k of 3 or 4 (two
    roundings: within 2 ulp, the bound of the other math functions).  LLVM's own rewrites (y of 0,
    ±1, 2, 0.5, or any whole y under fast-math) are left to it."""
    if fast or not isinstance(y, ir.Constant) or not float(y.constant).is_integer():
        return None
    k = int(y.constant)
    if dt == "float32" and 3 <= abs(k) <= 8:
        return k
    if dt == "float64" and k in (3, 4):
        return k
    return None


def _not_bfloat16(dtype: str, what: str):
    """bfloat16 is i16 here: its constants and conversions must have been lowered to bits."""
    if types.concrete(dtype) == "bfloat16":
        raise HybridInternalError(f"{what} in bfloat16 was not legalised", "llvm")

class LlvmExpressions:
    """Typed-IR expressions as LLVM IR: arithmetic with NumPy's semantics, casts, math calls, intrinsics.

    Mixed into the LLVM function builder, whose state (the IR builder, the kernel, scopes) it uses."""

    def e_Const(self, e: tir.Const):
        _not_bfloat16(e.dtype, "a constant")
        t = value_type(e.dtype)
        if t is I1:
            return ir.Constant(I1, int(bool(e.value)))
        if isinstance(t, ir.IntType):
            return ir.Constant(t, int(e.value) & ((1 << t.width) - 1))
        with np.errstate(over="ignore"):
            return ir.Constant(t, float(types.numpy_dtype(e.dtype).type(e.value)))  # rounded (or inf) first

    def e_Var(self, e: tir.Var):
        return self.env[e.name]

    def e_Load(self, e: tir.Load):
        t = self.k.tensors[e.tensor]
        v = self.b.load(self.address(e.tensor, e.indices, e), typ=memory_type(t.dtype))
        if t.dtype == "bool":
            return self.b.icmp_unsigned("!=", v, ir.Constant(I8, 0))
        return v

    def e_Bin(self, e: tir.Bin):
        a, b_ = self.expr(e.a), self.expr(e.b)
        if types.is_float(e.dtype):
            if e.op == "**":
                k = _small_power(b_, types.concrete(e.dtype), self.opt.fastmath)
                if k is not None:
                    return self.small_power(a, k)
                return self.math("pow", e.dtype, [a, b_])
            return self.farith(e.op, a, b_)
        if e.op == "+":
            return self.b.add(a, b_)
        if e.op == "-":
            return self.b.sub(a, b_)
        if e.op == "*":
            return self.b.mul(a, b_)
        raise HybridUnsupportedError(f"`{e.op}` on {e.dtype}", e.span, None)

    def farith(self, op: str, a, b_):
        f = {"+": self.b.fadd, "-": self.b.fsub, "*": self.b.fmul, "/": self.b.fdiv}[op]
        if op == "/":
            return f(a, b_, flags=self.flags)
        return f(a, b_, flags=self.update_flags if self.updating else self.sum_flags)

    # ---------------------------------------------------------- primitives (hyb.codegen.legalise)
    def e_Let(self, e: tir.Let):
        with bound(self.env, e.name, self.expr(e.value)):
            return self.expr(e.body)

    def e_Pick(self, e: tir.Pick):
        return self.b.select(self.expr(e.cond), self.expr(e.a), self.expr(e.b))

    def e_Bits(self, e: tir.Bits):
        a, b_ = self.expr(e.a), self.expr(e.b)
        if e.op == ">>":
            return self.b.lshr(a, b_) if is_unsigned(e.dtype) else self.b.ashr(a, b_)
        return {"&": self.b.and_, "|": self.b.or_, "^": self.b.xor, "<<": self.b.shl}[e.op](a, b_)

    def e_Prim(self, e: tir.Prim):
        args = [self.expr(a) for a in e.args]
        if e.name == "bitcast":  # (bfloat16 and uint16 are both i16: nothing to do)
            t = value_type(e.dtype)
            return args[0] if args[0].type == t else self.b.bitcast(args[0], t)
        return getattr(self, "p_" + e.name)(types.concrete(e.args[0].dtype), *args)

    def p_div(self, dt, a, d):
        return self.b.udiv(a, d) if is_unsigned(dt) else self.b.sdiv(a, d)

    def p_rem(self, dt, a, d):
        if dt in types.FLOATS:
            return self.b.frem(a, d, flags=self.flags)
        return self.b.urem(a, d) if is_unsigned(dt) else self.b.srem(a, d)

    def p_maximum(self, dt, x, y):
        return self.b.call(self.declare(f"llvm.maximum.f{float_bits(dt)}", x.type, [x.type] * 2), [x, y])

    def p_minimum(self, dt, x, y):
        return self.b.call(self.declare(f"llvm.minimum.f{float_bits(dt)}", x.type, [x.type] * 2), [x, y])

    def p_maxnum(self, dt, x, y):
        return self.b.call(self.declare(f"llvm.maxnum.f{float_bits(dt)}", x.type, [x.type] * 2), [x, y])

    def p_minnum(self, dt, x, y):
        return self.b.call(self.declare(f"llvm.minnum.f{float_bits(dt)}", x.type, [x.type] * 2), [x, y])

    def p_odd(self, dt, n):
        return self.b.trunc(n, I1)

    def p_copysign(self, dt, x, y):
        return self.math("copysign", dt, [x, y])

    def p_ipow(self, dt, a, n):
        """a ** n by repeated squaring, wrapping, n read as unsigned."""
        b = self.b
        t = a.type
        zero, one = ir.Constant(t, 0), ir.Constant(t, 1)
        pre = b.block
        header = self.fn.append_basic_block("pow.loop")
        body = self.fn.append_basic_block("pow.body")
        done = self.fn.append_basic_block("pow.end")
        b.branch(header)
        b.position_at_end(header)
        acc, base, rest = b.phi(t), b.phi(t), b.phi(t)
        for phi, v in ((acc, one), (base, a), (rest, n)):
            phi.add_incoming(v, pre)
        b.cbranch(b.icmp_unsigned("!=", rest, zero), body, done)
        b.position_at_end(body)
        acc.add_incoming(b.select(b.trunc(rest, I1), b.mul(acc, base), acc), body)
        base.add_incoming(b.mul(base, base), body)
        rest.add_incoming(b.lshr(rest, one), body)
        b.branch(header)
        b.position_at_end(done)
        return acc

    def _floordiv_int(self, a, d, signed=True):
        """Floor division of loop counters (the loop IR's fdiv_q; ``d`` is a positive constant)."""
        b = self.b
        q = b.sdiv(a, d)
        r = b.srem(a, d)
        zero = ir.Constant(a.type, 0)
        adjust = b.and_(b.icmp_signed("!=", r, zero),
                        b.icmp_signed("!=", b.icmp_signed("<", r, zero), b.icmp_signed("<", d, zero)))
        return b.sub(q, b.zext(adjust, a.type))

    def e_Unary(self, e: tir.Unary):
        a = self.expr(e.a)
        if e.op == "not":
            return self.b.not_(a)
        if types.is_float(e.dtype):
            return self.b.fneg(a, flags=self.flags)
        return self.b.neg(a)

    def e_Cmp(self, e: tir.Cmp):
        a, b_ = self.expr(e.a), self.expr(e.b)
        dt = e.a.dtype
        if types.is_float(dt):
            if e.op == "!=":
                return self.b.fcmp_unordered("!=", a, b_)
            return self.b.fcmp_ordered(e.op, a, b_)
        if is_unsigned(dt) or types.is_bool(dt):
            return self.b.icmp_unsigned(e.op, a, b_)
        return self.b.icmp_signed(e.op, a, b_)

    def e_Logic(self, e: tir.Logic):
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

    def e_Select(self, e: tir.Select):
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

    def e_Cast(self, e: tir.Cast):
        return self.convert(self.expr(e.a), e.a.dtype, e.dtype)

    def convert(self, v, src: str, dst: str):
        b = self.b
        s, d = types.concrete(src), types.concrete(dst)
        if s == d:
            return v
        _not_bfloat16(s, "a conversion")
        _not_bfloat16(d, "a conversion")
        st, dt_ = value_type(s), value_type(d)
        if d == "bool":
            if s in types.FLOATS:
                return b.fcmp_unordered("!=", v, ir.Constant(st, 0.0))
            return b.icmp_unsigned("!=", v, ir.Constant(st, 0))
        if s == "bool":
            return b.uitofp(v, dt_) if d in types.FLOATS else b.zext(v, dt_)
        if s in types.FLOATS and d in types.FLOATS:
            if float_bits(d) > float_bits(s):
                return b.fpext(v, dt_)
            if (s, d) == ("float64", "float16"):
                return b.fptrunc(self._to_float32_odd(v), dt_)
            return b.fptrunc(v, dt_)
        if s in types.FLOATS:
            return self._float_to_int(v, d)
        if d == "float16":
            # Through float32, which holds every integer below float16's overflow threshold exactly.
            return b.fptrunc(self.convert(v, s, "float32"), dt_)
        if d in types.FLOATS:
            return b.uitofp(v, dt_) if s in types.UNSIGNED else b.sitofp(v, dt_)
        if dt_.width > st.width:
            return b.zext(v, dt_) if s in types.UNSIGNED else b.sext(v, dt_)
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
        """A math function of float32 or float64 values: inline arithmetic where
        :mod:`hyb.codegen.inline_math` has it (float32 exp), else an LLVM intrinsic or a libm
        call, or, where libmvec has vector variants of it (:mod:`hyb.codegen.vecmath`), a call of
        hyb's own name for the libm function that the loop vectoriser turns into vector calls.
        ``vector_math`` off keeps the C library's functions throughout."""
        dt = types.concrete(dtype)
        t = value_type(dt)
        if (name, dt) in inline_math.INLINE and self.opt.vector_math and not all(
                isinstance(a, ir.Constant) for a in args):
            return inline_math.exp32(self.b, self.module, args[0], (self.opt.target or host_cpu()).avx512)
        found = self.vector_variants(name, dt, args)
        if found:
            row = vecmath.TABLE[name]
            self.vector_calls[row.callee(dt)] = (dt, row.args, found)
            self.vector_call_count += 1
            return self.b.call(self.declare(row.callee(dt), t, [t] * len(args)), args, fastmath=self.flags)
        if name not in _NATIVE_MATH:
            self.scalar_calls = True
        if name in _LIBM:
            fname = name + ("f" if dt == "float32" else "")
        else:
            fname = f"llvm.{name}.f{float_bits(dt)}"
        return self.b.call(self.declare(fname, t, [t] * len(args)), args, fastmath=self.flags)

    def small_power(self, x, k: int):
        """``x ** k`` for a whole ``k`` chosen by :func:`_small_power`, by repeated squaring (float32
        in float64, rounded once at the end)."""
        b = self.b
        wide = x.type == F32
        v = b.fpext(x, F64) if wide else x
        result, square, n = None, v, abs(k)
        while n:
            if n & 1:
                result = square if result is None else b.fmul(result, square)
            n >>= 1
            if n:
                square = b.fmul(square, square)
        if k < 0:
            result = b.fdiv(ir.Constant(result.type, 1.0), result)
        return b.fptrunc(result, F32) if wide else result

    def vector_variants(self, name: str, dt: str, args: list) -> tuple:
        """The libmvec variants a call of ``name`` may use (none: the call stays an intrinsic or a
        libm call).  Calls LLVM folds or simplifies keep LLVM's own form: those of constants only,
        and ``pow`` with an exponent it turns into multiplications or a square root."""
        if not self.opt.vector_math or name not in vecmath.TABLE or all(isinstance(a, ir.Constant) for a in args):
            return ()
        if name == "pow" and isinstance(args[1], ir.Constant) and _simple_exponent(args[1].constant,
                                                                                  self.opt.fastmath):
            return ()
        target = self.opt.target
        return vecmath.variants(name, dt, target.features if target is not None else frozenset())

    def e_Intrinsic(self, e: tir.Intrinsic):
        args = [self.expr(a) for a in e.args]
        dt = types.concrete(e.args[0].dtype)
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
        if dt in types.FLOATS:
            return self.math("fabs", dt, [x])
        if dt in types.UNSIGNED:
            return x
        return self.b.select(self.b.icmp_signed("<", x, ir.Constant(x.type, 0)), self.b.neg(x), x)

    def i_sign(self, dt, x):
        b = self.b
        t = x.type
        if dt in types.FLOATS:
            zero, one, minus_one = (ir.Constant(t, v) for v in (0.0, 1.0, -1.0))
            rest = b.select(b.fcmp_ordered("==", x, zero), zero, x)  # nan stays nan
            return b.select(b.fcmp_ordered(">", x, zero), one, b.select(b.fcmp_ordered("<", x, zero), minus_one, rest))
        zero = ir.Constant(t, 0)
        if dt in types.UNSIGNED:
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

    def i_popcount(self, dt, x):
        # NumPy's bitwise_count: the bits of |x|.
        magnitude = self.i_abs(dt, x)
        return self.b.call(self.declare(f"llvm.ctpop.i{x.type.width}", x.type, [x.type]), [magnitude])
