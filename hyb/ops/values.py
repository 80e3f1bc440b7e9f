"""The values of a Custom operator's call: NumPy views of the arguments, declared and real
output shapes and dtypes, and the checks of both against the operator information."""
from __future__ import annotations

import inspect

import numpy as np

from ..dsl import types
from ..errors import HybridArgumentError, HybridTypeError, HybridUnsupportedError
from ..tensor import Tensor


def is_array_like(a) -> bool:
    return isinstance(a, np.ndarray) or hasattr(a, "asnumpy") or isinstance(a, (list, tuple))


def to_numpy(a, pos):
    """A call argument as NumPy: an array, or a scalar kept as is (kernels take scalars)."""
    if hasattr(a, "asnumpy"):
        return np.asarray(a.asnumpy())
    if isinstance(a, np.ndarray) or isinstance(a, (bool, int, float, np.generic)):
        return a
    if isinstance(a, (list, tuple)):
        return np.asarray(a)
    raise HybridTypeError(f"argument {pos} of a Custom op is a {type(a).__name__}", None,
                          "pass hyb.Tensor values, NumPy arrays or numbers")


def wrap(a) -> Tensor:
    """A Tensor over a NumPy array (sharing it: the arrays wrapped here are new)."""
    return Tensor.from_numpy(a)


def shape_of(v) -> tuple:
    return tuple(np.shape(v)) if not isinstance(v, str) else ()


def dtype_of(v):
    if isinstance(v, str):
        return str
    if isinstance(v, (np.ndarray, np.generic)):
        return v.dtype
    return np.dtype(type(v)) if isinstance(v, (bool, int, float)) else np.asarray(v).dtype


def evaluate(op, what, spec, values):
    if spec is None or not callable(spec) or isinstance(spec, (type, np.dtype)):
        return spec
    try:
        inspect.signature(spec).bind(*values)
    except TypeError:
        raise HybridArgumentError(
            f"Custom op `{op.name}`: {what} cannot be called with the {len(values)} arguments of the call", None,
            f"{what} receives one {'shape' if what == 'out_shape' else 'dtype'} per argument of the call") from None
    except ValueError:  # no signature (a builtin): just call it
        pass
    return spec(*values)


def is_shape(s) -> bool:
    return isinstance(s, (tuple, list)) and all(isinstance(d, (int, np.integer)) and not isinstance(d, bool)
                                                for d in s)


def is_shape_list(s) -> bool:
    """Whether ``s`` is a tuple or list of shapes (of at least one), not one shape."""
    return isinstance(s, (tuple, list)) and bool(s) and all(is_shape(x) for x in s)


def as_shapes(op, s) -> list:
    if isinstance(s, (int, np.integer)) and not isinstance(s, bool):
        return [(int(s),)]
    if is_shape(s):
        return [tuple(int(d) for d in s)]
    if is_shape_list(s):
        return [tuple(int(d) for d in x) for x in s]
    raise HybridArgumentError(f"Custom op `{op.name}`: out_shape gave {s!r}, which is not a shape or a tuple of "
                              "shapes", None, "a shape is a tuple of ints, e.g. (2, 3)")


def as_dtypes(op, d) -> list:
    items = list(d) if isinstance(d, (tuple, list)) else [d]
    out = []
    for x in items:
        try:
            out.append(types.bfloat16() if isinstance(x, str) and x == "bfloat16" else np.dtype(x))
        except TypeError:
            raise HybridArgumentError(f"Custom op `{op.name}`: out_dtype gave {x!r}, which is not a dtype", None,
                                      "use hyb.float32, np.float32 or \"float32\"") from None
    return out


def compare_specs(op, declared, real, returned=False):
    """Declared ``(shape, dtype)`` of each output against the implementation's real ones."""
    made = "returned" if returned else "makes"
    if len(declared) != len(real):
        raise HybridTypeError(f"Custom op `{op.name}` declares {len(declared)} outputs but `{op._impl.name}` "
                              f"{made} {len(real)}", None, "give one out_shape and out_dtype per output")
    for i, ((dshape, ddtype), (rshape, rdtype)) in enumerate(zip(declared, real)):
        if dshape is not None and tuple(dshape) != tuple(rshape):
            raise HybridTypeError(f"Custom op `{op.name}`: out_shape declares {tuple(dshape)} for output {i} but "
                                  f"`{op._impl.name}` {made} shape {tuple(rshape)}", None,
                                  "fix out_shape, or omit it for a hybrid kernel (hyb infers it)")
        if ddtype is not None and np.dtype(ddtype) != np.dtype(rdtype):
            raise HybridTypeError(f"Custom op `{op.name}`: out_dtype declares {np.dtype(ddtype)} for output {i} but "
                                  f"`{op._impl.name}` {made} {np.dtype(rdtype)}", None,
                                  "fix out_dtype, or omit it for a hybrid kernel (hyb infers it)")


def fits_dtype(dtype_name: str, value) -> bool:
    """Whether a call argument fits a row's dtype (``""`` fits anything; a Python number fits
    any dtype of its kind, as NumPy's weak scalars do)."""
    if not dtype_name or value is None:
        return True
    if isinstance(value, tuple):  # a dynamic input: each of its tensors
        return all(fits_dtype(dtype_name, v) for v in value)
    if isinstance(value, (np.ndarray, np.generic)):
        return value.dtype.name == dtype_name
    if isinstance(value, bool):
        return dtype_name == "bool"
    if isinstance(value, int):
        return types.is_int(dtype_name)
    if isinstance(value, float):
        return types.is_float(dtype_name)
    return False


def describe_value(value) -> str:
    if isinstance(value, tuple):
        return "(" + ", ".join(describe_value(v) for v in value) + ")"
    if isinstance(value, (np.ndarray, np.generic)):
        return value.dtype.name
    return type(value).__name__


def matching_rows(op, info, arrays, target):
    """The rows of ``info`` the inputs' dtypes fit (None without rows); an error when none do."""
    if info is None or not info["dtype_format"]:
        return None
    rows = [r for r in info.rows() if all(fits_dtype(d, a) for d, a in zip(r, arrays))]
    if not rows:
        got = ", ".join(describe_value(a) for a in arrays)
        raise HybridTypeError(
            f"Custom op `{op.name}` does not support inputs of dtype ({got}) on {target}; "
            f"its operator information supports (inputs) -> (outputs):\n{info.describe_rows()}", None,
            "cast the inputs, or add a dtype_format row to the CustomRegOp")
    return rows


def check_output_rows(op, info, rows, outs):
    n_in = len(info["inputs"])
    if len(outs) != len(info["outputs"]):
        raise HybridTypeError(f"Custom op `{op.name}`: its operator information declares {len(info['outputs'])} "
                              f"outputs but `{op._impl.name}` gave {len(outs)}", None, None)
    if rows is not None and not any(all(not d or d == o.dtype.name for d, o in zip(r[n_in:], outs)) for r in rows):
        got = ", ".join(o.dtype.name for o in outs)
        raise HybridTypeError(
            f"Custom op `{op.name}` gives outputs of dtype ({got}), which no row of its operator information "
            f"for these inputs allows; it supports (inputs) -> (outputs):\n{info.describe_rows()}", None,
            "fix out_dtype or the dtype_format rows")


def dout_like(d, out):
    """An output's incoming gradient as an array of the output's shape and dtype (zeros for None)."""
    if d is None:
        return np.zeros(out.shape, out.dtype)
    d = np.asarray(d.asnumpy() if hasattr(d, "asnumpy") else d, dtype=out.dtype)
    return np.array(np.broadcast_to(d, out.shape))


def refused(error: HybridUnsupportedError) -> HybridUnsupportedError:
    """Marks an error that refuses a kind of implementation hyb does not run (an Ascend-only
    kind, TVM's IR builder): ``Custom`` makes the operator, as MindSpore does, and raises the
    error at its first call."""
    error.refused_kind = True
    return error


def no_gradient(op):
    return HybridUnsupportedError(
        f'Custom op `{op.name}` (func_type="{op.func_type}") has no bprop, and hyb derives gradients only for '
        "hybrid kernels", None, "pass bprop=... to Custom: bprop(*inputs, out, dout) returns (dx, ...)")
