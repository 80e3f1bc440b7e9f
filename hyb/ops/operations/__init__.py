"""MindSpore's ``mindspore.ops.operations`` module path, for scripts that import from it.

``from hyb.ops import operations as P`` gives the built-in operator classes (``P.Add()``, ...)
that ``hyb.ops`` also exports, ``Custom`` (``P.Custom``) and ``GradOperation``;
``hyb.ops.operations._inner_ops`` holds the helpers MindSpore keeps there.
"""
from .. import builtin as _builtin
from ..custom import Custom

__all__ = ["Primitive", "Custom", "GradOperation"] + _builtin.CLASSES
globals().update({_name: getattr(_builtin, _name) for _name in ["Primitive"] + _builtin.CLASSES})


def __getattr__(name):
    # GradOperation lives in hyb.autograd, imported on first use as hyb.ops does.
    if name == "GradOperation":
        from ...autograd import GradOperation
        return GradOperation
    raise AttributeError(f"module 'hyb.ops.operations' has no attribute {name!r}")
