"""What the checker knows of a call's arguments: an :class:`ArgSpec` per argument (its shape and
dtype, and the value the kernel is specialised on where it needs one), and :class:`NeedsValue`,
which asks the caller for such a value."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import HybridTypeError
from . import types


@dataclass(frozen=True)
class ArgSpec:
    """What the checker needs to know about one argument of a call."""

    shape: tuple
    dtype: str  # for a Python int or float scalar: the weak "int" / "float"
    scalar: bool = False
    # A scalar the kernel needs as a compile-time integer (a shape, a loop step): its value, which
    # the signature then includes (one compile per value).  None: the kernel compiles once per type.
    value: object = None

    def __str__(self):
        if self.scalar:
            name = {"int": "Python int", "float": "Python float"}.get(self.dtype, self.dtype)
            return name if self.value is None else f"{name} = {self.value}"
        array = f"{self.dtype}[{', '.join('?' if d is None else str(d) for d in self.shape)}]"
        return array if self.value is None else f"{array} = {self.value}"


class NeedsValue(HybridTypeError):
    """A scalar parameter used where a compile-time integer is needed.  ``hyb.Kernel`` answers it
    by specialising the kernel on that parameter's value; elsewhere it is the error it says."""

    def __init__(self, param: str, what: str, span, array: bool = False):
        self.param = param
        hint = (f"`{param}` is an array argument: pass a tuple or list of at most {MAX_VALUES} integers, which the "
                f"kernel is compiled for" if array else
                f"`{param}` is a scalar argument: call the kernel, which compiles it for each value of `{param}`")
        super().__init__(f"{what} must be an integer known at compile time", span,
                         hint + ", or use literals, constants and `x.shape[k]`")


# The most items of a 1-D integer array argument a kernel is compiled for the values of (a shape
# passed as a tuple: `output_tensor(shape, ...)`)
MAX_VALUES = 32


def arg_spec(value) -> ArgSpec:
    """The ArgSpec of a prepared argument: a NumPy array, or a Python/NumPy scalar."""
    if isinstance(value, np.ndarray):
        return ArgSpec(tuple(value.shape), value.dtype.name)
    if isinstance(value, (bool, np.bool_)):
        return ArgSpec((), "bool", True)
    if isinstance(value, np.generic):
        return ArgSpec((), value.dtype.name, True)
    if isinstance(value, int):
        return ArgSpec((), types.WEAK_INT, True)
    return ArgSpec((), types.WEAK_FLOAT, True)


def arg_specs(args, values_of=()) -> list:
    """ArgSpecs of prepared arguments (arrays and scalars); the scalars at the positions
    ``values_of`` carry their value (the kernel is specialised on it)."""
    specs = [arg_spec(a) for a in args]
    for k in values_of:
        if k < len(specs) and specs[k].scalar:
            v = args[k]
            v = v.item() if isinstance(v, np.generic) else v
            specs[k] = ArgSpec(specs[k].shape, specs[k].dtype, True, v)
        elif (k < len(specs) and len(specs[k].shape) == 1 and specs[k].shape[0] <= MAX_VALUES
              and types.is_int(specs[k].dtype)):  # a shape passed as a tuple or list
            specs[k] = ArgSpec(specs[k].shape, specs[k].dtype, False, tuple(int(x) for x in args[k]))
    return specs
