"""MindSpore's ``mindspore.ops.operations`` module path, for scripts that import from it.

``from hyb.ops import operations as P`` gives the built-in operator classes (``P.Add()``, ...)
that ``hyb.ops`` also exports; ``hyb.ops.operations._inner_ops`` holds the helpers MindSpore
keeps there.
"""
from .. import builtin as _builtin

__all__ = ["Primitive"] + _builtin.CLASSES
globals().update({_name: getattr(_builtin, _name) for _name in __all__})
