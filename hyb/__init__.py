"""hyb: a polyhedral compiler for hybrid tensor kernels.

    import hyb

    @hyb.hybrid
    def add(a, b):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            c[i] = a[i] + b[i]
        return c

    add(x, y)            # compiled through isl and LLVM for this signature
    add.emulate(x, y)    # the reference interpreter
"""
from .errors import (HybridArgumentError, HybridAssertionError, HybridCompileError, HybridDependencyError,
                     HybridError, HybridIndexError, HybridInternalError, HybridNameError, HybridSyntaxError,
                     HybridFloat64Warning, HybridTypeError, HybridUnsupportedError, HybridWarning)
from .runtime.kernel import HybModule, Kernel, compile_source, hybrid, load

from .version import __version__

__all__ = [
    "hybrid", "load", "compile_source", "Kernel", "CompiledKernel", "HybModule",
    "HybridError", "HybridSyntaxError", "HybridNameError", "HybridTypeError", "HybridIndexError",
    "HybridArgumentError", "HybridAssertionError", "HybridUnsupportedError", "HybridCompileError", "HybridInternalError", "HybridWarning",
    "HybridFloat64Warning", "HybridDependencyError",
    "__version__",
]

# MindSpore's eager layer: tensors, the tape's grad/value_and_grad, cells and the global context.
from . import context, dtype, nn
from .autograd import grad, value_and_grad
from .context import GRAPH_MODE, PYNATIVE_MODE, get_context, set_context, set_device
from .tensor import (Parameter, ParameterTuple, Tensor, bool_, float16, float32, float64, int8, int16, int32,
                     int64, uint8, uint16, uint32, uint64)

__all__ += [
    "Tensor", "Parameter", "ParameterTuple", "nn", "grad", "value_and_grad",
    "set_context", "get_context", "set_device", "context", "dtype", "GRAPH_MODE", "PYNATIVE_MODE",
    "float16", "float32", "float64", "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64", "bool_",
]
# hyb.bfloat16 (ml_dtypes.bfloat16's NumPy dtype) is made when first read, by __getattr__ below; it
# is not in __all__, so that `from hyb import *` works without ml_dtypes.

# Custom operators and their registration.
from . import ops

__all__ += ["ops"]

# Forward and backward written together (Function), and C++ operators built with CustomOpBuilder.
from .function import AutogradContext, Function
from .ops.builder import include_dir

__all__ += ["Function", "AutogradContext", "include_dir"]


# `import hyb` loads neither the compiler's libraries (islpy, llvmlite) nor the parser's (lark): the
# modules it imports load them where a kernel is parsed or compiled.  The names below whose modules
# need them at import are made when first read, by __getattr__ (the same objects as those modules').
_LAZY = {"CompiledKernel": ".runtime.compiler"}


def __getattr__(name):
    if name in _LAZY:
        import importlib
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value  # read once: later reads find it in the module
        return value
    if name == "bfloat16":
        from . import tensor
        return tensor.bfloat16
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
