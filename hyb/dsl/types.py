"""Element types and NumPy-compatible promotion (NEP 50).

A dtype is named by a string: NumPy's names (``"float32"``, ``"int64"``, ``"bool"``, ...)
for values with a fixed type, and the two *weak* kinds ``"int"`` and ``"float"`` for
Python literals, loop variables and shape values, which take the type of the other operand
as NumPy 2 does.  A weak value that never meets a fixed one becomes ``int64``/``float64``.
"""
from __future__ import annotations

import numpy as np

WEAK_INT = "int"
WEAK_FLOAT = "float"

FLOATS = ("float16", "float32", "float64")
SIGNED = ("int8", "int16", "int32", "int64")
UNSIGNED = ("uint8", "uint16", "uint32", "uint64")
ALL_DTYPES = ("bool",) + SIGNED + UNSIGNED + FLOATS


def is_weak(dt: str) -> bool:
    return dt in (WEAK_INT, WEAK_FLOAT)


def is_float(dt: str) -> bool:
    return dt in FLOATS or dt == WEAK_FLOAT


def is_int(dt: str) -> bool:
    """Signed or unsigned integer, weak int included (bool excluded)."""
    return dt in SIGNED or dt in UNSIGNED or dt == WEAK_INT


def is_bool(dt: str) -> bool:
    return dt == "bool"


def concrete(dt: str) -> str:
    """The fixed dtype a value of type ``dt`` is stored and computed in."""
    if dt == WEAK_INT:
        return "int64"
    if dt == WEAK_FLOAT:
        return "float64"
    return dt


def normalize(dtype) -> str | None:
    """NumPy dtype name for a user-given dtype (string, numpy dtype or type), or None."""
    try:
        name = np.dtype(dtype).name
    except TypeError:
        return None
    return name if name in ALL_DTYPES else None


def promote(a: str, b: str) -> str:
    """Result dtype of an arithmetic operation between values of dtypes ``a`` and ``b``."""
    wa, wb = is_weak(a), is_weak(b)
    if wa and wb:
        return WEAK_FLOAT if WEAK_FLOAT in (a, b) else WEAK_INT
    if wa or wb:
        weak, strong = (a, b) if wa else (b, a)
        if weak == WEAK_INT:
            return "int64" if strong == "bool" else strong
        # weak float
        return strong if strong in FLOATS else "float64"
    return np.result_type(np.dtype(a), np.dtype(b)).name


def true_divide_type(a: str, b: str) -> str:
    t = promote(a, b)
    if t == WEAK_INT:
        return WEAK_FLOAT
    if is_float(t):
        return t
    return "float64"


def float_math_type(dt: str) -> str:
    """Result dtype of a floating-point function (sqrt, exp, ...) of a ``dt`` value, as NumPy's ufuncs.

    Small integers get the smallest float that holds them exactly (int8 -> float16, int16 ->
    float32); a weak value stays weak (``sqrt(2)`` is a Python float).
    """
    if is_weak(dt):
        return WEAK_FLOAT
    if dt in FLOATS:
        return dt
    if dt in ("bool", "int8", "uint8"):
        return "float16"
    if dt in ("int16", "uint16"):
        return "float32"
    return "float64"
