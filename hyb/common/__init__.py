"""MindSpore's ``mindspore.common`` module path: ``from hyb.common import dtype as mstype``,
``from hyb.common import Tensor, Parameter``.  ``hyb.common.dtype`` holds the names of
:mod:`hyb.dtype` (the same objects); ``hyb.common.initializer`` has ``Zero`` and ``One`` for
``Tensor(shape=..., init=...)``.
"""
from ..tensor import Parameter, ParameterTuple, Tensor
from . import dtype, initializer

__all__ = ["dtype", "initializer", "Tensor", "Parameter", "ParameterTuple"]
