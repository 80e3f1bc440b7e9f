"""The NumPy side of Tensor operations: MindSpore's dtype rules, the gradient rules, and the
checks of shapes, axes and permutations that turn a mistake into a message naming the operator.

Like :mod:`hyb.tape`, this module knows no Tensor class: it works on NumPy arrays, shapes and
dtypes.  :mod:`hyb.tensor` runs the operations and records them on the tape; the built-in
operators of :mod:`hyb.ops.builtin` go through it.  Every check takes ``op``, the operator's
name as the user spelled it (``ReduceSum``, ``ops.sum``, ``Tensor.sum``), for its message.
"""
from __future__ import annotations

import math

import numpy as np

from .dsl import types
from .errors import HybridArgumentError, HybridTypeError

__all__ = ["result_dtype", "is_float", "is_weak", "UNARY", "BINARY", "COMPARE", "TO_FLOAT", "NO_GRAD",
           "normalize_axes", "reduce_axes", "reshape_target", "check_perm", "squeeze_axes", "reduce_grad"]


def is_float(dtype) -> bool:
    """A float (or complex) dtype: the values that have gradients."""
    return np.dtype(dtype).kind in "fc" or types.is_float_dtype(dtype)


# --------------------------------------------------------------------------- dtype rules

_KIND = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}     # bool < integers < floats < complex
_WEAK_DTYPE = {0: np.dtype("bool"), 1: np.dtype("int64"), 2: np.dtype("float32"), 3: np.dtype("complex64")}


def _kind(dtype) -> int:
    return 2 if types.is_float_dtype(dtype) else _KIND.get(np.dtype(dtype).kind, -1)


def is_weak(v) -> bool:
    """A Python number (not a NumPy scalar): it takes the dtype of the Tensors it meets."""
    return isinstance(v, (bool, int, float, complex)) and not isinstance(v, np.generic)


def _weak_kind(v) -> int:
    return 0 if isinstance(v, bool) else 1 if isinstance(v, int) else 2 if isinstance(v, float) else 3


def result_dtype(values) -> np.dtype:
    """The dtype MindSpore computes an operation on ``values`` in (anything with a ``dtype``,
    and Python numbers).

    Values with a dtype (Tensors, NumPy arrays and scalars) take part with it: the highest kind
    wins (bool < integers < floats), keeping its dtype (int64 with float16 gives float16), and
    within a kind the wider type wins (uint8 with int8 gives int16, as NumPy promotes).  Python
    numbers are *weak*: they take the others' dtype, except that a float number makes a bool or
    integer result float32 and an int number makes a bool result int32.  Numbers alone give what
    ``Tensor(number)`` holds: bool, int64 or float32.
    """
    dtype = None
    for v in values:
        if is_weak(v):
            continue
        d = np.dtype(v.dtype)
        if dtype is None or _kind(d) > _kind(dtype):
            dtype = d
        elif _kind(d) == _kind(dtype) and d != dtype:
            dtype = np.promote_types(dtype, d)
    weak = max((_weak_kind(v) for v in values if is_weak(v)), default=-1)
    if dtype is None:
        return _WEAK_DTYPE[weak]
    if weak > _kind(dtype):
        return np.dtype("int32") if weak == 1 else _WEAK_DTYPE[weak]
    return dtype


# --------------------------------------------------------------------------- gradient rules
# Backward rules: (dout, inputs' arrays...) -> one gradient per input (broadcast shapes are
# summed back by the caller).

def _as_float(a):
    return a if is_float(a.dtype) else a.astype(np.float64)


def _add_b(g, a, b):
    return g, g


def _sub_b(g, a, b):
    return g, -g


def _mul_b(g, a, b):
    return g * b, g * a


def _div_b(g, a, b):
    return g / b, -g * a / (np.asarray(b) * b)


def _pow_b(g, a, b):
    a = _as_float(np.asarray(a))
    da = g * np.where(b == 0, 0.0, b * a ** (b - 1))
    db = g * np.where(a == 0, 0.0, a ** b * np.log(np.where(a == 0, 1.0, a)))
    return da, db


def _mod_b(g, a, b):
    return g, -g * np.floor_divide(a, b)


def _max_b(g, a, b):          # a tie sends the gradient to the first input
    first = a >= b
    return np.where(first, g, 0), np.where(first, 0, g)


def _min_b(g, a, b):
    first = a <= b
    return np.where(first, g, 0), np.where(first, 0, g)


def _matmul_b(g, a, b):
    if a.ndim == 1 and b.ndim == 1:          # a dot product
        return g * b, g * a
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    g2 = g
    if a.ndim == 1:
        g2 = np.expand_dims(g2, -2)
    if b.ndim == 1:
        g2 = np.expand_dims(g2, -1)
    da = g2 @ np.swapaxes(b2, -1, -2)
    db = np.swapaxes(a2, -1, -2) @ g2
    if a.ndim == 1:
        da = da[..., 0, :]
    if b.ndim == 1:
        db = db[..., :, 0]
    return da, db


def _sigmoid(a):
    return 0.5 * (1 + np.tanh(0.5 * a))        # no overflow for large |a|


def _relu(a):
    return np.where(a > 0, a, np.zeros((), a.dtype))


# name -> (forward, backward).  The names of NumPy ufuncs are also what a Tensor answers to in
# ``__array_ufunc__``.
UNARY = {
    "negative": (np.negative, lambda g, a: (-g,)),
    "positive": (np.positive, lambda g, a: (g,)),
    "exp": (np.exp, lambda g, a: (g * np.exp(a),)),
    "log": (np.log, lambda g, a: (g / a,)),
    "sqrt": (np.sqrt, lambda g, a: (g / (2 * np.sqrt(a)),)),
    "sin": (np.sin, lambda g, a: (g * np.cos(a),)),
    "cos": (np.cos, lambda g, a: (-g * np.sin(a),)),
    "tanh": (np.tanh, lambda g, a: (g * (1 - np.tanh(a) ** 2),)),
    "absolute": (np.absolute, lambda g, a: (g * np.sign(a),)),
    "square": (np.square, lambda g, a: (2 * g * a,)),
    "sigmoid": (_sigmoid, lambda g, a: (g * _sigmoid(a) * (1 - _sigmoid(a)),)),
    "relu": (_relu, lambda g, a: (g * (a > 0),)),
}
BINARY = {
    "add": (np.add, _add_b), "subtract": (np.subtract, _sub_b), "multiply": (np.multiply, _mul_b),
    "divide": (np.true_divide, _div_b), "power": (np.power, _pow_b), "matmul": (np.matmul, _matmul_b),
    "remainder": (np.remainder, _mod_b), "maximum": (np.maximum, _max_b), "minimum": (np.minimum, _min_b),
    "floor_divide": (np.floor_divide, lambda g, a, b: (None, None)),
}
COMPARE = {"equal": np.equal, "not_equal": np.not_equal, "less": np.less, "less_equal": np.less_equal,
           "greater": np.greater, "greater_equal": np.greater_equal}
# Operations computed in float32 when their inputs are bool or integers (int / int included).
TO_FLOAT = {"divide", "exp", "log", "sqrt", "sin", "cos", "tanh", "sigmoid"}
NO_GRAD = {"isnan", "isinf", "isfinite", "sign", "floor", "ceil", "trunc", "rint", "logical_and", "logical_or",
           "logical_not"}


# --------------------------------------------------------------------------- shapes and axes

def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def normalize_axes(op, axis, ndim, what="axis", extra=0) -> tuple:
    """``axis`` (an int, or a tuple or list of ints) as non-negative ints below ``ndim + extra``,
    each given in [-(ndim + extra), ndim + extra) and none twice."""
    axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    n = ndim + extra
    out = []
    for a in axes:
        if not _is_int(a):
            raise HybridTypeError(f"{op}: {what} must be an int or a tuple of ints, got {axis!r}", None,
                                  "e.g. 0, -1 or (0, 2)")
        if not -n <= a < n:
            raise HybridArgumentError(f"{op}: {what} {a} is out of range for a tensor of rank {ndim}", None,
                                      f"{what} is in [{-n}, {n})")
        out.append(int(a) % n)
    if len(set(out)) != len(out):
        raise HybridArgumentError(f"{op}: {what} {tuple(axes)} names an axis twice", None, "name each axis once")
    return tuple(out)


def reduce_axes(op, axis, ndim) -> tuple:
    """The axes a reduction runs over: all of them for ``None`` or ``()`` (MindSpore's default)."""
    if axis is None or (isinstance(axis, (tuple, list)) and len(axis) == 0):
        return tuple(range(ndim))
    return normalize_axes(op, axis, ndim)


def reduce_grad(kind, g, a, axes, count):
    """The gradient of reduction ``kind`` over ``axes`` of ``a`` given ``g`` (with the reduced
    axes kept, of size 1): spread for a sum, divided by ``count`` for a mean, and shared evenly
    between the elements that reached the maximum (minimum)."""
    if kind == "sum":
        return np.broadcast_to(g, a.shape)
    if kind == "mean":
        return np.broadcast_to(g / max(count, 1), a.shape)
    picked = a == (np.max if kind == "max" else np.min)(a, axis=axes, keepdims=True)
    return picked * g / picked.sum(axis=axes, keepdims=True)


def reshape_target(op, shape, new) -> tuple:
    """The shape a reshape of ``shape`` to ``new`` (ints, at most one -1) gives."""
    if _is_int(new):
        new = (new,)
    if not isinstance(new, (tuple, list)) or not all(_is_int(n) for n in new):
        raise HybridTypeError(f"{op}: the shape must be a tuple of ints, got {new!r}", None, "e.g. (2, -1)")
    new = tuple(int(n) for n in new)
    size = math.prod(shape)
    known = math.prod(n for n in new if n != -1)
    if new.count(-1) > 1 or any(n < -1 for n in new):
        raise HybridArgumentError(f"{op}: shape {new} may hold sizes >= 0 and one -1", None,
                                  "-1 stands for the size that keeps the number of elements")
    if -1 in new and known and size % known == 0:
        new = tuple(size // known if n == -1 else n for n in new)
    if -1 in new or math.prod(new) != size:
        raise HybridArgumentError(f"{op}: cannot reshape a tensor of shape {tuple(shape)} ({size} elements) to "
                                  f"{new}", None, "the new shape must hold as many elements as the old one")
    return new


def check_perm(op, perm, ndim) -> tuple:
    """``perm`` as a permutation of ``range(ndim)`` (entries may count from the end)."""
    if not isinstance(perm, (tuple, list)) or not all(_is_int(p) for p in perm):
        raise HybridTypeError(f"{op}: perm must be a tuple of ints, got {perm!r}", None, "e.g. (1, 0)")
    perm = tuple(int(p) for p in perm)
    if len(perm) != ndim or any(not -ndim <= p < ndim for p in perm) or len({p % ndim for p in perm}) != ndim:
        raise HybridArgumentError(f"{op}: perm {perm} is not a permutation of the {ndim} axes of the tensor",
                                  None, f"name each axis of 0..{ndim - 1} once")
    return tuple(p % ndim for p in perm)


def squeeze_axes(op, axis, shape) -> tuple:
    """The axes a squeeze removes: every axis of size 1 for ``None`` or ``()``, else the given
    ones, each of which must have size 1."""
    if axis is None or (isinstance(axis, (tuple, list)) and len(axis) == 0):
        return tuple(i for i, n in enumerate(shape) if n == 1)
    axes = normalize_axes(op, axis, len(shape))
    for a in axes:
        if shape[a] != 1:
            raise HybridArgumentError(f"{op}: axis {a} of shape {tuple(shape)} has size {shape[a]}, not 1", None,
                                      "squeeze only axes of size 1")
    return axes
