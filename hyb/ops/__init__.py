"""The operator layer of MindSpore's custom-operator documents, in hyb.

    import hyb.ops as ops
    op = ops.Custom(add, out_shape=lambda x, _: x, out_dtype=lambda x, _: x, func_type="akg")

``Custom`` (hybrid/akg, pyfunc and aot kinds), the operator information builder
``CustomRegOp`` with ``DataType`` and ``custom_info_register``, the decorators MindSpore names
``kernel``, ``ms_kernel`` and ``ms_hybrid`` (``hyb.hybrid`` under those names), and
``GradOperation`` (from ``hyb.autograd``, re-exported here under MindSpore's ``ops`` name).

The built-in operators that bprop functions and networks use around custom operators
(``builtin.py``), as classes (``ops.Add()(x, y)``, ``ops.MatMul(transpose_b=True)``,
``ops.ReduceSum(keep_dims=True)(x, 1)``) and as functions (``ops.add``, ``ops.matmul``,
``ops.sum``, ...); the classes are also in ``hyb.ops.operations``, where scripts that do
``from mindspore.ops import operations as P`` find them.
"""
from . import builtin
from .builder import CustomOpBuilder
from .builtin import *  # noqa: F401,F403 - the names of builtin.__all__
from .custom import AotKernelError, Custom
from .decorators import kernel, ms_hybrid, ms_kernel
from .reginfo import CustomRegOp, DataType, OpInfo, custom_info_register

__all__ = ["Custom", "CustomRegOp", "DataType", "OpInfo", "custom_info_register", "AotKernelError",
           "GradOperation", "CustomOpBuilder", "kernel", "ms_kernel", "ms_hybrid"] + builtin.__all__


def __getattr__(name):
    # GradOperation lives in hyb.autograd; import it on first use so that hyb.ops does not
    # depend on the tape at import time.
    if name == "GradOperation":
        from ..autograd import GradOperation
        return GradOperation
    raise AttributeError(f"module 'hyb.ops' has no attribute {name!r}")
