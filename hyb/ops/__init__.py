"""The operator layer of MindSpore's custom-operator documents, in hyb.

    import hyb.ops as ops
    op = ops.Custom(add, out_shape=lambda x, _: x, out_dtype=lambda x, _: x, func_type="akg")

``Custom`` (hybrid/akg, pyfunc and aot kinds), the operator information builder
``CustomRegOp`` with ``DataType`` and ``custom_info_register``, the decorators MindSpore names
``kernel``, ``ms_kernel`` and ``ms_hybrid`` (``hyb.hybrid`` under those names), and
``GradOperation`` (from ``hyb.autograd``, re-exported here under MindSpore's ``ops`` name).
"""
from .builder import CustomOpBuilder
from .custom import AotKernelError, Custom
from .decorators import kernel, ms_hybrid, ms_kernel
from .reginfo import CustomRegOp, DataType, OpInfo, custom_info_register

__all__ = ["Custom", "CustomRegOp", "DataType", "OpInfo", "custom_info_register", "AotKernelError",
           "GradOperation", "CustomOpBuilder", "kernel", "ms_kernel", "ms_hybrid"]


def __getattr__(name):
    # GradOperation lives in hyb.autograd; import it on first use so that hyb.ops does not
    # depend on the tape at import time.
    if name == "GradOperation":
        from ..autograd import GradOperation
        return GradOperation
    raise AttributeError(f"module 'hyb.ops' has no attribute {name!r}")
