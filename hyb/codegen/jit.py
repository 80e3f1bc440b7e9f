"""Machine code from LLVM IR: the target machine, LLVM's optimisation pipeline, MCJIT and the
object code the disk cache keeps (:class:`JitFunction`)."""
from __future__ import annotations

import functools

import llvmlite.binding as llvm

from ..errors import HybridInternalError
from . import vecmath


@functools.lru_cache(maxsize=None)
def openmp_available() -> bool:
    """Load libgomp into the process so that JIT code can call GOMP_parallel."""
    import ctypes.util
    name = ctypes.util.find_library("gomp")
    if not name:
        return False
    try:
        llvm.load_library_permanently(name)
    except RuntimeError:
        return False
    return True


@functools.lru_cache(maxsize=None)
def target_machine():
    return new_target_machine()


@functools.lru_cache(maxsize=None)
def ordered_reductions() -> None:
    """Let LLVM's loop vectoriser keep a floating-point reduction it may not reassociate as an
    in-order reduction of each vector (the additions in program order, bit for bit the scalar
    loop's), so that the rest of the loop (a softmax's `exp`) still runs on vectors.  The option is
    LLVM's and global to the process; it changes no result of any code compiled in it."""
    llvm.set_option("hyb", "-force-ordered-reductions")


def new_target_machine():
    """A host target machine of one's own (an MCJIT engine takes ownership of the one it gets)."""
    ordered_reductions()
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                        features=llvm.get_host_cpu_features().flatten(),
                                        opt=3, reloc="default", codemodel="jitdefault")


def optimize(ir_text: str) -> llvm.ModuleRef:
    """Parse, verify and run the O3 pipeline (loop and SLP vectorisers on)."""
    mod = llvm.parse_assembly(ir_text)
    mod.verify()
    tm = target_machine()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod


class JitFunction:
    """Machine code for one kernel, kept alive with its execution engine.

    ``object_code`` is the object file MCJIT produced; :meth:`from_object` builds the same
    function from it (the disk cache) without generating code again."""

    def __init__(self, mod: llvm.ModuleRef, name: str, object_code: bytes | None = None):
        openmp_available()  # JIT code of parallel loops calls libgomp
        vecmath.load()  # math calls: libm under hyb's names, and libmvec
        self.object_code = object_code
        self.engine = llvm.create_mcjit_compiler(mod, new_target_machine())
        self.engine.set_object_cache(self._compiled, self._lookup)
        self.engine.finalize_object()
        self.address = self.engine.get_function_address(name)
        if not self.address:
            raise HybridInternalError(f"function {name} not found after JIT compilation", "codegen")

    def _compiled(self, module, buffer: bytes):
        self.object_code = bytes(buffer)

    def _lookup(self, module):
        return self.object_code

    @classmethod
    def from_object(cls, ir_text: str, object_code: bytes, name: str) -> "JitFunction":
        return cls(llvm.parse_assembly(ir_text), name, object_code)


def assembly(mod: llvm.ModuleRef) -> str:
    return target_machine().emit_assembly(mod)
