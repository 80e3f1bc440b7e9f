"""The reference interpreter: runs a typed kernel with NumPy semantics.

It is the oracle every compiled kernel is tested against, so it is kept simple and
independent of the polyhedral and LLVM stages.  The typed IR is translated into plain
Python source (loops stay loops, elements are NumPy scalars, every cast is an explicit
NumPy constructor) and executed.  bfloat16 values are ``ml_dtypes.bfloat16`` scalars, whose
arithmetic computes in float32 and rounds the result, as NumPy's float16 does.  ``emulate_source`` returns that text for inspection.
"""
from __future__ import annotations

import math
import sys

import numpy as np

from ..errors import HybridAssertionError, HybridIndexError
from . import tir
from . import types
from .intrinsics import TABLE

_INT_HELPERS = {"//": "_floordiv", "%": "_mod", "**": "_ipow"}
_INTRINSICS = {name: row.reference for name, row in TABLE.items()}  # the NumPy spelling of each


class _Emitter:
    def __init__(self, k: tir.TypedKernel):
        self.k = k
        self.lines: list = []
        self.spans: dict = {}  # generated line number -> Span
        self.sites: list = []  # (tensor, shape, axis, span, check_reason) of each checked subscript
        self.asserts: list = []  # the tir.Assert of each run-time assertion
        self.consts: dict = {}
        self.hoisted: list = []  # `_hN = ...` lines to emit before the current statement
        self.n_hoisted = 0
        self.in_branch = 0  # inside a conditional expression's branch: nothing may be hoisted

    def flush(self, depth: int):
        for line in self.hoisted:
            self.emit(depth, line)
        self.hoisted = []
    def emit(self, depth: int, text: str, span=None):
        self.lines.append("    " * depth + text)
        if span is not None:
            self.spans[len(self.lines)] = span

    def const(self, c: tir.Const) -> str:
        if types.is_weak(c.dtype):
            return _literal(c.value)
        if types.is_bool(c.dtype):
            return "True" if c.value else "False"
        key = (c.dtype, _literal(c.value))
        if key not in self.consts:
            self.consts[key] = f"_c{len(self.consts)}"
        return self.consts[key]

    def ref(self, name: str) -> str:
        return "t_" + name

    def subscript(self, node) -> str:
        """``t[i, j]`` with every index checked against its axis, as compiled code does."""
        t = self.k.tensors[node.tensor]
        parts = []
        reason = check_reason(node.indices)
        for axis, (e, dim) in enumerate(zip(node.indices, t.shape)):
            s = self.expr(e)
            if not (isinstance(e, tir.Const) and 0 <= e.value < dim):
                self.sites.append((t.source_name, t.shape, axis, node.span, reason))
                s = f"_ix({s}, {dim}, {len(self.sites) - 1})"
            parts.append(s)
        return f"{self.ref(node.tensor)}[{', '.join(parts)}]"

    def expr(self, e: tir.TExpr) -> str:
        text = self.expr_text(e)
        # Python's parser stops at 200 nested parentheses: a long sum goes through temporaries.
        if self.in_branch == 0 and text.count("(") > 50:
            name = f"_h{self.n_hoisted}"
            self.n_hoisted += 1
            self.hoisted.append(f"{name} = {text}")
            return name
        return text

    def expr_text(self, e: tir.TExpr) -> str:
        if isinstance(e, tir.Const):
            return self.const(e)
        if isinstance(e, tir.Var):
            return "v_" + e.name
        if isinstance(e, tir.Load):
            t = self.k.tensors[e.tensor]
            if t.kind in ("scalar", "param"):
                return self.ref(e.tensor)
            if t.ndim == 0:
                return f"{self.ref(e.tensor)}[()]"
            return self.subscript(e)
        if isinstance(e, tir.Bin):
            return self.binop(e)
        if isinstance(e, tir.Unary):
            return f"(not {self.expr(e.a)})" if e.op == "not" else f"(-{self.expr(e.a)})"
        if isinstance(e, tir.Cmp):
            return f"({self.expr(e.a)} {e.op} {self.expr(e.b)})"
        if isinstance(e, tir.Logic):
            return f"({self.expr(e.a)} {e.op} {self.expr(e.b)})"
        if isinstance(e, tir.Select):
            cond = self.expr(e.cond)
            self.in_branch += 1
            try:
                return f"({self.expr(e.a)} if {cond} else {self.expr(e.b)})"
            finally:
                self.in_branch -= 1
        if isinstance(e, tir.Cast):
            return f"{self.cast_fn(e.dtype)}({self.strong(e.a)})"
        if isinstance(e, tir.Intrinsic):
            return self.intrinsic(e)
        raise NotImplementedError(f"interpreter: {type(e).__name__}")

    def strong(self, e: tir.TExpr) -> str:
        """``e`` as a NumPy scalar: a Python number (weak) becomes int64/float64, which NumPy
        converts with C semantics (wrapping) where a Python int out of range would raise."""
        if types.is_weak(e.dtype):
            return f"np.{types.concrete(e.dtype)}({self.expr(e)})"
        return self.expr(e)

    def binop(self, e: tir.Bin) -> str:
        if types.is_weak(e.dtype) and e.op in ("/", "//", "%", "**"):
            # NumPy's results (inf, nan, wrapping) where Python's numbers would raise or grow.
            a, b = self.strong(e.a), self.strong(e.b)
            return f"{self.cast_fn(e.dtype)}({self.binop_text(e.op, e.dtype, a, b)})"
        return self.binop_text(e.op, e.dtype, self.expr(e.a), self.expr(e.b))

    @staticmethod
    def binop_text(op: str, dtype: str, a: str, b: str) -> str:
        if types.is_int(dtype) and op in ("//", "%", "**"):
            return f"{_INT_HELPERS[op]}({a}, {b})"
        return f"({a} {op} {b})"

    def intrinsic(self, e: tir.Intrinsic) -> str:
        args = ", ".join(self.strong(a) for a in e.args)
        text = f"{_INTRINSICS[e.name]}({args})"
        return f"{self.cast_fn(e.dtype)}({text})" if types.is_weak(e.dtype) else text

    @staticmethod
    def cast_fn(dtype: str) -> str:
        if dtype == types.WEAK_INT:
            return "int"
        if dtype == types.WEAK_FLOAT:
            return "float"
        if dtype == "bfloat16":
            return "_bfloat16"  # ml_dtypes' scalar type, which NumPy has no attribute for
        return "np." + ("bool_" if dtype == "bool" else dtype)

    def stmts(self, body: list, depth: int):
        if not body:
            self.emit(depth, "pass")
        for s in body:
            if isinstance(s, tir.Loop):
                head = f"for v_{s.var} in range({self.expr(s.start)}, {self.expr(s.stop)}, {s.step}):"
                self.flush(depth)
                self.emit(depth, head, s.span)
                self.stmts(s.body, depth + 1)
            elif isinstance(s, tir.If):
                head = f"if {self.expr(s.cond)}:"
                self.flush(depth)
                self.emit(depth, head, s.span)
                self.stmts(s.body, depth + 1)
                if s.orelse:
                    self.emit(depth, "else:")
                    self.stmts(s.orelse, depth + 1)
            elif isinstance(s, tir.Store):
                t = self.k.tensors[s.tensor]
                value = self.expr(s.value)
                if t.kind == "scalar":
                    line = f"{self.ref(s.tensor)} = {value}"
                elif t.ndim == 0:
                    line = f"{self.ref(s.tensor)}[()] = {value}"
                else:
                    line = f"{self.subscript(s)} = {value}"
                self.flush(depth)
                self.emit(depth, line, s.span)
            elif isinstance(s, tir.Print):
                parts = [repr(sep + x) if isinstance(x, str) else f"{sep!r} + _fmt({self.expr(x)}, {conv!r}, {spec!r})"
                         for x, sep, conv, spec in s.parts()]
                self.flush(depth)
                self.emit(depth, f"print({' + '.join(parts) or repr('')})", s.span)
            elif isinstance(s, tir.Assert):
                self.asserts.append(s)
                line = f"if not {self.expr(s.cond)}: raise _AssertFailed({len(self.asserts) - 1})"
                self.flush(depth)
                self.emit(depth, line, s.span)
            else:
                raise NotImplementedError(type(s).__name__)

    def source(self) -> str:
        k = self.k
        self.emit(0, f"def {k.name}(" + ", ".join(self.ref(n) for n in k.inputs) + "):")
        for t in k.tensors.values():
            if t.kind in ("output", "temp"):
                self.emit(1, f"{self.ref(t.name)} = np.zeros({t.shape!r}, dtype={self.cast_fn(t.dtype)})")
        self.stmts(k.body, 1)
        self.emit(1, "return (" + "".join(self.ref(n) + ", " for n in k.outputs) + ")")
        header = [f"{name} = {self.cast_fn(dt)}({val})" for (dt, val), name in self.consts.items()]
        return "\n".join(header + self.lines) + "\n", len(header)


def emulate_source(k: tir.TypedKernel) -> str:
    return _Emitter(k).source()[0]


def _literal(value) -> str:
    """Python text for a number; inf and nan (from folding 1.0 / 0.0) have no literal."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"float('{value}')"
    return repr(value)


class _OutOfBounds(Exception):
    def __init__(self, index, site):
        self.index, self.site = index, site


class _AssertFailed(Exception):
    def __init__(self, site):
        self.site = site


def assertion_error(kernel: str, message: str, span) -> HybridAssertionError:
    """The error of a kernel's ``assert`` that failed when it ran (the interpreter's and compiled code's)."""
    what = f": {message}" if message else ""
    return HybridAssertionError(f"kernel `{kernel}`: assertion failed{what}", span,
                                "checked when the kernel ran: whether it holds, or is reached at all, depends on the "
                                "arguments' values")


def check_reason(indices) -> str:
    """Why subscripts can only be checked when they run: ``"data"`` (they read a tensor element or
    a scalar local), ``"not affine"`` (``c[i * i]``), or ``"context"`` (affine, but under loop
    bounds or a condition read at run time)."""
    if any(isinstance(x, tir.Load) for i in indices for x in tir.walk_expr(i)):
        return "data"
    return "context" if all(_affine(i) for i in indices) else "not affine"


def _affine(e) -> bool:
    if isinstance(e, (tir.Const, tir.Var)):
        return True
    if isinstance(e, tir.Cast) or (isinstance(e, tir.Unary) and e.op == "neg"):
        return _affine(e.a)
    if isinstance(e, tir.Bin):
        if e.op in ("+", "-"):
            return _affine(e.a) and _affine(e.b)
        if e.op == "*":
            return (isinstance(e.a, tir.Const) and _affine(e.b)) or (isinstance(e.b, tir.Const) and _affine(e.a))
        if e.op in ("//", "%"):
            return isinstance(e.b, tir.Const) and _affine(e.a)
    return False


_INDEX_HINTS = {
    "data": "the index was computed at run time; check the values it is read from",
    "not affine": "the index is not an affine function of the loop variables, so it is checked when it runs; "
                  "check its values over the loop bounds",
    "context": "the loop bounds or the condition around this access depend on values read at run time; "
               "check them against the tensor's shape",
}


def index_error(kernel: str, tensor: str, shape: tuple, index: int, axis: int, span, reason: str):
    """The error of a subscript found out of bounds when the kernel ran (the interpreter's and
    compiled code's); the hint names what made it go out of bounds (:func:`check_reason`)."""
    hint = _INDEX_HINTS[reason]
    return HybridIndexError(f"kernel `{kernel}`: index {index} is out of bounds for axis {axis} of `{tensor}` "
                            f"(shape {shape})", span, hint)


def _ix(i, n, site):
    if 0 <= i < n:
        return i
    raise _OutOfBounds(i, site)


def _floordiv(a, b):
    if b == 0:
        return a * 0
    return a // b


def _mod(a, b):
    if b == 0:
        return a * 0
    return a % b


def _ipow(a, b):
    """Integer power, wrapping as NumPy's; a negative exponent gives 1 / a**-b truncated toward zero."""
    if b >= 0:
        return a ** b
    if a == 1:
        return a
    if a == -1:
        return a if b % 2 else -a
    return a * 0


def _ceil_div(a, b):
    if b == 0:
        return a * 0
    return a // b + (a % b != 0)


def _rsqrt(x):
    return x.dtype.type(1) / np.sqrt(x)


def _sigmoid(x):
    one = x.dtype.type(1)
    return one / (one + np.exp(-x))


def _erf(x):
    return x.dtype.type(math.erf(float(x)))


def _unalias(k: tir.TypedKernel, arrays: list) -> list:
    """Inputs that overlap an input written in place are read as they were at the call, as compiled code does."""
    names = k.written
    written = [a for n, a in zip(k.inputs, arrays) if n in names]
    return [a if n in names or not any(np.shares_memory(a, w) for w in written) else a.copy()
            for n, a in zip(k.inputs, arrays)]


def run(k: tir.TypedKernel, arrays: list) -> tuple:
    """Run the kernel on numpy arrays (one per input); returns the outputs as a tuple."""
    em = _Emitter(k)
    src, nheader = em.source()
    namespace = {"np": np, "_ix": _ix, "_AssertFailed": _AssertFailed, "_floordiv": _floordiv, "_mod": _mod, "_ipow": _ipow,
                 "_ceil_div": _ceil_div, "_rsqrt": _rsqrt, "_sigmoid": _sigmoid, "_erf": _erf,
                 "_fmt": tir.format_value}
    if "_bfloat16" in src:
        namespace["_bfloat16"] = types.bfloat16().type
    code = compile(src, f"<emulate {k.name}>", "exec")
    with np.errstate(all="ignore"):
        exec(code, namespace)  # the constants' header: float16(70000.0) is inf, as in compiled code
    fn = namespace[k.name]
    arrays = _unalias(k, arrays)
    try:
        with np.errstate(all="ignore"):
            return fn(*arrays)
    except _AssertFailed as e:
        s = em.asserts[e.site]
        raise assertion_error(k.name, s.message, s.span) from None
    except _OutOfBounds as e:
        tensor, shape, axis, span, reason = em.sites[e.site]
        raise index_error(k.name, tensor, shape, e.index, axis, span, reason) from None
    except IndexError as e:
        tb = sys.exc_info()[2]
        line = None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == f"<emulate {k.name}>":
                line = tb.tb_lineno
            tb = tb.tb_next
        span = None
        if line is not None:
            gen = line - nheader
            while gen > 0 and gen not in em.spans:
                gen -= 1
            span = em.spans.get(gen)
        raise HybridIndexError(f"kernel `{k.name}`: index out of bounds ({e})", span,
                               "check the loop bounds against the tensor's shape") from None
