"""MindSpore's ``mindspore.ops.operations`` module path, for scripts that import from it.

``from hyb.ops import operations as P`` gives the built-in operator classes (``P.Add()``, ...)
that ``hyb.ops`` also exports; ``hyb.ops.operations._inner_ops`` holds the helpers MindSpore
keeps there.
"""
