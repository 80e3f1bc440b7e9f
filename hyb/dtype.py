"""``hyb.dtype``: the dtype names MindSpore scripts import as ``from mindspore import dtype as mstype``.

They are NumPy dtypes (the same objects as ``hyb.float32`` etc.), so they work wherever hyb or
NumPy takes a dtype.  ``bfloat16`` is ``ml_dtypes.bfloat16``'s, made when first read (it needs
that package; it is not in ``__all__``, so that ``import *`` works without it).
"""
from . import tensor as _tensor
from .tensor import bool_, float16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64

float_ = float32
int_ = int64
bool = bool_  # noqa: A001 - MindSpore's name
# MindSpore's other names for the same dtypes.
byte, short, intc, intp = int8, int16, int32, int64
ubyte, ushort, uintc, uintp = uint8, uint16, uint32, uint64
half, single, double = float16, float32, float64

__all__ = ["bool_", "bool", "float16", "float32", "float64", "float_", "int8", "int16", "int32", "int64", "int_",
           "uint8", "uint16", "uint32", "uint64", "byte", "short", "intc", "intp", "ubyte", "ushort", "uintc", "uintp",
           "half", "single", "double", "dtype_to_nptype"]


def dtype_to_nptype(type_):
    """The NumPy scalar type of a dtype (MindSpore's ``mstype.dtype_to_nptype``): ``np.float32``
    for ``mstype.float32``."""
    import numpy as np
    return np.dtype(type_).type


def __getattr__(name):
    if name == "bfloat16":
        return _tensor.bfloat16
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
