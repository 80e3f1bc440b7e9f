"""Typed-IR expressions rendered as CUDA C for :mod:`hyb.codegen.cuda`.

The expressions are legalised (:mod:`hyb.codegen.legalise`): NumPy's ``//``, ``%``, max/min,
integer ``**`` and float16 arithmetic arrive as primitives (``Let``, ``Pick``, ``Bits``,
``Prim``), each a C operator, a CUDA math function or (``ipow``) a prelude helper.  float16
(``__half``) values are only loaded, stored, converted and selected here; bfloat16
(``__nv_bfloat16``) values are only loaded, stored, selected and reinterpreted
(``Prim("bitcast")``), their conversions being integer operations on their bits."""
from __future__ import annotations

import re
import struct

import numpy as np

from ..dsl import tir
from ..dsl import types
from ..errors import HybridInternalError, HybridUnsupportedError

CTYPES = {
    "bool": "unsigned char", "int8": "signed char", "uint8": "unsigned char", "int16": "short",
    "uint16": "unsigned short", "int32": "int", "uint32": "unsigned int", "int64": "long long",
    "uint64": "unsigned long long", "float16": "__half", "float32": "float", "float64": "double",
    "bfloat16": "__nv_bfloat16",
}

# Prim("bitcast"): (from, to) -> the prelude's reinterpretation.
_BITCASTS = {("float32", "uint32"): "__float_as_uint", ("uint32", "float32"): "__uint_as_float",
             ("bfloat16", "uint16"): "hyb_bf2bits", ("uint16", "bfloat16"): "hyb_bits2bf"}

# The unsigned type integer arithmetic of a dtype is done in (wrapping, never undefined).
_UNSIGNED_OF = {"int8": "unsigned int", "uint8": "unsigned int", "int16": "unsigned int", "uint16": "unsigned int",
                "int32": "unsigned int", "uint32": "unsigned int", "int64": "unsigned long long",
                "uint64": "unsigned long long"}

_INF = {"float32": "__int_as_float(0x7f800000)", "float64": "__longlong_as_double(0x7ff0000000000000ll)"}

_INT_BITS = {"int8": 8, "uint8": 8, "int16": 16, "uint16": 16, "int32": 32, "uint32": 32, "int64": 64, "uint64": 64}


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
    if dt in types.UNSIGNED:
        return f"(({CTYPES[dt]}){value}ull)"
    if value >= 1 << (bits - 1):
        value -= 1 << bits
    if bits == 64:
        return f"((long long)0x{value & ((1 << 64) - 1):016x}ull)"
    return f"(({CTYPES[dt]}){value})"

def _not_bfloat16(dtype: str, what: str):
    """bfloat16's constants and conversions must have been lowered to integer operations on its bits."""
    if dtype == "bfloat16":
        raise HybridInternalError(f"{what} in bfloat16 was not legalised", "cuda")


class CudaExpressions:
    """Typed-IR expressions as CUDA C: arithmetic with NumPy's semantics, casts, intrinsics.

    Mixed into the CUDA generator, whose state (names, the writer, the kernel) it uses."""

    # ------------------------------------------------------------- expressions
    def e_Const(self, e: tir.Const) -> str:
        dt = types.concrete(e.dtype)
        _not_bfloat16(dt, "a constant")
        if dt == "bool":
            return "true" if bool(e.value) else "false"
        if dt in types.FLOATS:
            with np.errstate(over="ignore"):
                return _float_literal(float(types.numpy_dtype(dt).type(e.value)), dt)
        return _int_literal(int(e.value), dt)

    def e_Var(self, e: tir.Var) -> str:
        return self.env[e.name]

    def e_Load(self, e: tir.Load) -> str:
        t = self.k.tensors[e.tensor]
        a = self.address(e.tensor, e.indices, e)
        if types.concrete(t.dtype) == "bool" and t.kind not in ("scalar",):
            return f"({a} != 0)"
        if types.concrete(t.dtype) == "bool":
            return f"({a} != 0)"
        # A value read once, so that an expression using it twice does not read memory twice.
        name = self.w.fresh("ld")
        self.w.line(f"const {CTYPES[types.concrete(t.dtype)]} {name} = {a};")
        return name

    def value(self, text: str, dt: str) -> str:
        """Bind an expression to a fresh constant (so that helpers see it once)."""
        name = self.w.fresh()
        ct = "bool" if dt == "bool" else CTYPES[dt]
        self.w.line(f"const {ct} {name} = {text};")
        return name

    def e_Bin(self, e: tir.Bin) -> str:
        dt = types.concrete(e.dtype)
        a = self.expr(e.a)
        b = self.expr(e.b)
        if dt in types.FLOATS:
            if e.op in ("+", "-", "*", "/"):
                return f"({a} {e.op} {b})"
            if e.op == "**":
                return f"pow(({CTYPES[dt]})({a}), ({CTYPES[dt]})({b}))"
        elif dt == "bool":  # i1 arithmetic, as LLVM does it: + and - are xor, * is and
            if e.op in ("+", "-"):
                return f"({a} != {b})"
            if e.op == "*":
                return f"({a} && {b})"
            raise HybridUnsupportedError(f"`{e.op}` on bool", e.span, "cast to an integer type first")
        elif e.op in ("+", "-", "*"):
            ct, ut = CTYPES[dt], _UNSIGNED_OF[dt]
            return f"(({ct})(({ut}){a} {e.op} ({ut}){b}))"
        raise HybridUnsupportedError(f"`{e.op}` on {e.dtype}", e.span, None)

    # ------------------------------------------------------------- primitives (hyb.codegen.legalise)
    def e_Let(self, e: tir.Let) -> str:
        value = self.expr(e.value)
        if not re.fullmatch(r"[A-Za-z_]\w*", value):  # not already a name (a load, a counter)
            value = self.value(value, types.concrete(e.value.dtype))
        saved = dict(self.env)
        self.env[e.name] = value
        body = self.expr(e.body)
        self.env = saved
        return body

    def e_Pick(self, e: tir.Pick) -> str:
        return f"({self.expr(e.cond)} ? {self.expr(e.a)} : {self.expr(e.b)})"

    def e_Bits(self, e: tir.Bits) -> str:
        text = f"({self.expr(e.a)} {e.op} {self.expr(e.b)})"
        if e.op in ("<<", ">>"):  # (a narrow operand is promoted to int in C)
            return f"(({CTYPES[types.concrete(e.dtype)]}){text})"
        return text

    def e_Prim(self, e: tir.Prim) -> str:
        dt = types.concrete(e.dtype)
        args = [self.expr(a) for a in e.args]
        if e.name == "bitcast":
            return f"{_BITCASTS[types.concrete(e.args[0].dtype), dt]}({args[0]})"
        if e.name in ("div", "rem") and dt not in types.FLOATS:
            return f"(({CTYPES[dt]})({args[0]} {'/' if e.name == 'div' else '%'} {args[1]}))"
        if e.name in ("rem", "copysign"):
            return self.math("fmod" if e.name == "rem" else "copysign", dt, args)
        if e.name == "odd":
            return f"(({args[0]} & 1) != 0)"
        if e.name == "ipow":
            return f"hyb_ipow<{CTYPES[dt]}, {_UNSIGNED_OF[dt]}>({args[0]}, {args[1]})"
        raise HybridUnsupportedError(f"primitive `{e.name}` on {dt}", e.span, None)

    def e_Unary(self, e: tir.Unary) -> str:
        a = self.expr(e.a)
        if e.op == "not":
            return f"(!{a})"
        dt = types.concrete(e.dtype)
        if dt in types.FLOATS:
            return f"(-{a})"
        return f"(({CTYPES[dt]})(({_UNSIGNED_OF[dt]})0 - ({_UNSIGNED_OF[dt]}){a}))"

    def e_Cmp(self, e: tir.Cmp) -> str:
        a, b = self.expr(e.a), self.expr(e.b)
        return f"({a} {e.op} {b})"  # C's != is unordered, the others ordered: as the CPU path

    def e_Logic(self, e: tir.Logic) -> str:
        # Short-circuit: the right side's statements (loads) must only run where the left allows.
        a = self.expr(e.a)
        r = self.w.fresh("lg")
        self.w.line(f"bool {r} = {a};")
        self.w.open(f"if ({'' if e.op == 'and' else '!'}{r})")
        b = self.expr(e.b)
        self.w.line(f"{r} = {b};")
        self.w.close()
        return r

    def e_Select(self, e: tir.Select) -> str:
        c = self.expr(e.cond)
        dt = types.concrete(e.dtype)
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

    def e_Cast(self, e: tir.Cast) -> str:
        return self.convert(self.expr(e.a), types.concrete(e.a.dtype), types.concrete(e.dtype))

    def convert(self, v: str, s: str, d: str) -> str:
        if s == d:
            return v
        _not_bfloat16(s, "a conversion")
        _not_bfloat16(d, "a conversion")
        if d == "bool":
            if s == "float16":
                return f"(hyb_h2f({v}) != 0.0f)"
            return f"({v} != 0)"
        if s == "bool":
            if d == "float16":
                return f"hyb_f2h({v} ? 1.0f : 0.0f)"
            return f"(({CTYPES[d]})({v} ? 1 : 0))"
        if s in types.FLOATS and d in types.FLOATS:
            if s == "float16":
                f = f"hyb_h2f({v})"
                return f if d == "float32" else f"((double){f})"
            if d == "float16":
                return f"hyb_f2h({v})" if s == "float32" else f"hyb_d2h({v})"
            return f"(({CTYPES[d]}){v})"
        if s in types.FLOATS:
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
        """A math function of float or double values through CUDA's library."""
        name = fn + ("f" if dt == "float32" else "")
        return f"{name}({', '.join(args)})"

    def e_Intrinsic(self, e: tir.Intrinsic) -> str:
        args = [self.value(self.expr(a), types.concrete(a.dtype)) for a in e.args]
        dt = types.concrete(e.args[0].dtype)
        if e.name in self._MATH:
            return self.math(self._MATH[e.name], dt, args)
        r = getattr(self, "i_" + e.name)(dt, *args)
        want = types.concrete(e.dtype)
        if e.name == "popcount":
            return f"(({CTYPES[want]})({r}))"
        return r

    def i_rsqrt(self, dt, x):
        return f"(({CTYPES[dt]})1 / {self.math('sqrt', dt, [x])})"

    def i_sigmoid(self, dt, x):
        one = f"(({CTYPES[dt]})1)"
        return f"({one} / ({one} + {self.math('exp', dt, [f'(-{x})'])}))"

    def i_abs(self, dt, x):
        if dt in types.FLOATS:
            return self.math("fabs", dt, [x])
        if dt in types.UNSIGNED or dt == "bool":
            return x
        ct, ut = CTYPES[dt], _UNSIGNED_OF[dt]
        return f"({x} < 0 ? ({ct})(({ut})0 - ({ut}){x}) : {x})"

    def i_sign(self, dt, x):
        if dt in types.FLOATS:
            return f"hyb_sign<{CTYPES[dt]}>({x})"
        ct = CTYPES[dt]
        if dt in types.UNSIGNED:
            return f"(({ct})({x} != 0))"
        return f"(({ct})(({x} > 0) - ({x} < 0)))"

    def i_isnan(self, dt, x):
        return f"({x} != {x})"

    def i_isinf(self, dt, x):
        inf = _INF[dt]
        return f"({x} == {inf} || {x} == -{inf})"

    def i_isfinite(self, dt, x):
        inf = _INF[dt]
        return f"({x} == {x} && {x} != {inf} && {x} != -{inf})"

    def i_popcount(self, dt, x):
        mag = self.value(self.i_abs(dt, x), dt)
        bits = _INT_BITS.get(dt, 8)
        if bits == 64:
            return f"__popcll((unsigned long long){mag})"
        mask = (1 << bits) - 1
        return f"__popc(((unsigned int){mag}) & 0x{mask:x}u)"
