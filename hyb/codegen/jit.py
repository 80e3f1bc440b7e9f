"""Machine code from LLVM IR: the target machine, LLVM's optimisation pipeline, MCJIT and the
object code the disk cache keeps (:class:`JitFunction`)."""
from __future__ import annotations

import contextlib
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


class Scratch:
    """An LLVM context of one compile and the modules parsed into it (:func:`private_context`)."""

    def __init__(self):
        self.context = llvm.create_context()
        self.modules = []

    def parse(self, ir_text: str) -> llvm.ModuleRef:
        mod = llvm.parse_assembly(ir_text, context=self.context)
        self.modules.append(mod)
        return mod


@contextlib.contextmanager
def private_context():
    """A :class:`Scratch`: an LLVM context of its own for one compile, freed at the end with the
    modules parsed into it, those first, also when the compile fails (a context frees the modules
    it still holds, and their Python objects would then free them again).  LLVM keeps the
    constants, types and metadata of a module in its context, not in the module, so modules
    parsed into the process's global context would leave them there for good."""
    scratch = Scratch()
    try:
        yield scratch
    finally:
        for mod in scratch.modules:
            mod.close()
        scratch.context.close()


def optimize(ir_text: str, scratch: Scratch | None = None) -> llvm.ModuleRef:
    """Parse (into ``scratch``'s context, else the global one), verify and run the O3 pipeline
    (loop and SLP vectorisers on)."""
    mod = scratch.parse(ir_text) if scratch is not None else llvm.parse_assembly(ir_text)
    mod.verify()
    tm = target_machine()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = True
    pb = llvm.create_pass_builder(tm, pto)
    mpm = pb.getModulePassManager()
    try:
        mpm.run(mod, pb)
    finally:
        _dispose_pass_manager(mpm)
        pb.close()
        pto.close()
    return mod


def _dispose_pass_manager(mpm) -> None:
    """Free a module pass manager and the passes it holds (about 75 KB at O3).  llvmlite's
    ``ModulePassManager.close()`` does not: its ``_dispose`` is ``ObjectRef``'s, which does nothing
    (the class lists ``ObjectRef`` before the base that frees it), so every compile would keep one."""
    from llvmlite.binding import ffi
    dispose = getattr(ffi.lib, "LLVMPY_DisposeNewModulePassManger", None)
    if dispose is not None and type(mpm)._dispose is ffi.ObjectRef._dispose and not mpm.closed:
        dispose(mpm)
        mpm.detach()
    else:
        mpm.close()


def object_code(mod: llvm.ModuleRef) -> bytes:
    """The object file of an optimised module, as MCJIT would make it (a target machine of its
    own: the shared one is not used from two threads at once)."""
    return new_target_machine().emit_object(mod)


class JitFunction:
    """Machine code for one kernel, loaded from its object file and kept alive with its execution
    engine.

    The engine gets an empty module and, from its object cache, ``object_code``: it loads that
    object instead of generating code, so it holds the code and no LLVM IR (the optimised module
    is not kept: compiling from it and loading from the disk cache are the same load)."""

    def __init__(self, object_code: bytes, name: str):
        openmp_available()  # JIT code of parallel loops calls libgomp
        vecmath.load()  # math calls: libm under hyb's names, and libmvec
        if not object_code:
            raise HybridInternalError(f"no object code for {name}", "codegen")
        self.object_code = object_code
        self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), new_target_machine())
        self.engine.set_object_cache(None, self._lookup)
        self.engine.finalize_object()
        self.address = self.engine.get_function_address(name)
        if not self.address:
            raise HybridInternalError(f"function {name} not found in its object code", "codegen")

    def _lookup(self, module):
        return self.object_code


def assembly(ir_text: str) -> str:
    """The assembly of optimised IR text (parsed in a context of its own)."""
    with private_context() as scratch:
        return new_target_machine().emit_assembly(scratch.parse(ir_text))
