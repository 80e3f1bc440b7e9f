"""The calling convention of generated code, shared by the LLVM and CUDA back ends and the runtime.

A kernel's native function takes one pointer per non-scalar tensor, in :func:`buffer_order`
(inputs in parameter order, then outputs and temporaries in order of declaration), and last
``rt``, the runtime block (below); the LLVM function is named :func:`function_name`.  A
subscript checked at run time has a :class:`CheckSite`, an ``assert`` checked at run time an
:class:`AssertSite`; a failed check returns the site's number (1-based, one numbering for both)
so that the runtime can raise an error at the user's line.

The runtime block is an array of int64 that the caller fills (:func:`runtime_block`) and the
code reads and writes:

* ``rt[RT_INDEX]``, ``rt[RT_AXIS]``: written by a failed subscript check, the offending index
  and its axis, for the error message;
* ``rt[RT_CODE]``: the failed site's number where the failing code cannot return it (a thread of
  an outlined parallel loop, a CUDA kernel), 0 while nothing failed;
* ``rt[RT_THREADS]``: the number of threads parallel loops run on;
* ``rt[RT_SIZES:]``: a shape-generic kernel's run-time sizes, in the order of
  :func:`hyb.dsl.tir.size_symbols` (none for code compiled for one shape).

:func:`block_length` is its length.  (``hyb/runtime/_fastcall.c`` and the CUDA prelude spell
these slots as numbers.)
"""
from __future__ import annotations

from dataclasses import dataclass

from ..dsl import sizes as size_expr
from ..dsl import tir


# The slots of the runtime block (see the module's docstring).
RT_INDEX = 0
RT_AXIS = 1
RT_CODE = 2
RT_THREADS = 3
RT_SIZES = 4


def block_length(n_sizes: int = 0) -> int:
    """The length of the runtime block of code that reads ``n_sizes`` run-time sizes."""
    return RT_SIZES + n_sizes


def runtime_block(threads, sizes: tuple = ()) -> tuple:
    """The runtime block's contents before a call: nothing failed, ``threads`` and the sizes."""
    block = [0] * RT_SIZES
    block[RT_THREADS] = threads
    return (*block, *sizes)


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
    shape: tuple  # ints; in a shape-generic kernel a size is the text of its expression (hyb.dsl.sizes.text)
    span: object
    reason: str = "data"  # why it is checked when it runs (hyb.dsl.interp.check_reason)

    def at_sizes(self, sizes: dict) -> "CheckSite":
        """The site with the shape its tensor has at these run-time sizes."""
        if all(isinstance(d, int) for d in self.shape):
            return self
        return CheckSite(self.tensor, tuple(size_expr.value(d, sizes) for d in self.shape), self.span, self.reason)


@dataclass(frozen=True)
class AssertSite:
    """A kernel's ``assert`` checked at run time: its message and place."""

    message: str
    span: object


@dataclass(frozen=True)
class PrintSite:
    """A ``print(...)``: its items, each ``("text", the text with the separator before it, "", "",
    "")`` or ``("value", the dtype of a value the code passes, the separator before it, an f-string
    field's conversion, its format spec)``; the values go as 8 bytes (an int64, a double for floats,
    the 16 bits zero-extended for bfloat16) to ``hyb_print(rt, site, values)``."""

    items: tuple
    span: object

    def values(self) -> list:
        return [x[1] for x in self.items if x[0] == "value"]


PRINT_FUNCTION = "hyb_print"  # void hyb_print(int64_t *rt, int64_t site, int64_t *values)


def function_name(k: tir.TypedKernel) -> str:
    return "hyb_" + k.name
