"""Element types and NumPy-compatible promotion (NEP 50).

A dtype is named by a string: NumPy's names (``"float32"``, ``"int64"``, ``"bool"``, ...)
for values with a fixed type, and the two *weak* kinds ``"int"`` and ``"float"`` for
Python literals, loop variables and shape values, which take the type of the other operand
as NumPy 2 does.  A weak value that never meets a fixed one becomes ``int64``/``float64``.

``"bfloat16"`` is the dtype of the ``ml_dtypes`` package (``ml_dtypes.bfloat16``), which NumPy
knows only once that package is imported: :func:`numpy_dtype` imports it on first use, and
raises :class:`~hyb.errors.HybridDependencyError` where it is not installed.
"""
from __future__ import annotations

import numpy as np

from ..errors import HybridDependencyError

WEAK_INT = "int"
WEAK_FLOAT = "float"

FLOATS = ("float16", "bfloat16", "float32", "float64")
HALVES = ("float16", "bfloat16")  # stored in 16 bits, computed in float32 and rounded after each operation
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


BFLOAT16_HINT = "bfloat16 arrays come from the ml_dtypes package: pip install ml_dtypes"


def bfloat16(span=None) -> np.dtype:
    """NumPy's dtype of ``ml_dtypes.bfloat16``, importing ``ml_dtypes`` the first time;
    :class:`HybridDependencyError` (at ``span``) where it is not installed."""
    try:
        import ml_dtypes
    except ImportError:
        raise HybridDependencyError("bfloat16 needs the ml_dtypes package, which is not installed", span,
                                    BFLOAT16_HINT) from None
    return np.dtype(ml_dtypes.bfloat16)


def numpy_dtype(dt: str, span=None) -> np.dtype:
    """The NumPy dtype of a (concrete) dtype name; bfloat16 through :func:`bfloat16`."""
    dt = concrete(dt)
    return bfloat16(span) if dt == "bfloat16" else np.dtype(dt)


def normalize(dtype, span=None) -> str | None:
    """NumPy dtype name for a user-given dtype (string, numpy dtype or type), or None.

    ``"bfloat16"`` needs ``ml_dtypes`` (:class:`HybridDependencyError` without it); a dtype
    object named bfloat16 can only have come from it."""
    if isinstance(dtype, str) and dtype == "bfloat16":
        bfloat16(span)
        return "bfloat16"
    try:
        name = np.dtype(dtype).name
    except Exception:  # NumPy's parse of any string: TypeError, ValueError ("99int64"), ...
        return None
    return name if name in ALL_DTYPES else None


def is_float_dtype(dtype) -> bool:
    """Whether a NumPy dtype holds floating-point numbers (NumPy's own, or ml_dtypes' bfloat16,
    whose kind is ``V``)."""
    dtype = np.dtype(dtype)
    return dtype.kind == "f" or dtype.name == "bfloat16"


# bfloat16 meets the other dtypes where NumPy has no rule (ml_dtypes defines bool, int8, uint8,
# float32 and float64 only): the result is the smallest float that holds both exactly, as NumPy
# promotes its own floats (int16 with float16 is float32).  bfloat16 and float16 hold each other's
# values only in float32.
_BFLOAT16_WITH = {
    "bool": "bfloat16", "int8": "bfloat16", "uint8": "bfloat16", "bfloat16": "bfloat16",
    "int16": "float32", "uint16": "float32", "float16": "float32", "float32": "float32",
    "int32": "float64", "uint32": "float64", "int64": "float64", "uint64": "float64", "float64": "float64",
}


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
    if "bfloat16" in (a, b):
        return _BFLOAT16_WITH[b if a == "bfloat16" else a]
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
