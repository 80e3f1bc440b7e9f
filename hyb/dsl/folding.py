"""Constant folding with NumPy's semantics: the values of operations and intrinsics whose
operands are known when a kernel is checked, and constants converted between dtypes.

Integer ``//``, ``%`` and ``ceil_div`` by zero give 0, as NumPy's integer loops and the compiled
code (:mod:`hyb.codegen.legalise`) do.  Size expressions are evaluated at run time with these
same functions (:mod:`hyb.dsl.sizes`)."""
from __future__ import annotations

import numpy as np

from . import tir
from . import types


def fold(op, x, y):
    """The value of a binary operation of two Python numbers, with NumPy's semantics, or None."""
    if isinstance(x, float) or op == "/":
        with np.errstate(all="ignore"):
            return float(_NP_BINOPS[op](np.float64(x), np.float64(y)))
    if op in ("//", "%") and y == 0:
        return 0
    if op == "**":
        return x ** y if y >= 0 and (abs(x) <= 1 or y <= 4096) else None
    return {"+": int.__add__, "-": int.__sub__, "*": int.__mul__, "//": int.__floordiv__,
            "%": int.__mod__}[op](x, y)


_NP_BINOPS = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.true_divide, "//": np.floor_divide,
              "%": np.remainder, "**": np.power}


def fold_intrinsic(name: str, vals: list):
    """The value of an intrinsic of Python numbers known now, or None to leave it to run time."""
    x = vals[0]
    if name == "max":
        return x if x > vals[1] or x != x else vals[1]
    if name == "min":
        return x if x < vals[1] or x != x else vals[1]
    if name == "abs":
        return abs(x)
    if name == "sign":
        return type(x)((x > 0) - (x < 0)) if x == x else x
    if name == "ceil_div":
        return -(-x // vals[1]) if vals[1] != 0 else 0
    if name == "popcount":
        return bin(abs(x)).count("1")
    return None


_COMPARE = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
            ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}


def known_condition(e: tir.TExpr):
    """The value of a condition made of constants only (shapes, literals, compile-time constants:
    comparisons joined by and/or/not), or None when it depends on values known at run time."""
    if isinstance(e, tir.Const):
        return bool(e.value)
    if isinstance(e, tir.Cmp):
        a, b = e.a, e.b
        while isinstance(a, tir.Cast) and isinstance(a.a, tir.Const):
            a = tir.Const(a.dtype, convert_const(a.a.value, a.a.dtype, a.dtype))
        while isinstance(b, tir.Cast) and isinstance(b.a, tir.Const):
            b = tir.Const(b.dtype, convert_const(b.a.value, b.a.dtype, b.dtype))
        if isinstance(a, tir.Const) and isinstance(b, tir.Const):
            return bool(_COMPARE[e.op](a.value, b.value))
        return None
    if isinstance(e, tir.Logic):
        x, y = known_condition(e.a), known_condition(e.b)
        if e.op == "and":
            return False if x is False or y is False else (True if x and y else None)
        return True if x is True or y is True else (False if x is False and y is False else None)
    if isinstance(e, tir.Unary) and e.op == "not":
        x = known_condition(e.a)
        return None if x is None else not x
    return None


def negate(c: tir.Const):
    if types.is_weak(c.dtype):
        return -c.value
    with np.errstate(all="ignore"):
        return (-np.array(c.value, dtype=c.dtype)).item()  # wraps: -uint8(1) is 255


def convert_const(value, src: str, dst: str):
    """A constant's value in ``dst``: Python's conversion for a Python number, NumPy's (C's,
    wrapping) for a value that already has a dtype."""
    if types.is_weak(src) or types.is_weak(dst):
        if types.is_bool(dst):
            return bool(value)
        return int(value) if types.is_int(dst) else float(value)
    with np.errstate(all="ignore"):
        return np.array(value, dtype=src).astype(dst).item()
