"""MindSpore's built-in operators, the ones bprop functions and small networks around custom
operators use, as classes (``ops.Add()(x, y)``, ``ops.ReduceSum(keep_dims=True)(x, 1)``) and as
functions (``ops.add(x, y)``, ``ops.sum(x, 1)``).

They take ``hyb.Tensor`` values, NumPy arrays and (where MindSpore does) Python numbers, and
return Tensors.  They run through :mod:`hyb.tensor`'s operations, so they follow MindSpore's
dtype rules, broadcast as NumPy does, and record themselves on hyb's tape: ``hyb.grad`` and
``GradOperation`` differentiate through a mix of them and Custom operators.  Gradients reach
float inputs only.  A bad input raises a HybridError whose message names the operator as it
was called (``ReduceSum`` for the class, ``ops.sum`` for the function).

The elementwise operators are one table, ``ELEMENTWISE``: class name, function names and the
rule of ``hyb.tensor_math`` they run.  The classes are made from it, with MindSpore's inputs.
"""
from __future__ import annotations

import numpy as np

from .. import tensor_math as tm
from ..errors import HybridArgumentError, HybridTypeError, HybridUnsupportedError
from .. import tensor as _t
from ..tensor import Tensor, apply, as_tensor, cast_dtype, elementwise, float32, reduce


class Primitive:
    """The base of the built-in operator classes; ``repr`` is MindSpore's ``Prim[Name]``.

    ``add_prim_attr(name, value)`` records an attribute and returns the operator, as MindSpore's
    does; hyb's operators run eagerly on the CPU, so attributes such as ``primitive_target``
    change nothing."""

    def add_prim_attr(self, name, value):
        if not isinstance(name, str):
            raise HybridTypeError(f"{type(self).__name__}.add_prim_attr: the name must be a string, got {name!r}")
        self.__dict__.setdefault("attrs", {})[name] = value
        return self

    def __repr__(self):
        return f"Prim[{type(self).__name__}]"


def _check_bool(op, name, value):
    if not isinstance(value, (bool, np.bool_)):
        raise HybridTypeError(f"{op}: {name} must be a bool, got {value!r}", None, f"{name}=True or {name}=False")
    return bool(value)


# --------------------------------------------------------------------------- elementwise

# (class name, function names, rule of hyb.tensor_math); the arity is the rule's.
ELEMENTWISE = [
    ("Add", ("add",), "add"), ("Sub", ("sub",), "subtract"), ("Mul", ("mul",), "multiply"),
    ("Div", (), "divide"), ("RealDiv", (), "divide"), ("Pow", ("pow",), "power"),
    ("Maximum", ("maximum",), "maximum"), ("Minimum", ("minimum",), "minimum"),
    ("Neg", ("neg",), "negative"), ("Exp", ("exp",), "exp"), ("Log", ("log",), "log"), ("Sqrt", ("sqrt",), "sqrt"),
    ("Square", ("square",), "square"), ("Abs", ("abs",), "absolute"), ("ReLU", ("relu",), "relu"),
    ("Sigmoid", ("sigmoid",), "sigmoid"), ("Tanh", ("tanh",), "tanh"),
    ("Equal", ("equal", "eq"), "equal"), ("NotEqual", ("not_equal", "ne"), "not_equal"),
    ("Greater", ("greater", "gt"), "greater"), ("GreaterEqual", ("greater_equal", "ge"), "greater_equal"),
    ("Less", ("less", "lt"), "less"), ("LessEqual", ("less_equal", "le"), "less_equal"),
]


def _unary_class(name, rule):
    def __call__(self, x):
        return elementwise(name, rule, x)
    return type(name, (Primitive,), {"__call__": __call__, "__doc__": f"``{name}()(x)``: elementwise {rule}."})


def _binary_class(name, rule):
    def __call__(self, x, y):
        return elementwise(name, rule, x, y)
    return type(name, (Primitive,), {"__call__": __call__, "__doc__": f"``{name}()(x, y)``: elementwise {rule}, "
                                                                       "broadcast, MindSpore's dtype rules."})


def _unary_function(fname, rule):
    def function(input):  # noqa: A002 - MindSpore's parameter name
        return elementwise(f"ops.{fname}", rule, input)
    function.__name__ = function.__qualname__ = fname
    function.__doc__ = f"``ops.{fname}(input)``: elementwise {rule}."
    return function


def _binary_function(fname, rule):
    def function(input, other):  # noqa: A002
        return elementwise(f"ops.{fname}", rule, input, other)
    function.__name__ = function.__qualname__ = fname
    function.__doc__ = f"``ops.{fname}(input, other)``: elementwise {rule}, broadcast."
    return function


_made = {}
for _cls, _fns, _rule in ELEMENTWISE:
    _unary = _rule in tm.UNARY
    _made[_cls] = (_unary_class if _unary else _binary_class)(_cls, _rule)
    for _fn in _fns:
        _made[_fn] = (_unary_function if _unary else _binary_function)(_fn, _rule)
globals().update(_made)


def div(input, other, *, rounding_mode=None):  # noqa: A002
    """``ops.div(input, other, rounding_mode=None)``: true division (integers give float32);
    ``rounding_mode="floor"`` rounds down and ``"trunc"`` towards zero (no gradient)."""
    if rounding_mode is None:
        return elementwise("ops.div", "divide", input, other)
    if rounding_mode == "floor":
        return elementwise("ops.div", "floor_divide", input, other)
    if rounding_mode == "trunc":
        values = [v if tm.is_weak(v) else as_tensor("ops.div", v, i) for i, v in enumerate((input, other))]
        q = elementwise("ops.div", "divide", *values)
        dtype = tm.result_dtype(values)
        return apply("ops.div", [q], lambda a: np.trunc(a).astype(dtype))
    raise HybridArgumentError(f"ops.div: rounding_mode must be None, 'floor' or 'trunc', got {rounding_mode!r}", None,
                              "None divides exactly")


# --------------------------------------------------------------------------- matrix products

def _swap(op, x):
    perm = tuple(range(x.ndim - 2)) + (x.ndim - 1, x.ndim - 2)
    return _t.transpose(op, x, perm)


def _product(op, x, y, transpose_a, transpose_b):
    """``x @ y`` with either operand's last two axes swapped first; the message of a mismatch
    names both shapes as given and the flags."""
    ka = x.shape[-2] if transpose_a else x.shape[-1]
    kb = y.shape[-1] if transpose_b else y.shape[-2]
    if ka != kb:
        raise HybridArgumentError(
            f"{op}: the inner dimensions differ: x has shape {x.shape} (transpose_a={transpose_a}), y has shape "
            f"{y.shape} (transpose_b={transpose_b}), so {ka} meets {kb}", None,
            "x's columns (its rows with transpose_a) must be as many as y's rows (its columns with transpose_b)")
    return _t.matmul(op, _swap(op, x) if transpose_a else x, _swap(op, y) if transpose_b else y)


class MatMul(Primitive):
    """``MatMul(transpose_a=False, transpose_b=False)(x, y)``: the product of two 2-D tensors."""

    def __init__(self, transpose_a=False, transpose_b=False):
        self.transpose_a = _check_bool("MatMul", "transpose_a", transpose_a)
        self.transpose_b = _check_bool("MatMul", "transpose_b", transpose_b)

    def __call__(self, x, y):
        x, y = as_tensor("MatMul", x, 0), as_tensor("MatMul", y, 1)
        if x.ndim != 2 or y.ndim != 2:
            raise HybridArgumentError(f"MatMul: takes 2-D tensors, got shapes {x.shape} and {y.shape}", None,
                                      "use BatchMatMul or ops.matmul for batches of matrices")
        return _product("MatMul", x, y, self.transpose_a, self.transpose_b)


class BatchMatMul(Primitive):
    """``BatchMatMul(transpose_a=False, transpose_b=False)(x, y)``: matrix products over the
    last two axes; the leading (batch) axes broadcast."""

    def __init__(self, transpose_a=False, transpose_b=False):
        self.transpose_a = _check_bool("BatchMatMul", "transpose_a", transpose_a)
        self.transpose_b = _check_bool("BatchMatMul", "transpose_b", transpose_b)

    def __call__(self, x, y):
        x, y = as_tensor("BatchMatMul", x, 0), as_tensor("BatchMatMul", y, 1)
        if x.ndim < 2 or y.ndim < 2:
            raise HybridArgumentError(f"BatchMatMul: takes tensors of rank 2 or more, got shapes {x.shape} and "
                                      f"{y.shape}", None, "add a batch axis with ExpandDims, or use Mul for scalars")
        return _product("BatchMatMul", x, y, self.transpose_a, self.transpose_b)


def bmm(input_x, mat2):
    """``ops.bmm(input_x, mat2)``: batched matrix products; ``input_x`` has rank 3 or more."""
    x, y = as_tensor("ops.bmm", input_x, 0), as_tensor("ops.bmm", mat2, 1)
    if x.ndim < 3 or y.ndim < 2:
        raise HybridArgumentError(f"ops.bmm: takes input_x of rank 3 or more and mat2 of rank 2 or more, got shapes "
                                  f"{x.shape} and {y.shape}", None, "use ops.matmul for single matrices")
    return _product("ops.bmm", x, y, False, False)


def matmul(input, other):  # noqa: A002
    """``ops.matmul(input, other)``: NumPy's matmul (1-D operands, broadcast batch axes)."""
    return _t.matmul("ops.matmul", input, other)


# --------------------------------------------------------------------------- reductions

def _reduce_class(name, kind):
    def __init__(self, keep_dims=False):
        self.keep_dims = _check_bool(name, "keep_dims", keep_dims)

    def __call__(self, x, axis=()):
        return reduce(name, kind, x, axis, self.keep_dims)

    doc = (f"``{name}(keep_dims=False)(x, axis=())``: the {kind} over ``axis`` (an int, a tuple of ints, "
           "or () for all axes).")
    return type(name, (Primitive,), {"__init__": __init__, "__call__": __call__, "__doc__": doc})


ReduceMean = _reduce_class("ReduceMean", "mean")
ReduceMax = _reduce_class("ReduceMax", "max")
ReduceMin = _reduce_class("ReduceMin", "min")


class ReduceSum(Primitive):
    """``ReduceSum(keep_dims=False, skip_mode=False)(x, axis=())``: the sum over ``axis`` (an
    int, a tuple of ints, or () for all axes; with ``skip_mode``, () sums nothing)."""

    def __init__(self, keep_dims=False, skip_mode=False):
        self.keep_dims = _check_bool("ReduceSum", "keep_dims", keep_dims)
        self.skip_mode = _check_bool("ReduceSum", "skip_mode", skip_mode)

    def __call__(self, x, axis=()):
        if self.skip_mode and isinstance(axis, (tuple, list)) and not axis:
            x = as_tensor("ReduceSum", x)
            return apply("ReduceSum", [x], lambda a: a.copy(), lambda g, a: (g,))
        return reduce("ReduceSum", "sum", x, axis, self.keep_dims)


def sum(input, dim=None, keepdim=False, *, dtype=None):  # noqa: A001,A002 - MindSpore's names
    """``ops.sum(input, dim=None, keepdim=False, *, dtype=None)``."""
    return reduce("ops.sum", "sum", input, dim, keepdim, dtype)


def mean(input, axis=None, keep_dims=False):  # noqa: A002
    """``ops.mean(input, axis=None, keep_dims=False)``; the mean of integers is float32."""
    return reduce("ops.mean", "mean", input, axis, keep_dims)


def _extreme(kind):
    fname = f"a{kind}"

    def function(input, axis=None, keepdims=False, *, initial=None, where=None):  # noqa: A002
        if initial is not None or where is not None:
            raise HybridUnsupportedError(f"ops.{fname}: initial and where are not supported", None,
                                         "select the elements with ops.select first")
        return reduce(f"ops.{fname}", kind, input, axis, keepdims)
    function.__name__ = function.__qualname__ = fname
    function.__doc__ = (f"``ops.{fname}(input, axis=None, keepdims=False)``: the {kind}imum over ``axis``; "
                        "tied elements share the gradient evenly.")
    return function


amax, amin = _extreme("max"), _extreme("min")


# --------------------------------------------------------------------------- shapes and dtypes

class Reshape(Primitive):
    """``Reshape()(input_x, input_shape)``; one size may be -1."""

    def __call__(self, input_x, input_shape):
        return _t.reshape("Reshape", input_x, input_shape)


class Transpose(Primitive):
    """``Transpose()(input_x, input_perm)``: the axes in the order of ``input_perm``."""

    def __call__(self, input_x, input_perm):
        return _t.transpose("Transpose", input_x, input_perm)


class ExpandDims(Primitive):
    """``ExpandDims()(input_x, axis)``: a new axis of size 1 at ``axis``."""

    def __call__(self, input_x, axis):
        return _t.expand_dims("ExpandDims", input_x, axis)


class Squeeze(Primitive):
    """``Squeeze(axis=())(input_x)``: without the given axes of size 1 (() all of them)."""

    def __init__(self, axis=()):
        if not isinstance(axis, (int, tuple, list)) or isinstance(axis, bool):
            raise HybridTypeError(f"Squeeze: axis must be an int or a tuple of ints, got {axis!r}", None,
                                  "e.g. Squeeze(0) or Squeeze((0, 2))")
        self.axis = axis

    def __call__(self, input_x):
        return _t.squeeze("Squeeze", input_x, self.axis)


class Cast(Primitive):
    """``Cast()(input_x, type_)``: the values converted to ``type_``."""

    def __call__(self, input_x, type_):
        return _t.cast("Cast", input_x, type_)


def reshape(input, shape):  # noqa: A002
    """``ops.reshape(input, shape)``."""
    return _t.reshape("ops.reshape", input, shape)


def transpose(input, input_perm):  # noqa: A002
    """``ops.transpose(input, input_perm)``."""
    return _t.transpose("ops.transpose", input, input_perm)


def permute(input, axis):  # noqa: A002
    """``ops.permute(input, axis)``: a transpose."""
    return _t.transpose("ops.permute", input, axis)


def expand_dims(input_x, axis):
    """``ops.expand_dims(input_x, axis)``."""
    return _t.expand_dims("ops.expand_dims", input_x, axis)


def unsqueeze(input, dim):  # noqa: A002
    """``ops.unsqueeze(input, dim)``: ``expand_dims``."""
    return _t.expand_dims("ops.unsqueeze", input, dim)


def squeeze(input, axis=None):  # noqa: A002
    """``ops.squeeze(input, axis=None)``: without the axes of size 1 (None: all of them)."""
    return _t.squeeze("ops.squeeze", input, axis)


def cast(input, dtype):  # noqa: A002
    """``ops.cast(input, dtype)``."""
    return _t.cast("ops.cast", input, dtype)


# --------------------------------------------------------------------------- new tensors

def _shape_arg(op, shape) -> tuple:
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    if isinstance(shape, Tensor):
        shape = tuple(shape.tolist())
    if (not isinstance(shape, (tuple, list))
            or not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 0 for n in shape)):
        raise HybridTypeError(f"{op}: the shape must be an int or a tuple of ints >= 0, got {shape!r}", None,
                              "e.g. (2, 3)")
    return tuple(int(n) for n in shape)


def _filled(op, shape, dtype, value):
    shape, dtype = _shape_arg(op, shape), cast_dtype(op, dtype)
    if isinstance(value, Tensor):
        value = value.asnumpy()
    if np.ndim(value) != 0 or not isinstance(value, (bool, int, float, np.generic, np.ndarray)):
        raise HybridTypeError(f"{op}: the value must be a number or a 0-d tensor, got {value!r}", None,
                              "e.g. 1.5")
    return apply(op, [], lambda: np.full(shape, value, dtype))


class Zeros(Primitive):
    """``Zeros()(size, type)``: a new tensor of zeros."""

    def __call__(self, size, type=None):  # noqa: A002 - MindSpore's name
        return _filled("Zeros", size, float32 if type is None else type, 0)


class Ones(Primitive):
    """``Ones()(shape, type)``: a new tensor of ones."""

    def __call__(self, shape, type=None):  # noqa: A002
        return _filled("Ones", shape, float32 if type is None else type, 1)


class Fill(Primitive):
    """``Fill()(type, shape, value)``: a new tensor of ``value``."""

    def __call__(self, type, shape, value):  # noqa: A002
        return _filled("Fill", shape, type, value)


def zeros(size, dtype=None):
    """``ops.zeros(size, dtype=None)``: float32 unless ``dtype`` says otherwise."""
    return _filled("ops.zeros", size, float32 if dtype is None else dtype, 0)


def ones(shape, dtype=None):
    """``ops.ones(shape, dtype=None)``: float32 unless ``dtype`` says otherwise."""
    return _filled("ops.ones", shape, float32 if dtype is None else dtype, 1)


def fill(type, shape, value):  # noqa: A002
    """``ops.fill(type, shape, value)``."""
    return _filled("ops.fill", shape, type, value)


def _like(op, x, value, dtype=None):
    x = as_tensor(op, x)
    dt = x.dtype if dtype is None else cast_dtype(op, dtype)
    return apply(op, [x], lambda a: np.full(a.shape, value, dt))       # a constant: no gradient


class ZerosLike(Primitive):
    """``ZerosLike()(input_x)``: zeros of ``input_x``'s shape and dtype."""

    def __call__(self, input_x):
        return _like("ZerosLike", input_x, 0)


class OnesLike(Primitive):
    """``OnesLike()(input_x)``: ones of ``input_x``'s shape and dtype."""

    def __call__(self, input_x):
        return _like("OnesLike", input_x, 1)


def zeros_like(input, *, dtype=None):  # noqa: A002
    return _like("ops.zeros_like", input, 0, dtype)


def ones_like(input, *, dtype=None):  # noqa: A002
    return _like("ops.ones_like", input, 1, dtype)


# --------------------------------------------------------------------------- joining and selecting

def _tensors(op, tensors) -> list:
    if isinstance(tensors, Tensor) or not isinstance(tensors, (tuple, list)):
        raise HybridTypeError(f"{op}: takes a tuple or list of tensors, got {type(tensors).__name__}", None,
                              f"e.g. {op}((x, y))" if op[0].isupper() else f"e.g. {op}((x, y), axis=0)")
    if not tensors:
        raise HybridArgumentError(f"{op}: takes at least one tensor, got an empty {type(tensors).__name__}", None,
                                  "pass the tensors to join, e.g. (x, y)")
    return [as_tensor(op, t, i) for i, t in enumerate(tensors)]


def _joined(op, tensors, forward, backward):
    """Run ``forward`` on the tensors' arrays in their common dtype."""
    dtype = tm.result_dtype(tensors)
    arrays = [t.asnumpy().astype(dtype, copy=False) for t in tensors]
    return apply(op, tensors, forward, backward, arrays)


def _concat(op, tensors, axis):
    tensors = _tensors(op, tensors)
    shapes = [t.shape for t in tensors]
    if len({len(s) for s in shapes}) != 1:
        raise HybridArgumentError(f"{op}: the tensors have different ranks: shapes {', '.join(map(str, shapes))}",
                                  None, "reshape them to one rank first")
    if not shapes[0]:
        raise HybridArgumentError(f"{op}: cannot concatenate 0-d tensors", None, "use Stack to join scalars")
    (a,) = tm.normalize_axes(op, axis, len(shapes[0]))
    if len({s[:a] + s[a + 1:] for s in shapes}) != 1:
        raise HybridArgumentError(f"{op}: shapes {', '.join(map(str, shapes))} differ outside axis {a}", None,
                                  "all dimensions but the concatenated one must match")
    cuts = np.cumsum([s[a] for s in shapes])[:-1]
    return _joined(op, tensors, lambda *xs: np.concatenate(xs, axis=a),
                   lambda g, *xs: tuple(np.split(g, cuts, axis=a)))


def _stack(op, tensors, axis):
    tensors = _tensors(op, tensors)
    shapes = [t.shape for t in tensors]
    if len(set(shapes)) != 1:
        raise HybridArgumentError(f"{op}: the tensors have different shapes: {', '.join(map(str, shapes))}", None,
                                  "stacked tensors must have one shape")
    (a,) = tm.normalize_axes(op, axis, len(shapes[0]), extra=1)
    return _joined(op, tensors, lambda *xs: np.stack(xs, axis=a),
                   lambda g, *xs: tuple(np.take(g, i, axis=a) for i in range(len(xs))))


class Concat(Primitive):
    """``Concat(axis=0)((x, y, ...))``: the tensors joined along an existing axis."""

    def __init__(self, axis=0):
        self.axis = axis

    def __call__(self, input_x):
        return _concat("Concat", input_x, self.axis)


class Stack(Primitive):
    """``Stack(axis=0)((x, y, ...))``: the tensors (of one shape) joined along a new axis."""

    def __init__(self, axis=0):
        self.axis = axis

    def __call__(self, input_x):
        return _stack("Stack", input_x, self.axis)


def concat(tensors, axis=0):
    return _concat("ops.concat", tensors, axis)


def cat(tensors, axis=0):
    return _concat("ops.cat", tensors, axis)


def stack(tensors, axis=0):
    return _stack("ops.stack", tensors, axis)


def _select(op, cond, x, y):
    cond = as_tensor(op, cond, 0)
    if cond.dtype != np.bool_:
        raise HybridTypeError(f"{op}: the condition must be a bool tensor, got {cond.dtype}", None,
                              "make one with a comparison, e.g. x > 0, or Cast it to hyb.bool_")
    x = x if tm.is_weak(x) else as_tensor(op, x, 1)
    y = y if tm.is_weak(y) else as_tensor(op, y, 2)
    dtype = tm.result_dtype([x, y])
    arrays = [cond.asnumpy()] + [np.asarray(v.asnumpy() if isinstance(v, Tensor) else v, dtype) for v in (x, y)]
    shapes = [a.shape for a in arrays]
    try:
        np.broadcast_shapes(*shapes)
    except ValueError:
        raise HybridArgumentError(f"{op}: shapes {' and '.join(map(str, shapes))} (condition, x, y) do not "
                                  "broadcast", None, "each trailing dimension must be equal or 1") from None
    return apply(op, [cond, x, y], np.where,
                 lambda g, c, a, b: (None, np.where(c, g, 0), np.where(c, 0, g)), arrays)


class Select(Primitive):
    """``Select()(cond, x, y)``: ``x`` where ``cond`` holds, else ``y`` (broadcast)."""

    def __call__(self, cond, x, y):
        return _select("Select", cond, x, y)


def select(cond, x, y):
    """``ops.select(cond, x, y)``; ``x`` or ``y`` may be a number."""
    return _select("ops.select", cond, x, y)


CLASSES = ([c for c, _, _ in ELEMENTWISE]
           + ["MatMul", "BatchMatMul", "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "Reshape", "Transpose",
              "ExpandDims", "Squeeze", "Cast", "Zeros", "Ones", "Fill", "ZerosLike", "OnesLike", "Concat", "Stack",
              "Select"])
FUNCTIONS = ([f for _, fs, _ in ELEMENTWISE for f in fs]
             + ["div", "matmul", "bmm", "sum", "mean", "amax", "amin", "reshape", "transpose", "permute",
                "expand_dims", "unsqueeze", "squeeze", "cast", "zeros", "ones", "fill", "zeros_like", "ones_like",
                "concat", "cat", "stack", "select"])
__all__ = ["Primitive"] + CLASSES + FUNCTIONS
