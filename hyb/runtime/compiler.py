"""The compiled kernel of one signature: the pipeline's records (:mod:`hyb.runtime.pipeline`)
and the native function they produced, called with NumPy arrays.  ``inspect(stage)`` reads
the records, so it shows exactly what was compiled.
"""
from __future__ import annotations

import ctypes
import zlib
from dataclasses import replace

import numpy as np

from ..codegen import abi, jit
from ..codegen import llvm as llvm_codegen
from ..dsl import deep, interp, stages
from ..dsl import tir
from ..dsl import types
from ..dsl.check import arg_spec
from ..dsl.printer import print_typed
from ..errors import HybridArgumentError, HybridInternalError
from ..schedule import contract, deps, extract, loops
from ..schedule.plan import Plan
from ..target import host_cpu
from . import aligned, busy, fastcall, pipeline, variants
from .arguments import check_fits, check_in_place, prepare_arrays, scalar_buffer  # noqa: F401 - the runtime's argument API
from .options import KernelOptions
from .pipeline import MiddleEnd, NativeCode
from .printing import printing
from .sites import site_error
from .timings import Clock, Timings, format_seconds

STAGES = stages.names("cpu")  # (hyb.dsl.stages names each, with what it shows)


class CompiledKernel:
    """Native code for one kernel and one signature (shapes and dtypes of the arguments).

    It holds the pipeline's records: the :class:`~hyb.runtime.pipeline.MiddleEnd` (the
    polyhedral stages) and the :class:`~hyb.runtime.pipeline.NativeCode` it runs.  Made by
    :meth:`build` (the whole pipeline) or :meth:`restore` (code from the disk cache; the
    middle-end records are then made by the same stage functions if ``inspect`` asks)."""

    # how long each stage of this signature's compile took, or its load from the disk cache
    # (inspect("timings")); the Kernel that compiles it adds its own stages (the check) in front
    timings = Timings()

    def __init__(self, typed: tir.TypedKernel, specs: list, options: KernelOptions, code: NativeCode,
                 middle: MiddleEnd | None = None, loaded=None, target=None, size_hint: dict | None = None,
                 timings: Timings | None = None):
        self.typed = typed
        if timings is not None:
            self.timings = timings
        self.specs = list(specs)
        self.options = options
        self.size_hint = size_hint  # shape-generic code: the sizes its register blocks were sized for
        self.name = typed.name
        self.target_machine = target or host_cpu(options.threads)
        self._middle = middle
        self.code = code
        self._stages: dict = {}
        self._asm = None
        self.check_sites = list(code.sites)
        self._prints = any(isinstance(s, abi.PrintSite) for s in self.check_sites)
        self._packed_ir = None  # the optimised IR, compressed, once the records are released
        self._jit = loaded or jit.JitFunction(code.object, abi.function_name(typed))
        # (the code's own list: temporaries the middle end held in scalars take no buffer)
        self.buffers = list(code.buffers)
        self._cfunc = ctypes.CFUNCTYPE(ctypes.c_int32, *([ctypes.c_void_p] * len(self.buffers)),
                                       ctypes.POINTER(ctypes.c_int64))(self._jit.address)
        self._written = typed.written
        self.threads = self.target_machine.threads
        # The argument plan, computed once: what each input is, what to allocate, where outputs are.
        self._kinds = [typed.tensors[n].kind for n in typed.inputs]
        self._in_place = any(n in self._written for n in typed.inputs)
        made = self.buffers[len(typed.inputs):]
        # (every element of an `unfilled` buffer is written before it is read: np.empty will do)
        shapes = {n: (shape, dtype) for n, shape, dtype in code.staged}
        shapes.update({n: (typed.tensors[n].shape, typed.tensors[n].dtype) for n in made
                       if n in typed.tensors and n not in shapes})  # (a stage may have reshaped a temporary)
        self._made = [(shapes[n][0], types.numpy_dtype(shapes[n][1]),
                       aligned.allocator(n not in code.unfilled, shapes[n][0], types.numpy_dtype(shapes[n][1])))
                      for n in made]
        # shape-generic code: sizes known when it runs (its made shapes are expressions of them)
        self.generic = bool(code.sizes)
        self._out_index = [typed.inputs.index(n) if n in typed.inputs else -(made.index(n) + 1)
                           for n in typed.outputs]

    @classmethod
    def build(cls, typed: tir.TypedKernel, specs: list, options: KernelOptions,
              size_hint: dict | None = None) -> CompiledKernel:
        """Run every stage for this signature (warning about what the kernel's analysis finds);
        ``size_hint``: shape-generic code's sizes to size register blocks for."""
        target = host_cpu(options.threads)
        middle = pipeline.middle_end(typed, options, target, size_hint)
        pipeline.emit_warnings(middle.warnings)
        code, loaded, generated = pipeline.generate_code(middle.code, options, target)
        clock = Clock()
        clock.include(middle.timings)
        clock.include(generated)
        checks = {}
        if middle.poly.params:  # shape-generic code: what the runtime tests for each new shape
            with clock.stage("shape checks"):
                checks = pipeline.shape_checks(middle, options, target)
        code = replace(code, warnings=middle.warnings,
                       unfilled=tuple(n for n in code.buffers if n in middle.written_first
                                      and middle.written_first[n] is None), **checks)
        return cls(typed, specs, options, code, middle, loaded, target, size_hint, clock.record())

    @classmethod
    def restore(cls, typed: tir.TypedKernel, specs: list, options: KernelOptions, code: NativeCode,
                size_hint: dict | None = None, found: Timings | None = None) -> CompiledKernel:
        """Load code the disk cache kept for this signature (its warnings are given again);
        ``found``: the time it took to find the entry, which the load's timings start with."""
        pipeline.emit_warnings(code.warnings)
        clock = Clock()
        clock.include(found or Timings())
        with clock.stage("load object code"):
            ck = cls(typed, specs, options, code, size_hint=size_hint)
        ck.timings = clock.record(loaded=True)
        return ck

    # ------------------------------------------------------------ the records
    @property
    def middle(self) -> MiddleEnd:
        """The polyhedral stages' records (made again by the same stage functions after a cache hit)."""
        if self._middle is None:
            self._middle = pipeline.middle_end(self.typed, self.options, self.target_machine, self.size_hint)
            variants.keep_records(self)
        return self._middle

    used = False  # called through the slow path since its kernel last looked (runtime.variants)

    def release(self) -> None:
        """Keep only what calling needs (:mod:`hyb.runtime.variants`): the middle end's records,
        the unoptimised IR and the texts ``inspect`` made are dropped (made again if asked for);
        the optimised IR is kept compressed."""
        if self.code.llvm_opt is not None:
            self._packed_ir = zlib.compress(self.code.llvm_opt.encode(), 1)
        self.code = replace(self.code, llvm_opt=None, llvm_ir=None)
        self._middle = None
        self._stages = {}
        self._asm = None

    @property
    def llvm_opt(self) -> str:
        """The optimised LLVM IR the native code was made from."""
        if self.code.llvm_opt is not None:
            return self.code.llvm_opt
        return zlib.decompress(self._packed_ir).decode()

    @property
    def poly(self) -> extract.PolyProgram:
        return self.middle.poly

    @property
    def deps(self) -> deps.Dependences:
        return self.middle.deps

    @property
    def cell_deps(self) -> deps.Dependences:
        """The dependences with each private scalar as the one cell the generated code stores it in."""
        return self.middle.cell_deps or deps.compute(self.poly, expanded=False)

    @property
    def plan(self) -> Plan:
        """The schedule the loops follow, with every decision taken on the way."""
        return self.middle.followed

    @property
    def nest(self) -> loops.LoopNest:
        return self.middle.nest

    @property
    def llvm_ir(self) -> str:
        if self.code.llvm_ir is not None:
            return self.code.llvm_ir
        return self._stage("llvm", lambda: llvm_codegen.generate_ir(
            self.middle.code, pipeline.llvm_options(self.options, self.target_machine)).ir)

    def _stage(self, name, make):
        if name not in self._stages:
            self._stages[name] = make()
        return self._stages[name]

    kernel = None  # the Kernel this was compiled for (set by it), for inspect("grad")
    shape_note = ""  # how the Kernel chose code for shapes (inspect("schedule") shows it)

    def grad_text(self, specs: list | None = None, typed: tir.TypedKernel | None = None) -> str:
        """The gradient kernel's source, headed by the tape it allocates for this signature (or
        for ``specs`` and their ``typed`` kernel: shape-generic code bound to one shape), each
        tape it keeps and each closed-form rule it applied."""
        typed = typed or self.typed
        if self.kernel is None:
            raise HybridArgumentError("inspect('grad') needs the kernel this was compiled from", None, None)
        args = [_scalar_like(s) if s.scalar else np.zeros(s.shape, dtype=types.numpy_dtype(s.dtype))
                for s in (specs or self.specs)]
        douts = [np.zeros(typed.tensors[n].shape, dtype=types.numpy_dtype(typed.tensors[n].dtype))
                 for n in typed.outputs]
        g = self.kernel.grad()
        derived, _ = g._pick(args + douts)
        tape = g.tape_bytes(*args, *douts)
        lines = [f"# tape: {tape} bytes for this signature"]
        for name, shape, dtype, why in derived.tapes:
            lines.append(f"#   {name}: {why}")
        lines += [f"# rule: {r}" for r in derived.rules]
        return "\n".join(lines) + "\n" + derived.source

    def timings_text(self) -> str:
        """How long each stage of this signature's compile took, with the total (or, for code
        loaded from the disk cache, the load)."""
        sig = f"`{self.name}`({', '.join(str(s) for s in self.specs)})"
        if not self.timings.loaded:
            return self.timings.describe(f"{sig}: compiled, stage by stage")
        text = self.timings.describe(f"{sig}: loaded from the disk cache (not compiled); the load:")
        if self._middle is not None:
            text += (f"(the middle end's records that inspect() reads were made again from the typed kernel "
                     f"in {format_seconds(self._middle.timings.total)}: not compile time)\n")
        return text

    @deep.method(lambda ck: deep.depth(ck.typed))  # (the stages it runs again recurse through it)
    def inspect(self, stage: str = "loops") -> str:
        """Text of one pipeline stage: ``"ast"``, ``"isl"``, ``"deps"``, ``"schedule"``, ``"loops"``,
        ``"llvm"``, ``"llvm-opt"``, ``"asm"``, ``"emulate"`` (the interpreter's Python), ``"grad"``
        (the gradient kernel and the bytes of tape it allocates for this signature),
        ``"timings"`` (how long each stage of the compile took) or ``"rewrites"`` (what each
        typed-kernel rewrite applied and refused, or why it did not run)."""
        if stage == "ast":
            return print_typed(self.typed)
        if stage == "isl":
            return extract.describe(self.poly)
        if stage == "deps":
            return self.deps.describe()
        if stage == "schedule":
            return self.plan.describe() + (self.shape_note + "\n" if self.shape_note else "")
        if stage == "loops":
            return loops.fmt_nest(self.nest, self._describe_stmt)
        if stage == "llvm":
            return self.llvm_ir
        if stage == "llvm-opt":
            return self.llvm_opt
        if stage == "asm":
            if self._asm is None:
                self._asm = jit.assembly(self.llvm_opt)
            return self._asm
        if stage == "emulate":
            return interp.emulate_source(self.typed)
        if stage == "grad":
            return self.grad_text()
        if stage == "timings":
            return self.timings_text()
        if stage == "rewrites":
            return self.middle.rewrites.describe()
        if stage in ("cuda", "ptx"):  # the same signature compiled for the GPU (needs no GPU)
            if self.kernel is None:
                raise HybridArgumentError(f"inspect({stage!r}) needs the kernel this was compiled from", None, None)
            return self._stage("cuda-kernel", lambda: self.kernel.compile_typed(self.typed, self.specs, "cuda")
                               ).inspect(stage)
        raise HybridArgumentError(f"unknown stage {stage!r}", None, "choose one of: " + ", ".join(STAGES))

    def _describe_stmt(self, name: str) -> str:
        st = self.nest.statements[name]
        span = st.span
        it = ", ".join(st.iters)
        src = span.source_line.strip() if span and span.source_line else ""
        if st.origin:  # a register block's statement (schedule.promote)
            role = {"load": "block <- memory", "store": "memory <- block", "acc": "in the block",
                    "pack": "panel <- memory", "pacc": "in the block, from the panel",
                    "rows": "rows' values <- memory", "hacc": "in the block, from the rows' values"}.get(
                name.rsplit(".", 1)[-1], "")
            src = f"{role}: {src}"
        held = contract.contracted(self.nest, name, self.typed)
        if held:  # temporaries schedule.contract keeps in scalars
            src += "  {scalars: " + ", ".join(f"`{n}`" for n in held) + "}"
        return f"[{it}] {src}  (line {span.line})" if span else f"[{it}]"

    def __repr__(self):
        sig = ", ".join(str(s) for s in self.specs)
        return f"<CompiledKernel {self.name}({sig})>"

    from .html import compiled_kernel_html as _repr_html_  # in a notebook: the stages as tabs

    # ------------------------------------------------------------ running
    def __call__(self, *args):
        return self.call_checked(args, self.specs)

    def call_checked(self, args, want: list, binding=None):
        """Run on ``args``, which must have the signature ``want`` (this kernel's, or for a
        shape-generic kernel the shape ``binding`` was made for)."""
        arrays = prepare_arrays(self.typed, args)
        specs = [arg_spec(a) for a in arrays]
        if specs != want:
            got = ", ".join(str(s) for s in specs)
            want = ", ".join(str(s) for s in want)
            raise HybridArgumentError(f"kernel `{self.name}` was compiled for ({want}) but called with ({got})",
                                      self.typed.span, "call the Kernel itself: it compiles once per signature")
        return self.run(arrays, binding)

    def run(self, arrays: list, binding=None):
        """Run on prepared arguments of this kernel's signature (a shape-generic kernel: with the
        :class:`~hyb.runtime.generic.Binding` of their shapes)."""
        k = self.typed
        written = self._written
        if k.fits:
            check_fits(k, arrays)
        if self._in_place:
            check_in_place(k, arrays, written)
        ptrs = []
        copy_back = []
        for name, kind, a in zip(k.inputs, self._kinds, arrays):
            if kind == "param":
                a = scalar_buffer(k.tensors[name], a)
                self._keep = a
            elif not (a.flags.c_contiguous and a.flags.aligned and a.dtype.isnative):
                work = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("="))
                if name in written:
                    copy_back.append((a, work))
                a = work
            ptrs.append(a)
        if self._in_place:
            # An array written in place must not be seen through another argument (noalias).
            for i, w in enumerate(k.inputs):
                if w in written:
                    for j, n in enumerate(k.inputs):
                        if j != i and self._kinds[j] != "param" and np.shares_memory(ptrs[j], ptrs[i]):
                            ptrs[j] = ptrs[j].copy()
        made_specs = self._made if binding is None else [
            (shape, dtype, allocate) for shape, (_, dtype, _), allocate
            in zip(binding.made_shapes, self._made, binding.allocators)]
        try:
            made = [allocate(shape, dtype=dtype) for shape, dtype, allocate in made_specs]
        except (MemoryError, ValueError) as e:
            raise HybridArgumentError(f"kernel `{self.name}`: cannot allocate its outputs and temporaries "
                                      f"({', '.join(f'{d}{list(sh)}' for sh, d, _ in made_specs)}): {e}", None,
                                      "use smaller shapes") from None
        if binding is None:
            if self.generic:
                raise HybridInternalError("shape-generic code run without the sizes of a shape", "runtime")
            block, sites = abi.runtime_block(busy.threads_now(self.threads)), self.check_sites
        else:
            block, sites = abi.runtime_block(busy.threads_now(binding.threads), binding.sizes), binding.sites
        err = (ctypes.c_int64 * len(block))(*block)
        addresses = [b.__array_interface__["data"][0] for b in ptrs] + [b.__array_interface__["data"][0] for b in made]
        if self._prints:  # its print sites are found through the runtime block while it runs
            with printing(err, sites):
                code = self._cfunc(*addresses, err)
        else:
            code = self._cfunc(*addresses, err)
        busy.ran(block[abi.RT_THREADS])
        if code:
            raise site_error(self.name, sites[code - 1], int(err[abi.RT_INDEX]), int(err[abi.RT_AXIS]))
        for orig, work in copy_back:
            orig[...] = work
        outs = [arrays[i] if i >= 0 else made[-i - 1] for i in self._out_index]
        return None if not outs else outs[0] if len(outs) == 1 else tuple(outs)



    def call_plan(self, binding=None) -> fastcall.CallPlan:
        """What a warm call does, for the dispatcher of :mod:`hyb.runtime.fastcall`: the native
        function, each argument's kind and dtype, the buffers to allocate, the runtime block, the
        outputs; ``run`` is the Python path it falls back on.  With the ``binding`` of one shape
        (a shape-generic kernel): that shape's made buffers, threads, sizes and check sites."""
        if binding is None and self.__dict__.get("_call_plan") is not None:
            return self._call_plan
        k = self.typed
        inputs = tuple(fastcall.Slot(kind == "param", types.numpy_dtype(k.tensors[n].dtype), n in self._written)
                       for n, kind in zip(k.inputs, self._kinds))
        if binding is None:
            shapes, allocators = [shape for shape, _, _ in self._made], [a for _, _, a in self._made]
            block, sites, run = abi.runtime_block(self.threads), self.check_sites, self.run
        else:
            shapes, allocators = binding.made_shapes, binding.allocators
            block, sites = abi.runtime_block(binding.threads, binding.sizes), binding.sites

            def run(arrays):
                return self.run(arrays, binding)

        name = self.name

        def failed(code, index, axis):
            raise site_error(name, sites[code - 1], int(index), int(axis))

        plan = fastcall.CallPlan(
            address=self._jit.address, inputs=inputs,
            made=tuple(fastcall.Made(tuple(shape), dtype, allocate)
                       for shape, (_, dtype, _), allocate in zip(shapes, self._made, allocators)),
            block=block, outputs=tuple(self._out_index), failed=failed, run=run,
            # print sites are found through the runtime block, which the Python path registers;
            # shape-generic code needs the sizes of a shape
            python_only=self._prints or (binding is None and getattr(self, "generic", False))
            or bool(self.typed.fits))  # (Python integers to check against their dtype, each call)
        if binding is None:
            self._call_plan = plan
        return plan


def _scalar_like(spec):
    """A scalar argument of the kind ``spec`` describes: a Python number for a Python int or float
    (which the gradient, as the kernel, may need as a compile-time value: a shape), else a NumPy
    scalar of its dtype."""
    value = spec.value or 0
    if spec.dtype == "int":
        return int(value)
    if spec.dtype == "float":
        return float(value)
    return types.numpy_dtype(spec.dtype).type(value)
