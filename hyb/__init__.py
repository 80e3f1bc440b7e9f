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
from .errors import (HybridArgumentError, HybridCompileError, HybridError, HybridIndexError,
                     HybridNameError, HybridSyntaxError, HybridTypeError, HybridUnsupportedError,
                     HybridWarning)
from .runtime.compiler import CompiledKernel
from .runtime.kernel import HybModule, Kernel, compile_source, hybrid, load

__version__ = "0.1.0"

__all__ = [
    "hybrid", "load", "compile_source", "Kernel", "CompiledKernel", "HybModule",
    "HybridError", "HybridSyntaxError", "HybridNameError", "HybridTypeError", "HybridIndexError",
    "HybridArgumentError", "HybridUnsupportedError", "HybridCompileError", "HybridWarning", "__version__",
]
