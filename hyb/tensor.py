"""``hyb.Tensor`` and ``hyb.Parameter``: eager, NumPy-backed tensors that record gradients.

A :class:`Tensor` wraps one NumPy array.  Operations run at once, with NumPy's broadcasting and
MindSpore's dtype rules (``tensor_math.result_dtype``: Python numbers are *weak* scalars, an
integer tensor with a float number gives float32, int / int gives float32), and each operation
on a Tensor that needs a gradient is recorded on the tape of :mod:`hyb.autograd`, so that
``hyb.grad`` can differentiate functions built from them and from Custom operators::

    x = hyb.Tensor([1.0, 4.0, 9.0])          # Python floats make float32, as in MindSpore
    y = (x * x).sum()
    print(x * 2)                               # [ 2.  8. 18.]  (printed as NumPy prints it)

The module's functions :func:`elementwise`, :func:`matmul`, :func:`reduce`, :func:`reshape`,
:func:`transpose`, :func:`expand_dims`, :func:`squeeze` and :func:`cast` run the operations
behind both the Tensor's methods and MindSpore's built-in operators (``hyb/ops/builtin.py``).
Their first argument names the operator as the user spelled it, for error messages and the tape.

A :class:`Parameter` is a Tensor that requires a gradient: a leaf of the graph, typically a
weight assigned as an attribute of a :class:`hyb.nn.Cell`.

The dtype constants ``hyb.float32`` etc. are NumPy dtypes, usable wherever NumPy takes one.
``hyb.bfloat16`` is ``ml_dtypes.bfloat16``'s, made on first use (it needs that package).
"""
from __future__ import annotations

import math

import numpy as np

from . import tape
from . import tensor_math as tm
from .dsl import types
from .errors import HybridArgumentError, HybridError, HybridTypeError, HybridUnsupportedError

__all__ = ["Tensor", "TensorSpec", "Parameter", "ParameterTuple",
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


def apply(name, inputs, forward, backward=None, arrays=None):
    """Run ``forward`` on the inputs' arrays (or on ``arrays``: the inputs converted to the
    operation's dtype); record ``backward(dout, *arrays)`` when needed.

    ``backward`` returns one gradient (or None) per input; broadcast gradients are summed back
    to each input's shape here, and only inputs of a float dtype get one.  Without ``backward``
    the result carries no gradient.  What NumPy refuses becomes a HybridError naming ``name``.
    """
    if arrays is None:
        arrays = [_data(x) for x in inputs]
    try:
        with np.errstate(all="ignore"):          # inf and nan are results, as in MindSpore
            out = Tensor.from_numpy(np.asarray(forward(*arrays)))
    except (TypeError, ValueError, OverflowError) as e:
        error = HybridTypeError if isinstance(e, TypeError) else HybridArgumentError
        raise error(f"{name}: {e}", None, "check the inputs' dtypes, shapes and values") from None
    need = [tape.needs_grad(x) and tm.is_float(x.dtype) for x in inputs]
    if backward is not None and any(need):

        def vjp(douts):
            with np.errstate(all="ignore"):
                grads = backward(douts[0], *arrays)
            return [tape.unbroadcast(g, np.shape(a)) if (g is not None and n) else None
                    for g, a, n in zip(grads, arrays, need)]

        vjp.__name__ = name
        tape.record(inputs, [out], vjp, name)
    return out


def _operand(op, pos, v):
    """An input of an elementwise operator: a Tensor, a NumPy array or scalar, a Python number
    (kept weak), or a list of numbers (made a Tensor)."""
    if isinstance(v, (Tensor, np.generic)) or tm.is_weak(v):
        return v
    if isinstance(v, np.ndarray):
        _dtype(v.dtype)
        return v
    if isinstance(v, (list, tuple)):
        return Tensor(v)
    raise HybridTypeError(f"{op}: input {pos} has type {type(v).__name__}, not a Tensor or a number", None,
                          "pass a hyb.Tensor, a NumPy array or a Python number")


def _prepare(op, inputs, to_float=False):
    """The checked inputs, and their arrays in the operation's dtype (float32 instead of a bool
    or integer dtype when ``to_float``)."""
    values = [_operand(op, i, v) for i, v in enumerate(inputs)]
    dtype = tm.result_dtype(values)
    if to_float and not tm.is_float(dtype):
        dtype = float32
    try:
        arrays = [np.asarray(_data(v), dtype) for v in values]
    except (OverflowError, ValueError) as e:
        raise HybridArgumentError(f"{op}: {e}", None, f"the operation computes in {dtype}") from None
    return values, arrays


def elementwise(op, rule, *inputs):
    """The elementwise operation ``rule`` (a name of ``tensor_math``'s ``UNARY``, ``BINARY`` or
    ``COMPARE``) on ``inputs``, broadcast, in MindSpore's dtype."""
    values, arrays = _prepare(op, inputs, rule in tm.TO_FLOAT)
    shapes = [a.shape for a in arrays]
    try:
        np.broadcast_shapes(*shapes)
    except ValueError:
        raise HybridArgumentError(f"{op}: shapes {' and '.join(map(str, shapes))} do not broadcast", None,
                                  "each trailing dimension must be equal or 1: reshape an input, or add "
                                  "axes with expand_dims") from None
    if rule in tm.COMPARE:
        return apply(op, values, tm.COMPARE[rule], None, arrays)
    forward, backward = (tm.UNARY if len(arrays) == 1 else tm.BINARY)[rule]
    return apply(op, values, forward, backward, arrays)


def matmul(op, a, b):
    """The matrix product with NumPy's rules (1-D operands, broadcast batch dimensions)."""
    values, arrays = _prepare(op, [a, b])
    sa, sb = arrays[0].shape, arrays[1].shape
    if not sa or not sb:
        raise HybridArgumentError(f"{op}: cannot multiply shapes {sa} and {sb}: a 0-d tensor is not a matrix",
                                  None, "use mul for a scalar factor")
    inner = sb[-2] if len(sb) > 1 else sb[0]
    if sa[-1] != inner:
        raise HybridArgumentError(f"{op}: the inner dimensions of shapes {sa} and {sb} differ ({sa[-1]} and "
                                  f"{inner})", None, "the first operand's last dimension must equal the "
                                                     "second's second-to-last")
    try:
        np.broadcast_shapes(sa[:-2], sb[:-2])
    except ValueError:
        raise HybridArgumentError(f"{op}: the batch dimensions of shapes {sa} and {sb} do not broadcast", None,
                                  "batch dimensions must be equal or 1") from None
    return apply(op, values, np.matmul, tm.BINARY["matmul"][1], arrays)


def as_tensor(op, x, pos=0) -> "Tensor":
    """``x`` as a Tensor: a Tensor as it is, a NumPy array shared, numbers and lists converted."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, np.ndarray):
        _dtype(x.dtype)
        return Tensor.from_numpy(x)
    if isinstance(x, (bool, int, float, np.generic, list, tuple)):
        return Tensor(x)
    raise HybridTypeError(f"{op}: input {pos} has type {type(x).__name__}, not a Tensor", None,
                          "pass a hyb.Tensor or a NumPy array")


def _check_bool(op, name, value):
    if not isinstance(value, (bool, np.bool_)):
        raise HybridTypeError(f"{op}: {name} must be a bool, got {value!r}", None, f"{name}=True or {name}=False")


def reduce(op, kind, x, axis=None, keepdims=False, dtype=None):
    """``sum``, ``mean``, ``max`` or ``min`` over ``axis`` (None or (): all axes).

    A sum keeps an integer dtype (bool gives int64), the mean of integers is float32."""
    x = as_tensor(op, x)
    _check_bool(op, "keep_dims", keepdims)
    shape = x.shape
    axes = tm.reduce_axes(op, axis, x.ndim)
    if dtype is not None:
        out_dtype = cast_dtype(op, dtype)
    elif kind == "mean" and not tm.is_float(x.dtype):
        out_dtype = float32
    else:
        out_dtype = int64 if kind == "sum" and x.dtype == bool_ else x.dtype
    if kind in ("max", "min") and any(shape[a] == 0 for a in axes):
        raise HybridArgumentError(f"{op}: the {kind}imum over an empty axis is undefined (shape {shape}, "
                                  f"axis {axis})", None, "reduce over axes of size at least 1")
    kept = tuple(1 if i in axes else n for i, n in enumerate(shape))
    out_shape = kept if keepdims else tuple(n for i, n in enumerate(shape) if i not in axes)
    count = math.prod(shape[a] for a in axes)

    def forward(a):
        if kind in ("sum", "mean"):
            r = getattr(np, kind)(a, axis=axes, keepdims=True, dtype=out_dtype)
        else:
            r = getattr(np, kind)(a, axis=axes, keepdims=True).astype(out_dtype, copy=False)
        return r.reshape(out_shape)

    return apply(op, [x], forward, lambda g, a: (tm.reduce_grad(kind, g.reshape(kept), a, axes, count),))


def _relabel(op, x, new_shape):
    """``x`` with the same elements in ``new_shape``; the gradient goes back to ``x``'s shape."""
    old = x.shape
    return apply(op, [x], lambda a: a.reshape(new_shape), lambda g, a: (g.reshape(old),))


def reshape(op, x, shape):
    x = as_tensor(op, x)
    return _relabel(op, x, tm.reshape_target(op, x.shape, shape))


def expand_dims(op, x, axis):
    """A new axis of size 1 at ``axis``, in [-rank - 1, rank]."""
    x = as_tensor(op, x)
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, (bool, np.bool_)):
        raise HybridTypeError(f"{op}: axis must be an int, got {axis!r}", None, "e.g. 0 or -1")
    (a,) = tm.normalize_axes(op, axis, x.ndim, extra=1)
    return _relabel(op, x, x.shape[:a] + (1,) + x.shape[a:])


def squeeze(op, x, axis=None):
    """Without the axes of size 1 named by ``axis`` (None or (): all of them)."""
    x = as_tensor(op, x)
    axes = tm.squeeze_axes(op, axis, x.shape)
    return _relabel(op, x, tuple(n for i, n in enumerate(x.shape) if i not in axes))


def transpose(op, x, perm):
    x = as_tensor(op, x)
    perm = tm.check_perm(op, perm, x.ndim)
    inverse = tuple(int(i) for i in np.argsort(perm))
    return apply(op, [x], lambda a: np.transpose(a, perm), lambda g, a: (np.transpose(g, inverse),))


def cast_dtype(op, dtype) -> np.dtype:
    if dtype is None or isinstance(dtype, (Tensor, np.ndarray)):
        raise HybridTypeError(f"{op}: {dtype!r} is not a dtype", None, "use hyb.float32, a NumPy dtype or a "
                                                                        "name such as 'float32'")
    try:
        return _dtype(dtype)
    except HybridError:
        raise HybridTypeError(f"{op}: {dtype!r} is not a dtype", None, "use hyb.float32, a NumPy dtype or a "
                                                                        "name such as 'float32'") from None


def cast(op, x, dtype):
    """``x`` converted to ``dtype``; the gradient flows back converted, between float dtypes."""
    x = as_tensor(op, x)
    dt = cast_dtype(op, dtype)
    src = x.dtype
    differentiable = tm.is_float(src) and tm.is_float(dt)
    return apply(op, [x], lambda a: a.astype(dt), lambda g, a: (g.astype(src) if differentiable else None,))


def _concrete_shape(shape) -> bool:
    return isinstance(shape, (tuple, list, int)) and all(
        isinstance(n, (int, np.integer)) and n >= 0 for n in ((shape,) if isinstance(shape, int) else shape))


def _initial(shape, dtype, init):
    """The data of ``Tensor(shape=..., dtype=..., init=...)``: zeros without ``init`` (MindSpore
    leaves it unset until used), or the initializer MindSpore names ``"zeros"``/``"ones"``."""
    name = init if isinstance(init, str) or init is None else type(init).__name__
    fill = {None: 0, "zeros": 0, "Zero": 0, "ones": 1, "One": 1}.get(name)
    if fill is None:
        raise HybridUnsupportedError(f"Tensor(init={init!r}): hyb has the initializers 'zeros' and 'ones'", None,
                                     "pass the data instead, e.g. hyb.Tensor(np.random.normal(size=shape))")
    return np.full(shape, fill, dtype)


class TensorSpec:
    """What ``hyb.Tensor(shape=[4, None], dtype=hyb.float32)`` makes: a declared input with
    dimensions of any size (None or -1) or any rank (``shape=[-2]``), for
    :meth:`hyb.nn.Cell.set_inputs`.  It has a shape and a dtype, and no data."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        if not isinstance(shape, (tuple, list)) or not all(n is None or isinstance(n, (int, np.integer))
                                                           for n in shape):
            raise HybridTypeError(f"Tensor(shape={shape!r}): a shape is a list of sizes, None for any size", None,
                                  "e.g. hyb.Tensor(shape=[4, None], dtype=hyb.float32)")
        self.shape = tuple(None if n is None or n == -1 else int(n) for n in shape)
        self.dtype = float32 if dtype is None else _dtype(dtype)

    def asnumpy(self):
        raise HybridTypeError(f"{self!r} has no data: a shape with None declares an input for Cell.set_inputs",
                              None, "call the network with real tensors")

    def __repr__(self):
        dims = ", ".join("None" if n is None else str(n) for n in self.shape)
        return f"Tensor(shape=[{dims}], dtype={_ms_name(self.dtype)})"


class Tensor:
    """An eager tensor backed by a NumPy array (see the module docstring).

    ``Tensor(data, dtype=None)`` takes array-likes, NumPy arrays and scalars, Python numbers
    or another Tensor, and copies the data.  Without ``dtype``, NumPy data keeps its dtype and
    Python floats become float32 (Python ints int64), as in MindSpore.
    """

    __slots__ = ("_data", "requires_grad", "_node", "_out_index", "__weakref__")
    __array_priority__ = 1000

    def __new__(cls, data=None, dtype=None, shape=None, init=None, **_):
        if data is None and shape is not None and not _concrete_shape(shape):
            return TensorSpec(shape, dtype)
        return super().__new__(cls)

    def __init__(self, data=None, dtype=None, shape=None, init=None, **_):
        if data is None and shape is not None:  # MindSpore's Tensor(shape=..., dtype=..., init=...)
            data = _initial(shape, float32 if dtype is None else _dtype(dtype), init)
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
    # MindSpore's dtype rules and NumPy's broadcasting (see ``elementwise``).
    def __add__(self, other):
        return elementwise("Tensor.__add__", "add", self, other)

    def __radd__(self, other):
        return elementwise("Tensor.__radd__", "add", other, self)

    def __sub__(self, other):
        return elementwise("Tensor.__sub__", "subtract", self, other)

    def __rsub__(self, other):
        return elementwise("Tensor.__rsub__", "subtract", other, self)

    def __mul__(self, other):
        return elementwise("Tensor.__mul__", "multiply", self, other)

    def __rmul__(self, other):
        return elementwise("Tensor.__rmul__", "multiply", other, self)

    def __truediv__(self, other):
        return elementwise("Tensor.__truediv__", "divide", self, other)

    def __rtruediv__(self, other):
        return elementwise("Tensor.__rtruediv__", "divide", other, self)

    def __pow__(self, other):
        return elementwise("Tensor.__pow__", "power", self, other)

    def __rpow__(self, other):
        return elementwise("Tensor.__rpow__", "power", other, self)

    def __matmul__(self, other):
        return matmul("Tensor.__matmul__", self, other)

    def __rmatmul__(self, other):
        return matmul("Tensor.__rmatmul__", other, self)

    def __mod__(self, other):
        return elementwise("Tensor.__mod__", "remainder", self, other)

    def __rmod__(self, other):
        return elementwise("Tensor.__rmod__", "remainder", other, self)

    def __floordiv__(self, other):          # piecewise constant: no gradient
        return elementwise("Tensor.__floordiv__", "floor_divide", self, other)

    def __rfloordiv__(self, other):
        return elementwise("Tensor.__rfloordiv__", "floor_divide", other, self)

    def __neg__(self):
        return elementwise("Tensor.__neg__", "negative", self)

    def __pos__(self):
        return self

    def __abs__(self):
        return elementwise("Tensor.__abs__", "absolute", self)

    # comparisons give bool Tensors and no gradient; == and != with a non-number are False / True
    def __eq__(self, other):
        return elementwise("Tensor.__eq__", "equal", self, other) if _comparable(other) else NotImplemented

    def __ne__(self, other):
        return elementwise("Tensor.__ne__", "not_equal", self, other) if _comparable(other) else NotImplemented

    def __lt__(self, other):
        return elementwise("Tensor.__lt__", "less", self, other)

    def __le__(self, other):
        return elementwise("Tensor.__le__", "less_equal", self, other)

    def __gt__(self, other):
        return elementwise("Tensor.__gt__", "greater", self, other)

    def __ge__(self, other):
        return elementwise("Tensor.__ge__", "greater_equal", self, other)

    def matmul(self, other):
        return matmul("Tensor.matmul", self, other)

    # ------------------------------------------------------------------ reductions and shapes
    def sum(self, axis=None, keepdims=False, dtype=None, out=None):
        """Sum over ``axis`` (None or (): all axes); an integer sum keeps its dtype."""
        _no_out("sum", out)
        return reduce("Tensor.sum", "sum", self, axis, keepdims, dtype)

    def mean(self, axis=None, keepdims=False, dtype=None, out=None, *, keep_dims=None):
        """Mean over ``axis`` (None or (): all axes); ``keep_dims`` is MindSpore's spelling."""
        _no_out("mean", out)
        return reduce("Tensor.mean", "mean", self, axis, keepdims if keep_dims is None else keep_dims, dtype)

    def max(self, axis=None, keepdims=False):
        """Maximum over ``axis`` (None or (): all axes); ties share the gradient evenly."""
        return reduce("Tensor.max", "max", self, axis, keepdims)

    def min(self, axis=None, keepdims=False):
        """Minimum over ``axis`` (None or (): all axes); ties share the gradient evenly."""
        return reduce("Tensor.min", "min", self, axis, keepdims)

    def reshape(self, *shape):
        """``t.reshape(2, 3)`` or ``t.reshape((2, 3))``; -1 allowed once."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return reshape("Tensor.reshape", self, shape)

    def transpose(self, *axes):
        """Permute the axes (reverse them without arguments), as ``np.transpose``."""
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        return transpose("Tensor.transpose", self, axes or tuple(reversed(range(self.ndim))))

    def permute(self, *axis):
        """``t.permute(1, 0)`` or ``t.permute((1, 0))``: MindSpore's name of a transpose."""
        if len(axis) == 1 and isinstance(axis[0], (tuple, list)):
            axis = tuple(axis[0])
        return transpose("Tensor.permute", self, axis)

    @property
    def T(self):
        return self.transpose()

    def expand_dims(self, axis):
        return expand_dims("Tensor.expand_dims", self, axis)

    def squeeze(self, axis=None):
        return squeeze("Tensor.squeeze", self, axis)

    def astype(self, dtype):
        """A copy converted to ``dtype``; the gradient flows back converted to this dtype."""
        return cast("Tensor.astype", self, dtype)

    def __getitem__(self, index):
        index = _index(index)
        shape = self.shape

        def backward(g, a):
            full = np.zeros(shape, g.dtype)
            np.add.at(full, index, g)
            return (full,)

        return apply("getitem", [self], lambda a: a[index], backward)

    def __setitem__(self, index, value):
        raise HybridUnsupportedError("Tensors are read-only: item assignment is not supported", None,
                                     "compute a new Tensor, or edit t.asnumpy() outside of differentiation")

    # ------------------------------------------------------------------ NumPy interoperation
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """``np.exp(t)``, ``array + t``, ... give Tensors; the ufuncs of ``tensor_math``'s tables
        are differentiable, comparisons carry no gradient, and other ufuncs on a Tensor that
        needs a gradient are refused rather than silently giving a wrong (zero) gradient."""
        name = ufunc.__name__
        if method == "__call__" and not kwargs:
            if name == "matmul":
                return matmul("numpy.matmul", *inputs)
            if name in tm.COMPARE or name in (tm.UNARY if len(inputs) == 1 else tm.BINARY):
                return elementwise(f"numpy.{name}", name, *inputs)
            if name in tm.NO_GRAD:
                return apply(name, list(inputs), ufunc)
        if tape.needs_grad(*inputs):
            raise HybridUnsupportedError(f"numpy.{name} ({method}) has no gradient in hyb", None,
                                         "use Tensor arithmetic, or a Custom operator with a bprop")
        if "out" in kwargs:
            kwargs["out"] = tuple(_data(o) for o in kwargs["out"])
        result = getattr(ufunc, method)(*[_data(x) for x in inputs], **kwargs)
        if isinstance(result, tuple):
            return tuple(Tensor.from_numpy(r) for r in result)
        return result if result is None else Tensor.from_numpy(result)


# Methods named after MindSpore's Tensor methods: name -> the elementwise rule they run.
_UNARY_METHODS = {"neg": "negative", "abs": "absolute", "exp": "exp", "log": "log", "sqrt": "sqrt",
                  "square": "square", "sigmoid": "sigmoid", "tanh": "tanh"}
_BINARY_METHODS = {"add": "add", "sub": "subtract", "mul": "multiply", "div": "divide", "pow": "power",
                   "maximum": "maximum", "minimum": "minimum"}


def _method(name, rule, unary):
    if unary:
        def method(self):
            return elementwise(f"Tensor.{name}", rule, self)
    else:
        def method(self, other):
            return elementwise(f"Tensor.{name}", rule, self, other)
    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"Elementwise {rule}, as ``hyb.ops.{name}``."
    return method


for _name, _rule in _UNARY_METHODS.items():
    setattr(Tensor, _name, _method(_name, _rule, True))
for _name, _rule in _BINARY_METHODS.items():
    setattr(Tensor, _name, _method(_name, _rule, False))


def _comparable(v) -> bool:
    return isinstance(v, (Tensor, np.ndarray, np.generic, list, tuple)) or tm.is_weak(v)


def _no_out(name, out):
    if out is not None:
        raise HybridUnsupportedError(f"Tensor.{name}(out=...) is not supported; Tensors are not written in place")


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

