"""MindSpore's ``mindspore.ops.operations._inner_ops`` module path: the inner operators scripts
import from there.

``ConvertToDynamic``: in MindSpore an identity whose output's shape the graph compiler treats as
unknown (dynamic), so that a network, or an operator's C++ InferShape, is exercised with dynamic
shapes.  hyb runs operators eagerly on concrete arrays, so it is the identity: a ``hyb.Tensor``
comes back as the same tensor (a gradient passes through unchanged); an array or a number comes
back as a new ``hyb.Tensor``.
"""
from __future__ import annotations

from ...errors import HybridTypeError
from ...tensor import Tensor
from ..builtin import Primitive

__all__ = ["ConvertToDynamic"]


class ConvertToDynamic(Primitive):
    """``ConvertToDynamic(is_dynamic_rank=False)(x)``: ``x`` itself (see the module docstring)."""

    def __init__(self, is_dynamic_rank=False):
        if not isinstance(is_dynamic_rank, bool):
            raise HybridTypeError(f"ConvertToDynamic: is_dynamic_rank must be a bool, got {is_dynamic_rank!r}")
        self.is_dynamic_rank = is_dynamic_rank
        self.name = "ConvertToDynamic"

    def __repr__(self):
        return f"ConvertToDynamic(is_dynamic_rank={self.is_dynamic_rank})"

    def __call__(self, x):
        if isinstance(x, Tensor):
            return x
        try:
            return Tensor(x)
        except (TypeError, ValueError) as e:
            raise HybridTypeError(f"ConvertToDynamic takes a tensor, got {type(x).__name__}: {e}") from None
