"""The calling convention of generated code, shared by the LLVM and CUDA back ends and the runtime.

A kernel's native function takes one pointer per non-scalar tensor, in :func:`buffer_order`
(inputs in parameter order, then outputs and temporaries in order of declaration); the LLVM
function is named :func:`function_name`.  A subscript checked at run time has a
:class:`CheckSite`, an ``assert`` checked at run time an :class:`AssertSite`; a failed check
returns the site's number (1-based, one numbering for both) so that the runtime can raise an
error at the user's line.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..dsl import tir


# Tensors the generated function keeps itself: scalar locals, and register blocks
# (hyb.schedule.promote) on the stack of the function that uses them.
LOCAL_KINDS = ("scalar", "register")


def buffer_order(k: tir.TypedKernel) -> list:
    """Names of the tensors passed as pointers, in argument order."""
    rest = [t.name for t in k.tensors.values() if t.kind not in LOCAL_KINDS and t.name not in k.inputs]
    return list(k.inputs) + rest


@dataclass(frozen=True)
class CheckSite:
    """A subscript bounds-checked at run time."""

    tensor: str
    shape: tuple  # ints; in a shape-generic kernel a size is the text of its expression (see size_text)
    span: object
    reason: str = "data"  # why it is checked when it runs (hyb.dsl.interp.check_reason)

    def at_sizes(self, sizes: dict) -> "CheckSite":
        """The site with the shape its tensor has at these run-time sizes."""
        if all(isinstance(d, int) for d in self.shape):
            return self
        return CheckSite(self.tensor, tuple(d if isinstance(d, int) else size_value(d, sizes) for d in self.shape),
                         self.span, self.reason)


def size_value(text: str, sizes: dict) -> int:
    """The value of a size expression's text (names ``hs_<input>_<axis>``, integers, ``+ - * // %``,
    ``max``, ``min``, ``ceil_div`` and integer casts, as :func:`hyb.dsl.printer.fmt` writes them)."""
    names = {"max": max, "min": min, "ceil_div": lambda a, b: -(-a // b) if b else 0,
             **{t: int for t in ("int", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")}}
    return int(eval(text, {"__builtins__": {}}, {**names, **sizes}))  # text hyb's own printer made


@dataclass(frozen=True)
class AssertSite:
    """A kernel's ``assert`` checked at run time: its message and place."""

    message: str
    span: object


@dataclass(frozen=True)
class PrintSite:
    """A ``print(...)``: its items, each a string or the dtype of a value the code passes (as 8
    bytes: an int64, a double for floats, the 16 bits zero-extended for bfloat16) to
    ``hyb_print(rt, site, values)``."""

    items: tuple
    span: object

    def values(self) -> list:
        return [x[1] for x in self.items if x[0] == "value"]


PRINT_FUNCTION = "hyb_print"  # void hyb_print(int64_t *rt, int64_t site, int64_t *values)


def function_name(k: tir.TypedKernel) -> str:
    return "hyb_" + k.name
