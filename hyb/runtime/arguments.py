"""A call's arguments as the native code takes them: NumPy arrays and scalars checked and
prepared before anything runs, with clear errors for what a kernel cannot take."""
from __future__ import annotations

import numpy as np

from ..dsl import tir
from ..dsl import types
from ..errors import HybridArgumentError, HybridTypeError


def scalar_buffer(t: tir.Tensor, value) -> np.ndarray:
    """A scalar argument as a 0-d array the native code reads through a pointer."""
    try:
        return np.array(value, dtype=types.numpy_dtype(t.dtype))
    except OverflowError:
        raise HybridArgumentError(f"argument `{t.source_name}` = {value!r} does not fit {types.concrete(t.dtype)}",
                                  t.span, "pass a smaller value, or a NumPy scalar of a wider dtype") from None


def check_in_place(k: tir.TypedKernel, arrays: list, written=None):
    """Arrays written in place must be writeable and must not share memory with each other."""
    written = k.written if written is None else written
    by_name = dict(zip(k.inputs, arrays))
    names = [n for n in k.inputs if n in written]
    for n in names:
        if not by_name[n].flags.writeable:
            t = k.tensors[n]
            raise HybridArgumentError(f"argument `{t.source_name}` is written in place but is read-only",
                                      t.span, "pass a writeable array, e.g. x.copy()")
    for i, n in enumerate(names):
        for m in names[i + 1:]:
            if np.shares_memory(by_name[n], by_name[m]):
                a, b = k.tensors[n].source_name, k.tensors[m].source_name
                raise HybridArgumentError(f"arguments `{a}` and `{b}` are both written in place and share memory",
                                          k.span, "pass separate arrays, e.g. x and x.copy()")


def check_written_are_arrays(k: tir.TypedKernel, args) -> None:
    """An input the kernel writes must be passed as an array: a list or tuple would become a
    new array, and the kernel's writes would be lost with it."""
    written = k.written
    for name, a in zip(k.inputs, args):
        if name in written and isinstance(a, (list, tuple)):
            t = k.tensors[name]
            raise HybridArgumentError(f"argument `{t.source_name}` is written by the kernel, but a "
                                      f"{type(a).__name__} was passed: the writes would be lost", t.span,
                                      f"pass a NumPy array, e.g. `{t.source_name} = np.asarray(...)` before the call")


def check_fits(k: tir.TypedKernel, arrays) -> None:
    """Python integer arguments used as a narrower integer dtype must fit it, as NumPy's
    ``np.ones(3, np.int8) * 1000`` raises OverflowError."""
    by_name = dict(zip(k.inputs, arrays))
    for name, dtype, span in k.fits:
        v = by_name.get(name)
        if isinstance(v, int) and not isinstance(v, bool):
            info = np.iinfo(dtype)
            if not info.min <= v <= info.max:
                raise HybridArgumentError(
                    f"argument `{k.tensors[name].source_name}` = {v} is out of bounds for {dtype}, the type it is "
                    f"used at here", span, f"{dtype} holds {info.min} to {info.max} (NumPy raises OverflowError): "
                    "pass a value that fits, or make the array it meets wider")


def prepare_arrays(k_or_params, args) -> list:
    """NumPy arrays (and Python/NumPy scalars) for the call's arguments; a clear error for anything else."""
    out = []
    for pos, a in enumerate(args):
        if isinstance(a, np.ndarray):
            arr = a
        elif isinstance(a, (bool, int, float, np.generic)):
            if isinstance(a, np.generic) and types.normalize(a.dtype) is None:
                raise HybridArgumentError(f"argument {pos} is a {a.dtype} scalar, which kernels do not support",
                                          None, "pass an int, a float or a NumPy scalar of a real dtype")
            out.append(a)
            continue
        elif isinstance(a, complex):
            raise HybridArgumentError(f"argument {pos} is a complex number, which kernels do not support", None,
                                      "pass an int or a float")
        elif isinstance(a, (list, tuple)):
            arr = list_array(a, *_parameter(k_or_params, pos))
        elif hasattr(a, "__array__"):
            arr = np.asarray(a)
        elif hasattr(a, "asnumpy"):
            arr = a.asnumpy()
        else:
            raise HybridTypeError(f"argument {pos} is a {type(a).__name__}, not an array", None,
                                  "pass NumPy arrays")
        if types.normalize(arr.dtype) is None:
            raise HybridArgumentError(f"argument {pos} has dtype {arr.dtype}, which kernels do not support", None,
                                      "supported: " + ", ".join(types.ALL_DTYPES))
        out.append(arr)
    return out


def _parameter(k, pos: int) -> tuple:
    """``(the name, where it is declared)`` of parameter ``pos`` of a Kernel or a TypedKernel."""
    kdef = getattr(k, "kdef", None)
    if kdef is not None and pos < len(kdef.params):
        return f"`{kdef.params[pos].name}`", kdef.params[pos].span
    inputs = getattr(k, "inputs", None)
    if inputs is not None and pos < len(inputs):
        t = k.tensors[inputs[pos]]
        return f"`{t.source_name}`", t.span
    return str(pos), None


def list_array(items, name: str = "", span=None) -> np.ndarray:
    """A list or tuple argument as one array: numbers (nested lists of one length), or arrays of
    one shape and dtype stacked along a new first axis, so that ``inputs[j][i]``, ``len(inputs)``
    and ``inputs[0].dtype`` mean what they mean in Python."""
    arrays = [x for x in items if isinstance(x, np.ndarray) or (hasattr(x, "__array__") and not np.isscalar(x))]
    if arrays:
        arrays = [np.asarray(x) for x in items]
        shapes = {x.shape for x in arrays}
        dtypes = {x.dtype for x in arrays}
        if len(shapes) > 1 or len(dtypes) > 1:
            what = (f"shapes {', '.join(str(s) for s in sorted(shapes))}" if len(shapes) > 1 else
                    f"dtypes {', '.join(sorted(d.name for d in dtypes))}")
            raise HybridArgumentError(
                f"argument {name} is a list of arrays of different {what}; a kernel takes a list of arrays as "
                "one array with one more dimension", span,
                "pass arrays of one shape and dtype, or pass them as separate arguments")
        return np.stack(arrays) if arrays else np.asarray(items)
    if len(items) == 0:
        return np.zeros(0, np.int64)  # an empty list (of indices or sizes, as shape functions pass)
    try:
        return np.asarray(items)
    except ValueError:
        raise HybridArgumentError(f"argument {name} is a nested list whose rows have different lengths", span,
                                  "pass rows of one length (a kernel takes a list as one array)") from None
