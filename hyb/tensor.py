"""``hyb.Tensor`` and ``hyb.Parameter``: eager, NumPy-backed tensors that record gradients.

A :class:`Tensor` wraps one NumPy array.  Operations run at once with NumPy's semantics
(broadcasting, dtype promotion, Python numbers as *weak* scalars), and each operation on a
Tensor that needs a gradient is recorded on the tape of :mod:`hyb.autograd`, so that
``hyb.grad`` can differentiate functions built from them and from Custom operators::

    x = hyb.Tensor([1.0, 4.0, 9.0])          # Python floats make float32, as in MindSpore
    y = (x * x).sum()
    print(x * 2)                               # [ 2.  8. 18.]  (printed as NumPy prints it)

A :class:`Parameter` is a Tensor that requires a gradient: a leaf of the graph, typically a
weight assigned as an attribute of a :class:`hyb.nn.Cell`.

The dtype constants ``hyb.float32`` etc. are NumPy dtypes, usable wherever NumPy takes one.
``hyb.bfloat16`` is ``ml_dtypes.bfloat16``'s, made on first use (it needs that package).
"""
from __future__ import annotations

import numpy as np

from . import tape
from .dsl import types
from .errors import HybridTypeError, HybridUnsupportedError

__all__ = ["Tensor", "Parameter", "ParameterTuple",
           "float16", "float32", "float64", "int8", "int16", "int32", "int64",
           "uint8", "uint16", "uint32", "uint64", "bool_"]

float16, float32, float64 = np.dtype("float16"), np.dtype("float32"), np.dtype("float64")
int8, int16, int32, int64 = np.dtype("int8"), np.dtype("int16"), np.dtype("int32"), np.dtype("int64")
uint8, uint16, uint32, uint64 = np.dtype("uint8"), np.dtype("uint16"), np.dtype("uint32"), np.dtype("uint64")
bool_ = np.dtype("bool")


def __getattr__(name):
    if name == "bfloat16":  # ml_dtypes is imported only when asked for
        return types.bfloat16()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _dtype(dtype) -> np.dtype:
    if isinstance(dtype, str) and dtype == "bfloat16":
        return types.bfloat16()
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise HybridTypeError(f"{dtype!r} is not a dtype", None,
                              "use hyb.float32, a NumPy dtype or a name such as 'float32'") from None
    if dt.kind not in "biufc" and not types.is_float_dtype(dt):
        raise HybridTypeError(f"a Tensor holds numbers, not {dt}", None, "use a bool, integer or float dtype")
    return dt


def _ms_name(dtype: np.dtype) -> str:
    """MindSpore's name of a dtype, for repr: Float32, Int64, UInt8, Bool, BFloat16."""
    name = dtype.name
    if name == "bool":
        return "Bool"
    if name == "bfloat16":
        return "BFloat16"
    if name.startswith("uint"):
        return "UInt" + name[4:]
    return name[0].upper() + name[1:]


def _data(x):
    """The array behind a Tensor; anything else unchanged (so Python numbers stay weak)."""
    return x._data if isinstance(x, Tensor) else x


def _float(a):
    return a if np.issubdtype(a.dtype, np.inexact) or types.is_float_dtype(a.dtype) else a.astype(np.float64)


def _apply(name, inputs, forward, backward=None):
    """Run ``forward`` on the inputs' arrays; record ``backward(dout, *arrays)`` when needed.

    ``backward`` returns one gradient (or None) per input; broadcast gradients are summed back
    to each input's shape here.  Without ``backward`` the result carries no gradient.
    """
    arrays = [_data(x) for x in inputs]
    out = Tensor.from_numpy(np.asarray(forward(*arrays)))
    if backward is not None and tape.needs_grad(*inputs):
        need = [tape.needs_grad(x) for x in inputs]

        def vjp(douts):
            grads = backward(douts[0], *arrays)
            return [tape.unbroadcast(g, np.shape(a)) if (g is not None and n) else None
                    for g, a, n in zip(grads, arrays, need)]

        vjp.__name__ = name
        tape.record(inputs, [out], vjp, name)
    return out


# Backward rules: (dout, inputs' arrays...) -> one gradient per input.

def _add_b(g, a, b):
    return g, g


def _sub_b(g, a, b):
    return g, -g


def _mul_b(g, a, b):
    return g * b, g * a


def _div_b(g, a, b):
    return g / b, -g * a / (np.asarray(b) * b)


def _pow_b(g, a, b):
    a = _float(np.asarray(a))
    with np.errstate(divide="ignore", invalid="ignore"):
        da = g * np.where(b == 0, 0.0, b * a ** (b - 1))
        db = g * np.where(a == 0, 0.0, a ** b * np.log(np.where(a == 0, 1.0, a)))
    return da, db


def _mod_b(g, a, b):
    return g, -g * np.floor_divide(a, b)


def _matmul_b(g, a, b):
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


# NumPy ufuncs a Tensor answers with a recorded operation: name -> (forward, backward).
_UNARY = {
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
}
_BINARY = {
    "add": (np.add, _add_b), "subtract": (np.subtract, _sub_b), "multiply": (np.multiply, _mul_b),
    "divide": (np.true_divide, _div_b), "power": (np.power, _pow_b), "matmul": (np.matmul, _matmul_b),
    "remainder": (np.remainder, _mod_b),
    "floor_divide": (np.floor_divide, lambda g, a, b: (None, None)),
}
_NO_GRAD = {"equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "isnan", "isinf",
            "isfinite", "sign", "floor", "ceil", "trunc", "rint", "logical_and", "logical_or", "logical_not"}


class Tensor:
    """An eager tensor backed by a NumPy array (see the module docstring).

    ``Tensor(data, dtype=None)`` takes array-likes, NumPy arrays and scalars, Python numbers
    or another Tensor, and copies the data.  Without ``dtype``, NumPy data keeps its dtype and
    Python floats become float32 (Python ints int64), as in MindSpore.
    """

    __slots__ = ("_data", "requires_grad", "_node", "_out_index", "__weakref__")
    __array_priority__ = 1000

    def __init__(self, data=None, dtype=None):
        if data is None:
            raise HybridTypeError("Tensor() needs data", None, "e.g. hyb.Tensor([1.0, 2.0]) or hyb.Tensor(np_array)")
        python_data = not isinstance(data, (Tensor, np.ndarray, np.generic))
        if isinstance(data, Tensor):
            data = data._data
        if dtype is not None:
            arr = np.array(data, dtype=_dtype(dtype))
        else:
            arr = np.array(data)
            if python_data and arr.dtype == np.float64:
                arr = arr.astype(np.float32)
            _dtype(arr.dtype)
        self._init(arr)

    def _init(self, arr):
        self._data = arr
        self.requires_grad = False
        self._node = None
        self._out_index = 0

    @classmethod
    def from_numpy(cls, array) -> "Tensor":
        """A Tensor sharing the memory of ``array`` (no copy, dtype kept)."""
        t = Tensor.__new__(Tensor)
        t._init(np.asarray(array))
        return t

    # ------------------------------------------------------------------ data and metadata
    def asnumpy(self) -> np.ndarray:
        """The NumPy array behind this Tensor (shared, not copied)."""
        return self._data

    def __array__(self, dtype=None, copy=None):
        if copy:
            return np.array(self._data, dtype=dtype)
        return np.asarray(self._data, dtype=dtype)

    @property
    def shape(self) -> tuple:
        return self._data.shape

    @property
    def dtype(self) -> np.dtype:
        return self._data.dtype

    @property
    def ndim(self) -> int:
        return self._data.ndim

    @property
    def size(self) -> int:
        return self._data.size

    @property
    def _tracked(self) -> bool:
        """Requires a gradient, or was computed by a recorded operation."""
        return self.requires_grad or self._node is not None

    def item(self):
        return self._data.item()

    def tolist(self):
        return self._data.tolist()

    def __len__(self):
        return len(self._data)

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d Tensor")
        return (self[i] for i in range(len(self)))

    def __bool__(self):
        return bool(self._data)

    def __float__(self):
        return float(self._data.item() if self.size == 1 else self._data)

    def __int__(self):
        return int(self._data.item() if self.size == 1 else self._data)

    def __index__(self):
        return self._data.__index__()

    __hash__ = object.__hash__          # by identity: comparison operators return Tensors

    def __str__(self):
        return str(self._data)

    def __repr__(self):
        sep = " " if self.ndim <= 1 else "\n"
        return f"Tensor(shape={list(self.shape)}, dtype={_ms_name(self.dtype)}, value={sep}{self._data})"

    # ------------------------------------------------------------------ arithmetic
    def __add__(self, other):
        return _apply("add", [self, other], np.add, _add_b)

    def __radd__(self, other):
        return _apply("add", [other, self], np.add, _add_b)

    def __sub__(self, other):
        return _apply("sub", [self, other], np.subtract, _sub_b)

    def __rsub__(self, other):
        return _apply("sub", [other, self], np.subtract, _sub_b)

    def __mul__(self, other):
        return _apply("mul", [self, other], np.multiply, _mul_b)

    def __rmul__(self, other):
        return _apply("mul", [other, self], np.multiply, _mul_b)

    def __truediv__(self, other):
        return _apply("div", [self, other], np.true_divide, _div_b)

    def __rtruediv__(self, other):
        return _apply("div", [other, self], np.true_divide, _div_b)

    def __pow__(self, other):
        return _apply("pow", [self, other], np.power, _pow_b)

    def __rpow__(self, other):
        return _apply("pow", [other, self], np.power, _pow_b)

    def __matmul__(self, other):
        return _apply("matmul", [self, other], np.matmul, _matmul_b)

    def __rmatmul__(self, other):
        return _apply("matmul", [other, self], np.matmul, _matmul_b)

    def __mod__(self, other):
        return _apply("mod", [self, other], np.remainder, _mod_b)

    def __rmod__(self, other):
        return _apply("mod", [other, self], np.remainder, _mod_b)

    def __floordiv__(self, other):          # piecewise constant: no gradient
        return _apply("floordiv", [self, other], np.floor_divide)

    def __rfloordiv__(self, other):
        return _apply("floordiv", [other, self], np.floor_divide)

    def __neg__(self):
        return _apply("neg", [self], np.negative, lambda g, a: (-g,))

    def __pos__(self):
        return self

    def __abs__(self):
        return _apply("abs", [self], np.absolute, _UNARY["absolute"][1])

    # comparisons give bool Tensors and no gradient
    def __eq__(self, other):
        return _apply("eq", [self, other], np.equal)

    def __ne__(self, other):
        return _apply("ne", [self, other], np.not_equal)

    def __lt__(self, other):
        return _apply("lt", [self, other], np.less)

    def __le__(self, other):
        return _apply("le", [self, other], np.less_equal)

    def __gt__(self, other):
        return _apply("gt", [self, other], np.greater)

    def __ge__(self, other):
        return _apply("ge", [self, other], np.greater_equal)

    # ------------------------------------------------------------------ reductions and shapes
    def sum(self, axis=None, keepdims=False, dtype=None, out=None):
        """Sum over ``axis`` (None: all), as ``np.sum``."""
        if out is not None:
            raise HybridUnsupportedError("Tensor.sum(out=...) is not supported; Tensors are not written in place")
        shape = self.shape

        def backward(g, a):
            if axis is not None and not keepdims:
                g = np.expand_dims(g, _axes(axis, len(shape)))
            return (np.broadcast_to(g, shape),)

        return _apply("sum", [self], lambda a: np.sum(a, axis=axis, keepdims=keepdims, dtype=dtype), backward)

    def mean(self, axis=None, keepdims=False, dtype=None, out=None):
        """Mean over ``axis`` (None: all), as ``np.mean``."""
        if out is not None:
            raise HybridUnsupportedError("Tensor.mean(out=...) is not supported; Tensors are not written in place")
        shape = self.shape
        count = int(np.prod([shape[i] for i in _axes(axis, len(shape))])) if axis is not None else self.size

        def backward(g, a):
            if axis is not None and not keepdims:
                g = np.expand_dims(g, _axes(axis, len(shape)))
            return (np.broadcast_to(g / count, shape),)

        return _apply("mean", [self], lambda a: np.mean(a, axis=axis, keepdims=keepdims, dtype=dtype), backward)

    def reshape(self, *shape):
        """``t.reshape(2, 3)`` or ``t.reshape((2, 3))``; -1 allowed once."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        old = self.shape
        return _apply("reshape", [self], lambda a: a.reshape(shape), lambda g, a: (g.reshape(old),))

    def transpose(self, *axes):
        """Permute the axes (reverse them without arguments), as ``np.transpose``."""
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        perm = axes or tuple(reversed(range(self.ndim)))
        inverse = tuple(np.argsort(perm))
        return _apply("transpose", [self], lambda a: np.transpose(a, perm), lambda g, a: (np.transpose(g, inverse),))

    @property
    def T(self):
        return self.transpose()

    def astype(self, dtype):
        """A copy converted to ``dtype``; the gradient flows back converted to this dtype."""
        dt = _dtype(dtype)
        src = self.dtype
        return _apply("astype", [self], lambda a: a.astype(dt), lambda g, a: (g.astype(src),))

    def __getitem__(self, index):
        index = _index(index)
        shape = self.shape

        def backward(g, a):
            full = np.zeros(shape, g.dtype)
            np.add.at(full, index, g)
            return (full,)

        return _apply("getitem", [self], lambda a: a[index], backward)

    def __setitem__(self, index, value):
        raise HybridUnsupportedError("Tensors are read-only: item assignment is not supported", None,
                                     "compute a new Tensor, or edit t.asnumpy() outside of differentiation")

    # ------------------------------------------------------------------ NumPy interoperation
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """``np.exp(t)``, ``array + t``, ... give Tensors; the ufuncs of ``_UNARY`` and ``_BINARY``
        are differentiable, comparisons carry no gradient, and other ufuncs on a Tensor that
        needs a gradient are refused rather than silently giving a wrong (zero) gradient."""
        name = ufunc.__name__
        if method == "__call__" and not kwargs:
            if name in _UNARY and len(inputs) == 1:
                fwd, bwd = _UNARY[name]
                return _apply(name, list(inputs), fwd, bwd)
            if name in _BINARY and len(inputs) == 2:
                fwd, bwd = _BINARY[name]
                return _apply(name, list(inputs), fwd, bwd)
            if name in _NO_GRAD:
                return _apply(name, list(inputs), ufunc)
        if tape.needs_grad(*inputs):
            raise HybridUnsupportedError(f"numpy.{name} ({method}) has no gradient in hyb", None,
                                         "use Tensor arithmetic, or a Custom operator with a bprop")
        if "out" in kwargs:
            kwargs["out"] = tuple(_data(o) for o in kwargs["out"])
        result = getattr(ufunc, method)(*[_data(x) for x in inputs], **kwargs)
        if isinstance(result, tuple):
            return tuple(Tensor.from_numpy(r) for r in result)
        return result if result is None else Tensor.from_numpy(result)


def _axes(axis, ndim):
    axes = axis if isinstance(axis, tuple) else (axis,)
    return tuple(sorted(a % ndim for a in axes))


def _index(index):
    """Tensors inside an index become their arrays."""
    if isinstance(index, tuple):
        return tuple(_data(i) for i in index)
    return _data(index)


class Parameter(Tensor):
    """A Tensor that is a leaf of the graph and (by default) requires a gradient: a weight.

    ``Parameter(data, name=None, requires_grad=True)``.  Assigned as an attribute of a
    :class:`hyb.nn.Cell` it is listed by ``cell.trainable_params()`` (and named after the
    attribute when it has no name).
    """

    __slots__ = ("name",)

    def __init__(self, data, name=None, requires_grad=True):
        super().__init__(data)
        self.name = name
        self.requires_grad = bool(requires_grad)

    def set_data(self, data) -> "Parameter":
        """Replace the value (cast to this Parameter's dtype), e.g. after an optimizer step."""
        arr = np.array(_data(data), dtype=self.dtype)
        if arr.shape != self.shape:
            raise HybridTypeError(f"Parameter `{self.name}` has shape {self.shape}, the new data {arr.shape}")
        self._data = arr
        return self

    def __repr__(self):
        return (f"Parameter (name={self.name}, shape={self.shape}, dtype={_ms_name(self.dtype)}, "
                f"requires_grad={self.requires_grad})")


class ParameterTuple(tuple):
    """A tuple of Parameters, as MindSpore's ``ParameterTuple(net.trainable_params())``."""

    def __new__(cls, params=()):
        params = tuple(params)
        for p in params:
            if not isinstance(p, Parameter):
                raise HybridTypeError(f"ParameterTuple holds Parameters, got {type(p).__name__}")
        return super().__new__(cls, params)
