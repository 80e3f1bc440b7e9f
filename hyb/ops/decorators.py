"""The decorators MindSpore scripts put on hybrid kernels: ``ops.kernel`` and its older names
``ops.ms_kernel`` and ``ops.ms_hybrid``.

Each is :func:`hyb.hybrid`: the decorated function is a ``hyb.Kernel``, which runs compiled when
called on NumPy arrays (returning NumPy arrays) and which ``Custom`` takes with
``func_type="hybrid"``, ``"akg"`` or ``"pyfunc"``.  ``reg_info=`` binds operator information as
``custom_info_register`` does; ``compile_attrs=`` (akg's compiler switches) is kept on the kernel
as ``.compile_attrs`` and changes nothing: hyb's scheduler makes those decisions itself.
"""
from __future__ import annotations

from ..errors import HybridArgumentError
from ..runtime.kernel import Kernel, hybrid
from .reginfo import custom_info_register


def kernel(fn=None, reg_info=None, compile_attrs=None, **options):
    """``@ops.kernel``, ``@ops.kernel(reg_info=...)`` (MindSpore's spelling of ``@hyb.hybrid``);
    other keyword arguments are ``hyb.hybrid``'s options (``target``, ``fastmath``, ...)."""
    if compile_attrs is not None and not isinstance(compile_attrs, dict):
        raise HybridArgumentError(f"compile_attrs must be a dict, not {type(compile_attrs).__name__}", None,
                                  'e.g. compile_attrs={"enable_auto_fuse": False}')

    def wrap(f):
        infos = reg_info if reg_info is not None else getattr(f, "reg_info", None)
        k = f if isinstance(f, Kernel) else hybrid(f, **options)
        if infos is not None:
            custom_info_register(*(infos if isinstance(infos, (list, tuple)) else [infos]))(k)
        k.compile_attrs = dict(compile_attrs or {})
        return k

    if fn is None:
        return wrap
    if callable(fn):
        return wrap(fn)
    raise HybridArgumentError(f"@kernel decorates a function, not {type(fn).__name__}", None,
                              "write @kernel, or @kernel(reg_info=...) with keyword arguments")


ms_kernel = kernel
ms_hybrid = kernel
