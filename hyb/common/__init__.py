"""MindSpore's ``mindspore.common`` module path: ``from hyb.common import dtype as mstype``,
``from hyb.common import Tensor, Parameter``.  ``hyb.common.dtype`` holds the names of
:mod:`hyb.dtype` (the same objects).
"""
from ..tensor import Parameter, ParameterTuple, Tensor
from . import dtype

__all__ = ["dtype", "Tensor", "Parameter", "ParameterTuple"]
