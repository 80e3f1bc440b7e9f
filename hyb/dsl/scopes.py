"""What a name stands for while a kernel is checked: the symbol records of the checker's scopes,
the values of compile-time expressions (shapes, dtypes, tuples, grid indices) and the built-in names."""
from __future__ import annotations

from dataclasses import dataclass

from . import ast as syntax
from . import tir
from . import types


@dataclass
class ShapeVal:
    dims: tuple


@dataclass
class DTypeVal:
    name: str


@dataclass
class TupleVal:
    items: list


@dataclass
class TensorRef:
    """A tensor, or with ``prefix`` the sub-array that fixes its leading indices (``b[i]`` of a
    2-D ``b``: ``b[i][j]`` is ``b[i, j]``, ``len(b[i])`` and ``b[i].shape`` are its row's)."""

    tensor: tir.Tensor
    prefix: tuple = ()
    span: object = None  # where the prefix was written

    @property
    def ndim(self) -> int:
        return self.tensor.ndim - len(self.prefix)

    @property
    def shape(self) -> tuple:
        return self.tensor.shape[len(self.prefix):]


@dataclass
class GridVal:
    """The tuple index of a ``for idx in grid(shape)`` loop: one loop variable per dimension."""

    vars: list


@dataclass
class Sym:
    kind: str  # "tensor" | "scalar" | "loop" | "grid" | "const"
    name: str  # unique name (tensor or loop var)
    value: object = None  # for constants

LOOP_KINDS = ("range", "serial", "parallel", "vectorize", "unroll", "reduce", "const_range")
TENSOR_MAKERS = ("output_tensor", "allocate")
CAST_NAMES = types.ALL_DTYPES
BUILTIN_NAMES = LOOP_KINDS + TENSOR_MAKERS + CAST_NAMES + ("len", "grid", "bind", "max_num_threads", "likely")
# TVM's max_num_threads(): the threads of a CUDA block, on every target (a kernel written for the
# GPU's blocks then computes the same everywhere)
MAX_NUM_THREADS = 1024


def always_assigned(block: list) -> set:
    """The names a block assigns (``x = ...``) whichever way its `if`s go."""
    out = set()
    for st in block:
        if isinstance(st, syntax.Assign) and isinstance(st.target, syntax.Name):
            out.add(st.target.id)
        elif isinstance(st, syntax.If) and st.orelse:
            out |= always_assigned(st.body) & always_assigned(st.orelse)
    return out
