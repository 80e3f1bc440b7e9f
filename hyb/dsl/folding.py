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


def wrap_int(value: int, dtype: str) -> int:
    """A Python integer as ``dtype`` holds it (two's complement wrapping, as NumPy's arithmetic)."""
    info = np.iinfo(types.numpy_dtype(dtype))
    span = int(info.max) - int(info.min) + 1
    return (value - int(info.min)) % span + int(info.min)


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


def _int_arithmetic(e: tir.TExpr, leaf) -> bool:
    """Whether ``e`` is an integer expression of + - * // %, negation and integer casts whose
    other nodes all pass ``leaf``."""
    if not types.is_int(e.dtype):
        return False
    for sub in tir.walk_expr(e):
        if isinstance(sub, tir.Bin):
            ok = sub.op in ("+", "-", "*", "//", "%")
        elif isinstance(sub, tir.Unary):
            ok = sub.op == "neg"
        elif isinstance(sub, tir.Cast):
            ok = types.is_int(sub.dtype)
        else:
            ok = leaf(sub)
        if not ok:
            return False
    return True


def is_index_expression(e: tir.TExpr) -> bool:
    """An integer expression of loop variables and constants only, with + - * // % (and integer
    casts): no tensor element, no scalar local, so its value is the same wherever it is read."""
    return (_int_arithmetic(e, lambda n: isinstance(n, (tir.Const, tir.Var, tir.Size)))
            and any(isinstance(n, (tir.Var, tir.Size)) for n in tir.walk_expr(e)))


def of_parameters(e: tir.TExpr, tensors: dict) -> bool:
    """An integer expression of integer scalar parameters (with literals, constants and
    shapes), such as `out_h = h * scale`: like a loop's index expression, a name assigned it
    once stands for it, so that a shape made from it specialises the kernel on the
    parameters' values."""
    def leaf(n):
        if isinstance(n, tir.Load):
            t = tensors[n.tensor]
            return t.kind == "param" and not n.indices and types.is_int(t.dtype)
        return isinstance(n, (tir.Const, tir.Size))

    return _int_arithmetic(e, leaf) and any(isinstance(n, tir.Load) for n in tir.walk_expr(e))


_SIZE_OPS = ("+", "-", "*", "//", "%")


def is_size_expression(e: tir.TExpr) -> bool:
    """Whether ``e`` is an integer computed from run-time sizes and constants only (a shape of a
    shape-generic kernel), with at least one size in it."""
    sizes = False
    for sub in tir.walk_expr(e):
        if isinstance(sub, tir.Size):
            sizes = True
        elif isinstance(sub, tir.Const):
            if not (types.is_int(sub.dtype) and isinstance(sub.value, int) and not isinstance(sub.value, bool)):
                return False
        elif isinstance(sub, tir.Bin):
            if sub.op not in _SIZE_OPS or not types.is_int(sub.dtype):
                return False
        elif isinstance(sub, tir.Cast):
            if not (types.is_int(sub.dtype) and types.is_int(sub.a.dtype)):
                return False
        elif isinstance(sub, tir.Intrinsic):
            if sub.name not in ("max", "min", "ceil_div") or not types.is_int(sub.dtype):
                return False
        else:
            return False
    return sizes
