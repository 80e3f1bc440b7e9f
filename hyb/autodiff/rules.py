"""Derivative rules: for an expression and the adjoint of its value, the adjoint of each read.

Everything here builds syntax trees (:mod:`hyb.dsl.ast`).  Conventions at the kinks follow
PyTorch: ``max``/``min`` ties split the gradient evenly, ``abs'(0) = 0``, ``sqrt'(0) = inf``,
``floor``, ``ceil``, ``trunc``, ``round`` and ``sign`` have zero gradient; comparisons,
integer casts and index arithmetic carry none.
"""
from __future__ import annotations

from ..dsl import ast as syntax
from ..dsl import intrinsics
from ..dsl import types
from ..errors import HybridUnsupportedError

FLOAT_CASTS = types.FLOATS
ZERO_GRAD = tuple(n for n, row in intrinsics.TABLE.items() if row.derivative == intrinsics.ZERO)


# ---------------------------------------------------------------- small tree builders
def num(v) -> syntax.Num:
    return syntax.Num(None, v)


def name(n: str) -> syntax.Name:
    return syntax.Name(None, n)


def call(f: str, *args) -> syntax.Call:
    return syntax.Call(None, name(f), list(args))


def is_num(e, v=None) -> bool:
    return isinstance(e, syntax.Num) and not isinstance(e.value, bool) and (v is None or e.value == v)


def neg(a):
    if is_num(a):
        return num(-a.value)
    if isinstance(a, syntax.UnaryOp) and a.op == "-":
        return a.operand
    return syntax.UnaryOp(None, "-", a)


def mul(a, b):
    if is_num(a, 1):
        return b
    if is_num(b, 1):
        return a
    if is_num(a, -1):
        return neg(b)
    if is_num(b, -1):
        return neg(a)
    return syntax.BinOp(None, "*", a, b)


def div(a, b):
    if is_num(b, 1):
        return a
    return syntax.BinOp(None, "/", a, b)


def add(a, b):
    if is_num(a) and is_num(b):
        return num(a.value + b.value)
    if is_num(b) and b.value < 0:
        return sub(a, num(-b.value))
    if is_num(a, 0):
        return b
    if is_num(b, 0):
        return a
    return syntax.BinOp(None, "+", a, b)


def sub(a, b):
    if is_num(a) and is_num(b):
        return num(a.value - b.value)
    if is_num(b) and b.value < 0:
        return add(a, num(-b.value))
    if is_num(b, 0):
        return a
    return syntax.BinOp(None, "-", a, b)


def cmp(op, a, b):
    return syntax.Compare(None, [op], [a, b])


def ifexp(c, a, b):
    return syntax.IfExp(None, c, a, b)


class Guard(syntax.IfExp):
    """A coefficient that applies only where ``cond`` holds (``body if cond else 0``): the adjoint
    update is written under an ``if``, so that it neither reads nor writes where it does not."""


# ---------------------------------------------------------------- activity
def is_float_cast(f: str) -> bool:
    return f in FLOAT_CASTS


def call_name(e: syntax.Call):
    return e.func.id if isinstance(e.func, syntax.Name) else None


def active(e, is_active_name, is_active_tensor) -> bool:
    """Whether the value of ``e`` can carry a derivative."""
    if isinstance(e, (syntax.Num, syntax.Str)):
        return False
    if isinstance(e, syntax.Name):
        return is_active_name(e.id)
    if isinstance(e, syntax.Subscript):
        return isinstance(e.value, syntax.Name) and is_active_tensor(e.value.id)
    if isinstance(e, syntax.BinOp):
        if e.op == "//":
            return False
        return active(e.left, is_active_name, is_active_tensor) or active(e.right, is_active_name, is_active_tensor)
    if isinstance(e, syntax.UnaryOp):
        return e.op != "not" and active(e.operand, is_active_name, is_active_tensor)
    if isinstance(e, (syntax.Compare, syntax.BoolOp, syntax.Attribute, syntax.Tuple)):
        return False
    if isinstance(e, syntax.IfExp):
        return active(e.body, is_active_name, is_active_tensor) or active(e.orelse, is_active_name, is_active_tensor)
    if isinstance(e, syntax.Call):
        if isinstance(e.func, syntax.Attribute) and e.func.attr == "dtype":  # x.dtype(v): a cast
            return any(active(a, is_active_name, is_active_tensor) for a in e.args)
        f = call_name(e)
        if f in types.ALL_DTYPES:
            return is_float_cast(f) and active(e.args[0], is_active_name, is_active_tensor)
        if f in ZERO_GRAD or f == "len":
            return False
        return any(active(a, is_active_name, is_active_tensor) for a in e.args)
    return False


# ---------------------------------------------------------------- the chain rule
class Chain:
    """Collects (read, coefficient) pairs: d(read) += coefficient, for one expression."""

    def __init__(self, is_active):
        self.is_active = is_active  # expression -> bool
        self.out: list = []

    def run(self, e, g):
        if not self.is_active(e):
            return
        if isinstance(e, (syntax.Name, syntax.Subscript)):
            self.out.append((e, g))
            return
        if isinstance(e, syntax.BinOp):
            self.binop(e, g)
        elif isinstance(e, syntax.UnaryOp):
            self.run(e.operand, neg(g) if e.op == "-" else g)
        elif isinstance(e, syntax.IfExp):
            # Only the taken branch contributes, under its condition (no 0 * inf from the other).
            for branch, cond in ((e.body, e.cond), (e.orelse, syntax.UnaryOp(None, "not", e.cond))):
                sub = Chain(self.is_active)
                sub.run(branch, g)
                self.out.extend((r, Guard(None, cond, c, num(0.0))) for r, c in sub.out)
        elif isinstance(e, syntax.Call):
            self.call(e, g)
        else:
            raise HybridUnsupportedError(f"gradient of a {type(e).__name__} expression", e.span, None)

    def binop(self, e: syntax.BinOp, g):
        a, b, op = e.left, e.right, e.op
        if op == "+":
            self.run(a, g)
            self.run(b, g)
        elif op == "-":
            self.run(a, g)
            self.run(b, neg(g))
        elif op == "*":
            self.run(a, mul(g, b))
            self.run(b, mul(a, g))
        elif op == "/":
            self.run(a, div(g, b))
            if self.is_active(b):
                # d(a/b)/db = -(a/b)/b, written g * (a / b) * (1 / b): not a / (b * b), whose b * b
                # overflows where b is past the square root of the type's largest value (a float32
                # softmax's sum of exponentials near 1e22) and takes the gradient to zero, nor with
                # (1 / b) * (1 / b), which reassociated products make a square that underflows; one
                # division per element, as before, where b does not change in the loop (1 / b is
                # hoisted)
                self.run(b, neg(mul(mul(g, e), div(num(1.0), b))))
        elif op == "**":
            self.power(a, b, g)
        elif op == "%":
            # a % b == a - floor(a / b) * b
            self.run(a, g)
            if self.is_active(b):
                self.run(b, neg(mul(g, call("floor", div(a, b)))))
        else:
            raise HybridUnsupportedError(f"gradient of the `{op}` operator", e.span, None)

    def power(self, a, b, g):
        if self.is_active(a):
            if is_num(b):
                k = b.value
                da = num(k) if k != 1 else num(1)
                if k == 2:
                    self.run(a, mul(g, mul(num(2), a)))
                elif k == 1:
                    self.run(a, g)
                else:
                    self.run(a, mul(g, mul(da, syntax.BinOp(None, "**", a, num(k - 1)))))
            else:
                self.run(a, mul(g, mul(b, syntax.BinOp(None, "**", a, sub(b, num(1))))))
        if self.is_active(b):
            self.run(b, mul(g, mul(call("log", a), syntax.BinOp(None, "**", a, b))))

    def call(self, e: syntax.Call, g):
        if isinstance(e.func, syntax.Attribute) and e.func.attr == "dtype":
            self.run(e.args[0], g)
            return
        f = call_name(e)
        args = e.args
        x = args[0] if args else None
        if f in types.ALL_DTYPES:
            if is_float_cast(f):
                self.run(x, g)
            return
        row = intrinsics.TABLE.get(f)
        if row is None or row.derivative is None:
            raise HybridUnsupportedError(f"gradient of `{f}()`", e.span, None)
        if row.derivative == intrinsics.ZERO:
            return
        if row.derivative == "power":
            self.power(args[0], args[1], g)
        elif row.derivative == "extremum":
            self.extremum(f, args, g)
        else:
            for arg, adjoint in zip(args, row.derivative(_BUILDERS, args, g)):
                self.run(arg, adjoint)

    def extremum(self, f, args, g):
        zero = num(0.0)
        if len(args) == 2:
            a, b = args
            win = ">" if f == "max" else "<"
            self.run(a, ifexp(cmp(win, a, b), g, ifexp(cmp("==", a, b), mul(num(0.5), g), zero)))
            self.run(b, ifexp(cmp(win, b, a), g, ifexp(cmp("==", a, b), mul(num(0.5), g), zero)))
            return
        # Ties share the gradient evenly among the arguments equal to the result.
        m = call(f, *args)
        ties = None
        for a in args:
            hit = call("int32", cmp("==", a, m))
            ties = hit if ties is None else syntax.BinOp(None, "+", ties, hit)
        for a in args:
            self.run(a, ifexp(cmp("==", a, m), div(g, ties), zero))


class _Builders:
    """The tree builders an intrinsic's derivative (:data:`hyb.dsl.intrinsics.TABLE`) writes with."""

    num = staticmethod(num)
    call = staticmethod(call)
    neg = staticmethod(neg)
    mul = staticmethod(mul)
    div = staticmethod(div)
    add = staticmethod(add)
    sub = staticmethod(sub)


_BUILDERS = _Builders()
