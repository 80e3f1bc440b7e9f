"""MindSpore's ``mindspore.ops.op_info_register`` module path, for scripts that import from it.

``DataType``, ``CustomRegOp`` and ``custom_info_register`` are ``hyb.ops``'s; ``op_info_register``
is ``custom_info_register`` under MindSpore's older name.  ``TBERegOp``, ``AiCPURegOp``,
``AkgAscendRegOp`` and ``AkgGpuRegOp`` describe kernels of MindSpore's Ascend and GPU back ends,
which hyb does not run: their builders take every method MindSpore's do and keep the calls, and
information built with them registers nothing (``op_info_register`` leaves the function as it is),
as a CPU build of MindSpore does with them.
"""
from __future__ import annotations

from .reginfo import CustomRegOp, DataType, custom_info_register

__all__ = ["DataType", "CustomRegOp", "custom_info_register", "op_info_register", "TBERegOp", "AiCPURegOp",
           "AkgAscendRegOp", "AkgGpuRegOp"]


class _DeviceRegOp:
    """The information builder of a back end hyb does not run: every method call is kept, in order
    (``calls``), and returns the builder, so that a chain of them reads as in MindSpore."""

    imply_type = ""

    def __init__(self, op_name: str = ""):
        self.op_name = op_name
        self.calls: list = []

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)

        def record(*args, **kwargs):
            self.calls.append((name, args, kwargs))
            return self

        return record

    def get_op_info(self) -> dict:
        return {"op_name": self.op_name, "imply_type": self.imply_type, "calls": list(self.calls)}

    def __repr__(self):
        return f"<{type(self).__name__} {self.op_name} (not run by hyb)>"


class TBERegOp(_DeviceRegOp):
    imply_type = "TBE"


class AiCPURegOp(_DeviceRegOp):
    imply_type = "AiCPU"


class AkgAscendRegOp(_DeviceRegOp):
    imply_type = "AKG"


class AkgGpuRegOp(_DeviceRegOp):
    imply_type = "AKG"


def op_info_register(*op_info):
    """MindSpore's decorator registering operator information: for ``CustomRegOp`` information
    it is ``custom_info_register``; information of a back end hyb does not run (TBE, AiCPU, an
    Ascend or GPU akg kernel, or its JSON text) registers nothing."""
    if op_info and all(isinstance(i, CustomRegOp) or (isinstance(i, dict) and i.get("imply_type") in (None, "Custom"))
                       for i in op_info):
        return custom_info_register(*op_info)

    def decorator(func):
        return func

    return decorator
