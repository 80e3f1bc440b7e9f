"""Legalisation: NumPy's operators lowered to primitive operations, once for every back end.

:func:`legalise` takes the loop nest the middle end made and returns a new one whose
statements and guards use only operations each back end renders directly (an instruction or a
C operator); the input nest is not changed.  It runs in one place,
:func:`hyb.runtime.pipeline.middle_end` (the ``MiddleEnd.code`` record), before both the LLVM
and the CUDA back end.

Lowered here:

* integer ``//`` and ``%`` (NumPy's floor division and its remainder; a zero divisor gives 0,
  ``MIN // -1`` wraps), and ``ceil_div``: truncating ``div``/``rem`` on a divisor made safe
  (never 0, never -1 for signed types), corrected by selects;
* float ``//`` and ``%`` (``npy_divmod``: the remainder takes the divisor's sign, the quotient
  is snapped to an integer; a zero divisor gives ``a / b`` and fmod's nan);
* ``max`` and ``min``: NumPy's maximum/minimum, the first argument where it wins or is nan
  (float16 compares with ``>=``/``<=``, as NumPy's float16 loops do);
* integer ``**``: a constant exponent by repeated squaring, a variable one by the ``ipow``
  primitive with the rule for negative exponents around it (1 for a == 1, ±1 for a == -1,
  else 0, where NumPy raises);
* float16 and bfloat16 arithmetic, comparisons, math functions and intrinsics: computed in
  float32 between conversions (as NumPy does for float16, and ml_dtypes for bfloat16); float16
  remains only in loads, stores, constants, casts and the values a ``Pick`` chooses between;
* every conversion from or to bfloat16, as integer operations on its bits: to float32 its 16
  bits become the high half of a float32 (exact); from float32 it is rounded to nearest even
  (NaN stays NaN, made quiet with its sign kept, as ml_dtypes makes it: 0x7fc0); from any other
  dtype through float32 (as ml_dtypes converts: a float64 or a wide integer is rounded twice,
  where float16 rounds it once).  bfloat16 remains only in loads, stores, ``Let``, ``Pick`` and
  ``Select`` values and ``Prim("bitcast")`` to and from uint16 (constants are such bitcasts of
  uint16 constants), so that a back end stores it as 16-bit integers and needs no
  conversion of its own.

The primitives the output may hold besides the checker's nodes (:mod:`hyb.dsl.tir`):

* ``Let(name, value, body)``: ``value`` evaluated once, read in ``body`` as ``Var(name)``
  (names ``legal.<n>``, which no kernel name can be);
* ``Pick(cond, a, b)``: a select, both sides evaluated (``Select`` stays lazy: it branches);
* ``Bits(op, a, b)``: ``&``, ``|``, ``^`` (on bool: eager and, or, xor; ``Logic`` short-circuits),
  and on unsigned integers ``<<`` and ``>>`` (logical shifts by less than the width);
* ``Prim("div" | "rem", a, b)``: truncating integer division and remainder (C's ``/`` and ``%``,
  LLVM's sdiv/udiv, srem/urem) on a divisor that is neither 0 nor, when signed, -1; on floats
  ``rem`` is fmod (LLVM's frem);
* ``Prim("copysign", x, y)``: the magnitude of ``x`` with the sign of ``y``;
* ``Prim("ipow", a, n)``: ``a ** n`` wrapping, for ``n >= 0`` read as unsigned;
* ``Prim("maximum" | "minimum", x, y)``: IEEE 754's maximum and minimum of float32/float64 (NaN
  if either is NaN; -0.0 below 0.0), made only when asked for (``legalise(nest, relaxed=True)``, or
  ``accumulate=True`` for a running extremum);
* ``Prim("maxnum" | "minnum", x, y)``: the larger (smaller) of two float32/float64 values, the
  other where one is NaN, either of two equal zeros: what the internal intrinsics ``fmax`` and
  ``fmin`` (NumPy's ``fmax``/``fmin`` but for the zeros) become; only the CPU's
  :mod:`hyb.schedule.argext` makes them, never a kernel's text;
* ``Prim("odd", n)``: the lowest bit of an integer, as bool (LLVM's trunc to i1);
* ``Prim("bitcast", x)``: the bits of ``x`` read as the Prim's dtype, of the same width
  (float32 <-> uint32, bfloat16 <-> uint16);
* the existing nodes on values other than float16 and bfloat16: ``Bin`` with ``+ - * /`` (and ``**`` on floats:
  pow), ``Cmp``, ``Unary``, ``Cast``, ``Intrinsic`` (``floor``, ``isnan``, the math functions;
  ``max``, ``min`` and ``ceil_div`` no longer occur).

Subscripts checked at run time (``Load.checked``, ``Store.checked``) stay checked on the nodes
that replace them (each a ``dataclasses.replace`` of the old one); an operand a lowering reads twice is bound
by ``Let``, so no load is ever evaluated twice.
"""
from __future__ import annotations

import struct
from dataclasses import replace

import numpy as np

from ..dsl import tir
from ..dsl import types
from ..schedule import loops

# The intrinsic-table rows no back end renders: they are lowered here.
LOWERED = ("max", "min", "ceil_div")

F32 = "float32"
BF16, U16, U32 = "bfloat16", "uint16", "uint32"


def legalise(nest: loops.LoopNest, relaxed: bool = False, accumulate: bool = False) -> loops.LoopNest:
    """``nest`` with every statement and guard in primitive operations (see the module doc).
    ``relaxed`` (a back end that renders them, under fast-math): float32 and float64 max/min as
    ``Prim("maximum" | "minimum")``, IEEE 754's operations, which differ from NumPy's only in
    taking -0.0 below 0.0 (NumPy returns the second of two equal zeros) and which LLVM vectorises
    as reductions.  ``accumulate`` (where the kernel's sums may be reassociated): the same, only
    for a max/min stored into a cell it reads (``m = max(m, e)``): a running extremum, whose zero's
    sign depends on the order its values come in, which reassociation leaves open anyway; every
    other max/min keeps NumPy's answer bit for bit."""
    lg = _Legaliser(relaxed, accumulate)
    statements = {name: replace(st, stmt=lg.stmt(st.stmt), guards=[lg.expr(g) for g in st.guards])
                  for name, st in nest.statements.items()}
    # a shape-generic kernel's shapes computed from its sizes (`a.shape[0] // 2`), for its addresses
    tensors = {name: replace(t, code_shape=tuple(d if isinstance(d, int) else lg.expr(d) for d in t.shape))
               if t.generic else t for name, t in nest.kernel.tensors.items()}
    kernel = replace(nest.kernel, tensors=tensors) if any(t.generic for t in tensors.values()) else nest.kernel
    return replace(nest, kernel=kernel, statements=statements)


def _const(value, dtype: str) -> tir.Const:
    return tir.Const(dtype, value)


def _f32(e: tir.TExpr) -> tir.TExpr:
    return tir.Cast(F32, e, span=e.span)


def _f16(e: tir.TExpr) -> tir.TExpr:
    return tir.Cast("float16", e, span=e.span)


def _is_half(dtype: str) -> bool:
    """float16 or bfloat16: computed in float32, rounded after every operation."""
    return types.concrete(dtype) in types.HALVES


def _bf16_bits(value) -> int:
    """The bits of ``value`` rounded to bfloat16 (through float32, as ml_dtypes converts)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return int(np.array(value, dtype=types.bfloat16()).view(np.uint16))


def _bf16_const(value) -> tir.TExpr:
    """A bfloat16 constant: its bits, as uint16, reinterpreted."""
    return tir.Prim(BF16, "bitcast", [_const(_bf16_bits(value), U16)])


def _bf16_const_value(e: tir.TExpr):
    """The float32 value of a bfloat16 constant made by :func:`_bf16_const`, or None."""
    if isinstance(e, tir.Prim) and e.name == "bitcast" and e.dtype == BF16 and isinstance(e.args[0], tir.Const):
        return struct.unpack("<f", struct.pack("<I", int(e.args[0].value) << 16))[0]
    return None


def _never_nan(e: tir.TExpr) -> bool:
    """Whether ``e`` is a float constant other than nan (as itself or widened to float32)."""
    if isinstance(e, tir.Cast) and types.concrete(e.dtype) == F32 and types.concrete(e.a.dtype) == "float16":
        e = e.a
    if not isinstance(e, tir.Const):
        return False
    try:
        return not np.isnan(float(e.value))
    except (TypeError, ValueError):
        return False


class _Legaliser:
    def __init__(self, relaxed: bool = False, accumulate: bool = False):
        self.relaxed = relaxed
        self.accumulate = accumulate
        self.running = None  # the max/min node being lowered as a running extremum
        self.count = 0

    # ------------------------------------------------------------- statements
    def stmt(self, s):
        if isinstance(s, tir.Store):
            v = s.value
            if (self.accumulate and isinstance(v, tir.Intrinsic) and v.name in ("max", "min")
                    and any(isinstance(a, tir.Load) and a.tensor == s.tensor and a.indices == s.indices
                            for a in v.args)):
                self.running = v
            return replace(s, indices=[self.expr(i) for i in s.indices], value=self.expr(s.value))
        if isinstance(s, tir.If):
            return replace(s, cond=self.expr(s.cond), body=[self.stmt(x) for x in s.body],
                           orelse=[self.stmt(x) for x in s.orelse])
        if isinstance(s, tir.Assert):
            return replace(s, cond=self.expr(s.cond))
        if isinstance(s, tir.Print):
            return replace(s, items=[x if isinstance(x, str) else self.expr(x) for x in s.items])
        return replace(s, start=self.expr(s.start), stop=self.expr(s.stop), body=[self.stmt(x) for x in s.body])

    # ------------------------------------------------------------- bindings
    def let(self, value: tir.TExpr, body):
        """``body(v)`` with ``v`` standing for ``value`` evaluated once: a ``Let`` unless ``value``
        is a constant or a variable (which cost nothing to read again)."""
        if isinstance(value, (tir.Const, tir.Var)) or _bf16_const_value(value) is not None:
            return body(value)
        self.count += 1
        name = f"legal.{self.count}"
        inner = body(tir.Var(value.dtype, name, span=value.span))
        return tir.Let(inner.dtype, name, value, inner, span=value.span)

    def lets(self, values: list, body):
        """``body(vs)`` with every value of ``values`` bound in order."""
        if not values:
            return body([])
        return self.let(values[0], lambda v: self.lets(values[1:], lambda rest: body([v] + rest)))

    # ------------------------------------------------------------- expressions
    def expr(self, e: tir.TExpr) -> tir.TExpr:
        return getattr(self, "e_" + type(e).__name__)(e)

    def e_Const(self, e):
        if types.concrete(e.dtype) == BF16:
            return _bf16_const(e.value)
        return replace(e)

    def e_Var(self, e):
        return replace(e)

    def e_Size(self, e):
        return replace(e)

    def e_Load(self, e):
        return replace(e, indices=[self.expr(i) for i in e.indices])

    def e_Bin(self, e):
        return self.bin(e.op, self.expr(e.a), self.expr(e.b), e.dtype, e)

    def e_Unary(self, e):
        a = self.expr(e.a)
        if e.op == "neg" and _is_half(e.dtype):
            return self.narrow(replace(e, dtype=F32, a=self.widen(a)), e.dtype)
        return replace(e, a=a)

    def e_Cmp(self, e):
        a, b = self.expr(e.a), self.expr(e.b)
        if _is_half(e.a.dtype):
            return self.lets([a, b], lambda v: replace(e, a=self.widen(v[0]), b=self.widen(v[1])))
        return replace(e, a=a, b=b)

    def e_Logic(self, e):
        return replace(e, a=self.expr(e.a), b=self.expr(e.b))

    def e_Select(self, e):
        return replace(e, cond=self.expr(e.cond), a=self.expr(e.a), b=self.expr(e.b))

    def e_Cast(self, e):
        a = self.expr(e.a)
        src, dst = types.concrete(e.a.dtype), types.concrete(e.dtype)
        if src == dst or BF16 not in (src, dst):
            return replace(e, a=a)
        if src == BF16:
            f = self.widen(a)
            return f if dst == F32 else tir.Cast(e.dtype, f, span=e.span)
        return self.narrow(a if src == F32 else tir.Cast(F32, a, span=e.span), BF16)

    def e_Intrinsic(self, e):
        return self.intrinsic(e.name, [self.expr(a) for a in e.args], e)

    # ------------------------------------------------------------- half types
    def widen(self, e: tir.TExpr) -> tir.TExpr:
        """A float16 or bfloat16 value (legalised, read once here) as float32, exactly."""
        if types.concrete(e.dtype) != BF16:
            return _f32(e)
        value = _bf16_const_value(e)
        if value is not None:
            return _const(value, F32)
        # (a value just rounded is its uint16 bits reinterpreted: those bits are used directly)
        raw = e.args[0] if isinstance(e, tir.Prim) and e.name == "bitcast" else tir.Prim(U16, "bitcast", [e])
        bits = tir.Cast(U32, raw, span=e.span)
        return tir.Prim(F32, "bitcast", [tir.Bits(U32, "<<", bits, _const(16, U32), span=e.span)], span=e.span)

    def narrow(self, e: tir.TExpr, dtype: str) -> tir.TExpr:
        """A float32 value rounded to the half type ``dtype``."""
        if types.concrete(dtype) != BF16:
            return _f16(e)
        if isinstance(e, tir.Const):
            return _bf16_const(e.value)
        return self.let(tir.Prim(U32, "bitcast", [e], span=e.span), lambda bits: self.let(
            tir.Bits(U32, ">>", bits, _const(16, U32)), lambda high: self.round_bf16(bits, high)))

    def round_bf16(self, bits, high):
        """bfloat16 from the bits of a float32 (``high``: its upper half): round to nearest, ties to
        even (adding 0x7fff, and one more when the kept half is odd, carries exactly the values
        above the halfway point, and the halfway ones to an even result; the largest finite
        values carry into the exponent and become inf); a NaN becomes the quiet NaN of its sign."""
        def u(v):
            return _const(v, U32)

        odd = tir.Bits(U32, "&", high, u(1))
        rounded = tir.Bits(U32, ">>", tir.Bin(U32, "+", tir.Bin(U32, "+", bits, u(0x7FFF)), odd), u(16))
        nan = tir.Cmp("bool", ">", tir.Bits(U32, "&", bits, u(0x7FFFFFFF)), u(0x7F800000))
        quiet = tir.Bits(U32, "|", tir.Bits(U32, "&", high, u(0x8000)), u(0x7FC0))
        return tir.Prim(BF16, "bitcast", [tir.Cast(U16, tir.Pick(U32, nan, quiet, rounded))])

    # ------------------------------------------------------------- operators
    def bin(self, op: str, a, b, dtype: str, like=None):
        """``a op b`` of legalised operands, lowered."""
        dt = types.concrete(dtype)
        span = like.span if like is not None else a.span
        if dt in types.HALVES:  # both operands evaluated before either is converted, as before
            return self.lets([a, b], lambda v: self.narrow(self.bin(op, self.widen(v[0]), self.widen(v[1]), F32, like),
                                                           dt))
        if dt == "bool":  # the checker makes no bool arithmetic; a back end says what it supports
            return tir.Bin(dtype, op, a, b, span=span)
        if op in ("//", "%"):
            if dt in types.FLOATS:
                return self.float_divmod(op, a, b, dtype, span)
            return self.int_divmod(op, a, b, dtype, span)
        if op == "**" and dt not in types.FLOATS:
            return self.int_power(a, b, dtype, span)
        return tir.Bin(dtype, op, a, b, span=span)

    def int_divmod(self, op, a, b, dtype, span):
        zero, one = _const(0, dtype), _const(1, dtype)
        div = "div" if op == "//" else "rem"

        def unsigned(x, y):
            return self.let(tir.Cmp("bool", "==", y, zero), lambda is_zero: tir.Pick(
                dtype, is_zero, zero, tir.Prim(dtype, div, [x, tir.Pick(dtype, is_zero, one, y)]), span=span))

        def signed(x, y):
            # a zero divisor gives 0 and MIN // -1 wraps (x86 would trap on both): -1 apart too
            return self.lets([tir.Cmp("bool", "==", y, zero), tir.Cmp("bool", "==", y, _const(-1, dtype))],
                             lambda v: self.let(tir.Pick(dtype, tir.Bits("bool", "|", v[0], v[1]), one, y),
                                                lambda safe: tir.Pick(dtype, v[0], zero, tir.Pick(
                                                    dtype, v[1], tir.Unary(dtype, "neg", x) if op == "//" else zero,
                                                    self.floor_divmod(op, x, safe, dtype)), span=span)))

        lower = unsigned if types.concrete(dtype) in types.UNSIGNED else signed
        return self.lets([a, b], lambda v: lower(*v))

    def floor_divmod(self, op, x, d, dtype):
        """Floor division or modulo of ``x`` by a safe signed ``d``, from the truncating ones."""
        zero = _const(0, dtype)

        def adjust(r):  # the remainder is not zero and its sign is not the divisor's
            return tir.Bits("bool", "&", tir.Cmp("bool", "!=", r, zero),
                            tir.Cmp("bool", "!=", tir.Cmp("bool", "<", r, zero), tir.Cmp("bool", "<", d, zero)))

        if op == "//":
            return self.lets([tir.Prim(dtype, "div", [x, d]), tir.Prim(dtype, "rem", [x, d])],
                             lambda v: tir.Bin(dtype, "-", v[0], tir.Cast(dtype, adjust(v[1]))))
        return self.let(tir.Prim(dtype, "rem", [x, d]), lambda r: self.let(
            adjust(r), lambda fix: tir.Pick(dtype, fix, tir.Bin(dtype, "+", r, d), r)))

    def float_divmod(self, op, a, b, dtype, span):
        """NumPy's npy_divmod: the remainder has the divisor's sign, the quotient is snapped to an
        integer; a zero divisor gives a / b and fmod's nan."""
        zero, one, half = (_const(v, dtype) for v in (0.0, 1.0, 0.5))

        def f(o, x, y):
            return tir.Bin(dtype, o, x, y)

        def pick(c, x, y):
            return tir.Pick(dtype, c, x, y)

        def lt0(x):
            return tir.Cmp("bool", "<", x, zero)

        def remainder(x, y, mod, b_zero, nonzero, fix):
            m = pick(fix, f("+", mod, y), mod)
            return pick(b_zero, mod, pick(nonzero, m, tir.Prim(dtype, "copysign", [zero, y])))

        def floordiv(x, y, mod, b_zero, nonzero, fix):
            def snapped(div, fl, quotient):
                return pick(b_zero, quotient, pick(tir.Cmp("bool", "!=", div, zero), fl,
                                                   tir.Prim(dtype, "copysign", [zero, quotient])))

            return self.let(f("/", f("-", x, mod), y), lambda d0: self.let(
                pick(fix, f("-", d0, one), d0), lambda div: self.let(
                    tir.Intrinsic(dtype, "floor", [div]), lambda fl0: self.let(
                        pick(tir.Cmp("bool", ">", f("-", div, fl0), half), f("+", fl0, one), fl0), lambda fl: self.let(
                            f("/", x, y), lambda quotient: snapped(div, fl, quotient))))))

        def lower(x, y):
            return self.lets([tir.Prim(dtype, "rem", [x, y]), tir.Cmp("bool", "==", y, zero)], lambda v: self.let(
                tir.Cmp("bool", "!=", v[0], zero), lambda nonzero: self.let(
                    tir.Bits("bool", "&", nonzero, tir.Bits("bool", "^", lt0(y), lt0(v[0]))),
                    lambda fix: (remainder if op == "%" else floordiv)(x, y, v[0], v[1], nonzero, fix))))

        return self.lets([a, b], lambda v: lower(*v))

    def int_power(self, a, n, dtype, span):
        """a ** n wrapping; a negative n gives 1 / a**-n truncated toward zero (1 for a == 1, ±1 for
        a == -1, else 0), where NumPy raises."""
        if isinstance(n, tir.Const) and int(n.value) >= 0:
            # a is bound even when n == 0: it is evaluated once, as before (its loads may be checked)
            return self.let(a, lambda base: self.power_const(None, base, int(n.value), dtype))
        if types.concrete(dtype) in types.UNSIGNED:
            return tir.Prim(dtype, "ipow", [a, n], span=span)
        zero, one, minus_one = (_const(v, dtype) for v in (0, 1, -1))

        def lower(x, m):
            def result(negative, acc, odd):
                inverse = tir.Pick(dtype, tir.Cmp("bool", "==", x, one), one, tir.Pick(
                    dtype, tir.Cmp("bool", "==", x, minus_one), tir.Pick(dtype, odd, minus_one, one), zero))
                return tir.Pick(dtype, negative, inverse, acc, span=span)

            return self.let(tir.Cmp("bool", "<", m, zero), lambda negative: self.let(
                tir.Prim(dtype, "ipow", [x, tir.Pick(dtype, negative, zero, m)]),
                lambda acc: self.let(tir.Prim("bool", "odd", [m]), lambda odd: result(negative, acc, odd))))

        return self.lets([a, n], lambda v: lower(*v))

    def power_const(self, result, base, n: int, dtype):
        """``result * base ** n`` (``result`` None: 1) by repeated squaring, each product bound once."""
        if not n:
            return result if result is not None else _const(1, dtype)

        def squared(result):
            if not n >> 1:
                return result
            return self.let(tir.Bin(dtype, "*", base, base), lambda b2: self.power_const(result, b2, n >> 1, dtype))

        if not n & 1:
            return squared(result)
        if result is None:
            return squared(base)
        return self.let(tir.Bin(dtype, "*", result, base), squared)

    # ------------------------------------------------------------- intrinsics
    def intrinsic(self, name: str, args: list, e: tir.Intrinsic):
        dt = types.concrete(e.args[0].dtype)
        if name in ("fmax", "fmin") and dt in ("float32", "float64"):
            return tir.Prim(e.dtype, "maxnum" if name == "fmax" else "minnum", args, span=e.span)
        if name in ("max", "min"):
            return self.extremum(name, args[0], args[1], e.dtype, e.span, running=e is self.running)
        if name == "ceil_div":
            return self.lets(args, lambda v: tir.Bin(e.dtype, "+", self.bin("//", v[0], v[1], e.dtype, e), tir.Cast(
                e.dtype, tir.Cmp("bool", "!=", self.bin("%", v[0], v[1], e.dtype, e), _const(0, e.dtype))),
                span=e.span))
        if dt not in types.HALVES:
            return replace(e, args=args)
        if name == "rsqrt":  # 1 / sqrt(x), each rounded to the half type
            sqrt = tir.Intrinsic(dt, "sqrt", args, span=e.span)
            return self.bin("/", self.e_Const(_const(1.0, dt)), self.intrinsic("sqrt", args, sqrt), dt, e)
        if name == "sigmoid":  # 1 / (1 + exp(-x)), each rounded to the half type
            one = self.e_Const(_const(1.0, dt))
            neg = self.narrow(tir.Unary(F32, "neg", self.widen(args[0])), dt)
            ex = tir.Intrinsic(dt, "exp", [neg], span=e.span)
            return self.bin("/", one, self.bin("+", one, self.intrinsic("exp", [neg], ex), dt, e), dt, e)
        if name == "sign" and dt == BF16:  # ml_dtypes' sign returns a zero as it is (-0.0 stays -0.0)
            return self.let(args[0], lambda x: tir.Pick(dt, tir.Cmp("bool", "==", self.widen(x), _const(0.0, F32)), x,
                                                        self.narrow(tir.Intrinsic(F32, "sign", [self.widen(x)]), dt),
                                                        span=e.span))

        def computed(v):
            r = tir.Intrinsic(F32 if _is_half(e.dtype) else e.dtype, name, [self.widen(a) for a in v], span=e.span)
            return self.narrow(r, e.dtype) if _is_half(e.dtype) else r

        return self.lets(args, computed)

    def extremum(self, name: str, a, b, dtype: str, span, running: bool = False):
        """NumPy's maximum/minimum: x if x beats y or x is nan, else y (so a nan y wins too).  Of two
        equal values (-0.0 and 0.0) NumPy returns y, but x for float16, whose loop compares with >=
        (ml_dtypes' bfloat16 loop compares strictly, as float32's)."""
        dt = types.concrete(dtype)
        op = ">" if name == "max" else "<"
        if (self.relaxed or running) and dt in ("float32", "float64"):
            return tir.Prim(dtype, "maximum" if name == "max" else "minimum", [a, b], span=span)

        def lower(x, y):
            if dt not in types.FLOATS:
                return tir.Pick(dtype, tir.Cmp("bool", op, x, y), x, y, span=span)
            cx, cy = (self.widen(x), self.widen(y)) if dt in types.HALVES else (x, y)
            if _never_nan(cy):
                # y cannot be nan, so "x beats y or x is nan" is "y does not beat-or-tie x": one
                # comparison, which x86 answers with a single maxps/minps where y is not a zero
                back = ("<" if op == ">" else ">") + ("" if dt == "float16" else "=")
                return tir.Pick(dtype, tir.Cmp("bool", back, cx, cy), y, x, span=span)
            beats = tir.Cmp("bool", op + "=" if dt == "float16" else op, cx, cy)
            nan = tir.Intrinsic("bool", "isnan", [cx])
            return tir.Pick(dtype, tir.Bits("bool", "|", beats, nan), x, y, span=span)

        return self.lets([a, b], lambda v: lower(*v))
